//! `/mutate`: pin every new tag reference of a pod-bearing object, or deny naming each image
//! that cannot be pinned.

use std::time::Duration;

use super::decision::{target_of, Decision};
use super::failure::Failure;
use super::pipeline::Pinner;
use super::render;
use super::review::AdmissionRequest;

/// Decides one mutating review. Never fails: every problem becomes a denial naming its cause.
pub async fn mutate(pinner: &Pinner, request: &AdmissionRequest, budget: Duration) -> Decision {
    let uid = request.uid.as_str();
    let Some(target) = target_of(request) else {
        return Decision::skipped(uid);
    };
    match pinner.plan(&target, budget).await {
        Ok(plan) => render::decide(uid, plan),
        Err(e) => Failure::Plan(e).decision(uid),
    }
}
