//! Bounded work per review (issue 10 item 4), over HTTPS: an object cannot make pinhook send
//! more registry requests than the policy's `limits.maxImagesPerObject`, and neither the
//! answer nor the log grows with the number of containers. Before these bounds, a 7.2 MB
//! review with 140k refused containers got a 61.8 MB answer and 126 MB of logs.

use crate::common::logs::Captured;
use crate::common::pinhook::{Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{message, pod_review};
use pinhook::policy::{Policy, Registries};
use serde_json::{json, Value};

/// The basic Pod review with `images`, one container each.
fn pod_with(registry: &TestRegistry, images: impl Iterator<Item = String>) -> Value {
    let mut review = pod_review(registry, "placeholder:1");
    let containers: Vec<Value> = images
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    review["request"]["object"]["spec"]["containers"] = Value::Array(containers);
    review
}

// Its own runtime (two workers, as `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]`
// builds), so that the log capture holds this test's lines only.
#[test]
fn answers_and_logs_stay_small_whatever_the_object_holds() {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.worker_threads(2);
    Captured::run(
        tracing::Level::INFO,
        &mut runtime,
        answers_and_logs_stay_small,
    );
}

async fn answers_and_logs_stay_small(captured: Captured) {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let options = Options {
        policy: Policy {
            registries: Registries {
                deny: vec!["denied.example".to_string()],
                ..Registries::default()
            },
            ..Policy::default()
        },
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(&registry, options).await;

    // 1. 20,000 containers on a denied registry: refused without a lookup, in a small answer.
    let review = pod_with(
        &registry,
        (0..20_000).map(|i| format!("denied.example/team/app{}:1", i % 7)),
    );
    let (status, text) = pinhook
        .post(
            "/mutate?timeout=10s",
            serde_json::to_vec(&review).expect("json"),
        )
        .await;
    assert_eq!(status, 200);
    assert!(text.len() < 16 * 1024, "a {} byte answer", text.len());
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["response"]["allowed"], false);
    let denial = message(&body);
    assert!(denial.ends_with("; and 19990 more"), "{denial}");
    let annotations = body["response"]["auditAnnotations"]
        .as_object()
        .expect("annotations");
    assert_eq!(annotations.len(), 21, "{annotations:?}");
    assert_eq!(
        annotations["violations-omitted"],
        "and 19980 more (see pinhook's log)"
    );
    let logs = captured.text();
    let violations = logs.matches(": policy violation ").count();
    assert_eq!(violations, 10, "one line each for the first ten: {logs}");
    assert!(
        logs.contains("more policy violations in this review, not logged one by one")
            && logs.contains("omitted=19990"),
        "{logs}"
    );
    assert!(logs.len() < 16 * 1024, "{} bytes of logs", logs.len());

    // 2. 101 distinct tags on an allowed registry: refused naming the limit, nothing asked.
    let review = pod_with(
        &registry,
        (0..101).map(|i| registry.image_ref(&format!("team/app{i}"), "1")),
    );
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], false);
    let denial = message(&body);
    assert!(
        denial.contains(
            "the object names 101 distinct images to resolve, more than the policy's limit of \
             100 (limits.maxImagesPerObject); none was resolved"
        ),
        "{denial}"
    );
    assert!(denial.ends_with("; and 91 more"), "{denial}");
    let metrics = pinhook.scrape_metrics().await;
    assert!(
        !metrics.contains("pinhook_registry_requests_total{"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "pinhook_policy_violations_total{mode=\"enforce\",reason=\"too_many_images\"} 101"
        ),
        "{metrics}"
    );

    // 3. One summary line per review at info: the pinned image is not a line of its own.
    let before = captured.len();
    let app = crate::common::images::push_multi_arch(&registry, "team/app", "1.0", "a").await;
    let body = pinhook.mutate(&pod_review(&registry, &app.reference)).await;
    assert_eq!(body["response"]["allowed"], true);
    let logs = captured.text_from(before);
    let reviews: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains(" review ") || l.ends_with(" review"))
        .collect();
    assert!(!logs.contains("pinned image"), "{logs}");
    assert!(
        logs.lines()
            .any(|l| l.contains("pinned=1") && l.contains("violations=0")),
        "{logs} / {reviews:?}"
    );
}
