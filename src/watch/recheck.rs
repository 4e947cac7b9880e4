//! One recheck, the pure half: given the running Pods, each namespace's mode and the registry's
//! answers, which keyrings and tag lookups a cycle needs, what state each image is in, which
//! namespaces' reports to bring up to date, and which Events to publish. The I/O half,
//! `controller::cycle`, reads the namespaces' labels, the keyrings and the registry, asks this
//! plan at each step and writes what it returns.
//!
//! The rules, each applied here once:
//! - A namespace's mode is the one admission uses ([`CompiledPolicy::namespace_mode`], applied
//!   by `controller::cycle` and handed in as [`Modes`]); a namespace whose mode cannot be
//!   known this cycle (`None`) is left as it is:
//!   its images are not classified and its report is neither written nor deleted.
//! - Exemptions are admission's ([`CompiledPolicy::exemption`]): an exempt image is never
//!   looked up and is reported `exempt` with the reason.
//! - An unpinned image in a Pod admission leaves alone (an operator's not listed as safe to
//!   pin, a static pod's mirror) is `left-to-owner`, not `unpinned`: its own state, neither a
//!   pass nor a failure, naming why.
//! - Only images with a tag in a namespace in enforce or audit are looked up: `tag@digest` ones
//!   to see whether the tag moved, unpinned ones (not left to their owner) to compare what the
//!   node runs with what the tag points to now. Whether an image is pinned never depends on the
//!   registry, and a digest-only image has no tag.
//! - Every pinned digest in use there is checked to still exist (a HEAD of the manifest by
//!   digest, with the credentials its tag is looked up with, through the same cache, single
//!   flight and per-registry limits; one request per (digest, credentials) per cycle), unless
//!   its tag resolved to it this cycle (the registry just named it). A digest the policy routes
//!   through mirrors (`registries.resolveThrough`) is not checked: the nodes pull it from the
//!   mirrors, and the source may be out of reach by design. "Not found" is `digest-missing`;
//!   any other failure leaves the state as the tag lookup made it.
//! - Pods of one namespace with the same pull secrets share one keyring; one lookup per (tag,
//!   credential fingerprints): registry requests per cycle = distinct keys. A tag the policy
//!   routes through mirrors (`registries.resolveThrough`) is looked up at those mirrors, as
//!   admission resolves it, keyed by the mirrors' credentials.
//! - Every pinned digest a `verify` entry of the current policy covers is verified again
//!   ([`signatures`]): one check per (repository, digest, trust) per cycle, through admission's
//!   verdict cache; a verdict other than `verified` makes the image `unverified`, a failed fetch
//!   leaves its state.
//! - A digest the cache serves stale because the registry failed is not the tag's current
//!   digest (it would hide a move): the image is `unresolvable` for that cycle.
//! - Events go out for findings new since the previous cycle of this leader, at most
//!   `per_workload` per workload per cycle.
//!
//! Never: I/O, a client, the clock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::error::error_chain;
use crate::owners::{pod_ownership, ControllerRef, Ownership};
use crate::policy::{CompiledPolicy, Mode};
use crate::reference::Digest;
use crate::reference::Reference;
use crate::registry::keyring::Keyring;
use crate::registry::mirrored::RoutedCall;
use crate::registry::{Credential, Fingerprint, RegistryError, Resolution, ResolutionSource};
use crate::watch::classify::{judge_running, judge_signed, DigestCheck};
use crate::watch::{
    classify, classify_image, classify_pod, event_for, ClassifiedImage, EventSpec, ImageState,
    PodRecord, PolicyReport, TagLookup,
};

mod lookups;
mod signatures;
#[cfg(test)]
mod tests;

pub use lookups::{Lookup, LookupPlan, Probe, ProbePlan, SiteChecks, SiteLookups};
pub use signatures::{SignatureCall, SignatureKey, SignaturePlan, SiteVerdicts};

