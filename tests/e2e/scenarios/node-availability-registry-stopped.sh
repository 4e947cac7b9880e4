# shellcheck shell=bash
# title: on a real node, the registry stopped under a steady stream of admissions: cached images still pinned, uncached ones refused with the registry's error, none fails
# order: 948
# needs: node
# proves: With the chart's release (as node-availability-rollout-restart), both replicas' caches
#   warm for the stream's image, the registry stopped as the node's Pods reach it (node.sh's
#   forwarder on the bridge address, killed: connections are refused) for 30 s, and the same
#   stream of admissions (availability.sh) with every 10th Pod naming an image pinhook never
#   resolved (team/agent:1.0): every attempt is answered; every one with the cached image is
#   stored pinned (none fails, none unpinned); the uncached ones are refused by pin.pinhook.dev
#   with the registry's error (`cannot reach registry` or the breaker's `did not answer 5 times
#   in a row`: README, Cache), counted apart as `refused`, at least one; once the registry is back
#   the uncached image is pinned again (≤ 90 s: the breaker's pause). Both webhook Pods stay
#   Running and Ready, no restart; one `availability: registry-stopped ...` line.
scenario_node_availability_registry_stopped() {
  local rc=0 reg before after t0 down other
  avail_begin registry-stopped || return 1
  reg=$(chart_node_registry)
  before=$(avail_restart_counts)
  log "  stopping the registry's forwarder on $NODE_IP:${REGISTRY_HOST##*:} for 30 s"
  avail_registry_stop || return 1
  avail_disrupt
  t0=$AVAIL_T_DISRUPT
  avail_stream_start --uncached-image "$reg/team/agent:1.0" --uncached-every 10 \
    --refusal 'admission webhook "pin.pinhook.dev" denied the request'
  sleep $((30 - AVAIL_LEAD))
  avail_registry_start || rc=1
  down=$(avail_since "$t0")
  log "  the registry answers again, after ${down}s"
  avail_settle_then_stop
  after=$(avail_restart_counts)
  expect_eq "webhook Pods and restarts (before: $(tr '\n' ' ' <<<"$before"))" "$after" "$before" || rc=1
  chart_node_webhook_pods_ready || bad "the webhook Pods are not both Ready" || rc=1
  avail_report 0 "registry_down=${down}s"
  avail_expect_none_failed || rc=1
  (($(jq -r .refused "$AVAIL_OUT/summary.json") > 0)) || bad "no uncached image was refused while the registry was down" || rc=1
  other=$(awk -F'\t' '$6 == "refused" && $7 !~ /cannot reach registry|did not answer [0-9]+ times in a row/' "$AVAIL_OUT/attempts.tsv")
  expect_eq "refusals without the registry's error" "$other" "" || rc=1
  awk -F'\t' '$6 == "refused" {print $7}' "$AVAIL_OUT/attempts.tsv" | sed 's/(image [^)]*)//' | sort | uniq -c |
    while IFS= read -r l; do log "  refused: $l"; done
  # (the breaker may keep the registry paused for up to 60 s after it is back)
  wait_until 90 "a dry-run Pod with the uncached image pinned" \
    dry_run_gives "$AVAIL_NS" "$reg/team/agent:1.0" "$reg/team/agent:1.0@$(digest agent 1.0)" ||
    bad "a dry-run Pod with the uncached image after: $(dry_run_image "$AVAIL_NS" "$reg/team/agent:1.0" 2>&1)" || rc=1
  avail_end
  return "$rc"
}
