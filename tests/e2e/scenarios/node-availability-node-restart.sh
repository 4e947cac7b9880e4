# shellcheck shell=bash
# title: on a real node, the node restarted (kubelet and containerd stopped, every container killed, both started again): pinhook recovers with no manual step
# order: 952
# needs: node
# proves: With the chart's release (as node-availability-rollout-restart; both webhook replicas
#   on this one node) and the same stream of admissions (availability.sh): the kubelet is
#   stopped, every container on the node is SIGKILLed through containerd, containerd is stopped
#   (a power cut, as far as the node's Pods go), then containerd and the kubelet are started again
#   with their command lines. Nothing else is done: the kubelet recreates every Pod's sandbox and
#   containers (both webhook Pods' containers restarted, restartCount + 1, new sandboxes), both
#   webhook Pods are Running and Ready again (ready_again from the stop, ≤ 240 s) and every
#   webhook is still at Fail. While no replica runs, admissions fail (failurePolicy Fail: the
#   goal here is recovery, not 0 failures; the failures are logged with the apiserver's message);
#   no attempt that starts 5 s after both replicas are Ready again fails, and none is stored
#   unpinned; one `availability: node-restart ...` line.
scenario_node_availability_node_restart() {
  local rc=0 t0 ready=timeout tup before out p
  avail_begin node-restart || return 1
  before=$(avail_restart_counts)
  avail_stream_start
  log "  stopping the kubelet, killing every container, stopping containerd"
  avail_disrupt
  t0=$AVAIL_T_DISRUPT
  if ! avail_node_stop; then
    avail_node_start || true
    avail_settle_then_stop
    return 1
  fi
  log "  node down after $(avail_since "$t0")s; starting containerd and the kubelet again"
  avail_node_start || rc=1
  log "  Node Ready again $(avail_since "$t0")s after the stop began"
  if wait_until 240 "both webhook Pods restarted, Running and Ready" avail_all_restarted "$before"; then
    ready=$(avail_since "$t0")
  else
    rc=1
  fi
  tup=$(date +%s.%N)
  avail_settle_then_stop
  expect_eq "failurePolicy of pin, validate, mirrors after" "$(chart_node_policies)" "Fail Fail Fail" || rc=1
  for p in $(chart_node_live_pods webhook | cut -d' ' -f1); do log "  $p: restarts $(K -n "$CHART_NS" get pod "$p" -o jsonpath='{.status.containerStatuses[0].restartCount}')"; done
  avail_report "$ready"
  expect_eq "unpinned admissions" "$(jq -r .unpinned "$AVAIL_OUT/summary.json")" 0 || rc=1
  out=$(awk -F'\t' -v t1="$tup" '($6 == "failed" || $6 == "unanswered") && $2 > t1 + 5' "$AVAIL_OUT/attempts.tsv")
  expect_eq "attempts failed 5 s after both replicas were Ready again" "$out" "" || rc=1
  avail_end
  return "$rc"
}
