//! The oci-client backed [`Resolver`]: one `oci_client::Client` per (registry, credential).
//!
//! Why one client per credential: an oci-client `Client` keeps the first credentials it sees
//! for a registry and silently ignores later ones, so sharing one client across secrets would
//! answer one namespace's request with another namespace's secret.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::Client;

use super::{Credential, Fingerprint, RegistryError, Resolution, ResolutionSource, Resolver};
use crate::policy::HostSettings;
use crate::reference::{Digest, Reference};

/// Where system CA bundles live on common distributions (and what rustls-native-certs reads).
const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// How registries are reached.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Extra PEM CA bundles trusted for every registry.
    pub ca_pems: Vec<Vec<u8>>,
    /// Extra PEM CA bundles trusted for one registry host (`host[:port]`).
    pub host_ca_pems: HashMap<String, Vec<Vec<u8>>>,
    /// Hosts (`host[:port]`) reached over plain HTTP.
    pub insecure_hosts: HashSet<String>,
    /// Bound on each HTTP call (connect and read).
    pub request_timeout: Duration,
    /// Trust only the configured CAs, not the system roots (tests and air-gapped clusters).
    pub only_configured_cas: bool,
}

/// Resolves tags against real registries.
pub struct OciResolver {
    config: RwLock<Arc<RegistryConfig>>,
    clients: moka::sync::Cache<(String, Fingerprint), Arc<Client>>,
}

// === impl RegistryConfig ===

impl RegistryConfig {
    /// This configuration plus the policy's per-host settings (`registries.hosts`): CA files are
    /// read here, so a policy naming a missing file is refused with the file's name.
    pub fn with_hosts(
        &self,
        hosts: &BTreeMap<String, HostSettings>,
    ) -> Result<RegistryConfig, String> {
        let mut config = self.clone();
        for (host, settings) in hosts {
            if let Some(path) = &settings.ca {
                let pem = std::fs::read(path).map_err(|e| {
                    format!(
                        "registries.hosts[{host:?}].ca: cannot read '{}': {e}",
                        path.display()
                    )
                })?;
                config
                    .host_ca_pems
                    .entry(host.clone())
                    .or_default()
                    .push(pem);
            }
            if settings.insecure {
                config.insecure_hosts.insert(host.clone());
            }
        }
        Ok(config)
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            ca_pems: Vec::new(),
            host_ca_pems: HashMap::new(),
            insecure_hosts: HashSet::new(),
            request_timeout: Duration::from_secs(5),
            only_configured_cas: false,
        }
    }
}

// === impl OciResolver ===

impl OciResolver {
    /// Checks up front what oci-client would otherwise panic on (no system CA bundle).
    pub fn new(config: RegistryConfig) -> Result<OciResolver, RegistryError> {
        if !config.only_configured_cas {
            check_system_roots()?;
        }
        Ok(OciResolver {
            config: RwLock::new(Arc::new(config)),
            clients: moka::sync::Cache::builder()
                .max_capacity(1024)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
        })
    }

    /// Replaces the configuration (policy reload); clients are rebuilt on next use.
    pub fn reconfigure(&self, config: RegistryConfig) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        self.clients.invalidate_all();
    }

    fn config(&self) -> Arc<RegistryConfig> {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn client_for(
        &self,
        registry: &str,
        credential: &Credential,
    ) -> Result<Arc<Client>, RegistryError> {
        let key = (registry.to_string(), credential.fingerprint());
        if let Some(client) = self.clients.get(&key) {
            return Ok(client);
        }
        let client = Arc::new(self.build_client(registry)?);
        self.clients.insert(key, client.clone());
        Ok(client)
    }

    fn build_client(&self, registry: &str) -> Result<Client, RegistryError> {
        let settings = self.config();
        let pems = settings
            .ca_pems
            .iter()
            .chain(settings.host_ca_pems.get(registry).into_iter().flatten());
        let certificates: Vec<Certificate> = pems
            .map(|pem| Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            })
            .collect();
        let protocol = if settings.insecure_hosts.contains(registry) {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        };
        let mut config = ClientConfig {
            protocol,
            connect_timeout: Some(settings.request_timeout),
            read_timeout: Some(settings.request_timeout),
            user_agent: concat!("pinhook/", env!("CARGO_PKG_VERSION")),
            ..ClientConfig::default()
        };
        if settings.only_configured_cas {
            config.tls_certs_only = certificates;
        } else {
            config.extra_root_certificates = certificates;
        }
        // `Client::new` swallows configuration errors and falls back to defaults.
        Client::try_from(config).map_err(|source| RegistryError::ClientConfig {
            registry: registry.to_string(),
            source,
        })
    }

    async fn resolve_with(
        &self,
        reference: &Reference,
        credential: &Credential,
    ) -> Result<Digest, RegistryError> {
        let registry = reference.domain();
        let client = self.client_for(registry, credential)?;
        let oci_ref = oci_client::Reference::with_tag(
            registry.to_string(),
            reference.path().to_string(),
            reference.effective_tag().to_string(),
        );
        // oci-client's own timeouts apply per phase and can each be hit twice (auth ping, HEAD,
        // GET fallback); this bounds the whole call.
        let budget = self.config().request_timeout * 3;
        let auth = credential.to_oci_auth();
        let call = client.fetch_manifest_digest(&oci_ref, &auth);
        let digest = match tokio::time::timeout(budget, call).await {
            Ok(result) => result.map_err(|e| classify(e, reference))?,
            Err(_) => {
                return Err(RegistryError::Timeout {
                    registry: registry.to_string(),
                    timeout: budget,
                })
            }
        };
        digest.parse::<Digest>().map_err(|_| RegistryError::Status {
            registry: registry.to_string(),
            status: 200,
            message: format!("registry sent an invalid digest {digest:?}"),
        })
    }
}

