# shellcheck shell=bash
# title: a 1.32 Pod's native sidecar, image volume and ephemeral container pinned
# order: 25
# kube: 1.32
# proves: On the 1.32 apiserver (issue 47), the image fields 1.20 has no such form of: a native
#   sidecar (an initContainer with `restartPolicy: Always`, GA in 1.33, on by default since
#   1.29), an image volume (`spec.volumes[].image.reference`, the ImageVolume gate, which
#   cluster.sh turns on from 1.31) and an ephemeral container added as `kubectl debug` adds it
#   (the `pods/ephemeralcontainers` subresource, a whole Pod there since 1.22): each is stored
#   pinned to its tag's index digest.

scenario_modern_pod_fields_pinned() {
  local ns=e2e-modern rc=0
  e2e_ns "$ns"
  klog -n "$ns" create -f - <<EOF || rc=1
apiVersion: v1
kind: Pod
metadata:
  name: modern
spec:
  initContainers:
    - name: proxy
      image: $(image sidecar 1.0)
      restartPolicy: Always
  containers:
    - name: app
      image: $(image app 2.0)
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      image:
        reference: $(image db 1.0)
        pullPolicy: IfNotPresent
EOF
  expect_eq "stored native sidecar initContainers[0].image" \
    "$(jp "$ns" pod modern '{.spec.initContainers[0].image}')" "$(pinned sidecar 1.0)" || rc=1
  expect_eq "stored initContainers[0].restartPolicy" \
    "$(jp "$ns" pod modern '{.spec.initContainers[0].restartPolicy}')" "Always" || rc=1
  expect_eq "stored image volume spec.volumes[0].image.reference" \
    "$(jp "$ns" pod modern '{.spec.volumes[0].image.reference}')" "$(pinned db 1.0)" || rc=1
  expect_eq "stored containers[0].image" \
    "$(jp "$ns" pod modern '{.spec.containers[0].image}')" "$(pinned app 2.0)" || rc=1
  # What `kubectl debug` sends: the Pod with one more ephemeral container, on the subresource.
  klog -n "$ns" debug pod/modern --image="$(image job 1.0)" --container=debugger --profile=general --quiet || rc=1
  expect_eq "stored ephemeralContainers[0].image (kubectl debug)" \
    "$(jp "$ns" pod modern '{.spec.ephemeralContainers[0].image}')" "$(pinned job 1.0)" || rc=1
  return "$rc"
}
