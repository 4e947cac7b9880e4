# shellcheck shell=bash disable=SC2317 # (it calls functions it defines inside itself indirectly)
# title: watch: two replicas, one Lease holder writes; the holder killed, the other takes over and writes
# order: 250
# kube: 1.20 1.32
# proves: Two watch replicas: one holds the Lease pinhook-watch, the standby neither rechecks nor
#   writes for an interval; the holder SIGKILLed (the Lease not released), the standby takes the
#   Lease within 3 lease durations and reports the next unpinned Pod, with its Unpinned Event.

scenario_watch_lease_takeover() {
  local ns=e2e-y rc=0 first second t0 tagged
  watch_ensure || return 1
  e2e_ns "$ns" pinhook.dev/mode=audit
  local other
  if watch_running 0; then other=1; else other=0; fi
  watch_start "$other" || return 1
  first=$(lease_holder)
  [[ $first == watch-0 || $first == watch-1 ]] || { bad "Lease holder '$first'"; return 1; }
  ok "Lease pinhook-watch held by $first"
  # The standby neither rechecks nor writes.
  local standby=watch-$other
  [[ $first == "watch-$other" ]] && standby=watch-$((1 - other))
  sleep $((WATCH_INTERVAL + 2))
  expect_eq "rechecks by the standby $standby" "$(cycles_in "$WATCH_DIR/$standby.log")" 0 || rc=1
  expect_eq "holder after $((WATCH_INTERVAL + 2))s" "$(lease_holder)" "$first" || rc=1

  kill -KILL "$(<"$WATCH_DIR/$first.pid")"
  rm -f "$WATCH_DIR/$first.pid"
  t0=$SECONDS
  ok "killed the holder $first (SIGKILL: the Lease is not released)"
  holder_is() { [[ $(lease_holder) == "$1" ]]; }
  wait_until $((WATCH_LEASE_SECONDS * 3)) "$standby to take the Lease" holder_is "$standby" || return 1
  second=$(lease_holder)
  ok "$second took the Lease $((SECONDS - t0))s after the kill (lease duration ${WATCH_LEASE_SECONDS}s)"
  tagged=$(image app 2.0)
  klog -n "$ns" run after-takeover --image="$tagged" --restart=Never
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the new holder to report Pod after-takeover" \
    report_says "$ns" '.results[] | select(.resources[0].name == "after-takeover" and .properties.state == "unpinned")' || rc=1
  wait_until 10 "an Unpinned Event on Pod after-takeover" events_at_least "$ns" Pod after-takeover Unpinned 1 || rc=1
  expect_eq "Unpinned Events on Pod after-takeover" "$(events_of "$ns" Pod after-takeover Unpinned)" 1 || rc=1
  [[ $(cycles_in "$WATCH_DIR/$second.log") -ge 1 ]] && ok "$second rechecks now" || rc=1
  return "$rc"
}
