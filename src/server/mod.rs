//! HTTPS server: routes, handlers, TLS with certificate reload (from files, or from the
//! self-managed Secret as it changes), health, metrics, shutdown.
//!
//! Owns: sockets and TLS (axum + rustls through axum-server), the bounds on clients'
//! connections and requests ([`connections`]), and the policy and certificate watchers; what
//! each review logs and counts is [`observe`]'s. Handlers are thin: extract, call
//! `admission`, render; the status and message of every failure come from
//! [`admission::Failure`]. Invariants: nothing on the request path panics (a panic layer turns
//! a bug into a 500), bodies over 7 MiB get 413 before they are buffered whole (at once when
//! their `Content-Length` says so), every request and connection is bounded in time, and no
//! blocking work runs on the async workers (manifest parsing goes to `spawn_blocking`, a few
//! bodies at a time; files are read with `tokio::fs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use hyper_util::rt::TokioTimer;
use serde::Deserialize;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use tracing::{info, warn, Instrument};

mod connections;
pub mod observe;

pub use connections::ConnectionLimits;
use connections::LimitedAcceptor;
use observe::{observe_decision, record_review, review_span};

use crate::admission::dry_run::{self, Identity};
use crate::admission::{self, Failure, Pinner};
use crate::certs::managed::Serving;
use crate::cluster::{Authorizer, Caller};
use crate::documents::{self, Document};
use crate::error::error_chain;
use crate::metrics::Metrics;
use crate::policy::{CompiledPolicy, Policy, PolicyError, PolicyHandle};

/// controller-runtime's limit: two objects of up to 3 MiB each plus the envelope.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;
/// How often certificate files are checked for changes.
const RELOAD_POLL: Duration = Duration::from_secs(2);
/// How long in-flight requests get to finish on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Dry-run bodies parsed at once. Parsing up to 7 MiB of YAML takes long enough to stall every
/// request queued on the worker doing it, so it runs on the blocking pool, and only a few at a
/// time so that concurrent dry runs cannot take every core from admission reviews.
const MANIFEST_PARSERS: usize = 2;
static MANIFEST_PARSER_PERMITS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(MANIFEST_PARSERS);

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
}

/// Where to listen and with which certificate.
#[derive(Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub tls: ServerTls,
    pub limits: ConnectionLimits,
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
}

/// A server that is listening.
pub struct RunningServer {
    pub addr: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
    ready: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
    reloader: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Deserialize)]
struct ReviewQuery {
    timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
struct DryRunQuery {
    namespace: Option<String>,
}

/// The dry run's overall time budget (a CI step, not an apiserver call).
const DRY_RUN_BUDGET: Duration = Duration::from_secs(60);

/// The routes, without a socket, with the bounds on each request: 413 for a body announced
/// over [`MAX_BODY_BYTES`] before it is read, an error when a body stalls for
/// `header_read_timeout`, and 408 when a request takes longer than `request_timeout`.
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
            TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, limits.request_timeout),
            RequestBodyLimitLayer::new(MAX_BODY_BYTES),
            RequestBodyTimeoutLayer::new(limits.header_read_timeout),
            DefaultBodyLimit::max(MAX_BODY_BYTES),
        ))
        .with_state(state)
}

