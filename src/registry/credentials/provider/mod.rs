//! kubelet credential provider plugins, run as kubelet runs them (kubernetes
//! `pkg/credentialprovider/plugin/plugin.go`): the same `CredentialProviderConfig`, the same
//! binaries, the same `CredentialProviderRequest` on stdin, and the answers cached the same way,
//! so pinhook resolves with exactly the credentials the node will pull with. On EKS, GKE and AKS
//! that is how private registries are reached at all (`ecr-credential-provider`,
//! `auth-provider-gcp`, `acr-credential-provider`).
//!
//! Owns: [`CredentialProviders`], a keyring [`CredentialSource`]; for one image, each provider
//! in config order whose `matchImages` covers it (kubelet's `URLsMatchStr`) answers from its
//! cache (looked up under the image, then its registry, then the global key) or is executed.
//! One execution per image however many admissions ask at once (kubelet's single-flight key);
//! the answer is cached under its `cacheKeyType` for its `cacheDuration`, else the provider's
//! `defaultCacheDuration` (zero: not cached), in a cache bounded in bytes (`answers`).
//! Config reading is [`config`], the wire format [`protocol`].
//!
//! Bounds (issue 25: a review chooses how many distinct images it names): at most
//! [`Settings::per_provider`] runs of one provider and [`Settings::total`] of all at once
//! ([`RunLimits`]); an execution waits for a slot first come, first served. An admission
//! waits for a plugin at most [`Settings::wait`]; when the last admission waiting on an
//! execution stops waiting (its wait ended, or the admission's own deadline dropped it), the
//! execution is cancelled: not started if it still waited for a slot (the admission hears the
//! provider was busy), its process killed if it ran. A run no admission waits for never goes
//! on: a plugin slower than [`Settings::wait`] is never cached.
//!
//! A failed run (an exit, an unusable answer, no answer within [`Settings::wait`]) stands for
//! [`Settings::failure_ttl`] for every image of its registry named by the same tenant, which
//! hears the failure again without a run (issue 44; kubelet keeps no failures, and a review
//! naming a hundred images of a registry whose plugin fails ran it a hundred times). Another
//! tenant's images still run it: an image one tenant names may make a plugin fail.
//!
//! A provider with `tokenAttributes` (KEP-4412) is handed a token of the Pod's ServiceAccount
//! for its audience and the account's annotations it names ([`Puller`], tokens from
//! [`super::service_account_tokens::ServiceAccounts`]), as kubelet 1.34 hands them: no account
//! and `requireServiceAccount`, or a required annotation missing, and it is not run (silently,
//! as kubelet); its answers are cached under the account (namespace, name, UID, the
//! annotations handed) and, for `cacheType: Token`, the token's hash too; per account, a cached
//! answer needs no token. An answer not cached per token may not give the token back as a
//! password. A failure (the account unreadable, no token, a failed run) stands for the same
//! account only.
//!
//! Caveats: as in kubelet, concurrent first requests for different images of one registry
//! each execute the plugin (the cache key is known only from the answer).
//!
//! Never: logs or reports what a plugin printed (a failure is a warning naming the provider and
//! the kind of failure, and a metric), panics on a plugin's behaviour, or shows a token.

mod answers;
pub mod config;
mod protocol;

pub use protocol::ResponseError;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::{BoxFuture, FutureExt, Shared};
use tracing::{debug, warn};

use self::answers::{Answer, Answers};
use self::config::{ProviderSpec, TokenAttributes, TokenCacheType};
use self::protocol::{CacheKeyType, Response};
use super::exec::{self, ExecError, Program};
use super::keyring::{image_matches, CredentialSource, Provided};
use super::limits::{RunLimits, RunPermit, DEFAULT_PER_PROGRAM, DEFAULT_TOTAL};
use super::service_account_tokens::Puller;
use super::Credential;
use crate::metrics::Metrics;
use crate::signatures::trusted_root::hex;

