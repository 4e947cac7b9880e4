//! The one place an error becomes an answer: its status code (the HTTP status, or the
//! AdmissionResponse's `status.code` when the review itself is answered), the `result` metric
//! label, and the message the caller reads (the error's chain on one line, each cause once).
//! Handlers and renderers build a [`Failure`]; none of them picks a status or words a message.

use std::time::Duration;

use axum::http::StatusCode;

use super::decision::{Decision, ReviewResult};
use super::pipeline::PipelineError;
use super::review::{AdmissionResponse, ReviewError};
use crate::cluster::AuthError;
use crate::error::error_chain;
use crate::workload::WorkloadError;

/// Every failure pinhook answers over HTTP, named for the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The body is not an AdmissionReview.
    #[error(transparent)]
    Review(ReviewError),
    /// The object's images could not be read.
    #[error(transparent)]
    Plan(PipelineError),
    /// The patch for a plan could not be built.
    #[error(transparent)]
    Patch(WorkloadError),
    #[error("cannot encode the patch")]
    EncodePatch(#[source] serde_json::Error),
    #[error("cannot encode the response")]
    EncodeResponse(#[source] serde_json::Error),
    #[error("cannot encode the report")]
    EncodeReport(#[source] serde_json::Error),
    #[error("cannot encode the metrics")]
    EncodeMetrics(#[source] std::fmt::Error),
    /// The dry-run endpoint runs without a Kubernetes API to check its callers.
    #[error("the dry-run endpoint needs the Kubernetes API (TokenReview, SubjectAccessReview) and none is configured")]
    NoKubernetesApi,
    #[error("a bearer token is required (Authorization: Bearer <token>)")]
    MissingToken,
    #[error("the bearer token is not valid")]
    InvalidToken,
    /// The cluster could not say who the caller is.
    #[error(transparent)]
    Authentication(AuthError),
    #[error("the body is not UTF-8 text")]
    NotUtf8,
    /// The dry run's manifests are over its limits (documents, YAML events or aliases).
    #[error(transparent)]
    Documents(crate::documents::LimitError),
    /// The dry run needs more SubjectAccessReviews than one request may send.
    #[error("the manifests need {count} permission checks (distinct resource and namespace pairs); one dry run may need at most {limit}: split them")]
    TooManyAccessChecks { count: usize, limit: usize },
    /// The caller may not create some of the objects it asked about; `missing` names each
    /// permission (and why it could not be checked, when it could not).
    #[error("{caller} may not: {}", missing.join("; "))]
    Forbidden {
        caller: String,
        missing: Vec<String>,
    },
    /// A dry run's documents found no room in the dry runs' memory pool in time (`busy`), or
    /// would cost more than all of it.
    #[error("{}", dry_run_refused(*busy, *bytes, *cost, *budget))]
    DryRunRefused {
        busy: bool,
        bytes: usize,
        cost: usize,
        budget: usize,
    },
    /// A review found no room in the budget of parsed reviews in time, or would cost more than all of it.
    #[error(transparent)]
    Refused(Refused),
    /// A dry run's report would pass the bytes its share of the dry runs' memory holds for it.
    #[error(
        "this dry run's report would pass {cap} bytes, its share of the dry runs' memory: \
         split the manifests"
    )]
    ReportTooLarge { cap: usize },
    /// The answer found no room among the answers not yet read (`server::answers`).
    #[error("{}", answers_held(*.0))]
    AnswersHeld(crate::shares::Short),
    #[error("no manifest parser is available")]
    ParserClosed(#[source] tokio::sync::AcquireError),
    #[error("the manifest parser failed")]
    ParserFailed(#[source] tokio::task::JoinError),
}

/// Why a review was not decided: no room for it, parsed, in the server's budget of parsed
/// reviews (`server::parsed_reviews`, which refuses with it).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(
        "pinhook is deciding other reviews (this one, {bytes} bytes, would hold about {cost} \
         bytes parsed, which did not fit in the {budget}-byte budget of reviews of its size \
         within {waited:?})"
    )]
    Busy {
        bytes: usize,
        cost: usize,
        budget: usize,
        waited: Duration,
    },
    #[error(
        "this review ({bytes} bytes) would hold about {cost} bytes parsed, more than the \
         {budget}-byte budget of all reviews of its size: pinhook does not parse it (an object \
         of that many small JSON objects and values is no workload's)"
    )]
    TooCostly {
        bytes: usize,
        cost: usize,
        budget: usize,
    },
}

fn answers_held(short: crate::shares::Short) -> String {
    match short {
        crate::shares::Short::Key(bytes) => format!(
            "this client holds {} KiB of answers it has not read; read them, then retry",
            bytes >> 10
        ),
        crate::shares::Short::Total(bytes) => format!(
            "clients hold {} KiB of answers they have not read; retry",
            bytes >> 10
        ),
    }
}

fn dry_run_refused(busy: bool, bytes: usize, cost: usize, budget: usize) -> String {
    match busy {
        true => format!(
            "pinhook is running other dry runs (this one, {bytes} bytes, may hold about {cost} \
             bytes parsed, which did not fit in the {budget}-byte budget of dry runs in time); retry"
        ),
        false => format!(
            "this dry run ({bytes} bytes) may hold about {cost} bytes parsed, more than the \
             {budget}-byte budget of all dry runs: split the manifests"
        ),
    }
}

// === impl Failure ===

