//! PodRecord tests: the workload rule owner kind by owner kind, image sites, pull secrets and
//! service account, and hostile input (wrong types, missing fields, over the bounds) as errors.

use rstest::rstest;
use serde_json::{json, Value};

use super::*;
use crate::error::error_chain;

const HASH: &str = "5d4f8b9c7";

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": "shop",
            "name": "web-5d4f8b9c7-x2x9q",
            "uid": "11111111-2222-3333-4444-555555555555",
            "labels": {"app": "web", "pod-template-hash": HASH},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f8b9c7",
                "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "serviceAccountName": "web",
            "imagePullSecrets": [{"name": "regcred"}, {"name": ""}, {}, {"name": "regcred"},
                                 {"name": "mirror"}],
            "initContainers": [{"name": "setup", "image": "busybox:1.36"}],
            "containers": [
                {"name": "app", "image": "nginx:1.25"},
                {"name": "sidecar", "image": "envoyproxy/envoy:v1.30"},
                {"name": "no-image"}
            ],
            "ephemeralContainers": [{"name": "debugger", "image": "busybox"}],
            "volumes": [
                {"name": "config", "configMap": {"name": "web"}},
                {"name": "models", "image": {"reference": "registry.example/models:v3"}}
            ]
        },
        "status": {"phase": "Running"}
    })
}

fn with(mut pod: Value, pointer: &str, value: Value) -> Value {
    if let Some(slot) = pod.pointer_mut(pointer) {
        *slot = value;
    }
    pod
}

fn owned_by(api_version: &str, kind: &str, name: &str) -> Value {
    with(
        pod(),
        "/metadata/ownerReferences",
        json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": "owner-uid",
                "controller": true}]),
    )
}

fn record(pod: &Value) -> PodRecord {
    PodRecord::from_pod(pod).expect("valid pod")
}

fn error(pod: &Value) -> String {
    match PodRecord::from_pod(pod) {
        Ok(record) => panic!("expected an error, got {record:?}"),
        Err(error) => error_chain(&error),
    }
}

#[test]
fn a_deployment_pod_keeps_what_the_watch_needs() {
    let record = record(&pod());
    assert_eq!(record.namespace, "shop");
    assert_eq!(record.name, "web-5d4f8b9c7-x2x9q");
    assert_eq!(record.uid, "11111111-2222-3333-4444-555555555555");
    assert_eq!(
        record.workload,
        WorkloadRef {
            namespace: "shop".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            api_version: "apps/v1".into(),
            uid: None,
        }
    );
    assert_eq!(
        record.owner,
        Some(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-5d4f8b9c7".into(),
            uid: "rs-uid".into(),
        })
    );
    let sites: Vec<_> = record
        .images
        .iter()
        .map(|i| (i.describe(), i.image.as_str()))
        .collect();
    assert_eq!(
        sites,
        [
            ("containers[app]".to_string(), "nginx:1.25"),
            ("containers[sidecar]".to_string(), "envoyproxy/envoy:v1.30"),
            ("initContainers[setup]".to_string(), "busybox:1.36"),
            ("ephemeralContainers[debugger]".to_string(), "busybox"),
            ("volumes[models]".to_string(), "registry.example/models:v3"),
        ]
    );
    let ranks: Vec<_> = record.images.iter().map(PodImage::field_rank).collect();
    assert_eq!(ranks, [0, 0, 1, 2, 3]);
    assert_eq!(record.pull_secrets, ["regcred", "mirror"]);
    assert_eq!(record.service_account, "web");
    assert!(!record.terminal);
}

