//! One recheck cycle, the I/O half: reads each namespace's mode label (a few at once), the
//! keyrings and the registry (and, for the mirror report, the tag-mirror objects), and writes
//! the namespaces' PolicyReports, the `pinhook-mirrors` ClusterPolicyReport, Events, this
//! process's gauges and the `/inventory` snapshot; every decision in between is the pure
//! [`recheck`] plan's (which images are looked up with which credentials, each image's state,
//! which reports and Events). The cluster is reached through [`ClusterIo`] (reports, Events,
//! tag-mirror objects), the registry through the resolver, keyrings and labels through their
//! traits: the unit tests (`cycle_tests.rs`) run whole cycles against fakes of each.
//!
//! **Re-resolution.** The watch has its own [`CachingResolver`] over the same guarded registry
//! client, credentials and per-registry limits as admission (built by
//! [`super::build`]). Each cycle starts with [`CachingResolver::expire_all`], so the first
//! lookup of a (tag, credentials) key in the cycle asks the registry and every later one in the
//! same cycle is a cache hit (single-flight covers concurrent ones): registry requests per
//! cycle = distinct keys.
//!
//! **Writes.** Reports go through the pure [`plan`]: a cycle that finds what the last one found
//! writes nothing, and a stored report is read whole only when its content digest differs.
//! Events are those [`EventMemory::next`] plans; a finding that goes and comes back is a repeat
//! in the Event's series.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt as _;
use tracing::{debug, info, warn};

use super::cluster_io::ClusterIo;
use super::keyrings::read_in_time;
use crate::cluster::{read_mode_label, NamespaceLabels};
use crate::error::error_chain;
use crate::metrics::Metrics;
use crate::policy::{CompiledPolicy, Mode, PolicyHandle};
use crate::registry::mirrored::{self, MirrorKeyrings, RoutedCall};
use crate::registry::pull_secrets::PullSecrets;
use crate::registry::{CachingResolver, Resolver, SignatureVerifier};
use crate::signatures::Verdict;
use crate::watch::classify::DigestCheck;
use crate::watch::inventory::Snapshot;
use crate::watch::recheck::{
    self, EventMemory, Lookup, LookupKey, LookupPlan, Modes, ParsedImages, Probe, ProbeKey,
    ReportTarget, SignatureKey, SignaturePlan, SiteChecks, SiteLookups, SiteVerdicts,
};
use crate::watch::report::{
    mirror_findings, mirror_report, namespace_report, plan, MirrorFinding, ReportApi, Timestamp,
    CLUSTER_POLICY_REPORT_KIND, MIRROR_REPORT_NAME, POLICY_REPORT_KIND, REPORT_NAME,
};
use crate::watch::{ClassifiedImage, ImageState, Inventory, PodRecord, TagLookup};

/// Concurrent lookups a cycle starts (the cache's per-registry limit still applies).
const LOOKUP_CONCURRENCY: usize = 32;
/// Namespaces whose mode label is read at once (one GET each, answered by the apiserver alone).
const NAMESPACE_READ_CONCURRENCY: usize = 8;
/// Namespaces whose reports are read and written at once.
pub const REPORT_WRITE_CONCURRENCY: usize = 4;

/// What a cycle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleSummary {
    pub pods: usize,
    pub images: usize,
    /// Distinct (tag, credentials) keys looked up.
    pub lookups: usize,
    /// Distinct (digest, credentials) keys checked to still exist.
    pub digest_checks: usize,
    /// Distinct (repository, digest, trust) keys whose signatures were verified (issue 46).
    pub signature_checks: usize,
    /// Report creates/updates and deletes sent.
    pub report_writes: usize,
    pub events: usize,
    /// Images per state.
    pub states: BTreeMap<&'static str, usize>,
}

/// Settings of the cycle.
#[derive(Debug, Clone)]
pub struct CycleSettings {
    /// Most Events per workload per cycle.
    pub events_per_workload: usize,
    /// Judge tag-mirror objects into the ClusterPolicyReport.
    pub mirrors: bool,
    /// Read ConfigMaps cluster-wide for registries.conf / hosts.toml mirrors.
    pub mirror_config_maps: bool,
    /// The API the reports are written to (wgpolicyk8s or OpenReports).
    pub report_api: ReportApi,
}

