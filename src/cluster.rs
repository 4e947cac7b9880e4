//! What pinhook asks the Kubernetes API besides pull secrets: namespace labels (the
//! per-namespace `pinhook.dev/mode` override), cached briefly, their last read kept for when
//! the API cannot answer; and who a dry-run caller is and
//! what it may create: TokenReview answers cached 10 s by the token's hash, SubjectAccessReview
//! never cached.
//!
//! Bounds: each cache is bounded in bytes, not only entries (a namespace's labels, a caller's
//! groups and extra are as long as whoever wrote them made them): a namespace keeps only its
//! labels, and every entry weighs its names and values plus [`ENTRY_OVERHEAD`], which also
//! bounds how many fit.
//!
//! Never: decides policy, or maps a failure to an HTTP status (that is
//! `admission::failure`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

use crate::policy::{ModeLabel, MODE_LABEL};

/// How long a namespace's labels answer before they are read again.
pub const NAMESPACE_TTL: Duration = Duration::from_secs(30);
/// Bytes of cached namespace labels, for each of the two namespace caches.
pub const NAMESPACE_CACHE_BYTES: u64 = 4 * 1024 * 1024;
/// Bytes of cached TokenReview answers.
pub const TOKEN_REVIEW_CACHE_BYTES: u64 = 4 * 1024 * 1024;
/// What a cached entry costs beyond its names and values, in bytes.
pub const ENTRY_OVERHEAD: usize = 512;

/// A namespace's labels as cached: `None` when the namespace does not exist.
type Labels = Arc<Option<BTreeMap<String, String>>>;

/// Source of namespace labels.
#[async_trait]
pub trait NamespaceLabels: Send + Sync {
    /// The value of `label` on `namespace`.
    async fn label(&self, namespace: &str, label: &str) -> Result<Option<String>, LabelError>;

    /// The value `label` had when `namespace` was last read successfully (within a day);
    /// `None` when it never was. For when [`NamespaceLabels::label`] fails or is too slow.
    fn last_known(&self, _namespace: &str, _label: &str) -> Option<Option<String>> {
        None
    }
}

/// Why a namespace's labels cannot be read now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read namespace {namespace}: {reason}")]
pub struct LabelError {
    pub namespace: String,
    /// The API's own message (its Status message, else the transport error), kept short for
    /// a warning.
    pub reason: String,
}

/// What `namespace`'s mode label reads as: now (within `wait`, when given), else as last read.
/// Admission and the watch both read it here and judge it with
/// [`CompiledPolicy::namespace_mode`](crate::policy::CompiledPolicy::namespace_mode).
pub async fn read_mode_label(
    namespaces: &dyn NamespaceLabels,
    namespace: &str,
    wait: Option<Duration>,
) -> ModeLabel {
    let read = namespaces.label(namespace, MODE_LABEL);
    let read = match wait {
        Some(wait) => tokio::time::timeout(wait, read).await,
        None => Ok(read.await),
    };
    let failure = match read {
        Ok(Ok(label)) => return ModeLabel::Read(label),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!(
            "reading namespace {namespace} took longer than {:?}",
            wait.unwrap_or_default()
        ),
    };
    match namespaces.last_known(namespace, MODE_LABEL) {
        Some(label) => ModeLabel::LastRead { label, failure },
        None => ModeLabel::Unknown { failure },
    }
}

/// No Kubernetes API: no namespace has labels.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoNamespaces;

/// Namespace labels read through the API (`namespaces` get).
pub struct KubeNamespaces {
    client: kube::Client,
    /// Labels only: a Namespace's annotations and managed fields are never read.
    cache: moka::future::Cache<String, Labels>,
    /// Every namespace's last successful read, kept a day.
    last_read: moka::sync::Cache<String, Labels>,
}

/// How long a namespace's last successful read may stand in for a failed one.
const LAST_READ_TTL: Duration = Duration::from_secs(24 * 3600);

#[async_trait]
impl NamespaceLabels for NoNamespaces {
    async fn label(&self, _namespace: &str, _label: &str) -> Result<Option<String>, LabelError> {
        Ok(None)
    }
}

// === impl KubeNamespaces ===

impl KubeNamespaces {
    pub fn new(client: kube::Client) -> KubeNamespaces {
        Self::with_ttl(client, NAMESPACE_TTL)
    }

    /// Labels are read again once they are `ttl` old (`--namespace-cache-ttl`).
    pub fn with_ttl(client: kube::Client, ttl: Duration) -> KubeNamespaces {
        KubeNamespaces {
            client,
            cache: moka::future::Cache::builder()
                .max_capacity(NAMESPACE_CACHE_BYTES)
                .weigher(|name: &String, labels: &Labels| labels_weight(name, labels))
                .time_to_live(ttl)
                .build(),
            last_read: moka::sync::Cache::builder()
                .max_capacity(NAMESPACE_CACHE_BYTES)
                .weigher(|name: &String, labels: &Labels| labels_weight(name, labels))
                .time_to_live(LAST_READ_TTL)
                .build(),
        }
    }
}

