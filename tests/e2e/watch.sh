# shellcheck shell=bash
# Scenarios v-y of tests/e2e/run.sh, which sources this file: `pinhook watch` (issue 14) on the
# real apiserver and controller-manager. The watch runs as a local process, as the shipped
# ServiceAccount pinhook-system/pinhook-watch (a TokenRequest token; its RBAC is
# manifests/base/watch-rbac.yaml, applied by run.sh with the local-url overlay), against the
# PolicyReport CRDs of manifests/components/policy-reports, with a short --recheck-interval.
# Uses run.sh's helpers (K, klog, log, ok, bad, expect_eq, expect_contains, wait_until,
# free_port, stop_pid, alive, token_kubeconfig, image, repush, openshift_mirrors, e2e_ns, $RUN,
# $ROOT, $PINHOOK_BIN, $REGISTRY_CA).
#
#   v  a Deployment pinned at admission, then its tag re-pushed: within one recheck interval
#      the namespace's PolicyReport says tag-moved (fail) with both digests, a TagMoved Event is
#      on the Deployment, pinhook_running_images{state="tag-moved"} and
#      pinhook_tag_moved_running_total go up by one; the next cycles write nothing (the
#      watch's own count, report_writes=0 events=0); `pinhook inventory --digest` finds it;
#   w  a Pod in an audit namespace, admitted unpinned: its report warns `unpinned`, an Unpinned
#      Event is on the Pod;
#   x  an ImageTagMirrorSet and an ImageContentPolicy with allowMirrorByTags created while the
#      mirror guard is not registered (they predate pinhook): the ClusterPolicyReport
#      pinhook-mirrors fails both; deleted, the report goes;
#   y  a second replica: the Lease pinhook-watch is held by one; the holder is killed (SIGKILL,
#      no release) and the other takes the Lease within the lease duration and writes the next
#      finding;

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

