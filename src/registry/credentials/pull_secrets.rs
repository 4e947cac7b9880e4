//! Pull secrets: which credentials a pod would pull with, read through the Kubernetes API.
//!
//! Owns: choosing the secret names the way kubelet and the ServiceAccount admission plugin do,
//! reading and briefly caching Secrets and ServiceAccounts (and reading, uncached, the stored Pod
//! of an `EphemeralContainers` request), and joining the pod's keyring with
//! the node-level one, kubelet's order: the pod's secrets, then the node's docker config, then
//! its credential provider plugins. The node's per-image sources (plugins, docker credential
//! helpers) are asked here about the pod's images, for the pod's ServiceAccount (the plugins
//! with `tokenAttributes` are handed its token, asked for through [`KubeTokens`]), so the
//! keyring handed on answers lookups without further I/O. A missing secret is not an error (kubelet ignores it too); it becomes a
//! warning for the user, and so does a plugin that failed. A malformed docker-config secret,
//! which kubelet refuses, is returned in [`PodKeyring::refused`] for admission to deny or
//! report.
//!
//! Bounds: the caches keep only what is read (a Secret's type and data, a ServiceAccount's
//! pull secret names, UID and annotations) and hold at most [`SECRET_CACHE_BYTES`] and [`ACCOUNT_CACHE_BYTES`],
//! each entry weighed as its names and data plus [`ENTRY_OVERHEAD`] (which also bounds how many
//! fit); a review's secret names are read once each, at most [`MAX_PULL_SECRETS`], and every
//! loop over them yields to the scheduler. What a review keeps of them, parsed, is held to its
//! shares of [`SecretBudget`] (per review, per namespace, in all): the first Secret past a
//! share and those after it are not used. Past the review's own share that is a refusal, like a
//! malformed Secret (the ones not read may be such); past a share other reviews hold, a warning.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::Api;
use serde_json::Value;
use tracing::debug;

use super::keyring::{Keyring, KeyringError};
use super::secret_budget::{SecretBudget, Short};
use super::service_account_tokens::{
    short_error, AccountFacts, KubeTokens, MintedToken, Puller, ServiceAccounts, TokenError,
};
use crate::shares::Taken;

/// Distinct pull secret names read for one pod; the rest are not read (with a warning). A
/// review may name one secret 100,000 times: each name is read once, and at most this many.
pub const MAX_PULL_SECRETS: usize = 128;

/// How long a read Secret or ServiceAccount answers before it is read again.
pub const OBJECT_TTL: Duration = Duration::from_secs(30);
/// Bytes of cached Secrets (a Secret may hold up to 1 MiB; 10,000 entries were 10 GiB; an
/// ordinary pull secret is under 4 KiB, so some 2,000 of those).
pub const SECRET_CACHE_BYTES: u64 = 8 * 1024 * 1024;
/// Bytes of cached ServiceAccounts.
pub const ACCOUNT_CACHE_BYTES: u64 = 4 * 1024 * 1024;
/// What a cached object costs beyond its names and data, in bytes.
pub const ENTRY_OVERHEAD: usize = 512;
/// Names looked at between two yields to the scheduler.
const YIELD_EVERY: usize = 256;

/// Where a pod's images are pulled from the credential point of view.
#[derive(Debug, Clone, Copy)]
pub struct PodContext<'a> {
    pub namespace: &'a str,
    /// Where the pod's pull secret names come from.
    pub secrets: SecretNames<'a>,
    /// The repositories (kubelet's `repoToPull`) that will be resolved: what credential
    /// sources (plugins, helpers) are asked about. Not read from the spec: an ephemeral
    /// container being added is not in the stored pod's spec yet, and an image already pinned
    /// by digest is not resolved.
    pub images: &'a [String],
    /// When credential sources (plugins, helpers) must have answered: past it the keyring is
    /// used without them, so a slow plugin cannot cost the pod's own secrets. `None`: no bound
    /// but the sources' own.
    pub sources_deadline: Option<tokio::time::Instant>,
    /// The pod's ServiceAccount where [`PodContext::secrets`] has no spec to read it from (a
    /// running Pod's, for the watch); a spec's own `serviceAccountName` wins.
    pub service_account: Option<&'a str>,
}

