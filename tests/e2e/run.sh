#!/usr/bin/env bash
# shellcheck disable=SC2317 # (shellcheck counts functions in the { } block below as unreachable)
# pinhook's end-to-end tier: a real kube-apiserver (1.20.2) + etcd, a real
# registry, and the pinhook binary, all on 127.0.0.1; pinhook registered through
# manifests/overlays/local-url; scenarios create objects with kubectl and read
# back what the apiserver STORED.
#
# Usage: tests/e2e/run.sh [SCENARIO...]      (default: all; e.g. `run.sh a g h`)
#
# Scenarios (each in its own fresh namespace, see scenario_* below):
#   a  Deployment with an initContainer and a container: both pinned in the stored template
#   b  bare Pod: pinned
#   c  CronJob (batch/v1beta1): pinned at spec.jobTemplate.spec.template.spec
#   d  StatefulSet: pinned
#   e  `kubectl create --dry-run=server -o yaml`: the returned object is pinned, nothing stored
#   f  idempotency: sending the same tag-only manifest again (client-side apply,
#      kubectl diff, server-side apply, replace) goes through pinhook again, which
#      pins to the same digests: spec and generation never change; resourceVersion
#      stays too, except where the apiserver rewrites managedFields (server-side
#      apply; replace by a different field manager), asserted as such
#   g  a tag that does not exist is refused with pinhook's message
#   h  serving-certificate rotation under load: no request fails, the served cert changes
#
# The last line of stdout is always `N passed, M failed` (scenarios that did not
# run because set-up failed count as failed). Exit 0 only when M is 0.
#
# Environment:
#   E2E_WORK            cluster work dir (default /tmp/pinhook-e2e-run; see cluster.sh);
#                       this script's own files go to $E2E_WORK/run
#   E2E_APISERVER_PORT, E2E_ETCD_PORT, E2E_ETCD_PEER_PORT
#                       default 6443/2379/2380, or free random ports when those are taken
#   PINHOOK_PORT        pinhook's port (default: a free one)
#   KUBE_APISERVER      use this kube-apiserver binary (skips build-kube-apiserver.sh)
#   E2E_SKIP_BUILD=1    do not run cargo; use PINHOOK_BIN / E2E_REGISTRY_BIN (default
#                       target/debug/pinhook and target/debug/examples/e2e_registry)
#   E2E_KEEP=1          leave pinhook, the registry and the cluster running at the end
#                       (stop them yourself: kill the PIDs printed, cluster.sh stop)
set -euo pipefail

