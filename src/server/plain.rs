//! The one hardened plain-HTTP edge: `pinhook serve`'s metrics port and `pinhook watch`'s
//! ports (health and metrics, and the inventory) are served here, with the same bounds as the
//! webhook's HTTPS listener: connections counted from the TCP accept, at most
//! [`PLAIN_CONNECTIONS`] and [`super::connections::PEER_CONNECTIONS`] of one address, idle ones
//! closed, and room made for an address holding fewer when full; a request's head read within the header read timeout and at most
//! [`super::connections::MAX_HEAD_BYTES`]; a whole request within the request timeout; bodies
//! of at most 4 KiB (these ports take GETs); a panic answered 500. A caller opening connections
//! by the thousand, or trickling a head, gets nothing more here than on the webhook's port.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Router;
use axum_server::accept::NoDelayAcceptor;
use hyper_util::rt::TokioTimer;
use tower_http::limit::RequestBodyLimitLayer;
use tracing::info;

use super::bounds::BoundsLayer;
use super::connections::{self, ConnectionLimits, LimitedAcceptor};
use super::ServerError;
use crate::admission::Failure;
use crate::metrics::Metrics;

/// `/metrics`' answer, for every port that serves it (the webhook's, its plain metrics port,
/// the watch's): the OpenMetrics text, or 500 naming what failed.
pub fn metrics_answer(metrics: &Metrics) -> Response {
    match metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => {
            let failure = Failure::EncodeMetrics(e);
            (failure.status_code(), format!("{}\n", failure.message())).into_response()
        }
    }
}

/// The largest body a plain-HTTP route reads.
const MAX_PLAIN_BODY: usize = 4096;
/// Connections one plain-HTTP listener holds at once (scrapers and probes use one or two).
pub const PLAIN_CONNECTIONS: usize = 64;

/// A plain-HTTP listener that is serving.
pub struct PlainEdge {
    pub addr: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

/// Binds `listen` and serves `routes` behind the bounds of the module docs (`limits`' times,
/// at most [`PLAIN_CONNECTIONS`] connections); `open` and `refused` are the connection metrics
/// kept up to date; `what` names the listener in the log.
pub fn serve(
    listen: SocketAddr,
    routes: Router,
    limits: &ConnectionLimits,
    metrics: &Metrics,
    what: &'static str,
) -> Result<PlainEdge, ServerError> {
    let bind = |source| ServerError::Bind {
        addr: listen,
        source,
    };
    let listener = std::net::TcpListener::bind(listen).map_err(bind)?;
    listener.set_nonblocking(true).map_err(bind)?;
    let addr = listener.local_addr().map_err(|_| ServerError::NoAddress)?;
    let handle = axum_server::Handle::new();
    let limits = ConnectionLimits {
        max_connections: limits.max_connections.min(PLAIN_CONNECTIONS),
        ..*limits
    };
    let acceptor = LimitedAcceptor::new(
        NoDelayAcceptor::new(),
        &limits,
        metrics.connections_open.clone(),
        metrics.connections_refused.clone(),
    )
    .evicting(metrics.connections_evicted.clone());
    let mut server = axum_server::from_tcp(listener)
        .map_err(bind)?
        .acceptor(acceptor)
        .handle(handle.clone());
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(connections::MAX_HEAD_BYTES);
    let app = routes.layer((
        tower_http::catch_panic::CatchPanicLayer::new(),
        BoundsLayer::new(limits.request_timeout, limits.header_read_timeout),
        RequestBodyLimitLayer::new(MAX_PLAIN_BODY),
    ));
    let task = tokio::spawn(async move {
        server
            .serve(app.into_make_service())
            .await
            .map_err(|source| ServerError::Serve { addr, source })
    });
    info!(%addr, "serving {what} over plain HTTP");
    Ok(PlainEdge { addr, handle, task })
}

// === impl PlainEdge ===

impl PlainEdge {
    /// Stops accepting connections and lets requests in flight finish, at most `grace`.
    pub async fn shutdown(self, grace: Duration) -> Result<(), ServerError> {
        self.handle.graceful_shutdown(Some(grace));
        match self.task.await {
            Ok(result) => result,
            Err(_) => Ok(()),
        }
    }

    /// Serves until `signal` completes (then [`PlainEdge::shutdown`] with `grace`) or the
    /// listener fails.
    pub async fn serve_until(
        mut self,
        signal: impl Future<Output = ()>,
        grace: Duration,
    ) -> Result<(), ServerError> {
        tokio::select! {
            result = &mut self.task => match result {
                Ok(result) => result,
                Err(_) => Ok(()),
            },
            () = signal => self.shutdown(grace).await,
        }
    }
}