/// Where a pod's pull secret names come from (the admission plan or the watch's says which).
#[derive(Debug, Clone, Copy)]
pub enum SecretNames<'a> {
    /// A PodSpec's `imagePullSecrets`. A bare Pod's are final (the ServiceAccount admission
    /// plugin already filled them); a workload template with none gets its ServiceAccount's,
    /// as that plugin will give its Pods (pinhook does the plugin's work itself).
    Spec {
        spec: &'a Value,
        is_pod: bool,
        /// A custom resource's spec, read as a template's: its operator names its Pods'
        /// ServiceAccount, so one it does not name is not known (not `default`).
        custom: bool,
    },
    /// The stored Pod's, read by its name: the 1.20 `EphemeralContainers` object carries no spec.
    StoredPod(&'a str),
    /// These names, as a running Pod holds them.
    Listed(&'a [String]),
    /// None: the node's credentials only.
    None,
}

/// The keyring for one pod and what the user should hear about it.
#[derive(Debug, Default)]
pub struct PodKeyring {
    pub keyring: Keyring,
    pub warnings: Vec<String>,
    /// Pull secrets kubelet will refuse, failing every pull of the pod (a docker config that
    /// does not decode): one line each. The admission layer denies (enforce) or reports them.
    pub refused: Vec<String>,
    /// The bytes of [`SecretBudget`] this keyring's Secrets hold: keep it as long as the
    /// keyring.
    pub held: Taken,
}

/// Source of pull credentials.
#[async_trait]
pub trait PullSecrets: Send + Sync {
    async fn keyring_for(&self, pod: &PodContext<'_>) -> PodKeyring;

    /// True when a credential plugin is handed the Pod's ServiceAccount token (KEP-4412): the
    /// keyring then depends on the account too.
    fn hands_tokens(&self) -> bool {
        false
    }

    /// True when the keyring a pod gets is a function of its namespace, its pull Secret
    /// names, its images and, when [`PullSecrets::hands_tokens`], its ServiceAccount: Secrets
    /// read by name (each answering for [`OBJECT_TTL`]), the node's static credentials,
    /// plugins and helpers asked per image (an answer kept for its own cache duration, or
    /// none), a token per account. Then the same inputs give the same keyring but for what changed
    /// since those were read. False by default: a source this cannot be said of.
    fn keyring_by_names(&self) -> bool {
        false
    }
}

/// Node-level credentials only (no Kubernetes API configured, or `pinhook check` locally).
#[derive(Debug, Clone, Default)]
pub struct NodeOnly {
    pub node: Keyring,
}

/// Pod secrets read through the Kubernetes API, then the node-level keyring.
pub struct KubeSecrets {
    client: kube::Client,
    node: Keyring,
    secrets: moka::future::Cache<(String, String), Arc<Option<Secret>>>,
    accounts: moka::future::Cache<(String, String), Arc<Option<ServiceAccount>>>,
    budget: SecretBudget,
    tokens: KubeTokens,
    /// The annotation keys plugins handed a token are given (kept of a read ServiceAccount,
    /// nothing else of its annotations); `None`: no plugin is handed one.
    account_annotations: Option<Arc<BTreeSet<String>>>,
}

// === impl NodeOnly ===

#[async_trait]
impl PullSecrets for NodeOnly {
    fn hands_tokens(&self) -> bool {
        self.node.account_annotations().is_some()
    }

    fn keyring_by_names(&self) -> bool {
        true
    }

    async fn keyring_for(&self, pod: &PodContext<'_>) -> PodKeyring {
        let account = match pod.secrets {
            SecretNames::Spec { spec, custom, .. } => account_of(spec, custom),
            _ => pod.service_account,
        };
        let puller = Puller {
            namespace: pod.namespace,
            service_account: account,
            accounts: None,
        };
        let (keyring, warnings) =
            ask_sources(self.node.clone(), pod.images, &puller, pod.sources_deadline).await;
        PodKeyring {
            keyring,
            warnings,
            ..PodKeyring::default()
        }
    }
}

// === impl KubeSecrets ===

impl KubeSecrets {
    pub fn new(client: kube::Client, node: Keyring) -> KubeSecrets {
        KubeSecrets {
            account_annotations: node.account_annotations().map(Arc::new),
            tokens: KubeTokens::new(client.clone()),
            client,
            node,
            secrets: object_cache(SECRET_CACHE_BYTES, secret_bytes),
            accounts: object_cache(ACCOUNT_CACHE_BYTES, account_bytes),
            budget: SecretBudget::default(),
        }
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Option<Secret>>, kube::Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let key = (namespace.to_string(), name.to_string());
        self.secrets
            .try_get_with(key, async move {
                let secret = api.get_opt(name).await?;
                Ok(Arc::new(secret.map(kept_of_secret)))
            })
            .await
            .map_err(unshare)
    }

    async fn service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Option<ServiceAccount>>, kube::Error> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let key = (namespace.to_string(), name.to_string());
        let wanted = self.account_annotations.clone();
        self.accounts
            .try_get_with(key, async move {
                let account = api.get_opt(name).await?;
                Ok(Arc::new(account.map(|account| {
                    kept_of_account(account, wanted.as_deref())
                })))
            })
            .await
            .map_err(unshare)
    }

    /// The pod's spec for objects that carry none (the 1.20 `EphemeralContainers` shape).
    async fn pod_spec_of(&self, namespace: &str, name: &str) -> Option<Value> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = api.get_opt(name).await.ok()??;
        serde_json::to_value(pod.spec?).ok()
    }

    /// Secret names per kubelet: the spec's own, else (templates only) the service account's;
    /// each read once, at most [`MAX_PULL_SECRETS`] ([`distinct_capped`]). Also the stored
    /// Pod's ServiceAccount when the names come from it.
    async fn secret_names(
        &self,
        pod: &PodContext<'_>,
        warnings: &mut Vec<String>,
    ) -> (Vec<String>, Option<String>) {
        let (spec, is_pod) = match pod.secrets {
            SecretNames::Spec { spec, is_pod, .. } => (spec, is_pod),
            SecretNames::Listed(names) => {
                return (
                    distinct_capped(names, |n| Some(n.as_str()), warnings).await,
                    None,
                );
            }
            SecretNames::None => return (Vec::new(), None),
            SecretNames::StoredPod(name) => {
                let Some(spec) = self.pod_spec_of(pod.namespace, name).await else {
                    return (Vec::new(), None);
                };
                let entries = entries_in(spec.get("imagePullSecrets"));
                let names = distinct_capped(entries, entry_name, warnings).await;
                return (names, account_of(&spec, false).map(str::to_string));
            }
        };
        let entries = entries_in(spec.get("imagePullSecrets"));
        let own = distinct_capped(entries, entry_name, warnings).await;
        if !own.is_empty() || is_pod {
            return (own, None);
        }
        (self.account_secret_names(pod, spec, warnings).await, None)
    }

    /// A template's ServiceAccount's pull secret names, as the ServiceAccount admission plugin
    /// will give its Pods.
    async fn account_secret_names(
        &self,
        pod: &PodContext<'_>,
        spec: &Value,
        warnings: &mut Vec<String>,
    ) -> Vec<String> {
        let account = account_of(spec, false).unwrap_or("default");
        if !is_object_name(account) {
            warnings.push(format!(
                "pinhook: serviceAccountName {account:?} is not a valid object name; not read"
            ));
            return Vec::new();
        }
        let sa = match self.service_account(pod.namespace, account).await {
            Ok(sa) => sa,
            Err(e) => {
                warnings.push(format!(
                    "pinhook: cannot read serviceaccount {}/{account}: {}",
                    pod.namespace,
                    short_error(&e)
                ));
                return Vec::new();
            }
        };
        let Some(sa) = sa.as_ref() else {
            warnings.push(format!(
                "pinhook: serviceaccount {}/{account} not found; resolved without its imagePullSecrets",
                pod.namespace
            ));
            return Vec::new();
        };
        let references = sa.image_pull_secrets.as_deref().unwrap_or_default();
        distinct_capped(references, |r| Some(r.name.as_str()), warnings).await
    }
}

