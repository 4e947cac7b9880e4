//! Who made an object, and which objects pinhook must leave exactly as their controller wrote
//! them, so that pinhook never fights a controller.
//!
//! Owns: reading an object's controller `ownerReference`, the revision label its Pods carry, and
//! the rule, kind by kind, for children of controllers. Pure: reads JSON, never does I/O.
//!
//! The rule (issues 9 and 24; README "Controllers"), from the controllers' own code:
//! - **Pods of the built-in Pod controllers are judged.** They match their Pods by labels and
//!   revision hashes, never by spec: ReplicaSet and ReplicationController (label selector),
//!   StatefulSet and DaemonSet (`controller-revision-hash`, `controller/history`), Job (its
//!   `controller-uid` selector). Pinning a Pod at CREATE cannot make any of them act again.
//!   So are Pods with no controller at all.
//! - **Pods of any other controller are left as it wrote them**, unless the policy names its
//!   kind in `owners.pinPodsOf`. Operators that create Pods themselves may compare each Pod's
//!   image with their own resource's and recreate the Pod when they differ: CloudNativePG does
//!   (`pkg/management/.../instance` compares the Pod's image string with the Cluster's
//!   `imageName` and rolls the Pod), so pinning its Pods makes it loop (cloudnative-pg#10872).
//!   Operators that never compare (Argo Workflows, Tekton) can be listed as safe to pin.
//! - **Mirror pods are never touched, when their node sends them.** The kubelet mirrors each
//!   static pod into the API with the annotation `kubernetes.io/config.mirror`; the mirror only
//!   reflects what the node runs from a file: patching it pins nothing and makes the API lie,
//!   denying it hides the pod while the kubelet retries for ever. The annotation is written by
//!   whoever writes the Pod, so it counts only on a request whose authenticated user is the
//!   node the Pod names (`system:node:<spec.nodeName>`, issue 43); anyone else's Pod carrying
//!   it is judged like any other.
//! - **"Left to its operator" withholds the patch, never the check** (issue 43). An
//!   ownerReference is written by the Pod's author: a Pod that names an operator (or a
//!   ConfigMap) as its controller is not patched, but `/validate` still requires its images
//!   pinned in enforce. Only what a cluster admin controls (exemptions, namespace modes,
//!   `owners.pinPodsOf`) lets an unpinned Pod in.
//! - **Jobs made by a CronJob are judged.** The CronJob controller tracks its Jobs by reference
//!   (`status.active`) and never compares their spec with `jobTemplate`
//!   (`pkg/controller/cronjob`).
//! - **Every other pod-bearing object with a controller is left alone**, by `/mutate` and by
//!   `/validate`. The Deployment controller looks for a ReplicaSet whose template equals its own
//!   (`EqualIgnoreHash` in `pkg/controller/deployment/util`, which ignores only the
//!   `pod-template-hash` label): a pinned ReplicaSet never equals an unpinned template, so it
//!   creates another, and another (k8s-digester#25, sigstore policy-controller#1105,
//!   ratify#1593). Argo Rollouts compares ReplicaSets the same way, and operators that own
//!   Deployments or StatefulSets (Knative, and most others) reconcile their spec back to what
//!   they want. Denying such a child would stall the rollout instead. The Pods those children
//!   create are pinned at Pod CREATE, one digest per owner revision, so enforce still means
//!   every running container is pinned.

use serde_json::Value;

use crate::policy::OwnerKind;