pub use self::config::ProviderConfigError;
pub use self::protocol::ResponseError as ProviderResponseError;

/// How long a failed run stands for its tenant's images of its registry, by default: an
/// image pull's first back-off in kubelet is 10 s too.
pub const DEFAULT_FAILURE_TTL: Duration = Duration::from_secs(10);

/// The cache key kubelet uses for `cacheKeyType: Global`.
const GLOBAL_CACHE_KEY: &str = "global";

/// `--image-credential-provider-config` and `--image-credential-provider-bin-dir`, as kubelet's
/// flags of the same names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderFiles {
    /// A `CredentialProviderConfig` file, or a directory of them.
    pub config: PathBuf,
    /// Where each provider's binary is, under its name.
    pub bin_dir: PathBuf,
    pub settings: Settings,
}

/// Bounds on running plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// A plugin still running after this is killed (kubelet: one minute).
    pub exec_timeout: Duration,
    /// How long one admission waits for a plugin before resolving without it.
    pub wait: Duration,
    /// Bytes of output a plugin may print.
    pub max_output: usize,
    /// Runs of one provider at once; more wait for a slot (at least 1).
    pub per_provider: usize,
    /// Runs of all providers at once (at least 1).
    pub total: usize,
    /// Bytes of cached answers per provider.
    pub cache_bytes: u64,
    /// How long a failed run (an exit, an unusable answer, no answer within `wait`) stands
    /// for every image of its registry that the same tenant names (zero: not remembered).
    pub failure_ttl: Duration,
}

/// The configured plugins, as one keyring source (kubelet's external provider keyring).
pub struct CredentialProviders {
    plugins: Vec<Arc<Plugin>>,
}

/// Why one plugin gave no credentials.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PluginError {
    #[error(transparent)]
    Exec(Arc<ExecError>),
    #[error("unusable answer: {0}")]
    Response(#[from] ResponseError),
    #[error("no answer within {0:?} (the run was stopped)")]
    Waited(Duration),
    #[error(
        "not run: {per_provider} runs of this provider or {total} of all were under way for {waited:?}"
    )]
    Busy {
        per_provider: usize,
        total: usize,
        waited: Duration,
    },
    #[error("the plugin run was lost")]
    Lost,
    #[error("not run: it failed for this registry less than {ttl:?} ago ({error})")]
    Remembered {
        ttl: Duration,
        error: Box<PluginError>,
    },
    /// The ServiceAccount could not be read or no token of it had (the apiserver's reason).
    #[error("not run: {0}")]
    Account(String),
    #[error("not run: it is handed the Pod's ServiceAccount token, and there is no cluster to ask for one here")]
    NoCluster,
}

/// What a plugin handed tokens is to do for one image and puller.
enum Handed {
    Run(Handing),
    /// The account's answer is cached (`cacheType: ServiceAccount`): no token asked for.
    Cached(Arc<Vec<(String, Credential)>>),
    NotRun,
}

/// What one run hands a plugin, and the part of its cache key that says for whom.
#[derive(Default)]
struct Handing {
    token: Option<Arc<str>>,
    annotations: BTreeMap<String, String>,
    /// Empty for a plugin handed nothing; else the account's coordinates (and the token's
    /// hash for `cacheType: Token`), length-prefixed.
    key: String,
}

struct Plugin {
    spec: ProviderSpec,
    settings: Settings,
    metrics: Option<Arc<Metrics>>,
    /// Shared by every plugin of the config.
    limits: Arc<RunLimits>,
    answers: Answers,
    flights: Mutex<Flights>,
}

/// One exec's outcome, shared by every admission that waited for it.
type Outcome = Result<Arc<Vec<(String, Credential)>>, PluginError>;
type Flight = Shared<BoxFuture<'static, Outcome>>;

/// Executions under way, by image.
#[derive(Default)]
struct Flights {
    running: HashMap<String, InFlight>,
    next_id: u64,
}

