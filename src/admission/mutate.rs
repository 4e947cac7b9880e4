//! `/mutate`: pin every new tag reference of a pod-bearing object, or deny naming each image
//! that cannot be pinned.

use std::time::Duration;

use super::pipeline::{error_chain, Pinner, Plan, Target};
use super::review::{AdmissionRequest, AdmissionResponse};

/// The outcome of one review, for the response, logs and metrics.
#[derive(Debug)]
pub struct Decision {
    pub response: AdmissionResponse,
    pub result: ReviewResult,
    pub plan: Option<Plan>,
}

/// Fixed vocabulary for the `result` metric label and log field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewResult {
    Pinned,
    Skipped,
    Denied,
    Error,
}

/// Decides one mutating review. Never fails: every problem becomes a denial naming its cause.
pub async fn mutate(pinner: &Pinner, request: &AdmissionRequest, budget: Duration) -> Decision {
    let uid = request.uid.as_str();
    let Some(object) = request.object.as_ref() else {
        return skipped(uid);
    };
    if !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return skipped(uid);
    }
    let target = Target {
        group: &request.kind.group,
        kind: &request.kind.kind,
        subresource: &request.sub_resource,
        namespace: &request.namespace,
        name: &request.name,
        object,
        old_object: request.old_object.as_ref(),
    };
    let plan = match pinner.plan(&target, budget).await {
        Ok(plan) => plan,
        Err(e) => return error(uid, 400, error_chain(&e)),
    };
    decide(uid, plan)
}

fn decide(uid: &str, plan: Plan) -> Decision {
    if let Some(message) = plan.denial_message() {
        return Decision {
            response: AdmissionResponse::deny(uid, 403, message)
                .with_warnings(plan.warnings.clone()),
            result: ReviewResult::Denied,
            plan: Some(plan),
        };
    }
    let patch = match plan.patch() {
        Ok(patch) => patch,
        Err(e) => return error(uid, 500, error_chain(&e)),
    };
    let response = match AdmissionResponse::allow(uid).with_patch(&patch) {
        Ok(response) => response.with_warnings(plan.warnings.clone()),
        Err(e) => return error(uid, 500, format!("cannot encode the patch: {e}")),
    };
    let result = if patch.0.is_empty() {
        ReviewResult::Skipped
    } else {
        ReviewResult::Pinned
    };
    Decision {
        response,
        result,
        plan: Some(plan),
    }
}

fn skipped(uid: &str) -> Decision {
    Decision {
        response: AdmissionResponse::allow(uid),
        result: ReviewResult::Skipped,
        plan: None,
    }
}

fn error(uid: &str, code: u16, message: String) -> Decision {
    Decision {
        response: AdmissionResponse::deny(uid, code, message),
        result: ReviewResult::Error,
        plan: None,
    }
}

// === impl ReviewResult ===

impl ReviewResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewResult::Pinned => "pinned",
            ReviewResult::Skipped => "skipped",
            ReviewResult::Denied => "denied",
            ReviewResult::Error => "error",
        }
    }
}
