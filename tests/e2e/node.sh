#!/usr/bin/env bash
# A real node for pinhook's end-to-end tier, beside cluster.sh's control plane: Debian's
# containerd + runc + CNI plugins (bridge, host-local, loopback), a kubelet and a
# kube-scheduler (v1.20.2, built by build-kube-apiserver.sh from the same source tree as the
# apiserver). Pods are scheduled, their images pulled from the tier's registries through
# containerd, and they run.
#
# Usage (needs root, and cluster.sh's control plane running in the same E2E_WORK):
#   tests/e2e/node.sh start [REGISTRY_HOST...]
#                         # each REGISTRY_HOST (e.g. 127.0.0.1:PORT) gets a hosts.toml in
#                         # containerd's certs.d trusting NODE_REGISTRY_CA (default: the e2e CA)
#   tests/e2e/node.sh stop     # everything below stopped by PID, undone, restored; logs stay
#   tests/e2e/node.sh status   # exit 0 when the Node is Ready
# Or source it (after cluster.sh) and call node_start, node_stop, node_ready, node_env (NODE_CERTS_D:
# containerd's config_path, read at each pull), node_oci_image, node_push_image, node_hosts_toml.
#
# The node on 1.32 (E2E_KUBE=1.32): the same 1.20 kubelet, scheduler and kube-proxy join the 1.32
# control plane, since no 1.32 ones are given. That is outside Kubernetes' version-skew policy
# (a kubelet at most three minors older), and it is used only where what is measured is the
# control plane's: the availability scenarios, where what fails an admission is the apiserver's
# webhook client and the controller manager's Endpoints. Three things differ there, each below:
# the scheduler's preemption plugin is off (it would wait for policy/v1beta1, gone since 1.25),
# the controller manager also publishes kube-root-ca.crt, and OpenShift's
# openshift-service-ca.crt is published by a watch of the namespaces.
#
# Everything stays on this machine: a bridge ($NODE_BRIDGE, $NODE_SUBNET.1/24) that is the
# node's IP and the Pods' gateway, no forwarding (the bridge plugin's isGateway is off, so it
# does not turn on ip_forward) and no NAT but kube-proxy's for ClusterIPs (NODE_POD_NETWORK=1);
# the kubelet reaches the apiserver on 127.0.0.1 and
# containerd the registries on 127.0.0.1; AWS_EC2_METADATA_DISABLED=true keeps the kubelet's
# in-tree AWS credential code from probing the cloud metadata address.
#
# What start does, in order (every wait bounded; on any failure it undoes what it did):
#   1. packages (apt, when missing): containerd, runc, containernetworking-plugins, gcc, libc6-dev,
#      iptables, socat
#   2. the host state it will change is recorded in $NODE_WORK/host-state (once, kept across an
#      unclean stop): the sysctls the kubelet sets (kernel.panic, kernel.panic_on_oops,
#      vm.overcommit_memory, vm.panic_on_oom, kernel.keys.root_maxkeys/maxbytes) and which of
#      /var/log/pods, /var/log/containers, /var/lib/cni, /run/containerd, the kubepods cgroups
#      existed
#   3. the bridge, with the node IP
#   4. the pause image: node/pause.c built with `gcc -static`, packed as an OCI image layout
#      and imported with `ctr -n k8s.io images import` (the sandbox image: never pulled)
#   5. containerd: root, state, runc root and socket under $NODE_WORK, netns under its state
#      dir, restrict_oom_score_adj (root here lacks CAP_SYS_RESOURCE), registry config_path ->
#      $NODE_WORK/certs.d (one hosts.toml per registry host, its CA trusted), CNI conf dir
#      $NODE_WORK/cni (bridge + host-local with its data dir there + loopback)
#   6. every other Node object deleted (_node_delete_other_nodes), then the controller manager
#      restarted with the controllers a node needs besides the
#      workload ones (cluster.sh e2e_controllers_for_node: endpoint, serviceaccount-token,
#      namespace, nodelifecycle, garbagecollector)
#   7. the kubelet, registering the Node with the taint $NODE_TAINT (only Pods that tolerate it
#      run here: the Pods other scenarios leave Pending stay so): client cert system:node:$NODE_NAME (group system:nodes, bound to the
#      ClusterRole system:node), config file (cgroupfs, oomScoreAdj 0,
#      nodeStatusUpdateFrequency 2s, static pods from $NODE_WORK/manifests, no iptables
#      chains, eviction and image GC thresholds that a full-ish disk does not trip),
#      --resolv-conf= (Pods do not get the host's nameserver); waits until the Node is Ready
#   8. kube-scheduler (no leader election, /healthz on 127.0.0.1:$NODE_SCHEDULER_PORT)
#   9. only with NODE_POD_NETWORK=1 (groundwork for pinhook's own Pods on the node): the
#      apiserver reachable from the Pod network and Services routed, see _node_pod_network
#
# Environment:
#   E2E_WORK            cluster.sh's work dir (default /tmp/pinhook-e2e); the node's: $E2E_WORK/node
#   NODE_NAME           (pinhook-e2e-node)
#   NODE_BRIDGE         (pinhook-e2e0)    NODE_SUBNET (10.241.0: a /24 no route of this host uses)
#   NODE_REGISTRY_CA    the CA containerd trusts for the registries (default $E2E_WORK/pki/ca.crt)
#   NODE_KUBELET_PORT   (10250)  NODE_KUBELET_HEALTHZ_PORT (10248)  NODE_SCHEDULER_PORT (10251)
#   NODE_READY_TIMEOUT  seconds for each wait (60)
#   NODE_POD_NETWORK    1: step 9 (default 0)
#   NODE_REGISTRY_FORWARD  with NODE_POD_NETWORK=1: registries (127.0.0.1:PORT...) to serve on the
#                       bridge address too, as NODE_IP:PORT (see _node_pod_network)
#   NODE_PROXY_HEALTHZ_PORT (10256)  NODE_PROXY_METRICS_PORT (10249): kube-proxy's, on 127.0.0.1
#   KUBELET, KUBE_SCHEDULER  binaries (default: in NODE_BINARIES_DIR, else beside the apiserver in PINHOOK_E2E_CACHE)

