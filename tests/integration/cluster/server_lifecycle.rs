//! The HTTPS server's lifecycle: the certificate is reloaded when its files change without
//! failing requests in flight, a bad new certificate keeps the old one serving, and shutdown
//! turns readiness off and lets in-flight reviews finish.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::pod_review;
use crate::common::silent::SilentServer;
use crate::common::tls::{init_crypto, TestCa};
use pinhook::admission::{Pinner, PinnerParts};
use pinhook::cluster::NoNamespaces;
use pinhook::metrics::Metrics;
use pinhook::policy::PolicyHandle;
use pinhook::registry::pull_secrets::NodeOnly;
use pinhook::registry::{CacheConfig, CachingResolver, OciResolver, RegistryConfig};
use pinhook::server::{self, AppState, ClientAccess, ConnectionLimits, ServerConfig, ServerTls};

fn client(ca: &TestCa) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).expect("ca")])
        .tls_info(true)
        // A fresh connection per request, so each one sees the certificate served now.
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

async fn served_certificate(client: &reqwest::Client, url: &str) -> Vec<u8> {
    let response = client.get(url).send().await.expect("healthz");
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .map(<[u8]>::to_vec)
        .expect("peer certificate")
}

fn der_of(pem: &str) -> Vec<u8> {
    let mut reader = pem.as_bytes();
    let mut certs = rustls_pemfile::certs(&mut reader);
    certs
        .next()
        .expect("one certificate")
        .expect("valid pem")
        .to_vec()
}

/// A server on a free port of 127.0.0.1 serving the test CA's certificate files, default limits.
fn serving_ca_files(ca: &TestCa) -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        tls: ServerTls::Files {
            cert: ca.server_cert_path().to_path_buf(),
            key: ca.server_key_path().to_path_buf(),
        },
        limits: ConnectionLimits::default(),
        clients: ClientAccess::default(),
    }
}

