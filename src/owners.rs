//! Who made an object, and which objects pinhook must leave exactly as their controller wrote
//! them, so that pinhook never fights a controller.
//!
//! Owns: reading an object's controller `ownerReference`, the revision label its Pods carry, and
//! the rule, kind by kind, for children of controllers. Pure: reads JSON, never does I/O.
//!
//! The rule (issue 9; README "Controllers"), from the controllers' own code:
//! - **Pods are always judged.** The controllers that make Pods match them by labels and
//!   revision hashes, never by spec: ReplicaSet and ReplicationController (label selector),
//!   StatefulSet and DaemonSet (`controller-revision-hash`, `controller/history`), Job (its
//!   `controller-uid` selector). Pinning a Pod at CREATE cannot make any of them act again.
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
