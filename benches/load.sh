#!/usr/bin/env bash
# Warm admission side by side with a floor, driven by an external load generator (issue 13).
#
#   benches/load.sh [ROUNDS] [SECONDS]      (default 3 rounds of 5 s)
#
# Builds the release binary, the floor (examples/floor.rs: bare axum + rustls, parses the body
# into serde_json::Value, answers a canned body) and the registry helper
# (examples/e2e_registry.rs: Debian's docker-registry over TLS with multi-arch images); starts
# pinhook (release, default logging, policy enforce) and the floor with the same certificate;
# warms pinhook's cache with the captured 1.26 Deployment review
# (tests/fixtures/admissionreview/v1.26/deployment-create-mutate.json, every container on
# 127.0.0.1:PORT/team/app:1.0); gives the floor pinhook's own answer; then runs wrk (Debian's;
# installed when missing) in its own process, 2 threads and 16 keep-alive TLS connections,
# against the floor, pinhook, pinhook verifying the images' signatures (`signed`: a `verify`
# entry naming the registry helper's key; warm, a verdict-cache hit per image) and a second
# pinhook whose cache TTL is 2 s (`ttl`: its run
# crosses a TTL boundary every 2 s, and refresh-ahead must keep its tail where pinhook's is) in
# interleaved rounds. Prints per round req/s, p50, p99 and max latency, and the server's CPU
# time and context switches per request (from /proc); then the ratios of the medians and the
# registry requests each pinhook made during the load (0 for pinhook: all of it is its own
# CPU; about one per 1.5 s for `ttl`, its refreshes). Everything on 127.0.0.1, bounded in
# rounds and seconds.
#
# Environment: PINHOOK_LOG (pinhook's log filter, default info), LOAD_TTL (2, the `ttl`
# server's --cache-ttl in seconds), LOAD_TTL_REFRESH (true; false runs the `ttl` server
# without refresh-ahead, for comparison), LOAD_THREADS (2),
# LOAD_CONNECTIONS (16), LOAD_PERF=FILE (run pinhook under `perf record -F 999` into FILE,
# and the floor into FILE.floor, for `perf report -i FILE --no-children --sort symbol`),
# LOAD_PERF_CALLS=1 (with LOAD_PERF: record call graphs by DWARF unwinding at 199 Hz, for
# `perf report -i FILE --children`), LOAD_PIN=SERVER_CPUS:WRK_CPUS (e.g. `0:1`: every server
# under `taskset -c SERVER_CPUS`, so its runtime sees those cores only, and wrk under
# `taskset -c WRK_CPUS`; the servers and the load generator on separate cores, as issue 30's
# figures were taken, instead of all sharing every core).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
seconds=${2:-5}
((rounds >= 1 && rounds <= 10)) || { echo "ROUNDS must be 1-10" >&2; exit 2; }
((seconds >= 1 && seconds <= 60)) || { echo "SECONDS must be 1-60" >&2; exit 2; }
threads=${LOAD_THREADS:-2}
server_pin=() wrk_pin=()
if [[ -n ${LOAD_PIN:-} ]]; then
    [[ $LOAD_PIN =~ ^[0-9,-]+:[0-9,-]+$ ]] || { echo "LOAD_PIN must be SERVER_CPUS:WRK_CPUS, e.g. 0:1" >&2; exit 2; }
    server_pin=(taskset -c "${LOAD_PIN%%:*}") wrk_pin=(taskset -c "${LOAD_PIN##*:}")
fi
connections=${LOAD_CONNECTIONS:-16}
log() { printf '==> %s\n' "$*" >&2; }

if ! command -v wrk >/dev/null; then
    log "installing wrk"
    apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq wrk >/dev/null; }
fi
for tool in wrk jq curl docker-registry; do
    command -v "$tool" >/dev/null || { echo "$tool not found (scripts/install-test-deps.sh installs docker-registry, jq, curl)" >&2; exit 2; }
done

