//! One recheck cycle: every running image re-resolved once per (tag, credentials), classified,
//! and the cluster's PolicyReports, Events and this process's gauges brought up to date.
//!
//! **Re-resolution.** The watch has its own [`CachingResolver`] over the same guarded registry
//! client, credentials and per-registry limits as admission (built by
//! [`super::WatchParts`]). Each cycle starts with [`CachingResolver::expire_all`], so the first
//! lookup of a (tag, credentials) key in the cycle asks the registry and every later one in the
//! same cycle is a cache hit (single-flight covers concurrent ones): registry requests per
//! cycle = distinct keys. A digest the cache serves stale because the registry failed is not
//! taken as the tag's current digest (it would hide a move); the image is `unresolvable` for
//! that cycle. Only `tag@digest` images are looked up: whether an image is pinned never depends
//! on the registry, and a digest-only image has no tag.
//!
//! **Writes.** Reports go through the pure [`plan`]: a cycle that finds what the last one found
//! writes nothing. Events are published for findings that are new since the previous cycle of
//! this leader (so an unchanged cluster causes no Event writes either), at most
//! `events_per_workload` per workload per cycle; a finding that goes and comes back is a repeat
//! in the Event's series.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt as _;
use tracing::{debug, info, warn};

use super::api::{self, EventPublisher};
use crate::cluster::NamespaceLabels;
use crate::error::error_chain;
use crate::metrics::Metrics;
use crate::policy::{CompiledPolicy, Mode, PolicyHandle, MODE_LABEL};
use crate::reference::Reference;
use crate::registry::pull_secrets::{PodContext, PullSecrets};
use crate::registry::{CachingResolver, Fingerprint, ResolutionSource, Resolver};
use crate::watch::classify::{classify, classify_image, classify_pod};
use crate::watch::report::{
    mirror_findings, mirror_report, namespace_report, plan, MirrorFinding, Timestamp,
    CLUSTER_POLICY_REPORT_KIND, MIRROR_REPORT_NAME, POLICY_REPORT_KIND, REPORT_NAME,
};
use crate::watch::{event_for, ClassifiedImage, ImageState, Inventory, PodRecord, TagLookup};

/// Concurrent lookups a cycle starts (the cache's per-registry limit still applies).
const LOOKUP_CONCURRENCY: usize = 32;
/// Namespaces whose reports are read and written at once.
const REPORT_WRITE_CONCURRENCY: usize = 4;

/// What a cycle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleSummary {
    pub pods: usize,
    pub images: usize,
    /// Distinct (tag, credentials) keys looked up.
    pub lookups: usize,
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
}

/// The watch's state across cycles.
pub struct Watch {
    pub client: kube::Client,
    pub policy: PolicyHandle,
    pub resolver: Arc<CachingResolver>,
    pub secrets: Arc<dyn PullSecrets>,
    pub namespaces: Arc<dyn NamespaceLabels>,
    pub metrics: Arc<Metrics>,
    pub events: EventPublisher,
    pub settings: CycleSettings,
    /// What the last cycle found worth an Event, and its tag moves (for the counter).
    previous: tokio::sync::Mutex<Previous>,
    /// The last cycle's inventory, for `/inventory`.
    pub inventory: std::sync::RwLock<Option<Inventory>>,
}

#[derive(Default)]
struct Previous {
    events: HashSet<(String, &'static str, String)>,
    moves: HashSet<(String, String, String, String)>,
}

/// Why a cycle stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    #[error("failed to read pinhook's PolicyReports")]
    ListReports(#[source] kube::Error),
}

/// What one Pod image's lookup is keyed by.
type LookupKey = (String, Vec<Fingerprint>);

// === impl Watch ===

impl Watch {
    #[allow(clippy::too_many_arguments)] // each part is a different layer; a struct would only rename them
    pub fn new(
        client: kube::Client,
        policy: PolicyHandle,
        resolver: Arc<CachingResolver>,
        secrets: Arc<dyn PullSecrets>,
        namespaces: Arc<dyn NamespaceLabels>,
        metrics: Arc<Metrics>,
        identity: &str,
        settings: CycleSettings,
    ) -> Watch {
        Watch {
            events: EventPublisher::new(client.clone(), identity),
            client,
            policy,
            resolver,
            secrets,
            namespaces,
            metrics,
            settings,
            previous: tokio::sync::Mutex::new(Previous::default()),
            inventory: std::sync::RwLock::new(None),
        }
    }

    /// Forgets what the previous cycle found: the next cycle publishes every finding's Event
    /// (after this replica took the Lease, the Events of its predecessor are not known).
    pub async fn forget(&self) {
        *self.previous.lock().await = Previous::default();
    }

