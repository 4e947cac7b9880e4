# shellcheck shell=bash
# title: audit namespace with controllers: nothing mutated, no extra ReplicaSets
# order: 180
# kube: 1.20 1.32
# proves: In an audit namespace and its twin no webhook sees: a Deployment (2 replicas) created,
#   then `kubectl set env`, both settled each time; the ReplicaSets stay at the twin's number for 3
#   s; as many ReplicaSets and Pods as in the twin; no `@sha256` in the stored Deployment,
#   ReplicaSets and Pods; the Deployment's `.spec` identical to the twin's; no review in the
#   namespace pinned anything (pinhook's summary lines).

scenario_audit_with_controllers_nothing_mutated() {
  local ns=e2e-r ref=e2e-r-ref rc=0 lines_before
  e2e_ns "$ns" pinhook.dev/mode=audit
  e2e_ns "$ref" pinhook.dev/ignore=true
  lines_before=$(log_lines)
  app_deployment web 2 "$(image app 1.0)" >"$RUN/r-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/r-deployment.yaml"
  settle "$ns" "$ref" web || rc=1
  both "$ns" "$ref" set env deploy/web FOO=bar
  settle "$ns" "$ref" web || rc=1
  watch_rs "$ns" "$(count "$ref" rs)" 3 || rc=1
  expect_eq "ReplicaSets, $ns = $ref (no webhook)" "$(count "$ns" rs)" "$(count "$ref" rs)" || rc=1
  expect_eq "Pods, $ns = $ref (no webhook)" "$(count "$ns" pods)" "$(count "$ref" pods)" || rc=1
  expect_eq "occurrences of '@sha256' in the stored Deployment, ReplicaSets and Pods" "$(no_digest_in "$ns" deployments rs pods)" 0 || rc=1
  same_object "stored Deployment spec, $ns vs $ref (no webhook)" "$(spec_json "$ref" deployment web)" "$(spec_json "$ns" deployment web)" || rc=1
  expect_eq "pinhook log: reviews in $ns that pinned something" \
    "$(log_since "$lines_before" | grep -F " namespace=$ns " | grep -F ': review ' | grep -vcF ' pinned=0 ' || true)" 0 || rc=1
  ok "pinhook log: reviews in $ns that would have pinned in enforce: $(log_since "$lines_before" | grep -F " namespace=$ns " | grep -F ': review ' | grep -vcF ' would_pin=0 ' || true)"
  log_counts "$ns" "$ref" rs pods
  return "$rc"
}
