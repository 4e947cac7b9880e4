//! What the watch reads and writes through the Kubernetes API besides Pods: its reports (the
//! `wgpolicyk8s.io/v1alpha2` PolicyReports and ClusterPolicyReport, or with
//! [`ReportApi::OpenReports`] the `openreports.io/v1alpha1` Reports and ClusterReport, converted
//! by [`openreports`]; either is read back as the pure core's [`PolicyReport`]), the objects
//! that configure tag mirrors, and `events.k8s.io/v1` Events.
//!
//! Every list of objects read whole is read in pages of [`PAGE_SIZE`] ([`paged`]: `limit`, then
//! each `continue`), and tag-mirror objects are judged a page at a time, so neither a cluster's
//! ConfigMaps nor its reports arrive as one response. The one exception is each recheck's list
//! of pinhook's own reports' metadata ([`namespace_report_digests`]): it is read from the
//! apiserver's watch cache (`resourceVersion=0`), which answers it whole whatever the `limit`
//! and without reading every report from etcd; it holds a few hundred bytes per namespace
//! that has a report. Only pinhook's own report names are ever read back,
//! written or deleted: `pinhook` (PolicyReport or Report, in any namespace) and
//! `pinhook-mirrors` (ClusterPolicyReport or ClusterReport); a listed report with another name
//! is ignored even if it carries pinhook's label. Only the chosen API is ever touched: the
//! other's reports (of an earlier setting) are left as they are.
//!
//! Reports are written with server-side apply (field manager `pinhook-watch`, forced): a
//! create and an update are the same request, and a replica that took the Lease over writes
//! without first having to know the stored resourceVersion. Whether to write at all is the pure
//! [`plan`](crate::watch::plan)'s decision, never this module's.
//!
//! Events: one per (workload, reason, note). A repeat within [`SERIES_WINDOW`] is the same
//! Event with its `series` counted up (a patch), as client-go's event recorder does; kube's
//! `Recorder` was not used because its series key leaves out the note, so two containers of one
//! Deployment whose tags moved would read as one repeated Event.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectList, Patch, PatchParams,
};
use kube::core::GroupVersionKind;
use tokio::sync::Mutex;

use crate::watch::events::{truncated, EventSpec, ACTION, MAX_NOTE_BYTES};
use crate::watch::report::openreports::{self, OpenReport, OpenReportsError};
use crate::watch::report::{
    PolicyReport, ReportApi, ReportScope, ReportWrite, CLUSTER_POLICY_REPORT_KIND,
    CONTENT_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, POLICY_REPORT_KIND, REPORT_NAME,
};

/// The field manager of every report write.
pub const FIELD_MANAGER: &str = "pinhook-watch";
/// `reportingController` of the watch's Events.
pub const REPORTING_CONTROLLER: &str = "pinhook.dev/watch";
/// How long a repeated Event is counted in the same series (client-go uses 6 minutes too).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Objects per page of every cluster-wide list (the Pod watcher's own default too).
pub const PAGE_SIZE: u32 = 500;

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportWriteError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("cannot write the report as OpenReports")]
    OpenReports(#[from] OpenReportsError),
}

/// The resource, in `shape`'s API, of a report built as `kind` (PolicyReport or
/// ClusterPolicyReport).
pub fn report_resource(shape: ReportApi, kind: &str) -> ApiResource {
    let scope = ReportScope::of_built(kind);
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(shape.group(), shape.version(), shape.kind(scope)),
        shape.plural(scope),
    )
}

/// pinhook's namespace reports in every namespace (or in `only`), by namespace. A report that
/// does not read as one is left out; the CRD's schema keeps such reports from existing.
pub async fn namespace_reports(
    client: &kube::Client,
    shape: ReportApi,
    only: Option<&str>,
) -> Result<HashMap<String, PolicyReport>, kube::Error> {
    let api = report_api(client, shape, POLICY_REPORT_KIND, only);
    let mut reports = HashMap::new();
    paged(
        own_reports(),
        |params| {
            let api = &api;
            async move { api.list(&params).await }
        },
        |page| {
            for object in page {
                let Some(namespace) = object.metadata.namespace.clone() else {
                    continue;
                };
                if object.metadata.name.as_deref() != Some(REPORT_NAME) {
                    continue;
                }
                if let Some(report) = as_report(shape, object, POLICY_REPORT_KIND) {
                    reports.insert(namespace, report);
                }
            }
        },
    )
    .await?;
    Ok(reports)
}