    /// One cycle over `pods` (the running Pods as the Pod watch has them).
    pub async fn recheck(&self, pods: &[PodRecord]) -> Result<CycleSummary, CycleError> {
        let started = std::time::Instant::now();
        let policy = self.policy.current();
        let pods: Vec<&PodRecord> = pods.iter().filter(|p| !p.terminal).collect();
        let mut summary = CycleSummary {
            pods: pods.len(),
            ..CycleSummary::default()
        };
        // Modes first: a namespace whose label cannot be read is left as it is this cycle.
        let mut modes: HashMap<String, Option<Mode>> = HashMap::new();
        for pod in &pods {
            if !modes.contains_key(&pod.namespace) {
                let mode = self.mode_of(&policy, &pod.namespace).await;
                modes.insert(pod.namespace.clone(), mode);
            }
        }
        self.resolver.expire_all();
        let lookups = self.look_up(&policy, &pods, &modes).await;
        summary.lookups = lookups.distinct;

        let mut images: Vec<ClassifiedImage> = Vec::new();
        for pod in &pods {
            let Some(Some(mode)) = modes.get(&pod.namespace) else {
                continue;
            };
            let namespace_exempt = policy.is_exempt_namespace(&pod.namespace);
            images.extend(classify_pod(pod, |site| {
                let exempt = if namespace_exempt {
                    Some(format!("namespace {} is exempt", pod.namespace))
                } else {
                    None
                };
                let Ok(reference) = Reference::parse(&site.image) else {
                    return classify_image(&site.image, exempt.as_deref(), TagLookup::NotLooked);
                };
                let exempt = exempt.or_else(|| {
                    policy
                        .is_exempt_image(&reference)
                        .then(|| "image is exempt".to_string())
                });
                let lookup = if *mode == Mode::Off {
                    TagLookup::NotLooked
                } else {
                    lookups
                        .by_site
                        .get(&(pod.uid.clone(), site.image.clone()))
                        .cloned()
                        .unwrap_or(TagLookup::NotLooked)
                };
                classify(&reference, exempt.as_deref(), lookup)
            }));
        }
        summary.images = images.len();
        for image in &images {
            *summary.states.entry(image.state.as_str()).or_default() += 1;
        }
        self.record_states(&summary.states);

        summary.report_writes = self.write_reports(&images, &modes).await?;
        summary.events = self.publish_events(&images, &modes).await;
        if let Ok(mut inventory) = self.inventory.write() {
            *inventory = Some(Inventory::from_images(&images));
        }
        if self.settings.mirrors {
            summary.report_writes += self.write_mirror_report(&policy).await;
        }
        info!(
            pods = summary.pods,
            images = summary.images,
            lookups = summary.lookups,
            report_writes = summary.report_writes,
            events = summary.events,
            states = ?summary.states,
            seconds = format!("{:.2}", started.elapsed().as_secs_f64()),
            "recheck done"
        );
        Ok(summary)
    }

    /// The mode of `namespace`: its label, else the policy's; `None` when it cannot be known.
    async fn mode_of(&self, policy: &CompiledPolicy, namespace: &str) -> Option<Mode> {
        let label = match self.namespaces.label(namespace, MODE_LABEL).await {
            Ok(label) => label,
            Err(error) => match self.namespaces.last_known(namespace, MODE_LABEL) {
                Some(label) => label,
                None => {
                    warn!(
                        namespace,
                        error, "cannot read the namespace's mode; its report is left as it is"
                    );
                    return None;
                }
            },
        };
        match policy.mode_for(label.as_deref()) {
            Ok(mode) => Some(mode),
            Err(error) => {
                warn!(
                    namespace,
                    error, "invalid pinhook.dev/mode label; its report is left as it is"
                );
                None
            }
        }
    }

