//! `/mutate` over real HTTPS with real AdmissionReview captures, resolving against a real
//! registry: every pod-bearing shape is pinned to the index digest, idempotently; bad input
//! gets a specific error and the server keeps serving.

use crate::common::images::{self, PushedIndex};
use crate::common::pinhook::{
    apply_response, response_patch, review_fixture, Options, TestPinhook,
};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{message, pod_image, template_spec, BASIC_POD};
use pinhook::reference::PinForm;
use serde_json::{json, Value};

async fn registry_with(repos: &[&str]) -> (TestRegistry, Vec<PushedIndex>) {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let mut pushed = Vec::new();
    for repo in repos {
        pushed.push(images::push_multi_arch(&registry, &format!("team/{repo}"), "1.0", repo).await);
    }
    (registry, pushed)
}

#[tokio::test]
async fn pod_is_pinned_to_the_index_digest_with_the_request_uid() {
    let (registry, pushed) = registry_with(&["app"]).await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = review_fixture(BASIC_POD, &registry);

    let body = pinhook.mutate(&review).await;

    assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(body["kind"], "AdmissionReview");
    assert_eq!(body["response"]["uid"], review["request"]["uid"]);
    assert_eq!(body["response"]["allowed"], true);
    assert_eq!(body["response"]["patchType"], "JSONPatch");
    assert!(
        body["response"]["patch"].is_string(),
        "patch must be a base64 string"
    );
    let object = apply_response(&review, &body);
    let image = object["spec"]["containers"][0]["image"]
        .as_str()
        .expect("image");
    assert_eq!(image, pushed[0].pinned_with_tag());
    for platform in pushed[0].platform_digests() {
        assert!(!image.contains(platform), "pinned a platform manifest");
    }
    for config in pushed[0].config_digests() {
        assert!(!image.contains(config), "pinned a config digest");
    }
}

#[tokio::test]
async fn deployment_template_is_pinned_including_init_containers() {
    let (registry, pushed) = registry_with(&["app", "init"]).await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = review_fixture("v1.26/deployment-create-mutate.json", &registry);

    let body = pinhook.mutate(&review).await;

    let object = apply_response(&review, &body);
    let spec = &object["spec"]["template"]["spec"];
    assert_eq!(spec["containers"][0]["image"], pushed[0].pinned_with_tag());
    assert_eq!(
        spec["initContainers"][0]["image"],
        pushed[1].pinned_with_tag()
    );
}

#[tokio::test]
async fn cronjob_both_api_versions_are_pinned() {
    let (registry, pushed) = registry_with(&["cron"]).await;
    let pinhook = TestPinhook::start(&registry).await;
    for fixture in [
        "v1.20/cronjob-create-mutate.json",
        "v1.26/cronjob-create-mutate.json",
    ] {
        let review = review_fixture(fixture, &registry);
        let body = pinhook.mutate(&review).await;
        let object = apply_response(&review, &body);
        let image =
            &object["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"];
        assert_eq!(image, &json!(pushed[0].pinned_with_tag()), "{fixture}");
    }
}

#[tokio::test]
async fn ephemeral_container_update_pins_only_the_new_entry() {
    let (registry, pushed) = registry_with(&["debug"]).await;
    let pinhook = TestPinhook::start(&registry).await;

    // 1.26: kubectl debug sends a full Pod to pods/ephemeralcontainers.
    let review = review_fixture(
        "v1.26/pod-update-ephemeralcontainers-kubectl-debug-mutate.json",
        &registry,
    );
    let body = pinhook.mutate(&review).await;
    let patch = response_patch(&body).expect("a patch");
    assert_eq!(
        patch.0.len(),
        1,
        "only the new ephemeral container: {patch:?}"
    );
    let object = apply_response(&review, &body);
    assert_eq!(
        object["spec"]["ephemeralContainers"][0]["image"],
        pushed[0].pinned_with_tag()
    );

    // 1.20: the subresource object is v1 EphemeralContainers.
    let review = review_fixture(
        "v1.20/ephemeralcontainers-update-raw-put-mutate.json",
        &registry,
    );
    let body = pinhook.mutate(&review).await;
    let object = apply_response(&review, &body);
    assert_eq!(
        object["ephemeralContainers"][0]["image"],
        pushed[0].pinned_with_tag()
    );
}