/// The annotation the kubelet puts on the API mirror of a static pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The built-in controllers that make Pods and match them by labels and revisions, never by
/// spec: `(group, kind)`.
const POD_CONTROLLERS: [(&str, &str); 5] = [
    ("apps", "ReplicaSet"),
    ("", "ReplicationController"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("batch", "Job"),
];

/// Whether pinhook patches an object, by who made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership<'a> {
    /// pinhook judges it.
    Judged,
    /// A pod-bearing object its controller compares with its own template (a Deployment's
    /// ReplicaSet): left exactly as written. The Pods it makes are judged.
    Controller(ControllerRef<'a>),
    /// A Pod whose controller is not a built-in Pod controller nor listed as safe to pin: an
    /// operator's, which may compare the Pod's image with its own resource's. Not patched, but
    /// checked: its images must be pinned in enforce all the same.
    Operator(ControllerRef<'a>),
    /// The API mirror of a static pod, sent by the node it runs on.
    MirrorPod,
}

/// The labels controllers put on the Pods of one template revision: the Deployment
/// controller's `pod-template-hash` (on ReplicaSets and their Pods), the StatefulSet and
/// DaemonSet controllers' `controller-revision-hash`.
const REVISION_LABELS: [&str; 2] = ["pod-template-hash", "controller-revision-hash"];

/// The `ownerReferences[]` entry with `controller: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerRef<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// The object's controller, if it has one (at most one entry may say `controller: true`).
pub fn controller_of(object: &Value) -> Option<ControllerRef<'_>> {
    let owner = object
        .get("metadata")?
        .get("ownerReferences")?
        .as_array()?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))?;
    let text = |key: &str| owner.get(key).and_then(Value::as_str).unwrap_or("");
    Some(ControllerRef {
        api_version: text("apiVersion"),
        kind: text("kind"),
        name: text("name"),
        uid: text("uid"),
    })
}

/// The controller pinhook leaves this object to, or `None` when pinhook judges the object.
/// `group` and `kind` are the request's (`kind.group`, `kind.kind`).
pub fn left_to_controller<'a>(
    group: &str,
    kind: &str,
    object: &'a Value,
) -> Option<ControllerRef<'a>> {
    let is_pod =
        group.is_empty() && (kind == "Pod" || kind == crate::workload::EPHEMERAL_CONTAINERS_KIND);
    if is_pod {
        return None;
    }
    let owner = controller_of(object)?;
    let by_cronjob = owner.kind == "CronJob" && owner.api_version.starts_with("batch/");
    if group == "batch" && kind == "Job" && by_cronjob {
        return None;
    }
    Some(owner)
}

/// Whether pinhook patches the object under review (`group`, `kind` and `subresource` are the
/// request's, `user` its authenticated user), given the owner kinds whose Pods the policy says
/// are safe to pin.
pub fn ownership<'a>(
    group: &str,
    kind: &str,
    subresource: &str,
    object: &'a Value,
    pin_pods_of: &[OwnerKind],
    user: &str,
) -> Ownership<'a> {
    let is_pod = group.is_empty() && kind == "Pod";
    if is_pod && is_mirror_pod(object) && sent_by_its_node(object, user) {
        return Ownership::MirrorPod;
    }
    // An ephemeral container is added by a user (`kubectl debug`), not by the Pod's
    // controller, and no controller compares ephemeral containers: judged.
    if is_pod && subresource.is_empty() {
        return pod_ownership(controller_of(object), false, pin_pods_of);
    }
    match left_to_controller(group, kind, object) {
        Some(owner) => Ownership::Controller(owner),
        None => Ownership::Judged,
    }
}

/// Whether pinhook judges a running Pod's containers, from its controller and whether it is a
/// mirror pod: the same rule as [`ownership`], for callers that keep Pods in their own form
/// (the watch).
pub fn pod_ownership<'a>(
    controller: Option<ControllerRef<'a>>,
    mirror: bool,
    pin_pods_of: &[OwnerKind],
) -> Ownership<'a> {
    if mirror {
        return Ownership::MirrorPod;
    }
    match controller {
        Some(owner) if !is_pod_controller(&owner, pin_pods_of) => Ownership::Operator(owner),
        _ => Ownership::Judged,
    }
}

/// True when the Pod carries the mirror annotation ([`MIRROR_ANNOTATION`]). The Pod's author
/// writes it: on its own it proves nothing (see [`sent_by_its_node`], [`is_node_mirror`]).
pub fn is_mirror_pod(object: &Value) -> bool {
    object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some()
}

