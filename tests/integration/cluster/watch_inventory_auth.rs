//! Who may read `pinhook watch`'s `/inventory` (issue 25): the watch's own HTTP routes served
//! on 127.0.0.1 with the gate checking callers through the fake Kubernetes API's TokenReview
//! and SubjectAccessReview. No refusal carries inventory data; health stays open; decisions are
//! cached; a flood of unknown tokens is throttled rather than passed on to the apiserver.

use std::sync::Arc;

use pinhook::policy::Policy;
use pinhook::watch::controller::{http, InventoryAuth, InventoryGate, PodStore};

use super::watch::{deployment_pod, record, rig};
use crate::common::fake_kube::FakeKube;

const IMAGE: &str = "reg.example/team/secret-app:3";

struct Served {
    api: FakeKube,
    base: String,
    client: reqwest::Client,
}

/// The watch after one cycle over a Pod in `payments`, its routes on 127.0.0.1 behind `auth`.
async fn served(auth: InventoryAuth) -> Served {
    crate::common::tls::init_crypto();
    let rig = rig(Policy::default()).await;
    let pods = vec![record(&deployment_pod(
        "payments",
        "ledger",
        1,
        &[("app", IMAGE)],
    ))];
    rig.watch.recheck(&pods).await.expect("cycle");
    let api = rig.api;
    let gate = Arc::new(InventoryGate::new(auth, api.client()));
    let router = http::router(Arc::new(rig.watch), PodStore::default(), gate);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Served {
        api,
        base,
        client: reqwest::Client::new(),
    }
}

impl Served {
    async fn inventory(&self, token: Option<&str>) -> (u16, String) {
        let mut request = self.client.get(format!("{}/inventory", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("answered");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }
}

#[tokio::test]
async fn the_inventory_is_for_callers_the_cluster_lets_list_pods_everywhere() {
    let served = served(InventoryAuth::Kubernetes).await;
    served
        .api
        .add_token("reader-token", "system:serviceaccount:ops:reader");
    served
        .api
        .add_token("nosy-token", "system:serviceaccount:team:nosy");
    served
        .api
        .grant("system:serviceaccount:ops:reader", "list", "", "pods", "");
    // Listing pods in one namespace is not listing them everywhere.
    served.api.grant(
        "system:serviceaccount:team:nosy",
        "list",
        "",
        "pods",
        "team",
    );

    let (status, body) = served.inventory(None).await;
    assert_eq!(status, 401, "no token: {body}");
    assert!(
        !body.contains("secret-app") && !body.contains("payments"),
        "{body}"
    );

    let (status, body) = served.inventory(Some("made-up-token")).await;
    assert_eq!(status, 401, "a token the cluster rejects: {body}");
    assert!(!body.contains("secret-app"), "{body}");

    let (status, body) = served.inventory(Some("nosy-token")).await;
    assert_eq!(status, 403, "authenticated, not allowed: {body}");
    assert!(
        !body.contains("secret-app") && !body.contains("payments"),
        "{body}"
    );

    let (status, body) = served.inventory(Some("reader-token")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(IMAGE) && body.contains("payments"), "{body}");

    // The review asked is `list pods` in every namespace, for the authenticated user.
    let reviews = served.api.access_reviews();
    let last = reviews.last().expect("a SubjectAccessReview");
    assert_eq!(last["user"], "system:serviceaccount:ops:reader");
    assert_eq!(last["resourceAttributes"]["verb"], "list");
    assert_eq!(last["resourceAttributes"]["resource"], "pods");
    assert!(
        last["resourceAttributes"].get("namespace").is_none(),
        "{last}"
    );

    // Decided callers are answered from memory for a while: no new review.
    let (token_reviews, access_reviews) = (served.api.token_reviews(), reviews.len());
    for token in [
        Some("reader-token"),
        Some("nosy-token"),
        Some("made-up-token"),
    ] {
        served.inventory(token).await;
    }
    assert_eq!(served.api.token_reviews(), token_reviews);
    assert_eq!(served.api.access_reviews().len(), access_reviews);

    // Health and readiness stay open.
    let health = served
        .client
        .get(format!("{}/healthz", served.base))
        .send()
        .await
        .expect("answered");
    assert_eq!(health.status().as_u16(), 200);
}

#[tokio::test]
async fn a_flood_of_made_up_tokens_is_throttled_not_passed_to_the_apiserver() {
    let served = served(InventoryAuth::Kubernetes).await;
    let started = std::time::Instant::now();
    let mut statuses = Vec::new();
    for i in 0..80 {
        let (status, body) = served.inventory(Some(&format!("garbage-{i}"))).await;
        assert!(!body.contains("secret-app"), "{body}");
        statuses.push(status);
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "{statuses:?}");
    let allowed = f64::from(pinhook::watch::controller::access::REVIEW_BURST)
        + f64::from(pinhook::watch::controller::access::REVIEWS_PER_SECOND) * elapsed
        + 1.0;
    let reviews = served.api.token_reviews();
    assert!(
        (reviews as f64) <= allowed,
        "{reviews} TokenReviews for 80 made-up tokens in {elapsed:.2}s"
    );
}

#[tokio::test]
async fn with_inventory_auth_none_anyone_reaching_the_port_reads_it() {
    let served = served(InventoryAuth::None).await;
    let (status, body) = served.inventory(None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(IMAGE));
    assert_eq!(served.api.token_reviews(), 0);
}
