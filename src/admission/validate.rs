//! `/validate`: runs after every mutating webhook (sidecar injectors included) and denies a
//! pod-bearing object that still carries an unpinned or invalid reference among the images this
//! request adds or changes. Never calls a registry.

use super::mutate::{Decision, ReviewResult};
use super::pipeline::{error_chain, Pinner, Target};
use super::review::{AdmissionRequest, AdmissionResponse};

/// Decides one validating review.
pub fn validate(pinner: &Pinner, request: &AdmissionRequest) -> Decision {
    let uid = request.uid.as_str();
    let allow = |result| Decision {
        response: AdmissionResponse::allow(uid),
        result,
        plan: None,
    };
    let Some(object) = request.object.as_ref() else {
        return allow(ReviewResult::Skipped);
    };
    if !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return allow(ReviewResult::Skipped);
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
    let plan = match pinner.check_pinned(&target) {
        Ok(plan) => plan,
        Err(e) => {
            return Decision {
                response: AdmissionResponse::deny(uid, 400, error_chain(&e)),
                result: ReviewResult::Error,
                plan: None,
            }
        }
    };
    match plan.denial_message() {
        Some(message) => Decision {
            response: AdmissionResponse::deny(uid, 403, message),
            result: ReviewResult::Denied,
            plan: Some(plan),
        },
        None => Decision {
            response: AdmissionResponse::allow(uid),
            result: if plan.pod_bearing {
                ReviewResult::Pinned
            } else {
                ReviewResult::Skipped
            },
            plan: Some(plan),
        },
    }
}
