//! Pull credentials the way kubelet uses them, against a real htpasswd registry, with Secrets
//! and ServiceAccounts served by an in-process fake of the Kubernetes API. The cache must never
//! answer a namespace with an entry made with another namespace's secret.

use std::sync::Arc;

use crate::common::fake_kube::FakeKube;
use crate::common::fake_kube::PullSecretFormat::{DockerCfg, DockerConfigJson};
use crate::common::images::{self, PushedIndex};
use crate::common::pinhook::{apply_response, review_fixture, Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{fixture_with_image, in_namespace, message, template_spec, warned};
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
fn pull_secret_pod(world: &World, namespace: &str) -> Value {
    let mut review = fixture_with_image(
        "v1.26/pod-create-pullsecrets-mutate.json",
        &world.registry,
        &world.pushed.reference,
    );
    in_namespace(&mut review, namespace);
    review
}

/// A `dockerconfigjson` pull Secret `namespace/name` for the registry with `password`.
fn add_secret(world: &World, namespace: &str, name: &str, password: &str) {
    let host = world.registry.host();
    let login = (USER, password);
    world
        .kube
        .add_pull_secret(DockerConfigJson, namespace, name, &host, login);
}

#[tokio::test]
async fn a_namespace_without_the_secret_is_never_answered_from_anothers_cache_entry() {
    let world = world().await;
    add_secret(&world, "team-a", "regcred", PASS);

    let review_a = pull_secret_pod(&world, "team-a");
    let body = world.pinhook.mutate(&review_a).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let object = apply_response(&review_a, &body);
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        world.pushed.pinned_with_tag()
    );

    // Same image, same secret name, but team-b has no such secret: A's entry is cached and
    // must not answer.
    let review_b = pull_secret_pod(&world, "team-b");
    let body = world.pinhook.mutate(&review_b).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = message(&body);
    assert!(message.contains("unauthorized"), "{message}");
    assert!(
        warned(&body, "imagePullSecret team-b/regcred not found"),
        "{body}"
    );

    // A is still answered, from the cache.
    let heads = world.registry.manifest_heads("team/app", "1.0").await;
    let body = world.pinhook.mutate(&review_a).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(
        world.registry.manifest_heads("team/app", "1.0").await,
        heads,
        "second admission in team-a must be a cache hit"
    );
}

#[tokio::test]
async fn a_wrong_password_is_refused_and_never_cached_as_success() {
    let world = world().await;
    add_secret(&world, "good", "regcred", PASS);
    add_secret(&world, "bad", "regcred", "wrong");

    let bad = pull_secret_pod(&world, "bad");
    let body = world.pinhook.mutate(&bad).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");

    let good = pull_secret_pod(&world, "good");
    assert_eq!(
        world.pinhook.mutate(&good).await["response"]["allowed"],
        true
    );

    let body = world.pinhook.mutate(&bad).await;
    assert_eq!(
        body["response"]["allowed"], false,
        "the good entry answered the bad secret: {body}"
    );
}

#[tokio::test]
async fn dockercfg_and_dockerconfigjson_secrets_both_work() {
    let world = world().await;
    let registry = format!("https://{}", world.registry.host());
    world
        .kube
        .add_pull_secret(DockerCfg, "legacy", "regcred", &registry, (USER, PASS));

    let review = pull_secret_pod(&world, "legacy");
    let body = world.pinhook.mutate(&review).await;

    assert_eq!(body["response"]["allowed"], true, "{body}");
    let object = apply_response(&review, &body);
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        world.pushed.pinned_with_tag()
    );
}

#[tokio::test]
async fn a_workload_template_without_secrets_uses_its_service_accounts() {
    let world = world().await;
    add_secret(&world, "apps", "sa-cred", PASS);
    world
        .kube
        .add_service_account("apps", "builder", &["sa-cred"]);
    let mut review = review_fixture("v1.26/deployment-create-mutate.json", &world.registry);
    review["request"]["namespace"] = json!("apps");
    let spec = template_spec(&mut review);
    spec["serviceAccountName"] = json!("builder");
    spec["initContainers"] = json!([]);
    spec["containers"][0]["image"] = json!(world.pushed.reference);

    let body = world.pinhook.mutate(&review).await;

    assert_eq!(body["response"]["allowed"], true, "{body}");
    let object = apply_response(&review, &body);
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["image"],
        world.pushed.pinned_with_tag()
    );
    assert_eq!(world.kube.hits("/serviceaccounts/builder"), 1);

    // A template naming a ServiceAccount that does not exist: refused (no credentials for the
    // private image), and the user is told why.
    template_spec(&mut review)["serviceAccountName"] = json!("ghost");
    let body = world.pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(
        warned(
            &body,
            "pinhook: serviceaccount apps/ghost not found; resolved without its imagePullSecrets"
        ),
        "{body}"
    );
}

