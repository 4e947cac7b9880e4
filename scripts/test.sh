#!/usr/bin/env bash
# Every test: installs what the tests need (Debian's docker-registry; the end-to-end tier also
# installs etcd and builds a kube-apiserver), checks formatting and lints, runs unit and
# integration tests against a real registry, then the end-to-end tier on a real kube-apiserver.
# Set PINHOOK_SKIP_E2E=1 to stop after the integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '==> %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }

log "installing test dependencies"
scripts/install-test-deps.sh
log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --all-targets --quiet -- -D warnings
log "unit and integration tests"
cargo test --no-fail-fast
log "the local demo (scripts/demo.sh), as README's first command runs it"
scripts/demo.sh
if [[ "${PINHOOK_SKIP_E2E:-0}" != 1 ]]; then
    log "end-to-end tier"
    bash tests/e2e/run.sh
fi
log "all tests passed"
