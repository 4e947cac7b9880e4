# shellcheck shell=bash
# title: Helm 3 on 1.20: install then upgrade with no pinhook running, no manual label; only pinhook's namespace excluded
# order: 205
# proves: The chart in Service mode (pinhook in the cluster, as installed for real) on the 1.20
#   apiserver, whose namespaces carry no kubernetes.io/metadata.name, with no pinhook running and no
#   pinhook.dev/ignore label set by hand: `helm install` renders every webhook failurePolicy Ignore
#   with the configured policy in the annotation pinhook.dev/failure-policy; a Pod from pinhook's
#   own pod template passes the webhooks (server-side dry run: the tier has no token controller,
#   so the ReplicaSet's real creates stop at the ServiceAccount plugin); `helm upgrade` of
#   pinhook's Deployment succeeds, while the same webhook at Fail on the unlabelled namespace
#   refuses that update (the deadlock this removes). pinhook started with the chart's flags, as
#   the chart's ServiceAccount, labels its namespace, then raises all three webhooks to Fail;
#   stopped, pinhook's namespace is admitted and another namespace the webhooks select is refused
#   (a Pod labelled pinhook.dev/ignore=true too; a namespace admin there may not label the
#   namespace); `helm upgrade` at Fail with no pinhook succeeds, Helm 3 puts the rendered Ignore
#   back, and a restarted pinhook raises it again; `helm uninstall` leaves no configuration.

# own_policies FULL: the failurePolicy of the three webhooks, "pin validate mirrors"
own_policies() {
  printf '%s %s' \
    "$(K get mutatingwebhookconfiguration "$1" -o jsonpath='{.webhooks[0].failurePolicy}')" \
    "$(K get validatingwebhookconfiguration "$1" -o jsonpath='{.webhooks[*].failurePolicy}')"
}
own_policies_are() { [[ $(own_policies "$1") == "$2" ]]; } # own_policies_are FULL "A B C"
own_label() { K get ns "$1" -o jsonpath='{.metadata.labels.pinhook\.dev/ignore}'; }
# own_template_pod NS DEPLOYMENT: a Pod of the Deployment's template, without the token mount
own_template_pod() {
  K -n "$1" get deployment "$2" -o json | jq '{apiVersion: "v1", kind: "Pod",
    metadata: {generateName: "template-", labels: .spec.template.metadata.labels},
    spec: (.spec.template.spec + {automountServiceAccountToken: false})}'
}
# own_start DIR PORT NS FULL: pinhook with the chart's own-namespace flags, as the chart's SA
own_start() {
  NO_COLOR=1 PINHOOK_LOG=info "$PINHOOK_BIN" serve --listen "127.0.0.1:$2" \
    --tls-cert "$1/tls/tls.crt" --tls-key "$1/tls/tls.key" \
    --own-namespace "$3" --raise-failure-policy "mutating/$4,validating/$4" --raise-interval 1 \
    --policy "$RUN/policy.yaml" --kubeconfig "$1/kubeconfig" \
    </dev/null >>"$1/pinhook.log" 2>&1 3>&- &
  echo $! >"$1/pinhook.pid"
}

scenario_helm3_chart_own_namespace_1_20() { own_namespace_scenario 3; }

