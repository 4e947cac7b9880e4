# shellcheck shell=bash
# title: target: pods: one digest per owner revision across a re-push of the tag
# order: 170
# kube: 1.20 1.32
# proves: A second pinhook with `target: pods` (its own policy and webhooks, `--cache-ttl
#   PODS_CACHE_TTL`): a bare Pod warms its cache with `team/roll:1.0` (D1); a Deployment's first Pod
#   gets D1, the Deployment and ReplicaSet templates stay as written; the tag is re-pushed (D2) and,
#   once a dry-run Pod gets D2 (the cache entry expired), a scale-up to 3 gives the 2 new Pods of
#   the same ReplicaSet D1 still; after `kubectl rollout restart` the new revision's Pod gets D2 and
#   the old ReplicaSet's 3 Pods stay on D1; as many ReplicaSets as in the twin no webhook sees.
# needs: pods-pinhook
#
# The second pinhook (lib.sh, e2e_setup_pods_pinhook: policy `target: pods`, its own webhooks for namespaces labelled
# pinhook.dev/e2e-instance=pods) runs with --cache-ttl $PODS_CACHE_TTL; its owner-revision
# memo lives --owner-revision-ttl (24 h by default), from the first Pod of
# the revision on, while the cache entry was made earlier, by a bare Pod: after the re-push the
# cache answers the new digest while the revision still holds the old one. Timeline (T = TTL):
#   0      bare Pod `warm`: cache miss, resolved to D1 (cache entry ages from here)
#   T/2    Deployment web (1 replica): its Pod gets D1 from the cache; the revision memo from here
#   ~T/2   re-push roll:1.0 -> D2
#   T      a dry-run Pod now gets D2 (the cache entry expired): polled
#   ~T     scale to 3: the 2 new Pods of the same revision get D1 (memo, until ~3T/2)
#   then   rollout restart: the new revision's Pod gets D2
scenario_target_pods_one_digest_per_revision() {
  local ns=e2e-q ref=e2e-q-ref rc=0 d1 d2 t0 t1 rs old_rs
  e2e_ns "$ns" pinhook.dev/ignore=true pinhook.dev/e2e-instance=pods
  e2e_ns "$ref" pinhook.dev/ignore=true
  d1=$(digest roll 1.0)
  local tagged
  tagged=$(image roll 1.0)
  klog -n "$ns" run warm --image="$tagged" --restart=Never
  klog -n "$ref" run warm --image="$tagged" --restart=Never # (the same Pods in both: same counts)
  t0=$(date +%s.%N)
  expect_eq "bare Pod warm (warms the cache)" "$(jp "$ns" pod warm '{.spec.containers[0].image}')" "$tagged@$d1" || return 1
  sleep "$(awk -v t0="$t0" -v n="$(date +%s.%N)" -v T="$PODS_CACHE_TTL" 'BEGIN { s = t0 + T / 2 - n; printf "%.2f", (s > 0 ? s : 0) }')"
  app_deployment web 1 "$tagged" >"$RUN/q-deployment.yaml"
  both "$ns" "$ref" create -f "$RUN/q-deployment.yaml"
  wait_until 30 "the first Pod of web in $ns" pods_at_least "$ns" "$ns" app=web 1 || return 1
  t1=$(date +%s.%N)
  expect_eq "the first Pod of web" "$(pod_images "$ns" app=web)" "1 $tagged@$d1" || rc=1
  expect_eq "Deployment template (target: pods leaves it as written)" "$(template_images "$ns" deployment web)" "$tagged" || rc=1
  old_rs=$(current_rs "$ns" web)
  expect_eq "ReplicaSet $old_rs template (as written)" "$(template_images "$ns" rs "$old_rs")" "$tagged" || rc=1

  d2=$(repush roll 1.0) || { bad "the registry helper did not re-push roll:1.0"; return 1; }
  if [[ $d2 == "$d1" ]]; then bad "the re-push kept the digest $d1" || return 1; fi
  ok "re-pushed roll:1.0: $d1 -> $d2"
  wait_until $((PODS_CACHE_TTL + 15)) "pinhook's cache to expire (a dry-run Pod pinned to the new digest)" \
    dry_run_gives "$ns" "$tagged" "$tagged@$d2" || rc=1
  ok "a Pod without owner now gets $d2 ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s after the cache entry)"
  both "$ns" "$ref" scale deploy/web --replicas=3
  wait_until 30 "3 Pods of web in $ns and $ref" pods_at_least "$ns" "$ref" app=web 3 || rc=1
  local age
  age=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  expect_eq "images of the 3 Pods of ReplicaSet $old_rs (one revision), the last 2 created after the re-push, ${age}s after the first" \
    "$(pod_images "$ns" app=web)" "3 $tagged@$d1" || rc=1
  if awk -v a="$age" -v T="$PODS_CACHE_TTL" 'BEGIN { exit !(a >= T) }'; then
    log "  note: the scale-up came ${age}s after the first Pod, past the revision memo's ${PODS_CACHE_TTL}s: timing too slow to tell"
  fi

  both "$ns" "$ref" rollout restart deploy/web
  settle "$ns" "$ref" web || rc=1
  rs=$(current_rs "$ns" web)
  expect_eq "images of the Pods of the new revision's ReplicaSet $rs" "$(pod_images "$ns" "$(rs_pods_selector "$ns" "$rs")")" "1 $tagged@$d2" || rc=1
  expect_eq "images of the Pods of $old_rs (unchanged)" "$(pod_images "$ns" "$(rs_pods_selector "$ns" "$old_rs")")" "3 $tagged@$d1" || rc=1
  expect_eq "ReplicaSets, $ns = $ref (no webhook)" "$(count "$ns" rs)" "$(count "$ref" rs)" || rc=1
  expect_eq "ReplicaSet templates (as written)" "$(images "$ns" rs '.spec.template.spec.containers[*].image')" "2 $tagged" || rc=1
  log_counts "$ns" "$ref" rs pods
  return "$rc"
}
