# shellcheck shell=bash
# title: on a real node, the chart's 2 replicas deny a Pod whose forged controller or mirror annotation once switched enforce off
# order: 942
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone: 2 webhook replicas), in a namespace labelled pinhook.dev/mode=enforce that only the
#   chart's webhooks see, three Pods naming the tag-only `NODE_IP:PORT/team/node-no-such:1.0`
#   (no such tag) and tolerating the node, created by the e2e admin: one whose controller
#   ownerReference is a ConfigMap of the namespace (its real uid), one carrying the static-pod
#   mirror annotation with the node as controller and `spec.nodeName` (what the kubelet writes),
#   and the same Pod with neither. Each is refused and none is stored: the first two by
#   validate.pinhook.dev ("not pinned to a digest", naming `ConfigMap mine (v1)` and
#   `Node <node> (v1)`), the third by pin.pinhook.dev (tag not found). Then each replica, asked
#   directly at its Pod IP (/validate, the review the apiserver would send, from user
#   `e2e-tenant`), denies the first two: both replicas give the same answer.
#
# Issue 43: before, /mutate and /validate left a Pod alone whenever its ownerReferences named a
# controller of a kind pinhook does not know, or its annotations held
# `kubernetes.io/config.mirror`: both are written by the Pod's author. On this node, with the
# chart's image, such a Pod was stored by tag and Running in the enforce namespace.

# forged_pod_json NAME IMAGE OWNER_JSON MIRROR: a Pod for the node; OWNER_JSON its ownerReferences
# (`[]` for none); MIRROR=1 adds the mirror annotation and spec.nodeName
forged_pod_json() {
  jq -nc --arg name "$1" --arg image "$2" --argjson owners "$3" --arg mirror "$4" --arg node "$NODE_NAME" '{
    apiVersion: "v1", kind: "Pod",
    metadata: ({name: $name, ownerReferences: $owners}
      + if $mirror == "1" then {annotations: {"kubernetes.io/config.mirror": "e2e0forged"}} else {} end),
    spec: ({terminationGracePeriodSeconds: 2,
      tolerations: [{key: "pinhook.dev/e2e-node", operator: "Exists", effect: "NoSchedule"}],
      containers: [{name: "app", image: $image}]}
      + if $mirror == "1" then {nodeName: $node} else {} end)}'
}
# forged_review NS POD_JSON: the /validate AdmissionReview of that Pod's CREATE by e2e-tenant
forged_review() {
  jq -nc --arg ns "$1" --argjson pod "$2" '{apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
    request: {uid: "e2e-forged", kind: {group: "", version: "v1", kind: "Pod"},
      resource: {group: "", version: "v1", resource: "pods"}, namespace: $ns, name: $pod.metadata.name,
      operation: "CREATE", userInfo: {username: "e2e-tenant", groups: ["system:authenticated"]},
      object: $pod}}'
}

scenario_node_chart_forged_owner_and_mirror_denied() {
  local ns=e2e-node-chart-forged rc=0 reg img cm_uid node_uid owner mirror_owner name ip answer p
  local -A pods=()
  chart_node_ensure || return 1
  reg=$(chart_node_registry)
  img="$reg/team/node-no-such:1.0"
  e2e_ns "$ns" pinhook.dev/mode=enforce pinhook.dev/e2e-chart=1
  klog -n "$ns" create configmap mine
  cm_uid=$(jp "$ns" configmap mine '{.metadata.uid}')
  node_uid=$(K get node "$NODE_NAME" -o jsonpath='{.metadata.uid}')
  owner=$(jq -nc --arg uid "$cm_uid" '[{apiVersion: "v1", kind: "ConfigMap", name: "mine", uid: $uid, controller: true}]')
  mirror_owner=$(jq -nc --arg uid "$node_uid" --arg n "$NODE_NAME" \
    '[{apiVersion: "v1", kind: "Node", name: $n, uid: $uid, controller: true}]')
  pods[forged-owner]=$(forged_pod_json forged-owner "$img" "$owner" 0)
  pods[forged-mirror]=$(forged_pod_json forged-mirror "$img" "$mirror_owner" 1)
  pods[no-owner]=$(forged_pod_json no-owner "$img" '[]' 0)

  kubectl_to "$RUN/forged-owner" -n "$ns" create -f - <<<"${pods[forged-owner]}"
  expect_eq "kubectl create exit code (a ConfigMap as controller)" "$KCODE" 1 || rc=1
  expect_contains "kubectl stderr (a ConfigMap as controller)" "$KERR" 'admission webhook "validate.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr (a ConfigMap as controller)" "$KERR" "\"$img\": not pinned to a digest; pinhook leaves the Pods of ConfigMap mine (v1)" || rc=1
  expect_absent pod forged-owner "$ns" || rc=1

  kubectl_to "$RUN/forged-mirror" -n "$ns" create -f - <<<"${pods[forged-mirror]}"
  expect_eq "kubectl create exit code (the mirror annotation, not from the node)" "$KCODE" 1 || rc=1
  expect_contains "kubectl stderr (the mirror annotation, not from the node)" "$KERR" 'admission webhook "validate.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr (the mirror annotation, not from the node)" "$KERR" "Node $NODE_NAME (v1)" || rc=1
  expect_absent pod forged-mirror "$ns" || rc=1

  kubectl_to "$RUN/no-owner" -n "$ns" create -f - <<<"${pods[no-owner]}"
  expect_eq "kubectl create exit code (no owner)" "$KCODE" 1 || rc=1
  expect_contains "kubectl stderr (no owner)" "$KERR" 'admission webhook "pin.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr (no owner)" "$KERR" "tag 1.0 not found" || rc=1
  expect_absent pod no-owner "$ns" || rc=1

  # every replica, asked directly, gives the same answer
  while read -r name _ _ ip; do
    [[ -n $ip && $ip != null ]] || { bad "webhook Pod $name has no IP"; rc=1; continue; }
    for p in forged-owner forged-mirror; do
      answer=$(curl -s --max-time 10 -k -H 'Content-Type: application/json' \
        --data-binary "$(forged_review "$ns" "${pods[$p]}")" "https://$ip:8443/validate" |
        jq -r '"\(.response.allowed) \(.response.status.message // "")"' 2>&1 | cut -c1-160)
      log "  replica $name ($ip) /validate $p: $answer"
      expect_eq "replica $name's /validate of $p allowed" "${answer%% *}" false || rc=1
    done
  done < <(chart_node_live_pods webhook)
  expect_eq "webhook replicas asked" "$(chart_node_live_pods webhook | grep -c .)" 2 || rc=1
  K delete ns "$ns" --wait=false >/dev/null || true
  return "$rc"
}
