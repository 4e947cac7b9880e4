#!/usr/bin/env bash
# Build a real kube-apiserver, kube-controller-manager, and the node's kubelet,
# kube-scheduler and kube-proxy (v1.20.2) from Debian bookworm's `kubernetes`
# source package (one unpacked tree, one Go build cache), for pinhook's
# end-to-end test tier (the node: tests/e2e/node.sh).
#
# Idempotent, per binary: each is cached as ${PINHOOK_E2E_CACHE}/<name>-1.20.2
# and kept when it answers --version. When all five do, nothing is done; when any
# is missing, the source is fetched once, the missing ones are built, and the
# source tree and Go cache are removed again. Prints the apiserver's path on
# stdout as the last line (all log lines go to stderr); the others sit beside it.
#
# Needs root (apt-get). Network: Debian mirrors only.
set -euo pipefail

K8S_VERSION=1.20.2
CACHE="${PINHOOK_E2E_CACHE:-/var/cache/pinhook-e2e}"
BIN="$CACHE/kube-apiserver-$K8S_VERSION"
# every binary this script caches, built in this order
CMDS=(kube-apiserver kube-controller-manager kubelet kube-scheduler kube-proxy)
SRC_PARENT="$CACHE/src"
SRC_SOURCES_FILE=/etc/apt/sources.list.d/pinhook-e2e-deb-src.sources
REFLECT2_DEBIAN=/usr/share/gocode/src/github.com/modern-go/reflect2