    /// Resolves every `tag@digest` image once per (tag, credentials).
    async fn look_up(
        &self,
        policy: &CompiledPolicy,
        pods: &[&PodRecord],
        modes: &HashMap<String, Option<Mode>>,
    ) -> Lookups {
        // Pods of one namespace with the same pull secrets share a keyring.
        let mut groups: BTreeMap<(String, Vec<String>), Vec<&PodRecord>> = BTreeMap::new();
        for pod in pods {
            match modes.get(&pod.namespace) {
                Some(Some(Mode::Enforce | Mode::Audit)) => {}
                _ => continue,
            }
            if policy.is_exempt_namespace(&pod.namespace) {
                continue;
            }
            groups
                .entry((pod.namespace.clone(), pod.pull_secrets.clone()))
                .or_default()
                .push(pod);
        }
        let mut keys: HashMap<LookupKey, (Reference, Vec<crate::registry::Credential>)> =
            HashMap::new();
        let mut site_keys: Vec<((String, String), LookupKey)> = Vec::new();
        for ((namespace, secrets), group) in &groups {
            let mut wanted: Vec<(&PodRecord, String, Reference)> = Vec::new();
            for pod in group {
                for site in &pod.images {
                    let Ok(reference) = Reference::parse(&site.image) else {
                        continue;
                    };
                    if reference.tag().is_none()
                        || reference.digest().is_none()
                        || policy.is_exempt_image(&reference)
                    {
                        continue;
                    }
                    wanted.push((pod, site.image.clone(), reference));
                }
            }
            if wanted.is_empty() {
                continue;
            }
            let mut repositories: Vec<String> =
                wanted.iter().map(|(_, _, r)| r.repository()).collect();
            repositories.sort();
            repositories.dedup();
            let spec = serde_json::json!({
                "imagePullSecrets": secrets.iter().map(|name| serde_json::json!({"name": name})).collect::<Vec<_>>(),
            });
            let context = PodContext {
                namespace,
                pod_spec: Some(&spec),
                is_pod: true,
                pod_name: "",
                images: &repositories,
                sources_deadline: None,
            };
            let keyring = self.secrets.keyring_for(&context).await;
            for warning in &keyring.warnings {
                debug!(namespace, warning, "pull credentials");
            }
            for (pod, image, reference) in wanted {
                let credentials = keyring.keyring.lookup(&reference);
                let fingerprints = credentials.iter().map(|c| c.fingerprint()).collect();
                let key = (reference.tag_reference(), fingerprints);
                site_keys.push(((pod.uid.clone(), image), key.clone()));
                keys.entry(key).or_insert((reference, credentials));
            }
        }
        let distinct = keys.len();
        let resolver = &self.resolver;
        let answers: HashMap<LookupKey, TagLookup> = futures::stream::iter(keys)
            .map(|(key, (reference, credentials))| async move {
                let lookup = match resolver.resolve(&reference, &credentials).await {
                    Ok(resolution) if resolution.source == ResolutionSource::Stale => {
                        TagLookup::Failed(format!("registry {} is unavailable", reference.domain()))
                    }
                    Ok(resolution) => TagLookup::Resolved(resolution.digest),
                    Err(error) => {
                        debug!(image = %reference, error = %error_chain(&error), "recheck failed");
                        TagLookup::Failed(format!(
                            "registry {}: {}",
                            reference.domain(),
                            error.kind().replace('_', " ")
                        ))
                    }
                };
                (key, lookup)
            })
            .buffer_unordered(LOOKUP_CONCURRENCY)
            .collect()
            .await;
        let by_site = site_keys
            .into_iter()
            .filter_map(|(site, key)| answers.get(&key).map(|l| (site, l.clone())))
            .collect();
        Lookups { distinct, by_site }
    }

