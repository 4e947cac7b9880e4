//! `pinhook watch` and `pinhook inventory`: their flags, and the watch's [`WatchConfig`] from
//! them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::{Args, ValueEnum};

use super::durations::{parse_lifetime, seconds_flag};
use super::{CliError, KubeAccess, NodeCredentialArgs, PolicySource, RegistryArgs};
use crate::registry::CacheConfig;
use crate::watch::controller::http::Listen;
use crate::watch::controller::{CycleSettings, InventoryAuth, LeaseConfig, WatchConfig};
use crate::watch::report::ReportApi;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Plain-HTTP address for /metrics, /healthz and /readyz.
    #[arg(long, env = "PINHOOK_WATCH_LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Plain-HTTP address for /inventory (every namespace's workloads and digests, to bearer
    /// tokens): localhost by default, reached with `kubectl port-forward`, so tokens never cross
    /// the Pod network in clear; the address of --listen serves it there; `off` nowhere.
    #[arg(long, env = "PINHOOK_INVENTORY_LISTEN", default_value = "127.0.0.1:8081", value_parser = parse_inventory_listen)]
    inventory_listen: InventoryListen,
    /// Who may read /inventory: `kubernetes` (a bearer token the cluster authenticates, of a
    /// caller allowed to list pods cluster-wide: TokenReview and SubjectAccessReview) or `none`
    /// (anyone who reaches --listen; only for a listener nobody else reaches).
    #[arg(long, env = "PINHOOK_INVENTORY_AUTH", default_value = "kubernetes")]
    inventory_auth: InventoryAuthArg,
    /// How often every running image's tag is resolved again (<n>s, m, h or d).
    #[arg(long, env = "PINHOOK_RECHECK_INTERVAL", default_value = "10m", value_parser = parse_lifetime)]
    recheck_interval: Duration,
    /// Policy file (YAML): modes, exemptions, registry rules, mirror rules.
    #[arg(long, env = "PINHOOK_POLICY")]
    policy: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Kubeconfig (default: $KUBECONFIG or ~/.kube/config, else in-cluster).
    #[arg(long, env = "PINHOOK_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    node_credentials: NodeCredentialArgs,
    /// Most concurrent calls to one registry.
    #[arg(long, env = "PINHOOK_REGISTRY_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    registry_concurrency: usize,
    /// Namespace of the Lease (the pod's own).
    #[arg(
        long,
        env = "PINHOOK_WATCH_NAMESPACE",
        default_value = "pinhook-system"
    )]
    lease_namespace: String,
    /// coordination.k8s.io Lease electing the replica that rechecks and writes.
    #[arg(long, env = "PINHOOK_WATCH_LEASE", default_value = "pinhook-watch")]
    lease: String,
    /// How long the Lease holds without renewal (renewed every third of it).
    #[arg(long, env = "PINHOOK_WATCH_LEASE_DURATION", default_value = "15s", value_parser = parse_lifetime)]
    lease_duration: Duration,
    /// This replica's name in the Lease and its Events (default: the host name).
    #[arg(long, env = "PINHOOK_POD_NAME")]
    pod_name: Option<String>,
    /// Most Events per workload per recheck.
    #[arg(long, env = "PINHOOK_EVENTS_PER_WORKLOAD", default_value_t = 5)]
    events_per_workload: usize,
    /// Do not judge tag-mirror objects (ImageTagMirrorSet, ImageContentPolicy).
    #[arg(long, env = "PINHOOK_NO_MIRROR_REPORT")]
    no_mirror_report: bool,
    /// Also read every ConfigMap for registries.conf / hosts.toml tag mirrors.
    #[arg(long, env = "PINHOOK_MIRROR_CONFIG_MAPS")]
    mirror_config_maps: bool,
    /// Report API: wgpolicyk8s (PolicyReport) or openreports (Report).
    #[arg(long, env = "PINHOOK_REPORT_API", default_value = "wgpolicyk8s")]
    report_api: ReportApiArg,
    /// Seconds a namespace's pinhook.dev/mode label is cached.
    #[arg(long, env = "PINHOOK_NAMESPACE_CACHE_TTL", default_value_t = 30, value_parser = seconds_flag())]
    namespace_cache_ttl: u64,
}

