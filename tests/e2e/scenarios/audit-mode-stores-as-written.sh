# shellcheck shell=bash
# title: audit namespace: admitted unpinned, warning only for what enforce would deny
# order: 90
# kube: 1.20 1.32
# proves: In a namespace labelled `pinhook.dev/mode=audit` at its creation: a tag-only Deployment (3
#   images pinhook can resolve) is admitted (exit 0) with no `Warning:`, stored with its tags (no
#   `@sha256` anywhere), its `.spec` identical (`jq -S`) to the same manifest stored in a namespace
#   no webhook sees (`pinhook.dev/ignore=true`). A Pod with `team/app:does-not-exist` is admitted
#   with exactly one warning, exactly `Warning: pinhook audit: would deny container app: tag
#   does-not-exist not found in 127.0.0.1:PORT/team/app (image ...)` cut at 120 characters, stored
#   with its tag, `.spec` identical to the unwebhooked copy. pinhook's side: no review answered with
#   a patch, `pinhook_policy_violations_total{mode="audit"}` +1, one `policy violation` log line
#   (`mode=audit violation="resolution_failed" admitted=true image=...`), one /mutate summary line
#   for the Deployment (`mode=audit pinned=0 would_pin=3 violations=0`), no per-image line at info.
#
# warning_text TEXT: TEXT as pinhook's render.rs (shape_warnings) sends it: cut to 120 characters, the last one '…'
warning_text() {
  local text=$1
  if ((${#text} > 120)); then text="${text:0:119}…"; fi
  printf '%s' "$text"
}

# The namespace carries pinhook.dev/mode=audit from its creation on (pinhook caches namespace
# labels for 30 s). What the code promises (src/admission/pipeline.rs `finish`, render.rs
# `all_warnings`): in audit, nothing is patched and nothing denied; an image that enforce would
# deny becomes a warning `pinhook audit: would deny <container kind> <name>: <why> (image <image>)`
# (cut to 120 characters), an audit annotation, a `policy violation` log line and
# pinhook_policy_violations_total{mode="audit"}; an image that enforce would pin becomes
# `Unchanged` ("audit mode: would pin to sha256:…"): no warning, counted as `would_pin` in the
# review's one summary log line (the per-image `audit: would pin image` line is at debug).
scenario_audit_mode_stores_as_written() {
  local ns=e2e-i ref=e2e-i-ref rc=0 dir="$RUN/i"
  mkdir -p "$dir"
  e2e_ns "$ns" pinhook.dev/mode=audit
  # The same manifests stored where no pinhook webhook is called (the opt-out label): the
  # apiserver's own result without any patch, to compare the audited objects with.
  e2e_ns "$ref" pinhook.dev/ignore=true
  expect_eq "label pinhook.dev/mode of $ns" "$(K get ns "$ns" -o jsonpath='{.metadata.labels.pinhook\.dev/mode}')" audit || rc=1
  local patched_before violations_before lines_before
  patched_before=$(metric_sum pinhook_admission_reviews_total 'result="pinned"')
  violations_before=$(metric_sum pinhook_policy_violations_total 'mode="audit"')
  lines_before=$(log_lines)

  # 1. a Deployment whose three tag-only images pinhook can resolve
  deployment_yaml web >"$dir/deployment.yaml"
  kubectl_to "$dir/deployment" -n "$ns" create -f "$dir/deployment.yaml"
  expect_eq "kubectl create deployment: exit code" "$KCODE" 0 || rc=1
  expect_eq "kubectl create deployment: Warning lines on stderr (none: a tag audit would pin is no warning)" \
    "$(grep -c '^Warning:' <<<"$KERR" || true)" 0 || rc=1
  expect_eq "stored deployment images (tags as written)" "$(deploy_images "$ns" web)" \
    "$(image init 1.0) $(image app 1.0) $(image sidecar 1.0)" || rc=1
  expect_eq "occurrences of '@sha256' in the stored deployment" \
    "$(K -n "$ns" get deployment web -o json | grep -c '@sha256' || true)" 0 || rc=1
  K -n "$ref" create -f "$dir/deployment.yaml" >/dev/null
  same_object "stored deployment spec, $ns vs $ref (no webhook)" \
    "$(spec_json "$ref" deployment web)" "$(spec_json "$ns" deployment web)" || rc=1

  # 2. a Pod whose tag does not exist (enforce denies it: missing-tag-refused)
  cat >"$dir/pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: missing
spec:
  containers:
    - name: app
      image: $(image app does-not-exist)
EOF
  kubectl_to "$dir/pod" -n "$ns" create -f "$dir/pod.yaml"
  expect_eq "kubectl create pod: exit code" "$KCODE" 0 || rc=1
  local warnings
  warnings=$(grep '^Warning:' <<<"$KERR" || true)
  expect_eq "kubectl create pod: Warning lines" "$(grep -c . <<<"$warnings" || true)" 1 || rc=1
  expect_contains "kubectl create pod: warning" "$warnings" \
    "Warning: pinhook audit: would deny container app: tag does-not-exist not found in $REGISTRY_HOST/team/app" || rc=1
  expect_eq "kubectl create pod: the whole warning" "$warnings" \
    "Warning: $(warning_text "pinhook audit: would deny container app: tag does-not-exist not found in $REGISTRY_HOST/team/app (image $(image app does-not-exist))")" || rc=1
  expect_eq "stored pod image (tag as written)" "$(jp "$ns" pod missing '{.spec.containers[0].image}')" "$(image app does-not-exist)" || rc=1
  K -n "$ref" create -f "$dir/pod.yaml" >/dev/null
  same_object "stored pod spec, $ns vs $ref (no webhook)" "$(spec_json "$ref" pod missing)" "$(spec_json "$ns" pod missing)" || rc=1

  # 3. pinhook's side: no patch answered, one audit violation counted and logged
  expect_eq "reviews pinhook answered with a patch (delta)" \
    "$(($(metric_sum pinhook_admission_reviews_total 'result="pinned"') - patched_before))" 0 || rc=1
  expect_eq "pinhook_policy_violations_total{mode=\"audit\"} (delta, all reasons; the log line below says which)" \
    "$(($(metric_sum pinhook_policy_violations_total 'mode="audit"') - violations_before))" 1 || rc=1
  local new violations
  new=$(log_since "$lines_before")
  violations=$(grep 'policy violation' <<<"$new" || true)
  expect_eq "pinhook log: 'policy violation' lines" "$(grep -c . <<<"$violations" || true)" 1 || rc=1
  local field
  for field in 'mode=audit' 'violation="resolution_failed"' 'admitted=true' "image=$(image app does-not-exist)"; do
    expect_contains "pinhook log: policy violation" "$violations" "$field" || rc=1
  done
  # one summary line per review at info (issue 10): the Deployment's says what enforce would
  # have pinned; per-image lines are at debug
  local summary
  # (the ReplicaSet and Pod the controllers make of the Deployment are reviewed too, with lines
  # of their own: kind=ReplicaSet, kind=Pod in the review span; counted apart, not asserted)
  summary=$(grep ': review endpoint=mutate ' <<<"$new" | grep ' kind=Deployment ' || true)
  expect_eq "pinhook log: summary lines of the Deployment's /mutate review" "$(grep -c . <<<"$summary" || true)" 1 || rc=1
  for field in 'mode=audit' 'pinned=0' 'would_pin=3' 'violations=0'; do
    expect_contains "pinhook log: the Deployment's review" "$summary" "$field" || rc=1
  done
  expect_eq "pinhook log: per-image lines at info ('pinned image', 'audit: would pin image')" \
    "$(grep -c -e 'pinned image' -e 'audit: would pin image' <<<"$new" || true)" 0 || rc=1
  log "  note: /mutate summary lines of the controllers' ReplicaSet and Pod reviews so far: $(grep ': review endpoint=mutate ' <<<"$new" | grep -c -e ' kind=ReplicaSet ' -e ' kind=Pod ' || true)"
  return "$rc"
}
