# shellcheck shell=bash
# The node-availability-* scenarios' shared parts, sourced by run.sh (definitions only): a steady
# stream of admissions through the apiserver to the chart's pinhook (chart-node.sh's release, with
# its defaults) while one disruption happens, and the figures of it.
#
#   avail_begin NAME      the release installed and both webhook replicas Ready
#                         (chart_node_ensure), the namespace e2e-avail-NAME (pinhook.dev/mode=enforce,
#                         skipped by the tier's own pinhook), every webhook at Fail, and each
#                         replica's cache warm for the stream's image (a dry-run AdmissionReview
#                         POSTed to each Pod's /mutate: the apiserver would send them all to one)
#   avail_stream_start [ARG...]
#                         availability-stream.py in the background (AVAIL_RATE per second, at most
#                         AVAIL_SECONDS s and AVAIL_RATE x AVAIL_SECONDS attempts; ARGs: its own),
#                         a copier of the webhook Pods' logs (a deleted Pod's logs go with it) and
#                         a watch of the Service's Endpoints (avail_endpoint_gone); then waits
#                         AVAIL_LEAD s (10), the steady state before the disruption
#   avail_settle_then_stop
#                         lets the stream run AVAIL_SETTLE s more, then stops it and waits for it
#   avail_report READY_AGAIN [EXTRA]
#                         logs `availability: NAME attempted=N failed=M refused=R unanswered=U
#                         p50= p99= max= ready_again=Ts spread=... validate_spread=... EXTRA`, the
#                         first 20 failures with the apiserver's message, the unanswered span, and
#                         appends the line to $RUN/availability/results.txt
#   avail_expect_none_failed
#                         1 unless every attempt was answered, none failed and none came back
#                         unpinned (the goal)
#   avail_expect_kill_bound T_KILL IP READY_S
#                         after a SIGKILL: only the connection errors docs/availability.md explains
#   avail_end             the namespace deleted (its Pods are unbound: they go at once)
# and the disruptions' own helpers: avail_busiest (the Pod the apiserver's connection goes to),
# avail_pinhook_pid (a Pod's pinhook PID through containerd), avail_evict, avail_pdb_allows,
# avail_node_and_endpoints_ready, avail_endpoints_explain (one line for a failure: the Endpoints,
# each webhook Pod's Ready condition, the Node's),
# avail_registry_stop/_start (node.sh's registry forwarder), avail_apiserver_stop/_start,
# avail_node_stop/_start (kubelet and containerd, every container killed), avail_rotation_started/
# _done (the managed TLS Secret), avail_restarted, avail_all_restarted, avail_restart_counts.
# A process started again (forwarder, apiserver, containerd, kubelet) gets the same command line
# and its PID in the pid file the teardown reads.
#
# Figures: attempted, failed (and unpinned: created without a digest, which would mean a webhook
# that did not run; counted as failed), refused (only registry-stopped: the documented refusal of
# an image pinhook never resolved), unanswered (no HTTP answer: only while the apiserver is away),
# p50/p99/max latency of the answered attempts as the client saw them, ready_again (the
# disruption's start to both webhook replicas Running and Ready again, the disrupted one replaced
# or restarted) and spread: the stream's reviews each webhook Pod answered, from its log (`review`
# lines of /mutate, and of /validate for validate_spread, in the namespace), `<last 5 characters
# of the Pod's name>:N`, one per Pod that answered any or is live at the end.
#
# Files: $RUN/availability/NAME/ (attempts.tsv: one line per attempt; summary.json; failures.txt;
# endpoints.log; logs/: the webhook Pods' logs as last seen). Uses chart-node.sh's helpers and
# lib.sh's.

AVAIL_RATE="${AVAIL_RATE:-5}"
AVAIL_SECONDS="${AVAIL_SECONDS:-150}"
AVAIL_SETTLE="${AVAIL_SETTLE:-10}"
AVAIL_LEAD="${AVAIL_LEAD:-10}"

