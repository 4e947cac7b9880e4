# shellcheck shell=bash
# title: on a real node, helm upgrade to another image digest and changed values under a steady stream of admissions: none fails
# order: 949
# needs: node
# kube: 1.20 1.32
# proves: With the chart's release (as node-availability-rollout-restart), pinhook's image packed
#   again from the same binary with another SOURCE_DATE_EPOCH (so another manifest digest) and
#   pushed as tag `<version>-upgrade`, and the same stream of admissions (availability.sh):
#   `helm3 upgrade` of the release with that image (tag and digest) and changed values
#   (`resources.requests.cpu` 60m, a pod annotation) replaces both webhook Pods, one at a time.
#   Every attempt is answered, none fails and none is stored unpinned; two new Pods run the new
#   digest (imageID) and are Running and Ready (ready_again, from the upgrade's start, ≤ 240 s);
#   every webhook is still at Fail; one `availability: helm-upgrade ...` line.
scenario_node_availability_helm_upgrade() {
  local rc=0 reg tag digest epoch old t0 ready=timeout p
  avail_begin helm-upgrade || return 1
  reg=$(chart_node_registry)
  tag="$(chart_node_tag)-upgrade"
  epoch=$(($(git -C "$ROOT" log -1 --format=%ct) + 1))
  chart_node_release_bin || return 1
  if ! SOURCE_DATE_EPOCH=$epoch "$ROOT/scripts/image.sh" --binary "$PINHOOK_IMAGE_BINARY" --out "$AVAIL_OUT/oci" \
    --push "$reg/pinhook/pinhook:$tag" --registry-ca "$E2E_CA_CERT" >"$AVAIL_OUT/image.log" 2>&1; then
    bad "scripts/image.sh failed: $(tail -n 5 "$AVAIL_OUT/image.log" | tr '\n' ' ')"
    return 1
  fi
  digest=$(tail -n1 "$AVAIL_OUT/image.log")
  [[ $digest =~ ^sha256:[0-9a-f]{64}$ && $digest != "$CHART_IMAGE_DIGEST" ]] ||
    { bad "no new digest from image.sh: '$digest' (installed: $CHART_IMAGE_DIGEST)"; return 1; }
  log "  new image $reg/pinhook/pinhook:$tag@$digest (installed: $CHART_IMAGE_DIGEST)"
  old=$(chart_node_live_pods webhook | cut -d' ' -f1 | tr '\n' ' ')
  avail_upgrade "image $tag@${digest:0:19}..., resources.requests.cpu=60m, a pod annotation" \
    --set image.tag="$tag" --set image.digest="$digest" --set resources.requests.cpu=60m \
    --set-string 'podAnnotations.e2e\.pinhook\.dev/upgraded=yes' || rc=1
  t0=$AVAIL_T_DISRUPT
  if wait_until 240 "two new webhook Pods Running and Ready" chart_node_new_pods_ready "$old"; then
    ready=$(avail_since "$t0")
  else
    rc=1
  fi
  avail_settle_then_stop
  for p in $(chart_node_live_pods webhook | cut -d' ' -f1); do
    expect_eq "$p imageID" "$(K -n "$CHART_NS" get pod "$p" -o jsonpath='{.status.containerStatuses[0].imageID}')" \
      "$reg/pinhook/pinhook@$digest" || rc=1
    expect_eq "$p cpu request" "$(K -n "$CHART_NS" get pod "$p" -o jsonpath='{.spec.containers[0].resources.requests.cpu}')" 60m || rc=1
  done
  expect_eq "failurePolicy of pin, validate, mirrors after" "$(chart_node_policies)" "Fail Fail Fail" || rc=1
  avail_report "$ready"
  avail_expect_none_failed || rc=1
  avail_end
  return "$rc"
}
