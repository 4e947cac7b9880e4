# shellcheck shell=bash
# title: shipped manifests render and the apiserver accepts them (server-side dry run)
# order: 120
# kube: 1.20 1.32
# proves: From a copy of manifests/: overlays/generated-certs rendered with its render.sh and
#   kubectl's kustomize: Secret pinhook-tls is `kubernetes.io/tls`, its certificate verifies for
#   pinhook.pinhook-system.svc against certs/ca.crt and matches its key; the three webhooks'
#   caBundle is that CA and their `clientConfig.service` the rendered Service (443 -> https = 8443,
#   and 9090 -> metrics = 9090, the plain-HTTP metrics port); the Deployment's
#   image is what `images:` makes of it, 2 replicas, locked down (runAsNonRoot, read-only root
#   filesystem, no privilege escalation, capabilities dropped, seccomp RuntimeDefault), its policy
#   loads in `pinhook check --policy`. Everything the apiserver serves is accepted by `kubectl
#   apply --dry-run=server` without a warning (1.32 serves every object; the only one 1.20 does not
#   serve is the policy/v1 PDB, refused as such and accepted as policy/v1beta1), no rendered field is dropped or changed in
#   the answer, nothing is stored and the registered webhooks are unchanged. overlays/cert-manager
#   renders one Certificate for the Service name, Issuers for every issuerRef, `inject-ca-from` on
#   both webhook configurations and no caBundle. overlays/node-credential-providers renders the
#   provider env vars and read-only hostPath mounts on both Deployments, and the apiserver accepts
#   its Deployment (server-side dry run). render.sh run again changes nothing, and the source tree's
#   manifests/ is untouched.
#
# objects_json YAML_FILE: the objects of a (multi-document) YAML file as one JSON array, read by
# kubectl itself, offline (--local; removing a label no object has changes nothing)
objects_json() { kubectl label --local -f "$1" -o json pinhook-e2e-none- | jq -s .; }
# tree_state DIR: one hash over the names, sizes and mtimes of everything under DIR
tree_state() { find "$1" -printf '%P %s %T@\n' | sort | sha256sum | cut -c1-64; }
# kustomize_image BASE_IMAGE < KUSTOMIZATION_JSON: what kustomize's `images:` makes of BASE_IMAGE
# (kustomize's imagetag updater: newName; newTag and digest replace both tag and digest)
kustomize_image() {
  jq -r --arg img "$1" '
    ($img | sub("@.*$"; "")) as $nd | ($nd | sub(":[^:/]*$"; "")) as $name |
    ($nd | ltrimstr($name) | ltrimstr(":")) as $tag | ($img | capture("@(?<d>.*)$").d // "") as $dig |
    ((.images // []) | map(select(.name == $name)) | .[0] // {}) as $e |
    (if ($e.newTag // "") != "" or ($e.digest // "") != "" then [($e.newTag // ""), ($e.digest // "")]
     else [$tag, $dig] end) as [$t, $d] |
    ($e.newName // $name) + (if $t != "" then ":" + $t else "" end) + (if $d != "" then "@" + $d else "" end)'
}
# dropped_fields RENDERED_ARRAY.json ANSWER_LIST.json: every scalar field of the rendered objects
# that the apiserver's answer lacks or holds with another value (Secret data compared without the
# line breaks kustomize puts into base64)
dropped_fields() {
  jq -rn --slurpfile r "$1" --slurpfile d "$2" '
    def norm: if .kind == "Secret" then .data |= map_values(gsub("\\s"; "")) else . end;
    ($d[0].items | map(norm)) as $ans |
    $r[0][] | norm as $a |
    ($ans | map(select(.kind == $a.kind and .metadata.name == $a.metadata.name)) | .[0]) as $b |
    if $b == null then "\($a.kind)/\($a.metadata.name): missing from the answer"
    else $a | paths(scalars) as $p |
      select((try ($b | getpath($p)) catch "(type differs)") != ($a | getpath($p))) |
      "\($a.kind)/\($a.metadata.name): \($p | map(tostring) | join("."))" end'
}
webhook_state() { # resourceVersion and urls of the registered (local-url) webhook configurations
  K get mutatingwebhookconfiguration pinhook -o jsonpath='mutating rv={.metadata.resourceVersion} {.webhooks[*].clientConfig.url}; '
  K get validatingwebhookconfiguration pinhook -o jsonpath='validating rv={.metadata.resourceVersion} {.webhooks[*].clientConfig.url}'
}
scenario_shipped_manifests_accepted_by_apiserver() {
  local rc=0 dir="$RUN/l" m="$RUN/manifests" host=pinhook.pinhook-system.svc code out
  local gc="$RUN/manifests/overlays/generated-certs"
  mkdir -p "$dir"
  local src_before
  src_before=$(tree_state "$ROOT/manifests")
  # A copy: render.sh writes certs/ and cabundle-patch.yaml next to itself. Whatever a local
  # render left in the source tree (git-ignored) is not copied along, so render.sh starts afresh.
  rm -rf "$m"
  cp -R "$ROOT/manifests" "$m"
  rm -rf "$gc/certs" "$gc"/.certs.* "$gc/cabundle-patch.yaml" "$gc/cabundle-patch.yaml.tmp"

  # 1. overlays/generated-certs: render.sh (`pinhook certs`), then kubectl's built-in kustomize
  code=0
  out=$(PINHOOK="$PINHOOK_BIN" "$gc/render.sh" 2>&1) || code=$?
  log "  render.sh: $(tr '\n' ' ' <<<"$out")"
  expect_eq "render.sh (1st run): exit code" "$code" 0 || return 1
  code=0
  kubectl kustomize "$gc" >"$dir/generated-certs.yaml" 2>"$dir/generated-certs.err" || code=$?
  expect_eq "kubectl kustomize overlays/generated-certs: exit code" "$code" 0 || { log "  stderr: $(<"$dir/generated-certs.err")"; return 1; }
  objects_json "$dir/generated-certs.yaml" >"$dir/generated-certs.json"
  local G="$dir/generated-certs.json"
  ok "rendered $(jq length "$G") objects: $(jq -r 'map("\(.kind)/\(.metadata.name)") | join(" ")' "$G")"

  # the Secret: kubernetes.io/tls, a certificate for the Service name from certs/ca.crt, its own key
  local sec='.[] | select(.kind == "Secret" and .metadata.name == "pinhook-tls")'
  expect_eq "Secret pinhook-tls: namespace, type, keys" \
    "$(jq -r "$sec | \"\(.metadata.namespace) \(.type) \(.data | keys | join(\",\"))\"" "$G")" \
    "pinhook-system kubernetes.io/tls tls.crt,tls.key" || rc=1
  jq -r "$sec | .data[\"tls.crt\"]" "$G" | base64 -d >"$dir/secret-tls.crt"
  jq -r "$sec | .data[\"tls.key\"]" "$G" | base64 -d >"$dir/secret-tls.key"
  expect_eq "Secret tls.crt verified against certs/ca.crt for $host (openssl verify -verify_hostname)" \
    "$(openssl verify -CAfile "$gc/certs/ca.crt" -purpose sslserver -verify_hostname "$host" "$dir/secret-tls.crt" 2>&1)" \
    "$dir/secret-tls.crt: OK" || rc=1
  expect_contains "openssl x509 -checkhost $host" \
    "$(openssl x509 -in "$dir/secret-tls.crt" -noout -checkhost "$host")" "does match certificate" || rc=1
  ok "tls.crt $(openssl x509 -in "$dir/secret-tls.crt" -noout -ext subjectAltName | tr -s ' \n' ' ')"
  expect_eq "Secret tls.key is the key of tls.crt (sha256 of the public key)" \
    "$(openssl pkey -in "$dir/secret-tls.key" -pubout | sha256sum | cut -c1-16)" \
    "$(openssl x509 -in "$dir/secret-tls.crt" -noout -pubkey | sha256sum | cut -c1-16)" || rc=1

  # the webhooks: caBundle = certs/ca.crt, clientConfig.service = the rendered Service
  expect_eq "webhooks whose caBundle is base64 of certs/ca.crt" \
    "$(jq -r --arg b "$(base64 -w0 <"$gc/certs/ca.crt")" \
      '[.[] | .webhooks[]? | "\(.name)=\(.clientConfig.caBundle == $b)"] | sort | join(" ")' "$G")" \
    "mirrors.pinhook.dev=true pin.pinhook.dev=true validate.pinhook.dev=true" || rc=1
  expect_eq "webhooks' clientConfig.service" \
    "$(jq -r '[.[] | .webhooks[]? | .clientConfig.service as $s | "\(.name)->\($s.namespace)/\($s.name):\($s.port)\($s.path)"] | join(" ")' "$G")" \
    "pin.pinhook.dev->pinhook-system/pinhook:443/mutate validate.pinhook.dev->pinhook-system/pinhook:443/validate mirrors.pinhook.dev->pinhook-system/pinhook:443/validate" || rc=1
  expect_eq "Service pinhook-system/pinhook: ports -> targetPorts, container ports of those names" \
    "$(jq -r '(.[] | select(.kind == "Service" and .metadata.name == "pinhook") | .spec.ports[] | "\(.port)->\(.targetPort)"),
      (.[] | select(.kind == "Deployment" and .metadata.name == "pinhook") | .spec.template.spec.containers[0].ports[] | "\(.name)=\(.containerPort)")' "$G" | tr '\n' ' ')" \
    "443->https 9090->metrics https=8443 metrics=9090 " || rc=1

  # the Deployment: the image kustomization.yaml's `images:` sets, 2 replicas, locked down
  local dep='.[] | select(.kind == "Deployment" and .metadata.name == "pinhook")' want_image
  want_image=$(objects_json "$m/base/kustomization.yaml" | jq '.[0]' |
    kustomize_image "$(objects_json "$m/base/deployment.yaml" | jq -r '.[0].spec.template.spec.containers[0].image')")
  expect_eq "Deployment pinhook: image (base/kustomization.yaml images:)" \
    "$(jq -r "$dep | .spec.template.spec.containers[].image" "$G")" "$want_image" || rc=1
  expect_eq "Deployment pinhook: namespace, replicas" "$(jq -r "$dep | \"\(.metadata.namespace) \(.spec.replicas)\"" "$G")" "pinhook-system 2" || rc=1
  expect_eq "Deployment pinhook: pod securityContext runAsNonRoot, seccompProfile" \
    "$(jq -r "$dep | .spec.template.spec.securityContext | \"runAsNonRoot=\(.runAsNonRoot) seccomp=\(.seccompProfile.type)\"" "$G")" \
    "runAsNonRoot=true seccomp=RuntimeDefault" || rc=1
  # per container, the effective value (the container's own, else the pod's)
  expect_eq "Deployment pinhook: containers' securityContext" \
    "$(jq -r "$dep | .spec.template.spec as \$s | [\$s.containers[] | .securityContext as \$c |
      def eff(\$k): if (\$c | has(\$k)) then \$c[\$k] else \$s.securityContext[\$k] end;
      \"\(.name): runAsNonRoot=\(eff(\"runAsNonRoot\")) readOnlyRootFilesystem=\(\$c.readOnlyRootFilesystem) allowPrivilegeEscalation=\(\$c.allowPrivilegeEscalation) drop=\(\$c.capabilities.drop | join(\",\")) seccomp=\(eff(\"seccompProfile\").type)\"] | join(\"; \")" "$G")" \
    "pinhook: runAsNonRoot=true readOnlyRootFilesystem=true allowPrivilegeEscalation=false drop=ALL seccomp=RuntimeDefault" || rc=1
  expect_eq "Deployment pinhook: Secret and ConfigMap it mounts" \
    "$(jq -r "$dep | [.spec.template.spec.volumes[] | .secret.secretName // .configMap.name // empty] | join(\" \")" "$G")" \
    "pinhook-tls pinhook-policy" || rc=1
  # the policy in the ConfigMap loads in pinhook (check --policy exits 2 on an invalid policy)
  jq -r '.[] | select(.kind == "ConfigMap" and .metadata.name == "pinhook-policy") | .data["policy.yaml"]' "$G" >"$dir/policy.yaml"
  code=0
  printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: e2e-l}\n' |
    "$PINHOOK_BIN" check --policy "$dir/policy.yaml" - >"$dir/policy-check.out" 2>&1 || code=$?
  expect_eq "pinhook check --policy <ConfigMap pinhook-policy's policy.yaml>: exit code" "$code" 0 || { log "  $(<"$dir/policy-check.out")"; rc=1; }

  # 2. server-side dry run of everything the apiserver serves (on 1.20 all but the policy/v1 PDB). pinhook-system exists (the
  #    local-url set-up) and is excluded from the webhooks; the webhook configurations exist too
  #    (local-url, clientConfig.url): the dry run patches them to clientConfig.service, stores nothing.
  local versions
  versions=$(K api-versions)
  jq --arg v "$versions" '($v | split("\n")) as $s | map(select(.apiVersion as $a | any($s[]; . == $a)))' "$G" >"$dir/served.json"
  local unserved="" pdb=poddisruptionbudgets.v1.policy
  if [[ ${E2E_KUBE:-1.20} == 1.20 ]]; then
    unserved="policy/v1 PodDisruptionBudget pinhook-system/pinhook"
    pdb=poddisruptionbudgets.v1beta1.policy
  fi
  expect_eq "rendered objects whose apiVersion the ${E2E_KUBE:-1.20} apiserver does not serve" \
    "$(jq -r --arg v "$versions" '($v | split("\n")) as $s |
      [.[] | select(.apiVersion as $a | any($s[]; . == $a) | not) | "\(.apiVersion) \(.kind) \(.metadata.namespace)/\(.metadata.name)"] | join("; ")' "$G")" \
    "$unserved" || rc=1
  local state_before url_before n
  n=$(jq length "$dir/served.json")
  state_before=$(webhook_state)
  url_before=$(K get mutatingwebhookconfiguration pinhook -o jsonpath='{.webhooks[0].clientConfig.url}')
  expect_eq "registered mutating webhook's clientConfig.url before the dry runs" "$url_before" "$PINHOOK_URL/mutate" || rc=1
  jq '{apiVersion: "v1", kind: "List", items: .}' "$dir/served.json" >"$dir/served-list.json"
  kubectl_to "$dir/apply" apply --dry-run=server -f "$dir/served-list.json"
  while IFS= read -r out; do log "    $out"; done <"$dir/apply.out"
  expect_eq "kubectl apply --dry-run=server of the $n served objects: exit code" "$KCODE" 0 || rc=1
  expect_eq "kubectl apply --dry-run=server: lines '... (server dry run)'" "$(grep -c ' (server dry run)$' "$dir/apply.out" || true)" "$n" || rc=1
  expect_eq "kubectl apply --dry-run=server: stderr (warnings)" "${KERR:-none}" none || rc=1
  if [[ ${E2E_KUBE:-1.20} == 1.20 ]]; then
    # the PDB: policy/v1 is refused by kubectl's discovery; as policy/v1beta1 the apiserver validates it
    jq '.[] | select(.kind == "PodDisruptionBudget")' "$G" >"$dir/pdb-v1.json"
    jq '.apiVersion = "policy/v1beta1"' "$dir/pdb-v1.json" >"$dir/pdb-v1beta1.json"
    kubectl_to "$dir/pdb-v1" apply --dry-run=server -f "$dir/pdb-v1.json"
    if ((KCODE == 0)); then bad "the policy/v1 PodDisruptionBudget was accepted by a 1.20 apiserver" || rc=1; fi
    expect_contains "kubectl apply --dry-run=server of the policy/v1 PDB: stderr" "$KERR" \
      'no matches for kind "PodDisruptionBudget" in version "policy/v1"' || rc=1
    kubectl_to "$dir/pdb-v1beta1" apply --dry-run=server -f "$dir/pdb-v1beta1.json"
    expect_eq "kubectl apply --dry-run=server of the PDB as policy/v1beta1" "$KCODE $(<"$dir/pdb-v1beta1.out")" \
      "0 poddisruptionbudget.policy/pinhook created (server dry run)" || rc=1
    jq -s '.[0] + [.[1]]' "$dir/served.json" "$dir/pdb-v1beta1.json" >"$dir/dry-run-input.json"
  else
    # 1.32 serves every rendered object as it is, the policy/v1 PDB among them
    cp "$dir/served.json" "$dir/dry-run-input.json"
  fi
  # what the apiserver would store: every rendered field kept (an apiserver drops fields it does not know)
  jq '{apiVersion: "v1", kind: "List", items: .}' "$dir/dry-run-input.json" >"$dir/dry-run-input-list.json"
  kubectl_to "$dir/answer" apply --dry-run=server -o json -f "$dir/dry-run-input-list.json"
  expect_eq "kubectl apply --dry-run=server -o json (the $(jq length "$dir/dry-run-input.json") objects): exit code" "$KCODE" 0 || rc=1
  out=$(dropped_fields "$dir/dry-run-input.json" "$dir/answer.out")
  expect_eq "rendered fields missing or changed in the apiserver's dry-run answer" "${out:-none}" none || rc=1
  expect_eq "the dry run's webhooks (url patched away, service set)" \
    "$(jq -r '[.items[] | .webhooks[]? | "\(.name) url=\(.clientConfig.url // "none") service=\(.clientConfig.service.name // "none")"] | join("; ")' "$dir/answer.out")" \
    "pin.pinhook.dev url=none service=pinhook; validate.pinhook.dev url=none service=pinhook; mirrors.pinhook.dev url=none service=pinhook" || rc=1
  # nothing stored, nothing changed
  expect_eq "registered mutating webhook's clientConfig.url after the dry runs" \
    "$(K get mutatingwebhookconfiguration pinhook -o jsonpath='{.webhooks[0].clientConfig.url}')" "$url_before" || rc=1
  expect_eq "registered webhook configurations (resourceVersion, urls) after the dry runs" "$(webhook_state)" "$state_before" || rc=1
  local obj
  for obj in "deployment pinhook" "service pinhook" "secret pinhook-tls" "configmap pinhook-policy" \
    "$pdb pinhook"; do
    # shellcheck disable=SC2086 # KIND NAME
    expect_absent $obj pinhook-system || rc=1
  done

  # 3. overlays/cert-manager (no cert-manager CRDs here: rendered only)
  local C="$dir/cert-manager.json" cert
  code=0
  kubectl kustomize "$m/overlays/cert-manager" >"$dir/cert-manager.yaml" 2>"$dir/cert-manager.err" || code=$?
  expect_eq "kubectl kustomize overlays/cert-manager: exit code" "$code" 0 || { log "  stderr: $(<"$dir/cert-manager.err")"; return 1; }
  objects_json "$dir/cert-manager.yaml" >"$C"
  ok "rendered $(jq length "$C") objects: $(jq -r 'map("\(.kind)/\(.metadata.name)") | join(" ")' "$C")"
  cert=$(jq -r --arg h "$host" '[.[] | select(.apiVersion == "cert-manager.io/v1" and .kind == "Certificate" and any(.spec.dnsNames[]?; . == $h)) |
    "\(.metadata.namespace)/\(.metadata.name)"] | join(" ")' "$C")
  expect_eq "cert-manager Certificates for $host" "$(wc -w <<<"$cert")" 1 || rc=1
  expect_eq "Certificate $cert: secretName (what the Deployment mounts), issuerRef" \
    "$(jq -r --arg c "$cert" '.[] | select(.kind == "Certificate" and "\(.metadata.namespace)/\(.metadata.name)" == $c) |
      "\(.spec.secretName) \(.spec.issuerRef.kind)"' "$C")" "pinhook-tls Issuer" || rc=1
  ok "Issuers: $(jq -r '[.[] | select(.kind == "Issuer") | "\(.metadata.namespace)/\(.metadata.name)"] | join(" ")' "$C")"
  expect_eq "Certificates whose issuerRef names no rendered Issuer" \
    "$(jq -r '(map(select(.kind == "Issuer") | "\(.metadata.namespace)/\(.metadata.name)")) as $iss |
      [.[] | select(.kind == "Certificate") | select(.spec.issuerRef.kind != "Issuer" or
        ("\(.metadata.namespace)/\(.spec.issuerRef.name)" as $i | any($iss[]; . == $i) | not)) | .metadata.name] |
      if length == 0 then "none" else join(" ") end' "$C")" none || rc=1
  expect_eq "webhook configurations' cert-manager.io/inject-ca-from" \
    "$(jq -r '[.[] | select(.kind | endswith("WebhookConfiguration")) | "\(.kind)=\(.metadata.annotations["cert-manager.io/inject-ca-from"] // "none")"] | join(" ")' "$C")" \
    "MutatingWebhookConfiguration=$cert ValidatingWebhookConfiguration=$cert" || rc=1
  expect_eq "cert-manager webhooks: those with a caBundle (cainjector sets it), those excluding namespace cert-manager" \
    "$(jq -r '[.[] | .webhooks[]?] | "\(map(select(.clientConfig.caBundle)) | length) of \(length), \(map(select(any(.namespaceSelector.matchExpressions[]; .operator == "NotIn" and any(.values[]; . == "cert-manager")))) | length) of \(length)"' "$C")" \
    "0 of 3, 3 of 3" || rc=1

  # 3b. overlays/node-credential-providers (cert-manager + the component, issue 12): rendered,
  # the Deployment mounts the node's provider config and plugin directory read-only (EKS's
  # paths) and points pinhook at them, and the apiserver accepts it (server-side dry run)
  local N="$dir/node-credential-providers.json"
  code=0
  kubectl kustomize "$m/overlays/node-credential-providers" >"$dir/ncp.yaml" 2>"$dir/ncp.err" || code=$?
  expect_eq "kubectl kustomize overlays/node-credential-providers: exit code" "$code" 0 || { log "  stderr: $(<"$dir/ncp.err")"; return 1; }
  objects_json "$dir/ncp.yaml" >"$N"
  local d
  for d in pinhook pinhook-watch; do
    expect_eq "node-credential-providers Deployment $d: provider env vars, their mounts read-only, hostPaths" \
      "$(jq -r --arg d "$d" '.[] | select(.kind == "Deployment" and .metadata.name == $d) | .spec.template.spec as $s |
        "\($s.containers[0].env | map(select(.name | startswith("PINHOOK_IMAGE_CREDENTIAL_PROVIDER"))) | length) \([$s.containers[0].volumeMounts[] | select(.name | startswith("node-credential-provider")) | .readOnly] | map(tostring) | join(",")) \([$s.volumes[] | select(.hostPath) | .hostPath.path] | join(","))"' "$N")" \
      "2 true,true /etc/eks/image-credential-provider/config.json,/etc/eks/image-credential-provider" || rc=1
  done
  code=0
  jq '.[] | select(.kind == "Deployment" and .metadata.name == "pinhook")' "$N" | K apply --dry-run=server -f - >"$dir/ncp-apply.out" 2>&1 || code=$?
  expect_eq "kubectl apply --dry-run=server of the node-credential-providers Deployment: exit code" "$code" 0 || { log "  $(<"$dir/ncp-apply.out")"; rc=1; }

  # 4. render.sh again: reuses certs/, so nothing changes
  local ca_sum gen_before
  ca_sum=$(sha256sum <"$gc/certs/ca.crt" | cut -c1-64)
  gen_before=$(cd "$gc" && sha256sum certs/* cabundle-patch.yaml)
  code=0
  out=$(PINHOOK="$PINHOOK_BIN" "$gc/render.sh" 2>&1) || code=$?
  expect_eq "render.sh (2nd run): exit code" "$code" 0 || rc=1
  expect_eq "sha256 of certs/ca.crt after the 2nd render.sh" "$(sha256sum <"$gc/certs/ca.crt" | cut -c1-64)" "$ca_sum" || rc=1
  same_object "certs/* and cabundle-patch.yaml (sha256) after the 2nd render.sh" "$gen_before" "$(cd "$gc" && sha256sum certs/* cabundle-patch.yaml)" || rc=1
  same_object "kubectl kustomize overlays/generated-certs after the 2nd render.sh" "$(<"$dir/generated-certs.yaml")" "$(kubectl kustomize "$gc")" || rc=1
  expect_eq "render.sh's temporary .certs.* directories left" "$(find "$gc" -maxdepth 1 -name '.certs.*' | wc -l)" 0 || rc=1
  expect_eq "the source tree's manifests/ (names, sizes, mtimes)" "$(tree_state "$ROOT/manifests")" "$src_before" || rc=1
  return "$rc"
}
