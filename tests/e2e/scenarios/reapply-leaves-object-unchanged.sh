# shellcheck shell=bash
# title: re-applying the tag-only manifest leaves the stored object unchanged
# order: 60
# kube: 1.20 1.32
# proves: Idempotency: the tag-only Deployment manifest sent again for a stored Deployment goes
#   through pinhook again, which pins it to the same digests, so nothing changes. Client-side
#   `kubectl apply` twice, `kubectl diff` (exit 0), `kubectl apply --server-side` twice, `kubectl
#   create` then `replace` by the same field manager: each re-send counts one more /mutate UPDATE
#   answered with a patch (pinhook's metrics) and the stored object (`kubectl get -o yaml`: spec,
#   generation, resourceVersion...) is identical, except that a server-side re-apply moves
#   resourceVersion (asserted apart: the rest and managedFields without their times identical).
#   `kubectl create` then `replace` with kubectl's default managers: everything but resourceVersion
#   identical, kubectl-replace in managedFields; a second replace changes nothing. The controller
#   manager is frozen (SIGSTOP) while this runs and thawed at its end.
#
# The stored Deployment as `kubectl get -o yaml` shows it (kubectl 1.32 hides
# metadata.managedFields): spec, generation, resourceVersion, annotations...
deploy_yaml() { K -n "$1" get deployment "$2" -o yaml; }
# pinhook's counter of UPDATE reviews it answered with a patch (mutate endpoint)
mutate_updates() {
  curl -s --max-time 5 --cacert "$CERT_DIR/ca.crt" "$PINHOOK_URL/metrics" | awk '
    /^pinhook_admission_reviews_total\{/ && /endpoint="mutate"/ && /operation="UPDATE"/ &&
      /result="pinned"/ { n += $NF }
    END { print n + 0 }'
}
# expect_repinned WHAT COUNTER_BEFORE: the request carried the tags again and
# pinhook patched them (one more mutate UPDATE review answered with a patch)
expect_repinned() {
  expect_eq "$1: mutate UPDATE reviews pinhook answered with a patch (delta)" "$(($(mutate_updates) - $2))" 1
}
# Idempotency: every variant sends the TAG-ONLY manifest again for an existing
# object; pinhook sees the tags and pins them again to the same digests, so the
# apiserver finds nothing to store: the object (and its resourceVersion) stays.
# Exception, measured and asserted as such: server-side apply (3) and a replace
# by another field manager (5) rewrite metadata.managedFields, so the
# resourceVersion moves while spec and generation stay.
# Each second request waits for the next wall-clock second: managedFields times
# have 1 s resolution, and a same-second request could hide a timestamp write.
next_second() { sleep "$(awk -v n="$(date +%N)" 'BEGIN { printf "%.3f", 1.05 - n / 1e9 }')"; }
managed_fields() { # managed_fields NS NAME: managedFields without their times
  K -n "$1" get deployment "$2" -o yaml --show-managed-fields |
    awk '/^  managedFields:/ {m = 1; next} m && /^  [^ -]/ {m = 0} m && !/^    time:/'
}
# The controllers are frozen while this runs (cluster.sh e2e_controllers_freeze, SIGSTOP): a
# Deployment controller writes status and a revision annotation, and on 1.20 any `kubectl
# replace` of the manifest then drops the controller's managedFields entry (the body has no
# status) and the annotation (which bumps generation), so the object changes with or without
# pinhook (checked without any webhook). This is about what pinhook makes of a re-sent manifest.
scenario_reapply_leaves_object_unchanged() {
  local ns=e2e-f rc=0 before after out n
  e2e_controllers_freeze
  trap e2e_controllers_thaw EXIT # scenarios run in a subshell: this is its exit
  e2e_ns "$ns"
  local want
  want="$(pinned init 1.0) $(pinned app 1.0) $(pinned sidecar 1.0)"

  # 1. client-side apply, twice, same manifest. The 3-way patch of the 2nd apply
  #    sets the images back to the manifest's tags (live differs from the manifest).
  deployment_yaml again >"$RUN/f-csa.yaml"
  out=$(K -n "$ns" apply -f "$RUN/f-csa.yaml")
  log "  1st kubectl apply: $out"
  expect_eq "images after the 1st apply" "$(deploy_images "$ns" again)" "$want" || rc=1
  before=$(deploy_yaml "$ns" again)
  n=$(mutate_updates)
  next_second
  out=$(K -n "$ns" apply -f "$RUN/f-csa.yaml")
  log "  2nd kubectl apply: $out"
  expect_repinned "2nd kubectl apply" "$n" || rc=1
  same_object "2nd kubectl apply" "$before" "$(deploy_yaml "$ns" again)" || rc=1

  # 2. kubectl diff against the tag-only manifest (a dry-run PATCH, through pinhook):
  #    exit 0 = the server would store nothing different
  local diff_rc=0
  n=$(mutate_updates)
  next_second
  K -n "$ns" diff -f "$RUN/f-csa.yaml" >"$RUN/f-diff.out" 2>&1 || diff_rc=$?
  if ((diff_rc == 0)); then ok "kubectl diff of the tag-only manifest: no difference (exit 0)"; else
    bad "kubectl diff exit $diff_rc: $(cat "$RUN/f-diff.out")" || rc=1
  fi
  expect_repinned "kubectl diff" "$n" || rc=1

  # 3. server-side apply, twice. The applied image (tag) differs from the live
  #    one (pinned), so the apiserver counts the 2nd apply as a change by manager
  #    `kubectl` and stamps a new managedFields time: a write, resourceVersion +1.
  #    After pinhook re-pins, nothing else differs.
  deployment_yaml again-ssa >"$RUN/f-ssa.yaml"
  out=$(K -n "$ns" apply --server-side -f "$RUN/f-ssa.yaml")
  log "  1st kubectl apply --server-side: $out"
  expect_eq "images after the 1st server-side apply" "$(deploy_images "$ns" again-ssa)" "$want" || rc=1
  before=$(deploy_yaml "$ns" again-ssa)
  local mf_before
  mf_before=$(managed_fields "$ns" again-ssa)
  n=$(mutate_updates)
  next_second
  out=$(K -n "$ns" apply --server-side -f "$RUN/f-ssa.yaml")
  log "  2nd kubectl apply --server-side: $out"
  expect_repinned "2nd kubectl apply --server-side" "$n" || rc=1
  after=$(deploy_yaml "$ns" again-ssa)
  same_object "2nd kubectl apply --server-side (resourceVersion excluded)" \
    "$(grep -v '^  resourceVersion:' <<<"$before")" "$(grep -v '^  resourceVersion:' <<<"$after")" || rc=1
  same_object "2nd kubectl apply --server-side: managedFields apart from their times" \
    "$mf_before" "$(managed_fields "$ns" again-ssa)" || rc=1
  log "  note: resourceVersion $(jp_rv "$before") -> $(jp_rv "$after") (server-side apply: new managedFields time)"

  # 4. create, then replace (a full PUT with the tags) by the same field manager
  deployment_yaml again-put >"$RUN/f-put.yaml"
  klog -n "$ns" create --field-manager=e2e -f "$RUN/f-put.yaml"
  before=$(deploy_yaml "$ns" again-put)
  n=$(mutate_updates)
  next_second
  out=$(K -n "$ns" replace --field-manager=e2e -f "$RUN/f-put.yaml")
  log "  kubectl replace: $out"
  expect_repinned "kubectl replace" "$n" || rc=1
  same_object "kubectl replace (same field manager)" "$before" "$(deploy_yaml "$ns" again-put)" || rc=1

  # 5. the same with kubectl's default managers (kubectl-create, then kubectl-replace):
  #    the apiserver records the manager that sent the tags as owner of the image
  #    fields (managedFields), which is a real write: resourceVersion moves once,
  #    everything else (spec, generation) stays. A second replace is a no-op again.
  deployment_yaml again-put2 >"$RUN/f-put2.yaml"
  klog -n "$ns" create -f "$RUN/f-put2.yaml"
  before=$(deploy_yaml "$ns" again-put2)
  next_second
  K -n "$ns" replace -f "$RUN/f-put2.yaml" >/dev/null
  after=$(deploy_yaml "$ns" again-put2)
  same_object "kubectl replace after kubectl create (resourceVersion excluded)" \
    "$(grep -v '^  resourceVersion:' <<<"$before")" "$(grep -v '^  resourceVersion:' <<<"$after")" || rc=1
  expect_contains "managedFields after the replace" "$(managed_fields "$ns" again-put2)" "manager: kubectl-replace" || rc=1
  log "  note: resourceVersion $(jp_rv "$before") -> $(jp_rv "$after") (managedFields: kubectl-replace now owns the image fields it sent)"
  before=$after
  next_second
  K -n "$ns" replace -f "$RUN/f-put2.yaml" >/dev/null
  same_object "2nd kubectl replace" "$before" "$(deploy_yaml "$ns" again-put2)" || rc=1
  return "$rc"
}
jp_rv() { sed -n 's/^  resourceVersion: "\{0,1\}\([0-9]*\)"\{0,1\}$/\1/p' <<<"$1"; }