#[rstest]
#[case::replicaset_of_a_deployment(
    "apps/v1",
    "ReplicaSet",
    "web-5d4f8b9c7",
    "Deployment",
    "web",
    None
)]
#[case::old_extensions_replicaset(
    "extensions/v1beta1",
    "ReplicaSet",
    "web-5d4f8b9c7",
    "Deployment",
    "web",
    None
)]
#[case::deployment_name_with_dashes(
    "apps/v1",
    "ReplicaSet",
    "my-web-app-5d4f8b9c7",
    "Deployment",
    "my-web-app",
    None
)]
#[case::replicaset_not_named_for_the_hash(
    "apps/v1",
    "ReplicaSet",
    "web-abc",
    "ReplicaSet",
    "web-abc",
    Some("owner-uid")
)]
#[case::replicaset_named_only_the_hash(
    "apps/v1",
    "ReplicaSet",
    "-5d4f8b9c7",
    "ReplicaSet",
    "-5d4f8b9c7",
    Some("owner-uid")
)]
#[case::hash_without_dash(
    "apps/v1",
    "ReplicaSet",
    "web5d4f8b9c7",
    "ReplicaSet",
    "web5d4f8b9c7",
    Some("owner-uid")
)]
#[case::replicaset_kind_of_another_group(
    "example.dev/v1",
    "ReplicaSet",
    "web-5d4f8b9c7",
    "ReplicaSet",
    "web-5d4f8b9c7",
    Some("owner-uid")
)]
#[case::statefulset("apps/v1", "StatefulSet", "db", "StatefulSet", "db", Some("owner-uid"))]
#[case::daemonset(
    "apps/v1",
    "DaemonSet",
    "agent",
    "DaemonSet",
    "agent",
    Some("owner-uid")
)]
#[case::replication_controller(
    "v1",
    "ReplicationController",
    "legacy",
    "ReplicationController",
    "legacy",
    Some("owner-uid")
)]
#[case::job_named_like_a_cronjob_run(
    "batch/v1",
    "Job",
    "backup-28391234",
    "Job",
    "backup-28391234",
    Some("owner-uid")
)]
#[case::custom_controller("example.dev/v1", "Cluster", "pg", "Cluster", "pg", Some("owner-uid"))]
#[case::mirror_pod_of_a_node(
    "v1",
    "Node",
    "node-1",
    "Pod",
    "web-5d4f8b9c7-x2x9q",
    Some("11111111-2222-3333-4444-555555555555")
)]
fn the_workload_is_what_the_pods_metadata_proves(
    #[case] api_version: &str,
    #[case] kind: &str,
    #[case] name: &str,
    #[case] workload_kind: &str,
    #[case] workload_name: &str,
    #[case] uid: Option<&str>,
) {
    let record = record(&owned_by(api_version, kind, name));
    assert_eq!(
        (
            record.workload.kind.as_str(),
            record.workload.name.as_str(),
            record.workload.uid.as_deref()
        ),
        (workload_kind, workload_name, uid)
    );
    assert_eq!(record.workload.namespace, "shop");
    assert_eq!(record.owner.map(|o| o.kind), Some(kind.to_string()));
}

#[rstest]
#[case::no_hash_label(json!(null))]
#[case::argo_rollouts_label(json!({"rollouts-pod-template-hash": HASH}))]
#[case::empty_hash(json!({"pod-template-hash": ""}))]
fn a_replicaset_owner_without_the_pods_hash_stays_a_replicaset(#[case] labels: Value) {
    let record = record(&with(pod(), "/metadata/labels", labels));
    assert_eq!(record.workload.describe(), "shop/ReplicaSet/web-5d4f8b9c7");
    assert_eq!(record.workload.uid.as_deref(), Some("rs-uid"));
}

#[rstest]
#[case::no_owner_references(json!(null))]
#[case::empty_owner_references(json!([]))]
#[case::owner_that_is_not_the_controller(json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
    "name": "web-5d4f8b9c7", "uid": "rs-uid"}]))]
fn a_pod_without_controller_is_its_own_workload(#[case] owners: Value) {
    let record = record(&with(pod(), "/metadata/ownerReferences", owners));
    assert_eq!(record.owner, None);
    assert_eq!(
        record.workload,
        WorkloadRef {
            namespace: "shop".into(),
            kind: "Pod".into(),
            name: "web-5d4f8b9c7-x2x9q".into(),
            api_version: "v1".into(),
            uid: Some("11111111-2222-3333-4444-555555555555".into()),
        }
    );
}

#[rstest]
#[case::both_absent(json!(null), json!(null), "default")]
#[case::empty_name(json!(""), json!(null), "default")]
#[case::deprecated_field(json!(null), json!("legacy"), "legacy")]
#[case::name_wins(json!("web"), json!("legacy"), "web")]
fn the_service_account_defaults_like_the_api(
    #[case] name: Value,
    #[case] deprecated: Value,
    #[case] expected: &str,
) {
    let pod = with(pod(), "/spec/serviceAccountName", name);
    let mut pod = pod;
    pod["spec"]["serviceAccount"] = deprecated;
    assert_eq!(record(&pod).service_account, expected);
}

