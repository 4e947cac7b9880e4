#!/usr/bin/env bash
# A throwaway Kubernetes control plane for pinhook's end-to-end tier:
# etcd + a real kube-apiserver + a real kube-controller-manager (v1.20.2, see
# build-kube-apiserver.sh), all on 127.0.0.1 only. The controller manager runs
# the workload controllers only (deployment, replicaset, statefulset,
# daemonset, job, cronjob): Deployments get ReplicaSets, those get Pods, and
# every object a controller writes goes through the admission webhooks like a
# user's. No scheduler, no kubelet: Pods are stored and stay Pending.
#
# Usage:
#   tests/e2e/cluster.sh start     # build/install if needed, start, wait ready
#   tests/e2e/cluster.sh stop      # kill all three (by recorded PID), keep logs
#   tests/e2e/cluster.sh env       # print `export KUBECONFIG=...` lines (eval-able)
#   tests/e2e/cluster.sh status    # exit 0 when the apiserver answers /readyz
#                                  # and the controller manager /healthz
#   tests/e2e/cluster.sh ns NAME [KEY=VALUE...]
#                                  # create namespace NAME (labelled) + its `default` SA
#   tests/e2e/cluster.sh cert DIR [DNS-or-IP...]
#                                  # write DIR/tls.crt, DIR/tls.key (SANs
#                                  # 127.0.0.1, localhost + extras) signed by
#                                  # the e2e CA (DIR/ca.crt) -- for the webhook
# Or source it and call the e2e_* functions (e2e_start, e2e_stop, e2e_env,
# e2e_ns, e2e_cert, e2e_ready, e2e_controllers_freeze, e2e_controllers_thaw).
# Sourcing does not change shell options.
#
# Environment:
#   E2E_WORK            work dir (default /tmp/pinhook-e2e): pki/, logs, PIDs,
#                       kubeconfig, etcd data
#   PINHOOK_E2E_CACHE   where build-kube-apiserver.sh caches the binaries
#                       (default /var/cache/pinhook-e2e)
#   KUBE_APISERVER      use this kube-apiserver binary instead of building one
#   KUBE_CONTROLLER_MANAGER
#                       use this kube-controller-manager binary (default: the
#                       one build-kube-apiserver.sh put beside the apiserver)
#   E2E_APISERVER_PORT  (6443)  E2E_ETCD_PORT (2379)  E2E_ETCD_PEER_PORT (2380)
#   E2E_KCM_PORT        (10252) the controller manager's plain-HTTP /healthz,
#                       on 127.0.0.1 (its HTTPS port is off: --secure-port=0)
#   E2E_READY_TIMEOUT   seconds to wait for readiness (120)
#
# The apiserver presents $E2E_PKI/webhook-client.crt (CA: webhook-client-ca.crt) to every
# admission webhook that asks for a client certificate (--admission-control-config-file, see
# _e2e_webhook_client).
#
# Trap-friendly: `trap 'tests/e2e/cluster.sh stop' EXIT` in a scenario script.

_E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

_e2e_vars() {
  E2E_WORK="${E2E_WORK:-/tmp/pinhook-e2e}"
  PINHOOK_E2E_CACHE="${PINHOOK_E2E_CACHE:-/var/cache/pinhook-e2e}"
  E2E_APISERVER_PORT="${E2E_APISERVER_PORT:-6443}"
  E2E_ETCD_PORT="${E2E_ETCD_PORT:-2379}"
  E2E_ETCD_PEER_PORT="${E2E_ETCD_PEER_PORT:-2380}"
  E2E_KCM_PORT="${E2E_KCM_PORT:-10252}"
  E2E_READY_TIMEOUT="${E2E_READY_TIMEOUT:-120}"
  E2E_PKI="$E2E_WORK/pki"
  E2E_KUBECONFIG="$E2E_WORK/kubeconfig"
}

