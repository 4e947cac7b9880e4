//! `/mutate`: pin every new tag reference of a pod-bearing object, or deny naming each image
//! that cannot be pinned.

use std::time::Duration;

use super::pipeline::{error_chain, Pinner, Plan, Target};
use super::render;
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
    /// Admitted although it breaks the policy (audit mode, or failures allowed).
    Violation,
    Error,
}

/// Decides one mutating review. Never fails: every problem becomes a denial naming its cause.
pub async fn mutate(pinner: &Pinner, request: &AdmissionRequest, budget: Duration) -> Decision {
    let uid = request.uid.as_str();
    let Some(target) = target_of(request) else {
        return Decision::skipped(uid);
    };
    match pinner.plan(&target, budget).await {
        Ok(plan) => render::decide(uid, plan),
        Err(e) => Decision::error(uid, 400, error_chain(&e)),
    }
}

/// The object to admit, or `None` for operations pinhook does not judge (DELETE, CONNECT).
pub fn target_of(request: &AdmissionRequest) -> Option<Target<'_>> {
    let object = request.object.as_ref()?;
    if !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return None;
    }
    Some(Target {
        group: &request.kind.group,
        kind: &request.kind.kind,
        subresource: &request.sub_resource,
        namespace: &request.namespace,
        name: &request.name,
        object,
        old_object: request.old_object.as_ref(),
        dry_run: request.is_dry_run(),
        resolver: None,
    })
}

// === impl Decision ===

impl Decision {
    pub fn skipped(uid: &str) -> Decision {
        Decision {
            response: AdmissionResponse::allow(uid),
            result: ReviewResult::Skipped,
            plan: None,
        }
    }

    pub fn error(uid: &str, code: u16, message: String) -> Decision {
        Decision {
            response: AdmissionResponse::deny(uid, code, message),
            result: ReviewResult::Error,
            plan: None,
        }
    }
}

// === impl ReviewResult ===

impl ReviewResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewResult::Pinned => "pinned",
            ReviewResult::Skipped => "skipped",
            ReviewResult::Denied => "denied",
            ReviewResult::Violation => "violation",
            ReviewResult::Error => "error",
        }
    }
}
