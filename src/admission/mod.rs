//! Admission: AdmissionReview in, AdmissionResponse out, for `/mutate`, `/validate` and the
//! dry run behind `POST /v1/dry-run` and `pinhook check`.
//!
//! Owns: the wire format ([`review`]), the pure decision core ([`plan`]: policy, object, mode
//! and registry answers in, a [`Plan`] out), the I/O that gathers its inputs
//! ([`pipeline::Pinner`]), rendering a plan as a response ([`render`], [`decision`]), and the
//! one mapping of errors to status, metric label and message ([`failure`]). Never: binds
//! sockets or speaks TLS (that is `server`).
//!
//! Dependencies run one way: `review` and `plan` import no sibling; `pipeline` uses `plan`;
//! `decision` and `failure` sit above it; `render`, `mutate`, `validate` and `dry_run` on top.

pub mod decision;
pub mod dry_run;
pub mod failure;
pub mod loops;
pub mod mutate;
pub mod pipeline;
pub mod plan;
pub mod render;
pub mod review;
pub mod revision_pods;
pub mod validate;

use crate::go_duration::GoDuration;
use std::time::Duration;

pub use decision::{target_of, Decision, ReviewResult};
pub use failure::Failure;
pub use mutate::mutate;
pub use pipeline::{Pinner, PinnerParts, PipelineError, Target};
pub use plan::{Action, Finding, ImageOutcome, LeftAlone, LeftAloneReason, Plan, Reason};
pub use review::{parse_review, review_body, AdmissionRequest, AdmissionResponse, ReviewError};
pub use validate::validate;

/// The least time left for answering after resolution, out of the apiserver's timeout.
const DEADLINE_MARGIN_FLOOR: Duration = Duration::from_millis(100);
/// Used when the apiserver sends no `?timeout=` (its default `timeoutSeconds` is 10).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const MIN_BUDGET: Duration = Duration::from_millis(250);
/// The apiserver's largest `timeoutSeconds`: a longer `?timeout=` is not from an apiserver.
const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// The resolution budget for a call whose URL carried `?timeout=<go duration>`.
pub fn budget_from_timeout(timeout: Option<&str>) -> Duration {
    let total = timeout
        .and_then(parse_go_duration)
        .unwrap_or(DEFAULT_TIMEOUT)
        .min(MAX_TIMEOUT);
    // A tenth back for answering, and never less than the fixed floor.
    let margin = (total / 10).max(DEADLINE_MARGIN_FLOOR);
    total.saturating_sub(margin).max(MIN_BUDGET)
}

/// The `?timeout=` the apiserver writes (`time.Duration.String()`: `10s`, `1m0s`, `500ms`), read
/// as Go reads it ([`crate::go_duration`]); a negative or invalid one is no timeout.
fn parse_go_duration(text: &str) -> Option<Duration> {
    match crate::go_duration::parse(text.trim())? {
        // (past Go's limit the apiserver never sends; taken at its length, then clamped)
        GoDuration::NonNegative(duration) | GoDuration::PastGoLimit(duration) => Some(duration),
        GoDuration::Negative => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_leaves_a_margin_out_of_the_apiserver_timeout() {
        assert_eq!(budget_from_timeout(Some("10s")), Duration::from_secs(9));
        assert_eq!(budget_from_timeout(Some("30s")), Duration::from_secs(27));
        assert_eq!(
            budget_from_timeout(Some("20s500ms")),
            Duration::from_millis(18_450)
        );
        assert_eq!(budget_from_timeout(Some("1s")), Duration::from_millis(900));
        assert_eq!(budget_from_timeout(None), Duration::from_secs(9));
        assert_eq!(budget_from_timeout(Some("bogus")), Duration::from_secs(9));
        assert_eq!(budget_from_timeout(Some("10")), Duration::from_secs(9));
    }

    #[test]
    fn absurd_timeouts_are_clamped_not_overflowed() {
        let max = Duration::from_secs(27);
        assert_eq!(budget_from_timeout(Some("3000000000000000h")), max);
        assert_eq!(
            budget_from_timeout(Some("10000000000000000000s10000000000000000000s")),
            Duration::from_secs(9),
            "an overflowing sum is not a duration: the default applies"
        );
        assert_eq!(budget_from_timeout(Some("1e400s")), Duration::from_secs(9));
        assert_eq!(budget_from_timeout(Some("45s")), max);
        assert_eq!(
            budget_from_timeout(Some("1m0s")),
            max,
            "timeoutSeconds is at most 30"
        );
    }
}
