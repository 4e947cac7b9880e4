#!/usr/bin/env bash
# The image tier: checks scripts/image.sh (pinhook's OCI image, built offline) and the
# Dockerfile's use of it. See docs/image.md.
#
# Usage:
#   tests/image/check.sh [BINARY]
#
#   BINARY  the pinhook binary to put in the image (default: $PINHOOK_IMAGE_BINARY, else
#           $CARGO_TARGET_DIR/release/pinhook or target/release/pinhook, built with
#           `cargo build --release --locked --bin pinhook` when absent)
#
# Checks, one line each (`ok NAME` or `FAIL NAME: why`):
#   reproducible  two builds (the second with umask 077 and another TMPDIR) give the same
#                 manifest digest and byte-identical layouts
#   layout        umoci stat and skopeo inspect read the layout; every blob's sha256 and size
#                 match its descriptor; the media types are OCI's
#   config        entrypoint (tini, then pinhook), cmd, user 65532:65532, port 8443/tcp, linux/amd64
#   files         the layer holds exactly the expected files (the binary, ldd's libraries and
#                 loader, the CA bundle, passwd, group, nsswitch.conf, /tmp and their parent
#                 directories), all root-owned with the expected modes, no shell
#   ca-bundle     the bundle is Debian's Mozilla certificates, none of the machine's local CAs
#   dockerfile    `image.sh --rootfs` (the Dockerfile's build stage) stages the same file set,
#                 and the Dockerfile's final stage is scratch with exactly those files
#   runs          the unpacked rootfs runs /usr/local/bin/pinhook --version as 65532 (chroot)
#   push          --push to a real docker-registry over TLS (self-signed CA, htpasswd user)
#                 prints the local digest last, and the registry serves that digest for the tag
#   lint          scripts/image.sh and this script pass shellcheck
#
# Installs Debian's skopeo, umoci, docker-registry, apache2-utils (htpasswd), openssl, curl, jq
# and ShellCheck when missing (as root, or with sudo). The last line:
# `image: N passed, M failed`; exit 1 when a check failed.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$PWD

passed=0
failed=0
ok() {
    echo "ok $1"
    passed=$((passed + 1))
}
fail() {
    echo "FAIL $1: $2"
    failed=$((failed + 1))
}
finish() {
    echo "image: $passed passed, $failed failed"
    ((failed == 0))
}

