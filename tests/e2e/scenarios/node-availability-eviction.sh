# shellcheck shell=bash
# title: on a real node, a webhook Pod evicted through the Eviction API under a steady stream of admissions: none fails, a second eviction is refused with 429
# order: 947
# needs: node
# kube: 1.20 1.32
# proves: With the chart's release (as node-availability-rollout-restart), its PodDisruptionBudget
#   (maxUnavailable 1) allowing one disruption (status.disruptionsAllowed 1, written by the
#   controller manager's disruption controller) and the same stream of admissions
#   (availability.sh): an Eviction (policy/v1beta1, POST pods/NAME/eviction) of the webhook Pod
#   serving the stream is accepted (201); an Eviction of the other Pod right after is refused with
#   429 (it would break the budget) and that Pod is not deleted. Every attempt is answered, none
#   fails, none is stored unpinned; the replacement is Running and Ready (ready_again, ≤ 180 s)
#   and the budget allows one disruption again; one `availability: eviction ...` line.
scenario_node_availability_eviction() {
  local victim other ip t0 ready=timeout rc=0 code1 code2 msg2
  avail_begin eviction || return 1
  wait_until 60 "the PodDisruptionBudget to allow 1 disruption" avail_pdb_allows 1 ||
    { bad "PDB $CHART_FULL: status.disruptionsAllowed $(avail_pdb_allowed) (the disruption controller runs?)"; return 1; }
  avail_stream_start
  victim=$(avail_busiest)
  other=$(chart_node_live_pods webhook | cut -d' ' -f1 | grep -vx "$victim" | sed -n 1p)
  log "  evicting webhook Pod $victim (the busiest so far), then $other"
  ip=$(K -n "$CHART_NS" get pod "$victim" -o jsonpath='{.status.podIP}')
  avail_disrupt
  t0=$AVAIL_T_DISRUPT
  code1=$(avail_evict "$victim" "$AVAIL_OUT/evict-1.json")
  code2=$(avail_evict "$other" "$AVAIL_OUT/evict-2.json")
  msg2=$(jq -r '.message // empty' "$AVAIL_OUT/evict-2.json" 2>/dev/null)
  expect_eq "HTTP code of the eviction of $victim" "$code1" 201 || rc=1
  expect_eq "HTTP code of the eviction of $other right after" "$code2" 429 || rc=1
  expect_contains "the refusal" "$msg2" "disruption budget" || rc=1
  if wait_until 180 "two webhook Pods Running and Ready, $victim not one of them" chart_node_new_pods_ready "$victim"; then
    ready=$(avail_since "$t0")
  else
    rc=1
  fi
  expect_contains "live webhook Pods (the refused eviction's Pod kept)" \
    " $(chart_node_live_pods webhook | cut -d' ' -f1 | tr '\n' ' ') " " $other " || rc=1
  wait_until 60 "the PodDisruptionBudget to allow 1 disruption again" avail_pdb_allows 1 ||
    bad "PDB $CHART_FULL: status.disruptionsAllowed $(avail_pdb_allowed) after" || rc=1
  avail_settle_then_stop
  avail_report "$ready" "victim=${victim: -5} endpoints_dropped_after=$(avail_dropped_after "$ip" "$t0") evictions=$code1/$code2"
  avail_expect_none_failed || rc=1
  avail_end
  return "$rc"
}
