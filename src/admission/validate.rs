//! `/validate`: runs after every mutating webhook (sidecar injectors included). Denies a
//! pod-bearing object that still carries an unpinned or invalid reference among the images
//! this request adds or changes, and mirror configuration that would let a mirror answer tag
//! pulls. Never calls a registry.

use super::decision::{target_of, Decision};
use super::failure::Failure;
use super::pipeline::Pinner;
use super::render;
use super::review::AdmissionRequest;

/// Decides one validating review.
pub async fn validate(pinner: &Pinner, request: &AdmissionRequest) -> Decision {
    let uid = request.uid.as_str();
    let Some(target) = target_of(request) else {
        return Decision::skipped(uid);
    };
    match pinner.check_pinned(&target).await {
        Ok(plan) => render::decide(uid, plan),
        Err(e) => Failure::Plan(e).decision(uid),
    }
}
