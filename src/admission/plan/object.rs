//! The object under review as the decision core sees it (plain data, no resolver), and the
//! pure facts about it that the core and its I/O half both need: its image sites, whether its
//! controller owns its images, which template change pins it whole, where its pull secrets
//! come from, and which owner revision's memo answers for it.

use serde_json::Value;

use super::outcome::{LeftAlone, LeftAloneReason, Plan};
use crate::owners::{self, Ownership};
use crate::policy::{CompiledPolicy, PinTarget};
use crate::reference::Reference;
use crate::registry::pull_secrets::SecretNames;
use crate::registry::Credential;
use crate::workload::{self, ImageSite, WorkloadError};

/// The object under review, as the core sees it: plain data, no resolver.
#[derive(Debug, Clone, Copy)]
pub struct Object<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub object: &'a Value,
    pub old_object: Option<&'a Value>,
    /// The request's authenticated user (`userInfo.username`; empty when there is no request,
    /// as for `pinhook check`): who sent it, which the object's author cannot write.
    pub user: &'a str,
}

// === impl Object ===

impl Object<'_> {
    /// A Pod, or the 1.20 `EphemeralContainers` object that stands for one.
    pub fn is_pod(&self) -> bool {
        self.group.is_empty()
            && (self.kind == "Pod" || self.kind == workload::EPHEMERAL_CONTAINERS_KIND)
    }

    pub(super) fn sites(
        &self,
        policy: &CompiledPolicy,
    ) -> Result<Option<Vec<ImageSite>>, WorkloadError> {
        workload::image_sites(
            &policy.kinds,
            self.group,
            self.kind,
            self.subresource,
            self.object,
            self.old_object,
        )
    }

    /// `target: pods` leaves controllers' templates as written.
    pub(super) fn is_skipped_template(&self, policy: &CompiledPolicy) -> bool {
        policy.policy.target == PinTarget::Pods && !self.is_pod()
    }

    /// Why `/mutate` leaves the object exactly as its maker wrote it, if it does (see
    /// [`owners`]): a pod-bearing object its controller compares with its own template (a
    /// Deployment's ReplicaSet), a Pod of an operator the policy does not list as safe to pin,
    /// or the mirror of a static pod sent by its node. Never patched; checked unless
    /// [`Object::left_unchecked`] says so too.
    pub fn left_alone(&self, policy: &CompiledPolicy) -> Option<LeftAlone> {
        policy.kinds.pod_spec_pointer(self.group, self.kind)?;
        let (reason, owner) = match self.ownership(policy) {
            Ownership::Judged => return None,
            Ownership::MirrorPod => {
                return Some(LeftAlone {
                    reason: LeftAloneReason::StaticPod,
                    message: format!(
                        "{} is the mirror of a static pod ({}): the kubelet runs it from a file",
                        self.kind,
                        owners::MIRROR_ANNOTATION
                    ),
                })
            }
            Ownership::Controller(owner) => (LeftAloneReason::Controller, owner),
            Ownership::Operator(owner) => (LeftAloneReason::Operator, owner),
        };
        Some(LeftAlone {
            reason,
            message: format!(
                "{} left to its controller {} ({})",
                self.kind,
                owner.describe(),
                owner.api_version
            ),
        })
    }

    /// Why `/validate` does not check the object, if it does not: a static pod's mirror sent by
    /// its node, or a pod-bearing object left to its controller (whose Pods are checked when
    /// they are made). Never an operator's Pod: the ownerReference that names the operator is
    /// written by the Pod's author, so it withholds the patch, never the check (issue 43).
    pub fn left_unchecked(&self, policy: &CompiledPolicy) -> Option<LeftAlone> {
        match self.ownership(policy) {
            Ownership::Operator(_) => None,
            _ => self.left_alone(policy),
        }
    }

    /// The operator this Pod is left to, when `/mutate` leaves it as written because of its
    /// controller (what `/validate`'s denial names, with the fixes).
    pub fn operator(&self, policy: &CompiledPolicy) -> Option<owners::ControllerRef<'_>> {
        policy.kinds.pod_spec_pointer(self.group, self.kind)?;
        match self.ownership(policy) {
            Ownership::Operator(owner) => Some(owner),
            _ => None,
        }
    }

    fn ownership(&self, policy: &CompiledPolicy) -> Ownership<'_> {
        owners::ownership(
            self.group,
            self.kind,
            self.subresource,
            self.object,
            &policy.policy.owners.pin_pods_of,
            self.user,
        )
    }

    /// An UPDATE that changes a workload's pod template: a rollout happens anyway, so every
    /// image of the new template is pinned, not only the ones the update changed.
    pub(super) fn changes_template(&self, policy: &CompiledPolicy) -> bool {
        workload::template_changed(
            &policy.kinds,
            self.group,
            self.kind,
            self.object,
            self.old_object,
        )
    }

    /// Nothing about `/mutate`'s answer depends on the namespace: an exempt namespace, or an
    /// object left alone because of who made it.
    pub(super) fn is_passed_over(&self, policy: &CompiledPolicy) -> bool {
        policy.exemption(self.namespace, None).is_some() || self.left_alone(policy).is_some()
    }

    /// The same for `/validate`: an exempt namespace, or an object left unchecked.
    pub(super) fn is_passed_over_check(&self, policy: &CompiledPolicy) -> bool {
        policy.exemption(self.namespace, None).is_some() || self.left_unchecked(policy).is_some()
    }

    /// The plan of an object passed over: empty, saying why when it was left alone (`left` is
    /// [`Object::left_alone`] or [`Object::left_unchecked`]).
    pub(super) fn passed_over_plan(
        &self,
        policy: &CompiledPolicy,
        left: impl FnOnce() -> Option<LeftAlone>,
    ) -> Plan {
        match policy.exemption(self.namespace, None) {
            Some(_) => Plan::default(),
            None => Plan {
                left_alone: left(),
                ..Plan::default()
            },
        }
    }
}

