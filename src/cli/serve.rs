//! `pinhook serve`: its flags (listen address, TLS from files or self-managed, connection
//! bounds, who may call (client CA, TokenReview rate), policy, registry, cache and node
//! credentials) and the [`app::Config`] built from them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::Args;

use super::durations::{parse_lifetime, parse_timeout, seconds_flag};
use super::{CacheArgs, CliError, FormArg, NodeCredentialArgs, RegistryArgs};
use crate::app::{self, Overrides, TlsSource};
use crate::certs::managed::{ManagedConfig, WebhookRef};
use crate::certs::rotation::Settings;
use crate::certs::CertRequest;
use crate::kube_client::KubeAccess;
use crate::own_namespace;
use crate::policy::Policy;
use crate::policy_reload::PolicySource;
use crate::server::{ClientAccess, ConnectionLimits, TokenReviewLimit};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "PINHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    listen: SocketAddr,
    /// PEM certificate chain served to the apiserver (reloaded when it changes).
    #[arg(
        long,
        env = "PINHOOK_TLS_CERT",
        required_unless_present = "tls_secret",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "PINHOOK_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    #[command(flatten)]
    managed_tls: ManagedTlsArgs,
    /// How pinned references are written (without --policy; the policy's `form` otherwise).
    #[arg(
        long,
        env = "PINHOOK_FORM",
        default_value = "tag-digest",
        conflicts_with = "policy"
    )]
    form: FormArg,
    /// Policy file (YAML); re-read when it changes.
    #[arg(long, env = "PINHOOK_POLICY")]
    policy: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// Kubeconfig for reading pull secrets (default: $KUBECONFIG or ~/.kube/config, else in-cluster).
    #[arg(long, env = "PINHOOK_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    node_credentials: NodeCredentialArgs,
    /// Seconds to keep serving after SIGTERM with readiness off, before closing the listener
    /// (so the Service's endpoints drop this pod before it stops answering); each HTTP/1.1
    /// answer meanwhile says `Connection: close`.
    #[arg(long, env = "PINHOOK_SHUTDOWN_DELAY", default_value_t = 5, value_parser = seconds_flag())]
    shutdown_delay: u64,
    #[command(flatten)]
    connections: ConnectionArgs,
    #[command(flatten)]
    clients: ClientArgs,
    #[command(flatten)]
    own_namespace: OwnNamespaceArgs,
    /// The ConfigMap (NAMESPACE/NAME) where the loop breaker counts, so every replica counts
    /// every creation; without it each counts in its own memory.
    #[arg(long, env = "PINHOOK_LOOP_BREAKER_CONFIGMAP", value_parser = namespaced_name)]
    loop_breaker_configmap: Option<(String, String)>,
}

/// pinhook's own namespace out of its webhooks where no namespaceSelector can name it (<1.21).
#[derive(Debug, Args)]
struct OwnNamespaceArgs {
    /// Configurations whose failurePolicy to raise: mutating/NAME, validating/NAME.
    ///
    /// Each webhook gets the failurePolicy its configuration's pinhook.dev/failure-policy
    /// annotation names, Fail only once --own-namespace is labelled pinhook.dev/ignore=true
    /// (pinhook labels it). For clusters before 1.21; the chart sets it there.
    #[arg(
        long = "raise-failure-policy",
        env = "PINHOOK_RAISE_FAILURE_POLICY",
        value_delimiter = ',',
        requires = "own_namespace"
    )]
    raise_failure_policy: Vec<WebhookRef>,
    /// pinhook's own namespace (the pod's), for --raise-failure-policy.
    #[arg(long, env = "PINHOOK_OWN_NAMESPACE")]
    own_namespace: Option<String>,
    /// Seconds between two checks of the label and the failurePolicies.
    ///
    /// A `helm upgrade` puts the rendered Ignore back; this bounds how long it stays.
    #[arg(long, env = "PINHOOK_RAISE_INTERVAL", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    raise_interval: u64,
}

// === impl OwnNamespaceArgs ===

impl OwnNamespaceArgs {
    fn to_config(&self) -> Option<own_namespace::Config> {
        if self.raise_failure_policy.is_empty() {
            return None;
        }
        Some(own_namespace::Config {
            namespace: self.own_namespace.clone()?,
            webhooks: self.raise_failure_policy.clone(),
            interval: Duration::from_secs(self.raise_interval),
        })
    }
}

