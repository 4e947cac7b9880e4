# shellcheck shell=bash
# title: StatefulSet pinned
# order: 40
# kube: 1.20 1.32
# proves: A StatefulSet (1 replica) is stored with its template's image pinned.

scenario_statefulset_pinned() {
  local ns=e2e-d
  e2e_ns "$ns"
  statefulset_yaml 1 | klog -n "$ns" create -f -
  expect_eq "stored statefulset containers[0].image" "$(jp "$ns" statefulset db '{.spec.template.spec.containers[0].image}')" "$(pinned db 1.0)"
}