/// Loads the certificate, binds, and serves until [`RunningServer::shutdown`].
pub async fn start(config: ServerConfig, state: AppState) -> Result<RunningServer, ServerError> {
    let (tls, reloader) = match config.tls {
        ServerTls::Files { cert, key } => {
            let tls = RustlsConfig::from_pem_file(&cert, &key)
                .await
                .map_err(|source| ServerError::LoadTls {
                    cert: cert.clone(),
                    key: key.clone(),
                    source,
                })?;
            let reloader = tokio::spawn(watch_certificates(tls.clone(), cert, key));
            (tls, reloader)
        }
        ServerTls::Watched(mut pairs) => {
            let first = pairs
                .borrow_and_update()
                .clone()
                .ok_or(ServerError::NoManagedTls)?;
            let tls = RustlsConfig::from_pem(first.cert.into_bytes(), first.key.into_bytes())
                .await
                .map_err(ServerError::LoadManagedTls)?;
            let reloader = tokio::spawn(follow_certificates(tls.clone(), pairs));
            (tls, reloader)
        }
    };
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
    );
    let acceptor = RustlsAcceptor::new(tls.clone()).acceptor(limited);
    let mut server = axum_server::from_tcp(listener)
        .map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?
        .acceptor(acceptor)
        .handle(handle.clone());
    // hyper's header read timeout needs a timer; without one it is silently off.
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    server.http_builder().http2().timer(TokioTimer::new());
    let task = tokio::spawn(async move {
        server
            .serve(app.into_make_service())
            .await
            .map_err(|source| ServerError::Bind { addr, source })
    });
    state.ready.store(true, Ordering::SeqCst);
    info!(%addr, "listening");
    Ok(RunningServer {
        addr,
        handle,
        ready: state.ready,
        task,
        reloader,
    })
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
        self.reloader.abort();
        match self.task.await {
            Ok(result) => result,
            Err(_) => Ok(()),
        }
    }
}

async fn mutate_handler(
    State(state): State<AppState>,
    Query(query): Query<ReviewQuery>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let request = match admission::parse_review(&body) {
        Ok(request) => request,
        Err(e) => return reject(&state, "mutate", Failure::Review(e), started),
    };
    let span = review_span(&request);
    let budget = admission::budget_from_timeout(query.timeout.as_deref());
    let decision = admission::mutate(&state.pinner, &request, budget)
        .instrument(span.clone())
        .await;
    answer(&state, "mutate", &request, &decision, &span, started)
}

async fn validate_handler(State(state): State<AppState>, body: Bytes) -> Response {
    let started = Instant::now();
    let request = match admission::parse_review(&body) {
        Ok(request) => request,
        Err(e) => return reject(&state, "validate", Failure::Review(e), started),
    };
    let span = review_span(&request);
    let decision = admission::validate(&state.pinner, &request)
        .instrument(span.clone())
        .await;
    answer(&state, "validate", &request, &decision, &span, started)
}

/// Logs and counts a decided review ([`observe`]), then renders its AdmissionReview.
fn answer(
    state: &AppState,
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
    json_response(admission::review_body(&decision.response))
}

/// `POST /v1/dry-run`: what admission would do to a set of manifests, for callers the cluster
/// authenticates (TokenReview) and allows to create each pod-bearing object (SubjectAccessReview),
/// because the answer is computed with the namespace's own pull secrets.
async fn dry_run_handler(
    State(state): State<AppState>,
    Query(query): Query<DryRunQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match dry_run_answer(&state, query, &headers, body).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(failure) => failure_json(&failure),
    }
}

