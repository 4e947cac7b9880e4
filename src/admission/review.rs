//! AdmissionReview `admission.k8s.io/v1` in and out, as the kube-apiserver sends and expects it.
//!
//! Our own types rather than kube-core's: kube-core 5 serialises `response.patch` as a JSON
//! array of numbers (kube-rs/kube#1781); the documented wire form is a base64 string, and that
//! is what we emit. Parsing reports the specific field that is wrong.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";

/// Why a request body is not an AdmissionReview we can answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("request body is not valid JSON")]
    MalformedJson(#[source] serde_json::Error),
    #[error("apiVersion must be \"admission.k8s.io/v1\", got {0:?}")]
    WrongApiVersion(String),
    #[error("kind must be \"AdmissionReview\", got {0:?}")]
    WrongKind(String),
    #[error("AdmissionReview has no request")]
    MissingRequest,
    #[error("request.uid is missing or empty")]
    MissingUid,
    #[error("request is malformed")]
    MalformedRequest(#[source] serde_json::Error),
}

/// `request.kind` / `request.requestKind`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// The fields of `request` pinhook reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub sub_resource: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub operation: String,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(default)]
    pub old_object: Option<Value>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    #[serde(default)]
    pub user_info: Value,
}

/// `response`, as sent back.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Base64 of an RFC 6902 JSON Patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<String, String>,
}

/// `metav1.Status` for a denial.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Status {
    pub code: u16,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub status: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    api_version: Option<String>,
    kind: Option<String>,
    /// Kept as text and parsed once, straight into [`AdmissionRequest`]: through a `Value`
    /// first, the whole object tree was built twice (a quarter of the warm path's CPU).
    #[serde(borrow)]
    request: Option<&'a serde_json::value::RawValue>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseEnvelope<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: &'a AdmissionResponse,
}

/// Parses an AdmissionReview body, naming what is wrong.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest, ReviewError> {
    let envelope: Envelope = serde_json::from_slice(body).map_err(ReviewError::MalformedJson)?;
    let api_version = envelope.api_version.unwrap_or_default();
    if api_version != API_VERSION {
        return Err(ReviewError::WrongApiVersion(api_version));
    }
    let kind = envelope.kind.unwrap_or_default();
    if kind != KIND {
        return Err(ReviewError::WrongKind(kind));
    }
    let request = envelope.request.ok_or(ReviewError::MissingRequest)?;
    let request: AdmissionRequest =
        serde_json::from_str(request.get()).map_err(ReviewError::MalformedRequest)?;
    if request.uid.is_empty() {
        return Err(ReviewError::MissingUid);
    }
    Ok(request)
}

/// Serialises a response inside its AdmissionReview envelope.
pub fn review_body(response: &AdmissionResponse) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&ResponseEnvelope {
        api_version: API_VERSION,
        kind: KIND,
        response,
    })
}

// === impl AdmissionRequest ===

impl AdmissionRequest {
    pub fn is_dry_run(&self) -> bool {
        self.dry_run.unwrap_or(false)
    }
}

// === impl AdmissionResponse ===

impl AdmissionResponse {
    pub fn allow(uid: &str) -> AdmissionResponse {
        AdmissionResponse {
            uid: uid.to_string(),
            allowed: true,
            ..AdmissionResponse::default()
        }
    }

    /// A denial. The apiserver shows `message` to the user after
    /// `admission webhook "<name>" denied the request: `.
    pub fn deny(uid: &str, code: u16, message: impl Into<String>) -> AdmissionResponse {
        AdmissionResponse {
            uid: uid.to_string(),
            allowed: false,
            status: Some(Status {
                code,
                message: message.into(),
                reason: None,
                status: "Failure".to_string(),
            }),
            ..AdmissionResponse::default()
        }
    }

    /// Attaches a JSON Patch; an empty patch attaches nothing (no change).
    pub fn with_patch(
        mut self,
        patch: &json_patch::Patch,
    ) -> Result<AdmissionResponse, serde_json::Error> {
        if patch.0.is_empty() {
            return Ok(self);
        }
        let bytes = serde_json::to_vec(patch)?;
        self.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
        self.patch_type = Some("JSONPatch".to_string());
        Ok(self)
    }

    pub fn with_warnings(mut self, warnings: Vec<String>) -> AdmissionResponse {
        self.warnings = warnings;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_or_null_request_is_missing_and_a_non_object_is_malformed() {
        let envelope = |request: &str| {
            format!(r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"{request}}}"#)
        };
        for body in [envelope(""), envelope(r#","request":null"#)] {
            assert!(
                matches!(
                    parse_review(body.as_bytes()),
                    Err(ReviewError::MissingRequest)
                ),
                "{body}"
            );
        }
        let body = envelope(r#","request":[1]"#);
        assert!(
            matches!(
                parse_review(body.as_bytes()),
                Err(ReviewError::MalformedRequest(_))
            ),
            "{body}"
        );
    }

    #[test]
    fn names_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("{", "not valid JSON"),
            (
                r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#,
                "apiVersion must be",
            ),
            (
                r#"{"apiVersion":"admission.k8s.io/v1","kind":"Pod"}"#,
                "kind must be",
            ),
            (
                r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
                "no request",
            ),
            (
                r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}"#,
                "uid is missing",
            ),
            (
                r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}"#,
                "request is malformed",
            ),
        ];
        for (body, expected) in cases {
            let err = parse_review(body.as_bytes()).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(expected)),
                "{body}: {err:?} should contain {expected:?}"
            );
        }
    }

    #[test]
    fn patch_is_a_base64_string_on_the_wire() {
        let patch: json_patch::Patch = serde_json::from_str(
            r#"[{"op":"replace","path":"/spec/containers/0/image","value":"a@sha256:00"}]"#,
        )
        .expect("valid patch");
        let response = AdmissionResponse::allow("u")
            .with_patch(&patch)
            .expect("serialises");
        let body: Value =
            serde_json::from_slice(&review_body(&response).expect("serialises")).expect("json");
        let encoded = body["response"]["patch"]
            .as_str()
            .expect("patch is a string");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("base64");
        let back: Value = serde_json::from_slice(&decoded).expect("patch json");
        assert_eq!(back[0]["path"], "/spec/containers/0/image");
        assert_eq!(body["response"]["patchType"], "JSONPatch");
        assert_eq!(body["apiVersion"], API_VERSION);
        assert_eq!(body["kind"], KIND);
    }

    #[test]
    fn empty_patch_sends_neither_patch_nor_type() {
        let response = AdmissionResponse::allow("u")
            .with_patch(&json_patch::Patch(Vec::new()))
            .expect("serialises");
        assert_eq!(response.patch, None);
        assert_eq!(response.patch_type, None);
    }
}
