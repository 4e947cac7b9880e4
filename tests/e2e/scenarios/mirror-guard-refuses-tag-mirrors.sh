# shellcheck shell=bash
# title: mirror guard: tag mirrors refused, digest mirrors stored (OpenShift CRDs, registries.conf)
# order: 100
# proves: The webhook mirrors.pinhook.dev on the OpenShift CRDs of tests/fixtures/crds (applied and
#   Established) and on ConfigMaps holding a registries.conf. Refused, with kubectl's stderr
#   `admission webhook "mirrors.pinhook.dev" denied the request: <pinhook's sentence>`, and not
#   stored: an ImageTagMirrorSet; an ImageContentPolicy with `allowMirrorByTags: true`; ConfigMaps
#   whose registries.conf has a mirror with `pull-from-mirror` absent, the same written
#   `[[Registry]]` (key case folded as CRI-O's TOML reader does), and a binaryData drop-in whose
#   prefix is rewritten to another location; a `kubectl replace` of a stored ConfigMap back to
#   `pull-from-mirror` absent (the stored data unchanged). Stored: an ImageDigestMirrorSet and an
#   ImageContentPolicy without `allowMirrorByTags` (same source and mirror), an
#   ImageContentSourcePolicy, the ConfigMap with `pull-from-mirror = "digest-only"`.
#   `pinhook_policy_violations_total{mode="enforce",reason="tag_mirror"}` +5 for the 5 refused
#   creates; the refused replace is 2 denied /validate UPDATE reviews (the apiserver retries a
#   refused update once). The cluster-scoped objects stored are deleted at the end, none left.

