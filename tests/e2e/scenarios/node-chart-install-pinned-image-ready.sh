# shellcheck shell=bash
# title: on a real node, helm install of the chart with pinhook's own image: both replicas Ready, caBundles filled, Fail raised, watch holds its Lease, helm test runs
# order: 940
# needs: node
# proves: pinhook's image built by scripts/image.sh from PINHOOK_IMAGE_BINARY (scripts/test.sh: the dev-profile binary)
#   and pushed to the tier's registry on the bridge address; `helm install` of charts/pinhook
#   with its defaults except the image (registry, tag and that digest), the node's toleration,
#   `registryCAs` (the e2e CA from a ConfigMap, mounted for real) and the policy's allowPrivate
#   for that registry (chart-node.sh). Both webhook Pods run that image, pinned: their image is
#   `tag@digest` and each imageID `REPO@<the pushed digest>`; both are Running and Ready through
#   their readiness probe (HTTPS /readyz), no restart; the Service's Endpoints hold exactly both
#   Pod IPs on 8443; the release's manifest has no caBundle, and pinhook filled all three webhooks'
#   caBundle with its managed Secret's ca.crt and holds the TLS Lease; on 1.20 pinhook labelled
#   its namespace pinhook.dev/ignore=true and raised pin, validate and mirrors from the rendered
#   Ignore to Fail; both watch Pods are Running and Ready and one of them holds the watch Lease;
#   `helm test` passes, its Pod scheduled on the node, its container started there (Events), and
#   `pinhook check --require-digest` resolved the image by tag with the mounted CA.
scenario_node_chart_install_pinned_image_ready() {
  local rc=0 reg want ns=$CHART_NS full=$CHART_FULL pods p ips eps
  chart_node_ensure || return 1
  reg=$(chart_node_registry)
  want="$reg/pinhook/pinhook:$(chart_node_tag)@$CHART_IMAGE_DIGEST"
  mapfile -t pods < <(K -n "$ns" get pods -l app.kubernetes.io/component=webhook -o name)
  expect_eq "webhook Pods" "${#pods[@]}" 2 || rc=1
  for p in "${pods[@]}"; do
    expect_eq "$p image" "$(K -n "$ns" get "$p" -o jsonpath='{.spec.containers[0].image}')" "$want" || rc=1
    expect_eq "$p imageID" "$(K -n "$ns" get "$p" -o jsonpath='{.status.containerStatuses[0].imageID}')" \
      "$reg/pinhook/pinhook@$CHART_IMAGE_DIGEST" || rc=1
    expect_eq "$p phase, Ready condition, restarts, node" \
      "$(K -n "$ns" get "$p" -o jsonpath='{.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.status.containerStatuses[0].restartCount} {.spec.nodeName}')" \
      "Running True 0 $NODE_NAME" || rc=1
    expect_eq "$p readiness probe" \
      "$(K -n "$ns" get "$p" -o jsonpath='{.spec.containers[0].readinessProbe.httpGet.scheme} {.spec.containers[0].readinessProbe.httpGet.path}')" \
      "HTTPS /readyz" || rc=1
  done
  ips=$(K -n "$ns" get pods -l app.kubernetes.io/component=webhook -o jsonpath='{.items[*].status.podIP}' | tr ' ' '\n' | sort | tr '\n' ' ')
  eps=$(K -n "$ns" get endpoints "$full" -o jsonpath='{range .subsets[*].addresses[*]}{.ip}{"\n"}{end}' | sort | tr '\n' ' ')
  expect_eq "Endpoints $full addresses (= the two Pod IPs)" "$eps" "$ips" || rc=1
  expect_contains "Endpoints $full ports" "$(K -n "$ns" get endpoints "$full" -o jsonpath='{.subsets[0].ports[*].port}')" 8443 || rc=1
  [[ -z $(K -n "$ns" get endpoints "$full" -o jsonpath='{.subsets[*].notReadyAddresses}') ]] ||
    bad "Endpoints $full has not-ready addresses" || rc=1

  # managed TLS: nothing rendered, pinhook filled all three caBundles from its Secret
  helm3 get manifest "$CHART_REL" -n "$ns" >"$CHART_DIR_RUN/manifest.yaml"
  expect_eq "caBundle fields in the release's manifest (comments apart)" \
    "$(grep -v '^[[:space:]]*#' "$CHART_DIR_RUN/manifest.yaml" | grep -c 'caBundle' || true)" 0 || rc=1
  if wait_until 30 "the Secret's ca.crt" helm_secret_ca "$ns" "$full-tls" "$CHART_DIR_RUN/ca.crt" &&
    wait_until 30 "caBundle of all three webhooks" helm_bundles_are "$full" "$CHART_DIR_RUN/ca.crt"; then
    ok "caBundle of pin, validate and mirrors = the managed Secret's ca.crt"
  else
    bad "caBundles not the Secret's: $(helm_bundles "$full" | cut -c1-16 | tr '\n' ' ')" || rc=1
  fi
  expect_contains "TLS Lease holder (a webhook Pod)" " ${pods[*]#pod/} " " $(helm_lease_holder "$ns" "$full-tls") " || rc=1

  # 1.20: pinhook labelled its namespace, then raised every webhook to Fail
  expect_eq "label pinhook.dev/ignore of $ns (pinhook's)" \
    "$(K get ns "$ns" -o jsonpath='{.metadata.labels.pinhook\.dev/ignore}')" true || rc=1
  if wait_until 30 "pin, validate and mirrors at Fail" chart_node_policies_are "Fail Fail Fail"; then
    ok "failurePolicy of pin, validate, mirrors: Fail Fail Fail (rendered Ignore: $(grep -c 'failurePolicy: Ignore' "$CHART_DIR_RUN/manifest.yaml"))"
  else
    bad "failurePolicy: $(chart_node_policies)" || rc=1
  fi

  # the watch Deployment: both Ready, one holds the Lease
  wait_pods_running "$ns" app.kubernetes.io/component=watch 2 90 || rc=1
  local holder watchers
  watchers=$(K -n "$ns" get pods -l app.kubernetes.io/component=watch -o jsonpath='{.items[*].metadata.name}')
  wait_until 60 "a watch Pod holding $full-watch" chart_node_watch_held "$watchers" || true
  holder=$(helm_lease_holder "$ns" "$full-watch" 2>/dev/null || true)
  expect_contains "watch Lease holder (one of: $watchers)" " $watchers " " ${holder:-none} " || rc=1

  chart_node_show "$ns" "$CHART_DIR_RUN/pods.txt"

  # helm test: its Pod on the node, pinhook check --server through the Service
  local t0 out code=0 events
  t0=$(date +%s.%N)
  out=$(timeout 180 helm3 test "$CHART_REL" -n "$ns" --timeout 150s 2>&1) || code=$?
  printf '%s\n' "$out" >"$CHART_DIR_RUN/helm-test.log"
  if ((code == 0)) && [[ $out == *"Phase:          Succeeded"* || $out == *"Phase: Succeeded"* ]]; then
    ok "helm test passed in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s: $(grep -m1 'TEST SUITE\|Phase' <<<"$out" | tr -s ' ')"
  else
    bad "helm test (exit $code): $(tail -n 8 <<<"$out" | tr '\n' ' ')" || rc=1
    { cat /var/log/pods/"${ns}_$full-test"_*/check/*.log 2>/dev/null || true; } | tail -n 10 | while IFS= read -r l; do log "    test: $l"; done
  fi
  events=$(K -n "$ns" get events --field-selector "involvedObject.name=$full-test" -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}')
  printf '%s\n' "$events" >"$CHART_DIR_RUN/helm-test-events.log"
  expect_contains "the test Pod's Events" "$events" "Successfully assigned $ns/$full-test to $NODE_NAME" || rc=1
  expect_contains "the test Pod's Events" "$events" "Started: Started container check" || rc=1
  return "$rc"
}
