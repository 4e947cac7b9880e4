//! The resolution cache against a real registry: single-flight under 200 concurrent admissions,
//! stale-if-error while the registry is down, negative entries, and tag-move detection.

use std::time::Duration;

use crate::common::images;
use crate::common::pinhook::{Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{image_after, message, pod_review, warned, warnings};
use futures::future::join_all;
use pinhook::registry::CacheConfig;
use serde_json::Value;

fn fast_backoff() -> CacheConfig {
    CacheConfig {
        backoff_base: Duration::from_millis(50),
        backoff_cap: Duration::from_millis(200),
        ..CacheConfig::default()
    }
}

#[tokio::test]
async fn two_hundred_concurrent_admissions_of_a_new_tag_make_one_registry_request() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pushed = images::push_multi_arch(&registry, "team/hot", "1.0", "hot").await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = pod_review(&registry, &registry.image_ref("team/hot", "1.0"));
    let body = serde_json::to_vec(&review).expect("json");

    let answers =
        join_all((0..200).map(|_| pinhook.post("/mutate?timeout=10s", body.clone()))).await;

    for (status, text) in &answers {
        assert_eq!(*status, 200, "{text}");
        let body: Value = serde_json::from_str(text).expect("json");
        assert_eq!(
            image_after(&review, &body),
            pushed.pinned_with_tag(),
            "{text}"
        );
    }
    let manifest_requests = registry.manifest_heads("team/hot", "1.0").await
        + registry
            .count_requests("GET", "/v2/team/hot/manifests/1.0")
            .await;
    assert_eq!(manifest_requests, 1, "{}", registry.log_tail(20));
    let text = pinhook.scrape_metrics().await;
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
    let known_review = pod_review(&registry, &registry.image_ref("team/known", "1.0"));
    let new_review = pod_review(&registry, &registry.image_ref("team/new", "1.0"));
    assert_eq!(
        pinhook.mutate(&known_review).await["response"]["allowed"],
        true
    );

    registry.stop();
    pinhook.resolver.expire_all();

    let body = pinhook.mutate(&known_review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&known_review, &body), known.pinned_with_tag());
    assert!(warned(&body, "registry unavailable"), "{body}");

    let body = pinhook.mutate(&new_review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = message(&body);
    assert!(message.contains("cannot reach registry"), "{message}");
    assert!(pinhook
        .scrape_metrics()
        .await
        .contains("pinhook_cache_lookups_total{result=\"stale\"} 1"));

    registry.start_again().await;
    tokio::time::sleep(Duration::from_millis(300)).await; // past the backoff
    let body = pinhook.mutate(&new_review).await;
    assert_eq!(
        body["response"]["allowed"], true,
        "resolution resumes: {body}"
    );
}

#[tokio::test]
async fn not_found_is_remembered_briefly_and_transport_errors_are_not() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = pod_review(&registry, &registry.image_ref("team/ghost", "1.0"));

    for _ in 0..3 {
        assert_eq!(pinhook.mutate(&review).await["response"]["allowed"], false);
    }

    let heads = registry.manifest_heads("team/ghost", "1.0").await;
    assert_eq!(heads, 1, "a not-found answer is cached for the failure TTL");
    assert!(pinhook
        .scrape_metrics()
        .await
        .contains("pinhook_cache_lookups_total{result=\"negative_hit\"} 2"));
}

#[tokio::test]
async fn a_tag_pushed_over_is_reported_as_moved() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let before = images::push_multi_arch(&registry, "team/app", "1.0", "before").await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = pod_review(&registry, &registry.image_ref("team/app", "1.0"));
    let body = pinhook.mutate(&review).await;
    assert_eq!(image_after(&review, &body), before.pinned_with_tag());

    let after = images::push_multi_arch(&registry, "team/app", "1.0", "after").await;
    assert_ne!(before.index_digest, after.index_digest);
    pinhook.resolver.expire_all();
    let body = pinhook.mutate(&review).await;

    assert_eq!(
        image_after(&review, &body),
        after.pinned_with_tag(),
        "{body}"
    );
    // Digests are shortened to 12 hex digits: warnings are cut at 120 characters.
    let moved = format!(
        "pinhook: tag {} moved from {} to {}",
        before.reference,
        &before.index_digest[.."sha256:".len() + 12],
        &after.index_digest[.."sha256:".len() + 12],
    );
    assert_eq!(warnings(&body), [moved], "{body}");
    let moves = pinhook.resolver.recent_moves();
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].from.to_string(), before.index_digest);
    assert_eq!(moves[0].to.to_string(), after.index_digest);
    assert!(pinhook
        .scrape_metrics()
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
    let known_review = pod_review(&registry, &registry.image_ref("team/known", "1.0"));
    let new_review = pod_review(&registry, &registry.image_ref("team/new", "1.0"));
    assert_eq!(
        pinhook.mutate(&known_review).await["response"]["allowed"],
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
    assert_eq!(image_after(&known_review, &body), known.pinned_with_tag());
    assert!(warned(&body, "registry unavailable"), "{body}");

    let (body, took) = post(&new_review).await;
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = message(&body);
    assert!(message.contains("did not answer within 1."), "{message}");
    registry.resume();
}