#[derive(Debug, Args)]
pub struct InventoryArgs {
    /// Output format.
    #[arg(short, long, env = "PINHOOK_INVENTORY_OUTPUT", default_value = "table")]
    pub output: InventoryOutput,
    /// Only this namespace (default: every namespace).
    #[arg(short, long, env = "PINHOOK_INVENTORY_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only images pinned to, or whose tag now resolves to, this digest.
    #[arg(long, env = "PINHOOK_INVENTORY_DIGEST")]
    pub digest: Option<crate::reference::Digest>,
    /// Kubeconfig (default: $KUBECONFIG or ~/.kube/config, else in-cluster).
    #[arg(long, env = "PINHOOK_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The reports the watch writes: wgpolicyk8s or openreports.
    #[arg(long, env = "PINHOOK_REPORT_API", default_value = "wgpolicyk8s")]
    pub report_api: ReportApiArg,
}

/// `--inventory-listen`: an address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InventoryListen(Option<SocketAddr>);

/// An `--inventory-listen` that is neither an address nor `off`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an address (IP:PORT) or `off`: {0}")]
pub struct InventoryListenError(std::net::AddrParseError);

fn parse_inventory_listen(value: &str) -> Result<InventoryListen, InventoryListenError> {
    if value == "off" {
        return Ok(InventoryListen(None));
    }
    value
        .parse()
        .map(|addr| InventoryListen(Some(addr)))
        .map_err(InventoryListenError)
}

/// `--inventory-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InventoryAuthArg {
    Kubernetes,
    None,
}

/// `--report-api`: the API of the watch's reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportApiArg {
    /// wgpolicyk8s.io PolicyReport, ClusterPolicyReport.
    Wgpolicyk8s,
    /// openreports.io Report, ClusterReport.
    Openreports,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InventoryOutput {
    Table,
    Json,
}

// === impl ReportApiArg ===

impl From<ReportApiArg> for ReportApi {
    fn from(arg: ReportApiArg) -> ReportApi {
        match arg {
            ReportApiArg::Wgpolicyk8s => ReportApi::Wgpolicyk8s,
            ReportApiArg::Openreports => ReportApi::OpenReports,
        }
    }
}

// === impl WatchArgs ===

impl WatchArgs {
    /// `pinhook watch`'s settings; reads the registry CA files.
    pub fn into_config(self) -> Result<WatchConfig, CliError> {
        let policy = match self.policy {
            Some(path) => PolicySource::File(path),
            None => PolicySource::Fixed(Box::default()),
        };
        let identity = self
            .pod_name
            .or_else(|| std::env::var("HOSTNAME").ok())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| format!("pinhook-watch-{}", std::process::id()));
        Ok(WatchConfig {
            listen: Listen {
                health: self.listen,
                inventory: self.inventory_listen.0,
            },
            policy,
            registry: self.registry.to_config()?,
            // Fresh for one interval; every cycle expires them first (see watch::controller::cycle).
            cache: CacheConfig {
                hit_ttl: self.recheck_interval,
                // One lookup per key per cycle, each cycle expiring the cache first: nothing
                // to refresh ahead of.
                refresh_ahead: false,
                max_stale: self.recheck_interval * 2,
                per_registry_concurrency: self.registry_concurrency,
                ..CacheConfig::default()
            },
            recheck_interval: self.recheck_interval,
            kube: match self.kubeconfig {
                Some(path) => KubeAccess::Kubeconfig(path),
                None => KubeAccess::Infer,
            },
            credential_providers: self.node_credentials.providers(),
            docker_config: self.node_credentials.docker_config,
            lease: LeaseConfig {
                namespace: self.lease_namespace,
                name: self.lease,
                identity,
                duration: self.lease_duration,
            },
            cycle: CycleSettings {
                events_per_workload: self.events_per_workload,
                mirrors: !self.no_mirror_report,
                mirror_config_maps: self.mirror_config_maps,
                report_api: self.report_api.into(),
            },
            namespace_label_ttl: Duration::from_secs(self.namespace_cache_ttl),
            inventory_auth: match self.inventory_auth {
                InventoryAuthArg::Kubernetes => InventoryAuth::Kubernetes,
                InventoryAuthArg::None => InventoryAuth::None,
            },
        })
    }
}
