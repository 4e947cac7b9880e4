//! `/inventory`'s gate, the I/O half (issue 25): asks the cluster who a bearer token is
//! (TokenReview, through [`KubeAuthorizer`], the dry-run endpoint's own helper and its
//! 10-second cache of answers) and whether that caller may `list pods` cluster-wide
//! (SubjectAccessReview), and remembers each decision for [`DECISION_TTL`].
//!
//! What a decision means, the bearer token's syntax and the review budget are the pure
//! [`crate::watch::access`]'s. Reviews are sent only on a miss of the decision cache and only
//! while the [`ReviewBudget`] has room ([`REVIEW_BURST`], then [`REVIEWS_PER_SECOND`]), so a
//! flood of made-up tokens costs the apiserver at most that rate and callers already decided
//! on are answered from memory. With [`InventoryAuth::None`] the gate lets everyone in (for a
//! listener reachable by nobody else, e.g. `127.0.0.1`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tracing::warn;

use crate::cluster::{AuthError, Authorizer, Caller, KubeAuthorizer};
use crate::error::error_chain;
use crate::watch::access::{bearer_token, Decision, ReviewBudget};

/// How long a decision (allowed, forbidden, unauthenticated) is reused for the same token.
pub const DECISION_TTL: Duration = Duration::from_secs(10);
/// Most tokens whose decision is remembered.
pub const MAX_DECISIONS: u64 = 10_000;
/// Reviews that can be sent at once after a quiet spell.
pub const REVIEW_BURST: u32 = 20;
/// Reviews per second after the burst.
pub const REVIEWS_PER_SECOND: u32 = 5;

/// How `/inventory` callers are checked (`--inventory-auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InventoryAuth {
    /// A bearer token the cluster authenticates, of a caller allowed to list pods cluster-wide.
    #[default]
    Kubernetes,
    /// Nobody is checked.
    None,
}

/// Who may read `/inventory`.
pub struct InventoryGate {
    check: Option<Check>,
}

struct Check {
    client: kube::Client,
    authorizer: KubeAuthorizer,
    /// Decisions by the token's SHA-256.
    decided: moka::future::Cache<[u8; 32], Decision>,
    budget: Mutex<ReviewBudget>,
}

// === impl InventoryGate ===

impl InventoryGate {
    /// The gate `auth` asks for, reviewing through `client`.
    pub fn new(auth: InventoryAuth, client: kube::Client) -> InventoryGate {
        match auth {
            InventoryAuth::None => InventoryGate { check: None },
            InventoryAuth::Kubernetes => InventoryGate {
                check: Some(Check {
                    authorizer: KubeAuthorizer::new(client.clone()),
                    client,
                    decided: moka::future::Cache::builder()
                        .max_capacity(MAX_DECISIONS)
                        .time_to_live(DECISION_TTL)
                        .build(),
                    budget: Mutex::new(ReviewBudget::new(REVIEW_BURST, REVIEWS_PER_SECOND)),
                }),
            },
        }
    }

    /// What the caller with this `Authorization` header value gets.
    pub async fn decide(&self, authorization: Option<&str>) -> Decision {
        let Some(check) = &self.check else {
            return Decision::Allowed;
        };
        let Some(token) = bearer_token(authorization) else {
            return Decision::Unauthenticated;
        };
        use sha2::Digest as _;
        let key: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        if let Some(decision) = check.decided.get(&key).await {
            return decision;
        }
        let room = check
            .budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(Instant::now());
        if !room {
            return Decision::Throttled;
        }
        let decision = match check.review(token).await {
            Ok(decision) => decision,
            Err(error) => {
                warn!(error = %error_chain(&error), "cannot check an /inventory caller");
                return Decision::Unavailable;
            }
        };
        check.decided.insert(key, decision).await;
        decision
    }
}

// === impl Check ===

impl Check {
    /// TokenReview, then SubjectAccessReview for `list pods` in every namespace.
    async fn review(&self, token: &str) -> Result<Decision, AuthError> {
        let Some(caller) = self.authorizer.authenticate(token).await? else {
            return Ok(Decision::Unauthenticated);
        };
        Ok(match self.can_list_pods(&caller).await? {
            true => Decision::Allowed,
            false => Decision::Forbidden,
        })
    }

    async fn can_list_pods(&self, caller: &Caller) -> Result<bool, AuthError> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.username.clone()),
                uid: Some(caller.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(caller.groups.clone()),
                extra: Some(caller.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("list".to_string()),
                    group: Some(String::new()),
                    resource: Some("pods".to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::SubjectAccessReview)?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}
