# shellcheck shell=bash
# title: watch: a pinned Deployment's tag re-pushed -> PolicyReport tag-moved with both digests, Event, gauge; then no writes
# order: 220
# kube: 1.20 1.32
# proves: `pinhook watch` (as the shipped pinhook-watch ServiceAccount, the PolicyReport CRDs,
#   WATCH_INTERVAL recheck): a Deployment pinned at admission passes; its tag re-pushed, the
#   namespace's PolicyReport says tag-moved (fail) with both digests and the message, the summary
#   counts it, one TagMoved Event is on the Deployment (its uid),
#   `pinhook_running_images{state="tag-moved"}` and `pinhook_tag_moved_running_total` go up by one;
#   the next two rechecks write nothing (`report_writes=0 events=0`); `pinhook inventory --digest`
#   finds the Deployment.

scenario_watch_reports_tag_moved() {
  local ns=e2e-v rc=0 tagged d1 d2 port moved_before total_before holder log
  watch_ensure || return 1
  e2e_ns "$ns"
  tagged=$(image drift 1.0)
  d1=$(digest drift 1.0)
  app_deployment drift 1 "$tagged" >"$WATCH_DIR/v-deployment.yaml"
  klog -n "$ns" create -f "$WATCH_DIR/v-deployment.yaml"
  wait_until 30 "the Pod of Deployment drift" pods_at_least "$ns" "$ns" app=drift 1 || return 1
  expect_eq "the Pod's image (pinned at admission)" "$(pod_images "$ns" app=drift)" "1 $tagged@$d1" || rc=1
  wait_until $((WATCH_INTERVAL * 3 + 10)) "the PolicyReport of $ns to pass tag-current" \
    report_says "$ns" '.results[] | select(.rule == "tag-current" and .result == "pass")' || return 1
  ok "PolicyReport $ns/pinhook: pinned pass, tag-current pass"
  port=$(watch_any_port)
  moved_before=$(watch_metric "$port" 'pinhook_running_images{state="tag-moved"}')
  total_before=$(watch_metric "$port" 'pinhook_tag_moved_running_total')

  d2=$(repush drift 1.0) || { bad "the registry helper did not re-push drift:1.0"; return 1; }
  [[ $d2 != "$d1" ]] || { bad "the re-push kept the digest $d1"; return 1; }
  ok "re-pushed drift:1.0: $d1 -> $d2"
  local t0=$SECONDS
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $ns to say tag-moved" \
    report_says "$ns" '.results[] | select(.rule == "tag-current" and .result == "fail" and .properties.state == "tag-moved")' || return 1
  ok "tag-moved reported $((SECONDS - t0))s after the re-push (recheck interval ${WATCH_INTERVAL}s)"
  local result
  result=$(report_json "$ns" | jq -c '.results[] | select(.rule == "tag-current") | {result, pinned: .properties.pinnedDigest, current: .properties.currentDigest, kind: .resources[0].kind, name: .resources[0].name}')
  expect_eq "tag-current result" "$result" \
    "{\"result\":\"fail\",\"pinned\":\"$d1\",\"current\":\"$d2\",\"kind\":\"Deployment\",\"name\":\"drift\"}" || rc=1
  expect_contains "its message" "$(report_json "$ns" | jq -r '.results[] | select(.rule == "tag-current") | .message')" \
    "containers[app] runs $tagged@$d1: its tag now resolves to $d2, not the pinned $d1" || rc=1
  expect_eq "report summary" "$(report_json "$ns" | jq -c .summary)" '{"error":0,"fail":1,"pass":1,"skip":0,"warn":0}' || rc=1
  wait_until 10 "a TagMoved Event on Deployment drift" events_at_least "$ns" Deployment drift TagMoved 1 || rc=1
  expect_eq "TagMoved Events on Deployment drift" "$(events_of "$ns" Deployment drift TagMoved)" 1 || rc=1
  expect_eq "its regarding uid (kubectl describe finds it)" \
    "$(K -n "$ns" get events.events.k8s.io -o json | jq -r '.items[] | select(.reason == "TagMoved") | .regarding.uid')" \
    "$(K -n "$ns" get deployment drift -o jsonpath='{.metadata.uid}')" || rc=1
  expect_eq 'pinhook_running_images{state="tag-moved"}' \
    "$(watch_metric "$port" 'pinhook_running_images{state="tag-moved"}')" "$((moved_before + 1))" || rc=1
  expect_eq "pinhook_tag_moved_running_total" \
    "$(watch_metric "$port" 'pinhook_tag_moved_running_total')" "$((total_before + 1))" || rc=1

  # Nothing changes from now on: the next two cycles write nothing.
  holder=$(lease_holder)
  log="$WATCH_DIR/${holder}.log"
  local seen
  seen=$(cycles_in "$log")
  wait_until $((WATCH_INTERVAL * 3 + 10)) "two more rechecks by $holder" \
    cycles_at_least "$log" $((seen + 2)) || rc=1
  expect_eq "report writes and Events of the last recheck (nothing changed)" "$(last_cycle "$log")" "0 0" || rc=1
  expect_eq "TagMoved Events on Deployment drift, still" "$(events_of "$ns" Deployment drift TagMoved)" 1 || rc=1

  # pinhook inventory, with the admin kubeconfig: where does d1 run?
  local inv
  inv=$("$PINHOOK_BIN" inventory --digest "$d1" -o json --kubeconfig "$KUBECONFIG") || { bad "pinhook inventory failed"; return 1; }
  expect_eq "pinhook inventory --digest $d1" \
    "$(jq -c '[.images[] | {state, digest, currentDigest, pods, workloads: [.workloads[] | "\(.namespace)/\(.kind)/\(.name)"]}]' <<<"$inv")" \
    "[{\"state\":\"tag-moved\",\"digest\":\"$d1\",\"currentDigest\":\"$d2\",\"pods\":1,\"workloads\":[\"$ns/Deployment/drift\"]}]" || rc=1
  "$PINHOOK_BIN" inventory --namespace "$ns" --kubeconfig "$KUBECONFIG" >"$WATCH_DIR/v-inventory.txt" || rc=1
  log "  kubectl get policyreports -n $ns:"
  K -n "$ns" get policyreports.wgpolicyk8s.io | while IFS= read -r line; do log "    $line"; done
  log "  kubectl get events.events.k8s.io -n $ns:"
  K -n "$ns" get events.events.k8s.io | while IFS= read -r line; do log "    $line"; done
  log "  pinhook inventory --namespace $ns:"
  while IFS= read -r line; do log "    $line"; done <"$WATCH_DIR/v-inventory.txt"
  return "$rc"
}
