//! PolicyReports (`wgpolicyk8s.io/v1alpha2`, the CRD in
//! `manifests/components/policy-reports/crd.yaml`): one PolicyReport named `pinhook` per
//! namespace with results per workload, and one ClusterPolicyReport named `pinhook-mirrors` for
//! tag-mirror objects found in the cluster.
//!
//! Owns: the report's wire types (field names exactly as the CRD's, in [`wire`]), the state →
//! result mapping, the order of results, and the decision whether the cluster's copy needs a write.
//! Pure: the caller supplies the namespace's mode, the classified images, the time and the
//! report currently stored; nothing here reads a clock or talks to the apiserver.
//!
//! **Mapping.** Every result has `policy: pinhook`, `source: pinhook`, `category: Supply Chain
//! Security`, the workload in `resources`, and `properties` with `state`, `container`, `image`,
//! and, when known, `pinnedDigest`, `currentDigest` and `reason`. Rule `pinned` has severity
//! `high`, `tag-current` `medium` (only the three values every v1alpha2 CRD accepts are used).
//!
//! | state | `pinned` | `tag-current` |
//! |---|---|---|
//! | unpinned | fail | — |
//! | pinned-current | pass | pass |
//! | tag-moved | pass | fail |
//! | digest-only | pass | skip (no tag to check) |
//! | unresolvable, pin kept | pass | error |
//! | unresolvable, image does not parse | error | — |
//! | exempt | skip | — |
//! | left-to-owner (an operator's or a static pod's, unpinned) | skip | — |
//!
//! What runs and whether the pin still exists (issue 29) add two rules, both severity `high`:
//!
//! | state | `pinned` | `runs-pinned` | `digest-available` |
//! |---|---|---|---|
//! | runs-other-digest | pass | fail (both digests and the node) | — |
//! | runs-stale-digest | fail | fail (both digests and the node) | — |
//! | digest-missing | pass | — | fail |
//!
//! Signatures (issue 46) add rule `signed`, severity `high`: `unverified` is `pinned` pass,
//! `signed` fail (the `verify` entry and the verdict).
//!
//! Only these results name the node (`properties.node`, `runningDigest`): a result of any other
//! state stays the same wherever its Pods run, so rescheduling never rewrites a report.
//!
//! `error` rather than `warn` for an unresolvable tag: the CRD defines `error` as "policies that
//! could not be evaluated", which is exactly a registry that did not answer; `warn` is for
//! requirements that were evaluated and not met. In an `audit` namespace every `fail` becomes
//! `warn` and `scored` is false (the CRD: warn counts "non-scored policies whose requirements
//! were not met"), as audit reports every violation as a warning (`policy::Mode::Audit`). In an
//! `off` namespace each image gets one `pinned` result, `skip`, that still names its state.
//! Unpinned images get no `tag-current` result: with no pin there is nothing to compare.
//!
//! **Stable reports, no idle writes.** Results are sorted (workload by namespace, kind, name;
//! then the Pod's site order; image; rule `pinned` first) and deduplicated, so the Pods of one
//! workload add one result per site, not one per Pod, and scaling or restarting Pods changes
//! nothing. A result depends only on the workload, the site, the image and its state: Pod names,
//! Pod counts and an unpinned tag's current digest are left out (the inventory has them). Each
//! result's `timestamp` (when it was first found) is carried over from the stored report when
//! the same result, timestamps aside, is there, so an unchanged cluster rebuilds a report equal to
//! the stored one; [`plan`] also compares ignoring timestamps, so even a caller that lost the
//! stored copy writes nothing. The only volatile input left is the caller's `reason` for an
//! unresolvable tag, which must be stable ([`TagLookup::Failed`](super::TagLookup::Failed)).
//!
//! **Bounds** ([`budget`]). An object in etcd is at most 1.5 MiB, and tenants choose most of a
//! result's strings (workload names, images, lookup failures, mirror entries in ConfigMaps).
//! Every string of a result is cut to [`budget::MAX_STRING_BYTES`] (on a char boundary, with
//! a marker), and a report lists at most [`MAX_RESULTS`] results in at most
//! [`budget::MAX_REPORT_BYTES`] of JSON. Over either, the most severe results are kept first
//! (high-severity findings, other findings, then passes and skips, each in report order, until
//! the first that does not fit), listed in report order, followed by one `skip` result of rule
//! `omitted-results` that counts the rest by verdict; the count of results left out goes in
//! the annotation `pinhook.dev/omitted-results`. `summary` always counts every result, listed
//! or not (the omitted-results result itself is not counted). A write never fails for size.
//!
//! **Mirrors.** [`mirror_findings`] judges one object with `mirror_guard::review`, the same
//! judgement the validating webhook applies, so the watch reports exactly what admission would
//! deny: each (source, mirror) pair that can serve tag pulls is a `fail` result of rule
//! `mirror-by-digest-only`, and an object no node can load is an `error`. [`mirror_report`]
//! builds the ClusterPolicyReport from them with the same stability rules. Both live in
//! [`mirrors`]; the mapping helpers and [`plan`] they share are here, the wire types in
//! [`wire`].
//!
//! **OpenReports.** [`openreports`] puts the reports built here into the
//! `openreports.io/v1alpha1` Report and ClusterReport envelope and reads them back, for a watch
//! told `--report-api openreports`; the results, the bounds and [`plan`] stay these.

