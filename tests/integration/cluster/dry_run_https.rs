//! `POST /v1/dry-run` over real HTTPS: authentication by TokenReview, authorisation by
//! SubjectAccessReview (both through the in-process fake API), the report, extra kinds, and
//! `pinhook check --server` against it.

use std::sync::Arc;

use crate::common::cli::pinhook_command;
use crate::common::fake_kube::FakeKube;
use crate::common::images::{self, PushedIndex};
use crate::common::pinhook::{Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use pinhook::cluster::{Authorizer, KubeAuthorizer};
use pinhook::policy::Policy;
use serde_json::Value;

struct World {
    registry: TestRegistry,
    kube: FakeKube,
    pinhook: TestPinhook,
    app: PushedIndex,
}

async fn world() -> World {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let app = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let kube = FakeKube::start().await;
    kube.add_token("ci-token", "system:serviceaccount:ci:deployer");
    kube.add_token("nosy-token", "system:serviceaccount:ci:nosy");
    kube.grant_create(
        "system:serviceaccount:ci:deployer",
        "apps",
        "deployments",
        "shop",
    );
    kube.grant_create(
        "system:serviceaccount:ci:deployer",
        "argoproj.io",
        "rollouts",
        "shop",
    );
    // The ConfigMap is judged by the mirror guard, so it needs the right to create it too.
    kube.grant_create(
        "system:serviceaccount:ci:deployer",
        "",
        "configmaps",
        "shop",
    );
    let policy: Policy = serde_saphyr::from_str(
        "kinds:\n  - group: argoproj.io\n    kind: Rollout\n    podSpec: /spec/template/spec\n",
    )
    .expect("policy");
    let authorizer: Arc<dyn Authorizer> = Arc::new(KubeAuthorizer::new(kube.client()));
    let pinhook = TestPinhook::start_with(
        &registry,
        Options {
            policy,
            authorizer: Some(authorizer),
            ..Options::default()
        },
    )
    .await;
    World {
        registry,
        kube,
        pinhook,
        app,
    }
}

fn manifests(host: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: {host}/team/app:1.0\n---\napiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata:\n  name: canary\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {host}/team/app:1.0\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n"
    )
}

