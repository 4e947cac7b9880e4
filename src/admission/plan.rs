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

use crate::policy::{CompiledPolicy, Mode, ResolveMode};
use crate::reference::{Digest, Reference};
use crate::registry::{RegistryError, Resolution};
use crate::workload::{ImageSite, WorkloadError};

#[cfg(test)]
mod origin_tests;
#[cfg(test)]
mod tests;

mod mirror;
mod object;
mod outcome;
mod signed;

pub use object::Object;
pub use outcome::{
    short, Action, Finding, ImageOutcome, LeftAlone, LeftAloneReason, Plan, Reason, SignatureNote,
    LISTED_IN_MESSAGE,
};
pub use signed::{checks as signature_checks, CheckKey, SignatureCheck, SignatureChecks, Verdicts};

use mirror::{mirror_messages, mirror_plan, MirrorVerdict};
use outcome::{
    already_pinned, empty, exempt, failed, finish, origin_warnings, refused, resolution_failed,
    resolution_warnings, unchanged, unpinned, unpinned_of_operator,
};

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

enum Stage {
    /// The namespace is exempt, or the object is left alone because of who made it: this
    /// empty plan, which says why when it was left alone.
    Exempt(Plan),
    /// Nothing to look at: mode off, a template under `target: pods`, `resolve: Never`, or a
    /// kind that bears no pods.
    Skip,
    Judge(Vec<Triage>),
}

/// What to do with a site before any registry call.
enum Triage {
    Keep(ImageSite, String),
    /// Already pinned to a digest, kept as written.
    Pinned(ImageSite, Reference),
    Exempt(ImageSite),
    Refuse(ImageSite, Reason, String),
    Resolve(ImageSite, Reference),
    /// `resolve: Always` on a `tag@digest` reference: the tag must still point at the digest.
    Verify(ImageSite, Reference, Digest),
}

/// Why an image already pinned to a digest is kept as written.
const ALREADY_PINNED: &str = "already pinned to a digest";

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
            Stage::Exempt(object.passed_over_plan(policy, || object.left_alone(policy)))
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
                            triage(policy, object.namespace, site)
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
            Stage::Exempt(plan) => plan,
            Stage::Skip => empty(self.mode, warnings),
            Stage::Judge(triaged) => {
                warnings.extend(resolution_warnings(resolutions));
                if self.mode == Mode::Audit {
                    warnings.extend(origin_warnings(resolutions));
                }
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
        self.mirrors.is_some() || !self.object.is_passed_over_check(self.policy)
    }

    /// Checks without any registry call that every image new in this request is pinned (and that
    /// mirror configuration lets no mirror answer tag pulls): what
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
        if object.is_passed_over_check(policy) {
            return Ok(object.passed_over_plan(policy, || object.left_unchecked(policy)));
        }
        if mode == Mode::Off || object.is_skipped_template(policy) {
            return Ok(empty(mode, warnings));
        }
        let Some(sites) = object.sites(policy)? else {
            return Ok(empty(mode, warnings));
        };
        // An operator's Pod: `/mutate` left it as written and said nothing; here it is checked
        // like any Pod (issue 43), and its denial names the operator and the two fixes.
        let operator = object.operator(policy);
        // In audit mode `/mutate` already reported each tag it would deny (a warning) or pin (a
        // log line); repeating "not pinned" here would only say that audit does not mutate.
        // Unless nothing resolves (`resolve: Never`), or `/mutate` left the Pod to its operator.
        let judge_unpinned = mode == Mode::Enforce
            || policy.policy.resolve == ResolveMode::Never
            || operator.is_some();
        let outcomes = sites
            .into_iter()
            .map(|site| match triage(policy, object.namespace, site) {
                Triage::Keep(site, reason) => unchanged(site, reason),
                Triage::Pinned(site, parsed) => already_pinned(site, ALREADY_PINNED, parsed),
                Triage::Exempt(site) => exempt(site),
                Triage::Refuse(site, Reason::RegistryDenied, _) | Triage::Resolve(site, _)
                    if !judge_unpinned =>
                {
                    unchanged(site, "not pinned (audit mode)".to_string())
                }
                Triage::Refuse(site, reason, text) => refused(site, reason, text),
                Triage::Resolve(site, _) => match &operator {
                    Some(owner) => unpinned_of_operator(policy, site, owner),
                    None => unpinned(policy, site),
                },
                Triage::Verify(site, parsed, _) => already_pinned(site, ALREADY_PINNED, parsed),
            })
            .collect();
        Ok(finish(mode, outcomes, warnings))
    }
}

fn triage(policy: &CompiledPolicy, namespace: &str, site: ImageSite) -> Triage {
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
    if policy.exemption(namespace, Some(&reference)).is_some() {
        return Triage::Exempt(site);
    }
    if let Some(digest) = reference.digest().cloned() {
        let verify = policy.policy.resolve == ResolveMode::Always && reference.tag().is_some();
        return match verify {
            true => match policy.hosts.check_host(reference.domain()) {
                Ok(()) => Triage::Verify(site, reference, digest),
                Err(e) => Triage::Refuse(site, Reason::RegistryDenied, e.to_string()),
            },
            false => Triage::Pinned(site, reference),
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
        Triage::Pinned(site, parsed) => already_pinned(site, ALREADY_PINNED, parsed),
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
                origin: resolution.origin.clone(),
                signature: None,
                parsed: Some(reference),
                verified: resolution.verified.clone(),
                site,
            },
            Some(Err(e)) => resolution_failed(policy, site, e),
            None => failed(policy, site, "resolution did not run".to_string()),
        },
        Triage::Verify(site, reference, pinned) => {
            match resolutions.get(&reference.tag_reference()) {
                Some(Ok(resolution)) if resolution.digest == pinned => already_pinned(
                    site,
                    "already pinned; the tag still points at this digest",
                    reference,
                ),
                Some(Ok(resolution)) => {
                    let text = format!(
                        "tag {} now points at {}, the reference pins {pinned}",
                        reference.effective_tag(),
                        resolution.digest
                    );
                    refused(site, Reason::TagMoved, text)
                }
                Some(Err(e)) => resolution_failed(policy, site, e),
                None => failed(policy, site, "resolution did not run".to_string()),
            }
        }
    }
}
