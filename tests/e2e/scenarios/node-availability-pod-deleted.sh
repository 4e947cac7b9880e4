# shellcheck shell=bash
# title: on a real node, the webhook Pod serving the apiserver deleted under a steady stream of admissions: none fails
# order: 945
# needs: node
# kube: 1.20 1.32
# proves: With the chart's release (as node-availability-rollout-restart) and the same stream of
#   admissions (availability.sh), the webhook Pod that answered most of the stream so far (the
#   one the apiserver's kept-alive connection goes to) is deleted (`kubectl delete pod`, default
#   grace period): it leaves the Endpoints at once, keeps answering for its 5 s shutdown delay,
#   then closes its connections (HTTP/1.1, which the apiserver's webhook client speaks: an idle
#   one at once, a busy one after its answer) and the apiserver dials the other replica.
#   Every attempt is answered, none fails, none is stored unpinned; the ReplicaSet's replacement
#   is Running and Ready (ready_again, ≤ 180 s); one `availability: pod-deleted ...` line.
scenario_node_availability_pod_deleted() {
  local victim ip t0 ready=timeout rc=0
  avail_begin pod-deleted || return 1
  avail_stream_start
  victim=$(avail_busiest)
  log "  deleting webhook Pod $victim (the busiest so far)"
  ip=$(K -n "$CHART_NS" get pod "$victim" -o jsonpath='{.status.podIP}')
  avail_disrupt
  t0=$AVAIL_T_DISRUPT
  K -n "$CHART_NS" delete pod "$victim" --wait=false >/dev/null
  if wait_until 180 "two webhook Pods Running and Ready, $victim not one of them" chart_node_new_pods_ready "$victim"; then
    ready=$(avail_since "$t0")
  else
    rc=1
  fi
  avail_settle_then_stop
  avail_report "$ready" "victim=${victim: -5} endpoints_dropped_after=$(avail_dropped_after "$ip" "$t0")"
  avail_expect_none_failed || rc=1
  avail_end
  return "$rc"
}