fn state(resolver_timeout: Duration) -> AppState {
    let metrics = Arc::new(Metrics::new());
    let oci = Arc::new(
        OciResolver::new(RegistryConfig {
            only_configured_cas: true,
            request_timeout: resolver_timeout,
            ..RegistryConfig::default()
        })
        .expect("resolver"),
    );
    let cache = Arc::new(CachingResolver::new(
        oci,
        CacheConfig::default(),
        metrics.clone(),
    ));
    let mut policy = pinhook::policy::Policy::default();
    policy.registries.allow_private.push("*".to_string());
    AppState {
        pinner: Arc::new(Pinner::new(PinnerParts {
            policy: PolicyHandle::new(policy.compile().expect("policy")),
            dry_run_resolver: Arc::new(cache.read_only()),
            resolver: cache,
            secrets: Arc::new(NodeOnly::default()),
            namespaces: Arc::new(NoNamespaces),
            owner_ttl: Duration::from_secs(60),
            on_owner: None,
            loop_ledger: None,
            revision_pods: None,
            signatures: None,
        })),
        metrics,
        ready: Arc::new(AtomicBool::new(false)),
        authorizer: None,
        parsed_reviews: Arc::default(),
        bodies: Arc::default(),
        answers: Arc::default(),
        require_client_cert: false,
        token_reviews: Default::default(),
        access_reviews: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_under_load_fails_no_request_and_a_bad_certificate_is_ignored() {
    init_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::generate(dir.path());
    let cert_path = dir.path().join("tls.crt");
    let key_path = dir.path().join("tls.key");
    // 2030-01-01 and 2031-01-01, 00:00 UTC: the expiry gauge follows the certificate served.
    let (first_end, second_end) = (1_893_456_000, 1_924_992_000);
    let until = |t| time::OffsetDateTime::from_unix_timestamp(t).expect("a valid time");
    let first = ca.issue_until(&["127.0.0.1"], until(first_end));
    std::fs::write(&key_path, &first.key_pem).expect("key");
    std::fs::write(&cert_path, &first.cert_pem).expect("cert");
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        tls: ServerTls::Files {
            cert: cert_path.clone(),
            key: key_path.clone(),
        },
        limits: ConnectionLimits::default(),
        clients: ClientAccess::default(),
    };
    let state = state(Duration::from_secs(2));
    let expiry = state.metrics.serving_certificate_expiry.clone();
    let running = server::start(config, state).await.expect("starts");
    let url = format!("https://127.0.0.1:{}/healthz", running.addr.port());
    let client = client(&ca);
    assert_eq!(
        served_certificate(&client, &url).await,
        der_of(&first.cert_pem)
    );
    assert_eq!(expiry.get(), first_end);

    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (client, url, stop) = (client.clone(), url.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, 0u32);
            while !stop.load(Ordering::SeqCst) {
                match client.get(&url).send().await {
                    Ok(r) if r.status().is_success() => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        })
    };

    let second = ca.issue_until(&["127.0.0.1"], until(second_end));
    // As a Secret update lands: key and certificate replaced by rename, one after the other.
    std::fs::write(dir.path().join("tls.key.new"), &second.key_pem).expect("key");
    std::fs::rename(dir.path().join("tls.key.new"), &key_path).expect("rename key");
    std::fs::write(dir.path().join("tls.crt.new"), &second.cert_pem).expect("cert");
    std::fs::rename(dir.path().join("tls.crt.new"), &cert_path).expect("rename cert");
    let deadline = Instant::now() + Duration::from_secs(15);
    while served_certificate(&client, &url).await != der_of(&second.cert_pem) {
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    std::fs::write(
        &cert_path,
        "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n",
    )
    .expect("bad cert");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        served_certificate(&client, &url).await,
        der_of(&second.cert_pem),
        "the bad certificate replaced the good one"
    );
    assert_eq!(expiry.get(), second_end, "the gauge follows the served one");

    stop.store(true, Ordering::SeqCst);
    let (ok, failed) = load.await.expect("load");
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed during rotation",
        ok + failed
    );
    assert!(ok > 10, "only {ok} requests ran");
    running.shutdown(Duration::ZERO).await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_turns_readiness_off_and_finishes_reviews_in_flight() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    // A registry that accepts and never answers keeps a review in flight.
    let silent = SilentServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::generate(dir.path());
    let config = serving_ca_files(&ca);
    let state = state(Duration::from_secs(1));
    let ready = state.ready.clone();
    let running = server::start(config, state).await.expect("starts");
    let base = format!("https://127.0.0.1:{}", running.addr.port());
    let client = ca.reqwest_client();
    let review = pod_review(&registry, &format!("{}/team/app:1.0", silent.host()));

    let in_flight = {
        let (client, url) = (client.clone(), format!("{base}/mutate?timeout=3s"));
        tokio::spawn(async move {
            client
                .post(url)
                .json(&review)
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shutdown = tokio::spawn(running.shutdown(Duration::from_millis(1500)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !ready.load(Ordering::SeqCst),
        "readiness is off as soon as shutdown begins"
    );
    // While the endpoints drain, new connections are still served (and say "not ready").
    let fresh = ca.reqwest_client();
    let readyz = fresh
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("a new connection during the drain is served");
    assert_eq!(readyz.status().as_u16(), 503);
    let healthz = fresh
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("served during the drain");
    assert_eq!(healthz.status().as_u16(), 200);

    assert_eq!(
        in_flight
            .await
            .expect("task")
            .expect("in-flight review answered"),
        200
    );
    shutdown.await.expect("task").expect("clean shutdown");
    let after = ca
        .reqwest_client()
        .get(format!("{base}/healthz"))
        .send()
        .await;
    assert!(
        after.is_err(),
        "the listener is closed after shutdown: {after:?}"
    );
    drop(silent);
}

/// While the server drains (after SIGTERM), each HTTP/1.1 answer says `Connection: close`, so
/// the client (the apiserver) closes that connection itself and dials the Service again for
/// its next review, instead of keeping a connection pinhook will close at the end of the drain
/// (a review sent onto it as it closes fails). Before the drain no answer says so; HTTP/2 has
/// no such header, its connections get a GOAWAY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_draining_http1_answers_say_connection_close() {
    init_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::generate(dir.path());
    let config = serving_ca_files(&ca);
    let running = server::start(config, state(Duration::from_secs(1)))
        .await
        .expect("starts");
    let url = format!("https://127.0.0.1:{}/healthz", running.addr.port());
    let client = |http1: bool| {
        let ca = reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).expect("CA");
        let builder = reqwest::Client::builder().tls_certs_only([ca]).no_proxy();
        let builder = if http1 { builder.http1_only() } else { builder };
        builder.build().expect("client")
    };
    let (http1, http2) = (client(true), client(false));
    let connection = |response: &reqwest::Response| {
        (
            response.version(),
            response
                .headers()
                .get("connection")
                .map(|v| v.to_str().unwrap_or("?").to_string()),
        )
    };
    let before = http1.get(&url).send().await.expect("answered");
    assert_eq!(
        connection(&before),
        (reqwest::Version::HTTP_11, None),
        "before the drain"
    );
    let shutdown = tokio::spawn(running.shutdown(Duration::from_millis(1500)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..2 {
        let during = http1
            .get(&url)
            .send()
            .await
            .expect("answered during the drain");
        assert_eq!(
            connection(&during),
            (reqwest::Version::HTTP_11, Some("close".to_string())),
            "during the drain"
        );
    }
    let during = http2
        .get(&url)
        .send()
        .await
        .expect("answered during the drain");
    assert_eq!(connection(&during), (reqwest::Version::HTTP_2, None));
    shutdown.await.expect("task").expect("clean shutdown");
}

/// What `pinhook certs` issues is what a client of the Service accepts: the serving
/// certificate chains to the CA in the caBundle and names `pinhook.pinhook-system.svc` and
/// the extra SAN, over a real handshake with pinhook's server; other names are refused.
#[tokio::test]
async fn certificates_from_pinhook_certs_serve_the_service_names() {
    init_crypto();
    let request = pinhook::certs::CertRequest {
        service: "pinhook".into(),
        namespace: "pinhook-system".into(),
        extra_sans: vec!["127.0.0.1".into()],
        validity_days: 30,
    };
    let certs = pinhook::certs::generate(&request).expect("generates");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = certs.write(dir.path()).expect("writes");
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        tls: ServerTls::Files {
            cert: files.cert,
            key: files.key,
        },
        limits: ConnectionLimits::default(),
        clients: ClientAccess::default(),
    };
    let running = server::start(config, state(Duration::from_secs(1)))
        .await
        .expect("serves the generated certificate");
    let addr = running.addr;
    let bundle = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        certs.ca_bundle(),
    )
    .expect("caBundle is base64");
    let trust = reqwest::Certificate::from_pem(&bundle).expect("caBundle is a PEM CA");
    let client_for = |name: &str| {
        reqwest::Client::builder()
            .tls_certs_only([trust.clone()])
            .no_proxy()
            .resolve(name, addr)
            .build()
            .expect("client")
    };
    for name in [
        "pinhook.pinhook-system.svc",
        "pinhook.pinhook-system.svc.cluster.local",
    ] {
        let url = format!("https://{name}:{}/healthz", addr.port());
        let response = client_for(name).get(&url).send().await;
        assert_eq!(
            response.map(|r| r.status().as_u16()).ok(),
            Some(200),
            "{name}"
        );
    }
    let by_ip = client_for("unused")
        .get(format!("https://127.0.0.1:{}/healthz", addr.port()))
        .send()
        .await;
    assert_eq!(by_ip.map(|r| r.status().as_u16()).ok(), Some(200), "IP SAN");
    let other = "other.pinhook-system.svc";
    let refused = client_for(other)
        .get(format!("https://{other}:{}/healthz", addr.port()))
        .send()
        .await;
    assert!(refused.is_err(), "a name not in the certificate is refused");
    running.shutdown(Duration::ZERO).await.expect("shutdown");
}
