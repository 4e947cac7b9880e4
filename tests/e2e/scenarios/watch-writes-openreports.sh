# shellcheck shell=bash disable=SC2317 # (it calls functions it defines inside itself indirectly)
# title: watch --report-api openreports: Report and ClusterReport stored under the OpenReports CRDs, no PolicyReport
# order: 245
# kube: 1.20 1.32
# proves: The CRDs of manifests/components/openreports are Established on the 1.20.2 apiserver and
#   stored with their schema unchanged. The shared watch replicas stopped, `pinhook watch
#   --report-api openreports` runs as the shipped pinhook-watch ServiceAccount with the ClusterRole
#   of manifests/components/watch-openreports (rights on openreports.io reports only): an audit
#   namespace's pinned and unpinned Pods give the Report `pinhook` (apiVersion
#   openreports.io/v1alpha1, source pinhook, maxResults 1000, results pinned pass, tag-current
#   pass, pinned warn with pinhook's messages, summary pass 2 warn 1: every field written is read
#   back, nothing pruned); an ImageTagMirrorSet that predates pinhook gives the ClusterReport
#   `pinhook-mirrors` (mirror-by-digest-only fail). No PolicyReport is written in the namespace and
#   the ClusterPolicyReport pinhook-mirrors is left as it was; the next cycles write nothing (the
#   Report's resourceVersion unchanged); `pinhook inventory --report-api openreports` reads the
#   states back from the Report. Afterwards the base ClusterRole and the shared replica are back.

scenario_watch_writes_openreports() {
  local ns=e2e-or rc=0 dir="$WATCH_DIR/or" crd saved_role=0 saved_vwc=0 tagged pinned_app
  mkdir -p "$dir"
  # --- the CRDs on the 1.20 apiserver ---
  klog apply -f "$ROOT/manifests/components/openreports/crd.yaml" || return 1
  klog wait --for=condition=Established crd/reports.openreports.io crd/clusterreports.openreports.io \
    --timeout=30s || return 1
  # The shipped file's objects, read by kubectl offline (one JSON document each).
  local_json() { kubectl label --local -f "$1" -o json pinhook-e2e-none- | jq -s '[.[] | (.items[]? // .)]'; }
  local_json "$ROOT/manifests/components/openreports/crd.yaml" >"$dir/crds.json" || return 1
  for crd in reports.openreports.io clusterreports.openreports.io; do
    expect_eq "$crd: schema stored as shipped (sha256 of the sorted JSON)" \
      "$(K get crd "$crd" -o json | jq -S '.spec.versions[0].schema' | sha256sum | cut -c1-16)" \
      "$(jq -S --arg n "$crd" '.[] | select(.metadata.name == $n) | .spec.versions[0].schema' "$dir/crds.json" |
        sha256sum | cut -c1-16)" || rc=1
  done

  # --- the watch: the shared replicas stopped, the openreports ClusterRole in place ---
  watch_setup || return 1
  watch_stop_all
  K get clusterrole pinhook-watch -o json |
    jq 'del(.metadata.resourceVersion, .metadata.uid, .metadata.creationTimestamp, .metadata.managedFields, .metadata.annotations)' \
      >"$dir/base-clusterrole.json" && saved_role=1
  ((saved_role)) || { bad "could not save ClusterRole pinhook-watch"; return 1; }
  cp -r "$ROOT/manifests" "$dir/manifests"
  mkdir -p "$dir/manifests/overlays/openreports-check"
  printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/watch-openreports]\n' \
    >"$dir/manifests/overlays/openreports-check/kustomization.yaml"
  kubectl kustomize "$dir/manifests/overlays/openreports-check" >"$dir/rendered.yaml" || return 1
  local_json "$dir/rendered.yaml" |
    jq '.[] | select(.kind == "ClusterRole" and .metadata.name == "pinhook-watch")' >"$dir/or-clusterrole.json"
  [[ -s $dir/or-clusterrole.json ]] || { bad "no ClusterRole pinhook-watch in base + components/watch-openreports"; return 1; }
  local body_rc=0
  or_body || body_rc=1

  # --- back as it was: the base ClusterRole, no mirror object, the shared replica ---
  [[ -s $WATCH_DIR/watch-or.pid ]] && stop_pid "$(<"$WATCH_DIR/watch-or.pid")" "pinhook watch --report-api openreports" 10
  rm -f "$WATCH_DIR/watch-or.pid"
  K delete imagetagmirrorset e2e-or-tags --ignore-not-found >/dev/null 2>&1 || true
  klog replace -f "$dir/base-clusterrole.json" || { bad "ClusterRole pinhook-watch not restored"; rc=1; }
  if ((saved_vwc == 0)) && [[ -s $dir/validating.json ]] && ! K get validatingwebhookconfiguration pinhook >/dev/null 2>&1; then
    klog create -f "$dir/validating.json" || { bad "ValidatingWebhookConfiguration not restored"; rc=1; }
  fi
  watch_ensure || rc=1
  holder_is_shared() { [[ $(lease_holder) == watch-[01] ]]; }
  wait_until $((WATCH_LEASE_SECONDS * 3)) "a shared replica to hold the Lease again" holder_is_shared || rc=1
  ((body_rc == 0)) || rc=1
  return "$rc"
}

