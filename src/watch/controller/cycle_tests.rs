//! Whole cycles against fakes of everything [`Watch`] reaches: the cluster ([`ClusterIo`]:
//! reports, Events, tag-mirror objects), the registry (a [`Resolver`] under the real cache),
//! keyrings (node only) and namespace labels. Each test asks what the cycle sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::super::keyrings::KEYRING_TIMEOUT;
use super::*;
use crate::cluster::LabelError;
use crate::policy::Policy;
use crate::reference::{Digest, Reference};
use crate::registry::pull_secrets::{NodeOnly, PodContext, PodKeyring};
use crate::registry::{
    CacheConfig, Credential, Fingerprint, RegistryError, Resolution, ResolutionSource,
};
use crate::watch::controller::api::ReportWriteError;
use crate::watch::controller::cluster_io::{ObjectKind, ReportPlace};
use crate::watch::events::EventSpec;
use crate::watch::report::{PolicyReport, ReportApi, ReportWrite, CONTENT_ANNOTATION};

fn digest(c: char) -> Digest {
    Digest::new_sha256(&c.to_string().repeat(64)).expect("valid sha256")
}

/// A registry whose tags point where the test says; every digest exists. Counts calls.
#[derive(Default)]
struct Tags {
    tags: Mutex<HashMap<String, Digest>>,
    calls: Mutex<usize>,
}

#[async_trait]
impl Resolver for Tags {
    async fn resolve(
        &self,
        reference: &Reference,
        _credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        *self.calls.lock().expect("calls") += 1;
        let found = match (reference.tag(), reference.digest()) {
            (None, Some(digest)) => Some(digest.clone()),
            _ => self
                .tags
                .lock()
                .expect("tags")
                .get(&reference.manifest_reference())
                .cloned(),
        };
        match found {
            Some(digest) => Ok(Resolution {
                digest,
                credential: Fingerprint::anonymous(),
                source: ResolutionSource::Registry,
                moved_from: None,
                age: Duration::ZERO,
                origin: None,
                verified: None,
            }),
            None => Err(RegistryError::NotFound {
                repository: reference.repository(),
                tag: reference.manifest(),
            }),
        }
    }
}

/// Namespace labels from a map; a namespace not in it cannot be read.
struct Labels(HashMap<String, Option<String>>);

#[async_trait]
impl NamespaceLabels for Labels {
    async fn label(&self, namespace: &str, _label: &str) -> Result<Option<String>, LabelError> {
        self.0.get(namespace).cloned().ok_or_else(|| LabelError {
            namespace: namespace.to_string(),
            reason: "forbidden".to_string(),
        })
    }
}

/// The cluster: stored namespace reports, and every write and Event sent.
#[derive(Default)]
struct FakeCluster {
    reports: Mutex<HashMap<String, PolicyReport>>,
    writes: Mutex<Vec<(String, &'static str)>>,
    events: Mutex<Vec<EventSpec>>,
    /// Listing the reports fails.
    broken: bool,
}

fn server_error() -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        code: 500,
        message: "etcd is down".to_string(),
        reason: "InternalError".to_string(),
        ..Default::default()
    }))
}

#[async_trait]
impl ClusterIo for FakeCluster {
    async fn report_digests(
        &self,
        _shape: ReportApi,
    ) -> Result<HashMap<String, Option<String>>, kube::Error> {
        if self.broken {
            return Err(server_error());
        }
        let reports = self.reports.lock().expect("reports");
        Ok(reports
            .iter()
            .map(|(namespace, report)| {
                let digest = report.metadata.annotations.get(CONTENT_ANNOTATION).cloned();
                (namespace.clone(), digest)
            })
            .collect())
    }

    async fn namespace_report(
        &self,
        _shape: ReportApi,
        namespace: &str,
    ) -> Result<Option<PolicyReport>, kube::Error> {
        Ok(self
            .reports
            .lock()
            .expect("reports")
            .get(namespace)
            .cloned())
    }

    async fn cluster_report(
        &self,
        _shape: ReportApi,
        _name: &str,
    ) -> Result<Option<PolicyReport>, kube::Error> {
        Ok(None)
    }

    async fn write_report(
        &self,
        _shape: ReportApi,
        write: ReportWrite,
        (_, namespace, name): ReportPlace<'_>,
    ) -> Result<bool, ReportWriteError> {
        let place = namespace.unwrap_or(name).to_string();
        let mut reports = self.reports.lock().expect("reports");
        let what = match write {
            ReportWrite::Create(report) => {
                reports.insert(place.clone(), report);
                "create"
            }
            ReportWrite::Update(report) => {
                reports.insert(place.clone(), report);
                "update"
            }
            ReportWrite::Delete => {
                reports.remove(&place);
                "delete"
            }
            ReportWrite::Unchanged => return Ok(false),
        };
        self.writes.lock().expect("writes").push((place, what));
        Ok(true)
    }

    async fn publish(&self, spec: &EventSpec) -> Result<(), kube::Error> {
        self.events.lock().expect("events").push(spec.clone());
        Ok(())
    }