work=$(mktemp -d)
registry_pid=""
cleanup() {
    if [[ -n $registry_pid ]]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# --- dependencies ----------------------------------------------------------------------------
declare -A tools=([skopeo]=skopeo [umoci]=umoci [docker-registry]=docker-registry [htpasswd]=apache2-utils
    [openssl]=openssl [curl]=curl [jq]=jq [shellcheck]=shellcheck [python3]=python3 [tini-static]=tini)
missing=()
for tool in "${!tools[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("${tools[$tool]}")
done
if ((${#missing[@]} > 0)); then
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
    echo "installing ${missing[*]}" >&2
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends "${missing[@]}" >/dev/null; then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq update >/dev/null
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi

# --- the binary ------------------------------------------------------------------------------
binary=${1:-${PINHOOK_IMAGE_BINARY:-${CARGO_TARGET_DIR:-$repo/target}/release/pinhook}}
if [[ ! -x $binary ]]; then
    echo "building $binary (cargo build --release --locked --bin pinhook)" >&2
    cargo build --release --locked --bin pinhook >&2
fi
[[ -x $binary ]] || { fail build "no binary at $binary"; finish; }

# --- reproducible ----------------------------------------------------------------------------
t0=$(date +%s)
d1=$(scripts/image.sh --binary "$binary" --out "$work/oci1" 2>"$work/build1.log" | tail -n1) || true
echo "first build: $(($(date +%s) - t0)) s, $d1" >&2
mkdir -p "$work/tmp2"
d2=$( (umask 077 && TMPDIR=$work/tmp2 scripts/image.sh --binary "$binary" --out "$work/oci2" 2>"$work/build2.log") | tail -n1) || true
if [[ $d1 != sha256:* ]]; then
    fail reproducible "the build printed no digest: $(tail -n3 "$work/build1.log")"
elif [[ $d1 != "$d2" ]]; then
    fail reproducible "two builds gave $d1 and $d2"
elif ! diff -r "$work/oci1" "$work/oci2" >"$work/diff.log"; then
    fail reproducible "the layouts differ: $(head -n3 "$work/diff.log")"
else
    ok reproducible
fi
oci=$work/oci1
tag=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$oci/index.json")
blob() { echo "$oci/blobs/sha256/${1#sha256:}"; }

# --- layout ----------------------------------------------------------------------------------
layout_errors() {
    local index=$oci/index.json manifest config d size
    [[ $(jq -r .imageLayoutVersion "$oci/oci-layout") == 1.0.0 ]] || echo "oci-layout"
    [[ $(jq -r '.manifests | length' "$index") == 1 ]] || echo "index.json: not one manifest"
    [[ $(jq -r '.manifests[0].digest' "$index") == "$d1" ]] || echo "index.json names another digest"
    manifest=$(blob "$d1")
    [[ $(jq -r .mediaType "$manifest") == application/vnd.oci.image.manifest.v1+json ]] || echo "manifest mediaType"
    [[ $(jq -r .config.mediaType "$manifest") == application/vnd.oci.image.config.v1+json ]] || echo "config mediaType"
    [[ $(jq -r '.layers | map(.mediaType) | join(",")' "$manifest") == application/vnd.oci.image.layer.v1.tar+gzip ]] || echo "layer mediaType"
    # every descriptor: the blob's sha256 and size
    while read -r d size; do
        [[ -f $(blob "$d") ]] || { echo "missing blob $d"; continue; }
        [[ sha256:$(sha256sum <"$(blob "$d")" | cut -d' ' -f1) == "$d" ]] || echo "blob $d: wrong sha256"
        [[ $(stat -c %s "$(blob "$d")") == "$size" ]] || echo "blob $d: size is not $size"
    done < <(jq -r '.manifests[] | "\(.digest) \(.size)"' "$index"; jq -r '(.config, .layers[]) | "\(.digest) \(.size)"' "$manifest")
    # the config's diff_id is the uncompressed layer's digest
    config=$(blob "$(jq -r .config.digest "$manifest")")
    d=$(jq -r '.layers[0].digest' "$manifest")
    [[ $(jq -r '.rootfs.diff_ids[0]' "$config") == "sha256:$(gzip -dc "$(blob "$d")" | sha256sum | cut -d' ' -f1)" ]] || echo "diff_id"
    umoci stat --image "$oci:$tag" >/dev/null 2>"$work/umoci.log" || echo "umoci stat: $(head -n2 "$work/umoci.log")"
    [[ $(skopeo inspect "oci:$oci:$tag" 2>"$work/skopeo.log" | jq -r .Digest) == "$d1" ]] || echo "skopeo inspect: $(head -n2 "$work/skopeo.log")"
}
errors=$(layout_errors 2>&1)
if [[ -z $errors ]]; then ok layout; else fail layout "$(tr '\n' ';' <<<"$errors")"; fi

manifest=$(blob "$d1")
config=$(blob "$(jq -r .config.digest "$manifest")")
layer=$(blob "$(jq -r '.layers[0].digest' "$manifest")")

# --- config ----------------------------------------------------------------------------------
got=$(jq -c '[.os, .architecture, .config.Entrypoint, .config.Cmd, .config.User, (.config.ExposedPorts | keys)]' "$config")
want='["linux","amd64",["/usr/local/bin/tini","--","/usr/local/bin/pinhook"],["serve"],"65532:65532",["8443/tcp"]]'
if [[ $got == "$want" ]]; then ok config; else fail config "got $got, want $want"; fi

# --- files -----------------------------------------------------------------------------------
# The expected set, from ldd here (not from image.sh's own parsing): each path and its parents.
expected_files() {
    {
        printf '%s\n' usr/local/bin/pinhook usr/local/bin/tini etc/ssl/certs/ca-certificates.crt etc/passwd etc/group etc/nsswitch.conf tmp/
        ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print substr($3, 2); next } $1 ~ /^\// { print substr($1, 2) }'
    } | while read -r p; do
        echo "$p"
        p=${p%/}
        while [[ $p == */* ]]; do
            p=${p%/*}
            echo "$p/"
        done
    done | sort -u
}
expected_files >"$work/expected"
tar -tzf "$layer" | sort >"$work/layer-files"
tar -tvzf "$layer" >"$work/layer-long"
files_errors() {
    diff "$work/expected" "$work/layer-files" | grep '^[<>]' | sed 's/^</missing/;s/^>/unexpected/' || true
    awk '$2 != "root/root" { print "not root-owned: " $6 }' "$work/layer-long"
    awk '$6 == "tmp/" && $1 != "drwxrwxrwt" { print "tmp/ is " $1 }' "$work/layer-long"
    awk '$6 != "tmp/" && $1 ~ /^d/ && $1 != "drwxr-xr-x" { print $6 " is " $1 }' "$work/layer-long"
    awk '$6 == "usr/local/bin/pinhook" && $1 != "-rwxr-xr-x" { print "the binary is " $1 }' "$work/layer-long"
    awk '$6 ~ /^etc\/.*[^\/]$/ && $1 != "-rw-r--r--" { print $6 " is " $1 }' "$work/layer-long"
    grep -E '(^|/)(sh|bash|dash|busybox)$' "$work/layer-files" | sed 's/^/a shell: /' || true
    # the binary in the image is the binary given
    cmp -s <(tar -xzOf "$layer" usr/local/bin/pinhook) "$binary" || echo "usr/local/bin/pinhook differs from $binary"
}
errors=$(files_errors 2>&1)
if [[ -z $errors ]]; then ok files; else fail files "$(tr '\n' ';' <<<"$errors")"; fi

# --- ca-bundle -------------------------------------------------------------------------------
ca_errors() {
    tar -xzOf "$layer" etc/ssl/certs/ca-certificates.crt >"$work/bundle.crt"
    local cert n
    for cert in /usr/share/ca-certificates/mozilla/*.crt; do sed -e "\$a\\" "$cert"; done >"$work/mozilla.crt"
    cmp -s "$work/bundle.crt" "$work/mozilla.crt" || echo "the bundle is not Debian's Mozilla certificates in name order"
    n=$(grep -c 'BEGIN CERTIFICATE' "$work/bundle.crt")
    [[ $n -gt 100 ]] || echo "only $n certificates"
    for cert in /usr/local/share/ca-certificates/*.crt; do
        [[ -f $cert ]] || continue
        # the local certificate's base64 body, one line of it, must not be in the bundle
        if grep -qF -- "$(sed -n '2p' "$cert")" "$work/bundle.crt"; then echo "carries the local CA $cert"; fi
    done
}
errors=$(ca_errors 2>&1)
if [[ -z $errors ]]; then ok ca-bundle; else fail ca-bundle "$(tr '\n' ';' <<<"$errors")"; fi

# --- dockerfile ------------------------------------------------------------------------------
dockerfile_errors() {
    scripts/image.sh --binary "$binary" --rootfs "$work/staged" 2>"$work/staged.log" || { echo "image.sh --rootfs: $(tail -n2 "$work/staged.log")"; return; }
    (cd "$work/staged" && find . -mindepth 1 \( -type d -printf '%P/\n' -o -printf '%P\n' \)) | sort >"$work/staged-files"
    diff "$work/layer-files" "$work/staged-files" | grep '^[<>]' | sed 's/^</only in the image: /;s/^>/only staged: /' || true
    # the Dockerfile stages with that command and its final stage is exactly those files
    grep -qxF '    && scripts/image.sh --binary /pinhook --rootfs /rootfs' Dockerfile || echo "the build stage does not run image.sh --rootfs"
    local final
    final=$(awk '/^FROM /{stage=$0; body=""} {body=body $0 "\n"} END{printf "%s", body}' Dockerfile)
    [[ $(head -n1 <<<"$final") == "FROM scratch" ]] || echo "the final stage is not FROM scratch"
    [[ $(grep -E '^(COPY|ADD|RUN)' <<<"$final") == "COPY --from=build /rootfs/ /" ]] || echo "the final stage adds more than /rootfs"
    grep -qxF 'USER 65532:65532' <<<"$final" || echo "USER"
    grep -qxF 'EXPOSE 8443' <<<"$final" || echo "EXPOSE"
    grep -qxF 'ENTRYPOINT ["/usr/local/bin/tini", "--", "/usr/local/bin/pinhook"]' <<<"$final" || echo "ENTRYPOINT"
    grep -qxF 'CMD ["serve"]' <<<"$final" || echo "CMD"
}
errors=$(dockerfile_errors 2>&1)
if [[ -z $errors ]]; then ok dockerfile; else fail dockerfile "$(tr '\n' ';' <<<"$errors")"; fi

# --- runs ------------------------------------------------------------------------------------
mkdir -p "$work/rootfs"
tar -xzf "$layer" -C "$work/rootfs"
want="pinhook $(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
if [[ $(id -u) -eq 0 ]]; then
    run=("$(command -v chroot)" --userspec=65532:65532 "$work/rootfs")
else
    run=("$(command -v unshare)" --map-root-user "$(command -v chroot)" "$work/rootfs")
fi
# (as the entrypoint runs it: tini, PID 1 in the container, running pinhook)
if out=$(env -i "${run[@]}" /usr/local/bin/tini -s -- /usr/local/bin/pinhook --version 2>&1) && [[ $out == "$want"* ]]; then
    ok runs
else
    fail runs "${run[*]} /usr/local/bin/tini -s -- /usr/local/bin/pinhook --version: $(head -c 300 <<<"$out" | tr '\n' ';') (want $want)"
fi

# --- push ------------------------------------------------------------------------------------
start_registry() {
    local dir=$work/registry i
    mkdir -p "$dir/storage"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=image-test-ca \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
        -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$dir/ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
        -days 2 -extfile "$dir/ext" -out "$dir/server.crt" 2>/dev/null
    htpasswd -Bbc "$dir/htpasswd" pusher "image-test-secret" 2>/dev/null
    # as tests/common/registry.rs configures it: loopback only, port 0, TLS, htpasswd
    cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: "$dir/storage"
  redirect:
    disable: true
http:
  addr: "127.0.0.1:0"
  secret: pinhook-image-test
  tls:
    certificate: "$dir/server.crt"
    key: "$dir/server.key"
auth:
  htpasswd:
    realm: pinhook-image-test
    path: "$dir/htpasswd"
EOF
    env -u REGISTRY_HTTP_ADDR docker-registry serve "$dir/config.yml" >"$dir/access.log" 2>"$dir/registry.log" &
    registry_pid=$!
    for ((i = 0; i < 100; i++)); do
        port=$(grep -o 'listening on [^ ,"]*' "$dir/registry.log" | head -n1 | sed 's/.*://') || true
        [[ -n $port ]] && break
        kill -0 "$registry_pid" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n ${port:-} ]] || { echo "docker-registry did not start: $(tail -n3 "$dir/registry.log")"; return 1; }
    for ((i = 0; i < 50; i++)); do
        [[ $(curl -s -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" "https://127.0.0.1:$port/v2/") == 401 ]] && return 0
        sleep 0.1
    done
    echo "docker-registry at 127.0.0.1:$port did not answer /v2/"
    return 1
}
push_errors() {
    [[ -n ${port:-} ]] || { cat "$work/registry-start.log"; return 0; }
    local ref=127.0.0.1:$port/platform/pinhook:test pushed served body
    pushed=$(scripts/image.sh --binary "$binary" --out "$work/oci-push" --push "$ref" \
        --registry-ca "$work/registry/ca.crt" --user pusher:image-test-secret 2>"$work/push.log" | tail -n1) ||
        { echo "image.sh --push failed: $(tail -n3 "$work/push.log")"; return 0; }
    [[ $pushed == "$d1" ]] || echo "--push printed $pushed, the local digest is $d1"
    served=$(curl -sfI --cacert "$work/registry/ca.crt" -u pusher:image-test-secret \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        "https://127.0.0.1:$port/v2/platform/pinhook/manifests/test" | tr -d '\r' |
        awk -F': ' 'tolower($1) == "docker-content-digest" { print $2 }')
    [[ $served == "$d1" ]] || echo "the registry serves $served for the tag, not $d1"
    body=$(curl -sf --cacert "$work/registry/ca.crt" -u pusher:image-test-secret \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        "https://127.0.0.1:$port/v2/platform/pinhook/manifests/test" | sha256sum | cut -d' ' -f1)
    [[ sha256:$body == "$d1" ]] || echo "the served manifest's sha256 is $body"
    # without the CA or without credentials, the push fails
    if scripts/image.sh --binary "$binary" --out "$work/oci-push" --push "$ref" \
        --registry-ca "$work/registry/ca.crt" >/dev/null 2>&1; then echo "a push without credentials succeeded"; fi
}
# started here, not in $(...), so that cleanup knows its pid
port=""
start_registry >"$work/registry-start.log" 2>&1 || port=""
errors=$(push_errors 2>&1)
if [[ -z $errors ]]; then ok push; else fail push "$(tr '\n' ';' <<<"$errors")"; fi

# --- shellcheck ------------------------------------------------------------------------------
if out=$(shellcheck scripts/image.sh tests/image/check.sh 2>&1); then ok lint; else fail lint "$(head -n5 <<<"$out" | tr '\n' ';')"; fi

echo "image size: $(stat -c %s "$layer") bytes gzipped, $(gzip -dc "$layer" | wc -c) bytes uncompressed; digest $d1" >&2
finish
