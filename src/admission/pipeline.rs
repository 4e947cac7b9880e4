//! The admission pipeline shared by `/mutate`, `/validate`, the dry-run endpoint and
//! `pinhook check`: apply the policy to an object, find its images, resolve each distinct tag
//! once and concurrently, and say per image what happens to it. Rendering (AdmissionResponse,
//! dry-run JSON, CLI table) is the caller's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;
use tokio::time::Instant;

use crate::cluster::NamespaceLabels;
use crate::policy::{
    mirrors, CompiledPolicy, FailureAction, Mode, PinTarget, PolicyHandle, ResolveMode, MODE_LABEL,
};
use crate::reference::{Digest, Reference};
use crate::registry::keyring::Keyring;
use crate::registry::pull_secrets::{PodContext, PodKeyring, PullSecrets};
use crate::registry::{RegistryError, Resolution, ResolutionSource, Resolver};
use crate::workload::{self, ImageSite, WorkloadError};

/// `main` prints error chains through this path; the printer lives in [`crate::error`].
pub use crate::error::error_chain;

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
    /// The mode that applied (`Off` when nothing was looked at).
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

/// One object to admit.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    /// The object's name (empty for `generateName` creations).
    pub name: &'a str,
    pub object: &'a Value,
    pub old_object: Option<&'a Value>,
    /// Nothing may be recorded (cache entries, tag moves).
    pub dry_run: bool,
    /// Resolve through this instead of pinhook's own resolvers (a dry run's memo).
    pub resolver: Option<&'a dyn Resolver>,
}

/// Why the pipeline could not plan at all (as opposed to denying single images).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("cannot read the object's images")]
    Workload(#[from] WorkloadError),
}

/// The environment the pipeline runs in.
pub struct Pinner {
    policy: PolicyHandle,
    resolver: Arc<dyn Resolver>,
    /// Answers dry runs without recording anything.
    dry_run_resolver: Arc<dyn Resolver>,
    secrets: Arc<dyn PullSecrets>,
    namespaces: Arc<dyn NamespaceLabels>,
    /// `target: pods`: the digest each owner revision got, so all its pods run the same bytes.
    owners: moka::sync::Cache<(String, String), Digest>,
}

/// The parts a [`Pinner`] is built from.
pub struct PinnerParts {
    pub policy: PolicyHandle,
    pub resolver: Arc<dyn Resolver>,
    pub dry_run_resolver: Arc<dyn Resolver>,
    pub secrets: Arc<dyn PullSecrets>,
    pub namespaces: Arc<dyn NamespaceLabels>,
    /// How long an owner revision keeps its digests (the cache's hit TTL).
    pub owner_ttl: Duration,
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

type Resolved = Result<Resolution, RegistryError>;

/// How long the namespace's mode label may take to read (it is cached after that).
const NAMESPACE_READ_TIMEOUT: Duration = Duration::from_secs(2);

// === impl Pinner ===

impl Pinner {
    pub fn new(parts: PinnerParts) -> Pinner {
        Pinner {
            policy: parts.policy,
            resolver: parts.resolver,
            dry_run_resolver: parts.dry_run_resolver,
            secrets: parts.secrets,
            namespaces: parts.namespaces,
            owners: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(parts.owner_ttl)
                .build(),
        }
    }

    pub fn policy(&self) -> &PolicyHandle {
        &self.policy
    }

    /// The resolver that records nothing, for dry runs to wrap.
    pub fn dry_run_resolver(&self) -> Arc<dyn Resolver> {
        self.dry_run_resolver.clone()
    }

    /// The mode for a namespace (its label, else the policy's), with a warning when the label
    /// cannot be read or is not a mode.
    pub async fn mode_for(
        &self,
        policy: &CompiledPolicy,
        namespace: &str,
        warnings: &mut Vec<String>,
    ) -> Mode {
        if namespace.is_empty() {
            return policy.policy.mode;
        }
        let read = self.namespaces.label(namespace, MODE_LABEL);
        let label = match tokio::time::timeout(NAMESPACE_READ_TIMEOUT, read).await {
            Ok(Ok(label)) => label,
            Ok(Err(e)) => {
                warnings.push(format!("pinhook: cannot read namespace {namespace}: {e}"));
                None
            }
            Err(_) => {
                warnings.push(format!(
                    "pinhook: reading namespace {namespace} timed out; using the policy's mode"
                ));
                None
            }
        };
        policy.mode_for(label.as_deref()).unwrap_or_else(|e| {
            warnings.push(format!(
                "pinhook: namespace {namespace}: {e}; using {}",
                policy.policy.mode
            ));
            policy.policy.mode
        })
    }