/// Each namespace's mode this cycle; `None` when it cannot be known.
pub type Modes = HashMap<String, Option<Mode>>;

/// What one lookup is keyed by: one registry request per key and cycle.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LookupKey {
    /// `registry/repository:tag`.
    pub tag: String,
    /// The fingerprints of the credentials that answer it.
    pub credentials: Vec<Fingerprint>,
}

/// What one digest check is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeKey {
    /// `registry/repository@digest`.
    pub manifest: String,
    /// The fingerprints of the credentials that answer it.
    pub credentials: Vec<Fingerprint>,
}

/// A Pod image: the Pod's uid and the image as the Pod holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Site<'a> {
    pod_uid: &'a str,
    image: &'a str,
}

/// Each distinct image string of a cycle's Pods, parsed once (`None`: not a reference): what
/// the keyrings, the lookups and the classification all read.
#[derive(Debug, Default)]
pub struct ParsedImages<'a>(HashMap<&'a str, Option<Arc<Reference>>>);

impl<'a> ParsedImages<'a> {
    /// The images of `pods`, each distinct one parsed once.
    pub fn of(pods: &[&'a PodRecord]) -> ParsedImages<'a> {
        let mut parsed = HashMap::new();
        for site in pods.iter().flat_map(|pod| &pod.images) {
            parsed
                .entry(site.image.as_str())
                .or_insert_with(|| Reference::parse(&site.image).ok().map(Arc::new));
        }
        ParsedImages(parsed)
    }

    /// `image` parsed; `None` when it is not a reference (or not one of the Pods').
    pub fn get(&self, image: &str) -> Option<&Arc<Reference>> {
        self.0.get(image)?.as_ref()
    }
}

/// The images of one keyring's Pods to look up, each parsed (each distinct image string once
/// per cycle, shared by its sites).
type Sites<'a> = Vec<(Site<'a>, Arc<Reference>)>;

/// The keyring one group of Pods needs: those of `namespace` with the same `pull_secrets` (and,
/// where credential plugins are handed its token, the same ServiceAccount).
#[derive(Debug)]
pub struct KeyringRequest<'a> {
    pub namespace: &'a str,
    pub pull_secrets: &'a [String],
    /// The group's ServiceAccount, when Pods are grouped by it.
    pub service_account: Option<&'a str>,
    /// The distinct repositories to resolve (what credential plugins and helpers are asked
    /// about), sorted.
    pub repositories: Vec<String>,
    /// Images with a tag: looked up.
    sites: Sites<'a>,
    /// Digest-only images: their digest is checked.
    digests: Sites<'a>,
}

/// A namespace whose report the cycle brings up to date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportTarget<'i> {
    pub namespace: String,
    /// The mode the report is written for (the namespace's; enforce for a report that goes).
    pub mode: Mode,
    /// Its running images, borrowed from the cycle's: none when the report goes.
    pub images: Vec<&'i ClassifiedImage<'i>>,
}

/// What the previous cycles of this leader found worth an Event, and the tag moves seen.
#[derive(Debug, Default)]
pub struct EventMemory {
    events: HashSet<(String, &'static str, String)>,
    moves: HashSet<(String, String, String, String)>,
}

/// The Events a cycle publishes.
#[derive(Debug, Default)]
pub struct EventPlan {
    pub publish: Vec<EventSpec>,
    /// New findings over `per_workload` for their workload: not published.
    pub rate_limited: Vec<EventSpec>,
    /// Tag moves not seen in the previous cycle (for the counter).
    pub new_moves: u64,
}

/// The Pods that run: those whose phase is not `Succeeded` or `Failed`.
pub fn running(pods: &[PodRecord]) -> Vec<&PodRecord> {
    pods.iter().filter(|p| !p.terminal).collect()
}

/// The namespaces whose mode the cycle reads, each once, in the order first seen.
pub fn namespaces<'a>(pods: &[&'a PodRecord]) -> Vec<&'a str> {
    let mut seen = HashSet::new();
    pods.iter()
        .map(|p| p.namespace.as_str())
        .filter(|namespace| seen.insert(*namespace))
        .collect()
}

