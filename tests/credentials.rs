//! Pull credentials the way kubelet uses them, against a real htpasswd registry, with Secrets
//! and ServiceAccounts served by an in-process fake of the Kubernetes API. The cache must never
//! answer a namespace with an entry made with another namespace's secret.

mod common;

use std::sync::Arc;

use common::fake_kube::FakeKube;
use common::images::{self, PushedIndex};
use common::pinhook::{apply_response, review_fixture, Options, TestPinhook};
use common::registry::{RegistryAuth, TestRegistry};
use pinhook::registry::keyring::Keyring;
use pinhook::registry::pull_secrets::KubeSecrets;
use serde_json::{json, Value};

const USER: &str = "puller";
const PASS: &str = "pull-secret-pass";

struct World {
    registry: TestRegistry,
    kube: FakeKube,
    pinhook: TestPinhook,
    pushed: PushedIndex,
}

async fn world() -> World {
    let registry = TestRegistry::start(RegistryAuth::htpasswd(USER, PASS)).await;
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "private").await;
    let kube = FakeKube::start().await;
    let options = Options {
        secrets: Arc::new(KubeSecrets::new(kube.client(), Keyring::new())),
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(&registry, options).await;
    World {
        registry,
        kube,
        pinhook,
        pushed,
    }
}

/// The captured pod with `imagePullSecrets: [regcred]`, in `namespace`, pointing at the registry.
fn pod_review(world: &World, fixture: &str, namespace: &str) -> Value {
    let mut review = review_fixture(fixture, &world.registry);
    let image = format!("{}/team/app:1.0", world.registry.host());
    review["request"]["namespace"] = json!(namespace);
    review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
    review["request"]["object"]["spec"]["containers"][0]["image"] = json!(image);
    review
}

async fn mutate(world: &World, review: &Value) -> Value {
    let (status, body) = world
        .pinhook
        .post(
            "/mutate?timeout=10s",
            serde_json::to_vec(review).expect("json"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

fn pinned_image(world: &World) -> String {
    format!(
        "{}/team/app:1.0@{}",
        world.registry.host(),
        world.pushed.index_digest
    )
}

fn warnings(body: &Value) -> String {
    body["response"]["warnings"].to_string()
}

#[tokio::test]
async fn a_namespace_without_the_secret_is_never_answered_from_anothers_cache_entry() {
    let world = world().await;
    let host = world.registry.host();
    world
        .kube
        .add_dockerconfigjson("team-a", "regcred", &host, USER, PASS);

    let review_a = pod_review(&world, "v1.26/pod-create-pullsecrets-mutate.json", "team-a");
    let body = mutate(&world, &review_a).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let object = apply_response(&review_a, &body);
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        pinned_image(&world)
    );

    // Same image, same secret name, but team-b has no such secret: A's entry is cached and
    // must not answer.
    let review_b = pod_review(&world, "v1.26/pod-create-pullsecrets-mutate.json", "team-b");
    let body = mutate(&world, &review_b).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = body["response"]["status"]["message"]
        .as_str()
        .expect("message");
    assert!(message.contains("unauthorized"), "{message}");
    assert!(
        warnings(&body).contains("imagePullSecret team-b/regcred not found"),
        "{body}"
    );

    // A is still answered, from the cache.
    let heads = world
        .registry
        .count_requests("HEAD", "/v2/team/app/manifests/1.0")
        .await;
    let body = mutate(&world, &review_a).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(
        world
            .registry
            .count_requests("HEAD", "/v2/team/app/manifests/1.0")
            .await,
        heads,
        "second admission in team-a must be a cache hit"
    );
}

#[tokio::test]
async fn a_wrong_password_is_refused_and_never_cached_as_success() {
    let world = world().await;
    let host = world.registry.host();
    world
        .kube
        .add_dockerconfigjson("good", "regcred", &host, USER, PASS);
    world
        .kube
        .add_dockerconfigjson("bad", "regcred", &host, USER, "wrong");

    let bad = pod_review(&world, "v1.26/pod-create-pullsecrets-mutate.json", "bad");
    let body = mutate(&world, &bad).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");

    let good = pod_review(&world, "v1.26/pod-create-pullsecrets-mutate.json", "good");
    assert_eq!(mutate(&world, &good).await["response"]["allowed"], true);

    let body = mutate(&world, &bad).await;
    assert_eq!(
        body["response"]["allowed"], false,
        "the good entry answered the bad secret: {body}"
    );
}

#[tokio::test]
async fn dockercfg_and_dockerconfigjson_secrets_both_work() {
    let world = world().await;
    let host = world.registry.host();
    world
        .kube
        .add_dockercfg("legacy", "regcred", &format!("https://{host}"), USER, PASS);

    let review = pod_review(&world, "v1.26/pod-create-pullsecrets-mutate.json", "legacy");
    let body = mutate(&world, &review).await;

    assert_eq!(body["response"]["allowed"], true, "{body}");
    let object = apply_response(&review, &body);
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        pinned_image(&world)
    );
}

#[tokio::test]
async fn a_workload_template_without_secrets_uses_its_service_accounts() {
    let world = world().await;
    let host = world.registry.host();
    world
        .kube
        .add_dockerconfigjson("apps", "sa-cred", &host, USER, PASS);
    world
        .kube
        .add_service_account("apps", "builder", &["sa-cred"]);
    let mut review = review_fixture("v1.26/deployment-create-mutate.json", &world.registry);
    review["request"]["namespace"] = json!("apps");
    let spec = &mut review["request"]["object"]["spec"]["template"]["spec"];
    spec["serviceAccountName"] = json!("builder");
    spec["initContainers"] = json!([]);
    spec["containers"][0]["image"] = json!(format!("{host}/team/app:1.0"));

    let body = mutate(&world, &review).await;

    assert_eq!(body["response"]["allowed"], true, "{body}");
    let object = apply_response(&review, &body);
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["image"],
        pinned_image(&world)
    );
    assert_eq!(world.kube.hits("/serviceaccounts/builder"), 1);

    // A template naming a ServiceAccount that does not exist: refused (no credentials for the
    // private image), and the user is told why.
    spec_of(&mut review)["serviceAccountName"] = json!("ghost");
    let body = mutate(&world, &review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(
        warnings(&body).contains(
            "pinhook: serviceaccount apps/ghost not found; resolved without its imagePullSecrets"
        ),
        "{body}"
    );
}

fn spec_of(review: &mut Value) -> &mut Value {
    &mut review["request"]["object"]["spec"]["template"]["spec"]
}

#[tokio::test]
async fn secrets_are_read_once_and_cached_briefly() {
    let world = world().await;
    let host = world.registry.host();
    world
        .kube
        .add_dockerconfigjson("team-a", "regcred", &host, USER, PASS);
    let review = pod_review(&world, "v1.26/pod-create-pullsecrets-mutate.json", "team-a");
    world.pinhook.resolver.expire_all();

    for _ in 0..3 {
        world.pinhook.resolver.expire_all();
        assert_eq!(mutate(&world, &review).await["response"]["allowed"], true);
    }

    assert_eq!(world.kube.hits("/secrets/regcred"), 1);
}
