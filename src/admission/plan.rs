//! The pure decision core of admission: the compiled policy, the object, the namespace's mode
//! and the registry's answers in; a [`Plan`] out, saying per image site (and per object, for
//! mirror configuration) what happens. Shared by `/mutate`, `/validate`, the dry-run endpoint
//! and `pinhook check`.
//!
//! Never: `async`, clients, the clock. The I/O half ([`super::pipeline`]) reads the mode label
//! when [`Mutation::reads_mode`] / [`Validation::reads_mode`] say it matters, fetches pull
//! secrets and resolves [`Triaged::wanted`], then hands the answers back. Rendering
//! (AdmissionResponse, dry-run JSON, CLI table) is the caller's.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::error::error_chain;
use crate::owners;
use crate::policy::{mirrors, CompiledPolicy, FailureAction, Mode, PinTarget, ResolveMode};
use crate::reference::{Digest, Reference};
use crate::registry::{RegistryError, Resolution, ResolutionSource};
use crate::workload::{self, ImageSite, WorkloadError};

#[cfg(test)]
mod tests;

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
}

/// A policy finding about the object as a whole rather than one image.
#[derive(Debug, Clone)]
pub struct Finding {
    /// `Denied` in enforce, `Violation` in audit.
    pub action: Action,
    pub reason: Reason,
    pub message: String,
}

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

/// How many denied images (and findings) a denial message names before `and N more`.
pub const LISTED_IN_MESSAGE: usize = 10;

/// The registry's answer per tag, keyed by [`Reference::tag_reference`].
pub type Resolutions = HashMap<String, Result<Resolution, RegistryError>>;

/// `/mutate` before the namespace's mode is known.
pub struct Mutation<'a> {
    policy: &'a CompiledPolicy,
    object: Object<'a>,
}

/// `/mutate` after triage and before any registry call: [`Triaged::wanted`] says what to
/// resolve, [`Triaged::finish`] turns the answers into the plan.
pub struct Triaged<'a> {
    policy: &'a CompiledPolicy,
    mode: Mode,
    stage: Stage,
}

/// `/validate` before the namespace's mode is known; the mirror guard has already looked.
pub struct Validation<'a> {
    policy: &'a CompiledPolicy,
    object: Object<'a>,
    /// What the mirror guard found; `None` when the object configures no mirrors.
    mirrors: Option<MirrorVerdict>,
}

/// The mirror guard's answer for one object.
struct MirrorVerdict {
    /// Each pair that may answer tag pulls and is not allowed, or why the file cannot load.
    messages: Vec<String>,
    /// Facts that change nothing on the node, said as warnings.
    notes: Vec<String>,
}

enum Stage {
    /// The namespace is exempt, or the object is left to its controller: the empty plan
    /// (`Plan::default()`).
    Exempt,
    /// Nothing to look at: mode off, a template under `target: pods`, `resolve: Never`, or a
    /// kind that bears no pods.
    Skip,
    Judge(Vec<Triage>),
}

/// What to do with a site before any registry call.
enum Triage {
    Keep(ImageSite, String),
    Exempt(ImageSite),
    Refuse(ImageSite, Reason, String),
    Resolve(ImageSite, Reference),
    /// `resolve: Always` on a `tag@digest` reference: the tag must still point at the digest.
    Verify(ImageSite, Reference, Digest),
}

/// Starts the mutating decision for `object` under `policy`.
pub fn mutation<'a>(policy: &'a CompiledPolicy, object: Object<'a>) -> Mutation<'a> {
    Mutation { policy, object }
}

/// Starts the validating decision: runs the mirror guard, which judges objects the image
/// rules do not (mirror configuration).
pub fn validation<'a>(policy: &'a CompiledPolicy, object: Object<'a>) -> Validation<'a> {
    Validation {
        policy,
        mirrors: mirror_messages(policy, &object),
        object,
    }
}

/// `sha256:0123456789ab`: enough to tell digests apart in a 120-character warning.
pub fn short(digest: &Digest) -> String {
    let hex = digest.hex();
    format!("{}:{}", digest.algorithm(), hex.get(..12).unwrap_or(hex))
}

// === impl Object ===

