//! The `pinhook` command: `serve` the webhook, `resolve` one image, (more subcommands follow).
//! Parses flags into each layer's `Config`, reports errors on one line, exits 2 on usage or
//! start-up errors.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tracing::{info, warn};

use pinhook::admission::dry_run::{DocumentError, Report};
use pinhook::admission::{Pinner, PinnerParts};
use pinhook::cluster::{Authorizer, KubeAuthorizer, KubeNamespaces, NamespaceLabels, NoNamespaces};
use pinhook::documents::Document;
use pinhook::metrics::Metrics;
use pinhook::policy::{CompiledPolicy, FormSetting, Policy, PolicyHandle};
use pinhook::reference::{PinForm, Reference};
use pinhook::registry::guard::AddressGuard;
use pinhook::registry::keyring::Keyring;
use pinhook::registry::pull_secrets::{KubeSecrets, NodeOnly, PullSecrets};
use pinhook::registry::{CacheConfig, CachingResolver, OciResolver, RegistryConfig, Resolver};
use pinhook::server::{self, AppState, ServerConfig};

#[derive(Debug, Parser)]
#[command(
    name = "pinhook",
    version,
    about = "Pin every container image to its digest"
)]
struct Cli {
    /// Log format.
    #[arg(
        long,
        env = "PINHOOK_LOG_FORMAT",
        default_value = "text",
        global = true
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the admission webhook over HTTPS.
    Serve(ServeArgs),
    /// Resolve one image reference and print it pinned.
    Resolve(ResolveArgs),
    /// Generate a CA and a serving certificate for the webhook Service.
    Certs(CertsArgs),
    /// Show what admission would do to manifests (files, directories or - for stdin).
    Check(CheckArgs),
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Manifest files, directories (searched for *.yaml, *.yml, *.json) or - for stdin.
    #[arg(required = true)]
    inputs: Vec<String>,
    /// Output: an aligned table, the endpoint's JSON, or the pinned manifests as YAML.
    #[arg(long, short = 'o', default_value = "table")]
    output: OutputArg,
    /// Namespace for objects that name none.
    #[arg(long, short = 'n', default_value = "default")]
    namespace: String,
    /// Policy file (local mode).
    #[arg(long, env = "PINHOOK_POLICY", conflicts_with = "server")]
    policy: Option<PathBuf>,
    /// Ask this pinhook instead of resolving locally, e.g. https://pinhook.example:8443
    #[arg(long, env = "PINHOOK_SERVER")]
    server: Option<String>,
    /// File holding the bearer token for --server (e.g. a ServiceAccount token).
    #[arg(long, env = "PINHOOK_TOKEN_FILE", requires = "server")]
    token_file: Option<PathBuf>,
    /// PEM CA bundle to trust for --server (default: system roots).
    #[arg(long, env = "PINHOOK_SERVER_CA", requires = "server")]
    server_ca: Option<PathBuf>,
    /// Seconds the whole check may take.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    #[command(flatten)]
    registry: RegistryArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputArg {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Args)]
struct CertsArgs {
    /// Name of the webhook's Service.
    #[arg(long, env = "PINHOOK_SERVICE", default_value = "pinhook")]
    service: String,
    /// Namespace of the webhook's Service.
    #[arg(long, env = "PINHOOK_NAMESPACE", default_value = "pinhook-system")]
    namespace: String,
    /// Extra DNS name or IP address for the certificate (repeatable).
    #[arg(long = "san", value_delimiter = ',')]
    sans: Vec<String>,
    /// Validity of both certificates, in days.
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// Directory to write ca.crt, ca.key, tls.crt and tls.key into.
    #[arg(long, default_value = "certs")]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormArg {
    /// name:tag@digest (the tag stays for humans)
    TagDigest,
    /// name@digest
    Digest,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "PINHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    listen: SocketAddr,
    /// PEM certificate chain served to the apiserver (reloaded when it changes).
    #[arg(long, env = "PINHOOK_TLS_CERT")]
    tls_cert: PathBuf,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "PINHOOK_TLS_KEY")]
    tls_key: PathBuf,
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
    /// Node-level docker config.json with credentials tried after the pod's own.
    #[arg(long, env = "PINHOOK_DOCKER_CONFIG")]
    docker_config: Option<PathBuf>,
    /// Seconds to keep serving after SIGTERM with readiness off, before closing the listener
    /// (so the Service's endpoints drop this pod before it stops answering).
    #[arg(long, env = "PINHOOK_SHUTDOWN_DELAY", default_value_t = 5)]
    shutdown_delay: u64,
}