/// The dry-run report as JSON, once the caller is known and allowed.
async fn dry_run_answer(
    state: &AppState,
    query: DryRunQuery,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Vec<u8>, Failure> {
    let authorizer = state.authorizer.clone().ok_or(Failure::NoKubernetesApi)?;
    let token = bearer_token(headers).ok_or(Failure::MissingToken)?;
    let caller = authorizer
        .authenticate(token)
        .await
        .map_err(Failure::Authentication)?
        .ok_or(Failure::InvalidToken)?;
    let documents = parse_manifests(body).await?;
    let namespace = query.namespace.unwrap_or_else(|| "default".to_string());
    authorize(state, authorizer.as_ref(), &caller, &documents, &namespace).await?;
    info!(user = %caller.username, documents = documents.len(), "dry run");
    let report = dry_run::run(&state.pinner, documents, &namespace, DRY_RUN_BUDGET).await;
    serde_json::to_vec(&report).map_err(Failure::EncodeReport)
}

/// Reads a manifest body on the blocking pool, at most [`MANIFEST_PARSERS`] at a time.
async fn parse_manifests(body: Bytes) -> Result<Vec<Document>, Failure> {
    let permit = MANIFEST_PARSER_PERMITS
        .acquire()
        .await
        .map_err(Failure::ParserClosed)?;
    tokio::task::spawn_blocking(move || {
        // The permit goes with the work: a caller that hangs up does not free it early.
        let _permit = permit;
        let text = std::str::from_utf8(&body).map_err(|_| Failure::NotUtf8)?;
        Ok(documents::parse(text, None))
    })
    .await
    .map_err(Failure::ParserFailed)?
}

/// Every pod-bearing object's `create` must be allowed; the error names what is missing.
async fn authorize(
    state: &AppState,
    authorizer: &dyn Authorizer,
    caller: &Caller,
    documents: &[Document],
    default_namespace: &str,
) -> Result<(), Failure> {
    let policy = state.pinner.policy().current();
    let mut needed: Vec<(String, String, String)> = documents
        .iter()
        .filter_map(|d| d.object.as_ref().ok())
        .filter_map(|object| {
            let identity = Identity::of(object, default_namespace).ok()?;
            let (resource, namespace) = identity.access(&policy)?;
            Some((identity.group, resource, namespace))
        })
        .collect();
    needed.sort();
    needed.dedup();
    let mut missing = Vec::new();
    for (group, resource, namespace) in needed {
        let qualified = if group.is_empty() {
            resource.clone()
        } else {
            format!("{resource}.{group}")
        };
        let scope = match namespace.is_empty() {
            true => "(cluster-scoped)".to_string(),
            false => format!("in namespace {namespace}"),
        };
        match authorizer
            .can_create(caller, &group, &resource, &namespace)
            .await
        {
            Ok(true) => {}
            Ok(false) => missing.push(format!("create {qualified} {scope}")),
            Err(e) => missing.push(format!(
                "create {qualified} {scope} (not checked: {})",
                error_chain(&e)
            )),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Failure::Forbidden {
            caller: caller.username.clone(),
            missing,
        })
    }
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim()).filter(|t| !t.is_empty())
}

fn status_of(failure: &Failure) -> StatusCode {
    StatusCode::from_u16(failure.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// `{"error": "..."}`: the dry-run endpoint's clients read JSON.
fn failure_json(failure: &Failure) -> Response {
    let body = serde_json::json!({ "error": failure.message() });
    (status_of(failure), axum::Json(body)).into_response()
}

/// Plain text, one line: what the apiserver logs when a call to the webhook fails.
fn failure_text(failure: &Failure) -> Response {
    (status_of(failure), format!("{}\n", failure.message())).into_response()
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

fn json_response(body: Result<Vec<u8>, serde_json::Error>) -> Response {
    match body {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => failure_text(&Failure::EncodeResponse(e)),
    }
}

async fn healthz_handler() -> &'static str {
    "ok\n"
}

async fn readyz_handler(State(state): State<AppState>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    }
}

async fn metrics_handler(State(state): State<AppState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => failure_text(&Failure::EncodeMetrics(e)),
    }
}

/// Reloads the certificate when the files change (a mounted Secret is updated in place).
/// A bad new pair keeps the old one serving; existing connections are not touched.
async fn watch_certificates(tls: RustlsConfig, cert: PathBuf, key: PathBuf) {
    let mut seen = (modified(&cert).await, modified(&key).await);
    loop {
        tokio::time::sleep(RELOAD_POLL).await;
        let now = (modified(&cert).await, modified(&key).await);
        if now == seen {
            continue;
        }
        seen = now;
        match tls.reload_from_pem_file(&cert, &key).await {
            Ok(()) => info!(cert = %cert.display(), "reloaded TLS certificate"),
            Err(e) => warn!(
                cert = %cert.display(),
                error = %e,
                "new TLS certificate rejected, still serving the previous one"
            ),
        }
    }
}

/// Serves each new pair the managed Secret holds, as soon as it arrives. A pair rustls
/// refuses keeps the previous one serving; existing connections are not touched.
async fn follow_certificates(
    tls: RustlsConfig,
    mut pairs: tokio::sync::watch::Receiver<Option<Serving>>,
) {
    while pairs.changed().await.is_ok() {
        let Some(pair) = pairs.borrow_and_update().clone() else {
            continue;
        };
        match tls
            .reload_from_pem(pair.cert.into_bytes(), pair.key.into_bytes())
            .await
        {
            Ok(()) => info!("serving the TLS Secret's new certificate"),
            Err(e) => warn!(
                error = %e,
                "the TLS Secret's new certificate was rejected, still serving the previous one"
            ),
        }
    }
}

