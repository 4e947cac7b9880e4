//! The pre-rollout dry run behind `POST /v1/dry-run` and `pinhook check`: every object of a
//! manifest set through exactly the admission pipeline (policy, exemptions, credentials of the
//! target namespace, cache), recording nothing, reported per object and per image.

use std::time::Duration;

use futures::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::pipeline::{Pinner, PipelineError, Target};
use super::plan::{Action, ImageOutcome, Object, Plan};
use crate::documents::{Document, ReadError};
use crate::error::error_chain;
use crate::mirror_guard;
use crate::policy::CompiledPolicy;
use crate::registry::{ResolutionSource, RunMemo};
use crate::workload::WorkloadError;

/// Objects planned at once.
const CONCURRENCY: usize = 32;

/// The whole answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub objects: Vec<ObjectReport>,
    pub errors: Vec<DocumentError>,
    pub summary: Summary,
}

/// One object of the input.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReport {
    pub index: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// False for objects pinhook does not touch (passed through as they are).
    pub pod_bearing: bool,
    pub mode: String,
    pub images: Vec<ImageReport>,
    /// Object-level findings (mirror configuration) and notes such as stale answers.
    pub warnings: Vec<String>,
    /// The object as admission would store it.
    pub object: Value,
}

/// One image location.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageReport {
    /// RFC 6901 pointer to the image field.
    pub path: String,
    pub container: String,
    pub original: String,
    pub result: String,
    /// `pinned`, `unchanged`, `exempt`, `denied`, `violation`.
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// What its signatures said, when a `verify` entry covers the digest admitted
    /// (`verify[0]: signed by key sha256:…`, or why not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    pub cached: bool,
    pub stale: bool,
}

/// A document that could not be read or planned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DocumentError {
    pub index: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub error: String,
}

/// Counts, for exit codes and CI summaries.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub objects: usize,
    pub pinned: usize,
    pub unchanged: usize,
    pub exempt: usize,
    pub denied: usize,
    pub violation: usize,
    pub errors: usize,
}

/// Plans every document; objects keep their input order.
pub async fn run(
    pinner: &Pinner,
    documents: Vec<Document>,
    default_namespace: &str,
    budget: Duration,
) -> Report {
    let memo = RunMemo::new(pinner.dry_run_resolver());
    let results: Vec<Result<ObjectReport, DocumentError>> = stream::iter(documents)
        .map(|document| plan_document(pinner, &memo, document, default_namespace, budget))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let mut report = Report {
        objects: Vec::new(),
        errors: Vec::new(),
        summary: Summary::default(),
    };
    for result in results {
        match result {
            Ok(object) => report.objects.push(object),
            Err(error) => report.errors.push(error),
        }
    }
    report.summary = summarize(&report);
    report
}

async fn plan_document(
    pinner: &Pinner,
    memo: &RunMemo,
    document: Document,
    default_namespace: &str,
    budget: Duration,
) -> Result<ObjectReport, DocumentError> {
    // The document is taken apart, not copied: its object is what the dry runs' memory pool
    // charged for, and the patched object replaces it.
    let Document {
        index,
        source,
        object,
    } = document;
    let fail = |error: ObjectError| DocumentError {
        index: index.clone(),
        source: source.clone(),
        error: error_chain(&error),
    };
    let object = object.map_err(|e| fail(ObjectError::Read(e)))?;
    let identity = Identity::of(&object, default_namespace).map_err(&fail)?;
    let plan = pinner
        .plan(&dry_run_target(&identity, &object, memo), budget)
        .await
        .map_err(|e| fail(ObjectError::Plan(e)))?;
    let patched = patched_object(object, &plan).map_err(&fail)?;
    // `/validate` sees the object after `/mutate` patched it: judge the patched object.
    let validation = pinner
        .check_pinned(&dry_run_target(&identity, &patched, memo), budget)
        .await
        .map_err(|e| fail(ObjectError::Plan(e)))?;
    Ok(object_report(
        (index, source),
        identity,
        plan,
        validation,
        patched,
    ))
}

/// What the pipeline is asked about `object`: a CREATE that records nothing, resolved
/// through the dry run's memo.
fn dry_run_target<'a>(identity: &'a Identity, object: &'a Value, memo: &'a RunMemo) -> Target<'a> {
    Target {
        view: Object {
            group: &identity.group,
            kind: &identity.kind,
            subresource: "",
            namespace: &identity.namespace,
            object,
            old_object: None,
            user: "",
        },
        name: &identity.name,
        creating: true,
        dry_run: true,
        resolver: Some(memo),
    }
}

/// `object` with `plan`'s patch applied (in place: no copy).
fn patched_object(mut object: Value, plan: &Plan) -> Result<Value, ObjectError> {
    let patch = plan.patch().map_err(ObjectError::Patch)?;
    json_patch::patch(&mut object, &patch).map_err(ObjectError::Apply)?;
    Ok(object)
}

fn object_report(
    (index, source): (String, Option<String>),
    identity: Identity,
    plan: Plan,
    validation: Plan,
    object: Value,
) -> ObjectReport {
    let mut warnings = plan.warnings.clone();
    // Mirror findings come from validation (the mutating path does not judge mirror objects).
    warnings.extend(validation.findings.iter().map(|f| f.message.clone()));
    let mut images: Vec<ImageReport> = admitted_outcomes(&plan, &validation)
        .into_iter()
        .map(image_report)
        .collect();
    // Mirror kinds have no images; report their findings as the object's denial or violation.
    for finding in &validation.findings {
        images.push(ImageReport {
            path: String::new(),
            container: String::new(),
            original: String::new(),
            result: String::new(),
            action: action_name(finding.action).to_string(),
            reason: Some(finding.message.clone()),
            digest: None,
            signature: None,
            cached: false,
            stale: false,
        });
    }
    ObjectReport {
        index,
        source,
        api_version: identity.api_version,
        kind: identity.kind,
        namespace: identity.namespace,
        name: identity.name,
        pod_bearing: plan.pod_bearing || validation.pod_bearing,
        mode: plan.mode.to_string(),
        images,
        warnings,
        object,
    }
}

