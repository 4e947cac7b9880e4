# shellcheck shell=bash
# title: on a real node, the watch reports what the node runs and a pinned digest that vanished
# order: 925
# needs: node
# proves: (issue 29) With `pinhook watch` running against the node's Pods:
#   1. What runs. `team/node-drift:1.0` is pushed (content A) and another image (content B) is
#      imported into the node's containerd under the same tag (and as REPO@B, as a CRI pull names
#      it): an unpinned `IfNotPresent` Pod of
#      that tag in an audit namespace is admitted as written and runs B (its
#      `status.containerStatuses[0].imageID` is `REPO@B`). Within two rechecks the namespace's
#      PolicyReport has a `runs-pinned` warn result with state `runs-stale-digest`,
#      `runningDigest` B, `currentDigest` A and `node` the node's name; a RunsStaleDigest Event
#      regards the Pod; `pinhook inventory` shows the state, B as running and the node.
#   2. A digest that vanished. A Deployment of `team/node-vanish:1.0` in an enforce namespace runs
#      pinned to V; V's manifest is deleted from the registry (DELETE by digest, 202). Within one
#      recheck after the delete (2 × the interval + 10 s) the report has a `digest-available` fail
#      result with state `digest-missing` and `pinnedDigest` V, a PinnedDigestMissing Event
#      regards the Deployment, `pinhook_running_images{state="digest-missing"}` is 1, and the
#      registry's access log has the watch's HEAD of V by digest answered 404.
# wrw_show NS RULE REASON: log NS's report results of RULE and its Events of REASON (README output)
wrw_show() {
  log "  kubectl get policyreport pinhook -n $1 ($2):"
  report_json "$1" | jq -r --arg rule "$2" '.results[] | select(.rule == $rule) | "\(.rule) \(.result): \(.message)"' |
    while IFS= read -r line; do log "    $line"; done
  log "  kubectl get events.events.k8s.io -n $1:"
  K -n "$1" get events.events.k8s.io --field-selector "reason=$3" | while IFS= read -r line; do log "    $line"; done
}
scenario_node_watch_reports_what_runs() {
  local audit=e2e-node-drift enforce=e2e-node-vanish rc=0 a b v repo oci port log_before status
  watch_ensure || return 1
  port=$(watch_any_port) || { bad "no watch replica runs"; return 1; }

  # --- 1. a Pod that runs another digest than its tag's ---------------------------------------
  repo="$REGISTRY_HOST/team/node-drift"
  node_oci_image "$RUN/oci-node-drift" "$RUN/pause" "node-drift:1.0" || return 1
  a=$(node_push_image "$RUN/oci-node-drift" "$REGISTRY_HOST" team/node-drift 1.0 "$REGISTRY_CA") ||
    { bad "pushing team/node-drift:1.0 failed"; return 1; }
  oci="$RUN/oci-node-drift-preloaded"
  node_oci_image "$oci" "$RUN/pause" "node-drift:1.0, as pre-loaded on the node" || return 1
  b=$OCI_TOP
  # ctr import names an OCI layout's image after this annotation, one image per entry: the tag
  # the Pod names and REPO@B, the two names containerd's CRI gives an image it pulls (a node
  # that pulled B under this tag earlier; CRI reports the digested name as the Pod's imageID,
  # an image with no such name as its bare config digest, which cannot be compared)
  jq --arg t "$repo:1.0" --arg d "$repo@$b" \
    '.manifests = [(.manifests[0] | .annotations = {"io.containerd.image.name": $t}),
                   (.manifests[0] | .annotations = {"io.containerd.image.name": $d})]' \
    "$oci/index.json" >"$oci/index.json.tmp" && mv "$oci/index.json.tmp" "$oci/index.json" &&
    tar -C "$oci" -cf "$oci.tar" oci-layout index.json blobs || return 1
  ctr --address "$NODE_SOCK" --timeout 30s -n k8s.io images import "$oci.tar" >/dev/null ||
    { bad "ctr import of the pre-loaded image failed"; return 1; }
  log "  registry: team/node-drift:1.0 -> $a; the node's containerd: $repo:1.0 -> $b"
  e2e_ns "$audit" pinhook.dev/mode=audit
  klog -n "$audit" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: drift
  labels: {app: drift}
spec:
$(node_tolerations 2)
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
      image: $repo:1.0
      imagePullPolicy: IfNotPresent
