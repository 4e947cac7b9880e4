# shellcheck shell=bash
# title: on a real node, the watch verifies running digests again against the policy in force: a key rotated out makes a running image unverified
# order: 926
# needs: node
# proves: (issue 46, item 4) `team/node-resign:1.0` is pushed (one linux/amd64 manifest of
#   node/pause.c) and the registry helper signs its digest with its key (cosign's tag scheme).
#   The policy gets a `verify` entry covering `team/node-resign` with that key as a file, and
#   pinhook and the watch reload it. A Deployment of the tag in an enforce namespace is stored
#   pinned to the digest verified and runs on the node; within two rechecks the namespace's
#   PolicyReport says `pinned-current` for it and no `signed` result. Then the entry's key is
#   replaced by another (a fresh P-256 key: the signing key rotated out). Within two rechecks of
#   the watch reloading it, with the Pod still running: a `signed` fail result with state
#   `unverified` naming `verify[0]` and `signed by another key`, a PinnedDigestUnverified Event
#   on the Deployment, and `pinhook_running_images{state="unverified"}` 1 on the watch. The
#   policy is restored at the end.

RESIGN_DIR="" # set by the scenario (its EXIT trap runs after the function returned)
resign_restore() {
  [[ -n $RESIGN_DIR && -s $RESIGN_DIR/policy.yaml.orig ]] || return 0
  policy_write "$RESIGN_DIR/policy.yaml.orig" && rm -f "$RESIGN_DIR/policy.yaml.orig"
}
# resign_policy KEY_FILE: the original policy with a verify entry for team/node-resign by KEY_FILE
resign_policy() {
  cat "$RESIGN_DIR/policy.yaml.orig"
  printf 'verify:\n  - images: ["%s/team/node-resign:*"]\n' "$REGISTRY_HOST"
  printf '    keys:\n      - file: %s\n' "$1"
}
scenario_node_watch_reverifies_running_signatures() {
  local ns=e2e-node-resign rc=0 d out lines port watch_log
  RESIGN_DIR="$RUN/resign"
  mkdir -p "$RESIGN_DIR"
  trap 'resign_restore' EXIT
  [[ -s ${SIGNING_KEY:-} ]] || { bad "the registry helper wrote no SIGNING_KEY"; return 1; }
  if grep -q '^verify:' "$RUN/policy.yaml"; then
    bad "$RUN/policy.yaml has a verify list already (this scenario appends its own)"
    return 1
  fi
  watch_ensure || return 1
  port=$(watch_any_port) || { bad "no watch replica runs"; return 1; }
  # the log of the replica that runs (after watch-lease-takeover, replica 0's is a dead one's)
  watch_log="$WATCH_DIR/watch-0.log"
  watch_running 0 || watch_log="$WATCH_DIR/watch-1.log"

  # An image of its own, signed by the helper's key.
  node_oci_image "$RUN/oci-node-resign" "$RUN/pause" "node-resign:1.0" || return 1
  d=$(node_push_image "$RUN/oci-node-resign" "$REGISTRY_HOST" team/node-resign 1.0 "$REGISTRY_CA") ||
    { bad "pushing team/node-resign:1.0 failed"; return 1; }
  out=$(mktemp -u "$RUN/sign.XXXXXX")
  printf 'sign team/node-resign %s %s\n' "$d" "$out" >&3
  wait_until 30 "the registry helper's answer to sign node-resign:1.0" test -s "$out" || return 1
  [[ $(<"$out") == ok ]] || { bad "registry helper: $(<"$out")"; return 1; }

  # The policy: node-resign must be signed by the helper's key.
  cp "$RUN/policy.yaml" "$RESIGN_DIR/policy.yaml.orig"
  resign_policy "$SIGNING_KEY" >"$RESIGN_DIR/signed.yaml"
  lines=$(log_lines)
  local watch_lines
  watch_lines=$(wc -l <"$watch_log")
  policy_write "$RESIGN_DIR/signed.yaml"
  wait_until 20 "pinhook reloaded the policy with the verify entry" policy_reloaded "$lines" ||
    { bad "pinhook did not reload the policy"; return 1; }
  wait_until 20 "the watch reloaded the policy with the verify entry" \
    watch_reloaded "$watch_log" "$watch_lines" || { bad "the watch did not reload the policy"; return 1; }

  # A Deployment of the signed tag: pinned to the digest verified, running, reported current.
  e2e_ns "$ns" pinhook.dev/mode=enforce
  app_deployment resign 1 "$REGISTRY_HOST/team/node-resign:1.0" node >"$RESIGN_DIR/deployment.yaml"
  klog -n "$ns" create -f "$RESIGN_DIR/deployment.yaml" || { bad "kubectl create of the Deployment failed"; return 1; }
  expect_eq "the Deployment's template image (pinned)" "$(template_images "$ns" deployment resign)" \
    "$REGISTRY_HOST/team/node-resign:1.0@$d" || rc=1
  wait_pods_running "$ns" app=resign 1 90 || return 1
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $ns to say pinned-current" \
    report_says "$ns" '.results[] | select(.properties.state == "pinned-current")' || rc=1
  expect_eq "signed results before the rotation" \
    "$(report_json "$ns" | jq -c '[.results[] | select(.rule == "signed")]')" "[]" || rc=1

  # The key rotated out: the entry now names another key.
  openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl ec -pubout -out "$RESIGN_DIR/rotated.pub" 2>/dev/null ||
    { bad "openssl could not make a P-256 key"; return 1; }
  resign_policy "$RESIGN_DIR/rotated.pub" >"$RESIGN_DIR/rotated.yaml"
  watch_lines=$(wc -l <"$watch_log")
  policy_write "$RESIGN_DIR/rotated.yaml"
  wait_until 20 "the watch reloaded the policy with the rotated key" \
    watch_reloaded "$watch_log" "$watch_lines" || { bad "the watch did not reload the policy"; return 1; }
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $ns to say unverified (two rechecks)" \
    report_says "$ns" '.results[] | select(.rule == "signed" and .result == "fail")' || rc=1
  expect_eq "the signed result" \
    "$(report_json "$ns" | jq -c '[.results[] | select(.rule == "signed") | {result, state: .properties.state, kind: .resources[0].kind, name: .resources[0].name}]')" \
    '[{"result":"fail","state":"unverified","kind":"Deployment","name":"resign"}]' || rc=1
  expect_contains "the signed result's message" \
    "$(report_json "$ns" | jq -r '.results[] | select(.rule == "signed") | .message')" \
    "verify[0]: signed by another key" || rc=1
  wait_until 10 "a PinnedDigestUnverified Event on Deployment resign" \
    events_at_least "$ns" Deployment resign PinnedDigestUnverified 1 || rc=1
  expect_eq "pinhook_running_images{state=\"unverified\"}" \
    "$(watch_metric "$port" 'pinhook_running_images{state="unverified"}')" 1 || rc=1
  expect_eq "the Pod still runs (the watch reports, it does not evict)" \
    "$(K -n "$ns" get pods -l app=resign -o jsonpath='{.items[*].status.phase}')" Running || rc=1
  wrw_show "$ns" signed PinnedDigestUnverified

  resign_restore || { bad "could not restore $RUN/policy.yaml"; rc=1; }
  return "$rc"
}
# watch_reloaded LOG LINES: the watch logged a policy reload after its first LINES lines
watch_reloaded() { tail -n "+$(($2 + 1))" "$1" | grep -q 'reloaded policy'; }