#[async_trait]
impl NamespaceLabels for KubeNamespaces {
    async fn label(&self, namespace: &str, label: &str) -> Result<Option<String>, LabelError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let name = namespace.to_string();
        let last_read = self.last_read.clone();
        let found = self
            .cache
            .try_get_with(name.clone(), async move {
                let found = api.get_opt(&name).await?;
                let found = Arc::new(found.map(|ns| ns.metadata.labels.unwrap_or_default()));
                last_read.insert(name, found.clone());
                Ok::<_, kube::Error>(found)
            })
            .await
            .map_err(|e| LabelError {
                namespace: namespace.to_string(),
                reason: match e.as_ref() {
                    kube::Error::Api(status) => status.message.clone(),
                    other => other.to_string(),
                },
            })?;
        Ok(label_of(&found, label))
    }

    fn last_known(&self, namespace: &str, label: &str) -> Option<Option<String>> {
        let found = self.last_read.get(namespace)?;
        Some(label_of(&found, label))
    }
}

fn label_of(labels: &Option<BTreeMap<String, String>>, label: &str) -> Option<String> {
    labels
        .as_ref()
        .and_then(|labels| labels.get(label))
        .cloned()
}

/// What a cached namespace weighs: its name and labels plus [`ENTRY_OVERHEAD`].
fn labels_weight(name: &str, labels: &Labels) -> u32 {
    let held: usize = labels
        .as_ref()
        .iter()
        .flat_map(|labels| labels.iter())
        .map(|(key, value)| key.len() + value.len())
        .sum();
    u32::try_from(ENTRY_OVERHEAD + name.len() + held).unwrap_or(u32::MAX)
}

/// What a cached TokenReview answer weighs: the caller's names, groups and extra plus
/// [`ENTRY_OVERHEAD`].
fn caller_weight(_token_hash: &[u8; 32], caller: &Option<Caller>) -> u32 {
    let held = caller.as_ref().map_or(0, |caller| {
        let groups: usize = caller.groups.iter().map(String::len).sum();
        let extra: usize = caller
            .extra
            .iter()
            .map(|(key, values)| key.len() + values.iter().map(String::len).sum::<usize>())
            .sum();
        caller.username.len() + caller.uid.len() + groups + extra
    });
    u32::try_from(ENTRY_OVERHEAD + held).unwrap_or(u32::MAX)
}