    /// Plans the mutation of one object: pin what policy says, deny or report the rest.
    /// Resolution of all distinct tags runs concurrently, bounded by `budget` as a whole.
    pub async fn plan(&self, target: &Target<'_>, budget: Duration) -> Result<Plan, PipelineError> {
        let deadline = Instant::now() + budget;
        let (policy, mode, mut warnings) = match self.gate(target).await {
            Ok(gate) => gate,
            Err(plan) => return Ok(plan),
        };
        if policy.policy.resolve == ResolveMode::Never {
            return Ok(empty(mode, warnings));
        }
        let Some(sites) = sites_of(&policy, target)? else {
            return Ok(empty(mode, warnings));
        };
        let triaged: Vec<Triage> = sites
            .into_iter()
            .map(|site| triage(&policy, site))
            .collect();
        let needs_registry = triaged
            .iter()
            .any(|t| matches!(t, Triage::Resolve(..) | Triage::Verify(..)));
        if needs_registry {
            let PodKeyring {
                keyring,
                warnings: found,
            } = self.keyring_for(&policy, target, deadline).await;
            warnings.extend(found);
            let digests = self.resolve_all(&triaged, target, &keyring, deadline).await;
            warnings.extend(resolution_warnings(&digests));
            let outcomes = triaged
                .into_iter()
                .map(|t| outcome(&policy, t, &digests))
                .collect();
            return Ok(finish(mode, outcomes, warnings));
        }
        let outcomes = triaged
            .into_iter()
            .map(|t| outcome(&policy, t, &HashMap::new()))
            .collect();
        Ok(finish(mode, outcomes, warnings))
    }

    /// Checks without any registry call that every image new in this request is pinned: what
    /// `/validate` enforces after all mutating webhooks (sidecar injectors included) have run.
    pub async fn check_pinned(&self, target: &Target<'_>) -> Result<Plan, PipelineError> {
        if let Some(plan) = self.mirror_plan(target).await {
            return Ok(plan);
        }
        let (policy, mode, warnings) = match self.gate(target).await {
            Ok(gate) => gate,
            Err(plan) => return Ok(plan),
        };
        let Some(sites) = sites_of(&policy, target)? else {
            return Ok(empty(mode, warnings));
        };
        // In audit mode `/mutate` already reported each tag it would deny (a warning) or pin (a
        // log line); repeating "not pinned" here would only say that audit does not mutate.
        // Unless nothing resolves (`resolve: Never`).
        let judge_unpinned = mode == Mode::Enforce || policy.policy.resolve == ResolveMode::Never;
        let outcomes = sites
            .into_iter()
            .map(|site| match triage(&policy, site) {
                Triage::Keep(site, reason) => unchanged(site, reason),
                Triage::Exempt(site) => exempt(site),
                Triage::Refuse(site, Reason::RegistryDenied, _) | Triage::Resolve(site, _)
                    if !judge_unpinned =>
                {
                    unchanged(site, "not pinned (audit mode)".to_string())
                }
                Triage::Refuse(site, reason, text) => refused(site, reason, text),
                Triage::Resolve(site, _) => unpinned(&policy, site),
                Triage::Verify(site, ..) => {
                    unchanged(site, "already pinned to a digest".to_string())
                }
            })
            .collect();
        Ok(finish(mode, outcomes, warnings))
    }

