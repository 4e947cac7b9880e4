//! OpenReports (`openreports.io/v1alpha1`, the CRDs in
//! `manifests/components/openreports/crd.yaml`): the API the wgpolicyk8s PolicyReport continues
//! as. The watch writes one API or the other ([`ReportApi`], `pinhook watch --report-api`);
//! with OpenReports, the namespace's PolicyReport `pinhook` is the Report `pinhook` and the
//! ClusterPolicyReport `pinhook-mirrors` is the ClusterReport `pinhook-mirrors`.
//!
//! Owns: which API a report is written to (group, version, kind and plural per scope), the
//! OpenReports wire type ([`OpenReport`], field names exactly as the CRD's), and the conversion
//! of a built [`PolicyReport`] to it and back. Nothing else: the state → result mapping, the
//! order, the bounds, the carried-over timestamps, the content digest and the write plan are
//! [`super`]'s, so both APIs say the same thing and an unchanged cluster writes neither. Pure.
//!
//! **Mapping.** The results are the same JSON: OpenReports kept the v1alpha2 result's field
//! names (`policy`, `rule`, `result`, `scored`, `message`, `resources`, `source`, `severity`,
//! `category`, `properties`, `timestamp`) and widened nothing pinhook uses (its severity enum
//! adds `critical` and `info`, which pinhook does not write). `summary` is the same five counts.
//! The report's own `source` is `pinhook` (the CRD: set it when one engine produces every
//! result; each result keeps its `source` too), and `configuration.limits.maxResults` is
//! [`MAX_RESULTS`], the bound every report keeps (the CRD's "contract between Report generators
//! and consumers"; no `statusFilter`: every verdict is listed). `scope` is left out, as in the
//! PolicyReports: a report covers every workload of a namespace, each named in its results'
//! `resources`, and a scope would tell readers that every result is about one object.
//!
//! **Read back.** A stored Report is converted back to the PolicyReport shape
//! ([`from_openreports`]), so [`plan`](super::plan) and the content digest compare like with
//! like: the same results read back from either API plan no write.

use serde::{Deserialize, Serialize};

use super::wire::{ObjectRef, PolicyReport, ReportMetadata, ReportResult, Summary};
use super::{API_VERSION, CLUSTER_POLICY_REPORT_KIND, MAX_RESULTS, POLICY_REPORT_KIND, SOURCE};

pub const OPENREPORTS_GROUP: &str = "openreports.io";
pub const OPENREPORTS_VERSION: &str = "v1alpha1";
pub const OPENREPORTS_API_VERSION: &str = "openreports.io/v1alpha1";
pub const REPORT_KIND: &str = "Report";
pub const CLUSTER_REPORT_KIND: &str = "ClusterReport";

/// Which API the watch writes its reports to (and `pinhook inventory` reads them from).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ReportApi {
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport and ClusterPolicyReport.
    #[default]
    Wgpolicyk8s,
    /// `openreports.io/v1alpha1` Report and ClusterReport.
    OpenReports,
}

/// Whether a report is a namespace's or the cluster's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportScope {
    Namespace,
    Cluster,
}

/// A Report or ClusterReport, as written and as read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenReport {
    pub api_version: String,
    pub kind: String,
    pub metadata: ReportMetadata,
    #[serde(default)]
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<ReportConfiguration>,
    #[serde(default)]
    pub summary: Summary,
    #[serde(default)]
    pub results: Vec<ReportResult>,
}

/// `configuration`: what a consumer may rely on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportConfiguration {
    pub limits: Limits,
}

/// `configuration.limits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    #[serde(default)]
    pub max_results: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_filter: Vec<String>,
}

/// Why a report cannot be converted between the two APIs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenReportsError {
    #[error("a report of kind {kind:?} has no OpenReports counterpart (only {POLICY_REPORT_KIND} and {CLUSTER_POLICY_REPORT_KIND})")]
    NotPinhooksKind { kind: String },
    #[error("{kind} {name:?} is not of {expected} (apiVersion {found:?})")]
    ApiVersion {
        kind: String,
        name: String,
        expected: &'static str,
        found: String,
    },
    #[error("{kind} {name:?}: a namespaced report needs a namespace, a cluster report has none")]
    Scope { kind: String, name: String },
}

// === impl ReportApi ===