log() { printf '%s [build-kube-apiserver] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

export DEBIAN_FRONTEND=noninteractive
APT_GET=(apt-get -qq -o=Dpkg::Use-Pty=0)

runs() { [[ -x "$1" ]] && "$1" --version >/dev/null 2>&1; }
binary_ok() {
  local c
  for c in "${CMDS[@]}"; do runs "$CACHE/$c-$K8S_VERSION" || return 1; done
}

if binary_ok; then
  log "cached binary present: $("$BIN" --version)"
  echo "$BIN"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || die "must run as root (apt-get install / apt-get source)"
mkdir -p "$CACHE" "$SRC_PARENT"
T0=$(date +%s)

# --- 1. deb-src entry derived from the machine's own apt sources -------------
# Copy every deb822 stanza that has `Types: deb` (and no deb-src yet) with its
# Types changed to deb-src. No hostname is hardcoded: URIs/Suites/Components/
# Signed-By come from the existing file.
ensure_deb_src() {
  if apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Version: '; then
    return 0
  fi
  local src=/etc/apt/sources.list.d/debian.sources
  if [[ ! -r $src ]]; then
    # one-line format fallback: /etc/apt/sources.list `deb ...` -> `deb-src ...`
    grep -qE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list 2>/dev/null \
      || die "$src not found and no 'deb' line in /etc/apt/sources.list; cannot derive a deb-src entry"
    log "writing ${SRC_SOURCES_FILE%.sources}.list (deb-src lines derived from /etc/apt/sources.list)"
    sed -nE 's/^[[:space:]]*deb([[:space:]])/deb-src\1/p' /etc/apt/sources.list >"${SRC_SOURCES_FILE%.sources}.list"
    log "apt-get update"
    "${APT_GET[@]}" update
    apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Version: ' \
      || die "apt still has no source package 'kubernetes' after adding deb-src"
    return 0
  fi
  log "writing $SRC_SOURCES_FILE (deb-src stanzas derived from $src)"
  awk '
    function flush() {
      if (stanza != "" && has_deb && !has_src) { printf "%s\n", stanza; n++ }
      stanza = ""; has_deb = 0; has_src = 0
    }
    /^[[:space:]]*$/ { flush(); next }
    /^Types:/ {
      for (i = 2; i <= NF; i++) { if ($i == "deb") has_deb = 1; if ($i == "deb-src") has_src = 1 }
      stanza = stanza "Types: deb-src\n"; next
    }
    { stanza = stanza $0 "\n" }
    END { flush(); if (n == 0) exit 3 }
  ' "$src" > "$SRC_SOURCES_FILE.tmp" || { rm -f "$SRC_SOURCES_FILE.tmp"; die "no 'Types: deb' stanza in $src"; }
  mv "$SRC_SOURCES_FILE.tmp" "$SRC_SOURCES_FILE"
  log "apt-get update"
  "${APT_GET[@]}" update
  apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Version: ' \
    || die "apt still has no source package 'kubernetes' after adding deb-src"
}

# --- 2. build dependencies ----------------------------------------------------
DEPS=(golang-go rsync build-essential dpkg-dev golang-github-modern-go-reflect2-dev)
ensure_deps() {
  local missing=() p
  for p in "${DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing build deps: ${missing[*]}"
    "${APT_GET[@]}" update
    "${APT_GET[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
  fi
  log "go: $(go version)"
}

ensure_deb_src
ensure_deps

# --- 3. source ----------------------------------------------------------------
SRC_DIR=$(find "$SRC_PARENT" -mindepth 1 -maxdepth 1 -type d -name "kubernetes-*" | head -n1 || true)
if [[ -z $SRC_DIR || ! -f $SRC_DIR/.pinhook-src-complete ]]; then
  [[ -n $SRC_DIR ]] && { log "removing incomplete source tree $SRC_DIR"; rm -rf "$SRC_DIR"; }
  log "apt-get source kubernetes (into $SRC_PARENT)"
  t=$(date +%s)
  (cd "$SRC_PARENT" && apt-get source -qq kubernetes >/dev/null 2>"$SRC_PARENT/apt-get-source.log") \
    || { cat "$SRC_PARENT/apt-get-source.log" >&2; die "apt-get source kubernetes failed"; }
  SRC_DIR=$(find "$SRC_PARENT" -mindepth 1 -maxdepth 1 -type d -name "kubernetes-*" | head -n1)
  [[ -n $SRC_DIR && -d $SRC_DIR/vendor ]] || die "unpacked source has no vendor/ directory"
  # the tarballs are not needed once unpacked
  rm -f "$SRC_PARENT"/kubernetes_*.tar.* "$SRC_PARENT"/kubernetes_*.dsc
  touch "$SRC_DIR/.pinhook-src-complete"
  log "source fetched+unpacked in $(( $(date +%s) - t ))s: $SRC_DIR"
else
  log "source tree present: $SRC_DIR"
fi

# --- 4. swap vendored reflect2 1.0.1 for Debian's 1.0.2 -------------------------
# reflect2 1.0.1 uses unsafe tricks that break under Go >= 1.18: the apiserver
# SIGSEGVs on the first JSON patch from a mutating webhook.
R2="$SRC_DIR/vendor/github.com/modern-go/reflect2"
[[ -d $REFLECT2_DEBIAN ]] || die "$REFLECT2_DEBIAN missing (golang-github-modern-go-reflect2-dev)"
if [[ ! -f $R2/.pinhook-debian-reflect2 ]]; then
  log "replacing vendored reflect2 with $REFLECT2_DEBIAN"
  rm -rf "$R2"
  mkdir -p "$R2"
  # -L: Debian's gocode tree may contain symlinks; copy only Go sources + license
  cp -L "$REFLECT2_DEBIAN"/*.go "$R2"/
  cp -L "$REFLECT2_DEBIAN"/*.s "$R2"/ 2>/dev/null || true
  cp -L "$REFLECT2_DEBIAN"/LICENSE "$R2"/ 2>/dev/null || true
  rm -f "$R2"/*_test.go
  touch "$R2/.pinhook-debian-reflect2"
fi

# --- 5. build -------------------------------------------------------------------
export GO111MODULE=off
export GOFLAGS=
export GOCACHE="$CACHE/go-build"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
# hack/ version detection: there is no .git in the Debian tree
export KUBE_GIT_VERSION="v$K8S_VERSION"
export KUBE_GIT_TREE_STATE=clean
export KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
export KUBE_GIT_MAJOR=1
export KUBE_GIT_MINOR=20
mkdir -p "$GOCACHE"

cd "$SRC_DIR"
if [[ ! -f pkg/generated/openapi/zz_generated.openapi.go ]]; then
  log "make gen_openapi"
  t=$(date +%s)
  make gen_openapi >"$CACHE/gen_openapi.log" 2>&1 \
    || { tail -n 40 "$CACHE/gen_openapi.log" >&2; die "make gen_openapi failed (log: $CACHE/gen_openapi.log)"; }
  log "gen_openapi done in $(( $(date +%s) - t ))s"
fi

# GOPATH layout: hack/ keeps a symlink _output/local/go/src/k8s.io/kubernetes -> tree
GOPATH_DIR="$SRC_DIR/_output/local/go"
PKG_DIR="$GOPATH_DIR/src/k8s.io/kubernetes"
if [[ ! -e $PKG_DIR ]]; then
  mkdir -p "$(dirname "$PKG_DIR")"
  ln -s "$SRC_DIR" "$PKG_DIR"
fi
export GOPATH="$GOPATH_DIR"

VPKG=k8s.io/kubernetes/vendor/k8s.io/component-base/version
BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS="-s -w"
for p in "$VPKG" k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $p.gitVersion=$KUBE_GIT_VERSION -X $p.gitCommit=$KUBE_GIT_COMMIT"
  LDFLAGS+=" -X $p.gitTreeState=$KUBE_GIT_TREE_STATE -X $p.buildDate=$BUILD_DATE"
  LDFLAGS+=" -X $p.gitMajor=$KUBE_GIT_MAJOR -X $p.gitMinor=$KUBE_GIT_MINOR"
done

# go_build CMD OUT: build ./cmd/CMD into OUT unless OUT already runs
go_build() {
  local cmd=$1 out=$2 t
  runs "$out" && { log "cached: $out"; return 0; }
  log "go build k8s.io/kubernetes/cmd/$cmd (GOCACHE=$GOCACHE)"
  t=$(date +%s)
  (cd "$PKG_DIR" && go build -trimpath -ldflags "$LDFLAGS" -o "$out.tmp" "./cmd/$cmd") \
    >"$CACHE/go-build-$cmd.log" 2>&1 \
    || { tail -n 40 "$CACHE/go-build-$cmd.log" >&2; die "go build $cmd failed (log: $CACHE/go-build-$cmd.log)"; }
  log "go build $cmd done in $(( $(date +%s) - t ))s"
  mv "$out.tmp" "$out"
  runs "$out" || die "built $out does not run --version"
}
for c in "${CMDS[@]}"; do go_build "$c" "$CACHE/$c-$K8S_VERSION"; done

binary_ok || die "built binaries do not run --version"
# Later runs start from the binaries (the check at the top), never from the build cache or
# the source tree: drop both (about 1.8 GB) so the e2e tier runs with that disk free.
rm -rf "$GOCACHE" "$SRC_DIR"
log "built $("$BIN" --version) in $(( $(date +%s) - T0 ))s total"
echo "$BIN"
