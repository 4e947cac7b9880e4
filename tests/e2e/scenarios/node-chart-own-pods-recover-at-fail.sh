# shellcheck shell=bash
# title: on a real node, pinhook's own Pods are not admitted through pinhook: both replicas deleted at failurePolicy Fail come back by themselves
# order: 942
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone) and every webhook at Fail: a dry-run Pod in an enforce namespace comes back pinned
#   (the webhook serves); both webhook Pods are deleted at once; the ReplicaSet's new Pods are
#   created (no FailedCreate Event), scheduled and run, and two new Pods are Running and Ready
#   (timed from the delete, bound: 120 s) without anything done by hand, because pinhook's
#   namespace carries pinhook.dev/ignore=true (set by pinhook) and the webhooks skip it; the
#   webhooks are still at Fail, the Service's Endpoints hold the two new Pod IPs, and a dry-run
#   Pod is pinned again.
scenario_node_chart_own_pods_recover_at_fail() {
  local ns=$CHART_NS probe=e2e-node-chart-recover rc=0 old new t0 dt ips eps reg
  chart_node_ensure || return 1
  reg=$(chart_node_registry)
  e2e_ns "$probe" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1
  expect_eq "failurePolicy of pin, validate, mirrors" "$(chart_node_policies)" "Fail Fail Fail" || return 1
  expect_eq "a dry-run Pod's image in $probe before" \
    "$(dry_run_image "$probe" "$reg/team/node-web:1.0")" "$reg/team/node-web:1.0@$(digest node-web 1.0)" || rc=1
  old=$(K -n "$ns" get pods -l app.kubernetes.io/component=webhook -o jsonpath='{.items[*].metadata.name}')
  log "  deleting both webhook Pods: $old"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086 # (two names)
  K -n "$ns" delete pod $old --wait=false >/dev/null
  if wait_until 120 "two new webhook Pods Running and Ready" chart_node_new_pods_ready "$old"; then
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    echo "$dt" >"$CHART_DIR_RUN/recovery-seconds"
    ok "two new webhook Pods Running and Ready ${dt}s after both were deleted"
  else
    klog -n "$ns" get pods -o wide || true
    bad "no two new Ready webhook Pods within 120 s of the delete" || rc=1
  fi
  new=$(chart_node_live_pods webhook | cut -d' ' -f1 | tr '\n' ' ')
  log "  webhook Pods now: $new"
  expect_eq "FailedCreate Events in $ns" \
    "$(K -n "$ns" get events --field-selector reason=FailedCreate -o name | grep -c . || true)" 0 || rc=1
  expect_eq "failurePolicy of pin, validate, mirrors after" "$(chart_node_policies)" "Fail Fail Fail" || rc=1
  ips=$(chart_node_live_pods webhook | cut -d' ' -f4 | sort | tr '\n' ' ')
  wait_until 30 "the Endpoints to hold the new Pod IPs" chart_node_endpoints_are "$ips" || true
  eps=$(K -n "$ns" get endpoints "$CHART_FULL" -o jsonpath='{range .subsets[*].addresses[*]}{.ip}{"\n"}{end}' | sort | tr '\n' ' ')
  expect_eq "Endpoints $CHART_FULL addresses (= the new Pod IPs)" "$eps" "$ips" || rc=1
  expect_eq "a dry-run Pod's image in $probe after" \
    "$(dry_run_image "$probe" "$reg/team/node-web:1.0")" "$reg/team/node-web:1.0@$(digest node-web 1.0)" || rc=1
  K delete ns "$probe" --wait=false >/dev/null || true
  return "$rc"
}
