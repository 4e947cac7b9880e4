# shellcheck shell=bash
# title: on a real node, kube-apiserver restarted under a steady stream of admissions: every admission it answers succeeds, pinned
# order: 951
# needs: node
# proves: With the chart's release (as node-availability-rollout-restart) and the same stream of
#   admissions (availability.sh): kube-apiserver is stopped (SIGTERM) and started again with the
#   same command line. While it is away the client gets no HTTP answer (`unanswered`: nothing was
#   admitted or refused, counted apart), and only then: no attempt is unanswered before the stop
#   or more than 1 s after its /readyz answers again. Every attempt the apiserver answers, before,
#   during its shutdown and after its start, succeeds and is stored pinned (none fails: its new
#   webhook clients dial pinhook's Service afresh), except that answers of `service "..." not
#   found` within 3 s of /readyz (the restarted 1.20 apiserver's Service lister not yet filled;
#   pinhook never called) are counted apart and logged; both webhook Pods are Running and Ready after,
#   with no restart, the Node Ready and both Pods back in the Service's Endpoints within 120 s
#   (an apiserver away past the node lifecycle controller's 40 s grace period can come back to
#   a Node marked NotReady and its Pods out of the Endpoints until the kubelet reports again; no
#   step is taken); ready_again is the apiserver's stop to its /readyz; one
#   `availability: apiserver-restart ...` line.
scenario_node_availability_apiserver_restart() {
  local rc=0 before after t0 tup ready=timeout out
  avail_begin apiserver-restart || return 1
  before=$(avail_restart_counts)
  avail_stream_start
  log "  stopping kube-apiserver (PID $(<"$E2E_WORK/kube-apiserver.pid"))"
  avail_disrupt
  t0=$AVAIL_T_DISRUPT
  avail_apiserver_stop || rc=1
  log "  kube-apiserver stopped after $(avail_since "$t0")s; starting it again"
  if avail_apiserver_start; then
    ready=$(avail_since "$t0")
    tup=$(date +%s.%N)
    log "  kube-apiserver ready again ${ready}s after the stop began"
  else
    rc=1
    tup=$(date +%s.%N)
  fi
  avail_settle_then_stop
  # An apiserver away longer than the node lifecycle controller's grace period (40 s) can come
  # back to a Node marked NotReady and its Pods' Ready condition False (so out of the Endpoints)
  # until the kubelet reports again: the release is back on its own, with no step taken.
  if wait_until 120 "the Node Ready, both webhook Pods Ready and in the Endpoints" avail_node_and_endpoints_ready; then
    log "  Node Ready and both webhook Pods in the Endpoints $(avail_since "$tup")s after /readyz"
  else
    bad "not back after the restart: $(avail_endpoints_explain)"
    rc=1
  fi
  after=$(avail_restart_counts)
  expect_eq "webhook Pods and restarts (before: $(tr '\n' ' ' <<<"$before"))" "$after" "$before" || rc=1
  avail_report "$ready"
  expect_eq "unpinned admissions" "$(jq -r .unpinned "$AVAIL_OUT/summary.json")" 0 || rc=1
  # The restarted 1.20 apiserver can answer for a moment after its /readyz with its Service
  # lister not yet filled: `failed calling webhook ...: service "node-pinhook" not found`, pinhook
  # never dialled (9 of 425 attempts, all within 2 s, in one run of three). Those, and only
  # those within 3 s of /readyz, are counted apart; any other failure fails the scenario.
  local unsynced failed
  unsynced=$(awk -F'\t' -v t1="$tup" '$6 == "failed" && $7 ~ /service "[^"]+" not found/ && $2 + $3 / 1000 >= t1 - 1 && $2 + $3 / 1000 <= t1 + 3' \
    "$AVAIL_OUT/attempts.tsv" | wc -l)
  failed=$(jq -r .failed "$AVAIL_OUT/summary.json")
  log "  answered by the restarted apiserver before its Service lister was filled (within 3 s of /readyz): $unsynced"
  expect_eq "failed admissions (answered by the apiserver), apart from those" "$((failed - unsynced))" 0 || rc=1
  out=$(awk -F'\t' -v t0="$t0" -v t1="$tup" '$6 == "unanswered" && ($2 < t0 - 1 || $2 > t1 + 1)' "$AVAIL_OUT/attempts.tsv")
  expect_eq "attempts unanswered outside the apiserver's absence" "$out" "" || rc=1
  avail_end
  return "$rc"
}
