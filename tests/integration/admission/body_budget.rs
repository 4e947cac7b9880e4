//! The budget of request body bytes in flight (issue 44), against pinhook's real HTTPS
//! listener: forty slow 7 MiB bodies from a caller with no credentials took pinhook past its
//! chart's memory limit before (442 MiB RSS) because every body was read whole before anything
//! counted it. Now each body takes its bytes from the budget before a byte is read: one caller
//! gets its share, the rest of its bodies 429 at once, and another caller's reviews are
//! answered meanwhile.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::common::images;
use crate::common::pinhook::TestPinhook;
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::pod_review;
use pinhook::server::body_budget::PEER_BUDGET;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ATTACKER: [u8; 4] = [127, 0, 0, 1];
const SEVEN_MIB: usize = 7 << 20;

/// The status line of the answer to a POST of `path` that announces `length` bytes and sends
/// only `{` (a slow sender), or `None` when nothing came back within `wait`.
async fn slow_post(
    pinhook: &TestPinhook,
    from: IpAddr,
    path: &str,
    length: usize,
    wait: Duration,
) -> (
    Option<String>,
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) {
    let mut conn = pinhook
        .raw_tls_from(from, &[])
        .await
        .expect("TLS connection");
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: pinhook\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n{{"
    );
    conn.write_all(head.as_bytes()).await.expect("request head");
    let mut buf = [0u8; 256];
    let answer = match tokio::time::timeout(wait, conn.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
        ),
        _ => None,
    };
    (answer, conn)
}

/// Forty slow 7 MiB bodies from one caller: its share (8 MiB) holds one; the other 39 get 429
/// at once, nothing of them read; a review from another address is answered, pinned, while the
/// first body is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_large_bodies_of_one_caller_get_429_past_its_share_and_others_are_answered() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let app = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut held = Vec::new();
    let mut refused = 0;
    let mut waiting = 0;
    let started = Instant::now();
    for _ in 0..40 {
        let (answer, conn) = slow_post(
            &pinhook,
            ATTACKER.into(),
            "/mutate",
            SEVEN_MIB,
            Duration::from_millis(300),
        )
        .await;
        match answer.as_deref() {
            Some(line) if line.starts_with("HTTP/1.1 429") => refused += 1,
            None => waiting += 1,
            Some(other) => panic!("unexpected answer {other:?}"),
        }
        held.push(conn);
    }
    let fits = PEER_BUDGET / SEVEN_MIB;
    assert_eq!(
        (waiting, refused),
        (fits, 40 - fits),
        "after {:?}",
        started.elapsed()
    );
    // Another caller (another address) is answered while the slow bodies hold their share.
    let review = pod_review(&registry, &app.reference);
    let other = reqwest_from(&pinhook, [127, 0, 0, 2].into());
    let response = other
        .post(pinhook.url("/mutate?timeout=10s"))
        .header("content-type", "application/json")
        .body(review.to_string())
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let metrics = pinhook.scrape_metrics().await;
    assert!(
        metrics.contains(&format!(
            "pinhook_request_bodies_refused_total {}",
            40 - fits
        )),
        "{metrics}"
    );
    drop(held);
}

/// A reqwest client that connects from `source`.
fn reqwest_from(pinhook: &TestPinhook, source: IpAddr) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(pinhook.ca_pem().as_bytes()).expect("CA");
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .local_address(source)
        .build()
        .expect("client")
}

/// `/v1/dry-run` checks the token before it reads a byte of the body: a caller with no token
/// announcing a 2 MiB body it never sends is answered 401 (or 503 without a Kubernetes API)
/// at once; before, pinhook waited for the body (and held it) first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dry_run_answers_before_reading_the_body_of_a_caller_it_does_not_know() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let started = Instant::now();
    let (answer, _conn) = slow_post(
        &pinhook,
        ATTACKER.into(),
        "/v1/dry-run",
        2 << 20,
        Duration::from_secs(5),
    )
    .await;
    let answer = answer.unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "{answer:?} after {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
