//! `pinhook watch`'s recheck cycle against an in-process fake Kubernetes API and a scripted
//! registry: classification into PolicyReports, their writes (none when nothing changed),
//! Events, gauges, lookups per (tag, credentials), the mirror ClusterPolicyReport, and
//! `pinhook inventory`'s join of Pods and reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::common::fake_kube::FakeKube;
use pinhook::cluster::{KubeNamespaces, LabelError, NamespaceLabels};
use pinhook::metrics::Metrics;
use pinhook::policy::{Policy, PolicyHandle};
use pinhook::reference::{Digest, Reference};
use pinhook::registry::keyring::Keyring;
use pinhook::registry::pull_secrets::KubeSecrets;
use pinhook::registry::{
    CacheConfig, CachingResolver, Credential, Fingerprint, RegistryError, Resolution,
    ResolutionSource, Resolver, SignatureVerifier,
};
use pinhook::signatures::{Trust, Verdict};
use pinhook::watch::controller::{inventory, CycleSettings, KubeIo, Watch, WatchParts};
use pinhook::watch::report::ReportApi;
use pinhook::watch::PodRecord;

const REPORTS: &str = "apis/wgpolicyk8s.io/v1alpha2";
const OPENREPORTS: &str = "apis/openreports.io/v1alpha1";

fn digest(c: char) -> Digest {
    Digest::new_sha256(&c.to_string().repeat(64)).expect("valid sha256")
}

/// A registry whose tags point where the test says; counts calls per (tag, credentials).
#[derive(Default)]
struct Tags {
    tags: Mutex<HashMap<String, Digest>>,
    /// `repository@digest` of manifests deleted from the registry: every other digest exists.
    deleted: Mutex<Vec<String>>,
    calls: Mutex<Vec<(String, Vec<Fingerprint>)>>,
}

impl Tags {
    fn point(&self, tag_reference: &str, to: Digest) {
        self.tags
            .lock()
            .expect("tags")
            .insert(tag_reference.to_string(), to);
    }

    fn delete(&self, repository_at_digest: &str) {
        self.deleted
            .lock()
            .expect("deleted")
            .push(repository_at_digest.to_string());
    }

    fn take_calls(&self) -> Vec<(String, Vec<Fingerprint>)> {
        let mut calls = std::mem::take(&mut *self.calls.lock().expect("calls"));
        calls.sort();
        calls
    }
}

#[async_trait]
impl Resolver for Tags {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        let key = reference.manifest_reference();
        self.calls.lock().expect("calls").push((
            key.clone(),
            credentials.iter().map(Credential::fingerprint).collect(),
        ));
        // A manifest asked for by digest (the watch's check of a pin) exists unless deleted.
        let found = match (reference.tag(), reference.digest()) {
            (None, Some(digest)) => {
                (!self.deleted.lock().expect("deleted").contains(&key)).then(|| digest.clone())
            }
            _ => self.tags.lock().expect("tags").get(&key).cloned(),
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

pub(super) struct Rig {
    pub(super) api: FakeKube,
    tags: Arc<Tags>,
    pub(super) watch: Watch,
    metrics: Arc<Metrics>,
}

pub(super) async fn rig(policy: Policy) -> Rig {
    rig_with(
        policy,
        CycleSettings {
            events_per_workload: 5,
            mirrors: true,
            mirror_config_maps: false,
            report_api: ReportApi::Wgpolicyk8s,
        },
    )
    .await
}

async fn rig_with(policy: Policy, settings: CycleSettings) -> Rig {
    rig_with_namespaces(policy, settings, None, None).await
}

/// A rig whose namespace labels come from `namespaces` (the fake API's, when `None`).
async fn rig_with_namespaces(
    policy: Policy,
    settings: CycleSettings,
    namespaces: Option<Arc<dyn NamespaceLabels>>,
    signatures: Option<Arc<dyn SignatureVerifier>>,
) -> Rig {
    let api = FakeKube::start().await;
    let tags = Arc::new(Tags::default());
    let metrics = Arc::new(Metrics::new());
    let client = api.client();
    let cache = CacheConfig {
        hit_ttl: Duration::from_secs(600),
        ..CacheConfig::default()
    };
    let resolver = Arc::new(CachingResolver::new(tags.clone(), cache, metrics.clone()));
    let watch = Watch::new(WatchParts {
        cluster: Arc::new(KubeIo::new(client.clone(), "watch-0")),
        policy: PolicyHandle::new(policy.compile().expect("policy")),
        resolver,
        secrets: Arc::new(KubeSecrets::new(client.clone(), Keyring::new())),
        namespaces: namespaces
            .unwrap_or_else(|| Arc::new(KubeNamespaces::with_ttl(client, Duration::ZERO))),
        metrics: metrics.clone(),
        settings,
        signatures,
    });
    Rig {
        api,
        tags,
        watch,
        metrics,
    }
}

/// A Pod of Deployment `deployment` (through its ReplicaSet) running `images` (name, image).
pub(super) fn deployment_pod(
    namespace: &str,
    deployment: &str,
    n: u32,
    images: &[(&str, &str)],
) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .map(|(name, image)| json!({"name": name, "image": image}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "namespace": namespace, "name": format!("{deployment}-7d9f-{n}"), "uid": format!("{namespace}-{deployment}-{n}"),
            "labels": {"pod-template-hash": "7d9f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{deployment}-7d9f"), "uid": "rs-uid", "controller": true}],
        },
        "spec": {"containers": containers},
    })
}

