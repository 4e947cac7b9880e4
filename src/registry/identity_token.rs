//! Identity tokens: the OAuth2 refresh tokens `docker login` stores for registries whose token
//! service issues them (`identitytoken` in `config.json`, or a credential helper answering the
//! user `<token>`), exchanged for a pull token the way the docker CLI and containerd do: the
//! registry's `/v2/` answers 401 with a bearer challenge, and its realm is sent a `POST` with
//! `grant_type=refresh_token` (the distribution token spec's OAuth2 flow,
//! <https://distribution.github.io/distribution/spec/auth/oauth/>).
//!
//! Owns: [`IdentityTokens`], a [`Resolver`] between the address guard and the registry client
//! that replaces each [`Credential::IdentityToken`] with the [`Credential::AccessToken`] it is
//! exchanged for (kept per registry, token and repository for [`ACCESS_TTL`]); the realm passes
//! the address guard first, as every realm does ([`crate::registry::http::realm::check_realm`]), and every
//! request goes through the registry client's own HTTP clients and settings.
//!
//! Never: puts a token into a log or an error message. A token that cannot be exchanged is left
//! out, and the next credential (at last anonymous) is tried, as after a refused password.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, WWW_AUTHENTICATE};
use serde::Deserialize;
use tracing::warn;

use crate::reference::{Digest, Reference};
use crate::registry::client::signatures::{Enough, FetchedSignatures};
use crate::registry::client::token::{self, Bearer};
use crate::registry::http::{body, outbound};
use crate::registry::{Credential, Fingerprint, OciResolver, RegistryError, Resolution, Resolver};
use crate::weight::weight;

/// How long an access token is reused (token services issue them for 60 s at least).
const ACCESS_TTL: Duration = Duration::from_secs(50);
/// The `client_id` sent with the grant (the spec requires one).
const CLIENT_ID: &str = "pinhook";

/// Exchanges identity tokens, then resolves through the registry client, whose HTTP clients,
/// settings (reloaded with the policy) and address guard the exchange uses too.
/// Bytes the access tokens exchanged for identity tokens may hold; at most 10,000 within it.
pub const ACCESS_CACHE_BYTES: u64 = 2 << 20;

pub struct IdentityTokens {
    oci: Arc<OciResolver>,
    access: moka::future::Cache<(String, Fingerprint, String), Arc<str>>,
}

/// The token endpoint's answer to the grant.
#[derive(Deserialize)]
struct Grant {
    access_token: Option<String>,
    token: Option<String>,
}

// === impl IdentityTokens ===

impl IdentityTokens {
    pub fn new(oci: Arc<OciResolver>) -> IdentityTokens {
        IdentityTokens {
            oci,
            access: moka::future::Cache::builder()
                .max_capacity(ACCESS_CACHE_BYTES)
                .time_to_live(ACCESS_TTL)
                .weigher(|key: &(String, Fingerprint, String), token: &Arc<str>| {
                    weight(
                        key.0.len() + key.2.len() + token.len() + 256,
                        ACCESS_CACHE_BYTES,
                        10_000,
                    )
                })
                .build(),
        }
    }