    /// The mirror guard's plan, or `None` when the object configures no mirrors. It guards
    /// every image of the cluster, so image exemptions, exempt namespaces and `target: pods`
    /// do not switch it off; only mode `off` (global or the namespace's label) does.
    async fn mirror_plan(&self, target: &Target<'_>) -> Option<Plan> {
        let policy = self.policy.current();
        let messages = mirror_messages(&policy, target)?;
        let mut warnings = Vec::new();
        let mode = self
            .mode_for(&policy, target.namespace, &mut warnings)
            .await;
        let action = match mode {
            Mode::Off => return Some(empty(mode, warnings)),
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
        Some(Plan {
            findings,
            ..empty(mode, warnings)
        })
    }

    /// The policy and mode that apply to `target`, or the empty plan when the policy says not
    /// to look (exempt namespace, mode off, a template under `target: pods`).
    async fn gate(
        &self,
        target: &Target<'_>,
    ) -> Result<(Arc<CompiledPolicy>, Mode, Vec<String>), Plan> {
        let policy = self.policy.current();
        let mut warnings = Vec::new();
        if policy.is_exempt_namespace(target.namespace) {
            return Err(Plan::default());
        }
        let mode = self
            .mode_for(&policy, target.namespace, &mut warnings)
            .await;
        let skip_templates = policy.policy.target == PinTarget::Pods && !is_pod(target);
        if mode == Mode::Off || skip_templates {
            return Err(empty(mode, warnings));
        }
        Ok((policy, mode, warnings))
    }

    async fn keyring_for(
        &self,
        policy: &CompiledPolicy,
        target: &Target<'_>,
        deadline: Instant,
    ) -> PodKeyring {
        // The 1.20 EphemeralContainers object has no PodSpec: the pod is read instead.
        let own_spec = target.kind != workload::EPHEMERAL_CONTAINERS_KIND;
        let pod = PodContext {
            namespace: target.namespace,
            pod_spec: own_spec
                .then(|| {
                    workload::pod_spec(&policy.kinds, target.group, target.kind, target.object)
                })
                .flatten(),
            is_pod: is_pod(target),
            pod_name: target.name,
        };
        match tokio::time::timeout_at(deadline, self.secrets.keyring_for(&pod)).await {
            Ok(keyring) => keyring,
            Err(_) => PodKeyring {
                keyring: Keyring::new(),
                warnings: vec![
                    "pinhook: reading pull secrets timed out; resolved without them".to_string(),
                ],
            },
        }
    }

    async fn resolve_all(
        &self,
        triaged: &[Triage],
        target: &Target<'_>,
        keyring: &Keyring,
        deadline: Instant,
    ) -> HashMap<String, Resolved> {
        let mut unique: HashMap<String, &Reference> = HashMap::new();
        for t in triaged {
            if let Triage::Resolve(_, reference) | Triage::Verify(_, reference, _) = t {
                unique.entry(reference.tag_reference()).or_insert(reference);
            }
        }
        let owner = owner_revision(target);
        let calls = unique.into_iter().map(|(key, reference)| {
            let owner = owner.clone();
            async move {
                let result = self
                    .resolve_one(reference, target, owner, keyring, deadline)
                    .await;
                (key, result)
            }
        });
        join_all(calls).await.into_iter().collect()
    }

    async fn resolve_one(
        &self,
        reference: &Reference,
        target: &Target<'_>,
        owner: Option<String>,
        keyring: &Keyring,
        deadline: Instant,
    ) -> Resolved {
        let credentials = keyring.lookup(reference);
        // The memo answers only for the same namespace and the same credentials: an
        // ownerReference is written by the user and must not unlock another namespace's digest.
        let owner_key = owner.map(|o| {
            let fingerprints: Vec<String> = credentials
                .iter()
                .map(|c| c.fingerprint().to_string())
                .collect();
            let tag = reference.tag_reference();
            (
                format!("{}/{o}", target.namespace),
                format!("{tag} {}", fingerprints.join(",")),
            )
        });
        if let Some(resolution) = owner_key.as_ref().and_then(|k| self.owner_digest(k)) {
            return Ok(resolution);
        }
        let resolver: &dyn Resolver = match (target.resolver, target.dry_run) {
            (Some(resolver), _) => resolver,
            (None, true) => self.dry_run_resolver.as_ref(),
            (None, false) => self.resolver.as_ref(),
        };
        let started = Instant::now();
        let call = resolver.resolve(reference, &credentials);
        let result =
            match tokio::time::timeout_at(deadline, call).await {
                Ok(result) => result,
                // Out of time: the last known digest beats a denial, as when the registry is down.
                Err(_) => resolver.last_known(reference, &credentials).ok_or_else(|| {
                    RegistryError::Timeout {
                        registry: reference.domain().to_string(),
                        timeout: Duration::from_millis(started.elapsed().as_millis() as u64),
                    }
                }),
            };
        if let (Ok(resolution), Some(key), false) = (&result, owner_key, target.dry_run) {
            self.owners.insert(key, resolution.digest.clone());
        }
        result
    }

    fn owner_digest(&self, key: &(String, String)) -> Option<Resolution> {
        let digest = self.owners.get(key)?;
        Some(Resolution {
            digest,
            credential: crate::registry::Fingerprint::anonymous(),
            source: ResolutionSource::Cache,
            moved_from: None,
            age: Duration::ZERO,
        })
    }
}

/// What the mirror guard objects to, or `None` when the object configures no mirrors.
fn mirror_messages(policy: &CompiledPolicy, target: &Target<'_>) -> Option<Vec<String>> {
    match mirrors::check(
        &policy.policy.mirrors,
        target.group,
        target.kind,
        target.object,
    ) {
        Ok(None) => None,
        Ok(Some(violations)) => Some(violations.into_iter().map(|v| v.message).collect()),
        Err(e) => Some(vec![e.to_string()]),
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

fn is_pod(target: &Target<'_>) -> bool {
    target.group.is_empty()
        && (target.kind == "Pod" || target.kind == workload::EPHEMERAL_CONTAINERS_KIND)
}

fn sites_of(
    policy: &CompiledPolicy,
    target: &Target<'_>,
) -> Result<Option<Vec<ImageSite>>, WorkloadError> {
    workload::image_sites(
        &policy.kinds,
        target.group,
        target.kind,
        target.subresource,
        target.object,
        target.old_object,
    )
}

/// For a pod made by a controller: its owner's uid and revision hash (`pod-template-hash`,
/// `controller-revision-hash`), so every pod of one revision gets the same digest.
fn owner_revision(target: &Target<'_>) -> Option<String> {
    if !is_pod(target) {
        return None;
    }
    let metadata = target.object.get("metadata")?;
    let owner = metadata
        .get("ownerReferences")?
        .as_array()?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))?;
    let uid = owner.get("uid")?.as_str()?;
    let labels = metadata.get("labels");
    let revision = ["pod-template-hash", "controller-revision-hash"]
        .iter()
        .find_map(|l| labels?.get(*l)?.as_str())
        .unwrap_or("");
    Some(format!("{uid}/{revision}"))
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

fn outcome(
    policy: &CompiledPolicy,
    triage: Triage,
    digests: &HashMap<String, Resolved>,
) -> ImageOutcome {
    match triage {
        Triage::Keep(site, reason) => unchanged(site, reason),
        Triage::Exempt(site) => exempt(site),
        Triage::Refuse(site, reason, text) => refused(site, reason, text),
        Triage::Resolve(site, reference) => match digests.get(&reference.tag_reference()) {
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
        Triage::Verify(site, reference, pinned) => match digests.get(&reference.tag_reference()) {
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
        },
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
fn resolution_warnings(digests: &HashMap<String, Resolved>) -> Vec<String> {
    let mut warnings: Vec<String> = digests
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

/// `sha256:0123456789ab`: enough to tell digests apart in a 120-character warning.
pub fn short(digest: &Digest) -> String {
    let hex = digest.hex();
    format!("{}:{}", digest.algorithm(), hex.get(..12).unwrap_or(hex))
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
    pub fn denial_message(&self) -> Option<String> {
        let lines: Vec<String> = self
            .denials()
            .map(ImageOutcome::describe)
            .chain(
                self.findings
                    .iter()
                    .filter(|f| f.action == Action::Denied)
                    .map(|f| f.message.clone()),
            )
            .collect();
        if lines.is_empty() {
            None
        } else {
            Some(lines.join("; "))
        }
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
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use serde_json::json;

    use super::*;
    use crate::cluster::NoNamespaces;
    use crate::policy::Policy;
    use crate::registry::pull_secrets::NodeOnly;
    use crate::registry::testing::{Answer, Scripted};

    fn pinner(resolver: Arc<Scripted>) -> Result<Pinner, crate::policy::PolicyError> {
        Ok(Pinner::new(PinnerParts {
            policy: PolicyHandle::new(Policy::default().compile()?),
            resolver: resolver.clone(),
            dry_run_resolver: resolver,
            secrets: Arc::new(NodeOnly {
                node: Keyring::new(),
            }),
            namespaces: Arc::new(NoNamespaces),
            owner_ttl: Duration::from_secs(60),
        }))
    }

    /// Ten containers naming five distinct tags: five registry calls, all at once, so the
    /// admission costs one registry round trip, not five.
    #[tokio::test]
    async fn distinct_tags_resolve_once_each_and_concurrently(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let slow = Scripted::slow(&[Answer::Digest('a')], Duration::from_millis(200));
        let pinner = pinner(slow.clone())?;
        let containers: Vec<Value> = (0..10)
            .map(|i| json!({"name": format!("c{i}"), "image": format!("registry.example/team/svc{}:1.0", i % 5)}))
            .collect();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}});
        let target = Target {
            group: "",
            kind: "Pod",
            subresource: "",
            namespace: "team",
            name: "p",
            object: &pod,
            old_object: None,
            dry_run: false,
            resolver: None,
        };
        let started = std::time::Instant::now();
        let plan = pinner.plan(&target, Duration::from_secs(5)).await?;
        let took = started.elapsed();
        assert_eq!(plan.outcomes.len(), 10);
        assert!(plan.outcomes.iter().all(|o| o.action == Action::Pinned));
        assert_eq!(slow.calls(), 5);
        assert_eq!(slow.most_at_once.load(Ordering::SeqCst), 5);
        assert!(took < Duration::from_millis(600), "took {took:?}");
        Ok(())
    }
}