pub(super) fn record(pod: &Value) -> PodRecord {
    PodRecord::from_pod(pod).expect("a readable pod")
}

fn report(api: &FakeKube, namespace: &str) -> Option<Value> {
    api.get(&format!(
        "{REPORTS}/namespaces/{namespace}/policyreports/pinhook"
    ))
}

/// (rule, result, message) of each result of `report`.
fn results(report: &Value) -> Vec<(String, String, String)> {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                r["rule"].as_str().unwrap_or_default().to_string(),
                r["result"].as_str().unwrap_or_default().to_string(),
                r["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// `workload/Reason` of every Event the fake API holds.
fn event_reasons(api: &FakeKube) -> Vec<String> {
    api.all("events")
        .iter()
        .map(|e| {
            format!(
                "{}/{}",
                e["regarding"]["name"].as_str().unwrap_or_default(),
                e["reason"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn gauge(metrics: &Metrics, line_start: &str) -> String {
    let text = metrics.encode().expect("encode");
    text.lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_default()
        .to_string()
}

const APP: &str = "reg.example/team/app:1.4";
const APP_TAG: &str = "reg.example/team/app:1.4";

#[tokio::test]
async fn a_tag_moved_under_a_running_pin_fails_tag_current_with_both_digests_and_is_an_event() {
    let rig = rig(Policy::default()).await;
    let pinned = format!("{APP}@{}", digest('a'));
    let pods = vec![
        record(&deployment_pod("shop", "web", 1, &[("app", &pinned)])),
        record(&deployment_pod("shop", "web", 2, &[("app", &pinned)])),
    ];
    rig.tags.point(APP_TAG, digest('a'));

    let first = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(first.lookups, 1, "two Pods, one (tag, credentials) key");
    assert_eq!(rig.tags.take_calls().len(), 1);
    assert_eq!(first.states.get("pinned-current"), Some(&2));
    let stored = report(&rig.api, "shop").expect("the namespace's report");
    assert_eq!(
        results(&stored)
            .iter()
            .map(|(rule, result, _)| format!("{rule}={result}"))
            .collect::<Vec<_>>(),
        ["pinned=pass", "tag-current=pass"]
    );
    assert!(rig.api.all("events").is_empty(), "nothing worth an Event");

    // The tag is re-pushed: the next cycle asks the registry again and sees it.
    rig.tags.point(APP_TAG, digest('b'));
    let second = rig.watch.recheck(&pods).await.expect("cycle");
    let calls: Vec<String> = rig.tags.take_calls().into_iter().map(|c| c.0).collect();
    assert_eq!(
        calls,
        [
            APP_TAG.to_string(),
            format!("reg.example/team/app@{}", digest('a'))
        ],
        "one lookup again, and one check that the pin (no longer the tag's) still exists"
    );
    assert_eq!(second.digest_checks, 1);
    assert_eq!(second.states.get("tag-moved"), Some(&2));
    let stored = report(&rig.api, "shop").expect("the namespace's report");
    let (rule, result, message) = results(&stored)[1].clone();
    assert_eq!((rule.as_str(), result.as_str()), ("tag-current", "fail"));
    assert_eq!(
        message,
        format!(
            "containers[app] runs {pinned}: its tag now resolves to {}, not the pinned {}",
            digest('b'),
            digest('a')
        )
    );
    assert_eq!(
        stored["results"][1]["properties"]["currentDigest"],
        json!(digest('b').to_string())
    );
    assert_eq!(
        stored["results"][1]["resources"][0],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "web"})
    );

    let events = rig.api.all("events");
    assert_eq!(events.len(), 1, "one Event for the Deployment: {events:?}");
    let event = &events[0];
    assert_eq!(event["reason"], "TagMoved");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["kind"], "Deployment");
    assert_eq!(event["regarding"]["name"], "web");
    assert_eq!(event["reportingController"], "pinhook.dev/watch");
    assert_eq!(event["reportingInstance"], "watch-0");

    assert_eq!(
        gauge(&rig.metrics, "pinhook_running_images{state=\"tag-moved\"}"),
        "pinhook_running_images{state=\"tag-moved\"} 2"
    );
    assert_eq!(
        gauge(
            &rig.metrics,
            "pinhook_running_images{state=\"pinned-current\"}"
        ),
        "pinhook_running_images{state=\"pinned-current\"} 0"
    );
    assert_eq!(
        gauge(&rig.metrics, "pinhook_tag_moved_running_total"),
        "pinhook_tag_moved_running_total 2"
    );
}

#[tokio::test]
async fn an_unchanged_cluster_costs_one_lookup_per_key_and_no_write() {
    let rig = rig(Policy::default()).await;
    let pinned = format!("{APP}@{}", digest('a'));
    let db = format!("reg.example/team/db:2@{}", digest('c'));
    let pods = vec![
        record(&deployment_pod("shop", "web", 1, &[("app", &pinned)])),
        record(&deployment_pod(
            "shop",
            "api",
            1,
            &[("app", &pinned), ("db", &db)],
        )),
        record(&deployment_pod("blog", "web", 1, &[("app", &pinned)])),
    ];
    rig.tags.point(APP_TAG, digest('a'));
    rig.tags.point("reg.example/team/db:2", digest('d'));
    rig.watch.recheck(&pods).await.expect("cycle");
    let writes = rig.api.writes().len();
    assert!(writes >= 2, "two reports and an Event: {writes}");
    rig.tags.take_calls();
    let reads = rig.api.reads().len();

    for _ in 0..3 {
        let again = rig.watch.recheck(&pods).await.expect("cycle");
        assert_eq!(again.report_writes, 0);
        assert_eq!(again.events, 0);
        assert_eq!(
            rig.tags.take_calls().len(),
            3,
            "app:1.4 and db:2 once each, and db's pin (its tag moved) checked once"
        );
    }
    assert_eq!(
        rig.api.writes().len(),
        writes,
        "no write to the apiserver when nothing changed: {:?}",
        &rig.api.writes()[writes..]
    );
    let report_reads: Vec<String> = rig.api.reads()[reads..]
        .iter()
        .filter(|path| path.ends_with("/policyreports/pinhook"))
        .cloned()
        .collect();
    assert_eq!(
        report_reads,
        Vec::<String>::new(),
        "unchanged reports are compared by their digest, never read whole"
    );
}

/// Namespace labels that take 20 ms to read and count how many reads are in flight at once.
#[derive(Default)]
struct SlowNamespaces {
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    reads: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl NamespaceLabels for SlowNamespaces {
    async fn label(&self, _namespace: &str, _label: &str) -> Result<Option<String>, LabelError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        self.reads.fetch_add(1, SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.in_flight.fetch_sub(1, SeqCst);
        Ok(Some("enforce".to_string()))
    }
}

#[tokio::test]
async fn namespace_modes_are_read_eight_at_a_time_and_reports_listed_from_the_watch_cache() {
    use std::sync::atomic::Ordering::SeqCst;
    let namespaces = Arc::new(SlowNamespaces::default());
    let rig = rig_with_namespaces(
        Policy::default(),
        CycleSettings {
            events_per_workload: 5,
            mirrors: false,
            mirror_config_maps: false,
            report_api: ReportApi::Wgpolicyk8s,
        },
        Some(namespaces.clone()),
        None,
    )
    .await;
    let pinned = format!("{APP}@{}", digest('a'));
    rig.tags.point(APP_TAG, digest('a'));
    let pods: Vec<PodRecord> = (0..40)
        .map(|n| {
            record(&deployment_pod(
                &format!("team-{n}"),
                "web",
                1,
                &[("app", &pinned)],
            ))
        })
        .collect();
    let summary = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(summary.report_writes, 40, "one report per namespace");
    assert_eq!(
        namespaces.reads.load(SeqCst),
        40,
        "each namespace's mode read once"
    );
    assert_eq!(
        namespaces.most.load(SeqCst),
        8,
        "namespace modes read eight at a time, never more"
    );
    let report_lists: Vec<String> = rig
        .api
        .lists()
        .into_iter()
        .filter(|list| list.contains("/policyreports?"))
        .collect();
    assert_eq!(report_lists.len(), 1, "{report_lists:?}");
    assert!(
        report_lists[0].contains("resourceVersion=0") && !report_lists[0].contains("limit="),
        "the reports' metadata comes from the watch cache, whole: {report_lists:?}"
    );
}

/// A rig whose namespace `legacy` is in audit mode, and the record of a Deployment's Pod there
/// running `reg.example/team/app:1.4` by tag.
async fn audit_namespace_with_an_unpinned_pod() -> (Rig, Vec<PodRecord>) {
    let rig = rig(Policy::default()).await;
    rig.api.put(
        "api/v1/namespaces/legacy",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "legacy", "labels": {"pinhook.dev/mode": "audit"}}}),
    );
    let pods = vec![record(&deployment_pod(
        "legacy",
        "old",
        1,
        &[("app", "reg.example/team/app:1.4")],
    ))];
    (rig, pods)
}

#[tokio::test]
async fn an_unpinned_image_in_an_audit_namespace_warns_and_is_an_unpinned_event() {
    let (rig, pods) = audit_namespace_with_an_unpinned_pod().await;
    let summary = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(
        summary.lookups, 1,
        "an unpinned tag is looked up once, to compare what the node runs with it"
    );
    assert_eq!(rig.tags.take_calls().len(), 1);
    let stored = report(&rig.api, "legacy").expect("report");
    assert_eq!(
        results(&stored),
        [(
            "pinned".to_string(),
            "warn".to_string(),
            "containers[app] runs reg.example/team/app:1.4 by tag, not pinned to a digest"
                .to_string()
        )]
    );
    assert_eq!(stored["results"][0]["properties"]["state"], "unpinned");
    let events = rig.api.all("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["reason"], "Unpinned");
    assert_eq!(events[0]["regarding"]["name"], "old");
}

#[tokio::test]
async fn the_report_goes_with_the_namespace_last_pod_and_a_returning_finding_is_a_series() {
    let (rig, pods) = audit_namespace_with_an_unpinned_pod().await;
    rig.watch.recheck(&pods).await.expect("cycle");
    assert!(report(&rig.api, "legacy").is_some());

    let gone = rig.watch.recheck(&[]).await.expect("cycle");
    assert_eq!(gone.report_writes, 1);
    assert_eq!(
        report(&rig.api, "legacy"),
        None,
        "deleted with its last Pod"
    );
    assert_eq!(
        rig.api.writes().last().map(|w| w.0.as_str()),
        Some("DELETE")
    );

    // The Pod comes back: same Event, counted in its series (a patch, not a second Event).
    rig.watch.recheck(&pods).await.expect("cycle");
    let events = rig.api.all("events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["series"]["count"], 2);
}

#[tokio::test]
async fn the_namespace_mode_off_skips_and_exempt_namespaces_and_images_are_not_looked_up() {
    let policy =
        Policy::parse("exempt:\n  namespaces: [kube-*]\n  images: ['reg.example/team/tool*']\n")
            .expect("policy")
            .policy;
    let rig = rig(policy).await;
    rig.api.put(
        "api/v1/namespaces/quiet",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "quiet", "labels": {"pinhook.dev/mode": "off"}}}),
    );
    let pinned = format!("{APP}@{}", digest('a'));
    let tool = format!("reg.example/team/tool:1@{}", digest('e'));
    let pods = vec![
        record(&deployment_pod(
            "kube-system",
            "dns",
            1,
            &[("app", &pinned)],
        )),
        record(&deployment_pod("quiet", "web", 1, &[("app", &pinned)])),
        record(&deployment_pod("shop", "web", 1, &[("tool", &tool)])),
    ];
    let summary = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(summary.lookups, 0);
    assert_eq!(summary.states.get("exempt"), Some(&2));
    let quiet = report(&rig.api, "quiet").expect("report");
    assert_eq!(results(&quiet)[0].1, "skip");
    assert!(rig.api.all("events").is_empty());
}

#[tokio::test]
async fn a_failed_lookup_is_unresolvable_with_a_stable_reason() {
    let rig = rig(Policy::default()).await;
    let pinned = format!("reg.example/team/gone:1@{}", digest('a'));
    let pods = vec![record(&deployment_pod(
        "shop",
        "web",
        1,
        &[("app", &pinned)],
    ))];
    rig.watch.recheck(&pods).await.expect("cycle");
    let stored = report(&rig.api, "shop").expect("report");
    assert_eq!(
        results(&stored)[1],
        (
            "tag-current".to_string(),
            "error".to_string(),
            format!("containers[app] runs {pinned}: its tag could not be checked: registry reg.example: not found")
        )
    );
    let writes = rig.api.writes().len();
    rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(
        rig.api.writes().len(),
        writes,
        "the same failure is no change"
    );
    let events = rig.api.all("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["reason"], "ResolutionFailed");
}

#[tokio::test]
async fn pods_with_different_pull_secrets_are_looked_up_once_per_credential() {
    let rig = rig(Policy::default()).await;
    for (ns, user) in [("shop", "alice"), ("blog", "bob")] {
        let auth = base64_of(&format!("{user}:secret"));
        let config = json!({"auths": {"reg.example": {"auth": auth}}}).to_string();
        rig.api.put(
            &format!("api/v1/namespaces/{ns}/secrets/pull"),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                   "metadata": {"name": "pull", "namespace": ns},
                   "data": {".dockerconfigjson": base64_of(&config)}}),
        );
    }
    let pinned = format!("{APP}@{}", digest('a'));
    let mut pods = Vec::new();
    for ns in ["shop", "blog"] {
        for n in 0..3 {
            let mut pod = deployment_pod(ns, "web", n, &[("app", &pinned)]);
            pod["spec"]["imagePullSecrets"] = json!([{"name": "pull"}]);
            pods.push(record(&pod));
        }
    }
    rig.tags.point(APP_TAG, digest('a'));
    let summary = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(summary.lookups, 2);
    let calls = rig.tags.take_calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_ne!(calls[0].1, calls[1].1, "each namespace's own credential");
    assert!(calls
        .iter()
        .all(|(_, fingerprints)| !fingerprints.is_empty()));
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn an_image_tag_mirror_set_fails_the_cluster_policy_report() {
    let rig = rig(Policy::default()).await;
    rig.api.put(
        "apis/config.openshift.io/v1/imagetagmirrorsets/legacy-mirror",
        json!({"apiVersion": "config.openshift.io/v1", "kind": "ImageTagMirrorSet",
               "metadata": {"name": "legacy-mirror", "uid": "itms-uid"},
               "spec": {"imageTagMirrors": [{"source": "docker.io/library", "mirrors": ["mirror.example/library"]}]}}),
    );
    let summary = rig.watch.recheck(&[]).await.expect("cycle");
    assert_eq!(summary.report_writes, 1);
    let stored = rig
        .api
        .get(&format!("{REPORTS}/clusterpolicyreports/pinhook-mirrors"))
        .expect("the ClusterPolicyReport");
    assert_eq!(stored["kind"], "ClusterPolicyReport");
    assert_eq!(stored["results"][0]["result"], "fail");
    assert_eq!(stored["results"][0]["rule"], "mirror-by-digest-only");
    assert_eq!(
        stored["results"][0]["resources"][0]["kind"],
        "ImageTagMirrorSet"
    );
    let again = rig.watch.recheck(&[]).await.expect("cycle");
    assert_eq!(again.report_writes, 0, "unchanged: not written again");
}

#[tokio::test]
async fn with_openreports_the_watch_writes_reports_and_cluster_reports_only() {
    let rig = rig_with(
        Policy::default(),
        CycleSettings {
            events_per_workload: 5,
            mirrors: true,
            mirror_config_maps: false,
            report_api: ReportApi::OpenReports,
        },
    )
    .await;
    rig.api.put(
        "apis/config.openshift.io/v1/imagetagmirrorsets/legacy-mirror",
        json!({"apiVersion": "config.openshift.io/v1", "kind": "ImageTagMirrorSet",
               "metadata": {"name": "legacy-mirror", "uid": "itms-uid"},
               "spec": {"imageTagMirrors": [{"source": "docker.io/library", "mirrors": ["mirror.example/library"]}]}}),
    );
    let pinned = format!("{APP}@{}", digest('a'));
    let pods = vec![record(&deployment_pod(
        "shop",
        "web",
        1,
        &[("app", &pinned)],
    ))];
    rig.tags.point(APP_TAG, digest('b'));

    let first = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(first.report_writes, 2, "the Report and the ClusterReport");
    let stored = rig
        .api
        .get(&format!("{OPENREPORTS}/namespaces/shop/reports/pinhook"))
        .expect("the namespace's Report");
    assert_eq!(stored["apiVersion"], "openreports.io/v1alpha1");
    assert_eq!(stored["kind"], "Report");
    assert_eq!(stored["source"], "pinhook");
    assert_eq!(
        stored["configuration"],
        json!({"limits": {"maxResults": 1000}})
    );
    assert_eq!(
        stored["summary"],
        json!({"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0})
    );
    assert_eq!(
        results(&stored)
            .iter()
            .map(|(rule, result, _)| format!("{rule}={result}"))
            .collect::<Vec<_>>(),
        ["pinned=pass", "tag-current=fail"]
    );
    assert_eq!(
        stored["results"][1]["resources"][0],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "web"})
    );
    let mirrors = rig
        .api
        .get(&format!("{OPENREPORTS}/clusterreports/pinhook-mirrors"))
        .expect("the ClusterReport");
    assert_eq!(mirrors["kind"], "ClusterReport");
    assert_eq!(mirrors["results"][0]["rule"], "mirror-by-digest-only");
    assert_eq!(mirrors["results"][0]["result"], "fail");
    let wgpolicyk8s = |paths: Vec<String>| {
        paths
            .into_iter()
            .filter(|p| p.contains("wgpolicyk8s.io"))
            .collect::<Vec<_>>()
    };
    let written = rig.api.writes().into_iter().map(|(_, path)| path).collect();
    assert_eq!(
        wgpolicyk8s(written),
        Vec::<String>::new(),
        "no PolicyReport written"
    );
    assert_eq!(
        wgpolicyk8s(rig.api.reads()),
        Vec::<String>::new(),
        "none read"
    );

    // Unchanged: nothing written, the Report compared by its digest, never read whole.
    let writes = rig.api.writes().len();
    let reads = rig.api.reads().len();
    let again = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(again.report_writes, 0);
    assert_eq!(
        rig.api.writes().len(),
        writes,
        "{:?}",
        &rig.api.writes()[writes..]
    );
    assert!(
        !rig.api.reads()[reads..]
            .iter()
            .any(|path| path.ends_with("/reports/pinhook")),
        "{:?}",
        &rig.api.reads()[reads..]
    );

    // The tag comes back: the Report is updated in place, then deleted with the last Pod.
    rig.tags.point(APP_TAG, digest('a'));
    let back = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(back.report_writes, 1);
    let stored = rig
        .api
        .get(&format!("{OPENREPORTS}/namespaces/shop/reports/pinhook"))
        .expect("the namespace's Report");
    assert_eq!(stored["summary"]["pass"], 2);
    let gone = rig.watch.recheck(&[]).await.expect("cycle");
    assert_eq!(gone.report_writes, 1);
    assert_eq!(
        rig.api
            .get(&format!("{OPENREPORTS}/namespaces/shop/reports/pinhook")),
        None
    );
    assert_eq!(
        rig.api
            .get(&format!("{REPORTS}/namespaces/shop/policyreports/pinhook")),
        None
    );
}

#[tokio::test]
async fn the_inventory_joins_pods_with_the_reports_and_finds_where_a_digest_runs() {
    let rig = rig(Policy::default()).await;
    let pinned = format!("{APP}@{}", digest('a'));
    let pods = vec![
        record(&deployment_pod("shop", "web", 1, &[("app", &pinned)])),
        record(&deployment_pod("shop", "web", 2, &[("app", &pinned)])),
        record(&deployment_pod(
            "blog",
            "cms",
            1,
            &[("app", "reg.example/team/cms:3")],
        )),
    ];
    rig.tags.point(APP_TAG, digest('b'));
    rig.watch.recheck(&pods).await.expect("cycle");
    let reports: Vec<pinhook::watch::PolicyReport> = ["shop", "blog"]
        .iter()
        .map(|ns| serde_json::from_value(report(&rig.api, ns).expect("report")).expect("a report"))
        .collect();
    let joined = inventory::join(&pods, &reports);
    let rows: Vec<(String, &str, usize)> = joined
        .images
        .iter()
        .map(|r| (r.image.clone(), r.state, r.pods))
        .collect();
    assert_eq!(
        rows,
        [
            (
                "reg.example/team/app:1.4@".to_string() + &digest('a').to_string(),
                "tag-moved",
                2
            ),
            ("reg.example/team/cms:3".to_string(), "unpinned", 1),
        ]
    );
    assert_eq!(
        joined.images[0].current_digest,
        Some(digest('b').to_string())
    );
    // The watch's own inventory says the same.
    let own = rig.watch.inventory().expect("a cycle ran");
    assert_eq!(**own, joined);
    assert_eq!(joined.with_digest(&digest('b')).images.len(), 1);
    assert!(joined.with_digest(&digest('f')).images.is_empty());
}

#[tokio::test]
async fn config_maps_are_listed_in_pages_and_a_mirror_on_the_last_page_is_found() {
    let rig = rig_with(
        Policy::default(),
        CycleSettings {
            events_per_workload: 5,
            mirrors: true,
            mirror_config_maps: true,
            report_api: ReportApi::Wgpolicyk8s,
        },
    )
    .await;
    // 1,200 plain ConfigMaps, then (in key order) one with a tag mirror.
    for i in 0..1200 {
        rig.api.put(
            &format!("api/v1/namespaces/apps/configmaps/cm-{i:04}"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i:04}"), "namespace": "apps"},
                   "data": {"key": "value"}}),
        );
    }
    rig.api.put(
        "api/v1/namespaces/zz-nodes/configmaps/registries",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "registries", "namespace": "zz-nodes", "uid": "cm-uid"},
               "data": {"registries.conf": "[[registry]]\nlocation = \"a.example\"\n[[registry.mirror]]\nlocation = \"m.example\"\n"}}),
    );
    let summary = rig.watch.recheck(&[]).await.expect("cycle");
    assert_eq!(summary.report_writes, 1);
    let stored = rig
        .api
        .get(&format!("{REPORTS}/clusterpolicyreports/pinhook-mirrors"))
        .expect("the ClusterPolicyReport");
    assert_eq!(stored["results"][0]["resources"][0]["name"], "registries");
    assert_eq!(stored["results"][0]["result"], "fail");
    let lists: Vec<String> = rig
        .api
        .lists()
        .into_iter()
        .filter(|l| l.starts_with("/api/v1/configmaps?"))
        .collect();
    assert_eq!(lists.len(), 3, "three pages of 500: {lists:?}");
    assert!(lists.iter().all(|l| l.contains("limit=500")), "{lists:?}");
    assert!(!lists[0].contains("continue="), "{lists:?}");
    assert!(lists[1].contains("continue=500"), "{lists:?}");
    assert!(lists[2].contains("continue=1000"), "{lists:?}");
    // Every other cluster-wide list of the cycle asks for a page too, but the one list of
    // pinhook's own reports' metadata: the apiserver's watch cache answers it whole (limit or
    // not), so it asks for none and says resourceVersion=0.
    let unpaged: Vec<String> = rig
        .api
        .lists()
        .into_iter()
        .filter(|l| !l.contains("limit="))
        .collect();
    assert_eq!(unpaged.len(), 1, "lists without a limit: {unpaged:?}");
    assert!(
        unpaged[0].starts_with(&format!("/{REPORTS}/policyreports?"))
            && unpaged[0].contains("resourceVersion=0"),
        "lists without a limit: {unpaged:?}"
    );
}

