//! The mirror guard on `/validate` with real captures of ImageTagMirrorSet,
//! ImageDigestMirrorSet, ImageContentSourcePolicy and a ConfigMap carrying registries.conf.

use crate::common::pinhook::{raw_fixture, Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{message, warned};
use pinhook::policy::Policy;
use serde_json::Value;

async fn pinhook_with(policy: &str) -> (TestRegistry, TestPinhook) {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let policy: Policy = serde_saphyr::from_str(policy).expect("policy");
    let pinhook = TestPinhook::start_with(
        &registry,
        Options {
            policy,
            ..Options::default()
        },
    )
    .await;
    (registry, pinhook)
}

/// `/validate`'s answer to a capture as recorded (mirror objects name no image to repoint).
async fn validate(pinhook: &TestPinhook, fixture: &str) -> Value {
    let review = raw_fixture(fixture);
    let body = pinhook.validate(&review).await;
    assert_eq!(body["response"]["uid"], review["request"]["uid"]);
    body
}

#[tokio::test]
async fn tag_mirrors_are_denied_naming_the_entry_and_the_risk() {
    let (_registry, pinhook) = pinhook_with("mode: enforce").await;
    for version in ["v1.20", "v1.26"] {
        for fixture in [
            "imagetagmirrorset-create-validate.json",
            "imagetagmirrorset-update-json-patch-validate.json",
            "configmap-create-registries-conf-validate.json",
        ] {
            let body = validate(&pinhook, &format!("{version}/{fixture}")).await;
            assert_eq!(body["response"]["allowed"], false, "{fixture}: {body}");
            let message = message(&body);
            assert!(
                message.contains("mirror.example:5000/team"),
                "{fixture}: {message}"
            );
            assert!(
                message.contains("a tag mirror can serve different content for the same tag"),
                "{message}"
            );
        }
    }
}

#[tokio::test]
async fn digest_mirrors_are_allowed() {
    let (_registry, pinhook) = pinhook_with("mode: enforce").await;
    for fixture in [
        "v1.26/imagedigestmirrorset-create-validate.json",
        "v1.26/imagedigestmirrorset-update-json-patch-validate.json",
        "v1.26/imagecontentsourcepolicy-create-validate.json",
        "v1.26/imagecontentsourcepolicy-update-json-patch-validate.json",
    ] {
        let body = validate(&pinhook, fixture).await;
        assert_eq!(body["response"]["allowed"], true, "{fixture}: {body}");
    }
}

#[tokio::test]
async fn an_allow_listed_pair_passes_and_audit_only_warns() {
    let allowed = "mirrors:\n  allow:\n    - source: registry.example/team\n      mirror: mirror.example:5000/team\n";
    let (_registry, pinhook) = pinhook_with(allowed).await;
    let body = validate(&pinhook, "v1.26/imagetagmirrorset-create-validate.json").await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    // The update adds a second, unlisted mirror: judged on the new object alone.
    let body = validate(
        &pinhook,
        "v1.26/imagetagmirrorset-update-json-patch-validate.json",
    )
    .await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(message(&body).contains("mirror2.example/team"), "{body}");

    let body = validate_tag_mirror_set_under("mode: audit").await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(warned(&body, "pinhook audit: would deny"), "{body}");
    assert!(
        body["response"]["auditAnnotations"]["violation-1"]
            .to_string()
            .contains("tag_mirror"),
        "{body}"
    );
}

/// The guard protects every image of the cluster, so the image-side knobs do not switch it
/// off: `target: pods` (which leaves templates alone), an exempt namespace, exempt images.
#[tokio::test]
async fn target_pods_and_exemptions_do_not_switch_the_guard_off() {
    let policy =
        "target: pods\nexempt:\n  namespaces: [fixtures]\n  images: [\"registry.example/*\"]\n";
    let (_registry, pinhook) = pinhook_with(policy).await;
    for fixture in [
        "v1.26/imagetagmirrorset-create-validate.json",
        "v1.26/configmap-create-registries-conf-validate.json",
    ] {
        let body = validate(&pinhook, fixture).await;
        assert_eq!(body["response"]["allowed"], false, "{fixture}: {body}");
        assert!(
            message(&body).contains("mirror.example:5000/team"),
            "{fixture}: {body}"
        );
    }
    // Mode off is the one switch.
    let body = validate_tag_mirror_set_under("mode: off").await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

/// `/validate`'s answer to the captured ImageTagMirrorSet under a fresh pinhook with `policy`.
async fn validate_tag_mirror_set_under(policy: &str) -> Value {
    let (_registry, pinhook) = pinhook_with(policy).await;
    validate(&pinhook, "v1.26/imagetagmirrorset-create-validate.json").await
}

/// Issue 28: the captured ConfigMap with its registries.conf replaced by `text`.
fn config_map_review(key: &str, text: &str) -> Value {
    let mut review = raw_fixture("v1.26/configmap-create-registries-conf-validate.json");
    review["request"]["object"]["data"] = serde_json::json!({ key: text });
    review
}

#[tokio::test]
async fn a_tag_mirror_denial_names_the_resolve_through_entry_that_replaces_it() {
    let (_registry, pinhook) = pinhook_with("mode: enforce").await;
    let body = validate(&pinhook, "v1.26/imagetagmirrorset-create-validate.json").await;
    let message = message(&body);
    assert!(
        message.contains("; instead: registries.resolveThrough: [{source: ")
            && message.contains("mirrors: [{location: mirror.example:5000/team")
            && message.contains("with a digest-only mirror on the nodes"),
        "{message}"
    );
}

#[tokio::test]
async fn a_v1_registries_conf_and_inline_containerd_mirrors_are_denied() {
    let (_registry, pinhook) = pinhook_with("mode: enforce").await;
    let v1 = config_map_review(
        "registries.conf",
        "[registries.search]\nregistries = [\"docker.io\"]\n",
    );
    let body = pinhook.validate(&v1).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(
        message(&body).contains("v1 format ([registries.*])")
            && message(&body).contains("v5.40+ (v1 removed; CRI-O fails to start)"),
        "{body}"
    );

    let containerd = config_map_review(
        "config.toml",
        "version = 3\n[plugins.\"io.containerd.cri.v1.images\".registry]\n  config_path = \"/etc/containerd/certs.d:/etc/docker/certs.d\"\n[plugins.\"io.containerd.cri.v1.images\".registry.mirrors.\"docker.io\"]\n  endpoint = [\"https://hub-cache.example\"]\n",
    );
    let body = pinhook.validate(&containerd).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(
        message(&body).contains("lets hub-cache.example serve tag pulls for docker.io"),
        "{body}"
    );
    // Only the directories: a note, admitted.
    let directories = config_map_review(
        "config.toml",
        "version = 3\n[plugins.\"io.containerd.cri.v1.images\".registry]\n  config_path = \"/etc/containerd/certs.d:/etc/docker/certs.d\"\n",
    );
    let body = pinhook.validate(&directories).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(
        warned(&body, "/etc/containerd/certs.d, /etc/docker/certs.d"),
        "{body}"
    );
}
