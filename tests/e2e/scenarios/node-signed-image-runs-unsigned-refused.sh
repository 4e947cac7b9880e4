# shellcheck shell=bash
# title: on a real node, a Deployment of a signed image runs its verified digest; an unsigned one is refused naming why; pinhook check agrees
# order: 906
# needs: node
# proves: The registry helper signs `team/node-app:1.0`'s index digest with its key (cosign's tag
#   scheme, `sign`); pinhook's policy gets a `verify` entry covering `team/node-app` and
#   `team/node-web` with that key as a file (`keys[].file`, as a mounted Secret gives it), and
#   reloads it. A Deployment of `node-app:1.0` is stored pinned to the digest verified, and its
#   Pod runs on the node with that imageID; a Deployment of `node-web:1.0` (not signed) is refused
#   by pin.pinhook.dev with `not verified: verify[0]: no signature found for sha256:…` and not
#   stored; a Pod naming `node-web` by a digest written by hand is refused for the same reason.
#   `pinhook check` with the same policy on both Deployments gives the same verdicts (exit 1:
#   node-app `signed by key`, node-web denied, the same reason). The policy is restored at the
#   end (issue 46).

SIG_DIR="" # set by the scenario (its EXIT trap runs after the function returned)
sig_restore() {
  [[ -n $SIG_DIR && -s $SIG_DIR/policy.yaml.orig ]] || return 0
  policy_write "$SIG_DIR/policy.yaml.orig" && rm -f "$SIG_DIR/policy.yaml.orig"
}
# sign_image REPO TAG: the helper signs that image's index digest (its `sign` command)
sign_image() {
  local out
  out=$(mktemp -u "$RUN/sign.XXXXXX")
  printf 'sign team/%s %s %s\n' "$1" "$(digest "$1" "$2")" "$out" >&3
  wait_until 30 "the registry helper's answer to sign $1:$2" test -s "$out" || return 1
  [[ $(<"$out") == ok ]] || { log "registry helper: $(<"$out")"; return 1; }
}
scenario_node_signed_image_runs_unsigned_refused() {
  local ns=e2e-node-signed rc=0 lines rs ids code out
  SIG_DIR="$RUN/signed"
  mkdir -p "$SIG_DIR"
  trap 'sig_restore' EXIT
  [[ -s ${SIGNING_KEY:-} ]] || { bad "the registry helper wrote no SIGNING_KEY"; return 1; }
  sign_image node-app 1.0 || { bad "the registry helper could not sign node-app:1.0"; return 1; }
  if grep -q '^verify:' "$RUN/policy.yaml"; then
    bad "$RUN/policy.yaml has a verify list already (this scenario appends its own)"
    return 1
  fi
  cp "$RUN/policy.yaml" "$SIG_DIR/policy.yaml.orig"
  {
    cat "$SIG_DIR/policy.yaml.orig"
    printf 'verify:\n  - images: ["%s/team/node-app:*", "%s/team/node-web:*"]\n' "$REGISTRY_HOST" "$REGISTRY_HOST"
    printf '    keys:\n      - file: %s\n' "$SIGNING_KEY"
  } >"$SIG_DIR/policy.yaml"
  lines=$(log_lines)
  policy_write "$SIG_DIR/policy.yaml"
  wait_until 20 "pinhook reloaded the policy with the verify entry" policy_reloaded "$lines" ||
    { bad "pinhook did not reload the policy"; return 1; }
  e2e_ns "$ns"

  # The signed image: stored pinned to the digest verified, and it runs.
  app_deployment signed 1 "$(image node-app 1.0)" node >"$SIG_DIR/signed.yaml"
  kubectl_to "$SIG_DIR/signed" -n "$ns" create -f "$SIG_DIR/signed.yaml"
  expect_eq "kubectl create of the signed Deployment: exit code" "$KCODE" 0 || { log "  $KERR"; rc=1; }
  expect_eq "the signed Deployment's template image" "$(template_images "$ns" deployment signed)" \
    "$(pinned node-app 1.0)" || rc=1
  wait_pods_running "$ns" app=signed 1 90 || rc=1
  rs=$(current_rs "$ns" signed)
  expect_eq "ReplicaSet $rs template image" "$(template_images "$ns" rs "$rs")" "$(pinned node-app 1.0)" || rc=1
  ids=$(K -n "$ns" get pods -l app=signed -o jsonpath='{range .items[*]}{.status.containerStatuses[*].imageID}{" "}{end}')
  expect_eq "the signed Pod's imageID" "$ids" "$REGISTRY_HOST/team/node-app@$(digest node-app 1.0) " || rc=1

  # The unsigned image: refused, naming the entry and why; nothing stored.
  app_deployment unsigned 1 "$(image node-web 1.0)" node >"$SIG_DIR/unsigned.yaml"
  kubectl_to "$SIG_DIR/unsigned" -n "$ns" create -f "$SIG_DIR/unsigned.yaml"
  expect_eq "kubectl create of the unsigned Deployment: exit code" "$KCODE" 1 || rc=1
  expect_contains "kubectl stderr (unsigned)" "$KERR" 'admission webhook "pin.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr (unsigned)" "$KERR" "not verified: verify[0]: no signature found for sha256:" || rc=1
  expect_absent deployment unsigned "$ns" || rc=1
  # A digest written by hand is verified as well.
  kubectl_to "$SIG_DIR/by-hand" -n "$ns" run by-hand --restart=Never \
    --image="$REGISTRY_HOST/team/node-web@$(digest node-web 1.0)"
  expect_eq "kubectl run of the unsigned digest written by hand: exit code" "$KCODE" 1 || rc=1
  expect_contains "kubectl stderr (by hand)" "$KERR" "not verified: verify[0]: no signature found" || rc=1
  expect_absent pod by-hand "$ns" || rc=1

  # pinhook check, as CI runs it, with the same policy: the same verdicts.
  code=0
  out=$("$PINHOOK_BIN" check --policy "$SIG_DIR/policy.yaml" --registry-ca "$REGISTRY_CA" -o json \
    "$SIG_DIR/signed.yaml" "$SIG_DIR/unsigned.yaml" 2>"$SIG_DIR/check.err") || code=$?
  expect_eq "pinhook check exit code" "$code" 1 || rc=1
  expect_contains "pinhook check on the signed Deployment" \
    "$(jq -r '.objects[] | select(.name == "signed") | .images[0] | "\(.action) \(.signature)"' <<<"$out")" \
    "pinned verify[0]: signed by key sha256:" || rc=1
  expect_contains "pinhook check on the unsigned Deployment" \
    "$(jq -r '.objects[] | select(.name == "unsigned") | .images[0] | "\(.action) \(.reason)"' <<<"$out")" \
    "denied not verified: verify[0]: no signature found for sha256:" || rc=1

  sig_restore || { bad "could not restore $RUN/policy.yaml"; rc=1; }
  return "$rc"
}
