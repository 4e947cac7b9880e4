# shellcheck shell=bash
# The end-to-end tier's shared parts, sourced by run.sh before it runs anything (and by
# readme.sh, for the scenario headers). Definitions only: sourcing this file starts nothing.
#
#   scenario files    scenario_files, scenario_field, scenario_fn: the scenarios/*.sh and
#                     their headers, read the same way by run.sh and readme.sh
#   processes         log, die, free_port, pick_port, wait_until, alive, stop_pid, tail_log
#   set-up, teardown  e2e_setup_build, e2e_setup_cluster, e2e_setup_registry,
#                     e2e_setup_manifests, e2e_setup_identity, e2e_setup_pinhook (run.sh calls
#                     them in this order), e2e_setup_pods_pinhook (`needs: pods-pinhook`),
#                     e2e_teardown
#   for scenarios     kubectl (K, klog, jp, kubectl_to), assertions (ok, bad, expect_eq,
#                     expect_contains, same_object, expect_absent), the registry helper's images
#                     (image, pinned, digest, repush), manifests several scenarios create,
#                     pinhook's metrics and log, and the twin-namespace helpers of the scenarios
#                     that run with the controllers (both, count, settle, log_counts...)
#
# Globals it uses, set by run.sh: E2E_DIR, ROOT, E2E_WORK, RUN, and the PIDs the teardown
# stops (PINHOOK_PID, PODS_PINHOOK_PID, REGISTRY_PID, CLUSTER_STARTED).
#
# A scenario is one file, scenarios/NAME.sh (NAME: lowercase words joined by -, saying what it
# proves). Its header is its first comment lines, up to the first line that is `#` alone or not
# a comment:
#   # title: one line (run.sh logs it; the README's list)
#   # order: an integer; a run goes by it, then by name
#   # proves: a paragraph, continued on lines that start with `#   ` (the README's list)
#   # default: no       (optional) run only when named exactly on the command line
#   # needs: WORD...    (optional) set-up beyond the common one: pods-pinhook (a second pinhook
#                       with `target: pods`), scale-images (WATCH_SCALE_IMAGES more images),
#                       node (node.sh's kubelet, containerd and scheduler: started before the
#                       first such scenario, so give them an order after every other one)
# The file defines scenario_NAME (NAME with - as _), which run.sh runs in a subshell with
# errexit on, in a fresh namespace of its own, and may define prepare_NAME, which run.sh runs
# after the set-up, before the first scenario. Any other function it defines must have a name
# no other file uses: run.sh sources every scenario file.

E2E_DIR="${E2E_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
# shellcheck source=tests/e2e/cluster.sh
source "$E2E_DIR/cluster.sh"
# shellcheck source=tests/e2e/node.sh
source "$E2E_DIR/node.sh"

# === scenario files ===============================================================================

