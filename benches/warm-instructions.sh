#!/usr/bin/env bash
# Instructions per warm admission request, pinhook without and with a `verify` entry (issue 46,
# item 6), counted by callgrind: a count does not move with what else the machine is doing, so
# the verified path's cost shows where a CPU-time ratio under load (benches/load.sh) is noise.
#
#   benches/warm-instructions.sh [SECONDS]      (default 20 s of load per arm)
#   WARM_INSTRUCTIONS_REVIEW=pinned-pod benches/warm-instructions.sh [SECONDS]
#
# The review (WARM_INSTRUCTIONS_REVIEW): `deployment` (the default), the captured 1.26
# Deployment review with every container on team/app:1.0, to /mutate: a tag resolved from the
# cache and pinned; `pinned-pod`, the captured 1.26 Pod review with its container already on
# team/app:1.0@DIGEST, to /validate: what every Pod of a pinned workload costs, no tag resolved.
#
# Builds the release binary and the registry helper (examples/e2e_registry.rs: Debian's
# docker-registry over TLS, team/app:1.0 signed with its key); for each arm starts one pinhook
# (release, default logging, policy enforce; `signed` adds a `verify` entry naming the helper's
# key) under `valgrind --tool=callgrind --instr-atstart=no`; warms it with the review and 3 s
# of wrk; then turns
# instrumentation on, runs wrk (1 thread, 4 keep-alive TLS connections) for SECONDS and turns
# it off. Prints each arm's requests and instructions per request, the ratio, and the
# instructions per request of the signed arm's verification step (`verify_signatures`,
# inclusive; WARM_INSTRUCTIONS_KEEP=FILE keeps the signed arm's `callgrind_annotate
# --inclusive=yes` there, for the rest; WARM_INSTRUCTIONS_RAW=FILE the callgrind output). Both
# arms must give the same answer byte for byte.
# Everything on 127.0.0.1, bounded in time. Valgrind runs the servers about 50 times slower:
# the requests counted are a few thousand.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
((seconds >= 5 && seconds <= 120)) || { echo "SECONDS must be 5-120" >&2; exit 2; }
log() { printf '==> %s\n' "$*" >&2; }
for tool in wrk jq curl docker-registry valgrind callgrind_control callgrind_annotate; do
    command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install wrk valgrind; scripts/install-test-deps.sh installs docker-registry, jq, curl)" >&2; exit 2; }
done
log "cargo build --release (pinhook, example e2e_registry)"
cargo build --release --quiet --bin pinhook --example e2e_registry
target=target/release

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
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
        sleep 0.5
    done
}

mkfifo "$work/registry.stdin"
exec 3<>"$work/registry.stdin"
"$target/examples/e2e_registry" "$work/registry.env" <"$work/registry.stdin" >"$work/registry.log" 2>&1 &
pids+=($!)
wait_for 60 test -s "$work/registry.env" || { cat "$work/registry.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$work/registry.env"
"$target/pinhook" certs --san 127.0.0.1 --out "$work/tls" >/dev/null
printf 'mode: enforce\nregistries:\n  allowPrivate: ["%s"]\n' "$REGISTRY_HOST" >"$work/plain.yaml"
{
    cat "$work/plain.yaml"
    printf 'verify:\n- images: ["%s/team/*"]\n  keys:\n  - file: %s\n' "$REGISTRY_HOST" "$SIGNING_KEY"
} >"$work/signed.yaml"
review=${WARM_INSTRUCTIONS_REVIEW:-deployment}
case $review in
deployment)
    jq --arg image "$REGISTRY_HOST/team/app:1.0" \
        '(.request.object.spec.template.spec | (.containers, .initContainers) // [] | .[] | .image) |= $image' \
        tests/fixtures/admissionreview/v1.26/deployment-create-mutate.json >"$work/review.json"
    path=mutate
    ;;
pinned-pod)
    # shellcheck disable=SC2154 # (DIGEST_app_1_0: from registry.env)
    jq --arg image "$REGISTRY_HOST/team/app:1.0@$DIGEST_app_1_0" \
        '(.request.object.spec | (.containers, .initContainers) // [] | .[] | .image) |= $image' \
        tests/fixtures/admissionreview/v1.26/pod-create-basic-validate.json >"$work/review.json"
    path=validate
    ;;
