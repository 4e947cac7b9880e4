//! The webhook's routes: `/mutate` and `/validate` (thin handlers: a body waits for its
//! share of [`super::parsed_reviews`], then parse the review, call `admission`, log and count
//! through [`super::observe`], render), health, readiness and metrics, and the bounds every
//! request gets. The dry-run route is [`super::dry_run`]'s; who may ask for reviews is
//! [`super::client_auth`]'s.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use std::sync::atomic::Ordering;
use tower_http::limit::RequestBodyLimitLayer;
use tracing::{warn, Instrument};

use super::body_budget::{self, BodyRefusal, BodyShare};
use super::bounds::BoundsLayer;
use super::client_auth::refuse_unverified;
use super::dry_run::dry_run_handler;
use super::observe::{observe_decision, record_review, review_span};
use super::{AppState, ConnectionLimits, MAX_BODY_BYTES};
use crate::admission::{self, Failure};
use crate::error::error_chain;
use crate::tenant;

#[derive(Debug, Deserialize)]
struct ReviewQuery {
    timeout: Option<String>,
}

/// The routes, without a socket, with the bounds on each request: 413 for a body announced
/// over [`MAX_BODY_BYTES`] before it is read, an error when a body stalls for
/// `header_read_timeout`, and 408 when a request takes longer than `request_timeout` (both
/// [`BoundsLayer`]'s, which starts a timer only for a request that has to wait).
/// With client certificates required, `/mutate` and `/validate` answer 403 to a connection
/// without a verified one (the body read and dropped, never parsed); the other routes do not
/// look at it. The state is shared behind one `Arc`: each request clones it (the router, then
/// each handler's `State`), and a clone of [`AppState`] itself is one count per field.
pub fn router(state: AppState, limits: &ConnectionLimits) -> Router {
    Router::new()
        .route("/mutate", post(mutate_handler))
        .route("/validate", post(validate_handler))
        .route("/v1/dry-run", post(dry_run_handler))
        .route("/healthz", get(healthz_handler))
        .route("/readyz", get(readyz_handler))
        .route("/metrics", get(metrics_handler))
        // One layer, outermost first: each `Router::layer` call boxes the routes again, and
        // every box is a clone and an allocation per request (issue 13).
        .layer((
            tower_http::catch_panic::CatchPanicLayer::new(),
            BoundsLayer::new(limits.request_timeout, limits.header_read_timeout),
            RequestBodyLimitLayer::new(MAX_BODY_BYTES),
            DefaultBodyLimit::max(MAX_BODY_BYTES),
        ))
        .with_state(Arc::new(state))
}

/// The plain-HTTP metrics listener's routes: `/metrics` and `/healthz`, nothing else (the
/// bounds are [`super::plain`]'s).
pub(super) fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz_handler))
        .route("/metrics", get(metrics_handler))
        .with_state(Arc::new(state))
}

/// A review's query and body, once its caller is known to be allowed one
/// ([`refuse_unverified`], before anything of the request is read): the query parsed as the
/// `Query` extractor does, the body read within the body budget ([`BodyBudget::read_request`](super::body_budget::BodyBudget::read_request)), or the answer
/// to send instead. The share of the budget is held until the review is answered.
async fn review_input(
    state: &AppState,
    request: Request,
) -> Result<(ReviewQuery, Bytes, BodyShare), Response> {
    let request = refuse_unverified(state, request).await?;
    let Query(query) =
        Query::<ReviewQuery>::try_from_uri(request.uri()).map_err(IntoResponse::into_response)?;
    let (body, share) = (state.bodies)
        .read_request(request, MAX_BODY_BYTES, &state.metrics)
        .await
        .map_err(|refusal| body_refused(&refusal))?;
    Ok((query, body, share))
}

