# shellcheck shell=bash
# title: chart registryCAs: the CA from a ConfigMap, as mounted, makes the policy the chart renders resolve a private-CA registry
# order: 207
# kube: 1.20 1.32
# proves: The tier's registry (its own CA, not in any system store) and a ConfigMap holding that CA:
#   `helm template` with `registryCAs: [{host: <registry>, configMap: ...}]` renders the policy's
#   registries.hosts.<registry>.ca and the Deployment's read-only mount of the ConfigMap's key;
#   that key, written where the mount puts it (the kubelet's projection stood in for: no node
#   here), and the rendered policy make `pinhook check --require-digest` pin a tag of that
#   registry with no --registry-ca; the same policy rendered without registryCAs fails with a
#   certificate error. (Pods mounting it for real: the node tier.)

# regca_policy OUT HELM-ARGS...: the policy.yaml of the policy ConfigMap the chart renders
regca_policy() {
  local out=$1
  shift
  helm3 template regca "$ROOT/charts/pinhook" -n e2e-regca "$@" --show-only templates/policy-configmap.yaml |
    K -n e2e-regca create --dry-run=client -f - -o jsonpath='{.data.policy\.yaml}' >"$out"
}

scenario_helm_chart_registry_ca_from_configmap() {
  local rc=0 ns=e2e-regca dir="$RUN/helm-regca"
  mkdir -p "$dir/mnt"
  command -v helm3 >/dev/null || { bad "helm3 not found (scripts/install-helm.sh installs it)"; return 1; }
  e2e_ns "$ns"
  K -n "$ns" create configmap corp-registry-ca --from-file=ca.crt="$REGISTRY_CA" >/dev/null
  cat >"$dir/values.yaml" <<EOF
registryCAs:
  - host: "$REGISTRY_HOST"
    configMap: corp-registry-ca
policy:
  mode: enforce
  registries:
    allowPrivate: ["$REGISTRY_HOST"]
EOF
  regca_policy "$dir/policy.rendered.yaml" -f "$dir/values.yaml" || { bad "helm3 template failed"; return 1; }
  helm3 template regca "$ROOT/charts/pinhook" -n "$ns" -f "$dir/values.yaml" --show-only templates/deployment.yaml |
    K -n "$ns" create --dry-run=client -f - -o json >"$dir/deployment.json" || { bad "the rendered Deployment"; return 1; }
  local ca_path mount volume
  ca_path=$(grep -A1 "\"\?$REGISTRY_HOST\"\?:" "$dir/policy.rendered.yaml" | awk '$1 == "ca:" { print $2 }')
  expect_eq "registries.hosts[$REGISTRY_HOST].ca in the rendered policy" "$ca_path" /etc/pinhook/registry-ca/0/ca.crt || rc=1
  mount=$(jq -cS '.spec.template.spec.containers[0].volumeMounts[] | select(.name == "registry-ca-0")' "$dir/deployment.json")
  expect_eq "the webhook container's mount" "$mount" \
    '{"mountPath":"/etc/pinhook/registry-ca/0","name":"registry-ca-0","readOnly":true}' || rc=1
  volume=$(jq -cS '.spec.template.spec.volumes[] | select(.name == "registry-ca-0") | .configMap' "$dir/deployment.json")
  expect_eq "the volume" "$volume" '{"items":[{"key":"ca.crt","path":"ca.crt"}],"name":"corp-registry-ca"}' || rc=1

  # The kubelet's part, by hand: each item's key of the ConfigMap as a file under the mount.
  mkdir -p "$dir/mnt/0"
  K -n "$ns" get configmap corp-registry-ca -o jsonpath='{.data.ca\.crt}' >"$dir/mnt/0/ca.crt"
  sed "s|/etc/pinhook/registry-ca/|$dir/mnt/|" "$dir/policy.rendered.yaml" >"$dir/policy.yaml"
  cat >"$dir/pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: regca, namespace: $ns}
spec:
  containers:
    - name: app
      image: $(image app 1.0)
EOF
  local out code=0
  out=$("$PINHOOK_BIN" check --policy "$dir/policy.yaml" --require-digest -o yaml "$dir/pod.yaml" 2>&1) || code=$?
  if ((code == 0)) && [[ $out == *"$(pinned app 1.0)"* ]]; then
    ok "pinhook check with the chart's policy and the mounted ConfigMap key pins $(image app 1.0)"
  else
    bad "pinhook check with the chart's policy (exit $code): $(tail -n 5 <<<"$out" | tr '\n' ' ')" || rc=1
  fi

  # Without registryCAs: the same registry is not trusted.
  regca_policy "$dir/policy-noca.yaml" --set policy.mode=enforce --set "policy.registries.allowPrivate={$REGISTRY_HOST}" ||
    { bad "helm3 template failed"; return 1; }
  code=0
  out=$("$PINHOOK_BIN" check --policy "$dir/policy-noca.yaml" --require-digest -o yaml "$dir/pod.yaml" 2>&1) || code=$?
  if ((code != 0)) && grep -qiE 'certificate|unknown ?issuer|tls' <<<"$out"; then
    ok "without registryCAs the same check fails on the registry's certificate (exit $code)"
  else
    bad "without registryCAs: exit $code: $(tail -n 5 <<<"$out" | tr '\n' ' ')" || rc=1
  fi
  return "$rc"
}
