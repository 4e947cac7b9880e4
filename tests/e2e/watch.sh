# shellcheck shell=bash
# The helpers of the `pinhook watch` scenarios (issue 14; scenarios/watch-*.sh), sourced by run.sh.
# The watch runs as a local process on the real apiserver and controller-manager, as the shipped
# ServiceAccount pinhook-system/pinhook-watch (a TokenRequest token; its RBAC is
# manifests/base/watch-rbac.yaml, applied by run.sh with the local-url overlay), against the
# PolicyReport CRDs of manifests/components/policy-reports (applied on first use), with a short
# --recheck-interval (WATCH_INTERVAL, 5 s) and --lease-duration (WATCH_LEASE_SECONDS, 6 s). One
# replica is started by the first watch scenario and shared by the others (watch_ensure). Uses
# lib.sh's helpers (K, klog, log, ok, bad, wait_until, free_port, stop_pid, alive,
# token_kubeconfig, $RUN, $ROOT, $PINHOOK_BIN, $REGISTRY_CA).

WATCH_INTERVAL="${WATCH_INTERVAL:-5}"
WATCH_LEASE_SECONDS="${WATCH_LEASE_SECONDS:-6}"
WATCH_DIR="$RUN/watch"

# watch_setup: once per run, the PolicyReport CRDs and the watch's kubeconfig
watch_setup() {
  [[ -s $WATCH_DIR/kubeconfig ]] && return 0
  mkdir -p "$WATCH_DIR"
  klog apply -f "$ROOT/manifests/components/policy-reports/crd.yaml" || return 1
  klog wait --for=condition=Established crd/policyreports.wgpolicyk8s.io \
    crd/clusterpolicyreports.wgpolicyk8s.io --timeout=30s || return 1
  local token
  token=$(K -n pinhook-system create token pinhook-watch --duration=2h) || return 1
  token_kubeconfig "$token" "$WATCH_DIR/kubeconfig"
}

# watch_start N [ARGS...]: replica N of `pinhook watch` (pod name watch-N, port in WATCH_PORT_N,
# its /inventory on a free loopback port (two replicas on one host cannot share the default
# 127.0.0.1:8081), log $WATCH_DIR/watch-N.log, PID in $WATCH_DIR/watch-N.pid), with ARGS added to its flags;
# waits for its /readyz
watch_start() {
  local n=$1 port
  shift
  port=$(free_port)
  printf -v "WATCH_PORT_$n" '%s' "$port"
  echo "$port" >"$WATCH_DIR/watch-$n.port"
  NO_COLOR=1 PINHOOK_LOG=info "$PINHOOK_BIN" watch "$@" \
    --listen "127.0.0.1:$port" --inventory-listen 127.0.0.1:0 --recheck-interval "${WATCH_INTERVAL}s" \
    --lease-namespace pinhook-system --lease pinhook-watch --pod-name "watch-$n" \
    --lease-duration "${WATCH_LEASE_SECONDS}s" \
    --registry-ca "$REGISTRY_CA" --policy "$RUN/policy.yaml" --kubeconfig "$WATCH_DIR/kubeconfig" \
    </dev/null >>"$WATCH_DIR/watch-$n.log" 2>&1 3>&- &
  echo $! >"$WATCH_DIR/watch-$n.pid"
  log "  started pinhook watch replica $n${*:+ ($*)} on 127.0.0.1:$port (pid $!, log $WATCH_DIR/watch-$n.log)"
  WAIT_PID=$! wait_until 30 "watch-$n /readyz" watch_readyz "$port"
}
watch_readyz() { [[ $(curl -s --max-time 2 "http://127.0.0.1:$1/readyz") == ok* ]]; }
watch_port() { cat "$WATCH_DIR/watch-$1.port"; }
watch_running() { [[ -s $WATCH_DIR/watch-$1.pid ]] && alive "$(<"$WATCH_DIR/watch-$1.pid")"; }
# watch_ensure: replica 0 running (started once, shared by the scenarios)
watch_ensure() {
  watch_setup || return 1
  if ! watch_running 0 && ! watch_running 1; then watch_start 0 || return 1; fi
}
# watch_any_port: the port of a running replica
watch_any_port() {
  local n
  for n in 0 1; do watch_running "$n" && { watch_port "$n"; return 0; }; done
  return 1
}
watch_stop_all() {
  local n
  for n in 0 1; do
    [[ -s $WATCH_DIR/watch-$n.pid ]] || continue
    stop_pid "$(<"$WATCH_DIR/watch-$n.pid")" "pinhook watch replica $n" 10
    rm -f "$WATCH_DIR/watch-$n.pid"
  done
}
# watch_metric PORT NAME-WITH-LABELS: the value of one sample (0 when absent)
watch_metric() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk -v m="$2" 'index($0, m " ") == 1 { print $NF; found = 1 } END { if (!found) print 0 }'
}
lease_holder() { K -n pinhook-system get lease pinhook-watch -o jsonpath='{.spec.holderIdentity}'; }
# report_json NS: the namespace's PolicyReport pinhook as JSON ("" when absent)
report_json() { K -n "$1" get policyreports.wgpolicyk8s.io pinhook -o json 2>/dev/null || true; }
# report_says NS JQ-FILTER: the report exists and JQ-FILTER (over it) is true
report_says() {
  local json
  json=$(report_json "$1")
  [[ -n $json ]] && jq -e "$2" <<<"$json" >/dev/null
}
# events_of NS KIND NAME REASON: how many events.k8s.io Events with that reason regard the object
events_of() {
  K -n "$1" get events.events.k8s.io -o json |
    jq --arg k "$2" --arg n "$3" --arg r "$4" \
      '[.items[] | select(.regarding.kind == $k and .regarding.name == $n and .reason == $r)] | length'
}
# last_cycle LOG: the last "recheck done" line's report_writes and events ("W E")
last_cycle() {
  grep 'recheck done' "$1" | tail -1 | sed -E 's/.*report_writes=([0-9]+).*events=([0-9]+).*/\1 \2/'
}
cycles_in() { grep -c 'recheck done' "$1" || true; }
# (wait_until runs its command again each time: these evaluate their counts inside)
cycles_at_least() { (($(cycles_in "$1") >= $2)); }   # cycles_at_least LOG N
events_at_least() { (($(events_of "$1" "$2" "$3" "$4") >= $5)); } # NS KIND NAME REASON N
