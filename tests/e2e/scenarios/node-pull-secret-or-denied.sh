# shellcheck shell=bash
# title: on a real node, a private image runs with its namespace's pull secret, and is denied at admission without it
# order: 910
# needs: node
# proves: The private htpasswd registry, named `localhost:PORT` (a name the tier's credential
#   provider plugin does not match, so only a pull secret opens it): a Pod with
#   `imagePullSecrets: [regcred]` and the tag-only `team/node-private:1.0` in a namespace holding
#   that Secret is stored pinned to the index digest and reaches Running on the node, its imageID
#   that digest (pinhook and the kubelet used the same Secret); the same Pod in a namespace
#   without the Secret is refused at CREATE by pin.pinhook.dev with pinhook's message naming the
#   image (`registry localhost:PORT refused the credentials (unauthorized)`), and no Pod is
#   stored, so none is left in ImagePullBackOff.
scenario_node_pull_secret_or_denied() {
  local ns=e2e-node-secret other=e2e-node-nosecret rc=0 host img ids
  host="localhost:${PRIVATE_HOST##*:}"
  img="$host/team/node-private:1.0"
  e2e_ns "$ns"
  e2e_ns "$other"
  klog -n "$ns" create secret docker-registry regcred --docker-server="$host" \
    --docker-username="$PRIVATE_USER" --docker-password="$PRIVATE_PASSWORD"
  private_pod_yaml() {
    cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: private
  labels: {app: private}
spec:
$(node_tolerations 2)
  terminationGracePeriodSeconds: 2
  imagePullSecrets: [{name: regcred}]
  containers:
    - name: app
      image: $img
EOF
  }
  klog -n "$ns" create -f - < <(private_pod_yaml)
  expect_eq "stored image (with the Secret)" "$(jp "$ns" pod private '{.spec.containers[0].image}')" \
    "$img@$(digest node-private 1.0)" || rc=1
  wait_pods_running "$ns" app=private 1 60 || return 1
  ids=$(jp "$ns" pod private '{.status.containerStatuses[0].imageID}')
  expect_eq "imageID (with the Secret)" "$ids" "$host/team/node-private@$(digest node-private 1.0)" || rc=1

  kubectl_to "$RUN/node-nosecret" -n "$other" create -f - < <(private_pod_yaml)
  expect_eq "kubectl create exit code (no Secret)" "$KCODE" 1 || rc=1
  expect_contains "kubectl stderr (no Secret)" "$KERR" 'admission webhook "pin.pinhook.dev" denied the request' || rc=1
  expect_contains "kubectl stderr (no Secret)" "$KERR" "$img" || rc=1
  expect_contains "kubectl stderr (no Secret)" "$KERR" "registry $host refused the credentials (unauthorized)" || rc=1
  expect_absent pod private "$other" || rc=1
  return "$rc"
}
