//! The registry [`Resolver`]: a manifest HEAD ([`head`]), a bearer token when the registry
//! challenges ([`token`], its realm checked against the address guard first), and a manifest
//! GET when the HEAD does not say enough ([`get`]); all three through one HTTP client per
//! registry host ([`super::http::outbound`]), which holds every hop and every connected address
//! to the policy.
//!
//! Credentials cross hosts one way only, the way docker and containerd send them: the
//! registry's Basic credentials go to the token realm it names, over HTTPS (or plain HTTP to a
//! host marked insecure). A token goes only to the registry it was issued for.

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;

pub(crate) mod get;
pub(crate) mod head;
pub(crate) mod signatures;
pub(crate) mod token;

use get::Get;
use head::Head;
pub use token::Bearer;
use token::{TokenCache, TokenKey};

use super::http::dns::{self, Lookup};
use super::http::outbound;
use super::http::realm;
use super::{
    AnswerError, Credential, RegistryConfig, RegistryError, Resolution, ResolutionSource, Resolver,
};
use crate::policy::PolicyHandle;
use crate::reference::{Digest, Reference};

/// Where system CA bundles live on common distributions (and what rustls-native-certs reads).
const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// HTTP clients kept: two per configured trust (one keeping idle connections, one not), so
/// twice as many as `--registry-ca` hosts and one.
const MAX_CLIENTS: u64 = 256;

/// Resolves tags against real registries.
pub struct OciResolver {
    config: RwLock<Arc<RegistryConfig>>,
    /// The HTTP client per trust ([`RegistryConfig::trust_of`]: the CA bundles a registry
    /// host gets), shared by every host of that trust. One per host was 1,000 clients, 108 MiB,
    /// for a tenant naming 1,000 hosts (issue 44); the hosts come from pod specs, the trusts
    /// from configuration.
    /// Keyed by trust and whether the client keeps idle connections ([`outbound::PooledHosts`]).
    http: moka::sync::Cache<(String, bool), reqwest::Client>,
    /// The hosts whose clients keep idle connections.
    pooled: outbound::PooledHosts,
    tokens: TokenCache,
    /// When set, the token realm a registry names must pass the policy's internal-address
    /// guard before pinhook asks it for a token (a registry must not make pinhook probe
    /// loopback or metadata addresses either), and so must every address a client connects to.
    policy: Option<PolicyHandle>,
    /// How the clients resolve names: the system's resolver.
    lookup: Lookup,
}

/// What one credential's requests to one repository go with: the clients, the repository's
/// API base (`<scheme>://<host>/v2/<path>`), its token key and Basic credentials.
struct Session {
    http: reqwest::Client,
    /// Keeps no idle connection: for token realms, hosts the registry names.
    realm_http: reqwest::Client,
    base: String,
    key: TokenKey,
    basic: Option<String>,
}

impl Session {
    fn login(&self) -> Login<'_> {
        Login {
            http: &self.realm_http,
            key: self.key.clone(),
            basic: self.basic.clone(),
        }
    }
}

/// What one credential's attempt logs in with when the registry challenges.
struct Login<'a> {
    /// What asks the token realm: a client that keeps no idle connection (the realm is a host
    /// the registry names).
    http: &'a reqwest::Client,
    key: TokenKey,
    /// The credential's `Authorization: Basic` value; `None` for anonymous.
    basic: Option<String>,
}

// === impl OciResolver ===

impl OciResolver {
    /// Checks up front that a system CA bundle exists, rather than on the request path.
    pub fn new(config: RegistryConfig) -> Result<OciResolver, RegistryError> {
        if !config.only_configured_cas {
            check_system_roots()?;
        }
        Ok(OciResolver {
            config: RwLock::new(Arc::new(config)),
            http: moka::sync::Cache::builder()
                .max_capacity(MAX_CLIENTS)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
            tokens: TokenCache::new(),
            pooled: outbound::PooledHosts::default(),
            policy: None,
            lookup: dns::system(),
        })
    }

    /// Checks token realms and every address a client connects to against `policy`'s
    /// internal-address guard (see [`Self::policy`]).
    pub fn with_policy(mut self, policy: PolicyHandle) -> OciResolver {
        self.policy = Some(policy);
        self
    }

