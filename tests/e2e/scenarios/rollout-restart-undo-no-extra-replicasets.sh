# shellcheck shell=bash
# title: rollout restart and undo of a pinned Deployment: no more ReplicaSets than without pinhook
# order: 150
# kube: 1.20 1.32
# proves: A pinned Deployment (1 replica), then `kubectl rollout restart` and `kubectl rollout
#   undo`, each in it and its twin no webhook sees: after each, both rollouts settle, the
#   ReplicaSets stay at the twin's number for 3 s and equal it, every ReplicaSet's template is
#   pinned and the current ReplicaSet's Pod pinned; the template after the undo is pinned.

scenario_rollout_restart_undo_no_extra_replicasets() {
  local ns=e2e-o ref=e2e-o-ref rc=0 step rs n
  e2e_ns "$ns"
  e2e_ns "$ref" pinhook.dev/ignore=true
  app_deployment web 1 "$(image app 1.0)" >"$RUN/o-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/o-deployment.yaml"
  settle "$ns" "$ref" web || rc=1
  expect_eq "stored template image" "$(template_images "$ns" deployment web)" "$(pinned app 1.0)" || rc=1
  for step in "rollout restart" "rollout undo"; do
    # shellcheck disable=SC2086 # "rollout restart" -> rollout restart
    both "$ns" "$ref" $step deploy/web
    settle "$ns" "$ref" web || rc=1
    n=$(count "$ref" rs)
    watch_rs "$ns" "$n" 3 || rc=1
    expect_eq "ReplicaSets after $step: $ns = $ref (no webhook, $n)" "$(count "$ns" rs)" "$n" || rc=1
    expect_eq "template images of all ReplicaSets after $step (count image)" \
      "$(images "$ns" rs '.spec.template.spec.containers[*].image')" "$n $(pinned app 1.0)" || rc=1
    rs=$(current_rs "$ns" web)
    expect_eq "images of the Pods of the current ReplicaSet $rs after $step" \
      "$(pod_images "$ns" "$(rs_pods_selector "$ns" "$rs")")" "1 $(pinned app 1.0)" || rc=1
    log_counts "$ns" "$ref" rs pods
  done
  expect_eq "template image after the undo" "$(template_images "$ns" deployment web)" "$(pinned app 1.0)" || rc=1
  return "$rc"
}