# scenario_files: the scenario files, one path a line
scenario_files() {
  local f
  for f in "$E2E_DIR"/scenarios/*.sh; do
    [[ -e $f ]] && printf '%s\n' "$f"
  done
}
# scenario_field FILE KEY: the value of `# KEY:` in FILE's header, its continuation lines
# (`#   ...`) on lines of their own; nothing when the header has no such field
scenario_field() {
  awk -v key="$2" '
    !/^#/ || /^#[[:space:]]*$/ { exit }
    match($0, /^# [a-z]+: ?/) { cur = substr($0, 3, index($0, ":") - 3); if (cur == key) print substr($0, RLENGTH + 1); next }
    /^#   / { if (cur == key) { sub(/^#   +/, ""); print }; next }
    { cur = "" }' "$1"
}
# scenario_fn NAME: the function a scenario file defines
scenario_fn() { printf 'scenario_%s' "${1//-/_}"; }
# scenarios_in_order: every scenario's name, one a line, in run order (`# order:`, then name)
scenarios_in_order() {
  local f
  scenario_files | while IFS= read -r f; do
    printf '%s %s\n' "$(scenario_field "$f" order)" "$(basename "$f" .sh)"
  done | sort -k1,1n -k2,2 | cut -d' ' -f2
}

# === logging, ports, processes ====================================================================
log() { printf '%s [e2e] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$*" | sed 's/\x1b\[[0-9;]*m//g' >&2; }
die() {
  log "ERROR: $*"
  _keep_failure "$*"
  exit 1
}
# _keep_failure WHY: append to $RUN/failures (run.sh repeats those lines last, where a CI log's
# tail shows them)
_keep_failure() {
  [[ ! -d ${RUN:-} ]] || printf '%s: %s\n' "${E2E_SCENARIO:-set-up}" "$*" | head -c 2000 >>"$RUN/failures" || true
}

port_busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# free_port: a port no socket uses (and not one we already handed out), below the kernel's
# ephemeral range (net.ipv4.ip_local_port_range, 32768- by default), where connections take
# their local ports: a port there can be taken by a connection before it is bound (a Helm
# scenario's pinhook failed so: "failed to bind 127.0.0.1:39226: Address already in use")
declare -A _TAKEN=()
free_port() {
  local p _ hi
  hi=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((hi > 21000)) || hi=60000 # (an unusual range: as before)
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % (hi - 20000)))
    [[ -z ${_TAKEN[$p]:-} ]] && ! port_busy "$p" && ! ss -Htan "sport = :$p" 2>/dev/null | grep -q . &&
      { _TAKEN[$p]=1; echo "$p"; return 0; }
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

# === set-up =======================================================================================

# e2e_setup_build: the kube-apiserver (built once, cached), the test dependencies, pinhook's
# binaries (cargo, unless E2E_SKIP_BUILD=1); sets KUBE_APISERVER, PINHOOK_BIN, E2E_REGISTRY_BIN,
# PROVIDER_BIN
e2e_setup_build() {
  local t tool
  cd "$ROOT"
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
}

# e2e_setup_cluster: ports, a previous run's leftovers stopped, a fresh $RUN and PKI, then
# cluster.sh's apiserver, etcd and controller manager; exports KUBECONFIG
e2e_setup_cluster() {
  local leftover pidfile pid
  pick_port E2E_APISERVER_PORT 6443
  pick_port E2E_ETCD_PORT 2379
  pick_port E2E_ETCD_PEER_PORT 2380
  pick_port E2E_KCM_PORT 10252
  e2e_stop >/dev/null 2>&1 || true # a previous run's leftovers in this E2E_WORK
  for leftover in "pinhook.pid:pinhook serve" "pinhook-pods.pid:pinhook serve" "registry-helper.pid:e2e_registry"; do
    pidfile="$RUN/${leftover%%:*}"
    if [[ -s $pidfile ]] && pid=$(<"$pidfile") && [[ -d /proc/$pid ]] &&
      _e2e_cmdline_has "$pid" "${leftover#*:}"; then
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
}

# e2e_setup_registry: the registry helper (examples/e2e_registry.rs), with the images pushed;
# sources its env file (REGISTRY_HOST, REGISTRY_CA, DIGEST_<repo>_<tag>...). Its stdin is a FIFO
# held open (fd 3) by this script and its subshells, so it does not see EOF while they run; it
# also stops by itself within a second when this script dies without running the trap
# (SIGKILL): it watches its parent PID. E2E_SCALE_IMAGES (run.sh sets it for `needs:
# scale-images`) makes it push that many more images.
e2e_setup_registry() {
  local t
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
  WAIT_PID=$REGISTRY_PID wait_until 60 "the registry helper's env file" registry_env_ready || die "registry helper did not come up"
  # shellcheck disable=SC1091
  source "$RUN/registry.env"
  : "${REGISTRY_HOST:?}" "${REGISTRY_CA:?}" "${DIGEST_app_1_0:?}" "${PRIVATE_HOST:?}" "${DIGEST_private_1_0:?}"
  log "registry $REGISTRY_HOST ready with images pushed ($(($(date +%s) - t))s)"
}
registry_env_ready() { alive "$REGISTRY_PID" && [[ -s $RUN/registry.env ]]; }

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

# extra_registry NAME up|down: the registry helper starts a further registry NAME (TLS from the
# e2e CA, no auth, empty; the same port and storage when started again) or stops it (its
# `registry` command); up prints "HOST ACCESS_LOG" (HOST: 127.0.0.1:PORT)
extra_registry() {
  local out
  out=$(mktemp -u "$RUN/registry-$1.XXXXXX")
  printf 'registry %s %s %s\n' "$1" "$2" "$out" >&3
  wait_until 60 "the registry helper's answer to registry $1 $2" test -s "$out" || return 1
  if grep -q '^error:' "$out"; then
    log "registry helper: $(<"$out")"
    return 1
  fi
  [[ $2 == down ]] || printf '%s %s\n' "$(sed -n 's/^HOST=//p' "$out")" "$(sed -n 's/^ACCESS_LOG=//p' "$out")"
}

# policy_write FILE: pinhook's policy file becomes FILE's content atomically (rename), so that
# pinhook's 2 s poll never reads half a file
policy_write() { cp "$1" "$RUN/policy.yaml.new" && mv -f "$RUN/policy.yaml.new" "$RUN/policy.yaml"; }
# policy_reloaded LINES_BEFORE: pinhook logged `reloaded policy` after line LINES_BEFORE
policy_reloaded() { grep -q 'reloaded policy' <<<"$(log_since "$1")"; }

# e2e_setup_manifests: pinhook's certificate and port (CERT_DIR, PINHOOK_PORT, PINHOOK_URL), then
# the manifests
e2e_setup_manifests() {
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
}

# e2e_setup_identity: pinhook's identity towards the apiserver (PINHOOK_KUBECONFIG, PINHOOK_USER).
# serviceaccount (default): a kubeconfig with a TokenRequest token of pinhook-system/pinhook,
# so pinhook has exactly the shipped ClusterRole (manifests/base/rbac.yaml); admin: the admin
# kubeconfig kubectl uses.
e2e_setup_identity() {
  local user
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
}
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

# e2e_setup_pinhook: the policy, the credential provider plugin (PROVIDERS), pinhook itself
# (PINHOOK_PID), then a probe until the webhook pins
e2e_setup_pinhook() {
  # Enforce (deny what cannot be pinned; the shipped ConfigMap starts in audit),
  # and let pinhook contact the loopback registry: its address guard refuses
  # loopback/link-local/metadata hosts unless registries.allowPrivate names them.
  cat >"$RUN/policy.yaml" <<EOF
mode: enforce
registries:
  allowPrivate: ["$REGISTRY_HOST", "$PRIVATE_HOST", "localhost:${PRIVATE_HOST##*:}"]
EOF
  # (localhost:PORT is the private registry under a second name, which the credential provider
  # below does not match: node-pull-secret-or-denied's images need a pull secret.)
  # The node's kubelet credential provider plugins, as pinhook reads them (credential-provider-pins-private-image): the example plugin
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
  PROBE_EXPECTED=$(pinned app 1.0)
  start_main_pinhook
  e2e_ns e2e-probe || die "cannot create namespace e2e-probe"
  wait_effective e2e-probe
}
# start_main_pinhook: the main pinhook (PINHOOK_PID), as e2e_setup_pinhook starts it; a scenario
# that stops it (stop_pid "$PINHOOK_PID") starts it again with this
start_main_pinhook() {
  start_pinhook pinhook "$PINHOOK_PORT" "$CERT_DIR" "$RUN/policy.yaml" \
    --image-credential-provider-config "$PROVIDERS/config.yaml" \
    --image-credential-provider-bin-dir "$PROVIDERS/bin"
  PINHOOK_PID=$STARTED_PID
}
# start_pinhook NAME PORT CERT_DIR POLICY [SERVE-ARGS...]: `pinhook serve` in the background
# (log $RUN/NAME.log, or PINHOOK_OUT; PID in $RUN/NAME.pid and STARTED_PID), then wait for its /readyz
start_pinhook() {
  local name=$1 port=$2 certs=$3 policy=$4
  shift 4
  local out=${PINHOOK_OUT:-$RUN/$name.log}
  log "starting $name on https://127.0.0.1:$port${*:+ ($*)} (log $out)"
  NO_COLOR=1 PINHOOK_LOG="${PINHOOK_LOG:-info}" "$PINHOOK_BIN" serve \
    --listen "127.0.0.1:$port" \
    --tls-cert "$certs/tls.crt" --tls-key "$certs/tls.key" \
    --registry-ca "$REGISTRY_CA" \
    --policy "$policy" \
    --kubeconfig "$PINHOOK_KUBECONFIG" \
    "$@" \
    </dev/null >"$out" 2>&1 3>&- &
  STARTED_PID=$!
  echo "$STARTED_PID" >"$RUN/$name.pid"
  WAIT_PID=$STARTED_PID wait_until 30 "$name /readyz" readyz_ok "$port" "$certs" || die "$name not ready (pid $STARTED_PID)"
  log "$name ready (pid $STARTED_PID)"
}
# apiserver_policy_yaml POLICY-YAML: the chart's ValidatingAdmissionPolicy and binding, rendered
# by `helm template` for this cluster's version with webhook.apiserverPolicy and POLICY-YAML (the
# lines under `policy:`, indented two spaces) as the chart's policy (helm: PINHOOK_HELM, default
# helm3; its errors on stderr)
apiserver_policy_yaml() {
  printf 'webhook:\n  apiserverPolicy: true\npolicy:\n%s\n' "$1" >"$RUN/apiserver-policy-values.yaml"
  "${PINHOOK_HELM:-helm3}" template pinhook "$ROOT/charts/pinhook" -n pinhook-system \
    --kube-version "$(K version -o json | jq -r .serverVersion.gitVersion)" \
    -f "$RUN/apiserver-policy-values.yaml" -s templates/validatingadmissionpolicy.yaml
}
readyz_ok() { [[ $(curl -s --max-time 2 --cacert "$2/ca.crt" "https://127.0.0.1:$1/readyz") == ok* ]]; }
# probe_pinned NS: a `kubectl run --dry-run=server` Pod in NS comes back pinned (the webhook works)
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

# e2e_setup_pods_pinhook: a second pinhook with `target: pods` (`needs: pods-pinhook`).
# pinhook runs with one policy, and `target` is a policy setting: target-pods-one-digest-per-revision
# needs its own pinhook. It gets
# its own policy file, port and serving cert, and its own webhook configurations (pinhook-pods):
# the registered pin.pinhook.dev and validate.pinhook.dev (not the mirror guard), calling its
# port, for namespaces labelled pinhook.dev/e2e-instance=pods only. Those namespaces also carry
# pinhook.dev/ignore=true, so the main pinhook never sees them. A short --cache-ttl lets the scenario
# see a re-pushed tag within its run (see its file).
e2e_setup_pods_pinhook() {
  PODS_CACHE_TTL="${PODS_CACHE_TTL:-16}"
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
}

# e2e_setup_node (`needs: node`, before the first such scenario): the node's images pushed to
# the registries, then node.sh's containerd, kubelet and scheduler (NODE_STARTED=1). The images
# run: node/pause.c as /pause (node_oci_image), one seed each, so each has digests of its own:
#   REGISTRY_HOST/team/node-app:1.0  index of linux/amd64 + linux/arm64 (DIGEST_node_app_1_0;
#                                    NODE_AMD64_node_app_1_0: its amd64 manifest)
#   REGISTRY_HOST/team/node-web:1.0  one linux/amd64 manifest (DIGEST_node_web_1_0)
#   REGISTRY_HOST/team/node-static:1.0  the same, for the static pod (DIGEST_node_static_1_0)
#   PRIVATE_HOST/team/node-private:1.0  index (DIGEST_node_private_1_0), behind htpasswd
# containerd trusts the registries' CA for REGISTRY_HOST, PRIVATE_HOST and localhost:PRIVATE_PORT.
# With NODE_POD_NETWORK=1: the apiserver and both registries reachable from the Pod network (as
# NODE_IP:PORT, certificates by the e2e CA), kube-proxy (node.sh).
e2e_setup_node() {
  local t spec repo tag archs host cred d
  t=$(date +%s)
  NODE_STARTED=1 # from here on the teardown stops whatever part of it started
  # The node is 1.20's on either control plane: there is no 1.32 kubelet, scheduler or
  # kube-proxy (../shared/kube-1.32 holds the apiserver and controller manager only), so on 1.32
  # the 1.20 ones built from Debian's source join it (node.sh, "The node on 1.32").
  if [[ ${E2E_KUBE:-1.20} != 1.20 && -z ${NODE_BINARIES_DIR:-} ]]; then
    local built
    built=$("$E2E_DIR/build-kube-apiserver.sh" | tail -n1) ||
      { log "building the 1.20 node's binaries failed"; return 1; }
    export NODE_BINARIES_DIR=${built%/*}
  fi
  pick_port NODE_KUBELET_PORT 10250
  pick_port NODE_KUBELET_HEALTHZ_PORT 10248
  pick_port NODE_SCHEDULER_PORT 10251
  pick_port NODE_PROXY_HEALTHZ_PORT 10256
  pick_port NODE_PROXY_METRICS_PORT 10249
  gcc -static -Os -s -o "$RUN/pause" "$E2E_DIR/node/pause.c" || { log "gcc -static of node/pause.c failed"; return 1; }
  for spec in "node-app 1.0 amd64,arm64 r" "node-web 1.0 amd64 r" "node-static 1.0 amd64 r" \
    "node-private 1.0 amd64,arm64 p"; do
    read -r repo tag archs host <<<"$spec"
    cred=""
    if [[ $host == p ]]; then host=$PRIVATE_HOST cred="$PRIVATE_USER:$PRIVATE_PASSWORD"; else host=$REGISTRY_HOST; fi
    # shellcheck disable=SC2086 # (archs: words on purpose)
    node_oci_image "$RUN/oci-$repo" "$RUN/pause" "$repo:$tag" ${archs//,/ } || return 1
    d=$(node_push_image "$RUN/oci-$repo" "$host" "team/$repo" "$tag" "$REGISTRY_CA" "$cred") ||
      { log "pushing team/$repo:$tag to $host failed"; return 1; }
    printf -v "DIGEST_${repo//-/_}_${tag//./_}" '%s' "$d"
    printf -v "NODE_AMD64_${repo//-/_}_${tag//./_}" '%s' \
      "$(jq -r '[.manifests[]? | select(.platform.architecture == "amd64") | .digest][0] // empty' \
        "$RUN/oci-$repo/blobs/sha256/${d#sha256:}")"
    log "pushed $host/team/$repo:$tag -> $d"
  done
  # NODE_POD_NETWORK=1: the apiserver forwarded on the bridge address and kube-proxy
  # (node-pod-network-reaches-services)
  NODE_POD_NETWORK=1 NODE_REGISTRY_FORWARD="$REGISTRY_HOST $PRIVATE_HOST" NODE_REGISTRY_CA=$REGISTRY_CA node_start "$REGISTRY_HOST" "$PRIVATE_HOST" "localhost:${PRIVATE_HOST##*:}" ||
    { log "the node did not start"; return 1; }
  eval "$(node_env)"
  log "node set up in $(($(date +%s) - t))s"
}

# e2e_teardown SHOW_LOGS: the logs' last lines when SHOW_LOGS is 1, then everything stopped
# (or, with E2E_KEEP=1, left running and how to stop it logged)
e2e_teardown() {
  local f pidfile
  if (($1)); then
    tail_log "$RUN/pinhook.log" 60
    tail_log "$RUN/pinhook-pods.log" 20
    for f in "$RUN"/watch/watch-*.log; do tail_log "$f" 30; done
    tail_log "$RUN/registry-helper.log" 20
    tail_log "${REGISTRY_LOG:-}" 20
    tail_log "${REGISTRY_ACCESS_LOG:-}" 10
    tail_log "$E2E_WORK/kube-apiserver.log" 30
    tail_log "$E2E_WORK/kube-controller-manager.log" 20
    tail_log "$E2E_WORK/etcd.log" 10
    if ((NODE_STARTED)); then
      tail_log "$E2E_WORK/node/kubelet.log" 30
      tail_log "$E2E_WORK/node/containerd.log" 20
      tail_log "$E2E_WORK/node/kube-scheduler.log" 10
      tail_log "$E2E_WORK/node/kube-proxy.log" 10
    fi
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
    # The controller manager first, so that no ReplicaSet replaces the Pods node_stop deletes
    # (a release still installed: the 1.32 tier runs no uninstall), which node_stop would wait
    # 30 s for.
    if ((NODE_STARTED && CLUSTER_STARTED)); then _e2e_kill kube-controller-manager; fi
    ((NODE_STARTED)) && node_stop
    ((CLUSTER_STARTED)) && e2e_stop
  fi
}

# === helpers of the scenarios =====================================================================
# Assertions print one line each and return 1 on failure; scenarios run in a
# subshell with errexit on, so an unexpected failing command fails the scenario too.
ok() { log "  ok: $*"; }
bad() { # bad WHY: a failed check (also kept for the summary)
  log "  FAIL: $*"
  _keep_failure "$*"
  return 1
}
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

# cronjob_version: the batch version of CronJob the control plane serves: v1beta1 on 1.20 (no
# batch/v1 CronJob there), v1 on 1.32 (no batch/v1beta1 one since 1.25).
cronjob_version() { if [[ ${E2E_KUBE:-1.20} == 1.20 ]]; then echo v1beta1; else echo v1; fi; }
# CronJob nightly (in $(cronjob_version)), team/cron:1.0
cronjob_yaml() {
  cat <<EOF
apiVersion: batch/${1:-$(cronjob_version)}
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
# StatefulSet db, team/db:1.0
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

deploy_images() {
  jp "$1" deployment "$2" '{.spec.template.spec.initContainers[0].image} {.spec.template.spec.containers[*].image}'
}
# same_object WHAT BEFORE_YAML AFTER_YAML: full comparison, diff on failure
same_object() {
  local meta
  meta=$(grep -E '^  (generation|resourceVersion):' <<<"$3" | sed 's/^ *//' | tr '\n' ' ' || true)
  if [[ $2 == "$3" ]]; then ok "$1: identical${meta:+ ($meta)}"; else
    bad "$1: changed: $(diff <(echo "$2") <(echo "$3") | tr '\n' ' ')"
  fi
}

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
spec_json() { K -n "$1" get "$2" "$3" -o json | jq -S .spec; } # spec_json NS KIND NAME

