# shellcheck shell=bash
# title: Helm 4 on 1.20: install then upgrade with no pinhook running, no manual label; only pinhook's namespace excluded
# order: 206
# proves: helm3-chart-own-namespace-1-20's steps with Helm 4 (server-side apply): install renders
#   every webhook Ignore, pinhook's own Pod passes, `helm upgrade` with no pinhook running succeeds,
#   pinhook labels its namespace then raises all three webhooks to Fail, only pinhook's namespace is
#   admitted while nothing answers; the next `helm upgrade` is refused with a server-side apply
#   conflict on failurePolicy (pinhook's field now), succeeds with --force-conflicts and puts Ignore
#   back, and a restarted pinhook raises it again;
#   `helm uninstall` leaves no webhook configuration (steps in helm3-chart-own-namespace-1-20.sh).

scenario_helm4_chart_own_namespace_1_20() { own_namespace_scenario 4; }
