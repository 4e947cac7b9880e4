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
//! `defaultCacheDuration` (zero: not cached). Config reading is [`config`], the wire format
//! [`protocol`].
//!
//! Caveats: as in kubelet, concurrent first requests for different images of one registry
//! each execute the plugin (the cache key is known only from the answer). An admission waits
//! for a plugin at most [`Settings::wait`]; the execution goes on in the background up to
//! [`Settings::exec_timeout`] and its answer serves the admissions after.
//!
//! Never: logs or reports what a plugin printed (a failure is a warning naming the provider and
//! the kind of failure, and a metric), panics on a plugin's behaviour, or runs a provider that
//! wants ServiceAccount tokens (refused when the config is read).

pub mod config;
mod protocol;

pub use protocol::ResponseError;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::{BoxFuture, FutureExt, Shared};
use tracing::{debug, warn};

use self::config::ProviderSpec;
use self::protocol::{CacheKeyType, Response};
use super::exec::{self, ExecError, Program};
use super::keyring::{image_matches, CredentialSource, Provided};
use super::Credential;
use crate::metrics::Metrics;

pub use self::config::ProviderConfigError;
pub use self::protocol::ResponseError as ProviderResponseError;

/// The cache key kubelet uses for `cacheKeyType: Global`.
const GLOBAL_CACHE_KEY: &str = "global";
/// How often expired cache entries are swept (kubelet's `cachePurgeInterval`).
const PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);

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
    #[error("no answer within {0:?} (still running; its answer serves later admissions)")]
    Waited(Duration),
    #[error("the plugin run was lost")]
    Lost,
}

struct Plugin {
    spec: ProviderSpec,
    settings: Settings,
    metrics: Option<Arc<Metrics>>,
    state: Mutex<State>,
}

/// One exec's outcome, shared by every admission that waited for it.
type Outcome = Result<Arc<Vec<(String, Credential)>>, PluginError>;
type Flight = Shared<BoxFuture<'static, Outcome>>;

#[derive(Default)]
struct State {
    cache: HashMap<String, Cached>,
    /// Executions under way, by image.
    flights: HashMap<String, Flight>,
    last_purge: Option<Instant>,
}

struct Cached {
    entries: Arc<Vec<(String, Credential)>>,
    expires_at: Instant,
}

// === impl Settings ===

impl Default for Settings {
    fn default() -> Self {
        Settings {
            exec_timeout: Duration::from_secs(60),
            wait: Duration::from_secs(5),
            max_output: 1024 * 1024,
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
        let plugins = specs
            .into_iter()
            .map(|spec| {
                Arc::new(Plugin {
                    spec,
                    settings,
                    metrics: metrics.clone(),
                    state: Mutex::new(State::default()),
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
        let answers = futures::future::join_all(
            self.plugins
                .iter()
                .map(|plugin| plugin.clone().provide(image)),
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
            PluginError::Lost => "its run was lost".to_string(),
        }
    }
}

// === impl Plugin ===

impl Plugin {
    async fn provide(self: Arc<Self>, image: &str) -> Outcome {
        if !self
            .spec
            .match_images
            .iter()
            .any(|p| image_matches(p, image))
        {
            return Ok(Arc::default());
        }
        let flight = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.purge_if_due();
            if let Some(entries) = state.cached(image) {
                return Ok(entries);
            }
            match state.flights.get(image) {
                Some(flight) => flight.clone(),
                None => {
                    let flight = self.clone().start(image.to_string());
                    state.flights.insert(image.to_string(), flight.clone());
                    flight
                }
            }
        };
        match tokio::time::timeout(self.settings.wait, flight).await {
            Ok(outcome) => outcome,
            Err(_) => Err(PluginError::Waited(self.settings.wait)),
        }
    }

    /// Runs the plugin for `image` in a task of its own, so it finishes (and its answer is
    /// cached) even when every admission that asked has given up.
    fn start(self: Arc<Self>, image: String) -> Flight {
        let task = tokio::spawn(async move {
            let outcome = self.execute(&image).await;
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            // Same lock as the lookups: no admission can miss both the flight and the cache.
            state.flights.remove(&image);
            outcome.map(|response| {
                let slot = self.cache_slot(&image, &response);
                let entries = Arc::new(response.auth);
                if let Some((key, expires_at)) = slot {
                    let cached = Cached {
                        entries: entries.clone(),
                        expires_at,
                    };
                    state.cache.insert(key, cached);
                }
                entries
            })
        });
        async move { task.await.unwrap_or(Err(PluginError::Lost)) }
            .boxed()
            .shared()
    }

    async fn execute(&self, image: &str) -> Result<Response, PluginError> {
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
        let request = protocol::request(&self.spec.api_version, image);
        let result = match exec::run(&program, &request).await {
            Ok(stdout) => {
                protocol::decode(&stdout, &self.spec.api_version).map_err(PluginError::from)
            }
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

    /// Where and until when kubelet caches `response` for `image`; `None` when it does not.
    fn cache_slot(&self, image: &str, response: &Response) -> Option<(String, Instant)> {
        let duration = response
            .cache_duration
            .unwrap_or(self.spec.default_cache_duration);
        if duration.is_zero() {
            return None;
        }
        let key = match response.cache_key_type {
            CacheKeyType::Image => image.to_string(),
            CacheKeyType::Registry => registry_of(image).to_string(),
            CacheKeyType::Global => GLOBAL_CACHE_KEY.to_string(),
        };
        Some((key, Instant::now().checked_add(duration)?))
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

// === impl State ===

impl State {
    /// kubelet's `getCachedCredentials`: the image's entry, else its registry's, else global.
    fn cached(&mut self, image: &str) -> Option<Arc<Vec<(String, Credential)>>> {
        let now = Instant::now();
        for key in [image, registry_of(image), GLOBAL_CACHE_KEY] {
            match self.cache.get(key) {
                Some(entry) if entry.expires_at > now => return Some(entry.entries.clone()),
                Some(_) => {
                    self.cache.remove(key);
                }
                None => {}
            }
        }
        None
    }

    fn purge_if_due(&mut self) {
        let now = Instant::now();
        if self
            .last_purge
            .is_some_and(|last| now < last + PURGE_INTERVAL)
        {
            return;
        }
        self.cache.retain(|_, entry| entry.expires_at > now);
        self.last_purge = Some(now);
    }
}

/// kubelet's `parseRegistry`: everything before the first `/`.
fn registry_of(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

#[cfg(test)]
mod tests;
