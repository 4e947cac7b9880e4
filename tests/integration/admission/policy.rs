//! Every policy knob against a real registry over real HTTPS, with real captures of each kind:
//! modes (and the namespace label), resolve, target, exemptions, registry rules and the guard
//! against internal addresses, onResolutionFailure, dry runs, and reload under load.

use std::sync::Arc;
use std::time::Duration;

use crate::common::fake_kube::FakeKube;
use crate::common::images::{self, PushedIndex};
use crate::common::pinhook::{
    apply_response, response_patch, review_fixture, Options, TestPinhook,
};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{
    image_after, in_namespace, message, pod_review, warned, warnings, BASIC_POD,
};
use pinhook::cluster::KubeNamespaces;
use pinhook::policy::{Policy, PolicyHandle};
use rstest::rstest;
use serde_json::{json, Value};

struct World {
    registry: TestRegistry,
    pinhook: TestPinhook,
    app: PushedIndex,
    /// Every image pushed, `app` among them: each kind's capture names one of them.
    pushed: Vec<PushedIndex>,
}

impl World {
    /// The image pushed under `reference` (`host/team/<repo>:1.0`).
    fn pushed_as(&self, reference: &str) -> &PushedIndex {
        self.pushed
            .iter()
            .find(|p| p.reference == reference)
            .unwrap_or_else(|| panic!("{reference} was not pushed"))
    }
}

async fn world(policy: &str) -> World {
    world_with(policy, |o| o).await
}

async fn world_with(policy: &str, adjust: impl FnOnce(Options) -> Options) -> World {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let mut pushed = Vec::new();
    for repo in ["app", "init", "cron", "db", "agent", "job"] {
        pushed.push(images::push_multi_arch(&registry, &format!("team/{repo}"), "1.0", repo).await);
    }
    let app = pushed[0].clone();
    let policy: Policy = serde_saphyr::from_str(policy).expect("test policy parses");
    let options = adjust(Options {
        policy,
        ..Options::default()
    });
    let pinhook = TestPinhook::start_with(&registry, options).await;
    World {
        registry,
        pinhook,
        app,
        pushed,
    }
}

/// Every pod-bearing kind, as captured from a 1.26 apiserver (`-mutate.json`; the
/// `-validate.json` capture of the same call sits beside it), with its first image.
const KINDS: [(&str, &str); 9] = [
    (
        "v1.26/pod-create-basic-mutate.json",
        "/spec/containers/0/image",
    ),
    (
        "v1.26/podtemplate-create-mutate.json",
        "/template/spec/containers/0/image",
    ),
    (
        "v1.26/replicationcontroller-create-mutate.json",
        "/spec/template/spec/containers/0/image",
    ),
    (
        "v1.26/deployment-create-mutate.json",
        "/spec/template/spec/containers/0/image",
    ),
    (
        "v1.26/replicaset-create-mutate.json",
        "/spec/template/spec/containers/0/image",
    ),
    (
        "v1.26/statefulset-create-mutate.json",
        "/spec/template/spec/containers/0/image",
    ),
    (
        "v1.26/daemonset-create-mutate.json",
        "/spec/template/spec/containers/0/image",
    ),
    (
        "v1.26/job-create-mutate.json",
        "/spec/template/spec/containers/0/image",
    ),
    (
        "v1.26/cronjob-create-mutate.json",
        "/spec/jobTemplate/spec/template/spec/containers/0/image",
    ),
];

/// What a knob does to the first image of each kind.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// `/mutate` pins it to `name:tag@digest`.
    TagAndDigest,
    /// `/mutate` pins it to `name@digest`.
    DigestOnly,
    /// `/mutate` leaves it; `/validate` admits it.
    LeftAndAdmitted,
    /// `/mutate` leaves it; `/validate` denies it as unpinned.
    LeftAndDeniedAtValidation,
    /// Templates are left and admitted; a Pod is pinned.
    OnlyPods,
    /// `/mutate` denies it.
    Denied,
}

