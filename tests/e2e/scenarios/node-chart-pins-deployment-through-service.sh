# shellcheck shell=bash
# title: on a real node, the chart's in-cluster pinhook (called through its Service) pins a Deployment whose Pods run the pinned digest, pulled by digest
# order: 941
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone), in a namespace labelled pinhook.dev/mode=enforce that the tier's own pinhook skips
#   (chart-node.sh), so that only the chart's webhooks, calling pinhook's Service, see it: a
#   Deployment (2 replicas) with the tag-only `NODE_IP:PORT/team/node-chart:1.0` (an index:
#   linux/amd64 + linux/arm64, pushed for this scenario) and `NODE_IP:PORT/team/node-web:1.0`
#   is stored with its template pinned to the exact digests, its ReplicaSet and both Pods too;
#   both Pods reach Running on the node, each imageID `NODE_IP:PORT/team/<repo>@<the pinned
#   digest>`; in the registry's access log the node's containerd asked for team/node-chart's
#   manifests by digest only (the index, then its amd64 manifest), never by tag; the in-cluster
#   pinhook's log has the Deployment's review in that namespace, and the tier's pinhook none.
scenario_node_chart_pins_deployment_through_service() {
  local ns=e2e-node-chart-apps rc=0 reg rs pods p ids reqs lines_before amd64 want_chart want_web
  chart_node_ensure || return 1
  reg=$(chart_node_registry)
  # a fresh image, so that the node pulls it now: node/pause.c, its own seed
  node_oci_image "$RUN/oci-node-chart" "$RUN/pause" node-chart:1.0 amd64 arm64 || return 1
  DIGEST_node_chart_1_0=$(node_push_image "$RUN/oci-node-chart" "$REGISTRY_HOST" team/node-chart 1.0 "$REGISTRY_CA" "") ||
    { bad "pushing team/node-chart:1.0 failed"; return 1; }
  amd64=$(jq -r '[.manifests[] | select(.platform.architecture == "amd64") | .digest][0]' \
    "$RUN/oci-node-chart/blobs/sha256/${DIGEST_node_chart_1_0#sha256:}")
  want_chart="$reg/team/node-chart:1.0@$DIGEST_node_chart_1_0"
  want_web="$reg/team/node-web:1.0@$(digest node-web 1.0)"
  lines_before=$(log_lines)
  e2e_ns "$ns" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1
  klog -n "$ns" create -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
spec:
  replicas: 2
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
$(node_tolerations 6)
      terminationGracePeriodSeconds: 2
      containers:
        - name: chart
          image: $reg/team/node-chart:1.0
        - name: web
          image: $reg/team/node-web:1.0
EOF
  expect_eq "the stored Deployment's template images" "$(template_images "$ns" deployment shop)" "$want_chart $want_web" || rc=1
  wait_pods_running "$ns" app=shop 2 90 || rc=1
  rs=$(current_rs "$ns" shop)
  expect_eq "ReplicaSet $rs template images" "$(template_images "$ns" rs "$rs")" "$want_chart $want_web" || rc=1
  mapfile -t pods < <(K -n "$ns" get pods -l app=shop -o name)
  expect_eq "Pods of shop" "${#pods[@]}" 2 || rc=1
  for p in "${pods[@]}"; do
    expect_eq "$p images" "$(K -n "$ns" get "$p" -o jsonpath='{.spec.containers[*].image}')" "$want_chart $want_web" || rc=1
    ids=$(K -n "$ns" get "$p" -o jsonpath='{range .status.containerStatuses[*]}{.name}={.imageID}{" "}{end}')
    expect_contains "$p imageIDs" "$ids" "chart=$reg/team/node-chart@$DIGEST_node_chart_1_0 " || rc=1
    expect_contains "$p imageIDs" "$ids" "web=$reg/team/node-web@$(digest node-web 1.0) " || rc=1
  done
  chart_node_show "$ns" "$CHART_DIR_RUN/app-pods.txt"
  reqs=$(node_manifest_requests node-chart | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')
  log "  the node's manifest requests for team/node-chart: ${reqs:-none}"
  expect_eq "the node's manifest requests for team/node-chart by tag" \
    "$(node_manifest_requests node-chart | grep -vc ' sha256:' || true)" 0 || rc=1
  expect_contains "the node's manifest requests for team/node-chart" "$reqs" " $DIGEST_node_chart_1_0;" || rc=1
  expect_contains "the node's manifest requests for team/node-chart" "$reqs" " $amd64;" || rc=1
  expect_eq "the node's other manifest requests for team/node-chart (arm64...)" \
    "$(node_manifest_requests node-chart | grep -vc -e " $DIGEST_node_chart_1_0\$" -e " $amd64\$" || true)" 0 || rc=1
  # who pinned it: the in-cluster pinhook, not the tier's
  # (pinhook's review lines name namespace, kind and operation, not the object)
  expect_eq "pinned images of the in-cluster pinhook's /mutate reviews of a Deployment CREATE in $ns" \
    "$(chart_node_webhook_logs | cut -d' ' -f4- | jq -r --arg ns "$ns" 'select(.fields.message == "review" and
      .fields.endpoint == "mutate" and .fields.namespace == $ns and .fields.kind == "Deployment" and
      .fields.operation == "CREATE" and .fields.dry_run != true) | .fields.pinned' 2>/dev/null | sort | tr '\n' ' ')" "2 " || rc=1
  expect_eq "the tier's pinhook's log lines about $ns" "$(log_since "$lines_before" | grep -c "$ns" || true)" 0 || rc=1
  K delete ns "$ns" --wait=false >/dev/null || true
  return "$rc"
}
