# shellcheck shell=bash
# title: on a real node, the chart's 2 replicas pin one ReplicaSet revision's Pods to the digest its stored Pod carries, though the tag moved
# order: 945
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone: 2 webhook replicas), in a namespace in enforce that only the chart's webhooks see: a
#   fresh tag `NODE_IP:PORT/team/node-memo:1.0` (content A) and a ReplicaSet of 1 replica naming
#   it, whose Pod is stored pinned to A and runs. The tag is then pushed over (content B). A
#   /mutate review of the CREATE of another Pod of that ReplicaSet revision (its
#   pod-template-hash label and controller), naming the tag, sent straight to each replica at its
#   Pod IP, is pinned to A by both (the stored Pod's digest, read through the chart's RBAC), while
#   a Pod of another revision is pinned to B by at least one of them (the one whose registry
#   cache did not hold the tag yet: its own answer is B, and still it pins the revision to A).
#   Before issue 43 that replica resolved the tag afresh for the revision too: B.

# memo_pinned IP REVIEW: the image the replica at IP pins the review's Pod to
memo_pinned() {
  curl -s --max-time 10 -k -H 'Content-Type: application/json' --data-binary "$2" "https://$1:8443/mutate?timeout=10s" |
    jq -r '.response.patch // empty' | base64 -d 2>/dev/null |
    jq -r '.[] | select(.path == "/spec/containers/0/image") | .value'
}
# memo_rs IMAGE: the ReplicaSet (1 replica, revision label memo-r1) naming IMAGE
memo_rs() {
  printf 'apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: memo\nspec:\n  replicas: 1\n'
  printf '  selector:\n    matchLabels: {app: memo}\n  template:\n    metadata:\n'
  printf '      labels: {app: memo, pod-template-hash: memo-r1}\n    spec:\n'
  node_tolerations 6
  printf '      terminationGracePeriodSeconds: 2\n      containers:\n        - name: app\n          image: %s\n' "$1"
}

scenario_node_chart_revision_memo_two_replicas() {
  local ns=e2e-node-chart-memo rc=0 reg img digest_a digest_b rs_uid name ip got fresh=0
  chart_node_ensure || return 1
  reg=$(chart_node_registry)
  img="$reg/team/node-memo:1.0"
  node_oci_image "$RUN/oci-node-memo-a" "$RUN/pause" "node-memo:1.0 A" || return 1
  digest_a=$(node_push_image "$RUN/oci-node-memo-a" "$REGISTRY_HOST" team/node-memo 1.0 "$REGISTRY_CA" "") ||
    { bad "pushing team/node-memo:1.0 (A) failed"; return 1; }
  e2e_ns "$ns" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1
  memo_rs "$img" >"$RUN/memo-rs.yaml"
  klog -n "$ns" create -f "$RUN/memo-rs.yaml"
  wait_pods_running "$ns" app=memo 1 90 || rc=1
  expect_eq "the stored Pod's image" "$(pod_images "$ns" app=memo)" "1 $img@$digest_a" || rc=1
  rs_uid=$(jp "$ns" rs memo '{.metadata.uid}')

  # the tag moves
  node_oci_image "$RUN/oci-node-memo-b" "$RUN/pause" "node-memo:1.0 B" || return 1
  digest_b=$(node_push_image "$RUN/oci-node-memo-b" "$REGISTRY_HOST" team/node-memo 1.0 "$REGISTRY_CA" "") ||
    { bad "pushing team/node-memo:1.0 (B) failed"; return 1; }
  [[ $digest_a != "$digest_b" ]] || { bad "the two pushes gave one digest"; return 1; }
  log "  team/node-memo:1.0 moved: $digest_a -> $digest_b"

  while read -r name _ _ ip; do
    got=$(memo_pinned "$ip" "$(chart_node_revision_review "$ns" memo memo "$rs_uid" memo-r1 "$img" "same-$name")")
    log "  replica $name ($ip), a Pod of revision memo-r1: $got"
    expect_eq "replica $name pins the revision's next Pod to" "$got" "$img@$digest_a" || rc=1
    got=$(memo_pinned "$ip" "$(chart_node_revision_review "$ns" memo memo "$rs_uid" memo-r2 "$img" "other-$name")")
    log "  replica $name ($ip), a Pod of revision memo-r2 (its registry cache's answer): $got"
    [[ $got != "$img@$digest_b" ]] || fresh=$((fresh + 1))
  done < <(chart_node_live_pods webhook)
  if ((fresh >= 1)); then ok "$fresh replica(s) resolve the moved tag to B, and pin the revision to A all the same"; else
    bad "no replica resolved the moved tag to B: the test shows nothing about the revision memo" || rc=1
  fi
  K delete ns "$ns" --wait=false >/dev/null || true
  return "$rc"
}