/// The node a Pod names (`spec.nodeName`), if any.
pub fn node_name(object: &Value) -> Option<&str> {
    object
        .get("spec")?
        .get("nodeName")?
        .as_str()
        .filter(|n| !n.is_empty())
}

/// True when the request's authenticated `user` is the node the Pod names
/// (`system:node:<spec.nodeName>`): who sends a static pod's mirror. The NodeRestriction
/// admission plugin lets a node create only mirror pods bound to itself.
pub fn sent_by_its_node(object: &Value, user: &str) -> bool {
    match (node_name(object), user.strip_prefix("system:node:")) {
        (Some(node), Some(sender)) => node == sender,
        _ => false,
    }
}

/// For a Pod already stored (the watch, which has no request): the mirror annotation and, as the
/// kubelet writes it, a `v1` `Node` controller named as `spec.nodeName`. Weaker than
/// [`sent_by_its_node`], which admission uses; the watch only reports.
pub fn is_node_mirror(object: &Value) -> bool {
    let Some(owner) = controller_of(object) else {
        return false;
    };
    is_mirror_pod(object)
        && owner.api_version == "v1"
        && owner.kind == "Node"
        && node_name(object) == Some(owner.name)
}

/// The controller of a Pod whose Pods pinhook pins only because the policy lists its kind in
/// `owners.pinPodsOf` (not a built-in Pod controller): the owners the loop breaker watches.
pub fn listed_operator<'a>(
    object: &'a Value,
    pin_pods_of: &[OwnerKind],
) -> Option<ControllerRef<'a>> {
    let owner = controller_of(object)?;
    let builtin = is_pod_controller(&owner, &[]);
    (!builtin && is_pod_controller(&owner, pin_pods_of)).then_some(owner)
}

/// A built-in Pod controller, in its real API group, or an owner kind the policy lists.
fn is_pod_controller(owner: &ControllerRef<'_>, pin_pods_of: &[OwnerKind]) -> bool {
    let group = owner.group();
    POD_CONTROLLERS
        .iter()
        .any(|(g, k)| *g == group && *k == owner.kind)
        || pin_pods_of
            .iter()
            .any(|safe| safe.group == group && safe.kind == owner.kind)
}

/// For a Pod made by a controller that labels its revisions: the label that tells this Pod's
/// revision among its controller's Pods, its value, and the controller's uid (the Deployment
/// controller's `pod-template-hash`, the StatefulSet and DaemonSet controllers'
/// `controller-revision-hash`, a Job's `controller-uid`, which is its uid). How every replica
/// finds the Pods of one revision already stored.
pub fn revision_of(object: &Value) -> Option<(&'static str, &str, &str)> {
    let owner = controller_of(object)?;
    let labels = object.get("metadata")?.get("labels")?;
    let labelled = REVISION_LABELS
        .iter()
        .find_map(|label| Some((*label, labels.get(*label)?.as_str()?)));
    if let Some((label, value)) = labelled {
        return Some((label, value, owner.uid));
    }
    let job = owner.kind == "Job" && owner.group() == "batch";
    let uid = labels.get(JOB_UID_LABEL)?.as_str()?;
    (job && uid == owner.uid && !uid.is_empty()).then_some((JOB_UID_LABEL, uid, owner.uid))
}

/// The label the Job controller puts on its Pods: the Job's uid (every version since 1.0;
/// 1.27+ also writes `batch.kubernetes.io/controller-uid`).
const JOB_UID_LABEL: &str = "controller-uid";

/// For a Pod made by a controller: `<owner uid>/<revision>` (the revision label, empty when the
/// controller sets none, as a Job's), so every Pod of one revision gets the same digest.
pub fn owner_revision(object: &Value) -> Option<String> {
    let owner = controller_of(object)?;
    let labels = object.get("metadata").and_then(|m| m.get("labels"));
    let revision = REVISION_LABELS
        .iter()
        .find_map(|l| labels?.get(*l)?.as_str())
        .unwrap_or("");
    Some(format!("{}/{revision}", owner.uid))
}