/// Re-reads the policy file when it changes (a mounted ConfigMap is updated in place). An
/// invalid new file is logged with its precise error and the previous policy stays in force.
/// `apply` runs the policy's side settings (registry hosts) before it takes effect.
pub async fn watch_policy<F>(path: PathBuf, handle: PolicyHandle, apply: F)
where
    F: Fn(&CompiledPolicy) -> Result<(), String> + Send + Sync + 'static,
{
    let apply = Arc::new(apply);
    let mut seen = tokio::fs::read(&path).await.ok();
    loop {
        tokio::time::sleep(RELOAD_POLL).await;
        let now = tokio::fs::read(&path).await;
        if now.as_ref().ok() == seen.as_ref() {
            continue;
        }
        seen = now.as_ref().ok().cloned();
        let loaded = match compile_policy(&path, now) {
            Err(e) => Err(error_chain(&e)),
            // `apply` reads the CA files the policy names: on the blocking pool.
            Ok(compiled) => {
                let apply = apply.clone();
                tokio::task::spawn_blocking(move || apply(&compiled).map(|()| compiled))
                    .await
                    .unwrap_or_else(|e| Err(format!("applying the policy failed: {e}")))
            }
        };
        match loaded {
            Ok(compiled) => {
                info!(path = %path.display(), mode = %compiled.policy.mode, "reloaded policy");
                handle.replace(compiled);
            }
            Err(e) => warn!(
                path = %path.display(),
                error = %e,
                "new policy rejected, the previous policy stays in force"
            ),
        }
    }
}

/// The policy in a file's bytes, with the errors `Policy::load` gives (parsing a small file can
/// stay on the async worker).
fn compile_policy(
    path: &Path,
    read: std::io::Result<Vec<u8>>,
) -> Result<CompiledPolicy, PolicyError> {
    let failed = |source| PolicyError::Read {
        path: path.to_path_buf(),
        source,
    };
    let bytes = read.map_err(failed)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| failed(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    Policy::parse(&text)
}

async fn modified(path: &Path) -> Option<SystemTime> {
    tokio::fs::metadata(path)
        .await
        .and_then(|m| m.modified())
        .ok()
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::policy::Mode;

    #[tokio::test]
    async fn manifests_are_parsed_on_the_blocking_pool_and_must_be_utf8() {
        let body = Bytes::from_static(b"apiVersion: v1\nkind: Pod\n---\nkind: Job\n");
        let documents = parse_manifests(body).await.expect("parses");
        assert_eq!(documents.len(), 2);
        let failure = parse_manifests(Bytes::from_static(b"kind: \xff"))
            .await
            .expect_err("not UTF-8");
        assert_eq!(failure.status(), 400);
        assert_eq!(failure.message(), "the body is not UTF-8 text");
        assert_eq!(
            MANIFEST_PARSER_PERMITS.available_permits(),
            MANIFEST_PARSERS,
            "every permit is back once the work is done"
        );
    }

    #[test]
    fn a_policy_file_is_judged_as_policy_load_judges_it() {
        let path = Path::new("/etc/pinhook/policy.yaml");
        let compiled = compile_policy(path, Ok(b"mode: audit".to_vec())).expect("valid");
        assert_eq!(compiled.policy.mode, Mode::Audit);
        let missing = compile_policy(path, Err(io::Error::from(io::ErrorKind::NotFound)))
            .expect_err("no file");
        assert_eq!(
            error_chain(&missing),
            "failed to read policy file '/etc/pinhook/policy.yaml': entity not found"
        );
        let binary = compile_policy(path, Ok(vec![0xff])).expect_err("not text");
        assert!(matches!(binary, PolicyError::Read { .. }), "{binary:?}");
        let invalid = compile_policy(path, Ok(b"mode: strict".to_vec())).expect_err("bad mode");
        assert!(
            error_chain(&invalid)
                .starts_with("policy is not valid: line 1 column 7: unknown variant `strict`"),
            "{invalid}"
        );
    }
}