    async fn for_each_object(
        &self,
        _kind: ObjectKind<'_>,
        _visit: &mut (dyn FnMut(Value) + Send),
    ) -> Result<bool, kube::Error> {
        Ok(true)
    }
}

struct Rig {
    watch: Watch,
    tags: Arc<Tags>,
    cluster: Arc<FakeCluster>,
}

/// A watch over `cluster` whose namespaces `shop` and `lab` are in enforce and audit, and
/// whose `hidden` namespace's label cannot be read.
fn rig(cluster: FakeCluster) -> Rig {
    rig_with(cluster, Arc::new(NodeOnly::default()))
}

/// [`rig`] with its pull credentials read from `secrets`.
fn rig_with(cluster: FakeCluster, secrets: Arc<dyn PullSecrets>) -> Rig {
    let tags = Arc::new(Tags::default());
    let metrics = Arc::new(Metrics::new());
    let cache = CacheConfig {
        hit_ttl: Duration::from_secs(600),
        ..CacheConfig::default()
    };
    let resolver = Arc::new(CachingResolver::new(tags.clone(), cache, metrics.clone()));
    let labels = HashMap::from([
        ("shop".to_string(), Some("enforce".to_string())),
        ("lab".to_string(), Some("audit".to_string())),
    ]);
    let cluster = Arc::new(cluster);
    let watch = Watch::new(WatchParts {
        cluster: cluster.clone(),
        policy: PolicyHandle::new(Policy::default().compile().expect("policy")),
        resolver,
        secrets,
        namespaces: Arc::new(Labels(labels)),
        metrics,
        settings: CycleSettings {
            events_per_workload: 5,
            mirrors: false,
            mirror_config_maps: false,
            report_api: ReportApi::Wgpolicyk8s,
        },
        signatures: None,
    });
    Rig {
        watch,
        tags,
        cluster,
    }
}

const APP: &str = "reg.example/team/app:1.4";

/// A running Pod of Deployment `web` in `namespace` with one container running `image`.
fn pod(namespace: &str, n: u32, image: &str) -> PodRecord {
    pod_pulling(namespace, n, image, &[])
}

/// [`pod`], naming `secrets` in its `imagePullSecrets`.
fn pod_pulling(namespace: &str, n: u32, image: &str, secrets: &[&str]) -> PodRecord {
    let secrets: Vec<Value> = secrets.iter().map(|name| json!({"name": name})).collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "namespace": namespace, "name": format!("web-7d9f-{n}"), "uid": format!("{namespace}-{n}"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs", "controller": true}],
        },
        "spec": {"containers": [{"name": "app", "image": image}], "imagePullSecrets": secrets},
        "status": {"phase": "Running"},
    });
    PodRecord::from_pod(&pod).expect("a readable pod")
}

fn writes(rig: &Rig) -> Vec<(String, &'static str)> {
    let mut writes = std::mem::take(&mut *rig.cluster.writes.lock().expect("writes"));
    writes.sort();
    writes
}

fn calls(rig: &Rig) -> usize {
    std::mem::take(&mut *rig.tags.calls.lock().expect("calls"))
}

/// A first cycle looks each (tag, credentials) up once and writes a report per namespace it
/// knows the mode of; a second, with nothing changed, asks the registry again (each cycle
/// starts with the cache expired) but writes nothing and publishes nothing new.
#[tokio::test]
async fn a_cycle_writes_each_known_namespace_once_and_an_unchanged_one_writes_nothing() {
    let rig = rig(FakeCluster::default());
    rig.tags.lock_point(APP, digest('a'));
    let pinned = format!("{APP}@{}", digest('a'));
    let pods = vec![
        pod("shop", 1, &pinned),
        pod("shop", 2, &pinned),
        pod("lab", 1, APP),
        pod("hidden", 1, APP),
    ];
    let first = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(first.pods, 4);
    assert_eq!(first.lookups, 1, "one (tag, credentials) key for every Pod");
    assert_eq!(first.report_writes, 2);
    assert_eq!(
        writes(&rig),
        [
            ("lab".to_string(), "create"),
            ("shop".to_string(), "create")
        ],
        "the namespace whose mode cannot be read is left as it is"
    );
    assert!(calls(&rig) >= 1);
    assert!(
        rig.watch.inventory().is_some(),
        "the inventory of the cycle"
    );

    let second = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(second.report_writes, 0);
    assert!(writes(&rig).is_empty());
    let events = rig.cluster.events.lock().expect("events").clone();
    assert_eq!(first.events, 1, "{events:?}");
    assert_eq!(
        (
            events[0].regarding.namespace.as_str(),
            events[0].reason.as_str()
        ),
        ("lab", "Unpinned"),
        "the audit namespace's Pod runs by tag (the unreadable namespace's is not judged)"
    );
    assert_eq!(second.events, 0, "nothing new to publish");
}