#[tokio::test]
async fn secrets_are_read_once_and_cached_briefly() {
    let world = world().await;
    add_secret(&world, "team-a", "regcred", PASS);
    let review = pull_secret_pod(&world, "team-a");
    world.pinhook.resolver.expire_all();

    for _ in 0..3 {
        world.pinhook.resolver.expire_all();
        assert_eq!(
            world.pinhook.mutate(&review).await["response"]["allowed"],
            true
        );
    }

    assert_eq!(world.kube.hits("/secrets/regcred"), 1);
}

/// Kubelet refuses the whole keyring when one docker config secret does not decode
/// (`MakeDockerKeyring`), so the pull fails even though the other secret would work: enforce
/// denies naming the secret, audit admits with a warning. A secret of another type kubelet
/// skips: a warning, and the pod is pinned with the other secret.
#[tokio::test]
async fn a_malformed_pull_secret_fails_the_pod_as_kubelet_will() {
    let world = world().await;
    let kinds = [
        (
            "garbled",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            "{\"auths\": {",
        ),
        (
            "bad-auth",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            "{\"auths\": {\"x.example\": {\"auth\": \"%%%\"}}}",
        ),
        ("opaque", "Opaque", "token", "not a pull secret"),
    ];
    for (namespace, secret_type, key, content) in kinds {
        add_secret(&world, namespace, "regcred", PASS);
        world
            .kube
            .add_raw_secret(namespace, "broken", secret_type, key, content);
    }
    let pod = |namespace: &str| {
        let mut review = pull_secret_pod(&world, namespace);
        review["request"]["object"]["spec"]["imagePullSecrets"] =
            json!([{"name": "regcred"}, {"name": "broken"}]);
        review
    };

    for namespace in ["garbled", "bad-auth"] {
        let body = world.pinhook.mutate(&pod(namespace)).await;
        assert_eq!(body["response"]["allowed"], false, "{body}");
        let message = message(&body);
        assert!(
            message.starts_with(&format!(
                "imagePullSecret {namespace}/broken is malformed, so kubelet refuses every pull of this pod: "
            )),
            "{message}"
        );
    }

    let review = pod("opaque");
    let body = world.pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    // Issue 44: the same words as for a Secret that does not exist, so a forged review learns
    // nothing of the Secret's type.
    assert!(
        warned(
            &body,
            "pinhook: imagePullSecret opaque/broken not found or not a docker config secret; not used"
        ),
        "{body}"
    );
    let said = crate::common::requests::warnings(&body).join(" ");
    assert!(!said.contains("Opaque") && !said.contains("type"), "{said}");
    let object = apply_response(&review, &body);
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        world.pushed.pinned_with_tag()
    );
}

/// Names from the object under review go into API paths only when they are valid object names:
/// a crafted `imagePullSecrets[].name` or template `serviceAccountName` reads nothing.
#[tokio::test]
async fn names_that_are_not_object_names_are_never_put_into_an_api_path() {
    let world = world().await;
    let mut review = pull_secret_pod(&world, "team-a");
    review["request"]["object"]["spec"]["imagePullSecrets"] =
        json!([{"name": "../../secrets/admin"}]);
    let body = world.pinhook.mutate(&review).await;
    assert!(
        warned(
            &body,
            "pinhook: imagePullSecret name \"../../secrets/admin\" is not a valid object name; not read"
        ),
        "{body}"
    );
    let mut deployment = review_fixture("v1.20/deployment-create-mutate.json", &world.registry);
    deployment["request"]["object"]["spec"]["template"]["spec"]["serviceAccountName"] =
        json!("../secrets/admin");
    let body = world.pinhook.mutate(&deployment).await;
    assert!(
        warned(
            &body,
            "pinhook: serviceAccountName \"../secrets/admin\" is not a valid object name; not read"
        ),
        "{body}"
    );
    assert_eq!(
        world.kube.hits("admin"),
        0,
        "no request named the crafted object"
    );
}
