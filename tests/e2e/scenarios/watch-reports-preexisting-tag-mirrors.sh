# shellcheck shell=bash disable=SC2317 # (it calls functions it defines inside itself indirectly)
# title: watch: ImageTagMirrorSet and ImageContentPolicy that predate pinhook -> ClusterPolicyReport fail
# order: 240
# kube: 1.20 1.32
# proves: An ImageTagMirrorSet and an ImageContentPolicy with `allowMirrorByTags`, created while the
#   ValidatingWebhookConfiguration is away (they predate pinhook; it is put back as it was): the
#   ClusterPolicyReport pinhook-mirrors fails both (`mirror-by-digest-only`, pinhook's message);
#   once they are deleted the report goes.

scenario_watch_reports_preexisting_tag_mirrors() {
  local rc=0 dir="$WATCH_DIR/x" saved crd
  watch_ensure || return 1
  mkdir -p "$dir"
  klog apply -f "$ROOT/tests/fixtures/crds/"
  for crd in imagetagmirrorsets.config.openshift.io imagecontentpolicies.config.openshift.io; do
    klog wait --for=condition=Established "crd/$crd" --timeout=30s
  done
  # Created "before pinhook": the ValidatingWebhookConfiguration (its mirror guard refuses them)
  # is taken away for the two creates and put back as it was.
  K get validatingwebhookconfiguration pinhook -o json |
    jq 'del(.metadata.resourceVersion, .metadata.uid, .metadata.creationTimestamp, .metadata.generation, .metadata.managedFields)' \
      >"$dir/validating.json"
  klog delete validatingwebhookconfiguration pinhook
  saved=0
  openshift_mirrors ImageTagMirrorSet e2e-x-tags imageTagMirrors >"$dir/itms.yaml"
  openshift_mirrors ImageContentPolicy e2e-x-icp repositoryDigestMirrors "allowMirrorByTags: true" >"$dir/icp.yaml"
  klog create -f "$dir/itms.yaml" || rc=1
  klog create -f "$dir/icp.yaml" || rc=1
  klog create -f "$dir/validating.json" && saved=1
  ((saved)) || { bad "could not put the ValidatingWebhookConfiguration back"; return 1; }
  ok "ImageTagMirrorSet e2e-x-tags and ImageContentPolicy e2e-x-icp stored without the guard; guard back"
  cpr() { K get clusterpolicyreports.wgpolicyk8s.io pinhook-mirrors -o json 2>/dev/null || true; }
  cpr_has_both() {
    local json
    json=$(cpr)
    [[ -n $json ]] && [[ $(jq '[.results[] | select(.result == "fail")] | length' <<<"$json") == 2 ]]
  }
  wait_until $((WATCH_INTERVAL * 2 + 10)) "ClusterPolicyReport pinhook-mirrors to fail both" cpr_has_both || return 1
  expect_eq "its results" "$(cpr | jq -c '[.results[] | {result, rule, kind: .resources[0].kind, name: .resources[0].name}] | sort_by(.kind)')" \
    '[{"result":"fail","rule":"mirror-by-digest-only","kind":"ImageContentPolicy","name":"e2e-x-icp"},{"result":"fail","rule":"mirror-by-digest-only","kind":"ImageTagMirrorSet","name":"e2e-x-tags"}]' || rc=1
  expect_contains "the ImageTagMirrorSet's message" "$(cpr | jq -r '.results[] | select(.resources[0].kind == "ImageTagMirrorSet") | .message')" \
    "lets mirror.example:5000/team serve tag pulls for registry.example/team" || rc=1
  klog delete imagetagmirrorset e2e-x-tags
  klog delete imagecontentpolicy e2e-x-icp
  cpr_gone() { [[ -z $(cpr) ]]; }
  wait_until $((WATCH_INTERVAL * 2 + 10)) "ClusterPolicyReport pinhook-mirrors to go with its last finding" cpr_gone || rc=1
  return "$rc"
}
