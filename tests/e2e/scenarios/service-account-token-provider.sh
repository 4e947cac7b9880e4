# shellcheck shell=bash
# title: credential provider with tokenAttributes (KEP-4412): the plugin gets a token of the Pod's ServiceAccount, checked by a real TokenReview; the chart's RBAC and audience policy
# order: 209
# kube: 1.32
# proves: Issue 47 item 4. A CredentialProviderConfig whose provider has tokenAttributes
#   (audience pinhook-e2e-registry, requireServiceAccount, cacheType ServiceAccount, one required
#   and one optional annotation) is accepted; pinhook, as its own ServiceAccount with the shipped
#   ClusterRole only, cannot get the token (serviceaccounts/token forbidden: the warning says so,
#   the Pod is not pinned; asked again at once, the failure is remembered); with the chart's nodeCredentialProviders.serviceAccountTokenAudiences
#   objects applied it can: the test plugin (examples/credential_provider.rs) checks the token it
#   is handed with a TokenReview for that audience on this apiserver, which authenticates it as
#   the Pod's ServiceAccount, gets the annotations named (not others), and the private image is
#   pinned with no pull secret. Again for the same account: the plugin is not run (cached per
#   account); another annotated account: run again; an account without the required annotation:
#   not run (silently, as kubelet). The chart's ValidatingAdmissionPolicy lets pinhook's identity
#   ask only for that audience, ten minutes at most, and not other users; no token is in
#   pinhook's log (at debug) or `pinhook check`'s output.