// === impl ControllerRef ===

impl ControllerRef<'_> {
    /// `Deployment web`, for logs and reasons.
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }

    /// The API group of `apiVersion` (`apps/v1` → `apps`, `v1` → the core group, empty).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::{json, Value};

    use super::*;

    fn owned(kind: &str, api_version: &str, controller: Value) -> Value {
        json!({"metadata": {
            "name": "child",
            "labels": {"pod-template-hash": "5d4f8b9c7"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Other", "name": "not-me", "uid": "u0"},
                {"apiVersion": api_version, "kind": kind, "name": "parent", "uid": "u1",
                 "controller": controller, "blockOwnerDeletion": true}
            ]
        }})
    }

    #[rstest]
    #[case::replicaset_of_a_deployment("apps", "ReplicaSet", "Deployment", "apps/v1", true)]
    #[case::replicaset_of_an_argo_rollout(
        "apps",
        "ReplicaSet",
        "Rollout",
        "argoproj.io/v1alpha1",
        true
    )]
    #[case::deployment_of_an_operator(
        "apps",
        "Deployment",
        "Revision",
        "serving.knative.dev/v1",
        true
    )]
    #[case::statefulset_of_an_operator("apps", "StatefulSet", "Cluster", "example.dev/v1", true)]
    #[case::job_of_a_cronjob_v1("batch", "Job", "CronJob", "batch/v1", false)]
    #[case::job_of_a_cronjob_v1beta1("batch", "Job", "CronJob", "batch/v1beta1", false)]
    #[case::job_of_something_else("batch", "Job", "Workflow", "argoproj.io/v1alpha1", true)]
    #[case::cronjob_kind_from_another_group("batch", "Job", "CronJob", "example.dev/v1", true)]
    #[case::pod_of_a_replicaset("", "Pod", "ReplicaSet", "apps/v1", false)]
    #[case::pod_of_a_statefulset("", "Pod", "StatefulSet", "apps/v1", false)]
    #[case::ephemeral_containers_of_a_pod(
        "",
        "EphemeralContainers",
        "ReplicaSet",
        "apps/v1",
        false
    )]
    fn children_of_controllers(
        #[case] group: &str,
        #[case] kind: &str,
        #[case] owner_kind: &str,
        #[case] owner_api_version: &str,
        #[case] left_alone: bool,
    ) {
        let object = owned(owner_kind, owner_api_version, json!(true));
        let left = left_to_controller(group, kind, &object);
        assert_eq!(left.is_some(), left_alone, "{left:?}");
        if let Some(owner) = left {
            assert_eq!(owner.describe(), format!("{owner_kind} parent"));
            assert_eq!(owner.uid, "u1");
        }
    }

    #[rstest]
    #[case::not_a_controller(json!(false))]
    #[case::controller_absent(Value::Null)]
    #[case::controller_not_a_bool(json!("true"))]
    fn an_owner_that_is_not_the_controller_leaves_the_object_to_pinhook(#[case] flag: Value) {
        let object = owned("Deployment", "apps/v1", flag);
        assert_eq!(left_to_controller("apps", "ReplicaSet", &object), None);
        assert_eq!(owner_revision(&object), None);
    }

    #[test]
    fn objects_without_owners_are_judged() {
        for object in [
            json!({}),
            json!({"metadata": {}}),
            json!({"metadata": {"ownerReferences": "x"}}),
        ] {
            assert_eq!(left_to_controller("apps", "ReplicaSet", &object), None);
            assert_eq!(controller_of(&object), None);
        }
    }

    fn pod_of(owner_kind: &str, owner_api_version: &str) -> Value {
        owned(owner_kind, owner_api_version, json!(true))
    }

    #[rstest]
    #[case::replicaset("ReplicaSet", "apps/v1", "judged")]
    #[case::replication_controller("ReplicationController", "v1", "judged")]
    #[case::statefulset("StatefulSet", "apps/v1", "judged")]
    #[case::daemonset("DaemonSet", "apps/v1", "judged")]
    #[case::job("Job", "batch/v1", "judged")]
    #[case::cloudnative_pg_cluster("Cluster", "postgresql.cnpg.io/v1", "operator")]
    #[case::argo_workflow_not_listed("Workflow", "argoproj.io/v1alpha1", "operator")]
    #[case::argo_workflow_listed("Workflow", "argoproj.io/v1alpha1", "judged")]
    #[case::tekton_taskrun_listed("TaskRun", "tekton.dev/v1", "judged")]
    #[case::replicaset_kind_in_another_group("ReplicaSet", "example.dev/v1", "operator")]
    #[case::job_kind_in_another_group("Job", "example.dev/v1", "operator")]
    #[case::statefulset_in_the_core_group("StatefulSet", "v1", "operator")]
    #[case::a_node("Node", "v1", "operator")]
    fn pods_by_their_controller(
        #[case] owner_kind: &str,
        #[case] owner_api_version: &str,
        #[case] expected: &str,
    ) {
        let safe = [
            OwnerKind {
                group: "argoproj.io".into(),
                kind: "Workflow".into(),
            },
            OwnerKind {
                group: "tekton.dev".into(),
                kind: "TaskRun".into(),
            },
        ];
        let listed = if expected == "judged" { &safe[..] } else { &[] };
        let pod = pod_of(owner_kind, owner_api_version);
        let got = match ownership("", "Pod", "", &pod, listed, "") {
            Ownership::Judged => "judged".to_string(),
            Ownership::Operator(owner) => {
                assert_eq!(owner.describe(), format!("{owner_kind} parent"));
                "operator".to_string()
            }
            other => format!("{other:?}"),
        };
        assert_eq!(got, expected);
        // The same Pod's ephemeral containers are added by a user, not the operator: judged.
        assert_eq!(
            ownership("", "Pod", "ephemeralcontainers", &pod, &[], ""),
            Ownership::Judged
        );
    }

    #[test]
    fn a_pod_without_a_controller_is_judged() {
        let bare = json!({"metadata": {"name": "p"}});
        assert_eq!(ownership("", "Pod", "", &bare, &[], ""), Ownership::Judged);
        let not_controller = owned("Cluster", "postgresql.cnpg.io/v1", json!(false));
        assert_eq!(
            ownership("", "Pod", "", &not_controller, &[], ""),
            Ownership::Judged
        );
    }

    /// A mirror pod as the kubelet writes it (pkg/kubelet/pod/mirror_client.go): the static
    /// pod's hash in the annotation, the Node as controller owner, bound to that node.
    fn mirror_on(node: &str) -> Value {
        json!({"metadata": {
            "name": "etcd-node1",
            "annotations": {MIRROR_ANNOTATION: "1c6c6b4b2a1b4a8e9b5c1d2e3f4a5b6c"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node1",
                                  "uid": "n1", "controller": true}],
        }, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "etcd:3"}]}})
    }

    #[test]
    fn mirror_pods_from_their_node_are_never_judged_whoever_owns_them() {
        let mirror = mirror_on("node1");
        let node = "system:node:node1";
        assert!(is_mirror_pod(&mirror));
        assert!(is_node_mirror(&mirror));
        assert_eq!(
            ownership("", "Pod", "", &mirror, &[], node),
            Ownership::MirrorPod
        );
        assert_eq!(
            ownership("", "Pod", "ephemeralcontainers", &mirror, &[], node),
            Ownership::MirrorPod
        );
        let mut empty_hash = mirror.clone();
        empty_hash["metadata"]["annotations"][MIRROR_ANNOTATION] = json!("");
        assert_eq!(
            ownership("", "Pod", "", &empty_hash, &[], node),
            Ownership::MirrorPod
        );
        // The annotation on anything but a Pod means nothing.
        assert_eq!(
            ownership(
                "apps",
                "Deployment",
                "",
                &json!({"metadata": mirror["metadata"].clone()}),
                &[],
                node
            ),
            Ownership::Controller(ControllerRef {
                api_version: "v1",
                kind: "Node",
                name: "node1",
                uid: "n1"
            })
        );
    }

    /// Issue 43: the annotation is the Pod author's to write. Sent by anyone but the node the
    /// Pod names, a "mirror pod" is a Pod like any other (here its Node owner makes it an
    /// operator's: not patched, but checked).
    #[rstest]
    #[case::a_tenant("alice")]
    #[case::a_service_account("system:serviceaccount:team:default")]
    #[case::another_node("system:node:node2")]
    #[case::a_node_prefix("system:node:node")]
    #[case::no_user("")]
    #[case::the_node_prefix_alone("system:node:")]
    fn the_mirror_annotation_from_anyone_but_its_node_proves_nothing(#[case] user: &str) {
        let mirror = mirror_on("node1");
        assert!(matches!(
            ownership("", "Pod", "", &mirror, &[], user),
            Ownership::Operator(ControllerRef { kind: "Node", .. })
        ));
        let mut bare = mirror.clone();
        bare["metadata"]["ownerReferences"] = json!([]);
        assert_eq!(
            ownership("", "Pod", "", &bare, &[], user),
            Ownership::Judged
        );
        assert!(!is_node_mirror(&bare), "no Node owner");
        // Not bound to a node: no node can have sent it.
        let unbound = mirror_on("");
        assert!(!sent_by_its_node(&unbound, "system:node:"));
        assert!(!is_node_mirror(&unbound));
        assert!(
            !is_node_mirror(&mirror_on("node2")),
            "owner and node differ"
        );
    }

    #[test]
    fn non_pod_children_follow_the_controller_rule() {
        let rs = owned("Deployment", "apps/v1", json!(true));
        assert!(matches!(
            ownership("apps", "ReplicaSet", "", &rs, &[], ""),
            Ownership::Controller(_)
        ));
        let job = owned("CronJob", "batch/v1", json!(true));
        assert_eq!(
            ownership("batch", "Job", "", &job, &[], ""),
            Ownership::Judged
        );
    }

    #[test]
    fn a_revision_is_found_by_its_label_and_its_controller() {
        let pod = owned("ReplicaSet", "apps/v1", json!(true));
        assert_eq!(
            revision_of(&pod),
            Some(("pod-template-hash", "5d4f8b9c7", "u1"))
        );
        let mut job_pod = owned("Job", "batch/v1", json!(true));
        job_pod["metadata"]["labels"] = json!({"controller-uid": "u1", "job-name": "once"});
        assert_eq!(revision_of(&job_pod), Some(("controller-uid", "u1", "u1")));
        job_pod["metadata"]["labels"]["controller-uid"] = json!("another");
        assert_eq!(revision_of(&job_pod), None, "not its Job's uid");
        let mut unlabelled = owned("Cluster", "postgresql.cnpg.io/v1", json!(true));
        unlabelled["metadata"]["labels"] = json!({});
        assert_eq!(revision_of(&unlabelled), None);
        assert_eq!(
            revision_of(&json!({"metadata": {"labels": {"pod-template-hash": "x"}}})),
            None
        );
    }

    #[test]
    fn owner_revision_is_the_controller_uid_and_revision_label() {
        let pod = owned("ReplicaSet", "apps/v1", json!(true));
        assert_eq!(owner_revision(&pod).as_deref(), Some("u1/5d4f8b9c7"));

        let mut pod = pod;
        pod["metadata"]["labels"] = json!({"controller-revision-hash": "web-6c8d"});
        assert_eq!(owner_revision(&pod).as_deref(), Some("u1/web-6c8d"));

        pod["metadata"]["labels"] = json!({"job-name": "once"});
        assert_eq!(owner_revision(&pod).as_deref(), Some("u1/"));
    }
}
