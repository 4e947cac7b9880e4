# shellcheck shell=bash
# title: an operator wrongly listed in owners.pinPodsOf: the loop breaker stops the loop at maxPods + 1 creations, and in enforce the rest are denied
# order: 188
# kube: 1.20 1.32
# proves: pinhook's policy file gets `owners: {pinPodsOf: [{group: e2e.pinhook.dev, kind: Widget}],
#   loopBreaker: {maxPods: 3, windowSeconds: 60, pauseSeconds: 600}}` (merged in; pinhook logs
#   `reloaded policy` and a dry-run Pod owned by a Widget comes back pinned; at the end, also on
#   failure, the original file is put back, reloaded, and such a Pod is denied again by
#   validate.pinhook.dev, as an unlisted operator's unpinned Pod is in enforce).
#   With the stand-in Widget operator of operator-pods-checked-not-patched (which deletes
#   every Pod whose image differs from spec.image) and one tag-only Widget in a namespace in
#   enforce: for E2E_OPERATOR_WATCH (60) s the operator gets exactly 3 Pods stored (each pinned,
#   each deleted by the operator); its 4th create trips the breaker, is left as written by
#   /mutate and denied by validate.pinhook.dev, and so is every create after it (at least 2
#   denials); no Pod is left; one PinningPaused Warning Event regards the Widget (its uid), its
#   note counting 4 Pods; `pinhook_owner_loops_total` +1; pinhook logs the trip with `pods=4`.
#
# Issue 24, item 3: owners.pinPodsOf lists operators whose Pods pinhook pins although they are not
# built-in controllers; an operator listed there that does compare its Pods' images with its own
# resource loops (deletes the pinned Pod, creates it again...). The loop breaker
# (src/admission/loops.rs) counts the CREATEs of one owner's Pods per image (/mutate only; dry
# runs, updates and /validate never count); the creation that makes it more than maxPods within
# windowSeconds trips it: /mutate leaves that Pod and every later one of the owner as written for
# pauseSeconds. Issue 43: /validate still checks them (it never asks the breaker, so every
# replica answers the same), so in enforce they are denied: the churn of pinned Pods becomes
# denied creates and an Event, and an unpinned Pod never runs. (Before, the 4th Pod was stored
# as written and ran unpinned in an enforce namespace.)
#
# The operator is widget_operator (operator-pods-checked-not-patched.sh, sourced by run.sh),
# in its own directory $RUN/loop-breaker (creations-NS.log, operator-NS.log, stop), stopped as
# there: stop file after the watch, its own deadline (watch + 30 s), this subshell's exit; the
# EXIT trap kills what is left and puts the policy file back.