#[rstest]
#[case::succeeded("Succeeded", true)]
#[case::failed("Failed", true)]
#[case::pending("Pending", false)]
#[case::running("Running", false)]
fn finished_pods_are_marked_terminal(#[case] phase: &str, #[case] terminal: bool) {
    let pod = with(pod(), "/status/phase", json!(phase));
    assert_eq!(record(&pod).terminal, terminal);
}

#[test]
fn a_pod_without_spec_or_secrets_has_no_images_and_the_default_account() {
    let mut pod = pod();
    pod["spec"] = Value::Null;
    let record = record(&pod);
    assert!(record.images.is_empty());
    assert!(record.pull_secrets.is_empty());
    assert_eq!(record.service_account, "default");
}

#[rstest]
#[case::not_an_object(json!([1, 2]), "pod is not a JSON object")]
#[case::no_namespace(with(pod(), "/metadata/namespace", json!(null)), "metadata.namespace is missing")]
#[case::empty_name(with(pod(), "/metadata/name", json!("")), "metadata.name is missing")]
#[case::no_uid(with(pod(), "/metadata/uid", json!(null)), "metadata.uid is missing")]
#[case::name_not_a_string(with(pod(), "/metadata/name", json!(42)), "metadata.name is not a string")]
#[case::owners_not_a_list(with(pod(), "/metadata/ownerReferences", json!("rs")), "metadata.ownerReferences is not an array")]
#[case::controller_without_kind(
    with(pod(), "/metadata/ownerReferences", json!([{"name": "x", "uid": "u", "apiVersion": "v1", "controller": true}])),
    "metadata.ownerReferences[controller].kind is not a non-empty string"
)]
#[case::hash_not_a_string(with(pod(), "/metadata/labels/pod-template-hash", json!(7)), "metadata.labels[pod-template-hash] is not a string")]
#[case::containers_not_a_list(with(pod(), "/spec/containers", json!({"app": "nginx"})), "cannot read the pod's images: /spec/containers is not an array")]
#[case::image_not_a_string(with(pod(), "/spec/containers/0/image", json!(["nginx"])), "cannot read the pod's images: /spec/containers/0/image is not a string")]
#[case::volume_image_not_an_object(with(pod(), "/spec/volumes/1/image", json!("x")), "cannot read the pod's images: /spec/volumes/1/image is not an object")]
#[case::secrets_not_a_list(with(pod(), "/spec/imagePullSecrets", json!("regcred")), "spec.imagePullSecrets is not an array")]
#[case::secret_not_an_object(with(pod(), "/spec/imagePullSecrets/0", json!("regcred")), "spec.imagePullSecrets[0] is not an object")]
#[case::secret_name_not_a_string(with(pod(), "/spec/imagePullSecrets/0/name", json!(1)), "spec.imagePullSecrets[0].name is not a string")]
#[case::account_not_a_string(with(pod(), "/spec/serviceAccountName", json!(true)), "spec.serviceAccountName is not a string")]
fn malformed_pods_are_errors_naming_the_field(#[case] pod: Value, #[case] expected: &str) {
    assert_eq!(error(&pod), expected);
}

#[rstest]
#[case::namespace(
    "/metadata/namespace",
    64,
    "metadata.namespace is 64 bytes long, more than the 63 the watch keeps"
)]
#[case::name(
    "/metadata/name",
    254,
    "metadata.name is 254 bytes long, more than the 253 the watch keeps"
)]
#[case::uid(
    "/metadata/uid",
    129,
    "metadata.uid is 129 bytes long, more than the 128 the watch keeps"
)]
#[case::image(
    "/spec/containers/0/image",
    1025,
    "spec.containers[0].image is 1025 bytes long, more than the 1024 the watch keeps"
)]
#[case::volume_image(
    "/spec/volumes/1/image/reference",
    1025,
    "spec.volumes[1].image.reference is 1025 bytes long, more than the 1024 the watch keeps"
)]
#[case::container_name(
    "/spec/containers/1/name",
    64,
    "spec.containers[1].name is 64 bytes long, more than the 63 the watch keeps"
)]
#[case::secret_name(
    "/spec/imagePullSecrets/0/name",
    254,
    "spec.imagePullSecrets[0].name is 254 bytes long, more than the 253 the watch keeps"
)]
#[case::owner_name("/metadata/ownerReferences/0/name", 254, "metadata.ownerReferences[controller].name is 254 bytes long, more than the 253 the watch keeps")]
fn strings_longer_than_the_api_allows_are_errors(
    #[case] pointer: &str,
    #[case] len: usize,
    #[case] expected: &str,
) {
    let pod = with(pod(), pointer, json!("a".repeat(len)));
    assert_eq!(error(&pod), expected);
    let pod = with(pod, pointer, json!("a".repeat(len - 1)));
    assert!(PodRecord::from_pod(&pod).is_ok(), "{pointer} at the bound");
}

