# shellcheck shell=bash
# title: StatefulSet, DaemonSet, Job and Job-from-CronJob Pods carry the template's digest
# order: 160
# kube: 1.20 1.32
# proves: A StatefulSet (2 replicas, Parallel), a DaemonSet (on a Node object made for it), a Job, a
#   CronJob (batch/v1beta1 on 1.20, batch/v1 on 1.32) and a Job made from it as `kubectl create job
#   --from=cronjob/...` makes it, in a
#   namespace and its twin no webhook sees: every template is stored pinned; each controller's Pods
#   (2, 1, 1, 1) carry the template's digest, as many as in the twin; as many ControllerRevisions as
#   in the twin 2 s later.
#
# A Node object for the DaemonSet controller to place a Pod on (no kubelet: it stays NotReady).
# The apiserver taints a new Node node.kubernetes.io/not-ready:NoSchedule, which daemon Pods do
# not tolerate (only the NoExecute one), and without a node lifecycle controller nothing would
# ever lift it: the taint is removed by hand.
ensure_node() {
  K get node e2e-node >/dev/null 2>&1 && return 0
  klog create -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: e2e-node
  labels: {kubernetes.io/hostname: e2e-node}
EOF
  klog taint node e2e-node node.kubernetes.io/not-ready:NoSchedule-
}
workloads_yaml() { # the StatefulSet, DaemonSet, Job and CronJob (tag-only images)
  cat <<EOF
$(statefulset_yaml 2 Parallel)
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
        - name: agent
          image: $(image agent 1.0)
---
apiVersion: batch/v1
kind: Job
metadata:
  name: once
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: job
          image: $(image job 1.0)
---
$(cronjob_yaml)
EOF
}
# job_from_cronjob NS: what `kubectl create job nightly-manual --from=cronjob/nightly` sends.
# kubectl 1.32 cannot do it against 1.20 (it reads the CronJob as batch/v1: "unknown object
# type *v1beta1.CronJob"), so the Job is built as kubectl builds it (pkg/cmd/create/
# create_job.go createJobFromCronJob): the jobTemplate's labels and spec, its annotations plus
# cronjob.kubernetes.io/instantiate=manual, the CronJob as controller owner.
job_from_cronjob() {
  K -n "$1" get "cronjobs.$(cronjob_version).batch" nightly -o json | jq --arg version "batch/$(cronjob_version)" '{
    apiVersion: "batch/v1", kind: "Job",
    metadata: {
      name: "nightly-manual",
      labels: (.spec.jobTemplate.metadata.labels // {}),
      annotations: ({"cronjob.kubernetes.io/instantiate": "manual"} + (.spec.jobTemplate.metadata.annotations // {})),
      ownerReferences: [{apiVersion: $version, kind: "CronJob", name: .metadata.name,
        uid: .metadata.uid, controller: true, blockOwnerDeletion: true}]
    },
    spec: .spec.jobTemplate.spec}' | klog -n "$1" create -f -
}
scenario_controller_pods_carry_template_digest() {
  local ns=e2e-p ref=e2e-p-ref rc=0 w
  e2e_ns "$ns"
  e2e_ns "$ref" pinhook.dev/ignore=true
  ensure_node
  workloads_yaml >"$RUN/p-workloads.yaml"
  both "$ns" "$ref" create -f "$RUN/p-workloads.yaml"
  job_from_cronjob "$ns"
  job_from_cronjob "$ref"
  expect_eq "stored Job nightly-manual (from the CronJob): template image" \
    "$(template_images "$ns" job nightly-manual)" "$(pinned cron 1.0)" || rc=1
  # kind name selector pods repo: each controller's Pods, with the digest of the pinned template
  local -a spec=(
    "statefulset db app=db 2 db"
    "daemonset agent app=agent 1 agent"
    "job once job-name=once 1 job"
    "job nightly-manual job-name=nightly-manual 1 cron"
  )
  local kind name sel n repo
  for w in "${spec[@]}"; do
    read -r kind name sel n repo <<<"$w"
    expect_eq "$kind $name: stored template image" "$(template_images "$ns" "$kind" "$name")" "$(pinned "$repo" 1.0)" || rc=1
    wait_until 30 "$n Pod(s) of $kind $name in $ns and $ref" pods_at_least "$ns" "$ref" "$sel" "$n" || rc=1
    expect_eq "$kind $name: images of its Pods (count image)" "$(pod_images "$ns" "$sel")" "$n $(pinned "$repo" 1.0)" || rc=1
    expect_eq "$kind $name: Pods, $ns = $ref (no webhook)" "$(count "$ns" pods "$sel")" "$(count "$ref" pods "$sel")" || rc=1
  done
  expect_eq "cronjob nightly: stored jobTemplate image" \
    "$(jp "$ns" "cronjobs.$(cronjob_version).batch" nightly '{.spec.jobTemplate.spec.template.spec.containers[*].image}')" "$(pinned cron 1.0)" || rc=1
  # a StatefulSet or DaemonSet whose Pods differ from its template would churn revisions
  sleep 2
  expect_eq "ControllerRevisions, $ns = $ref (no webhook)" "$(count "$ns" controllerrevisions)" "$(count "$ref" controllerrevisions)" || rc=1
  log_counts "$ns" "$ref" pods controllerrevisions jobs
  return "$rc"
}
