//! The admission pipeline shared by `/mutate`, the dry-run endpoint and `pinhook check`:
//! find an object's images, resolve each distinct tag once and concurrently, and say per image
//! what happens to it. Rendering (AdmissionResponse, dry-run JSON, CLI table) is the caller's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures::future::join_all;
use serde_json::Value;

use crate::reference::{Digest, PinForm, Reference};
use crate::registry::keyring::Keyring;
use crate::registry::pull_secrets::{PodContext, PodKeyring, PullSecrets};
use crate::registry::{RegistryError, ResolutionSource, Resolver};
use crate::workload::{self, ImageSite, PodSpecKinds, WorkloadError};

/// What pinhook does with one image site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Rewritten to a digest.
    Pinned,
    /// Left as it is (already pinned, or not changed by this update).
    Unchanged,
    /// Cannot be admitted (invalid reference, resolution failed).
    Denied,
}

/// The outcome for one image site.
#[derive(Debug, Clone)]
pub struct ImageOutcome {
    pub site: ImageSite,
    pub action: Action,
    /// The image after admission (the pinned reference, or the original).
    pub result: String,
    pub digest: Option<Digest>,
    /// Why, for `Unchanged` and `Denied`.
    pub reason: Option<String>,
    pub source: Option<ResolutionSource>,
}

/// The outcomes for one object.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// False when the kind bears no pods (nothing was looked at).
    pub pod_bearing: bool,
    pub outcomes: Vec<ImageOutcome>,
    pub warnings: Vec<String>,
}

/// One object to admit.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    /// The object's name (empty for `generateName` creations).
    pub name: &'a str,
    pub object: &'a Value,
    pub old_object: Option<&'a Value>,
}

/// Why the pipeline could not plan at all (as opposed to denying single images).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("cannot read the object's images")]
    Workload(#[from] WorkloadError),
}

/// Pins images: the configuration-free part of admission.
pub struct Pinner {
    kinds: PodSpecKinds,
    resolver: Arc<dyn Resolver>,
    secrets: Arc<dyn PullSecrets>,
    form: PinForm,
}

// === impl Pinner ===

impl Pinner {
    pub fn new(
        kinds: PodSpecKinds,
        resolver: Arc<dyn Resolver>,
        secrets: Arc<dyn PullSecrets>,
        form: PinForm,
    ) -> Pinner {
        Pinner {
            kinds,
            resolver,
            secrets,
            form,
        }
    }

    pub fn kinds(&self) -> &PodSpecKinds {
        &self.kinds
    }

    /// Plans one object. Resolution of all distinct tags runs concurrently and is bounded by
    /// `budget` as a whole.
    pub async fn plan(&self, target: &Target<'_>, budget: Duration) -> Result<Plan, PipelineError> {
        let Some(sites) = workload::image_sites(
            &self.kinds,
            target.group,
            target.kind,
            target.subresource,
            target.object,
            target.old_object,
        )?
        else {
            return Ok(Plan::default());
        };
        let deadline = Instant::now() + budget;
        let triaged: Vec<Triage> = sites.into_iter().map(triage).collect();
        let needs_registry = triaged.iter().any(|t| matches!(t, Triage::Resolve(..)));
        let PodKeyring {
            keyring,
            mut warnings,
        } = if needs_registry {
            self.keyring_for(target, deadline).await
        } else {
            PodKeyring::default()
        };
        let digests = self.resolve_all(&triaged, &keyring, deadline).await;
        warnings.extend(resolution_warnings(&digests));
        let outcomes = triaged
            .into_iter()
            .map(|t| self.outcome(t, &digests))
            .collect();
        Ok(Plan {
            pod_bearing: true,
            outcomes,
            warnings,
        })
    }

    /// Checks without any registry call that every image new in this request is pinned: what
    /// `/validate` enforces after all mutating webhooks (sidecar injectors included) have run.
    pub fn check_pinned(&self, target: &Target<'_>) -> Result<Plan, PipelineError> {
        let Some(sites) = workload::image_sites(
            &self.kinds,
            target.group,
            target.kind,
            target.subresource,
            target.object,
            target.old_object,
        )?
        else {
            return Ok(Plan::default());
        };
        let outcomes = sites
            .into_iter()
            .map(|site| match triage(site) {
                Triage::Keep(site, reason) => unchanged(site, reason),
                Triage::Invalid(site, reason) => denied(site, reason),
                Triage::Resolve(site, _) => denied(site, "not pinned to a digest".to_string()),
            })
            .collect();
        Ok(Plan {
            pod_bearing: true,
            outcomes,
            warnings: Vec::new(),
        })
    }

