# shellcheck shell=bash
# title: an operator's Pods are not patched but checked: an unpinned resource gets denied Pods and a PodsDenied Event, no loop; pinned, it settles at 1 Pod (issues 24, 43)
# order: 185
# kube: 1.20 1.32
# proves: A CRD (e2e.pinhook.dev/v1 Widget, spec.image) and a stand-in operator run as a bash loop
#   in a namespace in enforce and in a twin no webhook sees: every ~1 s it creates a Pod for each
#   Widget that has none (ownerReference controller: true to the Widget, image = spec.image) and
#   deletes a Pod whose image differs from spec.image, as CloudNativePG does. A dry-run bare Pod
#   comes back pinned in the namespace; one tag-only Widget in both; for E2E_OPERATOR_WATCH (60) s
#   the operator creates exactly 1 Pod in the twin and none in the namespace: each create is
#   denied by validate.pinhook.dev ("not pinned to a digest", naming Widget db and
#   customResources), the operator retries (at least 2 denials) and no Pod is stored, deleted or
#   patched; one PodsDenied Warning Event regards the Widget (its uid), its note naming the image
#   and customResources. Then the Widget's spec.image is pinned by hand (what customResources
#   does): within 15 s the operator creates exactly 1 Pod, stored with the Widget's pinned image,
#   and no other for 10 s more.
#
# Issue 24: operators such as CloudNativePG create Pods themselves and delete and recreate any Pod
# whose image string differs from the one in their custom resource. A pinhook that pins such a
# Pod makes the operator loop (16 Pods in 40 s in the issue; this scenario on the pinhook before
# that fix, 7a52cbd: 21 Pods in 60 s). So pinhook does not patch an operator's Pods.
# Issue 43: it still checks them. An ownerReference is written by the Pod's author; before, a
# Pod naming any unknown controller (a ConfigMap of its own) was admitted unpinned in enforce.
# The twin namespace shows what the stand-in operator does on its own (1 Pod).
#
# The operator (widget_operator) is a background bash loop, one per namespace, bounded three
# ways: it stops at a stop file the scenario writes after the watch, at a deadline of its own
# (watch + 30 s), and when the scenario's subshell is gone; the scenario's EXIT trap kills what
# is left. Its kubectl calls have --request-timeout=5s. It writes OPERATOR/creations-NS.log (one
# line per Pod created: time, widget, Pod, the image the apiserver stored) and
# OPERATOR/operator-NS.log (deletions, errors), OPERATOR being $RUN/operator.