avail_begin() {
  AVAIL_NAME=$1
  AVAIL_NS="e2e-avail-$1"
  AVAIL_OUT="$RUN/availability/$1"
  AVAIL_T_DISRUPT=""
  rm -rf "$AVAIL_OUT"
  mkdir -p "$AVAIL_OUT/logs"
  chart_node_ensure || return 1
  AVAIL_IMAGE="$(chart_node_registry)/team/node-web:1.0"
  e2e_ns "$AVAIL_NS" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1 || return 1
  wait_until 30 "pin, validate and mirrors at Fail" chart_node_policies_are "Fail Fail Fail" ||
    { bad "failurePolicy of pin, validate, mirrors: $(chart_node_policies)"; return 1; }
  wait_until 120 "the Endpoints to hold both webhook Pods" avail_endpoints_are_live ||
    { bad "the Service's Endpoints are not the two live webhook Pods: $(avail_endpoints_explain)"; return 1; }
  local ip
  for ip in $(chart_node_live_pods webhook | cut -d' ' -f4); do
    avail_warm "$ip" "$AVAIL_IMAGE" || { bad "the webhook at $ip did not pin $AVAIL_IMAGE"; return 1; }
  done
  ok "both replicas pin $AVAIL_IMAGE (dry-run review POSTed to each Pod)"
}

# avail_endpoints_are_live: the Service's ready addresses are the two live webhook Pods' IPs
avail_endpoints_are_live() {
  chart_node_webhook_pods_ready && chart_node_endpoints_are "$(chart_node_live_pods webhook | cut -d' ' -f4 | sort | tr '\n' ' ')"
}

# avail_node_and_endpoints_ready: the tier's Node ($NODE_NAME, the one with a kubelet) Ready, both
# webhook Pods Ready and the Endpoints theirs. Other Node objects are left out: a scenario of the
# controller tier makes one with no kubelet, which stays NotReady for good.
avail_node_and_endpoints_ready() {
  node_ready && avail_endpoints_are_live
}

