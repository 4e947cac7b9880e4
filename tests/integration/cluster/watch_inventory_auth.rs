//! Who may read `pinhook watch`'s `/inventory` (issue 25): the watch's own listeners (issue 44:
//! health and metrics on one, the inventory on another, both the hardened plain-HTTP edge)
//! served on 127.0.0.1 with the gate checking callers through the fake Kubernetes API's
//! TokenReview and SubjectAccessReview. No refusal carries inventory data; health stays open;
//! decisions are cached; a flood of unknown tokens is throttled rather than passed on to the
//! apiserver; a head trickled a line at a time, and one address's thousand connections, get
//! what they get on the webhook's port.

use std::sync::Arc;

use std::time::{Duration, Instant};

use pinhook::policy::Policy;
use pinhook::server::connections::PEER_CONNECTIONS;
use pinhook::server::ConnectionLimits;
use pinhook::watch::controller::{http, InventoryAuth, InventoryGate, PodStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::watch::{deployment_pod, record, rig};
use crate::common::fake_kube::FakeKube;

const IMAGE: &str = "reg.example/team/secret-app:3";

struct Served {
    api: FakeKube,
    /// The health and metrics listener.
    base: String,
    /// The inventory's.
    inventory_base: String,
    client: reqwest::Client,
    _edges: http::Edges,
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
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(1),
        ..ConnectionLimits::default()
    };
    let edges = http::serve(
        Arc::new(rig.watch),
        PodStore::default(),
        gate,
        http::Listen {
            health: any,
            inventory: Some(any),
        },
        &limits,
    )
    .expect("serves");
    let inventory = edges
        .inventory
        .as_ref()
        .expect("a listener of its own")
        .addr;
    Served {
        api,
        base: format!("http://{}", edges.health.addr),
        inventory_base: format!("http://{inventory}"),
        client: reqwest::Client::new(),
        _edges: edges,
    }
}

impl Served {
    async fn inventory(&self, token: Option<&str>) -> (u16, String) {
        let mut request = self
            .client
            .get(format!("{}/inventory", self.inventory_base));
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

/// The inventory is not on the health port (scraped, probed, reachable from the Pod network):
/// bearer tokens go to its own listener, localhost by default.
#[tokio::test]
async fn the_inventory_is_served_apart_from_health_and_metrics() {
    let served = served(InventoryAuth::None).await;
    let on_health = served
        .client
        .get(format!("{}/inventory", served.base))
        .send()
        .await
        .expect("answered");
    assert_eq!(on_health.status().as_u16(), 404);
    let health = served
        .client
        .get(format!("{}/healthz", served.inventory_base))
        .send()
        .await
        .expect("answered");
    assert_eq!(health.status().as_u16(), 404);
    let (status, _) = served.inventory(None).await;
    assert_eq!(status, 200);
}

/// Issue 44: the watch's port was a plain `axum::serve`, no connection cap and no header
/// timeout: a head sent a line at a time held a connection for as long as the sender liked,
/// and one address could open connections without end. Now it is the webhook's edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_port_cuts_a_trickled_head_and_caps_one_address() {
    let served = served(InventoryAuth::None).await;
    let addr = served.base.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let started = Instant::now();
    slow.write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .expect("line");
    let mut closed = None;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if slow.write_all(b"x-slow: 1\r\n").await.is_err() {
            closed = Some(started.elapsed());
            break;
        }
        let mut byte = [0u8; 256];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(1), slow.read(&mut byte)).await
        {
            if n == 0
                || byte[..n].starts_with(b"HTTP/1.1 408")
                || byte[..n].starts_with(b"HTTP/1.1 4")
            {
                closed = Some(started.elapsed());
                break;
            }
        }
    }
    let closed = closed.expect("the trickled head was cut");
    assert!(closed < Duration::from_secs(4), "{closed:?}");

    // One address: the plain edge's own cap (64) and its share; the next is closed at once.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..PEER_CONNECTIONS.min(64) + 10 {
        let mut conn = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(100), conn.read(&mut byte)).await {
            Err(_) => held.push(conn),
            Ok(_) => refused += 1,
        }
    }
    assert_eq!((held.len(), refused), (PEER_CONNECTIONS.min(64), 10));

    // Issue 44: that one address held the whole edge, and the kubelet's probe from another
    // was closed at once. Now the full edge makes room for an address holding fewer: one of
    // the flood's idle connections is closed, and the probe is answered.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.2:0".parse().expect("address"))
        .expect("bind 127.0.0.2");
    let mut probe = socket
        .connect(addr.parse().expect("addr"))
        .await
        .expect("connect");
    probe
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: watch\r\nconnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), probe.read_to_string(&mut answer))
        .await
        .expect("answered in time")
        .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    let mut closed = 0;
    for conn in &mut held {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(50), conn.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 1, "one of the flood's connections made the room");
}