/// What a [`Watch`] is made of.
pub struct WatchParts {
    /// Reports, Events and tag-mirror objects.
    pub cluster: Arc<dyn ClusterIo>,
    pub policy: PolicyHandle,
    pub resolver: Arc<CachingResolver>,
    pub secrets: Arc<dyn PullSecrets>,
    pub namespaces: Arc<dyn NamespaceLabels>,
    pub metrics: Arc<Metrics>,
    pub settings: CycleSettings,
    /// Verifies the pinned digests the policy's `verify` entries cover (`None`: not verified,
    /// every such image keeps its state).
    pub signatures: Option<Arc<dyn SignatureVerifier>>,
}

/// The watch's state across cycles.
pub struct Watch {
    parts: WatchParts,
    /// What the last cycle found worth an Event, and its tag moves (for the counter).
    previous: tokio::sync::Mutex<EventMemory>,
    /// The last cycle's inventory, for `/inventory`.
    inventory: std::sync::RwLock<Option<Arc<Snapshot>>>,
    /// The policy's per-mirror credentials files (`registries.resolveThrough`).
    mirror_keyrings: MirrorKeyrings,
}

/// How long one signature check of a cycle may take (its manifest and payloads).
const SIGNATURE_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Why a cycle stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    #[error("failed to read pinhook's reports")]
    ListReports(#[source] kube::Error),
}

// === impl Watch ===

impl Watch {
    pub fn new(parts: WatchParts) -> Watch {
        Watch {
            parts,
            previous: tokio::sync::Mutex::new(EventMemory::default()),
            inventory: std::sync::RwLock::new(None),
            mirror_keyrings: MirrorKeyrings::new(),
        }
    }

    /// The policy the cycles judge by (the policy watcher replaces what it holds).
    pub fn policy(&self) -> &PolicyHandle {
        &self.parts.policy
    }

