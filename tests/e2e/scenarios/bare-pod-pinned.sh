# shellcheck shell=bash
# title: bare Pod pinned
# order: 20
# kube: 1.20 1.32
# proves: A bare Pod with the tag-only `team/app:2.0` is stored pinned to the exact index digest.

scenario_bare_pod_pinned() {
  local ns=e2e-b
  e2e_ns "$ns"
  klog -n "$ns" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: bare
spec:
  containers:
    - name: app
      image: $(image app 2.0)
EOF
  expect_eq "stored pod containers[0].image" "$(jp "$ns" pod bare '{.spec.containers[0].image}')" "$(pinned app 2.0)"
}