_NODE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/e2e/cluster.sh
declare -F e2e_start >/dev/null || source "$_NODE_DIR/cluster.sh"

_node_vars() {
  _e2e_vars
  NODE_WORK="$E2E_WORK/node"
  NODE_NAME="${NODE_NAME:-pinhook-e2e-node}"
  NODE_BRIDGE="${NODE_BRIDGE:-pinhook-e2e0}"
  NODE_SUBNET="${NODE_SUBNET:-10.241.0}"
  NODE_IP="$NODE_SUBNET.1"
  NODE_REGISTRY_CA="${NODE_REGISTRY_CA:-$E2E_PKI/ca.crt}"
  NODE_KUBELET_PORT="${NODE_KUBELET_PORT:-10250}"
  NODE_KUBELET_HEALTHZ_PORT="${NODE_KUBELET_HEALTHZ_PORT:-10248}"
  NODE_SCHEDULER_PORT="${NODE_SCHEDULER_PORT:-10251}"
  NODE_POD_NETWORK="${NODE_POD_NETWORK:-0}"
  NODE_REGISTRY_FORWARD="${NODE_REGISTRY_FORWARD:-}"
  NODE_PROXY_HEALTHZ_PORT="${NODE_PROXY_HEALTHZ_PORT:-10256}"
  NODE_PROXY_METRICS_PORT="${NODE_PROXY_METRICS_PORT:-10249}"
  NODE_READY_TIMEOUT="${NODE_READY_TIMEOUT:-60}"
  NODE_SOCK="$NODE_WORK/containerd.sock"
  NODE_MANIFESTS="$NODE_WORK/manifests"
  NODE_PAUSE_IMAGE="pinhook.e2e/pause:1"
  # Only Pods that tolerate this run here: the tier's earlier scenarios leave Pending Pods
  # (with images that hold no program) that must not land on the node
  NODE_TAINT="pinhook.dev/e2e-node=dedicated:NoSchedule"
  # the kubelet's, and kube-proxy's route_localnet and ip_forward (NODE_POD_NETWORK=1)
  NODE_SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
    net.ipv4.ip_forward)
  # what the kubelet, containerd's shims and CNI create outside $NODE_WORK
  NODE_HOST_PATHS=(/var/log/pods /var/log/containers /var/lib/cni /run/containerd)
}

