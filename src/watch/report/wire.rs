//! The report's wire types, field names exactly as the `wgpolicyk8s.io/v1alpha2` CRD's
//! (`manifests/components/policy-reports/crd.yaml`), as pinhook writes them and reads them
//! back, with the comparisons and conversions they need. The mapping from image states to
//! results is [`super`]'s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{CONTENT_ANNOTATION, MANAGED_BY_LABEL, OMITTED_ANNOTATION};
use crate::policy::Mode;
use crate::watch::pod::WorkloadRef;

/// A PolicyReport or ClusterPolicyReport, as written and as read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    pub api_version: String,
    pub kind: String,
    pub metadata: ReportMetadata,
    #[serde(default)]
    pub results: Vec<ReportResult>,
    #[serde(default)]
    pub summary: Summary,
}

/// The metadata pinhook sets; everything else the apiserver adds is ignored when read back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportMetadata {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `PolicyReportResult`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportResult {
    pub policy: String,
    #[serde(default)]
    pub rule: String,
    pub result: Verdict,
    #[serde(default)]
    pub scored: bool,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ObjectRef>,
    #[serde(default)]
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    #[serde(default)]
    pub category: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
    #[serde(default)]
    pub timestamp: Timestamp,
}

/// The subset of `ObjectReference` a result names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// The result enum of the CRD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Warn,
    Error,
    Skip,
}

/// The severities every v1alpha2 CRD accepts (Kyverno's adds `critical` and `info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    High,
    Medium,
    Low,
}

/// A protobuf-style timestamp, as the CRD has it. The caller's clock, never read here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Timestamp {
    pub seconds: i64,
    pub nanos: i32,
}

/// Result counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    #[serde(default)]
    pub pass: u64,
    #[serde(default)]
    pub fail: u64,
    #[serde(default)]
    pub warn: u64,
    #[serde(default)]
    pub error: u64,
    #[serde(default)]
    pub skip: u64,
}

/// What to do to the cluster's copy of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportWrite {
    /// No report stored and there are results.
    Create(PolicyReport),
    /// The stored report differs (timestamps aside); write this one over it (server-side apply
    /// with field manager `pinhook` replaces exactly what pinhook owns).
    Update(PolicyReport),
    /// The last result is gone: delete the stored report.
    Delete,
    /// Nothing to write.
    Unchanged,
}

// === impl PolicyReport ===

impl PolicyReport {
    /// Whether two reports say the same thing: results and summary equal with timestamps
    /// ignored, and the same pinhook-owned label and annotation.
    pub fn same_content(&self, other: &PolicyReport) -> bool {
        let owned = |r: &PolicyReport| {
            (
                r.metadata.labels.get(MANAGED_BY_LABEL).cloned(),
                r.metadata.annotations.get(OMITTED_ANNOTATION).cloned(),
                r.metadata.annotations.get(CONTENT_ANNOTATION).cloned(),
            )
        };
        self.summary == other.summary
            && owned(self) == owned(other)
            && self.results.len() == other.results.len()
            && self
                .results
                .iter()
                .zip(&other.results)
                .all(|(a, b)| a.without_timestamp() == b.without_timestamp())
    }
}

// === impl ReportResult ===

impl ReportResult {
    pub(super) fn without_timestamp(&self) -> ReportResult {
        ReportResult {
            timestamp: Timestamp::default(),
            ..self.clone()
        }
    }
}

// === impl Verdict ===

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Warn => "warn",
            Verdict::Error => "error",
            Verdict::Skip => "skip",
        }
    }

    /// Fail, warn and error: what is kept first when a report is over [`MAX_RESULTS`].
    pub(super) fn is_finding(self) -> bool {
        matches!(self, Verdict::Fail | Verdict::Warn | Verdict::Error)
    }

    /// What a `fail` is in `mode`; other verdicts are the same in every mode.
    pub(super) fn in_mode(self, mode: Mode) -> Verdict {
        match (self, mode) {
            (Verdict::Fail, Mode::Audit) => Verdict::Warn,
            (verdict, _) => verdict,
        }
    }
}

// === impl Timestamp ===

impl Timestamp {
    pub fn new(seconds: i64, nanos: i32) -> Timestamp {
        Timestamp { seconds, nanos }
    }

    /// The caller's clock reading as a timestamp; a time before the epoch counts back with
    /// non-negative nanos, as the CRD requires.
    pub fn from_system_time(time: std::time::SystemTime) -> Timestamp {
        let clamp = |secs: u64| i64::try_from(secs).unwrap_or(i64::MAX);
        match time.duration_since(std::time::UNIX_EPOCH) {
            Ok(after) => Timestamp::new(clamp(after.as_secs()), nanos_of(after)),
            Err(before) => {
                let before = before.duration();
                match nanos_of(before) {
                    0 => Timestamp::new(-clamp(before.as_secs()), 0),
                    n => Timestamp::new(-clamp(before.as_secs()) - 1, 1_000_000_000 - n),
                }
            }
        }
    }
}

fn nanos_of(duration: std::time::Duration) -> i32 {
    // subsec_nanos is below 10^9, which fits an i32.
    i32::try_from(duration.subsec_nanos()).unwrap_or(0)
}

// === impl ObjectRef ===

impl From<&WorkloadRef> for ObjectRef {
    fn from(workload: &WorkloadRef) -> Self {
        ObjectRef {
            api_version: workload.api_version.clone(),
            kind: workload.kind.clone(),
            namespace: Some(workload.namespace.clone()),
            name: workload.name.clone(),
            uid: workload.uid.clone(),
        }
    }
}
