//! `cargo bench --bench mutate`: pinhook's `/mutate` over HTTPS against a real registry.
//!
//! 1. Warm: a 3-container Deployment whose tags are cached: latency percentiles of sequential
//!    requests and throughput with concurrent clients, next to a bare axum + rustls server
//!    answering a canned response of the same size (the floor) measured in the same run.
//! 2. Cold: one pod with 1 image vs one pod with 10 distinct images, each on a fresh cache:
//!    resolution is concurrent, so 10 should cost close to 1, not 10×. Measured against the
//!    test registry directly (whose own answers do not overlap on two cores: each HEAD is about
//!    1.3 ms of its CPU), and through a proxy that delays every answer by 25 ms, a registry
//!    across a network, whose answers overlap as a cloud registry's do. Each beside the
//!    registry's own time for 1 and 10 concurrent HEADs.
//!
//! Bounded in count and time; everything on 127.0.0.1.

// The integration tests' harness, of which this uses a part: the tests use all of it, and
// their binary is where an unused helper is an error.
#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use common::images;
use common::pinhook::{review_fixture, Options, TestPinhook};
use common::registry::{RegistryAuth, TestRegistry};
use common::tls::TestCa;
use serde_json::{json, Value};

const SEQUENTIAL: usize = 2_000;
const CONCURRENCY: usize = 16;
const LOAD_TIME: Duration = Duration::from_secs(5);
const COLD_ROUNDS: usize = 5;

#[tokio::main]
async fn main() {
    common::tls::init_crypto();
    let registry = TestRegistry::start(RegistryAuth::None).await;
    for repo in ["app", "init", "side"] {
        images::push_multi_arch(&registry, &format!("team/{repo}"), "1.0", repo).await;
    }
    for i in 0..10 {
        images::push_multi_arch(&registry, &format!("cold/img{i}"), "1.0", &format!("c{i}")).await;
    }

    let review = deployment_review(&registry);
    let body = serde_json::to_vec(&review).unwrap_or_default();
    let pinhook = TestPinhook::start(&registry).await;
    let url = pinhook.url("/mutate?timeout=10s");
    let (status, canned) = pinhook.post("/mutate?timeout=10s", body.clone()).await;
    assert_eq!(status, 200, "{canned}");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let ca = TestCa::generate(dir.path());
    let floor_url = start_floor(&ca, canned.clone()).await;
    let floor_client = ca.reqwest_client();
    println!(
        "warm /mutate, 3-container Deployment ({} byte request, {} byte response)",
        body.len(),
        canned.len()
    );
    for (name, client, url) in [
        ("pinhook", &pinhook.client, &url),
        ("floor  ", &floor_client, &floor_url),
    ] {
        let latencies = sequential(client, url, &body).await;
        let rate = throughput(client, url, &body).await;
        println!(
            "  {name}  p50 {:>7.1} µs  p90 {:>7.1} µs  p99 {:>7.1} µs  max {:>8.1} µs  | {CONCURRENCY} clients: {rate:>7.0} req/s",
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.90),
            percentile(&latencies, 0.99),
            percentile(&latencies, 1.0),
        );
    }

    println!("cold resolution (fresh cache each round, median of {COLD_ROUNDS})");
    cold(&registry, false).await;
    println!(
        "cache expired, registry connections kept (what a refresh costs: round trips, no TLS set-up)"
    );
    cold(&registry, true).await;
    let proxy = DelayProxy::start(registry.port(), WAN_DELAY).await;
    println!(
        "cold resolution through a proxy adding {} ms to every answer (fresh cache, median of {COLD_ROUNDS})",
        WAN_DELAY.as_millis()
    );
    cold_wan(&registry, &proxy).await;
}

/// What the delaying proxy adds to every answer (a registry one network round trip away).
const WAN_DELAY: Duration = Duration::from_millis(25);

/// A TCP relay on 127.0.0.1 in front of the registry that holds every chunk of the registry's
/// answer for `delay` before passing it on (requests pass at once), keeping order: TLS is
/// relayed untouched, so the TLS handshake and every HTTP answer cost one delay, and answers
/// on different connections or streams overlap. For this bench only: bounded by its runs.
struct DelayProxy {
    port: u16,
}

impl DelayProxy {
    async fn start(upstream: u16, delay: Duration) -> DelayProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind the delay proxy: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, delay));
            }
        });
        DelayProxy { port }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