    /// The metrics the cycles record.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.parts.metrics
    }

    /// The last cycle's inventory; `None` before this replica's first cycle.
    pub fn inventory(&self) -> Option<Arc<Snapshot>> {
        self.inventory.read().ok()?.clone()
    }

    /// Forgets what the previous cycle found: the next cycle publishes every finding's Event
    /// (after this replica took the Lease, the Events of its predecessor are not known).
    pub async fn forget(&self) {
        *self.previous.lock().await = EventMemory::default();
    }

    /// One cycle over `pods` (the running Pods as the Pod watch has them).
    pub async fn recheck(&self, pods: &[PodRecord]) -> Result<CycleSummary, CycleError> {
        let started = std::time::Instant::now();
        let policy = self.parts.policy.current();
        let pods = recheck::running(pods);
        let mut summary = CycleSummary {
            pods: pods.len(),
            ..CycleSummary::default()
        };
        // Modes first: a namespace whose label cannot be read is left as it is this cycle.
        let mut modes = self.modes_of(&policy, recheck::namespaces(&pods)).await;
        self.parts.resolver.expire_all();
        let parsed = ParsedImages::of(&pods);
        let (distinct, lookups, checks, verdicts) =
            self.look_up(&policy, &pods, &mut modes, &parsed).await;
        (
            summary.lookups,
            summary.digest_checks,
            summary.signature_checks,
        ) = distinct;

        let images = recheck::classify_all(
            &policy, &pods, &modes, &parsed, &lookups, &checks, &verdicts,
        );
        summary.images = images.len();
        summary.states = recheck::states(&images);
        self.record_states(&summary.states);

        summary.report_writes = self.write_reports(&images, &modes).await?;
        summary.events = self.publish_events(&images, &modes).await;
        if let Ok(mut inventory) = self.inventory.write() {
            *inventory = Some(Arc::new(Snapshot::new(Inventory::from_images(&images))));
        }
        if self.parts.settings.mirrors {
            summary.report_writes += self.write_mirror_report(&policy).await;
        }
        info!(
            pods = summary.pods,
            images = summary.images,
            lookups = summary.lookups,
            digest_checks = summary.digest_checks,
            signature_checks = summary.signature_checks,
            report_writes = summary.report_writes,
            events = summary.events,
            states = ?summary.states,
            seconds = format!("{:.2}", started.elapsed().as_secs_f64()),
            "recheck done"
        );
        Ok(summary)
    }

    /// The modes of `namespaces`, [`NAMESPACE_READ_CONCURRENCY`] read at once.
    async fn modes_of(&self, policy: &CompiledPolicy, namespaces: Vec<&str>) -> Modes {
        // (a loop, not a closure: the compiler cannot prove a closure's futures `Send` for
        // every lifetime of the `&self` they hold)
        let mut reads = Vec::with_capacity(namespaces.len());
        for namespace in namespaces {
            reads.push(self.named_mode(policy, namespace.to_string()));
        }
        futures::stream::iter(reads)
            .buffer_unordered(NAMESPACE_READ_CONCURRENCY)
            .collect()
            .await
    }

    /// `namespace`'s mode, named (what [`Self::modes_of`] collects).
    async fn named_mode(
        &self,
        policy: &CompiledPolicy,
        namespace: String,
    ) -> (String, Option<Mode>) {
        let mode = self.mode_of(policy, &namespace).await;
        (namespace, mode)
    }

    /// The mode of `namespace` as admission judges it; `None` when it cannot be known (a label
    /// never read, or one that is not a mode).
    async fn mode_of(&self, policy: &CompiledPolicy, namespace: &str) -> Option<Mode> {
        let label = read_mode_label(self.parts.namespaces.as_ref(), namespace, None).await;
        let mode = policy.namespace_mode(namespace, label);
        match (mode.known, mode.warning) {
            (true, _) => Some(mode.mode),
            (false, warning) => {
                warn!(
                    namespace,
                    warning, "cannot know the namespace's mode; its report is left as it is"
                );
                None
            }
        }
    }

    /// Resolves every tag once per (tag, credentials), then checks the pinned digests the
    /// answers did not vouch for once per (digest, credentials): the distinct keys of each, and
    /// each image's answers. A namespace whose pull credentials were not read in time is
    /// marked unknown in `modes`: left as it is this cycle, like one whose label is not read.
    async fn look_up<'a>(
        &self,
        policy: &CompiledPolicy,
        pods: &[&'a PodRecord],
        modes: &mut Modes,
        parsed: &ParsedImages<'_>,
    ) -> (
        (usize, usize, usize),
        SiteLookups<'a>,
        SiteChecks<'a>,
        SiteVerdicts<'a>,
    ) {
        let mut plan = LookupPlan::default();
        let mut signed = SignaturePlan::default();
        let by_account = self.parts.secrets.hands_tokens();
        for request in recheck::keyrings_wanted_by(policy, pods, modes, parsed, by_account) {
            if let Some(None) = modes.get(request.namespace) {
                // (another group of the namespace was not read in time)
                continue;
            }
            let Some(keyring) = read_in_time(self.parts.secrets.as_ref(), &request).await else {
                warn!(
                    namespace = request.namespace,
                    "reading pull secrets timed out; the namespace's report is left as it is"
                );
                modes.insert(request.namespace.to_string(), None);
                continue;
            };
            for warning in &keyring.warnings {
                debug!(namespace = request.namespace, warning, "pull credentials");
            }
            // Tags the policy routes through mirrors are rechecked at those mirrors, with the
            // credentials admission uses for them.
            let mut warnings = Vec::new();
            let namespace = request.namespace;
            let mut route = |reference: &crate::reference::Reference| {
                let route = policy.routes.route(reference)?;
                Some(RoutedCall::new(
                    reference,
                    &route,
                    &keyring.keyring,
                    &self.mirror_keyrings,
                    &mut warnings,
                ))
            };
            signed.add(policy, &request, &keyring.keyring, &mut route);
            plan.add_routed(request, &keyring.keyring, route);
            for warning in &warnings {
                debug!(namespace, warning, "mirror credentials");
            }
        }
        let resolver = &self.parts.resolver;
        let answered: Vec<(LookupKey, TagLookup, Option<String>)> =
            futures::stream::iter(plan.calls())
                .map(|lookup| async move {
                    let Lookup {
                        key,
                        reference,
                        credentials,
                        routed,
                    } = lookup;
                    let answer = match &routed {
                        Some(call) => mirrored::resolve_routed(resolver.as_ref(), call, None).await,
                        None => resolver.resolve(&reference, &credentials).await,
                    };
                    if let Some(detail) = recheck::failure_detail(&answer) {
                        debug!(image = %reference, error = %detail, "recheck failed");
                    }
                    let origin = answer
                        .as_ref()
                        .ok()
                        .and_then(|r| r.origin.as_ref())
                        .map(|o| o.mirror.clone());
                    (key, recheck::tag_lookup(&reference, &answer), origin)
                })
                .buffer_unordered(LOOKUP_CONCURRENCY)
                .collect()
                .await;
        let mut answers = HashMap::new();
        let mut origins = HashMap::new();
        for (key, lookup, origin) in answered {
            if let Some(origin) = origin {
                origins.insert(key.clone(), origin);
            }
            answers.insert(key, lookup);
        }
        let probes = plan.probes(&answers);
        let checked: HashMap<ProbeKey, DigestCheck> = futures::stream::iter(probes.calls())
            .map(
                |Probe {
                     key,
                     reference: probe,
                     credentials,
                 }| async move {
                    let answer = resolver.resolve(&probe, &credentials).await;
                    if let Some(detail) = recheck::failure_detail(&answer) {
                        debug!(image = %probe, error = %detail, "digest check failed");
                    }
                    let check = match probe.digest() {
                        Some(expected) => recheck::digest_check(&answer, expected),
                        None => DigestCheck::Unknown,
                    };
                    (key, check)
                },
            )
            .buffer_unordered(LOOKUP_CONCURRENCY)
            .collect()
            .await;
        let verdicts = self.verify(&signed).await;
        (
            (plan.distinct(), probes.distinct(), signed.distinct()),
            plan.answer_with_origins(&answers, &origins),
            probes.answer(&checked),
            signed.answer(&verdicts),
        )
    }

    /// Each signature check's verdict, [`LOOKUP_CONCURRENCY`] at once (`None`: the fetch
    /// failed, logged).
    async fn verify(&self, plan: &SignaturePlan<'_>) -> HashMap<SignatureKey, Option<Verdict>> {
        let Some(verifier) = &self.parts.signatures else {
            return HashMap::new();
        };
        futures::stream::iter(plan.calls())
            .map(|call| async move {
                let ask = async {
                    match &call.routed {
                        Some(routed) => {
                            mirrored::verify_routed(verifier.as_ref(), routed, &call.key.digest, &call.trust).await
                        }
                        None => {
                            verifier
                                .verify(&call.reference, &call.key.digest, &call.credentials, &call.trust)
                                .await
                        }
                    }
                };
                let answer = tokio::time::timeout(SIGNATURE_CHECK_TIMEOUT, ask).await;
                let verdict = match answer {
                    Ok(Ok(verdict)) => Some(verdict),
                    Err(_) => {
                        debug!(image = %call.reference, digest = %call.key.digest, "signature check timed out");
                        None
                    }
                    Ok(Err(e)) => {
                        debug!(image = %call.reference, digest = %call.key.digest, error = %error_chain(&e), "signature check failed");
                        None
                    }
                };
                (call.key, verdict)
            })
            .buffer_unordered(LOOKUP_CONCURRENCY)
            .collect()
            .await
    }

    fn record_states(&self, states: &BTreeMap<&'static str, usize>) {
        for state in ImageState::NAMES {
            let count = states.get(state).copied().unwrap_or(0);
            self.parts
                .metrics
                .running_image_gauge(state)
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Brings every namespace's PolicyReport to what `images` say; returns the writes sent.
    /// The stored reports are compared by their content digest (metadata only); a report is
    /// read whole only when it is about to change, to keep the first-found time of the
    /// results that stay.
    async fn write_reports(
        &self,
        images: &[ClassifiedImage<'_>],
        modes: &Modes,
    ) -> Result<usize, CycleError> {
        let stored = self
            .parts
            .cluster
            .report_digests(self.parts.settings.report_api)
            .await
            .map_err(CycleError::ListReports)?;
        let now = Timestamp::from_system_time(std::time::SystemTime::now());
        let targets = recheck::report_targets(images, modes, stored.keys().map(String::as_str));
        // (a loop, not a closure: as in `modes_of`, the compiler cannot prove a closure's
        // futures `Send` for every lifetime of what they borrow)
        let mut jobs = Vec::with_capacity(targets.len());
        for target in targets {
            let stored = stored.get(&target.namespace).cloned();
            jobs.push(self.sync_report(target, stored, now));
        }
        // A few namespaces at a time: one report can be a large object for the apiserver.
        let writes: Vec<usize> = futures::stream::iter(jobs)
            .buffer_unordered(REPORT_WRITE_CONCURRENCY)
            .collect()
            .await;
        Ok(writes.into_iter().sum())
    }

    /// Brings `target`'s report to what its images say; 1 when it sent a write. `stored` is
    /// the stored report's content digest: `None` when there is no report, `Some(None)` when
    /// it has no digest.
    async fn sync_report(
        &self,
        target: ReportTarget<'_>,
        stored: Option<Option<String>>,
        now: Timestamp,
    ) -> usize {
        let ReportTarget {
            namespace,
            mode,
            images,
        } = target;
        let namespace = namespace.as_str();
        let shape = self.parts.settings.report_api;
        let fresh = namespace_report(namespace, mode, images.iter().copied(), now, None);
        if recheck::report_unchanged(&fresh, stored.as_ref().and_then(|d| d.as_deref())) {
            return 0;
        }
        let previous = match stored {
            None => None,
            Some(_) => match self.parts.cluster.namespace_report(shape, namespace).await {
                Ok(previous) => previous,
                Err(error) => {
                    warn!(namespace, error = %error_chain(&error), "cannot read the namespace's PolicyReport");
                    return 0;
                }
            },
        };
        let desired = match &previous {
            Some(previous) => {
                namespace_report(namespace, mode, images.iter().copied(), now, Some(previous))
            }
            None => fresh,
        };
        let write = plan(previous.as_ref(), desired);
        let target = (POLICY_REPORT_KIND, Some(namespace), REPORT_NAME);
        match self.parts.cluster.write_report(shape, write, target).await {
            Ok(wrote) => usize::from(wrote),
            Err(error) => {
                warn!(namespace, error = %error_chain(&error), "cannot write the namespace's PolicyReport");
                1
            }
        }
    }

    /// Publishes the Events of findings new since the previous cycle; returns how many.
    async fn publish_events(&self, images: &[ClassifiedImage<'_>], modes: &Modes) -> usize {
        let events =
            self.previous
                .lock()
                .await
                .next(images, modes, self.parts.settings.events_per_workload);
        self.parts
            .metrics
            .tag_moved_running
            .inc_by(events.new_moves);
        for spec in &events.rate_limited {
            debug!(workload = %spec.regarding.describe(), reason = spec.reason.as_str(), "event rate-limited");
        }
        let mut published = 0;
        for spec in events.publish {
            match self.parts.cluster.publish(&spec).await {
                Ok(()) => published += 1,
                Err(error) => {
                    warn!(workload = %spec.regarding.describe(), error = %error_chain(&error), "cannot publish an Event")
                }
            }
        }
        published
    }

    /// Judges the cluster's tag-mirror objects into the ClusterPolicyReport; returns the
    /// writes sent (0 or 1).
    async fn write_mirror_report(&self, policy: &CompiledPolicy) -> usize {
        let mut kinds = vec![
            (
                "config.openshift.io",
                "v1",
                "ImageTagMirrorSet",
                "imagetagmirrorsets",
            ),
            (
                "config.openshift.io",
                "v1",
                "ImageContentPolicy",
                "imagecontentpolicies",
            ),
        ];
        if self.parts.settings.mirror_config_maps {
            kinds.push(("", "v1", "ConfigMap", "configmaps"));
        }
        let mut findings: Vec<MirrorFinding> = Vec::new();
        for (group, version, kind, plural) in kinds {
            // Judged a page at a time: only the findings are kept, never every ConfigMap.
            let mut judge = |object: serde_json::Value| match mirror_findings(
                &policy.policy.mirrors,
                &object,
            ) {
                Ok(found) => findings.extend(found),
                Err(error) => debug!(kind, error = %error, "unreadable tag-mirror object"),
            };
            let resource = (group, version, kind, plural);
            if let Err(error) = self
                .parts
                .cluster
                .for_each_object(resource, &mut judge)
                .await
            {
                warn!(kind, error = %error_chain(&error), "cannot list tag-mirror objects; the ClusterPolicyReport is left as it is");
                return 0;
            }
        }
        let shape = self.parts.settings.report_api;
        let stored = match self
            .parts
            .cluster
            .cluster_report(shape, MIRROR_REPORT_NAME)
            .await
        {
            Ok(stored) => stored,
            Err(error) => {
                warn!(error = %error_chain(&error), "cannot read the ClusterPolicyReport");
                return 0;
            }
        };
        let now = Timestamp::from_system_time(std::time::SystemTime::now());
        let desired = mirror_report(policy.policy.mode, &findings, now, stored.as_ref());
        let write = plan(stored.as_ref(), desired);
        let target = (CLUSTER_POLICY_REPORT_KIND, None, MIRROR_REPORT_NAME);
        match self.parts.cluster.write_report(shape, write, target).await {
            Ok(wrote) => usize::from(wrote),
            Err(error) => {
                warn!(error = %error_chain(&error), "cannot write the ClusterPolicyReport");
                1
            }
        }
    }
}

#[cfg(test)]
#[path = "cycle_tests.rs"]
mod tests;