#[async_trait]
impl PullSecrets for KubeSecrets {
    fn hands_tokens(&self) -> bool {
        self.account_annotations.is_some()
    }

    fn keyring_by_names(&self) -> bool {
        true
    }

    async fn keyring_for(&self, pod: &PodContext<'_>) -> PodKeyring {
        let mut warnings = Vec::new();
        let mut refused = Vec::new();
        let mut keyring = Keyring::new();
        let mut held = Taken::default();
        let (names, stored_account) = self.secret_names(pod, &mut warnings).await;
        let account = match pod.secrets {
            SecretNames::Spec { spec, custom, .. } => account_of(spec, custom),
            SecretNames::StoredPod(_) => stored_account.as_deref(),
            SecretNames::Listed(_) | SecretNames::None => pod.service_account,
        };
        for (index, name) in names.iter().enumerate() {
            // Cached reads answer at once: let deadlines and health checks in between.
            tokio::task::consume_budget().await;
            // The name comes from the object under review (not validated yet when a
            // mutating webhook sees it) and goes into an API path: only valid names.
            if !is_object_name(name) {
                warnings.push(format!(
                    "pinhook: imagePullSecret name {name:?} is not a valid object name; not read"
                ));
                continue;
            }
            match self.secret(pod.namespace, name).await {
                Ok(secret) => match secret.as_ref() {
                    Some(secret) => match read_secret(secret).inspect_err(|e| {
                        debug!(namespace = pod.namespace, name, error = %e, "unusable pull secret")
                    }) {
                        // kubelet puts all of a pod's secrets into one keyring, sorted
                        // together.
                        Ok(parsed) => {
                            let bytes = parsed.approximate_bytes();
                            if let Err(short) = self.budget.take(pod.namespace, bytes, &mut held)
                            {
                                // The rest are not read at all: one line for them.
                                let more = match names.len() - index - 1 {
                                    0 => String::new(),
                                    rest => format!(" and the {rest} after it"),
                                };
                                let line = format!(
                                    "imagePullSecret {}/{name}{more} not used: {short}",
                                    pod.namespace
                                );
                                match short {
                                    // The Pod's own doing, and the Secrets not read may be
                                    // ones kubelet refuses: judged as such, never passed
                                    // over (issue 44).
                                    Short::Review(_) => refused.push(format!(
                                        "{line}, so pinhook cannot judge this Pod's pulls"
                                    )),
                                    // Other reviews in flight hold the shares: a retry's
                                    // matter, which must not cost this Pod a denial.
                                    Short::Namespace(_) | Short::All(_) => {
                                        warnings.push(format!("pinhook: {line}"))
                                    }
                                }
                                break;
                            }
                            keyring.merge(parsed);
                        }
                        Err(e) if e.fails_the_pull() => refused.push(format!(
                            "imagePullSecret {}/{name} is malformed, so kubelet refuses \
                             every pull of this pod: {e}",
                            pod.namespace
                        )),
                        // One text for a Secret of another type, one without its data key,
                        // and none at all: a forged review must not learn the type of a Secret
                        // (issue 44). The log, which only the admin reads, keeps the detail.
                        Err(_) => warnings.push(unusable_secret(pod.namespace, name)),
                    },
                    None => warnings.push(unusable_secret(pod.namespace, name)),
                },
                Err(e) => warnings.push(format!(
                    "pinhook: cannot read imagePullSecret {}/{name}: {}",
                    pod.namespace,
                    short_error(&e)
                )),
            }
        }
        keyring.extend(self.node.clone());
        let puller = Puller {
            namespace: pod.namespace,
            // The name comes from the object under review and goes into an API path.
            service_account: account.filter(|name| is_object_name(name)),
            accounts: Some(self),
        };
        let (keyring, said) = ask_sources(keyring, pod.images, &puller, pod.sources_deadline).await;
        warnings.extend(said);
        PodKeyring {
            keyring,
            warnings,
            refused,
            held,
        }
    }
}