scenario_service_account_token_provider() {
  local rc=0 ns=e2e-sat dir="$RUN/sat" audience=pinhook-e2e-registry
  mkdir -p "$dir/bin"
  if [[ $PINHOOK_USER != system:serviceaccount:pinhook-system:pinhook ]]; then
    bad "needs pinhook's own ServiceAccount identity (E2E_PINHOOK_IDENTITY=serviceaccount), not $PINHOOK_USER"
    return 1
  fi
  e2e_ns "$ns"
  K -n "$ns" create serviceaccount builder >/dev/null
  K -n "$ns" annotate serviceaccount builder e2e.pinhook.dev/role=puller e2e.pinhook.dev/team=shop e2e.pinhook.dev/other=kept-back >/dev/null
  K -n "$ns" create serviceaccount builder-two >/dev/null
  K -n "$ns" annotate serviceaccount builder-two e2e.pinhook.dev/role=puller >/dev/null
  K -n "$ns" create serviceaccount stranger >/dev/null
  cp "$PROVIDER_BIN" "$dir/bin/e2e-sa-provider"
  cat >"$dir/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: e2e-sa-provider
    matchImages: ["$PRIVATE_HOST"]
    defaultCacheDuration: "5m"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    tokenAttributes:
      serviceAccountTokenAudience: $audience
      requireServiceAccount: true
      cacheType: ServiceAccount
      requiredServiceAccountAnnotationKeys: [e2e.pinhook.dev/role]
      optionalServiceAccountAnnotationKeys: [e2e.pinhook.dev/team]
    env:
      - {name: PLUGIN_USERNAME, value: "$PRIVATE_USER"}
      - {name: PLUGIN_PASSWORD, value: "$PRIVATE_PASSWORD"}
      - {name: PLUGIN_COUNT_FILE, value: "$dir/runs"}
      - {name: PLUGIN_TOKEN_AUDIENCE, value: "$audience"}
      - {name: PLUGIN_TOKEN_USERS_FILE, value: "$dir/users"}
      - {name: PLUGIN_TOKEN_FILE, value: "$dir/tokens"}
      - {name: KUBECONFIG, value: "$KUBECONFIG"}
EOF
  local port
  port=$(free_port)
  # (at debug: a token must not show at any level)
  PINHOOK_LOG=debug PINHOOK_OUT="$dir/pinhook.log" start_pinhook sat "$port" "$CERT_DIR" "$RUN/policy.yaml" \
    --image-credential-provider-config "$dir/config.yaml" \
    --image-credential-provider-bin-dir "$dir/bin"
  local pid=$STARTED_PID

  # sat_check ACCOUNT: `pinhook check --server -o json` (the report carries the warnings) of a
  # Pod of the private image run as ACCOUNT (output in $dir/ACCOUNT.out, exit code echoed)
  sat_check() {
    cat >"$dir/$1.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: private-$1, namespace: $ns}
spec:
  serviceAccountName: $1
  containers:
    - name: app
      image: $PRIVATE_HOST/team/private:1.0
EOF
    local code=0
    "$PINHOOK_BIN" check --server "https://127.0.0.1:$port" --token-file "${E2E_PKI:-$E2E_WORK/pki}/admin.token" \
      --server-ca "$CERT_DIR/ca.crt" --require-digest -o json "$dir/$1.yaml" >"$dir/$1.out" 2>&1 || code=$?
    echo "$code"
  }
  runs() { if [[ -f $dir/runs ]]; then grep -c . "$dir/runs"; else echo 0; fi; }
  # shellcheck disable=SC2154 # (from the registry helper's env file, sourced by lib.sh)
  local want="$PRIVATE_HOST/team/private:1.0@$DIGEST_private_1_0" code

  # 1. The shipped ClusterRole has no serviceaccounts/token: no token, the plugin is not run.
  code=$(sat_check builder)
  if ((code != 0)) && grep -q "cannot get a token of serviceaccount $ns/builder" "$dir/builder.out" &&
    grep -qi "forbidden" "$dir/builder.out"; then
    ok "without the chart's token RBAC: not pinned, the warning says the token was forbidden"
  else
    bad "without token RBAC (exit $code): $(tail -n 5 "$dir/builder.out" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "plugin runs without a token" "$(runs)" 0 || rc=1
  # A failure to get the token stands for that account for 10 s, as a failed run does: no
  # TokenRequest bound to fail for every admission.
  code=$(sat_check builder)
  if ((code != 0)) && grep -q "failed for this registry within 10s: cannot get a token of serviceaccount $ns/builder" "$dir/builder.out"; then
    ok "asked again at once: the failure is remembered (not asked for again within 10 s)"
  else
    bad "asked again at once (exit $code): $(tail -n 5 "$dir/builder.out" | tr '\n' ' ')" || rc=1
  fi

  # 2. The chart's objects for nodeCredentialProviders.serviceAccountTokenAudiences.
  "${PINHOOK_HELM:-helm3}" template pinhook "$ROOT/charts/pinhook" -n pinhook-system \
    --kube-version "$(K version -o json | jq -r .serverVersion.gitVersion)" \
    --set nodeCredentialProviders.enabled=true --set "nodeCredentialProviders.serviceAccountTokenAudiences={$audience}" \
    -s templates/serviceaccount-tokens.yaml >"$dir/chart.yaml" || { bad "helm template"; return 1; }
  expect_eq "the chart's token objects" \
    "$(grep -E '^kind:' "$dir/chart.yaml" | tr '\n' ' ')" \
    "kind: ClusterRole kind: ClusterRoleBinding kind: ValidatingAdmissionPolicy kind: ValidatingAdmissionPolicyBinding " || rc=1
  klog apply -f "$dir/chart.yaml" || { bad "applying the chart's token objects"; return 1; }
  as_pinhook() { kubectl --kubeconfig "$PINHOOK_KUBECONFIG" "$@"; }
  # The policy is in force once a token for another audience is refused with its message.
  wrong_audience_refused() {
    local out
    out=$(as_pinhook -n "$ns" create token builder --audience=https://kubernetes.default.svc.cluster.local --duration=10m 2>&1) && return 1
    [[ $out == *"only for one of its credential providers' audiences"* ]]
  }
  if wait_until 60 "the token-audience policy in force" wrong_audience_refused; then
    ok "pinhook's identity asking a token for the apiserver's audience: refused by the chart's policy"
  else
    bad "the token-audience policy was not enforced" || rc=1
  fi
  local out
  if out=$(as_pinhook -n "$ns" create token builder --audience="$audience" --duration=10m 2>&1); then
    ok "pinhook's identity asking a 10-minute token for $audience: created"
  else
    bad "a token for $audience: $out" || rc=1
  fi
  out=$(as_pinhook -n "$ns" create token builder --audience="$audience" --duration=1h 2>&1) &&
    { bad "a 1-hour token was created for pinhook's identity" || rc=1; }
  expect_contains "a 1-hour token for pinhook's identity" "$out" "at most ten minutes" || rc=1
  if K -n "$ns" create token builder --audience=https://kubernetes.default.svc.cluster.local --duration=1h >/dev/null 2>&1; then
    ok "another user (admin) asking any audience: not matched by the policy"
  else
    bad "the policy refused the admin's token request" || rc=1
  fi

  # 3. With the token (once the remembered failure is over): the plugin checks it by
  # TokenReview and answers; the image is pinned.
  builder_pinned() { [[ $(sat_check builder) == 0 ]] && grep -qF "$want" "$dir/builder.out"; }
  if wait_until 30 "a Pod run as $ns/builder pinned" builder_pinned; then
    ok "a Pod run as $ns/builder: pinned with the plugin's credentials, no pull secret"
  else
    bad "with the token: $(tail -n 5 "$dir/builder.out" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "what the plugin's TokenReview authenticated, and the annotations it was handed" \
    "$(cat "$dir/users" 2>/dev/null)" \
    "system:serviceaccount:$ns:builder {\"e2e.pinhook.dev/role\":\"puller\",\"e2e.pinhook.dev/team\":\"shop\"}" || rc=1
  expect_eq "plugin runs" "$(runs)" 1 || rc=1
  code=$(sat_check builder)
  ((code == 0)) || { bad "builder again (exit $code)" || rc=1; }
  expect_eq "plugin runs for the same account again (cacheType ServiceAccount)" "$(runs)" 1 || rc=1
  code=$(sat_check builder-two)
  if ((code == 0)) && grep -qF "$want" "$dir/builder-two.out"; then
    ok "a Pod run as $ns/builder-two: pinned"
  else
    bad "builder-two (exit $code): $(tail -n 5 "$dir/builder-two.out" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "plugin runs after another account" "$(runs)" 2 || rc=1
  expect_eq "the second account authenticated" "$(tail -n 1 "$dir/users" | cut -d' ' -f1)" "system:serviceaccount:$ns:builder-two" || rc=1

  # 4. No required annotation: not run (silently, as kubelet), not pinned.
  code=$(sat_check stranger)
  if ((code != 0)) && grep -q "registry $PRIVATE_HOST refused the credentials" "$dir/stranger.out"; then
    ok "a Pod run as $ns/stranger (no e2e.pinhook.dev/role): the plugin not run, not pinned"
  else
    bad "stranger (exit $code): $(tail -n 5 "$dir/stranger.out" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "plugin runs after the unannotated account" "$(runs)" 2 || rc=1

  # 5. No token anywhere it must not be.
  local leaked=0 token
  while read -r token; do
    [[ -n $token ]] || continue
    grep -qF "$token" "$dir/pinhook.log" "$dir"/*.out && leaked=$((leaked + 1))
  done < <(cat "$dir/tokens" 2>/dev/null)
  expect_eq "tokens the plugin was handed" "$(grep -c . "$dir/tokens" 2>/dev/null || echo 0)" 2 || rc=1
  expect_eq "of them, found in pinhook's log (at debug) or check's output" "$leaked" 0 || rc=1
  expect_eq "pinhook log lines with the plugin's password" "$(grep -cF "$PRIVATE_PASSWORD" "$dir/pinhook.log" || true)" 0 || rc=1

  stop_pid "$pid" "pinhook (service-account token provider)" 10
  klog delete -f "$dir/chart.yaml" --ignore-not-found >/dev/null || true
  return "$rc"
}
