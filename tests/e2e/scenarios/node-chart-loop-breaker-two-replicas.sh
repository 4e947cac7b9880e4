# shellcheck shell=bash
# title: on a real node, the chart's 2 replicas count an operator's Pod creations in one ledger: the loop breaker trips at the 4th in all
# order: 943
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone: 2 webhook replicas, its policy listing e2e.pinhook.dev Gadget in owners.pinPodsOf with
#   loopBreaker.maxPods 3), six /mutate reviews of the CREATE of a Pod owned by one Gadget (a
#   fresh uid), naming the tag-only `NODE_IP:PORT/team/node-no-such:1.0`, sent in turn to each
#   replica at its Pod IP (the apiserver keeps one connection per webhook, so its own calls
#   reach one replica for minutes: the direct calls are what makes both count here): the first
#   three are denied (tag not found: the breaker let them through to be pinned), the 4th, the
#   second replica's second, trips the breaker (admitted as written, left alone), the 5th and
#   6th are left alone (paused), whichever replica answers; the chart's ConfigMap
#   `node-pinhook-loop-breaker` holds the Gadget's uid with its pause. With each replica's own
#   memory (before issue 43) each saw three creations and none tripped.

# breaker_review NS UID N: the /mutate AdmissionReview of the CREATE of Pod N owned by Gadget
# db (uid UID)
breaker_review() {
  jq -nc --arg ns "$1" --arg uid "$2" --arg n "$3" --arg image "$(chart_node_registry)/team/node-no-such:1.0" '{
    apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
    request: {uid: ("e2e-breaker-" + $n), kind: {group: "", version: "v1", kind: "Pod"},
      resource: {group: "", version: "v1", resource: "pods"}, namespace: $ns, name: ("db-" + $n),
      operation: "CREATE", userInfo: {username: "e2e-widget-operator"},
      object: {apiVersion: "v1", kind: "Pod",
        metadata: {name: ("db-" + $n), namespace: $ns,
          ownerReferences: [{apiVersion: "e2e.pinhook.dev/v1", kind: "Gadget", name: "db", uid: $uid,
            controller: true}]},
        spec: {containers: [{name: "db", image: $image}]}}}}'
}

scenario_node_chart_loop_breaker_two_replicas() {
  local ns=e2e-node-chart-breaker rc=0 uid name ip answer i verdicts="" ledger
  local -a names=() ips=()
  chart_node_ensure || return 1
  e2e_ns "$ns" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1
  uid=$(cat /proc/sys/kernel/random/uuid)
  while read -r name _ _ ip; do
    names+=("$name")
    ips+=("$ip")
  done < <(chart_node_live_pods webhook)
  expect_eq "webhook replicas" "${#ips[@]}" 2 || return 1
  for i in 1 2 3 4 5 6; do
    answer=$(curl -s --max-time 10 -k -H 'Content-Type: application/json' \
      --data-binary "$(breaker_review "$ns" "$uid" "$i")" "https://${ips[i % 2]}:8443/mutate?timeout=10s" |
      jq -r '"\(.response.allowed) \(.response.status.message // "-" | .[0:90])"' 2>&1)
    log "  creation $i -> replica ${names[i % 2]} (${ips[i % 2]}): $answer"
    verdicts+="${answer%% *} "
  done
  expect_eq "allowed, creation by creation (denied: counted and pinned, the tag not found; allowed: left alone)" \
    "$verdicts" "false false false true true true " || rc=1
  ledger=$(K -n "$CHART_NS" get configmap "$CHART_FULL-loop-breaker" -o jsonpath='{.data.owners\.json}')
  log "  the ledger: $(cut -c1-200 <<<"$ledger")"
  expect_eq "the ledger's pause for the Gadget" \
    "$(jq -r --arg k "$ns/$uid" '.[$k].paused_until | type' <<<"${ledger:-{\}}" 2>&1)" number || rc=1
  K delete ns "$ns" --wait=false >/dev/null || true
  return "$rc"
}