use std::collections::{BTreeMap, HashMap};

use crate::policy::Mode;

use super::classify::{ClassifiedImage, ImageState};

pub use self::mirrors::{mirror_findings, mirror_report, MirrorFinding};
pub use self::openreports::{ReportApi, ReportScope};
pub use self::wire::{
    ObjectRef, PolicyReport, ReportMetadata, ReportResult, ReportWrite, Severity, Summary,
    Timestamp, Verdict,
};

pub const API_VERSION: &str = "wgpolicyk8s.io/v1alpha2";
pub const POLICY_REPORT_KIND: &str = "PolicyReport";
pub const CLUSTER_POLICY_REPORT_KIND: &str = "ClusterPolicyReport";
/// The name of pinhook's PolicyReport in each namespace.
pub const REPORT_NAME: &str = "pinhook";
/// The name of pinhook's ClusterPolicyReport of tag-mirror objects.
pub const MIRROR_REPORT_NAME: &str = "pinhook-mirrors";
pub const POLICY: &str = "pinhook";
pub const SOURCE: &str = "pinhook";
pub const RULE_PINNED: &str = "pinned";
pub const RULE_TAG_CURRENT: &str = "tag-current";
pub const RULE_RUNS_PINNED: &str = "runs-pinned";
pub const RULE_DIGEST_AVAILABLE: &str = "digest-available";
pub const RULE_SIGNED: &str = "signed";
pub const RULE_MIRRORS: &str = "mirror-by-digest-only";
pub const CATEGORY: &str = "Supply Chain Security";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "pinhook";
pub const OMITTED_ANNOTATION: &str = "pinhook.dev/omitted-results";
/// sha256 of what the report says (results without timestamps, summary, omitted count): lets
/// the watch tell an unchanged report from the object's metadata alone, without reading its
/// results.
pub const CONTENT_ANNOTATION: &str = "pinhook.dev/content-sha256";
/// Most results one report lists, the omitted-results result included (module docs: bounds).
pub const MAX_RESULTS: usize = 1000;

/// Which rule a result is for, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    Pinned,
    TagCurrent,
    RunsPinned,
    DigestAvailable,
    Signed,
}

/// A result with the key it is sorted by.
struct Keyed<K> {
    key: K,
    result: ReportResult,
}

/// The PolicyReport of `namespace`: every image in `images` whose workload is in `namespace`
/// (others are not this report's), mapped for `mode`. `now` stamps results that are new since
/// `previous`, the report currently stored.
pub fn namespace_report<'i, 'p: 'i>(
    namespace: &str,
    mode: Mode,
    images: impl IntoIterator<Item = &'i ClassifiedImage<'p>>,
    now: Timestamp,
    previous: Option<&PolicyReport>,
) -> PolicyReport {
    let mut keyed = Vec::new();
    for image in images
        .into_iter()
        .filter(|i| i.workload().namespace == namespace)
    {
        for (rule, verdict, message) in image_results(image, mode) {
            let key = (
                image.workload(),
                image.site.field_rank(),
                image.site.name.as_str(),
                image.site.image.as_str(),
                rule,
            );
            let result = ReportResult {
                policy: POLICY.to_string(),
                rule: rule.name().to_string(),
                result: verdict,
                scored: mode == Mode::Enforce,
                message,
                resources: vec![ObjectRef::from(image.workload())],
                source: SOURCE.to_string(),
                severity: Some(rule.severity()),
                category: CATEGORY.to_string(),
                properties: image_properties(image),
                timestamp: now,
            };
            keyed.push(Keyed { key, result });
        }
    }
    assemble(
        POLICY_REPORT_KIND,
        REPORT_NAME,
        Some(namespace),
        keyed,
        now,
        previous,
    )
}

