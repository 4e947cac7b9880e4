# shellcheck shell=bash
# title: CronJob batch/v1beta1 pinned at spec.jobTemplate.spec.template.spec
# order: 30
# proves: A CronJob as `batch/v1beta1` (1.20 serves no batch/v1 CronJob) is stored with its image
#   pinned at `spec.jobTemplate.spec.template.spec`.

scenario_cronjob_v1beta1_pinned() {
  local ns=e2e-c
  e2e_ns "$ns"
  cronjob_yaml v1beta1 | klog -n "$ns" create -f -
  expect_eq "stored cronjob jobTemplate containers[0].image" \
    "$(jp "$ns" cronjobs.v1beta1.batch nightly '{.spec.jobTemplate.spec.template.spec.containers[0].image}')" \
    "$(pinned cron 1.0)"
}