/// A tag that moves under a running pin is one Event, once: the next cycle that finds the
/// same move publishes nothing new.
#[tokio::test]
async fn a_tag_moved_under_a_running_pin_is_one_event_and_an_updated_report() {
    let rig = rig(FakeCluster::default());
    rig.tags.lock_point(APP, digest('a'));
    let pods = vec![pod("shop", 1, &format!("{APP}@{}", digest('a')))];
    let first = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(first.events, 0);
    assert_eq!(first.states.get("pinned-current"), Some(&1));
    writes(&rig);

    rig.tags.lock_point(APP, digest('b'));
    let moved = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(
        moved.states.get("tag-moved"),
        Some(&1),
        "{:?}",
        moved.states
    );
    assert_eq!(moved.events, 1);
    let events = rig.cluster.events.lock().expect("events").clone();
    assert_eq!(events.len(), 1);
    assert!(
        events[0].note.contains(&digest('b').to_string()),
        "{}",
        events[0].note
    );
    assert_eq!(writes(&rig), [("shop".to_string(), "update")]);

    let again = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(again.events, 0, "the same move is not published again");
    assert!(writes(&rig).is_empty());
}

/// The stored reports cannot be listed: the cycle stops with that error, having written
/// nothing.
#[tokio::test]
async fn a_cycle_that_cannot_list_the_reports_stops_and_writes_nothing() {
    let rig = rig(FakeCluster {
        broken: true,
        ..FakeCluster::default()
    });
    rig.tags.lock_point(APP, digest('a'));
    let failed = rig.watch.recheck(&[pod("shop", 1, APP)]).await;
    match failed {
        Err(CycleError::ListReports(kube::Error::Api(status))) => {
            assert_eq!(status.message, "etcd is down")
        }
        other => panic!("{other:?}"),
    }
    assert!(writes(&rig).is_empty());
    assert!(rig.cluster.events.lock().expect("events").is_empty());
}

/// The last Pod of a namespace goes: its report is deleted.
#[tokio::test]
async fn a_namespace_without_running_images_has_its_report_deleted() {
    let rig = rig(FakeCluster::default());
    rig.tags.lock_point(APP, digest('a'));
    rig.watch
        .recheck(&[pod("lab", 1, APP)])
        .await
        .expect("cycle");
    assert_eq!(writes(&rig), [("lab".to_string(), "create")]);
    let emptied = rig.watch.recheck(&[]).await.expect("cycle");
    assert_eq!(emptied.report_writes, 1);
    assert_eq!(writes(&rig), [("lab".to_string(), "delete")]);
    assert!(rig.cluster.reports.lock().expect("reports").is_empty());
}

/// Pull credentials whose reads for the `stuck` namespaces are never answered (an API server
/// holding them open); every other namespace gets the node's. Notes each namespace asked.
#[derive(Default)]
struct Stuck {
    stuck: Mutex<Vec<&'static str>>,
    asked: Mutex<Vec<String>>,
}

#[async_trait]
impl PullSecrets for Stuck {
    async fn keyring_for(&self, pod: &PodContext<'_>) -> PodKeyring {
        let namespace = pod.namespace.to_string();
        let stuck = self.stuck.lock().expect("stuck").contains(&pod.namespace);
        self.asked.lock().expect("asked").push(namespace);
        if stuck {
            std::future::pending::<()>().await;
        }
        PodKeyring::default()
    }
}

/// Pull Secret reads of one namespace that never come back cost a cycle [`KEYRING_TIMEOUT`],
/// not the client's read timeout: that namespace (its other groups not asked) is left as it
/// is, like one whose mode label cannot be read, never judged without its credentials; the
/// others are judged and written. The next cycle, answered, judges it.
#[tokio::test(start_paused = true)]
async fn a_namespace_whose_pull_secrets_never_come_is_left_as_it_is_after_the_keyring_timeout() {
    let secrets = Arc::new(Stuck::default());
    let rig = rig_with(FakeCluster::default(), secrets.clone());
    rig.tags.lock_point(APP, digest('a'));
    secrets.stuck.lock().expect("stuck").push("lab");
    let pods = vec![
        pod("shop", 1, APP),
        pod("lab", 1, APP),
        pod_pulling("lab", 2, APP, &["regcred"]),
    ];
    let started = tokio::time::Instant::now();
    let cycle = tokio::time::timeout(Duration::from_secs(3600), rig.watch.recheck(&pods))
        .await
        .expect("the cycle ends within the hour")
        .expect("cycle");
    assert_eq!(started.elapsed(), KEYRING_TIMEOUT);
    assert_eq!(*secrets.asked.lock().expect("asked"), ["lab", "shop"]);
    assert_eq!(cycle.states.get("unpinned"), Some(&1), "{:?}", cycle.states);
    assert_eq!(writes(&rig), [("shop".to_string(), "create")]);
    let events = rig.cluster.events.lock().expect("events").clone();
    assert!(
        events
            .iter()
            .all(|event| event.regarding.namespace != "lab"),
        "{events:?}"
    );

    secrets.stuck.lock().expect("stuck").clear();
    let answered = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(
        answered.states.get("unpinned"),
        Some(&3),
        "{:?}",
        answered.states
    );
    assert_eq!(writes(&rig), [("lab".to_string(), "create")]);
}

impl Tags {
    fn lock_point(&self, tag: &str, to: Digest) {
        self.tags.lock().expect("tags").insert(tag.to_string(), to);
    }
}