impl Failure {
    /// The status code of the answer.
    pub fn status(&self) -> u16 {
        match self {
            Failure::Review(_) | Failure::Plan(_) | Failure::NotUtf8 => 400,
            Failure::MissingToken | Failure::InvalidToken => 401,
            Failure::Forbidden { .. } => 403,
            Failure::Documents(_)
            | Failure::TooManyAccessChecks { .. }
            | Failure::ReportTooLarge { .. } => 413,
            Failure::Refused(Refused::TooCostly { .. }) => 413,
            Failure::Refused(Refused::Busy { .. }) => 429,
            Failure::DryRunRefused { busy: true, .. } => 429,
            Failure::DryRunRefused { busy: false, .. } => 413,
            Failure::Patch(_)
            | Failure::EncodePatch(_)
            | Failure::EncodeResponse(_)
            | Failure::EncodeReport(_)
            | Failure::EncodeMetrics(_)
            | Failure::ParserClosed(_)
            | Failure::ParserFailed(_) => 500,
            Failure::NoKubernetesApi | Failure::Authentication(_) | Failure::AnswersHeld(_) => 503,
        }
    }

    /// [`Failure::status`] as an HTTP status code.
    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The `result` label of the review metrics: a failure is never a policy outcome.
    pub fn result(&self) -> ReviewResult {
        ReviewResult::Error
    }

    /// What the caller reads: the whole chain on one line.
    pub fn message(&self) -> String {
        error_chain(self)
    }

    /// A review answered with this failure: denied, naming the cause.
    pub fn decision(&self, uid: &str) -> Decision {
        Decision {
            response: AdmissionResponse::deny(uid, self.status(), self.message()),
            result: self.result(),
            plan: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn json_error() -> serde_json::Error {
        serde_json::from_str::<serde_json::Value>("{").expect_err("an unclosed brace is not JSON")
    }

    #[rstest]
    #[case::malformed_review(
        Failure::Review(ReviewError::MissingUid),
        400,
        "request.uid is missing or empty"
    )]
    #[case::unreadable_object(
        Failure::Plan(PipelineError::Workload(WorkloadError::UnexpectedType {
            pointer: "/spec/containers".to_string(),
            expected: "an array",
        })),
        400,
        "cannot read the object's images: /spec/containers is not an array"
    )]
    #[case::patch(
        Failure::Patch(WorkloadError::InvalidPointer {
            pointer: "x".to_string(),
            reason: "no slash".to_string(),
        }),
        500,
        "\"x\" is not an RFC 6901 JSON pointer: no slash"
    )]
    #[case::encode_patch(
        Failure::EncodePatch(json_error()),
        500,
        "cannot encode the patch: EOF while parsing an object at line 1 column 1"
    )]
    #[case::no_api(
        Failure::NoKubernetesApi,
        503,
        "the dry-run endpoint needs the Kubernetes API (TokenReview, SubjectAccessReview) and none is configured"
    )]
    #[case::no_token(
        Failure::MissingToken,
        401,
        "a bearer token is required (Authorization: Bearer <token>)"
    )]
    #[case::bad_token(Failure::InvalidToken, 401, "the bearer token is not valid")]
    #[case::not_utf8(Failure::NotUtf8, 400, "the body is not UTF-8 text")]
    #[case::dry_run_busy(
        Failure::DryRunRefused { busy: true, bytes: 1_100_000, cost: 22_200_000, budget: 25_165_824 },
        429,
        "pinhook is running other dry runs (this one, 1100000 bytes, may hold about 22200000 bytes parsed, which did not fit in the 25165824-byte budget of dry runs in time); retry"
    )]
    #[case::dry_run_too_costly(
        Failure::DryRunRefused { busy: false, bytes: 9, cost: 30_000_000, budget: 25_165_824 },
        413,
        "this dry run (9 bytes) may hold about 30000000 bytes parsed, more than the 25165824-byte budget of all dry runs: split the manifests"
    )]
    #[case::too_many_values(
        Failure::Documents(crate::documents::LimitError::Values { count: 60_001, limit: 50_000 }),
        413,
        "the JSON input holds up to 60001 values; at most 50000 are read"
    )]
    #[case::forbidden(
        Failure::Forbidden {
            caller: "ci".to_string(),
            missing: vec!["create pods in namespace a".to_string(), "create jobs.batch in namespace a".to_string()],
        },
        403,
        "ci may not: create pods in namespace a; create jobs.batch in namespace a"
    )]
    fn status_and_message(#[case] failure: Failure, #[case] status: u16, #[case] message: &str) {
        assert_eq!(failure.status(), status);
        assert_eq!(failure.message(), message);
        assert_eq!(failure.result(), ReviewResult::Error);
    }

    #[test]
    fn a_review_failure_is_a_denial_with_its_status() {
        let decision = Failure::Review(ReviewError::MissingRequest).decision("u");
        assert_eq!(decision.result, ReviewResult::Error);
        assert!(!decision.response.allowed);
        let status = decision
            .response
            .status
            .as_ref()
            .map(|s| (s.code, s.message.as_str()));
        assert_eq!(status, Some((400, "AdmissionReview has no request")));
    }

    #[test]
    fn a_malformed_body_names_its_cause_once() {
        let failure = Failure::Review(ReviewError::MalformedJson(json_error()));
        assert_eq!(
            failure.message(),
            "request body is not valid JSON: EOF while parsing an object at line 1 column 1"
        );
    }
}