# watch_start N: replica N of `pinhook watch` (pod name watch-N, port in WATCH_PORT_N, log
# $WATCH_DIR/watch-N.log, PID in $WATCH_DIR/watch-N.pid); waits for its /readyz
watch_start() {
  local n=$1 port
  port=$(free_port)
  printf -v "WATCH_PORT_$n" '%s' "$port"
  echo "$port" >"$WATCH_DIR/watch-$n.port"
  NO_COLOR=1 PINHOOK_LOG=info "$PINHOOK_BIN" watch \
    --listen "127.0.0.1:$port" --recheck-interval "${WATCH_INTERVAL}s" \
    --lease-namespace pinhook-system --lease pinhook-watch --pod-name "watch-$n" \
    --lease-duration "${WATCH_LEASE_SECONDS}s" \
    --registry-ca "$REGISTRY_CA" --policy "$RUN/policy.yaml" --kubeconfig "$WATCH_DIR/kubeconfig" \
    </dev/null >>"$WATCH_DIR/watch-$n.log" 2>&1 3>&- &
  echo $! >"$WATCH_DIR/watch-$n.pid"
  log "  started pinhook watch replica $n on 127.0.0.1:$port (pid $!, log $WATCH_DIR/watch-$n.log)"
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

scenario_v() {
  local ns=e2e-v rc=0 tagged d1 d2 port moved_before total_before holder log
  watch_ensure || return 1
  e2e_ns "$ns"
  tagged=$(image drift 1.0)
  d1=$(digest drift 1.0)
  app_deployment drift 1 "$tagged" >"$WATCH_DIR/v-deployment.yaml"
  klog -n "$ns" create -f "$WATCH_DIR/v-deployment.yaml"
  wait_until 30 "the Pod of Deployment drift" pods_at_least "$ns" "$ns" app=drift 1 || return 1
  expect_eq "the Pod's image (pinned at admission)" "$(pod_images "$ns" app=drift)" "1 $tagged@$d1" || rc=1
  wait_until $((WATCH_INTERVAL * 3 + 10)) "the PolicyReport of $ns to pass tag-current" \
    report_says "$ns" '.results[] | select(.rule == "tag-current" and .result == "pass")' || return 1
  ok "PolicyReport $ns/pinhook: pinned pass, tag-current pass"
  port=$(watch_any_port)
  moved_before=$(watch_metric "$port" 'pinhook_running_images{state="tag-moved"}')
  total_before=$(watch_metric "$port" 'pinhook_tag_moved_running_total')

  d2=$(repush drift 1.0) || { bad "the registry helper did not re-push drift:1.0"; return 1; }
  [[ $d2 != "$d1" ]] || { bad "the re-push kept the digest $d1"; return 1; }
  ok "re-pushed drift:1.0: $d1 -> $d2"
  local t0=$SECONDS
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $ns to say tag-moved" \
    report_says "$ns" '.results[] | select(.rule == "tag-current" and .result == "fail" and .properties.state == "tag-moved")' || return 1
  ok "tag-moved reported $((SECONDS - t0))s after the re-push (recheck interval ${WATCH_INTERVAL}s)"
  local result
  result=$(report_json "$ns" | jq -c '.results[] | select(.rule == "tag-current") | {result, pinned: .properties.pinnedDigest, current: .properties.currentDigest, kind: .resources[0].kind, name: .resources[0].name}')
  expect_eq "tag-current result" "$result" \
    "{\"result\":\"fail\",\"pinned\":\"$d1\",\"current\":\"$d2\",\"kind\":\"Deployment\",\"name\":\"drift\"}" || rc=1
  expect_contains "its message" "$(report_json "$ns" | jq -r '.results[] | select(.rule == "tag-current") | .message')" \
    "containers[app] runs $tagged@$d1: its tag now resolves to $d2, not the pinned $d1" || rc=1
  expect_eq "report summary" "$(report_json "$ns" | jq -c .summary)" '{"error":0,"fail":1,"pass":1,"skip":0,"warn":0}' || rc=1
  wait_until 10 "a TagMoved Event on Deployment drift" events_at_least "$ns" Deployment drift TagMoved 1 || rc=1
  expect_eq "TagMoved Events on Deployment drift" "$(events_of "$ns" Deployment drift TagMoved)" 1 || rc=1
  expect_eq "its regarding uid (kubectl describe finds it)" \
    "$(K -n "$ns" get events.events.k8s.io -o json | jq -r '.items[] | select(.reason == "TagMoved") | .regarding.uid')" \
    "$(K -n "$ns" get deployment drift -o jsonpath='{.metadata.uid}')" || rc=1
  expect_eq 'pinhook_running_images{state="tag-moved"}' \
    "$(watch_metric "$port" 'pinhook_running_images{state="tag-moved"}')" "$((moved_before + 1))" || rc=1
  expect_eq "pinhook_tag_moved_running_total" \
    "$(watch_metric "$port" 'pinhook_tag_moved_running_total')" "$((total_before + 1))" || rc=1

  # Nothing changes from now on: the next two cycles write nothing.
  holder=$(lease_holder)
  log="$WATCH_DIR/${holder}.log"
  local seen
  seen=$(cycles_in "$log")
  wait_until $((WATCH_INTERVAL * 3 + 10)) "two more rechecks by $holder" \
    cycles_at_least "$log" $((seen + 2)) || rc=1
  expect_eq "report writes and Events of the last recheck (nothing changed)" "$(last_cycle "$log")" "0 0" || rc=1
  expect_eq "TagMoved Events on Deployment drift, still" "$(events_of "$ns" Deployment drift TagMoved)" 1 || rc=1

  # pinhook inventory, with the admin kubeconfig: where does d1 run?
  local inv
  inv=$("$PINHOOK_BIN" inventory --digest "$d1" -o json --kubeconfig "$KUBECONFIG") || { bad "pinhook inventory failed"; return 1; }
  expect_eq "pinhook inventory --digest $d1" \
    "$(jq -c '[.images[] | {state, digest, currentDigest, pods, workloads: [.workloads[] | "\(.namespace)/\(.kind)/\(.name)"]}]' <<<"$inv")" \
    "[{\"state\":\"tag-moved\",\"digest\":\"$d1\",\"currentDigest\":\"$d2\",\"pods\":1,\"workloads\":[\"$ns/Deployment/drift\"]}]" || rc=1
  "$PINHOOK_BIN" inventory --namespace "$ns" --kubeconfig "$KUBECONFIG" >"$WATCH_DIR/v-inventory.txt" || rc=1
  log "  kubectl get policyreports -n $ns:"
  K -n "$ns" get policyreports.wgpolicyk8s.io | while IFS= read -r line; do log "    $line"; done
  log "  kubectl get events.events.k8s.io -n $ns:"
  K -n "$ns" get events.events.k8s.io | while IFS= read -r line; do log "    $line"; done
  log "  pinhook inventory --namespace $ns:"
  while IFS= read -r line; do log "    $line"; done <"$WATCH_DIR/v-inventory.txt"
  return "$rc"
}

scenario_w() {
  local ns=e2e-w rc=0 tagged
  watch_ensure || return 1
  e2e_ns "$ns" pinhook.dev/mode=audit
  tagged=$(image app 1.0)
  klog -n "$ns" run legacy --image="$tagged" --restart=Never
  expect_eq "the Pod's image (audit: not mutated)" "$(jp "$ns" pod legacy '{.spec.containers[0].image}')" "$tagged" || rc=1
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $ns to warn unpinned" \
    report_says "$ns" '.results[] | select(.rule == "pinned" and .result == "warn" and .properties.state == "unpinned")' || return 1
  expect_eq "its result" "$(report_json "$ns" | jq -c '[.results[] | {rule, result, message, kind: .resources[0].kind, name: .resources[0].name}]')" \
    "[{\"rule\":\"pinned\",\"result\":\"warn\",\"message\":\"containers[legacy] runs $tagged by tag, not pinned to a digest\",\"kind\":\"Pod\",\"name\":\"legacy\"}]" || rc=1
  wait_until 10 "an Unpinned Event on Pod legacy" events_at_least "$ns" Pod legacy Unpinned 1 || rc=1
  expect_eq "Unpinned Events on Pod legacy" "$(events_of "$ns" Pod legacy Unpinned)" 1 || rc=1
  expect_eq "PolicyReports in $ns (name pass fail warn)" \
    "$(K -n "$ns" get policyreports.wgpolicyk8s.io -o custom-columns=N:.metadata.name,P:.summary.pass,F:.summary.fail,W:.summary.warn --no-headers | tr -s ' ')" \
    "pinhook 0 0 1" || rc=1
  log "  kubectl get policyreports -n $ns:"
  K -n "$ns" get policyreports.wgpolicyk8s.io | while IFS= read -r line; do log "    $line"; done
  return "$rc"
}

scenario_x() {
  local rc=0 dir="$WATCH_DIR/x" saved crd
  watch_ensure || return 1
  mkdir -p "$dir"
  klog apply -f "$ROOT/tests/fixtures/crds/"
  for crd in imagetagmirrorsets.config.openshift.io imagecontentpolicies.config.openshift.io; do
    klog wait --for=condition=Established "crd/$crd" --timeout=30s
  done
  # Created "before pinhook": the ValidatingWebhookConfiguration (its mirror guard refuses them)
  # is taken away for the two creates and put back as it was.
  K get validatingwebhookconfiguration pinhook -o json |
    jq 'del(.metadata.resourceVersion, .metadata.uid, .metadata.creationTimestamp, .metadata.generation, .metadata.managedFields)' \
      >"$dir/validating.json"
  klog delete validatingwebhookconfiguration pinhook
  saved=0
  openshift_mirrors ImageTagMirrorSet e2e-x-tags imageTagMirrors >"$dir/itms.yaml"
  openshift_mirrors ImageContentPolicy e2e-x-icp repositoryDigestMirrors "allowMirrorByTags: true" >"$dir/icp.yaml"
  klog create -f "$dir/itms.yaml" || rc=1
  klog create -f "$dir/icp.yaml" || rc=1
  klog create -f "$dir/validating.json" && saved=1
  ((saved)) || { bad "could not put the ValidatingWebhookConfiguration back"; return 1; }
  ok "ImageTagMirrorSet e2e-x-tags and ImageContentPolicy e2e-x-icp stored without the guard; guard back"
  cpr() { K get clusterpolicyreports.wgpolicyk8s.io pinhook-mirrors -o json 2>/dev/null || true; }
  cpr_has_both() {
    local json
    json=$(cpr)
    [[ -n $json ]] && [[ $(jq '[.results[] | select(.result == "fail")] | length' <<<"$json") == 2 ]]
  }
  wait_until $((WATCH_INTERVAL * 2 + 10)) "ClusterPolicyReport pinhook-mirrors to fail both" cpr_has_both || return 1
  expect_eq "its results" "$(cpr | jq -c '[.results[] | {result, rule, kind: .resources[0].kind, name: .resources[0].name}] | sort_by(.kind)')" \
    '[{"result":"fail","rule":"mirror-by-digest-only","kind":"ImageContentPolicy","name":"e2e-x-icp"},{"result":"fail","rule":"mirror-by-digest-only","kind":"ImageTagMirrorSet","name":"e2e-x-tags"}]' || rc=1
  expect_contains "the ImageTagMirrorSet's message" "$(cpr | jq -r '.results[] | select(.resources[0].kind == "ImageTagMirrorSet") | .message')" \
    "lets mirror.example:5000/team serve tag pulls for registry.example/team" || rc=1
  klog delete imagetagmirrorset e2e-x-tags
  klog delete imagecontentpolicy e2e-x-icp
  cpr_gone() { [[ -z $(cpr) ]]; }
  wait_until $((WATCH_INTERVAL * 2 + 10)) "ClusterPolicyReport pinhook-mirrors to go with its last finding" cpr_gone || rc=1
  return "$rc"
}

scenario_y() {
  local ns=e2e-y rc=0 first second t0 tagged
  watch_ensure || return 1
  e2e_ns "$ns" pinhook.dev/mode=audit
  local other
  if watch_running 0; then other=1; else other=0; fi
  watch_start "$other" || return 1
  first=$(lease_holder)
  [[ $first == watch-0 || $first == watch-1 ]] || { bad "Lease holder '$first'"; return 1; }
  ok "Lease pinhook-watch held by $first"
  # The standby neither rechecks nor writes.
  local standby=watch-$other
  [[ $first == "watch-$other" ]] && standby=watch-$((1 - other))
  sleep $((WATCH_INTERVAL + 2))
  expect_eq "rechecks by the standby $standby" "$(cycles_in "$WATCH_DIR/$standby.log")" 0 || rc=1
  expect_eq "holder after $((WATCH_INTERVAL + 2))s" "$(lease_holder)" "$first" || rc=1

  kill -KILL "$(<"$WATCH_DIR/$first.pid")"
  rm -f "$WATCH_DIR/$first.pid"
  t0=$SECONDS
  ok "killed the holder $first (SIGKILL: the Lease is not released)"
  holder_is() { [[ $(lease_holder) == "$1" ]]; }
  wait_until $((WATCH_LEASE_SECONDS * 3)) "$standby to take the Lease" holder_is "$standby" || return 1
  second=$(lease_holder)
  ok "$second took the Lease $((SECONDS - t0))s after the kill (lease duration ${WATCH_LEASE_SECONDS}s)"
  tagged=$(image app 2.0)
  klog -n "$ns" run after-takeover --image="$tagged" --restart=Never
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the new holder to report Pod after-takeover" \
    report_says "$ns" '.results[] | select(.resources[0].name == "after-takeover" and .properties.state == "unpinned")' || rc=1
  wait_until 10 "an Unpinned Event on Pod after-takeover" events_at_least "$ns" Pod after-takeover Unpinned 1 || rc=1
  expect_eq "Unpinned Events on Pod after-takeover" "$(events_of "$ns" Pod after-takeover Unpinned)" 1 || rc=1
  [[ $(cycles_in "$WATCH_DIR/$second.log") -ge 1 ]] && ok "$second rechecks now" || rc=1
  return "$rc"
}

# z (not in the default run: `run.sh z`, alone): scale. WATCH_SCALE_PODS bare Pods (default
# 5000) in WATCH_SCALE_NAMESPACES namespaces (50) using WATCH_SCALE_IMAGES distinct images
# (200: team/scale:1..200, each tag@digest, pushed by the registry helper), created straight in
# the apiserver (namespaces labelled pinhook.dev/ignore=true: no webhook). Then a fresh watch
# replica with a WATCH_SCALE_INTERVAL (30 s) recheck. Measured and printed (`scale:` lines):
# the watch's RSS, the time from its start to the first complete set of reports, registry
# requests in one recheck (pinhook_registry_requests_total) against the distinct (image,
# credential) keys, and the apiserver writes of an unchanged recheck (the watch's count, and
# the reports' resourceVersions, which any write would change). Asserted: requests = keys,
# writes = 0, every report complete.
scenario_z() {
  local rc=0 pods=${WATCH_SCALE_PODS:-5000} nss=${WATCH_SCALE_NAMESPACES:-50}
  local images=${WATCH_SCALE_IMAGES:-200} interval=${WATCH_SCALE_INTERVAL:-30} dir="$WATCH_DIR/z"
  watch_setup || return 1
  mkdir -p "$dir"
  watch_stop_all
  local per=$((pods / nss)) n i k ns t0
  t0=$SECONDS
  for ((n = 0; n < nss; n++)); do
    ns=$(printf 'e2e-z-%02d' "$n")
    e2e_ns "$ns" pinhook.dev/ignore=true >/dev/null
    {
      for ((i = 0; i < per; i++)); do
        k=$(((n * per + i) % images + 1))
        local var="DIGEST_scale_$k"
        printf -- '---\napiVersion: v1\nkind: Pod\nmetadata: {name: p%04d}\nspec:\n  containers:\n    - {name: app, image: "%s/team/scale:%d@%s"}\n' \
          "$i" "$REGISTRY_HOST" "$k" "${!var:?no digest for scale:$k (E2E_SCALE_IMAGES)}"
      done
    } >"$dir/$ns.yaml"
    K -n "$ns" create -f "$dir/$ns.yaml" >/dev/null || { bad "creating the Pods of $ns failed"; return 1; }
  done
  ok "created $((per * nss)) Pods in $nss namespaces using $images images ($((SECONDS - t0))s)"

  local start port pid
  WATCH_INTERVAL=$interval
  start=$(date +%s.%N)
  watch_start 0 || return 1
  port=$(watch_port 0)
  pid=$(<"$WATCH_DIR/watch-0.pid")
  complete() {
    [[ $(K get policyreports.wgpolicyk8s.io -A -o json |
      jq --argjson want "$((per * 2))" '[.items[] | select(.metadata.namespace | startswith("e2e-z-")) | select(.summary.pass == $want)] | length') == "$nss" ]]
  }
  wait_until 300 "$nss complete PolicyReports" complete || return 1
  local first
  first=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  log "  scale: first complete set of $nss reports ${first}s after the watch started"
  log "  scale: watch RSS after the first recheck $(awk '/VmRSS/ {print $2, $3}' "/proc/$pid/status")"

  local log="$WATCH_DIR/watch-0.log" c m1 m2 keys versions1 versions2 line
  requests() { watch_metric_sum "$port" pinhook_registry_requests_total; }
  c=$(cycles_in "$log")
  m1=$(requests)
  versions1=$(K get policyreports.wgpolicyk8s.io -A -o json | jq -c '[.items[] | .metadata.resourceVersion]')
  wait_until $((interval * 2 + 30)) "the next recheck" cycles_at_least "$log" $((c + 1)) || return 1
  m2=$(requests)
  versions2=$(K get policyreports.wgpolicyk8s.io -A -o json | jq -c '[.items[] | .metadata.resourceVersion]')
  line=$(grep 'recheck done' "$log" | tail -1)
  keys=$(sed -E 's/.*lookups=([0-9]+).*/\1/' <<<"$line")
  log "  scale: recheck: $(sed -E 's/.*(pods=.*)/\1/' <<<"$line")"
  log "  scale: registry requests in one recheck: $((m2 - m1)) for $keys distinct (image, credential) keys"
  expect_eq "registry requests in one recheck" "$((m2 - m1))" "$keys" || rc=1
  # (other scenarios' Pods add their own keys when z runs after them)
  if ((keys >= images)); then ok "distinct (image, credential) keys: $keys (>= $images)"; else bad "distinct keys: $keys < $images"; rc=1; fi
  expect_eq "report writes and Events of the unchanged recheck" "$(last_cycle "$log")" "0 0" || rc=1
  expect_eq "reports' resourceVersions across it (any write changes one)" "$versions2" "$versions1" || rc=1
  log "  scale: watch RSS after the second recheck $(awk '/VmRSS/ {print $2, $3}' "/proc/$pid/status")"
  for ((n = 0; n < nss; n++)); do K delete ns "$(printf 'e2e-z-%02d' "$n")" --wait=false >/dev/null; done
  return "$rc"
}
# watch_metric_sum PORT NAME: the sum of every sample of a metric
watch_metric_sum() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk -v m="$2" 'index($0, m "{") == 1 || index($0, m " ") == 1 { s += $NF } END { print s + 0 }'
}