/// The one warning for a pull secret that is missing or not a docker config secret kubelet
/// would use: it says nothing of what the Secret is. (A docker config secret kubelet cannot
/// parse is refused by name, since it fails every pull of the Pod: that much a caller learns.)
fn unusable_secret(namespace: &str, name: &str) -> String {
    format!("pinhook: imagePullSecret {namespace}/{name} not found or not a docker config secret; not used")
}

#[async_trait]
impl ServiceAccounts for KubeSecrets {
    async fn account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<AccountFacts>>, TokenError> {
        let account =
            self.service_account(namespace, name)
                .await
                .map_err(|e| TokenError::Account {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    reason: short_error(&e),
                })?;
        Ok(account.as_ref().as_ref().map(|account| {
            Arc::new(AccountFacts {
                uid: account.metadata.uid.clone().unwrap_or_default(),
                annotations: account.metadata.annotations.clone().unwrap_or_default(),
            })
        }))
    }

    async fn token(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audience: &str,
    ) -> Result<MintedToken, TokenError> {
        self.tokens.token(namespace, name, uid, audience).await
    }
}

/// A PodSpec's ServiceAccount: `serviceAccountName`, else the deprecated `serviceAccount`, else
/// `default` (what the ServiceAccount admission plugin gives a Pod that names none); for a
/// custom resource's spec (`custom`), only one it names.
pub fn account_of(spec: &Value, custom: bool) -> Option<&str> {
    let named = spec
        .get("serviceAccountName")
        .or_else(|| spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    match (named, custom) {
        (Some(name), _) => Some(name),
        (None, true) => None,
        (None, false) => Some("default"),
    }
}

/// `keyring` with its per-image sources asked about `images` for `puller`; past `deadline`,
/// `keyring` as it is (its pull secrets and static credentials) with a warning.
async fn ask_sources(
    keyring: Keyring,
    images: &[String],
    puller: &Puller<'_>,
    deadline: Option<tokio::time::Instant>,
) -> (Keyring, Vec<String>) {
    if !keyring.has_sources() {
        return (keyring, Vec::new());
    }
    let asked = keyring.for_pod(images, puller);
    let Some(deadline) = deadline else {
        return asked.await;
    };
    match tokio::time::timeout_at(deadline, asked).await {
        Ok(answered) => answered,
        Err(_) => (
            keyring,
            vec![
                "pinhook: credential plugins and helpers did not answer in time; resolved \
                 without them"
                    .to_string(),
            ],
        ),
    }
}

/// The credentials of one Secret, read as kubelet reads it.
fn read_secret(secret: &Secret) -> Result<Keyring, KeyringError> {
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    let secret_type = secret.type_.as_deref().unwrap_or("Opaque");
    Keyring::from_secret(secret_type, &data)
}

/// A cache of `max_bytes`, each entry weighed as its key plus `bytes` of its value plus
/// [`ENTRY_OVERHEAD`].
fn object_cache<V: Clone + Send + Sync + 'static>(
    max_bytes: u64,
    bytes: fn(&V) -> usize,
) -> moka::future::Cache<(String, String), V> {
    moka::future::Cache::builder()
        .max_capacity(max_bytes)
        .weigher(move |key: &(String, String), value: &V| {
            let weight = ENTRY_OVERHEAD + key.0.len() + key.1.len() + bytes(value);
            u32::try_from(weight).unwrap_or(u32::MAX)
        })
        .time_to_live(OBJECT_TTL)
        .build()
}

