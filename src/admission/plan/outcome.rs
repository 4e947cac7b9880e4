//! What a plan says: the action and reason for each image site, object-level findings, and
//! how they become a patch, a denial message and warnings; also the constructors the decision
//! core ([`super`]) builds outcomes with, and the audit rule (audit never mutates and never
//! denies). Pure.

use std::fmt;
use std::sync::Arc;

use crate::policy::{CompiledPolicy, FailureAction, Mode};
use crate::reference::{Digest, Reference};
use crate::registry::{
    Origin, RegistryError, ResolutionSource, Signers, SourceCheck, VerifiedDigest,
};
use crate::workload::{self, ImageSite, WorkloadError};

use super::Resolutions;

/// What pinhook does with one image site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Rewritten to a digest.
    Pinned,
    /// Left as it is (already pinned, not changed by this update, or audit mode).
    Unchanged,
    /// Exempt by policy: never resolved, never denied.
    Exempt,
    /// Cannot be admitted (enforce mode).
    Denied,
    /// Breaks the policy but is admitted (audit mode, or `onResolutionFailure: allow`).
    Violation,
}

/// Why an image breaks the policy: the fixed vocabulary of the violations metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    InvalidReference,
    ResolutionFailed,
    RegistryDenied,
    TagMoved,
    Unpinned,
    TagMirror,
    /// A pull secret kubelet refuses, failing every pull of the pod.
    InvalidPullSecret,
    /// More distinct images to resolve than the policy's `limits.maxImagesPerObject`.
    TooManyImages,
    /// `verifySource`: the source and the mirror the tag was resolved at name different digests,
    /// or the source says the tag does not exist.
    MirrorDisagrees,
    /// `verifySource: required`: the source did not confirm the mirror's digest.
    SourceUnconfirmed,
    /// A `verify` entry covers the digest admitted, and its signatures do not hold.
    Unverified,
}

/// What an image's signatures said, kept as found and written out only when read (the dry run,
/// `pinhook check`): a warm admission of a verified image formats nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureNote {
    /// Every entry covering the digest held: each entry's index and who signed for it, in the
    /// entries' order.
    Verified(Signers),
    /// Why not, one line (the outcome's reason says it too).
    Refused(String),
}

impl fmt::Display for SignatureNote {
    /// `verify[0]: signed by key sha256:…; verify[2]: signed by …`, or why not.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureNote::Verified(signers) => {
                for (i, (entry, signer)) in signers.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "verify[{entry}]: signed by {signer}")?;
                }
                Ok(())
            }
            SignatureNote::Refused(why) => f.write_str(why),
        }
    }
}

/// The outcome for one image site.
#[derive(Debug, Clone)]
pub struct ImageOutcome {
    pub site: ImageSite,
    pub action: Action,
    /// The image after admission (the pinned reference, or the original).
    pub result: String,
    pub digest: Option<Digest>,
    /// Why, for every action but `Pinned`.
    pub reason: Option<String>,
    /// Set for `Denied` and `Violation`.
    pub violation: Option<Reason>,
    pub source: Option<ResolutionSource>,
    /// The mirror the tag was resolved at (`registries.resolveThrough`), when it was routed.
    pub origin: Option<Origin>,
    /// What its signatures said, when a `verify` entry covers the digest admitted.
    pub signature: Option<SignatureNote>,
    /// The image as the plan parsed it, when it did and admitted it (pinned, or already
    /// pinned): the signature checks read it rather than parse it again.
    pub parsed: Option<Reference>,
    /// The verification the resolution cache kept beside the digest pinned, if it did: what
    /// the signature checks take instead of asking for verdicts, under the policy that made it.
    pub verified: Option<Arc<VerifiedDigest>>,
}

/// The outcomes for one object.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The mode that applied; the default (`Enforce`) when the namespace is exempt and no mode
    /// was read.
    pub mode: Mode,
    /// False when the kind bears no pods or policy skipped the object.
    pub pod_bearing: bool,
    pub outcomes: Vec<ImageOutcome>,
    /// Object-level findings (mirror configuration).
    pub findings: Vec<Finding>,
    pub warnings: Vec<String>,
    /// Set when the object was left exactly as written because of who made it.
    pub left_alone: Option<LeftAlone>,
}