async fn relay(client: tokio::net::TcpStream, upstream: u16, delay: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (chunks, mut due) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    let read = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = server_read.read(&mut buf).await {
            if n == 0
                || chunks
                    .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
            {
                break;
            }
        }
    });
    while let Some((at, chunk)) = due.recv().await {
        tokio::time::sleep_until(at).await;
        if client_write.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let _ = client_write.shutdown().await;
    up.abort();
    read.abort();
}

/// Median `/mutate` time of a pod with 1 and with 10 distinct images, fresh pinhook and cache
/// each round, the registry behind the delaying proxy; beside it the registry's own time (same
/// proxy, new client) for 1 and 10 concurrent HEADs.
async fn cold_wan(registry: &TestRegistry, proxy: &DelayProxy) {
    let mut medians = Vec::new();
    for images in [1usize, 10] {
        let mut times = Vec::new();
        let mut direct = Vec::new();
        for _ in 0..COLD_ROUNDS {
            let mut options = Options::default();
            options.policy.registries.allow_private.push(proxy.host());
            let fresh = TestPinhook::start_with(registry, options).await;
            let review = pod_review_on(registry, &proxy.host(), images);
            times.push(timed_mutate(&fresh, &review).await);
            direct.push(registry_alone_at(registry, &proxy.host(), images).await);
        }
        medians.push(cold_row(images, &times, &direct));
    }
    cold_ratios(&medians);
}

/// Median `/mutate` time of a pod with 1 and with 10 distinct images on a cold cache: a fresh
/// pinhook each round, or (`keep_connections`) one that resolved them once and then had its
/// cache expired, so the registry connections already exist. Beside it, the registry's own
/// time for 1 and 10 concurrent manifest HEADs from a fresh client (a new connection each, as
/// a fresh pinhook has), so the 10 / 1 ratio can be read as pinhook's and not the registry's.
async fn cold(registry: &TestRegistry, keep_connections: bool) {
    let mut medians = Vec::new();
    for images in [1usize, 10] {
        let mut times = Vec::new();
        for _ in 0..COLD_ROUNDS {
            let fresh = TestPinhook::start(registry).await;
            let review = pod_review(registry, images);
            if keep_connections {
                let body = serde_json::to_vec(&review).unwrap_or_default();
                let (status, text) = fresh.post("/mutate?timeout=10s", body).await;
                assert!(status == 200 && text.contains("\"allowed\":true"), "{text}");
                fresh.resolver.expire_all();
            }
            times.push(timed_mutate(&fresh, &review).await);
        }
        let mut direct = Vec::new();
        for _ in 0..COLD_ROUNDS {
            direct.push(registry_alone(registry, images).await);
        }
        medians.push(cold_row(images, &times, &direct));
    }
    cold_ratios(&medians);
}

/// Microseconds `/mutate` took to pin `review` (asserted: allowed, with a patch).
async fn timed_mutate(pinhook: &TestPinhook, review: &Value) -> f64 {
    let body = serde_json::to_vec(review).unwrap_or_default();
    let started = Instant::now();
    let (status, text) = pinhook.post("/mutate?timeout=10s", body).await;
    let took = started.elapsed().as_secs_f64() * 1e6;
    assert!(status == 200 && text.contains("\"allowed\":true"), "{text}");
    assert!(text.contains("\"patch\""), "{text}");
    took
}

/// Prints one cold row (medians of pinhook's and the registry's times) and returns them.
fn cold_row(images: usize, times: &[f64], direct: &[f64]) -> (f64, f64) {
    let (pinhook, alone) = (percentile(times, 0.5), percentile(direct, 0.5));
    println!(
        "  {images:>2} distinct image(s) in one pod: {pinhook:>8.1} µs   (registry alone, {images:>2} concurrent HEADs: {alone:>8.1} µs)"
    );
    (pinhook, alone)
}

/// Prints 10 / 1 for pinhook and for the registry alone, from the rows for 1 and 10 images.
fn cold_ratios(medians: &[(f64, f64)]) {
    if let [(p1, r1), (p10, r10)] = medians[..] {
        println!(
            "  10 / 1: pinhook {:.2} x (goal <= 1.5), the registry alone {:.2} x",
            p10 / p1,
            r10 / r1
        );
    }
}

