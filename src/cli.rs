//! The command line: clap types for every subcommand, each flag paired with a `PINHOOK_*`
//! environment variable, and their conversion into each layer's settings
//! ([`crate::app::Config`], [`crate::app::ResolveConfig`], [`crate::check::CheckConfig`],
//! [`crate::certs::CertsConfig`]). `serve`'s flags are in `cli/serve.rs`, `watch`'s and
//! `inventory`'s in `cli/watch.rs`, the duration parsers in `cli/durations.rs`.
//!
//! Parsing reads only the arguments and `PINHOOK_*` variables, so `--help` and `--version` work
//! in a broken environment; clap rejects bad values and combinations as usage errors. The
//! conversions read the files the flags name (registry CAs) and, for a Lease identity
//! (self-managed certificates, `pinhook watch`) without --pod-name, `HOSTNAME`; nothing else.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};
use tracing::warn;

use crate::app::ResolveConfig;
use crate::certs::{CertRequest, CertsConfig};
use crate::check::{self, CheckConfig, Remote, Target};
use crate::kube_client::KubeAccess;
use crate::policy::FormSetting;
use crate::policy_reload::PolicySource;
use crate::reference::{PinForm, Reference, ReferenceError};
use crate::registry::provider::{ProviderFiles, Settings as ProviderSettings};
use crate::registry::{CacheConfig, RegistryConfig};

mod durations;
mod serve;
mod watch;

pub use durations::DurationError;
use durations::{parse_seconds, seconds_flag};
pub use serve::ServeArgs;
pub use watch::{InventoryArgs, InventoryOutput, WatchArgs};

/// The longest validity `pinhook certs` writes (100 years).
const MAX_CERT_DAYS: i64 = 36_500;

/// Why flags could not become settings.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("failed to read registry CA '{path}'")]
    ReadRegistryCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--idle-timeout ({idle:?}) must be longer than --request-timeout ({request:?}): an \
         idle connection would be closed under a request still being answered"
    )]
    IdleNotAboveRequest { idle: Duration, request: Duration },
    #[error(
        "--tls-cert-lifetime ({cert:?}) must be shorter than --tls-ca-lifetime ({ca:?}), and \
         --tls-ca-grace ({grace:?}) shorter than a third of the CA's lifetime"
    )]
    TlsLifetimes {
        ca: Duration,
        cert: Duration,
        grace: Duration,
    },
    #[error("give --tls-secret, or --tls-cert and --tls-key")]
    NoTls,
    #[error("invalid image reference {image:?}")]
    InvalidReference {
        image: String,
        #[source]
        source: ReferenceError,
    },
}

#[derive(Debug, Parser)]
#[command(
    name = "pinhook",
    version,
    about = "Pin every container image to its digest"
)]
pub struct Cli {
    /// Log format.
    #[arg(
        long,
        env = "PINHOOK_LOG_FORMAT",
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook over HTTPS.
    Serve(Box<ServeArgs>),
    /// Resolve one image reference and print it pinned.
    Resolve(ResolveArgs),
    /// Generate a CA and a serving certificate for the webhook Service.
    Certs(CertsArgs),
    /// Show what admission would do to manifests (files, directories or - for stdin).
    Check(CheckArgs),
    /// Watch every running image for drift; write PolicyReports, Events and metrics.
    Watch(Box<WatchArgs>),
    /// List running images with digest, state and workloads (from Pods and PolicyReports).
    Inventory(InventoryArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The image reference, e.g. registry.example/team/app:1.0
    image: String,
    /// How the pinned reference is written.
    #[arg(long, env = "PINHOOK_FORM", default_value = "tag-digest")]
    form: FormArg,
    #[command(flatten)]
    registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// Name of the webhook's Service.
    #[arg(long, env = "PINHOOK_SERVICE", default_value = "pinhook")]
    service: String,
    /// Namespace of the webhook's Service.
    #[arg(long, env = "PINHOOK_NAMESPACE", default_value = "pinhook-system")]
    namespace: String,
    /// Extra DNS name or IP address for the certificate (repeatable).
    #[arg(long = "san", env = "PINHOOK_CERT_SANS", value_delimiter = ',')]
    sans: Vec<String>,
    /// Validity of both certificates, in days.
    #[arg(long, env = "PINHOOK_CERT_DAYS", default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=MAX_CERT_DAYS))]
    days: u32,
    /// Directory to write ca.crt, ca.key, tls.crt and tls.key into.
    #[arg(long, env = "PINHOOK_CERT_OUT", default_value = "certs")]
    out: PathBuf,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Manifest files, directories (searched for *.yaml, *.yml, *.json) or - for stdin.
    #[arg(required = true)]
    inputs: Vec<String>,
    /// Output: an aligned table, the endpoint's JSON, or the pinned manifests as YAML.
    #[arg(
        long,
        short = 'o',
        env = "PINHOOK_CHECK_OUTPUT",
        default_value = "table"
    )]
    output: OutputArg,
    /// Namespace for objects that name none.
    #[arg(
        long,
        short = 'n',
        env = "PINHOOK_CHECK_NAMESPACE",
        default_value = "default"
    )]
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
    #[arg(long, env = "PINHOOK_CHECK_TIMEOUT", default_value_t = 120, value_parser = seconds_flag())]
    timeout: u64,
    /// Exit 1 unless every image resolved to a digest (pinned, or would be pinned in audit),
    /// and at least one image was seen: what `helm test` asks.
    #[arg(long, env = "PINHOOK_REQUIRE_DIGEST")]
    require_digest: bool,
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
    #[arg(
        long,
        env = "PINHOOK_REGISTRY_TIMEOUT",
        default_value = "5",
        value_parser = parse_seconds
    )]
    registry_timeout: Duration,
}