async fn dry_run(world: &World, token: Option<&str>, body: String) -> (u16, Value) {
    let mut request = world
        .pinhook
        .client
        .post(world.pinhook.url("/v1/dry-run?namespace=shop"))
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("dry-run answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

#[tokio::test]
async fn an_authorised_caller_gets_the_report_and_nothing_is_recorded() {
    let world = world().await;
    let (status, report) =
        dry_run(&world, Some("ci-token"), manifests(&world.registry.host())).await;
    assert_eq!(status, 200, "{report}");

    let objects = report["objects"].as_array().expect("objects");
    assert_eq!(objects.len(), 3);
    let web = &objects[0];
    assert_eq!(
        (
            web["kind"].as_str(),
            web["namespace"].as_str(),
            web["name"].as_str()
        ),
        (Some("Deployment"), Some("shop"), Some("web"))
    );
    let image = &web["images"][0];
    assert_eq!(image["path"], "/spec/template/spec/containers/0/image");
    assert_eq!(image["action"], "pinned");
    assert_eq!(image["digest"], world.app.index_digest.as_str());
    assert_eq!(image["cached"], false);
    let pinned = world.app.pinned_with_tag();
    assert_eq!(image["result"], pinned.as_str());
    assert_eq!(
        web["object"]["spec"]["template"]["spec"]["containers"][0]["image"],
        pinned.as_str()
    );
    assert_eq!(
        objects[1]["kind"], "Rollout",
        "extra kinds from the policy are pinned too"
    );
    assert_eq!(objects[1]["images"][0]["action"], "pinned");
    assert_eq!(
        objects[2]["podBearing"], false,
        "a ConfigMap passes through"
    );
    assert_eq!(report["summary"]["pinned"], 2);
    // The SubjectAccessReviews ask for the caller as the TokenReview described it, extra too.
    let reviews = world.kube.access_reviews();
    assert_eq!(
        reviews.len(),
        3,
        "one per object pinhook evaluates (Deployment, Rollout, ConfigMap): {reviews:?}"
    );
    for review in &reviews {
        assert_eq!(review["user"], "system:serviceaccount:ci:deployer");
        assert_eq!(review["uid"], "uid-system:serviceaccount:ci:deployer");
        assert_eq!(
            review["groups"],
            serde_json::json!(["system:authenticated"])
        );
        assert_eq!(
            review["extra"]["authentication.kubernetes.io/pod-name"],
            serde_json::json!(["runner-0"])
        );
    }
    // One registry request for the shared image, and no cache entry left behind.
    assert_eq!(world.registry.manifest_heads("team/app", "1.0").await, 1);
    let (_, again) = dry_run(&world, Some("ci-token"), manifests(&world.registry.host())).await;
    assert_eq!(again["objects"][0]["images"][0]["cached"], false);
    assert_eq!(world.registry.manifest_heads("team/app", "1.0").await, 2);
}

#[tokio::test]
async fn no_token_invalid_token_and_forbidden_caller() {
    let world = world().await;
    let body = manifests(&world.registry.host());
    let (status, answer) = dry_run(&world, None, body.clone()).await;
    assert_eq!(status, 401, "{answer}");
    let (status, answer) = dry_run(&world, Some("forged"), body.clone()).await;
    assert_eq!(status, 401, "{answer}");
    let message = answer["error"].as_str().expect("an error message");
    assert!(message.contains("not valid"), "{message}");
    let (status, answer) = dry_run(&world, Some("nosy-token"), body).await;
    assert_eq!(status, 403, "{answer}");
    let message = answer["error"].as_str().expect("an error message");
    assert!(
        message.contains("system:serviceaccount:ci:nosy may not"),
        "{message}"
    );
    assert!(
        message.contains("create deployments.apps in namespace shop"),
        "{message}"
    );
    assert!(
        message.contains("create rollouts.argoproj.io in namespace shop"),
        "{message}"
    );
    assert!(
        message.contains("create configmaps in namespace shop"),
        "{message}"
    );
    // A cluster-scoped mirror object is checked without a namespace.
    let itms = "apiVersion: config.openshift.io/v1\nkind: ImageTagMirrorSet\nmetadata:\n  name: tags\nspec:\n  imageTagMirrors:\n  - source: registry.example/team\n    mirrors: [mirror.example/team]\n";
    let (status, answer) = dry_run(&world, Some("ci-token"), itms.to_string()).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(
        answer["error"],
        "system:serviceaccount:ci:deployer may not: create imagetagmirrorsets.config.openshift.io (cluster-scoped)"
    );
    world.kube.grant_create(
        "system:serviceaccount:ci:deployer",
        "config.openshift.io",
        "imagetagmirrorsets",
        "",
    );
    let (status, answer) = dry_run(&world, Some("ci-token"), itms.to_string()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["objects"][0]["images"][0]["action"], "denied",
        "{answer}"
    );
    assert_eq!(
        world.registry.count_requests("HEAD", "/manifests/").await,
        0,
        "refused before any resolution"
    );
    assert_eq!(
        world.kube.hits(""),
        0,
        "TokenReview and SubjectAccessReview are POSTs, not GETs"
    );
}

/// Issue 44: the dry run checks the token before reading a byte of the body (a caller with no
/// token announcing 2 MiB it never sends is answered 401 at once), takes at most 2 MiB, and
/// refuses a body of more documents, or needing more permission checks, than one request may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_is_bounded_before_it_is_paid_for() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let world = world().await;
    let mut conn = world.pinhook.raw_tls(&[]).await.expect("TLS connection");
    let started = std::time::Instant::now();
    conn.write_all(
        b"POST /v1/dry-run HTTP/1.1\r\nhost: pinhook\r\ncontent-length: 2097152\r\n\r\nkind: ",
    )
    .await
    .expect("request head");
    let mut buf = [0u8; 128];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), conn.read(&mut buf))
        .await
        .expect("answered before the body")
        .expect("read");
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    let huge = "kind: ConfigMap\n---\n".repeat(150_000);
    let (status, answer) = dry_run(&world, Some("ci-token"), huge).await;
    assert_eq!(status, 413, "{answer}");
    let many = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n".repeat(1_001);
    let (status, answer) = dry_run(&world, Some("ci-token"), many).await;
    assert_eq!(status, 413, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 1000 are read"),
        "{answer}"
    );
    let spread: String = (0..40)
        .map(|i| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns{i}}}\nspec: {{containers: [{{name: c, image: x:1}}]}}\n---\n"))
        .collect();
    let (status, answer) = dry_run(&world, Some("ci-token"), spread).await;
    assert_eq!(status, 413, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("need 40 permission checks"),
        "{answer}"
    );
    // SubjectAccessReviews go through a rate limit (a burst of 64, 40 a second here): dry runs
    // of 32 checks each, back to back, get 429 once it is spent, with no review sent.
    let checks: String = (0..32)
        .map(|i| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns{i}}}\nspec: {{containers: [{{name: c, image: x:1}}]}}\n---\n"))
        .collect();
    let before = world.kube.access_reviews().len();
    let started = std::time::Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let request = world
            .pinhook
            .client
            .post(world.pinhook.url("/v1/dry-run?namespace=shop"))
            .bearer_auth("ci-token")
            .body(checks.clone());
        statuses.push(request.send().await.expect("answers").status().as_u16());
    }
    let sent = world.kube.access_reviews().len() - before;
    let refill = (started.elapsed().as_secs_f64() * 40.0).ceil() as usize;
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        sent <= 64 + refill,
        "{sent} reviews in {:?}",
        started.elapsed()
    );
}

