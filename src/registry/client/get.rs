//! The manifest GET, the fallback when a HEAD did not say what pinning needs (no digest or no
//! length, 405, a redirect elsewhere): the exact bytes the registry serves, read up to
//! [`body::MANIFEST`] and hashed, which gives the digest the tag points at.
//!
//! Sent through the same client as the HEAD ([`super::outbound`]), with the same
//! authorization; a `Docker-Content-Digest` the registry sends along must match the bytes.
//! Error answers are read up to [`body::ERROR`] for the distribution spec's error codes.

use reqwest::header::{HeaderMap, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use sha2::{Digest as _, Sha256, Sha384, Sha512};

use super::head::{header, manifest_request, DIGEST_HEADER};
use super::token::Bearer;
use crate::reference::{Algorithm, Digest, Reference};
use crate::registry::http::{body, outbound};
use crate::registry::{AnswerError, RegistryError};

/// What one GET of bytes said ([`fetch`]).
#[derive(Debug)]
pub(crate) enum Fetched {
    /// 200: the bytes, read within their limit (a manifest's `Docker-Content-Digest`, if
    /// sent, checked against them).
    Bytes(body::Read),
    /// 401: with a bearer challenge, get a token and try again; otherwise unauthorized.
    Challenge(Option<Bearer>),
    Failed(RegistryError),
}

/// What one GET said.
#[derive(Debug)]
pub(crate) enum Get {
    /// 200: the SHA-256 of the bytes served.
    Manifest(Digest),
    /// 401: with a bearer challenge, get a token and try again; otherwise unauthorized.
    Challenge(Option<Bearer>),
    Failed(RegistryError),
}

/// The distribution spec's error body: `{"errors": [{"code": "…", "message": "…"}]}`.
#[derive(Debug, Deserialize)]
struct Envelope {
    errors: Vec<EnvelopeError>,
}

#[derive(Debug, Deserialize)]
struct EnvelopeError {
    code: String,
    #[serde(default)]
    message: String,
}

/// `GET <scheme>://<host>/v2/<path>/manifests/<tag>` with `authorization` if given.
pub(crate) async fn get(
    http: &reqwest::Client,
    url: &str,
    authorization: Option<&str>,
    reference: &Reference,
) -> Get {
    match fetch(http, url, authorization, reference, body::MANIFEST).await {
        Fetched::Bytes(bytes) => Get::Manifest(Digest::sha256_of(&bytes)),
        Fetched::Challenge(challenge) => Get::Challenge(challenge),
        Fetched::Failed(error) => Get::Failed(error),
    }
}

/// `GET url` (a manifest, or a blob of `reference`'s repository) with `authorization` if
/// given, its answer read up to `limit`; error answers judged as the distribution spec says.
pub(crate) async fn fetch(
    http: &reqwest::Client,
    url: &str,
    authorization: Option<&str>,
    reference: &Reference,
    limit: body::Limit,
) -> Fetched {
    let registry = reference.domain();
    let request = manifest_request(http, Method::GET, url, authorization);
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => return Fetched::Failed(outbound::failed(registry, e)),
    };
    let status = response.status();
    if status == StatusCode::UNAUTHORIZED {
        let challenge = header(response.headers(), WWW_AUTHENTICATE.as_str());
        return Fetched::Challenge(challenge.and_then(|c| Bearer::parse(&c)));
    }
    if status != StatusCode::OK {
        return match body::read(response, body::ERROR, registry).await {
            Ok(text) => Fetched::Failed(judge_failure(status, &text, reference)),
            Err(e) => Fetched::Failed(e),
        };
    }
    let headers = response.headers().clone();
    match body::read(response, limit, registry).await {
        Ok(bytes) => match check_announced(&headers, &bytes) {
            Ok(()) => Fetched::Bytes(bytes),
            Err(source) => Fetched::Failed(RegistryError::InvalidResponse {
                registry: registry.to_string(),
                source,
            }),
        },
        Err(e) => Fetched::Failed(e),
    }
}

/// A `Docker-Content-Digest` sent with the manifest must be the digest of its bytes.
fn check_announced(headers: &HeaderMap, bytes: &[u8]) -> Result<(), AnswerError> {
    let Some(announced) = header(headers, DIGEST_HEADER) else {
        return Ok(());
    };
    let parsed: Digest = announced
        .parse()
        .map_err(|_| AnswerError::DigestHeader(announced.clone()))?;
    let hex = match parsed.algorithm() {
        Algorithm::Sha256 => format!("{:x}", Sha256::digest(bytes)),
        Algorithm::Sha384 => format!("{:x}", Sha384::digest(bytes)),
        Algorithm::Sha512 => format!("{:x}", Sha512::digest(bytes)),
    };
    match hex == parsed.hex() {
        true => Ok(()),
        false => Err(AnswerError::DigestMismatch {
            announced,
            computed: format!("{}:{hex}", parsed.algorithm()),
        }),
    }
}