#[derive(Debug, Args)]
struct CacheArgs {
    /// Seconds a resolved digest answers without asking the registry.
    #[arg(long, env = "PINHOOK_CACHE_TTL", default_value_t = 300)]
    cache_ttl: u64,
    /// Seconds "not found" and "unauthorized" answers are remembered.
    #[arg(long, env = "PINHOOK_CACHE_FAILURE_TTL", default_value_t = 30)]
    cache_failure_ttl: u64,
    /// Seconds a last known digest may serve while its registry is down.
    #[arg(long, env = "PINHOOK_CACHE_MAX_STALE", default_value_t = 86_400)]
    cache_max_stale: u64,
    /// Most cached resolutions kept.
    #[arg(long, env = "PINHOOK_CACHE_MAX_ENTRIES", default_value_t = 10_000)]
    cache_max_entries: u64,
    /// Most concurrent calls to one registry.
    #[arg(long, env = "PINHOOK_REGISTRY_CONCURRENCY", default_value_t = 16)]
    registry_concurrency: usize,
}

#[derive(Debug, Args)]
struct ResolveArgs {
    /// The image reference, e.g. registry.example/team/app:1.0
    image: String,
    /// How the pinned reference is written.
    #[arg(long, env = "PINHOOK_FORM", default_value = "tag-digest")]
    form: FormArg,
    #[command(flatten)]
    registry: RegistryArgs,
}

