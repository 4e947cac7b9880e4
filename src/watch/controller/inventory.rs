//! `pinhook inventory`: the running images, read from the cluster with the user's own
//! kubeconfig: the Pods (which images run, in how many Pods, for which workloads) joined with
//! the watch's PolicyReports, or Reports with `--report-api openreports` (each image's state
//! and digests, as the watch last found them).
//!
//! Why these sources and not the watch's `/inventory` endpoint: they need nothing but `get` /
//! `list` on Pods and PolicyReports (no port-forward, no Service proxy), and they answer
//! whichever replica leads. The report supplies the lookup the watch made for an image of a
//! workload (current digest, or why it could not be checked, or its exemption); the pure
//! [`classify`](crate::watch::classify) then gives the same state the watch gave. An image the
//! reports do not cover yet (a Pod newer than the last cycle) is classified without a lookup:
//! `unpinned` and `digest-only` are exact, a `tag@digest` reads `unresolvable` ("tag not looked
//! up"). What runs comes from the Pods themselves (their status), so `runs-other-digest` is
//! exact; `runs-stale-digest` needs the tag's current digest, which the report's `runs-pinned`
//! result carries, `digest-missing` the report's `digest-available` result, and `unverified`
//! its `signed` result.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use super::api;
use crate::reference::Digest;
use crate::watch::classify::{
    classify_image, classify_pod, judge_running, judge_signed, DigestCheck, TagLookup,
};
use crate::watch::report::{
    PolicyReport, ReportApi, Verdict, RULE_DIGEST_AVAILABLE, RULE_RUNS_PINNED, RULE_SIGNED,
    RULE_TAG_CURRENT,
};
use crate::watch::{ClassifiedImage, ImageState, Inventory, PodRecord};

/// Why the inventory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("failed to list pods")]
    ListPods(#[source] kube::Error),
    #[error("failed to list pinhook's PolicyReports")]
    ListReports(#[source] kube::Error),
}

/// What a report says about one image of one workload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Said {
    exempt: Option<String>,
    lookup: Option<TagLookup>,
    check: DigestCheck,
    /// Why the pinned digest is not signed (a `signed` result that did not pass).
    unverified: Option<String>,
}

/// (workload `ns/Kind/name`, container `containers[app]`, image as written).
type SiteKey = (String, String, String);

/// Reads the inventory of namespace `namespace` (every namespace with `None`).
pub async fn read(
    client: &kube::Client,
    namespace: Option<&str>,
    reports: ReportApi,
) -> Result<Inventory, InventoryError> {
    let pods: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut records = Vec::new();
    // In pages: a cluster's Pods can be more than one response should carry.
    api::paged(
        ListParams::default(),
        |params| {
            let pods = &pods;
            async move { pods.list(&params).await }
        },
        |page| {
            for pod in page {
                let record = serde_json::to_value(&pod)
                    .ok()
                    .and_then(|v| PodRecord::from_pod(&v).ok());
                records.extend(record.filter(|r| !r.terminal));
            }
        },
    )
    .await
    .map_err(InventoryError::ListPods)?;
    let reports = api::namespace_reports(client, reports, namespace)
        .await
        .map_err(InventoryError::ListReports)?;
    Ok(join(&records, reports.values()))
}

/// The inventory of `pods` with what `reports` say about their images (pure).
pub fn join<'a>(
    pods: &[PodRecord],
    reports: impl IntoIterator<Item = &'a PolicyReport>,
) -> Inventory {
    let said = said_by(reports);
    let images: Vec<ClassifiedImage> = pods
        .iter()
        .flat_map(|pod| {
            classify_pod(pod, |site| {
                let key = (pod.workload.describe(), site.describe(), site.image.clone());
                let said = said.get(&key).cloned().unwrap_or_default();
                let state = classify_image(
                    &site.image,
                    said.exempt.as_deref(),
                    said.lookup.unwrap_or(TagLookup::NotLooked),
                );
                let state = judge_running(state, site.running.as_ref(), said.check);
                // The report says `unverified` with a `signed` result (and no `tag-current` one):
                // a pin read back as unresolvable for want of that lookup is the unverified one.
                match (said.unverified, &state) {
                    (
                        Some(why),
                        ImageState::Unresolvable {
                            pinned: Some(pinned),
                            ..
                        },
                    ) => ImageState::Unverified {
                        pinned: pinned.clone(),
                        why,
                    },
                    (unverified, _) => judge_signed(state, unverified),
                }
            })
        })
        .collect();
    Inventory::from_images(&images)
}

fn said_by<'a>(reports: impl IntoIterator<Item = &'a PolicyReport>) -> HashMap<SiteKey, Said> {
    let mut said: HashMap<SiteKey, Said> = HashMap::new();
    for report in reports {
        for result in &report.results {
            let (Some(resource), Some(container), Some(image)) = (
                result.resources.first(),
                result.properties.get("container"),
                result.properties.get("image"),
            ) else {
                continue;
            };
            let workload = format!(
                "{}/{}/{}",
                resource.namespace.as_deref().unwrap_or_default(),
                resource.kind,
                resource.name
            );
            let entry = said
                .entry((workload, container.clone(), image.clone()))
                .or_default();
            let state = result.properties.get("state").map(String::as_str);
            let reason = result.properties.get("reason").cloned();
            let current = result
                .properties
                .get("currentDigest")
                .and_then(|d| d.parse::<Digest>().ok());
            match (state, result.rule.as_str()) {
                (Some("exempt"), _) => entry.exempt = reason.or(Some("exempt".into())),
                (_, RULE_TAG_CURRENT) => {
                    entry.lookup = match (current, reason, result.result) {
                        (Some(digest), _, _) => Some(TagLookup::Resolved(digest)),
                        (None, Some(reason), Verdict::Error) => Some(TagLookup::Failed(reason)),
                        _ => None,
                    }
                }
                (_, RULE_RUNS_PINNED) => {
                    if let Some(digest) = current {
                        entry.lookup = Some(TagLookup::Resolved(digest));
                    }
                }
                (_, RULE_DIGEST_AVAILABLE) if result.result != Verdict::Pass => {
                    entry.check = DigestCheck::Missing;
                }
                (_, RULE_SIGNED) if result.result != Verdict::Pass => {
                    entry.unverified = reason.or_else(|| Some("not signed".to_string()));
                }
                // `pinned` results say nothing the image string does not.
                _ => {}
            }
        }
    }
    said
}
