//! The kubelet credential provider protocol (`credentialprovider.kubelet.k8s.io/v1`): the
//! `CredentialProviderRequest` written to a plugin's stdin and the `CredentialProviderResponse`
//! read from its stdout, decoded as kubelet decodes it (kubernetes
//! `pkg/credentialprovider/plugin/plugin.go`, `ExecPlugin` and `decodeResponse`): the
//! `apiVersion` must be the one configured, `kind` must be `CredentialProviderResponse`,
//! unknown fields are errors (kubelet's decoder is strict), `cacheKeyType` is one of `Image`,
//! `Registry`, `Global`. A request may carry a ServiceAccount token and annotations
//! (KEP-4412); an answer whose password is that token is refused unless the provider caches per
//! token (as recent kubelets do).
//!
//! Owns: the wire types and [`ResponseError`], whose messages never quote the answer (it holds
//! credentials). Never: runs the plugin or caches.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::go_duration::{parse as parse_go_duration, GoDuration};
use crate::registry::credentials::Credential;

/// What kubelet caches a response under (`cacheKeyType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(super) enum CacheKeyType {
    /// The image (repository) the plugin was asked about.
    Image,
    /// The image's registry host (everything before the first `/`).
    Registry,
    /// Every image this plugin matches.
    Global,
}

/// A decoded response.
#[derive(Debug, Clone)]
pub(super) struct Response {
    pub cache_key_type: CacheKeyType,
    /// `None`: use the provider's `defaultCacheDuration`; zero: do not cache.
    pub cache_duration: Option<Duration>,
    /// (registry key, credential) pairs, in key order.
    pub auth: Vec<(String, Credential)>,
}

/// Why a plugin's answer is unusable. Never quotes the answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("the answer is not a JSON object with apiVersion and kind")]
    NotAnObject,
    /// The plugin's own value is not kept: a plugin's output never reaches a log.
    #[error("the answer's apiVersion is not the configured {expected:?}")]
    ApiVersion { expected: String },
    #[error("the answer's kind is not CredentialProviderResponse")]
    Kind,
    /// The JSON category and position only: the decoder's own message may quote a value.
    #[error("the answer does not decode as a CredentialProviderResponse ({problem} at line {line}, column {column})")]
    Decode {
        problem: &'static str,
        line: usize,
        column: usize,
    },
    #[error("the answer's cacheDuration is not a non-negative Go duration")]
    CacheDuration,
    /// recent kubelets: an answer cached per ServiceAccount must not be the token itself.
    #[error("the answer gives the ServiceAccount token back as a password, which is not allowed unless tokenAttributes.cacheType is Token")]
    EchoedToken,
}

// === impl ResponseError ===

impl ResponseError {
    /// A few words for a warning.
    pub fn summary(&self) -> &'static str {
        match self {
            ResponseError::NotAnObject => "answer is not JSON",
            ResponseError::ApiVersion { .. } => "answer has the wrong apiVersion",
            ResponseError::Kind => "answer has the wrong kind",
            ResponseError::Decode { .. } => "answer is not a CredentialProviderResponse",
            ResponseError::CacheDuration => "answer has an invalid cacheDuration",
            ResponseError::EchoedToken => "answer gives the ServiceAccount token back",
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    api_version: &'a str,
    kind: &'static str,
    image: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_account_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_account_annotations: Option<&'a BTreeMap<String, String>>,
}

/// What a request hands a plugin that asked for ServiceAccount tokens (no `Debug`: the token).
#[derive(Clone, Copy, Default)]
pub(super) struct Handed<'a> {
    pub token: Option<&'a str>,
    /// The required and the present optional annotations; left out when empty.
    pub annotations: Option<&'a BTreeMap<String, String>>,
}

/// Just the type fields, read first as kubelet's `json.DefaultMetaFactory.Interpret` does.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawResponse {
    #[allow(dead_code)] // Checked through TypeMeta; present so the strict decoder accepts it.
    api_version: String,
    #[allow(dead_code)] // As above.
    kind: String,
    cache_key_type: CacheKeyType,
    cache_duration: Option<String>,
    #[serde(default)]
    auth: Option<BTreeMap<String, RawAuth>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// The request for `image`, in `api_version`, with what the plugin is `handed`.
pub(super) fn request(api_version: &str, image: &str, handed: Handed<'_>) -> Vec<u8> {
    let request = Request {
        api_version,
        kind: "CredentialProviderRequest",
        image,
        service_account_token: handed.token.filter(|t| !t.is_empty()),
        service_account_annotations: handed.annotations.filter(|a| !a.is_empty()),
    };
    // Serialising strings into JSON cannot fail; an empty request would be refused by the
    // plugin, which is then reported like any failed exec.
    serde_json::to_vec(&request).unwrap_or_default()
}