#[derive(Debug, Args)]
struct RegistryArgs {
    /// Extra PEM CA bundle trusted for registries (repeatable).
    #[arg(
        long = "registry-ca",
        env = "PINHOOK_REGISTRY_CA",
        value_delimiter = ','
    )]
    registry_ca: Vec<PathBuf>,
    /// Registry host[:port] reached over plain HTTP (repeatable).
    #[arg(
        long = "insecure-registry",
        env = "PINHOOK_INSECURE_REGISTRY",
        value_delimiter = ','
    )]
    insecure_registry: Vec<String>,
    /// Bound on each registry HTTP call, in seconds.
    #[arg(long, env = "PINHOOK_REGISTRY_TIMEOUT", default_value_t = 5.0)]
    registry_timeout: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    pinhook::install_crypto_provider();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("pinhook: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Resolve(args) => resolve(args).await,
            Command::Certs(args) => certs(args),
            Command::Check(args) => check(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pinhook: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PINHOOK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn serve(args: ServeArgs) -> Result<ExitCode> {
    let metrics = Arc::new(Metrics::new());
    let policy = initial_policy(&args)?;
    let base_registry = registry_config(&args.registry)?;
    let registry = base_registry
        .with_hosts(&policy.policy.registries.hosts)
        .map_err(anyhow::Error::msg)?;
    let handle = PolicyHandle::new(policy);
    let oci = Arc::new(OciResolver::new(registry)?.with_policy(handle.clone()));
    let guarded: Arc<dyn Resolver> = Arc::new(AddressGuard::new(oci.clone(), handle.clone()));
    let cache_config = args.cache.to_config();
    let owner_ttl = cache_config.hit_ttl;
    let cache = Arc::new(CachingResolver::new(guarded, cache_config, metrics.clone()));
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let node = node_keyring(args.docker_config.as_deref())?;
    let authorizer = client
        .clone()
        .map(|c| Arc::new(KubeAuthorizer::new(c)) as Arc<dyn Authorizer>);
    let (secrets, namespaces): (Arc<dyn PullSecrets>, Arc<dyn NamespaceLabels>) = match client {
        Some(client) => (
            Arc::new(KubeSecrets::new(client.clone(), node)),
            Arc::new(KubeNamespaces::new(client)),
        ),
        None => (Arc::new(NodeOnly { node }), Arc::new(NoNamespaces)),
    };
    let pinner = Pinner::new(PinnerParts {
        policy: handle.clone(),
        dry_run_resolver: Arc::new(cache.read_only()),
        resolver: cache,
        secrets,
        namespaces,
        owner_ttl,
    });
    if let Some(path) = args.policy.clone() {
        let oci = oci.clone();
        let reconfigure = move |compiled: &CompiledPolicy| {
            let config = base_registry.with_hosts(&compiled.policy.registries.hosts)?;
            oci.reconfigure(config);
            Ok(())
        };
        tokio::spawn(server::watch_policy(path, handle, reconfigure));
    }
    let state = AppState {
        pinner: Arc::new(pinner),
        metrics,
        ready: Arc::new(AtomicBool::new(false)),
        authorizer,
    };
    let config = ServerConfig {
        listen: args.listen,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
    };
    let running = server::start(config, state).await?;
    shutdown_signal().await;
    let drain = Duration::from_secs(args.shutdown_delay);
    info!(
        drain_seconds = args.shutdown_delay,
        "shutting down: readiness off, serving while endpoints drain, then finishing in-flight requests"
    );
    running.shutdown(drain).await?;
    info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// The policy file, or the defaults with `--form`.
fn initial_policy(args: &ServeArgs) -> Result<CompiledPolicy> {
    match &args.policy {
        Some(path) => {
            let compiled = Policy::load(path)?;
            info!(path = %path.display(), mode = %compiled.policy.mode, "loaded policy");
            Ok(compiled)
        }
        None => {
            let form = match args.form {
                FormArg::TagDigest => FormSetting::TagAndDigest,
                FormArg::Digest => FormSetting::Digest,
            };
            let policy = Policy {
                form,
                ..Policy::default()
            };
            info!("no --policy given: enforce mode with default settings");
            Ok(policy.compile()?)
        }
    }
}

async fn resolve(args: ResolveArgs) -> Result<ExitCode> {
    let reference = Reference::parse(&args.image)
        .with_context(|| format!("invalid image reference {:?}", args.image))?;
    if let Some(digest) = reference.digest() {
        println!("{}", reference.pinned(digest, args.form.into()));
        return Ok(ExitCode::SUCCESS);
    }
    let resolver = build_resolver(&args.registry)?;
    // The user's own docker credentials, as `pinhook check` uses them, then anonymous.
    let credentials = user_keyring()?.lookup(&reference);
    match resolver.resolve(&reference, &credentials).await {
        Ok(resolution) => {
            println!("{}", reference.pinned(&resolution.digest, args.form.into()));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("pinhook: cannot resolve {}: {}", args.image, error_line(&e));
            Ok(ExitCode::from(1))
        }
    }
}

async fn check(args: CheckArgs) -> Result<ExitCode> {
    let documents = pinhook::check::read_inputs(&args.inputs)?;
    let progress = Progress::start(documents.len());
    let budget = Duration::from_secs(args.timeout);
    let report = match &args.server {
        Some(server) => check_remote(&args, server, &documents).await,
        None => check_local(&args, documents, budget).await,
    };
    progress.stop().await;
    let report = report?;
    let output = match args.output {
        OutputArg::Table => pinhook::check::Output::Table,
        OutputArg::Json => pinhook::check::Output::Json,
        OutputArg::Yaml => pinhook::check::Output::Yaml,
    };
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let text = pinhook::check::render(&report, output, colour).map_err(anyhow::Error::msg)?;
    print!("{text}");
    if output == pinhook::check::Output::Yaml {
        // The manifests go to stdout (often into a file); what kept them from being pinned
        // goes to stderr, so a broken document or a denial is never silent.
        for line in pinhook::check::problems(&report) {
            eprintln!("pinhook: {line}");
        }
    }
    Ok(ExitCode::from(pinhook::check::exit_code(&report)))
}

/// Runs the admission pipeline here, with the user's docker credentials and policy file.
async fn check_local(
    args: &CheckArgs,
    documents: Vec<Document>,
    budget: Duration,
) -> Result<Report> {
    let mut policy = match &args.policy {
        Some(path) => Policy::load(path)?.policy,
        None => Policy::default(),
    };
    // The address guard protects a cluster from its pod specs; a local check contacts only
    // what the user's own manifests name.
    policy.registries.allow_private.push("*".to_string());
    let compiled = policy.compile()?;
    let registry = registry_config(&args.registry)?
        .with_hosts(&compiled.policy.registries.hosts)
        .map_err(anyhow::Error::msg)?;
    let handle = PolicyHandle::new(compiled);
    let metrics = Arc::new(Metrics::new());
    let oci: Arc<dyn Resolver> = Arc::new(OciResolver::new(registry)?);
    let cache = CachingResolver::new(oci, CacheConfig::default(), metrics);
    let pinner = Pinner::new(PinnerParts {
        policy: handle,
        dry_run_resolver: Arc::new(cache.read_only()),
        resolver: Arc::new(cache),
        secrets: Arc::new(NodeOnly {
            node: user_keyring()?,
        }),
        namespaces: Arc::new(NoNamespaces),
        owner_ttl: Duration::from_secs(300),
    });
    Ok(pinhook::admission::dry_run::run(&pinner, documents, &args.namespace, budget).await)
}

/// The user's docker credentials: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
fn user_keyring() -> Result<Keyring> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".docker")));
    let Some(path) = dir.map(|d| d.join("config.json")).filter(|p| p.is_file()) else {
        return Ok(Keyring::new());
    };
    node_keyring(Some(&path))
}

