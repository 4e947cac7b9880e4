# shellcheck shell=bash disable=SC2317 # (it calls functions it defines inside itself indirectly)
# title: watch at scale (not in the default run): 5000 Pods, 50 namespaces, 200 images: RSS, time, requests, writes
# order: 260
# proves: WATCH_SCALE_PODS (5000) bare Pods in WATCH_SCALE_NAMESPACES (50) namespaces no webhook
#   sees, using WATCH_SCALE_IMAGES (200) distinct `tag@digest` images, created straight in the
#   apiserver; a fresh watch with a WATCH_SCALE_INTERVAL (30 s) recheck. Measured and logged
#   (`scale:` lines): RSS, the time to the first complete set of reports, registry requests in one
#   recheck. Asserted: every report complete, registry requests in a recheck = the distinct (image,
#   credential) keys (at least the images) plus the distinct (digest, credential) checks of pins
#   whose tag moved, and an unchanged recheck writes nothing (the watch's
#   count, the reports' resourceVersions).
# default: no
# needs: scale-images

scenario_watch_at_scale() {
  local rc=0 pods=${WATCH_SCALE_PODS:-5000} nss=${WATCH_SCALE_NAMESPACES:-50}
  local images=${WATCH_SCALE_IMAGES:-200} interval=${WATCH_SCALE_INTERVAL:-30} dir="$WATCH_DIR/z"
  watch_setup || return 1
  mkdir -p "$dir"
  watch_stop_all
  local per=$((pods / nss)) n i k ns t0
  t0=$SECONDS
  for ((n = 0; n < nss; n++)); do
    ns=$(printf 'e2e-z-%02d' "$n")
    e2e_ns "$ns" pinhook.dev/ignore=true >/dev/null
    {
      for ((i = 0; i < per; i++)); do
        k=$(((n * per + i) % images + 1))
        local var="DIGEST_scale_$k"
        printf -- '---\napiVersion: v1\nkind: Pod\nmetadata: {name: p%04d}\nspec:\n  containers:\n    - {name: app, image: "%s/team/scale:%d@%s"}\n' \
          "$i" "$REGISTRY_HOST" "$k" "${!var:?no digest for scale:$k (E2E_SCALE_IMAGES)}"
      done
    } >"$dir/$ns.yaml"
    K -n "$ns" create -f "$dir/$ns.yaml" >/dev/null || { bad "creating the Pods of $ns failed"; return 1; }
  done
  ok "created $((per * nss)) Pods in $nss namespaces using $images images ($((SECONDS - t0))s)"

  local start port pid
  # shellcheck disable=SC2034 # (watch_start reads it)
  WATCH_INTERVAL=$interval
  start=$(date +%s.%N)
  watch_start 0 || return 1
  port=$(watch_port 0)
  pid=$(<"$WATCH_DIR/watch-0.pid")
  complete() {
    [[ $(K get policyreports.wgpolicyk8s.io -A -o json |
      jq --argjson want "$((per * 2))" '[.items[] | select(.metadata.namespace | startswith("e2e-z-")) | select(.summary.pass == $want)] | length') == "$nss" ]]
  }
  wait_until 300 "$nss complete PolicyReports" complete || return 1
  local first
  first=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  log "  scale: first complete set of $nss reports ${first}s after the watch started"
  log "  scale: watch RSS after the first recheck $(awk '/VmRSS/ {print $2, $3}' "/proc/$pid/status")"

  local log="$WATCH_DIR/watch-0.log" c m1 m2 keys versions1 versions2 line
  requests() { watch_metric_sum "$port" pinhook_registry_requests_total; }
  c=$(cycles_in "$log")
  m1=$(requests)
  versions1=$(K get policyreports.wgpolicyk8s.io -A -o json | jq -c '[.items[] | .metadata.resourceVersion]')
  wait_until $((interval * 2 + 30)) "the next recheck" cycles_at_least "$log" $((c + 1)) || return 1
  m2=$(requests)
  versions2=$(K get policyreports.wgpolicyk8s.io -A -o json | jq -c '[.items[] | .metadata.resourceVersion]')
  line=$(grep 'recheck done' "$log" | tail -1)
  keys=$(sed -E 's/.*lookups=([0-9]+).*/\1/' <<<"$line")
  checks=$(sed -E 's/.*digest_checks=([0-9]+).*/\1/' <<<"$line")
  log "  scale: recheck: $(sed -E 's/.*(pods=.*)/\1/' <<<"$line")"
  log "  scale: registry requests in one recheck: $((m2 - m1)) for $keys distinct (image, credential) keys and $checks distinct (digest, credential) checks"
  # one per tag key, and one HEAD by digest per pin its tag no longer vouches for (the pins of
  # tags that moved, from the scenarios before this one)
  expect_eq "registry requests in one recheck (keys + digest checks)" "$((m2 - m1))" "$((keys + checks))" || rc=1
  # (other scenarios' Pods add their own keys when this runs after them)
  if ((keys >= images)); then ok "distinct (image, credential) keys: $keys (>= $images)"; else bad "distinct keys: $keys < $images"; rc=1; fi
  expect_eq "report writes and Events of the unchanged recheck" "$(last_cycle "$log")" "0 0" || rc=1
  expect_eq "reports' resourceVersions across it (any write changes one)" "$versions2" "$versions1" || rc=1
  log "  scale: watch RSS after the second recheck $(awk '/VmRSS/ {print $2, $3}' "/proc/$pid/status")"
  for ((n = 0; n < nss; n++)); do K delete ns "$(printf 'e2e-z-%02d' "$n")" --wait=false >/dev/null; done
  return "$rc"
}
# watch_metric_sum PORT NAME: the sum of every sample of a metric
watch_metric_sum() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk -v m="$2" 'index($0, m "{") == 1 || index($0, m " ") == 1 { s += $NF } END { print s + 0 }'
}
