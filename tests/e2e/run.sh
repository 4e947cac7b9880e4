#!/usr/bin/env bash
# shellcheck disable=SC2317 # (shellcheck counts functions in the { } block below as unreachable)
# pinhook's end-to-end tier: a real kube-apiserver and kube-controller-manager
# (1.20.2, the workload controllers only) + etcd, a real registry, and the pinhook
# binary, all on 127.0.0.1; pinhook registered through manifests/overlays/local-url;
# scenarios create objects with kubectl (and the controllers create ReplicaSets,
# Pods...) and read back what the apiserver STORED.
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
#      apply; replace by a different field manager), asserted as such. The controllers are
#      frozen meanwhile (see scenario_f)
#   g  a tag that does not exist is refused with pinhook's message
#   h  serving-certificate rotation under load: no request fails, the served cert changes
#   i  audit mode per namespace (label pinhook.dev/mode=audit): a tag-only Deployment and a
#      Pod with a missing tag are both admitted and stored exactly as written (compared with
#      the same objects stored in a namespace no webhook sees); the missing tag gives one
#      `Warning: pinhook audit: would deny ...`, the pinnable tags none; no patch answered
#   j  mirror guard (webhook mirrors.pinhook.dev) on the OpenShift CRDs of tests/fixtures/crds
#      and registries.conf ConfigMaps: tag mirrors (ImageTagMirrorSet, ImageContentPolicy with
#      allowMirrorByTags, pull-from-mirror absent, `[[Registry]]` in folded case, a prefix
#      rewritten to another location in a binaryData drop-in) refused with pinhook's message,
#      digest-only ones stored; the cluster-scoped objects stored are deleted at the end
#   k  POST /v1/dry-run through the apiserver's TokenReview/SubjectAccessReview: 200 with the
#      exact digests for a ServiceAccount allowed to create deployments, 403 naming what is
#      missing for one that is not, 401 for a garbage token and for none; `pinhook check
#      --server` on the same manifest; nothing stored
#   l  the shipped manifests (a copy of manifests/): overlays/generated-certs rendered with its
#      render.sh and kubectl's kustomize (Secret pinhook-tls verifies for pinhook.pinhook-system.svc
#      against certs/ca.crt, caBundle of all three webhooks = that CA, the Deployment's image and
#      security settings); everything a 1.20 apiserver serves accepted by `kubectl apply
#      --dry-run=server` (the policy/v1 PDB, the only other object, as policy/v1beta1) with no field
#      dropped, nothing stored, the registered webhooks unchanged; overlays/cert-manager rendered
#      (Certificate, Issuers, inject-ca-from on every webhook configuration);
#      overlays/node-credential-providers rendered (provider env vars, read-only hostPath
#      mounts) and its Deployment accepted by a server-side dry run; render.sh again
#      changes nothing
#   m  issue 9: a Deployment admitted in audit, namespace moved to enforce, `kubectl set env`:
#      at most 2 ReplicaSets for 60 s (fails as soon as there are 3: the controller fighting
#      pinhook), the template pinned, the new ReplicaSet's Pods pinned
#   n  a Deployment created in enforce (3 replicas): template pinned, exactly 1 ReplicaSet (as
#      without pinhook), its template pinned, the 3 Pods on one digest
#   o  `kubectl rollout restart`, then `kubectl rollout undo`, of a pinned Deployment: after each,
#      as many ReplicaSets as in a namespace no webhook sees, all pinned, the current one's Pods pinned
#   p  StatefulSet, DaemonSet (on a Node object), Job, and a Job made from a CronJob as `kubectl
#      create job --from=cronjob/...` makes it: templates pinned, the Pods their controllers
#      create carry the template's digest, as many Pods and ControllerRevisions as without pinhook
#   q  `target: pods` (a second pinhook with its own policy and webhooks): 3 Pods of one
#      ReplicaSet on one digest although the tag was re-pushed between their creations (and
#      pinhook's cache already answers the new digest); the next revision's Pod gets the new one;
#      templates as written
#   r  audit namespace with the controllers running: nothing stored carries a digest, pinhook
#      pinned nothing there, as many ReplicaSets and Pods as without pinhook
#   t  the Helm chart with Helm 3 (tests/e2e/helm.sh): `helm install` (url mode, tls.mode managed),
#      pinhook (run as the chart's ServiceAccount) fills the Secret and every caBundle, a
#      Deployment stored pinned, `helm upgrade` with changed values keeps the Secret and the
#      caBundles, a CA rotation and certificate reissues under a stream of dry-run creates refuse
#      none, `helm uninstall` leaves no webhook configuration and Pods are admitted again
#   u  the same with Helm 4 (server-side apply)
#   v-y `pinhook watch` (tests/e2e/watch.sh), run as the shipped pinhook-watch ServiceAccount
#      with the PolicyReport CRDs: v a re-pushed tag under a pinned Deployment is reported
#      tag-moved with both digests, an Event and the gauge, then nothing more is written; w an
#      audit-namespace Pod is reported unpinned; x tag mirrors that predate pinhook fail the
#      ClusterPolicyReport; y the Lease holder killed, the other replica takes over and writes;
#      z (only when named) the watch at scale, measured (see watch.sh)
#
# Scenarios m-r each run the same steps in a twin namespace that no webhook sees
# (pinhook.dev/ignore=true) and log the `counts:` of both.
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
#   E2E_KCM_PORT        the controller manager's /healthz port (default 10252, or a free one)
#   KUBE_APISERVER      use this kube-apiserver binary (skips build-kube-apiserver.sh)
#   KUBE_CONTROLLER_MANAGER
#                       use this kube-controller-manager binary (default: beside the apiserver)
#   E2E_LOOP_WATCH      seconds m watches the ReplicaSet count after `set env` (default 60)
#   HELM_STREAM_SECONDS seconds t and u stream dry-run creates through the rotations (default 75)
#   PODS_CACHE_TTL      --cache-ttl of q's `target: pods` pinhook (default 16; q takes about T + 5 s)
#   E2E_SKIP_BUILD=1    do not run cargo; use PINHOOK_BIN / E2E_REGISTRY_BIN (default
#                       target/debug/pinhook and target/debug/examples/e2e_registry)
#   E2E_PINHOOK_IDENTITY serviceaccount (default): pinhook authenticates with a token of
#                       pinhook-system/pinhook (the shipped ClusterRole, manifests/base/rbac.yaml);
#                       admin: with the admin kubeconfig, as kubectl does
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
ALL_SCENARIOS=(a b c d e f g h i j k l m n o p q r s t u v w x y)
declare -A SCENARIO_TITLE=(
  [a]="Deployment: initContainer and container pinned in the stored template"
  [b]="bare Pod pinned"
  [c]="CronJob batch/v1beta1 pinned at spec.jobTemplate.spec.template.spec"
  [d]="StatefulSet pinned"
  [e]="create --dry-run=server returns the pinned object and stores nothing"
  [f]="re-applying the tag-only manifest leaves the stored object unchanged"
  [g]="a tag that does not exist is refused with pinhook's message"
  [h]="serving-certificate rotation under load: no failed request"
  [i]="audit namespace: admitted unpinned, warning only for what enforce would deny"
  [j]="mirror guard: tag mirrors refused, digest mirrors stored (OpenShift CRDs, registries.conf)"
  [k]="/v1/dry-run authenticated by the apiserver: 200/403/401, pinhook check --server"
  [l]="shipped manifests render and the apiserver accepts them (server-side dry run)"
  [m]="audit -> enforce, then set env: no ReplicaSet loop, template and new Pods pinned (issue 9)"
  [n]="Deployment created in enforce: template pinned, 1 ReplicaSet, all Pods on one digest"
  [o]="rollout restart and undo of a pinned Deployment: no more ReplicaSets than without pinhook"
  [p]="StatefulSet, DaemonSet, Job and Job-from-CronJob Pods carry the template's digest"
  [q]="target: pods: one digest per owner revision across a re-push of the tag"
  [r]="audit namespace with controllers: nothing mutated, no extra ReplicaSets"
  [t]="Helm 3: install, self-managed caBundle, upgrade keeps certs, rotation drops nothing, uninstall"
  [u]="Helm 4: install, self-managed caBundle, upgrade keeps certs, rotation drops nothing, uninstall"
  [s]="private image, no pull secret: pinned with a kubelet credential provider plugin's credentials"
  [v]="watch: a pinned Deployment's tag re-pushed -> PolicyReport tag-moved with both digests, Event, gauge; then no writes"
  [w]="watch: an audit-namespace Pod admitted unpinned -> PolicyReport warn unpinned, Unpinned Event"
  [x]="watch: ImageTagMirrorSet and ImageContentPolicy that predate pinhook -> ClusterPolicyReport fail"
  [y]="watch: two replicas, one Lease holder writes; the holder killed, the other takes over and writes"
  [z]="watch at scale (not in the default run): 5000 Pods, 50 namespaces, 200 images: RSS, time, requests, writes"
)

T_START=$(date +%s)
PASSED=0
FAILED=0
FAILED_NAMES=()
SCENARIOS_DONE=0
PINHOOK_PID=""
PODS_PINHOOK_PID=""
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
    tail_log "$RUN/pinhook-pods.log" 20
    for f in "$RUN"/watch/watch-*.log; do tail_log "$f" 30; done
    tail_log "$RUN/registry-helper.log" 20
    tail_log "${REGISTRY_LOG:-}" 20
    tail_log "${REGISTRY_ACCESS_LOG:-}" 10
    tail_log "$E2E_WORK/kube-apiserver.log" 30
    tail_log "$E2E_WORK/kube-controller-manager.log" 20
    tail_log "$E2E_WORK/etcd.log" 10
  fi
  if [[ ${E2E_KEEP:-0} == 1 ]]; then
    log "E2E_KEEP=1: leaving pinhook (pid ${PINHOOK_PID:-none}${PODS_PINHOOK_PID:+, target: pods $PODS_PINHOOK_PID}), registry helper (pid ${REGISTRY_PID:-none}) and the cluster running"
    log "  export KUBECONFIG=$E2E_WORK/kubeconfig; stop with: kill ${PINHOOK_PID:-} ${PODS_PINHOOK_PID:-} ${REGISTRY_PID:-}; E2E_WORK=$E2E_WORK $E2E_DIR/cluster.sh stop"
  else
    for pidfile in "$RUN"/watch/watch-*.pid; do
      [[ -s $pidfile ]] && stop_pid "$(<"$pidfile")" "pinhook watch" 10
    done
    for pidfile in "$RUN"/helm*/pinhook*.pid; do
      [[ -s $pidfile ]] && stop_pid "$(<"$pidfile")" "pinhook of a Helm release" 25
    done
    stop_pid "$PODS_PINHOOK_PID" "pinhook (target: pods)" 25
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
for tool in kubectl openssl curl ss base64 jq; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found"
done

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
PINHOOK_BIN="${PINHOOK_BIN:-$TARGET_DIR/debug/pinhook}"
E2E_REGISTRY_BIN="${E2E_REGISTRY_BIN:-$TARGET_DIR/debug/examples/e2e_registry}"
PROVIDER_BIN="${PROVIDER_BIN:-$TARGET_DIR/debug/examples/credential_provider}"
if [[ ${E2E_SKIP_BUILD:-0} != 1 ]]; then
  t=$(date +%s)
  log "cargo build --bin pinhook --example e2e_registry --example credential_provider"
  cargo build --quiet --bin pinhook --example e2e_registry --example credential_provider || die "cargo build failed"
  log "cargo build done ($(($(date +%s) - t))s)"
fi
[[ -x $PINHOOK_BIN ]] || die "no pinhook binary at $PINHOOK_BIN"
[[ -x $E2E_REGISTRY_BIN ]] || die "no e2e_registry binary at $E2E_REGISTRY_BIN"
[[ -x $PROVIDER_BIN ]] || die "no credential_provider binary at $PROVIDER_BIN"