    /// Replaces the configuration (policy reload); clients are rebuilt on next use.
    pub fn reconfigure(&self, config: RegistryConfig) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        self.http.invalidate_all();
    }

    /// The settings in force (replaced by [`OciResolver::reconfigure`]).
    pub(super) fn config(&self) -> Arc<RegistryConfig> {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The guard the client's requests are held to (`None`: no policy).
    pub(super) fn policy(&self) -> Option<&PolicyHandle> {
        self.policy.as_ref()
    }

    /// The outbound path's client for `registry`, shared by every request to it (the token
    /// exchange of identity tokens included) and to every registry of the same trust: one that
    /// keeps idle connections if [`outbound::PooledHosts`] admits the host, else one that
    /// keeps none.
    pub(super) fn http_for(&self, registry: &str) -> Result<reqwest::Client, RegistryError> {
        let request_time = self.config().request_timeout * 3;
        let pooled = self.pooled.admit(api_host(registry), request_time);
        self.client(registry, pooled)
    }

    /// The client of `registry`'s trust that keeps no idle connection: for its token realms,
    /// hosts the registry names.
    fn realm_http_for(&self, registry: &str) -> Result<reqwest::Client, RegistryError> {
        self.client(registry, false)
    }

    fn client(&self, registry: &str, pooled: bool) -> Result<reqwest::Client, RegistryError> {
        let trust = self.config().trust_of(registry);
        // Concurrent first uses build one client (moka runs one init per key), not one each.
        self.http
            .try_get_with((trust, pooled), || {
                outbound::build(
                    &self.config(),
                    registry,
                    self.policy.as_ref(),
                    self.lookup.clone(),
                    pooled,
                )
            })
            .map_err(RegistryError::Shared)
    }

    /// One credential's attempt, bounded as a whole: the client's timeouts apply per connect
    /// and per read, and an attempt sends up to five requests (HEAD, token, HEAD, GET, GET).
    async fn resolve_with(
        &self,
        reference: &Reference,
        credential: &Credential,
    ) -> Result<Digest, RegistryError> {
        self.attempt(reference.domain(), self.resolve_once(reference, credential))
            .await
    }

    /// `attempt` at `registry`, bounded as a whole by three request timeouts.
    async fn attempt<T>(
        &self,
        registry: &str,
        attempt: impl std::future::Future<Output = Result<T, RegistryError>>,
    ) -> Result<T, RegistryError> {
        let budget = self.config().request_timeout * 3;
        match tokio::time::timeout(budget, attempt).await {
            Ok(result) => result,
            Err(_) => Err(RegistryError::Timeout {
                registry: registry.to_string(),
                timeout: budget,
            }),
        }
    }

    /// What `credential`'s requests to `image`'s repository go with.
    fn session(
        &self,
        image: &Reference,
        credential: &Credential,
    ) -> Result<Session, RegistryError> {
        let registry = image.domain();
        let scheme = match self.config().is_insecure(registry) {
            true => "http",
            false => "https",
        };
        Ok(Session {
            http: self.http_for(registry)?,
            realm_http: self.realm_http_for(registry)?,
            base: format!("{scheme}://{}/v2/{}", api_host(registry), image.path()),
            key: TokenKey {
                registry: registry.to_string(),
                credential: credential.fingerprint(),
                repository: image.path().to_string(),
            },
            basic: credential.basic_authorization(),
        })
    }

    async fn resolve_once(
        &self,
        reference: &Reference,
        credential: &Credential,
    ) -> Result<Digest, RegistryError> {
        let registry = reference.domain();
        let session = self.session(reference, credential)?;
        let http = &session.http;
        let url = format!("{}/manifests/{}", session.base, reference.manifest());
        let login = session.login();
        let mut authorization = self.first_authorization(&login);
        let mut logged_in = false;
        let mut answer = head::head(http, &url, authorization.as_deref(), reference).await;
        if let Head::Challenge(Some(challenge)) = &answer {
            authorization = Some(self.log_in(&login, challenge).await?);
            logged_in = true;
            answer = head::head(http, &url, authorization.as_deref(), reference).await;
        }
        let digest = match answer {
            Head::Digest(digest) => digest,
            Head::NeedsGet => {
                let mut got = get::get(http, &url, authorization.as_deref(), reference).await;
                // A registry may challenge only the GET (a HEAD answered 405 before any auth).
                if let (Get::Challenge(Some(challenge)), false) = (&got, logged_in) {
                    let bearer = self.log_in(&login, challenge).await?;
                    got = get::get(http, &url, Some(&bearer), reference).await;
                }
                return match got {
                    Get::Manifest(digest) => Ok(digest),
                    Get::Challenge(_) => Err(unauthorized(registry)),
                    Get::Failed(error) => Err(error),
                };
            }
            Head::Challenge(_) => return Err(unauthorized(registry)),
            Head::Failed(error) => return Err(error),
        };
        digest
            .parse::<Digest>()
            .map_err(|_| RegistryError::InvalidResponse {
                registry: registry.to_string(),
                source: AnswerError::DigestHeader(digest),
            })
    }

    /// The authorization a login's first request goes with: a token kept from before, or its
    /// Basic credentials (none for anonymous).
    fn first_authorization(&self, login: &Login<'_>) -> Option<String> {
        self.tokens
            .bearer(&login.key)
            .or_else(|| login.basic.clone())
    }

    /// Answers a bearer `challenge`: checks its realm, asks it for a token (with the Basic
    /// credentials if any) and keeps it; the `Authorization` value to retry with.
    async fn log_in(&self, login: &Login<'_>, challenge: &Bearer) -> Result<String, RegistryError> {
        let config = self.config();
        realm::check_realm(
            self.policy.as_ref(),
            &challenge.realm,
            &login.key.registry,
            |host| config.is_insecure(host),
        )
        .await?;
        self.tokens
            .fetch(
                login.key.clone(),
                challenge,
                login.http,
                login.basic.as_deref(),
            )
            .await
    }
}