widget_crd_yaml() {
  cat <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.e2e.pinhook.dev
spec:
  group: e2e.pinhook.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [image]
              properties:
                image: {type: string}
EOF
}
widget_yaml() { # widget_yaml NAME IMAGE
  printf 'apiVersion: e2e.pinhook.dev/v1\nkind: Widget\nmetadata:\n  name: %s\nspec:\n  image: %s\n' "$1" "$2"
}
widget_k() { kubectl --request-timeout=5s "$@"; }
# widget_pod_json NAME UID IMAGE: the Pod the operator creates for Widget NAME
# With WIDGET_NODE=1 (a node scenario) the Pod also tolerates the e2e node's taint and stops in 2 s.
widget_pod_json() {
  jq -n --arg w "$1" --arg uid "$2" --arg image "$3" --arg node "${WIDGET_NODE:-0}" '{
    apiVersion: "v1", kind: "Pod",
    metadata: {generateName: ($w + "-"), labels: {widget: $w},
      ownerReferences: [{apiVersion: "e2e.pinhook.dev/v1", kind: "Widget", name: $w, uid: $uid,
        controller: true, blockOwnerDeletion: true}]},
    spec: ({containers: [{name: "app", image: $image}]}
      + if $node == "1" then {terminationGracePeriodSeconds: 2,
        tolerations: [{key: "pinhook.dev/e2e-node", operator: "Exists", effect: "NoSchedule"}]}
        else {} end)}'
}
# widget_operator NS DIR SECONDS PARENT_PID: the stand-in operator, in the background (see above)
widget_operator() {
  local ns=$1 dir=$2 deadline=$(($(date +%s) + $3)) parent=$4
  local ops="$dir/operator-$ns.log" created="$dir/creations-$ns.log"
  local widgets pods name uid image mine pod pimage out
  set +eE
  trap - ERR
  : >"$created"
  echo "$(date +%s.%N) started in $ns (deadline $deadline)" >>"$ops"
  while (($(date +%s) < deadline)) && [[ ! -e $dir/stop && -d /proc/$parent ]]; do
    if ! widgets=$(widget_k -n "$ns" get widgets -o json 2>>"$ops") ||
      ! pods=$(widget_k -n "$ns" get pods -l widget -o json 2>>"$ops"); then
      echo "$(date +%s.%N) list failed" >>"$ops"
      sleep 1
      continue
    fi
    while IFS=$'\t' read -r name uid image; do
      [[ -n $name ]] || continue
      mine=$(jq -r --arg w "$name" '.items[] | select(.metadata.labels.widget == $w)
        | select(.metadata.deletionTimestamp == null)
        | [.metadata.name, .spec.containers[0].image] | @tsv' <<<"$pods")
      if [[ -z $mine ]]; then
        if out=$(widget_pod_json "$name" "$uid" "$image" |
          widget_k -n "$ns" create -f - -o jsonpath='{.metadata.name} {.spec.containers[0].image}' 2>>"$ops"); then
          echo "$(date +%s.%N) $name $out" >>"$created"
        else
          echo "$(date +%s.%N) create for $name failed" >>"$ops"
        fi
        continue
      fi
      while IFS=$'\t' read -r pod pimage; do
        [[ $pimage == "$image" ]] && continue
        echo "$(date +%s.%N) deleting $pod: image $pimage, not $image" >>"$ops"
        widget_k -n "$ns" delete pod "$pod" --wait=false >>"$ops" 2>&1 ||
          echo "$(date +%s.%N) delete of $pod failed" >>"$ops"
      done <<<"$mine"
    done < <(jq -r '.items[] | [.metadata.name, .metadata.uid, .spec.image] | @tsv' <<<"$widgets")
    sleep 1
  done
  echo "$(date +%s.%N) stopped" >>"$ops"
}
widget_operators_gone() { # widget_operators_gone PID...: none of them runs any more
  local p
  for p in "$@"; do alive "$p" && return 1; done
  return 0
}
widget_creations() { grep -c . "$1" 2>/dev/null || true; } # widget_creations LOG: Pods created
widget_created_any() { (($(widget_creations "$1") >= 1)); } # widget_created_any LOG

# widget_denied_events NS NAME UID: the PodsDenied Warning Events regarding Widget NAME (that uid)
widget_denied_events() {
  K -n "$1" get events.events.k8s.io -o json | jq -c --arg n "$2" --arg uid "$3" '[.items[]
    | select(.reason == "PodsDenied" and .regarding.kind == "Widget" and .regarding.name == $n)
    | {type, uid: .regarding.uid, note}] | map(select(.type == "Warning" and .uid == $uid))'
}
widget_denied_event_seen() { [[ $(widget_denied_events "$@" | jq length) -ge 1 ]]; } # NS NAME UID