_e2e_log() { printf '%s [cluster] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

# _e2e_cmdline_has PID REGEX: process PID runs and its command line (arguments joined by spaces)
# matches the grep REGEX. Read whole first: `tr … | grep -q` under pipefail fails at random when
# grep exits on a match before tr wrote its last chunk (a command line over a page: SIGPIPE).
_e2e_cmdline_has() {
  local cmdline
  cmdline=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
  grep -q -- "$2" <<<"$cmdline"
}

# pid_alive PIDFILE NAME: the PID in PIDFILE is running and is NAME
_e2e_pid_alive() {
  local pidfile=$1 name=$2 pid
  [[ -s $pidfile ]] || return 1
  pid=$(<"$pidfile")
  [[ -d /proc/$pid ]] || return 1
  _e2e_cmdline_has "$pid" "$name"
}

_e2e_port_busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

_e2e_ensure_etcd() {
  command -v etcd >/dev/null 2>&1 && return 0
  _e2e_log "installing etcd-server (apt)"
  # The package's maintainer scripts would start the distro etcd service on
  # 127.0.0.1:2379; forbid service starts during the install if nothing else does.
  local made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 install -y --no-install-recommends etcd-server >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get -qq update &&
      DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 install -y --no-install-recommends etcd-server >/dev/null
  } || rc=$?
  ((made_policy)) && rm -f /usr/sbin/policy-rc.d
  ((rc == 0)) || { _e2e_log "ERROR: apt-get install etcd-server failed"; return 1; }
  # on a systemd host the unit may still be enabled; make sure it is not running
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    systemctl stop etcd || true
  fi
  command -v etcd >/dev/null 2>&1
}

_e2e_ensure_apiserver() {
  if [[ -n ${KUBE_APISERVER:-} ]]; then
    [[ -x $KUBE_APISERVER ]] || { _e2e_log "ERROR: KUBE_APISERVER=$KUBE_APISERVER is not executable"; return 1; }
    return 0
  fi
  KUBE_APISERVER=$(PINHOOK_E2E_CACHE="$PINHOOK_E2E_CACHE" "$_E2E_DIR/build-kube-apiserver.sh" | tail -n1) || {
    _e2e_log "ERROR: build-kube-apiserver.sh failed"
    return 1
  }
  [[ -x $KUBE_APISERVER ]]
}

# After _e2e_ensure_apiserver: build-kube-apiserver.sh builds both binaries into one directory.
_e2e_ensure_controller_manager() {
  if [[ -z ${KUBE_CONTROLLER_MANAGER:-} ]]; then
    KUBE_CONTROLLER_MANAGER="$(dirname "$KUBE_APISERVER")/kube-controller-manager-${KUBE_APISERVER##*/kube-apiserver-}"
  fi
  [[ -x $KUBE_CONTROLLER_MANAGER ]] || {
    _e2e_log "ERROR: kube-controller-manager $KUBE_CONTROLLER_MANAGER is not executable (set KUBE_CONTROLLER_MANAGER)"
    return 1
  }
}

# _e2e_sign_cert OUT_PREFIX CN SANS: key + cert signed by the e2e CA
_e2e_sign_cert() {
  local out=$1 cn=$2 sans=$3
  openssl req -new -newkey rsa:2048 -nodes -keyout "$out.key" -subj "/CN=$cn" -out "$out.csr" 2>/dev/null &&
    openssl x509 -req -in "$out.csr" -CA "$E2E_PKI/ca.crt" -CAkey "$E2E_PKI/ca.key" -CAcreateserial \
      -days 30 -sha256 -out "$out.crt" \
      -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$sans") \
      2>/dev/null &&
    rm -f "$out.csr"
}