# breaker_probe NS: the image of a server-side dry-run Pod owned by a Widget (a made-up uid; dry
# runs never count for the breaker): pinned while owners.pinPodsOf lists Widget, else `denied`
# (left as written by /mutate, denied by validate.pinhook.dev in enforce)
breaker_probe() {
  local out
  if out=$(widget_pod_json probe 00000000-0000-4000-8000-000000000000 "$(image app 1.0)" |
    K -n "$1" create --dry-run=server -f - -o jsonpath='{.spec.containers[0].image}' 2>&1); then
    printf '%s' "$out"
  elif [[ $out == *'admission webhook "validate.pinhook.dev" denied the request'* ]]; then
    printf denied
  else
    printf '%s' "$out"
  fi
}
# breaker_in_force LINES_BEFORE NS IMAGE: pinhook logged "reloaded policy" after line LINES_BEFORE
# and the probe comes back with IMAGE (the log line alone could be the reload of a file the
# scenario before put back)
breaker_in_force() {
  policy_reloaded "$1" && [[ $(breaker_probe "$2") == "$3" ]]
}
# breaker_policy FILE NS IMAGE WHAT: pinhook's policy file becomes FILE; waits (≤ 15 s) for
# pinhook's reload and for the probe to come back with IMAGE
breaker_policy() {
  local before line
  before=$(log_lines)
  policy_write "$1"
  if wait_until 15 "pinhook to reload its policy ($4)" breaker_in_force "$before" "$2" "$3"; then
    ok "pinhook reloaded its policy ($4); a Widget's dry-run Pod comes back $3"
  else
    log_since "$before" | grep 'policy' | while IFS= read -r line; do log "    pinhook: $line"; done
    log "  the probe: $(breaker_probe "$2" 2>&1)"
    bad "pinhook did not log 'reloaded policy', or a Widget's dry-run Pod is not $3, 15 s after the change ($4)"
  fi
}
# breaker_restore: the original policy back, if this scenario changed it (the EXIT trap, and the
# end of the scenario); a Widget's dry-run Pod in BREAKER_NS is then left as written again
breaker_restore() {
  local original=${BREAKER_ORIGINAL:-}
  [[ -n $original && -e $original ]] || return 0
  BREAKER_ORIGINAL="" # once: the trap after the scenario's own call does nothing
  breaker_policy "$original" "$BREAKER_NS" denied "the original put back" || return 1
  cmp -s "$original" "$RUN/policy.yaml" || bad "$RUN/policy.yaml differs from the original"
}
# breaker_owner_loops: pinhook_owner_loops_total (a counter without labels)
breaker_owner_loops() {
  curl -s --max-time 5 --cacert "$CERT_DIR/ca.crt" "$PINHOOK_URL/metrics" |
    awk '$1 == "pinhook_owner_loops_total" || index($1, "pinhook_owner_loops_total{") == 1 { s += $NF }
      END { print s + 0 }'
}
# breaker_events NS NAME UID: the PinningPaused Warning Events regarding Widget NAME (that uid)
breaker_events() {
  K -n "$1" get events.events.k8s.io -o json | jq -c --arg n "$2" --arg uid "$3" '[.items[]
    | select(.reason == "PinningPaused" and .regarding.kind == "Widget" and .regarding.name == $n)
    | {type, uid: .regarding.uid, note}] | map(select(.type == "Warning" and .uid == $uid))'
}
breaker_event_seen() { [[ $(breaker_events "$@" | jq length) -ge 1 ]]; } # NS NAME UID

