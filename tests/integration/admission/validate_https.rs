//! `/validate` over real HTTPS with real captures: unpinned or invalid references among the
//! images a request adds are denied, pinned ones and untouched old ones pass.

use crate::common::pinhook::{review_fixture, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{message, pod_image};
use serde_json::json;

const DIGEST: &str = "sha256:4dcacff740e1267e69749851bb586f175b11ffa09f7afa4f451e8fabe816b2f4";

#[tokio::test]
async fn unpinned_pod_is_denied_naming_container_and_path() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let review = review_fixture("v1.26/pod-create-basic-validate.json", &registry);

    let body = pinhook.validate(&review).await;

    assert_eq!(body["response"]["uid"], review["request"]["uid"]);
    assert_eq!(body["response"]["allowed"], false);
    let message = message(&body);
    assert!(
        message.contains("container \"app\" (/spec/containers/0/image)"),
        "{message}"
    );
    assert!(message.contains("not pinned to a digest"), "{message}");
    // No registry was asked: validation is offline.
    assert_eq!(registry.count_requests("HEAD", "/manifests/").await, 0);
}

#[tokio::test]
async fn pinned_references_pass() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    for fixture in [
        "v1.26/pod-create-digest-validate.json",
        "v1.26/pod-create-tag-and-digest-validate.json",
    ] {
        let review = review_fixture(fixture, &registry);
        let body = pinhook.validate(&review).await;
        assert_eq!(body["response"]["allowed"], true, "{fixture}: {body}");
    }
}

#[tokio::test]
async fn only_images_the_update_changes_are_judged() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut review = review_fixture("v1.26/deployment-update-set-image-validate.json", &registry);
    let spec = "/request/object/spec/template/spec";
    let app = format!("{}/team/app:2.0@{DIGEST}", registry.host());
    *review
        .pointer_mut(&format!("{spec}/containers/0/image"))
        .expect("container") = json!(app);

    // The init container is still the unpinned tag from before the update: not this request's doing.
    let body = pinhook.validate(&review).await;

    assert_eq!(body["response"]["allowed"], true, "{body}");
}

#[tokio::test]
async fn invalid_references_are_denied_with_the_reason_and_other_kinds_pass() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut review = review_fixture("v1.26/pod-create-basic-validate.json", &registry);
    *pod_image(&mut review) = json!("::1/foo");
    let body = pinhook.validate(&review).await;
    assert_eq!(body["response"]["allowed"], false);
    assert!(message(&body).contains("IPv6"), "{}", message(&body));

    let scale = review_fixture(
        "v1.26/scale-update-deployments-kubectl-scale-validate.json",
        &registry,
    );
    let body = pinhook.validate(&scale).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
}
