# shellcheck shell=bash
# title: ValidatingAdmissionPolicy: with pinhook down, the apiserver itself admits pinned Pods and refuses unpinned ones in enforce namespaces
# order: 26
# kube: 1.32
# proves: The chart's ValidatingAdmissionPolicy and binding (templates/validatingadmissionpolicy.yaml,
#   rendered by `helm template` for 1.32 with `mode: enforce`, an exempt image glob and an exempt
#   namespace) are accepted by the 1.32 apiserver. With pinhook up, a Pod of tags in an enforce
#   namespace is pinned by /mutate and passes the policy. Then all of pinhook's webhooks go to
#   failurePolicy Ignore and pinhook is stopped (no replica left), and the apiserver alone decides:
#   AVAIL_VAP_PODS Pods pinned to a digest are created, none refused; a Deployment of a pinned
#   template gets its ReplicaSet and every Pod; AVAIL_VAP_PODS Pods of a tag in the enforce
#   namespace are all refused with pinhook's message (`image "…": not pinned to a digest`, naming
#   the ValidatingAdmissionPolicy); a Deployment of a tag is stored but its ReplicaSet's Pods are
#   refused, with that message in the ReplicaSet's ReplicaFailure condition; nothing else is
#   blocked: a Pod of a tag in an audit namespace, in the exempt namespace, in a namespace labelled
#   pinhook.dev/ignore=true and of the exempt images (`index.docker.io/busybox:1.36` and `busybox`
#   under `docker.io/library/busybox:*`, as pinhook reads them; `docker.io/evil/busybox:1` refused),
#   a label on a stored Pod, a ConfigMap. Only
#   what a write brings is judged: a stored pinned Pod's image set to a tag is refused, an ephemeral
#   container of a tag (`kubectl debug`) is refused and one pinned is stored. pinhook is then
#   started again with the webhooks at Fail, and pins as before.
AVAIL_VAP_PODS=${AVAIL_VAP_PODS:-20}
# _vap_failure_policy POLICY: every webhook of pinhook's two configurations at POLICY
_vap_failure_policy() {
  local kind patch
  for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    patch=$(K get "$kind" pinhook -o json |
      jq -c --arg p "$1" '[range(.webhooks | length) | {op: "replace", path: "/webhooks/\(.)/failurePolicy", value: $p}]') || return 1
    klog patch "$kind" pinhook --type json -p "$patch" || return 1
  done
}
# _vap_pod NAME IMAGE: a Pod of one container
_vap_pod() {
  printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  containers: [{name: app, image: "%s"}]\n' "$1" "$2"
}
# _vap_refuses NS: a server-side dry run of a Pod of a tag in NS is refused by the policy
_vap_refuses() {
  local out
  out=$(_vap_pod probe-vap "$(image app 1.0)" | K -n "$1" create --dry-run=server -f - 2>&1) && return 1
  [[ $out == *ValidatingAdmissionPolicy* ]]
}
# _vap_create NS PREFIX IMAGE N: creates N Pods of IMAGE; prints "created refused" and keeps the
# last refusal in $RUN/vap-refusal.txt
_vap_create() {
  local ns=$1 prefix=$2 img=$3 n=$4 i created=0 refused=0 out
  for ((i = 0; i < n; i++)); do
    if out=$(_vap_pod "$prefix-$i" "$img" | K -n "$ns" create -f - 2>&1); then
      created=$((created + 1))
    else
      refused=$((refused + 1))
      printf '%s\n' "$out" >"$RUN/vap-refusal.txt"
    fi
  done
  printf '%s %s' "$created" "$refused"
}
_vap_pods_of() { # _vap_pods_of NS APP: Pods of the Deployment APP stored
  count "$1" pods "app=$2"
}
_vap_rs_failure() { # _vap_rs_failure NS APP: the ReplicaFailure message of APP's ReplicaSet
  K -n "$1" get rs -l "app=$2" -o jsonpath='{.items[0].status.conditions[?(@.type=="ReplicaFailure")].message}'
}
_vap_rs_failed() { [[ $(_vap_rs_failure "$1" "$2") == *"not pinned to a digest"* ]]; }
_vap_deployment() { # _vap_deployment NAME IMAGE REPLICAS
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, labels: {app: $1}}
spec:
  replicas: $3
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      containers: [{name: app, image: "$2"}]
EOF
}

