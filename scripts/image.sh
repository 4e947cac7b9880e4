#!/usr/bin/env bash
# pinhook's OCI image (linux/amd64), built without pulling a base image and without fetching
# anything: the release binary plus exactly the runtime files it needs, packed by this script
# into an OCI image layout (one gzip layer, a config, a manifest) with Python 3's standard
# library (tarfile, gzip, hashlib, json). See docs/image.md.
#
# Usage:
#   scripts/image.sh [--binary PATH] [--out DIR] [--tag TAG]
#                    [--push HOST/REPO:TAG --registry-ca FILE [--user USER:PASS]]
#   scripts/image.sh --binary PATH --rootfs DIR
#
#   --binary PATH      use this pinhook binary (ELF x86-64) instead of running
#                      `cargo build --release --locked --bin pinhook`
#   --out DIR          write the OCI image layout to DIR (default: $CARGO_TARGET_DIR/image/oci,
#                      or target/image/oci); DIR is emptied first
#   --tag TAG          the tag recorded in the layout's index.json (default: the push tag, or
#                      the version in Cargo.toml); index.json only, not part of the digest
#   --push REF         push the image to HOST/REPO:TAG with skopeo (Debian package skopeo),
#                      the digests preserved; fails unless the registry's digest is the local one
#   --registry-ca FILE the CA that signed the registry's certificate (required with --push)
#   --user USER:PASS   credentials for the registry (default: none)
#   --rootfs DIR       only stage the image's files into DIR (empty or absent) and stop: what
#                      the Dockerfile's build stage runs, so both builds have the same file set
#
# The image: /usr/local/bin/pinhook, run by /usr/local/bin/tini (Debian's tini-static, PID 1:
# forwards signals and reaps orphans, such as what a killed credential plugin left; entrypoint
# ["/usr/local/bin/tini", "--", "/usr/local/bin/pinhook"], cmd ["serve"]), user 65532:65532, port
# 8443/tcp exposed, /etc/ssl/certs/ca-certificates.crt (Debian's ca-certificates: the Mozilla
# certificates concatenated in name order, as update-ca-certificates writes them, without the
# build machine's local CAs), /etc/passwd and /etc/group (root, nonroot 65532),
# /etc/nsswitch.conf (hosts: files dns), /tmp (1777), and the shared libraries `ldd` names for
# the binary plus the dynamic loader, at the paths ldd prints. No shell.
#
# Reproducible: every entry has uid/gid 0, mtime SOURCE_DATE_EPOCH (default: the commit time
# of HEAD, `git log -1 --format=%ct`), normalized modes, sorted names; gzip with no name and
# no timestamp. The same binary at the same commit gives the same manifest digest.
#
# Output: the layout's path and the manifest digest; with --push the last line is the
# pushed manifest digest (sha256:...). Needs bash, coreutils, ldd, python3; skopeo with --push.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

die() {
    echo "image.sh: $*" >&2
    exit 1
}
usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
    exit "${1:-2}"
}

binary=""
out=""
tag=""
push=""
registry_ca=""
user=""
rootfs_only=""
while (($# > 0)); do
    case $1 in
    --binary) binary=${2:?--binary needs a path}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --tag) tag=${2:?--tag needs a tag}; shift 2 ;;
    --push) push=${2:?--push needs HOST/REPO:TAG}; shift 2 ;;
    --registry-ca) registry_ca=${2:?--registry-ca needs a file}; shift 2 ;;
    --user) user=${2:?--user needs USER:PASS}; shift 2 ;;
    --rootfs) rootfs_only=${2:?--rootfs needs a directory}; shift 2 ;;
    -h | --help) usage 0 ;;
    *) echo "image.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done

if [[ -n $push ]]; then
    [[ $push =~ ^[^/]+/.+:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$ ]] || die "--push wants HOST/REPO:TAG, got: $push"
    [[ -n $registry_ca ]] || die "--push needs --registry-ca FILE"
    [[ -f $registry_ca ]] || die "no CA file at $registry_ca"
    command -v skopeo >/dev/null || die "--push needs skopeo (apt-get install -y skopeo)"
fi
[[ -z $user || $user == *:* ]] || die "--user wants USER:PASS"

