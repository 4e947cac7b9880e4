//! The watch's plain-HTTP ports, both served by the one hardened plain-HTTP edge
//! ([`crate::server::plain`]: the webhook's bounds on connections and requests): `/metrics`,
//! `/healthz` and `/readyz` for anyone who reaches `--listen` (counts and health, no workload
//! names), and `/inventory`, every namespace's workloads and image digests, on
//! `--inventory-listen` (localhost by default: bearer tokens never cross the Pod network in
//! clear unless an admin says so), only for callers [`InventoryGate`] lets in: 401 without a
//! token the cluster authenticates, 403 for a caller not allowed to `list pods` cluster-wide,
//! 429 when too many unknown tokens came at once, 503 when the cluster could not be asked. No
//! refusal carries inventory data.

use std::net::SocketAddr;
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
use crate::server::plain::{self, PlainEdge};
use crate::server::{ConnectionLimits, ServerError};
use crate::watch::access::Decision;

/// Shared with the HTTP handlers.
#[derive(Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    watch: Arc<Watch>,
    store: PodStore,
    gate: Arc<InventoryGate>,
}

/// Where the watch listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    /// `/metrics`, `/healthz`, `/readyz`.
    pub health: SocketAddr,
    /// `/inventory`; the same address as `health` serves it there, `None` nowhere.
    pub inventory: Option<SocketAddr>,
}

/// The watch's listeners, serving.
pub struct Edges {
    pub health: PlainEdge,
    /// Absent when `/inventory` is served on the health listener, or nowhere.
    pub inventory: Option<PlainEdge>,
}

/// Binds and serves the watch's routes behind the plain-HTTP edge's bounds (`limits`).
pub fn serve(
    watch: Arc<Watch>,
    store: PodStore,
    gate: Arc<InventoryGate>,
    listen: Listen,
    limits: &ConnectionLimits,
) -> Result<Edges, ServerError> {
    let metrics = watch.metrics().clone();
    let state = HttpState {
        metrics: metrics.clone(),
        watch,
        store,
        gate,
    };
    let health_routes = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler));
    let inventory_routes = Router::new().route("/inventory", get(inventory_handler));
    let edge = |addr, routes: Router<HttpState>, what| {
        plain::serve(
            addr,
            routes.with_state(state.clone()),
            limits,
            &metrics,
            what,
        )
    };
    // (the same address, unless both ask for any free port)
    if listen.inventory == Some(listen.health) && listen.health.port() != 0 {
        let health = edge(
            listen.health,
            health_routes.merge(inventory_routes),
            "/metrics, /healthz, /readyz and /inventory",
        )?;
        return Ok(Edges {
            health,
            inventory: None,
        });
    }
    let health = edge(
        listen.health,
        health_routes,
        "/metrics, /healthz and /readyz",
    )?;
    let inventory = match listen.inventory {
        Some(addr) => Some(edge(addr, inventory_routes, "/inventory")?),
        None => None,
    };
    Ok(Edges { health, inventory })
}

async fn metrics_handler(State(state): State<HttpState>) -> Response {
    crate::server::plain::metrics_answer(&state.metrics)
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
    let inventory = state.watch.inventory().map(|snapshot| snapshot.json());
    match inventory {
        // The body is the snapshot's own bytes, not a copy per caller.
        Some(Some(json)) => (
            [(header::CONTENT_TYPE, "application/json")],
            axum::body::Bytes::from_owner(json),
        )
            .into_response(),
        Some(None) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no recheck done on this replica (it does not hold the Lease)",
        )
            .into_response(),
    }
}