/// Who may call `pinhook serve`.
#[derive(Debug, Args)]
struct ClientArgs {
    /// CA certificates (PEM) the apiserver's client certificate must chain to: `/mutate` and
    /// `/validate` then answer 403 to a connection without one (the apiserver presents it when
    /// its admission configuration names a kubeconfig for pinhook's host). `/healthz`,
    /// `/readyz`, `/metrics` and `/v1/dry-run` (TokenReview) need none. Read at start-up.
    #[arg(long, env = "PINHOOK_CLIENT_CA_FILE")]
    client_ca_file: Option<PathBuf>,
    /// Names the client certificate must also carry one of, as a DNS subject alternative name
    /// or its subject's common name (comma-separated): for a client CA that signs more than
    /// the apiserver's certificate (a cluster CA signs every kubelet's). Needs
    /// --client-ca-file.
    #[arg(
        long,
        env = "PINHOOK_CLIENT_CERT_NAMES",
        value_delimiter = ',',
        requires = "client_ca_file"
    )]
    client_cert_names: Vec<String>,
    /// TokenReviews per second `/v1/dry-run` may send for its callers, all callers together;
    /// past it a caller gets 429 and the apiserver no call.
    #[arg(long, env = "PINHOOK_TOKEN_REVIEW_RATE", default_value_t = 10.0, value_parser = token_review_rate)]
    token_review_rate: f64,
    /// TokenReviews that may be sent at once after a quiet spell (the bucket's size).
    #[arg(long, env = "PINHOOK_TOKEN_REVIEW_BURST", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    token_review_burst: u32,
    /// Also serve `/metrics` and `/healthz` over plain HTTP on this address (e.g.
    /// 0.0.0.0:9090), so that a NetworkPolicy can admit scrapers there and keep the admission
    /// port to the control plane. `/metrics` stays on the HTTPS port too.
    #[arg(long, env = "PINHOOK_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

/// A flag value `pinhook serve` refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServeArgError {
    #[error("'{0}' is not NAMESPACE/NAME")]
    NotNamespacedName(String),
    #[error("'{0}' is not a positive number of TokenReviews per second")]
    NotARate(String),
}

/// `NAMESPACE/NAME`.
fn namespaced_name(text: &str) -> Result<(String, String), ServeArgError> {
    match text.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok((namespace.to_string(), name.to_string()))
        }
        _ => Err(ServeArgError::NotNamespacedName(text.to_string())),
    }
}

/// A positive, finite rate.
fn token_review_rate(text: &str) -> Result<f64, ServeArgError> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(ServeArgError::NotARate(text.to_string())),
    }
}

/// Self-managed certificates (`--tls-secret`), instead of --tls-cert and --tls-key.
#[derive(Debug, Args)]
struct ManagedTlsArgs {
    /// Secret (in --tls-namespace) in which pinhook keeps its own CA and serving certificate,
    /// one replica writing (elected by the --tls-lease Lease), every replica serving it.
    #[arg(long, env = "PINHOOK_TLS_SECRET", conflicts_with_all = ["tls_cert", "tls_key"], requires = "tls_webhooks")]
    tls_secret: Option<String>,
    /// Namespace of the Secret and the Lease (the pod's own).
    #[arg(long, env = "PINHOOK_TLS_NAMESPACE", default_value = "pinhook-system")]
    tls_namespace: String,
    /// Service the certificate is for (<service>, .<namespace>, .svc, .svc.cluster.local).
    #[arg(long, env = "PINHOOK_TLS_SERVICE", default_value = "pinhook")]
    tls_service: String,
    /// More names (or IP addresses) for the certificate, e.g. a webhook URL's host.
    #[arg(long = "tls-san", env = "PINHOOK_TLS_SANS", value_delimiter = ',')]
    tls_sans: Vec<String>,
    /// Webhook configurations whose caBundle pinhook writes: mutating/NAME, validating/NAME.
    #[arg(
        long = "tls-webhook",
        env = "PINHOOK_TLS_WEBHOOKS",
        value_delimiter = ','
    )]
    tls_webhooks: Vec<WebhookRef>,
    /// coordination.k8s.io Lease electing the replica that writes.
    #[arg(long, env = "PINHOOK_TLS_LEASE", default_value = "pinhook-tls")]
    tls_lease: String,
    /// This replica's name in the Lease (default: the host name).
    #[arg(long, env = "PINHOOK_POD_NAME")]
    pod_name: Option<String>,
    /// Lifetime of the CA (<n>s, m, h or d); a next CA is published with a third left.
    #[arg(long, env = "PINHOOK_TLS_CA_LIFETIME", default_value = "730d", value_parser = parse_lifetime)]
    tls_ca_lifetime: Duration,
    /// Lifetime of the serving certificate; reissued with a third left.
    #[arg(long, env = "PINHOOK_TLS_CERT_LIFETIME", default_value = "90d", value_parser = parse_lifetime)]
    tls_cert_lifetime: Duration,
    /// How long a next CA is in every caBundle before it signs the serving certificate.
    #[arg(long, env = "PINHOOK_TLS_CA_GRACE", default_value = "60s", value_parser = parse_lifetime)]
    tls_ca_grace: Duration,
    /// How often the writer renews its Lease and checks the certificates (the Lease lasts
    /// three times this).
    #[arg(long, env = "PINHOOK_TLS_INTERVAL", default_value = "5s", value_parser = parse_lifetime)]
    tls_interval: Duration,
}

