# shellcheck shell=bash
# title: on a real node, kubectl rollout restart of the chart's webhook Deployment under a steady stream of admissions: none fails
# order: 944
# needs: node
# kube: 1.20 1.32
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone; the chart's defaults: 2 replicas, maxUnavailable 0, readiness on /readyz, a 5 s
#   shutdown delay, failurePolicy Fail), a steady stream of admissions through the apiserver
#   (availability.sh: 5 per second, Pods and Deployments in an enforce namespace, each stored
#   pinned) runs while `kubectl rollout restart` replaces both webhook Pods, one at a time. Every
#   attempt is answered, none fails and none is stored unpinned; two new Pods are Running and
#   Ready (ready_again, ≤ 240 s); the figures and how the reviews spread over the Pods are
#   logged in one `availability: rollout-restart ...` line.
scenario_node_availability_rollout_restart() {
  local old t0 ready=timeout rc=0
  avail_begin rollout-restart || return 1
  old=$(chart_node_live_pods webhook | cut -d' ' -f1 | tr '\n' ' ')
  avail_stream_start
  log "  kubectl rollout restart deployment/$CHART_FULL (webhook Pods: $old)"
  avail_disrupt
  t0=$AVAIL_T_DISRUPT
  klog -n "$CHART_NS" rollout restart deployment "$CHART_FULL"
  if wait_until 240 "two new webhook Pods Running and Ready" chart_node_new_pods_ready "$old"; then
    ready=$(avail_since "$t0")
  else
    rc=1
  fi
  avail_settle_then_stop
  avail_report "$ready"
  avail_expect_none_failed || rc=1
  avail_end
  return "$rc"
}