scenario_operator_loop_breaker_pauses_pinning() {
  local ns=e2e-loop-breaker dir="$RUN/loop-breaker" rc=0 secs=${E2E_OPERATOR_WATCH:-60} max=3
  local img pin uid n top=0 t0 t_last="" loops_before loops_after events created expected line p i
  local me=$BASHPID denials
  img=$(image app 1.0)
  pin=$(pinned app 1.0)
  rm -rf "$dir"
  mkdir -p "$dir"
  e2e_ns "$ns"
  wait_until 30 "a dry-run Pod pinned in $ns" dry_run_gives "$ns" "$img" "$pin" ||
    { bad "pinhook does not pin a bare Pod in $ns"; return 1; }
  ok "a bare dry-run Pod in $ns comes back pinned"

  widget_crd_yaml >"$dir/widget-crd.yaml"
  klog apply -f "$dir/widget-crd.yaml"
  klog wait --for=condition=Established crd/widgets.e2e.pinhook.dev --timeout=30s
  wait_until 30 "widgets served in $ns" K -n "$ns" get widgets ||
    { bad "the API does not serve widgets in $ns"; return 1; }

  # the policy with owners merged in (the e2e policy has no `owners:`; appending a top-level
  # key is the merge), the original kept to be put back whatever happens
  if grep -q '^owners:' "$RUN/policy.yaml"; then
    bad "$RUN/policy.yaml already has owners: (this scenario adds its own)"
    return 1
  fi
  # (globals: the EXIT trap runs after this function returned)
  BREAKER_ORIGINAL="$dir/policy.original.yaml"
  BREAKER_NS=$ns
  BREAKER_OPERATORS=()
  cp "$RUN/policy.yaml" "$BREAKER_ORIGINAL"
  trap 'for p in "${BREAKER_OPERATORS[@]}"; do stop_pid "$p" "widget operator" 5; done; breaker_restore' EXIT
  {
    cat "$BREAKER_ORIGINAL"
    [[ -z $(tail -c1 "$BREAKER_ORIGINAL") ]] || echo
    cat <<EOF
owners:
  pinPodsOf:
    - {group: e2e.pinhook.dev, kind: Widget}
  loopBreaker: {maxPods: $max, windowSeconds: 60, pauseSeconds: 600}
EOF
  } >"$dir/policy.yaml"
  breaker_policy "$dir/policy.yaml" "$ns" "$pin" "owners.pinPodsOf: Widget, loopBreaker.maxPods: $max" ||
    return 1
  loops_before=$(breaker_owner_loops)

  : >"$dir/creations-$ns.log" # (the operator's too; there before it starts)
  widget_operator "$ns" "$dir" "$((secs + 30))" "$me" </dev/null >/dev/null 2>&1 3>&- &
  BREAKER_OPERATORS+=($!)
  log "  widget operator running (pid ${BREAKER_OPERATORS[*]}; logs $dir)"
  widget_yaml db "$img" >"$dir/widget.yaml"
  klog -n "$ns" create -f "$dir/widget.yaml"
  uid=$(jp "$ns" widget db '{.metadata.uid}')
  t0=$(date +%s.%N)
  # the watch: fails at once above max stored Pods (the loop goes on)
  while :; do
    n=$(widget_creations "$dir/creations-$ns.log")
    if ((n > top)); then
      top=$n
      t_last=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    fi
    ((n <= max)) || break
    awk -v a="$t0" -v b="$(date +%s.%N)" -v s="$secs" 'BEGIN{exit !(b-a < s)}' || break
    sleep 0.5
  done
  touch "$dir/stop"
  wait_until 10 "the widget operator to stop" widget_operators_gone "${BREAKER_OPERATORS[@]}" ||
    log "  the widget operator did not stop within 10 s of the stop file; killing it"
  for p in "${BREAKER_OPERATORS[@]}"; do stop_pid "$p" "widget operator" 5; done
  BREAKER_OPERATORS=()
  n=$(widget_creations "$dir/creations-$ns.log")
  log "  counts: operator pods created in $secs s: $n (with pinhook, owners.loopBreaker.maxPods $max; the last at ${t_last:-never} s; deletions: $(grep -c ' deleting ' "$dir/operator-$ns.log" || true))"
  created=$(awk '{print $4}' "$dir/creations-$ns.log" | tr '\n' ' ')
  log "  stored images of the Pods it created, in order: ${created:-none}"

  denials=$(grep -c 'admission webhook "validate.pinhook.dev" denied the request' "$dir/operator-$ns.log" || true)
  log "  creates denied after the trip: $denials"
  expect_eq "Pods stored for the operator in $ns in $secs s" "$n" "$max" || rc=1
  expected=""
  for ((i = 0; i < max; i++)); do expected+="$pin "; done
  expect_eq "stored images of the Pods it created, in order" "$created" "$expected" || rc=1
  expect_eq "Pods left in $ns (count image)" "$(pod_images "$ns" widget=db)" "" || rc=1
  if ((denials >= 2)); then ok "the operator's creates after the trip were denied by validate.pinhook.dev ($denials times)"; else
    bad "the operator's creates after the trip were denied $denials times by validate.pinhook.dev (at least 2 expected)" || rc=1
    log "  operator errors: $(grep -h 'failed\|rror' "$dir/operator-$ns.log" | head -5 | tr '\n' ';')"
  fi

  # what pinhook says about the trip: the Event on the Widget, the counter, its log
  if wait_until 30 "a PinningPaused Event regarding Widget/db in $ns" breaker_event_seen "$ns" db "$uid"; then
    events=$(breaker_events "$ns" db "$uid")
    expect_eq "PinningPaused Warning Events regarding Widget/db (uid $uid)" "$(jq length <<<"$events")" 1 || rc=1
    expect_contains "its note" "$(jq -r '.[0].note' <<<"$events")" "created $((max + 1)) Pods of $img within 60 s" || rc=1
  else
    bad "no PinningPaused Warning Event regarding Widget/db (uid $uid) in $ns" || rc=1
    K -n "$ns" get events.events.k8s.io -o json |
      jq -c '.items[] | {reason, type, regarding: "\(.regarding.kind)/\(.regarding.name)", note}' |
      while IFS= read -r line; do log "    event: $line"; done
  fi
  loops_after=$(breaker_owner_loops)
  expect_eq "pinhook_owner_loops_total increase ($loops_before -> $loops_after)" "$((loops_after - loops_before))" 1 || rc=1
  line=$(sed 's/\x1b\[[0-9;]*m//g' "$RUN/pinhook.log" | grep 'owner recreates its Pods' | grep "namespace=$ns" || true)
  expect_contains "pinhook's log of the trip" "$line" "pods=$((max + 1))" || rc=1

  breaker_restore || rc=1
  return "$rc"
}