/// Decodes a plugin's stdout, expecting `api_version`.
pub(super) fn decode(stdout: &[u8], api_version: &str) -> Result<Response, ResponseError> {
    let meta: TypeMeta = serde_json::from_slice(stdout).map_err(|_| ResponseError::NotAnObject)?;
    if meta.api_version != api_version {
        return Err(ResponseError::ApiVersion {
            expected: api_version.to_string(),
        });
    }
    if meta.kind != "CredentialProviderResponse" {
        return Err(ResponseError::Kind);
    }
    let raw: RawResponse = serde_json::from_slice(stdout).map_err(|e| ResponseError::Decode {
        problem: match e.classify() {
            serde_json::error::Category::Data => "a field is unknown or has the wrong type",
            _ => "malformed JSON",
        },
        line: e.line(),
        column: e.column(),
    })?;
    let cache_duration = match raw.cache_duration.as_deref() {
        None => None,
        Some(text) => match parse_go_duration(text) {
            Some(GoDuration::NonNegative(duration)) => Some(duration),
            _ => return Err(ResponseError::CacheDuration),
        },
    };
    let auth = raw
        .auth
        .unwrap_or_default()
        .into_iter()
        .map(|(key, a)| (key, Credential::basic(a.username, a.password)))
        .collect();
    Ok(Response {
        cache_key_type: raw.cache_key_type,
        cache_duration,
        auth,
    })
}

/// recent kubelets' check of an answer given with a token that is not cached per token: no
/// password may be the token itself.
pub(super) fn refuse_echoed_token(response: &Response, token: &str) -> Result<(), ResponseError> {
    let echoed = response.auth.iter().any(|(_, credential)| {
        matches!(credential, Credential::Basic { password, .. } if password == token)
    });
    match echoed {
        true => Err(ResponseError::EchoedToken),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

    #[test]
    fn the_request_is_what_kubelet_writes() {
        let sent: serde_json::Value = serde_json::from_slice(&request(
            V1,
            "123.dkr.ecr.us-east-1.amazonaws.com/app",
            Handed::default(),
        ))
        .expect("json");
        assert_eq!(
            sent,
            serde_json::json!({"apiVersion": V1, "kind": "CredentialProviderRequest",
                "image": "123.dkr.ecr.us-east-1.amazonaws.com/app"})
        );
        let annotations = BTreeMap::from([(
            "eks.amazonaws.com/role-arn".to_string(),
            "arn:aws:iam::1:role/r".to_string(),
        )]);
        let handed = Handed {
            token: Some("eyJ.t"),
            annotations: Some(&annotations),
        };
        let sent: serde_json::Value =
            serde_json::from_slice(&request(V1, "r.example/app", handed)).expect("json");
        assert_eq!(
            sent,
            serde_json::json!({"apiVersion": V1, "kind": "CredentialProviderRequest",
                "image": "r.example/app", "serviceAccountToken": "eyJ.t",
                "serviceAccountAnnotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}})
        );
    }

    #[test]
    fn an_answer_that_gives_the_token_back_is_refused() {
        let body = br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1",
            "kind":"CredentialProviderResponse","cacheKeyType":"Image",
            "auth":{"r.example":{"username":"<token>","password":"eyJ.t"}}}"#;
        let response = decode(body, V1).expect("decodes");
        assert_eq!(
            refuse_echoed_token(&response, "eyJ.t"),
            Err(ResponseError::EchoedToken)
        );
        assert_eq!(refuse_echoed_token(&response, "eyJ.other"), Ok(()));
    }

    #[test]
    fn a_response_decodes_into_entries_and_cache_settings() {
        let body = br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1",
            "kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"6h",
            "auth":{"*.registry.io":{"username":"AWS","password":"s3cret"}}}"#;
        let response = decode(body, V1).expect("decodes");
        assert_eq!(response.cache_key_type, CacheKeyType::Registry);
        assert_eq!(response.cache_duration, Some(Duration::from_secs(6 * 3600)));
        assert_eq!(
            response.auth,
            vec![(
                "*.registry.io".to_string(),
                Credential::basic("AWS", "s3cret")
            )]
        );
        let minimal = br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1",
            "kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#;
        let minimal = decode(minimal, V1).expect("decodes");
        assert_eq!((minimal.cache_duration, minimal.auth.len()), (None, 0));
    }

    #[rstest]
    #[case::garbage(&b"s3cret is not json"[..], "not a JSON object")]
    #[case::other_version(&br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#[..], "apiVersion")]
    #[case::other_kind(&br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"Secret","cacheKeyType":"Image"}"#[..], "kind")]
    #[case::bad_key_type(&br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"s3cret"}"#[..], "decode")]
    #[case::no_key_type(&br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse"}"#[..], "decode")]
    #[case::unknown_field(&br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"r":{"username":"u","password":"s3cret","token":"s3cret"}}}"#[..], "decode")]
    #[case::bad_duration(&br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"s3cret"}"#[..], "cacheDuration")]
    fn unusable_answers_are_errors_that_never_quote_them(#[case] body: &[u8], #[case] says: &str) {
        let error = decode(body, V1).expect_err("unusable");
        let message = error.to_string();
        assert!(message.contains(says), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
    }
}
