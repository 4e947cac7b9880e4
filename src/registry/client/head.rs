//! The manifest HEAD that resolves a tag, sent through pinhook's one HTTP client
//! ([`super::outbound`]; the bearer token it may need comes from [`super::token`], the GET
//! fallback is [`super::get`]).
//!
//! Why not oci-client's `fetch_manifest_digest`: it trusts a `Docker-Content-Digest` without a
//! `Content-Length` (containerd treats such an answer as incomplete and GETs the manifest,
//! `docs/kubernetes-and-registry-facts.md` §5), and it answers every 401 or 404 with a second
//! request, a manifest GET, which is what Docker Hub counts as a pull. Here one warm resolution is one HEAD: no `/v2/` ping,
//! no GET unless the HEAD lacks what pinning needs; a cold one under token auth is HEAD (401),
//! the token request to the challenge's realm, HEAD.

use std::sync::LazyLock;

use reqwest::header::{HeaderMap, ACCEPT, AUTHORIZATION, CONTENT_LENGTH, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};

use super::token::Bearer;
use crate::reference::Reference;
use crate::registry::http::outbound;
use crate::registry::RegistryError;

/// Every manifest type pinhook can pin, index and list types first: without them a registry
/// may answer a multi-arch tag with one platform's manifest
/// (`docs/kubernetes-and-registry-facts.md` §5).
const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// [`MANIFEST_TYPES`] as one `Accept` value, joined once rather than per request.
static ACCEPT_MANIFESTS: LazyLock<String> = LazyLock::new(|| MANIFEST_TYPES.join(", "));

pub(crate) const DIGEST_HEADER: &str = "docker-content-digest";

/// What one HEAD said.
#[derive(Debug)]
pub(crate) enum Head {
    /// 200 with `Docker-Content-Digest` and `Content-Length`: the digest, as sent.
    Digest(String),
    /// 200 without one of those headers, 405, or a redirect (one the client does not follow,
    /// or one without a `Location`): GET and hash the exact bytes.
    NeedsGet,
    /// 401: with a bearer challenge, get a token and try again; otherwise unauthorized.
    Challenge(Option<Bearer>),
    Failed(RegistryError),
}

/// `HEAD <scheme>://<host>/v2/<path>/manifests/<tag>` with `authorization` if given.
pub(crate) async fn head(
    http: &reqwest::Client,
    url: &str,
    authorization: Option<&str>,
    reference: &Reference,
) -> Head {
    let request = manifest_request(http, Method::HEAD, url, authorization);
    match request.send().await {
        Ok(response) => judge(response.status(), response.headers(), reference),
        Err(e) => match outbound::failed(reference.domain(), e) {
            RegistryError::Redirected { .. } => Head::NeedsGet,
            error => Head::Failed(error),
        },
    }
}

/// A manifest request (the HEAD, or [`super::get`]'s GET) accepting every type pinhook pins,
/// with `authorization` if given.
pub(crate) fn manifest_request(
    http: &reqwest::Client,
    method: Method,
    url: &str,
    authorization: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = http
        .request(method, url)
        .header(ACCEPT, ACCEPT_MANIFESTS.as_str());
    match authorization {
        Some(value) => request.header(AUTHORIZATION, value),
        None => request,
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
            tag: reference.manifest(),
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
            message: format!("HEAD {} answered {status}", reference.manifest_reference()),
        }),
    }
}

/// A header's value, trimmed; `None` when missing, empty or not text.
pub(crate) fn header(headers: &HeaderMap, name: &str) -> Option<String> {
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
}