_e2e_pki() {
  [[ -s $E2E_PKI/admin.token && -s $E2E_PKI/apiserver.crt && -s $E2E_PKI/sa.pub ]] && return 0
  _e2e_log "generating PKI in $E2E_PKI"
  mkdir -p "$E2E_PKI"
  (
    set -e
    cd "$E2E_PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -sha256 \
      -subj "/CN=pinhook-e2e-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    _e2e_sign_cert apiserver kube-apiserver \
      "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >admin.token
    printf '%s,admin,admin-uid,"system:masters"\n' "$(<admin.token)" >tokens.csv
    chmod 600 ca.key apiserver.key sa.key admin.token tokens.csv
  )
  local f
  for f in ca.crt ca.key apiserver.crt apiserver.key sa.key sa.pub admin.token tokens.csv; do
    [[ -s $E2E_PKI/$f ]] || { _e2e_log "ERROR: PKI file $E2E_PKI/$f missing (openssl failed?)"; return 1; }
  done
}

# _e2e_webhook_client: the client certificate the apiserver presents to admission webhooks that
# ask for one (a CA of its own, webhook-client-ca.crt, so that no other e2e certificate passes),
# the kubeconfig naming it for every webhook host (user `*`), and the AdmissionConfiguration
# pointing both webhook plugins at that kubeconfig. Always on: a webhook that asks for no client
# certificate (pinhook without --client-ca-file) is sent none.
_e2e_webhook_client() {
  E2E_ADMISSION_CONFIG="$E2E_WORK/admission-config.yaml"
  [[ -s $E2E_PKI/webhook-client.crt && -s $E2E_ADMISSION_CONFIG ]] && return 0
  (
    set -e
    cd "$E2E_PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout webhook-client-ca.key -out webhook-client-ca.crt \
      -days 30 -sha256 -subj "/CN=pinhook-e2e-webhook-client-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -new -newkey rsa:2048 -nodes -keyout webhook-client.key -subj "/CN=kube-apiserver-webhook-client" \
      -out webhook-client.csr 2>/dev/null
    openssl x509 -req -in webhook-client.csr -CA webhook-client-ca.crt -CAkey webhook-client-ca.key \
      -CAcreateserial -days 30 -sha256 -out webhook-client.crt \
      -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') 2>/dev/null
    rm -f webhook-client.csr
    chmod 600 webhook-client-ca.key webhook-client.key
  ) || return 1
  cat >"$E2E_WORK/webhook-client.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: $E2E_PKI/webhook-client.crt
      client-key: $E2E_PKI/webhook-client.key
EOF
  cat >"$E2E_ADMISSION_CONFIG" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: $E2E_WORK/webhook-client.kubeconfig
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: $E2E_WORK/webhook-client.kubeconfig
EOF
}

_e2e_write_kubeconfig() {
  local tmp="$E2E_KUBECONFIG.tmp"
  rm -f "$tmp"
  KUBECONFIG="$tmp" kubectl config set-cluster e2e --server="https://127.0.0.1:$E2E_APISERVER_PORT" \
    --certificate-authority="$E2E_PKI/ca.crt" --embed-certs=true >/dev/null &&
    KUBECONFIG="$tmp" kubectl config set-credentials admin --token="$(<"$E2E_PKI/admin.token")" >/dev/null &&
    KUBECONFIG="$tmp" kubectl config set-context e2e --cluster=e2e --user=admin --namespace=default >/dev/null &&
    KUBECONFIG="$tmp" kubectl config use-context e2e >/dev/null &&
    mv "$tmp" "$E2E_KUBECONFIG"
}

e2e_ready() {
  _e2e_vars
  [[ -s $E2E_KUBECONFIG ]] || return 1
  [[ $(kubectl --kubeconfig "$E2E_KUBECONFIG" --request-timeout=5s get --raw /readyz 2>/dev/null) == ok ]]
}

