# shellcheck shell=bash
# The node-chart-* scenarios' shared set-up, sourced by run.sh (definitions only): charts/pinhook
# installed for real on node.sh's node, with pinhook's own image built by scripts/image.sh from
# the release binary and pushed to the tier's registry on the bridge address. The first node-chart
# scenario to run installs it (chart_node_ensure); the others, ordered after it, reuse that
# release, so a full run installs the chart once, and each of them can still run alone.
#
#   chart_node_ensure     the release binary (PINHOOK_IMAGE_BINARY), the image packed and pushed,
#                         the registry-CA ConfigMap, the tier's own webhooks told to skip the
#                         namespaces labelled pinhook.dev/e2e-chart, `helm3 install` (if not
#                         installed yet), then both webhook replicas Ready (≤ 180 s)
#   chart_node_restore    the tier's own webhooks as they were (node-chart-uninstall-admits-again)
#
# The release: `node-pinhook` (objects, webhook configurations: node-pinhook) in CHART_NS, with the
# chart's defaults except what values.yaml below says: the image (registry = the bridge address,
# tag + digest), the node's toleration (node.sh's NODE_TAINT), registryCAs (the e2e CA, which
# signed the bridge-address registry certificate, from a ConfigMap), the policy's allowPrivate
# for that registry (a private address) and its `owners` (an operator kind, Gadget, listed as safe
# to pin, a loop breaker of maxPods 3: node-chart-loop-breaker-two-replicas; the stand-in Widget
# operator of node-chart-operator-pods-two-replicas stays unlisted). Everything else (managed
# TLS, 2 replicas, PDB, watch Deployment, probes, failurePolicy Fail raised from Ignore on
# 1.20...) is the chart's own.
#
# The tier's own pinhook (url mode, `pinhook` webhook configurations) would review the same
# objects: its webhooks get `pinhook.dev/e2e-chart DoesNotExist` in their namespaceSelector, and
# CHART_NS and the scenarios' namespaces carry that label, so what is pinned there is pinned by
# the chart's pinhook, through its Service.
#
# Files: $RUN/chart-node/ (values.yaml, image.log, install.log, digest, the tier's webhook
# configurations as they were). Uses lib.sh's helpers and node.sh's NODE_IP, NODE_TAINT.

CHART_NS=e2e-node-chart
CHART_REL=node-pinhook
CHART_FULL=node-pinhook
CHART_DIR_RUN="$RUN/chart-node"

# chart_node_registry: the tier's registry under the bridge address (node.sh's TLS forwarder)
chart_node_registry() { printf '%s:%s' "$NODE_IP" "${REGISTRY_HOST##*:}"; }
chart_node_tag() { sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n1; }

# chart_node_release_bin: PINHOOK_IMAGE_BINARY (scripts/test.sh sets it to the dev-profile binary
# its image tier packed); alone, the release binary, built when absent
chart_node_release_bin() {
  PINHOOK_IMAGE_BINARY="${PINHOOK_IMAGE_BINARY:-${CARGO_TARGET_DIR:-$ROOT/target}/release/pinhook}"
  if [[ ! -x $PINHOOK_IMAGE_BINARY ]]; then
    [[ ${E2E_SKIP_BUILD:-0} != 1 ]] || { bad "no release binary at $PINHOOK_IMAGE_BINARY (E2E_SKIP_BUILD=1)"; return 1; }
    log "  no release binary at $PINHOOK_IMAGE_BINARY: cargo build --release --locked --bin pinhook"
    (cd "$ROOT" && cargo build --quiet --release --locked --bin pinhook) || { bad "cargo build --release failed"; return 1; }
  fi
  [[ -x $PINHOOK_IMAGE_BINARY ]] || { bad "no release binary at $PINHOOK_IMAGE_BINARY"; return 1; }
}

chart_node_installed() { helm3 status "$CHART_REL" -n "$CHART_NS" >/dev/null 2>&1; }

