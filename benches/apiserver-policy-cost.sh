#!/usr/bin/env bash
# What the chart's ValidatingAdmissionPolicy costs a Pod create in the apiserver (issue 47): the
# policy's CEL, evaluated by the apiserver on every Pod write of the namespaces it binds.
#
#   KUBEBUILDER_ASSETS=DIR benches/apiserver-policy-cost.sh [ROUNDS] [N]   (default 3 rounds of 300)
#
# Starts, with its own E2E_WORK (default /tmp/e2e-vap-cost) and free ports, the e2e tier's control
# plane on the kube-apiserver of KUBEBUILDER_ASSETS (1.30+; the controller manager stopped once
# up) and the registry helper (its images' digests), registers no webhook at all, and applies the
# policy and binding `helm template` renders (charts/pinhook, `policy.mode: enforce`, three exempt
# image globs and one exempt namespace glob, so that the exemption is worked out). Then, in each
# round and for 1 and 10 containers, the load generator (examples/e2e_admission.rs, release, its
# own process) makes N server-side dry-run Pod creates one at a time, every image
# `name:tag@sha256:…` (admitted by the policy after its whole work: the mode, the exemptions, every
# image read), each one of a pair with the same create in a namespace labelled
# pinhook.dev/ignore=true, which the binding leaves out (the floor), the pair rotating which goes
# first; and with the same create in a second such namespace (floor-2: the floor's own noise) and
# in one bound only to a policy of the same match whose validation is `true` (constant: what any
# policy costs before its own CEL), the four rotating. Prints per cell the p50 / p99 of each and
# the apiserver's CPU time per set, and the median over rounds of each arm's added p50 and p99
# over the floor. E2E_VAP_CONSTANT=EXPR (a YAML scalar) puts another validation in the constant
# policy, to price one expression alone. Everything on 127.0.0.1, bounded in creates (ROUNDS x 2 x 4 x (N + 10)) and each
# create by a 30 s client timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
E2E_DIR="$ROOT/tests/e2e"
rounds=${1:-3}
n=${2:-300}
((rounds >= 1 && rounds <= 20)) || { echo "ROUNDS must be 1-20" >&2; exit 2; }
((n >= 1 && n <= 2000)) || { echo "N must be 1-2000" >&2; exit 2; }
[[ -x ${KUBEBUILDER_ASSETS:-}/kube-apiserver && -x ${KUBEBUILDER_ASSETS:-}/kube-controller-manager ]] ||
  { echo "KUBEBUILDER_ASSETS must name a directory with kube-apiserver and kube-controller-manager 1.30+" >&2; exit 2; }
export KUBE_APISERVER=$KUBEBUILDER_ASSETS/kube-apiserver
export KUBE_CONTROLLER_MANAGER=$KUBEBUILDER_ASSETS/kube-controller-manager
export E2E_WORK="${E2E_WORK:-/tmp/e2e-vap-cost}"
RUN="$E2E_WORK/run"
# (lib.sh's teardown reads these)
# shellcheck disable=SC2034
PINHOOK_PID=""
# shellcheck disable=SC2034
PODS_PINHOOK_PID=""
# shellcheck disable=SC2034
REGISTRY_PID=""
# shellcheck disable=SC2034
CLUSTER_STARTED=0
# shellcheck disable=SC2034
NODE_STARTED=0
# shellcheck source=tests/e2e/lib.sh
source "$E2E_DIR/lib.sh"
for tool in kubectl jq curl ss openssl docker-registry "${PINHOOK_HELM:-helm3}"; do
  command -v "$tool" >/dev/null || { echo "$tool not found (scripts/install-test-deps.sh, scripts/install-helm.sh)" >&2; exit 2; }
done
log "cargo build --release (examples e2e_registry, e2e_admission)"
cargo build --release --quiet --example e2e_registry --example e2e_admission
target=${CARGO_TARGET_DIR:-$ROOT/target}/release
E2E_REGISTRY_BIN=$target/examples/e2e_registry
client_bin=$target/examples/e2e_admission
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
for var in E2E_APISERVER_PORT E2E_ETCD_PORT E2E_ETCD_PEER_PORT E2E_KCM_PORT; do
  [[ -n ${!var:-} ]] || pick_port "$var" "$(free_port)"