/// What of a Secret is read ([`read_secret`]): its type and data, not its metadata (whose
/// annotations and managed fields may outweigh the data).
fn kept_of_secret(secret: Secret) -> Secret {
    Secret {
        data: secret.data,
        type_: secret.type_,
        ..Secret::default()
    }
}

/// What of a ServiceAccount is read: its pull secret names, and for the plugins handed its
/// token, its UID and the annotations they are given (`wanted`; none without). An account's
/// other annotations (`last-applied-configuration`, up to 256 KiB) are not kept.
fn kept_of_account(account: ServiceAccount, wanted: Option<&BTreeSet<String>>) -> ServiceAccount {
    let mut kept = ServiceAccount {
        image_pull_secrets: account.image_pull_secrets,
        ..ServiceAccount::default()
    };
    if let Some(wanted) = wanted {
        kept.metadata.uid = account.metadata.uid;
        kept.metadata.annotations = account.metadata.annotations.map(|annotations| {
            annotations
                .into_iter()
                .filter(|(key, _)| wanted.contains(key))
                .collect()
        });
    }
    kept
}

/// The bytes a cached Secret holds.
fn secret_bytes(secret: &Arc<Option<Secret>>) -> usize {
    let Some(secret) = secret.as_ref() else {
        return 0;
    };
    let data: usize = secret
        .data
        .iter()
        .flatten()
        .map(|(key, value)| key.len() + value.0.len())
        .sum();
    let string_data: usize = secret
        .string_data
        .iter()
        .flatten()
        .map(|(key, value)| key.len() + value.len())
        .sum();
    data + string_data + secret.type_.as_ref().map_or(0, String::len)
}

/// The bytes a cached ServiceAccount holds.
fn account_bytes(account: &Arc<Option<ServiceAccount>>) -> usize {
    let Some(account) = account.as_ref() else {
        return 0;
    };
    let secrets: usize = account
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|reference| reference.name.len() + std::mem::size_of_val(reference))
        .sum();
    let annotations: usize = account
        .metadata
        .annotations
        .iter()
        .flatten()
        .map(|(key, value)| key.len() + value.len() + 2 * std::mem::size_of::<String>())
        .sum();
    secrets + annotations + account.metadata.uid.as_ref().map_or(0, String::len)
}