/// The write that brings the stored report (`existing`) to `desired`: create, update, delete
/// when `desired` has no result left, or nothing when they say the same thing.
pub fn plan(existing: Option<&PolicyReport>, desired: PolicyReport) -> ReportWrite {
    match existing {
        None if desired.results.is_empty() => ReportWrite::Unchanged,
        None => ReportWrite::Create(desired),
        Some(_) if desired.results.is_empty() => ReportWrite::Delete,
        Some(stored) if stored.same_content(&desired) => ReportWrite::Unchanged,
        Some(_) => ReportWrite::Update(desired),
    }
}

// === building helpers ===

/// The (rule, verdict, message) results of one image (module docs: the mapping).
fn image_results(image: &ClassifiedImage<'_>, mode: Mode) -> Vec<(Rule, Verdict, String)> {
    let state = &image.state;
    let runs = format!("{} runs {}", image.site.describe(), image.site.image);
    if mode == Mode::Off {
        let message = format!("{runs}: pinhook is off in this namespace (image {state})");
        return vec![(Rule::Pinned, Verdict::Skip, message)];
    }
    let pinned_pass = |digest: &dyn std::fmt::Display| {
        (
            Rule::Pinned,
            Verdict::Pass,
            format!("{runs}, pinned to {digest}"),
        )
    };
    let results = match state {
        ImageState::Unpinned { .. } => vec![(
            Rule::Pinned,
            Verdict::Fail,
            format!("{runs} by tag, not pinned to a digest"),
        )],
        ImageState::PinnedCurrent { digest } => vec![
            pinned_pass(digest),
            (
                Rule::TagCurrent,
                Verdict::Pass,
                format!("{runs}: its tag still resolves to {digest}"),
            ),
        ],
        ImageState::TagMoved { pinned, now } => vec![
            pinned_pass(pinned),
            (
                Rule::TagCurrent,
                Verdict::Fail,
                format!("{runs}: its tag now resolves to {now}, not the pinned {pinned}"),
            ),
        ],
        ImageState::DigestOnly { digest } => vec![
            pinned_pass(digest),
            (
                Rule::TagCurrent,
                Verdict::Skip,
                format!("{runs}: no tag to check"),
            ),
        ],
        ImageState::Unresolvable {
            reason,
            pinned: Some(pinned),
        } => vec![
            pinned_pass(pinned),
            (
                Rule::TagCurrent,
                Verdict::Error,
                format!("{runs}: its tag could not be checked: {reason}"),
            ),
        ],
        ImageState::Unresolvable {
            reason,
            pinned: None,
        } => vec![(Rule::Pinned, Verdict::Error, format!("{runs}: {reason}"))],
        ImageState::Exempt { why } => vec![(
            Rule::Pinned,
            Verdict::Skip,
            format!("{runs}: exempt: {why}"),
        )],
        ImageState::LeftToOwner { why } => vec![(
            Rule::Pinned,
            Verdict::Skip,
            format!("{runs} by tag, left to its owner: {why}"),
        )],
        ImageState::RunsOtherDigest { pinned, running } => vec![
            pinned_pass(pinned),
            (
                Rule::RunsPinned,
                Verdict::Fail,
                format!(
                    "{runs}: node {} runs {running}, not the pinned {pinned}",
                    image.node_name()
                ),
            ),
        ],
        ImageState::RunsStaleDigest { running, now } => vec![
            (
                Rule::Pinned,
                Verdict::Fail,
                format!("{runs} by tag, not pinned to a digest"),
            ),
            (
                Rule::RunsPinned,
                Verdict::Fail,
                format!(
                    "{runs}: node {} runs {running}, which its tag no longer points to (now {now})",
                    image.node_name()
                ),
            ),
        ],
        ImageState::Unverified { pinned, why } => vec![
            pinned_pass(pinned),
            (
                Rule::Signed,
                Verdict::Fail,
                format!("{runs}: the pinned {pinned} is not signed as the policy requires ({why})"),
            ),
        ],
        ImageState::DigestMissing { pinned } => vec![
            pinned_pass(pinned),
            (
                Rule::DigestAvailable,
                Verdict::Fail,
                format!(
                    "{runs}: the registry no longer has the pinned {pinned}; a new Pod of it cannot pull"
                ),
            ),
        ],
    };
    results
        .into_iter()
        .map(|(rule, verdict, message)| (rule, verdict.in_mode(mode), message))
        .collect()
}