/// The [`CONTENT_ANNOTATION`] of each of pinhook's namespace reports (`None`: a report without
/// it), by namespace, read from the objects' metadata only: an unchanged report's results are
/// never transferred.
pub async fn namespace_report_digests(
    client: &kube::Client,
    shape: ReportApi,
) -> Result<HashMap<String, Option<String>>, kube::Error> {
    let api = report_api(client, shape, POLICY_REPORT_KIND, None);
    let list = api.list_metadata(&from_watch_cache(own_reports())).await?;
    let mut digests = HashMap::new();
    for object in list.items {
        if object.metadata.name.as_deref() != Some(REPORT_NAME) {
            continue;
        }
        let digest = object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONTENT_ANNOTATION))
            .cloned();
        if let Some(namespace) = object.metadata.namespace {
            digests.insert(namespace, digest);
        }
    }
    Ok(digests)
}

/// `params` answered from the apiserver's watch cache (`resourceVersion=0`, no `limit`: with
/// a limit kube leaves the version out and the apiserver reads etcd). An answer a moment old
/// is safe for what it is used for: a report whose newest digest the cache has not seen yet
/// reads as changed and is written once more (the same content), and a report someone else
/// changed or deleted a moment before is seen at the next recheck.
fn from_watch_cache(params: ListParams) -> ListParams {
    ListParams {
        limit: None,
        continue_token: None,
        ..params
    }
    .at("0")
}

/// The list of pinhook's own PolicyReports: its label and its name (a tenant's report that
/// copies the label is not pinhook's; the name is checked again on every item read).
fn own_reports() -> ListParams {
    ListParams::default()
        .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"))
        .fields(&format!("metadata.name={REPORT_NAME}"))
}