EOF
  wait_pods_running "$audit" app=drift 1 60 || return 1
  expect_eq "Pod drift's image (audit: stored as written)" "$(jp "$audit" pod drift '{.spec.containers[0].image}')" "$repo:1.0" || rc=1
  expect_eq "Pod drift's imageID (the pre-loaded image)" \
    "$(jp "$audit" pod drift '{.status.containerStatuses[0].imageID}')" "$repo@$b" || rc=1
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $audit to say runs-stale-digest" \
    report_says "$audit" '.results[] | select(.rule == "runs-pinned" and .properties.state == "runs-stale-digest")' || rc=1
  expect_eq "the runs-pinned result" \
    "$(report_json "$audit" | jq -c '[.results[] | select(.rule == "runs-pinned") | {result, running: .properties.runningDigest, current: .properties.currentDigest, node: .properties.node}]')" \
    "[{\"result\":\"warn\",\"running\":\"$b\",\"current\":\"$a\",\"node\":\"$NODE_NAME\"}]" || rc=1
  wait_until 10 "a RunsStaleDigest Event on Pod drift" events_at_least "$audit" Pod drift RunsStaleDigest 1 || rc=1
  local inv
  inv=$("$PINHOOK_BIN" inventory --namespace "$audit" -o json --kubeconfig "$KUBECONFIG") || { bad "pinhook inventory failed"; return 1; }
  expect_eq "pinhook inventory --namespace $audit" \
    "$(jq -c '[.images[] | {state, running, currentDigest, nodes}]' <<<"$inv")" \
    "[{\"state\":\"runs-stale-digest\",\"running\":\"$b\",\"currentDigest\":\"$a\",\"nodes\":[\"$NODE_NAME\"]}]" || rc=1
  wrw_show "$audit" runs-pinned RunsStaleDigest
  log "  pinhook inventory --namespace $audit:"
  "$PINHOOK_BIN" inventory --namespace "$audit" --kubeconfig "$KUBECONFIG" | while IFS= read -r line; do log "    $line"; done

  # --- 2. a pinned digest deleted from the registry -------------------------------------------
  node_oci_image "$RUN/oci-node-vanish" "$RUN/pause" "node-vanish:1.0" amd64 arm64 || return 1
  v=$(node_push_image "$RUN/oci-node-vanish" "$REGISTRY_HOST" team/node-vanish 1.0 "$REGISTRY_CA") ||
    { bad "pushing team/node-vanish:1.0 failed"; return 1; }
  e2e_ns "$enforce" pinhook.dev/mode=enforce
  klog -n "$enforce" create -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vanish
spec:
  replicas: 1
  selector:
    matchLabels: {app: vanish}
  template:
    metadata:
      labels: {app: vanish}
    spec:
$(node_tolerations 6)
      terminationGracePeriodSeconds: 2
      containers:
        - name: app
          image: $REGISTRY_HOST/team/node-vanish:1.0
EOF
  wait_pods_running "$enforce" app=vanish 1 90 || return 1
  expect_eq "the Deployment's template image (pinned)" \
    "$(jp "$enforce" deployment vanish '{.spec.template.spec.containers[0].image}')" "$REGISTRY_HOST/team/node-vanish:1.0@$v" || rc=1
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $enforce to say pinned-current" \
    report_says "$enforce" '.results[] | select(.properties.state == "pinned-current")' || rc=1
  log_before=$(wc -l <"$REGISTRY_ACCESS_LOG")
  status=$(curl -sS --max-time 10 --cacert "$REGISTRY_CA" -o /dev/null -w '%{http_code}' -X DELETE \
    "https://$REGISTRY_HOST/v2/team/node-vanish/manifests/$v")
  expect_eq "DELETE of the pinned manifest by digest: HTTP status" "$status" 202 || return 1
  wait_until $((WATCH_INTERVAL * 2 + 10)) "the PolicyReport of $enforce to say digest-missing (one recheck)" \
    report_says "$enforce" '.results[] | select(.rule == "digest-available" and .result == "fail")' || rc=1
  expect_eq "the digest-available result" \
    "$(report_json "$enforce" | jq -c '[.results[] | select(.rule == "digest-available") | {result, state: .properties.state, pinned: .properties.pinnedDigest, kind: .resources[0].kind, name: .resources[0].name}]')" \
    "[{\"result\":\"fail\",\"state\":\"digest-missing\",\"pinned\":\"$v\",\"kind\":\"Deployment\",\"name\":\"vanish\"}]" || rc=1
  wait_until 10 "a PinnedDigestMissing Event on Deployment vanish" \
    events_at_least "$enforce" Deployment vanish PinnedDigestMissing 1 || rc=1
  expect_eq "pinhook_running_images{state=\"digest-missing\"}" \
    "$(watch_metric "$port" 'pinhook_running_images{state="digest-missing"}')" 1 || rc=1
  local heads
  heads=$(tail -n "+$((log_before + 1))" "$REGISTRY_ACCESS_LOG" | grep -F '"pinhook/' |
    grep -F "HEAD /v2/team/node-vanish/manifests/$v " || true)
  log "  the watch's requests for $v: $(head -n 2 <<<"$heads" | sed 's/  */ /g')"
  expect_contains "the watch's HEAD of the pinned digest" "$heads" '" 404 ' || rc=1
  wrw_show "$enforce" digest-available PinnedDigestMissing
  return "$rc"
}