scenario_operator_pods_checked_not_patched() {
  local ns=e2e-operator ref=e2e-operator-ref dir="$RUN/operator" rc=0 secs=${E2E_OPERATOR_WATCH:-60}
  local img pin n m p t0 uid denials events me=$BASHPID
  img=$(image app 1.0)
  pin=$(pinned app 1.0)
  rm -rf "$dir"
  mkdir -p "$dir"
  e2e_ns "$ns"
  e2e_ns "$ref" pinhook.dev/ignore=true
  # pinhook enforces in the namespace: a bare Pod (no owner) is pinned
  wait_until 30 "a dry-run Pod pinned in $ns" dry_run_gives "$ns" "$img" "$pin" ||
    { bad "pinhook does not pin a bare Pod in $ns"; return 1; }
  ok "a bare dry-run Pod in $ns comes back pinned"

  widget_crd_yaml >"$dir/widget-crd.yaml"
  klog apply -f "$dir/widget-crd.yaml"
  klog wait --for=condition=Established crd/widgets.e2e.pinhook.dev --timeout=30s
  wait_until 30 "widgets served in $ns" K -n "$ns" get widgets ||
    { bad "the API does not serve widgets in $ns"; return 1; }

  # the operators, one per namespace; whatever is left of them goes with this subshell (a
  # global: the EXIT trap runs after this function returned)
  WIDGET_OPERATORS=()
  trap 'for p in "${WIDGET_OPERATORS[@]}"; do stop_pid "$p" "widget operator" 5; done' EXIT
  for p in "$ns" "$ref"; do
    widget_operator "$p" "$dir" "$((secs + 60))" "$me" </dev/null >/dev/null 2>&1 3>&- &
    WIDGET_OPERATORS+=($!)
  done
  log "  widget operators running (pids ${WIDGET_OPERATORS[*]}; logs $dir)"

  widget_yaml db "$img" >"$dir/widget.yaml"
  both "$ns" "$ref" create -f "$dir/widget.yaml"
  uid=$(jp "$ns" widget db '{.metadata.uid}')
  t0=$(date +%s)
  sleep "$secs"
  n=$(widget_creations "$dir/creations-$ns.log")
  m=$(widget_creations "$dir/creations-$ref.log")
  denials=$(grep -c 'admission webhook "validate.pinhook.dev" denied the request' "$dir/operator-$ns.log" || true)
  log "  counts: operator pods created in $secs s: $n/$m (with pinhook in $ns / no webhook in $ref); creates denied in $ns: $denials; deletions in $ns: $(grep -c ' deleting ' "$dir/operator-$ns.log" || true)"

  expect_eq "Pods the operator created in $ref (no webhook: the stand-in operator itself)" "$m" 1 || rc=1
  expect_eq "images of the Pods in $ref (count image)" "$(pod_images "$ref" widget=db)" "1 $img" || rc=1
  expect_eq "Pods the operator created in $ns in $secs s (each create denied)" "$n" 0 || rc=1
  expect_eq "Pods in $ns" "$(pod_images "$ns" widget=db)" "" || rc=1
  if ((denials >= 2)); then ok "the operator's creates in $ns were denied by validate.pinhook.dev ($denials times): it retried, nothing looped"; else
    bad "the operator's creates in $ns were denied $denials times by validate.pinhook.dev (at least 2 expected)" || rc=1
    log "  operator log: $(tail -n 5 "$dir/operator-$ns.log" | tr '\n' ';')"
  fi
  expect_contains "the denial the operator got" "$(grep -m1 'denied the request' "$dir/operator-$ns.log" || true)" \
    "\"$img\": not pinned to a digest; pinhook leaves the Pods of Widget db (e2e.pinhook.dev/v1) as its operator writes them" || rc=1
  expect_eq "deletions in $ns (nothing was stored to delete)" "$(grep -c ' deleting ' "$dir/operator-$ns.log" || true)" 0 || rc=1
  if wait_until 30 "a PodsDenied Event regarding Widget/db in $ns" widget_denied_event_seen "$ns" db "$uid"; then
    events=$(widget_denied_events "$ns" db "$uid")
    expect_eq "PodsDenied Warning Events regarding Widget/db (uid $uid)" "$(jq length <<<"$events")" 1 || rc=1
    expect_contains "its note" "$(jq -r '.[0].note' <<<"$events")" "$img is not pinned to a digest" || rc=1
    expect_contains "its note" "$(jq -r '.[0].note' <<<"$events")" "policy customResources" || rc=1
  else
    bad "no PodsDenied Warning Event regarding Widget/db (uid $uid) in $ns" || rc=1
  fi

  # pinned where the operator reads it (by hand here: custom-resource-pinned-where-operator-reads
  # shows customResources doing it): the operator settles at one Pod
  klog -n "$ns" patch widget db --type=merge -p "{\"spec\":{\"image\":\"$pin\"}}"
  if wait_until 15 "the operator to create a Pod of the pinned Widget in $ns" \
    widget_created_any "$dir/creations-$ns.log"; then
    sleep 10
  fi
  touch "$dir/stop"
  wait_until 10 "the widget operators to stop" widget_operators_gone "${WIDGET_OPERATORS[@]}" ||
    log "  the widget operators did not stop within 10 s of the stop file; killing them"
  for p in "${WIDGET_OPERATORS[@]}"; do stop_pid "$p" "widget operator" 5; done
  WIDGET_OPERATORS=()
  n=$(widget_creations "$dir/creations-$ns.log")
  log "  counts: operator pods created in $ns once its Widget was pinned: $n (stopped $(($(date +%s) - t0)) s after the Widget)"
  expect_eq "Pods the operator created in $ns once its Widget was pinned" "$n" 1 || rc=1
  expect_eq "images of the Pods in $ns (count image)" "$(pod_images "$ns" widget=db)" "1 $pin" || rc=1
  p=$(K -n "$ns" get pods -l widget=db -o jsonpath='{.items[*].metadata.ownerReferences[0].kind}/{.items[*].metadata.ownerReferences[0].name}')
  expect_eq "the owner of the Pod in $ns" "$p" "Widget/db" || rc=1
  return "$rc"
}