# own_namespace_scenario 3|4: the steps above with Helm 3 or Helm 4 (helm4-chart-own-namespace-1-20)
own_namespace_scenario() {
  local v=$1 rc=0
  local helm="helm$v" rel="own$v" ns="e2e-own$v" other="e2e-own$v-other" full="own$v-pinhook" dir="$RUN/helm-own$v"
  mkdir -p "$dir"
  command -v "$helm" >/dev/null || { bad "$helm not found (scripts/install-helm.sh installs it)"; return 1; }
  # Both namespaces carry the label the release's webhooks select on, so that they cover these
  # two and nothing else of the tier; pinhook.dev/mode=off keeps the tier's own pinhook out of
  # the way. Neither carries pinhook.dev/ignore, and 1.20 sets no kubernetes.io/metadata.name.
  e2e_ns "$ns" pinhook.dev/e2e-own="$v" pinhook.dev/mode=off
  e2e_ns "$other" pinhook.dev/e2e-own="$v" pinhook.dev/mode=off
  expect_eq "kubernetes.io/metadata.name of $ns on this apiserver" \
    "$(K get ns "$ns" -o jsonpath='{.metadata.labels.kubernetes\.io/metadata\.name}')" "" || rc=1
  cat >"$dir/values.yaml" <<EOF
image:
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
webhook:
  namespaceSelector:
    matchLabels:
      pinhook.dev/e2e-own: "$v"
  # nothing answers at the Service: fail fast rather than wait the default 10 s
  mutate: {timeoutSeconds: 2}
  validate: {timeoutSeconds: 2}
  mirrors: {timeoutSeconds: 2}
watch:
  enabled: false
EOF
  own_cleanup() {
    [[ -s $dir/pinhook.pid ]] && stop_pid "$(<"$dir/pinhook.pid")" "pinhook of release $rel" 10
    rm -f "$dir/pinhook.pid"
    "$helm" uninstall "$rel" -n "$ns" >>"$dir/uninstall.log" 2>&1 || true
  }

  # 1. install: no pinhook anywhere, no label by hand
  if ! "$helm" install "$rel" "$ROOT/charts/pinhook" -n "$ns" -f "$dir/values.yaml" >"$dir/install.log" 2>&1; then
    bad "$helm install failed: $(tail -n 5 "$dir/install.log" | tr '\n' ' ')"
    own_cleanup
    return 1
  fi
  ok "$helm install $rel -n $ns (no pinhook running, $ns unlabelled)"
  expect_eq "failurePolicy of pin, validate, mirrors as installed" "$(own_policies "$full")" "Ignore Ignore Ignore" || rc=1
  expect_eq "annotation pinhook.dev/failure-policy (mutating)" \
    "$(K get mutatingwebhookconfiguration "$full" -o jsonpath='{.metadata.annotations.pinhook\.dev/failure-policy}')" \
    "pin.pinhook.dev=Fail" || rc=1
  expect_eq "annotation pinhook.dev/failure-policy (validating)" \
    "$(K get validatingwebhookconfiguration "$full" -o jsonpath='{.metadata.annotations.pinhook\.dev/failure-policy}')" \
    "validate.pinhook.dev=Fail,mirrors.pinhook.dev=Fail" || rc=1
  local env
  env=$(K -n "$ns" get deployment "$full" -o jsonpath='{range .spec.template.spec.containers[0].env[*]}{.name}={.value}{"\n"}{end}')
  expect_contains "the Deployment's env" "$env" "PINHOOK_RAISE_FAILURE_POLICY=mutating/$full,validating/$full" || rc=1
  # The ReplicaSet's own creates stop at the ServiceAccount admission plugin here (no token
  # controller in the tier: "No API token found"), before any webhook; the same Pod without the
  # token mount goes through the whole admission chain.
  if own_template_pod "$ns" "$full" | K -n "$ns" create --dry-run=server -f - >/dev/null 2>"$dir/template-pod.err"; then
    ok "a Pod of pinhook's own template is admitted in $ns (webhooks at Ignore, no pinhook running)"
  else
    bad "pinhook's own Pod was refused: $(<"$dir/template-pod.err")" || rc=1
  fi

  # 2. upgrade with no pinhook running: pinhook's Deployment is updated
  if "$helm" upgrade "$rel" "$ROOT/charts/pinhook" -n "$ns" -f "$dir/values.yaml" \
    --set-string podAnnotations.e2e=upgrade-1 >"$dir/upgrade-1.log" 2>&1; then
    ok "$helm upgrade (pod template changed) with no pinhook running"
  else
    bad "$helm upgrade failed: $(tail -n 5 "$dir/upgrade-1.log" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "the Deployment's pod annotation e2e after the upgrade" \
    "$(K -n "$ns" get deployment "$full" -o jsonpath='{.spec.template.metadata.annotations.e2e}')" upgrade-1 || rc=1

  # 3. the deadlock this avoids: pin.pinhook.dev at Fail while the namespace is unlabelled
  K patch mutatingwebhookconfiguration "$full" --type=json \
    -p '[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]' >/dev/null
  local err code=0
  err=$(K -n "$ns" patch deployment "$full" --type=merge \
    -p '{"spec":{"template":{"metadata":{"annotations":{"e2e":"refused"}}}}}' 2>&1 >/dev/null) || code=$?
  if ((code != 0)) && [[ $err == *'failed calling webhook "pin.pinhook.dev"'* ]]; then
    ok "counterfactual: with Fail on the unlabelled namespace, pinhook's own Deployment update is refused"
  else
    bad "counterfactual: the update was not refused by pin.pinhook.dev (exit $code): $err" || rc=1
  fi
  K patch mutatingwebhookconfiguration "$full" --type=json \
    -p '[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]' >/dev/null

  # 4. pinhook with the chart's flags, as the chart's ServiceAccount: label, then Fail
  local token port
  token=$(K -n "$ns" create token "$full" --duration=1h) || { bad "kubectl create token $full failed"; own_cleanup; return 1; }
  token_kubeconfig "$token" "$dir/kubeconfig"
  e2e_cert "$dir/tls" >/dev/null || { bad "e2e_cert failed"; own_cleanup; return 1; }
  port=$(free_port)
  : >"$dir/pinhook.log"
  own_start "$dir" "$port" "$ns" "$full"
  if WAIT_PID=$(<"$dir/pinhook.pid") wait_until 30 "all three webhooks at Fail" own_policies_are "$full" "Fail Fail Fail"; then
    ok "pinhook raised pin, validate and mirrors to Fail"
  else
    bad "failurePolicy after pinhook ran: $(own_policies "$full"); log: $(tail -n 5 "$dir/pinhook.log" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "label pinhook.dev/ignore of $ns (set by pinhook)" "$(own_label "$ns")" true || rc=1
  local labelled_at raised_at
  labelled_at=$(grep -n 'labelled the own namespace' "$dir/pinhook.log" | head -n1 | cut -d: -f1)
  raised_at=$(grep -n 'failurePolicy set' "$dir/pinhook.log" | head -n1 | cut -d: -f1)
  if [[ -n $labelled_at && -n $raised_at ]] && ((labelled_at < raised_at)); then
    ok "pinhook labelled its namespace (log line $labelled_at) before raising (line $raised_at)"
  else
    bad "order in pinhook's log: labelled at '${labelled_at}', raised at '${raised_at}'" || rc=1
  fi
  stop_pid "$(<"$dir/pinhook.pid")" "pinhook of release $rel" 10
  rm -f "$dir/pinhook.pid"

  # 5. no pinhook, webhooks at Fail: only $ns is excluded
  cat >"$dir/pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: probe
  labels:
    pinhook.dev/ignore: "true"
spec:
  containers:
    - name: app
      image: $(image app 1.0)
EOF
  if own_template_pod "$ns" "$full" | K -n "$ns" create --dry-run=server -f - >/dev/null 2>"$dir/own-ns.err"; then
    ok "a Pod of pinhook's template in $ns is admitted with every webhook at Fail and no pinhook running"
  else
    bad "pinhook's own Pod in $ns was refused: $(<"$dir/own-ns.err")" || rc=1
  fi
  code=0
  err=$(K -n "$other" create --dry-run=server -f "$dir/pod.yaml" 2>&1 >/dev/null) || code=$?
  if ((code != 0)) && [[ $err == *'failed calling webhook'* ]]; then
    ok "a Pod labelled pinhook.dev/ignore=true in $other is refused: only pinhook's namespace is excluded"
  else
    bad "a Pod in $other was not refused by the release's webhooks (exit $code): $err" || rc=1
  fi
  K -n "$other" create rolebinding tenant-admin --clusterrole=admin --user=e2e-tenant >/dev/null 2>&1 || true
  expect_eq "may a namespace admin of $other patch namespace $other" \
    "$(K auth can-i patch "namespace/$other" --as=e2e-tenant 2>/dev/null)" no || rc=1

  # 6. upgrade at Fail with no pinhook: the exclusion holds; Helm puts the rendered Ignore back.
  # Helm 4's server-side apply first meets pinhook's ownership of failurePolicy (a conflict the
  # chart README tells to pass --force-conflicts for on 1.20).
  local force=()
  if ((v == 4)); then
    code=0
    err=$("$helm" upgrade "$rel" "$ROOT/charts/pinhook" -n "$ns" -f "$dir/values.yaml" \
      --set-string podAnnotations.e2e=upgrade-2 2>&1) || code=$?
    if ((code != 0)) && [[ $err == *'conflict with "pinhook"'*'failurePolicy'* ]]; then
      ok "$helm upgrade without --force-conflicts refused: failurePolicy is pinhook's (as the chart README says)"
    else
      bad "$helm upgrade without --force-conflicts: exit $code, no conflict on failurePolicy: $(tail -n 3 <<<"$err" | tr '\n' ' ')" || rc=1
    fi
    force=(--force-conflicts)
  fi
  if "$helm" upgrade "$rel" "$ROOT/charts/pinhook" -n "$ns" -f "$dir/values.yaml" "${force[@]}" \
    --set-string podAnnotations.e2e=upgrade-2 >"$dir/upgrade-2.log" 2>&1; then
    ok "$helm upgrade ${force[*]} of pinhook's Deployment with pinhook stopped and every webhook at Fail"
  else
    bad "$helm upgrade failed: $(tail -n 5 "$dir/upgrade-2.log" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "the Deployment's pod annotation e2e after the second upgrade" \
    "$(K -n "$ns" get deployment "$full" -o jsonpath='{.spec.template.metadata.annotations.e2e}')" upgrade-2 || rc=1
  expect_eq "failurePolicy after the second upgrade (Helm reverts a rendered field)" \
    "$(own_policies "$full")" "Ignore Ignore Ignore" || rc=1
  expect_eq "label pinhook.dev/ignore of $ns after the upgrade" "$(own_label "$ns")" true || rc=1
  local t0
  t0=$(date +%s%N)
  own_start "$dir" "$port" "$ns" "$full"
  if WAIT_PID=$(<"$dir/pinhook.pid") wait_until 30 "all three webhooks at Fail again" own_policies_are "$full" "Fail Fail Fail"; then
    ok "pinhook, restarted, raised them to Fail again ($((($(date +%s%N) - t0) / 1000000)) ms after its start)"
  else
    bad "failurePolicy after pinhook's restart: $(own_policies "$full")" || rc=1
  fi
  stop_pid "$(<"$dir/pinhook.pid")" "pinhook of release $rel" 10
  rm -f "$dir/pinhook.pid"

  # 7. uninstall
  if "$helm" uninstall "$rel" -n "$ns" >"$dir/uninstall.log" 2>&1; then
    ok "$helm uninstall"
  else
    bad "$helm uninstall failed: $(tail -n 5 "$dir/uninstall.log" | tr '\n' ' ')" || rc=1
  fi
  expect_eq "webhook configurations named $full" \
    "$(K get mutatingwebhookconfiguration,validatingwebhookconfiguration -o name | grep -c "/$full\$" || true)" 0 || rc=1
  return "$rc"
}
