# shellcheck shell=bash
# title: a custom resource is pinned where its operator reads the image: the operator's Pod carries the digest (issue 24)
# order: 187
# kube: 1.20 1.32
# proves: With the policy's `customResources` (e2e.pinhook.dev Widget, `/spec/image`) added to
#   pinhook's policy file and a `widgets` rule (CREATE/UPDATE) added to pin.pinhook.dev and
#   validate.pinhook.dev, in a namespace in enforce: a Widget with the tag-only `team/db:1.0` is
#   stored with spec.image `127.0.0.1:PORT/team/db:1.0@sha256:<index digest>`; the stand-in
#   operator of operator-pods-checked-not-patched creates exactly 1 Pod for it in
#   E2E_OPERATOR_WATCH (here 30) s, whose image is the Widget's pinned image, exactly; a Widget
#   with `team/db:does-not-exist` is refused (`admission webhook "pin.pinhook.dev" denied the
#   request`, `tag does-not-exist not found`) and not stored; `kubectl label` and a merge patch
#   of spec.replicas of the first Widget (UPDATEs pinhook reviews, pinning nothing) leave its
#   spec.image as it was. The policy file and the webhook rules are restored at the end (a
#   dry-run Widget comes back tag-only again; the rules are those of before).
#
# Where the operator scenario shows that pinhook leaves an operator's Pods alone (no
# delete-and-recreate loop), this one shows the other half of the rule in README "Controllers"
# and docs/controllers.md: pin the field the operator reads, and its Pods are pinned as it
# creates them. It reuses the operator scenario's functions (widget_crd_yaml, widget_yaml,
# widget_operator...: run.sh sources every scenario file), with `replicas` added to the CRD's
# schema (else the apiserver would prune the patched field and the UPDATE would change nothing).
#
# The Widget entry is added for this scenario only and the original file put back at the end
# (pinhook re-reads its policy file every 2 s; `pinhook watch` and the Helm releases' pinhooks
# read the same file), and the widgets rules are removed again, also when the scenario fails
# (its EXIT trap). Operator logs: $RUN/cr (see the operator scenario).

CRW_RULE='{"apiGroups":["e2e.pinhook.dev"],"apiVersions":["*"],"operations":["CREATE","UPDATE"],"resources":["widgets"],"scope":"Namespaced"}'
CRW_DIR=""      # set by the scenario: its directory (the EXIT trap runs after the function returned)
CRW_OPERATOR="" # the stand-in operator's PID while it runs

