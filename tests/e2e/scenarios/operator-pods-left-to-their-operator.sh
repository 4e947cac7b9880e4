# shellcheck shell=bash
# title: an operator's Pods are left as it wrote them: no delete-and-recreate loop (issue 24)
# order: 185
# proves: A CRD (e2e.pinhook.dev/v1 Widget, spec.image) and a stand-in operator run as a bash loop
#   in a namespace in enforce and in a twin no webhook sees: every ~1 s it creates a Pod for each
#   Widget that has none (ownerReference controller: true to the Widget, image = spec.image) and
#   deletes a Pod whose image differs from spec.image, as CloudNativePG does. A dry-run bare Pod
#   comes back pinned in the namespace; one tag-only Widget in both; for E2E_OPERATOR_WATCH (60) s
#   the operator creates exactly 1 Pod in each, and the stored Pod's image is the Widget's,
#   exactly as written (not pinned).
#
# Issue 24: operators such as CloudNativePG create Pods themselves and delete and recreate any Pod
# whose image string differs from the one in their custom resource. A pinhook that pins such a
# Pod makes the operator loop: it deletes the pinned Pod, creates it again, pinhook pins it again
# (16 Pods in 40 s in the issue; this scenario on the pinhook before the fix, 7a52cbd: 21 Pods in
# 60 s, each stored pinned and deleted, 1 in the twin). The twin namespace shows what the
# stand-in operator does on its own (1 Pod).
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

scenario_operator_pods_left_to_their_operator() {
  local ns=e2e-operator ref=e2e-operator-ref dir="$RUN/operator" rc=0 secs=${E2E_OPERATOR_WATCH:-60}
  local img n m p t0 me=$BASHPID
  img=$(image app 1.0)
  rm -rf "$dir"
  mkdir -p "$dir"
  e2e_ns "$ns"
  e2e_ns "$ref" pinhook.dev/ignore=true
  # pinhook enforces in the namespace: a bare Pod (no owner) is pinned
  wait_until 30 "a dry-run Pod pinned in $ns" dry_run_gives "$ns" "$img" "$(pinned app 1.0)" ||
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
    widget_operator "$p" "$dir" "$((secs + 30))" "$me" </dev/null >/dev/null 2>&1 3>&- &
    WIDGET_OPERATORS+=($!)
  done
  log "  widget operators running (pids ${WIDGET_OPERATORS[*]}; logs $dir)"

  widget_yaml db "$img" >"$dir/widget.yaml"
  both "$ns" "$ref" create -f "$dir/widget.yaml"
  t0=$(date +%s)
  sleep "$secs"
  touch "$dir/stop"
  wait_until 10 "the widget operators to stop" widget_operators_gone "${WIDGET_OPERATORS[@]}" ||
    log "  the widget operators did not stop within 10 s of the stop file; killing them"
  for p in "${WIDGET_OPERATORS[@]}"; do stop_pid "$p" "widget operator" 5; done
  WIDGET_OPERATORS=()
  n=$(widget_creations "$dir/creations-$ns.log")
  m=$(widget_creations "$dir/creations-$ref.log")
  log "  counts: operator pods created in $secs s: $n/$m (with pinhook in $ns / no webhook in $ref; stopped $(($(date +%s) - t0)) s after the Widget)"

  expect_eq "Pods the operator created in $ref (no webhook: the stand-in operator itself)" "$m" 1 || rc=1
  expect_eq "images of the Pods in $ref (count image)" "$(pod_images "$ref" widget=db)" "1 $img" || rc=1
  if ! expect_eq "Pods the operator created in $ns in $secs s" "$n" 1; then
    rc=1
    log "  stored images of the Pods it created in $ns (count image): $(awk '{print $4}' "$dir/creations-$ns.log" | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')"
    log "  deletions in $ns: $(grep -c ' deleting ' "$dir/operator-$ns.log" || true)"
  fi
  expect_eq "images of the Pods in $ns (count image)" "$(pod_images "$ns" widget=db)" "1 $img" || rc=1
  p=$(K -n "$ns" get pods -l widget=db -o jsonpath='{.items[*].metadata.ownerReferences[0].kind}/{.items[*].metadata.ownerReferences[0].name}')
  expect_eq "the owner of the Pod in $ns" "$p" "Widget/db" || rc=1
  if grep -q 'failed' "$dir/operator-$ns.log" "$dir/operator-$ref.log"; then
    log "  operator errors: $(grep -h 'failed\|rror' "$dir/operator-$ns.log" "$dir/operator-$ref.log" | head -5 | tr '\n' ';')"
  fi
  return "$rc"
}
