//! The composition root: turns a [`Config`] into a running webhook. [`build`] wires every layer
//! exactly once (metrics, policy, registry client behind the address guard and the cache, the
//! Kubernetes API or its absence, credentials, the pinner, the policy file's reload, the
//! self-managed certificates when asked for) for both
//! `pinhook serve` and the integration tests, so what the tests start is what ships. Also
//! builds the resolver `pinhook resolve` uses and loads docker credential files.
//!
//! Never: parses flags (that is [`crate::cli`]) or decides anything about images; it only
//! connects the parts. Nothing here panics on bad input: every failure is an [`AppError`].

pub mod memory;
mod owner_events;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::admission::loops::ledger::{ClusterLedger, LoopLedger};
use crate::admission::revision_pods::{KubeRevisionPods, RevisionPods};
use crate::admission::{Pinner, PinnerParts};
use crate::certs::managed::{ManagedConfig, ManagedTls};
use crate::cluster::{Authorizer, KubeAuthorizer, KubeNamespaces, NamespaceLabels, NoNamespaces};
use crate::metrics::Metrics;
use crate::own_namespace;
use crate::policy::{Policy, PolicyError, PolicyHandle};
use crate::policy_reload;

use crate::kube_client::{kube_client, KubeAccess, KubeClientError};
use crate::policy_reload::PolicySource;
use crate::reference::{PinForm, Reference};
use crate::registry::credentials::node::{self, DockerConfigError, NodeCredentialsError};
use crate::registry::provider::ProviderFiles;
use crate::registry::pull_secrets::{KubeSecrets, NodeOnly, PullSecrets};
use crate::registry::stack::{self, Guard, Stack, StackError};
use crate::registry::{CacheConfig, CachingResolver, RegistryConfig, RegistryError, Resolver};
use crate::server::shutdown_signal;
use crate::server::{
    self, AppState, ClientAccess, ConnectionLimits, RunningServer, ServerConfig, ServerError,
    ServerTls, TokenBucket,
};

