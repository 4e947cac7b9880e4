#!/usr/bin/env bash
# The local demo: installs what it needs (Debian's docker-registry), builds pinhook, starts a
# registry with sample multi-arch images and pinhook with a generated certificate, sends a
# Deployment AdmissionReview and prints the pinned images. Everything stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
cargo build --quiet --bin pinhook --example demo
target="${CARGO_TARGET_DIR:-target}"
exec "$target/debug/examples/demo" "$target/debug/pinhook"