/// Issue 44: a dry run's documents take their share of the dry runs' 24 MiB memory pool
/// before they are parsed and hold it until the report is written. Two bodies of 1.1 MiB
/// (each may hold 22 MB parsed) are not held at once: the second waits until the first,
/// resolving an image on a registry that never answers (5 s), is done; a small dry run beside
/// them (1.6 MB) is answered meanwhile. Before, both large ones were parsed and held at once,
/// as many as were sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_wait_for_their_share_of_memory() {
    use crate::common::silent::SilentServer;
    use std::time::{Duration, Instant};
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let app = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let silent = SilentServer::start().await;
    let kube = FakeKube::start().await;
    kube.add_token("ci-token", "system:serviceaccount:ci:deployer");
    kube.grant_create(
        "system:serviceaccount:ci:deployer",
        "apps",
        "deployments",
        "shop",
    );
    let mut policy = Policy::default();
    policy.registries.allow_private.push(silent.host());
    let authorizer: Arc<dyn Authorizer> = Arc::new(KubeAuthorizer::new(kube.client()));
    let pinhook = TestPinhook::start_with(
        &registry,
        Options {
            policy,
            authorizer: Some(authorizer),
            ..Options::default()
        },
    )
    .await;
    let deployment = |image: &str| {
        format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: shop\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: {image}\n")
    };
    // A comment holds no value: the body is large, what it parses to is small.
    let padding = format!("# {}\n", "x".repeat(1_100_000));
    let large = |image: &str| format!("{padding}{}", deployment(image));
    let post = |body: String| {
        let request = pinhook
            .client
            .post(pinhook.url("/v1/dry-run?namespace=shop"))
            .bearer_auth("ci-token")
            .body(body);
        let started = Instant::now();
        async move {
            let response = request.send().await.expect("answers");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            (status, text, started.elapsed())
        }
    };
    let hanging = tokio::spawn(post(large(&format!("{}/team/app:1", silent.host()))));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = tokio::spawn(post(large(&app.reference)));
    let small = tokio::spawn(post(deployment(&app.reference)));
    let (small_status, small_text, small_took) = small.await.expect("small");
    let (second_status, second_text, second_took) = second.await.expect("second");
    let (hanging_status, hanging_text, hanging_took) = hanging.await.expect("hanging");
    assert_eq!(hanging_status, 200, "{hanging_text}");
    assert!(hanging_took >= Duration::from_secs(4), "{hanging_took:?}");
    assert_eq!(small_status, 200, "{small_text}");
    assert!(small_took < Duration::from_secs(3), "small: {small_took:?}");
    assert_eq!(second_status, 200, "{second_text}");
    assert!(
        second_took + Duration::from_millis(300) >= hanging_took.saturating_sub(Duration::from_millis(200)),
        "the second large dry run was answered after {second_took:?}, the first after {hanging_took:?}: both held at once"
    );
    assert!(second_text.contains(&app.index_digest), "{second_text}");
}

// Multi-threaded: the test blocks on the child process while pinhook serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinhook_check_server_mode_calls_the_endpoint() {
    let world = world().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "ci-token\n").expect("token");
    let file = dir.path().join("app.yaml");
    std::fs::write(
        &file,
        format!("{}---\nkind: [broken\n", manifests(&world.registry.host())),
    )
    .expect("manifests");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, world.pinhook.ca_pem()).expect("ca");

    let output = pinhook_command("check")
        .args(["-o", "json", "-n", "shop", "--server", &world.pinhook.base])
        .arg("--token-file")
        .arg(&token)
        .arg("--server-ca")
        .arg(&ca)
        .arg(&file)
        .output()
        .expect("pinhook check runs");

    let report: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(
        output.status.code(),
        Some(2),
        "the broken document is an input error: {report}"
    );
    assert_eq!(report["summary"]["pinned"], 2, "{report}");
    assert_eq!(report["errors"][0]["index"], "3");
    // Objects are named by the user's file and document index, as in local mode.
    let file_name = file.to_string_lossy();
    for (i, object) in report["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .enumerate()
    {
        assert_eq!(object["index"], i.to_string(), "{report}");
        assert_eq!(object["source"], file_name.as_ref(), "{report}");
    }
}

/// A CI job's calls, and a flood of one garbage token, cost one TokenReview each per
/// `TOKEN_REVIEW_TTL`, not one per call (they were never cached).
#[tokio::test]
async fn token_reviews_are_reused_for_a_few_seconds() {
    let world = world().await;
    for _ in 0..3 {
        let (status, report) =
            dry_run(&world, Some("ci-token"), manifests(&world.registry.host())).await;
        assert_eq!(status, 200, "{report}");
    }
    for _ in 0..5 {
        let (status, _) = dry_run(&world, Some("garbage"), "{}".to_string()).await;
        assert_eq!(status, 401);
    }
    assert_eq!(world.kube.token_reviews(), 2, "one per token");
}
