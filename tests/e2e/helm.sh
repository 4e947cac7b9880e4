# shellcheck shell=bash
# The Helm scenarios' steps (scenarios/helm3-chart-lifecycle.sh and helm4-chart-lifecycle.sh call
# helm_scenario 3 and 4), sourced by run.sh: the chart (charts/pinhook) installed, upgraded and
# uninstalled by a real `helm` against the e2e tier's real kube-apiserver, with pinhook managing
# its own certificates (tls.mode managed). The chart runs in url mode (webhook.url, as
# overlays/local-url): there is no kubelet here, so the pinhook the webhooks call is started by
# the scenario, with the flags the chart's Deployment passes (PINHOOK_TLS_*), as the chart's own
# ServiceAccount (a TokenRequest token), so the chart's RBAC is what is tested. Uses lib.sh's
# helpers (K, klog, log, ok, bad, expect_eq, wait_until, free_port, stop_pid, token_kubeconfig,
# image, pinned, deployment_yaml, $RUN, $ROOT, $PINHOOK_BIN).
#
# Steps, each asserted:
#   1. `helm install` (release namespace created by helm): the rendered manifest has no caBundle
#      and the Secret no data;
#   2. pinhook starts, one replica takes the Lease, fills the Secret and writes the caBundle of
#      every webhook of both configurations; it serves the Secret's certificate;
#   3. a Deployment in an enforce namespace the release's webhooks select is stored pinned, and
#      this pinhook reviewed it;
#   4. `helm upgrade` with changed values succeeds, changes those values, and leaves the Secret's
#      data and every caBundle as they were;
#   5. pinhook restarted with short lifetimes (CA 90 s, certificate 30 s, grace 5 s) and a second
#      replica beside it: for 75 s a stream of server-side dry-run Pod creates through the
#      apiserver, none refused and all pinned, while the CA rotates (next CA published, then
#      signing) and the serving certificate is reissued several times; both replicas serve the
#      same successive certificates and only the Lease holder writes; the holder stops and the
#      other replica takes the Lease and writes the Secret;
#   6. pinhook stopped: a Pod is refused (failurePolicy Fail, the webhook unreachable);
#      `helm uninstall`: neither webhook configuration is left, and the same Pod is admitted.

HELM_STREAM_SECONDS="${HELM_STREAM_SECONDS:-75}"

# [REPLICA=N] helm_pinhook_start DIR PORT NS FULL [SERVE-ARGS...]: pinhook as the chart's
# Deployment runs it, as replica N (default 0: pod name FULL-N, log DIR/pinhook[-N].log, PID in
# DIR/pinhook[-N].pid)
helm_pinhook_start() {
  local dir=$1 port=$2 ns=$3 full=$4 r=${REPLICA:-0} name=pinhook
  [[ $r == 0 ]] || name=pinhook-$r
  shift 4
  NO_COLOR=1 PINHOOK_LOG=info "$PINHOOK_BIN" serve \
    --listen "127.0.0.1:$port" \
    --tls-secret "$full-tls" --tls-namespace "$ns" --tls-service "$full" \
    --tls-webhook "mutating/$full,validating/$full" --tls-lease "$full-tls" \
    --tls-san 127.0.0.1 --pod-name "$full-$r" \
    --registry-ca "$REGISTRY_CA" --policy "$RUN/policy.yaml" --kubeconfig "$dir/kubeconfig" \
    "$@" </dev/null >>"$dir/$name.log" 2>&1 3>&- &
  echo $! >"$dir/$name.pid"
  log "  started pinhook replica $r for the release on $port (pid $!, log $dir/$name.log)"
}
helm_pinhook_stop() { # helm_pinhook_stop DIR [REPLICA]
  local name=pinhook
  [[ ${2:-0} == 0 ]] || name=pinhook-$2
  [[ -s $1/$name.pid ]] || return 0
  stop_pid "$(<"$1/$name.pid")" "pinhook replica ${2:-0} of the release" 25
  rm -f "$1/$name.pid"
}
helm_lease_holder() { K -n "$1" get lease "$2" -o jsonpath='{.spec.holderIdentity}'; }
helm_holder_is() { [[ $(helm_lease_holder "$1" "$2") == "$3" ]]; } # helm_holder_is NS LEASE ID
helm_readyz() { [[ $(curl -sk --max-time 2 "https://127.0.0.1:$1/readyz") == ok* ]]; }
# helm_secret_ca NS SECRET OUT: the Secret's ca.crt into OUT (fails while it has none)
helm_secret_ca() {
  K -n "$1" get secret "$2" -o jsonpath='{.data.ca\.crt}' | base64 -d >"$3" && [[ -s $3 ]]
}
# helm_bundles FULL: every webhook's caBundle of both configurations, one per line
helm_bundles() {
  K get mutatingwebhookconfiguration "$1" -o jsonpath='{range .webhooks[*]}{.clientConfig.caBundle}{"\n"}{end}'
  K get validatingwebhookconfiguration "$1" -o jsonpath='{range .webhooks[*]}{.clientConfig.caBundle}{"\n"}{end}'
}
# helm_bundles_are FULL CA_FILE: all three webhooks carry CA_FILE's PEM
helm_bundles_are() {
  local want
  want=$(base64 -w0 <"$2")
  [[ $(helm_bundles "$1" | sort -u) == "$want" ]] && (($(helm_bundles "$1" | grep -c .) == 3))
}
helm_served_fingerprint() { # helm_served_fingerprint PORT
  openssl s_client -connect "127.0.0.1:$1" -servername 127.0.0.1 </dev/null 2>/dev/null |
    openssl x509 -noout -fingerprint -sha256 2>/dev/null
}

