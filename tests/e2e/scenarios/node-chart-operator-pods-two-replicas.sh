# shellcheck shell=bash
# title: on a real node, the chart's 2 replicas: an operator's unpinned Pods denied, no loop; pinned, it settles at 1 Pod that runs the digest
# order: 944
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone: 2 webhook replicas; Widget is not in its owners.pinPodsOf), the stand-in Widget
#   operator of operator-pods-checked-not-patched (its Pods tolerate the node) and one Widget
#   naming the tag-only `NODE_IP:PORT/team/node-app:1.0` in a namespace in enforce that only the
#   chart's webhooks see: for 30 s no Pod is stored (each create is denied by
#   validate.pinhook.dev, the operator retries at least twice, nothing is deleted) and a
#   PodsDenied Warning Event regards the Widget; then the Widget is pinned by hand (what
#   customResources does): the operator creates exactly 1 Pod within 30 s, it runs on the node,
#   its imageID is the pinned index digest, and no other Pod follows for 10 s. The chart's logs
#   show which replica answered the namespace's /mutate and which its /validate reviews (the
#   apiserver keeps one connection per webhook: typically one replica each), and both agree.

scenario_node_chart_operator_pods_two_replicas() {
  local ns=e2e-node-chart-operator dir="$RUN/node-chart-operator" rc=0 me=$BASHPID
  local reg img pin uid n denials p ids per_replica
  chart_node_ensure || return 1
  reg=$(chart_node_registry)
  img="$reg/team/node-app:1.0"
  pin="$img@$(digest node-app 1.0)"
  rm -rf "$dir"
  mkdir -p "$dir"
  e2e_ns "$ns" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1
  widget_crd_yaml >"$dir/widget-crd.yaml"
  klog apply -f "$dir/widget-crd.yaml"
  klog wait --for=condition=Established crd/widgets.e2e.pinhook.dev --timeout=30s
  wait_until 30 "widgets served in $ns" K -n "$ns" get widgets ||
    { bad "the API does not serve widgets in $ns"; return 1; }

  NODE_CHART_OPERATOR=()
  trap 'for p in "${NODE_CHART_OPERATOR[@]}"; do stop_pid "$p" "widget operator" 5; done' EXIT
  WIDGET_NODE=1 widget_operator "$ns" "$dir" 120 "$me" </dev/null >/dev/null 2>&1 3>&- &
  NODE_CHART_OPERATOR+=($!)
  widget_yaml db "$img" >"$dir/widget.yaml"
  klog -n "$ns" create -f "$dir/widget.yaml"
  uid=$(jp "$ns" widget db '{.metadata.uid}')
  sleep 30
  n=$(widget_creations "$dir/creations-$ns.log")
  denials=$(grep -c 'admission webhook "validate.pinhook.dev" denied the request' "$dir/operator-$ns.log" || true)
  log "  in 30 s: $n Pods stored, $denials creates denied by validate.pinhook.dev"
  expect_eq "Pods stored for the tag-only Widget" "$n" 0 || rc=1
  if ((denials >= 2)); then ok "the operator retried and was denied each time ($denials)"; else
    bad "the operator's creates were denied $denials times (at least 2 expected)" || rc=1
  fi
  expect_eq "deletions" "$(grep -c ' deleting ' "$dir/operator-$ns.log" || true)" 0 || rc=1
  wait_until 30 "a PodsDenied Event regarding Widget/db" widget_denied_event_seen "$ns" db "$uid" ||
    { bad "no PodsDenied Warning Event regarding Widget/db (uid $uid)"; rc=1; }

  klog -n "$ns" patch widget db --type=merge -p "{\"spec\":{\"image\":\"$pin\"}}"
  if wait_until 30 "the operator to create a Pod of the pinned Widget" widget_created_any "$dir/creations-$ns.log"; then
    sleep 10
  fi
  touch "$dir/stop"
  wait_until 10 "the widget operator to stop" widget_operators_gone "${NODE_CHART_OPERATOR[@]}" || true
  for p in "${NODE_CHART_OPERATOR[@]}"; do stop_pid "$p" "widget operator" 5; done
  NODE_CHART_OPERATOR=()
  expect_eq "Pods the operator created once its Widget was pinned" "$(widget_creations "$dir/creations-$ns.log")" 1 || rc=1
  expect_eq "images of the Pods (count image)" "$(pod_images "$ns" widget=db)" "1 $pin" || rc=1
  wait_pods_running "$ns" widget=db 1 90 || rc=1
  ids=$(K -n "$ns" get pods -l widget=db -o jsonpath='{.items[*].status.containerStatuses[*].imageID}')
  expect_contains "the Pod's imageID" "$ids" "$reg/team/node-app@$(digest node-app 1.0)" || rc=1

  # which replica answered which reviews of this namespace (each Pod's log, from the node)
  per_replica=""
  for p in $(chart_node_live_pods webhook | cut -d' ' -f1); do
    per_replica+="$p: $(cat /var/log/pods/"${CHART_NS}_${p}"_*/pinhook/*.log 2>/dev/null | cut -d' ' -f4- |
      jq -r --arg ns "$ns" 'select(.fields.message == "review" and .fields.namespace == $ns and .fields.kind == "Pod")
        | "\(.fields.endpoint)=\(.fields.result)"' 2>/dev/null | sort | uniq -c | sed 's/^ *//' | tr '\n' ' ')| "
  done
  log "  the namespace's Pod reviews by replica: $per_replica"
  expect_contains "the reviews the replicas logged" "$per_replica" "validate=denied" || rc=1
  K delete ns "$ns" --wait=false >/dev/null || true
  return "$rc"
}