#[tokio::test]
async fn the_watch_writes_and_deletes_only_reports_named_pinhook_and_pinhook_mirrors() {
    let rig = rig(Policy::default()).await;
    // A tenant's PolicyReport that copies pinhook's label, in a namespace with no Pods.
    rig.api.put(
        &format!("{REPORTS}/namespaces/shop/policyreports/tenant-report"),
        json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
               "metadata": {"name": "tenant-report", "namespace": "shop",
                            "labels": {"app.kubernetes.io/managed-by": "pinhook"}},
               "results": [], "summary": {}}),
    );
    // pinhook's own report in a namespace whose Pods are gone, and one with a Pod.
    rig.api.put(
        &format!("{REPORTS}/namespaces/gone/policyreports/pinhook"),
        json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
               "metadata": {"name": "pinhook", "namespace": "gone",
                            "labels": {"app.kubernetes.io/managed-by": "pinhook"}},
               "results": [], "summary": {}}),
    );
    rig.api.put(
        "apis/config.openshift.io/v1/imagetagmirrorsets/legacy-mirror",
        json!({"apiVersion": "config.openshift.io/v1", "kind": "ImageTagMirrorSet",
               "metadata": {"name": "legacy-mirror", "uid": "itms-uid"},
               "spec": {"imageTagMirrors": [{"source": "docker.io/library", "mirrors": ["mirror.example/library"]}]}}),
    );
    let pods = vec![record(&deployment_pod(
        "blog",
        "cms",
        1,
        &[("app", "reg.example/team/cms:3")],
    ))];
    rig.watch.recheck(&pods).await.expect("cycle");
    let report_writes: Vec<(String, String)> = rig
        .api
        .writes()
        .into_iter()
        .filter(|(_, path)| path.contains("policyreports"))
        .collect();
    assert!(!report_writes.is_empty());
    for (method, path) in &report_writes {
        let name = path.rsplit('/').next().unwrap_or_default();
        let own = if path.contains("clusterpolicyreports") {
            name == "pinhook-mirrors"
        } else {
            name == "pinhook"
        };
        assert!(own, "{method} {path}: not one of pinhook's report names");
    }
    assert!(
        report_writes.contains(&(
            "DELETE".into(),
            format!("/{REPORTS}/namespaces/gone/policyreports/pinhook")
        )),
        "{report_writes:?}"
    );
    assert!(
        rig.api
            .get(&format!(
                "{REPORTS}/namespaces/shop/policyreports/tenant-report"
            ))
            .is_some(),
        "a tenant's report is never touched"
    );
    // Nor is it taken for pinhook's: no report in its namespace is read or written.
    assert!(
        !report_writes
            .iter()
            .any(|(_, path)| path.contains("/namespaces/shop/")),
        "{report_writes:?}"
    );
    let shop_reads: Vec<String> = rig
        .api
        .reads()
        .into_iter()
        .filter(|path| path.contains("/namespaces/shop/policyreports"))
        .collect();
    assert!(shop_reads.is_empty(), "{shop_reads:?}");
}

