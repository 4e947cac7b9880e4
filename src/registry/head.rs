//! The manifest HEAD that resolves a tag and the bearer-token request it may need, sent by
//! pinhook itself (oci-client still does the GET fallback).
//!
//! Why not oci-client's `fetch_manifest_digest`: it trusts a `Docker-Content-Digest` without a
//! `Content-Length` (containerd treats such an answer as incomplete and GETs the manifest,
//! facts §5), and it answers every 401 or 404 with a second request, a manifest GET, which
//! is what Docker Hub counts as a pull. Here one warm resolution is one HEAD: no `/v2/` ping,
//! no GET unless the HEAD lacks what pinning needs; a cold one under token auth is HEAD (401),
//! the token request to the challenge's realm, HEAD.

use std::sync::LazyLock;

use reqwest::header::{HeaderMap, ACCEPT, AUTHORIZATION, CONTENT_LENGTH, WWW_AUTHENTICATE};
use reqwest::StatusCode;
use serde::Deserialize;

use super::RegistryError;
use crate::reference::Reference;

/// Every manifest type pinhook can pin, index and list types first: without them a registry
/// may answer a multi-arch tag with one platform's manifest (facts §5).
pub(super) const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// [`MANIFEST_TYPES`] as one `Accept` value, joined once rather than per request.
static ACCEPT_MANIFESTS: LazyLock<String> = LazyLock::new(|| MANIFEST_TYPES.join(", "));

const DIGEST_HEADER: &str = "docker-content-digest";

/// What one HEAD said.
#[derive(Debug)]
pub(super) enum Head {
    /// 200 with `Docker-Content-Digest` and `Content-Length`: the digest, as sent.
    Digest(String),
    /// 200 without one of those headers, 405, or a redirect: GET and hash the exact bytes.
    NeedsGet,
    /// 401: with a bearer challenge, get a token and try again; otherwise unauthorized.
    Challenge(Option<Bearer>),
    Failed(RegistryError),
}

/// `HEAD <scheme>://<host>/v2/<path>/manifests/<tag>` with `authorization` if given.
pub(super) async fn head(
    http: &reqwest::Client,
    url: &str,
    authorization: Option<&str>,
    reference: &Reference,
) -> Head {
    let mut request = http.head(url).header(ACCEPT, ACCEPT_MANIFESTS.as_str());
    if let Some(value) = authorization {
        request = request.header(AUTHORIZATION, value);
    }
    match request.send().await {
        Ok(response) => judge(response.status(), response.headers(), reference),
        Err(e) => Head::Failed(transport_error(reference.domain(), e)),
    }
}

/// A request that got no answer (refused, reset, timed out: the source says which).
fn transport_error(registry: &str, error: reqwest::Error) -> RegistryError {
    RegistryError::Unreachable {
        registry: registry.to_string(),
        source: oci_client::errors::OciDistributionError::RequestError(error),
    }
}

/// The meaning of a HEAD's status and headers.
fn judge(status: StatusCode, headers: &HeaderMap, reference: &Reference) -> Head {
    let registry = reference.domain().to_string();
    match status.as_u16() {
        200 => {
            // A manifest is never empty: a length of 0 (or none) is an incomplete answer.
            let length: Option<u64> =
                header(headers, CONTENT_LENGTH.as_str()).and_then(|l| l.parse().ok());
            match (header(headers, DIGEST_HEADER), length) {
                (Some(digest), Some(length)) if length > 0 => Head::Digest(digest),
                _ => Head::NeedsGet,
            }
        }
        401 => Head::Challenge(
            header(headers, WWW_AUTHENTICATE.as_str()).and_then(|c| Bearer::parse(&c)),
        ),
        404 => Head::Failed(RegistryError::NotFound {
            repository: reference.repository(),
            tag: reference.effective_tag().to_string(),
        }),
        403 => Head::Failed(RegistryError::Denied {
            registry,
            repository: reference.path().to_string(),
        }),
        429 => Head::Failed(RegistryError::RateLimited { registry }),
        405 | 300..=399 => Head::NeedsGet,
        status => Head::Failed(RegistryError::Status {
            registry,
            status,
            message: format!("HEAD {} answered {status}", reference.tag_reference()),
        }),
    }
}

/// A `WWW-Authenticate: Bearer realm="…",service="…",scope="…"` challenge (RFC 6750 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bearer {
    pub realm: String,
    pub service: Option<String>,
    pub scope: Option<String>,
}

/// The token endpoint's answer; `token` and `access_token` are equivalent (token spec).
#[derive(Deserialize)]
struct TokenAnswer {
    token: Option<String>,
    access_token: Option<String>,
}

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
            .map_err(|e| transport_error(registry, e))?;
        match response.status().as_u16() {
            200 => {}
            401 | 403 => {
                return Err(RegistryError::Unauthorized {
                    registry: registry.to_string(),
                })
            }
            status => {
                return Err(RegistryError::Status {
                    registry: registry.to_string(),
                    status,
                    message: format!("token endpoint {} answered {status}", self.realm),
                })
            }
        }
        // A body that is not the token JSON is an invalid answer, not an unreachable registry.
        let answer: TokenAnswer =
            response
                .json()
                .await
                .map_err(|e| RegistryError::InvalidResponse {
                    registry: registry.to_string(),
                    source: oci_client::errors::OciDistributionError::RequestError(e),
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

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn reference() -> Reference {
        match Reference::parse("registry.example/team/app:1.0") {
            Ok(reference) => reference,
            Err(e) => panic!("{e}"),
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn a_digest_counts_only_with_a_content_length() {
        let both = headers(&[(DIGEST_HEADER, DIGEST), ("content-length", "527")]);
        assert!(
            matches!(judge(StatusCode::OK, &both, &reference()), Head::Digest(d) if d == DIGEST)
        );
        for partial in [
            headers(&[(DIGEST_HEADER, DIGEST)]),
            headers(&[("content-length", "527")]),
            headers(&[(DIGEST_HEADER, " "), ("content-length", "527")]),
            headers(&[(DIGEST_HEADER, DIGEST), ("content-length", "0")]),
            headers(&[(DIGEST_HEADER, DIGEST), ("content-length", "many")]),
        ] {
            assert!(
                matches!(
                    judge(StatusCode::OK, &partial, &reference()),
                    Head::NeedsGet
                ),
                "{partial:?}"
            );
        }
    }

    #[test]
    fn statuses_mean_what_the_distribution_spec_says() {
        let none = HeaderMap::new();
        let judged = |code: u16, headers: &HeaderMap| {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT);
            judge(status, headers, &reference())
        };
        let bearer = headers(&[("www-authenticate", "Bearer realm=\"https://auth/token\"")]);
        let basic = headers(&[("www-authenticate", "Basic realm=\"registry\"")]);
        assert!(matches!(
            judged(401, &bearer),
            Head::Challenge(Some(b)) if b.realm == "https://auth/token"
        ));
        assert!(matches!(judged(401, &basic), Head::Challenge(None)));
        assert!(matches!(
            judged(404, &none),
            Head::Failed(RegistryError::NotFound { .. })
        ));
        assert!(matches!(
            judged(403, &none),
            Head::Failed(RegistryError::Denied { .. })
        ));
        assert!(matches!(
            judged(429, &none),
            Head::Failed(RegistryError::RateLimited { .. })
        ));
        assert!(matches!(judged(405, &none), Head::NeedsGet));
        assert!(matches!(judged(307, &none), Head::NeedsGet));
        assert!(matches!(
            judged(503, &none),
            Head::Failed(RegistryError::Status { status: 503, .. })
        ));
    }

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