    fn record_states(&self, states: &BTreeMap<&'static str, usize>) {
        for state in ImageState::NAMES {
            let count = states.get(state).copied().unwrap_or(0);
            self.metrics
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
        images: &[ClassifiedImage],
        modes: &HashMap<String, Option<Mode>>,
    ) -> Result<usize, CycleError> {
        let stored = api::namespace_report_digests(&self.client)
            .await
            .map_err(CycleError::ListReports)?;
        let mut by_namespace: BTreeMap<&str, Vec<&ClassifiedImage>> = BTreeMap::new();
        for image in images {
            by_namespace
                .entry(image.workload.namespace.as_str())
                .or_default()
                .push(image);
        }
        let mut namespaces: Vec<&str> = by_namespace.keys().copied().collect();
        namespaces.extend(stored.keys().map(String::as_str));
        namespaces.sort_unstable();
        namespaces.dedup();
        let now = Timestamp::from_system_time(std::time::SystemTime::now());
        let mut jobs = Vec::new();
        for namespace in namespaces {
            let (mode, images): (Mode, Vec<ClassifiedImage>) =
                match (by_namespace.get(namespace), modes.get(namespace)) {
                    (Some(images), Some(Some(mode))) => {
                        (*mode, images.iter().map(|i| (*i).clone()).collect())
                    }
                    // Pods whose namespace's mode is unknown this cycle: leave the report.
                    (Some(_), _) | (None, Some(None)) => continue,
                    // No running images left: the report goes.
                    (None, _) => (Mode::Enforce, Vec::new()),
                };
            let stored = stored.get(namespace).cloned();
            jobs.push(self.sync_report(namespace, mode, images, stored, now));
        }
        // A few namespaces at a time: one report can be a large object for the apiserver.
        let writes: Vec<usize> = futures::stream::iter(jobs)
            .buffer_unordered(REPORT_WRITE_CONCURRENCY)
            .collect()
            .await;
        Ok(writes.into_iter().sum())
    }

    /// Brings `namespace`'s report to what `images` say; 1 when it sent a write. `stored` is
    /// the stored report's content digest: `None` when there is no report, `Some(None)` when
    /// it has no digest.
    async fn sync_report(
        &self,
        namespace: &str,
        mode: Mode,
        images: Vec<ClassifiedImage>,
        stored: Option<Option<String>>,
        now: Timestamp,
    ) -> usize {
        let fresh = namespace_report(namespace, mode, &images, now, None);
        if let Some(Some(digest)) = &stored {
            if content_of(&fresh) == Some(digest) {
                return 0;
            }
        }
        let previous = match stored {
            None => None,
            Some(_) => match api::namespace_report(&self.client, namespace).await {
                Ok(previous) => previous,
                Err(error) => {
                    warn!(namespace, error = %error_chain(&error), "cannot read the namespace's PolicyReport");
                    return 0;
                }
            },
        };
        let desired = match &previous {
            Some(previous) => namespace_report(namespace, mode, &images, now, Some(previous)),
            None => fresh,
        };
        let write = plan(previous.as_ref(), desired);
        let target = (POLICY_REPORT_KIND, Some(namespace), REPORT_NAME);
        match api::write_report(&self.client, write, target).await {
            Ok(wrote) => usize::from(wrote),
            Err(error) => {
                warn!(namespace, error = %error_chain(&error), "cannot write the namespace's PolicyReport");
                1
            }
        }
    }

    /// Publishes the Events of findings new since the previous cycle; returns how many.
    async fn publish_events(
        &self,
        images: &[ClassifiedImage],
        modes: &HashMap<String, Option<Mode>>,
    ) -> usize {
        let mut previous = self.previous.lock().await;
        let mut current = HashSet::new();
        let mut moves = HashSet::new();
        let mut specs = Vec::new();
        for image in images {
            if let ImageState::TagMoved { pinned, now } = &image.state {
                let key = (
                    image.workload.describe(),
                    image.site.describe(),
                    pinned.to_string(),
                    now.to_string(),
                );
                if !previous.moves.contains(&key) {
                    self.metrics.tag_moved_running.inc();
                }
                moves.insert(key);
            }
            let Some(Some(mode)) = modes.get(&image.workload.namespace) else {
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
            if current.insert(key.clone()) && !previous.events.contains(&key) {
                specs.push(spec);
            }
        }
        let mut per_workload: HashMap<String, usize> = HashMap::new();
        let mut published = 0;
        for spec in specs {
            let count = per_workload.entry(spec.regarding.describe()).or_default();
            if *count >= self.settings.events_per_workload {
                debug!(workload = %spec.regarding.describe(), reason = spec.reason.as_str(), "event rate-limited");
                continue;
            }
            *count += 1;
            match self.events.publish(&spec).await {
                Ok(()) => published += 1,
                Err(error) => {
                    warn!(workload = %spec.regarding.describe(), error = %error_chain(&error), "cannot publish an Event")
                }
            }
        }
        previous.events = current;
        previous.moves = moves;
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
        if self.settings.mirror_config_maps {
            kinds.push(("", "v1", "ConfigMap", "configmaps"));
        }
        let mut findings: Vec<MirrorFinding> = Vec::new();
        for (group, version, kind, plural) in kinds {
            let objects = match api::list_all(&self.client, group, version, kind, plural).await {
                Ok(Some(objects)) => objects,
                Ok(None) => continue,
                Err(error) => {
                    warn!(kind, error = %error_chain(&error), "cannot list tag-mirror objects; the ClusterPolicyReport is left as it is");
                    return 0;
                }
            };
            for object in objects {
                match mirror_findings(&policy.policy.mirrors, &object) {
                    Ok(found) => findings.extend(found),
                    Err(error) => debug!(kind, error = %error, "unreadable tag-mirror object"),
                }
            }
        }
        let stored = match api::cluster_report(&self.client, MIRROR_REPORT_NAME).await {
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
        match api::write_report(&self.client, write, target).await {
            Ok(wrote) => usize::from(wrote),
            Err(error) => {
                warn!(error = %error_chain(&error), "cannot write the ClusterPolicyReport");
                1
            }
        }
    }
}

/// A report's content digest annotation.
fn content_of(report: &crate::watch::PolicyReport) -> Option<&String> {
    report
        .metadata
        .annotations
        .get(crate::watch::report::CONTENT_ANNOTATION)
}

/// The lookups of one cycle.
struct Lookups {
    distinct: usize,
    /// (pod uid, image as the Pod holds it) → outcome.
    by_site: HashMap<(String, String), TagLookup>,
}