/// Properties of every result of one image. An unpinned tag's current digest is left out: it
/// is not part of any verdict, and a moving `latest` would rewrite the report on every move.
fn image_properties(image: &ClassifiedImage<'_>) -> BTreeMap<String, String> {
    let state = &image.state;
    let mut properties = BTreeMap::from([
        ("state".to_string(), state.as_str().to_string()),
        ("container".to_string(), image.site.describe()),
        ("image".to_string(), image.site.image.clone()),
    ]);
    if let Some(pinned) = state.pinned() {
        properties.insert("pinnedDigest".to_string(), pinned.to_string());
    }
    if let (Some(current), false) = (
        state.current(),
        matches!(state, ImageState::Unpinned { .. }),
    ) {
        properties.insert("currentDigest".to_string(), current.to_string());
    }
    if let Some(detail) = state.detail() {
        properties.insert("reason".to_string(), detail.to_string());
    }
    if let Some(origin) = &image.origin {
        properties.insert("resolvedAt".to_string(), origin.clone());
    }
    if let Some(running) = state.running() {
        properties.insert("runningDigest".to_string(), running.to_string());
        properties.insert("node".to_string(), image.node_name().to_string());
    }
    properties
}

/// Bounds every string, sorts and deduplicates the results, counts them all in the summary,
/// keeps those that fit ([`budget`]), carries timestamps over from `previous`, and wraps them in
/// a report.
fn assemble<K: Ord>(
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    keyed: Vec<Keyed<K>>,
    now: Timestamp,
    previous: Option<&PolicyReport>,
) -> PolicyReport {
    // Results with equal keys (one site of one workload in two states, say) are ordered by
    // their own JSON, so the order never depends on the order Pods were seen in; that also
    // makes equal results adjacent for `dedup`.
    let mut keyed: Vec<(K, String, ReportResult)> = keyed
        .into_iter()
        .map(|k| {
            let result = budget::bound_strings(k.result);
            let canonical = serde_json::to_string(&result).unwrap_or_default();
            (k.key, canonical, result)
        })
        .collect();
    keyed.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    keyed.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    let results: Vec<ReportResult> = keyed.into_iter().map(|(_, _, result)| result).collect();

    let mut summary = Summary::default();
    for result in &results {
        summary.count(result.result);
    }
    let (mut results, left_out) = budget::fit(results);
    let omitted = usize::try_from(left_out.total()).unwrap_or(usize::MAX);
    if omitted > 0 {
        results.push(budget::omitted_result(&left_out, false));
    }

    let found_at: HashMap<ReportResult, Timestamp> = previous
        .map(|p| {
            p.results
                .iter()
                .map(|r| (r.without_timestamp(), r.timestamp))
                .collect()
        })
        .unwrap_or_default();
    let results: Vec<ReportResult> = results
        .into_iter()
        .map(|result| {
            let timestamp = found_at
                .get(&result.without_timestamp())
                .copied()
                .unwrap_or(now);
            ReportResult {
                timestamp,
                ..result
            }
        })
        .collect();

    let mut annotations = BTreeMap::new();
    if omitted > 0 {
        annotations.insert(OMITTED_ANNOTATION.to_string(), omitted.to_string());
    }
    annotations.insert(
        CONTENT_ANNOTATION.to_string(),
        content_digest(&results, &summary, omitted),
    );
    PolicyReport {
        api_version: API_VERSION.to_string(),
        kind: kind.to_string(),
        metadata: ReportMetadata {
            name: name.to_string(),
            namespace: namespace.map(str::to_string),
            labels: BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())]),
            annotations,
        },
        results,
        summary,
    }
}

/// The [`CONTENT_ANNOTATION`] of a report: hex sha256 of its results' JSON without
/// timestamps, its summary and the omitted count.
fn content_digest(results: &[ReportResult], summary: &Summary, omitted: usize) -> String {
    use sha2::{Digest as _, Sha256};
    let mut hasher = Sha256::new();
    for result in results {
        // Serialising these plain structs (string maps are BTreeMaps) cannot fail.
        let json = serde_json::to_vec(&result.without_timestamp()).unwrap_or_default();
        hasher.update(&json);
        hasher.update(b"\n");
    }
    hasher.update(serde_json::to_vec(summary).unwrap_or_default());
    hasher.update(omitted.to_string().as_bytes());
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// === impl Rule ===

impl Rule {
    fn name(self) -> &'static str {
        match self {
            Rule::Pinned => RULE_PINNED,
            Rule::TagCurrent => RULE_TAG_CURRENT,
            Rule::RunsPinned => RULE_RUNS_PINNED,
            Rule::DigestAvailable => RULE_DIGEST_AVAILABLE,
            Rule::Signed => RULE_SIGNED,
        }
    }

    fn severity(self) -> Severity {
        match self {
            Rule::Pinned | Rule::RunsPinned | Rule::DigestAvailable | Rule::Signed => {
                Severity::High
            }
            Rule::TagCurrent => Severity::Medium,
        }
    }
}

pub mod budget;
#[cfg(test)]
mod budget_tests;
mod mirrors;
pub mod openreports;
#[cfg(test)]
mod openreports_tests;
#[cfg(test)]
mod tests;
mod wire;