impl Object<'_> {
    /// A Pod, or the 1.20 `EphemeralContainers` object that stands for one.
    pub fn is_pod(&self) -> bool {
        self.group.is_empty()
            && (self.kind == "Pod" || self.kind == workload::EPHEMERAL_CONTAINERS_KIND)
    }

    fn sites(&self, policy: &CompiledPolicy) -> Result<Option<Vec<ImageSite>>, WorkloadError> {
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
    fn is_skipped_template(&self, policy: &CompiledPolicy) -> bool {
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
    fn changes_template(&self, policy: &CompiledPolicy) -> bool {
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
    fn is_passed_over(&self, policy: &CompiledPolicy) -> bool {
        policy.is_exempt_namespace(self.namespace) || self.is_left_to_controller(policy)
    }
}

// === impl Mutation ===

impl<'a> Mutation<'a> {
    /// False when the policy exempts the namespace: the mode is then ignored, so the I/O half
    /// need not read the namespace's label.
    pub fn reads_mode(&self) -> bool {
        !self.object.is_passed_over(self.policy)
    }

    /// Applies the mode and sorts every site by what it needs.
    pub fn triage(self, mode: Mode) -> Result<Triaged<'a>, WorkloadError> {
        let Mutation { policy, object } = self;
        let stage = if object.is_passed_over(policy) {
            Stage::Exempt
        } else if mode == Mode::Off
            || object.is_skipped_template(policy)
            || policy.policy.resolve == ResolveMode::Never
        {
            Stage::Skip
        } else {
            let whole_template = object.changes_template(policy);
            match object.sites(policy)? {
                Some(sites) => Stage::Judge(within_limit(
                    policy,
                    sites
                        .into_iter()
                        .map(|mut site| {
                            site.is_new |= whole_template;
                            triage(policy, site)
                        })
                        .collect(),
                )),
                None => Stage::Skip,
            }
        };
        Ok(Triaged {
            policy,
            mode,
            stage,
        })
    }
}

// === impl Triaged ===

impl Triaged<'_> {
    /// The distinct tags to resolve, first site first: one registry call each. Empty when
    /// the plan needs no registry (nor pull secrets).
    pub fn wanted(&self) -> Vec<&Reference> {
        match &self.stage {
            Stage::Judge(triaged) => distinct_wanted(triaged),
            _ => Vec::new(),
        }
    }

    /// The plan, given the answers for [`Triaged::wanted`] (a missing answer counts as a
    /// failed resolution) and the warnings gathered so far (mode label, pull secrets).
    pub fn finish(self, resolutions: &Resolutions, mut warnings: Vec<String>) -> Plan {
        match self.stage {
            Stage::Exempt => Plan::default(),
            Stage::Skip => empty(self.mode, warnings),
            Stage::Judge(triaged) => {
                warnings.extend(resolution_warnings(resolutions));
                let outcomes = triaged
                    .into_iter()
                    .map(|t| outcome(self.policy, t, resolutions))
                    .collect();
                finish(self.mode, outcomes, warnings)
            }
        }
    }
}

// === impl Validation ===

impl Validation<'_> {
    /// False when nothing depends on the mode: an exempt namespace and no mirror
    /// configuration (the mirror guard ignores exemptions).
    pub fn reads_mode(&self) -> bool {
        self.mirrors.is_some() || !self.object.is_passed_over(self.policy)
    }

    /// Checks without any registry call that every image new in this request is pinned: what
    /// `/validate` enforces after all mutating webhooks (sidecar injectors included) have run.
    pub fn finish(self, mode: Mode, warnings: Vec<String>) -> Result<Plan, WorkloadError> {
        let Validation {
            policy,
            object,
            mirrors,
        } = self;
        if let Some(verdict) = mirrors {
            return Ok(mirror_plan(mode, verdict, warnings));
        }
        if object.is_passed_over(policy) {
            return Ok(Plan::default());
        }
        if mode == Mode::Off || object.is_skipped_template(policy) {
            return Ok(empty(mode, warnings));
        }
        let Some(sites) = object.sites(policy)? else {
            return Ok(empty(mode, warnings));
        };
        // In audit mode `/mutate` already reported each tag it would deny (a warning) or pin (a
        // log line); repeating "not pinned" here would only say that audit does not mutate.
        // Unless nothing resolves (`resolve: Never`).
        let judge_unpinned = mode == Mode::Enforce || policy.policy.resolve == ResolveMode::Never;
        let outcomes = sites
            .into_iter()
            .map(|site| match triage(policy, site) {
                Triage::Keep(site, reason) => unchanged(site, reason),
                Triage::Exempt(site) => exempt(site),
                Triage::Refuse(site, Reason::RegistryDenied, _) | Triage::Resolve(site, _)
                    if !judge_unpinned =>
                {
                    unchanged(site, "not pinned (audit mode)".to_string())
                }
                Triage::Refuse(site, reason, text) => refused(site, reason, text),
                Triage::Resolve(site, _) => unpinned(policy, site),
                Triage::Verify(site, ..) => {
                    unchanged(site, "already pinned to a digest".to_string())
                }
            })
            .collect();
        Ok(finish(mode, outcomes, warnings))
    }
}

