#!/usr/bin/env bash
# Every test: installs what the tests need (Debian's docker-registry; the end-to-end tier also
# installs etcd and builds a kube-apiserver), checks formatting and lints, runs unit and
# integration tests against a real registry, the local demo, then the end-to-end tier on a
# real kube-apiserver. Set PINHOOK_SKIP_E2E=1 to stop before the end-to-end tier.
# A short coverage-guided fuzzing pass (scripts/fuzz.sh, PINHOOK_FUZZ_SECONDS per target,
# default 5; 0 skips it) runs after the demo; its targets count in the total.
# The last line is the total: `total: N passed, M failed` (pinhook's cargo tests + e2e
# scenarios); the line before it counts the harness's self-tests (tests/harness_selftest.rs),
# which test the test harness, not pinhook: `harness self-tests: N passed, M failed`.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '==> %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
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
