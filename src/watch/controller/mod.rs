//! `pinhook watch`, the I/O edge of the drift watch: the Pod watch ([`pods`]), the recheck
//! cycle ([`cycle`]), the API reads and writes ([`api`]), the Lease that lets one replica of
//! several write, the plain-HTTP port ([`http`]: `/metrics`, `/healthz`, `/readyz`, and
//! `/inventory` behind [`access`]'s gate) and `pinhook inventory` ([`inventory`]).
//!
//! **One writer.** Every replica watches Pods (a standby takes over with its store warm), but
//! only the holder of the `coordination.k8s.io` Lease resolves and writes. The Lease is
//! pinhook's own [`LeaseLock`] ([`crate::lease`], shared with the self-managed certificates and
//! tested there): no
//! new dependency, and kube-runtime offers no leader election. The holder renews every third
//! of the lease duration; a cycle under way when the Lease is lost is abandoned at once.
//!
//! **Never**: decides anything about an image (that is the pure [`crate::watch`] core), or
//! writes when nothing changed.

pub mod access;
pub mod api;
pub mod cluster_io;
pub mod cycle;
pub mod http;
pub mod inventory;
mod keyrings;
pub mod pods;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::cluster::KubeNamespaces;
use crate::error::error_chain;
use crate::kube_client::{kube_client, KubeAccess, KubeClientError};
use crate::lease::LeaseLock;
use crate::metrics::Metrics;
use crate::policy::PolicyError;
use crate::policy::PolicyHandle;
use crate::policy_reload::PolicySource;
use crate::registry::credentials::node;
use crate::registry::credentials::node::NodeCredentialsError;
use crate::registry::provider::ProviderFiles;
use crate::registry::pull_secrets::KubeSecrets;
use crate::registry::stack::StackError;
use crate::registry::stack::{self, Guard, Stack};
use crate::registry::{CacheConfig, RegistryConfig};
use crate::server::ConnectionLimits;

pub use access::{InventoryAuth, InventoryGate};
pub use cluster_io::{ClusterIo, KubeIo};
pub use cycle::{CycleSettings, CycleSummary, Watch, WatchParts};
pub use pods::PodStore;

/// Everything `pinhook watch` needs to know.
pub struct WatchConfig {
    /// The plain-HTTP ports: metrics and health; the inventory.
    pub listen: http::Listen,
    pub policy: PolicySource,
    pub registry: RegistryConfig,
    /// The watch's own cache; its `hit_ttl` is the recheck interval.
    pub cache: CacheConfig,
    pub recheck_interval: Duration,
    pub kube: KubeAccess,
    pub docker_config: Option<std::path::PathBuf>,
    pub credential_providers: Option<ProviderFiles>,
    pub lease: LeaseConfig,
    pub cycle: CycleSettings,
    pub namespace_label_ttl: Duration,
    /// Who may read `/inventory`.
    pub inventory_auth: InventoryAuth,
}

/// The Lease the replicas share.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's name in the Lease (its pod name).
    pub identity: String,
    pub duration: Duration,
}

