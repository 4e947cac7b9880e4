//! `/validate`: runs after every mutating webhook (sidecar injectors included). Denies a
//! pod-bearing object that still carries an unpinned or invalid reference among the images
//! this request adds or changes, an admitted digest whose signatures the policy's `verify`
//! entries do not find, and mirror configuration that would let a mirror answer tag pulls.
//! Never resolves a tag; fetches signatures only for digests a `verify` entry covers.

use std::time::Duration;

use super::decision::{target_of, Decision};
use super::failure::Failure;
use super::pipeline::Pinner;
use super::render;
use super::review::AdmissionRequest;

/// Decides one validating review.
pub async fn validate(pinner: &Pinner, request: &AdmissionRequest, budget: Duration) -> Decision {
    let uid = request.uid.as_str();
    let Some(target) = target_of(request) else {
        return Decision::skipped(uid);
    };
    match pinner.check_pinned(&target, budget).await {
        Ok(plan) => render::decide(uid, plan),
        Err(e) => Failure::Plan(e).decision(uid),
    }
}
