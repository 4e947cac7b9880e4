//! ServiceAccount tokens for the credential provider plugins that ask for them (KEP-4412,
//! `tokenAttributes`, beta and on by default in kubelet 1.34): who pulls a Pod's images
//! ([`Puller`]: its namespace and ServiceAccount), the [`ServiceAccounts`] edge that reads the
//! account and asks the apiserver for a token of it, and [`KubeTokens`], the tokens asked for
//! through the Kubernetes API.
//!
//! A token is requested (TokenRequest) for one audience, the provider's, for
//! [`TOKEN_SECONDS`] (the apiserver's shortest), bound to no object: the Pod under admission
//! does not exist yet (kubelet binds its token to the Pod it pulls for). It is kept for
//! [`REFRESH_PERCENT`] % of its life, as kubelet's token manager keeps it, in a cache bounded in
//! bytes ([`TOKEN_CACHE_BYTES`]) and keyed by namespace, account, account UID and audience
//! (recent kubelets put the UID in the request too: an account deleted and made again under the
//! same name is another account); one request per key however many admissions ask at once.
//!
//! Never: logs a token, puts one in an error or warning, or hands one to anything but the
//! plugin's stdin. Never asks for an audience no provider names (the caller passes the
//! provider's).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};

/// How long a requested token lives: the apiserver refuses less than ten minutes.
pub const TOKEN_SECONDS: i64 = 600;
/// How much of its life a token is used for before another is requested (kubelet: 80 %).
pub const REFRESH_PERCENT: u32 = 80;
/// Bytes of cached tokens (a token is about 1 KiB; with its key, some 3,000 fit).
pub const TOKEN_CACHE_BYTES: u64 = 4 * 1024 * 1024;
/// What a cached token costs beyond its key and text, in bytes.
const TOKEN_ENTRY_OVERHEAD: usize = 256;

/// Who pulls a Pod's images, for the plugins that want a token of its ServiceAccount.
#[derive(Clone, Copy)]
pub struct Puller<'a> {
    pub namespace: &'a str,
    /// The Pod's ServiceAccount; `None` when it has none (only static Pods) or it is not known.
    pub service_account: Option<&'a str>,
    /// Where the account and its tokens come from; `None` with no cluster (`pinhook check`
    /// run locally, `pinhook resolve`): such plugins are then not run, with a warning.
    pub accounts: Option<&'a dyn ServiceAccounts>,
}

/// What a plugin is told of a ServiceAccount and what keys its answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccountFacts {
    pub uid: String,
    pub annotations: BTreeMap<String, String>,
}

/// A token of a ServiceAccount for one audience. Its text never shows in `Debug`.
#[derive(Clone)]
pub struct MintedToken {
    pub token: Arc<str>,
    /// How long it is used for from when it was issued: [`REFRESH_PERCENT`] of its life.
    pub use_for: Duration,
}

/// Why no token (or account) could be had. The text is the apiserver's status, never a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read serviceaccount {namespace}/{name}: {reason}")]
    Account {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("cannot get a token of serviceaccount {namespace}/{name}: {reason}")]
    Token {
        namespace: String,
        name: String,
        reason: String,
    },
}

/// The I/O edge behind [`Puller::accounts`].
#[async_trait]
pub trait ServiceAccounts: Send + Sync {
    /// The account's UID and annotations; `Ok(None)` when it does not exist.
    async fn account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<AccountFacts>>, TokenError>;

    /// A token of the account `name` (whose UID is `uid`) for `audience`.
    async fn token(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audience: &str,
    ) -> Result<MintedToken, TokenError>;
}

/// Tokens requested through the Kubernetes API and kept for most of their life.
pub struct KubeTokens {
    client: kube::Client,
    tokens: moka::future::Cache<TokenKey, MintedToken>,
}

/// (namespace, account, account UID, audience).
type TokenKey = (String, String, String, String);

/// Each token expires from the cache after its own [`MintedToken::use_for`].
struct UseFor;

// === impl Puller ===

impl Puller<'_> {
    /// Nobody known: no token can be had.
    pub const NONE: Puller<'static> = Puller {
        namespace: "",
        service_account: None,
        accounts: None,
    };
}

// === impl MintedToken ===

impl fmt::Debug for MintedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MintedToken")
            .field("token", &"<redacted>")
            .field("use_for", &self.use_for)
            .finish()
    }
}

// === impl UseFor ===

