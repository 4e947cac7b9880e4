# shellcheck shell=bash
# title: serving-certificate rotation under load: no failed request
# order: 80
# kube: 1.20 1.32
# proves: 3 kubectl workers × 20 real Pod creates (about 16 s) and a new TLS connection to pinhook's
#   `/healthz` every 0.1 s; after 4 s a new certificate from the same CA is moved over pinhook's
#   files, key first, then certificate. pinhook logs `reloaded TLS certificate`; 60 of 60 creates
#   succeed; no handshake fails (at least 20 ran); the serial `openssl s_client` sees is the new
#   certificate's (and differs from the old one); all 60 stored Pods are pinned.

reload_count() { grep -c 'reloaded TLS certificate' "$RUN/pinhook.log" || true; }
reloaded() { (($(reload_count) > RELOADS_BEFORE)); }

served_serial() {
  timeout 10 openssl s_client -connect "127.0.0.1:$PINHOOK_PORT" -servername localhost </dev/null 2>/dev/null \
    | openssl x509 -noout -serial 2>/dev/null
}

# apiserver -> pinhook TCP connections (remote port list), to tell whether the
# apiserver opened new connections (= new TLS handshakes) across the rotation
apiserver_conns() {
  ss -Htn state established "dport = :$PINHOOK_PORT" 2>/dev/null | awk '{print $3}' | sort | tr '\n' ' '
}

scenario_serving_cert_rotation_under_load() {
  local ns=e2e-h rc=0
  e2e_ns "$ns"
  local dir="$RUN/h"
  mkdir -p "$dir"
  local serial_before
  serial_before=$(served_serial)
  [[ -n $serial_before ]] || { bad "cannot read the served certificate"; return 1; }
  log "  served before: $serial_before; apiserver connections: $(apiserver_conns)"
  RELOADS_BEFORE=$(reload_count)

  # Load: 3 kubectl workers x 20 real pod creates (60 admissions through the
  # apiserver), plus a handshake loop: a new TLS connection to pinhook every
  # 0.1 s verified against the e2e CA (new handshakes are what a rotation can break).
  local -a workers=()
  local w
  for w in 1 2 3; do
    cat >"$dir/pod-$w.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  generateName: load-$w-
spec:
  containers:
    - name: app
      image: $(image app 1.0)
EOF
    (
      # shellcheck disable=SC2034 # (i counts the creates)
      for i in $(seq 1 20); do
        if out=$(K -n "$ns" create -f "$dir/pod-$w.yaml" -o name 2>&1); then
          echo "$(date +%s.%N) ok $out"
        else
          echo "$(date +%s.%N) FAIL $(tr '\n' ' ' <<<"$out")"
        fi
        sleep 0.5
      done
    ) >"$dir/worker-$w.log" 2>&1 &
    workers+=($!)
  done
  (
    end=$(($(date +%s) + 14))
    while (($(date +%s) < end)); do
      if curl -s --max-time 3 --cacert "$CERT_DIR/ca.crt" -o /dev/null -w '%{http_code}' "$PINHOOK_URL/healthz" | grep -qx 200; then
        echo "$(date +%s.%N) ok"
      else
        echo "$(date +%s.%N) FAIL"
      fi
      sleep 0.1
    done
  ) >"$dir/handshakes.log" 2>&1 &
  local hs_pid=$!

  sleep 4
  # New cert from the same CA, then mv key, then cert (each mv is atomic).
  e2e_cert "$dir/new" >/dev/null || { bad "cluster.sh cert failed"; rc=1; }
  local new_serial
  new_serial=$(openssl x509 -noout -serial -in "$dir/new/tls.crt")
  mv -f "$dir/new/tls.key" "$CERT_DIR/tls.key"
  mv -f "$dir/new/tls.crt" "$CERT_DIR/tls.crt"
  log "  rotated the files to $new_serial; apiserver connections: $(apiserver_conns)"
  if wait_until 15 "pinhook's 'reloaded TLS certificate'" reloaded; then
    ok "pinhook logged: $(grep 'reloaded TLS certificate' "$RUN/pinhook.log" | tail -n1 | cut -c1-160)"
  else
    rc=1
  fi
  local rejected
  rejected=$(grep -c 'new TLS certificate rejected' "$RUN/pinhook.log" || true)
  ((rejected == 0)) || log "  note: pinhook logged 'new TLS certificate rejected' $rejected time(s) (key and cert seen in between the two mv)"

  for w in "${workers[@]}"; do wait "$w" || true; done
  wait "$hs_pid" || true
  log "  served after: $(served_serial); apiserver connections: $(apiserver_conns)"
  expect_eq "served certificate after the reload" "$(served_serial)" "$new_serial" || rc=1
  if [[ $serial_before == "$new_serial" ]]; then bad "the new certificate has the old serial" || rc=1; fi

  local total fails hs_total hs_fails
  total=$(cat "$dir"/worker-*.log | grep -c . || true)
  fails=$(cat "$dir"/worker-*.log | grep -c ' FAIL ' || true)
  hs_total=$(grep -c . "$dir/handshakes.log" || true)
  hs_fails=$(grep -c ' FAIL' "$dir/handshakes.log" || true)
  expect_eq "kubectl creates during the rotation (done/failed)" "$total/$fails" "60/0" || {
    grep ' FAIL ' "$dir"/worker-*.log | head -n 5 >&2
    rc=1
  }
  expect_eq "new TLS connections to pinhook during the rotation (failed of $hs_total)" "$hs_fails" 0 || rc=1
  ((hs_total >= 20)) || { bad "only $hs_total handshakes ran (expected ~80)"; rc=1; }
  # every created pod is stored pinned
  local images
  images=$(K -n "$ns" get pods -o jsonpath='{range .items[*]}{.spec.containers[0].image}{"\n"}{end}' | sort | uniq -c | sed 's/^ *//')
  expect_eq "stored images of the load pods (count image)" "$images" "60 $(pinned app 1.0)" || rc=1
  return "$rc"
}