/// The keyrings the cycle's lookups need, one per (namespace, pull secrets) that has an image
/// to look up, in namespace then pull-secret order.
pub fn keyrings_wanted<'a>(
    policy: &CompiledPolicy,
    pods: &[&'a PodRecord],
    modes: &Modes,
    parsed: &ParsedImages<'_>,
) -> Vec<KeyringRequest<'a>> {
    keyrings_wanted_by(policy, pods, modes, parsed, false)
}

/// [`keyrings_wanted`], the Pods also grouped by ServiceAccount when `by_account` (a
/// credential plugin is handed the account's token, KEP-4412).
pub fn keyrings_wanted_by<'a>(
    policy: &CompiledPolicy,
    pods: &[&'a PodRecord],
    modes: &Modes,
    parsed: &ParsedImages<'_>,
    by_account: bool,
) -> Vec<KeyringRequest<'a>> {
    type Group<'a> = (&'a str, &'a [String], Option<&'a str>);
    let mut groups: BTreeMap<Group<'a>, (Sites<'a>, Sites<'a>)> = BTreeMap::new();
    for pod in pods {
        if !matches!(
            modes.get(&pod.namespace),
            Some(Some(Mode::Enforce | Mode::Audit))
        ) || policy.exemption(&pod.namespace, None).is_some()
        {
            continue;
        }
        let left_to_owner = left_to_owner(policy, pod).is_some();
        let (tagged, digests) = groups
            .entry((
                pod.namespace.as_str(),
                pod.pull_secrets.as_slice(),
                by_account.then_some(pod.service_account.as_str()),
            ))
            .or_default();
        for site in &pod.images {
            let Some(reference) = parsed.get(&site.image).cloned() else {
                continue;
            };
            if policy.exemption(&pod.namespace, Some(&reference)).is_some() {
                continue;
            }
            let at = Site {
                pod_uid: pod.uid.as_str(),
                image: site.image.as_str(),
            };
            match (reference.tag().is_some(), reference.digest().is_some()) {
                (true, true) => tagged.push((at, reference)),
                (false, true) => digests.push((at, reference)),
                // Unpinned (a bare name means `latest`): compared with what runs, unless its
                // owner manages the image.
                (_, false) if !left_to_owner => tagged.push((at, reference)),
                (_, false) => {}
            }
        }
    }
    groups
        .into_iter()
        .filter(|(_, (sites, digests))| !sites.is_empty() || !digests.is_empty())
        .map(
            |((namespace, pull_secrets, service_account), (sites, digests))| {
                // A routed tag is rechecked at its mirrors: plugins and helpers are asked for them.
                let mut repositories: Vec<String> = sites
                    .iter()
                    .chain(&digests)
                    .flat_map(|(_, r)| {
                        let mirrors = policy.routes.route(r).into_iter().flat_map(|route| {
                            route.mirrors.into_iter().map(|m| m.reference.repository())
                        });
                        std::iter::once(r.repository()).chain(mirrors)
                    })
                    .collect();
                repositories.sort();
                repositories.dedup();
                KeyringRequest {
                    namespace,
                    pull_secrets,
                    service_account,
                    repositories,
                    sites,
                    digests,
                }
            },
        )
        .collect()
}

/// How the watch reads one registry answer for `reference`. The reason of a failure is stable
/// from one cycle to the next (the registry and the error's kind, not its message), because it
/// lands in reports and a changed reason is an apiserver write.
pub fn tag_lookup(reference: &Reference, answer: &Result<Resolution, RegistryError>) -> TagLookup {
    match answer {
        Ok(resolution) if resolution.source == ResolutionSource::Stale => {
            TagLookup::Failed(format!("registry {} is unavailable", reference.domain()))
        }
        Ok(resolution) => TagLookup::Resolved(resolution.digest.clone()),
        Err(error) => TagLookup::Failed(format!(
            "registry {}: {}",
            reference.domain(),
            error.kind().replace('_', " ")
        )),
    }
}