scenario_apiserver_policy_enforces_while_pinhook_is_down() {
  local ns=e2e-vap audit=e2e-vap-audit team=e2e-vap-team ignored=e2e-vap-ignored rc=0 out got
  e2e_ns "$ns" || return 1
  e2e_ns "$ignored" pinhook.dev/ignore=true || return 1
  e2e_ns "$audit" pinhook.dev/mode=audit || return 1
  e2e_ns "$team" || return 1
  apiserver_policy_yaml "  mode: enforce
  exempt:
    namespaces: [\"$team\"]
    images: [\"$REGISTRY_HOST/exempt/*\", \"docker.io/library/busybox:*\"]" >"$RUN/vap.yaml" 2>"$RUN/vap.err" ||
    { bad "helm template: $(cat "$RUN/vap.err")"; return 1; }
  klog apply -f "$RUN/vap.yaml" || { bad "the 1.32 apiserver refused the chart's ValidatingAdmissionPolicy"; return 1; }
  ok "the apiserver accepted the ValidatingAdmissionPolicy and its binding"
  got=$(K get validatingadmissionpolicy pinhook-pinned-pods -o json |
    jq -r '[.status.typeChecking.expressionWarnings[]?.warning] | join("; ")')
  expect_eq "type-checking warnings of the policy's CEL" "${got:-none}" none || rc=1

  # pinhook up: a Pod of tags is pinned by /mutate, and the policy lets it through
  _vap_pod tagged-up "$(image app 1.0)" | klog -n "$ns" create -f - || rc=1
  expect_eq "Pod of a tag with pinhook up, stored pinned" "$(jp "$ns" pod tagged-up '{.spec.containers[0].image}')" "$(pinned app 1.0)" || rc=1

  # every webhook at Ignore, pinhook stopped: the apiserver alone decides
  _vap_failure_policy Ignore || { bad "cannot set the webhooks to Ignore"; rc=1; }
  stop_pid "$PINHOOK_PID" pinhook 25
  cat "$RUN/pinhook.log" >>"$RUN/pinhook.before-vap.log"
  ok "pinhook stopped (no replica left); its webhooks at failurePolicy Ignore"
  wait_until 30 "the apiserver to refuse a Pod of a tag by the policy" _vap_refuses "$ns" || rc=1

  got=$(_vap_create "$ns" pinned "$(pinned app 1.0)" "$AVAIL_VAP_PODS")
  expect_eq "pinned Pods created / refused with pinhook down (enforce)" "$got" "$AVAIL_VAP_PODS 0" || rc=1
  got=$(_vap_create "$ns" tag "$(image app 1.0)" "$AVAIL_VAP_PODS")
  expect_eq "Pods of a tag created / refused with pinhook down (enforce)" "$got" "0 $AVAIL_VAP_PODS" || rc=1
  out=$(cat "$RUN/vap-refusal.txt" 2>/dev/null)
  expect_contains "the refusal" "$out" "image \"$(image app 1.0)\": not pinned to a digest" || rc=1
  expect_contains "the refusal" "$out" "ValidatingAdmissionPolicy 'pinhook-pinned-pods'" || rc=1

  _vap_deployment from-pinned "$(pinned app 1.0)" 3 | klog -n "$ns" create -f - || rc=1
  wait_until 60 "the pinned Deployment's 3 Pods" test "$(_vap_pods_of "$ns" from-pinned)" -ge 3 || rc=1
  expect_eq "Pods of the pinned template stored" "$(_vap_pods_of "$ns" from-pinned)" 3 || rc=1
  _vap_deployment from-tag "$(image app 1.0)" 2 | klog -n "$ns" create -f - || rc=1
  wait_until 60 "the tagged Deployment's ReplicaSet to report its Pods refused" _vap_rs_failed "$ns" from-tag || rc=1
  expect_contains "the tagged Deployment's ReplicaFailure" "$(_vap_rs_failure "$ns" from-tag)" "not pinned to a digest" || rc=1
  expect_eq "Pods of the tagged template stored" "$(_vap_pods_of "$ns" from-tag)" 0 || rc=1

  # nothing else blocked
  got=$(_vap_create "$audit" tag "$(image app 1.0)" 3)
  expect_eq "Pods of a tag in an audit namespace created / refused" "$got" "3 0" || rc=1
  got=$(_vap_create "$team" tag "$(image app 1.0)" 3)
  expect_eq "Pods of a tag in the exempt namespace created / refused" "$got" "3 0" || rc=1
  got=$(_vap_create "$ns" exempt "$REGISTRY_HOST/exempt/tool:1" 3)
  expect_eq "Pods of the exempt image created / refused" "$got" "3 0" || rc=1
  # the exemption docker.io/library/busybox:* as pinhook reads names (no pull: no node here)
  got=$(_vap_create "$ns" hub-index index.docker.io/busybox:1.36 1)
  expect_eq "index.docker.io/busybox:1.36 (exempt, read as docker.io/library/busybox) created / refused" "$got" "1 0" || rc=1
  got=$(_vap_create "$ns" hub-bare busybox 1)
  expect_eq "busybox (exempt, read as docker.io/library/busybox:latest) created / refused" "$got" "1 0" || rc=1
  got=$(_vap_create "$ns" hub-other docker.io/evil/busybox:1 1)
  expect_eq "docker.io/evil/busybox:1 (not exempt) created / refused" "$got" "0 1" || rc=1
  got=$(_vap_create "$ignored" tag "$(image app 1.0)" 1)
  expect_eq "a Pod of a tag in a namespace labelled pinhook.dev/ignore=true created / refused" "$got" "1 0" || rc=1
  klog -n "$ns" label pod pinned-0 e2e/touched=yes || { bad "a label on a stored pinned Pod was refused"; rc=1; }
  klog -n "$ns" label pod tagged-up e2e/touched=yes || { bad "a label on a Pod pinned earlier was refused"; rc=1; }
  klog -n "$ns" create configmap e2e-vap-cm --from-literal=a=b || { bad "a ConfigMap was refused"; rc=1; }
  # updates and ephemeral containers: only what the write brings is judged
  if out=$(K -n "$ns" set image pod/pinned-1 app="$(image app 1.0)" 2>&1); then
    bad "a pinned Pod's image set to a tag was admitted"
    rc=1
  else
    expect_contains "setting a pinned Pod's image to a tag" "$out" "not pinned to a digest" || rc=1
  fi
  if out=$(K -n "$ns" debug pinned-2 --image="$(image app 1.0)" --container=debug-tag 2>&1); then
    bad "an ephemeral container of a tag was admitted"
    rc=1
  else
    expect_contains "kubectl debug with a tag" "$out" "not pinned to a digest" || rc=1
  fi
  klog -n "$ns" debug pinned-2 --image="$(pinned app 1.0)" --container=debug-pinned ||
    { bad "kubectl debug with a pinned image was refused"; rc=1; }
  expect_eq "the pinned ephemeral container stored" \
    "$(jp "$ns" pod pinned-2 '{.spec.ephemeralContainers[*].name}')" debug-pinned || rc=1

  # pinhook back, the webhooks at Fail: it pins as before; the policy removed
  _vap_failure_policy Fail || rc=1
  start_main_pinhook
  wait_effective "$ns"
  klog delete -f "$RUN/vap.yaml" || rc=1
  return "$rc"
}