*) echo "WARM_INSTRUCTIONS_REVIEW must be deployment or pinned-pod" >&2; exit 2 ;;
esac
log "review: $review, to /$path"
cat >"$work/post.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("LOAD_BODY"), "rb")
wrk.body = f:read("*a")
f:close()
EOF

declare -A per_request
for arm in plain signed; do
    port=$(free_port)
    HOME="$work" KUBECONFIG='' PINHOOK_LOG=info valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$work/$arm.out" "$target/pinhook" serve --listen "127.0.0.1:$port" \
        --tls-cert "$work/tls/tls.crt" --tls-key "$work/tls/tls.key" \
        --policy "$work/$arm.yaml" --registry-ca "$REGISTRY_CA" >"$work/$arm.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    ready() { [[ $(curl -s --cacert "$work/tls/ca.crt" "https://127.0.0.1:$port/readyz") == ok* ]]; }
    wait_for 120 ready || { tail -n 20 "$work/$arm.log" >&2; exit 1; }
    curl -s --cacert "$work/tls/ca.crt" -H 'Content-Type: application/json' --data-binary @"$work/review.json" \
        "https://127.0.0.1:$port/$path?timeout=10s" >"$work/$arm.answer.json"
    case $path in
    mutate) expect='.response.allowed and (.response.patch | length > 0)' ;;
    validate) expect='.response.allowed and (.response.patch == null)' ;;
    esac
    jq -e "$expect" "$work/$arm.answer.json" >/dev/null ||
        { echo "$arm did not admit the review as expected: $(head -c 300 "$work/$arm.answer.json")" >&2; exit 1; }
    LOAD_BODY="$work/review.json" wrk -t1 -c4 -d3s -s "$work/post.lua" "https://127.0.0.1:$port/$path?timeout=10s" >/dev/null
    callgrind_control -i on "$pid" >/dev/null 2>&1
    LOAD_BODY="$work/review.json" wrk -t1 -c4 -d"${seconds}s" -s "$work/post.lua" \
        "https://127.0.0.1:$port/$path?timeout=10s" >"$work/$arm.wrk.txt"
    callgrind_control -i off "$pid" >/dev/null 2>&1
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    n=$(awk '/requests in/ { print $1 }' "$work/$arm.wrk.txt")
    bad=$(awk '/Non-2xx/ { print $NF }' "$work/$arm.wrk.txt")
    [[ -z $bad ]] || { echo "$arm: $bad non-2xx answers" >&2; exit 1; }
    total=$(awk '/Collected :/ { print $NF }' "$work/$arm.log")
    per_request[$arm]=$(awk -v t="$total" -v n="$n" 'BEGIN { printf "%.0f", t / n }')
    printf '%-7s %6d requests in %ss, %14s instructions, %8s per request\n' "$arm" "$n" "$seconds" "$total" "${per_request[$arm]}"
    if [[ $arm == signed ]]; then
        callgrind_annotate --inclusive=yes --threshold=100 "$work/$arm.out.1" 2>/dev/null | tee "$work/annotate.txt" |
            awk -v n="$n" '
                # (callgrind lists the step once per source file it was inlined from: the largest)
                /verify_signatures::\{\{closure\}\}/ { x = $1; gsub(",", "", x); if (x + 0 > m) m = x + 0 }
                END { printf "        verify_signatures (inclusive): %.0f per request\n", m / n }'
    fi
done
[[ -z ${WARM_INSTRUCTIONS_KEEP:-} ]] || cp "$work/annotate.txt" "$WARM_INSTRUCTIONS_KEEP"
# WARM_INSTRUCTIONS_RAW=FILE keeps the signed arm's callgrind output itself (callgrind_annotate
# --tree=calling FILE, or kcachegrind).
[[ -z ${WARM_INSTRUCTIONS_RAW:-} ]] || cp "$work/signed.out.1" "$WARM_INSTRUCTIONS_RAW"
cmp -s "$work/plain.answer.json" "$work/signed.answer.json" ||
    { echo "the verifying pinhook answered differently" >&2; exit 1; }
awk -v p="${per_request[plain]}" -v s="${per_request[signed]}" \
    'BEGIN { printf "signed / plain: %.3f x instructions per request (+%.0f)\n", s / p, s - p }'
