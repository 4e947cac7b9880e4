# shellcheck shell=bash
# title: matchConditions: the apiserver does not call pinhook for a Pod already pinned, and calls it for any other
# order: 25
# kube: 1.32
# proves: The chart's matchCondition (charts/pinhook/cel/call-unless-pinned-pod.cel, rendered on
#   1.28+) added to pin.pinhook.dev and validate.pinhook.dev is accepted and compiled by the 1.32
#   apiserver. Then in an enforce namespace: a Pod whose container, init container and image
#   volume are all `name:tag@sha256:…` is stored as written with **no** review sent to pinhook
#   (its admission_reviews_total unchanged); a Pod of tags is reviewed at /mutate and stored
#   pinned to the exact digests (validate.pinhook.dev then skips it too: the condition reads the
#   object as the mutating webhooks left it); one pinned container beside one tagged init container
#   sends the Pod, and the init container is pinned; an image pinhook refuses as invalid
#   (`Team/App@sha256:…`, uppercase) is sent and refused with pinhook's message. The conditions
#   are removed at the end, and pinned Pods are reviewed again.
_mc_reviews() { metric_sum pinhook_admission_reviews_total; }
_mc_mutations() { metric_sum pinhook_admission_reviews_total 'endpoint="mutate"'; }
# _mc_patch OP: add or remove the condition on pin.pinhook.dev and validate.pinhook.dev
_mc_patch() {
  local kind index patch
  for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    index=$(K get "$kind" pinhook -o json | jq '[.webhooks[].name] | index("pin.pinhook.dev") // index("validate.pinhook.dev")')
    case $1 in
      add) patch=$(jq -cn --argjson i "$index" --rawfile e "$ROOT/charts/pinhook/cel/call-unless-pinned-pod.cel" \
        '[{op: "add", path: "/webhooks/\($i)/matchConditions", value: [{name: "not-a-pinned-pod", expression: ($e | rtrimstr("\n"))}]}]') ;;
      remove) patch=$(jq -cn --argjson i "$index" '[{op: "remove", path: "/webhooks/\($i)/matchConditions"}]') ;;
    esac
    klog patch "$kind" pinhook --type json -p "$patch" || return 1
  done
}
# _mc_pod NAME INIT-IMAGE APP-IMAGE VOLUME-IMAGE: a Pod with an init container, a container and an
# image volume
_mc_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  initContainers: [{name: init, image: "$2"}]
  containers: [{name: app, image: "$3", volumeMounts: [{name: tools, mountPath: /tools}]}]
  volumes: [{name: tools, image: {reference: "$4", pullPolicy: IfNotPresent}}]
EOF
}
# _mc_skipped NS: a server-side dry run of a pinned Pod costs pinhook no review
_mc_skipped() {
  local before
  before=$(_mc_reviews)
  _mc_pod probe "$(pinned init 1.0)" "$(pinned app 1.0)" "$(pinned sidecar 1.0)" |
    K -n "$1" create --dry-run=server -f - >/dev/null 2>&1 || return 1
  [[ $(_mc_reviews) == "$before" ]]
}
_mc_reviewed() { ! _mc_skipped "$1"; }
# _mc_sent NS NAME WHAT INIT APP VOLUME: the Pod created, and reviewed at /mutate
_mc_sent() {
  local ns=$1 name=$2 what=$3 before after
  shift 3
  before=$(_mc_mutations)
  _mc_pod "$name" "$@" | klog -n "$ns" create -f - || return 1
  after=$(_mc_mutations)
  if ((after - before >= 1)); then ok "$what was reviewed at /mutate ($((after - before)))"; else
    bad "$what was not reviewed"
    return 1
  fi
}

scenario_match_conditions_skip_pinned_pods() {
  local ns=e2e-mc rc=0 before after
  e2e_ns "$ns"
  _mc_patch add || { bad "the 1.32 apiserver refused the chart's matchConditions"; return 1; }
  ok "the apiserver accepted the matchCondition on pin.pinhook.dev and validate.pinhook.dev"
  wait_until 30 "the apiserver to skip pinhook for a pinned Pod" _mc_skipped "$ns" || rc=1

  # 1. every image pinned: stored as written, pinhook not called
  before=$(_mc_reviews)
  _mc_pod pinned "$(pinned init 1.0)" "$(pinned app 1.0)" "$(pinned sidecar 1.0)" | klog -n "$ns" create -f - || rc=1
  after=$(_mc_reviews)
  expect_eq "reviews sent to pinhook for the pinned Pod" "$((after - before))" 0 || rc=1
  expect_eq "pinned Pod stored as written (init app volume)" \
    "$(jp "$ns" pod pinned '{.spec.initContainers[0].image} {.spec.containers[0].image} {.spec.volumes[0].image.reference}')" \
    "$(pinned init 1.0) $(pinned app 1.0) $(pinned sidecar 1.0)" || rc=1

  # 2. tags: reviewed by /mutate and pinned (then, pinned, validate.pinhook.dev is skipped too:
  # the condition reads the object as the mutating webhooks left it)
  _mc_sent "$ns" tagged "the Pod of tags" "$(image init 1.0)" "$(image app 1.0)" "$(image sidecar 1.0)" || rc=1
  expect_eq "Pod of tags stored pinned (init app volume)" \
    "$(jp "$ns" pod tagged '{.spec.initContainers[0].image} {.spec.containers[0].image} {.spec.volumes[0].image.reference}')" \
    "$(pinned init 1.0) $(pinned app 1.0) $(pinned sidecar 1.0)" || rc=1

  # 3. one tag among digests: the whole Pod is sent, the tag pinned
  _mc_sent "$ns" mixed "the Pod with one tagged init container" "$(image init 1.0)" "$(pinned app 1.0)" "$(pinned sidecar 1.0)" || rc=1
  expect_eq "mixed Pod: init container pinned" "$(jp "$ns" pod mixed '{.spec.initContainers[0].image}')" "$(pinned init 1.0)" || rc=1

  # 4. a digest on a reference pinhook refuses: sent, refused with pinhook's message
  local invalid out
  invalid="$REGISTRY_HOST/Team/App@$(digest app 1.0)"
  if out=$(_mc_pod invalid "$(pinned init 1.0)" "$invalid" "$(pinned sidecar 1.0)" | K -n "$ns" create -f - 2>&1); then
    bad "the invalid reference was admitted"
    rc=1
  fi
  expect_contains "invalid reference refused by pinhook" "$out" "invalid image reference" || rc=1

  _mc_patch remove || rc=1
  wait_until 30 "the apiserver to review pinned Pods again" _mc_reviewed "$ns" || rc=1
  return "$rc"
}