/// Each knob across every kind: the knob's effect must not depend on where the PodSpec lives.
#[rstest]
#[case::enforce("mode: enforce", Expect::TagAndDigest)]
#[case::audit("mode: audit", Expect::LeftAndAdmitted)]
#[case::off("mode: off", Expect::LeftAndAdmitted)]
#[case::form_digest("form: digest", Expect::DigestOnly)]
#[case::exempt_images("exempt:\n  images: ['*/team/*']", Expect::LeftAndAdmitted)]
#[case::exempt_namespace("exempt:\n  namespaces: [fixt*]", Expect::LeftAndAdmitted)]
#[case::resolve_never("resolve: Never", Expect::LeftAndDeniedAtValidation)]
#[case::target_pods("target: pods", Expect::OnlyPods)]
#[case::registry_not_allowed("registries:\n  allow: ['registry.example']", Expect::Denied)]
#[tokio::test]
async fn each_knob_across_every_kind(#[case] policy: &str, #[case] expect: Expect) {
    let world = world(policy).await;
    for (fixture, pointer) in KINDS {
        let review = review_fixture(fixture, &world.registry);
        let original = image_at(&review["request"]["object"], pointer);
        let body = world.pinhook.mutate(&review).await;
        let image = image_at(&apply_response(&review, &body), pointer);
        let is_pod = fixture.contains("/pod-create");
        let validated = || async {
            let validate =
                review_fixture(&fixture.replace("-mutate", "-validate"), &world.registry);
            world.pinhook.validate(&validate).await["response"]["allowed"].clone()
        };
        match (expect, is_pod) {
            (Expect::TagAndDigest, _) | (Expect::OnlyPods, true) => {
                let pinned = world.pushed_as(&original).pinned_with_tag();
                assert_eq!(image, pinned, "{policy} {fixture}: {body}");
            }
            (Expect::DigestOnly, _) => {
                let pinned = world.pushed_as(&original).pinned_reference();
                assert_eq!(image, pinned, "{policy} {fixture}: {body}");
            }
            (Expect::LeftAndAdmitted | Expect::LeftAndDeniedAtValidation, _)
            | (Expect::OnlyPods, false) => {
                assert_eq!(
                    body["response"]["allowed"], true,
                    "{policy} {fixture}: {body}"
                );
                assert_eq!(image, original, "{policy} {fixture}: {body}");
                let admitted = !matches!(expect, Expect::LeftAndDeniedAtValidation);
                assert_eq!(validated().await, admitted, "{policy} {fixture}: /validate");
            }
            (Expect::Denied, _) => {
                assert_eq!(
                    body["response"]["allowed"], false,
                    "{policy} {fixture}: {body}"
                );
                let message = message(&body);
                assert!(
                    message.contains("is not on the policy's allow list"),
                    "{policy} {fixture}: {message}"
                );
            }
        }
    }
}

/// The image at `pointer` in `object`; a pointer that names no image fails the test.
fn image_at(object: &Value, pointer: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} names no image in {object}"))
        .to_string()
}

#[rstest]
#[case::enforce("mode: enforce", true)]
#[case::audit("mode: audit", false)]
#[case::off("mode: off", false)]
#[tokio::test]
async fn mode_decides_whether_each_kind_is_patched(#[case] policy: &str, #[case] patched: bool) {
    let world = world(policy).await;
    for (fixture, pointer) in KINDS {
        let review = review_fixture(fixture, &world.registry);
        let original = image_at(&review["request"]["object"], pointer);
        let body = world.pinhook.mutate(&review).await;
        assert_eq!(body["response"]["allowed"], true, "{fixture}: {body}");
        let image = image_at(&apply_response(&review, &body), pointer);
        let expected = if patched {
            world.pushed_as(&original).pinned_with_tag()
        } else {
            original
        };
        assert_eq!(image, expected, "{fixture}: {body}");
    }
}

