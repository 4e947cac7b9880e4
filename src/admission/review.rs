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
    /// Without `metadata.managedFields`, which pinhook never reads: it is read past, not
    /// kept (`objects::without_managed_fields`); so is `old_object`'s.
    #[serde(default, deserialize_with = "objects::without_managed_fields")]
    pub object: Option<Value>,
    #[serde(default, deserialize_with = "objects::without_managed_fields")]
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

/// The whole review in one pass: the fast path for a well-formed body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<AdmissionRequest>,
}

/// The envelope alone, for naming what is wrong with a body the one-pass read refused.
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
    let Ok(review) = serde_json::from_slice::<Review>(body) else {
        return parse_review_stepwise(body);
    };
    let api_version = review.api_version.unwrap_or_default();
    if api_version != API_VERSION {
        return Err(ReviewError::WrongApiVersion(api_version));
    }
    let kind = review.kind.unwrap_or_default();
    if kind != KIND {
        return Err(ReviewError::WrongKind(kind));
    }
    let request = review.request.ok_or(ReviewError::MissingRequest)?;
    if request.uid.is_empty() {
        return Err(ReviewError::MissingUid);
    }
    Ok(request)
}

/// The envelope first, then the request: what [`parse_review`] does when the one-pass read
/// fails, so the error names the part that is wrong (the JSON, the version, the kind, the
/// request). It gives the same answer as the one-pass read for every body that passes it.
fn parse_review_stepwise(body: &[u8]) -> Result<AdmissionRequest, ReviewError> {
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

mod objects {
    //! `request.object` / `request.oldObject` as a [`Value`], without `metadata.managedFields`.

    use std::fmt;

    use serde::de::{
        self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
    };
    use serde_json::{Map, Value};

    pub fn without_managed_fields<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Value>, D::Error> {
        deserializer.deserialize_any(Object { depth: 0 })
    }

    /// The object (depth 0) or its `metadata` (depth 1): a map whose entries are kept as
    /// [`Value`]s, except `managedFields` in `metadata`. Anything else is kept whole, as a
    /// plain `Value` read would.
    struct Object {
        depth: u8,
    }

    impl<'de> DeserializeSeed<'de> for Object {
        type Value = Option<Value>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Object {
        type Value = Option<Value>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
            let mut out = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                match (self.depth, key.as_str()) {
                    (0, "metadata") => {
                        let metadata = map.next_value_seed(Object { depth: 1 })?;
                        out.insert(key, metadata.unwrap_or(Value::Null));
                    }
                    (1, "managedFields") => {
                        map.next_value::<IgnoredAny>()?;
                    }
                    _ => {
                        let value = map.next_value::<Value>()?;
                        out.insert(key, value);
                    }
                }
            }
            Ok(Some(Value::Object(out)))
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<Value>, E> {
            Ok(match self.depth {
                0 => None,
                _ => Some(Value::Null),
            })
        }

        fn visit_none<E: de::Error>(self) -> Result<Option<Value>, E> {
            self.visit_unit()
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<Value>, E> {
            Ok(Some(Value::Bool(v)))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<Value>, E> {
            Ok(Some(Value::from(v)))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<Value>, E> {
            Ok(Some(Value::from(v)))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<Value>, E> {
            Ok(Some(Value::from(v)))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<Value>, E> {
            Ok(Some(Value::String(v.to_string())))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<Option<Value>, E> {
            Ok(Some(Value::String(v)))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element::<Value>()? {
                items.push(item);
            }
            Ok(Some(Value::Array(items)))
        }
    }
}

// === impl AdmissionRequest ===

impl AdmissionRequest {
    pub fn is_dry_run(&self) -> bool {
        self.dry_run.unwrap_or(false)
    }

    /// The authenticated user who sent the request (`userInfo.username`), empty if absent. The
    /// apiserver writes it; the object's author cannot.
    pub fn username(&self) -> &str {
        self.user_info
            .get("username")
            .and_then(Value::as_str)
            .unwrap_or("")
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
                // kubectl prints it: text from outside in it (a registry's error) must not
                // reach a terminal raw.
                message: crate::text::into_one_line(message.into()),
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

    /// `value` without `metadata.managedFields`, as the one-pass read keeps it.
    fn without_managed_fields(value: &Option<Value>) -> Option<Value> {
        let mut value = value.clone();
        if let Some(Value::Object(metadata)) = value.as_mut().and_then(|v| v.get_mut("metadata")) {
            metadata.remove("managedFields");
        }
        value
    }

    /// The one-pass read and the stepwise read give the same request for every review the
    /// apiservers sent (1.20 and 1.26, all kinds and operations), `managedFields` apart.
    #[test]
    fn one_pass_and_stepwise_reads_agree_on_every_captured_review() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admissionreview");
        let (mut reviews, mut with_managed_fields) = (0, 0);
        for version in ["v1.20", "v1.26"] {
            let entries = std::fs::read_dir(root.join(version)).expect("fixture directory");
            for entry in entries {
                let path = entry.expect("entry").path();
                let body = std::fs::read(&path).expect("fixture");
                let fast = parse_review(&body).expect("one pass");
                let slow = parse_review_stepwise(&body).expect("stepwise");
                let name = path.display();
                assert_eq!(fast.uid, slow.uid, "{name}");
                assert_eq!(fast.kind, slow.kind, "{name}");
                assert_eq!(fast.sub_resource, slow.sub_resource, "{name}");
                assert_eq!(
                    (&fast.name, &fast.namespace, &fast.operation),
                    (&slow.name, &slow.namespace, &slow.operation),
                    "{name}"
                );
                assert_eq!(fast.dry_run, slow.dry_run, "{name}");
                assert_eq!(fast.user_info, slow.user_info, "{name}");
                // The objects as a plain `Value` read has them, managedFields apart.
                let raw: Value = serde_json::from_slice(&body).expect("json");
                let plain = |key: &str| raw["request"].get(key).filter(|v| !v.is_null()).cloned();
                for (key, fast, slow) in [
                    ("object", &fast.object, &slow.object),
                    ("oldObject", &fast.old_object, &slow.old_object),
                ] {
                    assert_eq!(fast, slow, "{name} {key}");
                    assert_eq!(*fast, without_managed_fields(&plain(key)), "{name} {key}");
                    if plain(key)
                        .and_then(|o| o.pointer("/metadata/managedFields").cloned())
                        .is_some()
                    {
                        with_managed_fields += 1;
                    }
                }
                reviews += 1;
            }
        }
        assert!(reviews >= 100, "only {reviews} captured reviews read");
        assert!(
            with_managed_fields >= 10,
            "only {with_managed_fields} had managedFields"
        );
    }

    /// A body the one-pass read refuses is named exactly as the stepwise read names it, and a
    /// non-object `object` or `metadata` is kept as it came.
    #[test]
    fn refused_bodies_are_named_by_the_stepwise_read_and_odd_objects_kept() {
        let envelope = |request: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{request}}}"#
            )
        };
        let deep = format!(
            r#"{{"uid":"u","object":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for body in [
            envelope(r#"{"uid":"u","object":{"metadata":{"managedFields":[{"a":"#),
            envelope(
                r#"{"uid":"u","object":{"metadata":{"managedFields":5,"name":7}},"dryRun":"x"}"#,
            ),
            envelope(&deep),
            r#"{"apiVersion":"v0","kind":"AdmissionReview","request":{"uid":5}}"#.to_string(),
        ] {
            let fast = parse_review(body.as_bytes()).err().map(|e| e.to_string());
            let slow = parse_review_stepwise(body.as_bytes())
                .err()
                .map(|e| e.to_string());
            assert!(fast.is_some(), "{body}");
            assert_eq!(fast, slow, "{body}");
        }
        for (object, kept) in [
            (r#""text""#, Some(Value::from("text"))),
            ("[1,2]", Some(serde_json::json!([1, 2]))),
            ("null", None),
            (
                r#"{"metadata":null,"spec":{"managedFields":1}}"#,
                Some(serde_json::json!({"metadata": null, "spec": {"managedFields": 1}})),
            ),
            (
                r#"{"metadata":{"name":"n","managedFields":[{"manager":"kubectl"}]}}"#,
                Some(serde_json::json!({"metadata": {"name": "n"}})),
            ),
        ] {
            let body = envelope(&format!(r#"{{"uid":"u","object":{object}}}"#));
            let request = parse_review(body.as_bytes()).expect("parses");
            assert_eq!(request.object, kept, "{object}");
        }
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