impl moka::Expiry<TokenKey, MintedToken> for UseFor {
    fn expire_after_create(
        &self,
        _key: &TokenKey,
        value: &MintedToken,
        _created_at: Instant,
    ) -> Option<Duration> {
        Some(value.use_for)
    }
}

// === impl KubeTokens ===

impl KubeTokens {
    pub fn new(client: kube::Client) -> KubeTokens {
        let tokens = moka::future::Cache::builder()
            .max_capacity(TOKEN_CACHE_BYTES)
            .weigher(|key: &TokenKey, value: &MintedToken| {
                let weight = TOKEN_ENTRY_OVERHEAD
                    + key.0.len()
                    + key.1.len()
                    + key.2.len()
                    + key.3.len()
                    + value.token.len();
                u32::try_from(weight).unwrap_or(u32::MAX)
            })
            .expire_after(UseFor)
            .build();
        KubeTokens { client, tokens }
    }

    /// A token of `namespace/name` (UID `uid`) for `audience`: the cached one while it is in
    /// its first [`REFRESH_PERCENT`] %, else a new one (one request for every admission that
    /// asks at once).
    pub async fn token(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audience: &str,
    ) -> Result<MintedToken, TokenError> {
        let key = (
            namespace.to_string(),
            name.to_string(),
            uid.to_string(),
            audience.to_string(),
        );
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        self.tokens
            .try_get_with(key, async move {
                let request = token_request(uid, audience);
                let answer = api
                    .create_token_request(name, &PostParams::default(), &request)
                    .await
                    .map_err(|e| short_error(&e))?;
                minted(answer, std::time::SystemTime::now())
                    .ok_or_else(|| "the apiserver answered with no token or no expiry".to_string())
            })
            .await
            .map_err(|reason| TokenError::Token {
                namespace: namespace.to_string(),
                name: name.to_string(),
                reason: reason.to_string(),
            })
    }
}

/// The TokenRequest pinhook sends: the one audience, [`TOKEN_SECONDS`], and the account's UID
/// (recent kubelets send it; the apiserver refuses it when the account is another by now).
fn token_request(uid: &str, audience: &str) -> TokenRequest {
    TokenRequest {
        metadata: ObjectMeta {
            uid: Some(uid.to_string()).filter(|u| !u.is_empty()),
            ..ObjectMeta::default()
        },
        spec: TokenRequestSpec {
            audiences: vec![audience.to_string()],
            expiration_seconds: Some(TOKEN_SECONDS),
            bound_object_ref: None,
        },
        status: None,
    }
}

/// The token of an answered TokenRequest, used for [`REFRESH_PERCENT`] of the life the
/// apiserver gave it (counted from `now`); `None` without a token or an expiry.
fn minted(answer: TokenRequest, now: std::time::SystemTime) -> Option<MintedToken> {
    let status = answer.status?;
    if status.token.is_empty() {
        return None;
    }
    let expires: std::time::SystemTime = status.expiration_timestamp.0.into();
    let life = expires.duration_since(now).unwrap_or_default();
    Some(MintedToken {
        token: Arc::from(status.token),
        use_for: life * REFRESH_PERCENT / 100,
    })
}

