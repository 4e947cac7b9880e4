# shellcheck shell=bash disable=SC2317 # (it calls functions it defines inside itself indirectly)
# title: /v1/dry-run authenticated by the apiserver: 200/403/401, pinhook check --server
# order: 110
# kube: 1.20 1.32
# proves: `POST /v1/dry-run?namespace=e2e-k` (YAML, the Deployment of
#   deployment-init-container-pinned) with TokenRequest tokens, authenticated and authorized by the
#   apiserver (TokenReview, SubjectAccessReview): a ServiceAccount allowed to create deployments
#   gets 200, summary `{"objects":1,"pinned":3,...}`, mode enforce, no warnings, each image pinned
#   to the helper's exact digest, the object with the pinned images, and pinhook logs its user; one
#   that is not gets 403 naming what is missing; a garbage token and no token get 401 with pinhook's
#   messages, and 200 POSTs without a token in a row each read their 401, never a reset stream.
#   `pinhook check --server` on the same manifest: exit 0, a table row per container and the
#   summary line, `-o yaml` the three pinned references; with the second ServiceAccount's token
#   exit 2 and the 403. Nothing is stored.
#
# dry_run_post DIR/NAME TOKEN_FILE|- < MANIFEST: POST /v1/dry-run?namespace=e2e-k as YAML, with
# the token as bearer (- for none; read from a header file so it never is on a command line);
# body to NAME.json, prints the HTTP status
dry_run_post() {
  local out=$1 token=$2
  local -a auth=()
  if [[ $token != - ]]; then
    printf 'Authorization: Bearer %s\n' "$(<"$token")" >"$out.header"
    auth=(-H "@$out.header")
  fi
  curl -sS --max-time 60 --cacert "$CERT_DIR/ca.crt" -o "$out.json" -w '%{http_code}' \
    -H 'Content-Type: application/yaml' "${auth[@]}" --data-binary @- \
    "$PINHOOK_URL/v1/dry-run?namespace=e2e-k"
}
scenario_dry_run_endpoint_apiserver_auth() {
  local ns=e2e-k rc=0 dir="$RUN/k" status c
  mkdir -p "$dir"
  e2e_ns "$ns"
  klog -n "$ns" apply -f - <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: ci}
automountServiceAccountToken: false
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: nobody}
automountServiceAccountToken: false
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: ci-deployer}
rules:
  - apiGroups: ["apps"]
    resources: ["deployments"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ci-deployer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ci-deployer}