struct InFlight {
    /// Tells this execution from a later one for the same image.
    id: u64,
    flight: Flight,
    /// Alive while an admission waits; the last one gone cancels the execution.
    interest: Weak<Interest>,
    /// Set once the execution has its slot and starts the process.
    started: Arc<AtomicBool>,
}

/// Held by each admission waiting on an execution; the last one dropped cancels it (the
/// task is aborted, dropping its child, which is killed: `kill_on_drop`).
struct Interest {
    task: tokio::task::AbortHandle,
}

impl Drop for Interest {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Removes an execution from [`Flights`] when its task ends or is cancelled, if it is still
/// the one registered for its image and puller.
struct Landing {
    plugin: Weak<Plugin>,
    flight: String,
    id: u64,
}

impl Drop for Landing {
    fn drop(&mut self) {
        if let Some(plugin) = self.plugin.upgrade() {
            plugin.flights().land(&self.flight, self.id);
        }
    }
}

// === impl Settings ===

impl Default for Settings {
    fn default() -> Self {
        Settings {
            exec_timeout: Duration::from_secs(60),
            wait: Duration::from_secs(5),
            max_output: 1024 * 1024,
            per_provider: DEFAULT_PER_PROGRAM,
            total: DEFAULT_TOTAL,
            cache_bytes: 4 * 1024 * 1024,
            failure_ttl: DEFAULT_FAILURE_TTL,
        }
    }
}

/// Reads a plugin's stdout as [`CredentialProviders`] does (checked against `api_version`,
/// decoded strictly) and counts its `auth` entries: the protocol parser's public face, for
/// fuzzing and tests. Never quotes the answer in its error.
pub fn parse_response(stdout: &[u8], api_version: &str) -> Result<usize, ResponseError> {
    protocol::decode(stdout, api_version).map(|response| response.auth.len())
}

// === impl CredentialProviders ===

impl CredentialProviders {
    /// Reads and validates the config (a file or directory) with its binaries.
    pub fn load(
        files: &ProviderFiles,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<CredentialProviders, ProviderConfigError> {
        let specs = config::load(&files.config, &files.bin_dir)?;
        Ok(CredentialProviders::new(specs, files.settings, metrics))
    }

    pub fn new(
        specs: Vec<ProviderSpec>,
        settings: Settings,
        metrics: Option<Arc<Metrics>>,
    ) -> CredentialProviders {
        let limits = Arc::new(RunLimits::new(settings.per_provider, settings.total));
        let plugins = specs
            .into_iter()
            .map(|spec| {
                Arc::new(Plugin {
                    spec,
                    settings,
                    metrics: metrics.clone(),
                    limits: limits.clone(),
                    answers: Answers::new(settings.cache_bytes),
                    flights: Mutex::new(Flights::default()),
                })
            })
            .collect();
        CredentialProviders { plugins }
    }

    /// The configured provider names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.plugins.iter().map(|p| p.spec.name.as_str()).collect()
    }
}

#[async_trait]
impl CredentialSource for CredentialProviders {
    fn name(&self) -> &str {
        "credential provider plugins"
    }

    async fn provide(&self, image: &str) -> Provided {
        self.provide_for(image, &Puller::NONE).await
    }

    fn account_annotations(&self) -> Option<Vec<String>> {
        let mut keys: Option<Vec<String>> = None;
        for attributes in self.plugins.iter().filter_map(|p| p.spec.token.as_ref()) {
            let wanted = keys.get_or_insert_with(Vec::new);
            wanted.extend(attributes.required_annotation_keys.iter().cloned());
            wanted.extend(attributes.optional_annotation_keys.iter().cloned());
        }
        keys
    }

