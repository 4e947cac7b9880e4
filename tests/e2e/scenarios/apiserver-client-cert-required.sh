# shellcheck shell=bash disable=SC2317 # (it calls functions it defines inside itself indirectly)
# title: --client-ca-file: only the apiserver's client certificate gets a review
# order: 115
# kube: 1.20 1.32
# proves: A third pinhook with `--client-ca-file` (the CA of the client certificate the
#   apiserver presents to webhooks through its AdmissionConfiguration kubeconfig, cluster.sh), its
#   own webhooks for namespaces labelled pinhook.dev/e2e-instance=mtls: a bare Pod with
#   `team/app:2.0` created through the real apiserver is stored pinned to the exact index digest;
#   curl to `/mutate` and `/validate` with no client certificate gets 403 and no AdmissionReview,
#   one with a certificate of another CA (the e2e CA) fails the TLS handshake, `/healthz` and
#   `/metrics` still answer 200 without one, and `pinhook_unauthenticated_reviews_total` is 2.
#   Its webhooks are deleted and it is stopped after, also on failure.
#
# mtls_curl PATH [CURL-ARGS...]: POST an AdmissionReview of a Pod to the mTLS pinhook; prints the
# HTTP status (000 when no answer), body in $MTLS_DIR/answer
mtls_curl() {
  local path=$1
  shift
  curl -sS --max-time 10 --cacert "$MTLS_DIR/ca.crt" -o "$MTLS_DIR/answer" -w '%{http_code}' \
    -H 'Content-Type: application/json' "$@" --data-binary @"$MTLS_DIR/review.json" \
    "https://127.0.0.1:$MTLS_PORT$path" 2>"$MTLS_DIR/curl.err" || true
}
mtls_cleanup() {
  K delete mutatingwebhookconfiguration pinhook-mtls --ignore-not-found >/dev/null 2>&1 || true
  K delete validatingwebhookconfiguration pinhook-mtls --ignore-not-found >/dev/null 2>&1 || true
  stop_pid "$MTLS_PID" pinhook-mtls 5
}
scenario_apiserver_client_cert_required() {
  local ns=e2e-mtls rc=0 status pki
  pki="${E2E_WORK:-/tmp/pinhook-e2e}/pki"
  MTLS_DIR="$RUN/mtls"
  [[ -s $pki/webhook-client-ca.crt ]] || { bad "no $pki/webhook-client-ca.crt: the apiserver was started without cluster.sh's admission configuration (restart it)"; return 1; }
  _e2e_cmdline_has "$(cat "${E2E_WORK:-/tmp/pinhook-e2e}/kube-apiserver.pid")" '--admission-control-config-file=' ||
    { bad "the running kube-apiserver has no --admission-control-config-file (started before cluster.sh had it: cluster.sh stop, then run again)"; return 1; }
  e2e_cert "$MTLS_DIR" >/dev/null || { bad "cluster.sh cert failed"; return 1; }
  pick_port MTLS_PORT "$(free_port)"
  MTLS_PID=""
  trap mtls_cleanup EXIT
  start_pinhook pinhook-mtls "$MTLS_PORT" "$MTLS_DIR" "$RUN/policy.yaml" \
    --client-ca-file "$pki/webhook-client-ca.crt" --shutdown-delay 0
  MTLS_PID=$STARTED_PID
  local webhooks='{apiVersion, kind, metadata: {name: "pinhook-mtls", labels: .metadata.labels},
    webhooks: [.webhooks[] | select(.name != "mirrors.pinhook.dev")
      | .clientConfig.url |= sub("^https://[^/]+"; $url)
      | .clientConfig.caBundle = $ca
      | .namespaceSelector = {matchLabels: {"pinhook.dev/e2e-instance": "mtls"}}]}'
  {
    K get mutatingwebhookconfiguration pinhook -o json
    K get validatingwebhookconfiguration pinhook -o json
  } | jq --arg url "https://127.0.0.1:$MTLS_PORT" --arg ca "$(base64 -w0 <"$MTLS_DIR/ca.crt")" "$webhooks" \
    >"$MTLS_DIR/webhooks.json" || { bad "cannot derive the pinhook-mtls webhook configurations"; return 1; }
  klog create -f "$MTLS_DIR/webhooks.json" || { bad "registering the pinhook-mtls webhooks failed"; return 1; }
  e2e_ns "$ns" pinhook.dev/ignore=true pinhook.dev/e2e-instance=mtls
  wait_effective "$ns"

  # Through the real apiserver, which presents its client certificate.
  klog -n "$ns" create -f - <<EOF2
apiVersion: v1
kind: Pod
metadata:
  name: bare
spec:
  containers:
    - name: app
      image: $(image app 2.0)
EOF2
  expect_eq "stored pod containers[0].image (reviewed by the mTLS pinhook)" \
    "$(jp "$ns" pod bare '{.spec.containers[0].image}')" "$(pinned app 2.0)" || rc=1

  # A caller inside the network, no client certificate.
  jq -n --arg image "$(image app 2.0)" --arg ns "$ns" '{apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
    request: {uid: "e2e-mtls-1", kind: {group: "", version: "v1", kind: "Pod"},
      resource: {group: "", version: "v1", resource: "pods"}, namespace: $ns, operation: "CREATE",
      userInfo: {username: "nosy"},
      object: {apiVersion: "v1", kind: "Pod", metadata: {name: "nosy", namespace: $ns},
        spec: {containers: [{name: "app", image: $image}]}}}}' >"$MTLS_DIR/review.json"
  local path
  for path in /mutate /validate; do
    status=$(mtls_curl "$path")
    expect_eq "curl $path without a client certificate: HTTP status" "$status" 403 ||
      { rc=1; log "  curl said: $(head -c 200 "$MTLS_DIR/curl.err")"; }
    if grep -q AdmissionReview "$MTLS_DIR/answer"; then bad "curl $path without a client certificate got a review: $(cat "$MTLS_DIR/answer")" || rc=1; fi
    if grep -q sha256 "$MTLS_DIR/answer"; then bad "curl $path without a client certificate learnt a digest" || rc=1; fi
  done
  # A certificate of another CA (the e2e CA: it signs the apiserver's own serving certificate).
  _e2e_sign_cert "$MTLS_DIR/stranger" kube-apiserver "DNS:localhost" || { bad "cannot sign the stranger's certificate"; return 1; }
  status=$(mtls_curl /mutate --cert "$MTLS_DIR/stranger.crt" --key "$MTLS_DIR/stranger.key")
  expect_eq "curl /mutate with a certificate of another CA: HTTP status (no TLS connection)" "$status" 000 || rc=1
  log "  curl said: $(head -c 200 "$MTLS_DIR/curl.err")"
  # Probes and metrics need no certificate.
  for path in /healthz /metrics; do
    status=$(curl -s --max-time 5 --cacert "$MTLS_DIR/ca.crt" -o "$MTLS_DIR/get" -w '%{http_code}' "https://127.0.0.1:$MTLS_PORT$path" || true)
    expect_eq "GET $path without a client certificate: HTTP status" "$status" 200 || rc=1
  done
  expect_eq "pinhook_unauthenticated_reviews_total" \
    "$(grep -E '^pinhook_unauthenticated_reviews_total ' "$MTLS_DIR/get" | awk '{print $2}')" 2 || rc=1
  return "$rc"
}