subjects: [{kind: ServiceAccount, name: ci, namespace: $ns}]
EOF
  # RBAC reads roles through an informer: wait until the apiserver itself says yes
  can_i_ci() { [[ $(K auth can-i create deployments.apps -n "$ns" --as="system:serviceaccount:$ns:ci" 2>/dev/null) == yes ]]; }
  wait_until 15 "RBAC to let $ns:ci create deployments" can_i_ci || rc=1
  expect_eq "kubectl auth can-i create deployments.apps as $ns:nobody" \
    "$(K auth can-i create deployments.apps -n "$ns" --as="system:serviceaccount:$ns:nobody" 2>/dev/null || true)" no || rc=1
  (
    umask 077
    K -n "$ns" create token ci --duration=10m >"$dir/ci.token"
    K -n "$ns" create token nobody --duration=10m >"$dir/nobody.token"
    printf 'not-a-token-%s\n' "$RANDOM" >"$dir/garbage.token"
  )
  [[ -s $dir/ci.token && -s $dir/nobody.token ]] || { bad "kubectl create token gave no token"; return 1; }
  ok "kubectl create token (TokenRequest): $(wc -c <"$dir/ci.token") and $(wc -c <"$dir/nobody.token") bytes"
  deployment_yaml web >"$dir/deployment.yaml"

  # 1. ci may create deployments in e2e-k: 200, the three images pinned to the exact digests
  local lines_before
  lines_before=$(log_lines)
  status=$(dry_run_post "$dir/ci" "$dir/ci.token" <"$dir/deployment.yaml")
  expect_eq "POST /v1/dry-run with ci's token: HTTP status" "$status" 200 || { log "  body: $(head -c 2000 "$dir/ci.json")"; rc=1; }
  local q='.objects[0]'
  expect_eq "dry run: summary" "$(jq -c .summary "$dir/ci.json")" \
    '{"objects":1,"pinned":3,"unchanged":0,"exempt":0,"denied":0,"violation":0,"errors":0}' || rc=1
  expect_eq "dry run: object" "$(jq -r "$q | \"\(.apiVersion) \(.kind) \(.namespace)/\(.name) podBearing=\(.podBearing) mode=\(.mode) warnings=\(.warnings | length)\"" "$dir/ci.json")" \
    "apps/v1 Deployment $ns/web podBearing=true mode=enforce warnings=0" || rc=1
  # (the report lists containers before initContainers: compared sorted by container)
  expect_eq "dry run: images (container action result digest)" \
    "$(jq -r "$q.images[] | \"\(.container) \(.action) \(.result) \(.digest)\"" "$dir/ci.json" | sort | tr '\n' ';')" \
    "$(for c in app init sidecar; do printf '%s pinned %s %s;' "$c" "$(pinned "$c" 1.0)" "$(digest "$c" 1.0)"; done)" || rc=1
  expect_eq "dry run: the object as admission would store it (images)" \
    "$(jq -r "$q.object.spec.template.spec | [.initContainers[].image, .containers[].image] | join(\" \")" "$dir/ci.json")" \
    "$(pinned init 1.0) $(pinned app 1.0) $(pinned sidecar 1.0)" || rc=1
  expect_contains "pinhook log" "$(log_since "$lines_before" | grep 'dry run' || true)" "user=system:serviceaccount:$ns:ci" || rc=1

  # 2. nobody: authenticated, not allowed: 403 naming what is missing
  status=$(dry_run_post "$dir/nobody" "$dir/nobody.token" <"$dir/deployment.yaml")
  expect_eq "POST /v1/dry-run with nobody's token: HTTP status" "$status" 403 || rc=1
  expect_eq "POST /v1/dry-run with nobody's token: error" "$(jq -r .error "$dir/nobody.json")" \
    "system:serviceaccount:$ns:nobody may not: create deployments.apps in namespace $ns" || rc=1

  # 3. a token the apiserver does not know, and none at all: 401
  status=$(dry_run_post "$dir/garbage" "$dir/garbage.token" <"$dir/deployment.yaml")
  expect_eq "POST /v1/dry-run with a garbage token: HTTP status" "$status" 401 || rc=1
  expect_eq "POST /v1/dry-run with a garbage token: error" "$(jq -r .error "$dir/garbage.json")" "the bearer token is not valid" || rc=1
  status=$(dry_run_post "$dir/none" - <"$dir/deployment.yaml")
  expect_eq "POST /v1/dry-run without a token: HTTP status" "$status" 401 || rc=1
  expect_eq "POST /v1/dry-run without a token: error" "$(jq -r .error "$dir/none.json")" \
    "a bearer token is required (Authorization: Bearer <token>)" || rc=1
  # The 401 is answered before the body is wanted: a client still sending it must read the
  # 401, never a reset stream (curl 7.88 over HTTP/2 got "(92) Stream error in the HTTP/2
  # framing layer" for 10 of 500 while pinhook left the body unread)
  local i answers
  answers=$(for ((i = 0; i < 200; i++)); do
    curl -sS --max-time 10 --cacert "$CERT_DIR/ca.crt" -o /dev/null -w '%{http_code}\n' \
      -H 'Content-Type: application/yaml' --data-binary @"$dir/deployment.yaml" \
      "$PINHOOK_URL/v1/dry-run?namespace=e2e-k" 2>&1 || true
  done | sort | uniq -c | awk '{n = $1; $1 = ""; printf "%s×%s ", n, substr($0, 2)}')
  expect_eq "200 POSTs without a token: answers (count×answer)" "${answers% }" "200×401" || rc=1

  # 4. pinhook check --server: the same manifest on stdin, table and YAML output
  local code=0 out
  out=$("$PINHOOK_BIN" check --server "$PINHOOK_URL" --token-file "$dir/ci.token" --server-ca "$CERT_DIR/ca.crt" \
    -n "$ns" - <"$dir/deployment.yaml" 2>"$dir/check.err") || code=$?
  printf '%s\n' "$out" >"$dir/check.out"
  log "  pinhook check: exit $code; $(tail -n1 <<<"$out")"
  expect_eq "pinhook check --server (table): exit code" "$code" 0 || { log "  stderr: $(<"$dir/check.err")"; rc=1; }
  for c in init app sidecar; do # container name = repository name in deployment_yaml
    if grep -Eq "^Deployment/$ns/web +$c +pinned +$(image "$c" 1.0) +$(digest "$c" 1.0)\$" <<<"$out"; then
      ok "pinhook check table: $c pinned to $(digest "$c" 1.0)"
    else
      bad "pinhook check table has no row '$c pinned $(image "$c" 1.0) $(digest "$c" 1.0)': $out" || rc=1
    fi
  done
  expect_eq "pinhook check table: summary" "$(tail -n1 <<<"$out")" \
    "1 objects: 3 pinned, 0 unchanged, 0 exempt, 0 denied, 0 violations, 0 errors" || rc=1
  code=0
  out=$("$PINHOOK_BIN" check --server "$PINHOOK_URL" --token-file "$dir/ci.token" --server-ca "$CERT_DIR/ca.crt" \
    -n "$ns" -o yaml - <"$dir/deployment.yaml" 2>>"$dir/check.err") || code=$?
  expect_eq "pinhook check --server -o yaml: exit code" "$code" 0 || rc=1
  printf '%s\n' "$out" >"$dir/check.yaml"
  expect_eq "pinhook check -o yaml: images (sorted)" \
    "$(sed -n -E "s/^ *(- )?image: *['\"]?([^'\"]*)['\"]?\$/\2/p" <<<"$out" | sort | tr '\n' ' ')" \
    "$(printf '%s\n' "$(pinned init 1.0)" "$(pinned app 1.0)" "$(pinned sidecar 1.0)" | sort | tr '\n' ' ')" || rc=1
  code=0
  "$PINHOOK_BIN" check --server "$PINHOOK_URL" --token-file "$dir/nobody.token" --server-ca "$CERT_DIR/ca.crt" \
    -n "$ns" - <"$dir/deployment.yaml" >/dev/null 2>"$dir/check-nobody.err" || code=$?
  expect_eq "pinhook check --server with nobody's token: exit code" "$code" 2 || rc=1
  expect_contains "pinhook check with nobody's token: stderr" "$(<"$dir/check-nobody.err")" \
    "403 Forbidden: system:serviceaccount:$ns:nobody may not: create deployments.apps in namespace $ns" || rc=1

  # 5. nothing was stored
  expect_eq "deployments in $ns" "$(K -n "$ns" get deployments -o name | wc -l)" 0 || rc=1
  return "$rc"
}