# expect_absent KIND NAME [NS]: kubectl get says NotFound
expect_absent() {
  local err
  if err=$(K ${3:+-n "$3"} get "$1" "$2" -o name 2>&1); then
    bad "$1 $2 is stored: $err"
  else
    expect_contains "kubectl get $1 $2" "$err" NotFound
  fi
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

# --- the scenarios with the controllers of kube-controller-manager (issue 9) ---------------------
# Each scenario runs the same kubectl steps in two namespaces: NS, which pinhook sees, and
# NS-ref, labelled pinhook.dev/ignore=true, which no webhook sees (the controllers' own result).
# Every scenario logs a `counts:` line (ReplicaSets, Pods... with pinhook / without) and
# asserts on what the apiserver stored. Waits poll; only the ReplicaSet watch of audit-to-enforce-no-replicaset-loop (60 s) and the
# cache timing of target-pods-one-digest-per-revision are fixed durations, because that time is what they are about.

app_deployment() { # app_deployment NAME REPLICAS IMAGE [node]: a Deployment with one container `app` (node: tolerating the node, 2 s to terminate)
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
$(if [[ ${4:-} == node ]]; then node_tolerations 6; printf '      terminationGracePeriodSeconds: 2\n'; fi)
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

# --- the scenarios on the node (`needs: node`) -----------------------------------------------------
# node_tolerations INDENT: the toleration of the node's taint (node.sh NODE_TAINT), as YAML lines
# indented by INDENT spaces, for a Pod spec
node_tolerations() {
  local pad
  printf -v pad '%*s' "$1" ''
  printf '%stolerations:\n%s  - {key: pinhook.dev/e2e-node, operator: Exists, effect: NoSchedule}\n' "$pad" "$pad"
}
# pods_running NS SELECTOR N: exactly N Pods match SELECTOR, all Running with every container ready
pods_running() {
  local out
  out=$(K -n "$1" get pods -l "$2" -o jsonpath='{range .items[*]}{.status.phase}/{.status.containerStatuses[*].ready}{"\n"}{end}') || return 1
  [[ $(grep -c . <<<"$out") == "$3" ]] && ! grep -qv '^Running/true\( true\)*$' <<<"$out"
}
# wait_pods_running NS SELECTOR N [TIMEOUT]: pods_running within TIMEOUT (60) s, else the Pods'
# state and the node's Events logged
wait_pods_running() {
  local t0
  t0=$(date +%s.%N)
  if wait_until "${4:-60}" "$3 Running Pods $2 in $1" pods_running "$1" "$2" "$3"; then
    ok "$3 Pod(s) $2 Running in $1, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s"
  else
    klog -n "$1" get pods -o wide || true
    K -n "$1" get events -o custom-columns=REASON:.reason,MSG:.message 2>&1 | tail -n 15 | while IFS= read -r l; do log "  event: $l"; done
    bad "Pods $2 in $1 not all Running within ${4:-60}s"
  fi
}
# node_manifest_requests REPO [ACCESS_LOG]: the manifest requests of the node's containerd for
# team/REPO in the registry's access log (default the main registry's): "METHOD REFERENCE" lines
# (REFERENCE: a tag or a digest)
node_manifest_requests() {
  grep -F '"containerd/' "${2:-$REGISTRY_ACCESS_LOG}" |
    sed -n "s|.*\"\\([A-Z]*\\) /v2/team/$1/manifests/\\([^ ?]*\\).*|\\1 \\2|p"
}
