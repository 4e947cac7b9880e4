#!/usr/bin/env bash
# Installs what the tests run besides cargo: Debian's `docker-registry`
# (distribution 2.8.x, /usr/bin/docker-registry), which tests/common/registry.rs
# starts as a real OCI registry on 127.0.0.1, and the command-line tools the
# end-to-end tier uses (curl, openssl, ss, jq), g++ for libFuzzer, which cargo fuzz's
# libfuzzer-sys compiles from C++ source, and Debian's `prometheus` for promtool (the chart
# checks' `promtool check rules` and `promtool test rules`) and the Prometheus one e2e scenario
# starts; xz, which ../shared/kube-1.32/install.sh unpacks the 1.32 tier's binaries with. Neither package's service is left running: apt is kept from starting them (a
# policy-rc.d for the install, where none exists) and systemd's units are disabled. The tier's
# build script installs its own Go toolchain and etcd.
#
# Idempotent and quiet: does nothing when everything is already there.
# Works as root (no sudo needed) or as a user with sudo. Exits non-zero on
# any failure.
set -euo pipefail
"$(dirname "${BASH_SOURCE[0]}")/install-helm.sh" # helm3, helm4 and the chart checks' Python tools

readonly PKG=docker-registry
readonly BIN=/usr/bin/docker-registry

# Command -> Debian package, for the tools the end-to-end tier and the demo call.
# (kubectl is not here: Debian's kubernetes-client is 1.20, whose kustomize cannot render the
# manifests' `patches`; the machine image ships kubectl 1.32.)
declare -A TOOLS=([curl]=curl [openssl]=openssl [ss]=iproute2 [jq]=jq [g++]=g++ [promtool]=prometheus
    [tini-static]=tini [xz]=xz-utils)
missing=()
[[ -x "$BIN" ]] || missing+=("$PKG")
for tool in "${!TOOLS[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("${TOOLS[$tool]}")
done
if ((${#missing[@]} == 0)); then
    exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
else
    echo "install-test-deps: need root or sudo to install ${missing[*]}" >&2
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: apt-get not found; install ${missing[*]} by hand" >&2
    exit 1
fi

apt_get() {
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 "$@"
}

# Services must not start from the install (Prometheus would take :9090, pinhook's metrics port
# in the chart, and docker-registry :5000): without a policy-rc.d, invoke-rc.d and
# deb-systemd-invoke start them. Ours answers 101 (action forbidden) and goes afterwards.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\n# install-test-deps.sh: no service starts during its install\nexit 101\n' |
        "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
    "${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
    trap '"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi

# Refresh the package lists first only when apt does not know the package;
# if the install then fails (stale lists), refresh once and retry.
if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    apt_get update >/dev/null
fi
if ! apt_get install -y --no-install-recommends "${missing[@]}" >/dev/null; then
    apt_get update >/dev/null
    apt_get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi

# docker-registry ships a systemd unit listening on :5000, prometheus one on :9090; the tests
# start their own processes, so make sure neither service is left running or starts at boot
# (ignore failures: containers usually have no systemd).
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    "${SUDO[@]}" systemctl disable --now "$PKG" prometheus >/dev/null 2>&1 || true
fi

if [[ ! -x "$BIN" ]]; then
    echo "install-test-deps: $PKG installed but $BIN is missing" >&2
    exit 1
fi
