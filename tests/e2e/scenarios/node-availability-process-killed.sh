# shellcheck shell=bash
# title: on a real node, the webhook process serving the apiserver SIGKILLed under a steady stream of admissions: only the explained dial failures
# order: 946
# needs: node
# proves: With the chart's release (as node-availability-rollout-restart) and the same stream of
#   admissions (availability.sh), the pinhook process of the webhook Pod serving the stream (its
#   PID from containerd: `ctr -n k8s.io tasks ls`) is SIGKILLed: no shutdown delay, no GOAWAY.
#   The kubelet restarts the container (restartCount + 1) and both Pods are Running and Ready
#   again (ready_again, ≤ 180 s). Admissions may fail here, and only as docs/availability.md
#   explains with the apiserver's code: the apiserver's connection dies with the process; a
#   request in flight on it fails, and the apiserver (client-go's rest client: no retry of a POST
#   on a connection error) dials the Service again for the next one, which kube-proxy may still
#   send to the dead Pod (`connect: connection refused`) until the Endpoints drop it. Asserted
#   exactly: every failed attempt is such a connection error (refused, reset, EOF), it started
#   after the kill (or less than 1 s before it: in flight) and no later than 3 s after the
#   Endpoints dropped the killed Pod (or it was Ready again), every attempt is answered and none
#   stored unpinned; one
#   `availability: process-killed ...` line, the failures with their errors.
scenario_node_availability_process_killed() {
  local victim ip cid pid restarts t0 ready=timeout rc=0 gone back limit bad_fail
  avail_begin process-killed || return 1
  avail_stream_start
  victim=$(avail_busiest)
  ip=$(K -n "$CHART_NS" get pod "$victim" -o jsonpath='{.status.podIP}')
  restarts=$(K -n "$CHART_NS" get pod "$victim" -o jsonpath='{.status.containerStatuses[0].restartCount}')
  cid=$(K -n "$CHART_NS" get pod "$victim" -o jsonpath='{.status.containerStatuses[0].containerID}')
  cid=${cid#containerd://}
  pid=$(ctr --address "$NODE_SOCK" -n k8s.io tasks ls 2>/dev/null | awk -v id="$cid" '$1 == id {print $2}')
  [[ $pid =~ ^[0-9]+$ && -d /proc/$pid ]] || { bad "no PID for container $cid of $victim (ctr tasks ls)"; avail_settle_then_stop; return 1; }
  expect_contains "command line of PID $pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline")" "pinhook" || { avail_settle_then_stop; return 1; }
  log "  SIGKILL to pinhook (PID $pid, container ${cid:0:12}) of webhook Pod $victim ($ip, the busiest so far)"
  avail_disrupt
  t0=$AVAIL_T_DISRUPT
  kill -KILL "$pid"
  if wait_until 180 "$victim restarted, both webhook Pods Running and Ready" avail_restarted "$victim" "$restarts"; then
    ready=$(avail_since "$t0")
  else
    rc=1
  fi
  avail_settle_then_stop
  gone=$(avail_endpoint_gone "$ip" "$t0")
  back=$(awk -v t0="$t0" -v r="${ready/timeout/0}" 'BEGIN{printf "%.3f", t0 + r}')
  limit=$(awk -v g="${gone:-0}" -v b="$back" 'BEGIN{ if (g > 0 && g + 3 < b) printf "%.3f", g + 3; else printf "%.3f", b }')
  log "  killed at $(awk -v t="$t0" 'BEGIN{printf "%.3f", t}'); the Endpoints dropped $ip at ${gone:-never}; Ready again at $back"
  avail_report "$ready" "victim=${victim: -5} endpoints_dropped_after=$(awk -v g="${gone:-0}" -v t="$t0" 'BEGIN{ if (g > 0) printf "%.1fs", g - t; else print "never" }')"
  expect_eq "unpinned admissions" "$(jq -r .unpinned "$AVAIL_OUT/summary.json")" 0 || rc=1
  expect_eq "attempts answered" "$(jq -r .answered "$AVAIL_OUT/summary.json")" "$(jq -r .attempted "$AVAIL_OUT/summary.json")" || rc=1
  # the explained bound: connection errors to the killed replica, between the kill and the limit
  bad_fail=$(awk -F'\t' -v t0="$t0" -v lim="$limit" '$6 == "failed" {
      conn = ($7 ~ /connect: connection refused|connection reset by peer|EOF|http2: client connection lost|server sent GOAWAY/)
      if (!conn || $2 < t0 - 1 || $2 > lim) print }' "$AVAIL_OUT/attempts.tsv")
  expect_eq "failed attempts that are not a connection error between the kill and $limit" "$bad_fail" "" || rc=1
  return "$rc"
}