#[tokio::test]
async fn dry_run_review_is_pinned_like_any_other() {
    let (registry, pushed) = registry_with(&["app"]).await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = review_fixture("v1.26/pod-create-dryrun-server-mutate.json", &registry);
    assert_eq!(review["request"]["dryRun"], true);

    let body = pinhook.mutate(&review).await;

    let object = apply_response(&review, &body);
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        pushed[0].pinned_with_tag()
    );
}

#[tokio::test]
async fn reinvocation_on_the_pinned_object_yields_no_patch() {
    let (registry, _) = registry_with(&["app", "init"]).await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut review = review_fixture("v1.26/deployment-create-mutate.json", &registry);
    let body = pinhook.mutate(&review).await;
    review["request"]["object"] = apply_response(&review, &body);
    review["request"]["uid"] = json!("second-round");

    let again = pinhook.mutate(&review).await;

    assert_eq!(again["response"]["allowed"], true);
    assert_eq!(again["response"]["uid"], "second-round");
    assert!(again["response"].get("patch").is_none(), "{again}");
    assert!(again["response"].get("patchType").is_none(), "{again}");
}

#[tokio::test]
async fn digest_only_form_drops_the_tag() {
    let (registry, pushed) = registry_with(&["app"]).await;
    let options = Options::with_form(PinForm::DigestOnly);
    let pinhook = TestPinhook::start_with(&registry, options).await;
    let review = review_fixture(BASIC_POD, &registry);

    let body = pinhook.mutate(&review).await;

    let object = apply_response(&review, &body);
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        format!("{}/team/app@{}", registry.host(), pushed[0].index_digest)
    );
}

#[tokio::test]
async fn missing_tag_is_denied_naming_container_path_image_and_cause() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = review_fixture(BASIC_POD, &registry);

    let body = pinhook.mutate(&review).await;

    assert_eq!(body["response"]["allowed"], false);
    assert_eq!(body["response"]["uid"], review["request"]["uid"]);
    assert_eq!(body["response"]["status"]["code"], 403);
    let message = message(&body);
    assert!(message.contains("container \"app\""), "{message}");
    assert!(message.contains("/spec/containers/0/image"), "{message}");
    assert!(
        message.contains(&format!("{}/team/app:1.0", registry.host())),
        "{message}"
    );
    assert!(message.contains("tag 1.0 not found"), "{message}");
}

#[tokio::test]
async fn invalid_image_reference_is_denied_with_the_specific_reason() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut review = review_fixture(BASIC_POD, &registry);
    let long_tag = "t".repeat(129);
    let cases = [
        (
            format!("nginx:{long_tag}"),
            "tag longer than 128 characters",
        ),
        ("Upper/Case".to_string(), "lowercase"),
        (
            format!("nginx@sha256:{}", "A".repeat(64)),
            "invalid checksum digest format",
        ),
        (
            format!("nginx@md5:{}", "a".repeat(32)),
            "unsupported digest algorithm",
        ),
    ];
    for (image, expected) in cases {
        *pod_image(&mut review) = json!(image);
        let body = pinhook.mutate(&review).await;
        assert_eq!(body["response"]["allowed"], false, "{image}");
        let message = message(&body);
        assert!(message.contains(expected), "{image}: {message}");
    }
}

#[tokio::test]
async fn bad_requests_get_specific_errors_and_the_server_keeps_serving() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = review_fixture(BASIC_POD, &registry);

    let (status, body) = pinhook.post("/mutate", "{not json").await;
    assert_eq!(
        (status, body.contains("not valid JSON")),
        (400, true),
        "{body}"
    );

    let mut wrong_version = review.clone();
    wrong_version["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let (status, body) = pinhook
        .post("/mutate", serde_json::to_vec(&wrong_version).expect("json"))
        .await;
    assert_eq!(
        (status, body.contains("apiVersion must be")),
        (400, true),
        "{body}"
    );

    let mut no_uid = review.clone();
    no_uid["request"]
        .as_object_mut()
        .expect("object")
        .remove("uid");
    let (status, body) = pinhook
        .post("/mutate", serde_json::to_vec(&no_uid).expect("json"))
        .await;
    assert_eq!(
        (status, body.contains("uid is missing")),
        (400, true),
        "{body}"
    );

    let huge = vec![b' '; 8 * 1024 * 1024];
    let (status, _) = pinhook.post("/mutate", huge).await;
    assert_eq!(status, 413);

    let (status, body) = pinhook.post("/healthz", "").await;
    assert_eq!(status, 405, "{body}");
    let health = pinhook
        .client
        .get(pinhook.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status().as_u16(), 200);
}