/// An API error in a few words for a warning: the apiserver's status message (never a request
/// body), at most 200 characters.
pub(crate) fn short_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
    .chars()
    .take(200)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::authentication::v1::TokenRequestStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(time: std::time::SystemTime) -> Time {
        Time(k8s_openapi::jiff::Timestamp::try_from(time).expect("in range"))
    }

    /// A stand-in apiserver for TokenRequests: records each request's path and body and
    /// answers `tok-<n>`, living `life` from now.
    #[derive(Clone)]
    struct TokenApi {
        seen: Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>>,
        life: Duration,
    }

    impl tower_service::Service<http::Request<kube::client::Body>> for TokenApi {
        type Response = http::Response<kube::client::Body>;
        type Error = std::convert::Infallible;
        type Future = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
        >;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
            let api = self.clone();
            Box::pin(async move {
                use http_body_util::BodyExt as _;
                let path = request.uri().path().to_string();
                let body = match request.into_body().collect().await {
                    Ok(collected) => collected.to_bytes().to_vec(),
                    Err(_) => Vec::new(),
                };
                let sent: serde_json::Value =
                    serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                let n = {
                    let mut seen = api.seen.lock().unwrap_or_else(|e| e.into_inner());
                    seen.push((path, sent.clone()));
                    seen.len()
                };
                let expires = at(std::time::SystemTime::now() + api.life);
                let mut answer: TokenRequest =
                    serde_json::from_value(sent).unwrap_or_else(|_| token_request("", ""));
                answer.status = Some(TokenRequestStatus {
                    token: format!("tok-{n}"),
                    expiration_timestamp: expires,
                });
                let bytes = serde_json::to_vec(&answer).unwrap_or_default();
                let mut response = http::Response::new(kube::client::Body::from(bytes));
                *response.status_mut() = http::StatusCode::CREATED;
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                Ok(response)
            })
        }
    }

    fn kube_tokens(life: Duration) -> (KubeTokens, TokenApi) {
        let api = TokenApi {
            seen: Arc::default(),
            life,
        };
        let client = kube::Client::new(api.clone(), "default");
        (KubeTokens::new(client), api)
    }

    #[tokio::test]
    async fn a_token_is_asked_for_once_per_account_uid_and_audience_while_it_is_young() {
        let (tokens, api) = kube_tokens(Duration::from_secs(600));
        let ask = |uid: &'static str, audience: &'static str| {
            let tokens = &tokens;
            async move {
                let minted = tokens.token("shop", "builder", uid, audience).await;
                minted.expect("a token")
            }
        };
        let first = ask("u1", "aud").await;
        let again = ask("u1", "aud").await;
        assert_eq!((&*first.token, &*again.token), ("tok-1", "tok-1"), "kept");
        let other_uid = ask("u2", "aud").await;
        let other_audience = ask("u1", "aud-2").await;
        assert_eq!(
            (&*other_uid.token, &*other_audience.token),
            ("tok-2", "tok-3")
        );
        let seen = api.seen.lock().expect("seen").clone();
        assert_eq!(seen.len(), 3);
        assert_eq!(
            seen[0].0,
            "/api/v1/namespaces/shop/serviceaccounts/builder/token"
        );
        assert_eq!(seen[0].1["spec"]["audiences"], serde_json::json!(["aud"]));
        assert_eq!(seen[0].1["spec"]["expirationSeconds"], 600);
        assert_eq!(seen[1].1["metadata"]["uid"], "u2");
        assert_eq!(seen[2].1["spec"]["audiences"], serde_json::json!(["aud-2"]));
    }

    /// A token past 80 % of its life is not used: here it comes with no life left, so each
    /// ask gets a new one.
    #[tokio::test]
    async fn a_token_past_its_use_is_asked_for_again() {
        let (tokens, api) = kube_tokens(Duration::ZERO);
        let first = tokens
            .token("shop", "builder", "u1", "aud")
            .await
            .expect("a token");
        let second = tokens
            .token("shop", "builder", "u1", "aud")
            .await
            .expect("a token");
        assert_eq!((&*first.token, &*second.token), ("tok-1", "tok-2"));
        assert_eq!(api.seen.lock().expect("seen").len(), 2);
    }

    #[test]
    fn the_request_names_one_audience_ten_minutes_and_the_accounts_uid() {
        let sent = serde_json::to_value(token_request("uid-1", "api://registry")).expect("json");
        assert_eq!(
            sent["spec"]["audiences"],
            serde_json::json!(["api://registry"])
        );
        assert_eq!(sent["spec"]["expirationSeconds"], 600);
        assert_eq!(sent["metadata"]["uid"], "uid-1");
        assert!(sent["spec"].get("boundObjectRef").is_none());
    }

    #[test]
    fn a_token_is_used_for_80_percent_of_its_life_and_never_shown() {
        let now = std::time::SystemTime::now();
        let expires = now + Duration::from_secs(600);
        let answer = TokenRequest {
            status: Some(TokenRequestStatus {
                token: "eyJ.secret.token".to_string(),
                expiration_timestamp: at(expires),
            }),
            ..token_request("", "a")
        };
        let token = minted(answer, now).expect("a token");
        assert_eq!(token.use_for, Duration::from_secs(480));
        assert_eq!(&*token.token, "eyJ.secret.token");
        assert!(!format!("{token:?}").contains("secret"));
        let empty = TokenRequest {
            status: Some(TokenRequestStatus {
                token: String::new(),
                expiration_timestamp: at(expires),
            }),
            ..token_request("", "a")
        };
        assert!(minted(empty, now).is_none());
        let expired = TokenRequest {
            status: Some(TokenRequestStatus {
                token: "t".to_string(),
                expiration_timestamp: at(now - Duration::from_secs(1)),
            }),
            ..token_request("", "a")
        };
        assert_eq!(
            minted(expired, now).map(|t| t.use_for),
            Some(Duration::ZERO)
        );
    }
}