_node_log() { printf '%s [node] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

_node_ctr() { ctr --address "$NODE_SOCK" --timeout 20s "$@"; }
_node_kubectl() { kubectl --kubeconfig "$E2E_KUBECONFIG" --request-timeout=10s "$@"; }

_node_ensure_packages() {
  local -A need=([containerd]=containerd [runc]=runc [/usr/lib/cni/bridge]=containernetworking-plugins
    [gcc]=gcc [/usr/lib/x86_64-linux-gnu/libc.a]=libc6-dev [iptables]=iptables [socat]=socat)
  local missing=() c
  for c in "${!need[@]}"; do
    if [[ $c == /* ]]; then [[ -e $c ]] || missing+=("${need[$c]}"); else
      command -v "$c" >/dev/null 2>&1 || missing+=("${need[$c]}")
    fi
  done
  ((${#missing[@]} == 0)) && return 0
  _node_log "installing ${missing[*]} (apt)"
  # containerd's package would start its service (on /run/containerd); forbid service starts
  local made_policy=0 rc=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get -qq update &&
      DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 install -y --no-install-recommends "${missing[@]}" >/dev/null
  } || rc=$?
  ((made_policy)) && rm -f /usr/sbin/policy-rc.d
  ((rc == 0)) || { _node_log "ERROR: apt-get install ${missing[*]} failed"; return 1; }
}

_node_binaries() {
  local dir
  # (beside the apiserver, which build-kube-apiserver.sh builds with them; the 1.32 tier's
  # apiserver is another's, so lib.sh names the 1.20 build's directory)
  dir=${NODE_BINARIES_DIR:-$(dirname "${KUBE_APISERVER:-$PINHOOK_E2E_CACHE/kube-apiserver-1.20.2}")}
  KUBELET="${KUBELET:-$dir/kubelet-1.20.2}"
  KUBE_SCHEDULER="${KUBE_SCHEDULER:-$dir/kube-scheduler-1.20.2}"
  KUBE_PROXY="${KUBE_PROXY:-$dir/kube-proxy-1.20.2}"
  [[ -x $KUBELET && -x $KUBE_SCHEDULER && -x $KUBE_PROXY ]] || {
    _node_log "ERROR: no kubelet/kube-scheduler/kube-proxy at $KUBELET, $KUBE_SCHEDULER, $KUBE_PROXY (build-kube-apiserver.sh builds them)"
    return 1
  }
}

# --- host state: recorded once, restored by node_stop ---------------------------------------------
_node_record_host_state() {
  local f="$NODE_WORK/host-state" s p
  [[ -s $f ]] && return 0 # an unclean stop left it: it still holds the values from before
  {
    for s in "${NODE_SYSCTLS[@]}"; do printf 'sysctl %s %s\n' "$s" "$(sysctl -n "$s")"; done
    for p in "${NODE_HOST_PATHS[@]}" /sys/fs/cgroup/*/kubepods; do
      if [[ -e $p ]]; then printf 'existed %s\n' "$p"; fi
    done
    if grep -q 'KUBE-' <<<"$(iptables-save 2>/dev/null)"; then echo 'existed iptables-kube-chains'; fi
  } >"$f.tmp" && mv "$f.tmp" "$f"
}
_node_existed() { grep -qxF "existed $1" "$NODE_WORK/host-state" 2>/dev/null; }

# --- OCI images ------------------------------------------------------------------------------------
# node_oci_image DIR BINARY SEED [ARCH...]: an OCI image layout in DIR holding BINARY as /pause
# (the entrypoint) and /seed (SEED, so that each image has digests of its own): one manifest per
# ARCH (default amd64; the binary is this machine's, the others are never run) and, with more
# than one, an index of them. Byte-for-byte reproducible (fixed times, owners, order). Sets
# OCI_TOP (the digest of the index, or of the one manifest) and OCI_TOP_TYPE.
node_oci_image() {
  local dir=$1 bin=$2 seed=$3
  shift 3
  local archs=("${@:-amd64}") rootfs layer diff_id a cfg mf entries=""
  rm -rf "$dir" && mkdir -p "$dir/blobs/sha256" "$dir/.rootfs" || return 1
  rootfs="$dir/.rootfs"
  install -m 0755 "$bin" "$rootfs/pause" && printf '%s\n' "$seed" >"$rootfs/seed" || return 1
  tar -C "$rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -cf "$dir/layer.tar" pause seed || return 1
  diff_id="sha256:$(sha256sum <"$dir/layer.tar" | cut -d' ' -f1)"
  gzip -n -9 <"$dir/layer.tar" >"$dir/layer.tar.gz" && rm -rf "$dir/layer.tar" "$rootfs"
  layer=$(_node_blob "$dir" "$dir/layer.tar.gz") || return 1
  rm -f "$dir/layer.tar.gz"
  for a in "${archs[@]}"; do
    cfg=$(printf '{"architecture":"%s","config":{"Entrypoint":["/pause"],"Labels":{"dev.pinhook.e2e.seed":"%s"}},"created":"1970-01-01T00:00:00Z","os":"linux","rootfs":{"diff_ids":["%s"],"type":"layers"}}' \
      "$a" "$seed" "$diff_id" | _node_blob "$dir" -) || return 1
    mf=$(printf '{"config":{"digest":"%s","mediaType":"application/vnd.oci.image.config.v1+json","size":%s},"layers":[{"digest":"%s","mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","size":%s}],"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2}' \
      "${cfg% *}" "${cfg#* }" "${layer% *}" "${layer#* }" | _node_blob "$dir" -) || return 1
    entries+="${entries:+,}$(printf '{"digest":"%s","mediaType":"application/vnd.oci.image.manifest.v1+json","platform":{"architecture":"%s","os":"linux"},"size":%s}' \
      "${mf% *}" "$a" "${mf#* }")"
  done
  if ((${#archs[@]} > 1)); then
    mf=$(printf '{"manifests":[%s],"mediaType":"application/vnd.oci.image.index.v1+json","schemaVersion":2}' \
      "$entries" | _node_blob "$dir" -) || return 1
    OCI_TOP_TYPE=application/vnd.oci.image.index.v1+json
  else
    OCI_TOP_TYPE=application/vnd.oci.image.manifest.v1+json
  fi
  OCI_TOP=${mf% *}
  printf '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci-layout"
  printf '{"manifests":[{"digest":"%s","mediaType":"%s","size":%s}],"schemaVersion":2}' \
    "$OCI_TOP" "$OCI_TOP_TYPE" "${mf#* }" >"$dir/index.json"
}
# _node_blob DIR FILE|-: store FILE (or stdin) as a blob of DIR; prints "sha256:HEX SIZE"
_node_blob() {
  local dir=$1 src=$2 tmp hex
  tmp=$(mktemp "$dir/blobs/.tmp.XXXXXX") || return 1
  if [[ $src == - ]]; then cat >"$tmp"; else cp "$src" "$tmp"; fi
  hex=$(sha256sum <"$tmp" | cut -d' ' -f1)
  mv "$tmp" "$dir/blobs/sha256/$hex"
  printf 'sha256:%s %s\n' "$hex" "$(stat -c %s "$dir/blobs/sha256/$hex")"
}
# node_push_image DIR HOST REPO TAG CA [USER:PASSWORD]: push the OCI layout DIR (node_oci_image)
# to https://HOST as REPO:TAG over the distribution API: every blob, the manifests by digest,
# the top one (OCI_TOP) by tag. Prints the top digest.
node_push_image() {
  local dir=$1 host=$2 repo=$3 tag=$4 ca=$5 cred=${6:-} f hex loc top type
  local -a c=(curl -sS --fail --max-time 30 --cacert "$ca" ${cred:+-u "$cred"})
  top=$(jq -r '.manifests[0].digest' "$dir/index.json") && type=$(jq -r '.manifests[0].mediaType' "$dir/index.json") || return 1
  for f in "$dir"/blobs/sha256/*; do
    hex=${f##*/}
    # manifests and the index go up after the blobs they name
    jq -e '.mediaType? // "" | test("manifest|index")' "$f" >/dev/null 2>&1 && continue
    loc=$("${c[@]}" -X POST -D - -o /dev/null "https://$host/v2/$repo/blobs/uploads/" |
      tr -d '\r' | sed -n 's/^[Ll]ocation: //p') || return 1
    [[ $loc == http* ]] || loc="https://$host$loc"
    [[ $loc == *\?* ]] && loc+="&" || loc+="?"
    "${c[@]}" -X PUT -o /dev/null -H 'Content-Type: application/octet-stream' \
      --data-binary "@$f" "${loc}digest=sha256:$hex" || return 1
  done
  for f in "$dir"/blobs/sha256/*; do
    hex=${f##*/}
    [[ sha256:$hex == "$top" ]] && continue
    jq -e '.mediaType? // "" | test("manifest")' "$f" >/dev/null 2>&1 || continue
    "${c[@]}" -X PUT -o /dev/null -H "Content-Type: $(jq -r .mediaType "$f")" --data-binary "@$f" \
      "https://$host/v2/$repo/manifests/sha256:$hex" || return 1
  done
  "${c[@]}" -X PUT -o /dev/null -H "Content-Type: $type" --data-binary "@$dir/blobs/sha256/${top#sha256:}" \
    "https://$host/v2/$repo/manifests/$tag" || return 1
  printf '%s\n' "$top"
}

# --- the pieces of start ---------------------------------------------------------------------------
_node_bridge() {
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge || return 1
  fi
  ip addr replace "$NODE_IP/24" dev "$NODE_BRIDGE" && ip link set "$NODE_BRIDGE" up
}

_node_pause_image() {
  gcc -static -Os -s -o "$NODE_WORK/pause" "$_NODE_DIR/node/pause.c" || return 1
  node_oci_image "$NODE_WORK/pause-oci" "$NODE_WORK/pause" pause || return 1
  # ctr import names an OCI layout's image after this annotation
  jq --arg n "$NODE_PAUSE_IMAGE" '.manifests[0].annotations = {"io.containerd.image.name": $n}' \
    "$NODE_WORK/pause-oci/index.json" >"$NODE_WORK/pause-oci/index.json.tmp" &&
    mv "$NODE_WORK/pause-oci/index.json.tmp" "$NODE_WORK/pause-oci/index.json" &&
    tar -C "$NODE_WORK/pause-oci" -cf "$NODE_WORK/pause-oci.tar" oci-layout index.json blobs
}

# node_hosts_toml REGISTRY CA [HOST [CAPABILITIES]]: containerd's hosts.toml for REGISTRY (for
# config_path's REGISTRY/ directory), on stdout: its one host HOST (default REGISTRY itself) with
# CAPABILITIES (default "pull", "resolve"; a TOML list's inside) and the CA it is trusted with
node_hosts_toml() {
  local caps=${4:-'"pull", "resolve"'}
  cat <<EOF
server = "https://$1"

[host."https://${3:-$1}"]
  capabilities = [$caps]
  ca = "$2"
EOF
}

_node_containerd_config() { # _node_containerd_config REGISTRY_HOST...
  local h
  rm -rf "$NODE_WORK/certs.d" "$NODE_WORK/cni"
  mkdir -p "$NODE_WORK/certs.d" "$NODE_WORK/cni/net.d" "$NODE_WORK/containerd"
  for h in "$@"; do
    mkdir -p "$NODE_WORK/certs.d/$h" && node_hosts_toml "$h" "$NODE_REGISTRY_CA" >"$NODE_WORK/certs.d/$h/hosts.toml"
  done
  cat >"$NODE_WORK/containerd/config.toml" <<EOF
version = 2
root = "$NODE_WORK/containerd/root"
state = "$NODE_WORK/containerd/state"
# plugins that write outside root/state or that nothing here uses
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$NODE_SOCK"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$NODE_PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: a sandbox's oom_score_adj may not go below containerd's
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$NODE_WORK/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_WORK/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$NODE_WORK/certs.d"
EOF
  # isGateway off: the bridge already has the node IP, and the plugin then leaves ip_forward
  # alone (Pods reach this host's addresses on the bridge, nothing beyond); no ipMasq: no NAT
  cat >"$NODE_WORK/cni/net.d/10-pinhook-e2e.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "pinhook-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NODE_WORK/cni/ipam",
        "ranges": [[{"subnet": "$NODE_SUBNET.0/24", "rangeStart": "$NODE_SUBNET.10", "rangeEnd": "$NODE_SUBNET.250", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "$NODE_IP"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

_node_containerd_up() { _node_ctr version >/dev/null 2>&1; }

# _node_sign_cert NAME SANS: $NODE_WORK/pki/NAME.{crt,key}, a server certificate the e2e CA signs
_node_sign_cert() {
  local out="$NODE_WORK/pki/$1"
  mkdir -p "$NODE_WORK/pki"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$out.key" -subj "/CN=pinhook-e2e-$1" -out "$out.csr" 2>/dev/null &&
    openssl x509 -req -in "$out.csr" -CA "$E2E_PKI/ca.crt" -CAkey "$E2E_PKI/ca.key" -CAcreateserial \
      -days 30 -sha256 -out "$out.crt" \
      -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$2") \
      2>/dev/null && rm -f "$out.csr" && chmod 600 "$out.key"
}

_node_kubelet_files() {
  local pki="$NODE_WORK/pki"
  mkdir -p "$pki" "$NODE_MANIFESTS" "$NODE_WORK/kubelet"
  # a new one every start: the control plane's CA is new on every run.sh
  (
    set -e
    openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/kubelet-client.key" \
      -subj "/O=system:nodes/CN=system:node:$NODE_NAME" -out "$pki/kubelet-client.csr" 2>/dev/null &&
      openssl x509 -req -in "$pki/kubelet-client.csr" -CA "$E2E_PKI/ca.crt" -CAkey "$E2E_PKI/ca.key" \
        -CAcreateserial -days 30 -sha256 -out "$pki/kubelet-client.crt" \
        -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') \
        2>/dev/null
    rm -f "$pki/kubelet-client.csr"
    chmod 600 "$pki/kubelet-client.key"
  ) || return 1
  cat >"$NODE_WORK/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster:
      server: https://127.0.0.1:$E2E_APISERVER_PORT
      certificate-authority: $E2E_PKI/ca.crt
users:
  - name: kubelet
    user:
      client-certificate: $pki/kubelet-client.crt
      client-key: $pki/kubelet-client.key
contexts:
  - name: kubelet
    context: {cluster: e2e, user: kubelet}
current-context: kubelet
EOF
  # The ClusterRole system:node (bootstrap policy) is bound to nobody by default: the Node
  # authorizer is meant to grant it, and this apiserver runs RBAC only.
  _node_kubectl apply -f - >/dev/null <<EOF || return 1
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: pinhook-e2e-nodes
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:nodes}
EOF
  cat >"$NODE_WORK/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $NODE_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $NODE_KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $E2E_PKI/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
# root here lacks CAP_SYS_RESOURCE: no process may get a lower oom_score_adj than its parent
oomScoreAdj: 0
nodeStatusUpdateFrequency: 2s
staticPodPath: $NODE_MANIFESTS
fileCheckFrequency: 2s
syncFrequency: 10s
makeIPTablesUtilChains: false
failSwapOn: false
clusterDomain: cluster.local
$([[ $NODE_POD_NETWORK == 1 ]] && printf 'clusterDNS: [%s]' "$NODE_IP")
# the disk of a build machine is often fuller than the default thresholds allow
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
}

_node_ready() {
  [[ $(_node_kubectl get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
node_ready() { _node_vars; _node_ready; }

# _node_delete_other_nodes: every Node object but $NODE_NAME deleted (a scenario before the node's
# makes one with no kubelet, controller-pods-carry-template-digest). A Node with no kubelet never
# gets conditions; when the node lifecycle controller (started with the node) finds one
# unresponsive while the apiserver is away (node-availability-apiserver-restart), 1.20's
# doNoExecuteTaintingPass dereferences its missing Ready condition and kube-controller-manager
# exits: no Endpoints, no Node or Pod status from then on.
_node_delete_other_nodes() {
  local n
  for n in $(_node_kubectl get nodes -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
    [[ $n == "$NODE_NAME" ]] && continue
    _node_kubectl delete node "$n" --wait=false >/dev/null ||
      { _node_log "ERROR: cannot delete Node $n"; return 1; }
    _node_log "deleted Node $n (no kubelet: 1.20's node lifecycle controller would crash on it)"
  done
}
_node_scheduler_healthy() { [[ $(curl -s --max-time 2 "http://127.0.0.1:$NODE_SCHEDULER_PORT/healthz") == ok ]]; }

# _node_start_proc NAME CMD...: start CMD in the background, proxies unset, PID in $NODE_WORK/NAME.pid
_node_start_proc() {
  local name=$1
  shift
  env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY \
    AWS_EC2_METADATA_DISABLED=true "$@" </dev/null >"$NODE_WORK/$name.log" 2>&1 &
  echo $! >"$NODE_WORK/$name.pid"
}

node_start() { # node_start [REGISTRY_HOST...]
  _node_vars
  local t0 t
  t0=$(date +%s)
  [[ $(id -u) -eq 0 ]] || { _node_log "ERROR: the node needs root"; return 1; }
  e2e_ready || { _node_log "ERROR: the control plane in $E2E_WORK is not running (cluster.sh start)"; return 1; }
  node_stop >/dev/null 2>&1 || true # a previous run's leftovers
  _node_ensure_packages || return 1
  _node_binaries || return 1
  mkdir -p "$NODE_WORK"
  _node_record_host_state || { _node_log "ERROR: cannot record the host state"; return 1; }
  if ! _node_start_steps "$@"; then
    _node_log "ERROR: node start failed; undoing"
    node_stop
    return 1
  fi
  _node_log "node $NODE_NAME ($NODE_IP) Ready, scheduler up: ${NODE_STARTED_IN}s in all ($(($(date +%s) - t0))s with set-up)"
}

_node_start_steps() {
  local t
  _node_bridge || { _node_log "ERROR: cannot set up bridge $NODE_BRIDGE"; return 1; }
  _node_pause_image || { _node_log "ERROR: cannot build the pause image"; return 1; }
  _node_containerd_config "$@"
  t=$(date +%s)
  _node_log "starting containerd $(containerd --version | awk '{print $3}') (socket $NODE_SOCK, log $NODE_WORK/containerd.log)"
  _node_start_proc containerd containerd --config "$NODE_WORK/containerd/config.toml"
  _e2e_wait containerd "$NODE_READY_TIMEOUT" "$NODE_WORK/containerd.pid" containerd \
    "$NODE_WORK/containerd.log" _node_containerd_up || return 1
  _node_ctr -n k8s.io images import --no-unpack=false "$NODE_WORK/pause-oci.tar" >/dev/null ||
    { _node_log "ERROR: ctr images import of the pause image failed"; return 1; }

  _node_delete_other_nodes || return 1
  e2e_controllers_for_node || return 1

  _node_kubelet_files || { _node_log "ERROR: cannot write the kubelet's files"; return 1; }
  _node_log "starting kubelet $("$KUBELET" --version | awk '{print $2}') (node $NODE_NAME, IP $NODE_IP, log $NODE_WORK/kubelet.log)"
  _node_start_proc kubelet "$KUBELET" \
    --config="$NODE_WORK/kubelet-config.yaml" \
    --kubeconfig="$NODE_WORK/kubelet.kubeconfig" \
    --root-dir="$NODE_WORK/kubelet" \
    --cert-dir="$NODE_WORK/kubelet/pki" \
    --container-runtime=remote \
    --container-runtime-endpoint="unix://$NODE_SOCK" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP" \
    --resolv-conf= \
    --register-with-taints="$NODE_TAINT" \
    --v=2
  local tk
  tk=$(date +%s)
  _e2e_wait "kubelet (Node Ready)" "$NODE_READY_TIMEOUT" "$NODE_WORK/kubelet.pid" kubelet \
    "$NODE_WORK/kubelet.log" _node_ready || return 1
  _node_log "Node $NODE_NAME Ready $(($(date +%s) - tk))s after the kubelet started"

  _node_log "starting kube-scheduler (healthz http://127.0.0.1:$NODE_SCHEDULER_PORT/healthz, log $NODE_WORK/kube-scheduler.log)"
  # Against a control plane of 1.25 or later (no policy/v1beta1), the 1.20 scheduler's preemption
  # plugin would wait forever for its PodDisruptionBudget informer, and with it every Pod: it is
  # disabled there (a single node, no priorities: nothing to preempt). Nothing else differs.
  local scheduling=(--kubeconfig="$E2E_KUBECONFIG" --leader-elect=false --address=127.0.0.1
    --port="$NODE_SCHEDULER_PORT")
  if (($(_e2e_kube_minor) >= 25)); then
    cat >"$NODE_WORK/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $E2E_KUBECONFIG
leaderElection:
  leaderElect: false
healthzBindAddress: 127.0.0.1:$NODE_SCHEDULER_PORT
metricsBindAddress: 127.0.0.1:$NODE_SCHEDULER_PORT
profiles:
- schedulerName: default-scheduler
  plugins:
    postFilter:
      disabled:
      - name: DefaultPreemption
EOF
    scheduling=(--config="$NODE_WORK/kube-scheduler.yaml")
  fi
  _node_start_proc kube-scheduler "$KUBE_SCHEDULER" \
    "${scheduling[@]}" \
    --secure-port=0 \
    --v=2
  _e2e_wait kube-scheduler "$NODE_READY_TIMEOUT" "$NODE_WORK/kube-scheduler.pid" kube-scheduler \
    "$NODE_WORK/kube-scheduler.log" _node_scheduler_healthy || return 1
  # The 1.32 apiserver is OpenShift's build (../shared/kube-1.32/README.md): its ServiceAccount
  # admission adds the ConfigMap `openshift-service-ca.crt` to every Pod's token volume, which
  # OpenShift's service-ca operator publishes in every namespace, and without which the kubelet
  # mounts nothing. Here a watch of the namespaces publishes it (the cluster CA, as
  # `service-ca.crt`), as the operator would (on an upstream apiserver of 1.25+ it is merely
  # unused); kube-root-ca.crt comes from the controller manager.
  if (($(_e2e_kube_minor) >= 25)); then
    # shellcheck disable=SC2016 # ($1 and $2 are the inner script's own arguments)
    _node_start_proc service-ca-publisher bash -c '
      kubectl --kubeconfig "$1" get namespaces --watch -o name | while read -r ns; do
        kubectl --kubeconfig "$1" -n "${ns#namespace/}" create configmap openshift-service-ca.crt \
          --from-file=service-ca.crt="$2" 2>&1 | grep -v AlreadyExists
      done' service-ca-publisher "$E2E_KUBECONFIG" "$E2E_PKI/ca.crt"
  fi
  # a failure here fails only what needs the Pod network (node-pod-network-reaches-services)
  NODE_POD_NETWORK_READY=0
  if [[ $NODE_POD_NETWORK == 1 ]]; then
    if _node_pod_network; then NODE_POD_NETWORK_READY=1; else
      _node_log "WARNING: the Pod network's access to the apiserver and Services is not set up (see above)"
    fi
  fi
  echo "$NODE_POD_NETWORK_READY" >"$NODE_WORK/pod-network-ready"
  NODE_STARTED_IN=$(($(date +%s) - t))
}

# _node_pod_network (NODE_POD_NETWORK=1): what pinhook's own Pods need on this node, without
# changing the control plane the other scenarios use (it stays on 127.0.0.1):
# - the apiserver reachable from the Pod network: a TCP forwarder (socat) bound to the bridge
#   address only ($NODE_IP:$E2E_APISERVER_PORT -> 127.0.0.1), not a 0.0.0.0 bind that would
#   expose it on every interface; the `kubernetes` Service's Endpoints name it (the apiserver
#   runs --endpoint-reconciler-type=none, so nothing rewrites them);
# - kube-proxy in iptables mode, so that in-cluster clients reach `kubernetes` (10.0.0.1:443)
#   and the apiserver reaches a webhook Service: host networking would not do, since in-cluster
#   clients dial the ClusterIP anyway and the chart's Pods are on the Pod network. NodePorts on
#   the bridge address only; conntrack sysctls left alone (--conntrack-max-per-core=0...);
#   oom-score-adj 0 (no CAP_SYS_RESOURCE); Endpoints, not EndpointSlices (EndpointSliceProxying
#   off: neither the `kubernetes` Service's slice, which the apiserver's endpoint reconciler
#   would write, nor the endpointslice controllers run here). It sets net.ipv4.conf.all.route_localnet=1: recorded
#   and restored. Its rules go on stop with `kube-proxy --cleanup`.
# - each registry of NODE_REGISTRY_FORWARD (127.0.0.1:PORT) served on NODE_IP:PORT too: a TLS
#   forwarder (socat) bound to the bridge address, presenting a certificate the e2e CA signed for
#   NODE_IP (the registries' own name 127.0.0.1/localhost only), re-encrypting to the registry
#   and checking its certificate; containerd trusts the e2e CA for NODE_IP:PORT (hosts.toml).
_node_pod_network() {
  local r port i
  if [[ -n $NODE_REGISTRY_FORWARD ]]; then
    _node_sign_cert registry-forward "IP:$NODE_IP" || { _node_log "ERROR: cannot sign the registry forwarder's certificate"; return 1; }
  fi
  for r in $NODE_REGISTRY_FORWARD; do
    port=${r##*:}
    _node_log "registry forwarder on $NODE_IP:$port -> $r (TLS; log $NODE_WORK/registry-forward-$port.log)"
    _node_start_proc "registry-forward-$port" socat \
      "OPENSSL-LISTEN:$port,bind=$NODE_IP,fork,reuseaddr,cert=$NODE_WORK/pki/registry-forward.crt,key=$NODE_WORK/pki/registry-forward.key,verify=0" \
      "OPENSSL:$r,cafile=$NODE_REGISTRY_CA,commonname=localhost"
    _e2e_wait "the registry forwarder $NODE_IP:$port" "$NODE_READY_TIMEOUT" "$NODE_WORK/registry-forward-$port.pid" socat \
      "$NODE_WORK/registry-forward-$port.log" \
      curl -s -o /dev/null --max-time 2 --cacert "$E2E_PKI/ca.crt" "https://$NODE_IP:$port/v2/" || return 1
    mkdir -p "$NODE_WORK/certs.d/$NODE_IP:$port" &&
      node_hosts_toml "$NODE_IP:$port" "$E2E_PKI/ca.crt" >"$NODE_WORK/certs.d/$NODE_IP:$port/hosts.toml"
  done
  _node_log "apiserver forwarder on $NODE_IP:$E2E_APISERVER_PORT -> 127.0.0.1:$E2E_APISERVER_PORT (log $NODE_WORK/apiserver-forward.log)"
  _node_start_proc apiserver-forward socat \
    "TCP-LISTEN:$E2E_APISERVER_PORT,bind=$NODE_IP,fork,reuseaddr" "TCP:127.0.0.1:$E2E_APISERVER_PORT"
  _e2e_wait "the apiserver forwarder" "$NODE_READY_TIMEOUT" "$NODE_WORK/apiserver-forward.pid" socat \
    "$NODE_WORK/apiserver-forward.log" \
    curl -s --max-time 2 --cacert "$E2E_PKI/ca.crt" --resolve "kubernetes:$E2E_APISERVER_PORT:$NODE_IP" \
    "https://kubernetes:$E2E_APISERVER_PORT/readyz" || return 1
  _node_kubectl apply -f - >/dev/null <<EOF || { _node_log "ERROR: cannot write the kubernetes Endpoints"; return 1; }
apiVersion: v1
kind: Endpoints
metadata: {name: kubernetes, namespace: default}
subsets:
  - addresses: [{ip: "$NODE_IP"}]
    ports: [{name: https, port: $E2E_APISERVER_PORT, protocol: TCP}]
EOF
  # the cluster DNS the kubelet names (clusterDNS): Service names of the Pods' search list
  _node_log "cluster DNS on $NODE_IP:53 (node/cluster-dns.py, log $NODE_WORK/cluster-dns.log)"
  # (Debian's python3 itself; _node_start_proc starts it through `env`, which execs it, so the
  # PID is the server's once env has exec'd)
  _node_start_proc cluster-dns "$(command -v /usr/bin/python3 || command -v python3)" "$_NODE_DIR/node/cluster-dns.py" "$NODE_IP" \
    "https://127.0.0.1:$E2E_APISERVER_PORT" "$E2E_PKI/ca.crt" "$E2E_PKI/admin.token"
  # (until the forked shell has exec'd python3, its command line is still this script's)
  for ((i = 0; i < 20; i++)); do _e2e_pid_alive "$NODE_WORK/cluster-dns.pid" cluster-dns.py && break; sleep 0.1; done
  _e2e_wait "the cluster DNS" "$NODE_READY_TIMEOUT" "$NODE_WORK/cluster-dns.pid" cluster-dns.py \
    "$NODE_WORK/cluster-dns.log" grep -q 'listening on' "$NODE_WORK/cluster-dns.log" || return 1
  # A Pod reaching another Pod through a ClusterIP goes through this host: the packet arrives
  # from the bridge, is DNATed to the other Pod and routed back out of the bridge, which needs
  # ip_forward (the reply, bridged, is un-NATed by br_netfilter). Forwarding is allowed only from
  # the bridge to the bridge (chain PINHOOK-E2E-FWD, first in FORWARD): other bridges' bridged
  # frames go on as before and anything else routed is dropped, as with ip_forward off.
  _node_forwarding || { _node_log "ERROR: cannot set up forwarding within $NODE_BRIDGE"; return 1; }
  touch "$NODE_WORK/kube-proxy.ran" # from here on, stop runs kube-proxy --cleanup
  _node_log "starting kube-proxy (iptables; healthz http://127.0.0.1:$NODE_PROXY_HEALTHZ_PORT/healthz, log $NODE_WORK/kube-proxy.log)"
  _node_start_proc kube-proxy "$KUBE_PROXY" \
    --kubeconfig="$E2E_KUBECONFIG" \
    --proxy-mode=iptables \
    --hostname-override="$NODE_NAME" \
    --bind-address="$NODE_IP" \
    --cluster-cidr="$NODE_SUBNET.0/24" \
    --nodeport-addresses="$NODE_IP/32" \
    --healthz-bind-address="127.0.0.1:$NODE_PROXY_HEALTHZ_PORT" \
    --metrics-bind-address="127.0.0.1:$NODE_PROXY_METRICS_PORT" \
    --conntrack-max-per-core=0 --conntrack-min=0 \
    --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --oom-score-adj=0 \
    --feature-gates=EndpointSliceProxying=false \
    --v=2
  _e2e_wait kube-proxy "$NODE_READY_TIMEOUT" "$NODE_WORK/kube-proxy.pid" kube-proxy "$NODE_WORK/kube-proxy.log" \
    _node_proxy_synced || return 1
}
# _node_iptables_cleanup: what kube-proxy --cleanup leaves (it stops at the IPVS part without
# `ipset`, and keeps KUBE-MARK-* and its canaries): every KUBE-* chain in nat, filter and mangle and
# the rules that jump to them; only when no KUBE-* chain existed before the node started
_node_iptables_cleanup() {
  local t rule c
  grep -qx 'existed iptables-kube-chains' "$NODE_WORK/host-state" 2>/dev/null && return 0
  for t in nat filter mangle; do
    iptables -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -vE '^-A KUBE-' |
      while IFS= read -r rule; do
        eval "iptables -t $t -D ${rule#-A }" 2>/dev/null || true
      done
    for c in $(iptables -t "$t" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[A-Z0-9-]*\)$/\1/p'); do
      iptables -t "$t" -F "$c" 2>/dev/null || true
    done
    for c in $(iptables -t "$t" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[A-Z0-9-]*\)$/\1/p'); do
      iptables -t "$t" -X "$c" 2>/dev/null || true
    done
  done
  if grep -q 'KUBE-' <<<"$(iptables-save 2>/dev/null)"; then
    _node_log "WARNING: iptables rules of kube-proxy left: $(iptables-save | grep -c 'KUBE-') lines"
  else
    _node_log "no KUBE-* iptables chain or rule left"
  fi
}

_node_forwarding() {
  iptables -N PINHOOK-E2E-FWD 2>/dev/null || iptables -F PINHOOK-E2E-FWD || return 1
  iptables -A PINHOOK-E2E-FWD -i "$NODE_BRIDGE" -o "$NODE_BRIDGE" -j ACCEPT &&
    iptables -A PINHOOK-E2E-FWD -m physdev --physdev-is-bridged -j RETURN &&
    iptables -A PINHOOK-E2E-FWD -j DROP || return 1
  iptables -C FORWARD -j PINHOOK-E2E-FWD 2>/dev/null || iptables -I FORWARD 1 -j PINHOOK-E2E-FWD || return 1
  sysctl -qw net.ipv4.ip_forward=1
}
_node_forwarding_cleanup() {
  while iptables -D FORWARD -j PINHOOK-E2E-FWD 2>/dev/null; do :; done
  iptables -F PINHOOK-E2E-FWD 2>/dev/null && iptables -X PINHOOK-E2E-FWD 2>/dev/null
  return 0
}

# kube-proxy has written the rules of the `kubernetes` Service
_node_proxy_synced() {
  curl -s --max-time 2 "http://127.0.0.1:$NODE_PROXY_HEALTHZ_PORT/healthz" >/dev/null &&
    grep -q 'default/kubernetes:https' <<<"$(iptables -t nat -S KUBE-SERVICES 2>/dev/null)"
}

# --- stop --------------------------------------------------------------------------------------------
# _node_kill NAME [COMMAND]: the PID in NAME.pid, if its command line has COMMAND (NAME)
_node_kill() { _e2e_stop_pid "$NODE_WORK/$1.pid" "$1" "${2:-$1}" _node_log; }

# the containerd shims of this node: their command line names this node's socket
_node_shim_pids() {
  local p
  for p in /proc/[0-9]*; do
    _e2e_cmdline_has "${p#/proc/}" "containerd-shim.* -address $NODE_SOCK" && echo "${p#/proc/}"
  done
}

node_stop() {
  _node_vars
  local p s v deadline
  [[ -d $NODE_WORK ]] || return 0
  # Static pods first, then every Pod bound to the node: the kubelet stops them itself, through
  # the CRI (CNI DEL, netns and shm unmounted), while it still runs. Bounded: 30 s.
  rm -f "$NODE_MANIFESTS"/*
  if _e2e_pid_alive "$NODE_WORK/kubelet.pid" kubelet && e2e_ready; then
    _node_kubectl delete pods -A --field-selector "spec.nodeName=$NODE_NAME" --grace-period=1 \
      --wait=false >/dev/null 2>&1 || true
    deadline=$(($(date +%s) + 30))
    while [[ -S $NODE_SOCK && -n $(_node_ctr -n k8s.io tasks ls -q 2>/dev/null) ]]; do
      if (($(date +%s) >= deadline)); then
        _node_log "containers still running 30 s after their Pods were deleted: $(_node_ctr -n k8s.io tasks ls -q | tr '\n' ' ')"
        break
      fi
      sleep 0.5
    done
  fi
  _node_kill kube-scheduler
  _node_kill service-ca-publisher
  pkill -f -- "--kubeconfig $E2E_KUBECONFIG get namespaces --watch" 2>/dev/null || true
  _node_kill kube-proxy
  if [[ -e $NODE_WORK/kube-proxy.ran ]]; then
    # (it exits 255 at the IPVS part here, no `ipset`, after the iptables part)
    if _node_binaries >/dev/null 2>&1; then
      "$KUBE_PROXY" --cleanup >"$NODE_WORK/kube-proxy-cleanup.log" 2>&1 || true
    fi
    _node_iptables_cleanup
    rm -f "$NODE_WORK/kube-proxy.ran"
  fi
  _node_forwarding_cleanup
  # the forwarders' connections (forked children) first, then the forwarders
  for p in "$NODE_WORK"/apiserver-forward.pid "$NODE_WORK"/registry-forward-*.pid; do
    [[ -s $p ]] || continue
    s=$(basename "$p" .pid)
    if _e2e_pid_alive "$p" socat; then
      for v in $(ps -o pid= --ppid "$(<"$p")"); do kill "$v" 2>/dev/null || true; done
    fi
    _node_kill "$s" socat
  done
  _node_kill cluster-dns cluster-dns.py
  _node_kill kubelet
  # whatever still runs: killed through containerd, then its records deleted
  if _e2e_pid_alive "$NODE_WORK/containerd.pid" containerd && [[ -S $NODE_SOCK ]]; then
    for s in $(_node_ctr -n k8s.io tasks ls -q 2>/dev/null); do
      _node_ctr -n k8s.io tasks kill -s SIGKILL "$s" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for s in $(_node_ctr -n k8s.io containers ls -q 2>/dev/null); do
      _node_ctr -n k8s.io tasks delete -f "$s" >/dev/null 2>&1 || true
      _node_ctr -n k8s.io containers delete "$s" >/dev/null 2>&1 || true
    done
  fi
  _node_kill containerd
  for p in $(_node_shim_pids); do
    _node_log "killing a leftover shim (pid $p)"
    kill -KILL "$p" 2>/dev/null || true
  done
  # mounts under the node's dirs (overlay rootfs, shm, netns, the kubelet's volumes), deepest first
  while read -r p; do
    umount -l "$p" 2>/dev/null || true
  done < <(findmnt -rn -o TARGET | grep -E "^($NODE_WORK|/run/containerd)/" | sort -r)
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && { ip link del "$NODE_BRIDGE" && _node_log "removed bridge $NODE_BRIDGE"; }
  # the kubelet's cgroups (cgroupfs driver: /kubepods in every hierarchy), deepest first
  for p in /sys/fs/cgroup/*/kubepods; do
    [[ -d $p ]] || continue
    _node_existed "$p" && continue
    find "$p" -depth -type d -exec rmdir {} + 2>/dev/null || _node_log "WARNING: could not remove all of $p"
  done
  for p in "${NODE_HOST_PATHS[@]}"; do
    [[ -e $p ]] && ! _node_existed "$p" && rm -rf --one-file-system "$p"
  done
  if [[ -s $NODE_WORK/host-state ]]; then
    while read -r s p v; do
      [[ $s == sysctl && $(sysctl -n "$p") != "$v" ]] && sysctl -qw "$p=$v" && _node_log "restored $p = $v"
    done <"$NODE_WORK/host-state"
    rm -f "$NODE_WORK/host-state"
  fi
  # the runtime's files (image store, snapshots: GBs), not the logs
  rm -rf --one-file-system "$NODE_WORK/containerd/root" "$NODE_WORK/containerd/state" "$NODE_WORK/containerd/runc" "$NODE_SOCK.ttrpc" \
    "$NODE_WORK/kubelet" "$NODE_WORK/cni/ipam" 2>/dev/null || _node_log "WARNING: could not remove all runtime files under $NODE_WORK"
  return 0
}

node_env() {
  _node_vars
  printf 'export NODE_NAME=%q\n' "$NODE_NAME"
  printf 'export NODE_IP=%q\n' "$NODE_IP"
  printf 'export NODE_MANIFESTS=%q\n' "$NODE_MANIFESTS"
  printf 'export NODE_SOCK=%q\n' "$NODE_SOCK"
  printf 'export NODE_TAINT=%q\n' "$NODE_TAINT"
  printf 'export NODE_CERTS_D=%q\n' "$NODE_WORK/certs.d"
  printf 'export NODE_POD_NETWORK_READY=%q\n' "$(cat "$NODE_WORK/pod-network-ready" 2>/dev/null || echo 0)"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  case "${1:-}" in
    start) node_start "${@:2}" ;;
    stop) node_stop ;;
    status) if node_ready; then echo ready; else echo "not ready"; exit 1; fi ;;
    env) node_env ;;
    *) echo "usage: $0 start [REGISTRY_HOST...]|stop|status|env" >&2; exit 2 ;;
  esac
fi