impl ReportApi {
    /// The name `--report-api` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportApi::Wgpolicyk8s => "wgpolicyk8s",
            ReportApi::OpenReports => "openreports",
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            ReportApi::Wgpolicyk8s => "wgpolicyk8s.io",
            ReportApi::OpenReports => OPENREPORTS_GROUP,
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            ReportApi::Wgpolicyk8s => "v1alpha2",
            ReportApi::OpenReports => OPENREPORTS_VERSION,
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            ReportApi::Wgpolicyk8s => API_VERSION,
            ReportApi::OpenReports => OPENREPORTS_API_VERSION,
        }
    }

    pub fn kind(self, scope: ReportScope) -> &'static str {
        match (self, scope) {
            (ReportApi::Wgpolicyk8s, ReportScope::Namespace) => POLICY_REPORT_KIND,
            (ReportApi::Wgpolicyk8s, ReportScope::Cluster) => CLUSTER_POLICY_REPORT_KIND,
            (ReportApi::OpenReports, ReportScope::Namespace) => REPORT_KIND,
            (ReportApi::OpenReports, ReportScope::Cluster) => CLUSTER_REPORT_KIND,
        }
    }

    pub fn plural(self, scope: ReportScope) -> &'static str {
        match (self, scope) {
            (ReportApi::Wgpolicyk8s, ReportScope::Namespace) => "policyreports",
            (ReportApi::Wgpolicyk8s, ReportScope::Cluster) => "clusterpolicyreports",
            (ReportApi::OpenReports, ReportScope::Namespace) => "reports",
            (ReportApi::OpenReports, ReportScope::Cluster) => "clusterreports",
        }
    }
}

impl std::fmt::Display for ReportApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl ReportScope ===

impl ReportScope {
    /// The scope of a report built as `kind` ([`POLICY_REPORT_KIND`] or
    /// [`CLUSTER_POLICY_REPORT_KIND`]); anything but the cluster's kind is a namespace's.
    pub fn of_built(kind: &str) -> ReportScope {
        if kind == CLUSTER_POLICY_REPORT_KIND {
            ReportScope::Cluster
        } else {
            ReportScope::Namespace
        }
    }
}

// === conversions ===

/// `report` (as [`super`] builds it) as the OpenReports Report or ClusterReport.
pub fn to_openreports(report: &PolicyReport) -> Result<OpenReport, OpenReportsError> {
    let scope = match report.kind.as_str() {
        POLICY_REPORT_KIND => ReportScope::Namespace,
        CLUSTER_POLICY_REPORT_KIND => ReportScope::Cluster,
        other => {
            return Err(OpenReportsError::NotPinhooksKind {
                kind: other.to_string(),
            })
        }
    };
    let kind = ReportApi::OpenReports.kind(scope);
    check_scope(kind, scope, &report.metadata)?;
    Ok(OpenReport {
        api_version: OPENREPORTS_API_VERSION.to_string(),
        kind: kind.to_string(),
        metadata: report.metadata.clone(),
        source: SOURCE.to_string(),
        scope: None,
        configuration: Some(ReportConfiguration {
            limits: Limits {
                max_results: u64::try_from(MAX_RESULTS).unwrap_or(u64::MAX),
                status_filter: Vec::new(),
            },
        }),
        summary: report.summary,
        results: report.results.clone(),
    })
}

/// A stored Report or ClusterReport in the shape [`super`] builds, to be compared with a
/// freshly built one. Its `source`, `scope` and `configuration` are not compared: pinhook
/// writes them constant.
pub fn from_openreports(report: OpenReport) -> Result<PolicyReport, OpenReportsError> {
    if report.api_version != OPENREPORTS_API_VERSION {
        return Err(OpenReportsError::ApiVersion {
            kind: report.kind,
            name: report.metadata.name,
            expected: OPENREPORTS_API_VERSION,
            found: report.api_version,
        });
    }
    let scope = match report.kind.as_str() {
        REPORT_KIND => ReportScope::Namespace,
        CLUSTER_REPORT_KIND => ReportScope::Cluster,
        other => {
            return Err(OpenReportsError::NotPinhooksKind {
                kind: other.to_string(),
            })
        }
    };
    check_scope(&report.kind, scope, &report.metadata)?;
    Ok(PolicyReport {
        api_version: API_VERSION.to_string(),
        kind: ReportApi::Wgpolicyk8s.kind(scope).to_string(),
        metadata: report.metadata,
        results: report.results,
        summary: report.summary,
    })
}

fn check_scope(
    kind: &str,
    scope: ReportScope,
    metadata: &ReportMetadata,
) -> Result<(), OpenReportsError> {
    let namespaced = metadata.namespace.as_deref().is_some_and(|n| !n.is_empty());
    if namespaced == (scope == ReportScope::Namespace) {
        Ok(())
    } else {
        Err(OpenReportsError::Scope {
            kind: kind.to_string(),
            name: metadata.name.clone(),
        })
    }
}
