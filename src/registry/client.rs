//! The registry [`Resolver`]: a manifest HEAD of pinhook's own ([`super::head`]), a bearer
//! token when the registry challenges ([`super::token`], its realm checked against the address
//! guard first), and oci-client for the GET fallback; one `oci_client::Client` per
//! (registry, credential).
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
use sha2::{Digest as _, Sha256};

use super::guard;
use super::head::{self, Head, MANIFEST_TYPES};
use super::token::{TokenCache, TokenKey};
use super::{Credential, Fingerprint, RegistryError, Resolution, ResolutionSource, Resolver};
use crate::policy::{HostSettings, PolicyHandle};
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
    /// The HTTP client for pinhook's own HEAD, per registry host (its TLS settings).
    http: moka::sync::Cache<String, reqwest::Client>,
    tokens: TokenCache,
    /// When set, the token realm a registry names must pass the policy's internal-address
    /// guard before pinhook asks it for a token (a registry must not make pinhook probe
    /// loopback or metadata addresses either).
    policy: Option<PolicyHandle>,
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
            http: moka::sync::Cache::builder()
                .max_capacity(1024)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
            tokens: TokenCache::new(),
            policy: None,
        })
    }

    /// Checks token realms against `policy`'s internal-address guard (see [`Self::policy`]).
    pub fn with_policy(mut self, policy: PolicyHandle) -> OciResolver {
        self.policy = Some(policy);
        self
    }

    /// Replaces the configuration (policy reload); clients are rebuilt on next use.
    pub fn reconfigure(&self, config: RegistryConfig) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        self.clients.invalidate_all();
        self.http.invalidate_all();
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
        // Concurrent first uses build one client (moka runs one init per key), not one each.
        let key = (registry.to_string(), credential.fingerprint());
        self.clients
            .try_get_with(key, || self.build_client(registry).map(Arc::new))
            .map_err(RegistryError::Shared)
    }

    fn build_client(&self, registry: &str) -> Result<Client, RegistryError> {
        let settings = self.config();
        let certificates: Vec<Certificate> = pems_for(&settings, registry)
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

    fn http_for(&self, registry: &str) -> Result<reqwest::Client, RegistryError> {
        self.http
            .try_get_with(registry.to_string(), || self.build_http(registry))
            .map_err(RegistryError::Shared)
    }

    /// A reqwest client with the same trust as [`Self::build_client`]. Redirects are not
    /// followed (a manifest HEAD is not redirected; a 3xx falls back to oci-client's GET).
    fn build_http(&self, registry: &str) -> Result<reqwest::Client, RegistryError> {
        let settings = self.config();
        let config_error = |source: reqwest::Error| RegistryError::ClientConfig {
            registry: registry.to_string(),
            source: OciDistributionError::RequestError(source),
        };
        let mut certificates = Vec::new();
        for pem in pems_for(&settings, registry) {
            certificates.extend(reqwest::Certificate::from_pem_bundle(pem).map_err(config_error)?);
        }
        let builder = reqwest::Client::builder()
            .connect_timeout(settings.request_timeout)
            .read_timeout(settings.request_timeout)
            .user_agent(concat!("pinhook/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none());
        let builder = if settings.only_configured_cas {
            builder.tls_certs_only(certificates)
        } else {
            builder.tls_certs_merge(certificates)
        };
        builder.build().map_err(config_error)
    }

    /// One credential's attempt, bounded as a whole: oci-client's timeouts apply per phase
    /// (token, GET fallback) and each can be hit twice.
    async fn resolve_with(
        &self,
        reference: &Reference,
        credential: &Credential,
    ) -> Result<Digest, RegistryError> {
        let budget = self.config().request_timeout * 3;
        match tokio::time::timeout(budget, self.resolve_once(reference, credential)).await {
            Ok(result) => result,
            Err(_) => Err(RegistryError::Timeout {
                registry: reference.domain().to_string(),
                timeout: budget,
            }),
        }
    }

    async fn resolve_once(
        &self,
        reference: &Reference,
        credential: &Credential,
    ) -> Result<Digest, RegistryError> {
        let registry = reference.domain();
        let http = self.http_for(registry)?;
        let oci_ref = oci_client::Reference::with_tag(
            registry.to_string(),
            reference.path().to_string(),
            reference.effective_tag().to_string(),
        );
        let basic = credential.basic_authorization();
        let scheme = match self.config().insecure_hosts.contains(registry) {
            true => "http",
            false => "https",
        };
        let url = format!(
            "{scheme}://{}/v2/{}/manifests/{}",
            oci_ref.resolve_registry(),
            reference.path(),
            reference.effective_tag()
        );
        let token_key = TokenKey {
            registry: registry.to_string(),
            credential: credential.fingerprint(),
            repository: reference.path().to_string(),
        };
        let authorization = self.tokens.bearer(&token_key).or_else(|| basic.clone());
        let mut answer = head::head(&http, &url, authorization.as_deref(), reference).await;
        if let Head::Challenge(Some(challenge)) = &answer {
            guard::check_realm(self.policy.as_ref(), &challenge.realm, registry).await?;
            let bearer = self
                .tokens
                .fetch(token_key, challenge, &http, basic.as_deref())
                .await?;
            answer = head::head(&http, &url, Some(&bearer), reference).await;
        }
        let digest = match answer {
            Head::Digest(digest) => digest,
            Head::NeedsGet => {
                let client = self.client_for(registry, credential)?;
                let auth = credential.to_oci_auth();
                let (bytes, _) = client
                    .pull_manifest_raw(&oci_ref, &auth, MANIFEST_TYPES)
                    .await
                    .map_err(|e| classify(e, reference))?;
                format!("sha256:{:x}", Sha256::digest(&bytes))
            }
            Head::Challenge { .. } => {
                return Err(RegistryError::Unauthorized {
                    registry: registry.to_string(),
                })
            }
            Head::Failed(error) => return Err(error),
        };
        digest.parse::<Digest>().map_err(|_| RegistryError::Status {
            registry: registry.to_string(),
            status: 200,
            message: format!("registry sent an invalid digest {digest:?}"),
        })
    }
}

/// The CA bundles trusted for `registry`: the global ones, then the host's own.
fn pems_for<'a>(settings: &'a RegistryConfig, registry: &str) -> impl Iterator<Item = &'a Vec<u8>> {
    settings
        .ca_pems
        .iter()
        .chain(settings.host_ca_pems.get(registry).into_iter().flatten())
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