    async fn keyring_for(&self, target: &Target<'_>, deadline: Instant) -> PodKeyring {
        // The 1.20 EphemeralContainers object has no PodSpec: the pod is read instead.
        let own_spec = target.kind != workload::EPHEMERAL_CONTAINERS_KIND;
        let pod = PodContext {
            namespace: target.namespace,
            pod_spec: own_spec
                .then(|| workload::pod_spec(&self.kinds, target.group, target.kind, target.object))
                .flatten(),
            is_pod: target.group.is_empty() && (target.kind == "Pod" || !own_spec),
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
        keyring: &Keyring,
        deadline: Instant,
    ) -> HashMap<String, Resolved> {
        let mut unique: HashMap<String, &Reference> = HashMap::new();
        for t in triaged {
            if let Triage::Resolve(_, reference) = t {
                unique.entry(reference.tag_reference()).or_insert(reference);
            }
        }
        let calls = unique.into_iter().map(|(key, reference)| async move {
            let result = self.resolve_one(reference, keyring, deadline).await;
            (key, result)
        });
        join_all(calls).await.into_iter().collect()
    }

    async fn resolve_one(
        &self,
        reference: &Reference,
        keyring: &Keyring,
        deadline: Instant,
    ) -> Resolved {
        let credentials = keyring.lookup(reference);
        let call = self.resolver.resolve(reference, &credentials);
        match tokio::time::timeout_at(deadline, call).await {
            Ok(result) => result,
            Err(_) => Err(RegistryError::Timeout {
                registry: reference.domain().to_string(),
                timeout: deadline.saturating_duration_since(Instant::now()),
            }),
        }
    }

    fn outcome(&self, triage: Triage, digests: &HashMap<String, Resolved>) -> ImageOutcome {
        match triage {
            Triage::Keep(site, reason) => unchanged(site, reason),
            Triage::Invalid(site, reason) => denied(site, reason),
            Triage::Resolve(site, reference) => match digests.get(&reference.tag_reference()) {
                Some(Ok(resolution)) => ImageOutcome {
                    result: reference.pinned(&resolution.digest, self.form),
                    digest: Some(resolution.digest.clone()),
                    action: Action::Pinned,
                    reason: None,
                    source: Some(resolution.source),
                    site,
                },
                Some(Err(e)) => denied(site, error_chain(e)),
                None => denied(site, "resolution did not run".to_string()),
            },
        }
    }
}

type Resolved = Result<crate::registry::Resolution, RegistryError>;

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
fn short(digest: &Digest) -> String {
    let hex = digest.hex();
    format!("{}:{}", digest.algorithm(), hex.get(..12).unwrap_or(hex))
}

/// What to do with a site before any registry call.
enum Triage {
    Keep(ImageSite, String),
    Invalid(ImageSite, String),
    Resolve(ImageSite, Reference),
}

fn triage(site: ImageSite) -> Triage {
    if !site.is_new {
        return Triage::Keep(site, "not changed by this update".to_string());
    }
    match Reference::parse(&site.image) {
        Err(e) => {
            let reason = format!("invalid image reference: {e}");
            Triage::Invalid(site, reason)
        }
        Ok(reference) if reference.digest().is_some() => {
            Triage::Keep(site, "already pinned to a digest".to_string())
        }
        Ok(reference) => Triage::Resolve(site, reference),
    }
}

fn unchanged(site: ImageSite, reason: String) -> ImageOutcome {
    ImageOutcome {
        result: site.image.clone(),
        action: Action::Unchanged,
        digest: None,
        reason: Some(reason),
        source: None,
        site,
    }
}

fn denied(site: ImageSite, reason: String) -> ImageOutcome {
    ImageOutcome {
        result: site.image.clone(),
        action: Action::Denied,
        digest: None,
        reason: Some(reason),
        source: None,
        site,
    }
}

/// `error: cause: cause`, the way operators read it in one line.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
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

    /// One line per denied image: which container, where, which image, why.
    pub fn denial_message(&self) -> Option<String> {
        let lines: Vec<String> = self.denials().map(ImageOutcome::describe).collect();
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
        let what = match self.site.field {
            workload::ImageField::ImageVolume => "image volume",
            workload::ImageField::InitContainers => "init container",
            workload::ImageField::EphemeralContainers => "ephemeral container",
            workload::ImageField::Containers => "container",
        };
        format!(
            "{what} {:?} ({}) image {:?}: {}",
            self.site.name,
            self.site.pointer,
            self.site.image,
            self.reason.as_deref().unwrap_or("no reason given")
        )
    }
}
