#!/usr/bin/env bash
# `pinhook watch` at cluster scale, on the e2e tier's real etcd and kube-apiserver (issue 30).
#
#   benches/watch-scale.sh [PODS] [NAMESPACES] [IMAGES]     (default 50000 1000 2000)
#
# Builds the release binary and the registry helper (examples/e2e_registry.rs: Debian's
# docker-registry over TLS, with IMAGES multi-arch images team/scale:1..IMAGES pushed); starts
# etcd and kube-apiserver 1.20.2 (tests/e2e/cluster.sh, E2E_WORK, free ports; its controller
# manager is stopped at once: bare Pods need none); creates NAMESPACES namespaces and PODS bare
# Pods (PODS / NAMESPACES each), each running one `team/scale:K@sha256:...` image, straight
# through the apiserver from benches/watch-scale.py (16 threads on keep-alive connections; no
# scheduler, no kubelet: the Pods stay Pending, which the watch counts as running). Then starts
# a fresh `pinhook watch` (release, policy mode enforce, recheck every WATCH_SCALE_INTERVAL s,
# the cluster-admin kubeconfig, /inventory open) and measures:
#
#   - the time from its start to the end of its first recheck (the first complete set of
#     reports: checked afterwards, every namespace's report passes all its Pods' images),
#   - its RSS after that recheck and its peak RSS (VmHWM), and its CPU time,
#   - WATCH_SCALE_RECHECKS unchanged rechecks: each one's time (the watch's log), CPU time,
#     registry requests (pinhook_registry_requests_total) against the distinct (image,
#     credential) keys it looked up, its report writes and Events (must be 0), and the apiserver
#     requests and GET/LIST response bytes the recheck cost (apiserver_request_total and
#     apiserver_response_sizes_sum of the apiserver's /metrics, by verb and resource, taken in
#     the idle time between rechecks; the Lease's renewals are counted apart).
#
# WATCH_SCALE_BASE_BIN=PATH measures that binary too (first) at each step, for a before/after.
# WATCH_SCALE_STEPS="10000 25000" measures a fresh watch at those Pod counts first, adding Pods
# between steps (one cluster, one registry), for the slope of RSS and time against Pods at a
# fixed number of images. Everything on 127.0.0.1, bounded (sizes checked, every wait has a
# timeout); the cluster, registry and watch are stopped and E2E_WORK removed at the end
# (WATCH_SCALE_KEEP=1 keeps E2E_WORK's logs; the processes are stopped anyway).
#
# Environment: WATCH_SCALE_INTERVAL (30 s), WATCH_SCALE_RECHECKS (3), WATCH_SCALE_WORKERS (16,
# the creating threads), WATCH_SCALE_STEPS (none), E2E_WORK (/tmp/e2e-watchscale), PINHOOK_BIN
# and E2E_REGISTRY_BIN (default target/release/...; WATCH_SCALE_SKIP_BUILD=1 skips cargo),
# PINHOOK_LOG (info).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
pods=${1:-50000}
nss=${2:-1000}
images=${3:-2000}
interval=${WATCH_SCALE_INTERVAL:-30}
rechecks=${WATCH_SCALE_RECHECKS:-3}
workers=${WATCH_SCALE_WORKERS:-16}
steps=${WATCH_SCALE_STEPS:-}
((pods >= 1 && pods <= 200000)) || { echo "PODS must be 1-200000" >&2; exit 2; }
((nss >= 1 && nss <= pods && nss <= 10000)) || { echo "NAMESPACES must be 1-10000 and <= PODS" >&2; exit 2; }
((images >= 1 && images <= 10000)) || { echo "IMAGES must be 1-10000" >&2; exit 2; }
((interval >= 5 && interval <= 600)) || { echo "WATCH_SCALE_INTERVAL must be 5-600" >&2; exit 2; }
((rechecks >= 1 && rechecks <= 10)) || { echo "WATCH_SCALE_RECHECKS must be 1-10" >&2; exit 2; }
((workers >= 1 && workers <= 64)) || { echo "WATCH_SCALE_WORKERS must be 1-64" >&2; exit 2; }
for s in $steps; do
  ((s >= nss && s < pods)) || { echo "each of WATCH_SCALE_STEPS must be >= NAMESPACES and < PODS" >&2; exit 2; }
