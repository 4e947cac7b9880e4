//! Bearer tokens for registries that answer a manifest HEAD with a token challenge: parsing the
//! `WWW-Authenticate` challenge, asking the challenge's realm for a pull token, and keeping each
//! token per (registry, credential, repository) for [`TOKEN_TTL`], so a warm resolution is one
//! HEAD.
//!
//! The realm is a URL of the registry's choosing: the resolver checks it against the address
//! guard before it asks for a token here (and refuses a clear-text realm unless its host is
//! marked insecure). The request goes through the registry's client ([`super::outbound`]), so
//! a redirect cannot take it, or the credentials it carries, to another origin; the answer is
//! read up to [`body::TOKEN`].
//!
//! Never: puts a token or a password into an error message.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::AUTHORIZATION;
use serde::Deserialize;

use crate::registry::http::{body, outbound};
use crate::registry::RealmRefusal;
use crate::registry::{AnswerError, Fingerprint, RegistryError};
use crate::weight::weight;

/// How long a registry's bearer token is reused (the token spec's default lifetime is 60 s;
/// an expired one is answered 401 and fetched anew).
const TOKEN_TTL: Duration = Duration::from_secs(50);

/// A `WWW-Authenticate: Bearer realm="…",service="…",scope="…"` challenge (RFC 6750 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bearer {
    pub realm: String,
    pub service: Option<String>,
    pub scope: Option<String>,
}

/// Bearer tokens per [`TokenKey`], each reused for [`TOKEN_TTL`].
pub(crate) struct TokenCache {
    tokens: moka::sync::Cache<TokenKey, Arc<str>>,
}

/// Bytes the bearer tokens kept may hold (a token answer is read up to 64 KiB: 10,000 of them
/// were 625 MiB); at most 10,000 tokens within it.
pub const TOKEN_CACHE_BYTES: u64 = 4 << 20;

/// Whose token: one per registry, credential and repository path, since a token's scope names
/// the repository and its grant depends on the credential.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TokenKey {
    pub registry: String,
    pub credential: Fingerprint,
    pub repository: String,
}

/// The token endpoint's answer; `token` and `access_token` are equivalent (token spec).
#[derive(Deserialize)]
struct TokenAnswer {
    token: Option<String>,
    access_token: Option<String>,
}

// === impl Bearer ===

impl Bearer {
    /// `None` unless the scheme is Bearer with a realm.
    pub fn parse(challenge: &str) -> Option<Bearer> {
        let (scheme, params) = challenge.trim().split_once(char::is_whitespace)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let params = auth_params(params);
        let get = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.clone())
        };
        Some(Bearer {
            realm: get("realm").filter(|r| !r.is_empty())?,
            service: get("service"),
            scope: get("scope"),
        })
    }

    /// Asks the realm for a pull token for `repository` (the challenge's own scope when it
    /// names one), with `authorization` (HTTP basic) when the caller has credentials.
    pub async fn token(
        &self,
        http: &reqwest::Client,
        repository: &str,
        authorization: Option<&str>,
        registry: &str,
    ) -> Result<String, RegistryError> {
        let scope = self
            .scope
            .clone()
            .unwrap_or_else(|| format!("repository:{repository}:pull"));
        let mut query = vec![("scope", scope.as_str())];
        if let Some(service) = &self.service {
            query.push(("service", service.as_str()));
        }
        let mut request = http.get(&self.realm).query(&query);
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        let response = request
            .send()
            .await
            .map_err(|e| realm_failed(registry, e))?;
        answered(
            registry,
            &self.realm,
            response.status().as_u16(),
            &[401, 403],
        )?;
        let bytes = body::read(response, body::TOKEN, registry).await?;
        // A body that is not the token JSON is an invalid answer, not an unreachable registry.
        let answer: TokenAnswer =
            serde_json::from_slice(&bytes).map_err(|e| RegistryError::InvalidResponse {
                registry: registry.to_string(),
                source: AnswerError::TokenJson(e),
            })?;
        answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| RegistryError::Status {
                registry: registry.to_string(),
                status: 200,
                message: format!("token endpoint {} sent no token", self.realm),
            })
    }
}

