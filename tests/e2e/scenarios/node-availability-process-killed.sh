# shellcheck shell=bash
# title: on a real node, the webhook process serving the apiserver SIGKILLed under a steady stream of admissions: only the connection errors the apiserver's code explains
# order: 946
# needs: node
# kube: 1.20 1.32
# proves: With the chart's release (as node-availability-rollout-restart) and the same stream of
#   admissions (availability.sh), the pinhook process of the webhook Pod serving the stream (its
#   PID from containerd: `ctr -n k8s.io tasks ls`) is SIGKILLed: no shutdown delay, no orderly close.
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
  local victim ip pid restarts t0 ready=timeout rc=0
  avail_begin process-killed || return 1
  avail_stream_start
  victim=$(avail_busiest)
  ip=$(K -n "$CHART_NS" get pod "$victim" -o jsonpath='{.status.podIP}')
  restarts=$(K -n "$CHART_NS" get pod "$victim" -o jsonpath='{.status.containerStatuses[0].restartCount}')
  pid=$(avail_pinhook_pid "$victim") || { avail_settle_then_stop; return 1; }
  log "  SIGKILL to pinhook (PID $pid) of webhook Pod $victim ($ip, the busiest so far)"
  avail_disrupt
  t0=$AVAIL_T_DISRUPT
  kill -KILL "$pid"
  if wait_until 180 "$victim restarted, both webhook Pods Running and Ready" avail_restarted "$victim" "$restarts"; then
    ready=$(avail_since "$t0")
  else
    rc=1
  fi
  avail_settle_then_stop
  avail_report "$ready" "victim=${victim: -5}"
  avail_expect_kill_bound "$t0" "$ip" "$ready" || rc=1
  avail_end
  return "$rc"
}