/// Credentials a node has, tried after a pod's own: `serve` and `watch` read them alike.
#[derive(Debug, Args)]
struct NodeCredentialArgs {
    /// Node-level docker config.json with credentials tried after the pod's own.
    #[arg(long, env = "PINHOOK_DOCKER_CONFIG")]
    docker_config: Option<PathBuf>,
    /// kubelet CredentialProviderConfig file (or directory) of plugins tried after those.
    #[arg(
        long,
        env = "PINHOOK_IMAGE_CREDENTIAL_PROVIDER_CONFIG",
        requires = "image_credential_provider_bin_dir"
    )]
    image_credential_provider_config: Option<PathBuf>,
    /// Directory holding the credential provider plugins' binaries.
    #[arg(
        long,
        env = "PINHOOK_IMAGE_CREDENTIAL_PROVIDER_BIN_DIR",
        requires = "image_credential_provider_config"
    )]
    image_credential_provider_bin_dir: Option<PathBuf>,
    /// Runs of one credential provider plugin at once; more wait for a slot, and an admission
    /// whose wait ends first hears the provider was busy.
    #[arg(
        long,
        env = "PINHOOK_CREDENTIAL_PROVIDER_RUNS",
        default_value_t = crate::registry::credentials::limits::DEFAULT_PER_PROGRAM,
        value_parser = clap::value_parser!(u16).range(1..).map(usize::from)
    )]
    credential_provider_runs: usize,
    /// Runs of all credential provider plugins at once.
    #[arg(
        long,
        env = "PINHOOK_CREDENTIAL_PROVIDER_TOTAL_RUNS",
        default_value_t = crate::registry::credentials::limits::DEFAULT_TOTAL,
        value_parser = clap::value_parser!(u16).range(1..).map(usize::from)
    )]
    credential_provider_total_runs: usize,
}