#[rstest]
#[case::enforce_denies("mode: enforce", false)]
#[case::audit_admits_and_warns("mode: audit", true)]
#[tokio::test]
async fn a_missing_tag_is_denied_in_enforce_and_reported_in_audit(
    #[case] policy: &str,
    #[case] allowed: bool,
) {
    let world = world(policy).await;
    for (fixture, pointer) in KINDS {
        let mut review = review_fixture(fixture, &world.registry);
        let image = format!("{}/team/app:missing", world.registry.host());
        *review["request"]["object"]
            .pointer_mut(pointer)
            .expect("pointer") = json!(image);
        let body = world.pinhook.mutate(&review).await;
        assert_eq!(body["response"]["allowed"], allowed, "{fixture}: {body}");
        assert!(
            response_patch(&body).is_none(),
            "{fixture}: never a patch here"
        );
        if allowed {
            let warnings = warnings(&body);
            assert!(
                warnings
                    .iter()
                    .any(|w| w.starts_with("pinhook audit: would deny") && w.contains("not found")),
                "{warnings:?}"
            );
            assert!(
                warnings
                    .iter()
                    .all(|w| w.chars().count() <= 120 && !w.contains('\n')),
                "{warnings:?}"
            );
            let annotations = body["response"]["auditAnnotations"]
                .as_object()
                .expect("annotations");
            assert!(
                annotations
                    .keys()
                    .all(|k| !k.contains('/') && k.len() <= 63),
                "{annotations:?}"
            );
            let violation = annotations["violation-1"]
                .as_str()
                .expect("violation-1 is a string");
            assert!(
                violation.starts_with("resolution_failed: ")
                    && violation.contains(&format!("({pointer}) image \"{image}\"")),
                "{fixture}: {violation}"
            );
        }
    }
    let reason = if allowed { "audit" } else { "enforce" };
    let text = world.pinhook.scrape_metrics().await;
    let line = format!(
        "pinhook_policy_violations_total{{mode=\"{reason}\",reason=\"resolution_failed\"}} {}",
        KINDS.len()
    );
    assert!(text.contains(&line), "{text}");
}

#[tokio::test]
async fn the_namespace_label_overrides_the_mode() {
    let kube = FakeKube::start().await;
    kube.add_namespace("loose", json!({"pinhook.dev/mode": "audit"}));
    kube.add_namespace("strict", json!({}));
    kube.add_namespace("typo", json!({"pinhook.dev/mode": "audited"}));
    let client = kube.client();
    let world = world_with("mode: enforce", |o| Options {
        namespaces: Arc::new(KubeNamespaces::new(client)),
        ..o
    })
    .await;
    let missing = format!("{}/team/app:missing", world.registry.host());
    let mut review = pod_review(&world.registry, &missing);

    review["request"]["namespace"] = json!("loose");
    assert_eq!(
        world.pinhook.mutate(&review).await["response"]["allowed"],
        true
    );
    review["request"]["namespace"] = json!("strict");
    assert_eq!(
        world.pinhook.mutate(&review).await["response"]["allowed"],
        false
    );
    review["request"]["namespace"] = json!("typo");
    let body = world.pinhook.mutate(&review).await;
    assert_eq!(
        body["response"]["allowed"], false,
        "an invalid label falls back to the policy"
    );
    assert!(warned(&body, "audited"), "{body}");
    assert_eq!(
        kube.hits("/api/v1/namespaces/loose"),
        1,
        "namespace labels are cached"
    );
}

#[tokio::test]
async fn resolve_never_makes_no_registry_call_and_validation_denies_unpinned() {
    let world = world("resolve: Never").await;
    let review = review_fixture(BASIC_POD, &world.registry);
    let body = world.pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true);
    assert!(response_patch(&body).is_none());
    assert_eq!(
        world.registry.count_requests("HEAD", "/manifests/").await,
        0
    );

    let review = review_fixture("v1.26/pod-create-basic-validate.json", &world.registry);
    let body = world.pinhook.validate(&review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
}

#[rstest]
#[case::enforce_denies_with_both_digests("resolve: Always", false)]
#[case::audit_warns("resolve: Always\nmode: audit", true)]
#[tokio::test]
async fn resolve_always_catches_a_tag_that_moved_away_from_its_pin(
    #[case] policy: &str,
    #[case] allowed: bool,
) {
    let world = world(policy).await;
    let moved = images::push_multi_arch(&world.registry, "team/app", "1.0", "moved").await;
    let image = world.app.pinned_with_tag();
    let review = pod_review(&world.registry, &image);

    let body = world.pinhook.mutate(&review).await;

    assert_eq!(body["response"]["allowed"], allowed, "{body}");
    let text = if allowed {
        body["response"]["auditAnnotations"]["violation-1"].to_string()
    } else {
        body["response"]["status"]["message"].to_string()
    };
    assert!(
        text.contains(&moved.index_digest) && text.contains(&world.app.index_digest),
        "{text}"
    );

    // Still pointing where the pin says: unchanged, allowed.
    let current = moved.pinned_with_tag();
    let body = world
        .pinhook
        .mutate(&pod_review(&world.registry, &current))
        .await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(response_patch(&body).is_none());
}