/// Lists in pages of [`PAGE_SIZE`]: `fetch` is asked with `params` and a `limit`, then with
/// each `continue` token the apiserver returns, and every page goes to `page` before the next
/// is asked for, so no more than one page is held at once. An expired token (410) is an error
/// like any other: the caller's cycle tries again next time.
pub async fn paged<K, Fetch, Fut>(
    params: ListParams,
    fetch: Fetch,
    mut page: impl FnMut(Vec<K>),
) -> Result<(), kube::Error>
where
    K: Clone,
    Fetch: Fn(ListParams) -> Fut,
    Fut: std::future::Future<Output = Result<ObjectList<K>, kube::Error>>,
{
    let mut params = params.limit(PAGE_SIZE);
    loop {
        let list = fetch(params.clone()).await?;
        let next = list.metadata.continue_.filter(|token| !token.is_empty());
        page(list.items);
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// pinhook's namespace report in `namespace`, if any.
pub async fn namespace_report(
    client: &kube::Client,
    shape: ReportApi,
    namespace: &str,
) -> Result<Option<PolicyReport>, kube::Error> {
    Ok(
        report_api(client, shape, POLICY_REPORT_KIND, Some(namespace))
            .get_opt(REPORT_NAME)
            .await?
            .and_then(|o| as_report(shape, o, POLICY_REPORT_KIND)),
    )
}

/// The cluster's cluster report `name` (ClusterPolicyReport or ClusterReport), if any.
pub async fn cluster_report(
    client: &kube::Client,
    shape: ReportApi,
    name: &str,
) -> Result<Option<PolicyReport>, kube::Error> {
    Ok(report_api(client, shape, CLUSTER_POLICY_REPORT_KIND, None)
        .get_opt(name)
        .await?
        .and_then(|o| as_report(shape, o, CLUSTER_POLICY_REPORT_KIND)))
}

/// A stored report of `shape`'s API in the shape the pure core builds (`kind`: the built
/// kind); `None` when it does not read as one.
fn as_report(shape: ReportApi, object: DynamicObject, kind: &str) -> Option<PolicyReport> {
    let mut value = serde_json::to_value(object).ok()?;
    // A listed item carries no kind of its own.
    if let Some(map) = value.as_object_mut() {
        let scope = ReportScope::of_built(kind);
        map.insert("kind".into(), shape.kind(scope).into());
        map.insert("apiVersion".into(), shape.api_version().into());
    }
    match shape {
        ReportApi::Wgpolicyk8s => serde_json::from_value(value).ok(),
        ReportApi::OpenReports => {
            let report: OpenReport = serde_json::from_value(value).ok()?;
            openreports::from_openreports(report).ok()
        }
    }
}

/// Applies `report` (creates or updates it) in `shape`'s API.
async fn apply_report(
    client: &kube::Client,
    shape: ReportApi,
    report: &PolicyReport,
) -> Result<(), ReportWriteError> {
    let api = report_api(
        client,
        shape,
        &report.kind,
        report.metadata.namespace.as_deref(),
    );
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let name = &report.metadata.name;
    match shape {
        ReportApi::Wgpolicyk8s => api.patch(name, &params, &Patch::Apply(report)).await?,
        ReportApi::OpenReports => {
            let wire = openreports::to_openreports(report)?;
            api.patch(name, &params, &Patch::Apply(&wire)).await?
        }
    };
    Ok(())
}

/// Carries out one planned report write in `shape`'s API: server-side apply for a new or
/// changed report, delete for one with no finding left. `target` is (built kind, namespace,
/// name) of the report a delete removes. `Ok(false)`: nothing to write.
pub async fn write_report(
    client: &kube::Client,
    shape: ReportApi,
    write: ReportWrite,
    (kind, namespace, name): (&str, Option<&str>, &str),
) -> Result<bool, ReportWriteError> {
    match write {
        ReportWrite::Unchanged => Ok(false),
        ReportWrite::Create(report) | ReportWrite::Update(report) => {
            apply_report(client, shape, &report).await.map(|()| true)
        }
        ReportWrite::Delete => delete_report(client, shape, kind, namespace, name)
            .await
            .map(|()| true)
            .map_err(ReportWriteError::from),
    }
}

/// Deletes the report `name` (in `namespace`, or the cluster's); gone already is fine.
async fn delete_report(
    client: &kube::Client,
    shape: ReportApi,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), kube::Error> {
    match report_api(client, shape, kind, namespace)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The reports of built `kind`, in `shape`'s API, in `namespace`, or the cluster's.
fn report_api(
    client: &kube::Client,
    shape: ReportApi,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let resource = report_resource(shape, kind);
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Every object of `group/version` `plural` in the cluster, each as JSON with its kind set,
/// handed to `visit` one page ([`PAGE_SIZE`]) at a time. `Ok(false)` when the API does not
/// serve the resource (no such CRD: not an OpenShift cluster).
pub async fn for_each_object(
    client: &kube::Client,
    (group, version, kind, plural): (&str, &str, &str, &str),
    mut visit: impl FnMut(serde_json::Value),
) -> Result<bool, kube::Error> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let api_version = resource.api_version.clone();
    let listed = paged(
        ListParams::default(),
        |params| {
            let api = &api;
            async move { api.list(&params).await }
        },
        |page| {
            for object in page {
                let Ok(mut value) = serde_json::to_value(object) else {
                    continue;
                };
                if let Some(map) = value.as_object_mut() {
                    map.insert("kind".into(), kind.into());
                    map.insert("apiVersion".into(), api_version.clone().into());
                }
                visit(value);
            }
        },
    )
    .await;
    match listed {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Publishes `events.k8s.io/v1` Events, counting repeats as a series.
pub struct EventPublisher {
    client: kube::Client,
    /// This replica's name (`reportingInstance`).
    instance: String,
    series: Mutex<HashMap<EventKey, Published>>,
}

type EventKey = (String, &'static str, String);

struct Published {
    name: String,
    namespace: String,
    count: i32,
    last: Instant,
}

// === impl EventPublisher ===

impl EventPublisher {
    pub fn new(client: kube::Client, instance: &str) -> EventPublisher {
        EventPublisher {
            client,
            instance: instance.to_string(),
            series: Mutex::new(HashMap::new()),
        }
    }

    /// The uid of `workload`, read through the API; `None` when it cannot be read.
    async fn uid_of(&self, workload: &crate::watch::WorkloadRef) -> Option<String> {
        let (group, version) = match workload.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", workload.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &workload.kind);
        let plural = format!("{}s", workload.kind.to_ascii_lowercase());
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &workload.namespace, &resource);
        api.get_opt(&workload.name).await.ok()??.metadata.uid
    }

    /// Creates the Event `spec` calls for, or counts it again in its series.
    pub async fn publish(&self, spec: &EventSpec) -> Result<(), kube::Error> {
        let key = (
            spec.regarding.describe(),
            spec.reason.as_str(),
            spec.note.clone(),
        );
        let mut series = self.series.lock().await;
        series.retain(|_, p| p.last.elapsed() < SERIES_WINDOW);
        let now = Timestamp::now();
        if let Some(published) = series.get_mut(&key) {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &published.namespace);
            let count = published.count.saturating_add(1);
            let patch = Event {
                series: Some(EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                }),
                ..Event::default()
            };
            api.patch(
                &published.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            published.count = count;
            published.last = Instant::now();
            return Ok(());
        }
        let regarding = &spec.regarding;
        // Event names are at most 253 characters, like any object's.
        let base: String = regarding.name.chars().take(200).collect();
        let name = format!("{base}.{:x}", now.as_nanosecond());
        // kubectl describe finds Events by the regarding object's uid too; the Deployment a
        // Pod's ReplicaSet belongs to is known by name only, so read its uid.
        let uid = match &regarding.uid {
            Some(uid) => Some(uid.clone()),
            None => self.uid_of(regarding).await,
        };
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(regarding.namespace.clone()),
                ..ObjectMeta::default()
            },
            action: Some(ACTION.to_string()),
            reason: Some(spec.reason.as_str().to_string()),
            // Whoever built the note, it goes out as one line with outside text escaped
            // (`text::one_line`), within the 1 KiB the apiserver takes.
            note: Some(truncated(
                crate::text::into_one_line(spec.note.clone()),
                MAX_NOTE_BYTES,
            )),
            type_: Some(spec.type_.as_str().to_string()),
            event_time: Some(MicroTime(now)),
            reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(ObjectReference {
                api_version: Some(regarding.api_version.clone()),
                kind: Some(regarding.kind.clone()),
                namespace: Some(regarding.namespace.clone()),
                name: Some(regarding.name.clone()),
                uid,
                ..ObjectReference::default()
            }),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &regarding.namespace);
        api.create(&Default::default(), &event).await?;
        series.insert(
            key,
            Published {
                name,
                namespace: regarding.namespace.clone(),
                count: 1,
                last: Instant::now(),
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query each recheck's report list sends: pinhook's label and name, `resourceVersion=0`
    /// (the watch cache) and no `limit` (with one, the version would be left out).
    #[test]
    fn report_digests_are_listed_from_the_watch_cache() {
        let params = from_watch_cache(own_reports().limit(PAGE_SIZE));
        let request = kube::core::Request::new("/apis/wgpolicyk8s.io/v1alpha2/policyreports")
            .list_metadata(&params)
            .map_err(|e| e.to_string());
        let query = request.map(|r| r.uri().query().unwrap_or_default().to_string());
        let query = query.as_deref().unwrap_or("not built");
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("resourceVersion"), Some("0"), "{query}");
        assert_eq!(get("limit"), None, "{query}");
        assert_eq!(get("continue"), None, "{query}");
        assert_eq!(
            get("labelSelector"),
            Some("app.kubernetes.io/managed-by=pinhook"),
            "{query}"
        );
        assert_eq!(
            get("fieldSelector"),
            Some("metadata.name=pinhook"),
            "{query}"
        );
    }
}