/// Microseconds for `images` concurrent manifest HEADs (`cold/img{i}:1.0`) from a new client.
async fn registry_alone(registry: &TestRegistry, images: usize) -> f64 {
    registry_alone_at(registry, &registry.host(), images).await
}

/// The same through `host` (the registry itself or a proxy in front of it).
async fn registry_alone_at(registry: &TestRegistry, host: &str, images: usize) -> f64 {
    let client = registry.ca.reqwest_client();
    let accept = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
    let started = Instant::now();
    let heads = (0..images).map(|i| {
        let url = format!("https://{host}/v2/cold/img{i}/manifests/1.0");
        client.head(url).header("Accept", accept).send()
    });
    for answer in futures::future::join_all(heads).await {
        let status = answer.map(|r| r.status().as_u16()).unwrap_or(0);
        assert_eq!(status, 200, "registry HEAD");
    }
    started.elapsed().as_secs_f64() * 1e6
}

fn deployment_review(registry: &TestRegistry) -> Value {
    let mut review = review_fixture("v1.26/deployment-create-mutate.json", registry);
    let spec = &mut review["request"]["object"]["spec"]["template"]["spec"];
    let mut side = spec["containers"][0].clone();
    side["name"] = json!("side");
    side["image"] = json!(format!("{}/team/side:1.0", registry.host()));
    if let Some(containers) = spec["containers"].as_array_mut() {
        containers.push(side);
    }
    review
}

fn pod_review(registry: &TestRegistry, count: usize) -> Value {
    pod_review_on(registry, &registry.host(), count)
}

/// A pod whose `count` containers name `host/cold/img{i}:1.0`.
fn pod_review_on(registry: &TestRegistry, host: &str, count: usize) -> Value {
    let mut review = review_fixture("v1.26/pod-create-basic-mutate.json", registry);
    let template = review["request"]["object"]["spec"]["containers"][0].clone();
    let containers: Vec<Value> = (0..count)
        .map(|i| {
            let mut c = template.clone();
            c["name"] = json!(format!("c{i}"));
            c["image"] = json!(format!("{host}/cold/img{i}:1.0"));
            c
        })
        .collect();
    review["request"]["object"]["spec"]["containers"] = json!(containers);
    review
}

async fn sequential(client: &reqwest::Client, url: &str, body: &[u8]) -> Vec<f64> {
    let mut latencies = Vec::with_capacity(SEQUENTIAL);
    for _ in 0..SEQUENTIAL {
        let started = Instant::now();
        let response = client.post(url).body(body.to_vec()).send().await;
        let ok = match response {
            Ok(r) => r.bytes().await.is_ok(),
            Err(_) => false,
        };
        assert!(ok, "request to {url} failed");
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
    }
    latencies
}

async fn throughput(client: &reqwest::Client, url: &str, body: &[u8]) -> f64 {
    let started = Instant::now();
    let body = Arc::new(body.to_vec());
    let workers = (0..CONCURRENCY).map(|_| {
        let (client, url, body) = (client.clone(), url.to_string(), body.clone());
        tokio::spawn(async move {
            let mut done = 0u64;
            while started.elapsed() < LOAD_TIME {
                if let Ok(r) = client.post(&url).body(body.to_vec()).send().await {
                    if r.bytes().await.is_ok() {
                        done += 1;
                    }
                }
            }
            done
        })
    });
    let mut total = 0;
    for worker in workers {
        total += worker.await.unwrap_or(0);
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// A bare axum + rustls server answering `canned` to every POST: what TLS, HTTP and the
/// client cost without pinhook's work.
async fn start_floor(ca: &TestCa, canned: String) -> String {
    let config = RustlsConfig::from_pem_file(ca.server_cert_path(), ca.server_key_path())
        .await
        .unwrap_or_else(|e| panic!("floor TLS: {e}"));
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| panic!("nonblocking: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let app = Router::new().route(
        "/mutate",
        post(move || {
            let canned = canned.clone();
            async move {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    canned,
                )
            }
        }),
    );
    // The same socket settings as pinhook's server (TCP_NODELAY), so the floor is a floor.
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(config)
        .acceptor(axum_server::accept::NoDelayAcceptor::new());
    let server = axum_server::from_tcp(listener)
        .unwrap_or_else(|e| panic!("floor: {e}"))
        .acceptor(acceptor);
    tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });
    format!("https://127.0.0.1:{port}/mutate")
}

fn percentile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(index).copied().unwrap_or(f64::NAN)
}
