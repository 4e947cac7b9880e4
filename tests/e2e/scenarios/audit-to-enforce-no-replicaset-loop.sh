# shellcheck shell=bash
# title: audit -> enforce, then set env: no ReplicaSet loop, template and new Pods pinned (issue 9)
# order: 130
# kube: 1.20 1.32
# proves: Issue 9's loop, with the controllers. Before the first scenario
#   (prepare_audit_to_enforce_no_replicaset_loop): a tag-only Deployment created in an audit
#   namespace and in a twin no webhook sees, both rollouts settled, then the namespace labelled
#   enforce. Then: the template is stored as written with 1 ReplicaSet; once a dry-run Pod comes
#   back pinned (≤ 60 s: pinhook caches namespace labels), `kubectl set env` in both; the namespace
#   holds at most 2 ReplicaSets for E2E_LOOP_WATCH (60) s, failing at once above that (the
#   Deployment is then paused); the twin has 2; the template is pinned, and the new ReplicaSet's Pod
#   pinned.
#
# The Deployment is admitted as written in audit. After the namespace moves to enforce,
# `kubectl set env` changes the template but no image: a pinhook that pins the controller's
# ReplicaSet instead of the template makes the Deployment controller create ReplicaSet after
# ReplicaSet (72 in 20 s in the issue). Expected: at most 2 for 60 s, the template pinned, the
# new ReplicaSet's Pods pinned.
# pinhook caches namespace labels for 30 s (--namespace-cache-ttl; the tier keeps the default),
# so the first half, up to the label change, runs before the first scenario
# (prepare_audit_to_enforce_no_replicaset_loop) and the cache ages while the others run; the
# scenario itself polls until pinhook applies enforce.
prepare_audit_to_enforce_no_replicaset_loop() {
  local ns=e2e-m ref=e2e-m-ref
  e2e_ns "$ns" pinhook.dev/mode=audit
  e2e_ns "$ref" pinhook.dev/ignore=true
  app_deployment d 1 "$(image app 1.0)" >"$RUN/m-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/m-deployment.yaml"
  settle "$ns" "$ref" d
  klog label ns "$ns" pinhook.dev/mode=enforce --overwrite
  date +%s >"$RUN/m-enforced-at"
}
scenario_audit_to_enforce_no_replicaset_loop() {
  local ns=e2e-m ref=e2e-m-ref rc=0 t0 rs
  [[ -s $RUN/m-enforced-at ]] || { bad "the first half (prepare_audit_to_enforce_no_replicaset_loop, before the first scenario) did not finish"; return 1; }
  expect_eq "template image stored in audit (as written)" "$(template_images "$ns" deployment d)" "$(image app 1.0)" || rc=1
  expect_eq "ReplicaSets in $ns after the create in audit" "$(count "$ns" rs)" 1 || rc=1
  expect_eq "label pinhook.dev/mode of $ns" "$(K get ns "$ns" -o jsonpath='{.metadata.labels.pinhook\.dev/mode}')" enforce || rc=1
  t0=$(<"$RUN/m-enforced-at")
  # poll until a dry-run Pod comes back pinned: pinhook applies enforce in the namespace
  wait_until 60 "pinhook to apply enforce in $ns (namespace label cache)" \
    dry_run_gives "$ns" "$(image app 1.0)" "$(pinned app 1.0)" || { bad "pinhook still audits $ns"; return 1; }
  ok "pinhook applies enforce in $ns; the label changed $(($(date +%s) - t0))s ago"

  both "$ns" "$ref" set env deploy/d FOO=bar
  t0=$(date +%s)
  if ! watch_rs "$ns" 2 "${E2E_LOOP_WATCH:-60}"; then
    rc=1
    # stop the loop (a paused Deployment gets no new ReplicaSet) so it cannot load the
    # scenarios after this one; the objects stay for a look
    klog -n "$ns" rollout pause deploy/d || true
    sleep 1
    log "  ReplicaSets in $ns when paused, $(($(date +%s) - t0))s after set env: $(count "$ns" rs)"
    log "  ReplicaSet images in $ns: $(images "$ns" rs '.spec.template.spec.containers[*].image' | tr '\n' ';')"
  fi
  wait_until 60 "the rollout of d in $ref to settle" rollout_settled "$ref" d || rc=1
  expect_eq "ReplicaSets in $ref (no webhook)" "$(count "$ref" rs)" 2 || rc=1
  expect_eq "template image after set env" "$(template_images "$ns" deployment d)" "$(pinned app 1.0)" || rc=1
  if ((rc == 0)) && settle "$ns" "$ref" d; then
    rs=$(current_rs "$ns" d)
    expect_eq "images of the Pods of the new ReplicaSet $rs" "$(pod_images "$ns" "$(rs_pods_selector "$ns" "$rs")")" "1 $(pinned app 1.0)" || rc=1
  else
    rc=1
  fi
  log_counts "$ns" "$ref" rs pods
  return "$rc"
}
