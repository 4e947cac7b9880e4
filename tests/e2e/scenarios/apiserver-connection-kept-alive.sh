# shellcheck shell=bash
# title: the apiserver's kept-alive connections to pinhook outlive a quiet spell longer than the header read timeout
# order: 22
# kube: 1.20 1.32
# proves: The apiserver speaks HTTP/1.1 to its webhooks and keeps an idle connection for 90 s;
#   pinhook must not close it first, or a review sent as it closes fails (EOF, not retried) and
#   fails the write. A bare Pod is created (pinned), so the apiserver holds a connection to
#   pinhook (its local port, from `ss -p` by the apiserver's PID; one here, which carried both
#   the `/mutate` and the `/validate` review); then 12 s with no review at all (pinhook's admission_reviews_total unchanged; its
#   header read timeout is 10 s, which hyper also ran between two requests and which closed
#   them before); the apiserver still holds them (it may close an older idle one of its own, no
#   other is gone), and a second Pod is pinned over them with no new connection.

# The local ports of the apiserver's established connections to pinhook, sorted, comma-joined.
_apiserver_conns_to_pinhook() {
  local pid
  pid=$(<"${E2E_WORK:-/tmp/pinhook-e2e}/kube-apiserver.pid")
  ss -Htnp state established "( dport = :$PINHOOK_PORT )" |
    awk -v pid="pid=$pid," 'index($0, pid) { n = split($3, a, ":"); print a[n] }' | sort -n | paste -sd, -
}

# _ports_within A B: every port of the comma-joined list A is in B.
_ports_within() { [[ -z $(comm -23 <(tr ',' '\n' <<<"$1" | sort) <(tr ',' '\n' <<<"$2" | sort)) ]]; }

_reviews_total() { metric_sum pinhook_admission_reviews_total; }

scenario_apiserver_connection_kept_alive() {
  local ns=e2e-keepalive before after again reviews rc=0
  e2e_ns "$ns"
  for pod in first second; do
    klog -n "$ns" create -f - <<EOF || return 1
apiVersion: v1
kind: Pod
metadata:
  name: $pod
spec:
  containers:
    - name: app
      image: $(image app 2.0)
EOF
    expect_eq "stored pod $pod image" "$(jp "$ns" pod "$pod" '{.spec.containers[0].image}')" "$(pinned app 2.0)" || rc=1
    [[ $pod == first ]] || continue
    before=$(_apiserver_conns_to_pinhook)
    reviews=$(_reviews_total)
    [[ -n $before ]] || { bad "the apiserver holds no connection to pinhook after a create"; return 1; }
    log "  the apiserver's connections to pinhook (local ports): $before; quiet for 12 s"
    sleep 12
    after=$(_apiserver_conns_to_pinhook)
    expect_eq "reviews during the quiet spell" "$(($(_reviews_total) - reviews))" 0 || rc=1
    if [[ -n $after ]] && _ports_within "$after" "$before"; then
      ok "after 12 s of quiet the apiserver still holds $after (of $before)"
    else
      bad "after 12 s of quiet the apiserver holds '$after', before '$before': pinhook closed them"
      rc=1
    fi
  done
  again=$(_apiserver_conns_to_pinhook)
  if [[ -n $again ]] && _ports_within "$again" "$after"; then
    ok "the second create went over the kept connections ($again)"
  else
    bad "the second create opened new connections: '$again' after '$after'"
    rc=1
  fi
  return "$rc"
}