#[async_trait]
impl Resolver for OciResolver {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        let anonymous = [Credential::Anonymous];
        let mut candidates = credentials.iter().chain(
            anonymous
                .iter()
                .filter(|_| !credentials.contains(&Credential::Anonymous)),
        );
        // kubelet tries every matching credential in order until one pull succeeds.
        let mut last_error = None;
        for credential in &mut candidates {
            match self.resolve_with(reference, credential).await {
                Ok(digest) => {
                    return Ok(Resolution {
                        digest,
                        credential: credential.fingerprint(),
                        source: ResolutionSource::Registry,
                        moved_from: None,
                        age: Duration::ZERO,
                    })
                }
                Err(e) if e.is_auth_or_not_found() => {
                    // Report what the best credential learnt: "not found" after a successful
                    // login says more than anonymous's "unauthorized".
                    if last_error
                        .as_ref()
                        .is_none_or(|l| informativeness(&e) > informativeness(l))
                    {
                        last_error = Some(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| RegistryError::Unauthorized {
            registry: reference.domain().to_string(),
        }))
    }
}

/// Fails when no system CA bundle exists: oci-client (reqwest with the platform verifier)
/// would panic building a client, on the request path.
fn check_system_roots() -> Result<(), RegistryError> {
    let env_file = std::env::var_os("SSL_CERT_FILE");
    let env_dir = std::env::var_os("SSL_CERT_DIR");
    let found = env_file
        .as_deref()
        .map(Path::new)
        .is_some_and(Path::is_file)
        || env_dir.as_deref().map(Path::new).is_some_and(Path::is_dir)
        || SYSTEM_CA_FILES.iter().any(|f| Path::new(f).is_file());
    if found {
        Ok(())
    } else {
        Err(RegistryError::NoSystemRoots {
            looked_at: SYSTEM_CA_FILES.join(", "),
        })
    }
}

/// Maps oci-client's errors onto what an operator can act on.
fn classify(error: OciDistributionError, reference: &Reference) -> RegistryError {
    let registry = reference.domain().to_string();
    match error {
        OciDistributionError::ImageManifestNotFoundError(_) => not_found(reference),
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => {
            RegistryError::Unauthorized { registry }
        }
        OciDistributionError::RegistryError { envelope, .. } => {
            let code = envelope.errors.first().map(|e| &e.code);
            match code {
                Some(OciErrorCode::ManifestUnknown)
                | Some(OciErrorCode::NameUnknown)
                | Some(OciErrorCode::NotFound) => not_found(reference),
                Some(OciErrorCode::Unauthorized) => RegistryError::Unauthorized { registry },
                Some(OciErrorCode::Denied) => RegistryError::Denied {
                    registry,
                    repository: reference.path().to_string(),
                },
                Some(OciErrorCode::Toomanyrequests) => RegistryError::RateLimited { registry },
                _ => RegistryError::Status {
                    registry,
                    status: 400,
                    message: envelope.to_string(),
                },
            }
        }
        OciDistributionError::ServerError { code: 404, .. } => not_found(reference),
        OciDistributionError::ServerError { code: 401, .. } => {
            RegistryError::Unauthorized { registry }
        }
        OciDistributionError::ServerError { code: 403, .. } => RegistryError::Denied {
            registry,
            repository: reference.path().to_string(),
        },
        OciDistributionError::ServerError { code: 429, .. } => {
            RegistryError::RateLimited { registry }
        }
        OciDistributionError::ServerError { code, message, .. } => RegistryError::Status {
            registry,
            status: code,
            message: truncate(&message, 200),
        },
        e @ (OciDistributionError::RequestError(_) | OciDistributionError::IoError(_)) => {
            RegistryError::Unreachable {
                registry,
                source: e,
            }
        }
        e => RegistryError::InvalidResponse {
            registry,
            source: e,
        },
    }
}

fn informativeness(error: &RegistryError) -> u8 {
    match error {
        RegistryError::NotFound { .. } => 3,
        RegistryError::Denied { .. } => 2,
        _ => 1,
    }
}

fn not_found(reference: &Reference) -> RegistryError {
    RegistryError::NotFound {
        repository: reference.repository(),
        tag: reference.effective_tag().to_string(),
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
