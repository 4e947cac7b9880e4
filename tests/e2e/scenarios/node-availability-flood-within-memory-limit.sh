# shellcheck shell=bash
# title: on a real node, the chart's webhook Pods at their own memory limit, flooded from a Pod: no OOM kill, no restart, another tenant's admissions all answered
# order: 947
# needs: node
# proves: With the release of node-chart-install-pinned-image-ready (installed if this runs
#   alone: 2 webhook replicas with the chart's default resources, limit 448 MiB) and the
#   availability stream of the node-availability-* scenarios (another tenant's Deployments
#   through the apiserver, every webhook at Fail): a Pod of its own namespace (pause) is the
#   attacker, and from its network namespace (nsenter: its Pod IP, over the Pod network) floods
#   each webhook replica at its Pod IP at once with 40 slow 7 MiB bodies to /mutate, 40 to
#   /v1/dry-run with no token, 2,000 connections to :8443 and 2,000 to the metrics port :9090,
#   and 2,000 to each watch Pod's :8080, each sending the start of a head and held 8 s (under
#   the 10 s header read timeout): 128 held on :8443, 64 on the plain ports, the rest closed
#   (benches/body-flood.py --target). Meanwhile each replica's pinhook
#   RSS is sampled every 0.2 s from /proc. Every attempt of the stream is answered and pinned
#   (0 failed), neither replica restarts or is OOMKilled, and each one's peak RSS stays under
#   the limit; the figures (statuses per flood, peak RSS per replica) are logged. Before issue
#   44 one caller could hold every connection slot and read 40 bodies whole (442 MiB on
#   127.0.0.1).

# flood_rss_sampler OUT PID...: the largest VmRSS (KiB) of each PID, every 0.2 s, written to
# OUT as "PID KiB" lines until OUT.stop exists
flood_rss_sampler() {
  local out=$1 p v
  shift
  declare -A peak=()
  for p in "$@"; do peak[$p]=0; done
  while [[ ! -e $out.stop ]]; do
    for p in "$@"; do
      v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
      [[ $v =~ ^[0-9]+$ ]] && ((v > peak[$p])) && peak[$p]=$v
    done
    for p in "$@"; do printf '%s %s\n' "$p" "${peak[$p]}"; done >"$out.new" && mv -f "$out.new" "$out"
    sleep 0.2
  done
}