/// The mirror guard's plan. It guards every image of the cluster, so image exemptions, exempt
/// namespaces and `target: pods` do not switch it off; only mode `off` (global or the
/// namespace's label) does.
fn mirror_plan(mode: Mode, verdict: MirrorVerdict, mut warnings: Vec<String>) -> Plan {
    // Facts that change nothing on the node (an ignored duplicate entry, a drop-in that
    // replaces another) are said in every mode but off.
    if mode != Mode::Off {
        warnings.extend(verdict.notes.iter().map(|note| format!("pinhook: {note}")));
    }
    let messages = verdict.messages;
    let action = match mode {
        Mode::Off => return empty(mode, warnings),
        Mode::Audit => Action::Violation,
        Mode::Enforce => Action::Denied,
    };
    let findings = messages
        .into_iter()
        .map(|message| Finding {
            action,
            reason: Reason::TagMirror,
            message,
        })
        .collect();
    Plan {
        findings,
        ..empty(mode, warnings)
    }
}

/// What the mirror guard objects to (`messages`) and notes, or `None` when the object
/// configures no mirrors.
fn mirror_messages(policy: &CompiledPolicy, object: &Object<'_>) -> Option<MirrorVerdict> {
    match mirrors::review(
        &policy.policy.mirrors,
        object.group,
        object.kind,
        object.object,
    ) {
        Ok(None) => None,
        Ok(Some(review)) => Some(MirrorVerdict {
            messages: review.violations.into_iter().map(|v| v.message).collect(),
            notes: review.notes,
        }),
        Err(e) => Some(MirrorVerdict {
            messages: vec![e.to_string()],
            notes: Vec::new(),
        }),
    }
}

/// A plan that looked at no image.
fn empty(mode: Mode, warnings: Vec<String>) -> Plan {
    Plan {
        mode,
        warnings,
        ..Plan::default()
    }
}

fn triage(policy: &CompiledPolicy, site: ImageSite) -> Triage {
    if !site.is_new {
        return Triage::Keep(site, "not changed by this update".to_string());
    }
    let reference = match Reference::parse(&site.image) {
        Ok(reference) => reference,
        Err(e) => {
            let reason = format!("invalid image reference: {e}");
            return Triage::Refuse(site, Reason::InvalidReference, reason);
        }
    };
    if policy.is_exempt_image(&reference) {
        return Triage::Exempt(site);
    }
    if let Some(digest) = reference.digest().cloned() {
        let verify = policy.policy.resolve == ResolveMode::Always && reference.tag().is_some();
        return match verify {
            true => match policy.hosts.check_host(reference.domain()) {
                Ok(()) => Triage::Verify(site, reference, digest),
                Err(e) => Triage::Refuse(site, Reason::RegistryDenied, e.to_string()),
            },
            false => Triage::Keep(site, "already pinned to a digest".to_string()),
        };
    }
    match policy.hosts.check_host(reference.domain()) {
        Ok(()) => Triage::Resolve(site, reference),
        Err(e) => Triage::Refuse(site, Reason::RegistryDenied, e.to_string()),
    }
}

/// The triaged sites, unless they ask for more distinct images than the policy's
/// `limits.maxImagesPerObject`: then every site that needed the registry is refused, naming
/// the limit, and nothing is resolved (one object cannot make pinhook send thousands of
/// requests, nor hold the review past the apiserver's deadline).
fn within_limit(policy: &CompiledPolicy, triaged: Vec<Triage>) -> Vec<Triage> {
    let limit = policy.policy.limits.max_images_per_object;
    let distinct = distinct_wanted(&triaged).len();
    if distinct <= limit {
        return triaged;
    }
    let text = format!(
        "the object names {distinct} distinct images to resolve, more than the policy's limit of \
         {limit} (limits.maxImagesPerObject); none was resolved"
    );
    triaged
        .into_iter()
        .map(|t| match t {
            Triage::Resolve(site, _) | Triage::Verify(site, _, _) => {
                Triage::Refuse(site, Reason::TooManyImages, text.clone())
            }
            other => other,
        })
        .collect()
}

