//! A registry that accepts connections and never answers, under load (issue 10 item 5): the
//! lookups of reviews that have been answered stop, the registry's breaker opens so later
//! reviews for it are answered at once, and another registry is not affected. Before, 50
//! reviews × 10 tags were answered in time but HEADs kept going out 16 at a time for two more
//! minutes, and reviews for other images on that registry were refused meanwhile only after
//! waiting their whole deadline.

use std::time::{Duration, Instant};

use crate::common::images;
use crate::common::pinhook::{Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{message, pod_review};
use crate::common::silent::SilentServer;
use futures::future::join_all;
use pinhook::policy::Policy;
use serde_json::{json, Value};

/// A Pod review with ten distinct tags on `host`, numbered from `first`.
fn ten_tags(registry: &TestRegistry, host: &str, first: usize) -> Value {
    let mut review = pod_review(registry, "placeholder:1");
    let containers: Vec<Value> = (first..first + 10)
        .map(|i| json!({"name": format!("c{i}"), "image": format!("{host}/team/app{i}:1")}))
        .collect();
    review["request"]["object"]["spec"]["containers"] = Value::Array(containers);
    review
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_lookups_stop_and_the_hanging_registry_trips_its_breaker_alone() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let app = images::push_multi_arch(&registry, "team/app", "1.0", "a").await;
    let silent = SilentServer::start().await;
    let mut policy = Policy::default();
    policy.registries.allow_private.push(silent.host());
    let options = Options {
        policy,
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(&registry, options).await;

    // 50 reviews × 10 distinct tags on the hanging registry, at once, with a 2 s deadline.
    let reviews: Vec<Vec<u8>> = (0..50)
        .map(|r| serde_json::to_vec(&ten_tags(&registry, &silent.host(), r * 10)).expect("json"))
        .collect();
    let started = Instant::now();
    let answers = join_all(
        reviews
            .into_iter()
            .map(|body| pinhook.post("/mutate?timeout=2s", body)),
    )
    .await;
    let answered_in = started.elapsed();
    for (status, text) in &answers {
        assert_eq!(*status, 200, "{text}");
        let body: Value = serde_json::from_str(text).expect("json");
        assert_eq!(body["response"]["allowed"], false, "{text}");
    }
    assert!(
        answered_in < Duration::from_secs(4),
        "answered after {answered_in:?}"
    );

    // Every review has answered: nothing goes on talking to the hanging registry.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let accepted = silent.accepted();
    assert_eq!(
        silent.open(),
        0,
        "{accepted} connections made, some still open"
    );
    // The 16 call slots were taken once; the calls that waited for a slot are refused by the
    // breaker the first ones opened, or cancelled with their reviews (a few may connect in
    // between: each cancelled call frees a slot for one still waiting).
    assert!(accepted < 100, "{accepted} connections for 500 tags");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        silent.accepted(),
        accepted,
        "calls went on after their reviews"
    );

    // The next review for that registry is answered at once, naming why.
    let started = Instant::now();
    let body = pinhook
        .review(
            "/mutate?timeout=10s",
            &ten_tags(&registry, &silent.host(), 1000),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(body["response"]["allowed"], false);
    assert!(took < Duration::from_millis(500), "took {took:?}");
    let denial = message(&body);
    assert!(
        denial.contains(&format!("registry {} did not answer", silent.host()))
            && denial.contains("times in a row; pinhook asks it again in"),
        "{denial}"
    );
    assert_eq!(
        silent.accepted(),
        accepted,
        "no call while the breaker is open"
    );

    // Another registry is not affected.
    let body = pinhook.mutate(&pod_review(&registry, &app.reference)).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let metrics = pinhook.scrape_metrics().await;
    let cancelled = metrics
        .lines()
        .find_map(|l| l.strip_prefix("pinhook_cache_lookups_total{result=\"cancelled\"} "))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(cancelled >= 10, "{metrics}");
}