scenario_node_availability_flood_within_memory_limit() {
  local rc=0 ns=e2e-node-flood dir reg cid fpid name ip pids=() peaks line restarts_before restarts_after
  local floods=() f oom limit_kib
  dir="$RUN/availability/flood-attacker"
  rm -rf "$dir"
  mkdir -p "$dir"
  avail_begin flood || return 1
  reg=$(chart_node_registry)
  limit_kib=$(($(K -n "$CHART_NS" get deploy "$CHART_FULL" -o json | jq -r '.spec.template.spec.containers[] |
    select(.name == "pinhook") | .resources.limits.memory' | sed 's/Mi$//') * 1024))
  local chart_limit
  chart_limit=$(sed -n '/^resources:/,/^[a-z]/{s/^    memory: \([0-9]*\)Mi$/\1/p}' "$ROOT/charts/pinhook/values.yaml" | tail -n1)
  ((limit_kib == chart_limit * 1024)) || { bad "the webhook's memory limit is ${limit_kib} KiB, not the chart's ${chart_limit} MiB"; return 1; }

  # the attacker: a Pod of another namespace, its network namespace through containerd
  e2e_ns "$ns" pinhook.dev/e2e-chart=1
  {
    printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: flooder\n  labels: {run: flooder}\nspec:\n'
    node_tolerations 2
    printf '  terminationGracePeriodSeconds: 1\n  containers:\n    - name: pause\n      image: %s\n' "$reg/team/node-app:1.0"
  } >"$dir/flooder.yaml"
  klog -n "$ns" create -f "$dir/flooder.yaml"
  wait_pods_running "$ns" run=flooder 1 90 || return 1
  cid=$(K -n "$ns" get pod flooder -o jsonpath='{.status.containerStatuses[0].containerID}')
  cid=${cid#containerd://}
  fpid=$(ctr --address "$NODE_SOCK" -n k8s.io tasks ls 2>/dev/null | awk -v id="$cid" '$1 == id {print $2}')
  [[ $fpid =~ ^[0-9]+$ && -e /proc/$fpid/ns/net ]] || { bad "no PID for the flooder's container"; return 1; }
  log "  attacker: Pod flooder ($(K -n "$ns" get pod flooder -o jsonpath='{.status.podIP}')), its network namespace /proc/$fpid/ns/net"

  restarts_before=$(avail_restart_counts)
  while read -r name _ _ ip; do
    pids+=("$(avail_pinhook_pid "$name")") || return 1
  done < <(chart_node_live_pods webhook)
  flood_rss_sampler "$dir/peaks" "${pids[@]}" &
  local sampler=$!

  avail_stream_start
  avail_disrupt
  while read -r name _ _ ip; do
    for f in "/mutate 40" "/v1/dry-run 40" "idle 2000 8"; do
      # shellcheck disable=SC2086 # (the flood's own arguments)
      (ulimit -n 8192; nsenter --net="/proc/$fpid/ns/net" timeout 120 python3 "$ROOT/benches/body-flood.py" \
        --target "$ip:8443" $f >>"$dir/floods.log" 2>&1) &
      floods+=($!)
    done
    (ulimit -n 8192; nsenter --net="/proc/$fpid/ns/net" timeout 120 python3 "$ROOT/benches/body-flood.py" \
      --plain-target "$ip:9090" idle 2000 8 >>"$dir/floods.log" 2>&1) &
    floods+=($!)
  done < <(chart_node_live_pods webhook)
  while read -r name _ _ ip; do
    (ulimit -n 8192; nsenter --net="/proc/$fpid/ns/net" timeout 120 python3 "$ROOT/benches/body-flood.py" \
      --plain-target "$ip:8080" idle 2000 8 >>"$dir/floods.log" 2>&1) &
    floods+=($!)
  done < <(chart_node_live_pods watch)
  for f in "${floods[@]}"; do wait "$f" || true; done
  log "  floods done $(avail_since "$AVAIL_T_DISRUPT")s after they began:"
  while IFS= read -r line; do log "    $line"; done <"$dir/floods.log"
  avail_settle_then_stop
  touch "$dir/peaks.stop"
  wait "$sampler" 2>/dev/null || true
  avail_report "-" "$(tr '\n' ' ' <"$dir/peaks" | sed 's/ $//')"
  avail_expect_none_failed || rc=1

  restarts_after=$(avail_restart_counts)
  expect_eq "webhook Pods and their restarts after the flood" "$restarts_after" "$restarts_before" || rc=1
  oom=$(K -n "$CHART_NS" get pods -l app.kubernetes.io/component=webhook -o json |
    jq -r '[.items[].status.containerStatuses[]? | select(.lastState.terminated.reason == "OOMKilled")] | length')
  expect_eq "webhook containers last OOMKilled" "$oom" "0" || rc=1
  while read -r f peaks; do
    log "  pinhook PID $f: peak RSS $((peaks / 1024)) MiB during the flood (limit $((limit_kib / 1024)) MiB)"
    ((peaks > 0 && peaks < limit_kib)) || { bad "PID $f peaked at $peaks KiB" || rc=1; }
  done <"$dir/peaks"
  grep -q "statuses" "$dir/floods.log" && grep -q "held" "$dir/floods.log" ||
    { bad "the floods printed no figures: $(tail -n 5 "$dir/floods.log" | tr '\n' ' ')" || rc=1; }
  # each port held some of the attacker's connections and never more than its share: 128 on
  # the webhook's (shared with the attacker's slow bodies there), 64 on a plain one
  local held most
  while IFS= read -r line; do
    [[ $line =~ :([0-9]+):\ 2000\ connections\ \(([0-9]+)\ held\) ]] || continue
    held=${BASH_REMATCH[2]}
    most=64
    [[ ${BASH_REMATCH[1]} == 8443 ]] && most=128
    ((held > 0 && held <= most)) || { bad "one address held $held connections (at most $most): $line" || rc=1; }
  done <"$dir/floods.log"
  avail_end
  K delete ns "$ns" --wait=false >/dev/null 2>&1 || true
  return "$rc"
}