    async fn provide_for(&self, image: &str, puller: &Puller<'_>) -> Provided {
        let answers = futures::future::join_all(
            self.plugins
                .iter()
                .map(|plugin| plugin.clone().provide(image, puller)),
        )
        .await;
        let mut provided = Provided::default();
        for (plugin, answer) in self.plugins.iter().zip(answers) {
            match answer {
                // kubelet adds every provider's answer to one keyring, earlier providers first.
                Ok(entries) => provided.entries.extend(entries.iter().cloned()),
                // Short (the apiserver cuts warnings at 120 characters); the log has the rest.
                Err(e) => provided.warnings.push(format!(
                    "pinhook: credential provider {} gave no credentials ({}); resolved without it",
                    plugin.spec.name,
                    e.summary()
                )),
            }
        }
        provided
    }
}

// === impl PluginError ===

impl PluginError {
    /// A few words for the review's warning: what went wrong, never what the plugin printed.
    pub fn summary(&self) -> String {
        match self {
            PluginError::Exec(e) => match e.as_ref() {
                ExecError::Spawn { .. } => "failed to start".to_string(),
                ExecError::Timeout { timeout, .. } => format!("did not finish within {timeout:?}"),
                ExecError::OutputTooLarge { limit, .. } => {
                    format!("printed more than {limit} bytes")
                }
                ExecError::Exit { status, .. } => format!("exited with {status}"),
                ExecError::Io { .. } => "failed to talk to it".to_string(),
            },
            PluginError::Response(e) => e.summary().to_string(),
            PluginError::Waited(wait) => format!("no answer within {wait:?}"),
            PluginError::Busy { .. } => "busy: too many runs under way; not run".to_string(),
            PluginError::Lost => "its run was lost".to_string(),
            PluginError::Remembered { ttl, error } => {
                format!(
                    "failed for this registry within {ttl:?}: {}",
                    error.summary()
                )
            }
            PluginError::Account(reason) => reason.clone(),
            PluginError::NoCluster => "not run: no cluster to ask a ServiceAccount token of".into(),
        }
    }
}

// === impl Plugin ===

impl Plugin {
    async fn provide(self: Arc<Self>, image: &str, puller: &Puller<'_>) -> Outcome {
        if !self
            .spec
            .match_images
            .iter()
            .any(|p| image_matches(p, image))
        {
            return Ok(Arc::default());
        }
        let handing = match &self.spec.token {
            None => Handing::default(),
            Some(attributes) => match self.handing(attributes, puller, image).await? {
                Handed::Run(handing) => handing,
                Handed::Cached(entries) => return Ok(entries),
                // kubelet: no ServiceAccount and one required, or a required annotation
                // missing: not run (kubelet logs it at -v=5 and pulls without it).
                Handed::NotRun => return Ok(Arc::default()),
            },
        };
        let flight_key = cache_key(image, &handing.key);
        let failures = failure_scope(image, &handing.key);
        let (flight, interest, started) = {
            let mut flights = self.flights();
            if let Some(entries) = self.cached(image, &handing.key) {
                return Ok(entries);
            }
            let tenant = crate::tenant::current();
            if let Some(error) = self.answers.failure(&tenant, &failures) {
                return Err(PluginError::Remembered {
                    ttl: self.settings.failure_ttl,
                    error: Box::new(error),
                });
            }
            let joined = flights
                .running
                .get(flight_key.as_ref())
                .and_then(|running| {
                    // An execution whose last waiter is gone is being cancelled: start another.
                    let interest = running.interest.upgrade()?;
                    Some((running.flight.clone(), interest, running.started.clone()))
                });
            match joined {
                Some(joined) => joined,
                None => self.start(&mut flights, image, flight_key.into_owned(), handing),
            }
        };
        let outcome = match tokio::time::timeout(self.settings.wait, flight).await {
            Ok(outcome) => outcome,
            Err(_) if !started.load(Ordering::SeqCst) => Err(PluginError::Busy {
                per_provider: self.limits.per_program(),
                total: self.limits.total(),
                waited: self.settings.wait,
            }),
            Err(_) => {
                let error = PluginError::Waited(self.settings.wait);
                self.remember_failure(&crate::tenant::current(), &failures, &error);
                Err(error)
            }
        };
        // Not under the lock: the last interest dropped cancels the execution.
        drop(interest);
        outcome
    }

