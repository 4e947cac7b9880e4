//! Talking to a running [`TestPinhook`] as the API server does, and building and reading the
//! AdmissionReviews it is sent: one copy of each helper the integration tests share.
//!
//! The methods post to pinhook and assert the HTTP status (200); what the review answered is
//! for the test to judge. The free functions only build or read JSON and never do I/O.

use serde_json::{json, Value};

use super::pinhook::{apply_response, review_fixture, TestPinhook};
use super::registry::TestRegistry;

/// The captured Pod CREATE that most tests start from.
pub const BASIC_POD: &str = "v1.26/pod-create-basic-mutate.json";

// === impl TestPinhook ===

impl TestPinhook {
    /// POSTs `review` to `path`, asserts 200 and returns the AdmissionReview pinhook answered.
    pub async fn review(&self, path: &str, review: &Value) -> Value {
        let (status, body) = self
            .post(path, serde_json::to_vec(review).expect("review is JSON"))
            .await;
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).expect("response is JSON")
    }

    /// `/mutate` with the `timeout` the API server sends by default.
    pub async fn mutate(&self, review: &Value) -> Value {
        self.review("/mutate?timeout=10s", review).await
    }

    /// `/validate` with the `timeout` the API server sends by default.
    pub async fn validate(&self, review: &Value) -> Value {
        self.review("/validate?timeout=10s", review).await
    }

    /// The text of `GET /metrics`.
    pub async fn scrape_metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("pinhook serves /metrics")
            .text()
            .await
            .expect("metrics are text")
    }
}

// === building reviews ===

/// The captured `fixture` with its first container's image set to `image`.
pub fn fixture_with_image(fixture: &str, registry: &TestRegistry, image: &str) -> Value {
    let mut review = review_fixture(fixture, registry);
    *pod_image(&mut review) = json!(image);
    review
}

/// The captured basic Pod CREATE with its one container's image set to `image`.
pub fn pod_review(registry: &TestRegistry, image: &str) -> Value {
    fixture_with_image(BASIC_POD, registry, image)
}

/// Moves a review and the object in it to `namespace`.
pub fn in_namespace(review: &mut Value, namespace: &str) {
    review["request"]["namespace"] = json!(namespace);
    review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
}

/// The first container's image of a Pod review.
pub fn pod_image(review: &mut Value) -> &mut Value {
    &mut review["request"]["object"]["spec"]["containers"][0]["image"]
}

/// The pod template's spec of a workload review (Deployment, ReplicaSet, ...).
pub fn template_spec(review: &mut Value) -> &mut Value {
    &mut review["request"]["object"]["spec"]["template"]["spec"]
}

// === reading answers ===

/// The first container's image of a Pod review once pinhook's patch is applied.
pub fn image_after(review: &Value, body: &Value) -> String {
    apply_response(review, body)["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_else(|| panic!("the patched pod has an image: {body}"))
        .to_string()
}

/// The message of a denial.
pub fn message(body: &Value) -> &str {
    body["response"]["status"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("a denial carries a message: {body}"))
}

/// The warnings of a response (none when it has none).
pub fn warnings(body: &Value) -> Vec<String> {
    match &body["response"]["warnings"] {
        Value::Null => Vec::new(),
        Value::Array(items) => items
            .iter()
            .map(|w| {
                w.as_str()
                    .unwrap_or_else(|| panic!("warnings are strings: {body}"))
                    .to_string()
            })
            .collect(),
        other => panic!("warnings are an array, not {other}"),
    }
}

/// Whether any warning of a response contains `needle`.
pub fn warned(body: &Value, needle: &str) -> bool {
    warnings(body).iter().any(|w| w.contains(needle))
}

/// A seeded xorshift: `next(n)` is in `0..n`, the same sequence every run (the random tests of
/// references and globs).
#[allow(dead_code)]
pub fn seeded(mut state: u64) -> impl FnMut(usize) -> usize {
    move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n.max(1) as u64) as usize
    }
}
