//! pinhook beside a cluster: `pinhook watch` and `pinhook inventory` against the fake
//! Kubernetes API, `/v1/dry-run` authorised through it, objects that controllers made, the
//! HTTPS server's certificate reload and shutdown, and the Helm chart as `helm template`
//! renders it; who may read the watch's `/inventory`.

pub(crate) mod chart;
mod controllers_https;
mod dry_run_https;
mod loop_ledger;
mod revision_pods;
mod server_lifecycle;
mod watch;
mod watch_inventory_auth;