/// How the watch reads the registry's answer for a pinned digest (`expected`): only "not found"
/// is `Missing`; a failure to answer (or a stale answer) says nothing.
pub fn digest_check(answer: &Result<Resolution, RegistryError>, expected: &Digest) -> DigestCheck {
    match answer {
        Ok(resolution)
            if resolution.source != ResolutionSource::Stale && resolution.digest == *expected =>
        {
            DigestCheck::Present
        }
        Ok(_) => DigestCheck::Unknown,
        Err(error) if error.kind() == "not_found" => DigestCheck::Missing,
        Err(_) => DigestCheck::Unknown,
    }
}

/// A failed answer's whole chain, for the debug log.
pub fn failure_detail(answer: &Result<Resolution, RegistryError>) -> Option<String> {
    answer.as_ref().err().map(|e| error_chain(e))
}

/// Every running image of a namespace whose mode is known, classified.
pub fn classify_all<'a>(
    policy: &CompiledPolicy,
    pods: &[&'a PodRecord],
    modes: &Modes,
    parsed: &ParsedImages<'_>,
    lookups: &SiteLookups<'_>,
    checks: &SiteChecks<'_>,
    verdicts: &SiteVerdicts<'_>,
) -> Vec<ClassifiedImage<'a>> {
    let mut images = Vec::with_capacity(pods.iter().map(|p| p.images.len()).sum());
    for pod in pods {
        let Some(Some(mode)) = modes.get(&pod.namespace) else {
            continue;
        };
        let namespace_exemption = policy.exemption(&pod.namespace, None);
        let left_to = left_to_owner(policy, pod);
        let start = images.len();
        images.extend(classify_pod(pod, |site| {
            let reference = parsed.get(&site.image);
            let exempt = namespace_exemption
                .or_else(|| policy.exemption(&pod.namespace, reference.map(Arc::as_ref)))
                .map(|e| e.describe(&pod.namespace));
            let Some(reference) = reference else {
                return classify_image(&site.image, exempt.as_deref(), TagLookup::NotLooked);
            };
            if let (Some(why), None, None) = (&left_to, &exempt, reference.digest()) {
                return ImageState::LeftToOwner { why: why.clone() };
            }
            if *mode == Mode::Off {
                return classify(reference, exempt.as_deref(), TagLookup::NotLooked);
            }
            let lookup = lookups.get(&pod.uid, &site.image);
            let state = classify(reference, exempt.as_deref(), lookup);
            let check = checks.get(&pod.uid, &site.image);
            let state = judge_running(state, site.running.as_ref(), check);
            // Every pinned image, a static pod's mirror's too: whether a Pod is one is written
            // by whoever created it, and the watch cannot tell the node from a forger.
            judge_signed(state, verdicts.get(&pod.uid, &site.image))
        }));
        if *mode != Mode::Off {
            for image in &mut images[start..] {
                image.origin = lookups.origin(&pod.uid, &image.site.image);
            }
        }
    }
    images
}

/// Why admission does not check `pod`'s images, when it does not: a static pod's mirror (the
/// rule of [`crate::owners::pod_ownership`]). An operator's Pod is not patched, but checked
/// (issue 43): the watch reports its images like any other Pod's.
fn left_to_owner(policy: &CompiledPolicy, pod: &PodRecord) -> Option<String> {
    let controller = pod.owner.as_ref().map(|o| ControllerRef {
        api_version: &o.api_version,
        kind: &o.kind,
        name: &o.name,
        uid: &o.uid,
    });
    match pod_ownership(controller, pod.mirror, &policy.policy.owners.pin_pods_of) {
        Ownership::MirrorPod => Some("the mirror of a static pod".to_string()),
        Ownership::Operator(_) | Ownership::Judged | Ownership::Controller(_) => None,
    }
}