log "cargo build --release (pinhook, examples floor and e2e_registry)"
cargo build --release --quiet --bin pinhook --example floor --example e2e_registry
target=${CARGO_TARGET_DIR:-target}/release

work=$(mktemp -d)
pids=()
cleanup() {
    # Children first: under LOAD_PERF, perf record finishes its file once pinhook has exited.
    for pid in "${pids[@]}"; do
        pkill -TERM -P "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for SECONDS CMD...
    local deadline=$(($(date +%s) + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        (($(date +%s) < deadline)) || return 1
        sleep 0.2
    done
}

# The registry helper keeps running while its stdin is open: a FIFO held by this script.
mkfifo "$work/registry.stdin"
exec 3<>"$work/registry.stdin"
"$target/examples/e2e_registry" "$work/registry.env" <"$work/registry.stdin" >"$work/registry.log" 2>&1 &
pids+=($!)
wait_for 60 test -s "$work/registry.env" || { cat "$work/registry.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$work/registry.env"

"$target/pinhook" certs --san 127.0.0.1 --out "$work/tls" >/dev/null
cat >"$work/policy.yaml" <<EOF
mode: enforce
registries:
  allowPrivate: ["$REGISTRY_HOST"]
EOF
pinhook_port=$(free_port)
floor_port=$(free_port)
# perf_for FILE: sets perf to the `perf record` prefix writing FILE (nothing without LOAD_PERF).
perf=()
perf_for() {
    perf=()
    if [[ -n ${LOAD_PERF:-} && -n ${LOAD_PERF_CALLS:-} ]]; then
        perf=(perf record -F 199 --call-graph dwarf,16384 -o "$1" --)
    elif [[ -n ${LOAD_PERF:-} ]]; then
        perf=(perf record -F 999 -o "$1" --)
    fi
}
perf_for "${LOAD_PERF:-}"
# start_pinhook NAME PORT [FLAGS...]: one pinhook; sets ${NAME}_pid.
start_pinhook() {
    local name=$1 port=$2
    shift 2
    HOME="$work" KUBECONFIG= PINHOOK_LOG=${PINHOOK_LOG:-info} "${server_pin[@]}" "${perf[@]}" "$target/pinhook" serve --listen "127.0.0.1:$port" \
        --tls-cert "$work/tls/tls.crt" --tls-key "$work/tls/tls.key" \
        --policy "${policy_file:-$work/policy.yaml}" --registry-ca "$REGISTRY_CA" "$@" \
        >"$work/$name.log" 2>&1 &
    pids+=($!)
    printf -v "${name}_pid" '%s' "$!"
    ready() { [[ $(curl -s --cacert "$work/tls/ca.crt" "https://127.0.0.1:$port/readyz") == ok* ]]; }
    wait_for 30 ready || { tail -n 20 "$work/$name.log" >&2; exit 1; }
}
start_pinhook pinhook "$pinhook_port"
# The same pinhook verifying signatures (issue 46): a `verify` entry covering the review's
# images, signed by the registry helper's key. Warm, each image is a resolution-cache hit and a
# verdict-cache hit: it must answer what pinhook answers, at the same cost.
cat >"$work/signed-policy.yaml" <<EOF2
mode: enforce
registries:
  allowPrivate: ["$REGISTRY_HOST"]
verify:
- images: ["$REGISTRY_HOST/team/*"]
  keys:
  - file: $SIGNING_KEY
EOF2
signed_port=$(free_port)
perf=()
policy_file="$work/signed-policy.yaml" start_pinhook signed "$signed_port"
# The same pinhook with a 2 s cache TTL: its run crosses a TTL boundary every 2 s, and
# refresh-ahead is what keeps those boundaries out of its tail (issue 13, item 3).
ttl=${LOAD_TTL:-2}
ttl_port=$(free_port)
perf=()
start_pinhook ttl "$ttl_port" --cache-ttl "$ttl" --cache-refresh-ahead "${LOAD_TTL_REFRESH:-true}"

jq --arg image "$REGISTRY_HOST/team/app:1.0" \
    '(.request.object.spec.template.spec | (.containers, .initContainers) // [] | .[] | .image) |= $image' \
    tests/fixtures/admissionreview/v1.26/deployment-create-mutate.json >"$work/review.json"
curl -s --cacert "$work/tls/ca.crt" -H 'Content-Type: application/json' --data-binary @"$work/review.json" \
    "https://127.0.0.1:$pinhook_port/mutate?timeout=10s" >"$work/answer.json"
jq -e '.response.allowed and (.response.patch | length > 0)' "$work/answer.json" >/dev/null ||
    { echo "pinhook did not pin the review: $(head -c 300 "$work/answer.json")" >&2; exit 1; }
curl -s --cacert "$work/tls/ca.crt" -H 'Content-Type: application/json' --data-binary @"$work/review.json" \
    "https://127.0.0.1:$ttl_port/mutate?timeout=10s" | cmp -s - "$work/answer.json" ||
    { echo "the ${ttl} s TTL pinhook answered differently" >&2; exit 1; }
curl -s --cacert "$work/tls/ca.crt" -H 'Content-Type: application/json' --data-binary @"$work/review.json" \
    "https://127.0.0.1:$signed_port/mutate?timeout=10s" | cmp -s - "$work/answer.json" ||
    { echo "the verifying pinhook answered differently" >&2; exit 1; }

perf_for "${LOAD_PERF:-}.floor"
"${server_pin[@]}" "${perf[@]}" "$target/examples/floor" "127.0.0.1:$floor_port" "$work/tls/tls.crt" "$work/tls/tls.key" "$work/answer.json" >"$work/floor.log" 2>&1 &
pids+=($!)
floor_pid=$!
wait_for 10 grep -q listening "$work/floor.log" || { cat "$work/floor.log" >&2; exit 1; }

cat >"$work/post.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("LOAD_BODY"), "rb")
wrk.body = f:read("*a")
f:close()
EOF
registry_requests() { # registry_requests PORT
    curl -s --cacert "$work/tls/ca.crt" "https://127.0.0.1:$1/metrics" |
        awk '/^pinhook_registry_requests_total/ { s += $NF } END { print s + 0 }'
}

# usage PID: "cpu_ticks context_switches" of a process and all its threads so far (under
# LOAD_PERF the process is perf's: its child is the server).
usage() {
    local pid=$1 child
    child=$(pgrep -P "$pid" | head -n 1 || true)
    [[ -z $child ]] || pid=$child
    local ticks switches
    ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    switches=$(cat /proc/"$pid"/task/*/status | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }')
    echo "$ticks $switches"
}
hz=$(getconf CLK_TCK)

# run NAME PORT PID: one wrk round; prints "req/s p50_ms p99_ms non2xx cpu_us/req switches/req"
run() {
    local before after
    before=$(usage "$3")
    LOAD_BODY="$work/review.json" "${wrk_pin[@]}" wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency \
        -s "$work/post.lua" "https://127.0.0.1:$2/mutate?timeout=10s" >"$work/wrk-$1.txt" 2>&1
    awk '
        function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
        /Requests\/sec/ { rps = $2 }
        $1 == "50%" { p50 = ms($2) }
        $1 == "99%" { p99 = ms($2) }
        /Non-2xx/ { bad = $NF }
        /requests in/ { n = $1 }
        $1 == "Latency" && $2 != "Distribution" { max = ms($4) }
        END { printf "%.0f %.2f %.2f %d %d %.2f\n", rps, p50, p99, bad + 0, n, max }' "$work/wrk-$1.txt" >"$work/round.txt"
    after=$(usage "$3")
    read -r q a b bad n m <"$work/round.txt"
    read -r t0 s0 <<<"$before"
    read -r t1 s1 <<<"$after"
    awk -v q="$q" -v a="$a" -v b="$b" -v bad="$bad" -v n="$n" -v m="$m" -v dt=$((t1 - t0)) -v ds=$((s1 - s0)) -v hz="$hz" \
        'BEGIN { printf "%s %s %s %s %.1f %.2f %s\n", q, a, b, bad, dt * 1e6 / hz / (n > 0 ? n : 1), ds / (n > 0 ? n : 1), m }'
}

log "warm /mutate: $rounds rounds x ${seconds}s, wrk -t$threads -c$connections${LOAD_PIN:+, pinned servers:wrk $LOAD_PIN}, $(wc -c <"$work/review.json") byte review, $(wc -c <"$work/answer.json") byte answer"
before=$(registry_requests "$pinhook_port")
ttl_before=$(registry_requests "$ttl_port")
printf '%-8s %5s %10s %9s %9s %9s %6s %11s %11s\n' server round req/s p50_ms p99_ms max_ms non2xx cpu_us/req switch/req
declare -A rps p50 p99 cpu
for r in $(seq 1 "$rounds"); do
    for server in floor pinhook signed ttl; do
        case $server in
            floor) port=$floor_port pid=$floor_pid ;;
            pinhook) port=$pinhook_port pid=$pinhook_pid ;;
            signed) port=$signed_port pid=$signed_pid ;;
            ttl) port=$ttl_port pid=$ttl_pid ;;
        esac
        read -r q a b bad c w m < <(run "$server" "$port" "$pid")
        printf '%-8s %5s %10s %9s %9s %9s %6s %11s %11s\n' "$server" "$r" "$q" "$a" "$b" "$m" "$bad" "$c" "$w"
        ((bad == 0)) || { echo "$server answered $bad non-2xx responses" >&2; exit 1; }
        rps[$server]+="$q "
        p50[$server]+="$a "
        p99[$server]+="$b "
        cpu[$server]+="$c "
    done
done
after=$(registry_requests "$pinhook_port")
ttl_after=$(registry_requests "$ttl_port")
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
fr=$(median <<<"${rps[floor]}")
pr=$(median <<<"${rps[pinhook]}")
f99=$(median <<<"${p99[floor]}")
p99p=$(median <<<"${p99[pinhook]}")
f50=$(median <<<"${p50[floor]}")
p50p=$(median <<<"${p50[pinhook]}")
fc=$(median <<<"${cpu[floor]}")
pc=$(median <<<"${cpu[pinhook]}")
echo "medians: floor $fr req/s p50 $f50 ms p99 $f99 ms ${fc} us CPU/req; pinhook $pr req/s p50 $p50p ms p99 $p99p ms ${pc} us CPU/req"
awk -v pr="$pr" -v fr="$fr" -v p="$p99p" -v f="$f99" \
    -v pc="$pc" -v fc="$fc" \
    'BEGIN { printf "ratio: throughput %.2f x floor, p99 %.2f x floor, CPU per request %.2f x floor\n", pr / fr, p / f, pc / fc }'
echo "registry requests by pinhook during the load: $((after - before))"
s99=$(median <<<"${p99[signed]}")
sr=$(median <<<"${rps[signed]}")
sc=$(median <<<"${cpu[signed]}")
awk -v sr="$sr" -v pr="$pr" -v s="$s99" -v p="$p99p" -v sc="$sc" -v pc="$pc" \
    'BEGIN { printf "verifying signatures (warm, every image verified): %.0f req/s = %.2f x pinhook, p99 %.2f x, CPU per request %.2f x\n", sr, sr / pr, s / p, sc / pc }'
t99=$(median <<<"${p99[ttl]}")
tr_=$(median <<<"${rps[ttl]}")
awk -v t="$t99" -v p="$p99p" -v tr="$tr_" -v pr="$pr" -v ttl="$ttl" -v n=$((ttl_after - ttl_before)) \
    -v secs="$seconds" -v total=$((rounds * seconds)) \
    'BEGIN { printf "%s s cache TTL (%d TTL boundaries per round): %.0f req/s, p99 %.2f ms = %.2f x the p99 of the run that crosses none; %d registry requests in %d s of load\n", ttl, secs / ttl, tr, t, t / p, n, total }'