/// Why pinhook left an object exactly as its maker wrote it, without looking at its images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftAlone {
    pub reason: LeftAloneReason,
    /// `Pod left to its controller Cluster pg (postgresql.cnpg.io/v1)`: names the owner.
    pub message: String,
}

/// The fixed vocabulary of [`LeftAlone`], for the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftAloneReason {
    /// A built-in controller compares the object with its own template.
    Controller,
    /// A Pod of a controller that is not a built-in Pod controller (an operator).
    Operator,
    /// The API mirror of a static pod.
    StaticPod,
    /// A Pod of an owner that kept recreating its Pods: the loop breaker paused pinning them.
    OwnerLoop,
}

/// A policy finding about the object as a whole rather than one image.
#[derive(Debug, Clone)]
pub struct Finding {
    /// `Denied` in enforce, `Violation` in audit.
    pub action: Action,
    pub reason: Reason,
    pub message: String,
}

/// How many denied images (and findings) a denial message names before `and N more`.
pub const LISTED_IN_MESSAGE: usize = 10;

/// `sha256:0123456789ab`: enough to tell digests apart in a 120-character warning.
pub fn short(digest: &Digest) -> String {
    let hex = digest.hex();
    format!("{}:{}", digest.algorithm(), hex.get(..12).unwrap_or(hex))
}

/// A plan that looked at no image.
pub(super) fn empty(mode: Mode, warnings: Vec<String>) -> Plan {
    Plan {
        mode,
        warnings,
        ..Plan::default()
    }
}

/// Applies the mode: audit never mutates and never denies.
pub(super) fn finish(mode: Mode, mut outcomes: Vec<ImageOutcome>, warnings: Vec<String>) -> Plan {
    if mode == Mode::Audit {
        for outcome in &mut outcomes {
            match outcome.action {
                Action::Pinned => {
                    let digest = outcome.digest.as_ref().map(short).unwrap_or_default();
                    outcome.action = Action::Unchanged;
                    outcome.reason = Some(format!("audit mode: would pin to {digest}"));
                    outcome.result = outcome.site.image.clone();
                }
                Action::Denied => outcome.action = Action::Violation,
                _ => {}
            }
        }
    }
    Plan {
        mode,
        pod_bearing: true,
        outcomes,
        findings: Vec::new(),
        warnings,
        left_alone: None,
    }
}

/// Warnings for the user: stale answers and moved tags, one per distinct tag, sorted so the
/// response is deterministic.
pub(super) fn resolution_warnings(resolutions: &Resolutions) -> Vec<String> {
    let mut warnings: Vec<String> = resolutions
        .iter()
        .filter_map(|(tag, resolved)| {
            let resolution = resolved.as_ref().ok()?;
            if let Some(from) = &resolution.moved_from {
                return Some(format!(
                    "pinhook: tag {tag} moved from {} to {}",
                    short(from),
                    short(&resolution.digest)
                ));
            }
            (resolution.source == ResolutionSource::Stale).then(|| {
                format!(
                    "pinhook: registry unavailable; {tag} pinned to digest cached {}s ago",
                    resolution.age.as_secs()
                )
            })
        })
        .collect();
    warnings.sort();
    warnings
}

pub(super) fn unchanged(site: ImageSite, reason: String) -> ImageOutcome {
    ImageOutcome {
        result: site.image.clone(),
        action: Action::Unchanged,
        digest: None,
        reason: Some(reason),
        violation: None,
        source: None,
        origin: None,
        signature: None,
        parsed: None,
        verified: None,
        site,
    }
}

/// An image already pinned to a digest, kept as written, with its parsed reference.
pub(super) fn already_pinned(site: ImageSite, reason: &str, parsed: Reference) -> ImageOutcome {
    ImageOutcome {
        parsed: Some(parsed),
        ..unchanged(site, reason.to_string())
    }
}

pub(super) fn exempt(site: ImageSite) -> ImageOutcome {
    ImageOutcome {
        action: Action::Exempt,
        reason: Some("exempt by policy".to_string()),
        ..unchanged(site, String::new())
    }
}