/// Bounds on the clients of `pinhook serve`.
#[derive(Debug, Args)]
struct ConnectionArgs {
    /// Client connections open at once; past it a new connection is closed as soon as it is
    /// accepted.
    #[arg(long, env = "PINHOOK_MAX_CONNECTIONS", default_value_t = crate::server::connections::MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize))]
    max_connections: usize,
    /// Seconds to receive a request's headers (HTTP/1.1: a connection's first request from the
    /// connection's start, a later one from its first byte), and the longest pause inside a
    /// request body. A kept-alive connection waiting for its next request is bounded by
    /// --idle-timeout instead.
    #[arg(long, env = "PINHOOK_HEADER_READ_TIMEOUT", default_value = "10", value_parser = parse_timeout)]
    header_read_timeout: Duration,
    /// Seconds one request may take, body and answer included (then 408).
    #[arg(long, env = "PINHOOK_REQUEST_TIMEOUT", default_value = "70", value_parser = parse_timeout)]
    request_timeout: Duration,
    /// Seconds a connection may stay open with no byte crossing it (also the longest wait for
    /// the next request on a kept-alive connection); longer than --request-timeout and than the
    /// apiserver's 90 s, so that the apiserver closes its idle connections first.
    #[arg(long, env = "PINHOOK_IDLE_TIMEOUT", default_value = "120", value_parser = parse_timeout)]
    idle_timeout: Duration,
}

// === impl ManagedTlsArgs ===

impl ManagedTlsArgs {
    /// The managed-certificate settings, when --tls-secret is given.
    fn to_config(&self) -> Result<Option<ManagedConfig>, CliError> {
        let Some(secret) = &self.tls_secret else {
            return Ok(None);
        };
        let (ca, cert, grace) = (
            self.tls_ca_lifetime,
            self.tls_cert_lifetime,
            self.tls_ca_grace,
        );
        if cert >= ca || grace >= ca / 3 {
            return Err(CliError::TlsLifetimes { ca, cert, grace });
        }
        let request = CertRequest {
            service: self.tls_service.clone(),
            namespace: self.tls_namespace.clone(),
            extra_sans: self.tls_sans.clone(),
            validity_days: 0,
        };
        let identity = self
            .pod_name
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| format!("pinhook-{}", std::process::id()));
        Ok(Some(ManagedConfig {
            namespace: self.tls_namespace.clone(),
            secret: secret.clone(),
            lease: self.tls_lease.clone(),
            identity,
            webhooks: self.tls_webhooks.clone(),
            settings: Settings {
                names: request.subject_alt_names(),
                common_name: format!("{}.{}.svc", self.tls_service, self.tls_namespace),
                ca_lifetime: ca,
                cert_lifetime: cert,
                grace,
            },
            interval: self.tls_interval,
        }))
    }
}

// === impl ServeArgs ===

impl ServeArgs {
    /// `pinhook serve`'s settings; reads the registry CA files.
    pub fn into_config(self) -> Result<app::Config, CliError> {
        let policy = match self.policy {
            Some(path) => PolicySource::File(path),
            None => PolicySource::Fixed(Box::new(Policy {
                form: self.form.into(),
                ..Policy::default()
            })),
        };
        let kube = match self.kubeconfig {
            Some(path) => KubeAccess::Kubeconfig(path),
            None => KubeAccess::Infer,
        };
        // clap has checked: --tls-secret, or both --tls-cert and --tls-key.
        let tls = match (self.managed_tls.to_config()?, self.tls_cert, self.tls_key) {
            (Some(managed), _, _) => TlsSource::Managed(managed),
            (None, Some(cert), Some(key)) => TlsSource::Files { cert, key },
            (None, _, _) => return Err(CliError::NoTls),
        };
        Ok(app::Config {
            listen: self.listen,
            tls,
            policy,
            registry: self.registry.to_config()?,
            cache: self.cache.to_config(),
            owner_revision_ttl: Duration::from_secs(self.cache.owner_revision_ttl),
            namespace_label_ttl: Duration::from_secs(self.cache.namespace_cache_ttl),
            kube,
            credential_providers: self.node_credentials.providers(),
            docker_config: self.node_credentials.docker_config,
            shutdown_delay: Duration::from_secs(self.shutdown_delay),
            limits: self.connections.to_limits()?,
            clients: ClientAccess {
                client_ca: self.clients.client_ca_file,
                client_names: self.clients.client_cert_names,
                token_reviews: TokenReviewLimit {
                    per_second: self.clients.token_review_rate,
                    burst: self.clients.token_review_burst,
                },
                metrics_listen: self.clients.metrics_listen,
            },
            own_namespace: self.own_namespace.to_config(),
            loop_breaker_configmap: self.loop_breaker_configmap,
            overrides: Overrides::default(),
        })
    }
}

// === impl ConnectionArgs ===

impl ConnectionArgs {
    fn to_limits(&self) -> Result<ConnectionLimits, CliError> {
        if self.idle_timeout <= self.request_timeout {
            return Err(CliError::IdleNotAboveRequest {
                idle: self.idle_timeout,
                request: self.request_timeout,
            });
        }
        Ok(ConnectionLimits {
            max_connections: self.max_connections,
            header_read_timeout: self.header_read_timeout,
            request_timeout: self.request_timeout,
            idle_timeout: self.idle_timeout,
        })
    }
}