#[tokio::test]
async fn a_pin_deleted_from_the_registry_is_digest_missing_and_a_pod_running_another_digest_is_named(
) {
    let rig = rig(Policy::default()).await;
    let pinned = format!("{APP}@{}", digest('a'));
    let mut drifted = deployment_pod("shop", "api", 1, &[("app", &pinned)]);
    drifted["spec"]["nodeName"] = json!("node-9");
    drifted["status"] = json!({"containerStatuses": [
        {"name": "app", "imageID": format!("reg.example/team/app@{}", digest('e'))}
    ]});
    let pods = vec![
        record(&deployment_pod("shop", "web", 1, &[("app", &pinned)])),
        record(&drifted),
    ];
    rig.tags.point(APP_TAG, digest('a'));
    let first = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(first.digest_checks, 0, "the tag still names the pin");
    assert_eq!(first.states.get("pinned-current"), Some(&1));
    assert_eq!(first.states.get("runs-other-digest"), Some(&1));

    // The tag moves on and the pinned manifest is deleted (a retention policy).
    rig.tags.point(APP_TAG, digest('b'));
    rig.tags
        .delete(&format!("reg.example/team/app@{}", digest('a')));
    rig.tags.take_calls();
    let second = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(
        second.digest_checks, 1,
        "one check of the pin for both Pods"
    );
    assert_eq!(
        rig.tags.take_calls().len(),
        2,
        "the tag and the pin, once each"
    );
    assert_eq!(second.states.get("digest-missing"), Some(&1));
    assert_eq!(second.states.get("runs-other-digest"), Some(&1));
    let stored = report(&rig.api, "shop").expect("the namespace's report");
    let found: Vec<String> = results(&stored)
        .iter()
        .map(|(rule, result, _)| format!("{rule}={result}"))
        .collect();
    assert_eq!(
        found,
        [
            "pinned=pass",
            "runs-pinned=fail",
            "pinned=pass",
            "digest-available=fail"
        ]
    );
    let runs = &stored["results"][1];
    assert_eq!(runs["properties"]["node"], "node-9");
    assert_eq!(
        runs["properties"]["runningDigest"],
        json!(digest('e').to_string())
    );
    let reasons = event_reasons(&rig.api);
    assert!(
        reasons.contains(&"web/PinnedDigestMissing".to_string())
            && reasons.contains(&"api/RunsOtherDigest".to_string()),
        "{reasons:?}"
    );
    assert_eq!(
        gauge(
            &rig.metrics,
            "pinhook_running_images{state=\"digest-missing\"}"
        ),
        "pinhook_running_images{state=\"digest-missing\"} 1"
    );
}