/// Who called the dry-run endpoint, as the apiserver's TokenReview says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// The TokenReview's `user.extra` (e.g. token scopes), passed on to SubjectAccessReviews so
    /// authorizers that read them judge the caller as the apiserver would.
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// Why the cluster could not authenticate or authorise a dry-run caller.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("TokenReview failed")]
    TokenReview(#[source] kube::Error),
    #[error("SubjectAccessReview failed")]
    SubjectAccessReview(#[source] kube::Error),
    /// A TokenReview failure shared by the callers that waited on the same review (the shared
    /// error cannot be moved out).
    #[error(transparent)]
    Shared(Arc<AuthError>),
}

/// Authentication and authorisation of dry-run callers by the cluster itself.
#[async_trait]
pub trait Authorizer: Send + Sync {
    /// `Ok(None)` when the token is not valid.
    async fn authenticate(&self, token: &str) -> Result<Option<Caller>, AuthError>;
    /// Whether `caller` may `create` `group/resource` in `namespace`.
    async fn can_create(
        &self,
        caller: &Caller,
        group: &str,
        resource: &str,
        namespace: &str,
    ) -> Result<bool, AuthError>;
}

/// TokenReview and SubjectAccessReview through the API.
pub struct KubeAuthorizer {
    client: kube::Client,
    /// TokenReview answers by the token's SHA-256, for [`TOKEN_REVIEW_TTL`]: a CI job's calls
    /// (and a flood of one garbage token) cost one TokenReview, not one each.
    reviewed: moka::future::Cache<[u8; 32], Option<Caller>>,
}

/// How long a TokenReview's answer (authenticated or not) is reused.
pub const TOKEN_REVIEW_TTL: Duration = Duration::from_secs(10);

// === impl KubeAuthorizer ===

impl KubeAuthorizer {
    pub fn new(client: kube::Client) -> KubeAuthorizer {
        KubeAuthorizer {
            client,
            reviewed: moka::future::Cache::builder()
                .max_capacity(TOKEN_REVIEW_CACHE_BYTES)
                .weigher(caller_weight)
                .time_to_live(TOKEN_REVIEW_TTL)
                .build(),
        }
    }

    /// POSTs a cluster-scoped review object and returns the apiserver's answer.
    async fn create<K>(
        &self,
        review: &K,
        failed: fn(kube::Error) -> AuthError,
    ) -> Result<K, AuthError>
    where
        K: kube::Resource<Scope = kube::core::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
        K::DynamicType: Default,
    {
        Api::<K>::all(self.client.clone())
            .create(&kube::api::PostParams::default(), review)
            .await
            .map_err(failed)
    }

    /// Asks the apiserver who `token` is (TokenReview).
    async fn review_token(&self, token: &str) -> Result<Option<Caller>, AuthError> {
        use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let answer = self.create(&review, AuthError::TokenReview).await?;
        let Some(status) = answer.status else {
            return Ok(None);
        };
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let user = status.user.unwrap_or_default();
        Ok(Some(Caller {
            username: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }))
    }
}

#[async_trait]
impl Authorizer for KubeAuthorizer {
    async fn authenticate(&self, token: &str) -> Result<Option<Caller>, AuthError> {
        use sha2::Digest as _;
        let key: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        // Errors are not cached: the next call asks again.
        self.reviewed
            .try_get_with(key, self.review_token(token))
            .await
            .map_err(|e| match Arc::try_unwrap(e) {
                Ok(e) => e,
                Err(shared) => AuthError::Shared(shared),
            })
    }

    async fn can_create(
        &self,
        caller: &Caller,
        group: &str,
        resource: &str,
        namespace: &str,
    ) -> Result<bool, AuthError> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.username.clone()),
                uid: Some(caller.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(caller.groups.clone()),
                extra: Some(caller.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("create".to_string()),
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    namespace: Some(namespace.to_string()).filter(|n| !n.is_empty()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = self.create(&review, AuthError::SubjectAccessReview).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::{
        Caller, KubeAuthorizer, KubeNamespaces, NAMESPACE_CACHE_BYTES, NAMESPACE_TTL,
        TOKEN_REVIEW_CACHE_BYTES,
    };

    /// A client whose every call fails at once (nothing listens on port 9): these tests make
    /// none.
    fn unreachable_client() -> kube::Client {
        let url = "http://127.0.0.1:9".parse().expect("a valid URL");
        kube::Client::try_from(kube::Config::new(url)).expect("a client for a plain URL")
    }

    /// Labels of about 100 KiB (a Namespace may hold 1.5 MB of them).
    fn big_labels(i: usize) -> BTreeMap<String, String> {
        (0..1600)
            .map(|j| (format!("example.com/label-{i}-{j:04}"), "v".repeat(40)))
            .collect()
    }

    /// 2,000 namespaces with 100 KiB of labels each stay under the byte cap, in both the
    /// fresh and the last-read cache. Before, each held 10,000 entries whatever they weighed
    /// (up to 15 GB).
    #[tokio::test]
    async fn many_heavily_labelled_namespaces_stay_under_the_byte_cap() {
        let namespaces = KubeNamespaces::with_ttl(unreachable_client(), NAMESPACE_TTL);
        for i in 0..2_000 {
            let labels = Arc::new(Some(big_labels(i)));
            namespaces
                .last_read
                .insert(format!("ns-{i}"), labels.clone());
            namespaces.cache.insert(format!("ns-{i}"), labels).await;
        }
        namespaces.cache.run_pending_tasks().await;
        namespaces.last_read.run_pending_tasks();
        for (held, entries) in [
            (
                namespaces.cache.weighted_size(),
                namespaces.cache.entry_count(),
            ),
            (
                namespaces.last_read.weighted_size(),
                namespaces.last_read.entry_count(),
            ),
        ] {
            assert!(held <= NAMESPACE_CACHE_BYTES, "{held} bytes held");
            // (each holds about 105 KiB: most of the budget is used, none of it passed)
            let most = NAMESPACE_CACHE_BYTES / (100 << 10);
            assert!((most / 2..=most).contains(&entries), "{entries} entries");
        }
    }

    /// 2,000 TokenReview answers naming 100 KiB of groups each stay under the byte cap.
    #[tokio::test]
    async fn many_large_token_review_answers_stay_under_the_byte_cap() {
        let authorizer = KubeAuthorizer::new(unreachable_client());
        for i in 0..2_000u32 {
            let mut key = [0u8; 32];
            key[..4].copy_from_slice(&i.to_be_bytes());
            let caller = Caller {
                username: format!("user-{i}"),
                uid: String::new(),
                groups: (0..1600)
                    .map(|j| format!("group-{j:04}-{}", "g".repeat(50)))
                    .collect(),
                extra: BTreeMap::new(),
            };
            authorizer.reviewed.insert(key, Some(caller)).await;
        }
        authorizer.reviewed.run_pending_tasks().await;
        let held = authorizer.reviewed.weighted_size();
        assert!(held <= TOKEN_REVIEW_CACHE_BYTES, "{held} bytes held");
        let entries = authorizer.reviewed.entry_count();
        assert!((40..=100).contains(&entries), "{entries} entries");
    }
}