done
# shellcheck disable=SC2317 # (called by the trap)
finish() {
  local rc=$?
  trap - EXIT INT TERM
  ((rc == 0)) || log "failed (exit $rc); logs in $E2E_WORK and $RUN"
  e2e_teardown "$((rc != 0))" || true
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

e2e_setup_cluster
_e2e_kill kube-controller-manager
e2e_setup_registry
apiserver_policy_yaml "  mode: enforce
  exempt:
    namespaces: [\"vap-exempt-*\"]
    images: [\"registry.k8s.io/*\", \"docker.io/library/busybox:*\", \"$REGISTRY_HOST/exempt/*\"]" >"$RUN/vap.yaml"
K apply -f "$RUN/vap.yaml" >/dev/null || die "the apiserver refused the chart's ValidatingAdmissionPolicy"
e2e_ns vap-bound || die "cannot create namespace vap-bound"
e2e_ns vap-floor pinhook.dev/ignore=true || die "cannot create namespace vap-floor"
e2e_ns vap-floor-2 pinhook.dev/ignore=true || die "cannot create namespace vap-floor-2"
e2e_ns vap-constant pinhook.dev/ignore=true cost.pinhook.dev/vap=constant || die "cannot create namespace vap-constant"
# What any policy costs before its own CEL: one of the same match, whose validation is `true`.
K apply -f - >/dev/null <<EOF || die "the apiserver refused the constant policy"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: cost-constant}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods, pods/ephemeralcontainers]}
  validations:
    - expression: ${E2E_VAP_CONSTANT:-"\"true\""}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: cost-constant}
spec:
  policyName: cost-constant
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {cost.pinhook.dev/vap: constant}}
EOF
apiserver_pid=$(<"$E2E_WORK/kube-apiserver.pid")
hz=$(getconf CLK_TCK)
refs=(app:1.0 app:2.0 db:1.0 cron:1.0 init:1.0 sidecar:1.0 agent:1.0 job:1.0 roll:1.0 drift:1.0)
images=$(for r in "${refs[@]}"; do printf '%s,' "$(pinned "${r%%:*}" "${r#*:}")"; done)
images=${images%,}
client() { # client LABEL IMAGES COUNT WARMUP: pairs of dry-run creates, bound and floor
  "$client_bin" --server "$E2E_APISERVER_URL" --token-file "$E2E_WORK/pki/admin.token" \
    --ca "$E2E_CA_CERT" --ca "$REGISTRY_CA" --namespace vap-bound --label "$1" --expect pinned \
    --clk-tck "$hz" --dry-run --images "$2" --count "$3" --warmup "$4" --warm-images "$images" \
    --paired-namespace vap-floor=pinned --paired-namespace vap-floor-2=pinned \
    --paired-namespace vap-constant=pinned --cpu "apiserver=$apiserver_pid"
}
# The policy is in force: a Pod of a tag in vap-bound is refused by it.
refused() {
  local out
  out=$(printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: probe}\nspec:\n  containers: [{name: a, image: "%s"}]\n' \
    "$(image app 1.0)" | K -n vap-bound create --dry-run=server -f - 2>&1) && return 1
  [[ $out == *ValidatingAdmissionPolicy* ]]
}
wait_until 30 "the policy to be in force" refused || die "the policy is not in force"

printf '%-6s %-6s %-16s %-16s %-16s %-16s %s\n' round images "bound p50/p99" "floor" "floor-2" "constant" \
  "apiserver µs/set" >"$RUN/cells.txt"
for ((r = 1; r <= rounds; r++)); do
  for k in 1 10; do
    # bound: n p50 p99 max mean, the apiserver's CPU per set, then each paired namespace's
    # n p50 p99 max mean (floor, floor-2, constant)
    read -r -a f < <(client "r$r-k$k" "$k" "$n" 10)
    printf '%-6s %-6s %-16s %-16s %-16s %-16s %s\n' "$r" "$k" "${f[1]}/${f[2]}" "${f[7]}/${f[8]}" \
      "${f[12]}/${f[13]}" "${f[17]}/${f[18]}" "${f[5]}" >>"$RUN/cells.txt"
    printf '%s %s %s %s %s %s %s %s %s\n' "$k" "${f[1]}" "${f[2]}" "${f[7]}" "${f[8]}" "${f[12]}" "${f[13]}" \
      "${f[17]}" "${f[18]}" >>"$RUN/raw.txt"
  done
done
cat "$RUN/cells.txt"
for k in 1 10; do
  awk -v k="$k" '$1 == k { m++; b50[m] = $2 - $4; b99[m] = $3 - $5; n50[m] = $6 - $4; n99[m] = $7 - $5
      c50[m] = $8 - $4; c99[m] = $9 - $5 }
    function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END { printf "%2d image(s), over the floor, median of %d rounds (ms, p50 / p99): pinhook policy %+.3f / %+.3f, constant policy %+.3f / %+.3f, floor-2 (noise) %+.3f / %+.3f\n",
      k, m, med(b50, m), med(b99, m), med(c50, m), med(c99, m), med(n50, m), med(n99, m) }' "$RUN/raw.txt"
done
