//! Starting pinhook itself for tests: an in-process HTTPS server on 127.0.0.1:0 with a
//! certificate from the test CA, resolving against a real test registry. Built by
//! `pinhook::app::build`, the function `pinhook serve` uses, so tests run what ships.

use std::sync::Arc;
use std::time::Duration;

use pinhook::app::{self, Overrides, TlsSource};
use pinhook::cluster::{Authorizer, NamespaceLabels, NoNamespaces};
use pinhook::kube_client::KubeAccess;
use pinhook::policy::{FormSetting, Policy, PolicyHandle};
use pinhook::policy_reload::PolicySource;
use pinhook::reference::PinForm;
use pinhook::registry::pull_secrets::{NodeOnly, PullSecrets};
use pinhook::registry::{CacheConfig, CachingResolver, RegistryConfig};
use pinhook::server::{ClientAccess, ConnectionLimits, RunningServer};

use super::registry::TestRegistry;
use super::tls::TestCa;

/// A running pinhook and a client that trusts it.
pub struct TestPinhook {
    pub client: reqwest::Client,
    pub base: String,
    pub resolver: Arc<CachingResolver>,
    pub policy: PolicyHandle,
    ca: String,
    /// Serving until the test drops it.
    _server: RunningServer,
    _dir: tempfile::TempDir,
}

/// Registry settings trusting only the test registry's CA.
pub fn registry_config(registry: &TestRegistry) -> RegistryConfig {
    RegistryConfig {
        ca_pems: vec![registry.ca_pem().as_bytes().to_vec()],
        only_configured_cas: true,
        request_timeout: Duration::from_secs(5),
        ..RegistryConfig::default()
    }
}

/// What to vary between test servers.
pub struct Options {
    /// The policy; the test registry's host is added to `registries.allowPrivate` (it listens
    /// on loopback, which the default policy refuses to contact).
    pub policy: Policy,
    pub cache: CacheConfig,
    pub secrets: Arc<dyn PullSecrets>,
    pub namespaces: Arc<dyn NamespaceLabels>,
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// Bounds on the test clients' connections and requests.
    pub limits: ConnectionLimits,
    /// `serve --docker-config`: node-level credentials as `pinhook serve` reads them. When set,
    /// pinhook builds its own node-only pull secrets from it and `secrets` is not used.
    pub docker_config: Option<std::path::PathBuf>,
    /// `serve --client-ca-file` and the TokenReview budget.
    pub clients: ClientAccess,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            policy: Policy::default(),
            cache: CacheConfig::default(),
            secrets: Arc::new(NodeOnly::default()),
            namespaces: Arc::new(NoNamespaces),
            authorizer: None,
            limits: ConnectionLimits::default(),
            docker_config: None,
            clients: ClientAccess::default(),
        }
    }
}

impl Options {
    pub fn with_form(form: PinForm) -> Options {
        let form = match form {
            PinForm::TagAndDigest => FormSetting::TagAndDigest,
            PinForm::DigestOnly => FormSetting::Digest,
        };
        Options {
            policy: Policy {
                form,
                ..Policy::default()
            },
            ..Options::default()
        }
    }
}

impl TestPinhook {
    pub async fn start(registry: &TestRegistry) -> TestPinhook {
        Self::start_with(registry, Options::default()).await
    }

    pub async fn start_with(registry: &TestRegistry, options: Options) -> TestPinhook {
        super::tls::init_crypto();
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = TestCa::generate(dir.path());
        let mut policy = options.policy;
        policy.registries.allow_private.push(registry.host());
        let config = app::Config {
            listen: "127.0.0.1:0".parse().expect("address"),
            tls: TlsSource::Files {
                cert: ca.server_cert_path().to_path_buf(),
                key: ca.server_key_path().to_path_buf(),
            },
            policy: PolicySource::Fixed(Box::new(policy)),
            registry: registry_config(registry),
            cache: options.cache,
            owner_revision_ttl: Duration::from_secs(86_400),
            namespace_label_ttl: pinhook::cluster::NAMESPACE_TTL,
            kube: KubeAccess::Disabled,
            docker_config: options.docker_config.clone(),
            credential_providers: None,
            own_namespace: None,
            loop_breaker_configmap: None,
            shutdown_delay: Duration::ZERO,
            limits: options.limits,
            clients: options.clients,
            overrides: Overrides {
                secrets: match options.docker_config {
                    Some(_) => None,
                    None => Some(options.secrets),
                },
                namespaces: Some(options.namespaces),
                authorizer: options.authorizer,
            },
        };
        let app::RunningApp {
            server,
            resolver,
            policy,
            ..
        } = app::build(config)
            .await
            .expect("pinhook builds")
            .start()
            .await
            .expect("pinhook starts");
        let base = format!("https://127.0.0.1:{}", server.addr.port());
        TestPinhook {
            client: ca.reqwest_client(),
            base,
            resolver,
            policy,
            ca: ca.ca_pem().to_string(),
            _server: server,
            _dir: dir,
        }
    }

