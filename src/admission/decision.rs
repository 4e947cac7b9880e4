//! The outcome of one review ([`Decision`]: response, metric label, plan) and which requests
//! pinhook judges at all ([`target_of`]). Shared by `/mutate`, `/validate` and their
//! rendering, so that none of them imports another.

use super::pipeline::Target;
use super::plan::{Object, Plan};
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

/// The object to admit, or `None` for operations pinhook does not judge (DELETE, CONNECT).
pub fn target_of(request: &AdmissionRequest) -> Option<Target<'_>> {
    let object = request.object.as_ref()?;
    if !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return None;
    }
    Some(Target {
        view: Object {
            group: &request.kind.group,
            kind: &request.kind.kind,
            subresource: &request.sub_resource,
            namespace: &request.namespace,
            object,
            old_object: request.old_object.as_ref(),
            user: request.username(),
        },
        name: &request.name,
        creating: request.operation == "CREATE",
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
