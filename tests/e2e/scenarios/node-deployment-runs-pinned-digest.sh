# shellcheck shell=bash
# title: on a real node, a Deployment's Pods run the digests pinhook pinned, pulled by digest only
# order: 900
# needs: node
# proves: On node.sh's kubelet + containerd, a Deployment (2 replicas) with tag-only images in an
#   enforce namespace, `team/node-app:1.0` (an index: linux/amd64 + linux/arm64) and
#   `team/node-web:1.0` (one manifest): the ReplicaSet's template and every Pod are stored pinned,
#   both Pods run on the node and reach Running; each `status.containerStatuses[].imageID` is
#   `REPO@<the pinned digest>` (for node-app the index digest); in the registry's access log the
#   node's containerd asked for these manifests by digest only, never by tag, and for node-app
#   fetched the pinned index and then the amd64 manifest it names, never the arm64 one (issue 26;
#   issue 24's "Pods run that digest" for Pods a controller made from a template).
scenario_node_deployment_runs_pinned_digest() {
  local ns=e2e-node-deploy rc=0 rs pods p img ids reqs repo
  e2e_ns "$ns"
  klog -n "$ns" create -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
$(node_tolerations 6)
      terminationGracePeriodSeconds: 2
      containers:
        - name: app
          image: $(image node-app 1.0)
        - name: web
          image: $(image node-web 1.0)
EOF
  wait_pods_running "$ns" app=web 2 90 || return 1
  rs=$(current_rs "$ns" web)
  expect_eq "ReplicaSet $rs template images" "$(template_images "$ns" rs "$rs")" \
    "$(pinned node-app 1.0) $(pinned node-web 1.0)" || rc=1
  mapfile -t pods < <(K -n "$ns" get pods -l app=web -o name)
  for p in "${pods[@]}"; do
    img=$(K -n "$ns" get "$p" -o jsonpath='{.spec.containers[*].image}')
    expect_eq "$p spec images (= the template's)" "$img" "$(pinned node-app 1.0) $(pinned node-web 1.0)" || rc=1
    expect_eq "$p nodeName" "$(K -n "$ns" get "$p" -o jsonpath='{.spec.nodeName}')" "$NODE_NAME" || rc=1
    ids=$(K -n "$ns" get "$p" -o jsonpath='{range .status.containerStatuses[*]}{.name}={.imageID}{" "}{end}')
    expect_contains "$p imageIDs" "$ids" "app=$REGISTRY_HOST/team/node-app@$(digest node-app 1.0) " || rc=1
    expect_contains "$p imageIDs" "$ids" "web=$REGISTRY_HOST/team/node-web@$(digest node-web 1.0) " || rc=1
  done
  for repo in node-app node-web; do
    reqs=$(node_manifest_requests "$repo" | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')
    log "  the node's manifest requests for team/$repo: ${reqs:-none}"
    expect_eq "the node's manifest requests for team/$repo by tag" \
      "$(node_manifest_requests "$repo" | grep -vc ' sha256:' || true)" 0 || rc=1
    expect_contains "the node's manifest requests for team/$repo" "$reqs" " $(digest "$repo" 1.0);" || rc=1
  done
  # the pinned index, then the manifest of this node's platform it names; nothing else
  # shellcheck disable=SC2154 # (NODE_AMD64_*: set by lib.sh's e2e_setup_node)
  expect_contains "the node's manifest requests for team/node-app" \
    "$(node_manifest_requests node-app | tr '\n' ';')" "GET $NODE_AMD64_node_app_1_0;" || rc=1
  expect_eq "the node's other manifest requests for team/node-app (arm64...)" \
    "$(node_manifest_requests node-app | grep -vc -e " $(digest node-app 1.0)\$" -e " $NODE_AMD64_node_app_1_0\$" || true)" 0 || rc=1
  return "$rc"
}
