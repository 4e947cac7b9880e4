# shellcheck shell=bash
# title: private image, no pull secret: pinned with a kubelet credential provider plugin's credentials
# order: 190
# kube: 1.20 1.32
# proves: Issue 12: a Pod with an image of the private (htpasswd) registry and no imagePullSecrets
#   is stored pinned to the exact index digest, with the credentials the node's kubelet credential
#   provider plugin (examples/credential_provider.rs, matching that registry only) answers; a second
#   Pod with the same image runs the plugin no more (1 run: Image cache key, 5m); the plugin's
#   password is in no line of pinhook's log.
#
# (issue 12) pinhook runs the node's kubelet credential provider plugins: here the example
# plugin (examples/credential_provider.rs) configured in $PROVIDERS/config.yaml, matching the
# private htpasswd registry only. A Pod with that registry's image and no imagePullSecrets is
# stored pinned to the exact index digest; the plugin ran (and no more than once for the
# same image: Image cache key, 5m); its password is in no log line of pinhook.
scenario_credential_provider_pins_private_image() {
  local ns=e2e-s rc=0 runs_before runs_after
  e2e_ns "$ns"
  runs_before=$(grep -c . "$PROVIDERS/runs" 2>/dev/null || true)
  klog -n "$ns" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: private
spec:
  containers:
    - name: app
      image: $PRIVATE_HOST/team/private:1.0
EOF
  expect_eq "pull secrets of the pod" "$(jp "$ns" pod private '{.spec.imagePullSecrets}')" "" || rc=1
  # shellcheck disable=SC2154 # (from the registry helper's env file, sourced by lib.sh)
  expect_eq "stored pod containers[0].image" "$(jp "$ns" pod private '{.spec.containers[0].image}')" \
    "$PRIVATE_HOST/team/private:1.0@$DIGEST_private_1_0" || rc=1
  klog -n "$ns" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: private-again
spec:
  containers:
    - name: app
      image: $PRIVATE_HOST/team/private:1.0
EOF
  runs_after=$(grep -c . "$PROVIDERS/runs" 2>/dev/null || true)
  expect_eq "plugin runs for the two Pods (Image cache key, cached 5m)" "$((runs_after - runs_before))" 1 || rc=1
  expect_eq "pinhook log lines with the plugin's password" "$(grep -cF "$PRIVATE_PASSWORD" "$RUN/pinhook.log" || true)" 0 || rc=1
  ok "pinhook_credential_provider_execs_total: $(metric_sum pinhook_credential_provider_execs_total 'provider="e2e-provider"')"
  return "$rc"
}