_e2e_wait() { # _e2e_wait WHAT TIMEOUT PIDFILE NAME LOG CMD...
  local what=$1 timeout=$2 pidfile=$3 name=$4 logf=$5
  shift 5
  local deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    # Looked at twice before it counts as exited: once, a fresh machine saw the cluster DNS
    # "exit" while it was starting and kept running (suspected: its command line read during
    # `env`'s exec of python3; not reproduced).
    if ! _e2e_pid_alive "$pidfile" "$name" && ! { sleep 0.2 && _e2e_pid_alive "$pidfile" "$name"; }; then
      _e2e_log "ERROR: $what exited; last lines of $logf:"
      tail -n 30 "$logf" >&2
      return 1
    fi
    if (($(date +%s) >= deadline)); then
      _e2e_log "ERROR: $what not ready after ${timeout}s; last lines of $logf:"
      tail -n 30 "$logf" >&2
      return 1
    fi
    sleep 0.5
  done
}

# The controller manager's /healthz: plain HTTP on 1.20; HTTPS with its self-signed
# certificate from 1.24 on, where its insecure port is gone (/healthz is open to anyone there).
_e2e_kcm_healthy() {
  [[ $(curl -s --max-time 2 "http://127.0.0.1:$E2E_KCM_PORT/healthz") == ok ]] ||
    [[ $(curl -sk --max-time 2 "https://127.0.0.1:$E2E_KCM_PORT/healthz") == ok ]]
}

