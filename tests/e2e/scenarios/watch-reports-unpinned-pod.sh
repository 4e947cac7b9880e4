# shellcheck shell=bash
# title: watch: an audit-namespace Pod admitted unpinned -> PolicyReport warn unpinned, Unpinned Event
# order: 230
# kube: 1.20 1.32
# proves: A Pod admitted unpinned in an audit namespace: the namespace's PolicyReport holds exactly
#   one result, `pinned` warn with pinhook's message, and one Unpinned Event is on the Pod.

scenario_watch_reports_unpinned_pod() {
  local ns=e2e-w rc=0 tagged
  watch_ensure || return 1
  e2e_ns "$ns" pinhook.dev/mode=audit
  tagged=$(image app 1.0)
  klog -n "$ns" run legacy --image="$tagged" --restart=Never
  expect_eq "the Pod's image (audit: not mutated)" "$(jp "$ns" pod legacy '{.spec.containers[0].image}')" "$tagged" || rc=1
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $ns to warn unpinned" \
    report_says "$ns" '.results[] | select(.rule == "pinned" and .result == "warn" and .properties.state == "unpinned")' || return 1
  expect_eq "its result" "$(report_json "$ns" | jq -c '[.results[] | {rule, result, message, kind: .resources[0].kind, name: .resources[0].name}]')" \
    "[{\"rule\":\"pinned\",\"result\":\"warn\",\"message\":\"containers[legacy] runs $tagged by tag, not pinned to a digest\",\"kind\":\"Pod\",\"name\":\"legacy\"}]" || rc=1
  wait_until 10 "an Unpinned Event on Pod legacy" events_at_least "$ns" Pod legacy Unpinned 1 || rc=1
  expect_eq "Unpinned Events on Pod legacy" "$(events_of "$ns" Pod legacy Unpinned)" 1 || rc=1
  expect_eq "PolicyReports in $ns (name pass fail warn)" \
    "$(K -n "$ns" get policyreports.wgpolicyk8s.io -o custom-columns=N:.metadata.name,P:.summary.pass,F:.summary.fail,W:.summary.warn --no-headers | tr -s ' ')" \
    "pinhook 0 0 1" || rc=1
  log "  kubectl get policyreports -n $ns:"
  K -n "$ns" get policyreports.wgpolicyk8s.io | while IFS= read -r line; do log "    $line"; done
  return "$rc"
}
