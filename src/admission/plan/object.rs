//! The object under review as the decision core sees it (plain data, no resolver), and the
//! pure facts about it that the core and its I/O half both need: its image sites, whether its
//! controller owns its images, which template change pins it whole, where its pull secrets
//! come from, and which owner revision's memo answers for it.

use serde_json::Value;

use crate::owners;
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

    /// A pod-bearing object that its controller compares with its own template (a
    /// Deployment's ReplicaSet): never patched, never denied (see [`owners`]).
    pub fn is_left_to_controller(&self, policy: &CompiledPolicy) -> bool {
        policy
            .kinds
            .pod_spec_pointer(self.group, self.kind)
            .is_some()
            && owners::left_to_controller(self.group, self.kind, self.object).is_some()
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

    /// Nothing about it depends on the namespace: an exempt namespace, or an object left to
    /// its controller.
    pub(super) fn is_passed_over(&self, policy: &CompiledPolicy) -> bool {
        policy.exemption(self.namespace, None).is_some() || self.is_left_to_controller(policy)
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
        match workload::pod_spec(&policy.kinds, self.group, self.kind, self.object) {
            Some(spec) => SecretNames::Spec {
                spec,
                is_pod: self.is_pod(),
            },
            None => SecretNames::None,
        }
    }

    /// The owner revision whose memo answers for this object's images: a controller-owned
    /// Pod's `<owner uid>/<revision>` (see [`owners::owner_revision`]). Pods only: a template's
    /// digests are written into the template, which is the memo.
    pub fn owner_revision(&self) -> Option<String> {
        self.is_pod()
            .then(|| owners::owner_revision(self.object))
            .flatten()
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