/// Per image site, what admission as a whole does: the mutating plan's outcome, unless the
/// validating step would still deny or report the (patched) image, e.g. under `resolve: Never`
/// where the plan resolves nothing and validation alone judges unpinned tags.
fn admitted_outcomes<'a>(plan: &'a Plan, validation: &'a Plan) -> Vec<&'a ImageOutcome> {
    let judged = |o: &ImageOutcome| matches!(o.action, Action::Denied | Action::Violation);
    let mut outcomes: Vec<&ImageOutcome> = plan.outcomes.iter().collect();
    for checked in validation.outcomes.iter().filter(|o| judged(o)) {
        match outcomes
            .iter_mut()
            .find(|o| o.site.pointer == checked.site.pointer)
        {
            Some(planned) if !judged(planned) => *planned = checked,
            Some(_) => {}
            None => outcomes.push(checked),
        }
    }
    outcomes
}

fn image_report(outcome: &ImageOutcome) -> ImageReport {
    ImageReport {
        path: outcome.site.pointer.clone(),
        container: outcome.site.name.clone(),
        original: outcome.site.image.clone(),
        result: outcome.result.clone(),
        action: action_name(outcome.action).to_string(),
        reason: outcome.reason.clone(),
        digest: outcome.digest.as_ref().map(ToString::to_string),
        signature: outcome.signature.as_ref().map(ToString::to_string),
        cached: outcome.source == Some(ResolutionSource::Cache),
        stale: outcome.source == Some(ResolutionSource::Stale),
    }
}

pub fn action_name(action: Action) -> &'static str {
    match action {
        Action::Pinned => "pinned",
        Action::Unchanged => "unchanged",
        Action::Exempt => "exempt",
        Action::Denied => "denied",
        Action::Violation => "violation",
    }
}

fn summarize(report: &Report) -> Summary {
    let mut summary = Summary {
        objects: report.objects.len(),
        errors: report.errors.len(),
        ..Summary::default()
    };
    for image in report.objects.iter().flat_map(|o| &o.images) {
        match image.action.as_str() {
            "pinned" => summary.pinned += 1,
            "unchanged" => summary.unchanged += 1,
            "exempt" => summary.exempt += 1,
            "denied" => summary.denied += 1,
            _ => summary.violation += 1,
        }
    }
    summary
}

/// Why one object of a dry run has no report; its whole chain is the report's error.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Read(ReadError),
    #[error("object has no apiVersion")]
    NoApiVersion,
    #[error("object has no kind")]
    NoKind,
    #[error(transparent)]
    Plan(PipelineError),
    #[error(transparent)]
    Patch(WorkloadError),
    #[error("patch does not apply")]
    Apply(#[source] json_patch::PatchError),
}

/// Who an object is: apiVersion split into group and version, kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub api_version: String,
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

// === impl Identity ===

impl Identity {
    pub fn of(object: &Value, default_namespace: &str) -> Result<Identity, ObjectError> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or(ObjectError::NoApiVersion)?;
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
            .ok_or(ObjectError::NoKind)?;
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let metadata = object.get("metadata");
        let field = |name: &str| metadata.and_then(|m| m.get(name)).and_then(Value::as_str);
        Ok(Identity {
            api_version: api_version.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            namespace: field("namespace").unwrap_or(default_namespace).to_string(),
            name: field("name")
                .or_else(|| field("generateName"))
                .unwrap_or("")
                .to_string(),
        })
    }

    /// What a caller must be allowed to `create` for pinhook to evaluate this object:
    /// `(resource, namespace)`, the namespace empty for cluster-scoped kinds. Pod-bearing kinds
    /// and the kinds the mirror guard judges; `None` for objects that pass through unread.
    pub fn access(&self, policy: &CompiledPolicy) -> Option<(String, String)> {
        if let Some((resource, cluster_scoped)) = mirror_guard::resource_of(&self.group, &self.kind)
        {
            let namespace = match cluster_scoped {
                true => String::new(),
                false => self.namespace.clone(),
            };
            return Some((resource.to_string(), namespace));
        }
        Some((self.resource(policy)?, self.namespace.clone()))
    }

    /// The resource a caller must be allowed to `create` for this object, for kinds pinhook
    /// finds images in (pod-bearing kinds and the policy's custom resources).
    pub fn resource(&self, policy: &CompiledPolicy) -> Option<String> {
        if !policy.kinds.bears_images(&self.group, &self.kind) {
            return None;
        }
        let extra = policy
            .policy
            .kinds
            .iter()
            .find(|k| k.group == self.group && k.kind == self.kind)
            .and_then(|k| k.resource.clone());
        let custom = policy
            .policy
            .custom_resources
            .iter()
            .find(|k| k.group == self.group && k.kind == self.kind)
            .and_then(|k| k.resource.clone());
        if let Some(resource) = extra.or(custom) {
            return Some(resource);
        }
        // Kubernetes' own plurals for the built-ins are all "lowercase kind + s".
        Some(format!("{}s", self.kind.to_ascii_lowercase()))
    }
}

impl Summary {
    /// True when something would be denied or breaks the policy.
    pub fn has_findings(&self) -> bool {
        self.denied > 0 || self.violation > 0
    }
}
