# shellcheck shell=bash
# title: chart nodeCredentialProviders: the provider config from a ConfigMap and the node's plugin dir pin a private image
# order: 208
# kube: 1.20 1.32
# proves: `helm template` with `nodeCredentialProviders: {enabled: true, configMap: {name: ...},
#   binDirHostPath: <the tier's plugin dir>}` renders the ConfigMap volume (its key), the hostPath
#   volume (type Directory), both mounted read-only, and the two PINHOOK_IMAGE_CREDENTIAL_PROVIDER_*
#   variables; pinhook serve started with exactly those variables, their paths resolved where the
#   mounts put them (the kubelet's part done by hand: no node here), runs the tier's example
#   plugin, and `pinhook check --server` (through /v1/dry-run) pins the private htpasswd
#   registry's image with no pull secret. (Pods mounting it for real: the node tier.)

# ncp_env DEPLOYMENT_JSON NAME: the value of env NAME of the Deployment's first container
ncp_env() { jq -r --arg n "$2" '.spec.template.spec.containers[0].env[] | select(.name == $n) | .value' "$1"; }

scenario_helm_chart_node_credential_providers() {
  local rc=0 ns=e2e-ncp dir="$RUN/helm-ncp"
  mkdir -p "$dir/mnt"
  command -v helm3 >/dev/null || { bad "helm3 not found (scripts/install-helm.sh installs it)"; return 1; }
  e2e_ns "$ns"
  K -n "$ns" create configmap e2e-provider-config --from-file=config.yaml="$PROVIDERS/config.yaml" >/dev/null
  helm3 template ncp "$ROOT/charts/pinhook" -n "$ns" --show-only templates/deployment.yaml \
    --set nodeCredentialProviders.enabled=true \
    --set nodeCredentialProviders.configMap.name=e2e-provider-config \
    --set nodeCredentialProviders.binDirHostPath="$PROVIDERS/bin" |
    K -n "$ns" create --dry-run=client -f - -o json >"$dir/deployment.json" || { bad "the rendered Deployment"; return 1; }
  local config bin
  config=$(ncp_env "$dir/deployment.json" PINHOOK_IMAGE_CREDENTIAL_PROVIDER_CONFIG)
  bin=$(ncp_env "$dir/deployment.json" PINHOOK_IMAGE_CREDENTIAL_PROVIDER_BIN_DIR)
  expect_eq "PINHOOK_IMAGE_CREDENTIAL_PROVIDER_CONFIG" "$config" /etc/pinhook/node/credential-provider-config/config.yaml || rc=1
  expect_eq "PINHOOK_IMAGE_CREDENTIAL_PROVIDER_BIN_DIR" "$bin" /etc/pinhook/node/credential-provider-bin || rc=1
  expect_eq "the two volumes" \
    "$(jq -cS '[.spec.template.spec.volumes[] | select(.name | startswith("node-credential-provider"))]' "$dir/deployment.json")" \
    "$(jq -cnS --arg p "$PROVIDERS/bin" '[{configMap: {items: [{key: "config.yaml", path: "config.yaml"}], name: "e2e-provider-config"}, name: "node-credential-provider-config"}, {hostPath: {path: $p, type: "Directory"}, name: "node-credential-provider-bin"}]')" || rc=1
  expect_eq "their mounts, read-only" \
    "$(jq -cS '[.spec.template.spec.containers[0].volumeMounts[] | select(.name | startswith("node-credential-provider")) | [.mountPath, .readOnly]]' "$dir/deployment.json")" \
    '[["/etc/pinhook/node/credential-provider-config",true],["/etc/pinhook/node/credential-provider-bin",true]]' || rc=1

  # The kubelet's part, by hand: the ConfigMap's key as a file, the hostPath as the directory.
  mkdir -p "$dir/mnt/config"
  K -n "$ns" get configmap e2e-provider-config -o jsonpath='{.data.config\.yaml}' >"$dir/mnt/config/config.yaml"
  ln -sfn "$PROVIDERS/bin" "$dir/mnt/bin"
  local port
  port=$(free_port)
  e2e_cert "$dir/tls" >/dev/null || { bad "e2e_cert failed"; return 1; }
  PINHOOK_IMAGE_CREDENTIAL_PROVIDER_CONFIG=${config/\/etc\/pinhook\/node\/credential-provider-config/$dir/mnt/config} \
    PINHOOK_IMAGE_CREDENTIAL_PROVIDER_BIN_DIR=${bin/\/etc\/pinhook\/node\/credential-provider-bin/$dir/mnt/bin} \
    NO_COLOR=1 PINHOOK_LOG=info "$PINHOOK_BIN" serve --listen "127.0.0.1:$port" \
    --tls-cert "$dir/tls/tls.crt" --tls-key "$dir/tls/tls.key" \
    --registry-ca "$REGISTRY_CA" --policy "$RUN/policy.yaml" --kubeconfig "$E2E_KUBECONFIG" \
    </dev/null >"$dir/pinhook.log" 2>&1 3>&- &
  echo $! >"$dir/pinhook.pid"
  if ! WAIT_PID=$(<"$dir/pinhook.pid") wait_until 30 "pinhook with the chart's provider settings ready" readyz_ok "$port" "$dir/tls"; then
    bad "pinhook did not start: $(tail -n 5 "$dir/pinhook.log" | tr '\n' ' ')"
    stop_pid "$(<"$dir/pinhook.pid")" "pinhook (nodeCredentialProviders)" 10
    return 1
  fi
  expect_contains "pinhook's log" "$(<"$dir/pinhook.log")" "running kubelet credential provider plugins" || rc=1
  cat >"$dir/pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: private, namespace: $ns}
spec:
  containers:
    - name: app
      image: $PRIVATE_HOST/team/private:1.0
EOF
  local out code=0
  out=$("$PINHOOK_BIN" check --server "https://127.0.0.1:$port" --token-file "${E2E_PKI:-$E2E_WORK/pki}/admin.token" \
    --server-ca "$dir/tls/ca.crt" --require-digest -o yaml "$dir/pod.yaml" 2>&1) || code=$?
  # shellcheck disable=SC2154 # (from the registry helper's env file, sourced by lib.sh)
  if ((code == 0)) && [[ $out == *"$PRIVATE_HOST/team/private:1.0@$DIGEST_private_1_0"* ]]; then
    ok "the private image is pinned with the plugin's credentials, no pull secret"
  else
    bad "pinhook check --server (exit $code): $(tail -n 5 <<<"$out" | tr '\n' ' ')" || rc=1
  fi
  stop_pid "$(<"$dir/pinhook.pid")" "pinhook (nodeCredentialProviders)" 10
  rm -f "$dir/pinhook.pid"
  return "$rc"
}
