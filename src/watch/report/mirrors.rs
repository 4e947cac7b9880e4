//! The ClusterPolicyReport `pinhook-mirrors`: what the mirror guard finds in tag-mirror
//! objects already in the cluster (ImageTagMirrorSet, ImageContentPolicy, registries.conf
//! ConfigMaps), judged by the guard's own code and mapped as namespace reports are. Each
//! finding's strings are cut to [`budget::MAX_STRING_BYTES`] as it is made, since a cycle keeps
//! every finding until the report is built. Pure, like the rest of [`super`].

use std::collections::BTreeMap;

use serde_json::Value;

use super::{
    assemble, budget, Keyed, ObjectRef, PolicyReport, ReportResult, Severity, Timestamp, Verdict,
    CATEGORY, CLUSTER_POLICY_REPORT_KIND, MIRROR_REPORT_NAME, POLICY, RULE_MIRRORS, SOURCE,
};
use crate::mirror_guard;
use crate::policy::{MirrorPolicy, Mode};
use crate::watch::WatchError;

/// One tag-mirror finding on one object, for the ClusterPolicyReport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorFinding {
    pub object: ObjectRef,
    /// `Fail` for a pair that can serve tag pulls, `Error` for an object no node can load.
    pub verdict: Verdict,
    pub message: String,
    /// Where in the object, the source and the mirror (absent for an `Error`).
    pub entry: Option<String>,
    pub source: Option<String>,
    pub mirror: Option<String>,
}

/// Every finding of the mirror guard on `object` (any kind; kinds the guard does not judge,
/// and clean objects, have none). The object's own `apiVersion`, `kind` and `metadata` name it.
pub fn mirror_findings(
    policy: &MirrorPolicy,
    object: &Value,
) -> Result<Vec<MirrorFinding>, WatchError> {
    let text = |pointer: &str, field: &'static str| -> Result<Option<String>, WatchError> {
        match object.pointer(pointer) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(WatchError::Invalid {
                field: field.to_string(),
                expected: "a string",
            }),
        }
    };
    let required = |pointer: &str, field: &'static str| {
        text(pointer, field)?.ok_or(WatchError::Missing { field })
    };
    let api_version = required("/apiVersion", "apiVersion")?;
    let kind = required("/kind", "kind")?;
    let name = required("/metadata/name", "metadata.name")?;
    let namespace = text("/metadata/namespace", "metadata.namespace")?;
    let uid = text("/metadata/uid", "metadata.uid")?;
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    let reviewed = mirror_guard::review(policy, group, &kind, object);
    let object_ref = ObjectRef {
        api_version: api_version.clone(),
        kind: kind.clone(),
        namespace,
        name,
        uid,
    };
    let findings = match reviewed {
        Ok(None) => Vec::new(),
        Ok(Some(review)) => review
            .violations
            .into_iter()
            .map(|v| MirrorFinding {
                object: object_ref.clone(),
                verdict: Verdict::Fail,
                message: v.message,
                entry: Some(v.entry),
                source: Some(v.source),
                mirror: Some(v.mirror),
            })
            .collect(),
        Err(error) => vec![MirrorFinding {
            object: object_ref,
            verdict: Verdict::Error,
            message: error.to_string(),
            entry: None,
            source: None,
            mirror: None,
        }],
    };
    // Bounded at once (the report would cut them anyway): a cycle keeps every finding of
    // every page of ConfigMaps until the report is built.
    Ok(findings.into_iter().map(MirrorFinding::bounded).collect())
}

// === impl MirrorFinding ===

impl MirrorFinding {
    /// This finding with every string at most [`MAX_STRING_BYTES`](budget::MAX_STRING_BYTES).
    fn bounded(self) -> MirrorFinding {
        let cut = |s: String| match budget::truncate(&s, budget::MAX_STRING_BYTES) {
            std::borrow::Cow::Borrowed(_) => s,
            std::borrow::Cow::Owned(cut) => cut,
        };
        let o = self.object;
        MirrorFinding {
            object: ObjectRef {
                api_version: cut(o.api_version),
                kind: cut(o.kind),
                namespace: o.namespace.map(cut),
                name: cut(o.name),
                uid: o.uid.map(cut),
            },
            verdict: self.verdict,
            message: cut(self.message),
            entry: self.entry.map(cut),
            source: self.source.map(cut),
            mirror: self.mirror.map(cut),
        }
    }
}

/// The ClusterPolicyReport of tag-mirror findings, mapped for the policy's `mode` as namespace
/// reports are (audit: warn, off: skip).
pub fn mirror_report(
    mode: Mode,
    findings: &[MirrorFinding],
    now: Timestamp,
    previous: Option<&PolicyReport>,
) -> PolicyReport {
    let keyed = findings
        .iter()
        .map(|finding| {
            let verdict = match mode {
                Mode::Off => Verdict::Skip,
                _ => finding.verdict.in_mode(mode),
            };
            let mut properties = BTreeMap::new();
            let optional = [
                ("entry", &finding.entry),
                ("source", &finding.source),
                ("mirror", &finding.mirror),
            ];
            for (key, value) in optional {
                if let Some(value) = value {
                    properties.insert(key.to_string(), value.clone());
                }
            }
            let o = &finding.object;
            let key = (
                o.kind.clone(),
                o.namespace.clone(),
                o.name.clone(),
                finding.entry.clone(),
                finding.message.clone(),
            );
            let result = ReportResult {
                policy: POLICY.to_string(),
                rule: RULE_MIRRORS.to_string(),
                result: verdict,
                scored: mode == Mode::Enforce,
                message: finding.message.clone(),
                resources: vec![finding.object.clone()],
                source: SOURCE.to_string(),
                severity: Some(Severity::High),
                category: CATEGORY.to_string(),
                properties,
                timestamp: now,
            };
            Keyed { key, result }
        })
        .collect();
    assemble(
        CLUSTER_POLICY_REPORT_KIND,
        MIRROR_REPORT_NAME,
        None,
        keyed,
        now,
        previous,
    )
}