    /// The flights, locked.
    fn flights(&self) -> std::sync::MutexGuard<'_, Flights> {
        self.flights.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the plugin for `image` (handed `handing`) in a task of its own once a slot is
    /// free, registered as `flight_key`; the task is cancelled (its child killed) when the
    /// returned interest and every clone are dropped.
    fn start(
        self: &Arc<Self>,
        flights: &mut Flights,
        image: &str,
        flight_key: String,
        handing: Handing,
    ) -> (Flight, Arc<Interest>, Arc<AtomicBool>) {
        flights.next_id += 1;
        let id = flights.next_id;
        let started = Arc::new(AtomicBool::new(false));
        let landing = Landing {
            plugin: Arc::downgrade(self),
            flight: flight_key.clone(),
            id,
        };
        // (the tenant of the admission that starts the run: the task below has none of its own)
        let tenant = crate::tenant::current();
        let task = tokio::spawn({
            let (plugin, image, started) = (self.clone(), image.to_string(), started.clone());
            async move {
                let landing = landing;
                let Some(slot) = plugin.limits.acquire(&plugin.spec.name, &tenant).await else {
                    return Err(PluginError::Lost);
                };
                started.store(true, Ordering::SeqCst);
                let outcome = plugin.execute(&image, &handing, slot).await;
                if let Err(error) = &outcome {
                    let failures = failure_scope(&image, &handing.key);
                    plugin.remember_failure(&tenant, &failures, error);
                }
                // Cached before the execution leaves the flights (the landing, under their
                // lock): no admission misses both the execution and its answer.
                let outcome = outcome.map(|response| {
                    let slot = plugin.cache_slot(&image, &handing.key, &response);
                    let entries = Arc::new(response.auth);
                    if let Some((key, ttl)) = slot {
                        let answer = Answer {
                            entries: entries.clone(),
                            ttl,
                        };
                        plugin.answers.insert(key, answer);
                    }
                    entries
                });
                drop(landing);
                outcome
            }
        });
        let interest = Arc::new(Interest {
            task: task.abort_handle(),
        });
        let flight = async move { task.await.unwrap_or(Err(PluginError::Lost)) }
            .boxed()
            .shared();
        flights.running.insert(
            flight_key,
            InFlight {
                id,
                flight: flight.clone(),
                interest: Arc::downgrade(&interest),
                started: started.clone(),
            },
        );
        (flight, interest, started)
    }

    /// Runs the plugin for `image`, handed `handing`, holding `slot` until its process is
    /// reaped.
    async fn execute(
        &self,
        image: &str,
        handing: &Handing,
        slot: RunPermit,
    ) -> Result<Response, PluginError> {
        let name = &self.spec.name;
        debug!(provider = %name, image, "running credential provider");
        self.count_exec();
        let program = Program {
            path: &self.spec.path,
            args: &self.spec.args,
            env: &self.spec.env,
            timeout: self.settings.exec_timeout,
            max_output: self.settings.max_output,
        };
        let handed = protocol::Handed {
            token: handing.token.as_deref(),
            annotations: Some(&handing.annotations),
        };
        let request = protocol::request(&self.spec.api_version, image, handed);
        let per_token = self
            .spec
            .token
            .as_ref()
            .is_some_and(|t| t.cache_type == TokenCacheType::Token);
        let result = match exec::run(&program, &request, Some(slot)).await {
            Ok(stdout) => protocol::decode(&stdout, &self.spec.api_version)
                .and_then(|response| match (&handing.token, per_token) {
                    (Some(token), false) => {
                        protocol::refuse_echoed_token(&response, token).map(|()| response)
                    }
                    _ => Ok(response),
                })
                .map_err(PluginError::from),
            Err(e) => Err(PluginError::Exec(Arc::new(e))),
        };
        if let Err(e) = &result {
            let reason = match e {
                PluginError::Exec(e) => e.reason(),
                _ => "invalid_response",
            };
            // The error names the provider and the failure, never the plugin's output.
            warn!(provider = %name, reason, error = %e, "credential provider failed");
            self.count_error(reason);
        }
        result
    }

