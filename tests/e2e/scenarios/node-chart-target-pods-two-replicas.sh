# shellcheck shell=bash
# title: on a real node, the chart's 2 replicas at `target: pods`: every Pod of one Deployment revision gets one digest though the tag moved and both replicas restarted
# order: 945
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone: 2 webhook replicas), `helm3 upgrade` with `policy.target=pods` (both replicas pick the
#   policy up: a Deployment sent to each at its Pod IP comes back unpatched), in a namespace in
#   enforce that only the chart's webhooks see: a fresh tag `NODE_IP:PORT/team/node-pods:1.0`
#   (content A) and a Deployment of 1 replica naming it; its Pod is stored pinned to A and runs,
#   the Deployment's template stays as written. The tag is pushed over (content B) and the
#   chart's webhook Deployment is restarted, so neither replica remembers anything: a Pod with no
#   owner sent to each new replica is pinned to B. Scaled to 3 through the real apiserver, the 2
#   new Pods of the same revision are pinned to A (the revision's stored Pod, read by whichever
#   replica answers; the chart's logs show which replicas answered /mutate and /validate; a next
#   Pod of the revision sent straight to each replica is pinned to A by both), and
#   after `kubectl rollout restart` of the Deployment the new revision's 3 Pods are pinned to B.
#   The release's policy is put back with `helm3 upgrade` of its own values, and both replicas
#   patch a Deployment's template again. Before issue 43 the revision memo lived in one process:
#   a restarted or other replica pinned the scale-up to B, and one revision ran two digests.

# tp_review NS KIND IMAGE UID: a dry-run /mutate AdmissionReview of the CREATE of a Pod (no
# owner) or a Deployment naming IMAGE, sent straight to a replica (nothing is stored)
tp_review() {
  jq -nc --arg ns "$1" --arg kind "$2" --arg image "$3" --arg uid "$4" '
    {name: "app", image: $image} as $c |
    (if $kind == "Pod" then
      {gvk: {group: "", version: "v1", kind: "Pod"}, res: {group: "", version: "v1", resource: "pods"},
       object: {apiVersion: "v1", kind: "Pod", metadata: {name: "probe", namespace: $ns},
         spec: {containers: [$c]}}}
    else
      {gvk: {group: "apps", version: "v1", kind: "Deployment"},
       res: {group: "apps", version: "v1", resource: "deployments"},
       object: {apiVersion: "apps/v1", kind: "Deployment", metadata: {name: "probe", namespace: $ns},
         spec: {selector: {matchLabels: {app: "probe"}},
           template: {metadata: {labels: {app: "probe"}}, spec: {containers: [$c]}}}}}
    end) as $o |
    {apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
     request: {uid: ("e2e-target-pods-" + $uid), kind: $o.gvk, resource: $o.res, namespace: $ns,
       name: "probe", operation: "CREATE", dryRun: true, userInfo: {username: "e2e"},
       object: $o.object}}'
}
# tp_patch IP REVIEW: the replica at IP's patch for the review, one "PATH VALUE" line per op that
# sets an image (nothing when it patches none)
tp_patch() {
  curl -s --max-time 10 -k -H 'Content-Type: application/json' --data-binary "$2" "https://$1:8443/mutate?timeout=10s" |
    jq -r '.response.patch // empty' | base64 -d 2>/dev/null |
    jq -r '.[] | select(.path | endswith("/image")) | "\(.path) \(.value)"'
}
# tp_templates_are WANT NS IMAGE: every live webhook replica patches (WANT=patched) or leaves
# (WANT=unpatched) the template of a Deployment naming IMAGE
tp_templates_are() {
  local name ip got n=0
  while read -r name _ _ ip; do
    got=$(tp_patch "$ip" "$(tp_review "$2" Deployment "$3" "probe-$name")")
    n=$((n + 1))
    case $1 in
      patched) [[ -n $got ]] || return 1 ;;
      unpatched) [[ -z $got ]] || return 1 ;;
    esac
  done < <(chart_node_live_pods webhook)
  ((n == 2))
}
# tp_deployment IMAGE: Deployment web of 1 replica naming IMAGE (tolerates the node)
tp_deployment() {
  printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n'
  printf '  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n'
  node_tolerations 6
  printf '      terminationGracePeriodSeconds: 2\n      containers:\n        - name: app\n          image: %s\n' "$1"
}
# tp_answered NS: "<pod suffix> mutate=N validate=M" per live webhook replica: the namespace's
# Pod reviews (not dry runs) it logged
tp_answered() {
  local p f
  for p in $(chart_node_live_pods webhook | cut -d' ' -f1); do
    f=$(cat /var/log/pods/"${CHART_NS}_${p}"_*/pinhook/*.log 2>/dev/null | cut -d' ' -f4- |
      jq -r --arg ns "$1" 'select(.fields.message == "review" and .fields.namespace == $ns and
        .fields.kind == "Pod" and .fields.dry_run != true) | .fields.endpoint' 2>/dev/null)
    printf '%s mutate=%s validate=%s\n' "${p: -5}" "$(grep -c '^mutate$' <<<"$f" || true)" "$(grep -c '^validate$' <<<"$f" || true)"
  done
}
# tp_policy_back: the release's own values again (target: templates, the default)
tp_policy_back() {
  helm3 upgrade "$CHART_REL" "$ROOT/charts/pinhook" -n "$CHART_NS" -f "$CHART_DIR_RUN/values.yaml" \
    >"$RUN/node-chart-target-pods-back.log" 2>&1
}

scenario_node_chart_target_pods_two_replicas() {
  local ns=e2e-node-chart-pods rc=0 reg img probe digest_a digest_b old name ip got t0 rs new_rs line
  chart_node_ensure || return 1
  reg=$(chart_node_registry)
  img="$reg/team/node-pods:1.0"
  probe="$reg/team/node-app:1.0"
  e2e_ns "$ns" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1

  # 1. the release at target: pods
  t0=$(date +%s.%N)
  if ! helm3 upgrade "$CHART_REL" "$ROOT/charts/pinhook" -n "$CHART_NS" -f "$CHART_DIR_RUN/values.yaml" \
    --set policy.target=pods >"$RUN/node-chart-target-pods.log" 2>&1; then
    bad "helm3 upgrade --set policy.target=pods failed: $(tail -n 5 "$RUN/node-chart-target-pods.log" | tr '\n' ' ')"
    return 1
  fi
  if wait_until 180 "both replicas leave a Deployment's template as written (target: pods)" tp_templates_are unpatched "$ns" "$probe"; then
    ok "both replicas at target: pods $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s after helm3 upgrade"
  else
    tp_policy_back
    bad "the replicas did not take target: pods up"
    return 1
  fi

  # 2. revision 1 of web, its first Pod pinned to A
  node_oci_image "$RUN/oci-node-pods-a" "$RUN/pause" "node-pods:1.0 A" || { tp_policy_back; return 1; }
  digest_a=$(node_push_image "$RUN/oci-node-pods-a" "$REGISTRY_HOST" team/node-pods 1.0 "$REGISTRY_CA" "") ||
    { bad "pushing team/node-pods:1.0 (A) failed"; tp_policy_back; return 1; }
  tp_deployment "$img" >"$RUN/node-chart-pods-web.yaml"
  klog -n "$ns" create -f "$RUN/node-chart-pods-web.yaml"
  wait_pods_running "$ns" app=web 1 90 || rc=1
  expect_eq "web's first Pod" "$(pod_images "$ns" app=web)" "1 $img@$digest_a" || rc=1
  expect_eq "web's template (target: pods leaves it as written)" "$(template_images "$ns" deployment web)" "$img" || rc=1
  rs=$(current_rs "$ns" web)

  # 3. the tag moves; both replicas restarted: nothing of revision 1 in any process
  node_oci_image "$RUN/oci-node-pods-b" "$RUN/pause" "node-pods:1.0 B" || { tp_policy_back; return 1; }
  digest_b=$(node_push_image "$RUN/oci-node-pods-b" "$REGISTRY_HOST" team/node-pods 1.0 "$REGISTRY_CA" "") ||
    { bad "pushing team/node-pods:1.0 (B) failed"; tp_policy_back; return 1; }
  [[ $digest_a != "$digest_b" ]] || { bad "the two pushes gave one digest"; tp_policy_back; return 1; }
  log "  team/node-pods:1.0 moved: $digest_a -> $digest_b"
  old=$(chart_node_live_pods webhook | cut -d' ' -f1 | tr '\n' ' ')
  klog -n "$CHART_NS" rollout restart deployment "$CHART_FULL"
  wait_until 240 "two new webhook Pods Running and Ready" chart_node_new_pods_ready "$old" ||
    { bad "the webhook Pods were not replaced"; tp_policy_back; return 1; }
  while read -r name _ _ ip; do
    got=$(tp_patch "$ip" "$(tp_review "$ns" Pod "$img" "fresh-$name")")
    log "  new replica $name ($ip), a Pod with no owner: $got"
    expect_eq "new replica $name pins a Pod with no owner to" "$got" "/spec/containers/0/image $img@$digest_b" || rc=1
  done < <(chart_node_live_pods webhook)

  # 4. the same revision scaled up through the apiserver: A, from the stored Pod
  klog -n "$ns" scale deployment web --replicas=3
  wait_pods_running "$ns" app=web 3 90 || rc=1
  expect_eq "the 3 Pods of revision $rs (2 created after the tag moved, by restarted replicas)" \
    "$(pod_images "$ns" app=web)" "3 $img@$digest_a" || rc=1
  expect_eq "web's ReplicaSets" "$(count "$ns" rs)" "1" || rc=1
  # Whichever replica the apiserver's connections reach, both answer alike: a next Pod of the
  # revision sent straight to each restarted replica is pinned to A by both.
  local rs_uid hash
  rs_uid=$(jp "$ns" rs "$rs" '{.metadata.uid}')
  hash=$(jp "$ns" rs "$rs" '{.metadata.labels.pod-template-hash}')
  while read -r name _ _ ip; do
    got=$(tp_patch "$ip" "$(chart_node_revision_review "$ns" web "$rs" "$rs_uid" "$hash" "$img" "$name")")
    expect_eq "replica $name (restarted, its registry answering B) pins the revision's next Pod to" \
      "$got" "/spec/containers/0/image $img@$digest_a" || rc=1
  done < <(chart_node_live_pods webhook)

  # 5. a new revision: B
  klog -n "$ns" rollout restart deployment web
  wait_until 120 "web's new revision rolled out" K -n "$ns" rollout status deployment web --timeout=5s >/dev/null || rc=1
  new_rs=$(current_rs "$ns" web)
  [[ $new_rs != "$rs" ]] || { bad "kubectl rollout restart made no new ReplicaSet" || rc=1; }
  wait_pods_running "$ns" "app=web,pod-template-hash=${new_rs##*-}" 3 90 || rc=1
  expect_eq "the 3 Pods of the new revision $new_rs" \
    "$(pod_images "$ns" "app=web,pod-template-hash=${new_rs##*-}")" "3 $img@$digest_b" || rc=1
  while IFS= read -r line; do log "  replica $line (this namespace's Pod reviews since the restart)"; done < <(tp_answered "$ns")

  # 6. the release's policy back
  t0=$(date +%s.%N)
  tp_policy_back || { bad "helm3 upgrade back to the release's values failed: $(tail -n 5 "$RUN/node-chart-target-pods-back.log" | tr '\n' ' ')"; rc=1; }
  if wait_until 180 "both replicas patch a Deployment's template again" tp_templates_are patched "$ns" "$probe"; then
    ok "policy back to the release's values on both replicas in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s"
  else
    bad "the replicas still leave templates as written" || rc=1
  fi
  K delete ns "$ns" --wait=false >/dev/null || true
  return "$rc"
}