/// The plain-text answer to a body refused: 429 (with `Retry-After: 1`), 413 or 400.
fn body_refused(refusal: &BodyRefusal) -> Response {
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (status, format!("{}\n", error_chain(refusal))).into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

async fn mutate_handler(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let peer = body_budget::peer_of(&request);
    let (query, body, _body_share) = match review_input(&state, request).await {
        Ok(input) => input,
        Err(refused) => return refused,
    };
    let started = Instant::now();
    let budget = admission::budget_from_timeout(query.timeout.as_deref());
    let _share = match state.parsed_reviews.admit(&body, budget).await {
        Ok(share) => share,
        Err(refused) => return reject(&state, "mutate", Failure::Refused(refused), started),
    };
    let request = match admission::parse_review(&body) {
        Ok(request) => request,
        Err(e) => return reject(&state, "mutate", Failure::Review(e), started),
    };
    // Read and parsed: the body's bytes go, and its share of the body budget with them (the
    // parsed review is the parsed-review budget's); a review that waits on a registry holds none.
    drop(body);
    drop(_body_share);
    let span = review_span(&request);
    // Credential programs run for the review's namespace: fair shares between tenants.
    let decision = tenant::scope(
        &request.namespace,
        admission::mutate(&state.pinner, &request, budget),
    )
    .instrument(span.clone())
    .await;
    answer(&state, peer, "mutate", &request, &decision, &span, started)
}

async fn validate_handler(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let peer = body_budget::peer_of(&request);
    let (query, body, _body_share) = match review_input(&state, request).await {
        Ok(input) => input,
        Err(refused) => return refused,
    };
    let started = Instant::now();
    let budget = admission::budget_from_timeout(query.timeout.as_deref());
    let _share = match state.parsed_reviews.admit(&body, budget).await {
        Ok(share) => share,
        Err(refused) => return reject(&state, "validate", Failure::Refused(refused), started),
    };
    let request = match admission::parse_review(&body) {
        Ok(request) => request,
        Err(e) => return reject(&state, "validate", Failure::Review(e), started),
    };
    // Read and parsed: the body's bytes go, and its share of the body budget with them (the
    // parsed review is the parsed-review budget's); a review that waits on a registry holds none.
    drop(body);
    drop(_body_share);
    let span = review_span(&request);
    let decision = tenant::scope(
        &request.namespace,
        admission::validate(&state.pinner, &request, budget),
    )
    .instrument(span.clone())
    .await;
    answer(
        &state, peer, "validate", &request, &decision, &span, started,
    )
}

/// Logs and counts a decided review ([`observe`]), then renders its AdmissionReview.
fn answer(
    state: &AppState,
    peer: Option<std::net::IpAddr>,
    endpoint: &'static str,
    request: &admission::AdmissionRequest,
    decision: &admission::Decision,
    span: &tracing::Span,
    started: Instant,
) -> Response {
    let result = decision.result.as_str();
    span.record("result", result);
    span.in_scope(|| observe_decision(&state.metrics, endpoint, request, decision));
    record_review(
        &state.metrics,
        endpoint,
        &request.operation,
        result,
        started,
    );
    match admission::review_body(&decision.response) {
        // Held until written: a client that does not read its answers holds only its share.
        Ok(bytes) => match state.answers.charge(peer, bytes) {
            Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
            Err(short) => failure_text(&Failure::AnswersHeld(short)),
        },
        Err(e) => failure_text(&Failure::EncodeResponse(e)),
    }
}

/// Plain text, one line: what the apiserver logs when a call to the webhook fails.
fn failure_text(failure: &Failure) -> Response {
    let status = failure.status_code();
    let mut response = (status, format!("{}\n", failure.message())).into_response();
    // (a refusal for want of room, as the body budget's: the caller may retry at once)
    if status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

/// Answers a body that is not a review (and counts it).
fn reject(
    state: &AppState,
    endpoint: &'static str,
    failure: Failure,
    started: Instant,
) -> Response {
    warn!(endpoint, error = %failure.message(), "rejected malformed review");
    record_review(
        &state.metrics,
        endpoint,
        "",
        failure.result().as_str(),
        started,
    );
    failure_text(&failure)
}

async fn healthz_handler() -> &'static str {
    "ok\n"
}

async fn readyz_handler(State(state): State<Arc<AppState>>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    }
}

async fn metrics_handler(State(state): State<Arc<AppState>>) -> Response {
    super::plain::metrics_answer(&state.metrics)
}
