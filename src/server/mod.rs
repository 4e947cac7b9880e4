//! HTTPS server: binding, serving and shutting down the webhook, with its parts in rooms of
//! their own: [`routes`] (the handlers of `/mutate`, `/validate`, health and metrics, and each
//! request's bounds), [`bounds`] (a request's and its body's timeouts, with a timer only for a
//! request that waits), [`dry_run`] (`/v1/dry-run` and who may call it), [`throttle`] (the
//! TokenReview budget of dry-run callers), [`tls`] (the serving certificate, its reloads and
//! the client CA), [`client_auth`] (admission reviews only from a verified client certificate,
//! when a client CA is set), [`connections`] (bounds on clients' connections),
//! [`keep_alive`] (how long an HTTP/1.1 connection is kept: the header read timeout from a
//! request's first byte, `Connection: close` while draining),
//! [`body_budget`] (request body bytes in flight, taken before a byte is read),
//! [`parsed_reviews`] (the memory budget of parsed reviews) and [`observe`] (what each review
//! logs and counts).
//!
//! Handlers are thin: extract, call `admission`, render; the status and message of every
//! failure come from [`crate::admission::Failure`]. Invariants: nothing on the request path
//! panics (a panic layer turns a bug into a 500), bodies over 7 MiB get 413 before they are
//! buffered whole (at once when their `Content-Length` says so), a body that does not fit the
//! body budget gets 429 before it is read, every request and connection
//! is bounded in time, and no blocking work runs on the async workers (manifest parsing goes
//! to `spawn_blocking`, a few bodies at a time; files are read with `tokio::fs`). The policy
//! file's reload is [`crate::policy_reload`]'s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::RustlsAcceptor;
use hyper_util::rt::TokioTimer;
use tracing::info;

pub mod answers;
pub mod body_budget;
mod bounds;
pub mod client_auth;
pub mod connections;
mod dry_run;
mod keep_alive;
pub mod observe;
pub mod parsed_reviews;
mod peers;
pub mod plain;
mod routes;
pub mod throttle;
mod tls;

use client_auth::PeerAcceptor;
pub use connections::ConnectionLimits;
use connections::LimitedAcceptor;
use keep_alive::KeepAliveAcceptor;
pub use routes::router;
pub use throttle::{TokenBucket, TokenReviewLimit};

use crate::admission::Pinner;
use crate::certs::managed::Serving;
use crate::cluster::Authorizer;
use crate::metrics::Metrics;

/// controller-runtime's limit: two objects of up to 3 MiB each plus the envelope.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;
/// How long in-flight requests get to finish on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("failed to load TLS certificate '{cert}' and key '{key}'")]
    LoadTls {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to load the client CA '{path}'")]
    LoadClientCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to load the TLS certificate from the managed Secret")]
    LoadManagedTls(#[source] std::io::Error),
    #[error("the managed TLS Secret's certificate stopped being watched before it held one")]
    NoManagedTls,
    #[error("failed to bind {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("server did not report its listening address")]
    NoAddress,
    #[error("serving on {addr} failed")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Where to listen and with which certificate.
#[derive(Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub tls: ServerTls,
    pub limits: ConnectionLimits,
    /// Who may call.
    pub clients: ClientAccess,
}

/// Who may call: the client CA of admission reviews, the dry run's TokenReview budget, and
/// the plain-HTTP port of `/metrics` that a NetworkPolicy can open to scrapers alone.
#[derive(Debug, Clone, Default)]
pub struct ClientAccess {
    /// CA certificates (PEM) a client certificate must chain to for `/mutate` and `/validate`
    /// to answer; `None`: any client that reaches the port may ask for reviews.
    pub client_ca: Option<PathBuf>,
    /// Names a client certificate must carry one of (DNS SAN or CN) besides chaining to
    /// `client_ca`; empty: any certificate the CA signed.
    pub client_names: Vec<String>,
    pub token_reviews: TokenReviewLimit,
    /// Also serve `/metrics` (and `/healthz`) over plain HTTP here, so that a NetworkPolicy can
    /// let scrapers reach it without letting them reach the admission port.
    pub metrics_listen: Option<SocketAddr>,
}

/// Where the serving certificate comes from.
#[derive(Debug)]
pub enum ServerTls {
    /// PEM files, re-read when they change (a mounted Secret is updated in place).
    Files { cert: PathBuf, key: PathBuf },
    /// The pairs a [`crate::certs::managed::ManagedTls`] sends, served from the first on.
    Watched(tokio::sync::watch::Receiver<Option<Serving>>),
}

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    pub pinner: Arc<Pinner>,
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    /// Checks dry-run callers; `None` without a Kubernetes API (the endpoint then answers 503).
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// The budget parsed reviews share while they are decided.
    pub parsed_reviews: Arc<parsed_reviews::ParsedReviews>,
    /// The budget of request body bytes in flight, taken before a byte is read.
    pub bodies: Arc<body_budget::BodyBudget>,
    /// The answers being written, held until the client has read them.
    pub answers: Arc<answers::Answers>,
    /// `/mutate` and `/validate` answer only connections with a verified client certificate.
    /// Set by [`start`] alone, from [`ClientAccess::client_ca`]: whatever a caller puts here
    /// is replaced.
    pub require_client_cert: bool,
    /// The TokenReviews dry-run callers may cost the apiserver.
    pub token_reviews: Arc<TokenBucket>,
    /// The dry run's SubjectAccessReview budget ([`TokenBucket::for_access_reviews`]): apart
    /// from the TokenReviews', so that a flood of made-up tokens does not lock out the
    /// permission checks of callers already known.
    pub access_reviews: Arc<TokenBucket>,
}

