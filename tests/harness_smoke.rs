//! Checks the integration-test harness itself against a real registry:
//! TLS from the test CA, htpasswd auth, pushes, access-log counting, restart.

mod common;

use common::images::{self, Flavor, MANIFEST_ACCEPT};
use common::registry::{parse_access_line, RegistryAuth, TestRegistry};
use reqwest::{Method, StatusCode};

const USER: &str = "pinhook";
const PASS: &str = "s3cret-pass";

async fn start_authed() -> TestRegistry {
    TestRegistry::start(RegistryAuth::htpasswd(USER, PASS)).await
}

/// `HEAD /v2/<repo>/manifests/<reference>` accepting every manifest type.
async fn head_manifest(reg: &TestRegistry, repo: &str, reference: &str) -> reqwest::Response {
    let url = reg.url(&format!("/v2/{repo}/manifests/{reference}"));
    reg.request(Method::HEAD, &url)
        .header(reqwest::header::ACCEPT, MANIFEST_ACCEPT)
        .send()
        .await
        .expect("HEAD manifest reaches the registry")
}

fn content_digest(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("docker-content-digest")
        .expect("manifest response has Docker-Content-Digest")
        .to_str()
        .expect("digest header is ASCII")
        .to_string()
}

#[tokio::test]
async fn tag_of_multi_arch_image_resolves_to_index_digest() {
    let reg = start_authed().await;
    let pushed = images::push_multi_arch(&reg, "team/multi", "v1", "seed-a").await;

    let resp = head_manifest(&reg, "team/multi", "v1").await;
    assert_eq!(resp.status(), StatusCode::OK);
    let digest = content_digest(&resp);
    assert_eq!(digest, pushed.index_digest);
    assert!(!pushed.platform_digests().contains(&digest.as_str()));
    assert!(!pushed.config_digests().contains(&digest.as_str()));
    assert_eq!(
        resp.headers()[reqwest::header::CONTENT_TYPE],
        images::OCI_INDEX
    );

    let seen = reg
        .count_requests("HEAD", "/v2/team/multi/manifests/v1")
        .await;
    assert_eq!(seen, 1, "{}", reg.log_tail(10));
}

#[tokio::test]
async fn unauthenticated_request_gets_401() {
    let reg = start_authed().await;
    images::push_single(&reg, "solo", "v1", "seed-b").await;

    let resp = reg
        .client()
        .head(reg.url("/v2/solo/manifests/v1"))
        .header(reqwest::header::ACCEPT, MANIFEST_ACCEPT)
        .send()
        .await
        .expect("HEAD reaches the registry");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().contains_key("www-authenticate"));
    assert_eq!(reg.credentials(), Some((USER, PASS)));
}

#[tokio::test]
async fn single_image_resolves_to_manifest_digest_and_moves_on_repush() {
    let reg = start_authed().await;
    let first = images::push_single(&reg, "solo", "v1", "seed-c").await;
    let resp = head_manifest(&reg, "solo", "v1").await;
    assert_eq!(content_digest(&resp), first.manifest_digest());
    assert_ne!(first.manifest_digest(), first.config_digest());

    let second = images::push_single(&reg, "solo", "v1", "seed-d").await;
    assert_ne!(second.manifest_digest(), first.manifest_digest());
    let resp = head_manifest(&reg, "solo", "v1").await;
    assert_eq!(content_digest(&resp), second.manifest_digest());
    assert_eq!(
        second.pinned_reference(),
        format!("{}/solo@{}", reg.host(), second.manifest_digest())
    );
}

#[tokio::test]
async fn layer_blob_round_trips_with_its_digest() {
    let reg = start_authed().await;
    let pushed = images::push_single(&reg, "blobs", "v1", "seed-e").await;
    let layer = &pushed.manifest.layer_digest;
    let url = reg.url(&format!("/v2/blobs/blobs/{layer}"));
    let body = reg
        .request(Method::GET, &url)
        .send()
        .await
        .expect("GET blob reaches the registry")
        .bytes()
        .await
        .expect("read blob body");
    assert_eq!(&images::sha256_digest(&body), layer);
    assert_eq!(&body[..2], &[0x1f, 0x8b], "layer is gzip");
}

#[tokio::test]
async fn docker_manifest_list_resolves_to_list_digest() {
    let reg = start_authed().await;
    let pushed = images::push_docker_list(&reg, "dock", "v1", "seed-f").await;
    let resp = head_manifest(&reg, "dock", "v1").await;
    assert_eq!(content_digest(&resp), pushed.index_digest);
    assert_eq!(
        resp.headers()[reqwest::header::CONTENT_TYPE],
        images::DOCKER_LIST
    );
    let single = images::push_image(&reg, "dock", "one", "seed-g", Flavor::Docker).await;
    let resp = head_manifest(&reg, "dock", "one").await;
    assert_eq!(content_digest(&resp), single.manifest_digest());
}

#[tokio::test]
async fn registry_without_auth_answers_anonymous_requests() {
    let reg = TestRegistry::start(RegistryAuth::None).await;
    assert_eq!(reg.credentials(), None);
    let pushed = images::push_single(&reg, "open", "v1", "seed-h").await;
    let resp = head_manifest(&reg, "open", "v1").await;
    assert_eq!(content_digest(&resp), pushed.manifest_digest());
}

#[tokio::test]
async fn image_survives_stop_and_restart_on_same_port() {
    let reg = start_authed().await;
    let host = reg.host();
    let pushed = images::push_multi_arch(&reg, "keep", "v1", "seed-i").await;

    reg.stop();
    assert!(!reg.is_running());
    let url = reg.url("/v2/");
    let down = reg.client().get(&url).send().await;
    assert!(down.is_err(), "registry still answers after stop");

    reg.start_again().await;
    assert!(reg.is_running());
    assert_eq!(reg.host(), host);
    let resp = head_manifest(&reg, "keep", "v1").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(content_digest(&resp), pushed.index_digest);

    reg.restart().await;
    let resp = head_manifest(&reg, "keep", "v1").await;
    assert_eq!(content_digest(&resp), pushed.index_digest);
    // The access log is appended across restarts.
    assert_eq!(reg.count_requests("HEAD", "/manifests/v1").await, 2);
}

#[test]
fn access_log_lines_parse() {
    let line = r#"127.0.0.1 - - [21/Nov/2026:13:56:39 +0000] "HEAD /v2/foo/bar/manifests/latest HTTP/2.0" 404 96 "" "curl/7.88.1""#;
    let entry = parse_access_line(line).expect("combined log line parses");
    assert_eq!(entry.method, "HEAD");
    assert_eq!(entry.uri, "/v2/foo/bar/manifests/latest");
    assert_eq!(entry.status, 404);
    assert_eq!(parse_access_line("time=\"x\" level=info msg=hi"), None);
}