#[tokio::test]
async fn serves_http2_and_http1() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let response = pinhook
        .client
        .get(pinhook.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(response.status().as_u16(), 200);
    // reqwest negotiates h2 through ALPN when the server offers it.
    assert_eq!(response.version(), reqwest::Version::HTTP_2);

    let ca = reqwest::Certificate::from_pem(pinhook.ca_pem().as_bytes()).expect("ca");
    let http1 = reqwest::Client::builder()
        .tls_certs_only([ca])
        .no_proxy()
        .http1_only()
        .build()
        .expect("client");
    let review = review_fixture(BASIC_POD, &registry);
    let response = http1
        .post(pinhook.url("/mutate"))
        .json(&review)
        .send()
        .await
        .expect("mutate over HTTP/1.1");
    assert_eq!(response.version(), reqwest::Version::HTTP_11);
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["response"]["uid"], review["request"]["uid"]);
}

#[tokio::test]
async fn distinct_images_in_one_pod_are_each_resolved_once() {
    let repos = ["a", "b", "c", "d", "e"];
    let (registry, pushed) = registry_with(&repos).await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut review = review_fixture(BASIC_POD, &registry);
    let container = review["request"]["object"]["spec"]["containers"][0].clone();
    let containers: Vec<Value> = repos
        .iter()
        .chain(repos.iter())
        .enumerate()
        .map(|(i, repo)| {
            let mut c = container.clone();
            c["name"] = json!(format!("c{i}"));
            c["image"] = json!(format!("{}/team/{repo}:1.0", registry.host()));
            c
        })
        .collect();
    review["request"]["object"]["spec"]["containers"] = json!(containers);

    let body = pinhook.mutate(&review).await;

    assert_eq!(response_patch(&body).expect("patch").0.len(), 10);
    let object = apply_response(&review, &body);
    for (i, index) in pushed.iter().chain(pushed.iter()).enumerate() {
        let image = &object["spec"]["containers"][i]["image"];
        assert_eq!(image, &json!(index.pinned_with_tag()), "c{i}");
    }
    for repo in repos {
        let heads = registry
            .manifest_heads(&format!("team/{repo}"), "1.0")
            .await;
        assert_eq!(heads, 1, "{repo} resolved once");
    }
}

/// A Deployment whose three tags are cached is pinned from the cache: fifty more reviews get
/// the same patch and no request reaches the registry. How fast that is, is measured by
/// `cargo bench --bench mutate`, not here.
#[tokio::test]
async fn a_warm_deployment_is_pinned_from_the_cache_without_registry_requests() {
    let repos = ["app", "init", "side"];
    let (registry, pushed) = registry_with(&repos).await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut review = review_fixture("v1.26/deployment-create-mutate.json", &registry);
    let spec = template_spec(&mut review);
    let mut side = spec["containers"][0].clone();
    side["name"] = json!("side");
    side["image"] = json!(pushed[2].reference);
    spec["containers"].as_array_mut().expect("array").push(side);
    let first = pinhook.mutate(&review).await;
    let object = apply_response(&review, &first);
    let pinned = &object["spec"]["template"]["spec"];
    assert_eq!(
        pinned["containers"][0]["image"],
        pushed[0].pinned_with_tag()
    );
    assert_eq!(
        pinned["initContainers"][0]["image"],
        pushed[1].pinned_with_tag()
    );
    assert_eq!(
        pinned["containers"][1]["image"],
        pushed[2].pinned_with_tag()
    );
    let patch = response_patch(&first).expect("patch");
    assert_eq!(patch.0.len(), 3);

    for round in 0..50 {
        let again = pinhook.mutate(&review).await;
        assert_eq!(response_patch(&again), Some(patch.clone()), "round {round}");
    }

    for repo in repos {
        let manifest_requests = registry
            .manifest_heads(&format!("team/{repo}"), "1.0")
            .await
            + registry
                .count_requests("GET", &format!("/v2/team/{repo}/manifests/1.0"))
                .await;
        assert_eq!(manifest_requests, 1, "{repo}: only the first review asked");
    }
}
