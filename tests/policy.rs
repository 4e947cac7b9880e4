//! Every policy knob against a real registry over real HTTPS, with real captures of each kind:
//! modes (and the namespace label), resolve, target, exemptions, registry rules and the guard
//! against internal addresses, onResolutionFailure, dry runs, and reload under load.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::fake_kube::FakeKube;
use common::images::{self, PushedIndex};
use common::pinhook::{apply_response, response_patch, review_fixture, Options, TestPinhook};
use common::registry::{RegistryAuth, TestRegistry};
use pinhook::cluster::KubeNamespaces;
use pinhook::policy::{Policy, PolicyHandle};
use rstest::rstest;
use serde_json::{json, Value};

struct World {
    registry: TestRegistry,
    pinhook: TestPinhook,
    app: PushedIndex,
}

async fn world(policy: &str) -> World {
    world_with(policy, |o| o).await
}

async fn world_with(policy: &str, adjust: impl FnOnce(Options) -> Options) -> World {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let app = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    images::push_multi_arch(&registry, "team/init", "1.0", "init").await;
    for repo in ["cron", "db", "agent", "job"] {
        images::push_multi_arch(&registry, &format!("team/{repo}"), "1.0", repo).await;
    }
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
    }
}

async fn post(world: &World, path: &str, review: &Value) -> Value {
    let (status, body) = world
        .pinhook
        .post(path, serde_json::to_vec(review).expect("json"))
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

fn pod_with_image(world: &World, image: &str) -> Value {
    let mut review = review_fixture("v1.26/pod-create-basic-mutate.json", &world.registry);
    review["request"]["object"]["spec"]["containers"][0]["image"] = json!(image);
    review
}

fn warnings(body: &Value) -> Vec<String> {
    body["response"]["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect()
}

async fn metrics(world: &World) -> String {
    let url = world.pinhook.url("/metrics");
    world
        .pinhook
        .client
        .get(url)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
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
        let original = review["request"]["object"]
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let body = post(&world, "/mutate", &review).await;
        let image = apply_response(&review, &body)
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let is_pod = fixture.contains("/pod-create");
        let validated = || async {
            let validate =
                review_fixture(&fixture.replace("-mutate", "-validate"), &world.registry);
            post(&world, "/validate", &validate).await["response"]["allowed"].clone()
        };
        let (repository, _) = original.rsplit_once(':').unwrap_or((&original, ""));
        match (expect, is_pod) {
            (Expect::TagAndDigest, _) | (Expect::OnlyPods, true) => {
                assert!(
                    image.starts_with(&format!("{original}@sha256:")),
                    "{policy} {fixture}: {image}"
                );
            }
            (Expect::DigestOnly, _) => {
                assert!(
                    image.starts_with(&format!("{repository}@sha256:")),
                    "{policy} {fixture}: {image}"
                );
            }
            (Expect::LeftAndAdmitted, _) | (Expect::OnlyPods, false) => {
                assert_eq!(
                    body["response"]["allowed"], true,
                    "{policy} {fixture}: {body}"
                );
                assert_eq!(image, original, "{policy} {fixture}: {body}");
                assert_eq!(validated().await, true, "{policy} {fixture}: /validate");
            }
            (Expect::LeftAndDeniedAtValidation, _) => {
                assert_eq!(
                    body["response"]["allowed"], true,
                    "{policy} {fixture}: {body}"
                );
                assert_eq!(image, original, "{policy} {fixture}: {body}");
                assert_eq!(validated().await, false, "{policy} {fixture}: /validate");
            }
            (Expect::Denied, _) => {
                assert_eq!(
                    body["response"]["allowed"], false,
                    "{policy} {fixture}: {body}"
                );
                let message = body["response"]["status"]["message"].to_string();
                assert!(
                    message.contains("is not on the policy's allow list"),
                    "{policy} {fixture}: {message}"
                );
            }
        }
    }
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
        let body = post(&world, "/mutate", &review).await;
        assert_eq!(body["response"]["allowed"], true, "{fixture}: {body}");
        let image = apply_response(&review, &body)
            .pointer(pointer)
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            image.as_str().is_some_and(|i| i.contains("@sha256:")),
            patched,
            "{fixture}: {body}"
        );
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
        let body = post(&world, "/mutate", &review).await;
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
            assert!(annotations["violation-1"]
                .as_str()
                .is_some_and(|v| v.starts_with("resolution_failed:")));
        }
    }
    let reason = if allowed { "audit" } else { "enforce" };
    let text = metrics(&world).await;
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
    let mut review = pod_with_image(&world, &missing);

    review["request"]["namespace"] = json!("loose");
    assert_eq!(
        post(&world, "/mutate", &review).await["response"]["allowed"],
        true
    );
    review["request"]["namespace"] = json!("strict");
    assert_eq!(
        post(&world, "/mutate", &review).await["response"]["allowed"],
        false
    );
    review["request"]["namespace"] = json!("typo");
    let body = post(&world, "/mutate", &review).await;
    assert_eq!(
        body["response"]["allowed"], false,
        "an invalid label falls back to the policy"
    );
    assert!(
        warnings(&body).iter().any(|w| w.contains("audited")),
        "{body}"
    );
    assert_eq!(
        kube.hits("/api/v1/namespaces/loose"),
        1,
        "namespace labels are cached"
    );
}

