//! The resolution cache against a real registry: single-flight under 200 concurrent admissions,
//! stale-if-error while the registry is down, negative entries, and tag-move detection.

mod common;

use std::time::Duration;

use common::images;
use common::pinhook::{apply_response, review_fixture, Options, TestPinhook};
use common::registry::{RegistryAuth, TestRegistry};
use futures::future::join_all;
use pinhook::registry::CacheConfig;
use serde_json::{json, Value};

fn pod_review(registry: &TestRegistry, image: &str) -> Value {
    let mut review = review_fixture("v1.26/pod-create-basic-mutate.json", registry);
    review["request"]["object"]["spec"]["containers"][0]["image"] =
        json!(format!("{}/{image}", registry.host()));
    review
}

async fn mutate(pinhook: &TestPinhook, review: &Value) -> Value {
    let (status, body) = pinhook
        .post(
            "/mutate?timeout=10s",
            serde_json::to_vec(review).expect("json"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

fn image_after(review: &Value, body: &Value) -> String {
    apply_response(review, body)["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn fast_backoff() -> CacheConfig {
    CacheConfig {
        backoff_base: Duration::from_millis(50),
        backoff_cap: Duration::from_millis(200),
        ..CacheConfig::default()
    }
}

async fn metrics(pinhook: &TestPinhook) -> String {
    let response = pinhook
        .client
        .get(pinhook.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    response.text().await.expect("text")
}

#[tokio::test]
async fn two_hundred_concurrent_admissions_of_a_new_tag_make_one_registry_request() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pushed = images::push_multi_arch(&registry, "team/hot", "1.0", "hot").await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = pod_review(&registry, "team/hot:1.0");
    let body = serde_json::to_vec(&review).expect("json");

    let answers =
        join_all((0..200).map(|_| pinhook.post("/mutate?timeout=10s", body.clone()))).await;

    for (status, text) in &answers {
        assert_eq!(*status, 200, "{text}");
        let body: Value = serde_json::from_str(text).expect("json");
        assert!(
            image_after(&review, &body).ends_with(&pushed.index_digest),
            "{text}"
        );
    }
    let manifest_requests = registry
        .count_requests("HEAD", "/v2/team/hot/manifests/1.0")
        .await
        + registry
            .count_requests("GET", "/v2/team/hot/manifests/1.0")
            .await;
    assert_eq!(manifest_requests, 1, "{}", registry.log_tail(20));
    let text = metrics(&pinhook).await;
    assert!(
        text.contains("pinhook_cache_lookups_total{result=\"miss\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("pinhook_registry_requests_total{registry="),
        "{text}"
    );
}

#[tokio::test]
async fn while_the_registry_is_down_cached_images_still_pin_and_new_ones_are_refused() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let known = images::push_multi_arch(&registry, "team/known", "1.0", "k").await;
    images::push_multi_arch(&registry, "team/new", "1.0", "n").await;
    let options = Options {
        cache: fast_backoff(),
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(&registry, options).await;
    let known_review = pod_review(&registry, "team/known:1.0");
    let new_review = pod_review(&registry, "team/new:1.0");
    assert_eq!(
        mutate(&pinhook, &known_review).await["response"]["allowed"],
        true
    );

    registry.stop();
    pinhook.resolver.expire_all();

    let body = mutate(&pinhook, &known_review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(image_after(&known_review, &body).ends_with(&known.index_digest));
    let warnings = body["response"]["warnings"].to_string();
    assert!(warnings.contains("registry unavailable"), "{body}");

    let body = mutate(&pinhook, &new_review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = body["response"]["status"]["message"]
        .as_str()
        .expect("message");
    assert!(message.contains("cannot reach registry"), "{message}");
    assert!(metrics(&pinhook)
        .await
        .contains("pinhook_cache_lookups_total{result=\"stale\"} 1"));

    registry.start_again().await;
    tokio::time::sleep(Duration::from_millis(300)).await; // past the backoff
    let body = mutate(&pinhook, &new_review).await;
    assert_eq!(
        body["response"]["allowed"], true,
        "resolution resumes: {body}"
    );
}

#[tokio::test]
async fn not_found_is_remembered_briefly_and_transport_errors_are_not() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = pod_review(&registry, "team/ghost:1.0");

    for _ in 0..3 {
        assert_eq!(
            mutate(&pinhook, &review).await["response"]["allowed"],
            false
        );
    }

    let heads = registry
        .count_requests("HEAD", "/v2/team/ghost/manifests/1.0")
        .await;
    assert_eq!(heads, 1, "a not-found answer is cached for the failure TTL");
    assert!(metrics(&pinhook)
        .await
        .contains("pinhook_cache_lookups_total{result=\"negative_hit\"} 2"));
}

#[tokio::test]
async fn a_tag_pushed_over_is_reported_as_moved() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let before = images::push_multi_arch(&registry, "team/app", "1.0", "before").await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = pod_review(&registry, "team/app:1.0");
    let body = mutate(&pinhook, &review).await;
    assert!(image_after(&review, &body).ends_with(&before.index_digest));

    let after = images::push_multi_arch(&registry, "team/app", "1.0", "after").await;
    assert_ne!(before.index_digest, after.index_digest);
    pinhook.resolver.expire_all();
    let body = mutate(&pinhook, &review).await;

    assert!(
        image_after(&review, &body).ends_with(&after.index_digest),
        "{body}"
    );
    let warnings = body["response"]["warnings"].to_string();
    assert!(warnings.contains("moved from sha256:"), "{body}");
    let moves = pinhook.resolver.recent_moves();
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].from.to_string(), before.index_digest);
    assert_eq!(moves[0].to.to_string(), after.index_digest);
    assert!(metrics(&pinhook)
        .await
        .contains("pinhook_tag_moved_total 1"));
}

/// A registry that accepts connections and never answers (SIGSTOP): the admission deadline
/// from `?timeout=` is kept, a cached image is pinned to its last known digest with a warning,
/// an uncached one is refused with a message naming the time waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_registry_costs_one_deadline_and_serves_the_last_known_digest() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let known = images::push_multi_arch(&registry, "team/known", "1.0", "k").await;
    images::push_multi_arch(&registry, "team/new", "1.0", "n").await;
    let pinhook = TestPinhook::start(&registry).await;
    let known_review = pod_review(&registry, "team/known:1.0");
    let new_review = pod_review(&registry, "team/new:1.0");
    assert_eq!(
        mutate(&pinhook, &known_review).await["response"]["allowed"],
        true
    );
    pinhook.resolver.expire_all();
    registry.pause();

    let post = |review: &Value| {
        let body = serde_json::to_vec(review).expect("json");
        async {
            let started = std::time::Instant::now();
            let (status, text) = pinhook.post("/mutate?timeout=2s", body).await;
            assert_eq!(status, 200, "{text}");
            let body: Value = serde_json::from_str(&text).expect("json");
            (body, started.elapsed())
        }
    };
    let (body, took) = post(&known_review).await;
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(image_after(&known_review, &body).ends_with(&known.index_digest));
    let warnings = body["response"]["warnings"].to_string();
    assert!(warnings.contains("registry unavailable"), "{body}");

    let (body, took) = post(&new_review).await;
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = body["response"]["status"]["message"]
        .as_str()
        .expect("message");
    assert!(message.contains("did not answer within 1."), "{message}");
    registry.resume();
}