/// Signatures as a registry would have them: `signed` digests signed by the key of trust
/// `by` (fingerprint), nothing else signed.
struct Signed {
    by: String,
    signed: Vec<Digest>,
}

#[async_trait]
impl SignatureVerifier for Signed {
    async fn verify(
        &self,
        _image: &Reference,
        digest: &Digest,
        _credentials: &[Credential],
        trust: &Arc<Trust>,
    ) -> Result<Verdict, RegistryError> {
        if !self.signed.contains(digest) {
            return Ok(Verdict::NoSignature);
        }
        Ok(match trust.fingerprint() == self.by {
            true => Verdict::Verified {
                signer: self.by.as_str().into(),
            },
            false => Verdict::OtherKey,
        })
    }
}

/// A policy whose one `verify` entry covers reg.example/team/* with the key in `pem`.
fn verifying(pem: &str) -> Policy {
    let text = format!(
        "verify:\n- images: [\"reg.example/team/*\"]\n  keys:\n  - pem: {}\n",
        serde_json::to_string(pem).expect("json")
    );
    pinhook::policy::Policy::parse(&text)
        .expect("policy")
        .policy
}

/// The watch verifies again, each cycle and against the policy in force, every running digest a
/// `verify` entry covers (issue 46): an unsigned pin is `unverified` (report `signed` fail, an
/// Event, the gauge), and a key rotated out of the policy makes a pin signed by it
/// `unverified` at the next cycle.
#[tokio::test]
async fn running_digests_are_verified_again_against_the_policy_in_force() {
    let (_, key) = crate::common::signing::key_pair_pem();
    let (_, rotated) = crate::common::signing::key_pair_pem();
    let policy = verifying(&key);
    let trust = pinhook::policy::Policy::parse(&format!(
        "verify:\n- images: [\"x/*\"]\n  keys:\n  - pem: {}\n",
        serde_json::to_string(&key).expect("json")
    ))
    .expect("policy")
    .verify[0]
        .trust
        .fingerprint()
        .to_string();
    let signed = Arc::new(Signed {
        by: trust,
        signed: vec![digest('a')],
    });
    let rig = rig_with_namespaces(
        policy,
        CycleSettings {
            events_per_workload: 5,
            mirrors: false,
            mirror_config_maps: false,
            report_api: ReportApi::Wgpolicyk8s,
        },
        None,
        Some(signed),
    )
    .await;
    let pods = vec![
        record(&deployment_pod(
            "shop",
            "web",
            1,
            &[("app", &format!("{APP}@{}", digest('a')))],
        )),
        record(&deployment_pod(
            "shop",
            "api",
            1,
            &[("app", &format!("reg.example/team/api@{}", digest('b')))],
        )),
    ];
    rig.tags.point(APP_TAG, digest('a'));
    let first = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(
        first.signature_checks, 2,
        "one per (repository, digest, trust)"
    );
    assert_eq!(first.states.get("pinned-current"), Some(&1));
    assert_eq!(first.states.get("unverified"), Some(&1));
    let stored = report(&rig.api, "shop").expect("the namespace's report");
    let found: Vec<String> = results(&stored)
        .iter()
        .map(|(rule, result, _)| format!("{rule}={result}"))
        .collect();
    assert_eq!(
        found,
        [
            "pinned=pass",
            "signed=fail",
            "pinned=pass",
            "tag-current=pass"
        ],
        "{stored}"
    );
    let message = stored["results"][1]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is not signed as the policy requires (verify[0]: no signature found)"),
        "{message}"
    );
    let reasons = event_reasons(&rig.api);
    assert!(
        reasons.contains(&"api/PinnedDigestUnverified".to_string()),
        "{reasons:?}"
    );
    assert_eq!(
        gauge(&rig.metrics, "pinhook_running_images{state=\"unverified\"}"),
        "pinhook_running_images{state=\"unverified\"} 1"
    );
    // `pinhook inventory` reads the same states back from the report.
    let reports: Vec<pinhook::watch::PolicyReport> =
        vec![serde_json::from_value(stored.clone()).expect("a report")];
    let mut rows: Vec<(String, &str)> = inventory::join(&pods, &reports)
        .images
        .iter()
        .map(|r| (r.image.clone(), r.state))
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            (
                format!("reg.example/team/api@{}", digest('b')),
                "unverified"
            ),
            (format!("{APP}@{}", digest('a')), "pinned-current"),
        ]
    );

    // The key that signed `a` is rotated out of the policy: `a` is unverified at the next cycle.
    rig.watch
        .policy()
        .replace(verifying(&rotated).compile().expect("policy"));
    let second = rig.watch.recheck(&pods).await.expect("cycle");
    assert_eq!(second.states.get("unverified"), Some(&2));
    assert_eq!(second.states.get("pinned-current"), None);
}