/// Images per state (states with none are absent).
pub fn states(images: &[ClassifiedImage<'_>]) -> BTreeMap<&'static str, usize> {
    let mut states: BTreeMap<&'static str, usize> = BTreeMap::new();
    for image in images {
        *states.entry(image.state.as_str()).or_default() += 1;
    }
    states
}

/// The namespaces whose report the cycle brings up to date: each with running images and a
/// known mode, and each with a `stored` report but no running image left (that report goes).
/// A namespace whose mode is unknown this cycle is left out: its report stays as it is.
pub fn report_targets<'s>(
    images: &'s [ClassifiedImage<'s>],
    modes: &Modes,
    stored: impl IntoIterator<Item = &'s str>,
) -> Vec<ReportTarget<'s>> {
    let mut by_namespace: BTreeMap<&str, Vec<&ClassifiedImage<'s>>> = BTreeMap::new();
    for image in images {
        by_namespace
            .entry(image.workload().namespace.as_str())
            .or_default()
            .push(image);
    }
    let mut namespaces: Vec<&str> = by_namespace.keys().copied().collect();
    namespaces.extend(stored);
    namespaces.sort_unstable();
    namespaces.dedup();
    namespaces
        .into_iter()
        .filter_map(|namespace| {
            let (mode, images) = match (by_namespace.remove(namespace), modes.get(namespace)) {
                (Some(images), Some(Some(mode))) => (*mode, images),
                // Pods whose namespace's mode is unknown this cycle: leave the report.
                (Some(_), _) | (None, Some(None)) => return None,
                // No running images left: the report goes.
                (None, _) => (Mode::Enforce, Vec::new()),
            };
            Some(ReportTarget {
                namespace: namespace.to_string(),
                mode,
                images,
            })
        })
        .collect()
}

/// True when `fresh` says what the stored report's content digest (`stored`) says: nothing to
/// write, and no need to read the stored report whole.
pub fn report_unchanged(fresh: &PolicyReport, stored: Option<&str>) -> bool {
    let content = fresh
        .metadata
        .annotations
        .get(crate::watch::report::CONTENT_ANNOTATION);
    matches!((content, stored), (Some(fresh), Some(stored)) if fresh == stored)
}

// === impl EventMemory ===

impl EventMemory {
    /// The Events this cycle publishes for `images`: each finding's Event when it is new since
    /// the previous cycle, at most `per_workload` per workload. Remembers this cycle's findings
    /// (published or rate-limited alike) for the next.
    pub fn next(
        &mut self,
        images: &[ClassifiedImage<'_>],
        modes: &Modes,
        per_workload: usize,
    ) -> EventPlan {
        let mut plan = EventPlan::default();
        let mut current = HashSet::new();
        let mut moves = HashSet::new();
        let mut published: HashMap<String, usize> = HashMap::new();
        for image in images {
            if let ImageState::TagMoved { pinned, now } = &image.state {
                let key = (
                    image.workload().describe(),
                    image.site.describe(),
                    pinned.to_string(),
                    now.to_string(),
                );
                if !self.moves.contains(&key) {
                    plan.new_moves += 1;
                }
                moves.insert(key);
            }
            let Some(Some(mode)) = modes.get(&image.workload().namespace) else {
                continue;
            };
            let Some(spec) = event_for(image, *mode) else {
                continue;
            };
            let key = (
                spec.regarding.describe(),
                spec.reason.as_str(),
                spec.note.clone(),
            );
            if !current.insert(key.clone()) || self.events.contains(&key) {
                continue;
            }
            let count = published.entry(spec.regarding.describe()).or_default();
            if *count >= per_workload {
                plan.rate_limited.push(spec);
                continue;
            }
            *count += 1;
            plan.publish.push(spec);
        }
        self.events = current;
        self.moves = moves;
        plan
    }
}
