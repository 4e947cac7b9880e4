//! What pinhook asks the Kubernetes API besides pull secrets: namespace labels (the
//! per-namespace `pinhook.dev/mode` override), cached briefly, their last read kept for when
//! the API cannot answer; and who a dry-run caller is and
//! what it may create: TokenReview answers cached 10 s by the token's hash, SubjectAccessReview
//! never cached.
//!
//! Never: decides policy, or maps a failure to an HTTP status (that is
//! `admission::failure`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

use crate::policy::{ModeLabel, MODE_LABEL};

/// How long a namespace's labels answer before they are read again.
pub const NAMESPACE_TTL: Duration = Duration::from_secs(30);

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
    cache: moka::future::Cache<String, Arc<Option<Namespace>>>,
    /// Every namespace's last successful read, kept a day.
    last_read: moka::sync::Cache<String, Arc<Option<Namespace>>>,
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
                .max_capacity(10_000)
                .time_to_live(ttl)
                .build(),
            last_read: moka::sync::Cache::builder()
                .max_capacity(10_000)
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
                let found = Arc::new(api.get_opt(&name).await?);
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

fn label_of(namespace: &Option<Namespace>, label: &str) -> Option<String> {
    namespace
        .as_ref()
        .and_then(|ns| ns.metadata.labels.as_ref())
        .and_then(|labels| labels.get(label))
        .cloned()
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
                .max_capacity(10_000)
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
