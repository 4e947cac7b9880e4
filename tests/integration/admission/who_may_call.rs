//! Who may call pinhook over real HTTPS: with `--client-ca-file`, `/mutate` and `/validate`
//! answer only a client presenting a certificate chained to that CA (403 otherwise, never a
//! review; a certificate from another CA fails the handshake), while `/healthz`, `/readyz`
//! and `/metrics` still answer a client without one; and `/v1/dry-run` sends at most the
//! TokenReview budget's worth of TokenReviews for a flood of made-up tokens (429 past it).

use std::path::Path;
use std::sync::Arc;

use crate::common::fake_kube::FakeKube;
use crate::common::images;
use crate::common::pinhook::{review_fixture, Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::BASIC_POD;
use crate::common::tls::init_crypto;
use pinhook::cluster::{Authorizer, KubeAuthorizer};
use pinhook::server::{ClientAccess, TokenReviewLimit};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA for client certificates, as a cluster operator would make for the apiserver.
struct ClientCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl ClientCa {
    fn new(name: &str) -> ClientCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("key");
        let pem = params.self_signed(&key).expect("self-signed").pem();
        ClientCa {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A client certificate and key, PEM, concatenated (what reqwest's `Identity` reads).
    fn client_identity(&self, name: &str) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        format!("{}{}", cert.pem(), key.serialize_pem()).into_bytes()
    }
}

fn client(server_ca: &str, identity: Option<Vec<u8>>) -> reqwest::Client {
    init_crypto();
    let ca = reqwest::Certificate::from_pem(server_ca.as_bytes()).expect("server CA");
    let mut builder = reqwest::Client::builder()
        .tls_certs_only([ca])
        .no_proxy()
        .timeout(std::time::Duration::from_secs(30));
    if let Some(pem) = identity {
        builder = builder.identity(reqwest::Identity::from_pem(&pem).expect("identity"));
    }
    builder.build().expect("client")
}

/// `review` POSTed to `url` by `client`: the status and the body's text.
async fn post_review(
    client: &reqwest::Client,
    url: String,
    review: &serde_json::Value,
) -> (u16, String) {
    let response = client
        .post(url)
        .json(review)
        .send()
        .await
        .expect("pinhook answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

async fn pinhook_requiring(registry: &TestRegistry, ca: &ClientCa, dir: &Path) -> TestPinhook {
    pinhook_requiring_names(registry, ca, dir, &[]).await
}

async fn pinhook_requiring_names(
    registry: &TestRegistry,
    ca: &ClientCa,
    dir: &Path,
    names: &[&str],
) -> TestPinhook {
    let path = dir.join("client-ca.pem");
    std::fs::write(&path, &ca.pem).expect("write the client CA");
    TestPinhook::start_with(
        registry,
        Options {
            clients: ClientAccess {
                client_ca: Some(path),
                client_names: names.iter().map(|n| n.to_string()).collect(),
                ..ClientAccess::default()
            },
            ..Options::default()
        },
    )
    .await
}

/// Issue 44: a client CA that signs more than the apiserver's certificate (a cluster CA signs
/// every kubelet's) let any of those certificates ask for reviews. With `--client-cert-names`,
/// only a certificate carrying one of the names gets one.
#[tokio::test]
async fn with_client_cert_names_a_certificate_of_the_ca_needs_one_of_them() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let _pushed = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster_ca = ClientCa::new("cluster CA");
    let pinhook =
        pinhook_requiring_names(&registry, &cluster_ca, dir.path(), &["kube-apiserver"]).await;
    let review = review_fixture(BASIC_POD, &registry);
    let kubelet = client(
        pinhook.ca_pem(),
        Some(cluster_ca.client_identity("system:node:worker-1")),
    );
    let (status, text) = post_review(&kubelet, pinhook.url("/mutate"), &review).await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("allowed names"), "{text}");
    let apiserver = client(
        pinhook.ca_pem(),
        Some(cluster_ca.client_identity("kube-apiserver")),
    );
    let (status, _) = post_review(&apiserver, pinhook.url("/mutate?timeout=10s"), &review).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn with_a_client_ca_only_a_verified_client_gets_a_review() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let apiserver_ca = ClientCa::new("apiserver client CA");
    let pinhook = pinhook_requiring(&registry, &apiserver_ca, dir.path()).await;
    let review = review_fixture(BASIC_POD, &registry);

    // No client certificate: the handshake completes, the review is refused unread.
    let anonymous = client(pinhook.ca_pem(), None);
    for path in ["/mutate", "/validate"] {
        let (status, text) = post_review(&anonymous, pinhook.url(path), &review).await;
        assert_eq!(status, 403, "{path}: {text}");
        assert!(!text.contains("AdmissionReview"), "{path}: {text}");
        assert!(!text.contains(&pushed.index_digest), "{path}: {text}");
        assert!(text.contains("client certificate"), "{path}: {text}");
    }
    // Probes and metrics carry no certificate and still answer.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let status = anonymous
            .get(pinhook.url(path))
            .send()
            .await
            .expect("pinhook answers")
            .status()
            .as_u16();
        assert_eq!(status, 200, "{path}");
    }
    let metrics = anonymous
        .get(pinhook.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("pinhook_unauthenticated_reviews_total 2"),
        "{metrics}"
    );

    // A certificate from another CA: no connection at all.
    let stranger = ClientCa::new("someone else's CA");
    let forged = client(
        pinhook.ca_pem(),
        Some(stranger.client_identity("kube-apiserver")),
    );
    let result = forged
        .post(pinhook.url("/mutate"))
        .json(&review)
        .send()
        .await;
    assert!(
        result.is_err(),
        "a foreign client certificate was served: {result:?}"
    );

    // The apiserver's certificate: the review is answered and the image pinned.
    let apiserver = client(
        pinhook.ca_pem(),
        Some(apiserver_ca.client_identity("kube-apiserver")),
    );
    let response = apiserver
        .post(pinhook.url("/mutate?timeout=10s"))
        .json(&review)
        .send()
        .await
        .expect("pinhook answers");
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(body["response"]["allowed"], true);
    let object = crate::common::pinhook::apply_response(&review, &body);
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        pushed.pinned_with_tag()
    );
}