#[tokio::test]
async fn resolve_never_makes_no_registry_call_and_validation_denies_unpinned() {
    let world = world("resolve: Never").await;
    let review = review_fixture("v1.26/pod-create-basic-mutate.json", &world.registry);
    let body = post(&world, "/mutate", &review).await;
    assert_eq!(body["response"]["allowed"], true);
    assert!(response_patch(&body).is_none());
    assert_eq!(
        world.registry.count_requests("HEAD", "/manifests/").await,
        0
    );

    let review = review_fixture("v1.26/pod-create-basic-validate.json", &world.registry);
    let body = post(&world, "/validate", &review).await;
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
    let image = format!(
        "{}/team/app:1.0@{}",
        world.registry.host(),
        world.app.index_digest
    );
    let review = pod_with_image(&world, &image);

    let body = post(&world, "/mutate", &review).await;

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
    let current = format!(
        "{}/team/app:1.0@{}",
        world.registry.host(),
        moved.index_digest
    );
    let body = post(&world, "/mutate", &pod_with_image(&world, &current)).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(response_patch(&body).is_none());
}

#[tokio::test]
async fn target_pods_leaves_templates_alone_and_gives_one_owner_revision_one_digest() {
    let world = world("target: pods").await;
    let deployment = review_fixture("v1.26/deployment-create-mutate.json", &world.registry);
    let body = post(&world, "/mutate", &deployment).await;
    assert_eq!(body["response"]["allowed"], true);
    assert!(
        response_patch(&body).is_none(),
        "templates stay as written: {body}"
    );
    let body = post(
        &world,
        "/validate",
        &review_fixture("v1.26/deployment-create-validate.json", &world.registry),
    )
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
    let body = post(&world, "/mutate", &first).await;
    let pinned = apply_response(&first, &body)["spec"]["containers"][0]["image"].clone();
    assert!(
        pinned
            .as_str()
            .is_some_and(|i| i.ends_with(&world.app.index_digest)),
        "{body}"
    );

    let moved = images::push_multi_arch(&world.registry, "team/app", "1.0", "moved").await;
    world.pinhook.resolver.expire_all();
    let second = pod("rs-uid-1", "abc");
    let body = post(&world, "/mutate", &second).await;
    let image = apply_response(&second, &body)["spec"]["containers"][0]["image"].clone();
    assert_eq!(image, pinned, "same owner revision, same digest");

    let other = pod("rs-uid-2", "def");
    let body = post(&world, "/mutate", &other).await;
    let image = apply_response(&other, &body)["spec"]["containers"][0]["image"].clone();
    assert!(
        image
            .as_str()
            .is_some_and(|i| i.ends_with(&moved.index_digest)),
        "{body}"
    );

    // ownerReferences are written by whoever creates the pod: naming the same owner from
    // another namespace must not borrow its digest (it could have been resolved with that
    // namespace's pull secret).
    world.pinhook.resolver.expire_all();
    let mut intruder = pod("rs-uid-1", "abc");
    intruder["request"]["namespace"] = json!("elsewhere");
    intruder["request"]["object"]["metadata"]["namespace"] = json!("elsewhere");
    let body = post(&world, "/mutate", &intruder).await;
    let image = apply_response(&intruder, &body)["spec"]["containers"][0]["image"].clone();
    assert!(
        image
            .as_str()
            .is_some_and(|i| i.ends_with(&moved.index_digest)),
        "resolved afresh, not from rs-uid-1's memo: {body}"
    );
}

#[tokio::test]
async fn exempt_images_and_namespaces_are_never_resolved_nor_denied() {
    let world = world("exempt:\n  images: ['*/team/app:*']\n  namespaces: ['kube-*']").await;
    let missing = format!("{}/team/app:missing", world.registry.host());
    let review = pod_with_image(&world, &missing);
    let body = post(&world, "/mutate", &review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(response_patch(&body).is_none());
    let body = post(&world, "/validate", &review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");

    let mut review = review_fixture("v1.26/pod-create-basic-mutate.json", &world.registry);
    review["request"]["namespace"] = json!("kube-system");
    review["request"]["object"]["spec"]["containers"][0]["image"] =
        json!(format!("{}/team/init:1.0", world.registry.host()));
    let body = post(&world, "/mutate", &review).await;
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
        let body = post(&world, "/mutate", &pod_with_image(&world, &image)).await;
        assert_eq!(body["response"]["allowed"], false, "{image}: {body}");
        let message = body["response"]["status"]["message"].as_str().unwrap_or("");
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
    let body = post(&world, "/mutate", &pod_with_image(&world, &image)).await;
    assert_eq!(body["response"]["allowed"], false);
    assert!(
        body["response"]["status"]["message"]
            .to_string()
            .contains("deny list"),
        "{body}"
    );

    let world = world_with_allow().await;
    let body = post(
        &world,
        "/mutate",
        &pod_with_image(&world, "quay.io/org/app:1"),
    )
    .await;
    assert!(
        body["response"]["status"]["message"]
            .to_string()
            .contains("not on the policy's allow list"),
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
    let review = pod_with_image(&world, &image);
    let body = post(&world, "/mutate", &review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(
        warnings(&body)
            .iter()
            .any(|w| w.starts_with("pinhook: admitted")),
        "{body}"
    );
    let body = post(&world, "/validate", &review).await;
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
    let body = post(&world, "/mutate", &dry).await;
    assert!(
        apply_response(&dry, &body)["spec"]["containers"][0]["image"]
            .to_string()
            .contains(&world.app.index_digest)
    );
    let real = review_fixture("v1.26/pod-create-basic-mutate.json", &world.registry);
    post(&world, "/mutate", &real).await;
    // The dry run left no cache entry, so the real admission asked the registry again.
    assert_eq!(
        world
            .registry
            .count_requests("HEAD", "/v2/team/app/manifests/1.0")
            .await,
        2
    );
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
    let watcher = tokio::spawn(pinhook::server::watch_policy(
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