/// A server that is listening.
pub struct RunningServer {
    pub addr: SocketAddr,
    /// The plain-HTTP metrics listener's address, when there is one.
    pub metrics_addr: Option<SocketAddr>,
    metrics: Option<plain::PlainEdge>,
    handle: axum_server::Handle<SocketAddr>,
    ready: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
    reloader: tokio::task::JoinHandle<()>,
}

/// Loads the certificate, binds, and serves until [`RunningServer::shutdown`].
pub async fn start(
    config: ServerConfig,
    mut state: AppState,
) -> Result<RunningServer, ServerError> {
    let clients = match &config.clients.client_ca {
        Some(path) => tls::Clients::from_ca_file(path).await?,
        None => tls::Clients::none(),
    };
    state.require_client_cert = config.clients.client_ca.is_some();
    let expiry = state.metrics.serving_certificate_expiry.clone();
    let (tls, reloader) = tls::serving(config.tls, clients, expiry).await?;
    let listener =
        std::net::TcpListener::bind(config.listen).map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|_| ServerError::NoAddress)?;
    let handle = axum_server::Handle::new();
    let limits = config.limits;
    let app = router(state.clone(), &limits);
    // TCP_NODELAY: without it a small answer can wait for the peer's delayed ACK (40 ms on
    // Linux), which the benchmark showed as a 40 ms p99 on loopback. The connection slot is
    // taken at the TCP accept, before the TLS handshake (itself bounded to 10 s by
    // axum-server).
    let limited = LimitedAcceptor::new(
        NoDelayAcceptor::new(),
        &limits,
        state.metrics.connections_open.clone(),
        state.metrics.connections_refused.clone(),
    )
    .evicting(state.metrics.connections_evicted.clone());
    // The header read timeout is pinhook's own (keep_alive: from a request's first byte), not
    // hyper's, which would also close kept-alive connections idle between two reviews.
    let acceptor = KeepAliveAcceptor::new(
        PeerAcceptor::new(
            RustlsAcceptor::new(tls.clone()).acceptor(limited),
            &config.clients.client_names,
        ),
        keep_alive::KeepAliveLimits {
            header_read_timeout: limits.header_read_timeout,
            idle_timeout: limits.idle_timeout,
        },
        state.ready.clone(),
    );
    let mut server = axum_server::from_tcp(listener)
        .map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?
        .acceptor(acceptor)
        .handle(handle.clone());
    // hyper's header read timeout off (it defaults to 30 s once a timer is set): see above.
    // A request's head is bounded (connections::MAX_HEAD_BYTES), so that an open connection
    // holds at most connections::CONNECTION_BYTES.
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(connections::MAX_HEAD_BYTES);
    let window = u32::try_from(connections::WINDOW_BYTES).unwrap_or(u32::MAX);
    server
        .http_builder()
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(connections::MAX_HEAD_BYTES).unwrap_or(u32::MAX))
        .max_concurrent_streams(connections::MAX_STREAMS)
        .initial_stream_window_size(window)
        .initial_connection_window_size(window)
        .max_send_buf_size(connections::MAX_HEAD_BYTES);
    // Before the HTTPS task starts, so that a metrics address that cannot be bound leaves
    // nothing running.
    let metrics = match config.clients.metrics_listen {
        Some(listen) => Some(start_metrics(listen, &state, &limits)?),
        None => None,
    };
    let task = tokio::spawn(async move {
        // The peer's address reaches each request (`ConnectInfo`): the body budget's share per
        // caller.
        server
            .serve(app.into_make_service_with_connect_info::<SocketAddr>())
            .await
            .map_err(|source| ServerError::Serve { addr, source })
    });
    state.ready.store(true, Ordering::SeqCst);
    info!(%addr, client_certificates = if state.require_client_cert { "required for admission reviews" } else { "not asked for" }, "listening");
    Ok(RunningServer {
        addr,
        metrics_addr: metrics.as_ref().map(|edge| edge.addr),
        metrics,
        handle,
        ready: state.ready,
        task,
        reloader,
    })
}

/// The plain-HTTP listener of `/metrics` and `/healthz` ([`plain`]: the same bounds on
/// connections and requests as the HTTPS one).
fn start_metrics(
    listen: SocketAddr,
    state: &AppState,
    limits: &ConnectionLimits,
) -> Result<plain::PlainEdge, ServerError> {
    plain::serve(
        listen,
        routes::metrics_router(state.clone()),
        limits,
        &state.metrics,
        "/metrics and /healthz",
    )
}

// === impl RunningServer ===

impl RunningServer {
    /// Turns readiness false, keeps serving for `drain` (until the endpoints controller and
    /// every apiserver have stopped sending here: without it, a rollout refuses reviews and
    /// `failurePolicy: Fail` refuses the users' writes), then stops accepting connections and
    /// lets in-flight requests finish (up to 20 s).
    pub async fn shutdown(self, drain: Duration) -> Result<(), ServerError> {
        self.ready.store(false, Ordering::SeqCst);
        tokio::time::sleep(drain).await;
        self.handle.graceful_shutdown(Some(SHUTDOWN_GRACE));
        if let Some(metrics) = self.metrics {
            let _ = metrics.shutdown(Duration::from_secs(1)).await;
        }
        self.reloader.abort();
        match self.task.await {
            Ok(result) => result,
            Err(_) => Ok(()),
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C: when `serve` and the watch stop serving.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(term) => term,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
