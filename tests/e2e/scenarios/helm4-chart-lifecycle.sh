# shellcheck shell=bash
# title: Helm 4: install, self-managed caBundle, upgrade keeps certs, rotation drops nothing, uninstall
# order: 210
# kube: 1.20 1.32
# proves: The chart with Helm 4 (server-side apply), url mode, `tls.mode: managed`, pinhook started
#   by the test with the chart's flags as the chart's ServiceAccount: `helm install` leaves no
#   caBundle and an empty Secret; pinhook fills the Secret and the caBundle of all three webhooks
#   and serves a certificate from it; a Deployment is stored pinned; `helm upgrade` with changed
#   values changes them and keeps the Secret's data and the caBundles; with short lifetimes and a
#   second replica, HELM_STREAM_SECONDS of dry-run creates through the apiserver see none refused
#   while the CA rotates and certificates are reissued, both replicas serve the same certificates,
#   only the Lease holder writes, and the other replica takes over when it stops; with pinhook
#   stopped a Pod is refused; `helm uninstall` leaves no webhook configuration and Pods are admitted
#   again (helm.sh).

scenario_helm4_chart_lifecycle() { helm_scenario 4; }