# _e2e_kube_minor: the minor version of $KUBE_APISERVER (20 for v1.20.2, 32 for v1.32.13).
_e2e_kube_minor() {
  local version
  version=$("$KUBE_APISERVER" --version 2>/dev/null | awk '{print $2}')
  version=${version#v1.}
  echo "${version%%.*}"
}

_e2e_etcd_healthy() { [[ $(curl -s --max-time 2 "http://127.0.0.1:$E2E_ETCD_PORT/health") == *'"health":"true"'* ]]; }

e2e_start() {
  _e2e_vars
  local t0
  t0=$(date +%s)
  if _e2e_pid_alive "$E2E_WORK/kube-apiserver.pid" kube-apiserver && e2e_ready &&
    _e2e_pid_alive "$E2E_WORK/kube-controller-manager.pid" kube-controller-manager && _e2e_kcm_healthy; then
    _e2e_log "already running (KUBECONFIG=$E2E_KUBECONFIG)"
    return 0
  fi
  e2e_stop >/dev/null 2>&1 || true # leftovers of a half-started run
  command -v kubectl >/dev/null 2>&1 || { _e2e_log "ERROR: kubectl not on PATH"; return 1; }
  _e2e_ensure_etcd || return 1
  _e2e_ensure_apiserver || return 1
  _e2e_ensure_controller_manager || return 1
  mkdir -p "$E2E_WORK"
  _e2e_pki || { _e2e_log "ERROR: PKI generation failed"; return 1; }
  _e2e_webhook_client || { _e2e_log "ERROR: webhook client certificate generation failed"; return 1; }
  _e2e_write_kubeconfig || { _e2e_log "ERROR: writing kubeconfig failed"; return 1; }

  local p
  for p in "$E2E_ETCD_PORT" "$E2E_ETCD_PEER_PORT" "$E2E_APISERVER_PORT" "$E2E_KCM_PORT"; do
    if _e2e_port_busy "$p"; then
      _e2e_log "ERROR: port $p on this host is already in use:"
      ss -Htlnp "sport = :$p" >&2
      return 1
    fi
  done

  # proxies must never see loopback traffic of the apiserver (webhook calls)
  local -a noproxy=(env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY)

  # --- etcd ---
  rm -rf "$E2E_WORK/etcd-data"
  mkdir -p "$E2E_WORK/etcd-data"
  chmod 700 "$E2E_WORK/etcd-data"
  _e2e_log "starting etcd $(etcd --version 2>/dev/null | awk 'NR==1{print $3}') on 127.0.0.1:$E2E_ETCD_PORT (log: $E2E_WORK/etcd.log)"
  "${noproxy[@]}" etcd \
    --name pinhook-e2e \
    --data-dir "$E2E_WORK/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$E2E_ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$E2E_ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$E2E_ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$E2E_ETCD_PEER_PORT" \
    --initial-cluster "pinhook-e2e=http://127.0.0.1:$E2E_ETCD_PEER_PORT" \
    --initial-cluster-state new \
    --logger zap --log-outputs stderr \
    </dev/null >"$E2E_WORK/etcd.log" 2>&1 &
  echo $! >"$E2E_WORK/etcd.pid"
  _e2e_wait etcd 30 "$E2E_WORK/etcd.pid" etcd "$E2E_WORK/etcd.log" _e2e_etcd_healthy || return 1

  # --- kube-apiserver ---
  _e2e_log "starting $("$KUBE_APISERVER" --version) on https://127.0.0.1:$E2E_APISERVER_PORT (log: $E2E_WORK/kube-apiserver.log)"
  # Flags removed since 1.20 (the insecure port went in 1.24) are passed to older ones only.
  local legacy=() minor
  minor=$(_e2e_kube_minor)
  ((minor < 24)) && legacy+=(--insecure-port=0)
  # Image volumes (spec.volumes[].image) are alpha in 1.31 and 1.32, behind their gate.
  ((minor >= 31 && minor < 33)) && legacy+=(--feature-gates=ImageVolume=true)
  "${noproxy[@]}" "$KUBE_APISERVER" \
    "${legacy[@]}" \
    --etcd-servers="http://127.0.0.1:$E2E_ETCD_PORT" \
    --bind-address=127.0.0.1 \
    --secure-port="$E2E_APISERVER_PORT" \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=RBAC \
    --enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
    --admission-control-config-file="$E2E_ADMISSION_CONFIG" \
    --token-auth-file="$E2E_PKI/tokens.csv" \
    --client-ca-file="$E2E_PKI/ca.crt" \
    --tls-cert-file="$E2E_PKI/apiserver.crt" \
    --tls-private-key-file="$E2E_PKI/apiserver.key" \
    --service-account-key-file="$E2E_PKI/sa.pub" \
    --service-account-signing-key-file="$E2E_PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --v=2 \
    </dev/null >"$E2E_WORK/kube-apiserver.log" 2>&1 &
  echo $! >"$E2E_WORK/kube-apiserver.pid"
  _e2e_wait kube-apiserver "$E2E_READY_TIMEOUT" "$E2E_WORK/kube-apiserver.pid" kube-apiserver \
    "$E2E_WORK/kube-apiserver.log" e2e_ready || return 1

  : >"$E2E_WORK/kube-controller-manager.log"
  _e2e_start_kcm "$E2E_KCM_CONTROLLERS" || return 1
  _e2e_log "ready in $(($(date +%s) - t0))s; export KUBECONFIG=$E2E_KUBECONFIG"
}

# The workload controllers (the tier without a node), and the ones a node needs besides them
# (node.sh: Services get Endpoints, ServiceAccounts get token Secrets, deleted namespaces go,
# Nodes get their lifecycle taints, a deleted Deployment's ReplicaSets and Pods go: `helm
# uninstall` of the chart, node-chart-uninstall-admits-again; PodDisruptionBudgets get their
# status, which the Eviction API reads: node-availability-eviction)
E2E_KCM_CONTROLLERS=deployment,replicaset,statefulset,daemonset,job,cronjob
E2E_KCM_NODE_CONTROLLERS=endpoint,serviceaccount-token,namespace,nodelifecycle,garbagecollector,disruption

# _e2e_start_kcm CONTROLLERS: start kube-controller-manager with these controllers, wait for /healthz
_e2e_start_kcm() {
  # No leader election (one instance, and no Lease to wait for), no HTTPS serving (no serving
  # cert, no delegated authn/authz lookups); the deprecated plain-HTTP port on 127.0.0.1 serves
  # /healthz. The admin kubeconfig and --use-service-account-credentials=false: one identity
  # for all controllers. The SA key and root CA are used by the serviceaccount-token
  # controller only (node.sh). From 1.24 on there is no plain-HTTP port: /healthz is served over
  # HTTPS with a self-signed certificate (and needs no authentication), on the same port.
  local serving=(--secure-port=0 --address=127.0.0.1 --port="$E2E_KCM_PORT")
  (($(_e2e_kube_minor) >= 24)) && serving=(--secure-port="$E2E_KCM_PORT" --bind-address=127.0.0.1
    --authentication-skip-lookup=true --cert-dir="$E2E_WORK/kcm-certs")
  _e2e_log "starting kube-controller-manager $("$KUBE_CONTROLLER_MANAGER" --version | awk '{print $2}') ($1; healthz 127.0.0.1:$E2E_KCM_PORT/healthz, log: $E2E_WORK/kube-controller-manager.log)"
  env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY \
    "$KUBE_CONTROLLER_MANAGER" \
    --kubeconfig="$E2E_KUBECONFIG" \
    --controllers="$1" \
    --leader-elect=false \
    "${serving[@]}" \
    --use-service-account-credentials=false \
    --service-account-private-key-file="$E2E_PKI/sa.key" \
    --root-ca-file="$E2E_PKI/ca.crt" \
    --v=2 \
    </dev/null >>"$E2E_WORK/kube-controller-manager.log" 2>&1 &
  echo $! >"$E2E_WORK/kube-controller-manager.pid"
  _e2e_wait kube-controller-manager "$E2E_READY_TIMEOUT" "$E2E_WORK/kube-controller-manager.pid" kube-controller-manager \
    "$E2E_WORK/kube-controller-manager.log" _e2e_kcm_healthy
}

# e2e_controllers_for_node: restart the controller manager with the controllers a node needs
# too (E2E_KCM_NODE_CONTROLLERS), unless it runs them already. node.sh calls it: the tier's
# scenarios before the node's rely on namespaces that never finish deleting.
e2e_controllers_for_node() {
  _e2e_vars
  local pidfile="$E2E_WORK/kube-controller-manager.pid"
  if _e2e_pid_alive "$pidfile" kube-controller-manager &&
    _e2e_cmdline_has "$(<"$pidfile")" "--controllers=.*,$E2E_KCM_NODE_CONTROLLERS"; then
    return 0
  fi
  _e2e_kill kube-controller-manager
  _e2e_ensure_apiserver && _e2e_ensure_controller_manager || return 1
  # Since 1.22 a Pod's token volume also projects the ConfigMap kube-root-ca.crt, which this
  # controller publishes in every namespace.
  local extra=""
  (($(_e2e_kube_minor) >= 22)) && extra=,root-ca-cert-publisher
  _e2e_start_kcm "$E2E_KCM_CONTROLLERS,$E2E_KCM_NODE_CONTROLLERS$extra"
}

# _e2e_stop_pid PIDFILE NAME COMMAND LOGGER: the process whose PID PIDFILE holds, if its command
# line has COMMAND: SIGTERM (and SIGCONT, in case it was frozen: e2e_controllers_freeze), SIGKILL
# after 10 s; then PIDFILE removed. LOGGER (a function) logs what happened, naming NAME.
_e2e_stop_pid() {
  local pidfile=$1 name=$2 command=$3 logger=$4 pid _
  if _e2e_pid_alive "$pidfile" "$command"; then
    pid=$(<"$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      [[ -d /proc/$pid ]] || break
      sleep 0.2
    done
    if [[ -d /proc/$pid ]]; then
      "$logger" "$name (pid $pid) ignored SIGTERM for 10s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    "$logger" "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}
_e2e_kill() { _e2e_stop_pid "$E2E_WORK/$1.pid" "$1" "$1" _e2e_log; } # _e2e_kill NAME

e2e_stop() {
  _e2e_vars
  _e2e_kill kube-controller-manager
  _e2e_kill kube-apiserver
  _e2e_kill etcd
  return 0
}

# e2e_controllers_freeze / e2e_controllers_thaw: SIGSTOP / SIGCONT the controller manager, for a
# scenario about objects that no controller may touch meanwhile. Its watches resume (or re-list)
# on thaw, and it then catches up with what happened.
e2e_controllers_freeze() { _e2e_vars; _e2e_signal kube-controller-manager STOP; }
e2e_controllers_thaw() { _e2e_vars; _e2e_signal kube-controller-manager CONT; }
_e2e_signal() { # _e2e_signal NAME SIGNAL: signal the recorded PID of NAME
  _e2e_pid_alive "$E2E_WORK/$1.pid" "$1" || { _e2e_log "ERROR: $1 is not running"; return 1; }
  kill "-$2" "$(<"$E2E_WORK/$1.pid")"
}

e2e_env() {
  _e2e_vars
  printf 'export KUBECONFIG=%q\n' "$E2E_KUBECONFIG"
  printf 'export E2E_WORK=%q\n' "$E2E_WORK"
  printf 'export E2E_CA_CERT=%q\n' "$E2E_PKI/ca.crt"
  printf 'export E2E_CA_KEY=%q\n' "$E2E_PKI/ca.key"
  printf 'export E2E_APISERVER_URL=%q\n' "https://127.0.0.1:$E2E_APISERVER_PORT"
}

# e2e_ns NAME [KEY=VALUE...]: namespace, with these labels from its creation on
# (e.g. pinhook.dev/mode=audit), + `default` ServiceAccount (the serviceaccount
# controller does not run; the ServiceAccount admission plugin rejects pods without it)
e2e_ns() {
  _e2e_vars
  local ns=$1 labels="" kv
  shift
  for kv in "$@"; do
    [[ $kv == ?*=* ]] || { _e2e_log "ERROR: e2e_ns: label '$kv' is not KEY=VALUE"; return 1; }
    labels+=$(printf '\n    "%s": "%s"' "${kv%%=*}" "${kv#*=}")
  done
  kubectl --kubeconfig "$E2E_KUBECONFIG" apply -f - >/dev/null <<EOF || return 1
apiVersion: v1
kind: Namespace
metadata:
  name: $ns${labels:+
  labels:$labels}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: default
  namespace: $ns
automountServiceAccountToken: false
EOF
}

# e2e_cert DIR [SAN...]: serving cert for a local webhook, signed by the e2e CA
e2e_cert() {
  _e2e_vars
  local dir=$1 sans="IP:127.0.0.1,DNS:localhost" s
  shift
  for s in "$@"; do
    if [[ $s =~ ^[0-9.]+$ || $s == *:*:* ]]; then sans+=",IP:$s"; else sans+=",DNS:$s"; fi
  done
  [[ -s $E2E_PKI/ca.key ]] || _e2e_pki || return 1
  mkdir -p "$dir"
  _e2e_sign_cert "$dir/tls" pinhook-webhook "$sans" || return 1
  cp "$E2E_PKI/ca.crt" "$dir/ca.crt"
  printf '%s\n' "$dir/tls.crt" "$dir/tls.key" "$dir/ca.crt"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  case "${1:-}" in
    start) e2e_start ;;
    stop) e2e_stop ;;
    env) e2e_env ;;
    status) if e2e_ready && _e2e_kcm_healthy; then echo ready; else echo "not ready"; exit 1; fi ;;
    ns) [[ -n ${2:-} ]] || { echo "usage: $0 ns NAME [KEY=VALUE...]" >&2; exit 2; }; e2e_ns "${@:2}" ;;
    cert) [[ -n ${2:-} ]] || { echo "usage: $0 cert DIR [SAN...]" >&2; exit 2; }; e2e_cert "${@:2}" ;;
    *) echo "usage: $0 start|stop|env|status|ns NAME [KEY=VALUE...]|cert DIR [SAN...]" >&2; exit 2 ;;
  esac
fi