    /// The plain-HTTP metrics listener's address (`ClientAccess::metrics_listen`).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self._server.metrics_addr
    }

    /// The CA that signed pinhook's serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A raw TLS connection to pinhook, no client certificate, offering `alpn` (none: HTTP/1.1),
    /// for tests that must lie about a body or stall where a real HTTP client would not.
    pub async fn raw_tls(
        &self,
        alpn: &[&[u8]],
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        self.raw_tls_from([127, 0, 0, 1].into(), alpn).await
    }

    /// [`TestPinhook::raw_tls`] from the loopback address `source` (`127.0.0.2`: another
    /// caller, as far as pinhook can tell).
    pub async fn raw_tls_from(
        &self,
        source: std::net::IpAddr,
        alpn: &[&[u8]],
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        super::tls::init_crypto();
        let mut roots = tokio_rustls::rustls::RootCertStore::empty();
        let mut pem = self.ca_pem().as_bytes();
        for cert in rustls_pemfile::certs(&mut pem) {
            roots.add(cert?).map_err(std::io::Error::other)?;
        }
        let mut config = tokio_rustls::rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let port = self.base.rsplit(':').next().unwrap_or_default();
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::new(source, 0))?;
        let port: u16 = port.parse().map_err(std::io::Error::other)?;
        let tcp = socket.connect(([127, 0, 0, 1], port).into()).await?;
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1")
            .map_err(std::io::Error::other)?;
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }

    /// POSTs a body to `/mutate?timeout=10s` and returns (status, body text).
    pub async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, String) {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("pinhook answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }
}

/// A captured AdmissionReview with `registry.example/` pointed at the test registry.
pub fn review_fixture(name: &str, registry: &TestRegistry) -> serde_json::Value {
    let text = fixture_text(name).replace("registry.example/", &format!("{}/", registry.host()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// A captured AdmissionReview exactly as recorded.
pub fn raw_fixture(name: &str) -> serde_json::Value {
    serde_json::from_str(&fixture_text(name)).expect("fixture is JSON")
}

/// Every captured AdmissionReview with a request (`v1.20/…json`, `v1.26/…json`), in name order.
#[allow(dead_code)]
pub fn captured_reviews() -> Vec<String> {
    let root = format!(
        "{}/tests/fixtures/admissionreview",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut fixtures = Vec::new();
    for version in ["v1.20", "v1.26"] {
        let mut names: Vec<String> = std::fs::read_dir(format!("{root}/{version}"))
            .expect("fixtures")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        fixtures.extend(
            names
                .into_iter()
                .map(|name| format!("{version}/{name}"))
                .filter(|fixture| !raw_fixture(fixture)["request"].is_null()),
        );
    }
    fixtures
}

fn fixture_text(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/admissionreview/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).expect("fixture exists")
}

/// The decoded JSON Patch of a review response (`None` when it has none).
pub fn response_patch(body: &serde_json::Value) -> Option<json_patch::Patch> {
    use base64::Engine as _;
    let encoded = body["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("patch is base64");
    Some(serde_json::from_slice(&bytes).expect("patch is a JSON Patch"))
}

/// Applies a review's patch to its request object, as the apiserver does.
pub fn apply_response(review: &serde_json::Value, body: &serde_json::Value) -> serde_json::Value {
    let mut object = review["request"]["object"].clone();
    if let Some(patch) = response_patch(body) {
        json_patch::patch(&mut object, &patch).expect("every patch path exists in the object");
    }
    object
}