#[test]
fn more_images_than_the_bound_is_an_error() {
    let many: Vec<Value> = (0..=MAX_IMAGES_PER_POD)
        .map(|i| json!({"name": format!("c{i}"), "image": "nginx"}))
        .collect();
    let pod = with(pod(), "/spec/containers", json!(many));
    assert_eq!(
        error(&pod),
        "images has 516 entries, more than the 512 the watch keeps"
    );
    let fits: Vec<Value> = many.into_iter().take(MAX_IMAGES_PER_POD - 3).collect();
    let pod = with(pod, "/spec/containers", json!(fits));
    assert_eq!(record(&pod).images.len(), MAX_IMAGES_PER_POD);
}

#[test]
fn more_distinct_pull_secrets_than_the_bound_is_an_error() {
    let names = |n: usize| -> Value {
        json!((0..n)
            .map(|i| json!({"name": format!("s{i}")}))
            .collect::<Vec<_>>())
    };
    let pod = with(pod(), "/spec/imagePullSecrets", names(MAX_PULL_SECRETS + 1));
    assert_eq!(
        error(&pod),
        "spec.imagePullSecrets has 129 entries, more than the 128 the watch keeps"
    );
    // Repeats do not count against the bound.
    let mut repeated = names(MAX_PULL_SECRETS);
    if let Some(list) = repeated.as_array_mut() {
        list.extend(std::iter::repeat_n(json!({"name": "s0"}), 50));
    }
    let pod = with(pod, "/spec/imagePullSecrets", repeated);
    assert_eq!(record(&pod).pull_secrets.len(), MAX_PULL_SECRETS);
}