crw_policy_entry() {
  printf 'customResources:\n  - group: e2e.pinhook.dev\n    kind: Widget\n    images: [/spec/image]\n'
}
# crw_policy_add: the Widget entry appended to pinhook's policy file, the original kept as
# $CRW_DIR/policy.yaml.orig
crw_policy_add() {
  if grep -q '^customResources:' "$RUN/policy.yaml"; then
    bad "$RUN/policy.yaml has customResources already (this scenario appends its own)"
    return 1
  fi
  cp "$RUN/policy.yaml" "$CRW_DIR/policy.yaml.orig"
  { cat "$CRW_DIR/policy.yaml.orig" && crw_policy_entry; } >"$CRW_DIR/policy.yaml" || return 1
  policy_write "$CRW_DIR/policy.yaml"
}
# crw_policy_restore: the original policy file back (nothing to do when it was not changed)
crw_policy_restore() {
  [[ -n $CRW_DIR && -s $CRW_DIR/policy.yaml.orig ]] || return 0
  policy_write "$CRW_DIR/policy.yaml.orig" && rm -f "$CRW_DIR/policy.yaml.orig"
}
# crw_rules: the name and rules of every webhook of pinhook's two configurations, one JSON line
crw_rules() {
  {
    K get mutatingwebhookconfiguration pinhook -o json
    K get validatingwebhookconfiguration pinhook -o json
  } | jq -cs '[.[].webhooks[] | {name, rules}]'
}
# crw_rules_add: the widgets rule appended to pin.pinhook.dev and validate.pinhook.dev (found by
# name; a JSON patch `test` of the name guards the index)
crw_rules_add() {
  local target kind name i
  for target in mutatingwebhookconfiguration/pin.pinhook.dev validatingwebhookconfiguration/validate.pinhook.dev; do
    kind=${target%%/*}
    name=${target#*/}
    i=$(K get "$kind" pinhook -o json | jq -e --arg n "$name" '[.webhooks[].name] | index($n)') ||
      { bad "no webhook $name in $kind pinhook"; return 1; }
    klog patch "$kind" pinhook --type=json -p "[{\"op\":\"test\",\"path\":\"/webhooks/$i/name\",\"value\":\"$name\"},
      {\"op\":\"add\",\"path\":\"/webhooks/$i/rules/-\",\"value\":$CRW_RULE}]" || return 1
  done
}
# crw_rules_remove: every widgets rule removed from pinhook's two webhook configurations
crw_rules_remove() {
  local kind i j found
  for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    # "webhook rule" indices, the last first (removing one shifts those after it)
    found=$(K get "$kind" pinhook -o json | jq -r '[.webhooks | to_entries[] | .key as $i
      | .value.rules | to_entries[] | select(.value.apiGroups == ["e2e.pinhook.dev"]
      and .value.resources == ["widgets"]) | "\($i) \(.key)"] | reverse | .[]') || return 1
    while read -r i j; do
      [[ -n $i ]] || continue
      klog patch "$kind" pinhook --type=json -p "[{\"op\":\"test\",\"path\":\"/webhooks/$i/rules/$j/resources/0\",\"value\":\"widgets\"},
        {\"op\":\"remove\",\"path\":\"/webhooks/$i/rules/$j\"}]" || return 1
    done <<<"$found"
  done
}
# crw_cleanup: whatever the scenario left running or changed (its EXIT trap)
crw_cleanup() {
  [[ -z $CRW_OPERATOR ]] || stop_pid "$CRW_OPERATOR" "widget operator" 5
  CRW_OPERATOR=""
  crw_rules_remove || log "  could not remove the widgets rules from pinhook's webhook configurations"
  crw_policy_restore || log "  could not restore $RUN/policy.yaml from $CRW_DIR/policy.yaml.orig"
}
# crw_setup NS IMAGE PIN: the CRD in $CRW_DIR/widget-crd.yaml applied and served in NS; then pinhook
# pins Widgets (the policy's customResources and the webhooks' rules, undone by crw_cleanup, the
# EXIT trap this sets): a dry-run Widget of IMAGE comes back PIN within 30 s
crw_setup() {
  klog apply -f "$CRW_DIR/widget-crd.yaml"
  klog wait --for=condition=Established crd/widgets.e2e.pinhook.dev --timeout=30s
  wait_until 30 "widgets served in $1" K -n "$1" get widgets ||
    { bad "the API does not serve widgets in $1"; return 1; }
  trap 'crw_cleanup' EXIT
  crw_policy_add
  crw_rules_add
  if ! wait_until 30 "a dry-run Widget pinned in $1" crw_dry_run_gives "$1" "$2" "$3"; then
    bad "a dry-run Widget in $1 is not pinned: spec.image '$(crw_dry_run_image "$1" "$2" || true)'; $(cat "$CRW_DIR/dry-run.err")"
    return 1
  fi
  ok "a dry-run Widget in $1 comes back pinned (policy reloaded, widgets rules in force)"
}
# crw_dry_run_image NS IMAGE: spec.image of a server-side dry-run Widget (what the webhooks make of it)
crw_dry_run_image() {
  widget_yaml probe "$2" | K -n "$1" create --dry-run=server -f - -o jsonpath='{.spec.image}' 2>"$CRW_DIR/dry-run.err"
}
crw_dry_run_gives() { [[ $(crw_dry_run_image "$1" "$2") == "$3" ]]; } # crw_dry_run_gives NS IMAGE EXPECTED
crw_has_pod() { (($(count "$1" pods "widget=$2") >= 1)); }            # crw_has_pod NS WIDGET
# crw_reviews LINES_BEFORE NS OPERATION: pinhook's summary lines of /mutate reviews of Widgets in
# NS since then (not dry-run)
crw_reviews() {
  log_since "$1" | grep -F ': review endpoint=mutate ' |
    grep -F " namespace=$2 kind=Widget operation=$3 dry_run=false " || true
}

scenario_custom_resource_pinned_where_operator_reads() {
  local ns=e2e-cr rc=0 secs=${E2E_OPERATOR_WATCH:-30} me=$BASHPID
  local img pin stored err code=0 n t0 left lines_before rules_before gen pod reviews
  CRW_DIR="$RUN/cr"
  img=$(image db 1.0)
  pin=$(pinned db 1.0)
  rm -rf "$CRW_DIR"
  mkdir -p "$CRW_DIR"
  e2e_ns "$ns"

  # the operator scenario's CRD, with spec.replicas in its schema
  widget_crd_yaml | sed 's/^\( *\)image: {type: string}$/&\n\1replicas: {type: integer}/' >"$CRW_DIR/widget-crd.yaml"
  grep -q 'replicas: {type: integer}' "$CRW_DIR/widget-crd.yaml" ||
    { bad "could not add spec.replicas to the Widget CRD (widget_crd_yaml changed?)"; return 1; }
  rules_before=$(crw_rules)
  crw_setup "$ns" "$img" "$pin" || return 1

  # the stand-in operator (operator-pods-checked-not-patched), bounded as there
  widget_operator "$ns" "$CRW_DIR" "$((secs + 30))" "$me" </dev/null >/dev/null 2>&1 3>&- &
  CRW_OPERATOR=$!
  log "  widget operator running (pid $CRW_OPERATOR; logs $CRW_DIR)"

  # (1) the Widget is stored pinned
  lines_before=$(log_lines)
  widget_yaml db "$img" >"$CRW_DIR/widget.yaml"
  klog -n "$ns" create -f "$CRW_DIR/widget.yaml"
  t0=$(date +%s)
  stored=$(jp "$ns" widget db '{.spec.image}')
  expect_eq "stored Widget db spec.image" "$stored" "$pin" || rc=1

  # (2) the operator's Pod carries the Widget's pinned image
  if wait_until 30 "the operator's Pod for Widget db" crw_has_pod "$ns" db; then
    pod=$(K -n "$ns" get pods -l widget=db -o jsonpath='{.items[0].metadata.name}')
    ok "the operator created Pod $pod $(($(date +%s) - t0)) s after the Widget"
    expect_eq "Pod $pod containers[0].image (the Widget's spec.image)" \
      "$(jp "$ns" pod "$pod" '{.spec.containers[0].image}')" "$stored" || rc=1
  else
    bad "the operator created no Pod for Widget db in 30 s" || rc=1
  fi

  # (3) a tag that does not exist: refused at CREATE, nothing stored
  err=$(widget_yaml missing "$(image db does-not-exist)" | K -n "$ns" create -f - 2>&1 >/dev/null) || code=$?
  log "  kubectl said: $err"
  if ((code == 0)); then bad "a Widget with a tag that does not exist was created" || rc=1; else ok "kubectl exit code $code"; fi
  expect_contains "kubectl stderr" "$err" 'admission webhook "pin.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr" "$err" 'tag does-not-exist not found' || rc=1
  expect_absent widget missing "$ns" || rc=1

  # (4) UPDATEs that leave spec.image alone leave it as it was
  gen=$(jp "$ns" widget db '{.metadata.generation}')
  klog -n "$ns" label widget db tier=backend
  expect_eq "Widget db spec.image after kubectl label" "$(jp "$ns" widget db '{.spec.image}')" "$stored" || rc=1
  klog -n "$ns" patch widget db --type=merge -p '{"spec":{"replicas":3}}'
  expect_eq "Widget db spec.replicas, generation, spec.image after a merge patch of spec.replicas" \
    "$(jp "$ns" widget db '{.spec.replicas} {.metadata.generation} {.spec.image}')" "3 $((gen + 1)) $stored" || rc=1
  reviews=$(crw_reviews "$lines_before" "$ns" UPDATE)
  if (($(grep -c . <<<"$reviews" || true) >= 2)); then
    ok "pinhook reviewed the UPDATEs of Widget db ($(grep -c . <<<"$reviews") /mutate reviews)"
  else
    bad "pinhook's log has $(grep -c . <<<"$reviews" || true) /mutate reviews of Widget UPDATEs in $ns, not 2: the rule is not in force?" || rc=1
  fi
  expect_eq "those reviews that pinned something or found a violation" \
    "$(grep -v '^$' <<<"$reviews" | grep -vEc ' pinned=0 .* violations=0( |$)' || true)" 0 || rc=1

  # the operator's watch: what it did within E2E_OPERATOR_WATCH s of the Widget
  left=$((t0 + secs - $(date +%s)))
  ((left <= 0)) || sleep "$left"
  touch "$CRW_DIR/stop"
  wait_until 10 "the widget operator to stop" widget_operators_gone "$CRW_OPERATOR" ||
    log "  the widget operator did not stop within 10 s of the stop file; killing it"
  stop_pid "$CRW_OPERATOR" "widget operator" 5
  CRW_OPERATOR=""
  n=$(widget_creations "$CRW_DIR/creations-$ns.log")
  log "  counts: operator pods created in $secs s: $n; Widgets stored: $(count "$ns" widgets); Pods stored: $(count "$ns" pods); /mutate reviews of Widgets in $ns: CREATE $(crw_reviews "$lines_before" "$ns" CREATE | grep -c . || true) UPDATE $(crw_reviews "$lines_before" "$ns" UPDATE | grep -c . || true) (stopped $(($(date +%s) - t0)) s after the Widget)"
  if ! expect_eq "Pods the operator created in $ns in $secs s" "$n" 1; then
    rc=1
    log "  deletions in $ns: $(grep -c ' deleting ' "$CRW_DIR/operator-$ns.log" || true); stored images of the Pods it created (count image): $(awk '{print $4}' "$CRW_DIR/creations-$ns.log" | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')"
  fi
  expect_eq "images of the Pods in $ns (count image)" "$(pod_images "$ns" widget=db)" "1 $pin" || rc=1
  expect_eq "the Pods' owner in $ns" \
    "$(K -n "$ns" get pods -l widget=db -o jsonpath='{.items[*].metadata.ownerReferences[0].kind}/{.items[*].metadata.ownerReferences[0].name}')" "Widget/db" || rc=1
  if grep -q 'failed' "$CRW_DIR/operator-$ns.log"; then
    log "  operator errors: $(grep -h 'failed\|rror' "$CRW_DIR/operator-$ns.log" | head -5 | tr '\n' ';')"
  fi

  # back as before: the policy (a dry-run Widget is left tag-only again), then the rules
  crw_policy_restore
  if wait_until 30 "a dry-run Widget left tag-only in $ns" crw_dry_run_gives "$ns" "$img" "$img"; then
    ok "policy restored: a dry-run Widget in $ns is left as written"
  else
    bad "after the policy was restored a dry-run Widget in $ns is not left as written: '$(crw_dry_run_image "$ns" "$img" || true)'" || rc=1
  fi
  crw_rules_remove
  expect_eq "pinhook's webhooks and their rules" "$(crw_rules)" "$rules_before" || rc=1
  trap - EXIT
  return "$rc"
}