/// The meaning of a GET's error answer: the spec's error code when the body has one, else the
/// status.
fn judge_failure(status: StatusCode, body: &[u8], reference: &Reference) -> RegistryError {
    let registry = reference.domain().to_string();
    let envelope = match status.is_client_error() {
        true => serde_json::from_slice::<Envelope>(body).ok(),
        false => None,
    };
    let code = envelope
        .as_ref()
        .and_then(|e| e.errors.first())
        .map(|e| e.code.as_str());
    match (code, status.as_u16()) {
        (Some("MANIFEST_UNKNOWN" | "NAME_UNKNOWN" | "NOT_FOUND"), _) | (None, 404) => {
            RegistryError::NotFound {
                repository: reference.repository(),
                tag: reference.manifest(),
            }
        }
        (Some("UNAUTHORIZED"), _) | (None, 401) => RegistryError::Unauthorized { registry },
        (Some("DENIED"), _) | (None, 403) => RegistryError::Denied {
            registry,
            repository: reference.path().to_string(),
        },
        (Some("TOOMANYREQUESTS"), _) | (None, 429) => RegistryError::RateLimited { registry },
        (None, code @ 200..=299) => RegistryError::InvalidResponse {
            registry,
            source: AnswerError::UnexpectedStatus(code),
        },
        (_, code) => RegistryError::Status {
            registry,
            status: code,
            message: match envelope {
                Some(envelope) => describe(&envelope),
                None => flattened(&String::from_utf8_lossy(body), 200),
            },
        },
    }
}

/// The envelope's errors as `CODE: message; …`, on one line.
fn describe(envelope: &Envelope) -> String {
    let parts: Vec<String> = envelope
        .errors
        .iter()
        .map(|e| format!("{}: {}", e.code, e.message))
        .collect();
    flattened(&parts.join("; "), 200)
}

/// `text` on one line (whitespace runs as one space), cut after `max` characters.
fn flattened(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;
    use rstest::rstest;

    use super::*;

    fn reference() -> Reference {
        Reference::parse("registry.example/team/app:1.0").expect("a reference")
    }

    #[rstest]
    #[case::manifest_unknown(404, r#"{"errors":[{"code":"MANIFEST_UNKNOWN"}]}"#, "not_found")]
    #[case::name_unknown(404, r#"{"errors":[{"code":"NAME_UNKNOWN"}]}"#, "not_found")]
    #[case::bare_404(404, "no such thing", "not_found")]
    #[case::coded_denied(400, r#"{"errors":[{"code":"DENIED"}]}"#, "denied")]
    #[case::bare_403(403, "", "denied")]
    #[case::coded_unauthorized(400, r#"{"errors":[{"code":"UNAUTHORIZED"}]}"#, "unauthorized")]
    #[case::rate_limited(429, "", "rate_limited")]
    #[case::coded_rate_limit(400, r#"{"errors":[{"code":"TOOMANYREQUESTS"}]}"#, "rate_limited")]
    #[case::no_content(204, "", "invalid_response")]
    #[case::server_error(503, "down", "status")]
    #[case::other_code(400, r#"{"errors":[{"code":"MANIFEST_INVALID"}]}"#, "status")]
    fn error_answers_mean_what_the_distribution_spec_says(
        #[case] status: u16,
        #[case] body: &str,
        #[case] kind: &str,
    ) {
        let status = StatusCode::from_u16(status).expect("a status");
        let error = judge_failure(status, body.as_bytes(), &reference());
        assert_eq!(error.kind(), kind, "{error:?}");
    }

    #[test]
    fn error_messages_stay_on_one_line_and_short() {
        let body = format!(
            r#"{{"errors":[{{"code":"MANIFEST_INVALID","message":"line one\nline two"}},
            {{"code":"X","message":"{}"}}]}}"#,
            "long ".repeat(100)
        );
        let error = judge_failure(StatusCode::BAD_REQUEST, body.as_bytes(), &reference());
        let text = error.to_string();
        assert!(
            text.starts_with(
                "registry registry.example answered HTTP 400: MANIFEST_INVALID: line one line \
                 two; X: long long"
            ),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
        assert!(text.chars().count() < 300, "{text}");
        let html = judge_failure(
            StatusCode::BAD_GATEWAY,
            b"<html>\n<body>bad gateway</body>\n</html>",
            &reference(),
        );
        assert_eq!(
            html.to_string(),
            "registry registry.example answered HTTP 502: <html> <body>bad gateway</body> </html>"
        );
    }

    #[test]
    fn an_announced_digest_must_match_the_bytes() {
        let bytes = b"{}";
        let sha256 = Digest::sha256_of(bytes).to_string();
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                DIGEST_HEADER,
                HeaderValue::from_str(value).expect("a header value"),
            );
            headers
        };
        assert!(check_announced(&HeaderMap::new(), bytes).is_ok());
        assert!(check_announced(&with(&sha256), bytes).is_ok());
        let sha512 = format!("sha512:{:x}", Sha512::digest(bytes));
        assert!(check_announced(&with(&sha512), bytes).is_ok());
        let other = Digest::sha256_of(b"other").to_string();
        assert!(matches!(
            check_announced(&with(&other), bytes),
            Err(AnswerError::DigestMismatch { .. })
        ));
        assert!(matches!(
            check_announced(&with("md5:abc"), bytes),
            Err(AnswerError::DigestHeader(_))
        ));
    }
}