// === impl TokenCache ===

impl TokenCache {
    pub fn new() -> TokenCache {
        TokenCache {
            tokens: moka::sync::Cache::builder()
                .max_capacity(TOKEN_CACHE_BYTES)
                .time_to_live(TOKEN_TTL)
                .weigher(|key: &TokenKey, token: &Arc<str>| {
                    weight(
                        key.registry.len() + key.repository.len() + token.len() + 256,
                        TOKEN_CACHE_BYTES,
                        10_000,
                    )
                })
                .build(),
        }
    }

    /// The `Authorization` value of the token kept for `key`, if one is.
    pub fn bearer(&self, key: &TokenKey) -> Option<String> {
        self.tokens.get(key).map(|token| format!("Bearer {token}"))
    }

    /// Asks `challenge`'s realm for a token for `key`'s repository, with `authorization` (HTTP
    /// basic) when the caller has credentials, and keeps it; the `Authorization` value to retry
    /// with.
    pub async fn fetch(
        &self,
        key: TokenKey,
        challenge: &Bearer,
        http: &reqwest::Client,
        authorization: Option<&str>,
    ) -> Result<String, RegistryError> {
        let token = challenge
            .token(http, &key.repository, authorization, &key.registry)
            .await?;
        let bearer = format!("Bearer {token}");
        self.tokens.insert(key, Arc::from(token));
        Ok(bearer)
    }
}

/// [`outbound::failed`] for the token request: an address the resolver refused is the realm's,
/// and reads as a refused realm.
fn realm_failed(registry: &str, error: reqwest::Error) -> RegistryError {
    match outbound::failed(registry, error) {
        RegistryError::Refused { reason, .. } => {
            RegistryError::RealmRefused(RealmRefusal::Refused {
                registry: registry.to_string(),
                reason,
            })
        }
        other => other,
    }
}

/// `key="value", key=value` pairs; a quoted value may hold commas and `\"` escapes.
fn auth_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| *c == ',' || c.is_whitespace()).is_some() {}
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ',')).collect();
        if key.is_empty() {
            break;
        }
        if chars.next_if_eq(&'=').is_none() {
            continue;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = std::iter::from_fn(|| chars.next_if(|c| *c != ',')).collect();
        }
        params.push((key.trim().to_string(), value.trim().to_string()));
    }
    params
}

/// A token endpoint's status: 200 goes on, one of `refusals` means the credential was refused,
/// anything else is an error naming the realm.
pub(crate) fn answered(
    registry: &str,
    realm: &str,
    status: u16,
    refusals: &[u16],
) -> Result<(), RegistryError> {
    match status {
        200 => Ok(()),
        s if refusals.contains(&s) => Err(RegistryError::Unauthorized {
            registry: registry.to_string(),
        }),
        status => Err(RegistryError::Status {
            registry: registry.to_string(),
            status,
            message: format!("token endpoint {realm} answered {status}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_parse_as_the_token_spec_writes_them() {
        let parsed = Bearer::parse(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:samalba/my-app:pull,push""#,
        );
        assert_eq!(
            parsed,
            Some(Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:samalba/my-app:pull,push".into()),
            })
        );
        let spaced = Bearer::parse(r#"bearer  realm = "https://r/t" , service=reg"#);
        assert_eq!(
            spaced.map(|b| (b.realm, b.service)),
            Some(("https://r/t".into(), Some("reg".into())))
        );
        let escaped = Bearer::parse(r#"Bearer realm="https://r/t?a=\"b\"""#);
        assert_eq!(
            escaped.map(|b| b.realm),
            Some(r#"https://r/t?a="b""#.to_string())
        );
        for not_bearer in [
            "Basic realm=\"x\"",
            "Bearer",
            "Bearer service=\"s\"",
            "",
            "Bearer realm=\"\"",
        ] {
            assert_eq!(Bearer::parse(not_bearer), None, "{not_bearer:?}");
        }
    }
}