    /// What this plugin (with `attributes`) is handed for `image` pulled by `puller`, as
    /// kubelet 1.34's `serviceAccountProvider` works it out. The account is read (cached
    /// 30 s) first; per account (`cacheType: ServiceAccount`) a cached answer needs no token;
    /// otherwise a token is asked for. A failure to read the account or get its token stands
    /// for that account's images of the registry for `failure_ttl`, as a failed run does.
    async fn handing(
        &self,
        attributes: &TokenAttributes,
        puller: &Puller<'_>,
        image: &str,
    ) -> Result<Handed, PluginError> {
        let Some(name) = puller.service_account else {
            return Ok(match attributes.require_service_account {
                true => Handed::NotRun,
                // Run with no token, under a key of its own.
                false => Handed::Run(Handing::default()),
            });
        };
        let Some(accounts) = puller.accounts else {
            return Err(PluginError::NoCluster);
        };
        let namespace = puller.namespace;
        let mut account = String::new();
        push_field(&mut account, namespace);
        push_field(&mut account, name);
        let failures = failure_scope(image, &account);
        let tenant = crate::tenant::current();
        if let Some(error) = self.answers.failure(&tenant, &failures) {
            return Err(PluginError::Remembered {
                ttl: self.settings.failure_ttl,
                error: Box::new(error),
            });
        }
        let failed = |error: PluginError| {
            self.count_error("service_account");
            self.remember_failure(&tenant, &failures, &error);
            warn!(provider = %self.spec.name, error = %error, "credential provider not run");
            error
        };
        // Each apiserver call is waited on as long as a plugin's answer (`wait`), so a stalled
        // apiserver costs an admission or the watch that long once per account and
        // `failure_ttl`, never a kube client's own timeout of minutes.
        let wait = self.settings.wait;
        let stalled = |what: &str| {
            PluginError::Account(format!(
                "the apiserver did not answer the {what} of serviceaccount {namespace}/{name} \
                 within {wait:?}"
            ))
        };
        let facts = match tokio::time::timeout(wait, accounts.account(namespace, name)).await {
            Ok(Ok(Some(facts))) => facts,
            Ok(Ok(None)) => {
                return Err(failed(PluginError::Account(format!(
                    "serviceaccount {namespace}/{name} not found"
                ))))
            }
            Ok(Err(e)) => return Err(failed(PluginError::Account(e.to_string()))),
            Err(_) => return Err(failed(stalled("read"))),
        };
        let mut annotations = BTreeMap::new();
        for key in &attributes.required_annotation_keys {
            let Some(value) = facts.annotations.get(key) else {
                debug!(
                    provider = %self.spec.name, namespace, account = name, annotation = %key,
                    "credential provider not run: the ServiceAccount lacks a required annotation"
                );
                return Ok(Handed::NotRun);
            };
            annotations.insert(key.clone(), value.clone());
        }
        for key in &attributes.optional_annotation_keys {
            if let Some(value) = facts.annotations.get(key) {
                annotations.insert(key.clone(), value.clone());
            }
        }
        let mut key = account;
        push_field(&mut key, &facts.uid);
        for (k, v) in &annotations {
            push_field(&mut key, k);
            push_field(&mut key, v);
        }
        let per_token = attributes.cache_type == TokenCacheType::Token;
        if !per_token {
            if let Some(entries) = self.cached(image, &key) {
                return Ok(Handed::Cached(entries));
            }
        }
        let asked = accounts.token(namespace, name, &facts.uid, &attributes.audience);
        let minted = match tokio::time::timeout(wait, asked).await {
            Ok(minted) => minted.map_err(|e| failed(PluginError::Account(e.to_string())))?,
            Err(_) => return Err(failed(stalled("TokenRequest"))),
        };
        if per_token {
            use sha2::Digest as _;
            let hash = sha2::Sha256::digest(minted.token.as_bytes());
            push_field(&mut key, "token");
            push_field(&mut key, &format!("sha256:{}", hex(&hash)));
        }
        Ok(Handed::Run(Handing {
            token: Some(minted.token),
            annotations,
            key,
        }))
    }

