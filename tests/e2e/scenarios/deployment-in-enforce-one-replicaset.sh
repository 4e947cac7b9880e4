# shellcheck shell=bash
# title: Deployment created in enforce: template pinned, 1 ReplicaSet, all Pods on one digest
# order: 140
# kube: 1.20 1.32
# proves: A Deployment (3 replicas, tag-only) created in enforce and in a twin no webhook sees: both
#   rollouts settle; the ReplicaSets stay at 1 for 3 s (1 in the twin too); the template and its
#   ReplicaSet's template are pinned; the 3 Pods all carry the same pinned image.

scenario_deployment_in_enforce_one_replicaset() {
  local ns=e2e-n ref=e2e-n-ref rc=0 rs
  e2e_ns "$ns"
  e2e_ns "$ref" pinhook.dev/ignore=true
  app_deployment web 3 "$(image app 1.0)" >"$RUN/n-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/n-deployment.yaml"
  settle "$ns" "$ref" web || rc=1
  watch_rs "$ns" 1 3 || rc=1
  expect_eq "stored template image" "$(template_images "$ns" deployment web)" "$(pinned app 1.0)" || rc=1
  expect_eq "ReplicaSets in $ns" "$(count "$ns" rs)" 1 || rc=1
  expect_eq "ReplicaSets in $ref (no webhook)" "$(count "$ref" rs)" 1 || rc=1
  rs=$(current_rs "$ns" web)
  expect_eq "template image of ReplicaSet $rs" "$(template_images "$ns" rs "$rs")" "$(pinned app 1.0)" || rc=1
  expect_eq "images of the Deployment's Pods (count image)" "$(pod_images "$ns" app=web)" "3 $(pinned app 1.0)" || rc=1
  log_counts "$ns" "$ref" rs pods
  return "$rc"
}