# --- the binary ----------------------------------------------------------------------------
if [[ -z $binary ]]; then
    [[ -z $rootfs_only ]] || die "--rootfs needs --binary"
    (cd "$repo" && cargo build --release --locked --bin pinhook >&2)
    binary=${CARGO_TARGET_DIR:-$repo/target}/release/pinhook
fi
[[ -f $binary ]] || die "no binary at $binary"
# ELF, 64-bit, little-endian, e_machine 62 (x86-64): the image is linux/amd64.
[[ $(od -An -tx1 -N5 "$binary" | tr -d ' \n') == 7f454c4602 ]] || die "$binary is not a 64-bit ELF file"
[[ $(od -An -tu2 -j18 -N2 "$binary" | tr -d ' ') == 62 ]] || die "$binary is not an x86-64 binary"

# --- the root filesystem -------------------------------------------------------------------
# libraries: "PATH" for each library ldd resolves and the loader, in ldd's order.
libraries() {
    local out
    out=$(ldd "$1" 2>&1) || {
        # a static binary: no libraries, no loader
        [[ $out == *"not a dynamic executable"* || $out == *"statically linked"* ]] && return 0
        die "ldd $1: $out"
    }
    [[ $out != *"not found"* ]] || die "ldd $1: a library is missing: $out"
    awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }' <<<"$out"
}