    /// Keeps `error` for `tenant`'s images of one registry (and account), `failures`
    /// ([`failure_scope`]), for `failure_ttl`.
    fn remember_failure(&self, tenant: &str, failures: &str, error: &PluginError) {
        let ttl = self.settings.failure_ttl;
        self.answers
            .insert_failure(tenant, failures, error.clone(), ttl);
    }

    /// kubelet's `getCachedCredentials`: the image's entry, else its registry's, else global,
    /// each for the same account (`account_key`).
    fn cached(&self, image: &str, account_key: &str) -> Option<Arc<Vec<(String, Credential)>>> {
        [image, registry_of(image), GLOBAL_CACHE_KEY]
            .into_iter()
            .find_map(|key| self.answers.get(&cache_key(key, account_key)))
    }

    /// Where and for how long kubelet caches `response` for `image` (and the account
    /// `account_key`); `None` when it does not.
    fn cache_slot(
        &self,
        image: &str,
        account_key: &str,
        response: &Response,
    ) -> Option<(String, Duration)> {
        let duration = response
            .cache_duration
            .unwrap_or(self.spec.default_cache_duration);
        if duration.is_zero() {
            return None;
        }
        let key = match response.cache_key_type {
            CacheKeyType::Image => image,
            CacheKeyType::Registry => registry_of(image),
            CacheKeyType::Global => GLOBAL_CACHE_KEY,
        };
        Some((cache_key(key, account_key).into_owned(), duration))
    }

    fn count_exec(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.credential_provider_exec(&self.spec.name);
        }
    }

    fn count_error(&self, reason: &'static str) {
        if let Some(metrics) = &self.metrics {
            metrics.credential_provider_error(&self.spec.name, reason);
        }
    }
}

// === impl Flights ===

impl Flights {
    /// Forgets execution `id` registered as `flight`, unless a later one took its place.
    fn land(&mut self, flight: &str, id: u64) {
        if self
            .running
            .get(flight)
            .is_some_and(|running| running.id == id)
        {
            self.running.remove(flight);
        }
    }
}

/// Appends `field` length-prefixed (kubelet's `generateCacheKey`): no two field lists give one
/// key.
fn push_field(key: &mut String, field: &str) {
    use std::fmt::Write as _;
    let _ = write!(key, "{}:{field}", field.len());
}

/// The key of `base` (an image, a registry or the global key) for `account_key`: what an
/// answer is cached under, and a run single-flighted under (its image's). A plugin handed
/// nothing (an empty `account_key`) keys by `base` itself, with no copy.
fn cache_key<'a>(base: &'a str, account_key: &str) -> Cow<'a, str> {
    if account_key.is_empty() {
        return Cow::Borrowed(base);
    }
    let mut key = String::new();
    push_field(&mut key, base);
    key.push_str(account_key);
    Cow::Owned(key)
}

/// What a failed run stands for: its registry, for the same account.
fn failure_scope<'a>(image: &'a str, account_key: &str) -> Cow<'a, str> {
    cache_key(registry_of(image), account_key)
}

/// kubelet's `parseRegistry`: everything before the first `/`.
fn registry_of(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

#[cfg(test)]
mod tests;