/// A DNS-1123 subdomain, what the apiserver accepts as a Secret or ServiceAccount name: at
/// most 253 characters of `a-z`, `0-9`, `-` and `.`, starting and ending alphanumeric.
fn is_object_name(name: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let bytes = name.as_bytes();
    (1..=253).contains(&bytes.len())
        && bytes.first().copied().is_some_and(alnum)
        && bytes.last().copied().is_some_and(alnum)
        && bytes.iter().all(|&c| alnum(c) || c == b'-' || c == b'.')
}

/// A JSON `imagePullSecrets` list's entries, left for [`distinct_capped`] to read: copying
/// their names out first was a loop over the whole list that never yielded (a review may list
/// 100,000 entries, named or not).
fn entries_in(list: Option<&Value>) -> &[Value] {
    list.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// An `imagePullSecrets` entry's name, if it has one.
fn entry_name(entry: &Value) -> Option<&str> {
    entry.get("name").and_then(Value::as_str)
}

/// The non-empty names (`name_of` each entry) without repeats (kubelet reads a repeated
/// secret once too), at most [`MAX_PULL_SECRETS`] of them, in order; a warning says how many
/// more were not read. Yields every [`YIELD_EVERY`] entries, named or not: a review may list
/// 100,000. Only the kept names are copied.
///
/// A slice and a function pointer, not an iterator: a `map` closure's lifetimes are not
/// general enough for the `Send` future [`PullSecrets::keyring_for`] returns.
async fn distinct_capped<T: Sync>(
    entries: &[T],
    name_of: fn(&T) -> Option<&str>,
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let mut total = 0usize;
    let mut seen = std::collections::HashSet::new();
    let mut kept = Vec::new();
    let mut dropped = 0usize;
    for (i, entry) in entries.iter().enumerate() {
        if i % YIELD_EVERY == YIELD_EVERY - 1 {
            tokio::task::yield_now().await;
        }
        let Some(name) = name_of(entry).filter(|n| !n.is_empty()) else {
            continue;
        };
        total += 1;
        if !seen.insert(name) {
            continue;
        }
        if kept.len() == MAX_PULL_SECRETS {
            dropped += 1;
            continue;
        }
        kept.push(name.to_string());
    }
    if dropped > 0 {
        warnings.push(format!(
            "pinhook: {total} imagePullSecrets name {} distinct secrets; only the first \
             {MAX_PULL_SECRETS} were read",
            kept.len() + dropped
        ));
    }
    kept
}

/// moka shares one error among all waiters; kube's error is not Clone, so keep its text.
fn unshare(error: Arc<kube::Error>) -> kube::Error {
    match Arc::try_unwrap(error) {
        Ok(error) => error,
        Err(shared) => kube::Error::Service(shared.to_string().into()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Secret;

    use serde_json::{json, Value};

    use super::{
        distinct_capped, is_object_name, kept_of_secret, object_cache, secret_bytes, KubeSecrets,
        PodContext, PullSecrets, SecretNames, MAX_PULL_SECRETS, SECRET_CACHE_BYTES,
    };
    use crate::registry::credentials::keyring::Keyring;

    #[tokio::test]
    async fn pull_secret_names_are_read_once_each_and_at_most_the_cap() {
        let mut warnings = Vec::new();
        let repeated = vec!["regcred".to_string(); 100_000];
        assert_eq!(
            distinct_capped(&repeated, |n| Some(n.as_str()), &mut warnings).await,
            ["regcred"]
        );
        assert!(warnings.is_empty());
        let many: Vec<String> = (0..300)
            .map(|i| format!("s{i}"))
            .chain(["s0".into()])
            .collect();
        let kept = distinct_capped(&many, |n| Some(n.as_str()), &mut warnings).await;
        assert_eq!(kept.len(), MAX_PULL_SECRETS);
        assert_eq!(kept[0], "s0");
        assert_eq!(
            warnings,
            ["pinhook: 301 imagePullSecrets name 300 distinct secrets; only the first 128 were read"]
        );
    }

    /// A spawned task that counts how often it runs until dropped.
    fn ticker() -> (
        Arc<std::sync::atomic::AtomicUsize>,
        tokio::task::JoinHandle<()>,
    ) {
        let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let task = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    ticks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            }
        });
        (ticks, task)
    }

    /// 200,000 names on a one-thread runtime: another task runs while they are sorted out
    /// (before, the loop held the thread to the end).
    #[tokio::test(flavor = "current_thread")]
    async fn sorting_out_a_reviews_secret_names_lets_other_tasks_run() {
        let (ticks, task) = ticker();
        let names: Vec<String> = (0..200_000).map(|i| format!("s{}", i % 1000)).collect();
        let mut warnings = Vec::new();
        let kept = distinct_capped(&names, |n| Some(n.as_str()), &mut warnings).await;
        let ran = ticks.load(std::sync::atomic::Ordering::SeqCst);
        task.abort();
        assert_eq!(kept.len(), MAX_PULL_SECRETS);
        assert!(ran > 100, "the other task ran {ran} times");
    }

    /// A client whose every call fails at once (nothing listens on port 9): these tests make
    /// none.
    fn unreachable_client() -> kube::Client {
        let url = "http://127.0.0.1:9".parse().expect("a valid URL");
        kube::Client::try_from(kube::Config::new(url)).expect("a client for a plain URL")
    }

    /// A Pod's spec whose `imagePullSecrets` are `entries`, read for its keyring on a
    /// one-thread runtime beside a task counting its turns: the keyring's warnings, and how
    /// often the other task ran.
    async fn read_beside_a_ticker(entries: Vec<Value>) -> (Vec<String>, usize) {
        let spec = json!({ "imagePullSecrets": entries, "containers": [] });
        let secrets = KubeSecrets::new(unreachable_client(), Keyring::new());
        let (ticks, task) = ticker();
        let keyring = secrets
            .keyring_for(&PodContext {
                namespace: "default",
                secrets: SecretNames::Spec {
                    spec: &spec,
                    is_pod: true,
                    custom: false,
                },
                images: &[],
                sources_deadline: None,
                service_account: None,
            })
            .await;
        let ran = ticks.load(std::sync::atomic::Ordering::SeqCst);
        task.abort();
        (keyring.warnings, ran)
    }

    /// Which ServiceAccount a plugin handed tokens is asked about (the warning names it: the
    /// unreachable client cannot read it): a Pod's, a template's (`default` when it names
    /// none), a custom resource's only when it names one, the running Pod's for the watch, the
    /// stored Pod's for an ephemeral container (none here: it cannot be read); an invalid name
    /// is never asked about.
    #[tokio::test]
    async fn a_token_plugin_is_asked_about_the_pods_own_service_account() {
        use crate::registry::credentials::provider::config::{
            ProviderSpec, TokenAttributes, TokenCacheType,
        };
        use crate::registry::credentials::provider::{CredentialProviders, Settings};
        let spec = ProviderSpec {
            name: "sa".to_string(),
            match_images: vec!["*.example".to_string()],
            default_cache_duration: std::time::Duration::from_secs(60),
            api_version: "credentialprovider.kubelet.k8s.io/v1".to_string(),
            args: Vec::new(),
            env: Vec::new(),
            path: "/nonexistent/never-run".into(),
            token: Some(TokenAttributes {
                audience: "registry.example".to_string(),
                cache_type: TokenCacheType::ServiceAccount,
                require_service_account: true,
                required_annotation_keys: Vec::new(),
                optional_annotation_keys: Vec::new(),
            }),
        };
        let mut node = Keyring::new();
        node.push_source(Arc::new(CredentialProviders::new(
            vec![spec],
            Settings::default(),
            None,
        )));
        let secrets = KubeSecrets::new(unreachable_client(), node);
        assert!(secrets.hands_tokens());
        let images = ["r.example/app".to_string()];
        let pod = json!({"serviceAccountName": "builder", "containers": []});
        let template = json!({"containers": []});
        let custom_named = json!({"serviceAccountName": "pg"});
        let custom = json!({"instances": 3});
        let invalid = json!({"serviceAccountName": "Not/Valid", "containers": []});
        let spec = |spec: &'static Value, is_pod, custom| SecretNames::Spec {
            spec,
            is_pod,
            custom,
        };
        let leak = |v: Value| -> &'static Value { Box::leak(Box::new(v)) };
        let cases: Vec<(SecretNames<'static>, Option<&str>, Option<&str>)> = vec![
            (spec(leak(pod), true, false), None, Some("builder")),
            (spec(leak(template), false, false), None, Some("default")),
            (spec(leak(custom_named), false, true), None, Some("pg")),
            (spec(leak(custom), false, true), None, None),
            (spec(leak(invalid), true, false), None, None),
            (SecretNames::Listed(&[]), Some("watcher"), Some("watcher")),
            (SecretNames::StoredPod("debugged"), None, None),
        ];
        for (names, listed, account) in cases {
            let keyring = secrets
                .keyring_for(&PodContext {
                    namespace: "team",
                    secrets: names,
                    images: &images,
                    sources_deadline: None,
                    service_account: listed,
                })
                .await;
            let asked: Vec<&String> = keyring
                .warnings
                .iter()
                .filter(|w| w.contains("credential provider sa"))
                .collect();
            match account {
                Some(account) => assert!(
                    asked.len() == 1
                        && asked[0]
                            .contains(&format!("cannot read serviceaccount team/{account}:")),
                    "{names:?}: {:?}",
                    keyring.warnings
                ),
                None => assert!(asked.is_empty(), "{names:?}: {asked:?}"),
            }
        }
    }

    /// 200,000 `imagePullSecrets` entries without a name: another task runs while the review's
    /// list is read. Before, every entry was copied out of the review in one loop that never
    /// yielded, and the yielding loop after it saw none of them.
    #[tokio::test(flavor = "current_thread")]
    async fn reading_a_reviews_unnamed_pull_secret_entries_lets_other_tasks_run() {
        let (warnings, ran) = read_beside_a_ticker(vec![json!({}); 200_000]).await;
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(ran > 100, "the other task ran {ran} times");
    }

    /// 200,000 entries naming the same invalid secret: it is looked at once (one warning,
    /// not 200,000), and other tasks run meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn a_reviews_repeated_pull_secret_is_judged_once() {
        let (warnings, ran) =
            read_beside_a_ticker(vec![json!({ "name": "Not/Valid" }); 200_000]).await;
        assert_eq!(
            warnings,
            ["pinhook: imagePullSecret name \"Not/Valid\" is not a valid object name; not read"]
        );
        assert!(ran > 100, "the other task ran {ran} times");
    }

    /// 2,000 Secrets of 100 KiB each stay under the byte cap, and a cached Secret keeps no
    /// metadata (its annotations may outweigh its data).
    #[tokio::test]
    async fn many_large_secrets_stay_under_the_byte_cap() {
        use k8s_openapi::ByteString;
        let cache = object_cache(SECRET_CACHE_BYTES, secret_bytes);
        for i in 0..2_000 {
            let mut secret = Secret::default();
            secret.metadata.name = Some(format!("s{i}"));
            secret.metadata.annotations = Some(
                [("big".to_string(), "a".repeat(100 * 1024))]
                    .into_iter()
                    .collect(),
            );
            secret.data = Some(
                [(
                    ".dockerconfigjson".to_string(),
                    ByteString(vec![b'x'; 100 * 1024]),
                )]
                .into_iter()
                .collect(),
            );
            let kept = kept_of_secret(secret);
            assert!(kept.metadata.annotations.is_none() && kept.metadata.name.is_none());
            cache
                .insert(("ns".to_string(), format!("s{i}")), Arc::new(Some(kept)))
                .await;
        }
        cache.run_pending_tasks().await;
        let held = cache.weighted_size();
        assert!(held <= SECRET_CACHE_BYTES, "{held} bytes held");
        let entries = cache.entry_count();
        // (each holds a little over 100 KiB: most of the budget is used, none of it passed)
        let most = SECRET_CACHE_BYTES / (100 << 10);
        assert!(
            (most * 5 / 8..=most).contains(&entries),
            "{entries} entries"
        );
    }

    #[rstest::rstest]
    #[case("regcred", true)]
    #[case("reg-cred.v2", true)]
    #[case("0abc", true)]
    #[case("", false)]
    #[case("../../configmaps/x", false)]
    #[case("a/b", false)]
    #[case("RegCred", false)]
    #[case("-regcred", false)]
    #[case("regcred.", false)]
    #[case("reg%2Fcred", false)]
    #[case("reg cred", false)]
    fn only_valid_object_names_go_into_api_paths(#[case] name: &str, #[case] valid: bool) {
        assert_eq!(is_object_name(name), valid);
        assert!(!is_object_name(&"a".repeat(254)));
        assert!(is_object_name(&"a".repeat(253)));
    }
}