# Everything below talks to 127.0.0.1 only: no proxy may see it.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost

# --- 2. cluster -------------------------------------------------------------------------
pick_port E2E_APISERVER_PORT 6443
pick_port E2E_ETCD_PORT 2379
pick_port E2E_ETCD_PEER_PORT 2380
pick_port E2E_KCM_PORT 10252
# shellcheck source=tests/e2e/cluster.sh
source "$E2E_DIR/cluster.sh"
e2e_stop >/dev/null 2>&1 || true # a previous run's leftovers in this E2E_WORK
for leftover in "pinhook.pid:pinhook serve" "pinhook-pods.pid:pinhook serve" "registry-helper.pid:e2e_registry"; do
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
# z (the watch at scale) needs 200 more images in the registry.
if [[ " ${SELECTED[*]} " == *" z "* ]]; then export E2E_SCALE_IMAGES="${WATCH_SCALE_IMAGES:-200}"; fi
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
: "${REGISTRY_HOST:?}" "${REGISTRY_CA:?}" "${DIGEST_app_1_0:?}" "${PRIVATE_HOST:?}" "${DIGEST_private_1_0:?}"
log "registry $REGISTRY_HOST ready with images pushed ($(($(date +%s) - t))s)"

pinned() { # pinned REPO TAG -> 127.0.0.1:PORT/team/REPO:TAG@sha256:...
  local var="DIGEST_${1//[^a-zA-Z0-9]/_}_${2//[^a-zA-Z0-9]/_}"
  printf '%s/team/%s:%s@%s' "$REGISTRY_HOST" "$1" "$2" "${!var:?no digest for $1:$2}"
}
image() { printf '%s/team/%s:%s' "$REGISTRY_HOST" "$1" "$2"; }
digest() { # digest REPO TAG -> sha256:... (the index digest the helper pushed)
  local var="DIGEST_${1//[^a-zA-Z0-9]/_}_${2//[^a-zA-Z0-9]/_}"
  printf '%s' "${!var:?no digest for $1:$2}"
}
# repush REPO TAG -> the new index digest: the helper pushes new content under team/REPO:TAG
# (its `repush` command, on its stdin: fd 3) and answers in a file
repush() {
  local out
  out=$(mktemp -u "$RUN/repush.XXXXXX")
  printf 'repush team/%s %s %s\n' "$1" "$2" "$out" >&3
  wait_until 30 "the registry helper's answer to repush $1:$2" test -s "$out" || return 1
  [[ $(<"$out") == sha256:* ]] || { log "registry helper: $(<"$out")"; return 1; }
  printf '%s' "$(<"$out")"
}

# --- 4. pinhook's certificate and port, then the manifests ------------------------------
CERT_DIR="$RUN/pinhook-tls"
e2e_cert "$CERT_DIR" >/dev/null || die "cluster.sh cert failed"
pick_port PINHOOK_PORT "$(free_port)"
PINHOOK_URL="https://127.0.0.1:$PINHOOK_PORT"

# The full local-url overlay (Namespace, ServiceAccount, ClusterRole/Binding and both webhook
# configurations), applied BEFORE pinhook starts so that pinhook can run as its own
# ServiceAccount. Until pinhook listens the webhooks (failurePolicy Fail) would refuse what
# they cover; nothing covered is written before the probe below.
K label ns kube-system pinhook.dev/ignore=true --overwrite >/dev/null
kubectl kustomize "$ROOT/manifests/overlays/local-url" \
  | sed -e "s|PINHOOK_URL_BASE|$PINHOOK_URL|g" \
    -e "s|PINHOOK_CA_BUNDLE|$(base64 -w0 <"$CERT_DIR/ca.crt")|g" \
    >"$RUN/manifests.yaml"
klog apply -f "$RUN/manifests.yaml" || die "applying manifests/overlays/local-url failed"

# --- 5. pinhook's identity towards the apiserver -----------------------------------------------
# serviceaccount (default): a kubeconfig with a TokenRequest token of pinhook-system/pinhook,
# so pinhook has exactly the shipped ClusterRole (manifests/base/rbac.yaml); admin: the admin
# kubeconfig kubectl uses.
tokenreview_user() { # tokenreview_user TOKEN_FILE -> the user the apiserver authenticates
  K create -o jsonpath='{.status.user.username}' -f - <<EOF
apiVersion: authentication.k8s.io/v1
kind: TokenReview
spec:
  token: "$(<"$1")"
EOF
}
# token_kubeconfig TOKEN FILE: a kubeconfig (mode 600) for the e2e apiserver with that bearer token
token_kubeconfig() {
  (
    umask 077
    cat >"$2" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster:
      server: $E2E_APISERVER_URL
      certificate-authority-data: $(base64 -w0 <"$E2E_CA_CERT")
users:
  - name: pinhook
    user:
      token: $1
contexts:
  - name: pinhook
    context: {cluster: e2e, user: pinhook}
current-context: pinhook
EOF
  )
}
PINHOOK_USER="system:serviceaccount:pinhook-system:pinhook"
case ${E2E_PINHOOK_IDENTITY:=serviceaccount} in
  serviceaccount)
    (umask 077 && K -n pinhook-system create token pinhook --duration=2h >"$RUN/pinhook.token") ||
      die "kubectl create token -n pinhook-system pinhook failed"
    user=$(tokenreview_user "$RUN/pinhook.token") || die "TokenReview of pinhook's token failed"
    [[ $user == "$PINHOOK_USER" ]] || die "pinhook's token authenticates as '$user', not $PINHOOK_USER"
    token_kubeconfig "$(<"$RUN/pinhook.token")" "$RUN/pinhook.kubeconfig"
    PINHOOK_KUBECONFIG="$RUN/pinhook.kubeconfig"
    ;;
  admin)
    PINHOOK_KUBECONFIG="$KUBECONFIG"
    PINHOOK_USER="admin"
    ;;
  *) die "E2E_PINHOOK_IDENTITY must be serviceaccount or admin, not '$E2E_PINHOOK_IDENTITY'" ;;
esac
log "pinhook talks to the apiserver as $PINHOOK_USER ($PINHOOK_KUBECONFIG)"

# --- 6. pinhook -------------------------------------------------------------------------------
# Enforce (deny what cannot be pinned; the shipped ConfigMap starts in audit),
# and let pinhook contact the loopback registry: its address guard refuses
# loopback/link-local/metadata hosts unless registries.allowPrivate names them.
cat >"$RUN/policy.yaml" <<EOF
mode: enforce
registries:
  allowPrivate: ["$REGISTRY_HOST", "$PRIVATE_HOST"]
EOF
# The node's kubelet credential provider plugins, as pinhook reads them (s): the example plugin
# answers the private registry's htpasswd user for images that match its host; no other
# scenario's image matches, so it never runs for them.
PROVIDERS="$RUN/providers"
mkdir -p "$PROVIDERS/bin"
cp "$PROVIDER_BIN" "$PROVIDERS/bin/e2e-provider"
cat >"$PROVIDERS/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: e2e-provider
    matchImages: ["$PRIVATE_HOST"]
    defaultCacheDuration: "5m"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    env:
      - {name: PLUGIN_USERNAME, value: "$PRIVATE_USER"}
      - {name: PLUGIN_PASSWORD, value: "$PRIVATE_PASSWORD"}
      - {name: PLUGIN_COUNT_FILE, value: "$PROVIDERS/runs"}
EOF
# start_pinhook NAME PORT CERT_DIR POLICY [SERVE-ARGS...]: `pinhook serve` in the background
# (log $RUN/NAME.log, PID in $RUN/NAME.pid and STARTED_PID), then wait for its /readyz
start_pinhook() {
  local name=$1 port=$2 certs=$3 policy=$4
  shift 4
  log "starting $name on https://127.0.0.1:$port${*:+ ($*)} (log $RUN/$name.log)"
  NO_COLOR=1 PINHOOK_LOG="${PINHOOK_LOG:-info}" "$PINHOOK_BIN" serve \
    --listen "127.0.0.1:$port" \
    --tls-cert "$certs/tls.crt" --tls-key "$certs/tls.key" \
    --registry-ca "$REGISTRY_CA" \
    --policy "$policy" \
    --kubeconfig "$PINHOOK_KUBECONFIG" \
    "$@" \
    </dev/null >"$RUN/$name.log" 2>&1 3>&- &
  STARTED_PID=$!
  echo "$STARTED_PID" >"$RUN/$name.pid"
  WAIT_PID=$STARTED_PID wait_until 30 "$name /readyz" readyz_ok "$port" "$certs" || die "$name not ready (pid $STARTED_PID)"
  log "$name ready (pid $STARTED_PID)"
}
readyz_ok() { [[ $(curl -s --max-time 2 --cacert "$2/ca.crt" "https://127.0.0.1:$1/readyz") == ok* ]]; }
# probe_pinned NS: a `kubectl run --dry-run=server` Pod in NS comes back pinned (the webhook works)
PROBE_EXPECTED=$(pinned app 1.0)
probe_pinned() {
  local out
  out=$(K -n "$1" run probe --image="$(image app 1.0)" --restart=Never \
    --dry-run=server -o jsonpath='{.spec.containers[0].image}' 2>"$RUN/$1.err") || return 1
  [[ $out == "$PROBE_EXPECTED" ]]
}
wait_effective() { # wait_effective NS: up to 30 s for probe_pinned NS
  local t
  t=$(date +%s)
  if ! wait_until 30 "the webhook to pin a dry-run pod in $1" probe_pinned "$1"; then
    log "last probe error: $(cat "$RUN/$1.err" 2>/dev/null)"
    die "the webhook did not take effect in $1"
  fi
  log "webhook effective in $1 ($(($(date +%s) - t))s after pinhook was ready)"
}

start_pinhook pinhook "$PINHOOK_PORT" "$CERT_DIR" "$RUN/policy.yaml" \
  --image-credential-provider-config "$PROVIDERS/config.yaml" \
  --image-credential-provider-bin-dir "$PROVIDERS/bin"
PINHOOK_PID=$STARTED_PID
e2e_ns e2e-probe || die "cannot create namespace e2e-probe"
wait_effective e2e-probe

# --- 6b. a second pinhook with `target: pods`, for scenario q --------------------------------------
# pinhook runs with one policy, and `target` is a policy setting: q needs its own pinhook. It gets
# its own policy file, port and serving cert, and its own webhook configurations (pinhook-pods):
# the registered pin.pinhook.dev and validate.pinhook.dev (not the mirror guard), calling its
# port, for namespaces labelled pinhook.dev/e2e-instance=pods only. Those namespaces also carry
# pinhook.dev/ignore=true, so the main pinhook never sees them. A short --cache-ttl lets q see a
# re-pushed tag within the scenario (see scenario_q).
PODS_CACHE_TTL="${PODS_CACHE_TTL:-16}"
if [[ " ${SELECTED[*]} " == *" q "* ]]; then
  PODS_CERT_DIR="$RUN/pinhook-pods-tls"
  e2e_cert "$PODS_CERT_DIR" >/dev/null || die "cluster.sh cert failed"
  pick_port PODS_PINHOOK_PORT "$(free_port)"
  PODS_PINHOOK_URL="https://127.0.0.1:$PODS_PINHOOK_PORT"
  cat >"$RUN/policy-pods.yaml" <<EOF
mode: enforce
target: pods
registries:
  allowPrivate: ["$REGISTRY_HOST"]