/// The 403 waits for the body: pinhook reads and discards a refused review's body before it
/// answers. Answering first ends an HTTP/2 stream with a reset (curl 7.88 then reports "Stream
/// error in the HTTP/2 framing layer" and no status: 128 of 200 `/validate` calls, and the e2e
/// tier's `apiserver-client-cert-required` once in CI and once locally), and an HTTP/1.1
/// connection closed with the body unread is reset by the kernel. A raw client sends the head,
/// sees no answer while its body is unsent, then sends the body and gets the 403.
#[tokio::test]
async fn a_refused_review_is_answered_once_its_body_is_in() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let apiserver_ca = ClientCa::new("apiserver client CA");
    let pinhook = pinhook_requiring(&registry, &apiserver_ca, dir.path()).await;
    let body = br#"{"kind":"AdmissionReview"}"#;
    for path in ["/mutate", "/validate"] {
        let mut conn = pinhook.raw_tls(&[]).await.expect("TLS connection");
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: pinhook\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.expect("head");
        let mut buf = [0u8; 1024];
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(500), conn.read(&mut buf)).await;
        if let Ok(read) = early {
            let n = read.unwrap_or(0);
            panic!(
                "{path}: answered before the body was sent: {:?}",
                String::from_utf8_lossy(&buf[..n])
            );
        }
        conn.write_all(body).await.expect("body");
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 403"), "{path}: {answer:?}");
    }
}

#[tokio::test]
async fn the_metrics_listener_serves_metrics_and_no_review() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let pinhook = TestPinhook::start_with(
        &registry,
        Options {
            clients: ClientAccess {
                metrics_listen: Some("127.0.0.1:0".parse().expect("address")),
                ..ClientAccess::default()
            },
            ..Options::default()
        },
    )
    .await;
    let addr = pinhook.metrics_addr().expect("a metrics listener");
    assert_ne!(addr.port(), 0);
    let plain = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let response = plain
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .expect("metrics answer");
    assert_eq!(response.status().as_u16(), 200);
    assert!(response
        .text()
        .await
        .expect("text")
        .contains("# TYPE pinhook_unauthenticated_reviews counter"));
    let review = review_fixture(BASIC_POD, &registry);
    for path in ["/mutate", "/validate", "/v1/dry-run"] {
        let status = plain
            .post(format!("http://{addr}{path}"))
            .json(&review)
            .send()
            .await
            .expect("answers")
            .status()
            .as_u16();
        assert_eq!(status, 404, "{path} on the metrics listener");
    }
}

#[tokio::test]
async fn without_a_client_ca_reviews_need_no_client_certificate() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = review_fixture(BASIC_POD, &registry);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true);
}

#[tokio::test]
async fn a_flood_of_bad_tokens_costs_at_most_the_token_review_budget() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let kube = FakeKube::start().await;
    kube.add_token("ci-token", "system:serviceaccount:ci:deployer");
    kube.grant_create(
        "system:serviceaccount:ci:deployer",
        "",
        "configmaps",
        "shop",
    );
    let authorizer: Arc<dyn Authorizer> = Arc::new(KubeAuthorizer::new(kube.client()));
    let pinhook = TestPinhook::start_with(
        &registry,
        Options {
            authorizer: Some(authorizer),
            clients: ClientAccess {
                // 0.5/s: the test's few seconds add at most a couple of tokens to the burst.
                token_reviews: TokenReviewLimit {
                    per_second: 0.5,
                    burst: 5,
                },
                ..ClientAccess::default()
            },
            ..Options::default()
        },
    )
    .await;
    // A CI caller authenticates once before the flood...
    let ci = |pinhook: &TestPinhook| {
        pinhook
            .client
            .post(pinhook.url("/v1/dry-run?namespace=shop"))
            .bearer_auth("ci-token")
            .body("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n")
            .send()
    };
    let status = ci(&pinhook).await.expect("answers").status().as_u16();
    assert_eq!(status, 200);
    let started = std::time::Instant::now();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..200 {
        let response = pinhook
            .client
            .post(pinhook.url("/v1/dry-run?namespace=shop"))
            .bearer_auth(format!("made-up-{i}"))
            .body("apiVersion: v1\nkind: Pod\n")
            .send()
            .await
            .expect("pinhook answers");
        *statuses.entry(response.status().as_u16()).or_default() += 1;
    }
    // ...and is still answered during it (its TokenReview answer is cached, nothing spent).
    let status = ci(&pinhook).await.expect("answers").status().as_u16();
    assert_eq!(status, 200, "a known caller during the flood");
    let allowed_extra = (started.elapsed().as_secs_f64() * 0.5).ceil() as usize;
    // The CI caller's one TokenReview came out of the burst of 5.
    let reviews = kube.token_reviews() - 1;
    assert!(
        (4..=4 + allowed_extra).contains(&reviews),
        "{reviews} TokenReviews for 200 bad tokens (statuses {statuses:?})"
    );
    assert_eq!(
        statuses.get(&401).copied().unwrap_or(0),
        reviews,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.get(&429).copied().unwrap_or(0),
        200 - reviews,
        "{statuses:?}"
    );
}
