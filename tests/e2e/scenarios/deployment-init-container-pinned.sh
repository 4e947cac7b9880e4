# shellcheck shell=bash
# title: Deployment: initContainer and container pinned in the stored template
# order: 10
# kube: 1.20 1.32
# proves: A Deployment (apps/v1) with an initContainer and two containers, all tag-only: the three
#   images are stored pinned (`127.0.0.1:PORT/team/<repo>:<tag>@sha256:<index digest>`) in its
#   `spec.template.spec`.

scenario_deployment_init_container_pinned() {
  local ns=e2e-a
  e2e_ns "$ns"
  deployment_yaml web | klog -n "$ns" create -f -
  local rc=0
  expect_eq "stored initContainers[0].image" "$(jp "$ns" deployment web '{.spec.template.spec.initContainers[0].image}')" "$(pinned init 1.0)" || rc=1
  expect_eq "stored containers[0].image" "$(jp "$ns" deployment web '{.spec.template.spec.containers[0].image}')" "$(pinned app 1.0)" || rc=1
  expect_eq "stored containers[1].image" "$(jp "$ns" deployment web '{.spec.template.spec.containers[1].image}')" "$(pinned sidecar 1.0)" || rc=1
  return "$rc"
}
