# shellcheck shell=bash
# title: a real Prometheus scrapes pinhook: its admissions query counts the scenario's Pods, the chart's rules evaluate
# order: 195
# kube: 1.20 1.32
# proves: Debian's Prometheus (`/usr/bin/prometheus` on 127.0.0.1, started and stopped by the
#   scenario) scrapes pinhook's `/metrics` over HTTPS, verified with the tier's CA, every second,
#   with `charts/pinhook/files/pinhook-rules.yaml` loaded: the target is up; all its rules evaluate
#   with health ok; `sum(pinhook_admission_reviews_total{endpoint="mutate", operation="CREATE",
#   result="pinned"})` grows by exactly the 3 Pods the scenario creates, as pinhook's own counter
#   does; Pods refused for a missing tag make `PinhookImagesDeniedUnresolvable` pending; and
#   every query of the chart's dashboard runs on it without an error.

scenario_prometheus_scrapes_admissions() {
  local ns=e2e-prom dir="$RUN/prometheus" port rc=0
  command -v prometheus >/dev/null 2>&1 ||
    { bad "no prometheus binary (scripts/install-test-deps.sh installs Debian's prometheus)"; return 1; }
  e2e_ns "$ns"
  rm -rf "$dir" && mkdir -p "$dir"
  port=$(free_port)
  cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $ROOT/charts/pinhook/files/pinhook-rules.yaml
scrape_configs:
  - job_name: pinhook
    scheme: https
    tls_config:
      ca_file: $CERT_DIR/ca.crt
    static_configs:
      - targets: ["127.0.0.1:$PINHOOK_PORT"]
        labels:
          namespace: pinhook-system
EOF
  prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$port" </dev/null >"$dir/prometheus.log" 2>&1 3>&- &
  PROM_PID=$!
  log "  started prometheus on 127.0.0.1:$port (pid $PROM_PID, log $dir/prometheus.log)"
  prom_checks "$ns" "$port" || rc=1
  ((rc == 0)) || tail_log "$dir/prometheus.log" 20
  stop_pid "$PROM_PID" prometheus 10
  return "$rc"
}

# prom_query PORT PROMQL: the first sample's value ("" for none)
prom_query() {
  curl -s --max-time 5 "http://127.0.0.1:$1/api/v1/query" --data-urlencode "query=$2" |
    jq -r '.data.result[0].value[1] // empty'
}
prom_ready() { [[ $(curl -s --max-time 2 "http://127.0.0.1:$1/-/ready") == *Ready* ]]; }
prom_equals() { # prom_equals PORT PROMQL VALUE (no sample reads 0)
  local v
  v=$(prom_query "$1" "$2")
  [[ ${v:-0} == "$3" ]]
}
# prom_rules_ok PORT N: N rules loaded, each evaluated at least once with health ok
prom_rules_ok() {
  curl -s --max-time 5 "http://127.0.0.1:$1/api/v1/rules" | jq -e --argjson n "$2" \
    '[.data.groups[].rules[]] | length == $n and all(.health == "ok" and (.lastEvaluation | startswith("0001") | not))' >/dev/null
}
# prom_alert_state PORT ALERTNAME STATE: an alert of that name in that state (pending, firing)
prom_alert_state() {
  curl -s --max-time 5 "http://127.0.0.1:$1/api/v1/alerts" |
    jq -e --arg a "$2" --arg s "$3" 'any(.data.alerts[]; .labels.alertname == $a and .state == $s)' >/dev/null
}
own_pinned_creates() { metric_sum pinhook_admission_reviews_total 'endpoint="mutate"' 'operation="CREATE"' 'result="pinned"'; }

prom_checks() {
  local ns=$1 port=$2 query before own_before own_after n i out err code=0 failed=0 total=0 expr rules
  query='sum(pinhook_admission_reviews_total{job="pinhook", endpoint="mutate", operation="CREATE", result="pinned"})'
  WAIT_PID=$PROM_PID wait_until 30 "prometheus /-/ready" prom_ready "$port" || return 1
  wait_until 20 "the pinhook target to be up" prom_equals "$port" 'up{job="pinhook"}' 1 || return 1
  ok "target 127.0.0.1:$PINHOOK_PORT (https, the tier's CA) is up"
  rules=$(grep -c '^      - alert: ' "$ROOT/charts/pinhook/files/pinhook-rules.yaml")
  wait_until 20 "the $rules rules to evaluate" prom_rules_ok "$port" "$rules" || return 1
  ok "the $rules rules of charts/pinhook/files/pinhook-rules.yaml evaluate, health ok"

  # Prometheus caught up with pinhook's own count before the Pods, and again after them.
  own_before=$(own_pinned_creates)
  wait_until 20 "prometheus to read $own_before pinned creates" prom_equals "$port" "$query" "$own_before" || return 1
  before=$(prom_query "$port" "$query")
  before=${before:-0}
  for i in 1 2 3; do
    klog -n "$ns" run "scraped-$i" --image="$(image app 2.0)" --restart=Never || return 1
  done
  own_after=$(own_pinned_creates)
  expect_eq "pinhook's own count of pinned creates, grown by" "$((own_after - own_before))" 3 || return 1
  wait_until 20 "prometheus to read $own_after" prom_equals "$port" "$query" "$own_after" || return 1
  n=$(prom_query "$port" "$query")
  expect_eq "the query $query, grown by" "$((n - before))" 3 || return 1

  # Two refusals, each scraped: the first after pinhook's start creates the series at 1, and
  # increase() counts from a series' second sample.
  for i in 1 2; do
    code=0
    err=$(K -n "$ns" run "unresolvable-$i" --image="$(image app does-not-exist)" --restart=Never 2>&1 >/dev/null) || code=$?
    ((code != 0)) || { bad "a Pod with a missing tag was admitted"; return 1; }
    expect_contains "kubectl stderr" "$err" 'tag does-not-exist not found' || return 1
    n=$(metric_sum pinhook_policy_violations_total 'mode="enforce"' 'reason="resolution_failed"')
    wait_until 20 "prometheus to read $n resolution_failed denials" prom_equals "$port" \
      'sum(pinhook_policy_violations_total{job="pinhook", mode="enforce", reason="resolution_failed"})' "$n" || return 1
  done
  wait_until 20 "PinhookImagesDeniedUnresolvable to be pending" \
    prom_alert_state "$port" PinhookImagesDeniedUnresolvable pending || return 1
  ok "PinhookImagesDeniedUnresolvable pending after Pods refused for a missing tag (for: 15m)"

  # Every query of the dashboard, its variables set to all, on this Prometheus.
  while IFS= read -r expr; do
    total=$((total + 1))
    expr=${expr//\$__rate_interval/1m}
    expr=${expr//\$namespace/.*}
    expr=${expr//\$job/.*}
    out=$(curl -s --max-time 5 "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=$expr" | jq -r '.status')
    [[ $out == success ]] || { failed=$((failed + 1)); log "  dashboard query failed ($out): $expr"; }
  done < <(jq -r '.panels[].targets[]?.expr' "$ROOT/charts/pinhook/files/pinhook-dashboard.json")
  expect_eq "dashboard queries that Prometheus refused (of $total)" "$failed" 0 || return 1
}