# stage_rootfs DIR: the image's files, with their final modes.
stage_rootfs() {
    local root=$1 lib
    install -d -m 0755 "$root/usr/local/bin" "$root/etc/ssl/certs"
    install -d -m 1777 "$root/tmp"
    install -m 0755 "$binary" "$root/usr/local/bin/pinhook"
    [[ -x /usr/bin/tini-static ]] || die "no /usr/bin/tini-static: apt-get install -y tini"
    install -m 0755 /usr/bin/tini-static "$root/usr/local/bin/tini"
    while IFS= read -r lib; do
        install -d -m 0755 "$root$(dirname "$lib")"
        # the file itself, not the symlink (Debian's /lib64/ld-linux-x86-64.so.2 is one)
        install -m 0755 "$(readlink -f "$lib")" "$root$lib"
    done < <(libraries "$binary")
    # Debian's bundle as update-ca-certificates writes it from the ca-certificates package
    # alone: the machine's /etc/ssl/certs/ca-certificates.crt may carry local CAs too.
    local certs=(/usr/share/ca-certificates/mozilla/*.crt)
    [[ -f ${certs[0]} ]] || die "no /usr/share/ca-certificates/mozilla/*.crt: apt-get install -y ca-certificates"
    local cert
    for cert in "${certs[@]}"; do
        # each file ends with a newline, as update-ca-certificates adds them
        # shellcheck disable=SC1003 # sed's `$a\` appends a missing final newline
        sed -e '$a\' "$cert"
    done >"$root/etc/ssl/certs/ca-certificates.crt"
    printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
        'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' >"$root/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
    # glibc without nsswitch.conf asks DNS before /etc/hosts (kubelet's hostAliases)
    printf '%s\n' 'hosts: files dns' >"$root/etc/nsswitch.conf"
    chmod 0644 "$root/etc/ssl/certs/ca-certificates.crt" "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
}

if [[ -n $rootfs_only ]]; then
    if [[ -e $rootfs_only ]] && [[ -n $(ls -A "$rootfs_only") ]]; then die "--rootfs $rootfs_only is not empty"; fi
    stage_rootfs "$rootfs_only"
    echo "image.sh: staged the image's files in $rootfs_only" >&2
    exit 0
fi

command -v python3 >/dev/null || die "needs python3"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage_rootfs "$work/rootfs"

# --- the OCI layout ------------------------------------------------------------------------
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
if [[ -z $tag ]]; then
    if [[ -n $push ]]; then tag=${push##*:}; else tag=$version; fi
fi
out=${out:-${CARGO_TARGET_DIR:-$repo/target}/image/oci}
if [[ -d $out && -n $(ls -A "$out") ]]; then
    # only ever empty a directory that holds an OCI layout
    [[ -f $out/oci-layout ]] || die "--out $out is not empty and holds no OCI layout"
    rm -rf "${out:?}/blobs" "$out/index.json" "$out/oci-layout"
fi
mkdir -p "$out"

digest=$(python3 - "$work/rootfs" "$out" "$epoch" "$tag" "$revision" "$version" <<'PY'
import gzip, hashlib, io, json, os, stat, sys, tarfile, time

root, out, epoch, tag, revision, version = sys.argv[1:]
epoch = int(epoch)

def blob(data):
    d = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(out, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d

def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()

# The layer: every path under root, sorted, directories before their contents.
paths = []
for dirpath, dirnames, filenames in os.walk(root):
    for name in dirnames + filenames:
        paths.append(os.path.relpath(os.path.join(dirpath, name), root))
paths.sort()
raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    for rel in paths:
        full = os.path.join(root, rel)
        st = os.lstat(full)
        info = tarfile.TarInfo(rel)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = epoch
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if rel == "tmp" else 0o755
            tar.addfile(info)
        elif stat.S_ISREG(st.st_mode):
            info.type = tarfile.REGTYPE
            info.mode = 0o755 if st.st_mode & 0o111 else 0o644
            info.size = st.st_size
            with open(full, "rb") as f:
                tar.addfile(info, f)
        else:
            sys.exit(f"image.sh: {rel} is neither a file nor a directory")
layer_tar = raw.getvalue()
gz = io.BytesIO()
with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0, compresslevel=9) as g:
    g.write(layer_tar)
layer_gz = gz.getvalue()
layer_digest = blob(layer_gz)
diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()

created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
labels = {
    "org.opencontainers.image.revision": revision,
    "org.opencontainers.image.title": "pinhook",
    "org.opencontainers.image.version": version,
}
config = {
    "architecture": "amd64",
    "os": "linux",
    "created": created,
    "config": {
        "User": "65532:65532",
        "ExposedPorts": {"8443/tcp": {}},
        "Env": ["PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
        "Entrypoint": ["/usr/local/bin/tini", "--", "/usr/local/bin/pinhook"],
        "Cmd": ["serve"],
        "WorkingDir": "/",
        "Labels": labels,
    },
    "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    "history": [{"created": created, "created_by": "scripts/image.sh"}],
}
config_bytes = canonical(config)
config_digest = blob(config_bytes)
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        "digest": config_digest,
        "size": len(config_bytes),
    },
    "layers": [{
        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
        "digest": layer_digest,
        "size": len(layer_gz),
    }],
}
manifest_bytes = canonical(manifest)
manifest_digest = blob(manifest_bytes)
index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": manifest_digest,
        "size": len(manifest_bytes),
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }],
}
with open(os.path.join(out, "index.json"), "wb") as f:
    f.write(canonical(index))
with open(os.path.join(out, "oci-layout"), "wb") as f:
    f.write(canonical({"imageLayoutVersion": "1.0.0"}))
print(f"image.sh: layer {len(layer_tar)} bytes, {len(layer_gz)} gzipped", file=sys.stderr)
print(manifest_digest)
PY
)
echo "image.sh: wrote $out ($tag): $digest" >&2

# --- the push ------------------------------------------------------------------------------
if [[ -n $push ]]; then
    install -d -m 0700 "$work/certs"
    cp "$registry_ca" "$work/certs/ca.crt"
    creds=(--dest-no-creds)
    [[ -z $user ]] || creds=(--dest-creds "$user")
    # --preserve-digests: fail rather than push a converted manifest under another digest.
    # No policy.json of the machine's is read: this one accepts the local layout.
    printf '%s\n' '{"default":[{"type":"insecureAcceptAnything"}]}' >"$work/policy.json"
    skopeo --policy "$work/policy.json" copy --quiet --preserve-digests \
        --dest-cert-dir "$work/certs" "${creds[@]}" --digestfile "$work/pushed" \
        "oci:$out:$tag" "docker://$push" >&2
    pushed=$(<"$work/pushed")
    [[ $pushed == "$digest" ]] || die "the registry has $pushed for $push, not the local $digest"
    echo "image.sh: pushed $push" >&2
fi
echo "$digest"