# chart_node_live_pods COMPONENT: the release's Pods of that component not being deleted,
# "NAME PHASE READY IP" a line (a deleted Pod can stay Terminating a while after its container
# stopped; it is not one of the replicas any more). READY: every container ready and the Pod's
# Ready condition True, which is what the Endpoints controller reads (the node lifecycle
# controller sets the condition False on its own when the Node stops reporting, for instance
# while the apiserver restarts, and the kubelet sets it back).
chart_node_live_pods() {
  K -n "$CHART_NS" get pods -l "app.kubernetes.io/component=$1" -o json | jq -r '.items[] |
    select(.metadata.deletionTimestamp == null) |
    "\(.metadata.name) \(.status.phase) \(([.status.containerStatuses[]?.ready] | all and length > 0) and
      ((.status.conditions // []) | any(.type == "Ready" and .status == "True"))) \(.status.podIP)"'
}
# chart_node_webhook_pods_ready: exactly 2 live webhook Pods, Running, containers and Pod Ready
chart_node_webhook_pods_ready() {
  local out
  out=$(chart_node_live_pods webhook) || return 1
  [[ $(grep -c . <<<"$out") == 2 ]] && ! awk '$2 != "Running" || $3 != "true"' <<<"$out" | grep -q .
}

chart_node_ensure() {
  mkdir -p "$CHART_DIR_RUN"
  if chart_node_installed && [[ -s $CHART_DIR_RUN/digest ]]; then
    CHART_IMAGE_DIGEST=$(<"$CHART_DIR_RUN/digest")
    wait_until 180 "both webhook replicas of $CHART_REL Ready" chart_node_webhook_pods_ready ||
      { bad "the release's webhook Pods are not Ready"; return 1; }
    return 0
  fi
  command -v helm3 >/dev/null || { bad "helm3 not found (scripts/install-helm.sh installs it)"; return 1; }
  chart_node_release_bin || return 1
  local reg t0 t1
  reg=$(chart_node_registry)
  # 1. the image, from the release binary, pushed to the registry under the bridge address
  t0=$(date +%s.%N)
  if ! "$ROOT/scripts/image.sh" --binary "$PINHOOK_IMAGE_BINARY" --out "$CHART_DIR_RUN/oci" \
    --push "$reg/pinhook/pinhook:$(chart_node_tag)" --registry-ca "$E2E_CA_CERT" >"$CHART_DIR_RUN/image.log" 2>&1; then
    bad "scripts/image.sh failed: $(tail -n 5 "$CHART_DIR_RUN/image.log" | tr '\n' ' ')"
    return 1
  fi
  CHART_IMAGE_DIGEST=$(tail -n1 "$CHART_DIR_RUN/image.log")
  [[ $CHART_IMAGE_DIGEST =~ ^sha256:[0-9a-f]{64}$ ]] || { bad "image.sh's last line is not a digest: $CHART_IMAGE_DIGEST"; return 1; }
  echo "$CHART_IMAGE_DIGEST" >"$CHART_DIR_RUN/digest"
  log "  image $reg/pinhook/pinhook:$(chart_node_tag)@$CHART_IMAGE_DIGEST packed and pushed in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s ($(du -sb "$CHART_DIR_RUN/oci" | cut -f1) bytes of layout)"

  # 2. the tier's own pinhook skips the chart's namespaces
  chart_node_exclude_tier || return 1

  # 3. the release namespace, the CA ConfigMap, the values
  e2e_ns "$CHART_NS" pinhook.dev/e2e-chart=1 || return 1
  K -n "$CHART_NS" create configmap e2e-registry-ca --from-file=ca.crt="$E2E_CA_CERT" >/dev/null
  cat >"$CHART_DIR_RUN/values.yaml" <<EOF
image:
  registry: "$reg"
  repository: pinhook/pinhook
  tag: "$(chart_node_tag)"
  digest: "$CHART_IMAGE_DIGEST"
tolerations:
  - {key: ${NODE_TAINT%%=*}, operator: Exists, effect: NoSchedule}
registryCAs:
  - host: "$reg"
    configMap: e2e-registry-ca
policy:
  mode: audit
  registries:
    allowPrivate: ["$reg"]
  # node-chart-loop-breaker-two-replicas: an operator kind (Gadget) listed as safe to pin,
  # with a breaker that trips at the 4th creation (Widget, the stand-in operator, stays unlisted)
  owners:
    pinPodsOf: [{group: e2e.pinhook.dev, kind: Gadget}]
    loopBreaker: {maxPods: 3, windowSeconds: 60, pauseSeconds: 600}
EOF
  # the watch Deployment needs the PolicyReport CRDs (the chart's README: install them first)
  K apply -f "$ROOT/manifests/components/policy-reports/crd.yaml" >/dev/null || { bad "cannot apply the PolicyReport CRDs"; return 1; }
  wait_until 30 "the PolicyReport CRDs Established" K wait --for=condition=Established --timeout=5s \
    crd/policyreports.wgpolicyk8s.io crd/clusterpolicyreports.wgpolicyk8s.io || { bad "PolicyReport CRDs not Established"; return 1; }

  # 4. helm install, then both replicas Ready through their probes
  t1=$(date +%s.%N)
  if ! helm3 install "$CHART_REL" "$ROOT/charts/pinhook" -n "$CHART_NS" -f "$CHART_DIR_RUN/values.yaml" \
    >"$CHART_DIR_RUN/install.log" 2>&1; then
    bad "helm3 install failed: $(tail -n 5 "$CHART_DIR_RUN/install.log" | tr '\n' ' ')"
    return 1
  fi
  if wait_until 180 "both webhook replicas of $CHART_REL Running and Ready" chart_node_webhook_pods_ready; then
    CHART_READY_SECONDS=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    echo "$CHART_READY_SECONDS" >"$CHART_DIR_RUN/ready-seconds"
    log "  helm3 install to both webhook replicas Ready: ${CHART_READY_SECONDS}s"
  else
    klog -n "$CHART_NS" get pods -o wide || true
    K -n "$CHART_NS" get events -o custom-columns=REASON:.reason,MSG:.message 2>&1 | tail -n 15 | while IFS= read -r l; do log "  event: $l"; done
    chart_node_pod_logs
    bad "the release's webhook Pods not Ready within 180 s"
    return 1
  fi
}

# chart_node_pod_logs: the last lines of every container of the release namespace's Pods
chart_node_pod_logs() {
  local p
  for p in $(K -n "$CHART_NS" get pods -o name 2>/dev/null); do
    log "  --- $p:"
    K -n "$CHART_NS" logs "$p" --all-containers --tail=15 2>&1 | while IFS= read -r l; do log "    $l"; done
  done
}

# chart_node_exclude_tier: the tier's `pinhook` webhooks skip namespaces labelled
# pinhook.dev/e2e-chart (their configurations saved first, once)
chart_node_exclude_tier() {
  local kind patch
  for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    [[ -s $CHART_DIR_RUN/tier-$kind.json ]] || K get "$kind" pinhook -o json >"$CHART_DIR_RUN/tier-$kind.json" || return 1
    grep -q 'pinhook.dev/e2e-chart' <<<"$(K get "$kind" pinhook -o json)" && continue
    patch=$(K get "$kind" pinhook -o json | jq -c '[range(0; .webhooks | length) as $i |
      {op: "add", path: "/webhooks/\($i)/namespaceSelector/matchExpressions/-",
       value: {key: "pinhook.dev/e2e-chart", operator: "DoesNotExist"}}]')
    K patch "$kind" pinhook --type=json -p "$patch" >/dev/null || { bad "cannot patch $kind pinhook"; return 1; }
  done
  # (the apiserver picks a changed configuration up within about a second)
  sleep 2
}
chart_node_restore() {
  local kind patch
  for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    grep -q 'pinhook.dev/e2e-chart' <<<"$(K get "$kind" pinhook -o json)" || continue
    patch=$(K get "$kind" pinhook -o json | jq -c '[range(0; .webhooks | length) as $i |
      (.webhooks[$i].namespaceSelector.matchExpressions | map(.key) | index("pinhook.dev/e2e-chart")) as $j |
      select($j != null) | {op: "remove", path: "/webhooks/\($i)/namespaceSelector/matchExpressions/\($j)"}]')
    K patch "$kind" pinhook --type=json -p "$patch" >/dev/null || return 1
  done
}

# chart_node_policies: the failurePolicy of pin, validate, mirrors ("A B C")
chart_node_policies() {
  printf '%s %s' \
    "$(K get mutatingwebhookconfiguration "$CHART_FULL" -o jsonpath='{.webhooks[0].failurePolicy}')" \
    "$(K get validatingwebhookconfiguration "$CHART_FULL" -o jsonpath='{.webhooks[*].failurePolicy}')"
}
chart_node_policies_are() { [[ $(chart_node_policies) == "$1" ]]; }
# chart_node_webhook_logs: the live webhook Pods' logs (JSON lines), read from the node's
# /var/log/pods (the apiserver here cannot reach the kubelet by its node name for `kubectl logs`)
chart_node_webhook_logs() {
  local p
  for p in $(chart_node_live_pods webhook | cut -d' ' -f1); do
    cat /var/log/pods/"${CHART_NS}_${p}"_*/pinhook/*.log 2>/dev/null || true
  done
}
# chart_node_watch_held "POD..." : the watch Lease's holder is one of these Pods
chart_node_watch_held() {
  local h
  h=$(helm_lease_holder "$CHART_NS" "$CHART_FULL-watch" 2>/dev/null) && [[ -n $h && " $1 " == *" $h "* ]]
}
# chart_node_new_pods_ready "OLD...": two webhook Pods Running and Ready, none of them in OLD
chart_node_new_pods_ready() {
  local names n
  chart_node_webhook_pods_ready || return 1
  names=$(chart_node_live_pods webhook | cut -d' ' -f1)
  for n in $names; do [[ " $1 " != *" $n "* ]] || return 1; done
}
chart_node_endpoints_are() { # chart_node_endpoints_are "IP IP ": the Service's ready addresses
  [[ $(K -n "$CHART_NS" get endpoints "$CHART_FULL" -o jsonpath='{range .subsets[*].addresses[*]}{.ip}{"\n"}{end}' | sort | tr '\n' ' ') == "$1" ]]
}
chart_node_no_live_pods_count() {
  K -n "$CHART_NS" get pods -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length'
}
chart_node_no_live_pods() { [[ $(chart_node_no_live_pods_count) == 0 ]]; }
# chart_node_show NS FILE: what README.md's "Install in a cluster" shows, from this run: `kubectl
# get pods` and each Pod's images and imageIDs, written to FILE and logged
chart_node_show() {
  local q='{range .items[*]}{.metadata.name}{"\n"}{range .spec.containers[*]}{"  image:   "}{.image}{"\n"}{end}{range .status.containerStatuses[*]}{"  imageID: "}{.imageID}{"\n"}{end}{end}'
  {
    printf '$ kubectl -n %s get pods\n' "$1"
    K -n "$1" get pods
    printf "\$ kubectl -n %s get pods -o jsonpath='%s'\n" "$1" "$q"
    K -n "$1" get pods -o jsonpath="$q"
  } >"$2" 2>&1
  while IFS= read -r l; do log "  | $l"; done <"$2"
}

# chart_node_revision_review NS APP RS_NAME RS_UID HASH IMAGE N: the /mutate AdmissionReview of
# the CREATE of Pod N of that ReplicaSet revision (labels app=APP and its pod-template-hash, the
# ReplicaSet its controller), naming IMAGE; not a dry run (pinhook never reads a revision's Pods
# for one); for sending straight to a replica, nothing is stored
chart_node_revision_review() {
  jq -nc --arg ns "$1" --arg app "$2" --arg rs "$3" --arg uid "$4" --arg hash "$5" --arg image "$6" --arg n "$7" '{
    apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
    request: {uid: ("e2e-revision-" + $n), kind: {group: "", version: "v1", kind: "Pod"},
      resource: {group: "", version: "v1", resource: "pods"}, namespace: $ns, name: "",
      operation: "CREATE", dryRun: false,
      userInfo: {username: "system:serviceaccount:kube-system:replicaset-controller"},
      object: {apiVersion: "v1", kind: "Pod",
        metadata: {generateName: ($rs + "-"), namespace: $ns,
          labels: {app: $app, "pod-template-hash": $hash},
          ownerReferences: [{apiVersion: "apps/v1", kind: "ReplicaSet", name: $rs, uid: $uid,
            controller: true}]},
        spec: {containers: [{name: "app", image: $image}]}}}}'
}