/// Asks a pinhook's `/v1/dry-run`; documents that did not parse are reported locally.
async fn check_remote(args: &CheckArgs, server: &str, documents: &[Document]) -> Result<Report> {
    let objects: Vec<&serde_json::Value> = documents
        .iter()
        .filter_map(|d| d.object.as_ref().ok())
        .collect();
    let mut client = reqwest::Client::builder().timeout(Duration::from_secs(args.timeout));
    if let Some(path) = &args.server_ca {
        let pem =
            std::fs::read(path).with_context(|| format!("failed to read '{}'", path.display()))?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("'{}' is not a PEM bundle", path.display()))?;
        client = client.tls_certs_only(certificates);
    }
    let client = client.build().context("failed to build the HTTPS client")?;
    let url = format!("{}/v1/dry-run", server.trim_end_matches('/'));
    let mut request = client
        .post(&url)
        .query(&[("namespace", &args.namespace)])
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&objects)?);
    if let Some(path) = &args.token_file {
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read token file '{}'", path.display()))?;
        request = request.bearer_auth(token.trim());
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .with_context(|| format!("cannot read the answer of {url}"))?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        anyhow::bail!("{url} answered {status}: {message}");
    }
    let mut report: Report = serde_json::from_slice(&body)
        .with_context(|| format!("{url} sent an unreadable report"))?;
    // The server numbers the array it got (`0[3]`); name the user's files and documents again.
    let sent: Vec<&Document> = documents.iter().filter(|d| d.object.is_ok()).collect();
    let local = |index: &str| {
        sent.get(pinhook::documents::array_position(index)?)
            .copied()
    };
    for object in &mut report.objects {
        if let Some(document) = local(&object.index) {
            object.index = document.index.clone();
            object.source = document.source.clone();
        }
    }
    for error in &mut report.errors {
        if let Some(document) = local(&error.index) {
            error.index = document.index.clone();
            error.source = document.source.clone();
        }
    }
    // Documents that did not parse never left this machine.
    for document in documents {
        if let Err(error) = &document.object {
            report.errors.push(DocumentError {
                index: document.index.clone(),
                source: document.source.clone(),
                error: error.clone(),
            });
        }
    }
    report.summary.errors = report.errors.len();
    Ok(report)
}

/// A spinner on stderr when it is a terminal and the run takes more than a second.
struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(objects: usize) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { task: None };
        }
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let frames = ['|', '/', '-', '\\'];
            for i in 0.. {
                eprint!("\r{} checking {objects} objects…", frames[i % frames.len()]);
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        });
        Progress { task: Some(task) }
    }

    async fn stop(self) {
        if let Some(task) = self.task {
            task.abort();
            let _ = task.await;
            eprint!("\r\x1b[2K");
        }
    }
}