// === pure facts for the I/O half ===

impl<'a> Object<'a> {
    /// Where the pod's pull secret names come from: the object's PodSpec, or for the 1.20
    /// `EphemeralContainers` object, which carries none, the stored Pod named `name`.
    pub fn secret_names(&self, policy: &CompiledPolicy, name: &'a str) -> SecretNames<'a> {
        if self.kind == workload::EPHEMERAL_CONTAINERS_KIND {
            return SecretNames::StoredPod(name);
        }
        let custom = policy.kinds.resource_paths(self.group, self.kind).is_some();
        let spec = match custom {
            // A custom resource's operator hands its Pods the resource's own
            // `spec.imagePullSecrets` and `spec.serviceAccountName` (CloudNativePG's Cluster,
            // the Prometheus Operator's Prometheus): read them as a template's.
            true => self.object.get("spec").filter(|s| s.is_object()),
            false => workload::pod_spec(&policy.kinds, self.group, self.kind, self.object),
        };
        match spec {
            Some(spec) => SecretNames::Spec {
                spec,
                is_pod: self.is_pod(),
                custom,
            },
            None => SecretNames::None,
        }
    }

    /// The controller of this Pod when pinhook pins it only because `owners.pinPodsOf` lists
    /// the controller's kind (the owners the loop breaker watches); `None` otherwise.
    pub fn listed_operator(&self, policy: &CompiledPolicy) -> Option<owners::ControllerRef<'a>> {
        if !(self.group.is_empty() && self.kind == "Pod" && self.subresource.is_empty()) {
            return None;
        }
        owners::listed_operator(self.object, &policy.policy.owners.pin_pods_of)
    }

    /// The images of this Pod's containers and init containers (what a loop recreates).
    pub fn pod_images(&self) -> Vec<&'a str> {
        ["containers", "initContainers"]
            .iter()
            .filter_map(|list| self.object.get("spec")?.get(*list)?.as_array())
            .flatten()
            .filter_map(|c| c.get("image")?.as_str())
            .collect()
    }

    /// The owner revision whose memo answers for this object's images: a controller-owned
    /// Pod's `<owner uid>/<revision>` (see [`owners::owner_revision`]). Pods only: a template's
    /// digests are written into the template, which is the memo.
    pub fn owner_revision(&self) -> Option<String> {
        self.is_pod()
            .then(|| owners::owner_revision(self.object))
            .flatten()
    }

    /// Which stored Pods are this Pod's revision siblings (see
    /// [`owners::revision_of`]); `None` for anything but a Pod its controller labels by revision.
    pub fn revision(&self) -> Option<crate::admission::revision_pods::Revision<'a>> {
        if !self.is_pod() {
            return None;
        }
        let (label, value, owner_uid) = owners::revision_of(self.object)?;
        Some(crate::admission::revision_pods::Revision {
            namespace: self.namespace,
            label,
            value,
            owner_uid,
        })
    }

    /// The memo key of one tag for the owner revision `owner`: the memo answers only in the
    /// same namespace and for the same credentials, because an ownerReference is written by
    /// the user and must not unlock another namespace's digest.
    pub fn memo_key(
        &self,
        owner: &str,
        reference: &Reference,
        credentials: &[Credential],
    ) -> (String, String) {
        let fingerprints: Vec<String> = credentials
            .iter()
            .map(|c| c.fingerprint().to_string())
            .collect();
        (
            format!("{}/{owner}", self.namespace),
            format!("{} {}", reference.tag_reference(), fingerprints.join(",")),
        )
    }
}
