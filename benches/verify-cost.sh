#!/usr/bin/env bash
# The cold cost of one signature verification beside an unverified cold resolution (issue 46).
#
#   benches/verify-cost.sh [PAIRS]      (default 30 pairs)
#
# Builds the release binary and the registry helper (examples/e2e_registry.rs: Debian's
# docker-registry over TLS on 127.0.0.1, team/app:1.0 signed with a key it makes, as
# `cosign sign --key` signs); then runs `pinhook check` on one Pod of team/app:1.0, PAIRS times
# each way, in turn: without a policy (a cold process resolves the tag: TLS handshake, manifest
# HEAD) and with a `verify` entry naming the key (the same, then the signature manifest and its
# payload fetched and the ECDSA signature checked). Every run is a new process with empty
# caches. Prints each way's median and p90 wall milliseconds and what verification adds; checks
# that every verified run says `signed by key`. Everything on 127.0.0.1, bounded in pairs.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-30}
((pairs >= 1 && pairs <= 200)) || { echo "PAIRS must be 1-200" >&2; exit 2; }
log() { printf '==> %s\n' "$*" >&2; }
for tool in jq docker-registry; do
    command -v "$tool" >/dev/null || { echo "$tool not found (scripts/install-test-deps.sh installs it)" >&2; exit 2; }
done
log "cargo build --release (pinhook, example e2e_registry)"
cargo build --release --quiet --bin pinhook --example e2e_registry
target=${CARGO_TARGET_DIR:-target}/release

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkfifo "$work/registry.stdin"
exec 3<>"$work/registry.stdin"
"$target/examples/e2e_registry" "$work/registry.env" <"$work/registry.stdin" >"$work/registry.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do [[ -s $work/registry.env ]] && break; sleep 0.2; done
[[ -s $work/registry.env ]] || { cat "$work/registry.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$work/registry.env"

printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: c, image: %s/team/app:1.0}\n' \
    "$REGISTRY_HOST" >"$work/pod.yaml"
printf 'verify:\n- images: ["%s/team/*"]\n  keys:\n  - file: %s\n' "$REGISTRY_HOST" "$SIGNING_KEY" >"$work/verify.yaml"
: >"$work/plain.yaml"

# once POLICY: one cold `pinhook check`, prints its wall milliseconds; fails unless it pinned
# (and, under the verify policy, verified).
once() {
    local start end
    start=$(date +%s%N)
    HOME="$work" "$target/pinhook" check "$work/pod.yaml" --policy "$work/$1.yaml" \
        --registry-ca "$REGISTRY_CA" -o json >"$work/out.json" 2>"$work/err.txt" ||
        { cat "$work/err.txt" "$work/out.json" >&2; exit 1; }
    end=$(date +%s%N)
    jq -e '.objects[0].images[0].action == "pinned"' "$work/out.json" >/dev/null ||
        { cat "$work/out.json" >&2; exit 1; }
    if [[ $1 == verify ]]; then
        jq -e '.objects[0].images[0].signature | startswith("verify[0]: signed by key")' "$work/out.json" >/dev/null ||
            { cat "$work/out.json" >&2; exit 1; }
    fi
    echo $(((end - start) / 1000))
}
once plain >/dev/null
once verify >/dev/null
log "$pairs pairs of cold \`pinhook check\` (one image), unverified then verified"
: >"$work/plain.txt"
: >"$work/verify.txt"
for _ in $(seq 1 "$pairs"); do
    once plain >>"$work/plain.txt"
    once verify >>"$work/verify.txt"
done
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { printf "%.2f %.2f", v[int((NR + 1) / 2)] / 1000, v[int(NR * 0.9 + 0.5)] / 1000 }'; }
read -r p50 p90 <<<"$(stats "$work/plain.txt")"
read -r v50 v90 <<<"$(stats "$work/verify.txt")"
echo "unverified: median $p50 ms, p90 $p90 ms"
echo "verified:   median $v50 ms, p90 $v90 ms"
awk -v p="$p50" -v v="$v50" 'BEGIN { printf "verification adds %.2f ms to a cold check of one image (%.2f x)\n", v - p, v / p }'