MIRROR_RISK="a tag mirror can serve different content for the same tag"
MIRROR_DENIED='admission webhook "mirrors.pinhook.dev" denied the request'
# expect_refused WHAT DIR/NAME MESSAGE KUBECTL-ARGS...: kubectl fails with pinhook's mirror denial
expect_refused() {
  local what=$1 out=$2 message=$3 rc=0
  shift 3
  kubectl_to "$out" "$@"
  if ((KCODE == 0)); then bad "$what: kubectl exit 0 (stored), expected a refusal" || rc=1; else ok "$what: kubectl exit code $KCODE"; fi
  expect_contains "$what: kubectl stderr" "$KERR" "$MIRROR_DENIED: $message" || rc=1
  return "$rc"
}
# expect_stored WHAT DIR/NAME KUBECTL-ARGS...: kubectl succeeds
expect_stored() {
  local what=$1 out=$2
  shift 2
  kubectl_to "$out" "$@"
  expect_eq "$what: kubectl exit code" "$KCODE" 0
}
registries_conf_cm() { # registries_conf_cm NAME [PULL_FROM_MIRROR]
  cat <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: $1
data:
  registries.conf: |
    [[registry]]
    location = "registry.example/team"

    [[registry.mirror]]
    location = "mirror.example:5000/team"
EOF
  [[ -z ${2:-} ]] || printf '    pull-from-mirror = "%s"\n' "$2"
}
scenario_mirror_guard_refuses_tag_mirrors() {
  local ns=e2e-j rc=0 dir="$RUN/j" crd
  mkdir -p "$dir"
  e2e_ns "$ns"
  klog apply -f "$ROOT/tests/fixtures/crds/"
  for crd in imagetagmirrorsets.config.openshift.io imagedigestmirrorsets.config.openshift.io \
    imagecontentpolicies.config.openshift.io imagecontentsourcepolicies.operator.openshift.io; do
    klog wait --for=condition=Established "crd/$crd" --timeout=30s
  done
  local denied_before
  denied_before=$(metric_sum pinhook_policy_violations_total 'mode="enforce"' 'reason="tag_mirror"')

  # ImageTagMirrorSet: every mirror serves tag pulls -> refused, nothing stored
  openshift_mirrors ImageTagMirrorSet e2e-j-tags imageTagMirrors >"$dir/itms.yaml"
  expect_refused "ImageTagMirrorSet" "$dir/itms" \
    "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] lets mirror.example:5000/team serve tag pulls for registry.example/team: $MIRROR_RISK" \
    create -f "$dir/itms.yaml" || rc=1
  expect_absent imagetagmirrorset e2e-j-tags || rc=1
  expect_eq "ImageTagMirrorSets stored" "$(K get imagetagmirrorsets -o name | wc -l)" 0 || rc=1

  # ImageDigestMirrorSet with the same source and mirror: digest pulls only -> stored
  openshift_mirrors ImageDigestMirrorSet e2e-j-digests imageDigestMirrors >"$dir/idms.yaml"
  expect_stored "ImageDigestMirrorSet" "$dir/idms" create -f "$dir/idms.yaml" || rc=1
  expect_eq "stored ImageDigestMirrorSet source -> mirror" \
    "$(K get imagedigestmirrorset e2e-j-digests -o jsonpath='{.spec.imageDigestMirrors[0].source} -> {.spec.imageDigestMirrors[0].mirrors[0]}')" \
    "registry.example/team -> mirror.example:5000/team" || rc=1

  # ImageContentPolicy: refused with allowMirrorByTags: true, stored without it
  openshift_mirrors ImageContentPolicy e2e-j-icp-tags repositoryDigestMirrors "allowMirrorByTags: true" >"$dir/icp-tags.yaml"
  expect_refused "ImageContentPolicy with allowMirrorByTags" "$dir/icp-tags" \
    "ImageContentPolicy spec.repositoryDigestMirrors[0].mirrors[0] has allowMirrorByTags, so mirror.example:5000/team serves tag pulls for registry.example/team: $MIRROR_RISK" \
    create -f "$dir/icp-tags.yaml" || rc=1
  expect_absent imagecontentpolicy e2e-j-icp-tags || rc=1
  openshift_mirrors ImageContentPolicy e2e-j-icp repositoryDigestMirrors >"$dir/icp.yaml"
  expect_stored "ImageContentPolicy without allowMirrorByTags" "$dir/icp" create -f "$dir/icp.yaml" || rc=1
  expect_eq "stored ImageContentPolicy source -> mirror" \
    "$(K get imagecontentpolicy e2e-j-icp -o jsonpath='{.spec.repositoryDigestMirrors[0].source} -> {.spec.repositoryDigestMirrors[0].mirrors[0]}')" \
    "registry.example/team -> mirror.example:5000/team" || rc=1

  # ImageContentSourcePolicy (operator.openshift.io/v1alpha1): digest mirrors by definition -> stored
  openshift_mirrors ImageContentSourcePolicy e2e-j-icsp repositoryDigestMirrors >"$dir/icsp.yaml"
  expect_stored "ImageContentSourcePolicy" "$dir/icsp" create -f "$dir/icsp.yaml" || rc=1

  # ConfigMap with a registries.conf: a mirror with pull-from-mirror absent (= "all") is
  # refused; the same mirror with "digest-only" is stored; updating the stored one back to
  # "all" is refused too (UPDATE judges the new object) and leaves it as it was
  local cm_message="ConfigMap data[registries.conf] [[registry]] location=\"registry.example/team\" mirror[0] lets mirror.example:5000/team serve tag pulls: $MIRROR_RISK"
  registries_conf_cm tag-mirror >"$dir/cm-all.yaml"
  expect_refused "ConfigMap registries.conf, pull-from-mirror absent" "$dir/cm-all" "$cm_message" \
    -n "$ns" create -f "$dir/cm-all.yaml" || rc=1
  expect_absent configmap tag-mirror "$ns" || rc=1
  # Read as CRI-O reads it (issue 17): `[[Registry]]` folds to the registry table, and a
  # prefix whose location differs sends every tag pull of the prefix elsewhere. Both refused.
  expect_refused "ConfigMap registries.conf with [[Registry]] (key case folded as BurntSushi/toml does)" \
    "$dir/cm-folded" \
    "ConfigMap data[registries.conf] [[registry]] location=\"registry.example/team\" mirror[0] lets mirror.example:5000/team serve tag pulls: $MIRROR_RISK" \
    -n "$ns" create -f - <<EOF || rc=1
apiVersion: v1
kind: ConfigMap
metadata:
  name: folded-keys
data:
  registries.conf: |
    [[Registry]]
    location = "registry.example/team"

    [[Registry.Mirror]]
    location = "mirror.example:5000/team"
EOF
  expect_absent configmap folded-keys "$ns" || rc=1
  expect_refused "ConfigMap registries.conf whose prefix is rewritten to another location" \
    "$dir/cm-rewrite" \
    "ConfigMap binaryData[crio-mirrors.conf] [[registry]] prefix=\"docker.io/library\" redirects tag pulls to its location evil.example/x: $MIRROR_RISK" \
    -n "$ns" create -f - <<EOF || rc=1
apiVersion: v1
kind: ConfigMap
metadata:
  name: prefix-rewrite
binaryData:
  crio-mirrors.conf: $(printf '[[registry]]\nprefix = "docker.io/library"\nlocation = "evil.example/x"\n' | base64 -w0)
EOF
  expect_absent configmap prefix-rewrite "$ns" || rc=1
  registries_conf_cm digest-mirror digest-only >"$dir/cm-digest.yaml"
  expect_stored "ConfigMap registries.conf, pull-from-mirror digest-only" "$dir/cm-digest" \
    -n "$ns" create -f "$dir/cm-digest.yaml" || rc=1
  expect_contains "stored ConfigMap registries.conf" \
    "$(jp "$ns" configmap digest-mirror '{.data.registries\.conf}')" 'pull-from-mirror = "digest-only"' || rc=1
  expect_eq "pinhook_policy_violations_total{mode=\"enforce\",reason=\"tag_mirror\"} (delta: the 5 refused creates)" \
    "$(($(metric_sum pinhook_policy_violations_total 'mode="enforce"' 'reason="tag_mirror"') - denied_before))" 5 || rc=1
  # An UPDATE that a webhook refuses is admitted TWICE by the apiserver: its first try runs
  # against the object from the watch cache, and on any error the storage layer retries once
  # with the object read from etcd (GuaranteedUpdate), calling the webhooks again.
  local updates_before
  updates_before=$(metric_sum pinhook_admission_reviews_total 'endpoint="validate"' 'operation="UPDATE"' 'result="denied"')
  registries_conf_cm digest-mirror >"$dir/cm-update.yaml"
  expect_refused "ConfigMap update back to pull-from-mirror absent" "$dir/cm-update" "$cm_message" \
    -n "$ns" replace -f "$dir/cm-update.yaml" || rc=1
  expect_contains "stored ConfigMap registries.conf after the refused update" \
    "$(jp "$ns" configmap digest-mirror '{.data.registries\.conf}')" 'pull-from-mirror = "digest-only"' || rc=1

  expect_eq "validate UPDATE reviews pinhook denied for the one refused replace (delta)" \
    "$(($(metric_sum pinhook_admission_reviews_total 'endpoint="validate"' 'operation="UPDATE"' 'result="denied"') - updates_before))" 2 || rc=1

  # the cluster-scoped objects outlive the namespace: delete what was stored
  klog delete imagedigestmirrorset e2e-j-digests --wait=false || rc=1
  klog delete imagecontentpolicy e2e-j-icp --wait=false || rc=1
  klog delete imagecontentsourcepolicy e2e-j-icsp --wait=false || rc=1
  klog -n "$ns" delete configmap digest-mirror --wait=false || rc=1
  local left
  left=$(K get imagetagmirrorsets,imagedigestmirrorsets,imagecontentpolicies,imagecontentsourcepolicies -o name)
  expect_eq "mirror objects left after the clean-up" "${left:-none}" none || rc=1
  return "$rc"
}