helm_scenario() { # helm_scenario 3|4
  local v=$1 rc=0
  local helm="helm$v" rel="hook$v" ns="e2e-helm$v" apps="e2e-helm$v-apps"
  local full="hook$v-pinhook" dir="$RUN/helm$v"
  mkdir -p "$dir"
  command -v "$helm" >/dev/null || { bad "$helm not found (scripts/install-helm.sh installs it)"; return 1; }
  log "  $("$helm" version --short 2>&1 | head -n1)"
  local port
  port=$(free_port)
  e2e_ns "$apps" "pinhook.dev/e2e-helm=$v" pinhook.dev/mode=enforce
  cat >"$dir/values.yaml" <<EOF
webhook:
  url: "https://127.0.0.1:$port"
  namespaceSelector:
    matchLabels:
      pinhook.dev/e2e-helm: "$v"
tls:
  mode: managed
  managed:
    extraSANs: ["127.0.0.1"]
EOF

  # 1. install
  if ! "$helm" install "$rel" "$ROOT/charts/pinhook" -n "$ns" --create-namespace \
    -f "$dir/values.yaml" >"$dir/install.log" 2>&1; then
    bad "$helm install failed: $(tail -n 5 "$dir/install.log" | tr '\n' ' ')"
    return 1
  fi
  ok "$helm install $rel -n $ns"
  "$helm" get manifest "$rel" -n "$ns" >"$dir/manifest.yaml"
  expect_eq "caBundle fields in the release's manifest (comments apart)" \
    "$(grep -v '^[[:space:]]*#' "$dir/manifest.yaml" | grep -c 'caBundle' || true)" 0 || rc=1
  expect_eq "caBundle in the stored webhook configurations right after install" "$(helm_bundles "$full" | grep -c . || true)" 0 || rc=1
  expect_eq "the Secret's data right after install" \
    "$(K -n "$ns" get secret "$full-tls" -o jsonpath='{.data}')" "" || rc=1

  # 2. pinhook as the chart's ServiceAccount
  local token
  token=$(K -n "$ns" create token "$full" --duration=1h) || { bad "kubectl create token $full failed"; return 1; }
  token_kubeconfig "$token" "$dir/kubeconfig"
  helm_pinhook_start "$dir" "$port" "$ns" "$full"
  WAIT_PID=$(<"$dir/pinhook.pid") wait_until 60 "pinhook of $rel ready" helm_readyz "$port" ||
    { bad "pinhook of the release did not become ready"; tail -n 20 "$dir/pinhook.log" >&2; return 1; }
  wait_until 30 "the Secret's ca.crt" helm_secret_ca "$ns" "$full-tls" "$dir/ca.crt" || { bad "the Secret has no ca.crt"; return 1; }
  if wait_until 30 "caBundle of all three webhooks" helm_bundles_are "$full" "$dir/ca.crt"; then
    ok "caBundle of all three webhooks = the Secret's ca.crt ($(grep -c BEGIN "$dir/ca.crt") CA)"
  else
    bad "caBundle not written: $(helm_bundles "$full" | cut -c1-20 | tr '\n' ' ')" || rc=1
  fi
  expect_eq "Lease holder" "$(K -n "$ns" get lease "$full-tls" -o jsonpath='{.spec.holderIdentity}')" "$full-0" || rc=1
  if curl -s --max-time 5 --cacert "$dir/ca.crt" "https://127.0.0.1:$port/healthz" >/dev/null; then
    ok "pinhook serves a certificate that verifies against the Secret's ca.crt"
  else
    bad "pinhook's certificate does not verify against the Secret's ca.crt" || rc=1
  fi

  # 3. a Deployment stored pinned, reviewed by this pinhook
  deployment_yaml web | K -n "$apps" apply -f - >/dev/null
  expect_eq "stored template image" "$(jp "$apps" deployment web '{.spec.template.spec.containers[0].image}')" \
    "$(pinned app 1.0)" || rc=1
  local reviewed
  reviewed=$(grep -c "namespace=\"\?$apps\"\?" "$dir/pinhook.log" || true)
  ((reviewed > 0)) && ok "the release's pinhook reviewed objects in $apps ($reviewed log lines)" ||
    bad "the release's pinhook logged no review in $apps" || rc=1

  # 4. upgrade with changed values
  local data_before bundles_before
  data_before=$(K -n "$ns" get secret "$full-tls" -o jsonpath='{.data}' | sha256sum)
  bundles_before=$(helm_bundles "$full" | sha256sum)
  if "$helm" upgrade "$rel" "$ROOT/charts/pinhook" -n "$ns" -f "$dir/values.yaml" \
    --set webhook.mutate.timeoutSeconds=15 --set-string webhook.annotations.e2e=upgraded \
    >"$dir/upgrade.log" 2>&1; then
    ok "$helm upgrade with changed values"
  else
    bad "$helm upgrade failed: $(tail -n 5 "$dir/upgrade.log" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "pin.pinhook.dev timeoutSeconds after the upgrade" \
    "$(K get mutatingwebhookconfiguration "$full" -o jsonpath='{.webhooks[0].timeoutSeconds}')" 15 || rc=1
  expect_eq "annotation e2e after the upgrade" \
    "$(K get validatingwebhookconfiguration "$full" -o jsonpath='{.metadata.annotations.e2e}')" upgraded || rc=1
  expect_eq "the Secret's data after the upgrade (sha256)" \
    "$(K -n "$ns" get secret "$full-tls" -o jsonpath='{.data}' | sha256sum)" "$data_before" || rc=1
  expect_eq "the caBundles after the upgrade (sha256)" "$(helm_bundles "$full" | sha256sum)" "$bundles_before" || rc=1

  # 5. forced rotation under a stream of admissions
  helm_pinhook_stop "$dir"
  local log_from
  log_from=$(wc -l <"$dir/pinhook.log")
  helm_pinhook_start "$dir" "$port" "$ns" "$full" \
    --tls-ca-lifetime 90s --tls-cert-lifetime 30s --tls-ca-grace 5s --tls-interval 1s
  WAIT_PID=$(<"$dir/pinhook.pid") wait_until 60 "pinhook of $rel ready again" helm_readyz "$port" ||
    { bad "pinhook did not come back"; return 1; }
  # A second replica, as the Deployment's second pod: it waits on the Lease and serves what the
  # Secret holds (the webhooks call the first one's port; its certificate is read directly).
  local port2
  port2=$(free_port)
  REPLICA=1 helm_pinhook_start "$dir" "$port2" "$ns" "$full" \
    --tls-ca-lifetime 90s --tls-cert-lifetime 30s --tls-ca-grace 5s --tls-interval 1s
  WAIT_PID=$(<"$dir/pinhook-1.pid") wait_until 60 "replica 1 of $rel ready" helm_readyz "$port2" ||
    { bad "replica 1 did not become ready"; return 1; }
  cat >"$dir/pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: stream
spec:
  containers:
    - name: app
      image: $(image app 1.0)
EOF
  local end=$(($(date +%s) + HELM_STREAM_SECONDS)) got prints=() prints2=()
  : >"$dir/stream.log"
  while (($(date +%s) < end)); do
    if got=$(K -n "$apps" create --dry-run=server -f "$dir/pod.yaml" -o jsonpath='{.spec.containers[0].image}' 2>&1) &&
      [[ $got == "$(pinned app 1.0)" ]]; then
      echo "ok" >>"$dir/stream.log"
    else
      echo "FAIL $(tr '\n' ' ' <<<"$got")" >>"$dir/stream.log"
    fi
    prints+=("$(helm_served_fingerprint "$port")")
    prints2+=("$(helm_served_fingerprint "$port2")")
  done
  local total fails distinct promotions reissues
  total=$(grep -c . "$dir/stream.log" || true)
  fails=$(grep -c '^FAIL' "$dir/stream.log" || true)
  distinct=$(printf '%s\n' "${prints[@]}" | grep . | sort -u | wc -l)
  promotions=$(tail -n "+$((log_from + 1))" "$dir/pinhook.log" | grep -c 'next CA now signs' || true)
  reissues=$(tail -n "+$((log_from + 1))" "$dir/pinhook.log" | grep -c 'reissued' || true)
  log "  stream: $total dry-run creates in ${HELM_STREAM_SECONDS}s, $fails refused; $distinct serving certificates seen; $promotions CA promotion(s), $reissues reissue(s)"
  expect_eq "dry-run creates refused during the rotations (of $total)" "$fails" 0 || {
    grep '^FAIL' "$dir/stream.log" | head -n 3 >&2
    rc=1
  }
  ((total >= 20)) || bad "only $total creates ran" || rc=1
  ((promotions >= 1)) && ok "the CA rotated ($promotions promotion(s) of a published next CA)" ||
    bad "no CA promotion in ${HELM_STREAM_SECONDS}s" || rc=1
  ((distinct >= 3)) && ok "pinhook served $distinct different certificates during the stream" ||
    bad "only $distinct serving certificate(s) seen" || rc=1
  # Both replicas follow the Secret: the same certificates, and the same one at the end.
  local seen1 seen2 common
  seen1=$(printf '%s\n' "${prints[@]}" | grep . | sort -u)
  seen2=$(printf '%s\n' "${prints2[@]}" | grep . | sort -u)
  common=$(comm -12 <(echo "$seen1") <(echo "$seen2") | grep -c . || true)
  log "  replica 0 served $(grep -c . <<<"$seen1") certificates, replica 1 $(grep -c . <<<"$seen2"), $common in common"
  ((common >= 3)) && ok "both replicas served the Secret's successive certificates ($common in common)" ||
    bad "the replicas did not serve the same certificates ($common in common)" || rc=1
  expect_eq "writes of the Secret by replica 1 while replica 0 held the Lease" \
    "$(grep -c 'TLS Secret written' "$dir/pinhook-1.log" || true)" 0 || rc=1
  # The holder stops: the other replica takes the Lease (15 s lease) and keeps the certificates.
  expect_eq "Lease holder before the takeover" "$(helm_lease_holder "$ns" "$full-tls")" "$full-0" || rc=1
  helm_pinhook_stop "$dir"
  local t_stop
  t_stop=$(date +%s)
  if wait_until 40 "replica 1 to take the Lease" helm_holder_is "$ns" "$full-tls" "$full-1"; then
    ok "replica 1 took the Lease $(($(date +%s) - t_stop)) s after the holder stopped"
  else
    bad "replica 1 did not take the Lease" || rc=1
  fi
  if wait_until 40 "replica 1 to write the Secret" grep -q 'TLS Secret written' "$dir/pinhook-1.log"; then
    ok "replica 1 keeps the certificates: $(grep 'TLS Secret written' "$dir/pinhook-1.log" | head -n1 | grep -o 'reasons=.*' | cut -c1-110)"
  else
    bad "replica 1 never wrote the Secret after taking over" || rc=1
  fi
  helm_pinhook_stop "$dir" 1

  # 6. stopped (above), then uninstall
  if K -n "$apps" run refused --image="$(image app 1.0)" --restart=Never >"$dir/refused.out" 2>&1; then
    bad "a Pod was admitted while the release's webhook could not be reached" || rc=1
  else
    ok "while pinhook is down the webhook refuses: $(head -c 140 "$dir/refused.out")"
  fi
  if "$helm" uninstall "$rel" -n "$ns" >"$dir/uninstall.log" 2>&1; then
    ok "$helm uninstall"
  else
    bad "$helm uninstall failed: $(tail -n 5 "$dir/uninstall.log" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "mutating webhook configurations named $full" \
    "$(K get mutatingwebhookconfiguration -o name | grep -c "/$full\$" || true)" 0 || rc=1
  expect_eq "validating webhook configurations named $full" \
    "$(K get validatingwebhookconfiguration -o name | grep -c "/$full\$" || true)" 0 || rc=1
  if wait_until 20 "a Pod to be admitted after the uninstall" \
    K -n "$apps" run admitted --image="$(image app 1.0)" --restart=Never; then
    ok "a Pod is admitted again after helm uninstall"
  else
    bad "Pods are still refused after helm uninstall" || rc=1
  fi
  return "$rc"
}