#[tokio::test]
async fn target_pods_leaves_templates_alone_and_gives_one_owner_revision_one_digest() {
    let world = world("target: pods").await;
    let deployment = review_fixture("v1.26/deployment-create-mutate.json", &world.registry);
    let body = world.pinhook.mutate(&deployment).await;
    assert_eq!(body["response"]["allowed"], true);
    assert!(
        response_patch(&body).is_none(),
        "templates stay as written: {body}"
    );
    let body = world
        .pinhook
        .validate(&review_fixture(
            "v1.26/deployment-create-validate.json",
            &world.registry,
        ))
        .await;
    assert_eq!(
        body["response"]["allowed"], true,
        "nor are they denied: {body}"
    );

    let pod = |owner: &str, hash: &str| {
        let mut review = review_fixture(
            "v1.26/pod-create-generate-name-mutate.json",
            &world.registry,
        );
        let metadata = &mut review["request"]["object"]["metadata"];
        metadata["ownerReferences"][0]["uid"] = json!(owner);
        metadata["labels"]["pod-template-hash"] = json!(hash);
        review
    };
    let first = pod("rs-uid-1", "abc");
    let body = world.pinhook.mutate(&first).await;
    let pinned = image_after(&first, &body);
    assert_eq!(pinned, world.app.pinned_with_tag(), "{body}");

    let moved = images::push_multi_arch(&world.registry, "team/app", "1.0", "moved").await;
    world.pinhook.resolver.expire_all();
    let second = pod("rs-uid-1", "abc");
    let body = world.pinhook.mutate(&second).await;
    let image = image_after(&second, &body);
    assert_eq!(image, pinned, "same owner revision, same digest");

    let other = pod("rs-uid-2", "def");
    let body = world.pinhook.mutate(&other).await;
    assert_eq!(
        image_after(&other, &body),
        moved.pinned_with_tag(),
        "{body}"
    );

    // ownerReferences are written by whoever creates the pod: naming the same owner from
    // another namespace must not borrow its digest (it could have been resolved with that
    // namespace's pull secret).
    world.pinhook.resolver.expire_all();
    let mut intruder = pod("rs-uid-1", "abc");
    in_namespace(&mut intruder, "elsewhere");
    let body = world.pinhook.mutate(&intruder).await;
    assert_eq!(
        image_after(&intruder, &body),
        moved.pinned_with_tag(),
        "resolved afresh, not from rs-uid-1's memo: {body}"
    );
}

#[tokio::test]
async fn exempt_images_and_namespaces_are_never_resolved_nor_denied() {
    let world = world("exempt:\n  images: ['*/team/app:*']\n  namespaces: ['kube-*']").await;
    let missing = format!("{}/team/app:missing", world.registry.host());
    let review = pod_review(&world.registry, &missing);
    let body = world.pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(response_patch(&body).is_none());
    let body = world.pinhook.validate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");

    let mut review = pod_review(&world.registry, &world.pushed[1].reference);
    review["request"]["namespace"] = json!("kube-system");
    let body = world.pinhook.mutate(&review).await;
    assert!(response_patch(&body).is_none(), "{body}");
    assert_eq!(
        world.registry.count_requests("HEAD", "/manifests/").await,
        0
    );
}

#[tokio::test]
async fn internal_addresses_are_refused_without_any_connection_attempt() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let listener6 = std::net::TcpListener::bind("[::1]:0").ok();
    if let Some(l) = &listener6 {
        l.set_nonblocking(true).expect("nonblocking");
    }
    let port6 = listener6
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map_or(1, |a| a.port());
    let world = world("mode: enforce").await;

    for image in [
        format!("127.0.0.1:{port}/team/app:1.0"),
        "169.254.169.254/latest/meta:data".to_string(),
        format!("[::1]:{port6}/team/app:1.0"),
        "[fe80::1]:5000/team/app:1.0".to_string(),
        format!("localhost:{port}/team/app:1.0"),
    ] {
        let body = world
            .pinhook
            .mutate(&pod_review(&world.registry, &image))
            .await;
        assert_eq!(body["response"]["allowed"], false, "{image}: {body}");
        let message = message(&body);
        assert!(
            message.contains("pinhook does not contact it"),
            "{image}: {message}"
        );
    }

    assert!(
        listener.accept().is_err(),
        "a connection reached the loopback listener"
    );
    if let Some(l) = listener6 {
        assert!(
            l.accept().is_err(),
            "a connection reached the [::1] listener"
        );
    }
}

