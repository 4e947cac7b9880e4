# shellcheck shell=bash
# title: on a real node, helm uninstall of the chart leaves no webhook configuration and Pods are admitted unpinned again
# order: 960
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone), in an enforce namespace the tier's own pinhook skips: a dry-run Pod comes back
#   pinned by the chart's pinhook; `helm uninstall` succeeds, no Mutating- or
#   ValidatingWebhookConfiguration named after the release is left, nor a Deployment,
#   ReplicaSet, Service or ConfigMap of it (≤ 60 s: the garbage collector deletes the
#   ReplicaSets), and every Pod of it is being deleted;
#   then a Pod with the same tag-only image is created and stored exactly as written (no digest),
#   and runs on the node. The tier's own webhooks are put back as they were.
scenario_node_chart_uninstall_admits_again() {
  local ns=e2e-node-chart-after rc=0 reg img
  chart_node_ensure || return 1
  reg=$(chart_node_registry)
  img="$reg/team/node-web:1.0"
  e2e_ns "$ns" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1
  expect_eq "a dry-run Pod's image before the uninstall" "$(dry_run_image "$ns" "$img")" "$img@$(digest node-web 1.0)" || rc=1
  if helm3 uninstall "$CHART_REL" -n "$CHART_NS" --wait --timeout 90s >"$CHART_DIR_RUN/uninstall.log" 2>&1; then
    ok "helm3 uninstall $CHART_REL"
  else
    bad "helm3 uninstall failed: $(tail -n 5 "$CHART_DIR_RUN/uninstall.log" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "webhook configurations named $CHART_FULL" \
    "$(K get mutatingwebhookconfiguration,validatingwebhookconfiguration -o name | grep -c "/$CHART_FULL\$" || true)" 0 || rc=1
  # (helm deletes the Deployments; the garbage collector deletes their ReplicaSets in the
  # background, which takes longer after the node-availability-* scenarios' rollouts left several)
  wait_until 60 "no Deployment, ReplicaSet, Service or ConfigMap of the release" node_chart_release_objects_gone || true
  expect_eq "Deployments, ReplicaSets, Services, ConfigMaps of the release left in $CHART_NS" \
    "$(node_chart_release_objects | grep -c . || true)" 0 ||
    { node_chart_release_objects | while IFS= read -r l; do log "  left: $l"; done; rc=1; }
  # (a deleted Pod is removed by the kubelet up to about a minute after its container stopped)
  wait_until 60 "no live Pod of the release" chart_node_no_live_pods || true
  expect_eq "Pods of the release not being deleted" "$(chart_node_no_live_pods_count)" 0 || rc=1
  klog -n "$ns" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: after
  labels: {app: after}
spec:
$(node_tolerations 2)
  terminationGracePeriodSeconds: 2
  containers:
    - name: web
      image: $img
EOF
  expect_eq "the stored Pod's image (as written)" "$(jp "$ns" pod after '{.spec.containers[0].image}')" "$img" || rc=1
  wait_pods_running "$ns" app=after 1 60 || rc=1
  chart_node_restore || bad "the tier's webhooks were not put back" || rc=1
  expect_eq "the tier's webhooks' pinhook.dev/e2e-chart expressions" \
    "$(K get mutatingwebhookconfiguration,validatingwebhookconfiguration pinhook -o json | grep -c 'pinhook.dev/e2e-chart' || true)" 0 || rc=1
  K delete ns "$ns" "$CHART_NS" --wait=false >/dev/null || true
  return "$rc"
}
node_chart_release_objects() {
  K -n "$CHART_NS" get deployment,replicaset,service,configmap -l app.kubernetes.io/instance="$CHART_REL" -o name
}
node_chart_release_objects_gone() { [[ -z $(node_chart_release_objects) ]]; }