# or_body: everything between the set-up and the restore (scenario_watch_writes_openreports's
# locals: ns, dir, rc, saved_vwc, tagged, pinned_app)
or_body() {
  klog apply -f "$dir/or-clusterrole.json" || return 1
  expect_eq "ClusterRole pinhook-watch: report rules" \
    "$(K get clusterrole pinhook-watch -o json | jq -c '[.rules[] | select(.apiGroups[0] | test("reports")) | "\(.apiGroups[0])/\(.resources[0])=\(.resourceNames[0])"]')" \
    '["openreports.io/reports=pinhook","openreports.io/clusterreports=pinhook-mirrors"]' || rc=1
  local cpr_before
  cpr_before=$(K get clusterpolicyreports.wgpolicyk8s.io pinhook-mirrors -o jsonpath='{.metadata.resourceVersion}' 2>/dev/null || echo absent)

  # An ImageTagMirrorSet that predates pinhook (the guard taken away for its create).
  klog apply -f "$ROOT/tests/fixtures/crds/" || return 1
  klog wait --for=condition=Established crd/imagetagmirrorsets.config.openshift.io --timeout=30s || return 1
  K get validatingwebhookconfiguration pinhook -o json |
    jq 'del(.metadata.resourceVersion, .metadata.uid, .metadata.creationTimestamp, .metadata.generation, .metadata.managedFields)' \
      >"$dir/validating.json" || return 1
  klog delete validatingwebhookconfiguration pinhook || return 1
  openshift_mirrors ImageTagMirrorSet e2e-or-tags imageTagMirrors >"$dir/itms.yaml"
  klog create -f "$dir/itms.yaml" || rc=1
  klog create -f "$dir/validating.json" && saved_vwc=1
  ((saved_vwc)) || { bad "could not put the ValidatingWebhookConfiguration back"; return 1; }

  # An audit namespace created after the shared replicas stopped: one pinned, one unpinned Pod.
  e2e_ns "$ns" pinhook.dev/mode=audit || return 1
  tagged=$(image app 1.0)
  pinned_app=$(pinned app 2.0)
  klog -n "$ns" run legacy --image="$tagged" --restart=Never || return 1
  klog -n "$ns" run current --image="$pinned_app" --restart=Never || return 1
  # replica watch-or (Lease pinhook-watch, the only one its Role lets it update)
  watch_start or --report-api openreports || return 1

  rep() { K -n "$ns" get reports.openreports.io pinhook -o json 2>/dev/null || true; }
  rep_complete() { [[ $(rep | jq '.results | length') == 3 ]]; }
  wait_until $((WATCH_INTERVAL * 2 + WATCH_LEASE_SECONDS * 3)) "Report pinhook in $ns with 3 results" rep_complete || return 1
  local report
  report=$(rep)
  expect_eq "the Report's envelope" \
    "$(jq -c '{apiVersion, kind, source, configuration, summary, managedBy: .metadata.labels["app.kubernetes.io/managed-by"]}' <<<"$report")" \
    '{"apiVersion":"openreports.io/v1alpha1","kind":"Report","source":"pinhook","configuration":{"limits":{"maxResults":1000}},"summary":{"error":0,"fail":0,"pass":2,"skip":0,"warn":1},"managedBy":"pinhook"}' || rc=1
  expect_eq "its results" \
    "$(jq -c '[.results[] | {name: .resources[0].name, kind: .resources[0].kind, rule, result, severity, state: .properties.state, source, scored}]' <<<"$report")" \
    '[{"name":"current","kind":"Pod","rule":"pinned","result":"pass","severity":"high","state":"pinned-current","source":"pinhook","scored":false},{"name":"current","kind":"Pod","rule":"tag-current","result":"pass","severity":"medium","state":"pinned-current","source":"pinhook","scored":false},{"name":"legacy","kind":"Pod","rule":"pinned","result":"warn","severity":"high","state":"unpinned","source":"pinhook","scored":false}]' || rc=1
  expect_eq "the unpinned result's message" \
    "$(jq -r '.results[] | select(.resources[0].name == "legacy") | .message' <<<"$report")" \
    "containers[legacy] runs $tagged by tag, not pinned to a digest" || rc=1
  expect_eq "the pinned result's properties" \
    "$(jq -c '.results[0].properties | {image, pinnedDigest, currentDigest, container}' <<<"$report")" \
    "{\"image\":\"$pinned_app\",\"pinnedDigest\":\"$(digest app 2.0)\",\"currentDigest\":\"$(digest app 2.0)\",\"container\":\"containers[current]\"}" || rc=1
  expect_eq "every result has its timestamp" "$(jq '[.results[] | select(.timestamp.seconds > 0)] | length' <<<"$report")" 3 || rc=1
  log "  kubectl get reports.openreports.io -n $ns:"
  K -n "$ns" get reports.openreports.io | while IFS= read -r line; do log "    $line"; done

  crep() { K get clusterreports.openreports.io pinhook-mirrors -o json 2>/dev/null || true; }
  crep_fails() { [[ $(crep | jq -r '[.results[] | select(.resources[0].name == "e2e-or-tags") | .result] | join(",")') == fail ]]; }
  wait_until $((WATCH_INTERVAL * 2 + 10)) "ClusterReport pinhook-mirrors to fail e2e-or-tags" crep_fails || return 1
  expect_eq "the ClusterReport's result" \
    "$(crep | jq -c '{kind, source, r: [.results[] | select(.resources[0].name == "e2e-or-tags") | {rule, result, kind: .resources[0].kind}]}')" \
    '{"kind":"ClusterReport","source":"pinhook","r":[{"rule":"mirror-by-digest-only","result":"fail","kind":"ImageTagMirrorSet"}]}' || rc=1
  expect_contains "its message" "$(crep | jq -r '.results[] | select(.resources[0].name == "e2e-or-tags") | .message')" \
    "lets mirror.example:5000/team serve tag pulls for registry.example/team" || rc=1

  # wgpolicyk8s untouched.
  expect_eq "PolicyReports in $ns" "$(K -n "$ns" get policyreports.wgpolicyk8s.io -o name | wc -l)" 0 || rc=1
  expect_eq "ClusterPolicyReport pinhook-mirrors (resourceVersion or absent)" \
    "$(K get clusterpolicyreports.wgpolicyk8s.io pinhook-mirrors -o jsonpath='{.metadata.resourceVersion}' 2>/dev/null || echo absent)" \
    "$cpr_before" || rc=1

  # Unchanged: two more cycles write nothing.
  local rv cycles
  rv=$(K -n "$ns" get reports.openreports.io pinhook -o jsonpath='{.metadata.resourceVersion}')
  cycles=$(cycles_in "$WATCH_DIR/watch-or.log")
  wait_until $((WATCH_INTERVAL * 3 + 10)) "two more cycles" cycles_at_least "$WATCH_DIR/watch-or.log" $((cycles + 2)) || rc=1
  expect_eq "the last cycle's report writes and events" "$(last_cycle "$WATCH_DIR/watch-or.log")" "0 0" || rc=1
  expect_eq "the Report's resourceVersion" \
    "$(K -n "$ns" get reports.openreports.io pinhook -o jsonpath='{.metadata.resourceVersion}')" "$rv" || rc=1

  # pinhook inventory reads the states back from the Report (admin kubeconfig).
  local inventory
  inventory=$("$PINHOOK_BIN" inventory --report-api openreports -n "$ns" -o json \
    --kubeconfig "${E2E_KUBECONFIG:-$E2E_WORK/kubeconfig}" 2>"$dir/inventory.err") || {
    bad "pinhook inventory failed: $(<"$dir/inventory.err")"
    return 1
  }
  expect_eq "pinhook inventory --report-api openreports: states" \
    "$(jq -r '[.images[] | .state] | sort | join(",")' <<<"$inventory")" "pinned-current,unpinned" || rc=1
  return "$rc"
}