fn certs(args: CertsArgs) -> Result<ExitCode> {
    let request = pinhook::certs::CertRequest {
        service: args.service,
        namespace: args.namespace,
        extra_sans: args.sans,
        validity_days: args.days,
    };
    let generated = pinhook::certs::generate(&request)?;
    let files = generated.write(&args.out)?;
    eprintln!(
        "wrote {}, {} and {} for {}",
        files.ca_cert.display(),
        files.cert.display(),
        files.key.display(),
        request.subject_alt_names().join(", ")
    );
    // stdout carries only the caBundle, so scripts can capture it.
    println!("{}", generated.ca_bundle());
    Ok(ExitCode::SUCCESS)
}

/// The node-level keyring from a docker config.json, or an empty one.
fn node_keyring(docker_config: Option<&Path>) -> Result<Keyring> {
    let Some(path) = docker_config else {
        return Ok(Keyring::new());
    };
    let bytes = std::fs::read(path)
        .with_context(|| format!("failed to read docker config '{}'", path.display()))?;
    Keyring::from_docker_config_json(&bytes)
        .with_context(|| format!("failed to parse docker config '{}'", path.display()))
}

/// A Kubernetes client from `--kubeconfig`, else kube-rs's inference (`$KUBECONFIG` or
/// `~/.kube/config`, then in-cluster); `None` (and a
/// warning) when none is configured: pinhook still serves, with node-level credentials only.
async fn kube_client(kubeconfig: Option<&Path>) -> Result<Option<kube::Client>> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("failed to read kubeconfig '{}'", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("failed to load kubeconfig '{}'", path.display()))?
        }
        None => match kube::Config::infer().await {
            Ok(config) => config,
            Err(e) => {
                warn!(
                    error = %e,
                    "no Kubernetes API configured: pods' imagePullSecrets and namespace mode labels are not used, only node-level and anonymous credentials"
                );
                return Ok(None);
            }
        },
    };
    info!(server = %config.cluster_url, "reading pull secrets and namespaces through the Kubernetes API");
    let client = kube::Client::try_from(config).context("failed to build the Kubernetes client")?;
    Ok(Some(client))
}

fn build_resolver(args: &RegistryArgs) -> Result<Arc<dyn Resolver>> {
    Ok(Arc::new(OciResolver::new(registry_config(args)?)?))
}

/// Registry settings from the command line.
fn registry_config(args: &RegistryArgs) -> Result<RegistryConfig> {
    let mut config = RegistryConfig {
        request_timeout: Duration::try_from_secs_f64(args.registry_timeout)
            .context("--registry-timeout must be a positive number of seconds")?,
        ..RegistryConfig::default()
    };
    for path in &args.registry_ca {
        let pem = std::fs::read(path)
            .with_context(|| format!("failed to read registry CA '{}'", path.display()))?;
        config.ca_pems.push(pem);
    }
    config.insecure_hosts = args.insecure_registry.iter().cloned().collect();
    for host in &config.insecure_hosts {
        warn!(host = %host, "registry reached over plain HTTP");
    }
    Ok(config)
}

fn error_line(error: &dyn std::error::Error) -> String {
    pinhook::admission::pipeline::error_chain(error)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(e) => {
                    warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

// === impl CacheArgs ===

impl CacheArgs {
    fn to_config(&self) -> CacheConfig {
        CacheConfig {
            hit_ttl: Duration::from_secs(self.cache_ttl),
            failure_ttl: Duration::from_secs(self.cache_failure_ttl),
            max_stale: Duration::from_secs(self.cache_max_stale),
            max_entries: self.cache_max_entries,
            per_registry_concurrency: self.registry_concurrency,
            ..CacheConfig::default()
        }
    }
}

// === impl FormArg ===

impl From<FormArg> for PinForm {
    fn from(form: FormArg) -> PinForm {
        match form {
            FormArg::TagDigest => PinForm::TagAndDigest,
            FormArg::Digest => PinForm::DigestOnly,
        }
    }
}