EOF
  start_pinhook pinhook-pods "$PODS_PINHOOK_PORT" "$PODS_CERT_DIR" "$RUN/policy-pods.yaml" \
    --cache-ttl "$PODS_CACHE_TTL" --shutdown-delay 0
  PODS_PINHOOK_PID=$STARTED_PID
  pods_webhooks='{apiVersion, kind, metadata: {name: "pinhook-pods", labels: .metadata.labels},
    webhooks: [.webhooks[] | select(.name != "mirrors.pinhook.dev")
      | .clientConfig.url |= sub("^https://[^/]+"; $url)
      | .clientConfig.caBundle = $ca
      | .namespaceSelector = {matchLabels: {"pinhook.dev/e2e-instance": "pods"}}]}'
  {
    K get mutatingwebhookconfiguration pinhook -o json
    K get validatingwebhookconfiguration pinhook -o json
  } | jq --arg url "$PODS_PINHOOK_URL" --arg ca "$(base64 -w0 <"$PODS_CERT_DIR/ca.crt")" "$pods_webhooks" \
    >"$RUN/webhooks-pods.json" || die "cannot derive the pinhook-pods webhook configurations"
  klog create -f "$RUN/webhooks-pods.json" || die "registering the pinhook-pods webhooks failed"
  e2e_ns e2e-probe-pods pinhook.dev/ignore=true pinhook.dev/e2e-instance=pods || die "cannot create namespace e2e-probe-pods"
  wait_effective e2e-probe-pods
fi

# --- 7. scenarios ----------------------------------------------------------------------
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

# CronJob nightly (batch/v1beta1: 1.20 has no batch/v1 CronJob), team/cron:1.0 (c, p)
cronjob_yaml() {
  cat <<EOF
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
}
# StatefulSet db, team/db:1.0 (d, p)
statefulset_yaml() { # statefulset_yaml REPLICAS [POD_MANAGEMENT_POLICY]
  cat <<EOF
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: $1${2:+
  podManagementPolicy: $2}
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
}

scenario_c() {
  local ns=e2e-c
  e2e_ns "$ns"
  cronjob_yaml | klog -n "$ns" create -f -
  expect_eq "stored cronjob jobTemplate containers[0].image" \
    "$(jp "$ns" cronjobs.v1beta1.batch nightly '{.spec.jobTemplate.spec.template.spec.containers[0].image}')" \
    "$(pinned cron 1.0)"
}