#[async_trait]
impl Resolver for OciResolver {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        let (digest, credential) = each_credential(reference.domain(), credentials, |c| {
            self.resolve_with(reference, c)
        })
        .await?;
        Ok(Resolution {
            digest,
            credential: credential.fingerprint(),
            source: ResolutionSource::Registry,
            moved_from: None,
            age: Duration::ZERO,
            origin: None,
            verified: None,
        })
    }
}

/// `call` with each of `credentials` in order, then anonymous, as kubelet tries every matching
/// credential until one pull succeeds: the first answer and the credential that got it, or
/// what the best credential learnt ("not found" after a successful login says more than
/// anonymous's "unauthorized").
pub(super) async fn each_credential<'c, T, F, Fut>(
    registry: &str,
    credentials: &'c [Credential],
    mut call: F,
) -> Result<(T, &'c Credential), RegistryError>
where
    F: FnMut(&'c Credential) -> Fut,
    Fut: std::future::Future<Output = Result<T, RegistryError>>,
{
    static ANONYMOUS: [Credential; 1] = [Credential::Anonymous];
    let candidates = credentials.iter().chain(
        ANONYMOUS
            .iter()
            .filter(|_| !credentials.contains(&Credential::Anonymous)),
    );
    let mut last_error = None;
    for credential in candidates {
        match call(credential).await {
            Ok(answer) => return Ok((answer, credential)),
            Err(e) if e.is_auth_or_not_found() => {
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
    Err(last_error.unwrap_or_else(|| unauthorized(registry)))
}

/// The host that serves `registry`'s API: Docker Hub's references name `docker.io`, its API
/// answers at `index.docker.io` (where docker's clients, and oci-client before, send it).
fn api_host(registry: &str) -> &str {
    match registry {
        "docker.io" => "index.docker.io",
        registry => registry,
    }
}

/// Fails when no system CA bundle exists: every TLS handshake with a registry would fail later,
/// on the request path, so pinhook refuses to start instead.
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

fn informativeness(error: &RegistryError) -> u8 {
    match error {
        RegistryError::NotFound { .. } => 3,
        RegistryError::Denied { .. } => 2,
        _ => 1,
    }
}

fn unauthorized(registry: &str) -> RegistryError {
    RegistryError::Unauthorized {
        registry: registry.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Issue 44: 1,000 hosts named in pod specs built 1,000 clients (each with its own parsed
    /// CA bundle and pool): +108 MiB resident, measured in a release build. Hosts of one
    /// trust now share one (or two: one keeping idle connections, one not); a host with a CA
    /// of its own gets its own.
    #[test]
    fn hosts_of_one_trust_share_one_client() {
        crate::install_crypto_provider();
        let ca = rcgen::generate_simple_self_signed(vec!["own.example".to_string()])
            .expect("a CA certificate");
        let config = RegistryConfig {
            host_ca_pems: [("own.example".to_string(), vec![ca.cert.pem().into_bytes()])]
                .into_iter()
                .collect(),
            ..RegistryConfig::default()
        };
        let resolver = OciResolver::new(config).expect("resolver");
        let before = rss_kib();
        for i in 0..1000 {
            resolver.http_for(&format!("h{i}.example")).expect("client");
        }
        resolver.http_for("own.example").expect("client");
        resolver.http_for("own.example").expect("client");
        resolver.http.run_pending_tasks();
        let grown = rss_kib().saturating_sub(before);
        // The first 12 hosts keep idle connections, the rest (own.example too) none: the
        // default trust's two clients and own.example's one.
        assert_eq!(
            resolver.http.entry_count(),
            3,
            "two for all, one for own.example"
        );
        assert!(grown < 16 << 10, "RSS grew {grown} KiB");
    }
}