# The whole script is one { ... } block: bash parses it completely before running
# it, so editing this file while a run is in progress cannot derail that run.
{

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"

export E2E_WORK="${E2E_WORK:-/tmp/pinhook-e2e-run}"
RUN="$E2E_WORK/run"
ALL_SCENARIOS=(a b c d e f g h)
declare -A SCENARIO_TITLE=(
  [a]="Deployment: initContainer and container pinned in the stored template"
  [b]="bare Pod pinned"
  [c]="CronJob batch/v1beta1 pinned at spec.jobTemplate.spec.template.spec"
  [d]="StatefulSet pinned"
  [e]="create --dry-run=server returns the pinned object and stores nothing"
  [f]="re-applying the tag-only manifest leaves the stored object unchanged"
  [g]="a tag that does not exist is refused with pinhook's message"
  [h]="serving-certificate rotation under load: no failed request"
)

T_START=$(date +%s)
PASSED=0
FAILED=0
FAILED_NAMES=()
SCENARIOS_DONE=0
PINHOOK_PID=""
REGISTRY_PID=""
CLUSTER_STARTED=0

log() { printf '%s [e2e] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$*" | sed 's/\x1b\[[0-9;]*m//g' >&2; }
die() { log "ERROR: $*"; exit 1; }

# --- scenario selection ---------------------------------------------------------
SELECTED=()
if (($# > 0)); then
  for s in "$@"; do
    [[ -n ${SCENARIO_TITLE[$s]:-} ]] || { echo "unknown scenario '$s' (known: ${ALL_SCENARIOS[*]})" >&2; exit 2; }
    SELECTED+=("$s")
  done
else
  SELECTED=("${ALL_SCENARIOS[@]}")
fi

# --- helpers ----------------------------------------------------------------------
port_busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# free_port: a port nobody listens on (and not one we already handed out)
declare -A _TAKEN=()
free_port() {
  local p _
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    [[ -z ${_TAKEN[$p]:-} ]] && ! port_busy "$p" && { _TAKEN[$p]=1; echo "$p"; return 0; }
  done
  return 1
}

# pick_port VAR DEFAULT: keep $VAR if set, else DEFAULT if free, else a free port
pick_port() {
  local var=$1 def=$2
  if [[ -n ${!var:-} ]]; then _TAKEN[${!var}]=1; return 0; fi
  if port_busy "$def"; then
    printf -v "$var" '%s' "$(free_port)"
    log "port $def is taken; using ${!var} for $var"
  else
    printf -v "$var" '%s' "$def"
    _TAKEN[$def]=1
  fi
  export "${var?}"
}

# [WAIT_PID=PID] wait_until TIMEOUT_S DESCRIPTION CMD...: poll every 0.25 s; give up
# early when process WAIT_PID (if given) has exited
wait_until() {
  local timeout=$1 what=$2
  shift 2
  local deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    (($(date +%s) < deadline)) || { log "timed out after ${timeout}s waiting for $what"; return 1; }
    if [[ -n ${WAIT_PID:-} && ! -d /proc/$WAIT_PID ]]; then
      log "process $WAIT_PID exited while waiting for $what"
      return 1
    fi
    sleep 0.25
  done
}

alive() { [[ -n $1 && -d /proc/$1 ]]; }

# stop_pid PID NAME GRACE_S: SIGTERM, wait, SIGKILL
stop_pid() {
  local pid=$1 name=$2 grace=$3 i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 5; i++)); do
    alive "$pid" || break
    sleep 0.2
  done
  if alive "$pid"; then
    log "$name (pid $pid) still running ${grace}s after SIGTERM; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  log "stopped $name (pid $pid)"
}

tail_log() { # tail_log FILE [N]
  local f=$1 n=${2:-40}
  if [[ -s $f ]]; then
    printf '%s\n' "----- last $n lines of $f -----" >&2
    tail -n "$n" "$f" >&2
  fi
}

K() { kubectl --request-timeout=20s "$@"; }
# klog KUBECTL-ARGS...: run kubectl, log its output (stdout+stderr) line by line
klog() {
  local out rc=0 line
  out=$(K "$@" 2>&1) || rc=$?
  while IFS= read -r line; do [[ -n $line ]] && log "  kubectl: $line"; done <<<"$out"
  return "$rc"
}

# --- cleanup ------------------------------------------------------------------------
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  # everything selected that did not pass counts as failed (also: not run)
  local failed=$((${#SELECTED[@]} - PASSED))
  if ((SCENARIOS_DONE < ${#SELECTED[@]})); then
    log "stopped early (exit $rc): $((${#SELECTED[@]} - SCENARIOS_DONE)) scenario(s) not run"
  fi
  if ((rc != 0 || failed > 0)); then
    tail_log "$RUN/pinhook.log" 60
    tail_log "$RUN/registry-helper.log" 20
    tail_log "${REGISTRY_LOG:-}" 20
    tail_log "${REGISTRY_ACCESS_LOG:-}" 10
    tail_log "$E2E_WORK/kube-apiserver.log" 30
    tail_log "$E2E_WORK/etcd.log" 10
  fi
  if [[ ${E2E_KEEP:-0} == 1 ]]; then
    log "E2E_KEEP=1: leaving pinhook (pid ${PINHOOK_PID:-none}), registry helper (pid ${REGISTRY_PID:-none}) and the cluster running"
    log "  export KUBECONFIG=$E2E_WORK/kubeconfig; stop with: kill ${PINHOOK_PID:-} ${REGISTRY_PID:-}; E2E_WORK=$E2E_WORK $E2E_DIR/cluster.sh stop"
  else
    stop_pid "$PINHOOK_PID" pinhook 25
    stop_pid "$REGISTRY_PID" "registry helper" 10
    exec 3>&-
    ((CLUSTER_STARTED)) && e2e_stop
  fi
  log "total $(($(date +%s) - T_START))s"
  ((${#FAILED_NAMES[@]} == 0)) || log "failed: ${FAILED_NAMES[*]}"
  echo "$PASSED passed, $failed failed"
  ((failed == 0 && rc == 0)) || exit 1
  exit 0
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# --- 1. builds and dependencies -------------------------------------------------------
cd "$ROOT"
log "run dir $RUN; scenarios: ${SELECTED[*]}"
t=$(date +%s)
if [[ -z ${KUBE_APISERVER:-} ]]; then
  KUBE_APISERVER=$("$E2E_DIR/build-kube-apiserver.sh" | tail -n1)
fi
export KUBE_APISERVER
[[ -x $KUBE_APISERVER ]] || die "no kube-apiserver binary ($KUBE_APISERVER)"
log "kube-apiserver: $KUBE_APISERVER ($(($(date +%s) - t))s)"

"$ROOT/scripts/install-test-deps.sh" || die "scripts/install-test-deps.sh failed"
for tool in kubectl openssl curl ss base64; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found"
done

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
PINHOOK_BIN="${PINHOOK_BIN:-$TARGET_DIR/debug/pinhook}"
E2E_REGISTRY_BIN="${E2E_REGISTRY_BIN:-$TARGET_DIR/debug/examples/e2e_registry}"
if [[ ${E2E_SKIP_BUILD:-0} != 1 ]]; then
  t=$(date +%s)
  log "cargo build --bin pinhook --example e2e_registry"
  cargo build --quiet --bin pinhook --example e2e_registry || die "cargo build failed"
  log "cargo build done ($(($(date +%s) - t))s)"
fi
[[ -x $PINHOOK_BIN ]] || die "no pinhook binary at $PINHOOK_BIN"
[[ -x $E2E_REGISTRY_BIN ]] || die "no e2e_registry binary at $E2E_REGISTRY_BIN"

# Everything below talks to 127.0.0.1 only: no proxy may see it.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost

# --- 2. cluster -------------------------------------------------------------------------
pick_port E2E_APISERVER_PORT 6443
pick_port E2E_ETCD_PORT 2379
pick_port E2E_ETCD_PEER_PORT 2380
# shellcheck source=tests/e2e/cluster.sh
source "$E2E_DIR/cluster.sh"
e2e_stop >/dev/null 2>&1 || true # a previous run's leftovers in this E2E_WORK
for leftover in "pinhook.pid:pinhook serve" "registry-helper.pid:e2e_registry"; do
  pidfile="$RUN/${leftover%%:*}"
  if [[ -s $pidfile ]] && pid=$(<"$pidfile") && [[ -d /proc/$pid ]] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "${leftover#*:}"; then
    log "stopping a previous run's ${leftover#*:} (pid $pid)"
    stop_pid "$pid" "${leftover#*:}" 25
  fi
done
rm -rf "$RUN" "$E2E_WORK/pki" # fresh CA, kubeconfig and run files every time
mkdir -p "$RUN"
CLUSTER_STARTED=1
e2e_start || die "cluster did not start"
eval "$(e2e_env)"
export KUBECONFIG

# --- 3. registry helper ---------------------------------------------------------------
# Its stdin is a FIFO held open (fd 3) by this script and its subshells, so it does
# not see EOF while they run; it also stops by itself within a second when this
# script dies without running the trap (SIGKILL): it watches its parent PID.
mkfifo "$RUN/registry.stdin"
exec 3<>"$RUN/registry.stdin"
t=$(date +%s)
if [[ ${E2E_KEEP:-0} == 1 ]]; then
  # keeps its own write end (inherited fd 3): it outlives this script
  "$E2E_REGISTRY_BIN" "$RUN/registry.env" <"$RUN/registry.stdin" >"$RUN/registry-helper.log" 2>&1 &
else
  "$E2E_REGISTRY_BIN" "$RUN/registry.env" <"$RUN/registry.stdin" >"$RUN/registry-helper.log" 2>&1 3>&- &
fi
REGISTRY_PID=$!
echo "$REGISTRY_PID" >"$RUN/registry-helper.pid"
log "registry helper started (pid $REGISTRY_PID, log $RUN/registry-helper.log)"
registry_env_ready() { alive "$REGISTRY_PID" && [[ -s $RUN/registry.env ]]; }
WAIT_PID=$REGISTRY_PID wait_until 60 "the registry helper's env file" registry_env_ready || die "registry helper did not come up"
# shellcheck disable=SC1091
source "$RUN/registry.env"
: "${REGISTRY_HOST:?}" "${REGISTRY_CA:?}" "${DIGEST_app_1_0:?}"
log "registry $REGISTRY_HOST ready with images pushed ($(($(date +%s) - t))s)"

pinned() { # pinned REPO TAG -> 127.0.0.1:PORT/team/REPO:TAG@sha256:...
  local var="DIGEST_${1//[^a-zA-Z0-9]/_}_${2//[^a-zA-Z0-9]/_}"
  printf '%s/team/%s:%s@%s' "$REGISTRY_HOST" "$1" "$2" "${!var:?no digest for $1:$2}"
}
image() { printf '%s/team/%s:%s' "$REGISTRY_HOST" "$1" "$2"; }

# --- 4. pinhook -----------------------------------------------------------------------
CERT_DIR="$RUN/pinhook-tls"
e2e_cert "$CERT_DIR" >/dev/null || die "cluster.sh cert failed"
pick_port PINHOOK_PORT "$(free_port)"
PINHOOK_URL="https://127.0.0.1:$PINHOOK_PORT"
# Enforce (deny what cannot be pinned; the shipped ConfigMap starts in audit),
# and let pinhook contact the loopback registry: its address guard refuses
# loopback/link-local/metadata hosts unless registries.allowPrivate names them.
cat >"$RUN/policy.yaml" <<EOF
mode: enforce
registries:
  allowPrivate: ["$REGISTRY_HOST"]
EOF
log "starting pinhook on $PINHOOK_URL (log $RUN/pinhook.log)"
NO_COLOR=1 PINHOOK_LOG="${PINHOOK_LOG:-info}" "$PINHOOK_BIN" serve \
  --listen "127.0.0.1:$PINHOOK_PORT" \
  --tls-cert "$CERT_DIR/tls.crt" --tls-key "$CERT_DIR/tls.key" \
  --registry-ca "$REGISTRY_CA" \
  --policy "$RUN/policy.yaml" \
  --kubeconfig "$KUBECONFIG" \
  </dev/null >"$RUN/pinhook.log" 2>&1 3>&- &
PINHOOK_PID=$!
echo "$PINHOOK_PID" >"$RUN/pinhook.pid"
pinhook_ready() {
  alive "$PINHOOK_PID" || return 1
  [[ $(curl -s --max-time 2 --cacert "$CERT_DIR/ca.crt" "$PINHOOK_URL/readyz") == ok* ]]
}
WAIT_PID=$PINHOOK_PID wait_until 30 "pinhook /readyz" pinhook_ready || die "pinhook not ready (pid $PINHOOK_PID)"
log "pinhook ready (pid $PINHOOK_PID)"

# --- 5. webhook configurations (the full local-url overlay) ----------------------------
K label ns kube-system pinhook.dev/ignore=true --overwrite >/dev/null
kubectl kustomize "$ROOT/manifests/overlays/local-url" \
  | sed -e "s|PINHOOK_URL_BASE|$PINHOOK_URL|g" \
    -e "s|PINHOOK_CA_BUNDLE|$(base64 -w0 <"$CERT_DIR/ca.crt")|g" \
    >"$RUN/manifests.yaml"
klog apply -f "$RUN/manifests.yaml" || die "applying manifests/overlays/local-url failed"

e2e_ns e2e-probe || die "cannot create namespace e2e-probe"
PROBE_EXPECTED=$(pinned app 1.0)
probe_pinned() {
  local out
  out=$(K -n e2e-probe run probe --image="$(image app 1.0)" --restart=Never \
    --dry-run=server -o jsonpath='{.spec.containers[0].image}' 2>"$RUN/probe.err") || return 1
  [[ $out == "$PROBE_EXPECTED" ]]
}
t=$(date +%s)
if ! wait_until 30 "the webhook to pin a dry-run pod" probe_pinned; then
  log "last probe error: $(cat "$RUN/probe.err" 2>/dev/null)"
  die "the webhook did not take effect"
fi
log "webhook effective ($(($(date +%s) - t))s after apply)"

# --- 6. scenarios ----------------------------------------------------------------------
# Assertions print one line each and return 1 on failure; scenarios run in a
# subshell with errexit on, so an unexpected failing command fails the scenario too.
ok() { log "  ok: $*"; }
bad() { log "  FAIL: $*"; return 1; }
expect_eq() { # expect_eq WHAT ACTUAL EXPECTED
  if [[ $2 == "$3" ]]; then ok "$1 = $2"; else bad "$1: got '$2', expected '$3'"; fi
}
expect_contains() { # expect_contains WHAT HAYSTACK NEEDLE
  if [[ $2 == *"$3"* ]]; then ok "$1 contains '$3'"; else bad "$1 does not contain '$3'; it is: $2"; fi
}
jp() { K -n "$1" get "$2" "$3" -o jsonpath="$4"; } # jp NS KIND NAME JSONPATH

deployment_yaml() { # deployment_yaml NAME  (tag-only images: init 1.0, app 1.0, sidecar 1.0)
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $1
  labels: {app: $1}
spec:
  replicas: 1
  selector:
    matchLabels: {app: $1}
  template:
    metadata:
      labels: {app: $1}
    spec:
      initContainers:
        - name: init
          image: $(image init 1.0)
      containers:
        - name: app
          image: $(image app 1.0)
        - name: sidecar
          image: $(image sidecar 1.0)
EOF
}

scenario_a() {
  local ns=e2e-a
  e2e_ns "$ns"
  deployment_yaml web | klog -n "$ns" create -f -
  local rc=0
  expect_eq "stored initContainers[0].image" "$(jp "$ns" deployment web '{.spec.template.spec.initContainers[0].image}')" "$(pinned init 1.0)" || rc=1
  expect_eq "stored containers[0].image" "$(jp "$ns" deployment web '{.spec.template.spec.containers[0].image}')" "$(pinned app 1.0)" || rc=1
  expect_eq "stored containers[1].image" "$(jp "$ns" deployment web '{.spec.template.spec.containers[1].image}')" "$(pinned sidecar 1.0)" || rc=1
  return "$rc"
}

scenario_b() {
  local ns=e2e-b
  e2e_ns "$ns"
  klog -n "$ns" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: bare
spec:
  containers:
    - name: app
      image: $(image app 2.0)
EOF
  expect_eq "stored pod containers[0].image" "$(jp "$ns" pod bare '{.spec.containers[0].image}')" "$(pinned app 2.0)"
}

scenario_c() {
  local ns=e2e-c
  e2e_ns "$ns"
  klog -n "$ns" create -f - <<EOF
apiVersion: batch/v1beta1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: cron
              image: $(image cron 1.0)
EOF
  expect_eq "stored cronjob jobTemplate containers[0].image" \
    "$(jp "$ns" cronjobs.v1beta1.batch nightly '{.spec.jobTemplate.spec.template.spec.containers[0].image}')" \
    "$(pinned cron 1.0)"
}

scenario_d() {
  local ns=e2e-d
  e2e_ns "$ns"
  klog -n "$ns" create -f - <<EOF
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
        - name: db
          image: $(image db 1.0)
EOF
  expect_eq "stored statefulset containers[0].image" "$(jp "$ns" statefulset db '{.spec.template.spec.containers[0].image}')" "$(pinned db 1.0)"
}

scenario_e() {
  local ns=e2e-e rc=0 out err
  e2e_ns "$ns"
  out=$(deployment_yaml dry | K -n "$ns" create --dry-run=server -o yaml -f -)
  local line stripped
  # shellcheck disable=SC2001
  stripped=$(sed -e 's/^[[:space:]-]*//' <<<"$out") # "      - image: x" -> "image: x"
  for line in "image: $(pinned init 1.0)" "image: $(pinned app 1.0)" "image: $(pinned sidecar 1.0)"; do
    if grep -qxF -- "$line" <<<"$stripped"; then
      ok "dry-run output has '$line'"
    else
      bad "dry-run output lacks '$line'; images in it: $(grep 'image:' <<<"$out" | tr -s ' ' | tr '\n' ';')" || rc=1
    fi
  done
  local unpinned
  unpinned=$(grep -E '^[[:space:]-]*image:' <<<"$out" | grep -vc '@sha256:' || true)
  expect_eq "unpinned images in the dry-run output" "$unpinned" 0 || rc=1
  if err=$(K -n "$ns" get deployment dry -o name 2>&1); then
    bad "kubectl get deployment dry found something after a dry run: $err" || rc=1
  else
    expect_contains "kubectl get after the dry run" "$err" 'NotFound' || rc=1
  fi
  expect_eq "deployments in $ns" "$(K -n "$ns" get deployments -o name | wc -l)" 0 || rc=1
  return "$rc"
}

# The stored Deployment as `kubectl get -o yaml` shows it (kubectl 1.32 hides
# metadata.managedFields): spec, generation, resourceVersion, annotations...
deploy_yaml() { K -n "$1" get deployment "$2" -o yaml; }
deploy_images() {
  jp "$1" deployment "$2" '{.spec.template.spec.initContainers[0].image} {.spec.template.spec.containers[*].image}'
}
# pinhook's counter of UPDATE reviews it answered with a patch (mutate endpoint)
mutate_updates() {
  curl -s --max-time 5 --cacert "$CERT_DIR/ca.crt" "$PINHOOK_URL/metrics" | awk '
    /^pinhook_admission_reviews_total\{/ && /endpoint="mutate"/ && /operation="UPDATE"/ &&
      /result="pinned"/ { n += $NF }
    END { print n + 0 }'
}
# same_object WHAT BEFORE_YAML AFTER_YAML: full comparison, diff on failure
same_object() {
  local meta
  meta=$(grep -E '^  (generation|resourceVersion):' <<<"$3" | sed 's/^ *//' | tr '\n' ' ' || true)
  if [[ $2 == "$3" ]]; then ok "$1: identical${meta:+ ($meta)}"; else
    bad "$1: changed: $(diff <(echo "$2") <(echo "$3") | tr '\n' ' ')"
  fi
}
# expect_repinned WHAT COUNTER_BEFORE: the request carried the tags again and
# pinhook patched them (one more mutate UPDATE review answered with a patch)
expect_repinned() {
  expect_eq "$1: mutate UPDATE reviews pinhook answered with a patch (delta)" "$(($(mutate_updates) - $2))" 1
}

# Idempotency: every variant sends the TAG-ONLY manifest again for an existing
# object; pinhook sees the tags and pins them again to the same digests, so the
# apiserver finds nothing to store: the object (and its resourceVersion) stays.
# Exception, measured and asserted as such: server-side apply (3) and a replace
# by another field manager (5) rewrite metadata.managedFields, so the
# resourceVersion moves while spec and generation stay.
# Each second request waits for the next wall-clock second: managedFields times
# have 1 s resolution, and a same-second request could hide a timestamp write.
next_second() { sleep "$(awk -v n="$(date +%N)" 'BEGIN { printf "%.3f", 1.05 - n / 1e9 }')"; }
managed_fields() { # managed_fields NS NAME: managedFields without their times
  K -n "$1" get deployment "$2" -o yaml --show-managed-fields |
    awk '/^  managedFields:/ {m = 1; next} m && /^  [^ -]/ {m = 0} m && !/^    time:/'
}
scenario_f() {
  local ns=e2e-f rc=0 before after out n
  e2e_ns "$ns"
  local want
  want="$(pinned init 1.0) $(pinned app 1.0) $(pinned sidecar 1.0)"

  # 1. client-side apply, twice, same manifest. The 3-way patch of the 2nd apply
  #    sets the images back to the manifest's tags (live differs from the manifest).
  deployment_yaml again >"$RUN/f-csa.yaml"
  out=$(K -n "$ns" apply -f "$RUN/f-csa.yaml")
  log "  1st kubectl apply: $out"
  expect_eq "images after the 1st apply" "$(deploy_images "$ns" again)" "$want" || rc=1
  before=$(deploy_yaml "$ns" again)
  n=$(mutate_updates)
  next_second
  out=$(K -n "$ns" apply -f "$RUN/f-csa.yaml")
  log "  2nd kubectl apply: $out"
  expect_repinned "2nd kubectl apply" "$n" || rc=1
  same_object "2nd kubectl apply" "$before" "$(deploy_yaml "$ns" again)" || rc=1

  # 2. kubectl diff against the tag-only manifest (a dry-run PATCH, through pinhook):
  #    exit 0 = the server would store nothing different
  local diff_rc=0
  n=$(mutate_updates)
  next_second
  K -n "$ns" diff -f "$RUN/f-csa.yaml" >"$RUN/f-diff.out" 2>&1 || diff_rc=$?
  if ((diff_rc == 0)); then ok "kubectl diff of the tag-only manifest: no difference (exit 0)"; else
    bad "kubectl diff exit $diff_rc: $(cat "$RUN/f-diff.out")" || rc=1
  fi
  expect_repinned "kubectl diff" "$n" || rc=1

  # 3. server-side apply, twice. The applied image (tag) differs from the live
  #    one (pinned), so the apiserver counts the 2nd apply as a change by manager
  #    `kubectl` and stamps a new managedFields time: a write, resourceVersion +1.
  #    After pinhook re-pins, nothing else differs.
  deployment_yaml again-ssa >"$RUN/f-ssa.yaml"
  out=$(K -n "$ns" apply --server-side -f "$RUN/f-ssa.yaml")
  log "  1st kubectl apply --server-side: $out"
  expect_eq "images after the 1st server-side apply" "$(deploy_images "$ns" again-ssa)" "$want" || rc=1
  before=$(deploy_yaml "$ns" again-ssa)
  local mf_before
  mf_before=$(managed_fields "$ns" again-ssa)
  n=$(mutate_updates)
  next_second
  out=$(K -n "$ns" apply --server-side -f "$RUN/f-ssa.yaml")
  log "  2nd kubectl apply --server-side: $out"
  expect_repinned "2nd kubectl apply --server-side" "$n" || rc=1
  after=$(deploy_yaml "$ns" again-ssa)
  same_object "2nd kubectl apply --server-side (resourceVersion excluded)" \
    "$(grep -v '^  resourceVersion:' <<<"$before")" "$(grep -v '^  resourceVersion:' <<<"$after")" || rc=1
  same_object "2nd kubectl apply --server-side: managedFields apart from their times" \
    "$mf_before" "$(managed_fields "$ns" again-ssa)" || rc=1
  log "  note: resourceVersion $(jp_rv "$before") -> $(jp_rv "$after") (server-side apply: new managedFields time)"

  # 4. create, then replace (a full PUT with the tags) by the same field manager
  deployment_yaml again-put >"$RUN/f-put.yaml"
  klog -n "$ns" create --field-manager=e2e -f "$RUN/f-put.yaml"
  before=$(deploy_yaml "$ns" again-put)
  n=$(mutate_updates)
  next_second
  out=$(K -n "$ns" replace --field-manager=e2e -f "$RUN/f-put.yaml")
  log "  kubectl replace: $out"
  expect_repinned "kubectl replace" "$n" || rc=1
  same_object "kubectl replace (same field manager)" "$before" "$(deploy_yaml "$ns" again-put)" || rc=1

  # 5. the same with kubectl's default managers (kubectl-create, then kubectl-replace):
  #    the apiserver records the manager that sent the tags as owner of the image
  #    fields (managedFields), which is a real write: resourceVersion moves once,
  #    everything else (spec, generation) stays. A second replace is a no-op again.
  deployment_yaml again-put2 >"$RUN/f-put2.yaml"
  klog -n "$ns" create -f "$RUN/f-put2.yaml"
  before=$(deploy_yaml "$ns" again-put2)
  next_second
  K -n "$ns" replace -f "$RUN/f-put2.yaml" >/dev/null
  after=$(deploy_yaml "$ns" again-put2)
  same_object "kubectl replace after kubectl create (resourceVersion excluded)" \
    "$(grep -v '^  resourceVersion:' <<<"$before")" "$(grep -v '^  resourceVersion:' <<<"$after")" || rc=1
  expect_contains "managedFields after the replace" "$(managed_fields "$ns" again-put2)" "manager: kubectl-replace" || rc=1
  log "  note: resourceVersion $(jp_rv "$before") -> $(jp_rv "$after") (managedFields: kubectl-replace now owns the image fields it sent)"
  before=$after
  next_second
  K -n "$ns" replace -f "$RUN/f-put2.yaml" >/dev/null
  same_object "2nd kubectl replace" "$before" "$(deploy_yaml "$ns" again-put2)" || rc=1
  return "$rc"
}
jp_rv() { sed -n 's/^  resourceVersion: "\{0,1\}\([0-9]*\)"\{0,1\}$/\1/p' <<<"$1"; }

scenario_g() {
  local ns=e2e-g rc=0 err code=0
  e2e_ns "$ns"
  err=$(K -n "$ns" run missing --image="$(image app does-not-exist)" --restart=Never 2>&1 >/dev/null) || code=$?
  log "  kubectl said: $err"
  if ((code == 0)); then bad "kubectl run succeeded with a tag that does not exist" || rc=1; else ok "kubectl exit code $code"; fi
  expect_contains "kubectl stderr" "$err" 'admission webhook "pin.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr" "$err" 'tag does-not-exist not found' || rc=1
  expect_eq "pods in $ns" "$(K -n "$ns" get pods -o name | wc -l)" 0 || rc=1
  return "$rc"
}

reload_count() { grep -c 'reloaded TLS certificate' "$RUN/pinhook.log" || true; }
reloaded() { (($(reload_count) > RELOADS_BEFORE)); }

served_serial() {
  timeout 10 openssl s_client -connect "127.0.0.1:$PINHOOK_PORT" -servername localhost </dev/null 2>/dev/null \
    | openssl x509 -noout -serial 2>/dev/null
}

# apiserver -> pinhook TCP connections (remote port list), to tell whether the
# apiserver opened new connections (= new TLS handshakes) across the rotation
apiserver_conns() {
  ss -Htn state established "dport = :$PINHOOK_PORT" 2>/dev/null | awk '{print $3}' | sort | tr '\n' ' '
}

scenario_h() {
  local ns=e2e-h rc=0
  e2e_ns "$ns"
  local dir="$RUN/h"
  mkdir -p "$dir"
  local serial_before
  serial_before=$(served_serial)
  [[ -n $serial_before ]] || { bad "cannot read the served certificate"; return 1; }
  log "  served before: $serial_before; apiserver connections: $(apiserver_conns)"
  RELOADS_BEFORE=$(reload_count)

  # Load: 3 kubectl workers x 20 real pod creates (60 admissions through the
  # apiserver), plus a handshake loop: a new TLS connection to pinhook every
  # 0.1 s verified against the e2e CA (new handshakes are what a rotation can break).
  local -a workers=()
  local w
  for w in 1 2 3; do
    cat >"$dir/pod-$w.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  generateName: load-$w-
spec:
  containers:
    - name: app
      image: $(image app 1.0)
EOF
    (
      for i in $(seq 1 20); do
        if out=$(K -n "$ns" create -f "$dir/pod-$w.yaml" -o name 2>&1); then
          echo "$(date +%s.%N) ok $out"
        else
          echo "$(date +%s.%N) FAIL $(tr '\n' ' ' <<<"$out")"
        fi
        sleep 0.5
      done
    ) >"$dir/worker-$w.log" 2>&1 &
    workers+=($!)
  done
  (
    end=$(($(date +%s) + 14))
    while (($(date +%s) < end)); do
      if curl -s --max-time 3 --cacert "$CERT_DIR/ca.crt" -o /dev/null -w '%{http_code}' "$PINHOOK_URL/healthz" | grep -qx 200; then
        echo "$(date +%s.%N) ok"
      else
        echo "$(date +%s.%N) FAIL"
      fi
      sleep 0.1
    done
  ) >"$dir/handshakes.log" 2>&1 &
  local hs_pid=$!

  sleep 4
  # New cert from the same CA, then mv key, then cert (each mv is atomic).
  e2e_cert "$dir/new" >/dev/null || { bad "cluster.sh cert failed"; rc=1; }
  local new_serial
  new_serial=$(openssl x509 -noout -serial -in "$dir/new/tls.crt")
  mv -f "$dir/new/tls.key" "$CERT_DIR/tls.key"
  mv -f "$dir/new/tls.crt" "$CERT_DIR/tls.crt"
  log "  rotated the files to $new_serial; apiserver connections: $(apiserver_conns)"
  if wait_until 15 "pinhook's 'reloaded TLS certificate'" reloaded; then
    ok "pinhook logged: $(grep 'reloaded TLS certificate' "$RUN/pinhook.log" | tail -n1 | cut -c1-160)"
  else
    rc=1
  fi
  local rejected
  rejected=$(grep -c 'new TLS certificate rejected' "$RUN/pinhook.log" || true)
  ((rejected == 0)) || log "  note: pinhook logged 'new TLS certificate rejected' $rejected time(s) (key and cert seen in between the two mv)"

  for w in "${workers[@]}"; do wait "$w" || true; done
  wait "$hs_pid" || true
  log "  served after: $(served_serial); apiserver connections: $(apiserver_conns)"
  expect_eq "served certificate after the reload" "$(served_serial)" "$new_serial" || rc=1
  if [[ $serial_before == "$new_serial" ]]; then bad "the new certificate has the old serial" || rc=1; fi

  local total fails hs_total hs_fails
  total=$(cat "$dir"/worker-*.log | grep -c . || true)
  fails=$(cat "$dir"/worker-*.log | grep -c ' FAIL ' || true)
  hs_total=$(grep -c . "$dir/handshakes.log" || true)
  hs_fails=$(grep -c ' FAIL' "$dir/handshakes.log" || true)
  expect_eq "kubectl creates during the rotation (done/failed)" "$total/$fails" "60/0" || {
    grep ' FAIL ' "$dir"/worker-*.log | head -n 5 >&2
    rc=1
  }
  expect_eq "new TLS connections to pinhook during the rotation (failed of $hs_total)" "$hs_fails" 0 || rc=1
  ((hs_total >= 20)) || { bad "only $hs_total handshakes ran (expected ~80)"; rc=1; }
  # every created pod is stored pinned
  local images
  images=$(K -n "$ns" get pods -o jsonpath='{range .items[*]}{.spec.containers[0].image}{"\n"}{end}' | sort | uniq -c | sed 's/^ *//')
  expect_eq "stored images of the load pods (count image)" "$images" "60 $(pinned app 1.0)" || rc=1
  return "$rc"
}

run_scenario() { # run_scenario LETTER
  local s=$1 t0 rc=0
  t0=$(date +%s.%N)
  log "=== $s: ${SCENARIO_TITLE[$s]}"
  set +e
  (
    set -eE
    trap '[[ $BASH_COMMAND == return* ]] || log "  FAIL: \`$BASH_COMMAND\` exited $? (line $LINENO)"' ERR
    "scenario_$s"
  )
  rc=$?
  set -e
  local dt
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if ((rc == 0)); then
    PASSED=$((PASSED + 1))
    log "=== $s: PASS (${dt}s)"
  else
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$s")
    log "=== $s: FAIL (exit $rc, ${dt}s)"
  fi
}

log "set-up done in $(($(date +%s) - T_START))s; running ${#SELECTED[@]} scenario(s)"
T_SCEN=$(date +%s)
for s in "${SELECTED[@]}"; do
  run_scenario "$s"
  SCENARIOS_DONE=$((SCENARIOS_DONE + 1))
done
log "scenarios done in $(($(date +%s) - T_SCEN))s"
exit 0 # cleanup (EXIT trap) prints the summary line last and sets the exit code
}
