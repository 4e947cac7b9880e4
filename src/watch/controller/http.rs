//! The watch's plain-HTTP port: `/metrics`, `/healthz` and `/readyz` for anyone who reaches it
//! (counts and health, no workload names), and `/inventory`, every namespace's workloads and
//! image digests, only for callers [`InventoryGate`] lets in: 401 without a token the cluster
//! authenticates, 403 for a caller not allowed to `list pods` cluster-wide, 429 when too many
//! unknown tokens came at once, 503 when the cluster could not be asked. No refusal carries
//! inventory data.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::access::InventoryGate;
use super::cycle::Watch;
use super::pods::PodStore;
use crate::metrics::Metrics;
use crate::watch::access::Decision;

/// Shared with the HTTP handlers.
#[derive(Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    watch: Arc<Watch>,
    store: PodStore,
    gate: Arc<InventoryGate>,
}

/// The port's routes.
pub fn router(watch: Arc<Watch>, store: PodStore, gate: Arc<InventoryGate>) -> Router {
    let state = HttpState {
        metrics: watch.metrics.clone(),
        watch,
        store,
        gate,
    };
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .route("/inventory", get(inventory_handler))
        .with_state(state)
}

async fn metrics_handler(State(state): State<HttpState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn ready_handler(State(state): State<HttpState>) -> Response {
    if state.store.is_ready() {
        "ok".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "pods not listed yet").into_response()
    }
}

/// The last cycle's inventory as JSON, for callers the gate lets in; 503 on a replica that
/// has run no cycle (a standby).
async fn inventory_handler(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match state.gate.decide(authorization).await {
        Decision::Allowed => {}
        Decision::Unauthenticated => {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token the cluster authenticates is required\n",
            )
                .into_response()
        }
        Decision::Forbidden => {
            return (
                StatusCode::FORBIDDEN,
                "the inventory is for callers allowed to list pods in every namespace\n",
            )
                .into_response()
        }
        Decision::Throttled => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                "too many callers to check at once; try again\n",
            )
                .into_response()
        }
        Decision::Unavailable => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the caller could not be checked with the cluster\n",
            )
                .into_response()
        }
    }
    let inventory = state
        .watch
        .inventory
        .read()
        .ok()
        .and_then(|i| i.as_ref().map(|i| i.to_json()));
    match inventory {
        Some(Ok(json)) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Some(Err(_)) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no recheck done on this replica (it does not hold the Lease)",
        )
            .into_response(),
    }
}