/// Every value of the sample Pod, replaced in turn by each kind of junk: an error or a record,
/// never a panic.
#[test]
fn junk_anywhere_in_a_pod_never_panics() {
    fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    pointers(child, format!("{at}/{key}"), out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    pointers(child, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
        out.push(at);
    }
    let junk = [
        json!(null),
        json!(true),
        json!(-1),
        json!(1.5e300),
        json!(""),
        json!("\u{0}\u{fffd}é"),
        json!([]),
        json!([null, {}]),
        json!({}),
        json!({"controller": true}),
    ];
    let mut all = Vec::new();
    pointers(&pod(), String::new(), &mut all);
    assert!(all.len() > 40, "{}", all.len());
    for pointer in &all {
        for value in &junk {
            let mutated = if pointer.is_empty() {
                value.clone()
            } else {
                with(pod(), pointer, value.clone())
            };
            let _ = PodRecord::from_pod(&mutated);
        }
    }
}

// === what runs (issue 29) ===

#[rstest]
#[case::containerd("registry.example/team/app@sha256:{A}", Some("pulled"))]
#[case::dockershim("docker-pullable://nginx@sha256:{A}", Some("pulled"))]
#[case::image_id("sha256:{A}", Some("local-image-id"))]
#[case::docker_image_id("docker://sha256:{A}", Some("local-image-id"))]
#[case::not_started("", None)]
#[case::no_repository("@sha256:{A}", Some("unrecognized"))]
#[case::bad_digest("nginx@sha256:short", Some("unrecognized"))]
#[case::other_scheme("cri-o://nginx@sha256:{A}", Some("unrecognized"))]
#[case::words("something else", Some("unrecognized"))]
fn the_runtimes_forms_of_image_id(#[case] image_id: &str, #[case] expected: Option<&str>) {
    let hex = "a".repeat(64);
    let read = RunningImage::read(&image_id.replace("{A}", &hex));
    let kind = read.as_ref().map(|r| match r {
        RunningImage::Pulled(digest) => {
            assert_eq!(digest.to_string(), format!("sha256:{hex}"));
            "pulled"
        }
        RunningImage::ImageId => "local-image-id",
        RunningImage::Unrecognized => "unrecognized",
    });
    assert_eq!(kind, expected);
    assert_eq!(
        RunningImage::read(&format!("nginx@sha256:{}", "a".repeat(MAX_IMAGE_LEN))),
        Some(RunningImage::Unrecognized),
        "an over-long imageID is not read"
    );
}

fn digest_of(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

#[test]
fn each_site_keeps_what_its_status_entry_says_it_runs_and_the_pod_its_node() {
    let mut object = pod();
    object["spec"]["nodeName"] = json!("node-1");
    object["status"] = json!({
        "phase": "Running",
        "initContainerStatuses": [{"name": "setup", "imageID": format!("docker.io/library/busybox@{}", digest_of('1'))}],
        "containerStatuses": [
            {"name": "sidecar", "imageID": format!("sha256:{}", "2".repeat(64))},
            {"name": "app", "imageID": format!("docker.io/library/nginx@{}", digest_of('3')),
             "volumeMounts": [{"name": "models", "mountPath": "/m",
                               "image": {"imageRef": format!("registry.example/models@{}", digest_of('4'))}}]},
            {"name": "not-in-spec", "imageID": format!("x@{}", digest_of('5'))}
        ],
        "ephemeralContainerStatuses": [{"name": "debugger", "imageID": ""}]
    });
    let record = PodRecord::from_pod(&object).expect("valid pod");
    assert_eq!(record.node.as_deref(), Some("node-1"));
    let running: Vec<(String, Option<String>)> = record
        .images
        .iter()
        .map(|s| (s.describe(), s.running.as_ref().map(RunningImage::describe)))
        .collect();
    assert_eq!(
        running,
        [
            ("containers[app]".to_string(), Some(digest_of('3'))),
            (
                "containers[sidecar]".to_string(),
                Some("local-image-id".to_string())
            ),
            ("initContainers[setup]".to_string(), Some(digest_of('1'))),
            ("ephemeralContainers[debugger]".to_string(), None),
            ("volumes[models]".to_string(), Some(digest_of('4'))),
        ]
    );
}

#[rstest]
#[case::status_not_an_object(json!("Running"))]
#[case::statuses_not_a_list(json!({"containerStatuses": {"name": "app"}}))]
#[case::entry_not_an_object(json!({"containerStatuses": ["app"]}))]
#[case::image_id_not_a_string(json!({"containerStatuses": [{"name": "app", "imageID": 7}]}))]
#[case::name_missing(json!({"containerStatuses": [{"imageID": "nginx@sha256:abc"}]}))]
#[case::mounts_not_a_list(json!({"containerStatuses": [{"name": "app", "volumeMounts": "x"}]}))]
#[case::image_ref_not_a_string(json!({"containerStatuses": [{"name": "app", "volumeMounts": [{"name": "models", "image": {"imageRef": []}}]}]}))]
fn a_malformed_status_leaves_what_runs_unknown_and_keeps_the_pod(#[case] status: Value) {
    let record = PodRecord::from_pod(&with(pod(), "/status", status)).expect("the spec is read");
    assert_eq!(record.images.len(), 5);
    assert!(record.images.iter().all(|s| s.running.is_none()));
}

#[test]
fn status_lists_past_the_bound_are_not_read_past_it() {
    let mut entries: Vec<Value> = (0..MAX_IMAGES_PER_POD)
        .map(|i| json!({"name": format!("filler-{i}"), "imageID": ""}))
        .collect();
    entries.push(json!({"name": "app", "imageID": format!("nginx@{}", digest_of('3'))}));
    let record = PodRecord::from_pod(&with(
        pod(),
        "/status",
        json!({"containerStatuses": entries}),
    ))
    .expect("valid pod");
    assert!(record.images.iter().all(|s| s.running.is_none()));
}

#[test]
fn an_over_long_node_name_is_an_error() {
    let mut object = pod();
    object["spec"]["nodeName"] = json!("n".repeat(254));
    let error = PodRecord::from_pod(&object).expect_err("too long");
    assert_eq!(
        error_chain(&error),
        "spec.nodeName is 254 bytes long, more than the 253 the watch keeps"
    );
}
