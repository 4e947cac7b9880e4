#!/usr/bin/env bash
# Records the AdmissionReviews of controller-made objects on the e2e cluster (kube-apiserver +
# kube-controller-manager 1.20.2, cluster.sh) into tests/fixtures/admissionreview/v1.20/:
#
#   replicaset-create-by-deployment-{mutate,validate}.json   the ReplicaSet the Deployment
#       controller creates (ownerReferences -> the Deployment, pod-template-hash label)
#   pod-create-by-replicaset-{mutate,validate}.json          the Pod the ReplicaSet
#       controller creates for it (ownerReferences -> that ReplicaSet)
#
# How: capture-webhook.py (records every body, allows everything, never patches) registered as
# a mutating and a validating webhook for CREATE of pods and replicasets in namespaces labelled
# pinhook.dev/capture=true; then `kubectl create -f` of the Deployment of
# v1.20/deployment-create-*.json (namespace `fixtures`, `deploy`, init + app container), with
# 1 replica instead of 2: one Pod, so its mutate and validate reviews are the same Pod's (a
# generateName Pod has no name in the mutate body to match them by). The images are written as registry.example/team/...:1.0 in the first place, so
# the files need no host substitution; they are re-indented by `jq .` (key order kept).
#
# Usage: tests/e2e/capture-fixtures.sh [OUT_DIR]   (default: tests/fixtures/admissionreview/v1.20)
# Needs: what cluster.sh needs, python3 (standard library), jq. Its own cluster in
# E2E_WORK (default /tmp/pinhook-e2e-capture), started and stopped here; free ports.
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
OUT="${1:-$ROOT/tests/fixtures/admissionreview/v1.20}"
export E2E_WORK="${E2E_WORK:-/tmp/pinhook-e2e-capture}"
CAP="$E2E_WORK/capture"

log() { printf '%s [capture] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }
free_port() {
  local p _
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    busy "$p" || { echo "$p"; return 0; }
  done
  return 1
}
for var in E2E_APISERVER_PORT E2E_ETCD_PORT E2E_ETCD_PEER_PORT E2E_KCM_PORT WEBHOOK_PORT; do
  [[ -n ${!var:-} ]] || printf -v "$var" '%s' "$(free_port)"
  export "${var?}"
done
command -v python3 >/dev/null || die "python3 not found"
command -v jq >/dev/null || die "jq not found"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY

# shellcheck source=tests/e2e/cluster.sh
source "$E2E_DIR/cluster.sh"
WEBHOOK_PID=""
cleanup() {
  [[ -n $WEBHOOK_PID ]] && kill -TERM "$WEBHOOK_PID" 2>/dev/null && wait "$WEBHOOK_PID" 2>/dev/null
  e2e_stop
}
trap cleanup EXIT
rm -rf "$CAP" "$E2E_WORK/pki"
mkdir -p "$CAP/reviews"
e2e_start || die "cluster did not start"
eval "$(e2e_env)"
export KUBECONFIG

e2e_cert "$CAP/tls" >/dev/null || die "cluster.sh cert failed"
python3 "$E2E_DIR/capture-webhook.py" "$WEBHOOK_PORT" "$CAP/tls/tls.crt" "$CAP/tls/tls.key" "$CAP/reviews" \
  2>"$CAP/webhook.log" &
WEBHOOK_PID=$!
for _ in $(seq 1 40); do
  [[ $(curl -s --max-time 1 --cacert "$CAP/tls/ca.crt" "https://127.0.0.1:$WEBHOOK_PORT/healthz") == ok ]] && break
  sleep 0.25
done
[[ $(curl -s --max-time 1 --cacert "$CAP/tls/ca.crt" "https://127.0.0.1:$WEBHOOK_PORT/healthz") == ok ]] ||
  die "capture webhook not up: $(cat "$CAP/webhook.log")"

webhook() { # webhook PATH: one webhook entry of the capture configurations
  cat <<EOF
  - name: capture.pinhook.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    matchPolicy: Equivalent
    timeoutSeconds: 10
    clientConfig:
      url: https://127.0.0.1:$WEBHOOK_PORT/$1
      caBundle: $(base64 -w0 <"$CAP/tls/ca.crt")
    namespaceSelector:
      matchLabels: {pinhook.dev/capture: "true"}
    rules:
      - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"], scope: Namespaced}
      - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["replicasets"], scope: Namespaced}
EOF
}
kubectl apply -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: capture}
webhooks:
$(webhook mutate)
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: capture}
webhooks:
$(webhook validate)
EOF
e2e_ns fixtures pinhook.dev/capture=true
sleep 2 # the apiserver picks up new webhook configurations through an informer

kubectl -n fixtures create -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: deploy
spec:
  replicas: 1
  selector:
    matchLabels: {app: deploy}
  template:
    metadata:
      labels: {app: deploy}
    spec:
      initContainers:
        - name: init
          image: registry.example/team/init:1.0
      containers:
        - name: app
          image: registry.example/team/app:1.0
EOF

# first_review PATH KIND: the first recorded review of KIND sent to PATH
first_review() { find "$CAP/reviews" -name "*-$1-$2-CREATE.json" | sort | head -n1; }
for _ in $(seq 1 60); do
  n=0
  for f in "mutate ReplicaSet" "validate ReplicaSet" "mutate Pod" "validate Pod"; do
    # shellcheck disable=SC2086 # PATH KIND
    [[ -n $(first_review $f) ]] && n=$((n + 1))
  done
  ((n == 4)) && break
  sleep 0.5
done
((n == 4)) || die "not all four reviews were recorded: $(ls "$CAP/reviews")"
sleep 1 # anything after these would be listed below (nothing is expected)
log "recorded: $(cd "$CAP/reviews" && ls | tr '\n' ' ')"

mkdir -p "$OUT"
jq . "$(first_review mutate ReplicaSet)" >"$OUT/replicaset-create-by-deployment-mutate.json"
jq . "$(first_review validate ReplicaSet)" >"$OUT/replicaset-create-by-deployment-validate.json"
jq . "$(first_review mutate Pod)" >"$OUT/pod-create-by-replicaset-mutate.json"
jq . "$(first_review validate Pod)" >"$OUT/pod-create-by-replicaset-validate.json"
for f in replicaset-create-by-deployment pod-create-by-replicaset; do
  for p in mutate validate; do
    jq -r --arg f "$f-$p" '"\($f): \(.request.kind.kind) \(.request.operation) user=\(.request.userInfo.username) owner=\(.request.object.metadata.ownerReferences[0] | "\(.kind)/\(.name) controller=\(.controller)") images=\([.request.object | (.spec.template.spec // .spec) | (.initContainers // [])[], .containers[] | .image] | join(","))"' \
      "$OUT/$f-$p.json" >&2
  done
done
log "wrote 4 files to $OUT"
