# shellcheck shell=bash
# title: on a real node, the Pod network reaches the apiserver (kubernetes Service) and the registries, and the host reaches a Pod through its Service
# order: 930
# needs: node
# proves: Groundwork for pinhook's own Pods on the node (issue 26): with node.sh's
#   NODE_POD_NETWORK=1 (the apiserver forwarded on the bridge address, kube-proxy in iptables
#   mode), from a running Pod's network namespace `https://10.0.0.1/readyz` (the `kubernetes`
#   ClusterIP, which in-cluster clients dial) answers `ok` with a certificate the e2e CA signed;
#   from the host (where the apiserver calls webhooks from), a ClusterIP Service selecting that
#   Pod reaches a listener in the Pod's network namespace once the endpoints controller has
#   filled its Endpoints; kube-proxy's NodePort rules name the bridge address only. The registries
#   too: from the Pod's network namespace `https://NODE_IP:PORT/v2/team/node-web/manifests/1.0`
#   (the bridge address, a certificate the e2e CA signed for it) answers the pushed digest, for
#   the private registry only with its credentials (401 without); and a Pod whose image is named
#   `NODE_IP:PORT/team/node-web@<digest>` (in a namespace no webhook sees) runs, containerd
#   pulling through the bridge address.
scenario_node_pod_network_reaches_services() {
  local ns=e2e-node-net rc=0 cid pid ip answer listener=""
  expect_eq "node.sh set up the Pod network (NODE_POD_NETWORK_READY)" "${NODE_POD_NETWORK_READY:-0}" 1 || return 1
  e2e_ns "$ns"
  klog -n "$ns" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: net
  labels: {app: net}
spec:
$(node_tolerations 2)
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
      image: $(pinned node-web 1.0)
      ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: net
spec:
  selector: {app: net}
  ports: [{port: 80, targetPort: 8080}]
EOF
  wait_pods_running "$ns" app=net 1 60 || return 1
  # the container's PID on this host, from containerd (the Pod's network namespace is its)
  cid=$(jp "$ns" pod net '{.status.containerStatuses[0].containerID}')
  pid=$(_node_ctr -n k8s.io tasks ls | awk -v id="${cid#containerd://}" '$1 == id {print $2}')
  [[ $pid =~ ^[0-9]+$ ]] || bad "no task for container $cid" || return 1
  answer=$(nsenter -t "$pid" -n curl -sS --max-time 5 --cacert "$E2E_CA_CERT" https://10.0.0.1/readyz 2>&1 || true)
  expect_eq "https://10.0.0.1/readyz from the Pod's network namespace" "$answer" ok || rc=1

  # a listener in the Pod's network namespace (this host's socat, in that namespace only)
  nsenter -t "$pid" -n socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo pong-from-pod' \
    </dev/null >"$RUN/node-net-listener.log" 2>&1 &
  listener=$!
  ip=$(jp "$ns" service net '{.spec.clusterIP}')
  if wait_until 30 "the Service net to answer from the host" \
    bash -c "[[ \$(timeout 3 socat -T 2 -u TCP:$ip:80,connect-timeout=2 STDOUT 2>/dev/null) == pong-from-pod ]]"; then
    ok "$ip:80 (Service net, ClusterIP) from the host answers from the Pod ($(jp "$ns" endpoints net '{.subsets[0].addresses[0].ip}'))"
  else
    bad "the Service net ($ip) did not answer from the Pod within 30 s" || rc=1
  fi
  stop_pid "$listener" "the Pod's listener" 5

  # the registries under the bridge address, from the Pod's network namespace
  local reg="$NODE_IP:${REGISTRY_HOST##*:}" priv="$NODE_IP:${PRIVATE_HOST##*:}" accept
  accept='application/vnd.oci.image.index.v1+json,application/vnd.oci.image.manifest.v1+json'
  answer=$(nsenter -t "$pid" -n curl -sS -o /dev/null -D - --max-time 5 --cacert "$E2E_CA_CERT" -H "Accept: $accept" \
    "https://$reg/v2/team/node-web/manifests/1.0" 2>&1 | tr -d '\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: //p' || true)
  expect_eq "digest of team/node-web:1.0 at https://$reg from the Pod's network namespace" "$answer" "$(digest node-web 1.0)" || rc=1
  answer=$(nsenter -t "$pid" -n curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$E2E_CA_CERT" \
    "https://$priv/v2/team/node-private/manifests/1.0" || true)
  expect_eq "HTTP status of the private registry at https://$priv without credentials" "$answer" 401 || rc=1
  answer=$(nsenter -t "$pid" -n curl -sS -o /dev/null -D - --max-time 5 --cacert "$E2E_CA_CERT" -H "Accept: $accept" \
    -u "$PRIVATE_USER:$PRIVATE_PASSWORD" "https://$priv/v2/team/node-private/manifests/1.0" 2>&1 |
    tr -d '\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: //p' || true)
  expect_eq "digest of team/node-private:1.0 at https://$priv with its credentials" "$answer" "$(digest node-private 1.0)" || rc=1
  e2e_ns "$ns-pull" pinhook.dev/ignore=true
  klog -n "$ns-pull" create -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: via-bridge
  labels: {app: via-bridge}
spec:
$(node_tolerations 2)
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
      image: $reg/team/node-web@$(digest node-web 1.0)
EOF
  wait_pods_running "$ns-pull" app=via-bridge 1 60 || rc=1
  expect_eq "imageID of the Pod pulled through the bridge address" \
    "$(jp "$ns-pull" pod via-bridge '{.status.containerStatuses[0].imageID}')" "$reg/team/node-web@$(digest node-web 1.0)" || rc=1
  expect_eq "kube-proxy NodePort rules on an address other than $NODE_IP" \
    "$(iptables -t nat -S KUBE-SERVICES | grep -F KUBE-NODEPORTS | grep -vcF "$NODE_IP/32" || true)" 0 || rc=1
  return "$rc"
}
