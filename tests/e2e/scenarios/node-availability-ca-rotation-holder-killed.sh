# shellcheck shell=bash
# title: on a real node, the certificate Lease holder SIGKILLed during a CA rotation under a steady stream of admissions: the rotation completes, no certificate error
# order: 950
# needs: node
# proves: With the chart's release (as node-availability-rollout-restart) and the same stream of
#   admissions (availability.sh, up to 300 s): `helm3 upgrade` with `tls.managed.caLifetime` 12h
#   and `certLifetime` 1h rolls both webhook Pods; the new Lease holder finds the CA (730 days)
#   longer than its lifetime and starts a CA rotation: the next CA goes into the Secret's bundle
#   and every caBundle (annotation pinhook.dev/next-ca-published-at). During its 60 s grace the
#   holder of the `-tls` Lease is SIGKILLed (its PID from containerd). The rotation completes
#   anyway (≤ 180 s): the Secret's signer is the CA that was next, the previous signer is kept as
#   previous.crt, every webhook's caBundle is the Secret's ca.crt, and both replicas serve a
#   certificate that CA signed; both Pods are Running and Ready (ready_again: from the upgrade).
#   No attempt fails with a certificate error; as in node-availability-process-killed, the only
#   failures allowed are the connection errors the SIGKILL explains (docs/availability.md), none
#   stored unpinned; one `availability: ca-rotation-holder-killed ...` line.
scenario_node_availability_ca_rotation_holder_killed() {
  local rc=0 old t0 ready=timeout holder ip pid restarts tk next_fp old_fp p served
  # shellcheck disable=SC2034 # (read by avail_stream_start, availability.sh; this subshell only)
  AVAIL_SECONDS=300
  avail_begin ca-rotation-holder-killed || return 1
  old_fp=$(avail_secret_fp signer.crt)
  old=$(chart_node_live_pods webhook | cut -d' ' -f1 | tr '\n' ' ')
  if ! avail_upgrade "tls.managed.caLifetime=12h, certLifetime=1h (signer now ${old_fp:0:16})" \
    --set tls.managed.caLifetime=12h --set tls.managed.certLifetime=1h; then
    avail_settle_then_stop
    return 1
  fi
  t0=$AVAIL_T_DISRUPT
  if ! wait_until 150 "the next CA published (pinhook.dev/next-ca-published-at) by a new Pod" avail_rotation_started "$old"; then
    bad "no CA rotation started: $(K -n "$CHART_NS" get secret "$CHART_FULL-tls" -o jsonpath='{.metadata.annotations}')"
    avail_settle_then_stop
    return 1
  fi
  next_fp=$(avail_secret_fp next.crt)
  holder=$(helm_lease_holder "$CHART_NS" "$CHART_FULL-tls")
  log "  next CA ${next_fp:0:16} published $(K -n "$CHART_NS" get secret "$CHART_FULL-tls" -o jsonpath='{.metadata.annotations.pinhook\.dev/next-ca-published-at}'); Lease holder $holder"
  ip=$(K -n "$CHART_NS" get pod "$holder" -o jsonpath='{.status.podIP}')
  restarts=$(K -n "$CHART_NS" get pod "$holder" -o jsonpath='{.status.containerStatuses[0].restartCount}')
  pid=$(avail_pinhook_pid "$holder") || { avail_settle_then_stop; return 1; }
  log "  SIGKILL to the Lease holder's pinhook (PID $pid) in $holder ($ip), during the grace"
  tk=$(date +%s.%N)
  kill -KILL "$pid"
  if wait_until 180 "the rotation complete (signer = the next CA, bundles = ca.crt)" avail_rotation_done "$next_fp" "$old_fp" &&
    wait_until 120 "$holder restarted, both webhook Pods Running and Ready" avail_restarted "$holder" "$restarts"; then
    ready=$(avail_since "$t0")
  else
    K -n "$CHART_NS" get secret "$CHART_FULL-tls" -o json | jq -c '{annotations: .metadata.annotations, keys: (.data | keys)}' | while IFS= read -r l; do log "  secret: $l"; done
    rc=1
  fi
  log "  Lease holder now $(helm_lease_holder "$CHART_NS" "$CHART_FULL-tls" 2>/dev/null)"
  avail_settle_then_stop
  K -n "$CHART_NS" get secret "$CHART_FULL-tls" -o jsonpath='{.data.signer\.crt}' | base64 -d >"$AVAIL_OUT/new-signer.crt" || true
  for p in $(chart_node_live_pods webhook | cut -d' ' -f4); do
    served=$(openssl s_client -connect "$p:8443" -servername "$CHART_FULL.$CHART_NS.svc" </dev/null 2>/dev/null | openssl x509 2>/dev/null)
    if openssl verify -partial_chain -CAfile "$AVAIL_OUT/new-signer.crt" <(printf '%s\n' "$served") >/dev/null 2>&1; then
      ok "the replica at $p serves a certificate the new CA signed"
    else
      bad "the replica at $p does not serve a certificate the new CA signed" || rc=1
    fi
  done
  avail_report "$ready" "holder=${holder: -5} killed_after=$(awk -v a="$t0" -v b="$tk" 'BEGIN{printf "%.1fs", b-a}')"
  expect_eq "attempts that failed with a certificate error" \
    "$(awk -F'\t' '$6 == "failed" && $7 ~ /x509|certificate|tls:/' "$AVAIL_OUT/attempts.tsv")" "" || rc=1
  avail_expect_kill_bound "$tk" "$ip" "$(awk -v a="$tk" -v b="$(awk -v t0="$t0" -v r="${ready/timeout/100000}" 'BEGIN{printf "%.3f", t0 + r}')" 'BEGIN{printf "%.1f", b-a}')" || rc=1
  avail_end
  return "$rc"
}