#[tokio::test]
async fn registry_allow_and_deny_lists_apply() {
    let world = world("registries:\n  deny: ['127.0.0.1:*']").await;
    let image = format!("{}/team/app:1.0", world.registry.host());
    let body = world
        .pinhook
        .mutate(&pod_review(&world.registry, &image))
        .await;
    assert_eq!(body["response"]["allowed"], false);
    assert!(message(&body).contains("deny list"), "{body}");

    let world = world_with_allow().await;
    let body = world
        .pinhook
        .mutate(&pod_review(&world.registry, "quay.io/org/app:1"))
        .await;
    assert!(
        message(&body).contains("not on the policy's allow list"),
        "{body}"
    );
}

async fn world_with_allow() -> World {
    world("registries:\n  allow: ['127.0.0.1:*']").await
}

#[tokio::test]
async fn on_resolution_failure_allow_admits_unpinned_with_a_warning() {
    let world = world("onResolutionFailure: allow").await;
    let image = format!("{}/team/app:missing", world.registry.host());
    let review = pod_review(&world.registry, &image);
    let body = world.pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(
        warnings(&body)
            .iter()
            .any(|w| w.starts_with("pinhook: admitted")),
        "{body}"
    );
    let body = world.pinhook.validate(&review).await;
    assert_eq!(
        body["response"]["allowed"], true,
        "validation agrees: {body}"
    );
}

#[tokio::test]
async fn a_dry_run_records_nothing() {
    let world = world("mode: enforce").await;
    let dry = review_fixture(
        "v1.26/pod-create-dryrun-server-mutate.json",
        &world.registry,
    );
    let body = world.pinhook.mutate(&dry).await;
    assert_eq!(
        image_after(&dry, &body),
        world.app.pinned_with_tag(),
        "{body}"
    );
    let real = review_fixture(BASIC_POD, &world.registry);
    world.pinhook.mutate(&real).await;
    // The dry run left no cache entry, so the real admission asked the registry again.
    assert_eq!(world.registry.manifest_heads("team/app", "1.0").await, 2);
}

#[tokio::test]
async fn policy_reload_under_load_drops_no_request() {
    let world = world("mode: enforce").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.yaml");
    let allow_host = format!(
        "registries:\n  allowPrivate: ['{}']\n",
        world.registry.host()
    );
    std::fs::write(&path, format!("mode: enforce\n{allow_host}")).expect("write");
    let handle: PolicyHandle = world.pinhook.policy.clone();
    let watcher = tokio::spawn(pinhook::policy_reload::reload_on_change(
        path.clone(),
        handle.clone(),
        |_| Ok(()),
    ));
    let body = serde_json::to_vec(&review_fixture(
        "v1.26/pod-create-basic-mutate.json",
        &world.registry,
    ))
    .expect("json");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let client = world.pinhook.client.clone();
        let url = world.pinhook.url("/mutate?timeout=10s");
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            // Bounded: at most 2000 requests, and it stops when the reloads are done.
            for _ in 0..2000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let status = match client.post(&url).body(body.clone()).send().await {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 0,
                };
                statuses.push(status);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            statuses
        })
    };
    use pinhook::policy::Mode;
    // Let the watcher read the file as it is now, before the first change.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // (file text, the mode in force after it): a broken file keeps the policy before it.
    for (text, expected) in [
        ("mode: audit\n", Mode::Audit),
        ("mode: [broken", Mode::Audit),
        ("mode: off\n", Mode::Off),
        ("moed: enforce\n", Mode::Off),
        ("mode: enforce\n", Mode::Enforce),
    ] {
        // Held, so its allocation cannot be reused by a replacement and compare equal.
        let in_force = handle.current();
        std::fs::write(&path, format!("{text}{allow_host}")).expect("write");
        if text.contains("mode: ") && !text.contains('[') {
            // The watcher polls every 2 s: wait for the new policy to be in force.
            let deadline = std::time::Instant::now() + Duration::from_secs(6);
            while handle.current().policy.mode != expected {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{text:?} was not loaded"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(4500)).await;
            assert!(
                Arc::ptr_eq(&handle.current(), &in_force),
                "{text:?} must not replace the policy in force"
            );
        }
        assert_eq!(handle.current().policy.mode, expected, "after {text:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let statuses = load.await.expect("load");
    watcher.abort();
    assert!(
        statuses.len() > 100,
        "the load ran throughout: {}",
        statuses.len()
    );
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}