#[derive(Debug, Args)]
struct CacheArgs {
    /// Seconds a resolved digest answers without asking the registry.
    #[arg(long, env = "PINHOOK_CACHE_TTL", default_value_t = 300, value_parser = seconds_flag())]
    cache_ttl: u64,
    /// Seconds "not found" and "unauthorized" answers are remembered.
    #[arg(long, env = "PINHOOK_CACHE_FAILURE_TTL", default_value_t = 30, value_parser = seconds_flag())]
    cache_failure_ttl: u64,
    /// Seconds a last known digest may serve while its registry is down.
    #[arg(long, env = "PINHOOK_CACHE_MAX_STALE", default_value_t = 86_400, value_parser = seconds_flag())]
    cache_max_stale: u64,
    /// Most cached resolutions kept.
    #[arg(long, env = "PINHOOK_CACHE_MAX_ENTRIES", default_value_t = 10_000)]
    cache_max_entries: u64,
    /// Re-resolve a used tag in the background in the last quarter of its TTL, so admissions
    /// never wait on the registry when it ends (`false` turns it off).
    #[arg(long, env = "PINHOOK_CACHE_REFRESH_AHEAD", default_value_t = true, action = clap::ArgAction::Set)]
    cache_refresh_ahead: bool,
    /// Most concurrent calls to one registry.
    #[arg(long, env = "PINHOOK_REGISTRY_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    registry_concurrency: usize,
    /// Seconds the Pods of one owner revision keep the digest the first one got.
    #[arg(long, env = "PINHOOK_OWNER_REVISION_TTL", default_value_t = 86_400, value_parser = seconds_flag())]
    owner_revision_ttl: u64,
    /// Seconds a namespace's pinhook.dev/mode label is cached.
    #[arg(long, env = "PINHOOK_NAMESPACE_CACHE_TTL", default_value_t = 30, value_parser = seconds_flag())]
    namespace_cache_ttl: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormArg {
    /// name:tag@digest (the tag stays for humans)
    TagDigest,
    /// name@digest
    Digest,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputArg {
    Table,
    Json,
    Yaml,
}

// === impl ResolveArgs ===

impl ResolveArgs {
    /// `pinhook resolve`'s settings; checks the reference, then reads the registry CA files.
    pub fn into_config(self) -> Result<ResolveConfig, CliError> {
        let reference =
            Reference::parse(&self.image).map_err(|source| CliError::InvalidReference {
                image: self.image.clone(),
                source,
            })?;
        Ok(ResolveConfig {
            registry: self.registry.to_config()?,
            image: self.image,
            reference,
            form: self.form.into(),
        })
    }
}

// === impl CertsArgs ===

impl CertsArgs {
    pub fn into_config(self) -> CertsConfig {
        CertsConfig {
            request: CertRequest {
                service: self.service,
                namespace: self.namespace,
                extra_sans: self.sans,
                validity_days: self.days,
            },
            out: self.out,
        }
    }
}

// === impl CheckArgs ===

impl CheckArgs {
    /// `pinhook check`'s settings; reads the registry CA files in local mode only (a remote
    /// check contacts no registry).
    pub fn into_config(self) -> Result<CheckConfig, CliError> {
        let target = match self.server {
            Some(server) => Target::Remote(Remote {
                server,
                token_file: self.token_file,
                server_ca: self.server_ca,
            }),
            None => Target::Local {
                policy: self.policy,
                registry: self.registry.to_config()?,
            },
        };
        Ok(CheckConfig {
            inputs: self.inputs,
            output: self.output.into(),
            namespace: self.namespace,
            timeout: Duration::from_secs(self.timeout),
            target,
            require_digest: self.require_digest,
        })
    }
}

// === impl RegistryArgs ===

impl RegistryArgs {
    /// Registry settings: the CA files read, insecure hosts named in the log.
    fn to_config(&self) -> Result<RegistryConfig, CliError> {
        let mut config = RegistryConfig {
            request_timeout: self.registry_timeout,
            ..RegistryConfig::default()
        };
        for path in &self.registry_ca {
            let pem = std::fs::read(path).map_err(|source| CliError::ReadRegistryCa {
                path: path.clone(),
                source,
            })?;
            config.ca_pems.push(pem);
        }
        config.insecure_hosts = self.insecure_registry.iter().cloned().collect();
        for host in &config.insecure_hosts {
            warn!(host = %host, "registry reached over plain HTTP");
        }
        Ok(config)
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
            refresh_ahead: self.cache_refresh_ahead,
            ..CacheConfig::default()
        }
    }
}

// === impl NodeCredentialArgs ===

impl NodeCredentialArgs {
    /// The credential provider plugins, when both their config and binaries are given.
    fn providers(&self) -> Option<ProviderFiles> {
        let config = self.image_credential_provider_config.clone()?;
        let bin_dir = self.image_credential_provider_bin_dir.clone()?;
        Some(ProviderFiles {
            config,
            bin_dir,
            settings: ProviderSettings {
                per_provider: self.credential_provider_runs,
                total: self.credential_provider_total_runs,
                ..ProviderSettings::default()
            },
        })
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

impl From<FormArg> for FormSetting {
    fn from(form: FormArg) -> FormSetting {
        match form {
            FormArg::TagDigest => FormSetting::TagAndDigest,
            FormArg::Digest => FormSetting::Digest,
        }
    }
}

// === impl OutputArg ===

impl From<OutputArg> for check::Output {
    fn from(output: OutputArg) -> check::Output {
        match output {
            OutputArg::Table => check::Output::Table,
            OutputArg::Json => check::Output::Json,
            OutputArg::Yaml => check::Output::Yaml,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::{Mutex, MutexGuard};

    use clap::error::ErrorKind;
    use clap::CommandFactory;

    use super::*;
    use std::net::SocketAddr;

    use crate::app::{self, TlsSource};
    use crate::certs::managed::WebhookRef;
    use crate::policy::Policy;
    use crate::server::ConnectionLimits;
    use durations::parse_lifetime;

    /// clap reads `PINHOOK_*` from the process environment: every parse in this module holds
    /// this lock, so the one test that sets variables cannot leak them into another.
    static ENV: Mutex<()> = Mutex::new(());

    fn env_lock() -> MutexGuard<'static, ()> {
        ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let _env = env_lock();
        Cli::try_parse_from(std::iter::once("pinhook").chain(args.iter().copied()))
    }

    fn serve(args: &[&str]) -> app::Config {
        let mut all = vec!["serve", "--tls-cert", "tls.crt", "--tls-key", "tls.key"];
        all.extend_from_slice(args);
        match parse(&all).expect("parses").command {
            Command::Serve(args) => args.into_config().expect("converts"),
            other => panic!("not serve: {other:?}"),
        }
    }

    fn tls_files(config: &app::Config) -> (PathBuf, PathBuf) {
        match &config.tls {
            TlsSource::Files { cert, key } => (cert.clone(), key.clone()),
            TlsSource::Managed(m) => panic!("managed TLS, not files: {m:?}"),
        }
    }

    fn managed(args: &[&str]) -> Result<app::Config, Box<dyn std::error::Error>> {
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        match parse(&all)?.command {
            Command::Serve(args) => Ok(args.into_config()?),
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn serve_with_a_managed_secret() {
        let config = managed(&[
            "--tls-secret=pinhook-tls",
            "--tls-namespace=hooks",
            "--tls-service=hook",
            "--tls-webhook=mutating/m,validating/v",
            "--tls-san=127.0.0.1",
            "--pod-name=hook-0",
            "--tls-ca-lifetime=3m",
            "--tls-cert-lifetime=1m",
            "--tls-ca-grace=10s",
        ])
        .expect("managed TLS");
        let TlsSource::Managed(m) = config.tls else {
            panic!("not managed");
        };
        assert_eq!(
            (m.namespace.as_str(), m.secret.as_str()),
            ("hooks", "pinhook-tls")
        );
        assert_eq!(m.lease, "pinhook-tls");
        assert_eq!(m.identity, "hook-0");
        assert_eq!(
            m.webhooks,
            vec![
                WebhookRef::Mutating("m".into()),
                WebhookRef::Validating("v".into())
            ]
        );
        assert_eq!(
            m.settings.names,
            [
                "hook",
                "hook.hooks",
                "hook.hooks.svc",
                "hook.hooks.svc.cluster.local",
                "127.0.0.1"
            ]
        );
        assert_eq!(m.settings.ca_lifetime, Duration::from_secs(180));
        assert_eq!(m.settings.cert_lifetime, Duration::from_secs(60));
        assert_eq!(m.settings.grace, Duration::from_secs(10));
        assert_eq!(m.interval, Duration::from_secs(5));
    }

    #[test]
    fn managed_tls_refuses_what_cannot_work() {
        let cases: [(&[&str], &str); 7] = [
            (&["--tls-secret=s"], "--tls-webhook"),
            (
                &["--tls-secret=s", "--tls-webhook=mutating/m", "--tls-cert=c"],
                "cannot be used",
            ),
            (
                &["--tls-secret=s", "--tls-webhook=other/x"],
                "is not mutating/NAME",
            ),
            (
                &[
                    "--tls-secret=s",
                    "--tls-webhook=mutating/m",
                    "--tls-ca-lifetime=1d",
                    "--tls-cert-lifetime=2d",
                ],
                "must be shorter",
            ),
            (
                &[
                    "--tls-secret=s",
                    "--tls-webhook=mutating/m",
                    "--tls-ca-lifetime=3m",
                    "--tls-ca-grace=1m",
                ],
                "must be shorter",
            ),
            (
                &[
                    "--tls-secret=s",
                    "--tls-webhook=mutating/m",
                    "--tls-cert-lifetime=0s",
                ],
                "at least 1s",
            ),
            (&[], "--tls-cert"),
        ];
        for (args, needle) in cases {
            let Err(err) = managed(args) else {
                panic!("{args:?}: accepted");
            };
            assert!(err.to_string().contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn watch_flags_become_the_watch_config() {
        let config = match parse(&[
            "watch",
            "--recheck-interval=30s",
            "--pod-name=watch-1",
            "--lease=drift",
            "--lease-namespace=hooks",
            "--lease-duration=9s",
            "--events-per-workload=2",
            "--no-mirror-report",
        ])
        .expect("parses")
        .command
        {
            Command::Watch(args) => args.into_config().expect("converts"),
            other => panic!("not watch: {other:?}"),
        };
        assert_eq!(config.recheck_interval, Duration::from_secs(30));
        // The watch's own cache is fresh for exactly one interval (each cycle expires it), and
        // refreshes nothing ahead (one lookup per key per cycle).
        assert_eq!(config.cache.hit_ttl, Duration::from_secs(30));
        assert!(!config.cache.refresh_ahead);
        assert_eq!(
            (
                config.lease.name.as_str(),
                config.lease.namespace.as_str(),
                config.lease.identity.as_str(),
                config.lease.duration
            ),
            ("drift", "hooks", "watch-1", Duration::from_secs(9))
        );
        assert_eq!(config.cycle.events_per_workload, 2);
        assert!(!config.cycle.mirrors);
        assert!(!config.cycle.mirror_config_maps);
        assert_eq!(
            config.listen,
            crate::watch::controller::http::Listen {
                health: "0.0.0.0:8080".parse().expect("addr"),
                // /inventory on localhost unless told otherwise (issue 44)
                inventory: Some("127.0.0.1:8081".parse().expect("addr")),
            }
        );
        assert!(matches!(config.kube, KubeAccess::Infer));

        let defaults = match parse(&["watch"]).expect("parses").command {
            Command::Watch(args) => args.into_config().expect("converts"),
            other => panic!("not watch: {other:?}"),
        };
        assert_eq!(defaults.recheck_interval, Duration::from_secs(600));
        assert_eq!(defaults.lease.name, "pinhook-watch");
        assert!(defaults.cycle.mirrors);
        assert!(parse(&["watch", "--recheck-interval=0s"]).is_err());
        // /inventory is checked with the cluster unless told otherwise.
        assert_eq!(
            defaults.inventory_auth,
            crate::watch::controller::InventoryAuth::Kubernetes
        );
        let open = match parse(&["watch", "--inventory-auth=none"])
            .expect("parses")
            .command
        {
            Command::Watch(args) => args.into_config().expect("converts"),
            other => panic!("not watch: {other:?}"),
        };
        assert_eq!(
            open.inventory_auth,
            crate::watch::controller::InventoryAuth::None
        );
        assert!(parse(&["watch", "--inventory-auth=basic"]).is_err());
    }

    #[test]
    fn watch_and_inventory_write_and_read_the_report_api_chosen() {
        use crate::watch::report::ReportApi;
        let watch = |args: &[&str]| match parse(args).expect("parses").command {
            Command::Watch(args) => args.into_config().expect("converts").cycle.report_api,
            other => panic!("not watch: {other:?}"),
        };
        assert_eq!(watch(&["watch"]), ReportApi::Wgpolicyk8s);
        assert_eq!(
            watch(&["watch", "--report-api", "openreports"]),
            ReportApi::OpenReports
        );
        assert_eq!(
            watch(&["watch", "--report-api=wgpolicyk8s"]),
            ReportApi::Wgpolicyk8s
        );
        assert!(parse(&["watch", "--report-api=policyreport"]).is_err());
        match parse(&["inventory", "--report-api", "openreports"])
            .expect("parses")
            .command
        {
            Command::Inventory(args) => {
                assert_eq!(ReportApi::from(args.report_api), ReportApi::OpenReports)
            }
            other => panic!("not inventory: {other:?}"),
        }
        // The default is visible in -h and --help; --help's lines (one a line: the text, each
        // value, the env var, the default) fit 80 columns.
        let mut command = Cli::command();
        let watch = command.find_subcommand_mut("watch").expect("watch");
        let short = watch.render_help().to_string();
        assert!(short.contains("[default: wgpolicyk8s]"), "{short}");
        let long = watch.render_long_help().to_string();
        assert!(long.contains("[default: wgpolicyk8s]"), "{long}");
        assert!(long.contains("[env: PINHOOK_REPORT_API="), "{long}");
        let start = long.find("--report-api").expect("listed");
        let end = long[start..]
            .find("\n\n      --")
            .map_or(long.len(), |e| start + e);
        for line in long[start..end].lines() {
            assert!(line.chars().count() < 80, "{line:?}");
        }
    }

    #[test]
    fn inventory_takes_an_output_a_namespace_and_a_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        match parse(&["inventory", "-o", "json", "-n", "shop", "--digest", &digest])
            .expect("parses")
            .command
        {
            Command::Inventory(args) => {
                assert_eq!(args.output, InventoryOutput::Json);
                assert_eq!(args.namespace.as_deref(), Some("shop"));
                assert_eq!(args.digest.map(|d| d.to_string()), Some(digest));
            }
            other => panic!("not inventory: {other:?}"),
        }
        assert!(parse(&["inventory", "--digest", "sha256:nothex"]).is_err());
    }

    #[test]
    fn lifetimes_take_a_unit() {
        assert_eq!(parse_lifetime("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_lifetime("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_lifetime("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_lifetime("30s"), Ok(Duration::from_secs(30)));
        for bad in [
            "",
            "d",
            "90",
            "1y",
            "-1d",
            "3661d",
            "99999999999999999999d",
            "1.5h",
        ] {
            assert!(parse_lifetime(bad).is_err(), "{bad:?}");
        }
    }

    fn check(args: &[&str]) -> CheckConfig {
        let mut all = vec!["check"];
        all.extend_from_slice(args);
        match parse(&all).expect("parses").command {
            Command::Check(args) => args.into_config().expect("converts"),
            other => panic!("not check: {other:?}"),
        }
    }

    fn error_kind(args: &[&str]) -> ErrorKind {
        parse(args).expect_err("is refused").kind()
    }

    fn fixed_form(config: &app::Config) -> FormSetting {
        match &config.policy {
            PolicySource::Fixed(policy) => policy.form,
            PolicySource::File(path) => panic!("policy file {path:?}, expected a fixed policy"),
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_has_a_pinhook_env_var() {
        let cli = Cli::command();
        let mut commands = vec![cli.clone()];
        commands.extend(cli.get_subcommands().cloned());
        for command in &commands {
            let mut seen = std::collections::HashSet::new();
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_positional() || matches!(id, "help" | "version") {
                    continue;
                }
                let env = arg
                    .get_env()
                    .and_then(|e| e.to_str())
                    .unwrap_or_else(|| panic!("{} --{id} has no env var", command.get_name()));
                assert!(env.starts_with("PINHOOK_"), "--{id}: {env}");
                assert!(
                    seen.insert(env),
                    "{env} used twice in {}",
                    command.get_name()
                );
            }
        }
    }

    #[test]
    fn serve_defaults() {
        let config = serve(&[]);
        assert_eq!(
            config.listen,
            "0.0.0.0:8443".parse::<SocketAddr>().expect("addr")
        );
        assert_eq!(tls_files(&config), ("tls.crt".into(), "tls.key".into()));
        assert_eq!(
            config.policy,
            PolicySource::Fixed(Box::new(Policy {
                form: FormSetting::TagAndDigest,
                ..Policy::default()
            }))
        );
        assert!(config.registry.ca_pems.is_empty());
        assert!(config.registry.insecure_hosts.is_empty());
        assert!(!config.registry.only_configured_cas);
        assert_eq!(config.registry.request_timeout, Duration::from_secs(5));
        assert_eq!(config.cache.hit_ttl, Duration::from_secs(300));
        assert_eq!(config.cache.failure_ttl, Duration::from_secs(30));
        assert_eq!(config.cache.max_stale, Duration::from_secs(86_400));
        assert_eq!(config.cache.max_entries, 10_000);
        assert_eq!(config.cache.per_registry_concurrency, 16);
        assert!(config.cache.refresh_ahead);
        assert_eq!(config.owner_revision_ttl, Duration::from_secs(86_400));
        assert_eq!(config.namespace_label_ttl, Duration::from_secs(30));
        assert!(matches!(config.kube, KubeAccess::Infer));
        assert_eq!(config.docker_config, None);
        assert_eq!(config.shutdown_delay, Duration::from_secs(5));
        assert_eq!(config.limits, ConnectionLimits::default());
        assert_eq!(
            config.limits,
            ConnectionLimits {
                max_connections: 320,
                header_read_timeout: Duration::from_secs(10),
                request_timeout: Duration::from_secs(70),
                idle_timeout: Duration::from_secs(120),
            }
        );
        assert!(config.overrides.secrets.is_none());
        assert!(config.overrides.namespaces.is_none());
        assert!(config.overrides.authorizer.is_none());
    }

    #[test]
    fn credential_provider_run_limits_are_flags_with_defaults_and_never_zero() {
        let files = [
            "--image-credential-provider-config=c",
            "--image-credential-provider-bin-dir=b",
        ];
        let settings = |extra: &[&str]| {
            let mut args = files.to_vec();
            args.extend_from_slice(extra);
            serve(&args)
                .credential_providers
                .map(|files| files.settings)
        };
        let defaults = settings(&[]).expect("plugins configured");
        assert_eq!((defaults.per_provider, defaults.total), (4, 16));
        let set = settings(&[
            "--credential-provider-runs=2",
            "--credential-provider-total-runs=5",
        ])
        .expect("plugins configured");
        assert_eq!((set.per_provider, set.total), (2, 5));
        assert!(parse(&[
            "serve",
            "--tls-cert=a",
            "--tls-key=b",
            "--credential-provider-runs=0"
        ])
        .is_err());
    }

    #[test]
    fn serve_flags_set_their_config_fields() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "PEM").expect("write ca");
        let ca = ca.to_str().expect("utf-8 path");
        let config = serve(&[
            "--listen=127.0.0.1:9443",
            "--form=digest",
            &format!("--registry-ca={ca},{ca}"),
            "--insecure-registry=a.example:5000,b.example",
            "--registry-timeout=2.5",
            "--cache-ttl=1",
            "--cache-failure-ttl=2",
            "--cache-max-stale=3",
            "--cache-max-entries=4",
            "--cache-refresh-ahead=false",
            "--registry-concurrency=5",
            "--owner-revision-ttl=6",
            "--namespace-cache-ttl=7",
            "--kubeconfig=kube.yaml",
            "--docker-config=docker.json",
            "--shutdown-delay=0",
            "--max-connections=8",
            "--header-read-timeout=1.5",
            "--request-timeout=3",
            "--idle-timeout=4",
        ]);
        assert_eq!(
            config.listen,
            "127.0.0.1:9443".parse::<SocketAddr>().expect("addr")
        );
        assert_eq!(fixed_form(&config), FormSetting::Digest);
        assert_eq!(
            config.registry.ca_pems,
            vec![b"PEM".to_vec(), b"PEM".to_vec()]
        );
        assert_eq!(
            config.registry.insecure_hosts,
            ["a.example:5000", "b.example"].map(String::from).into()
        );
        assert_eq!(config.registry.request_timeout, Duration::from_millis(2500));
        assert_eq!(config.cache.hit_ttl, Duration::from_secs(1));
        assert!(!config.cache.refresh_ahead);
        assert_eq!(config.cache.failure_ttl, Duration::from_secs(2));
        assert_eq!(config.cache.max_stale, Duration::from_secs(3));
        assert_eq!(config.cache.max_entries, 4);
        assert_eq!(config.cache.per_registry_concurrency, 5);
        assert_eq!(config.owner_revision_ttl, Duration::from_secs(6));
        assert_eq!(config.namespace_label_ttl, Duration::from_secs(7));
        assert!(matches!(&config.kube, KubeAccess::Kubeconfig(p) if p == Path::new("kube.yaml")));
        assert_eq!(config.docker_config, Some(PathBuf::from("docker.json")));
        assert_eq!(config.shutdown_delay, Duration::ZERO);
        assert_eq!(
            config.limits,
            ConnectionLimits {
                max_connections: 8,
                header_read_timeout: Duration::from_millis(1500),
                request_timeout: Duration::from_secs(3),
                idle_timeout: Duration::from_secs(4),
            }
        );
    }

    /// Values that overflowed the clock arithmetic they feed (exit 101) are usage errors (2).
    #[rstest::rstest]
    #[case::cache_ttl(&["serve", "--tls-cert=c", "--tls-key=k", "--cache-ttl=18446744073709551615"])]
    #[case::cache_max_stale(&["serve", "--tls-cert=c", "--tls-key=k", "--cache-max-stale=3155760001"])]
    #[case::owner_revision_ttl(&["serve", "--tls-cert=c", "--tls-key=k", "--owner-revision-ttl=18446744073709551615"])]
    #[case::registry_timeout(&["serve", "--tls-cert=c", "--tls-key=k", "--registry-timeout=1e300"])]
    #[case::registry_concurrency_zero(&["serve", "--tls-cert=c", "--tls-key=k", "--registry-concurrency=0"])]
    #[case::no_connections(&["serve", "--tls-cert=c", "--tls-key=k", "--max-connections=0"])]
    #[case::zero_header_timeout(&["serve", "--tls-cert=c", "--tls-key=k", "--header-read-timeout=0"])]
    #[case::idle_of_a_year(&["serve", "--tls-cert=c", "--tls-key=k", "--idle-timeout=31536000"])]
    #[case::cert_days(&["certs", "--days=4294967295"])]
    #[case::check_timeout(&["check", "--timeout=18446744073709551615", "-"])]
    fn out_of_range_values_are_usage_errors(#[case] args: &[&str]) {
        assert_eq!(error_kind(args), ErrorKind::ValueValidation);
    }

    #[test]
    fn an_idle_timeout_not_above_the_request_timeout_is_refused() {
        let mut all = vec!["serve", "--tls-cert", "c", "--tls-key", "k"];
        all.extend(["--request-timeout=30", "--idle-timeout=30"]);
        let Command::Serve(args) = parse(&all).expect("parses").command else {
            panic!("not serve");
        };
        let error = args.into_config().err().expect("refused");
        assert_eq!(
            error.to_string(),
            "--idle-timeout (30s) must be longer than --request-timeout (30s): an idle \
             connection would be closed under a request still being answered"
        );
    }

    #[test]
    fn raise_failure_policy_needs_the_own_namespace_and_builds_its_config() {
        assert_eq!(
            error_kind(&[
                "serve",
                "--tls-cert=c",
                "--tls-key=k",
                "--raise-failure-policy=mutating/pinhook",
            ]),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            error_kind(&[
                "serve",
                "--tls-cert=c",
                "--tls-key=k",
                "--own-namespace=pinhook-system",
                "--raise-failure-policy=mutating/pinhook",
                "--raise-interval=0",
            ]),
            ErrorKind::ValueValidation
        );
        assert_eq!(serve(&[]).own_namespace, None);
        let config = serve(&[
            "--own-namespace=pinhook-system",
            "--raise-failure-policy=mutating/pinhook,validating/pinhook",
        ]);
        assert_eq!(
            config.own_namespace,
            Some(crate::own_namespace::Config {
                namespace: "pinhook-system".into(),
                webhooks: vec![
                    WebhookRef::Mutating("pinhook".into()),
                    WebhookRef::Validating("pinhook".into()),
                ],
                interval: Duration::from_secs(5),
            })
        );
    }

    #[test]
    fn serve_policy_file_is_watched_source() {
        let config = serve(&["--policy", "policy.yaml"]);
        assert_eq!(
            config.policy,
            PolicySource::File(PathBuf::from("policy.yaml"))
        );
    }

    #[test]
    fn unreadable_registry_ca_names_the_file() {
        let parsed = parse(&[
            "serve",
            "--tls-cert=c",
            "--tls-key=k",
            "--registry-ca=/nonexistent/ca.pem",
        ]);
        let Command::Serve(args) = parsed.expect("parses").command else {
            panic!("not serve");
        };
        let error = args.into_config().err().expect("refused");
        assert_eq!(
            error.to_string(),
            "failed to read registry CA '/nonexistent/ca.pem'"
        );
    }

    #[test]
    fn env_vars_set_fields_and_flags_win() {
        let vars = [
            ("PINHOOK_LISTEN", "127.0.0.1:7000"),
            ("PINHOOK_TLS_CERT", "env.crt"),
            ("PINHOOK_TLS_KEY", "env.key"),
            ("PINHOOK_FORM", "digest"),
            ("PINHOOK_INSECURE_REGISTRY", "x.example,y.example"),
            ("PINHOOK_CACHE_TTL", "7"),
            ("PINHOOK_OWNER_REVISION_TTL", "8"),
            ("PINHOOK_NAMESPACE_CACHE_TTL", "3"),
            ("PINHOOK_SHUTDOWN_DELAY", "9"),
            ("PINHOOK_CHECK_OUTPUT", "yaml"),
            ("PINHOOK_CHECK_NAMESPACE", "team"),
            ("PINHOOK_CHECK_TIMEOUT", "11"),
            ("PINHOOK_CERT_SANS", "a.example,10.0.0.1"),
            ("PINHOOK_CERT_DAYS", "30"),
            ("PINHOOK_CERT_OUT", "env-certs"),
        ];
        let _env = env_lock();
        for (key, value) in vars {
            std::env::set_var(key, value);
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("pinhook").chain(args.iter().copied()))
        };
        let serve = parse(&["serve"]);
        let serve_flag = parse(&["serve", "--listen=127.0.0.1:1"]);
        let check = parse(&["check", "-"]);
        let certs = parse(&["certs"]);
        for (key, _) in vars {
            std::env::remove_var(key);
        }

        let Command::Serve(args) = serve.expect("serve parses").command else {
            panic!("not serve");
        };
        let config = args.into_config().expect("converts");
        assert_eq!(
            config.listen,
            "127.0.0.1:7000".parse::<SocketAddr>().expect("addr")
        );
        assert_eq!(tls_files(&config), ("env.crt".into(), "env.key".into()));
        assert_eq!(fixed_form(&config), FormSetting::Digest);
        assert_eq!(
            config.registry.insecure_hosts,
            ["x.example", "y.example"].map(String::from).into()
        );
        assert_eq!(config.cache.hit_ttl, Duration::from_secs(7));
        assert_eq!(config.owner_revision_ttl, Duration::from_secs(8));
        assert_eq!(config.namespace_label_ttl, Duration::from_secs(3));
        assert_eq!(config.shutdown_delay, Duration::from_secs(9));

        let Command::Serve(args) = serve_flag.expect("serve parses").command else {
            panic!("not serve");
        };
        let listen = args.into_config().expect("converts").listen;
        assert_eq!(listen, "127.0.0.1:1".parse::<SocketAddr>().expect("addr"));

        let Command::Check(args) = check.expect("check parses").command else {
            panic!("not check");
        };
        let config = args.into_config().expect("converts");
        assert_eq!(config.output, check::Output::Yaml);
        assert_eq!(config.namespace, "team");
        assert_eq!(config.timeout, Duration::from_secs(11));

        let Command::Certs(args) = certs.expect("certs parses").command else {
            panic!("not certs");
        };
        let config = args.into_config();
        assert_eq!(config.request.extra_sans, ["a.example", "10.0.0.1"]);
        assert_eq!(config.request.validity_days, 30);
        assert_eq!(config.out, PathBuf::from("env-certs"));
    }

    #[test]
    fn help_and_version_work_with_a_broken_environment() {
        let _env = env_lock();
        std::env::set_var("PINHOOK_LISTEN", "not an address");
        std::env::set_var("PINHOOK_LOG_FORMAT", "nonsense");
        let help = Cli::try_parse_from(["pinhook", "serve", "--help"]).map(|_| ());
        let version = Cli::try_parse_from(["pinhook", "--version"]).map(|_| ());
        let run = Cli::try_parse_from(["pinhook", "serve", "--tls-cert=c", "--tls-key=k"]);
        std::env::remove_var("PINHOOK_LISTEN");
        std::env::remove_var("PINHOOK_LOG_FORMAT");
        assert_eq!(help.expect_err("help").kind(), ErrorKind::DisplayHelp);
        assert_eq!(
            version.expect_err("version").kind(),
            ErrorKind::DisplayVersion
        );
        // The same environment does break a real run.
        let kind = run.expect_err("bad env").kind();
        assert!(
            matches!(kind, ErrorKind::InvalidValue | ErrorKind::ValueValidation),
            "{kind:?}"
        );
    }

    #[test]
    fn usage_errors() {
        let cases: &[(&[&str], ErrorKind)] = &[
            (
                &["serve", "--tls-key=k"],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                &[
                    "serve",
                    "--tls-cert=c",
                    "--tls-key=k",
                    "--form=digest",
                    "--policy=p",
                ],
                ErrorKind::ArgumentConflict,
            ),
            (
                &["serve", "--tls-cert=c", "--tls-key=k", "--listen=nowhere"],
                ErrorKind::ValueValidation,
            ),
            (
                &["serve", "--tls-cert=c", "--tls-key=k", "--cache-ttl=-1"],
                ErrorKind::ValueValidation,
            ),
            (
                &["serve", "--tls-cert=c", "--tls-key=k", "--form=short"],
                ErrorKind::InvalidValue,
            ),
            (
                &[
                    "serve",
                    "--tls-cert=c",
                    "--tls-key=k",
                    "--registry-timeout=-1",
                ],
                ErrorKind::ValueValidation,
            ),
            (
                &[
                    "serve",
                    "--tls-cert=c",
                    "--tls-key=k",
                    "--registry-timeout=soon",
                ],
                ErrorKind::ValueValidation,
            ),
            (&["check"], ErrorKind::MissingRequiredArgument),
            (
                &["check", "--token-file=t", "-"],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                &["check", "--server-ca=ca", "-"],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                &["check", "--server=https://h", "--policy=p", "-"],
                ErrorKind::ArgumentConflict,
            ),
            (&["check", "-o", "xml", "-"], ErrorKind::InvalidValue),
            (&["certs", "--days=forever"], ErrorKind::ValueValidation),
            (&["resolve"], ErrorKind::MissingRequiredArgument),
            (&["--log-format=xml", "certs"], ErrorKind::InvalidValue),
        ];
        for (args, kind) in cases {
            assert_eq!(error_kind(args), *kind, "{args:?}");
        }
    }

    #[test]
    fn check_local_and_remote() {
        let local = check(&["a.yaml", "dir", "--policy=p.yaml", "-o", "json", "-n", "ns"]);
        assert_eq!(local.inputs, ["a.yaml", "dir"]);
        assert_eq!(local.output, check::Output::Json);
        assert_eq!(local.namespace, "ns");
        assert_eq!(local.timeout, Duration::from_secs(120));
        assert!(matches!(
            &local.target,
            Target::Local { policy: Some(p), registry } if p == Path::new("p.yaml")
                && registry.request_timeout == Duration::from_secs(5)
        ));

        let remote = check(&[
            "-",
            "--server=https://pinhook:8443",
            "--token-file=token",
            "--server-ca=ca.pem",
            "--timeout=3",
        ]);
        assert_eq!(remote.output, check::Output::Table);
        assert_eq!(remote.namespace, "default");
        assert_eq!(remote.timeout, Duration::from_secs(3));
        let Target::Remote(server) = remote.target else {
            panic!("not remote");
        };
        assert_eq!(
            server,
            Remote {
                server: "https://pinhook:8443".into(),
                token_file: Some("token".into()),
                server_ca: Some("ca.pem".into()),
            }
        );
    }

    #[test]
    fn resolve_checks_the_reference() {
        let resolve = |args: &[&str]| match parse(args).expect("parses").command {
            Command::Resolve(args) => args.into_config(),
            other => panic!("not resolve: {other:?}"),
        };
        let config = resolve(&["resolve", "example.com/app:1", "--form=digest"]).expect("valid");
        assert_eq!(config.image, "example.com/app:1");
        assert_eq!(config.form, PinForm::DigestOnly);
        assert_eq!(
            config.reference,
            Reference::parse("example.com/app:1").expect("ref")
        );
        let error = resolve(&["resolve", "Not Valid"]).expect_err("invalid");
        assert!(
            error
                .to_string()
                .starts_with("invalid image reference \"Not Valid\""),
            "{error}"
        );
    }

    #[test]
    fn certs_defaults_and_repeated_sans() {
        let Command::Certs(args) = parse(&["certs", "--san=a", "--san=b,c"])
            .expect("parses")
            .command
        else {
            panic!("not certs");
        };
        let config = args.into_config();
        assert_eq!(config.request.service, "pinhook");
        assert_eq!(config.request.namespace, "pinhook-system");
        assert_eq!(config.request.extra_sans, ["a", "b", "c"]);
        assert_eq!(config.request.validity_days, 365);
        assert_eq!(config.out, PathBuf::from("certs"));
    }
}
