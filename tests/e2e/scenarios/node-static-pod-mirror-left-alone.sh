# shellcheck shell=bash
# title: on a real node, a static pod's mirror pod sent by its node is left alone by /mutate and /validate in enforce, and runs; a tenant's copy is denied
# order: 920
# needs: node
# proves: A Pod manifest with the tag-only `team/node-static:1.0` written to the kubelet's
#   staticPodPath, for a namespace labelled `pinhook.dev/mode=enforce` (where a server-side dry-run
#   Pod with the same image comes back pinned): the kubelet runs it (Running) and its mirror pod
#   (annotation `kubernetes.io/config.mirror`) is stored with the image exactly as in the file;
#   pinhook's log has a /mutate and a /validate review of that Pod with `left_alone=static_pod`,
#   and `pinhook_left_alone_total{reason="static_pod"}` grew (issue 24: mirror pods are never
#   patched or denied). The same Pod as stored (annotation, Node owner, nodeName), created by the
#   e2e admin instead of the node (server-side dry run), is denied by validate.pinhook.dev as not
#   pinned, naming the Node owner (issue 43: the annotation is its author's to write; only a
#   request from `system:node:<spec.nodeName>` is a mirror pod).
scenario_node_static_pod_mirror_left_alone() {
  local ns=e2e-node-static rc=0 mirror lines_before left_before left_after reviews
  mirror="static-web-$NODE_NAME"
  e2e_ns "$ns" pinhook.dev/mode=enforce
  expect_eq "a dry-run Pod's image in $ns (pinhook pins here)" \
    "$(dry_run_image "$ns" "$(image node-static 1.0)")" "$(pinned node-static 1.0)" || rc=1
  lines_before=$(log_lines)
  left_before=$(metric_sum pinhook_left_alone_total 'reason="static_pod"')
  cat >"$NODE_MANIFESTS/static-web.yaml.tmp" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: static-web
  namespace: $ns
  labels: {app: static-web}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: web
      image: $(image node-static 1.0)
EOF
  # the kubelet reads every file in the directory: the manifest appears whole
  mv "$NODE_MANIFESTS/static-web.yaml.tmp" "$NODE_MANIFESTS/static-web.yaml"
  wait_pods_running "$ns" app=static-web 1 60 || rc=1
  expect_contains "mirror pod annotations" "$(jp "$ns" pod "$mirror" '{.metadata.annotations}')" \
    'kubernetes.io/config.mirror' || rc=1
  expect_eq "mirror pod image (as in the file)" "$(jp "$ns" pod "$mirror" '{.spec.containers[0].image}')" \
    "$(image node-static 1.0)" || rc=1
  expect_contains "mirror pod imageID" "$(jp "$ns" pod "$mirror" '{.status.containerStatuses[0].imageID}')" \
    "$REGISTRY_HOST/team/node-static@sha256:" || rc=1
  reviews=$(log_since "$lines_before" | grep -F "namespace=$ns" | grep -F 'kind=Pod' | grep -F 'operation=CREATE' || true)
  expect_contains "pinhook's /mutate review of the mirror pod" \
    "$(grep -F 'endpoint=mutate ' <<<"$reviews" || true)" 'left_alone="static_pod"' || rc=1
  expect_contains "pinhook's /validate review of the mirror pod" \
    "$(grep -F 'endpoint=validate ' <<<"$reviews" || true)" 'left_alone="static_pod"' || rc=1
  left_after=$(metric_sum pinhook_left_alone_total 'reason="static_pod"')
  if ((left_after > left_before)); then ok "pinhook_left_alone_total{reason=static_pod}: $left_before -> $left_after"; else
    bad "pinhook_left_alone_total{reason=static_pod} did not grow ($left_before -> $left_after)" || rc=1
  fi
  # a tenant's copy of the mirror pod, as stored, sent by someone else than the node
  jp "$ns" pod "$mirror" '{.metadata.name}' >/dev/null &&
    K -n "$ns" get pod "$mirror" -o json | jq '{apiVersion, kind,
      metadata: {name: "forged-mirror", annotations: .metadata.annotations,
        ownerReferences: .metadata.ownerReferences},
      spec: {nodeName: .spec.nodeName, containers: [.spec.containers[] | {name, image}]}}' \
      >"$RUN/forged-mirror.json"
  expect_contains "the forged mirror pod's annotations" "$(jq -c .metadata.annotations "$RUN/forged-mirror.json")" \
    'kubernetes.io/config.mirror' || rc=1
  kubectl_to "$RUN/forged-mirror" -n "$ns" create --dry-run=server -f "$RUN/forged-mirror.json"
  expect_eq "kubectl create exit code (the admin's mirror-annotated Pod)" "$KCODE" 1 || rc=1
  expect_contains "kubectl stderr (the admin's mirror-annotated Pod)" "$KERR" \
    'admission webhook "validate.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr (the admin's mirror-annotated Pod)" "$KERR" \
    "\"$(image node-static 1.0)\": not pinned to a digest" || rc=1
  expect_contains "kubectl stderr (the admin's mirror-annotated Pod)" "$KERR" "Node $NODE_NAME (v1)" || rc=1
  rm -f "$NODE_MANIFESTS/static-web.yaml"
  return "$rc"
}