done
log() { printf '%s ==> %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
for tool in kubectl jq curl docker-registry etcd python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found (scripts/install-test-deps.sh)" >&2; exit 2; }
done

target=${CARGO_TARGET_DIR:-target}/release
PINHOOK_BIN=${PINHOOK_BIN:-$target/pinhook}
E2E_REGISTRY_BIN=${E2E_REGISTRY_BIN:-$target/examples/e2e_registry}
if [[ ${WATCH_SCALE_SKIP_BUILD:-0} != 1 ]]; then
  # Two builds: an example's dev-dependencies would otherwise change the features the measured
  # binary is built with.
  log "cargo build --release (pinhook, then example e2e_registry)"
  cargo build --release --quiet --bin pinhook
  cargo build --release --quiet --example e2e_registry
fi
[[ -x $PINHOOK_BIN && -x $E2E_REGISTRY_BIN ]] || { echo "no $PINHOOK_BIN or $E2E_REGISTRY_BIN" >&2; exit 2; }

export E2E_WORK=${E2E_WORK:-/tmp/e2e-watchscale}
[[ $E2E_WORK != /tmp/pinhook-e2e ]] || { echo "E2E_WORK must not be the e2e tier's own" >&2; exit 2; }
mkdir -p "$E2E_WORK"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
E2E_APISERVER_PORT=$(free_port) E2E_ETCD_PORT=$(free_port) E2E_ETCD_PEER_PORT=$(free_port) E2E_KCM_PORT=$(free_port)
export E2E_APISERVER_PORT E2E_ETCD_PORT E2E_ETCD_PEER_PORT E2E_KCM_PORT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
# shellcheck source=tests/e2e/cluster.sh disable=SC1091
source "$ROOT/tests/e2e/cluster.sh"

watch_pid="" registry_pid=""
stop() { # stop PID: SIGTERM, SIGKILL after 10 s
  local pid=$1 i
  [[ -n $pid && -d /proc/$pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do [[ -d /proc/$pid ]] || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop "$watch_pid"
  exec 3>&- 2>/dev/null || true
  stop "$registry_pid"
  e2e_stop >/dev/null 2>&1 || true
  if [[ ${WATCH_SCALE_KEEP:-0} == 1 ]]; then
    rm -rf "$E2E_WORK/etcd-data"
    log "logs kept in $E2E_WORK"
  else
    rm -rf "$E2E_WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "machine: $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
log "starting etcd and kube-apiserver in $E2E_WORK"
rm -rf "$E2E_WORK/pki" "$E2E_WORK/etcd-data"
e2e_start >"$E2E_WORK/cluster.log" 2>&1 || { cat "$E2E_WORK/cluster.log" >&2; exit 1; }
_e2e_kill kube-controller-manager 2>/dev/null
export KUBECONFIG=$E2E_KUBECONFIG
server="https://127.0.0.1:$E2E_APISERVER_PORT"
ca="$E2E_PKI/ca.crt"
token="$E2E_PKI/admin.token"
client() { python3 "$ROOT/benches/watch-scale.py" "$@"; }

log "registry helper: pushing $images images (team/scale:1..$images)"
mkfifo "$E2E_WORK/registry.stdin"
exec 3<>"$E2E_WORK/registry.stdin"
t0=$SECONDS
E2E_SCALE_IMAGES=$images "$E2E_REGISTRY_BIN" "$E2E_WORK/registry.env" \
  <"$E2E_WORK/registry.stdin" >"$E2E_WORK/registry-helper.log" 2>&1 3>&- &
registry_pid=$!
for ((i = 0; i < 7200; i++)); do
  [[ -s $E2E_WORK/registry.env ]] && break
  [[ -d /proc/$registry_pid ]] || { tail -20 "$E2E_WORK/registry-helper.log" >&2; exit 1; }
  sleep 0.25
done
[[ -s $E2E_WORK/registry.env ]] || { echo "registry helper not ready after 30 min" >&2; exit 1; }
# shellcheck disable=SC1091
source "$E2E_WORK/registry.env"
log "registry $REGISTRY_HOST ready ($((SECONDS - t0)) s)"

kubectl apply -f "$ROOT/manifests/components/policy-reports/crd.yaml" >/dev/null
kubectl wait --for=condition=Established crd/policyreports.wgpolicyk8s.io \
  crd/clusterpolicyreports.wgpolicyk8s.io --timeout=60s >/dev/null
kubectl create namespace pinhook-system >/dev/null
cat >"$E2E_WORK/policy.yaml" <<EOF
mode: enforce
registries:
  allowPrivate: ["$REGISTRY_HOST"]
EOF

# create FROM TO: Pods FROM..TO-1 of every namespace (the namespaces too when FROM is 0)
create() {
  local t=$SECONDS
  client create --server "$server" --ca "$ca" --token-file "$token" --registry "$REGISTRY_HOST" \
    --digests "$E2E_WORK/registry.env" --pods $(($2 * nss)) --namespaces "$nss" --images "$images" \
    --workers "$workers" --from "$1" >"$E2E_WORK/create.json"
  log "created Pods $1..$(($2 - 1)) of $nss namespaces: $(<"$E2E_WORK/create.json") ($((SECONDS - t)) s)"
}

metric_sum() { # metric_sum PORT NAME: the sum of every sample of a metric of the watch
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk -v m="$2" 'index($0, m "{") == 1 || index($0, m " ") == 1 { s += $NF } END { print s + 0 }'
}
cpu_seconds() { # utime + stime of PID, in seconds
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}
status_kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; } # status_kib PID VmRSS
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
cycles() { grep -c 'recheck done' "$1" || true; }
field() { sed -nE "s/.* $2=\"?([^ \"]+)\"?.*/\1/p" <<<"$1"; } # field LINE KEY

summary="$E2E_WORK/summary.txt"
: >"$summary"
say() { printf '%s\n' "$*" | tee -a "$summary"; }

# measure PODS BINARY NAME: a fresh watch (BINARY) over the cluster's PODS Pods; its figures to
# the summary
measure() {
  local n=$1 bin=$2 name=$3 per=$(($1 / nss)) port log started t_first i c line seconds rss hwm cpu0 cpu1
  local reg0 reg1 lookups writes events api
  # every watch starts from no reports (and no Lease: the previous one deleted it)
  client delete-reports --server "$server" --ca "$ca" --token-file "$token" --namespaces "$nss" \
    --workers "$workers"
  port=$(free_port)
  log="$E2E_WORK/watch-$n-${name%% *}.log"
  apiserver_metrics "$E2E_WORK/api-0.json"
  started=$(date +%s.%N)
  NO_COLOR=1 PINHOOK_LOG=${PINHOOK_LOG:-info} "$bin" watch \
    --listen "127.0.0.1:$port" --inventory-auth none --recheck-interval "${interval}s" \
    --lease-namespace pinhook-system --lease pinhook-watch --pod-name "watch-bench-$n" \
    --lease-duration 15s --registry-ca "$REGISTRY_CA" --policy "$E2E_WORK/policy.yaml" \
    --kubeconfig "$E2E_KUBECONFIG" </dev/null >"$log" 2>&1 &
  watch_pid=$!
  # the first recheck: every report written
  for ((i = 0; i < 9000; i++)); do
    (($(cycles "$log") >= 1)) && break
    [[ -d /proc/$watch_pid ]] || { tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
  (($(cycles "$log") >= 1)) || { echo "no recheck done within 30 min" >&2; exit 1; }
  t_first=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  rss=$(status_kib "$watch_pid" VmRSS) hwm=$(status_kib "$watch_pid" VmHWM)
  cpu0=$(cpu_seconds "$watch_pid")
  reg0=$(metric_sum "$port" pinhook_registry_requests_total)
  apiserver_metrics "$E2E_WORK/api-1.json"
  line=$(grep 'recheck done' "$log" | tail -1)
  local listed
  listed=$(grep -m1 'pod list complete' "$log" | sed -nE 's/^([^ ]+) .*/\1/p')
  say ""
  say "== $n Pods ($per per namespace) in $nss namespaces, $images images; $name: $bin (built $(date -u -r "$bin" +%H:%M:%SZ), sha256 $(sha256sum "$bin" | cut -c1-12))"
  say "first recheck: done ${t_first} s after the watch started (pod list complete at $listed); $(field "$line" pods) Pods, $(field "$line" images) images, $(field "$line" lookups) keys, $(field "$line" report_writes) report writes, its own time $(field "$line" seconds) s; watch CPU so far ${cpu0} s"
  say "RSS after the first recheck: $(mib "$rss") MiB (peak so far $(mib "$hwm") MiB)"
  say "apiserver for the start and first recheck: $(client diff "$E2E_WORK/api-0.json" "$E2E_WORK/api-1.json" | jq -c '{requests_total, bytes_total}')"
  local times=() maxrss=$rss
  for ((c = 2; c <= rechecks + 1; c++)); do
    for ((i = 0; i < (interval * 2 + 600) * 5; i++)); do
      (($(cycles "$log") >= c)) && break
      [[ -d /proc/$watch_pid ]] || { tail -20 "$log" >&2; exit 1; }
      sleep 0.2
    done
    (($(cycles "$log") >= c)) || { echo "recheck $c not done in time" >&2; exit 1; }
    cpu1=$(cpu_seconds "$watch_pid")
    reg1=$(metric_sum "$port" pinhook_registry_requests_total)
    apiserver_metrics "$E2E_WORK/api-$c.json"
    rss=$(status_kib "$watch_pid" VmRSS)
    ((rss > maxrss)) && maxrss=$rss
    line=$(grep 'recheck done' "$log" | tail -1)
    seconds=$(field "$line" seconds) lookups=$(field "$line" lookups)
    writes=$(field "$line" report_writes) events=$(field "$line" events)
    times+=("$seconds")
    api=$(client diff "$E2E_WORK/api-$((c - 1)).json" "$E2E_WORK/api-$c.json")
    say "unchanged recheck $((c - 1)): ${seconds} s (watch CPU $(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.2f", b - a }') s over the interval); registry requests $(awk -v a="$reg0" -v b="$reg1" 'BEGIN { print b - a }') for $lookups distinct keys; report writes $writes, Events $events; RSS $(mib "$rss") MiB"
    say "  apiserver: $(jq -r '"\(.requests_total) requests, \(.bytes_total) response bytes: " + ([.requests | to_entries[] | "\(.key) \(.value)"] | join(", ")) + "; bytes " + ([.bytes | to_entries[] | "\(.key) \(.value)"] | join(", ")) + "; writes (POST/PUT/PATCH/DELETE) of reports and Events: \(.report_and_event_writes); not the watch'"'"'s (the apiserver'"'"'s own loops): \(.other)"' <<<"$api")"
    cpu0=$cpu1 reg0=$reg1
  done
  hwm=$(status_kib "$watch_pid" VmHWM)
  say "RSS: at most $(mib "$maxrss") MiB after a recheck, peak $(mib "$hwm") MiB; unchanged recheck times: ${times[*]} s"
  # every namespace's report passes each of its Pods' images (read after the measurements: the
  # read itself is apiserver traffic)
  local complete
  complete=$(kubectl get policyreports.wgpolicyk8s.io -A -o json --chunk-size=200 |
    jq --argjson want $((per * 2)) '[.items[] | select(.metadata.namespace | startswith("e2e-z-")) | select(.summary.pass == $want and (.summary.fail // 0) == 0)] | length')
  say "complete reports: $complete of $nss namespaces (summary.pass = $((per * 2)): two rules per image)"
  say "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  stop "$watch_pid"
  watch_pid=""
  kubectl -n pinhook-system delete lease pinhook-watch --ignore-not-found >/dev/null
  ((complete == nss)) || { echo "incomplete reports" >&2; exit 1; }
}
apiserver_metrics() { client apiserver-metrics --server "$server" --ca "$ca" --token-file "$token" >"$1"; }

from=0
for s in $steps $pods; do
  create "$from" $((s / nss))
  from=$((s / nss))
  if [[ -n ${WATCH_SCALE_BASE_BIN:-} ]]; then measure $((from * nss)) "$WATCH_SCALE_BASE_BIN" base; fi
  measure $((from * nss)) "$PINHOOK_BIN" "release $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo '+changes')"
done
log "summary ($summary):"
cat "$summary" >&2