scenario_d() {
  local ns=e2e-d
  e2e_ns "$ns"
  statefulset_yaml 1 | klog -n "$ns" create -f -
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
# The controllers are frozen while f runs (cluster.sh e2e_controllers_freeze, SIGSTOP): a
# Deployment controller writes status and a revision annotation, and on 1.20 any `kubectl
# replace` of the manifest then drops the controller's managedFields entry (the body has no
# status) and the annotation (which bumps generation), so the object changes with or without
# pinhook (checked without any webhook). f is about what pinhook makes of a re-sent manifest.
scenario_f() {
  local ns=e2e-f rc=0 before after out n
  e2e_controllers_freeze
  trap e2e_controllers_thaw EXIT # scenarios run in a subshell: this is its exit
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

# --- helpers of i, j, k ------------------------------------------------------------------
# metric_sum METRIC [LABEL="VALUE"...]: sum of pinhook's samples of METRIC that carry all these labels
metric_sum() {
  local metric=$1
  shift
  curl -s --max-time 5 --cacert "$CERT_DIR/ca.crt" "$PINHOOK_URL/metrics" | awk -v m="$metric{" -v want="$*" '
    BEGIN { n = split(want, w, " ") }
    index($0, m) == 1 {
      hit = 1
      for (i = 1; i <= n; i++) if (index($0, w[i]) == 0) hit = 0
      if (hit) s += $NF
    }
    END { print s + 0 }'
}
log_lines() { wc -l <"$RUN/pinhook.log"; }
log_since() { tail -n "+$(($1 + 1))" "$RUN/pinhook.log" | sed 's/\x1b\[[0-9;]*m//g'; } # log_since LINES_BEFORE
# kubectl_to DIR/NAME KUBECTL-ARGS...: run kubectl, stdout to NAME.out, stderr to NAME.err;
# prints nothing, sets KCODE (exit code) and KERR (stderr), logs both
kubectl_to() {
  local out=$1
  shift
  KCODE=0
  K "$@" >"$out.out" 2>"$out.err" || KCODE=$?
  KERR=$(<"$out.err")
  log "  kubectl ${*:1:3}...: exit $KCODE; stderr: ${KERR:-(empty)}"
}
# warning_text TEXT: TEXT as pinhook's render.rs (shape_warnings) sends it: cut to 120 characters, the last one '…'
warning_text() {
  local text=$1
  if ((${#text} > 120)); then text="${text:0:119}…"; fi
  printf '%s' "$text"
}
spec_json() { K -n "$1" get "$2" "$3" -o json | jq -S .spec; } # spec_json NS KIND NAME

# --- i: audit mode per namespace --------------------------------------------------------------
# The namespace carries pinhook.dev/mode=audit from its creation on (pinhook caches namespace
# labels for 30 s). What the code promises (src/admission/pipeline.rs `finish`, render.rs
# `all_warnings`): in audit, nothing is patched and nothing denied; an image that enforce would
# deny becomes a warning `pinhook audit: would deny <container kind> <name>: <why> (image <image>)`
# (cut to 120 characters), an audit annotation, a `policy violation` log line and
# pinhook_policy_violations_total{mode="audit"}; an image that enforce would pin becomes
# `Unchanged` ("audit mode: would pin to sha256:…"): no warning, counted as `would_pin` in the
# review's one summary log line (the per-image `audit: would pin image` line is at debug).
scenario_i() {
  local ns=e2e-i ref=e2e-i-ref rc=0 dir="$RUN/i"
  mkdir -p "$dir"
  e2e_ns "$ns" pinhook.dev/mode=audit
  # The same manifests stored where no pinhook webhook is called (the opt-out label): the
  # apiserver's own result without any patch, to compare the audited objects with.
  e2e_ns "$ref" pinhook.dev/ignore=true
  expect_eq "label pinhook.dev/mode of $ns" "$(K get ns "$ns" -o jsonpath='{.metadata.labels.pinhook\.dev/mode}')" audit || rc=1
  local patched_before violations_before lines_before
  patched_before=$(metric_sum pinhook_admission_reviews_total 'result="pinned"')
  violations_before=$(metric_sum pinhook_policy_violations_total 'mode="audit"')
  lines_before=$(log_lines)

  # 1. a Deployment whose three tag-only images pinhook can resolve
  deployment_yaml web >"$dir/deployment.yaml"
  kubectl_to "$dir/deployment" -n "$ns" create -f "$dir/deployment.yaml"
  expect_eq "kubectl create deployment: exit code" "$KCODE" 0 || rc=1
  expect_eq "kubectl create deployment: Warning lines on stderr (none: a tag audit would pin is no warning)" \
    "$(grep -c '^Warning:' <<<"$KERR" || true)" 0 || rc=1
  expect_eq "stored deployment images (tags as written)" "$(deploy_images "$ns" web)" \
    "$(image init 1.0) $(image app 1.0) $(image sidecar 1.0)" || rc=1
  expect_eq "occurrences of '@sha256' in the stored deployment" \
    "$(K -n "$ns" get deployment web -o json | grep -c '@sha256' || true)" 0 || rc=1
  K -n "$ref" create -f "$dir/deployment.yaml" >/dev/null
  same_object "stored deployment spec, $ns vs $ref (no webhook)" \
    "$(spec_json "$ref" deployment web)" "$(spec_json "$ns" deployment web)" || rc=1

  # 2. a Pod whose tag does not exist (enforce denies it: scenario g)
  cat >"$dir/pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: missing
spec:
  containers:
    - name: app
      image: $(image app does-not-exist)
EOF
  kubectl_to "$dir/pod" -n "$ns" create -f "$dir/pod.yaml"
  expect_eq "kubectl create pod: exit code" "$KCODE" 0 || rc=1
  local warnings
  warnings=$(grep '^Warning:' <<<"$KERR" || true)
  expect_eq "kubectl create pod: Warning lines" "$(grep -c . <<<"$warnings" || true)" 1 || rc=1
  expect_contains "kubectl create pod: warning" "$warnings" \
    "Warning: pinhook audit: would deny container app: tag does-not-exist not found in $REGISTRY_HOST/team/app" || rc=1
  expect_eq "kubectl create pod: the whole warning" "$warnings" \
    "Warning: $(warning_text "pinhook audit: would deny container app: tag does-not-exist not found in $REGISTRY_HOST/team/app (image $(image app does-not-exist))")" || rc=1
  expect_eq "stored pod image (tag as written)" "$(jp "$ns" pod missing '{.spec.containers[0].image}')" "$(image app does-not-exist)" || rc=1
  K -n "$ref" create -f "$dir/pod.yaml" >/dev/null
  same_object "stored pod spec, $ns vs $ref (no webhook)" "$(spec_json "$ref" pod missing)" "$(spec_json "$ns" pod missing)" || rc=1

  # 3. pinhook's side: no patch answered, one audit violation counted and logged
  expect_eq "reviews pinhook answered with a patch (delta)" \
    "$(($(metric_sum pinhook_admission_reviews_total 'result="pinned"') - patched_before))" 0 || rc=1
  expect_eq "pinhook_policy_violations_total{mode=\"audit\"} (delta, all reasons; the log line below says which)" \
    "$(($(metric_sum pinhook_policy_violations_total 'mode="audit"') - violations_before))" 1 || rc=1
  local new violations
  new=$(log_since "$lines_before")
  violations=$(grep 'policy violation' <<<"$new" || true)
  expect_eq "pinhook log: 'policy violation' lines" "$(grep -c . <<<"$violations" || true)" 1 || rc=1
  local field
  for field in 'mode=audit' 'violation="resolution_failed"' 'admitted=true' "image=$(image app does-not-exist)"; do
    expect_contains "pinhook log: policy violation" "$violations" "$field" || rc=1
  done
  # one summary line per review at info (issue 10): the Deployment's says what enforce would
  # have pinned; per-image lines are at debug
  local summary
  # (the ReplicaSet and Pod the controllers make of the Deployment are reviewed too, with lines
  # of their own: kind=ReplicaSet, kind=Pod in the review span; counted apart, not asserted)
  summary=$(grep ': review endpoint=mutate ' <<<"$new" | grep ' kind=Deployment ' || true)
  expect_eq "pinhook log: summary lines of the Deployment's /mutate review" "$(grep -c . <<<"$summary" || true)" 1 || rc=1
  for field in 'mode=audit' 'pinned=0' 'would_pin=3' 'violations=0'; do
    expect_contains "pinhook log: the Deployment's review" "$summary" "$field" || rc=1
  done
  expect_eq "pinhook log: per-image lines at info ('pinned image', 'audit: would pin image')" \
    "$(grep -c -e 'pinned image' -e 'audit: would pin image' <<<"$new" || true)" 0 || rc=1
  log "  note: /mutate summary lines of the controllers' ReplicaSet and Pod reviews so far: $(grep ': review endpoint=mutate ' <<<"$new" | grep -c -e ' kind=ReplicaSet ' -e ' kind=Pod ' || true)"
  return "$rc"
}

# --- j: mirror guard --------------------------------------------------------------------------
MIRROR_RISK="a tag mirror can serve different content for the same tag"
MIRROR_DENIED='admission webhook "mirrors.pinhook.dev" denied the request'
# expect_refused WHAT DIR/NAME MESSAGE KUBECTL-ARGS...: kubectl fails with pinhook's mirror denial
expect_refused() {
  local what=$1 out=$2 message=$3 rc=0
  shift 3
  kubectl_to "$out" "$@"
  if ((KCODE == 0)); then bad "$what: kubectl exit 0 (stored), expected a refusal" || rc=1; else ok "$what: kubectl exit code $KCODE"; fi
  expect_contains "$what: kubectl stderr" "$KERR" "$MIRROR_DENIED: $message" || rc=1
  return "$rc"
}
# expect_stored WHAT DIR/NAME KUBECTL-ARGS...: kubectl succeeds
expect_stored() {
  local what=$1 out=$2
  shift 2
  kubectl_to "$out" "$@"
  expect_eq "$what: kubectl exit code" "$KCODE" 0
}
# expect_absent KIND NAME [NS]: kubectl get says NotFound
expect_absent() {
  local err
  if err=$(K ${3:+-n "$3"} get "$1" "$2" -o name 2>&1); then
    bad "$1 $2 is stored: $err"
  else
    expect_contains "kubectl get $1 $2" "$err" NotFound
  fi
}
registries_conf_cm() { # registries_conf_cm NAME [PULL_FROM_MIRROR]
  cat <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: $1
data:
  registries.conf: |
    [[registry]]
    location = "registry.example/team"

    [[registry.mirror]]
    location = "mirror.example:5000/team"
EOF
  [[ -z ${2:-} ]] || printf '    pull-from-mirror = "%s"\n' "$2"
}
# openshift_mirrors KIND NAME LIST [EXTRA]: an OpenShift mirror object whose LIST has one entry,
# registry.example/team -> mirror.example:5000/team (EXTRA: one more line of that entry)
openshift_mirrors() {
  local api=config.openshift.io/v1
  [[ $1 == ImageContentSourcePolicy ]] && api=operator.openshift.io/v1alpha1
  printf 'apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\nspec:\n  %s:\n' "$api" "$1" "$2" "$3"
  printf '    - source: registry.example/team\n      mirrors: [mirror.example:5000/team]\n'
  [[ -z ${4:-} ]] || printf '      %s\n' "$4"
}
scenario_j() {
  local ns=e2e-j rc=0 dir="$RUN/j" crd
  mkdir -p "$dir"
  e2e_ns "$ns"
  klog apply -f "$ROOT/tests/fixtures/crds/"
  for crd in imagetagmirrorsets.config.openshift.io imagedigestmirrorsets.config.openshift.io \
    imagecontentpolicies.config.openshift.io imagecontentsourcepolicies.operator.openshift.io; do
    klog wait --for=condition=Established "crd/$crd" --timeout=30s
  done
  local denied_before
  denied_before=$(metric_sum pinhook_policy_violations_total 'mode="enforce"' 'reason="tag_mirror"')

  # ImageTagMirrorSet: every mirror serves tag pulls -> refused, nothing stored
  openshift_mirrors ImageTagMirrorSet e2e-j-tags imageTagMirrors >"$dir/itms.yaml"
  expect_refused "ImageTagMirrorSet" "$dir/itms" \
    "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] lets mirror.example:5000/team serve tag pulls for registry.example/team: $MIRROR_RISK" \
    create -f "$dir/itms.yaml" || rc=1
  expect_absent imagetagmirrorset e2e-j-tags || rc=1
  expect_eq "ImageTagMirrorSets stored" "$(K get imagetagmirrorsets -o name | wc -l)" 0 || rc=1

  # ImageDigestMirrorSet with the same source and mirror: digest pulls only -> stored
  openshift_mirrors ImageDigestMirrorSet e2e-j-digests imageDigestMirrors >"$dir/idms.yaml"
  expect_stored "ImageDigestMirrorSet" "$dir/idms" create -f "$dir/idms.yaml" || rc=1
  expect_eq "stored ImageDigestMirrorSet source -> mirror" \
    "$(K get imagedigestmirrorset e2e-j-digests -o jsonpath='{.spec.imageDigestMirrors[0].source} -> {.spec.imageDigestMirrors[0].mirrors[0]}')" \
    "registry.example/team -> mirror.example:5000/team" || rc=1

  # ImageContentPolicy: refused with allowMirrorByTags: true, stored without it
  openshift_mirrors ImageContentPolicy e2e-j-icp-tags repositoryDigestMirrors "allowMirrorByTags: true" >"$dir/icp-tags.yaml"
  expect_refused "ImageContentPolicy with allowMirrorByTags" "$dir/icp-tags" \
    "ImageContentPolicy spec.repositoryDigestMirrors[0].mirrors[0] has allowMirrorByTags, so mirror.example:5000/team serves tag pulls for registry.example/team: $MIRROR_RISK" \
    create -f "$dir/icp-tags.yaml" || rc=1
  expect_absent imagecontentpolicy e2e-j-icp-tags || rc=1
  openshift_mirrors ImageContentPolicy e2e-j-icp repositoryDigestMirrors >"$dir/icp.yaml"
  expect_stored "ImageContentPolicy without allowMirrorByTags" "$dir/icp" create -f "$dir/icp.yaml" || rc=1
  expect_eq "stored ImageContentPolicy source -> mirror" \
    "$(K get imagecontentpolicy e2e-j-icp -o jsonpath='{.spec.repositoryDigestMirrors[0].source} -> {.spec.repositoryDigestMirrors[0].mirrors[0]}')" \
    "registry.example/team -> mirror.example:5000/team" || rc=1

  # ImageContentSourcePolicy (operator.openshift.io/v1alpha1): digest mirrors by definition -> stored
  openshift_mirrors ImageContentSourcePolicy e2e-j-icsp repositoryDigestMirrors >"$dir/icsp.yaml"
  expect_stored "ImageContentSourcePolicy" "$dir/icsp" create -f "$dir/icsp.yaml" || rc=1

  # ConfigMap with a registries.conf: a mirror with pull-from-mirror absent (= "all") is
  # refused; the same mirror with "digest-only" is stored; updating the stored one back to
  # "all" is refused too (UPDATE judges the new object) and leaves it as it was
  local cm_message="ConfigMap data[registries.conf] [[registry]] location=\"registry.example/team\" mirror[0] lets mirror.example:5000/team serve tag pulls: $MIRROR_RISK"
  registries_conf_cm tag-mirror >"$dir/cm-all.yaml"
  expect_refused "ConfigMap registries.conf, pull-from-mirror absent" "$dir/cm-all" "$cm_message" \
    -n "$ns" create -f "$dir/cm-all.yaml" || rc=1
  expect_absent configmap tag-mirror "$ns" || rc=1
  # Read as CRI-O reads it (issue 17): `[[Registry]]` folds to the registry table, and a
  # prefix whose location differs sends every tag pull of the prefix elsewhere. Both refused.
  expect_refused "ConfigMap registries.conf with [[Registry]] (key case folded as BurntSushi/toml does)" \
    "$dir/cm-folded" \
    "ConfigMap data[registries.conf] [[registry]] location=\"registry.example/team\" mirror[0] lets mirror.example:5000/team serve tag pulls: $MIRROR_RISK" \
    -n "$ns" create -f - <<EOF || rc=1
apiVersion: v1
kind: ConfigMap
metadata:
  name: folded-keys
data:
  registries.conf: |
    [[Registry]]
    location = "registry.example/team"

    [[Registry.Mirror]]
    location = "mirror.example:5000/team"
EOF
  expect_absent configmap folded-keys "$ns" || rc=1
  expect_refused "ConfigMap registries.conf whose prefix is rewritten to another location" \
    "$dir/cm-rewrite" \
    "ConfigMap binaryData[crio-mirrors.conf] [[registry]] prefix=\"docker.io/library\" redirects tag pulls to its location evil.example/x: $MIRROR_RISK" \
    -n "$ns" create -f - <<EOF || rc=1
apiVersion: v1
kind: ConfigMap
metadata:
  name: prefix-rewrite
binaryData:
  crio-mirrors.conf: $(printf '[[registry]]\nprefix = "docker.io/library"\nlocation = "evil.example/x"\n' | base64 -w0)
EOF
  expect_absent configmap prefix-rewrite "$ns" || rc=1
  registries_conf_cm digest-mirror digest-only >"$dir/cm-digest.yaml"
  expect_stored "ConfigMap registries.conf, pull-from-mirror digest-only" "$dir/cm-digest" \
    -n "$ns" create -f "$dir/cm-digest.yaml" || rc=1
  expect_contains "stored ConfigMap registries.conf" \
    "$(jp "$ns" configmap digest-mirror '{.data.registries\.conf}')" 'pull-from-mirror = "digest-only"' || rc=1
  expect_eq "pinhook_policy_violations_total{mode=\"enforce\",reason=\"tag_mirror\"} (delta: the 5 refused creates)" \
    "$(($(metric_sum pinhook_policy_violations_total 'mode="enforce"' 'reason="tag_mirror"') - denied_before))" 5 || rc=1
  # An UPDATE that a webhook refuses is admitted TWICE by the apiserver: its first try runs
  # against the object from the watch cache, and on any error the storage layer retries once
  # with the object read from etcd (GuaranteedUpdate), calling the webhooks again.
  local updates_before
  updates_before=$(metric_sum pinhook_admission_reviews_total 'endpoint="validate"' 'operation="UPDATE"' 'result="denied"')
  registries_conf_cm digest-mirror >"$dir/cm-update.yaml"
  expect_refused "ConfigMap update back to pull-from-mirror absent" "$dir/cm-update" "$cm_message" \
    -n "$ns" replace -f "$dir/cm-update.yaml" || rc=1
  expect_contains "stored ConfigMap registries.conf after the refused update" \
    "$(jp "$ns" configmap digest-mirror '{.data.registries\.conf}')" 'pull-from-mirror = "digest-only"' || rc=1

  expect_eq "validate UPDATE reviews pinhook denied for the one refused replace (delta)" \
    "$(($(metric_sum pinhook_admission_reviews_total 'endpoint="validate"' 'operation="UPDATE"' 'result="denied"') - updates_before))" 2 || rc=1

  # the cluster-scoped objects outlive the namespace: delete what was stored
  klog delete imagedigestmirrorset e2e-j-digests --wait=false || rc=1
  klog delete imagecontentpolicy e2e-j-icp --wait=false || rc=1
  klog delete imagecontentsourcepolicy e2e-j-icsp --wait=false || rc=1
  klog -n "$ns" delete configmap digest-mirror --wait=false || rc=1
  local left
  left=$(K get imagetagmirrorsets,imagedigestmirrorsets,imagecontentpolicies,imagecontentsourcepolicies -o name)
  expect_eq "mirror objects left after the clean-up" "${left:-none}" none || rc=1
  return "$rc"
}

# --- k: the dry-run endpoint, authenticated by the apiserver -------------------------------------
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
scenario_k() {
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

# --- l: the shipped manifests render and the real apiserver accepts them --------------------------
# objects_json YAML_FILE: the objects of a (multi-document) YAML file as one JSON array, read by
# kubectl itself, offline (--local; removing a label no object has changes nothing)
objects_json() { kubectl label --local -f "$1" -o json pinhook-e2e-none- | jq -s .; }
# tree_state DIR: one hash over the names, sizes and mtimes of everything under DIR
tree_state() { find "$1" -printf '%P %s %T@\n' | sort | sha256sum | cut -c1-64; }
# kustomize_image BASE_IMAGE < KUSTOMIZATION_JSON: what kustomize's `images:` makes of BASE_IMAGE
# (kustomize's imagetag updater: newName; newTag and digest replace both tag and digest)
kustomize_image() {
  jq -r --arg img "$1" '
    ($img | sub("@.*$"; "")) as $nd | ($nd | sub(":[^:/]*$"; "")) as $name |
    ($nd | ltrimstr($name) | ltrimstr(":")) as $tag | ($img | capture("@(?<d>.*)$").d // "") as $dig |
    ((.images // []) | map(select(.name == $name)) | .[0] // {}) as $e |
    (if ($e.newTag // "") != "" or ($e.digest // "") != "" then [($e.newTag // ""), ($e.digest // "")]
     else [$tag, $dig] end) as [$t, $d] |
    ($e.newName // $name) + (if $t != "" then ":" + $t else "" end) + (if $d != "" then "@" + $d else "" end)'
}
# dropped_fields RENDERED_ARRAY.json ANSWER_LIST.json: every scalar field of the rendered objects
# that the apiserver's answer lacks or holds with another value (Secret data compared without the
# line breaks kustomize puts into base64)
dropped_fields() {
  jq -rn --slurpfile r "$1" --slurpfile d "$2" '
    def norm: if .kind == "Secret" then .data |= map_values(gsub("\\s"; "")) else . end;
    ($d[0].items | map(norm)) as $ans |
    $r[0][] | norm as $a |
    ($ans | map(select(.kind == $a.kind and .metadata.name == $a.metadata.name)) | .[0]) as $b |
    if $b == null then "\($a.kind)/\($a.metadata.name): missing from the answer"
    else $a | paths(scalars) as $p |
      select((try ($b | getpath($p)) catch "(type differs)") != ($a | getpath($p))) |
      "\($a.kind)/\($a.metadata.name): \($p | map(tostring) | join("."))" end'
}
webhook_state() { # resourceVersion and urls of the registered (local-url) webhook configurations
  K get mutatingwebhookconfiguration pinhook -o jsonpath='mutating rv={.metadata.resourceVersion} {.webhooks[*].clientConfig.url}; '
  K get validatingwebhookconfiguration pinhook -o jsonpath='validating rv={.metadata.resourceVersion} {.webhooks[*].clientConfig.url}'
}
scenario_l() {
  local rc=0 dir="$RUN/l" m="$RUN/manifests" host=pinhook.pinhook-system.svc code out
  local gc="$RUN/manifests/overlays/generated-certs"
  mkdir -p "$dir"
  local src_before
  src_before=$(tree_state "$ROOT/manifests")
  # A copy: render.sh writes certs/ and cabundle-patch.yaml next to itself. Whatever a local
  # render left in the source tree (git-ignored) is not copied along, so render.sh starts afresh.
  rm -rf "$m"
  cp -R "$ROOT/manifests" "$m"
  rm -rf "$gc/certs" "$gc"/.certs.* "$gc/cabundle-patch.yaml" "$gc/cabundle-patch.yaml.tmp"

  # 1. overlays/generated-certs: render.sh (`pinhook certs`), then kubectl's built-in kustomize
  code=0
  out=$(PINHOOK="$PINHOOK_BIN" "$gc/render.sh" 2>&1) || code=$?
  log "  render.sh: $(tr '\n' ' ' <<<"$out")"
  expect_eq "render.sh (1st run): exit code" "$code" 0 || return 1
  code=0
  kubectl kustomize "$gc" >"$dir/generated-certs.yaml" 2>"$dir/generated-certs.err" || code=$?
  expect_eq "kubectl kustomize overlays/generated-certs: exit code" "$code" 0 || { log "  stderr: $(<"$dir/generated-certs.err")"; return 1; }
  objects_json "$dir/generated-certs.yaml" >"$dir/generated-certs.json"
  local G="$dir/generated-certs.json"
  ok "rendered $(jq length "$G") objects: $(jq -r 'map("\(.kind)/\(.metadata.name)") | join(" ")' "$G")"

  # the Secret: kubernetes.io/tls, a certificate for the Service name from certs/ca.crt, its own key
  local sec='.[] | select(.kind == "Secret" and .metadata.name == "pinhook-tls")'
  expect_eq "Secret pinhook-tls: namespace, type, keys" \
    "$(jq -r "$sec | \"\(.metadata.namespace) \(.type) \(.data | keys | join(\",\"))\"" "$G")" \
    "pinhook-system kubernetes.io/tls tls.crt,tls.key" || rc=1
  jq -r "$sec | .data[\"tls.crt\"]" "$G" | base64 -d >"$dir/secret-tls.crt"
  jq -r "$sec | .data[\"tls.key\"]" "$G" | base64 -d >"$dir/secret-tls.key"
  expect_eq "Secret tls.crt verified against certs/ca.crt for $host (openssl verify -verify_hostname)" \
    "$(openssl verify -CAfile "$gc/certs/ca.crt" -purpose sslserver -verify_hostname "$host" "$dir/secret-tls.crt" 2>&1)" \
    "$dir/secret-tls.crt: OK" || rc=1
  expect_contains "openssl x509 -checkhost $host" \
    "$(openssl x509 -in "$dir/secret-tls.crt" -noout -checkhost "$host")" "does match certificate" || rc=1
  ok "tls.crt $(openssl x509 -in "$dir/secret-tls.crt" -noout -ext subjectAltName | tr -s ' \n' ' ')"
  expect_eq "Secret tls.key is the key of tls.crt (sha256 of the public key)" \
    "$(openssl pkey -in "$dir/secret-tls.key" -pubout | sha256sum | cut -c1-16)" \
    "$(openssl x509 -in "$dir/secret-tls.crt" -noout -pubkey | sha256sum | cut -c1-16)" || rc=1

  # the webhooks: caBundle = certs/ca.crt, clientConfig.service = the rendered Service
  expect_eq "webhooks whose caBundle is base64 of certs/ca.crt" \
    "$(jq -r --arg b "$(base64 -w0 <"$gc/certs/ca.crt")" \
      '[.[] | .webhooks[]? | "\(.name)=\(.clientConfig.caBundle == $b)"] | sort | join(" ")' "$G")" \
    "mirrors.pinhook.dev=true pin.pinhook.dev=true validate.pinhook.dev=true" || rc=1
  expect_eq "webhooks' clientConfig.service" \
    "$(jq -r '[.[] | .webhooks[]? | .clientConfig.service as $s | "\(.name)->\($s.namespace)/\($s.name):\($s.port)\($s.path)"] | join(" ")' "$G")" \
    "pin.pinhook.dev->pinhook-system/pinhook:443/mutate validate.pinhook.dev->pinhook-system/pinhook:443/validate mirrors.pinhook.dev->pinhook-system/pinhook:443/validate" || rc=1
  expect_eq "Service pinhook-system/pinhook: port -> targetPort, container port of that name" \
    "$(jq -r '(.[] | select(.kind == "Service" and .metadata.name == "pinhook") | .spec.ports[0] | "\(.port)->\(.targetPort)"),
      (.[] | select(.kind == "Deployment" and .metadata.name == "pinhook") | .spec.template.spec.containers[0].ports[] | "\(.name)=\(.containerPort)")' "$G" | tr '\n' ' ')" \
    "443->https https=8443 " || rc=1

  # the Deployment: the image kustomization.yaml's `images:` sets, 2 replicas, locked down
  local dep='.[] | select(.kind == "Deployment" and .metadata.name == "pinhook")' want_image
  want_image=$(objects_json "$m/base/kustomization.yaml" | jq '.[0]' |
    kustomize_image "$(objects_json "$m/base/deployment.yaml" | jq -r '.[0].spec.template.spec.containers[0].image')")
  expect_eq "Deployment pinhook: image (base/kustomization.yaml images:)" \
    "$(jq -r "$dep | .spec.template.spec.containers[].image" "$G")" "$want_image" || rc=1
  expect_eq "Deployment pinhook: namespace, replicas" "$(jq -r "$dep | \"\(.metadata.namespace) \(.spec.replicas)\"" "$G")" "pinhook-system 2" || rc=1
  expect_eq "Deployment pinhook: pod securityContext runAsNonRoot, seccompProfile" \
    "$(jq -r "$dep | .spec.template.spec.securityContext | \"runAsNonRoot=\(.runAsNonRoot) seccomp=\(.seccompProfile.type)\"" "$G")" \
    "runAsNonRoot=true seccomp=RuntimeDefault" || rc=1
  # per container, the effective value (the container's own, else the pod's)
  expect_eq "Deployment pinhook: containers' securityContext" \
    "$(jq -r "$dep | .spec.template.spec as \$s | [\$s.containers[] | .securityContext as \$c |
      def eff(\$k): if (\$c | has(\$k)) then \$c[\$k] else \$s.securityContext[\$k] end;
      \"\(.name): runAsNonRoot=\(eff(\"runAsNonRoot\")) readOnlyRootFilesystem=\(\$c.readOnlyRootFilesystem) allowPrivilegeEscalation=\(\$c.allowPrivilegeEscalation) drop=\(\$c.capabilities.drop | join(\",\")) seccomp=\(eff(\"seccompProfile\").type)\"] | join(\"; \")" "$G")" \
    "pinhook: runAsNonRoot=true readOnlyRootFilesystem=true allowPrivilegeEscalation=false drop=ALL seccomp=RuntimeDefault" || rc=1
  expect_eq "Deployment pinhook: Secret and ConfigMap it mounts" \
    "$(jq -r "$dep | [.spec.template.spec.volumes[] | .secret.secretName // .configMap.name // empty] | join(\" \")" "$G")" \
    "pinhook-tls pinhook-policy" || rc=1
  # the policy in the ConfigMap loads in pinhook (check --policy exits 2 on an invalid policy)
  jq -r '.[] | select(.kind == "ConfigMap" and .metadata.name == "pinhook-policy") | .data["policy.yaml"]' "$G" >"$dir/policy.yaml"
  code=0
  printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: e2e-l}\n' |
    "$PINHOOK_BIN" check --policy "$dir/policy.yaml" - >"$dir/policy-check.out" 2>&1 || code=$?
  expect_eq "pinhook check --policy <ConfigMap pinhook-policy's policy.yaml>: exit code" "$code" 0 || { log "  $(<"$dir/policy-check.out")"; rc=1; }

  # 2. server-side dry run of everything a 1.20 apiserver serves. pinhook-system exists (the
  #    local-url set-up) and is excluded from the webhooks; the webhook configurations exist too
  #    (local-url, clientConfig.url): the dry run patches them to clientConfig.service, stores nothing.
  local versions
  versions=$(K api-versions)
  jq --arg v "$versions" '($v | split("\n")) as $s | map(select(.apiVersion as $a | any($s[]; . == $a)))' "$G" >"$dir/served.json"
  expect_eq "rendered objects whose apiVersion the 1.20 apiserver does not serve" \
    "$(jq -r --arg v "$versions" '($v | split("\n")) as $s |
      [.[] | select(.apiVersion as $a | any($s[]; . == $a) | not) | "\(.apiVersion) \(.kind) \(.metadata.namespace)/\(.metadata.name)"] | join("; ")' "$G")" \
    "policy/v1 PodDisruptionBudget pinhook-system/pinhook" || rc=1
  local state_before url_before n
  n=$(jq length "$dir/served.json")
  state_before=$(webhook_state)
  url_before=$(K get mutatingwebhookconfiguration pinhook -o jsonpath='{.webhooks[0].clientConfig.url}')
  expect_eq "registered mutating webhook's clientConfig.url before the dry runs" "$url_before" "$PINHOOK_URL/mutate" || rc=1
  jq '{apiVersion: "v1", kind: "List", items: .}' "$dir/served.json" >"$dir/served-list.json"
  kubectl_to "$dir/apply" apply --dry-run=server -f "$dir/served-list.json"
  while IFS= read -r out; do log "    $out"; done <"$dir/apply.out"
  expect_eq "kubectl apply --dry-run=server of the $n served objects: exit code" "$KCODE" 0 || rc=1
  expect_eq "kubectl apply --dry-run=server: lines '... (server dry run)'" "$(grep -c ' (server dry run)$' "$dir/apply.out" || true)" "$n" || rc=1
  expect_eq "kubectl apply --dry-run=server: stderr (warnings)" "${KERR:-none}" none || rc=1
  # the PDB: policy/v1 is refused by kubectl's discovery; as policy/v1beta1 the apiserver validates it
  jq '.[] | select(.kind == "PodDisruptionBudget")' "$G" >"$dir/pdb-v1.json"
  jq '.apiVersion = "policy/v1beta1"' "$dir/pdb-v1.json" >"$dir/pdb-v1beta1.json"
  kubectl_to "$dir/pdb-v1" apply --dry-run=server -f "$dir/pdb-v1.json"
  if ((KCODE == 0)); then bad "the policy/v1 PodDisruptionBudget was accepted by a 1.20 apiserver" || rc=1; fi
  expect_contains "kubectl apply --dry-run=server of the policy/v1 PDB: stderr" "$KERR" \
    'no matches for kind "PodDisruptionBudget" in version "policy/v1"' || rc=1
  kubectl_to "$dir/pdb-v1beta1" apply --dry-run=server -f "$dir/pdb-v1beta1.json"
  expect_eq "kubectl apply --dry-run=server of the PDB as policy/v1beta1" "$KCODE $(<"$dir/pdb-v1beta1.out")" \
    "0 poddisruptionbudget.policy/pinhook created (server dry run)" || rc=1
  # what the apiserver would store: every rendered field kept (1.20 drops fields it does not know)
  jq -s '.[0] + [.[1]]' "$dir/served.json" "$dir/pdb-v1beta1.json" >"$dir/dry-run-input.json"
  jq '{apiVersion: "v1", kind: "List", items: .}' "$dir/dry-run-input.json" >"$dir/dry-run-input-list.json"
  kubectl_to "$dir/answer" apply --dry-run=server -o json -f "$dir/dry-run-input-list.json"
  expect_eq "kubectl apply --dry-run=server -o json (the $((n + 1)) objects): exit code" "$KCODE" 0 || rc=1
  out=$(dropped_fields "$dir/dry-run-input.json" "$dir/answer.out")
  expect_eq "rendered fields missing or changed in the apiserver's dry-run answer" "${out:-none}" none || rc=1
  expect_eq "the dry run's webhooks (url patched away, service set)" \
    "$(jq -r '[.items[] | .webhooks[]? | "\(.name) url=\(.clientConfig.url // "none") service=\(.clientConfig.service.name // "none")"] | join("; ")' "$dir/answer.out")" \
    "pin.pinhook.dev url=none service=pinhook; validate.pinhook.dev url=none service=pinhook; mirrors.pinhook.dev url=none service=pinhook" || rc=1
  # nothing stored, nothing changed
  expect_eq "registered mutating webhook's clientConfig.url after the dry runs" \
    "$(K get mutatingwebhookconfiguration pinhook -o jsonpath='{.webhooks[0].clientConfig.url}')" "$url_before" || rc=1
  expect_eq "registered webhook configurations (resourceVersion, urls) after the dry runs" "$(webhook_state)" "$state_before" || rc=1
  local obj
  for obj in "deployment pinhook" "service pinhook" "secret pinhook-tls" "configmap pinhook-policy" \
    "poddisruptionbudgets.v1beta1.policy pinhook"; do
    # shellcheck disable=SC2086 # KIND NAME
    expect_absent $obj pinhook-system || rc=1
  done

  # 3. overlays/cert-manager (no cert-manager CRDs here: rendered only)
  local C="$dir/cert-manager.json" cert
  code=0
  kubectl kustomize "$m/overlays/cert-manager" >"$dir/cert-manager.yaml" 2>"$dir/cert-manager.err" || code=$?
  expect_eq "kubectl kustomize overlays/cert-manager: exit code" "$code" 0 || { log "  stderr: $(<"$dir/cert-manager.err")"; return 1; }
  objects_json "$dir/cert-manager.yaml" >"$C"
  ok "rendered $(jq length "$C") objects: $(jq -r 'map("\(.kind)/\(.metadata.name)") | join(" ")' "$C")"
  cert=$(jq -r --arg h "$host" '[.[] | select(.apiVersion == "cert-manager.io/v1" and .kind == "Certificate" and any(.spec.dnsNames[]?; . == $h)) |
    "\(.metadata.namespace)/\(.metadata.name)"] | join(" ")' "$C")
  expect_eq "cert-manager Certificates for $host" "$(wc -w <<<"$cert")" 1 || rc=1
  expect_eq "Certificate $cert: secretName (what the Deployment mounts), issuerRef" \
    "$(jq -r --arg c "$cert" '.[] | select(.kind == "Certificate" and "\(.metadata.namespace)/\(.metadata.name)" == $c) |
      "\(.spec.secretName) \(.spec.issuerRef.kind)"' "$C")" "pinhook-tls Issuer" || rc=1
  ok "Issuers: $(jq -r '[.[] | select(.kind == "Issuer") | "\(.metadata.namespace)/\(.metadata.name)"] | join(" ")' "$C")"
  expect_eq "Certificates whose issuerRef names no rendered Issuer" \
    "$(jq -r '(map(select(.kind == "Issuer") | "\(.metadata.namespace)/\(.metadata.name)")) as $iss |
      [.[] | select(.kind == "Certificate") | select(.spec.issuerRef.kind != "Issuer" or
        ("\(.metadata.namespace)/\(.spec.issuerRef.name)" as $i | any($iss[]; . == $i) | not)) | .metadata.name] |
      if length == 0 then "none" else join(" ") end' "$C")" none || rc=1
  expect_eq "webhook configurations' cert-manager.io/inject-ca-from" \
    "$(jq -r '[.[] | select(.kind | endswith("WebhookConfiguration")) | "\(.kind)=\(.metadata.annotations["cert-manager.io/inject-ca-from"] // "none")"] | join(" ")' "$C")" \
    "MutatingWebhookConfiguration=$cert ValidatingWebhookConfiguration=$cert" || rc=1
  expect_eq "cert-manager webhooks: those with a caBundle (cainjector sets it), those excluding namespace cert-manager" \
    "$(jq -r '[.[] | .webhooks[]?] | "\(map(select(.clientConfig.caBundle)) | length) of \(length), \(map(select(any(.namespaceSelector.matchExpressions[]; .operator == "NotIn" and any(.values[]; . == "cert-manager")))) | length) of \(length)"' "$C")" \
    "0 of 3, 3 of 3" || rc=1

  # 3b. overlays/node-credential-providers (cert-manager + the component, issue 12): rendered,
  # the Deployment mounts the node's provider config and plugin directory read-only (EKS's
  # paths) and points pinhook at them, and the apiserver accepts it (server-side dry run)
  local N="$dir/node-credential-providers.json"
  code=0
  kubectl kustomize "$m/overlays/node-credential-providers" >"$dir/ncp.yaml" 2>"$dir/ncp.err" || code=$?
  expect_eq "kubectl kustomize overlays/node-credential-providers: exit code" "$code" 0 || { log "  stderr: $(<"$dir/ncp.err")"; return 1; }
  objects_json "$dir/ncp.yaml" >"$N"
  local d
  for d in pinhook pinhook-watch; do
    expect_eq "node-credential-providers Deployment $d: provider env vars, their mounts read-only, hostPaths" \
      "$(jq -r --arg d "$d" '.[] | select(.kind == "Deployment" and .metadata.name == $d) | .spec.template.spec as $s |
        "\($s.containers[0].env | map(select(.name | startswith("PINHOOK_IMAGE_CREDENTIAL_PROVIDER"))) | length) \([$s.containers[0].volumeMounts[] | select(.name | startswith("node-credential-provider")) | .readOnly] | map(tostring) | join(",")) \([$s.volumes[] | select(.hostPath) | .hostPath.path] | join(","))"' "$N")" \
      "2 true,true /etc/eks/image-credential-provider/config.json,/etc/eks/image-credential-provider" || rc=1
  done
  code=0
  jq '.[] | select(.kind == "Deployment" and .metadata.name == "pinhook")' "$N" | K apply --dry-run=server -f - >"$dir/ncp-apply.out" 2>&1 || code=$?
  expect_eq "kubectl apply --dry-run=server of the node-credential-providers Deployment: exit code" "$code" 0 || { log "  $(<"$dir/ncp-apply.out")"; rc=1; }

  # 4. render.sh again: reuses certs/, so nothing changes
  local ca_sum gen_before
  ca_sum=$(sha256sum <"$gc/certs/ca.crt" | cut -c1-64)
  gen_before=$(cd "$gc" && sha256sum certs/* cabundle-patch.yaml)
  code=0
  out=$(PINHOOK="$PINHOOK_BIN" "$gc/render.sh" 2>&1) || code=$?
  expect_eq "render.sh (2nd run): exit code" "$code" 0 || rc=1
  expect_eq "sha256 of certs/ca.crt after the 2nd render.sh" "$(sha256sum <"$gc/certs/ca.crt" | cut -c1-64)" "$ca_sum" || rc=1
  same_object "certs/* and cabundle-patch.yaml (sha256) after the 2nd render.sh" "$gen_before" "$(cd "$gc" && sha256sum certs/* cabundle-patch.yaml)" || rc=1
  same_object "kubectl kustomize overlays/generated-certs after the 2nd render.sh" "$(<"$dir/generated-certs.yaml")" "$(kubectl kustomize "$gc")" || rc=1
  expect_eq "render.sh's temporary .certs.* directories left" "$(find "$gc" -maxdepth 1 -name '.certs.*' | wc -l)" 0 || rc=1
  expect_eq "the source tree's manifests/ (names, sizes, mtimes)" "$(tree_state "$ROOT/manifests")" "$src_before" || rc=1
  return "$rc"
}

# --- m-r: with the controllers of kube-controller-manager (issue 9) -------------------------------
# Each scenario runs the same kubectl steps in two namespaces: NS, which pinhook sees, and
# NS-ref, labelled pinhook.dev/ignore=true, which no webhook sees (the controllers' own result).
# Every scenario logs a `counts:` line (ReplicaSets, Pods... with pinhook / without) and
# asserts on what the apiserver stored. Waits poll; only m's 60 s watch and q's cache timing
# are fixed durations, because that time is what they are about.

app_deployment() { # app_deployment NAME REPLICAS IMAGE: a Deployment with one container `app`
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $1
spec:
  replicas: $2
  selector:
    matchLabels: {app: $1}
  template:
    metadata:
      labels: {app: $1}
    spec:
      containers:
        - name: app
          image: $3
EOF
}
# both NS REF KUBECTL-ARGS...: the same kubectl command in the namespace pinhook sees and its twin
both() {
  local ns=$1 ref=$2
  shift 2
  klog -n "$ns" "$@" && klog -n "$ref" "$@"
}
count() { # count NS RESOURCE [SELECTOR]: how many are stored
  K -n "$1" get "$2" ${3:+-l "$3"} -o name | grep -c . || true
}
# images NS RESOURCE JSONPATH-TO-IMAGES [SELECTOR]: "N image" lines (sorted uniq -c) over all objects
images() {
  K -n "$1" get "$2" ${4:+-l "$4"} -o jsonpath="{range .items[*]}{$3}{\"\n\"}{end}" | sort | uniq -c | sed 's/^ *//'
}
pod_images() { images "$1" pods '.spec.containers[*].image' "${2:-}"; } # pod_images NS [SELECTOR]
template_images() { jp "$1" "$2" "$3" '{.spec.template.spec.containers[*].image}'; } # NS KIND NAME
log_counts() { # log_counts NS REF RESOURCE...: "counts: rs 2/2 pods 3/3" (with pinhook / no webhook)
  local ns=$1 ref=$2 r line="counts:"
  shift 2
  for r in "$@"; do line+=" $r $(count "$ns" "$r")/$(count "$ref" "$r")"; done
  log "  $line (with pinhook in $ns / no webhook in $ref)"
}
# current_rs NS DEPLOYMENT: the ReplicaSet of the Deployment's current revision
current_rs() {
  local rev
  rev=$(jp "$1" deployment "$2" '{.metadata.annotations.deployment\.kubernetes\.io/revision}')
  K -n "$1" get rs -o json | jq -r --arg d "$2" --arg rev "$rev" '.items[] |
    select(any(.metadata.ownerReferences[]?; .kind == "Deployment" and .name == $d)) |
    select(.metadata.annotations["deployment.kubernetes.io/revision"] == $rev) | .metadata.name'
}
rs_pods_selector() { printf 'pod-template-hash=%s' "$(jp "$1" rs "$2" '{.metadata.labels.pod-template-hash}')"; }
# rollout_settled NS DEPLOYMENT: the controller has seen the last change and the ReplicaSet of
# the current revision has all the Pods it asked for (they never become ready here: no kubelet,
# so no rollout ever completes; this is as far as the controllers go)
rollout_settled() {
  local gen rs
  gen=$(jp "$1" deployment "$2" '{.metadata.generation} {.status.observedGeneration}')
  [[ ${gen% *} == "${gen#* }" ]] || return 1
  rs=$(current_rs "$1" "$2")
  [[ -n $rs && $rs != *$'\n'* ]] || return 1
  gen=$(jp "$1" rs "$rs" '{.spec.replicas} {.status.replicas} {.metadata.generation} {.status.observedGeneration}')
  local -a f
  read -r -a f <<<"$gen"
  ((${#f[@]} == 4 && f[0] > 0 && f[0] == f[1] && f[2] == f[3]))
}
settle() { # settle NS REF DEPLOYMENT: both rollouts settled (≤ 60 s)
  wait_until 60 "the rollout of $3 in $1 to settle" rollout_settled "$1" "$3" || bad "rollout of $3 in $1 did not settle" || return 1
  wait_until 60 "the rollout of $3 in $2 to settle" rollout_settled "$2" "$3" || bad "rollout of $3 in $2 did not settle"
}
# watch_rs NS MAX SECONDS: the number of ReplicaSets in NS stays <= MAX for SECONDS (polled every
# 0.5 s); fails as soon as it is above (a controller fighting a webhook makes several a second)
watch_rs() {
  local ns=$1 max=$2 secs=$3 n top=0 t0
  t0=$(date +%s.%N)
  local deadline=$(($(date +%s) + secs))
  while :; do
    n=$(count "$ns" rs)
    ((n > top)) && top=$n
    if ((n > max)); then
      bad "ReplicaSets in $ns: $n after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s, more than $max"
      return 1
    fi
    (($(date +%s) < deadline)) || break
    sleep 0.5
  done
  ok "ReplicaSets in $ns stayed <= $max for ${secs}s (at most $top)"
}
# dry_run_image NS IMAGE: the image of a server-side dry-run Pod (what the webhooks make of it)
dry_run_image() {
  K -n "$1" run dry-probe --image="$2" --restart=Never --dry-run=server -o jsonpath='{.spec.containers[0].image}'
}
dry_run_gives() { [[ $(dry_run_image "$1" "$2") == "$3" ]]; } # dry_run_gives NS IMAGE EXPECTED
# pods_at_least NS REF SELECTOR N: both namespaces hold at least N Pods matching SELECTOR
pods_at_least() { (($(count "$1" pods "$3") >= $4 && $(count "$2" pods "$3") >= $4)); }
no_digest_in() { # no_digest_in NS RESOURCE...: occurrences of '@sha256' in the stored objects
  local n=0 r
  for r in "${@:2}"; do n=$((n + $(K -n "$1" get "$r" -o json | grep -c '@sha256' || true))); done
  echo "$n"
}
# --- m: audit -> enforce, then a template change (issue 9's loop) ---
# The Deployment is admitted as written in audit. After the namespace moves to enforce,
# `kubectl set env` changes the template but no image: a pinhook that pins the controller's
# ReplicaSet instead of the template makes the Deployment controller create ReplicaSet after
# ReplicaSet (72 in 20 s in the issue). Expected: at most 2 for 60 s, the template pinned, the
# new ReplicaSet's Pods pinned.
# pinhook caches namespace labels for 30 s (--namespace-cache-ttl; the tier keeps the default),
# so m's first half, up to the label change, runs before the first scenario (m_start) and the
# cache ages while the others run; m itself polls until pinhook applies enforce.
m_start() {
  local ns=e2e-m ref=e2e-m-ref
  e2e_ns "$ns" pinhook.dev/mode=audit
  e2e_ns "$ref" pinhook.dev/ignore=true
  app_deployment d 1 "$(image app 1.0)" >"$RUN/m-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/m-deployment.yaml"
  settle "$ns" "$ref" d
  klog label ns "$ns" pinhook.dev/mode=enforce --overwrite
  date +%s >"$RUN/m-enforced-at"
}
scenario_m() {
  local ns=e2e-m ref=e2e-m-ref rc=0 t0 rs
  [[ -s $RUN/m-enforced-at ]] || { bad "m's first half (m_start, before the first scenario) did not finish"; return 1; }
  expect_eq "template image stored in audit (as written)" "$(template_images "$ns" deployment d)" "$(image app 1.0)" || rc=1
  expect_eq "ReplicaSets in $ns after the create in audit" "$(count "$ns" rs)" 1 || rc=1
  expect_eq "label pinhook.dev/mode of $ns" "$(K get ns "$ns" -o jsonpath='{.metadata.labels.pinhook\.dev/mode}')" enforce || rc=1
  t0=$(<"$RUN/m-enforced-at")
  # poll until a dry-run Pod comes back pinned: pinhook applies enforce in the namespace
  wait_until 60 "pinhook to apply enforce in $ns (namespace label cache)" \
    dry_run_gives "$ns" "$(image app 1.0)" "$(pinned app 1.0)" || { bad "pinhook still audits $ns"; return 1; }
  ok "pinhook applies enforce in $ns; the label changed $(($(date +%s) - t0))s ago"

  both "$ns" "$ref" set env deploy/d FOO=bar
  t0=$(date +%s)
  if ! watch_rs "$ns" 2 "${E2E_LOOP_WATCH:-60}"; then
    rc=1
    # stop the loop (a paused Deployment gets no new ReplicaSet) so it cannot load the
    # scenarios after this one; the objects stay for a look
    klog -n "$ns" rollout pause deploy/d || true
    sleep 1
    log "  ReplicaSets in $ns when paused, $(($(date +%s) - t0))s after set env: $(count "$ns" rs)"
    log "  ReplicaSet images in $ns: $(images "$ns" rs '.spec.template.spec.containers[*].image' | tr '\n' ';')"
  fi
  wait_until 60 "the rollout of d in $ref to settle" rollout_settled "$ref" d || rc=1
  expect_eq "ReplicaSets in $ref (no webhook)" "$(count "$ref" rs)" 2 || rc=1
  expect_eq "template image after set env" "$(template_images "$ns" deployment d)" "$(pinned app 1.0)" || rc=1
  if ((rc == 0)) && settle "$ns" "$ref" d; then
    rs=$(current_rs "$ns" d)
    expect_eq "images of the Pods of the new ReplicaSet $rs" "$(pod_images "$ns" "$(rs_pods_selector "$ns" "$rs")")" "1 $(pinned app 1.0)" || rc=1
  else
    rc=1
  fi
  log_counts "$ns" "$ref" rs pods
  return "$rc"
}

# --- n: a Deployment created in enforce ---
scenario_n() {
  local ns=e2e-n ref=e2e-n-ref rc=0 rs
  e2e_ns "$ns"
  e2e_ns "$ref" pinhook.dev/ignore=true
  app_deployment web 3 "$(image app 1.0)" >"$RUN/n-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/n-deployment.yaml"
  settle "$ns" "$ref" web || rc=1
  watch_rs "$ns" 1 3 || rc=1
  expect_eq "stored template image" "$(template_images "$ns" deployment web)" "$(pinned app 1.0)" || rc=1
  expect_eq "ReplicaSets in $ns" "$(count "$ns" rs)" 1 || rc=1
  expect_eq "ReplicaSets in $ref (no webhook)" "$(count "$ref" rs)" 1 || rc=1
  rs=$(current_rs "$ns" web)
  expect_eq "template image of ReplicaSet $rs" "$(template_images "$ns" rs "$rs")" "$(pinned app 1.0)" || rc=1
  expect_eq "images of the Deployment's Pods (count image)" "$(pod_images "$ns" app=web)" "3 $(pinned app 1.0)" || rc=1
  log_counts "$ns" "$ref" rs pods
  return "$rc"
}

# --- o: rollout restart and rollout undo of a pinned Deployment ---
scenario_o() {
  local ns=e2e-o ref=e2e-o-ref rc=0 step rs n
  e2e_ns "$ns"
  e2e_ns "$ref" pinhook.dev/ignore=true
  app_deployment web 1 "$(image app 1.0)" >"$RUN/o-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/o-deployment.yaml"
  settle "$ns" "$ref" web || rc=1
  expect_eq "stored template image" "$(template_images "$ns" deployment web)" "$(pinned app 1.0)" || rc=1
  for step in "rollout restart" "rollout undo"; do
    # shellcheck disable=SC2086 # "rollout restart" -> rollout restart
    both "$ns" "$ref" $step deploy/web
    settle "$ns" "$ref" web || rc=1
    n=$(count "$ref" rs)
    watch_rs "$ns" "$n" 3 || rc=1
    expect_eq "ReplicaSets after $step: $ns = $ref (no webhook, $n)" "$(count "$ns" rs)" "$n" || rc=1
    expect_eq "template images of all ReplicaSets after $step (count image)" \
      "$(images "$ns" rs '.spec.template.spec.containers[*].image')" "$n $(pinned app 1.0)" || rc=1
    rs=$(current_rs "$ns" web)
    expect_eq "images of the Pods of the current ReplicaSet $rs after $step" \
      "$(pod_images "$ns" "$(rs_pods_selector "$ns" "$rs")")" "1 $(pinned app 1.0)" || rc=1
    log_counts "$ns" "$ref" rs pods
  done
  expect_eq "template image after the undo" "$(template_images "$ns" deployment web)" "$(pinned app 1.0)" || rc=1
  return "$rc"
}

# --- p: StatefulSet, DaemonSet, Job, and a Job made from a CronJob ---
# A Node object for the DaemonSet controller to place a Pod on (no kubelet: it stays NotReady).
# The apiserver taints a new Node node.kubernetes.io/not-ready:NoSchedule, which daemon Pods do
# not tolerate (only the NoExecute one), and without a node lifecycle controller nothing would
# ever lift it: the taint is removed by hand.
ensure_node() {
  K get node e2e-node >/dev/null 2>&1 && return 0
  klog create -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: e2e-node
  labels: {kubernetes.io/hostname: e2e-node}
EOF
  klog taint node e2e-node node.kubernetes.io/not-ready:NoSchedule-
}
workloads_yaml() { # the StatefulSet, DaemonSet, Job and CronJob of p (tag-only images)
  cat <<EOF
$(statefulset_yaml 2 Parallel)
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
        - name: agent
          image: $(image agent 1.0)
---
apiVersion: batch/v1
kind: Job
metadata:
  name: once
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: job
          image: $(image job 1.0)
---
$(cronjob_yaml)
EOF
}
# job_from_cronjob NS: what `kubectl create job nightly-manual --from=cronjob/nightly` sends.
# kubectl 1.32 cannot do it against 1.20 (it reads the CronJob as batch/v1: "unknown object
# type *v1beta1.CronJob"), so the Job is built as kubectl builds it (pkg/cmd/create/
# create_job.go createJobFromCronJob): the jobTemplate's labels and spec, its annotations plus
# cronjob.kubernetes.io/instantiate=manual, the CronJob as controller owner.
job_from_cronjob() {
  K -n "$1" get cronjobs.v1beta1.batch nightly -o json | jq '{
    apiVersion: "batch/v1", kind: "Job",
    metadata: {
      name: "nightly-manual",
      labels: (.spec.jobTemplate.metadata.labels // {}),
      annotations: ({"cronjob.kubernetes.io/instantiate": "manual"} + (.spec.jobTemplate.metadata.annotations // {})),
      ownerReferences: [{apiVersion: "batch/v1beta1", kind: "CronJob", name: .metadata.name,
        uid: .metadata.uid, controller: true, blockOwnerDeletion: true}]
    },
    spec: .spec.jobTemplate.spec}' | klog -n "$1" create -f -
}
scenario_p() {
  local ns=e2e-p ref=e2e-p-ref rc=0 w
  e2e_ns "$ns"
  e2e_ns "$ref" pinhook.dev/ignore=true
  ensure_node
  workloads_yaml >"$RUN/p-workloads.yaml"
  both "$ns" "$ref" create -f "$RUN/p-workloads.yaml"
  job_from_cronjob "$ns"
  job_from_cronjob "$ref"
  expect_eq "stored Job nightly-manual (from the CronJob): template image" \
    "$(template_images "$ns" job nightly-manual)" "$(pinned cron 1.0)" || rc=1
  # kind name selector pods repo: each controller's Pods, with the digest of the pinned template
  local -a spec=(
    "statefulset db app=db 2 db"
    "daemonset agent app=agent 1 agent"
    "job once job-name=once 1 job"
    "job nightly-manual job-name=nightly-manual 1 cron"
  )
  local kind name sel n repo
  for w in "${spec[@]}"; do
    read -r kind name sel n repo <<<"$w"
    expect_eq "$kind $name: stored template image" "$(template_images "$ns" "$kind" "$name")" "$(pinned "$repo" 1.0)" || rc=1
    wait_until 30 "$n Pod(s) of $kind $name in $ns and $ref" pods_at_least "$ns" "$ref" "$sel" "$n" || rc=1
    expect_eq "$kind $name: images of its Pods (count image)" "$(pod_images "$ns" "$sel")" "$n $(pinned "$repo" 1.0)" || rc=1
    expect_eq "$kind $name: Pods, $ns = $ref (no webhook)" "$(count "$ns" pods "$sel")" "$(count "$ref" pods "$sel")" || rc=1
  done
  expect_eq "cronjob nightly: stored jobTemplate image" \
    "$(jp "$ns" cronjobs.v1beta1.batch nightly '{.spec.jobTemplate.spec.template.spec.containers[*].image}')" "$(pinned cron 1.0)" || rc=1
  # a StatefulSet or DaemonSet whose Pods differ from its template would churn revisions
  sleep 2
  expect_eq "ControllerRevisions, $ns = $ref (no webhook)" "$(count "$ns" controllerrevisions)" "$(count "$ref" controllerrevisions)" || rc=1
  log_counts "$ns" "$ref" pods controllerrevisions jobs
  return "$rc"
}

# --- q: target: pods, one digest per owner revision across a re-push ---
# The second pinhook (set-up 6b: policy `target: pods`, its own webhooks for namespaces labelled
# pinhook.dev/e2e-instance=pods) runs with --cache-ttl $PODS_CACHE_TTL; its owner-revision
# memo lives --owner-revision-ttl (24 h by default), from the first Pod of
# the revision on, while the cache entry was made earlier, by a bare Pod: after the re-push the
# cache answers the new digest while the revision still holds the old one. Timeline (T = TTL):
#   0      bare Pod `warm`: cache miss, resolved to D1 (cache entry ages from here)
#   T/2    Deployment web (1 replica): its Pod gets D1 from the cache; the revision memo from here
#   ~T/2   re-push roll:1.0 -> D2
#   T      a dry-run Pod now gets D2 (the cache entry expired): polled
#   ~T     scale to 3: the 2 new Pods of the same revision get D1 (memo, until ~3T/2)
#   then   rollout restart: the new revision's Pod gets D2
scenario_q() {
  local ns=e2e-q ref=e2e-q-ref rc=0 d1 d2 t0 t1 rs old_rs
  e2e_ns "$ns" pinhook.dev/ignore=true pinhook.dev/e2e-instance=pods
  e2e_ns "$ref" pinhook.dev/ignore=true
  d1=$(digest roll 1.0)
  local tagged
  tagged=$(image roll 1.0)
  klog -n "$ns" run warm --image="$tagged" --restart=Never
  klog -n "$ref" run warm --image="$tagged" --restart=Never # (the same Pods in both: same counts)
  t0=$(date +%s.%N)
  expect_eq "bare Pod warm (warms the cache)" "$(jp "$ns" pod warm '{.spec.containers[0].image}')" "$tagged@$d1" || return 1
  sleep "$(awk -v t0="$t0" -v n="$(date +%s.%N)" -v T="$PODS_CACHE_TTL" 'BEGIN { s = t0 + T / 2 - n; printf "%.2f", (s > 0 ? s : 0) }')"
  app_deployment web 1 "$tagged" >"$RUN/q-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/q-deployment.yaml"
  wait_until 30 "the first Pod of web in $ns" pods_at_least "$ns" "$ns" app=web 1 || return 1
  t1=$(date +%s.%N)
  expect_eq "the first Pod of web" "$(pod_images "$ns" app=web)" "1 $tagged@$d1" || rc=1
  expect_eq "Deployment template (target: pods leaves it as written)" "$(template_images "$ns" deployment web)" "$tagged" || rc=1
  old_rs=$(current_rs "$ns" web)
  expect_eq "ReplicaSet $old_rs template (as written)" "$(template_images "$ns" rs "$old_rs")" "$tagged" || rc=1

  d2=$(repush roll 1.0) || { bad "the registry helper did not re-push roll:1.0"; return 1; }
  if [[ $d2 == "$d1" ]]; then bad "the re-push kept the digest $d1" || return 1; fi
  ok "re-pushed roll:1.0: $d1 -> $d2"
  wait_until $((PODS_CACHE_TTL + 15)) "pinhook's cache to expire (a dry-run Pod pinned to the new digest)" \
    dry_run_gives "$ns" "$tagged" "$tagged@$d2" || rc=1
  ok "a Pod without owner now gets $d2 ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s after the cache entry)"
  both "$ns" "$ref" scale deploy/web --replicas=3
  wait_until 30 "3 Pods of web in $ns and $ref" pods_at_least "$ns" "$ref" app=web 3 || rc=1
  local age
  age=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  expect_eq "images of the 3 Pods of ReplicaSet $old_rs (one revision), the last 2 created after the re-push, ${age}s after the first" \
    "$(pod_images "$ns" app=web)" "3 $tagged@$d1" || rc=1
  if awk -v a="$age" -v T="$PODS_CACHE_TTL" 'BEGIN { exit !(a >= T) }'; then
    log "  note: the scale-up came ${age}s after the first Pod, past the revision memo's ${PODS_CACHE_TTL}s: timing too slow to tell"
  fi

  both "$ns" "$ref" rollout restart deploy/web
  settle "$ns" "$ref" web || rc=1
  rs=$(current_rs "$ns" web)
  expect_eq "images of the Pods of the new revision's ReplicaSet $rs" "$(pod_images "$ns" "$(rs_pods_selector "$ns" "$rs")")" "1 $tagged@$d2" || rc=1
  expect_eq "images of the Pods of $old_rs (unchanged)" "$(pod_images "$ns" "$(rs_pods_selector "$ns" "$old_rs")")" "3 $tagged@$d1" || rc=1
  expect_eq "ReplicaSets, $ns = $ref (no webhook)" "$(count "$ns" rs)" "$(count "$ref" rs)" || rc=1
  expect_eq "ReplicaSet templates (as written)" "$(images "$ns" rs '.spec.template.spec.containers[*].image')" "2 $tagged" || rc=1
  log_counts "$ns" "$ref" rs pods
  return "$rc"
}

# --- r: audit namespace with the controllers running ---
scenario_r() {
  local ns=e2e-r ref=e2e-r-ref rc=0 lines_before
  e2e_ns "$ns" pinhook.dev/mode=audit
  e2e_ns "$ref" pinhook.dev/ignore=true
  lines_before=$(log_lines)
  app_deployment web 2 "$(image app 1.0)" >"$RUN/r-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/r-deployment.yaml"
  settle "$ns" "$ref" web || rc=1
  both "$ns" "$ref" set env deploy/web FOO=bar
  settle "$ns" "$ref" web || rc=1
  watch_rs "$ns" "$(count "$ref" rs)" 3 || rc=1
  expect_eq "ReplicaSets, $ns = $ref (no webhook)" "$(count "$ns" rs)" "$(count "$ref" rs)" || rc=1
  expect_eq "Pods, $ns = $ref (no webhook)" "$(count "$ns" pods)" "$(count "$ref" pods)" || rc=1
  expect_eq "occurrences of '@sha256' in the stored Deployment, ReplicaSets and Pods" "$(no_digest_in "$ns" deployments rs pods)" 0 || rc=1
  same_object "stored Deployment spec, $ns vs $ref (no webhook)" "$(spec_json "$ref" deployment web)" "$(spec_json "$ns" deployment web)" || rc=1
  expect_eq "pinhook log: reviews in $ns that pinned something" \
    "$(log_since "$lines_before" | grep -F " namespace=$ns " | grep -F ': review ' | grep -vcF ' pinned=0 ' || true)" 0 || rc=1
  ok "pinhook log: reviews in $ns that would have pinned in enforce: $(log_since "$lines_before" | grep -F " namespace=$ns " | grep -F ': review ' | grep -vcF ' would_pin=0 ' || true)"
  log_counts "$ns" "$ref" rs pods
  return "$rc"
}

# --- s: a private image with no pull secret, pinned through a credential provider plugin ---
# (issue 12) pinhook runs the node's kubelet credential provider plugins: here the example
# plugin (examples/credential_provider.rs) configured in $PROVIDERS/config.yaml, matching the
# private htpasswd registry only. A Pod with that registry's image and no imagePullSecrets is
# stored pinned to the exact index digest; the plugin ran (and no more than once for the
# same image: Image cache key, 5m); its password is in no log line of pinhook.
scenario_s() {
  local ns=e2e-s rc=0 runs_before runs_after
  e2e_ns "$ns"
  runs_before=$(grep -c . "$PROVIDERS/runs" 2>/dev/null || true)
  klog -n "$ns" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: private
spec:
  containers:
    - name: app
      image: $PRIVATE_HOST/team/private:1.0
EOF
  expect_eq "pull secrets of the pod" "$(jp "$ns" pod private '{.spec.imagePullSecrets}')" "" || rc=1
  expect_eq "stored pod containers[0].image" "$(jp "$ns" pod private '{.spec.containers[0].image}')" \
    "$PRIVATE_HOST/team/private:1.0@$DIGEST_private_1_0" || rc=1
  klog -n "$ns" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: private-again
spec:
  containers:
    - name: app
      image: $PRIVATE_HOST/team/private:1.0
EOF
  runs_after=$(grep -c . "$PROVIDERS/runs" 2>/dev/null || true)
  expect_eq "plugin runs for the two Pods (Image cache key, cached 5m)" "$((runs_after - runs_before))" 1 || rc=1
  expect_eq "pinhook log lines with the plugin's password" "$(grep -cF "$PRIVATE_PASSWORD" "$RUN/pinhook.log" || true)" 0 || rc=1
  ok "pinhook_credential_provider_execs_total: $(metric_sum pinhook_credential_provider_execs_total 'provider="e2e-provider"')"
  return "$rc"
}

# shellcheck source=tests/e2e/helm.sh
source "$E2E_DIR/helm.sh"
# shellcheck source=tests/e2e/watch.sh
source "$E2E_DIR/watch.sh"

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

if [[ " ${SELECTED[*]} " == *" m "* ]]; then
  log "m: its first half now, so that pinhook's 30 s namespace label cache ages while the others run"
  set +e # (as run_scenario: errexit inside the subshell only works outside an || list)
  (set -eE && m_start)
  (($? == 0)) || log "m: its first half failed (m will fail)"
  set -e
fi
log "set-up done in $(($(date +%s) - T_START))s; running ${#SELECTED[@]} scenario(s)"
T_SCEN=$(date +%s)
for s in "${SELECTED[@]}"; do
  run_scenario "$s"
  SCENARIOS_DONE=$((SCENARIOS_DONE + 1))
done
log "scenarios done in $(($(date +%s) - T_SCEN))s"
exit 0 # cleanup (EXIT trap) prints the summary line last and sets the exit code
}
