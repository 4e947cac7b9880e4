# shellcheck shell=bash
# title: a tag that does not exist is refused with pinhook's message
# order: 70
# kube: 1.20 1.32
# proves: `kubectl run` with `team/app:does-not-exist` fails: kubectl exits non-zero, its stderr has
#   `admission webhook "pin.pinhook.dev" denied the request` and `tag does-not-exist not found`, and
#   no Pod is stored.

scenario_missing_tag_refused() {
  local ns=e2e-g rc=0 err code=0
  e2e_ns "$ns"
  err=$(K -n "$ns" run missing --image="$(image app does-not-exist)" --restart=Never 2>&1 >/dev/null) || code=$?
  log "  kubectl said: $err"
  if ((code == 0)); then bad "kubectl run succeeded with a tag that does not exist" || rc=1; else ok "kubectl exit code $code"; fi
  expect_contains "kubectl stderr" "$err" 'admission webhook "pin.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr" "$err" 'tag does-not-exist not found' || rc=1
  expect_eq "pods in $ns" "$(K -n "$ns" get pods -o name | wc -l)" 0 || rc=1
  return "$rc"
}