/// Why pinhook could not be put together or could not run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The resolver stack could not be built (the policy's `registries.hosts`, the client).
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error(transparent)]
    Kube(#[from] KubeClientError),
    #[error(transparent)]
    DockerConfig(#[from] DockerConfigError),
    #[error(transparent)]
    NodeCredentials(#[from] NodeCredentialsError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("self-managed TLS (--tls-secret) needs the Kubernetes API, and none is configured")]
    ManagedTlsWithoutKube,
    #[error("--raise-failure-policy needs the Kubernetes API, and none is configured")]
    OwnNamespaceWithoutKube,
}

/// Everything `pinhook serve` needs to know.
pub struct Config {
    /// Address of the HTTPS listener (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Where the serving certificate comes from.
    pub tls: TlsSource,
    /// The policy in force at start-up.
    pub policy: PolicySource,
    /// How registries are reached, before the policy's `registries.hosts` are applied.
    pub registry: RegistryConfig,
    pub cache: CacheConfig,
    /// How long the Pods of one owner revision keep the digest the first of them got.
    pub owner_revision_ttl: Duration,
    /// How long a namespace's mode label is cached.
    pub namespace_label_ttl: Duration,
    /// Where pull secrets, namespace labels and dry-run callers are checked.
    pub kube: KubeAccess,
    /// Node-level docker `config.json`, tried after the pod's own credentials.
    pub docker_config: Option<PathBuf>,
    /// kubelet credential provider plugins, tried after the docker config.
    pub credential_providers: Option<ProviderFiles>,
    /// How long to keep serving with readiness off after SIGTERM, before closing the listener.
    pub shutdown_delay: Duration,
    /// Bounds on the clients' connections and requests.
    pub limits: ConnectionLimits,
    /// Who may ask for reviews (client CA) and the dry run's TokenReview budget.
    pub clients: ClientAccess,
    /// pinhook's namespace labelled out of its webhooks before their failurePolicy is raised
    /// (clusters before 1.21; needs the Kubernetes API).
    pub own_namespace: Option<own_namespace::Config>,
    /// The ConfigMap (namespace, name) where the loop breaker counts (needs the Kubernetes API);
    /// `None`: this process's memory.
    pub loop_breaker_configmap: Option<(String, String)>,
    /// Parts supplied from outside instead of built from [`Config::kube`].
    pub overrides: Overrides,
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsSource {
    /// PEM files, reloaded when they change.
    Files { cert: PathBuf, key: PathBuf },
    /// A Secret pinhook keeps itself, with the webhook configurations' caBundle.
    Managed(ManagedConfig),
}

/// Parts that replace what [`build`] would make from [`Config::kube`]; `None` builds it.
#[derive(Default, Clone)]
pub struct Overrides {
    pub secrets: Option<Arc<dyn PullSecrets>>,
    pub namespaces: Option<Arc<dyn NamespaceLabels>>,
    pub authorizer: Option<Arc<dyn Authorizer>>,
}

/// The serving certificate's source once wired.
enum AppTls {
    Files { cert: PathBuf, key: PathBuf },
    Managed(kube::Client, Box<ManagedConfig>),
}

/// pinhook, wired and not yet listening.
pub struct App {
    listen: SocketAddr,
    tls: AppTls,
    limits: ConnectionLimits,
    clients: ClientAccess,
    state: AppState,
    resolver: Arc<CachingResolver>,
    policy: PolicyHandle,
    reload: Option<PolicyReload>,
    own_namespace: Option<(kube::Client, own_namespace::Config)>,
    shutdown_delay: Duration,
}

/// pinhook, listening: what a test inspects, and what [`RunningApp::run`] stops.
pub struct RunningApp {
    pub server: RunningServer,
    pub metrics: Arc<Metrics>,
    /// The cache every review resolves through.
    pub resolver: Arc<CachingResolver>,
    pub policy: PolicyHandle,
    reload: Option<tokio::task::JoinHandle<()>>,
    /// Keeps the managed certificates while it lives.
    _managed: Option<ManagedTls>,
    /// Keeps the own namespace labelled and the webhooks at their annotated failurePolicy.
    own_namespace: Option<tokio::task::JoinHandle<()>>,
    shutdown_delay: Duration,
}

/// `pinhook resolve`: one reference to pin.
#[derive(Debug, Clone)]
pub struct ResolveConfig {
    /// The reference as the user wrote it (for messages).
    pub image: String,
    pub reference: Reference,
    pub form: PinForm,
    pub registry: RegistryConfig,
}

/// Re-reads the policy file, and re-applies its `registries.hosts` to the registry client.
struct PolicyReload {
    path: PathBuf,
    stack: Stack,
}

/// Wires pinhook from `config`. Everything fallible but loading the certificate and binding
/// (see [`App::start`]) happens here, before anything listens.
pub async fn build(config: Config) -> Result<App, AppError> {
    let metrics = Arc::new(Metrics::new());
    let handle = PolicyHandle::new(config.policy.load()?);
    let stack = stack::build(
        &config.registry,
        config.cache,
        &handle,
        Guard::Policy,
        metrics.clone(),
    )?;
    let cache = stack.cache.clone();
    let client = kube_client(config.kube).await?;
    let tls = match config.tls {
        TlsSource::Files { cert, key } => AppTls::Files { cert, key },
        TlsSource::Managed(managed) => match client.clone() {
            Some(client) => AppTls::Managed(client, Box::new(managed)),
            None => return Err(AppError::ManagedTlsWithoutKube),
        },
    };
    let own_namespace = match (config.own_namespace, client.clone()) {
        (None, _) => None,
        (Some(own), Some(client)) => Some((client, own)),
        (Some(_), None) => return Err(AppError::OwnNamespaceWithoutKube),
    };
    let node = node::credentials(
        config.docker_config.as_deref(),
        config.credential_providers.as_ref(),
        &metrics,
    )?;
    let Overrides {
        secrets,
        namespaces,
        authorizer,
    } = config.overrides;
    let authorizer = authorizer.or_else(|| {
        client
            .clone()
            .map(|c| Arc::new(KubeAuthorizer::new(c)) as Arc<dyn Authorizer>)
    });
    let secrets = secrets.unwrap_or_else(|| match client.clone() {
        Some(client) => Arc::new(KubeSecrets::new(client, node)),
        None => Arc::new(NodeOnly { node }),
    });
    let on_owner = owner_events::owner_handler(metrics.clone(), client.clone());
    let revision_pods = client
        .clone()
        .map(|client| Arc::new(KubeRevisionPods::new(client)) as Arc<dyn RevisionPods>);
    let loop_ledger = match (&config.loop_breaker_configmap, &client) {
        (Some((namespace, name)), Some(client)) => Some(Arc::new(ClusterLedger::new(
            client.clone(),
            namespace,
            name,
        )) as Arc<dyn LoopLedger>),
        _ => None,
    };
    let namespaces = namespaces.unwrap_or_else(|| match client {
        Some(client) => Arc::new(KubeNamespaces::with_ttl(client, config.namespace_label_ttl)),
        None => Arc::new(NoNamespaces),
    });
    let pinner = Pinner::new(PinnerParts {
        policy: handle.clone(),
        dry_run_resolver: Arc::new(cache.read_only()),
        resolver: cache.clone(),
        secrets,
        namespaces,
        owner_ttl: config.owner_revision_ttl,
        on_owner: Some(on_owner),
        loop_ledger,
        revision_pods,
        signatures: Some(stack.signatures.clone()),
    });
    let reload = match config.policy {
        PolicySource::File(path) => Some(PolicyReload { path, stack }),
        PolicySource::Fixed(_) => None,
    };
    let state = AppState {
        pinner: Arc::new(pinner),
        metrics,
        ready: Arc::new(AtomicBool::new(false)),
        authorizer,
        parsed_reviews: Arc::default(),
        bodies: Arc::default(),
        answers: Arc::default(),
        // (server::start decides it, from the client CA it loads)
        require_client_cert: false,
        token_reviews: Arc::new(TokenBucket::new(config.clients.token_reviews)),
        access_reviews: Arc::new(TokenBucket::for_access_reviews(
            config.clients.token_reviews,
        )),
    };
    Ok(App {
        listen: config.listen,
        tls,
        limits: config.limits,
        clients: config.clients,
        state,
        resolver: cache,
        policy: handle,
        reload,
        own_namespace,
        shutdown_delay: config.shutdown_delay,
    })
}

/// Pins `config.reference` with the user's docker credentials. The outer `Err` means the
/// resolver could not be set up; the inner one is the registry's answer.
pub async fn resolve(config: &ResolveConfig) -> Result<Result<String, RegistryError>, AppError> {
    let reference = &config.reference;
    if let Some(digest) = reference.digest() {
        return Ok(Ok(reference.pinned(digest, config.form)));
    }
    // The same stack as `check`'s: no guard (the user names the image), no policy hosts.
    let policy = PolicyHandle::new(Policy::default().compile()?);
    let stack = stack::build(
        &config.registry,
        CacheConfig::default(),
        &policy,
        Guard::Off,
        Arc::new(Metrics::new()),
    )?;
    let resolver = stack.cache;
    // The user's own docker credentials (helpers asked), as `pinhook check` uses them, then
    // anonymous.
    let (keyring, warnings) = node::user_keyring()?
        .for_images(&[reference.repository()])
        .await;
    for warning in warnings {
        warn!(warning, "docker credentials");
    }
    let credentials = keyring.lookup(reference);
    Ok(resolver
        .resolve(reference, &credentials)
        .await
        .map(|resolution| reference.pinned(&resolution.digest, config.form)))
}

// === impl App ===

impl App {
    /// Binds the HTTPS listener and starts watching the policy file. With self-managed TLS,
    /// first waits (readiness stays off) until the Secret holds a serving certificate.
    pub async fn start(self) -> Result<RunningApp, AppError> {
        let metrics = self.state.metrics.clone();
        let (tls, managed) = match self.tls {
            AppTls::Files { cert, key } => (ServerTls::Files { cert, key }, None),
            AppTls::Managed(client, config) => {
                info!(
                    secret = %format!("{}/{}", config.namespace, config.secret),
                    webhooks = %config.webhooks.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
                    "self-managed TLS: waiting for the Secret to hold a serving certificate"
                );
                let mut managed = ManagedTls::start(client, *config);
                managed.first().await;
                (ServerTls::Watched(managed.serving.clone()), Some(managed))
            }
        };
        let config = ServerConfig {
            listen: self.listen,
            tls,
            limits: self.limits,
            clients: self.clients,
        };
        let server = server::start(config, self.state).await?;
        // Only once this replica listens: raising a webhook to Fail before any replica could
        // answer would refuse every covered write until one does.
        let own_namespace = self
            .own_namespace
            .map(|(client, config)| own_namespace::start(client, config));
        let reload = self.reload.map(|reload| {
            let PolicyReload { path, stack } = reload;
            let reconfigure = stack.reload();
            tokio::spawn(policy_reload::reload_on_change(
                path,
                self.policy.clone(),
                reconfigure,
            ))
        });
        Ok(RunningApp {
            server,
            metrics,
            resolver: self.resolver,
            policy: self.policy,
            reload,
            _managed: managed,
            own_namespace,
            shutdown_delay: self.shutdown_delay,
        })
    }

    /// Starts, then serves until SIGTERM or Ctrl-C (see [`RunningApp::run`]).
    pub async fn run(self) -> Result<(), AppError> {
        self.start().await?.run().await
    }
}

// === impl RunningApp ===

impl RunningApp {
    /// Serves until SIGTERM or Ctrl-C, then turns readiness off, keeps serving for the
    /// shutdown delay while endpoints drain, and lets in-flight requests finish.
    pub async fn run(self) -> Result<(), AppError> {
        shutdown_signal().await;
        info!(
            drain_seconds = self.shutdown_delay.as_secs(),
            "shutting down: readiness off, serving while endpoints drain, then finishing in-flight requests"
        );
        self.server.shutdown(self.shutdown_delay).await?;
        if let Some(reload) = self.reload {
            reload.abort();
        }
        if let Some(own_namespace) = self.own_namespace {
            own_namespace.abort();
        }
        info!("stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(policy: PolicySource) -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: TlsSource::Files {
                cert: PathBuf::from("tls.crt"),
                key: PathBuf::from("tls.key"),
            },
            policy,
            // No system roots: a unit test must not depend on the machine's CA bundle.
            registry: RegistryConfig {
                only_configured_cas: true,
                ..RegistryConfig::default()
            },
            cache: CacheConfig::default(),
            owner_revision_ttl: Duration::from_secs(60),
            namespace_label_ttl: Duration::from_secs(30),
            kube: KubeAccess::Disabled,
            docker_config: None,
            credential_providers: None,
            own_namespace: None,
            loop_breaker_configmap: None,
            shutdown_delay: Duration::ZERO,
            limits: ConnectionLimits::default(),
            clients: ClientAccess::default(),
            overrides: Overrides::default(),
        }
    }

    fn build_error(config: Config) -> AppError {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        match runtime.block_on(build(config)) {
            Ok(_) => panic!("build succeeded"),
            Err(e) => e,
        }
    }

    #[tokio::test]
    async fn builds_without_kubernetes_and_keeps_the_fixed_policy() {
        let policy = Policy {
            form: crate::policy::FormSetting::Digest,
            ..Policy::default()
        };
        let app = build(config(PolicySource::Fixed(Box::new(policy.clone()))))
            .await
            .expect("builds");
        assert_eq!(app.policy.current().policy, policy);
        assert!(app.reload.is_none(), "a fixed policy is not reloaded");
        assert!(app.state.authorizer.is_none());
        assert_eq!(app.listen, SocketAddr::from(([127, 0, 0, 1], 0)));
    }

    #[tokio::test]
    async fn a_policy_file_is_loaded_and_watched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, "mode: audit\n").expect("write policy");
        let app = build(config(PolicySource::File(path.clone())))
            .await
            .expect("builds");
        assert_eq!(app.policy.current().policy.mode, crate::policy::Mode::Audit);
        assert_eq!(app.reload.map(|r| r.path), Some(path));
    }

    #[test]
    fn each_unusable_file_is_a_typed_error_naming_it() {
        let missing = PathBuf::from("/nonexistent/pinhook");
        let error = build_error(config(PolicySource::File(missing.join("policy.yaml"))));
        assert!(matches!(error, AppError::Policy(_)), "{error:?}");

        let mut kubeconfig = config(PolicySource::Fixed(Box::default()));
        kubeconfig.kube = KubeAccess::Kubeconfig(missing.join("kubeconfig"));
        let error = build_error(kubeconfig);
        assert_eq!(
            error.to_string(),
            "failed to read kubeconfig '/nonexistent/pinhook/kubeconfig'"
        );

        let mut docker = config(PolicySource::Fixed(Box::default()));
        docker.docker_config = Some(missing.join("config.json"));
        let error = build_error(docker);
        assert_eq!(
            error.to_string(),
            "failed to read docker config '/nonexistent/pinhook/config.json'"
        );
    }
}