/// A policy failure: denied in enforce (made a violation by `finish` in audit).
pub(super) fn refused(site: ImageSite, reason: Reason, text: String) -> ImageOutcome {
    ImageOutcome {
        action: Action::Denied,
        violation: Some(reason),
        ..unchanged(site, text)
    }
}

/// An unpinned reference at validation: denied, or reported when resolution failures are
/// allowed (the mutating webhook admitted it unpinned on purpose).
pub(super) fn unpinned(policy: &CompiledPolicy, site: ImageSite) -> ImageOutcome {
    let mut outcome = refused(site, Reason::Unpinned, "not pinned to a digest".to_string());
    if policy.policy.on_resolution_failure == FailureAction::Allow {
        outcome.action = Action::Violation;
    }
    outcome
}

/// An unpinned image of a Pod `/mutate` left to its operator `owner`: refused, the reason naming
/// the operator and the two ways an admin lets its Pods in pinned. Refused whatever
/// `onResolutionFailure` says: nothing tried to resolve it, so no failure is being allowed (and
/// the ownerReference that sent it here is its author's to write).
pub(super) fn unpinned_of_operator(
    _policy: &CompiledPolicy,
    site: ImageSite,
    owner: &crate::owners::ControllerRef<'_>,
) -> ImageOutcome {
    let mut outcome = refused(site, Reason::Unpinned, String::new());
    outcome.reason = Some(format!(
        "not pinned to a digest; pinhook leaves the Pods of {} ({}) as its operator writes them: \
         pin the image where the operator reads it (policy customResources), or list \
         {{group: \"{}\", kind: {}}} in owners.pinPodsOf",
        owner.describe(),
        owner.api_version,
        owner.group(),
        owner.kind
    ));
    outcome
}

/// Warnings in audit mode for tags resolved at a mirror: where the digest enforce would pin
/// came from, one per distinct tag, sorted.
pub(super) fn origin_warnings(resolutions: &Resolutions) -> Vec<String> {
    let mut warnings: Vec<String> = resolutions
        .iter()
        .filter_map(|(tag, resolved)| {
            let origin = resolved.as_ref().ok()?.origin.as_ref()?;
            Some(format!(
                "pinhook audit: {tag} resolved at mirror {} (source {})",
                origin.mirror,
                origin.source_check.as_str().replace('_', " ")
            ))
        })
        .collect();
    warnings.sort();
    warnings
}

/// A failed resolution: a mirror its source contradicts (another digest, or no such tag), or
/// does not confirm under `verifySource: required`, is refused whatever `onResolutionFailure`
/// says (admitting the tag would let the node pull it from that mirror); anything else is
/// [`failed`].
pub(super) fn resolution_failed(
    policy: &CompiledPolicy,
    site: ImageSite,
    error: &RegistryError,
) -> ImageOutcome {
    let text = crate::error::error_chain(error);
    match disagreement(error) {
        Some((mirror, source_check, reason)) => ImageOutcome {
            origin: Some(Origin {
                mirror: mirror.to_string(),
                source_check,
            }),
            ..refused(site, reason, text)
        },
        None => failed(policy, site, text),
    }
}

fn disagreement(error: &RegistryError) -> Option<(&str, SourceCheck, Reason)> {
    match error {
        RegistryError::MirrorDisagrees { mirror, .. }
        | RegistryError::SourceRefutes { mirror, .. } => {
            Some((mirror, SourceCheck::Disagreed, Reason::MirrorDisagrees))
        }
        RegistryError::SourceUnconfirmed { mirror, .. } => {
            Some((mirror, SourceCheck::Unanswered, Reason::SourceUnconfirmed))
        }
        RegistryError::Shared(inner) => disagreement(inner),
        _ => None,
    }
}

/// A resolution failure: denied, or admitted unpinned when `onResolutionFailure: allow`.
pub(super) fn failed(policy: &CompiledPolicy, site: ImageSite, text: String) -> ImageOutcome {
    let action = match policy.policy.on_resolution_failure {
        FailureAction::Deny => Action::Denied,
        FailureAction::Allow => Action::Violation,
    };
    ImageOutcome {
        action,
        violation: Some(Reason::ResolutionFailed),
        ..unchanged(site, text)
    }
}

// === impl Plan ===