/// Why the watch could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchRunError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error(transparent)]
    NodeCredentials(#[from] NodeCredentialsError),
    #[error(transparent)]
    Kube(#[from] KubeClientError),
    #[error("pinhook watch needs the Kubernetes API, and none is configured")]
    NoKube,
    #[error(transparent)]
    Serve(#[from] crate::server::ServerError),
}

/// The watch, wired and not yet running.
pub struct Built {
    pub watch: Arc<Watch>,
    pub client: kube::Client,
    /// The resolver stack, its client reconfigured when the policy file's `registries.hosts`
    /// change.
    stack: Stack,
}

/// Wires the watch from `config` (the same registry chain, credentials and namespace labels as
/// `pinhook serve`) without starting anything.
pub async fn build(config: &WatchConfig) -> Result<Built, WatchRunError> {
    let metrics = Arc::new(Metrics::new());
    let handle = PolicyHandle::new(config.policy.load()?);
    let stack = stack::build(
        &config.registry,
        config.cache.clone(),
        &handle,
        Guard::Policy,
        metrics.clone(),
    )?;
    let resolver = stack.cache.clone();
    let client = kube_client(config.kube.clone())
        .await?
        .ok_or(WatchRunError::NoKube)?;
    let node = node::credentials(
        config.docker_config.as_deref(),
        config.credential_providers.as_ref(),
        &metrics,
    )?;
    let watch = Watch::new(WatchParts {
        cluster: Arc::new(KubeIo::new(client.clone(), &config.lease.identity)),
        policy: handle,
        resolver,
        secrets: Arc::new(KubeSecrets::new(client.clone(), node)),
        namespaces: Arc::new(KubeNamespaces::with_ttl(
            client.clone(),
            config.namespace_label_ttl,
        )),
        metrics,
        settings: config.cycle.clone(),
        signatures: Some(stack.signatures.clone()),
    });
    Ok(Built {
        watch: Arc::new(watch),
        client,
        stack,
    })
}

/// Runs the watch until SIGTERM or Ctrl-C.
pub async fn run(config: WatchConfig) -> Result<(), WatchRunError> {
    let Built {
        watch,
        client,
        stack,
    } = build(&config).await?;
    info!(listen = %config.listen.health, inventory_listen = ?config.listen.inventory, interval_seconds = config.recheck_interval.as_secs(), lease = %config.lease.name, identity = %config.lease.identity, inventory_auth = ?config.inventory_auth, "pinhook watch");
    let store = PodStore::default();
    let pods = tokio::spawn(store.clone().run(client.clone()));
    // The policy file is re-read when it changes, as `pinhook serve` does (the chart mounts
    // the same ConfigMap).
    let policy_watch = match &config.policy {
        PolicySource::File(path) => {
            let reconfigure = stack.reload();
            Some(tokio::spawn(crate::policy_reload::reload_on_change(
                path.clone(),
                watch.policy().clone(),
                reconfigure,
            )))
        }
        PolicySource::Fixed(_) => None,
    };
    let (leading_tx, leading_rx) = watch::channel(false);
    let gate = Arc::new(InventoryGate::new(config.inventory_auth, client.clone()));
    let lease = tokio::spawn(hold_lease(client, config.lease.clone(), leading_tx));
    let cycles = tokio::spawn(cycles(
        watch.clone(),
        store.clone(),
        leading_rx,
        config.recheck_interval,
    ));
    let served = match http::serve(
        watch,
        store,
        gate,
        config.listen,
        &ConnectionLimits::default(),
    ) {
        Ok(edges) => {
            let inventory = edges.inventory;
            let served = edges
                .health
                .serve_until(crate::server::shutdown_signal(), Duration::from_secs(5))
                .await;
            if let Some(inventory) = inventory {
                let _ = inventory.shutdown(Duration::from_secs(1)).await;
            }
            served
        }
        Err(e) => Err(e),
    };
    for task in [pods, lease, cycles].into_iter().chain(policy_watch) {
        task.abort();
    }
    info!("stopped");
    served.map_err(WatchRunError::Serve)
}

/// Takes and renews the Lease; tells the cycles whether this replica leads.
async fn hold_lease(client: kube::Client, config: LeaseConfig, leading: watch::Sender<bool>) {
    let leases: Api<Lease> = Api::namespaced(client, &config.namespace);
    let lock = LeaseLock::new(leases, &config.name, &config.identity, config.duration);
    let renew = (config.duration / 3).max(Duration::from_millis(200));
    loop {
        let now_leading = match lock.try_acquire_or_renew().await {
            Ok(held) => held,
            Err(error) => {
                warn!(lease = %config.name, error = %error, "cannot take or renew the watch Lease");
                // Without a renewal the Lease lapses: stop writing before another replica
                // may start.
                false
            }
        };
        if now_leading != *leading.borrow() {
            info!(lease = %config.name, identity = %config.identity, leading = now_leading, "watch Lease");
            leading.send_replace(now_leading);
        }
        tokio::time::sleep(renew).await;
    }
}

/// Runs a cycle every `interval` while this replica leads and the Pod store is complete.
async fn cycles(
    watch: Arc<Watch>,
    store: PodStore,
    mut leading: watch::Receiver<bool>,
    interval: Duration,
) {
    store.wait_ready().await;
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        // A new term: the Events the previous leader published are not known here.
        watch.forget().await;
        loop {
            let pods = store.snapshot();
            tokio::select! {
                result = watch.recheck(&pods) => {
                    if let Err(error) = result {
                        warn!(error = %error_chain(&error), "recheck failed");
                    }
                }
                _ = leading.wait_for(|l| !*l) => {
                    info!("watch Lease lost: cycle abandoned");
                    break;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = leading.wait_for(|l| !*l) => break,
            }
        }
    }
}
