#!/usr/bin/env bash
# Every test: installs what the tests need (Debian's docker-registry; the end-to-end tier also
# installs etcd and builds a kube-apiserver), checks formatting and lints, runs unit and
# integration tests against a real registry, the local demo, then the end-to-end tier on a
# real kube-apiserver. Set PINHOOK_SKIP_E2E=1 to stop before the end-to-end tier.
# The Helm chart's checks (scripts/chart-check.sh) run after the cargo tests; their count is in
# the total.
# A short coverage-guided fuzzing pass (scripts/fuzz.sh, PINHOOK_FUZZ_SECONDS per target,
# default 5; 0 skips it) runs after the demo; its targets count in the total.
# The last line is the total: `total: N passed, M failed` (pinhook's cargo tests + e2e
# scenarios); the line before it counts the harness's self-tests (tests/harness_selftest.rs),
# which test the test harness, not pinhook: `harness self-tests: N passed, M failed`.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '==> %s %s (disk free: %s)\n' "$(date -u +%H:%M:%S)" "$*" "$(df -h --output=avail . | tail -n1 | tr -d ' ')"; }
# A fresh build, not an incremental one: incremental state doubles the target directory (CI's
# disk ran out linking test binaries) and buys nothing on a fresh clone.
export CARGO_INCREMENTAL=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

log "installing test dependencies"
scripts/install-test-deps.sh
log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --all-targets --quiet -- -D warnings
log "unit and integration tests"
cargo test --no-fail-fast 2>&1 | tee "$out/cargo.log"
# Each binary's `test result: ok. 372 passed; 0 failed; ...` follows cargo's
# `     Running tests/harness_selftest.rs (target/debug/deps/harness_selftest-…)` line.
read -r passed failed harness_passed harness_failed < <(awk '
    /^ *(Running|Doc-tests) / { harness = ($2 == "tests/harness_selftest.rs") }
    /^test result:/ { if (harness) { hp += $4; hf += $6 } else { p += $4; f += $6 } }
    END { print p + 0, f + 0, hp + 0, hf + 0 }' "$out/cargo.log")
# short_of_disk: less than 8 GB free where the builds go.
short_of_disk() { (($(df --output=avail -k "${CARGO_TARGET_DIR:-target}" | tail -n1) < 8 * 1024 * 1024)); }
if short_of_disk; then
    # The integration test binaries (about 100 MB each) are not run again in this run.
    log "less than 8 GB free: removing the integration test binaries"
    for t in tests/*.rs; do
        t=${t#tests/}
        find "${CARGO_TARGET_DIR:-target}/debug/deps" -maxdepth 1 -type f -name "${t%.rs}-*" ! -name '*.*' -delete
    done
fi
log "the Helm chart (scripts/chart-check.sh: lint, renders, schemas, the kustomize base)"
scripts/chart-check.sh | tee "$out/chart.log"
# its last line: `chart: N passed, M failed`
read -r chart_passed chart_failed < <(tail -n1 "$out/chart.log" | awk '{ print $2 + 0, $4 + 0 }')
passed=$((passed + chart_passed))
failed=$((failed + chart_failed))
log "the local demo (scripts/demo.sh), as README's first command runs it"
scripts/demo.sh
fuzz_seconds=${PINHOOK_FUZZ_SECONDS:-5}
if ((fuzz_seconds > 0)); then
    log "fuzzing, ${fuzz_seconds} s per target (scripts/fuzz.sh)"
    scripts/fuzz.sh "$fuzz_seconds" | tee "$out/fuzz.log"
    # its last line: `fuzz: N passed, M failed`
    read -r fuzz_passed fuzz_failed < <(tail -n1 "$out/fuzz.log" | awk '{ print $2 + 0, $4 + 0 }')
    passed=$((passed + fuzz_passed))
    failed=$((failed + fuzz_failed))
    # The fuzz binaries (about 1 GB) are not needed again in this run; on a machine short of
    # disk (CI's), give the space to the end-to-end tier's kube build.
    if short_of_disk; then
        log "less than 8 GB free: removing fuzz/target"
        rm -rf fuzz/target
    fi
fi
if [[ "${PINHOOK_SKIP_E2E:-0}" != 1 ]]; then
    log "end-to-end tier"
    bash tests/e2e/run.sh | tee "$out/e2e.log"
    # its last line: `N passed, M failed`
    read -r e2e_passed e2e_failed < <(tail -n1 "$out/e2e.log" | awk '{ print $1 + 0, $3 + 0 }')
    passed=$((passed + e2e_passed))
    failed=$((failed + e2e_failed))
fi
log "all tests passed"
echo "harness self-tests: $harness_passed passed, $harness_failed failed"
echo "total: $passed passed, $failed failed"
