//! Never fight the controllers (issue 9), over HTTPS against a real registry, with reviews the
//! apiserver sent for objects that kube-controller-manager made: a Deployment's ReplicaSet is
//! left exactly as the controller wrote it (no patch, no denial, no registry call), its Pods are
//! pinned, and a change to a workload's template pins the whole template. The e2e tier proves
//! the same with the controllers running (scenarios audit-to-enforce-no-replicaset-loop,
//! deployment-in-enforce-one-replicaset, rollout-restart-undo-no-extra-replicasets,
//! controller-pods-carry-template-digest, target-pods-one-digest-per-revision,
//! audit-with-controllers-nothing-mutated).

use crate::common::images::{self, PushedIndex};
use crate::common::pinhook::{apply_response, response_patch, review_fixture, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use serde_json::{json, Value};

const REPLICASET: &str = "v1.20/replicaset-create-by-deployment-mutate.json";
const REPLICASET_VALIDATE: &str = "v1.20/replicaset-create-by-deployment-validate.json";
const POD: &str = "v1.20/pod-create-by-replicaset-mutate.json";
const DEPLOYMENT_SET_IMAGE: &str = "v1.26/deployment-update-set-image-mutate.json";

/// `team/init:1.0`, `team/app:1.0` and `team/app:2.0`.
async fn registry() -> (TestRegistry, [PushedIndex; 3]) {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let init = images::push_multi_arch(&registry, "team/init", "1.0", "init").await;
    let app = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let app2 = images::push_multi_arch(&registry, "team/app", "2.0", "app2").await;
    (registry, [init, app, app2])
}

fn template_images(object: &Value) -> (Value, Value) {
    let spec = &object["spec"]["template"]["spec"];
    (
        spec["initContainers"][0]["image"].clone(),
        spec["containers"][0]["image"].clone(),
    )
}

#[tokio::test]
async fn a_deployments_replicaset_is_left_as_written_and_its_pods_are_pinned() {
    let (registry, [init, app, _]) = registry().await;
    let pinhook = TestPinhook::start(&registry).await;

    let replicaset = review_fixture(REPLICASET, &registry);
    let body = pinhook.mutate(&replicaset).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(
        response_patch(&body),
        None,
        "a pinned ReplicaSet loops the Deployment controller"
    );
    assert_eq!(body["response"]["warnings"], Value::Null, "{body}");
    let validated = pinhook
        .validate(&review_fixture(REPLICASET_VALIDATE, &registry))
        .await;
    assert_eq!(
        validated["response"]["allowed"], true,
        "a denied ReplicaSet stalls the rollout: {validated}"
    );
    assert_eq!(registry.manifest_heads("team/app", "1.0").await, 0);
    assert_eq!(registry.manifest_heads("team/init", "1.0").await, 0);

    let pod = review_fixture(POD, &registry);
    let body = pinhook.mutate(&pod).await;
    let object = apply_response(&pod, &body);
    assert_eq!(
        object["spec"]["initContainers"][0]["image"],
        init.pinned_with_tag()
    );
    assert_eq!(
        object["spec"]["containers"][0]["image"],
        app.pinned_with_tag()
    );
}

#[tokio::test]
async fn a_replicaset_without_a_controller_is_pinned_like_any_workload() {
    let (registry, [init, app, _]) = registry().await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut replicaset = review_fixture(REPLICASET, &registry);
    // Still owned, but not by a controller: nobody compares it with a template.
    replicaset["request"]["object"]["metadata"]["ownerReferences"][0]["controller"] = json!(false);

    let body = pinhook.mutate(&replicaset).await;

    let object = apply_response(&replicaset, &body);
    assert_eq!(
        template_images(&object),
        (json!(init.pinned_with_tag()), json!(app.pinned_with_tag()))
    );
}

#[tokio::test]
async fn a_template_change_pins_the_whole_template_and_a_scale_pins_nothing() {
    let (registry, [init, app, app2]) = registry().await;
    let pinhook = TestPinhook::start(&registry).await;

    // kubectl set image app=…:2.0 on a Deployment whose init container was never pinned.
    let set_image = review_fixture(DEPLOYMENT_SET_IMAGE, &registry);
    let body = pinhook.mutate(&set_image).await;
    assert_eq!(
        template_images(&apply_response(&set_image, &body)),
        (json!(init.pinned_with_tag()), json!(app2.pinned_with_tag())),
        "the unchanged init container is pinned too: the rollout happens anyway"
    );

    // kubectl set env: no image changes, the template does.
    let mut set_env = set_image.clone();
    let old_template = set_env["request"]["oldObject"]["spec"]["template"].clone();
    set_env["request"]["object"]["spec"]["template"] = old_template.clone();
    set_env["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "FOO", "value": "bar"}]);
    let body = pinhook.mutate(&set_env).await;
    assert_eq!(
        template_images(&apply_response(&set_env, &body)),
        (json!(init.pinned_with_tag()), json!(app.pinned_with_tag()))
    );

    // kubectl scale: the template is as it was, so nothing is pinned and nothing rolls out.
    let mut scale = set_image.clone();
    scale["request"]["object"]["spec"]["template"] = old_template;
    scale["request"]["object"]["spec"]["replicas"] = json!(5);
    let body = pinhook.mutate(&scale).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(response_patch(&body), None);
}

#[tokio::test]
async fn a_job_made_by_a_cronjob_is_pinned() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let job_image = images::push_multi_arch(&registry, "team/job", "1.0", "job").await;
    let pinhook = TestPinhook::start(&registry).await;
    let mut job = review_fixture("v1.20/job-create-mutate.json", &registry);
    // As the CronJob controller and `kubectl create job --from=cronjob/…` write it.
    job["request"]["object"]["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "batch/v1beta1", "kind": "CronJob", "name": "nightly",
        "uid": "3c2a4f0e-0000-4000-8000-000000000001", "controller": true,
        "blockOwnerDeletion": true
    }]);

    let body = pinhook.mutate(&job).await;

    let object = apply_response(&job, &body);
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["image"],
        job_image.pinned_with_tag()
    );
}