    /// The credentials with identity tokens exchanged; those that cannot be are left out.
    async fn exchanged(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Vec<Credential> {
        let mut out = Vec::with_capacity(credentials.len());
        for credential in credentials {
            let Credential::IdentityToken { token } = credential else {
                out.push(credential.clone());
                continue;
            };
            let identity = credential.fingerprint();
            let key = (
                reference.domain().to_string(),
                identity,
                reference.path().to_string(),
            );
            let access = self
                .access
                .try_get_with(key, self.exchange(reference, token))
                .await;
            match access {
                Ok(token) => out.push(Credential::AccessToken {
                    identity,
                    token: token.to_string(),
                }),
                Err(e) => warn!(
                    registry = reference.domain(),
                    credential = %identity,
                    error = %e,
                    "identity token not exchanged; trying the next credential"
                ),
            }
        }
        out
    }

    /// `/v2/`'s challenge, then the refresh-token grant at its realm.
    async fn exchange(
        &self,
        reference: &Reference,
        refresh: &str,
    ) -> Result<Arc<str>, RegistryError> {
        let registry = reference.domain();
        let http = self.oci.http_for(registry)?;
        let config = self.oci.config();
        let scheme = match config.is_insecure(registry) {
            true => "http",
            false => "https",
        };
        let host = match registry {
            "docker.io" => "index.docker.io",
            other => other,
        };
        let ping = http
            .get(format!("{scheme}://{host}/v2/"))
            .send()
            .await
            .map_err(|e| outbound::failed(registry, e))?;
        let challenge = ping
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(Bearer::parse)
            .ok_or_else(|| RegistryError::Status {
                registry: registry.to_string(),
                status: ping.status().as_u16(),
                message: "no bearer token service to exchange an identity token at".to_string(),
            })?;
        let insecure = |host: &str| config.is_insecure(host);
        crate::registry::http::realm::check_realm(
            self.oci.policy(),
            &challenge.realm,
            registry,
            insecure,
        )
        .await?;
        let body = grant_form(refresh, reference.path(), challenge.service.as_deref());
        let answer = http
            .post(&challenge.realm)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| outbound::failed(registry, e))?;
        // OAuth2 answers a refused refresh token 400 (invalid_grant).
        token::answered(
            registry,
            &challenge.realm,
            answer.status().as_u16(),
            &[400, 401, 403],
        )?;
        let bytes = body::read(answer, body::TOKEN, registry).await?;
        let grant: Grant = serde_json::from_slice(&bytes).map_err(|_| RegistryError::Status {
            registry: registry.to_string(),
            status: 200,
            message: format!(
                "token endpoint {} sent an unreadable answer",
                challenge.realm
            ),
        })?;
        grant
            .access_token
            .or(grant.token)
            .filter(|t| !t.is_empty())
            .map(Arc::from)
            .ok_or_else(|| RegistryError::Status {
                registry: registry.to_string(),
                status: 200,
                message: format!("token endpoint {} sent no access token", challenge.realm),
            })
    }
}

/// The refresh-token grant's form body, scoped to pulling `path`.
fn grant_form(refresh: &str, path: &str, service: Option<&str>) -> String {
    let scope = format!("repository:{path}:pull");
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "refresh_token")
        .append_pair("refresh_token", refresh)
        .append_pair("client_id", CLIENT_ID)
        .append_pair("scope", &scope);
    if let Some(service) = service {
        form.append_pair("service", service);
    }
    form.finish()
}

impl IdentityTokens {
    /// The signatures of `digest` in `image`'s repository, identity tokens exchanged as for a
    /// tag.
    pub async fn signatures_of(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        enough: Enough<'_>,
    ) -> Result<FetchedSignatures, RegistryError> {
        if !credentials
            .iter()
            .any(|c| matches!(c, Credential::IdentityToken { .. }))
        {
            return self
                .oci
                .signatures_of(image, digest, credentials, enough)
                .await;
        }
        let credentials = self.exchanged(image, credentials).await;
        self.oci
            .signatures_of(image, digest, &credentials, enough)
            .await
    }
}

#[async_trait]
impl Resolver for IdentityTokens {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        if !credentials
            .iter()
            .any(|c| matches!(c, Credential::IdentityToken { .. }))
        {
            return self.oci.resolve(reference, credentials).await;
        }
        let credentials = self.exchanged(reference, credentials).await;
        self.oci.resolve(reference, &credentials).await
    }

    fn last_known(&self, reference: &Reference, credentials: &[Credential]) -> Option<Resolution> {
        self.oci.last_known(reference, credentials)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grant_is_the_oauth2_refresh_token_form() {
        assert_eq!(
            grant_form("a+b/c=", "team/app", Some("registry.example")),
            "grant_type=refresh_token&refresh_token=a%2Bb%2Fc%3D&client_id=pinhook\
             &scope=repository%3Ateam%2Fapp%3Apull&service=registry.example"
        );
        assert!(!grant_form("t", "app", None).contains("service"));
    }
}