# avail_endpoints_explain: one line, what the Endpoints hold and what each live webhook Pod is
# (phase, the Ready condition with its reason and time, container ready, IP) and the Node's Ready
avail_endpoints_explain() {
  local ep pods node kcm
  ep=$(K -n "$CHART_NS" get endpoints "$CHART_FULL" -o json 2>&1 | jq -rc '[.subsets[]? |
    {ready: [.addresses[]?.ip], notReady: [.notReadyAddresses[]?.ip]}]' 2>&1) || true
  pods=$(K -n "$CHART_NS" get pods -l app.kubernetes.io/component=webhook -o json 2>&1 | jq -rc '[.items[] |
    "\(.metadata.name[-5:]) \(.status.phase) deleting=\(.metadata.deletionTimestamp != null)
    Ready=\((.status.conditions // [])[] | select(.type == "Ready") | "\(.status)/\(.reason // "")@\(.lastTransitionTime)")
    container=\([.status.containerStatuses[]?.ready]) ip=\(.status.podIP)"] | join("; ")' 2>&1) || true
  node=$(_node_vars; K get node "$NODE_NAME" -o json 2>&1 | jq -rc '"\(.metadata.name) \((.status.conditions // [])[] |
    select(.type == "Ready") | "\(.status)/\(.reason // "")@\(.lastTransitionTime)")"' 2>&1) || true
  kcm=running
  if ! _e2e_pid_alive "$E2E_WORK/kube-controller-manager.pid" kube-controller-manager; then
    kcm="EXITED: $(grep -m1 -E '^panic:|F[0-9]{4} ' "$E2E_WORK/kube-controller-manager.log" 2>/dev/null | cut -c1-200)"
  fi
  printf 'endpoints %s; pods: %s; node: %s; kube-controller-manager %s' "$ep" "$pods" "$node" "$kcm" | tr '\n' ' ' | tr -s ' '
}

# avail_warm IP IMAGE: a dry-run Pod CREATE review POSTed to the webhook Pod at IP (the chart asks
# no client certificate by default); its patch must pin IMAGE
avail_warm() {
  local review
  review=$(jq -nc --arg ns "$AVAIL_NS" --arg img "$2" '{apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
    request: {uid: "e2e-availability-warm", kind: {group: "", version: "v1", kind: "Pod"},
      resource: {group: "", version: "v1", resource: "pods"}, namespace: $ns, name: "warm",
      operation: "CREATE", userInfo: {username: "e2e-availability"}, dryRun: true,
      object: {apiVersion: "v1", kind: "Pod", metadata: {name: "warm", namespace: $ns},
        spec: {containers: [{name: "web", image: $img}]}}}}')
  curl -s --max-time 10 -k -H 'Content-Type: application/json' --data-binary "$review" "https://$1:8443/mutate" |
    jq -r '.response.patch // empty' | base64 -d 2>/dev/null | grep -q "$2@sha256:"
}

avail_server() { K config view --minify -o jsonpath='{.clusters[0].cluster.server}'; }

# shellcheck disable=SC2120 # (optional arguments: node-availability-registry-stopped passes some)
avail_stream_start() {
  local server
  server=$(avail_server)
  rm -f "$AVAIL_OUT/stop"
  python3 "$E2E_DIR/availability-stream.py" --server "$server" --token-file "$E2E_WORK/pki/admin.token" \
    --ca "$E2E_WORK/pki/ca.crt" --namespace "$AVAIL_NS" --image "$AVAIL_IMAGE" --rate "$AVAIL_RATE" \
    --duration "$AVAIL_SECONDS" --count "$(awk -v r="$AVAIL_RATE" -v s="$AVAIL_SECONDS" 'BEGIN{printf "%d", r*s}')" \
    --out "$AVAIL_OUT/attempts.tsv" --stop-file "$AVAIL_OUT/stop" "$@" \
    >"$AVAIL_OUT/summary.json" 2>"$AVAIL_OUT/stream.err" &
  AVAIL_STREAM_PID=$!
  # (both end with the stream at the latest, should the scenario stop before avail_settle_then_stop)
  avail_logs_start
  avail_endpoints_watch
  log "  admission stream started (pid $AVAIL_STREAM_PID): $AVAIL_RATE/s into $AVAIL_NS, at most ${AVAIL_SECONDS}s"
  # the steady state before the disruption
  sleep "$AVAIL_LEAD"
}

# avail_logs_start: every second, each webhook Pod's log files (all its containers' restarts) copied
# to $AVAIL_OUT/logs/POD.log (avail_logs_copy), until $AVAIL_OUT/stop exists or the stream has
# ended, then once more
avail_logs_start() {
  (
    # (a background helper: its failures are not the scenario's; it ends with the stream)
    set +e
    trap - ERR
    local last=0
    while ((!last)); do
      [[ ! -e $AVAIL_OUT/stop && -d /proc/$AVAIL_STREAM_PID ]] || last=1
      avail_logs_copy
      ((last)) || sleep 1
    done
  ) &
  AVAIL_LOGS_PID=$!
}
avail_logs_copy() {
  local d p
  for d in /var/log/pods/"${CHART_NS}_${CHART_FULL}"-*; do
    [[ -d $d/pinhook ]] || continue
    p=${d#/var/log/pods/"${CHART_NS}"_}
    p=${p%_*}
    cat "$d"/pinhook/*.log >"$AVAIL_OUT/logs/$p.log.new" 2>/dev/null && mv -f "$AVAIL_OUT/logs/$p.log.new" "$AVAIL_OUT/logs/$p.log"
  done
}

avail_settle_then_stop() {
  sleep "$AVAIL_SETTLE"
  touch "$AVAIL_OUT/stop"
  wait "$AVAIL_STREAM_PID" || log "  the admission stream exited $?: $(tail -n 3 "$AVAIL_OUT/stream.err" | tr '\n' ' ')"
  wait "$AVAIL_LOGS_PID" 2>/dev/null || true
  avail_logs_copy # (the reviews of the stream's last attempts)
  avail_endpoints_stop
}

# avail_disrupt: now is the disruption's start (AVAIL_T_DISRUPT, printed as T+ by avail_report)
avail_disrupt() { AVAIL_T_DISRUPT=$(date +%s.%N); }
# avail_upgrade WHAT HELM-ARGS...: the stream started, then the disruption: `helm3 upgrade` of the
# release with its values and HELM-ARGS (log $AVAIL_OUT/upgrade.log); non-zero, said, when it fails
avail_upgrade() {
  local what=$1
  shift
  # shellcheck disable=SC2119 # (no arguments of its own here)
  avail_stream_start
  log "  helm3 upgrade $CHART_REL: $what"
  avail_disrupt
  helm3 upgrade "$CHART_REL" "$ROOT/charts/pinhook" -n "$CHART_NS" -f "$CHART_DIR_RUN/values.yaml" \
    "$@" >"$AVAIL_OUT/upgrade.log" 2>&1 ||
    bad "helm3 upgrade failed: $(tail -n 5 "$AVAIL_OUT/upgrade.log" | tr '\n' ' ')"
}

# avail_since T0: seconds from T0 (date +%s.%N) to now, one decimal
avail_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# avail_spread [ENDPOINT]: "<pod suffix>:N,..." the stream's reviews each webhook Pod logged on
# ENDPOINT (mutate; validate: the apiserver calls each webhook over a connection of its own)
avail_spread() {
  local f p n out=() endpoint=${1:-mutate}
  for f in "$AVAIL_OUT"/logs/*.log; do
    [[ -e $f ]] || continue
    p=$(basename "$f" .log)
    n=$(cut -d' ' -f4- "$f" | jq -r --arg ns "$AVAIL_NS" --arg e "$endpoint" 'select(.fields.message == "review" and
      .fields.endpoint == $e and .fields.namespace == $ns and .fields.dry_run != true and
      (.fields.kind == "Pod" or .fields.kind == "Deployment")) | 1' 2>/dev/null | grep -c . || true)
    # Pods that only lived before the stream (earlier scenarios') are left out
    if ((n > 0)) || [[ " $(chart_node_live_pods webhook | cut -d' ' -f1 | tr '\n' ' ') " == *" $p "* ]]; then
      out+=("${p: -5}:$n")
    fi
  done
  local IFS=,
  printf '%s' "${out[*]}"
}

# avail_report READY_AGAIN [EXTRA]: the figures line (and EXTRA), then each failure
avail_report() {
  local s line failed unpinned attempted n
  s=$(tail -n1 "$AVAIL_OUT/summary.json")
  jq -e . >/dev/null 2>&1 <<<"$s" || { bad "the admission stream wrote no summary: $(tail -n 5 "$AVAIL_OUT/stream.err" | tr '\n' ' ')"; return 1; }
  attempted=$(jq -r .attempted <<<"$s")
  failed=$(jq -r .failed <<<"$s")
  unpinned=$(jq -r .unpinned <<<"$s")
  line="availability: $AVAIL_NAME attempted=$attempted failed=$((failed + unpinned)) refused=$(jq -r .refused <<<"$s")"
  line+=" unanswered=$(jq -r .unanswered <<<"$s")"
  line+=" p50=$(jq -r .p50_ms <<<"$s")ms p99=$(jq -r .p99_ms <<<"$s")ms max=$(jq -r .max_ms <<<"$s")ms"
  line+=" ready_again=${1}s spread=$(avail_spread) validate_spread=$(avail_spread validate)${2:+ $2}"
  log "$line"
  [[ -z ${AVAIL_T_DISRUPT:-} ]] ||
    log "  availability: $AVAIL_NAME disruption at T+$(awk -v a="$(jq -r .started <<<"$s")" -v b="$AVAIL_T_DISRUPT" 'BEGIN{printf "%.2f", b-a}')s"
  printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$line" >>"$RUN/availability/results.txt"
  # (through a file: `head` closing a pipe early would fail the scenario with SIGPIPE)
  avail_failures >"$AVAIL_OUT/failures.txt"
  sed -n 1,20p "$AVAIL_OUT/failures.txt" | while IFS= read -r l; do log "  availability: $AVAIL_NAME failure: $l"; done
  n=$(wc -l <"$AVAIL_OUT/failures.txt")
  ((n <= 20)) || log "  availability: $AVAIL_NAME ... $((n - 20)) more in $AVAIL_OUT/failures.txt"
  awk -F'\t' -v t0="$(jq -r .started <<<"$s")" '$6 == "unanswered" { n++; if (!a) { a = $2; ea = $7 } b = $2; eb = $7 }
    END { if (n) printf "%d unanswered (no HTTP answer) from T+%.2fs to T+%.2fs; first: %s; last: %s\n", n, a - t0, b - t0, ea, eb }' \
    "$AVAIL_OUT/attempts.tsv" | while IFS= read -r l; do log "  availability: $AVAIL_NAME $l"; done
}

# avail_expect_none_failed: every attempt answered, none failed, none stored unpinned
avail_expect_none_failed() {
  local s
  s=$(tail -n1 "$AVAIL_OUT/summary.json")
  (($(jq -r .attempted <<<"$s") > 0)) || { bad "no admission attempted"; return 1; }
  expect_eq "attempts answered" "$(jq -r .answered <<<"$s")" "$(jq -r .attempted <<<"$s")" || return 1
  expect_eq "unpinned admissions" "$(jq -r .unpinned <<<"$s")" 0 || return 1
  expect_eq "failed admissions" "$(jq -r .failed <<<"$s")" 0
}

# avail_failures: the failed and unpinned attempts, "T+<s from the stream's start> <kind> <code> <error>"
avail_failures() {
  local t0
  t0=$(jq -r .started "$AVAIL_OUT/summary.json" 2>/dev/null || echo 0)
  awk -F'\t' -v t0="$t0" '$6 == "failed" || $6 == "unpinned" {printf "T+%.2fs %s %s %s %s\n", $2 - t0, $4, $5, $6, $7}' \
    "$AVAIL_OUT/attempts.tsv"
}

avail_end() { K delete ns "$AVAIL_NS" --wait=false >/dev/null 2>&1 || true; }

# avail_busiest: the live webhook Pod that answered most of the stream's reviews so far (the one
# the apiserver's connection goes to), or the first live one
avail_busiest() {
  local f p n best="" top=-1 live
  live=" $(chart_node_live_pods webhook | cut -d' ' -f1 | tr '\n' ' ') "
  for f in "$AVAIL_OUT"/logs/*.log; do
    [[ -e $f ]] || continue
    p=$(basename "$f" .log)
    [[ $live == *" $p "* ]] || continue
    n=$(cut -d' ' -f4- "$f" | jq -r --arg ns "$AVAIL_NS" 'select(.fields.message == "review" and
      .fields.endpoint == "mutate" and .fields.namespace == $ns) | 1' 2>/dev/null | grep -c . || true)
    if ((n > top)); then best=$p top=$n; fi
  done
  [[ -n $best ]] || best=$(chart_node_live_pods webhook | sed -n 1p | cut -d' ' -f1)
  printf '%s' "$best"
}

# avail_endpoints_watch: the Service's Endpoints, one timestamped line per change, in
# $AVAIL_OUT/endpoints.log ("UNIX-TIME IP IP..."), until avail_settle_then_stop
avail_endpoints_watch() {
  # (the API's watch through curl: `kubectl get --watch -o jsonpath` printed the first state only;
  # resourceVersion=0, the watch cache's state first: without it a 1.32 apiserver on etcd 3.4,
  # which has no progress requests, waits for a fresh revision of that resource and answers
  # `Too large resource version` 10 s later)
  (
    set +e
    trap - ERR
    curl -sN --max-time "$((${AVAIL_SECONDS%.*} + 60))" --cacert "$E2E_WORK/pki/ca.crt" -H "Authorization: Bearer $(<"$E2E_WORK/pki/admin.token")" \
      "$(avail_server)/api/v1/namespaces/$CHART_NS/endpoints?watch=1&resourceVersion=0&fieldSelector=metadata.name%3D$CHART_FULL" |
      jq --unbuffered -r '[.object.subsets[]?.addresses[]?.ip] | join(" ")' |
      while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done >"$AVAIL_OUT/endpoints.log"
  ) &
  AVAIL_EP_PID=$!
}
avail_endpoints_stop() {
  [[ -n ${AVAIL_EP_PID:-} ]] || return 0
  pkill -P "$AVAIL_EP_PID" 2>/dev/null || true
  kill "$AVAIL_EP_PID" 2>/dev/null || true
  wait "$AVAIL_EP_PID" 2>/dev/null || true
}
# avail_dropped_after IP T0: "<s>s" from T0 until the Endpoints no longer held IP, or "never"
avail_dropped_after() {
  awk -v g="$(avail_endpoint_gone "$1" "$2")" -v t="$2" 'BEGIN{ if (g > 0) printf "%.1fs", g - t; else print "never" }'
}
# avail_endpoint_gone IP T0: the first time after T0 the Endpoints did not hold IP ("" if never)
avail_endpoint_gone() {
  awk -v ip="$1" -v t0="$2" '$1 >= t0 { found = 0; for (i = 2; i <= NF; i++) if ($i == ip) found = 1
    if (!found) { print $1; exit } }' "$AVAIL_OUT/endpoints.log"
}

# avail_restarted POD RESTARTS: POD's container restarted since (restartCount > RESTARTS) and both
# webhook Pods Running and Ready
avail_restarted() {
  (($(K -n "$CHART_NS" get pod "$1" -o jsonpath='{.status.containerStatuses[0].restartCount}') > $2)) &&
    chart_node_webhook_pods_ready
}

# avail_evict POD OUT: POST an Eviction (policy/v1beta1 on 1.20) of the webhook Pod POD; the answer
# to OUT, the HTTP code to stdout
avail_evict() {
  curl -s -o "$2" -w '%{http_code}' --max-time 20 --cacert "$E2E_WORK/pki/ca.crt" \
    -H "Authorization: Bearer $(<"$E2E_WORK/pki/admin.token")" -H 'Content-Type: application/json' \
    --data-binary "{\"apiVersion\":\"policy/v1beta1\",\"kind\":\"Eviction\",\"metadata\":{\"name\":\"$1\",\"namespace\":\"$CHART_NS\"}}" \
    "$(avail_server)/api/v1/namespaces/$CHART_NS/pods/$1/eviction"
}
avail_pdb_allowed() { K -n "$CHART_NS" get pdb "$CHART_FULL" -o jsonpath='{.status.disruptionsAllowed}'; }
avail_pdb_allows() { [[ $(avail_pdb_allowed) == "$1" ]]; }

# avail_registry_stop: the registry as the node and its Pods reach it (node.sh's TLS forwarder
# NODE_IP:PORT -> REGISTRY_HOST, which pinhook's Pods resolve tags through) stopped: its command
# line kept in $AVAIL_OUT, its forked connections and itself killed by PID
avail_registry_stop() {
  local pidfile="$E2E_WORK/node/registry-forward-${REGISTRY_HOST##*:}.pid" pid c
  pid=$(<"$pidfile")
  if ! [[ -d /proc/$pid ]] || ! _e2e_cmdline_has "$pid" socat; then
    bad "no registry forwarder at PID $pid"
    return 1
  fi
  tr '\0' '\n' <"/proc/$pid/cmdline" >"$AVAIL_OUT/registry-forward.cmdline"
  for c in $(ps -o pid= --ppid "$pid"); do kill "$c" 2>/dev/null || true; done
  kill "$pid"
  wait_until 10 "the registry forwarder (PID $pid) to exit" test ! -d "/proc/$pid" || return 1
  ! curl -s -o /dev/null --max-time 2 --cacert "$E2E_WORK/pki/ca.crt" "https://$NODE_IP:${REGISTRY_HOST##*:}/v2/" ||
    { bad "the registry still answers on $NODE_IP"; return 1; }
}
# avail_registry_start: the forwarder started again with the same command line, its PID where
# node.sh's stop finds it
avail_registry_start() {
  local port=${REGISTRY_HOST##*:} cmd
  mapfile -t cmd <"$AVAIL_OUT/registry-forward.cmdline"
  ((${#cmd[@]} > 1)) || { bad "no saved command line of the registry forwarder"; return 1; }
  "${cmd[@]}" </dev/null >>"$E2E_WORK/node/registry-forward-$port.log" 2>&1 &
  echo $! >"$E2E_WORK/node/registry-forward-$port.pid"
  wait_until 30 "the registry on $NODE_IP:$port again" \
    curl -s -o /dev/null --max-time 2 --cacert "$E2E_WORK/pki/ca.crt" "https://$NODE_IP:$port/v2/"
}

# avail_restart_counts: the live webhook Pods' "NAME RESTARTS" lines (a Pod being deleted, as
# the previous scenario's victim may still be, is not one of them)
avail_restart_counts() {
  K -n "$CHART_NS" get pods -l app.kubernetes.io/component=webhook -o json | jq -r '.items[] |
    select(.metadata.deletionTimestamp == null) | "\(.metadata.name) \(.status.containerStatuses[0].restartCount)"' | sort
}

# avail_pinhook_pid POD: the PID of POD's pinhook process, from containerd (`ctr -n k8s.io tasks
# ls`: the task of the container the Pod's status names, tini, and its child), checked by name
avail_pinhook_pid() {
  local cid pid
  cid=$(K -n "$CHART_NS" get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')
  cid=${cid#containerd://}
  pid=$(ctr --address "$NODE_SOCK" -n k8s.io tasks ls 2>/dev/null | awk -v id="$cid" '$1 == id {print $2}')
  [[ $pid =~ ^[0-9]+$ && -d /proc/$pid ]] || { bad "no PID for container ${cid:0:12} of $1 (ctr tasks ls)"; return 1; }
  # the container's first process is tini (the image's entrypoint); pinhook is its child
  if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == tini ]]; then
    pid=$(awk '{print $1}' "/proc/$pid/task/$pid/children" 2>/dev/null)
    [[ $pid =~ ^[0-9]+$ && -d /proc/$pid ]] || { bad "tini of $1 runs no child"; return 1; }
  fi
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == pinhook ]] || { bad "PID $pid is not pinhook: $(tr '\0' ' ' <"/proc/$pid/cmdline")"; return 1; }
  printf '%s' "$pid"
}

# avail_expect_kill_bound T_KILL IP READY_S: after a SIGKILL of the webhook Pod at IP at T_KILL,
# whose replica was Ready again READY_S later: every attempt answered, none unpinned, and every
# failed one a connection error to the Service (refused: kube-proxy still sent the new
# connection to the dead Pod; reset, EOF, lost: the request was in flight on its connection;
# "server closed idle connection": net/http's errServerClosedIdle, the request written on the
# kept-alive connection the kill had just closed, which a POST is not retried after) that
# started no earlier than 1 s before the kill (in flight) and no later than 3 s after the
# Endpoints dropped IP, or the replica was Ready again, whichever came first. docs/availability.md
# explains this bound with the apiserver's code.
avail_expect_kill_bound() {
  local t0=$1 ip=$2 ready=$3 gone back limit rc=0 out
  gone=$(avail_endpoint_gone "$ip" "$t0")
  back=$(awk -v t0="$t0" -v r="${ready/timeout/100000}" 'BEGIN{printf "%.3f", t0 + r}')
  limit=$(awk -v g="${gone:-0}" -v b="$back" 'BEGIN{ if (g > 0 && g + 3 < b) printf "%.3f", g + 3; else printf "%.3f", b }')
  log "  availability: $AVAIL_NAME killed $ip at $(awk -v t="$t0" 'BEGIN{printf "%.3f", t}'), the Endpoints dropped it $(awk -v g="${gone:-0}" -v t="$t0" 'BEGIN{ if (g > 0) printf "%.1fs", g - t; else print "never" }') after, Ready again ${ready}s after"
  expect_eq "unpinned admissions" "$(jq -r .unpinned "$AVAIL_OUT/summary.json")" 0 || rc=1
  expect_eq "attempts answered" "$(jq -r .answered "$AVAIL_OUT/summary.json")" "$(jq -r .attempted "$AVAIL_OUT/summary.json")" || rc=1
  out=$(awk -F'\t' -v t0="$t0" -v lim="$limit" '$6 == "failed" {
      conn = ($7 ~ /connect: connection refused|connection reset by peer|: EOF$|http2: client connection lost|http: server closed idle connection$/)
      if (!conn || $2 < t0 - 1 || $2 > lim) print }' "$AVAIL_OUT/attempts.tsv")
  expect_eq "failed attempts that are not a connection error between the kill and $limit" "$out" "" || rc=1
  return "$rc"
}

# avail_secret_fp KEY: the SHA-256 fingerprint of the certificate under KEY in the managed TLS
# Secret ("" when absent)
avail_secret_fp() {
  K -n "$CHART_NS" get secret "$CHART_FULL-tls" -o jsonpath="{.data.${1//./\\.}}" | base64 -d 2>/dev/null |
    openssl x509 -noout -fingerprint -sha256 2>/dev/null | cut -d= -f2
}
# avail_rotation_started "OLD...": the webhook Pods are new (none in OLD) and the Secret holds a
# published next CA
avail_rotation_started() {
  chart_node_new_pods_ready "$1" &&
    [[ -n $(K -n "$CHART_NS" get secret "$CHART_FULL-tls" -o jsonpath='{.metadata.annotations.pinhook\.dev/next-ca-published-at}') ]] &&
    [[ -n $(avail_secret_fp next.crt) ]]
}
# avail_rotation_done NEXT_FP OLD_FP: the CA that was next signs, the old one is previous.crt, no
# next CA, and every webhook's caBundle is the Secret's ca.crt
avail_rotation_done() {
  [[ $(avail_secret_fp signer.crt) == "$1" && $(avail_secret_fp previous.crt) == "$2" && -z $(avail_secret_fp next.crt) ]] &&
    helm_secret_ca "$CHART_NS" "$CHART_FULL-tls" "$AVAIL_OUT/ca.crt" && helm_bundles_are "$CHART_FULL" "$AVAIL_OUT/ca.crt"
}

# avail_apiserver_stop: kube-apiserver (cluster.sh's, by the PID in its pid file) stopped with
# SIGTERM, its command line kept in $AVAIL_OUT; avail_apiserver_start: started again with it, the
# same log, its PID where cluster.sh's stop finds it, then its /readyz ok (≤ 90 s)
avail_apiserver_stop() {
  local pid
  pid=$(<"$E2E_WORK/kube-apiserver.pid")
  if ! [[ -d /proc/$pid ]] || ! _e2e_cmdline_has "$pid" kube-apiserver; then
    bad "no kube-apiserver at PID $pid"
    return 1
  fi
  tr '\0' '\n' <"/proc/$pid/cmdline" >"$AVAIL_OUT/apiserver.cmdline"
  kill -TERM "$pid"
  wait_until 90 "kube-apiserver (PID $pid) to exit" test ! -d "/proc/$pid"
}
avail_apiserver_start() {
  local cmd
  mapfile -t cmd <"$AVAIL_OUT/apiserver.cmdline"
  ((${#cmd[@]} > 1)) || { bad "no saved command line of kube-apiserver"; return 1; }
  env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY \
    "${cmd[@]}" </dev/null >>"$E2E_WORK/kube-apiserver.log" 2>&1 &
  echo $! >"$E2E_WORK/kube-apiserver.pid"
  wait_until 90 "kube-apiserver's /readyz" avail_apiserver_ready
}
avail_apiserver_ready() { [[ $(kubectl --request-timeout=2s get --raw /readyz 2>/dev/null) == ok ]]; }

# avail_node_stop: the node "powered off": the kubelet stopped (SIGTERM, by the PID in its pid
# file), every container killed (SIGKILL through containerd, as a power cut would), containerd
# stopped, its leftover shims killed; the command lines of the kubelet and containerd kept in
# $AVAIL_OUT. kube-proxy, the forwarders and the control plane stay up (another machine's, in a
# cluster). avail_node_start: containerd, then the kubelet, started again with those command lines
# and their pid files updated (node.sh's stop finds them), then the Node Ready (≤ 120 s).
avail_node_stop() {
  local nw="$E2E_WORK/node" name pid t s
  for name in kubelet containerd; do
    pid=$(<"$nw/$name.pid")
    if ! [[ -d /proc/$pid ]] || ! _e2e_cmdline_has "$pid" "$name"; then
      bad "no $name at PID $pid"
      return 1
    fi
    tr '\0' '\n' <"/proc/$pid/cmdline" >"$AVAIL_OUT/$name.cmdline"
  done
  pid=$(<"$nw/kubelet.pid")
  kill -TERM "$pid"
  wait_until 30 "the kubelet (PID $pid) to exit" test ! -d "/proc/$pid" || return 1
  for t in $(ctr --address "$NODE_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$NODE_SOCK" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
  done
  pid=$(<"$nw/containerd.pid")
  kill -TERM "$pid"
  wait_until 30 "containerd (PID $pid) to exit" test ! -d "/proc/$pid" || return 1
  for s in /proc/[0-9]*; do
    if _e2e_cmdline_has "${s#/proc/}" "containerd-shim.* -address $NODE_SOCK"; then
      kill -KILL "${s#/proc/}" 2>/dev/null || true
    fi
  done
  return 0
}
avail_node_start() {
  local nw="$E2E_WORK/node" name cmd
  for name in containerd kubelet; do
    mapfile -t cmd <"$AVAIL_OUT/$name.cmdline"
    ((${#cmd[@]} > 0)) || { bad "no saved command line of $name"; return 1; }
    env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY \
      AWS_EC2_METADATA_DISABLED=true "${cmd[@]}" </dev/null >>"$nw/$name.log" 2>&1 &
    echo $! >"$nw/$name.pid"
    if [[ $name == containerd ]]; then
      wait_until 30 "containerd's socket" ctr --address "$NODE_SOCK" --timeout 2s version || return 1
    fi
  done
  wait_until 120 "the Node Ready" node_ready
}
# avail_all_restarted "BEFORE": every webhook Pod of BEFORE ("NAME RESTARTS" lines) restarted
# since, and both Running and Ready
avail_all_restarted() {
  local name n
  chart_node_webhook_pods_ready || return 1
  while read -r name n; do
    [[ -n $name ]] || continue
    (($(K -n "$CHART_NS" get pod "$name" -o jsonpath='{.status.containerStatuses[0].restartCount}' 2>/dev/null || echo -1) > n)) || return 1
  done <<<"$1"
}