/// The captured review of a ReplicaSet's Pod, its controller rewritten to `api_version`/`kind`.
fn pod_owned_by(fixture: &str, registry: &TestRegistry, api_version: &str, kind: &str) -> Value {
    let mut review = review_fixture(fixture, registry);
    let owner = &mut review["request"]["object"]["metadata"]["ownerReferences"][0];
    owner["apiVersion"] = json!(api_version);
    owner["kind"] = json!(kind);
    review
}

/// Issue 43: "left to its operator" withholds the patch, never the check. A Pod an operator
/// made (CloudNativePG's Cluster here) is not patched by /mutate and nothing is resolved for
/// it, but /validate denies its unpinned images in enforce, naming the operator and the fixes;
/// the same Pod made by a ReplicaSet is pinned.
#[tokio::test]
async fn an_operators_pod_is_not_patched_but_checked() {
    let (registry, [init, app, _]) = registry().await;
    let pinhook = TestPinhook::start(&registry).await;
    let heads_before = registry.manifest_heads("team/app", "1.0").await;
    let review = pod_owned_by(POD, &registry, "postgresql.cnpg.io/v1", "Cluster");
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(response_patch(&body).is_none(), "no patch: {body}");
    assert_eq!(
        registry.manifest_heads("team/app", "1.0").await,
        heads_before,
        "nothing resolved for a Pod left to its operator"
    );
    let review = pod_owned_by(
        "v1.20/pod-create-by-replicaset-validate.json",
        &registry,
        "postgresql.cnpg.io/v1",
        "Cluster",
    );
    let body = pinhook.validate(&review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = body["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    for part in [
        "not pinned to a digest",
        "(postgresql.cnpg.io/v1)",
        "customResources",
        "owners.pinPodsOf",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    let review = pod_owned_by(POD, &registry, "apps/v1", "ReplicaSet");
    let pinned = apply_response(&review, &pinhook.mutate(&review).await);
    assert_eq!(
        pinned["spec"]["containers"][0]["image"],
        json!(app.pinned_with_tag())
    );
    assert_eq!(
        pinned["spec"]["initContainers"][0]["image"],
        json!(init.pinned_with_tag())
    );
}

/// Issue 43: one line of metadata switched enforce off. A bare Pod naming as its controller a
/// ConfigMap its author owns, with a tag that cannot be resolved, was allowed by /mutate and
/// /validate while the same Pod without the owner was denied by both. Now /validate denies both.
#[tokio::test]
async fn a_forged_controller_does_not_switch_enforce_off() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let validate = "v1.20/pod-create-by-replicaset-validate.json";
    let forged = pod_owned_by(validate, &registry, "v1", "ConfigMap");
    let mut bare = review_fixture(validate, &registry);
    bare["request"]["object"]["metadata"]["ownerReferences"] = json!([]);
    for (name, review) in [("forged owner", &forged), ("no owner", &bare)] {
        let body = pinhook.validate(review).await;
        assert_eq!(body["response"]["allowed"], false, "{name}: {body}");
    }
    // /mutate leaves the forged Pod to its "operator" (no patch) and denies the bare one (the
    // tag does not exist): the Pod is refused either way.
    let forged = pod_owned_by(POD, &registry, "v1", "ConfigMap");
    let body = pinhook.mutate(&forged).await;
    assert!(response_patch(&body).is_none(), "{body}");
    let mut bare = review_fixture(POD, &registry);
    bare["request"]["object"]["metadata"]["ownerReferences"] = json!([]);
    assert_eq!(pinhook.mutate(&bare).await["response"]["allowed"], false);
}

/// The mirror of a static pod, as the kubelet writes it (annotation
/// `kubernetes.io/config.mirror`, the Node as controller, bound to that node) and sent by that
/// node (`system:node:<spec.nodeName>`), is never patched or denied, even naming a tag that does
/// not exist (issue 24). Sent by anyone else, the annotation proves nothing (issue 43): denied.
#[tokio::test]
async fn a_mirror_pod_from_its_node_is_never_patched_or_denied() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let mirror = |fixture: &str, user: &str| {
        let mut review = pod_owned_by(fixture, &registry, "v1", "Node");
        let object = &mut review["request"]["object"];
        object["metadata"]["ownerReferences"][0]["name"] = json!("node1");
        object["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "4c1d9e3f5a7b"});
        object["spec"]["nodeName"] = json!("node1");
        review["request"]["userInfo"] =
            json!({"username": user, "groups": ["system:nodes", "system:authenticated"]});
        review
    };
    for fixture in [POD, "v1.20/pod-create-by-replicaset-validate.json"] {
        let review = mirror(fixture, "system:node:node1");
        let body = match fixture.ends_with("-validate.json") {
            true => pinhook.validate(&review).await,
            false => pinhook.mutate(&review).await,
        };
        assert_eq!(body["response"]["allowed"], true, "{fixture}: {body}");
        assert!(response_patch(&body).is_none(), "{fixture}: no patch");
    }
    // The registry has no image at all: had pinhook judged the Pod in enforce (the default
    // policy), `team/app:1.0` would have been denied as not found.
    assert_eq!(registry.manifest_heads("team/app", "1.0").await, 0);
    for user in [
        "system:node:node2",
        "alice",
        "system:serviceaccount:team:default",
    ] {
        let review = mirror("v1.20/pod-create-by-replicaset-validate.json", user);
        let body = pinhook.validate(&review).await;
        assert_eq!(body["response"]["allowed"], false, "sent by {user}: {body}");
    }
}

/// Issue 24: a custom resource the policy names is pinned at its image field over HTTPS, and
/// /validate denies it unpinned.
#[tokio::test]
async fn a_configured_custom_resource_is_pinned_where_its_operator_reads_the_image() {
    let (registry, [_, app, _]) = registry().await;
    let policy = pinhook::policy::Policy::parse(
        "customResources:\n- group: postgresql.cnpg.io\n  kind: Cluster\n  images: [/spec/imageName]\n",
    )
    .expect("valid")
    .policy;
    let pinhook = TestPinhook::start_with(
        &registry,
        crate::common::pinhook::Options {
            policy,
            ..Default::default()
        },
    )
    .await;
    let mut review = review_fixture(POD, &registry);
    let image = format!("{}/team/app:1.0", registry.host());
    review["request"]["kind"] =
        json!({"group": "postgresql.cnpg.io", "version": "v1", "kind": "Cluster"});
    review["request"]["resource"] =
        json!({"group": "postgresql.cnpg.io", "version": "v1", "resource": "clusters"});
    review["request"]["object"] = json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": "pg", "namespace": review["request"]["namespace"]},
        "spec": {"instances": 3, "imageName": image}});
    let body = pinhook.mutate(&review).await;
    let pinned = apply_response(&review, &body);
    assert_eq!(pinned["spec"]["imageName"], json!(app.pinned_with_tag()));
    let body = pinhook.validate(&review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = body["response"]["status"]["message"].as_str().unwrap_or("");
    assert!(message.contains("field \"/spec/imageName\""), "{message}");
}