impl Plan {
    /// Adds a finding per pull secret kubelet will refuse (`refused`, one line each): kubelet
    /// then fails every pull of the pod, so enforce denies the object and audit reports it.
    /// Nothing in mode off, where nothing was judged.
    pub fn with_refused_pull_secrets(mut self, refused: Vec<String>) -> Plan {
        let action = match self.mode {
            Mode::Off => return self,
            Mode::Audit => Action::Violation,
            Mode::Enforce => Action::Denied,
        };
        self.findings
            .extend(refused.into_iter().map(|message| Finding {
                action,
                reason: Reason::InvalidPullSecret,
                message,
            }));
        self
    }

    /// The JSON Patch that applies every `Pinned` outcome.
    pub fn patch(&self) -> Result<json_patch::Patch, WorkloadError> {
        let edits: Vec<(String, String)> = self
            .outcomes
            .iter()
            .filter(|o| o.action == Action::Pinned)
            .map(|o| (o.site.pointer.clone(), o.result.clone()))
            .collect();
        workload::replace_patch(&edits)
    }

    pub fn denials(&self) -> impl Iterator<Item = &ImageOutcome> {
        self.outcomes.iter().filter(|o| o.action == Action::Denied)
    }

    /// Outcomes that break the policy but are admitted.
    pub fn violations(&self) -> impl Iterator<Item = &ImageOutcome> {
        self.outcomes
            .iter()
            .filter(|o| o.action == Action::Violation)
    }

    /// Why the object is denied, one clause per denied image or finding: the first
    /// [`LISTED_IN_MESSAGE`], then `and N more`, so the answer does not grow with the object.
    pub fn denial_message(&self) -> Option<String> {
        let mut lines = self.denials().map(ImageOutcome::describe).chain(
            self.findings
                .iter()
                .filter(|f| f.action == Action::Denied)
                .map(|f| f.message.clone()),
        );
        let listed: Vec<String> = lines.by_ref().take(LISTED_IN_MESSAGE).collect();
        if listed.is_empty() {
            return None;
        }
        let more = lines.count();
        let mut message = listed.join("; ");
        if more > 0 {
            message.push_str(&format!("; and {more} more"));
        }
        Some(message)
    }
}

// === impl ImageOutcome ===

impl ImageOutcome {
    /// `container "app" (/spec/containers/0/image) image "x:1": why`.
    pub fn describe(&self) -> String {
        format!(
            "{} {:?} ({}) image {:?}: {}",
            self.site_kind(),
            self.site.name,
            self.site.pointer,
            self.site.image,
            self.reason.as_deref().unwrap_or("no reason given")
        )
    }

    /// `container app: why (image x:1)` — for warnings, which are cut at 120 characters: the
    /// reason comes first (it usually names the repository and tag), the image last.
    pub fn describe_short(&self) -> String {
        format!(
            "{} {}: {} (image {})",
            self.site_kind(),
            self.site.name,
            self.reason.as_deref().unwrap_or("no reason given"),
            self.site.image,
        )
    }

    fn site_kind(&self) -> &'static str {
        match self.site.field {
            workload::ImageField::ImageVolume => "image volume",
            workload::ImageField::Resource => "field",
            workload::ImageField::InitContainers => "init container",
            workload::ImageField::EphemeralContainers => "ephemeral container",
            workload::ImageField::Containers => "container",
        }
    }
}

// === impl LeftAloneReason ===

impl LeftAloneReason {
    pub fn as_str(self) -> &'static str {
        match self {
            LeftAloneReason::Controller => "controller",
            LeftAloneReason::Operator => "operator",
            LeftAloneReason::StaticPod => "static_pod",
            LeftAloneReason::OwnerLoop => "owner_loop",
        }
    }
}

// === impl Reason ===

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidReference => "invalid_reference",
            Reason::ResolutionFailed => "resolution_failed",
            Reason::RegistryDenied => "registry_denied",
            Reason::TagMoved => "tag_moved",
            Reason::Unpinned => "unpinned",
            Reason::TagMirror => "tag_mirror",
            Reason::InvalidPullSecret => "invalid_pull_secret",
            Reason::TooManyImages => "too_many_images",
            Reason::MirrorDisagrees => "mirror_disagrees",
            Reason::SourceUnconfirmed => "source_unconfirmed",
            Reason::Unverified => "unverified",
        }
    }
}
