# shellcheck shell=bash
# title: on a real node, an operator's Pod runs the digest pinned in its custom resource, and the operator makes exactly one
# order: 905
# needs: node
# proves: With the policy's `customResources` (e2e.pinhook.dev Widget, `/spec/image`) and the
#   `widgets` rule added to pin.pinhook.dev and validate.pinhook.dev (as in
#   custom-resource-pinned-where-operator-reads), in an enforce namespace: a Widget with the
#   tag-only multi-arch `team/node-app:1.0` is stored with spec.image pinned to its index digest;
#   the stand-in operator (which deletes and recreates a Pod whose image differs from its
#   Widget's) creates exactly 1 Pod in E2E_OPERATOR_WATCH (here 20) s, that Pod runs on the node
#   (Running, ready), its image is the Widget's pinned image and its
#   `status.containerStatuses[0].imageID` is `REPO@<the pinned index digest>` (issue 24: a
#   configured custom resource is stored pinned and its Pods run that digest). The policy file
#   and the webhook rules are restored at the end, also when the scenario fails.
scenario_node_custom_resource_pod_runs_pinned_digest() {
  local ns=e2e-node-cr rc=0 secs=${E2E_OPERATOR_WATCH:-20} me=$BASHPID
  local img pin stored pod n t0 left
  CRW_DIR="$RUN/node-cr"
  img=$(image node-app 1.0)
  pin=$(pinned node-app 1.0)
  rm -rf "$CRW_DIR"
  mkdir -p "$CRW_DIR"
  e2e_ns "$ns"

  widget_crd_yaml >"$CRW_DIR/widget-crd.yaml"
  crw_setup "$ns" "$img" "$pin" || return 1

  WIDGET_NODE=1 widget_operator "$ns" "$CRW_DIR" "$((secs + 30))" "$me" </dev/null >/dev/null 2>&1 3>&- &
  CRW_OPERATOR=$!
  log "  widget operator running (pid $CRW_OPERATOR; logs $CRW_DIR)"

  widget_yaml app "$img" >"$CRW_DIR/widget.yaml"
  klog -n "$ns" create -f "$CRW_DIR/widget.yaml"
  t0=$(date +%s)
  stored=$(jp "$ns" widget app '{.spec.image}')
  expect_eq "stored Widget app spec.image" "$stored" "$pin" || rc=1

  if wait_pods_running "$ns" widget=app 1 60; then
    pod=$(K -n "$ns" get pods -l widget=app -o jsonpath='{.items[0].metadata.name}')
    ok "the operator's Pod $pod is Running $(($(date +%s) - t0)) s after the Widget"
    expect_eq "Pod $pod containers[0].image (the Widget's spec.image)" \
      "$(jp "$ns" pod "$pod" '{.spec.containers[0].image}')" "$stored" || rc=1
    expect_eq "Pod $pod nodeName" "$(jp "$ns" pod "$pod" '{.spec.nodeName}')" "$NODE_NAME" || rc=1
    expect_eq "Pod $pod containerStatuses[0].imageID" \
      "$(jp "$ns" pod "$pod" '{.status.containerStatuses[0].imageID}')" \
      "$REGISTRY_HOST/team/node-app@$(digest node-app 1.0)" || rc=1
  else
    bad "the operator's Pod for Widget app is not Running in 60 s" || rc=1
  fi

  # the operator's watch: one Pod in E2E_OPERATOR_WATCH s, never deleted for its image
  left=$((t0 + secs - $(date +%s)))
  ((left <= 0)) || sleep "$left"
  touch "$CRW_DIR/stop"
  wait_until 10 "the widget operator to stop" widget_operators_gone "$CRW_OPERATOR" ||
    log "  the widget operator did not stop within 10 s of the stop file; killing it"
  stop_pid "$CRW_OPERATOR" "widget operator" 5
  CRW_OPERATOR=""
  n=$(widget_creations "$CRW_DIR/creations-$ns.log")
  log "  counts: operator pods created in $secs s: $n; deletions: $(grep -c ' deleting ' "$CRW_DIR/operator-$ns.log" || true)"
  expect_eq "Pods the operator created in $ns in $secs s" "$n" 1 || rc=1
  expect_eq "images of the Pods in $ns (count image)" "$(pod_images "$ns" widget=app)" "1 $pin" || rc=1

  crw_cleanup
  trap - EXIT
  return "$rc"
}