/// The distinct tags among `triaged` that need the registry, first site first.
fn distinct_wanted(triaged: &[Triage]) -> Vec<&Reference> {
    let mut seen = HashSet::new();
    triaged
        .iter()
        .filter_map(|t| match t {
            Triage::Resolve(_, reference) | Triage::Verify(_, reference, _) => Some(reference),
            _ => None,
        })
        .filter(|reference| seen.insert(reference.tag_reference()))
        .collect()
}

fn outcome(policy: &CompiledPolicy, triage: Triage, resolutions: &Resolutions) -> ImageOutcome {
    match triage {
        Triage::Keep(site, reason) => unchanged(site, reason),
        Triage::Exempt(site) => exempt(site),
        Triage::Refuse(site, reason, text) => refused(site, reason, text),
        Triage::Resolve(site, reference) => match resolutions.get(&reference.tag_reference()) {
            Some(Ok(resolution)) => ImageOutcome {
                result: reference.pinned(&resolution.digest, policy.form()),
                digest: Some(resolution.digest.clone()),
                action: Action::Pinned,
                reason: None,
                violation: None,
                source: Some(resolution.source),
                site,
            },
            Some(Err(e)) => failed(policy, site, error_chain(e)),
            None => failed(policy, site, "resolution did not run".to_string()),
        },
        Triage::Verify(site, reference, pinned) => {
            match resolutions.get(&reference.tag_reference()) {
                Some(Ok(resolution)) if resolution.digest == pinned => unchanged(
                    site,
                    "already pinned; the tag still points at this digest".to_string(),
                ),
                Some(Ok(resolution)) => {
                    let text = format!(
                        "tag {} now points at {}, the reference pins {pinned}",
                        reference.effective_tag(),
                        resolution.digest
                    );
                    refused(site, Reason::TagMoved, text)
                }
                Some(Err(e)) => failed(policy, site, error_chain(e)),
                None => failed(policy, site, "resolution did not run".to_string()),
            }
        }
    }
}

/// Applies the mode: audit never mutates and never denies.
fn finish(mode: Mode, mut outcomes: Vec<ImageOutcome>, warnings: Vec<String>) -> Plan {
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
    }
}

/// Warnings for the user: stale answers and moved tags, one per distinct tag, sorted so the
/// response is deterministic.
fn resolution_warnings(resolutions: &Resolutions) -> Vec<String> {
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

fn unchanged(site: ImageSite, reason: String) -> ImageOutcome {
    ImageOutcome {
        result: site.image.clone(),
        action: Action::Unchanged,
        digest: None,
        reason: Some(reason),
        violation: None,
        source: None,
        site,
    }
}

fn exempt(site: ImageSite) -> ImageOutcome {
    ImageOutcome {
        action: Action::Exempt,
        reason: Some("exempt by policy".to_string()),
        ..unchanged(site, String::new())
    }
}

/// A policy failure: denied in enforce (made a violation by `finish` in audit).
fn refused(site: ImageSite, reason: Reason, text: String) -> ImageOutcome {
    ImageOutcome {
        action: Action::Denied,
        violation: Some(reason),
        ..unchanged(site, text)
    }
}

/// An unpinned reference at validation: denied, or reported when resolution failures are
/// allowed (the mutating webhook admitted it unpinned on purpose).
fn unpinned(policy: &CompiledPolicy, site: ImageSite) -> ImageOutcome {
    let mut outcome = refused(site, Reason::Unpinned, "not pinned to a digest".to_string());
    if policy.policy.on_resolution_failure == FailureAction::Allow {
        outcome.action = Action::Violation;
    }
    outcome
}

/// A resolution failure: denied, or admitted unpinned when `onResolutionFailure: allow`.
fn failed(policy: &CompiledPolicy, site: ImageSite, text: String) -> ImageOutcome {
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

    /// One line per denied image (which container, where, which image, why) and per denied
    /// finding.
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
            workload::ImageField::InitContainers => "init container",
            workload::ImageField::EphemeralContainers => "ephemeral container",
            workload::ImageField::Containers => "container",
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
        }
    }
}
