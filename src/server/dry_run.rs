//! `POST /v1/dry-run`: what admission would do to a set of manifests, for callers the cluster
//! authenticates (TokenReview) and allows to create each pod-bearing object
//! (SubjectAccessReview), because the answer is computed with the namespace's own pull
//! secrets. Each TokenReview and each SubjectAccessReview spends a token of
//! [`super::throttle`]'s bucket; with none left the caller gets 429 and the apiserver no call.
//!
//! What a caller costs is bounded before it is paid (issue 44): the token is checked before a
//! byte of the body is read (a refused caller's body is then read and dropped only when small
//! and prompt, so that it reads its refusal instead of a reset stream); the body is read
//! within the body budget and at most [`MAX_DRY_RUN_BODY`]; a body of more than
//! [`MAX_DOCUMENTS`] documents or naming more than [`MAX_ACCESS_CHECKS`] (resource, namespace)
//! pairs is refused; the documents take their share of the dry runs' memory pool before they
//! are parsed ([`parsed_reviews::dry_run_cost`], waiting at most [`SHARE_WAIT`], then 429) and
//! hold it until the report is written, which is written within its part of that share
//! ([`parsed_reviews::dry_run_report_bytes`], else 413); the body is parsed within that
//! share's values and scalar bytes and one budget of YAML events and alias expansions for the
//! whole body
//! ([`documents::ParseLimits`]), on the blocking pool, a few bodies at a time.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracing::info;

use super::body_budget::BodyRefusal;
use super::parsed_reviews::{self, NoShare};
use super::AppState;
use crate::admission::dry_run::{self, Identity};
use crate::admission::Failure;
use crate::cluster::{Authorizer, Caller};
use crate::documents::{self, Document};
use crate::error::error_chain;
use crate::tenant;

/// Dry-run bodies parsed at once. Parsing up to 7 MiB of YAML takes long enough to stall every
/// request queued on the worker doing it, so it runs on the blocking pool, and only a few at a
/// time so that concurrent dry runs cannot take every core from admission reviews.
const MANIFEST_PARSERS: usize = 2;
static MANIFEST_PARSER_PERMITS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(MANIFEST_PARSERS);

/// The dry run's overall time budget (a CI step, not an apiserver call).
const DRY_RUN_BUDGET: Duration = Duration::from_secs(60);
/// The largest dry-run body: a rendered release of hundreds of objects, well under an
/// admission review's 7 MiB.
pub const MAX_DRY_RUN_BODY: usize = 2 << 20;
/// Documents (and List items) one dry run may hold.
pub const MAX_DOCUMENTS: usize = 1_000;
/// How long a dry run waits for its share of the dry runs' memory pool.
pub const SHARE_WAIT: Duration = Duration::from_secs(5);
/// Distinct (group, resource, namespace) pairs one dry run may need a SubjectAccessReview for.
pub const MAX_ACCESS_CHECKS: usize = 32;

#[derive(Debug, Deserialize)]
pub(super) struct DryRunQuery {
    namespace: Option<String>,
}

/// `POST /v1/dry-run`: what admission would do to a set of manifests, for callers the cluster
/// authenticates (TokenReview) and allows to create each pod-bearing object (SubjectAccessReview),
/// because the answer is computed with the namespace's own pull secrets.
pub(super) async fn dry_run_handler(
    State(state): State<Arc<AppState>>,
    Query(query): Query<DryRunQuery>,
    request: Request,
) -> Response {
    match dry_run_answer(&state, query, request).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(Refusal::Failure(failure)) => failure_json(&failure),
        Err(Refusal::Body(refusal)) => {
            let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
            let body = serde_json::json!({ "error": error_chain(&refusal) });
            let mut response = (status, axum::Json(body)).into_response();
            if status == StatusCode::TOO_MANY_REQUESTS {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            }
            response
        }
        Err(Refusal::Throttled) => {
            state.metrics.dry_run_throttled.inc();
            let body = serde_json::json!({ "error": THROTTLED });
            (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                axum::Json(body),
            )
                .into_response()
        }
    }
}

/// The answer of a caller refused because the TokenReview budget is spent.
const THROTTLED: &str = "too many dry-run requests: pinhook checks at most --token-review-rate tokens per second; retry later";

/// Why a dry run was not answered with a report.
enum Refusal {
    Failure(Failure),
    /// No TokenReview (or SubjectAccessReview) left in the bucket: 429, with no apiserver call.
    Throttled,
    /// The body did not fit the body budget (429), or is over the limit (413).
    Body(BodyRefusal),
}

impl From<Failure> for Refusal {
    fn from(failure: Failure) -> Self {
        Refusal::Failure(failure)
    }
}

/// The dry-run report as JSON, once the caller is known and allowed: the token is checked
/// before a byte of the body is read.
async fn dry_run_answer(
    state: &AppState,
    query: DryRunQuery,
    request: Request,
) -> Result<Bytes, Refusal> {
    let (authorizer, caller) = match authenticate(state, request.headers()).await {
        Ok(known) => known,
        Err(refusal) => {
            discard_small_body(request.into_body()).await;
            return Err(refusal);
        }
    };
    let (body, _body_share) = (state.bodies)
        .read_request(request, MAX_DRY_RUN_BODY, &state.metrics)
        .await
        .map_err(Refusal::Body)?;
    let pool = &state.parsed_reviews.dry_runs;
    let bytes = body.len();
    let cost = parsed_reviews::dry_run_cost(bytes);
    let share = pool
        .take(cost, SHARE_WAIT)
        .await
        .map_err(|refused| Failure::DryRunRefused {
            busy: refused == NoShare::Busy,
            bytes: body.len(),
            cost,
            budget: pool.budget(),
        })?;
    // The share goes into the parse and comes back with the documents: a caller that hangs up
    // mid-parse does not free it while the parser still builds them.
    let (documents, documents_share) = parse_manifests(body, share).await?;
    drop(_body_share);
    let namespace = query.namespace.unwrap_or_else(|| "default".to_string());
    authorize(state, authorizer.as_ref(), &caller, &documents, &namespace).await?;
    info!(user = %caller.username, documents = documents.len(), "dry run");
    // Credential programs run on the caller's account (fair shares, remembered failures): not
    // on a namespace's, which `?namespace=` names without being authorised when every
    // document names its own, and whose admissions a caller must not cost anything. (No
    // namespace holds a `:`.)
    let tenant = format!("dry-run:{}", caller.username);
    let report = tenant::scope(
        &tenant,
        dry_run::run(&state.pinner, documents, &namespace, DRY_RUN_BUDGET),
    )
    .await;
    let report = encode_report(&report, parsed_reviews::dry_run_report_bytes(bytes))?;
    // The share stays with the report's bytes until the server has written them (a caller that
    // reads its answer slowly still holds its part of the pool), not until this returns.
    Ok(super::answers::charged(report, documents_share))
}

/// The caller the bearer token names, as the apiserver knows it (TokenReview), within the
/// TokenReview budget; nothing of the body is read.
async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(Arc<dyn Authorizer>, Caller), Refusal> {
    let authorizer = state.authorizer.clone().ok_or(Failure::NoKubernetesApi)?;
    let token = bearer_token(headers).ok_or(Failure::MissingToken)?;
    if !state.token_reviews.admit(token) {
        return Err(Refusal::Throttled);
    }
    let caller = authorizer
        .authenticate(token)
        .await
        .map_err(Failure::Authentication)?
        .ok_or(Failure::InvalidToken)?;
    state.token_reviews.authenticated(token);
    Ok((authorizer, caller))
}

/// The most of a refused caller's body read (and dropped) before its refusal is answered.
pub const REFUSED_BODY_DISCARD: usize = 64 << 10;
/// How long a refused caller's body is waited for before its refusal is answered anyway.
pub const REFUSED_BODY_WAIT: Duration = Duration::from_secs(1);

/// How much of a refused caller's body [`discard_small_body`] read.
#[derive(Debug, PartialEq, Eq)]
enum Discarded {
    /// The body ended: this many bytes, none kept.
    Whole(usize),
    /// Announced or found larger than [`REFUSED_BODY_DISCARD`]: the rest is left unread.
    TooLarge,
    /// Not ended within [`REFUSED_BODY_WAIT`] (or broken): the rest is left unread.
    Unfinished,
}

/// Reads and drops the body of a caller refused before its body was wanted, when it is small
/// and comes at once, so that the refusal is the answer it reads. Answered with its body
/// unread, the stream is reset under it (HTTP/2 `RST_STREAM`, or a closed connection in
/// HTTP/1.1), and a client that is still sending may report that reset instead of the
/// answer: curl 7.88 (Debian 12) did, "(92) Stream error in the HTTP/2 framing layer", for
/// one 401 in fifty. A large or slow body is still not read: a refused caller costs at most
/// [`REFUSED_BODY_DISCARD`] bytes of reading, one frame held at a time, for at most
/// [`REFUSED_BODY_WAIT`].
async fn discard_small_body(mut body: axum::body::Body) -> Discarded {
    use http_body::Body as _;
    use http_body_util::BodyExt;
    if body.size_hint().lower() > REFUSED_BODY_DISCARD as u64 {
        return Discarded::TooLarge;
    }
    let read = async {
        let mut seen = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Discarded::Unfinished;
            };
            seen = seen.saturating_add(frame.data_ref().map_or(0, |d| d.len()));
            if seen > REFUSED_BODY_DISCARD {
                return Discarded::TooLarge;
            }
        }
        Discarded::Whole(seen)
    };
    tokio::time::timeout(REFUSED_BODY_WAIT, read)
        .await
        .unwrap_or(Discarded::Unfinished)
}

/// `report` as JSON in at most `cap` bytes (its part of the dry run's share): written into a
/// buffer that refuses to grow past it, so that a report larger than charged is never held.
fn encode_report(report: &dry_run::Report, cap: usize) -> Result<Vec<u8>, Failure> {
    let mut out = Capped {
        bytes: Vec::new(),
        cap,
    };
    match serde_json::to_writer(&mut out, report) {
        Ok(()) => Ok(out.bytes),
        Err(_) if out.bytes.len() == out.cap => Err(Failure::ReportTooLarge { cap }),
        Err(e) => Err(Failure::EncodeReport(e)),
    }
}

/// A buffer of at most `cap` bytes; a write past it fails, having filled it.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = self.cap - self.bytes.len();
        if data.len() > room {
            self.bytes.extend_from_slice(&data[..room]);
            return Err(std::io::Error::other("past the report's share"));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads a manifest body on the blocking pool, at most [`MANIFEST_PARSERS`] at a time, holding
/// `share` (of the dry runs' memory pool) while it parses and handing it back with the
/// documents.
async fn parse_manifests(
    body: Bytes,
    share: parsed_reviews::Share,
) -> Result<(Vec<Document>, parsed_reviews::Share), Failure> {
    let permit = MANIFEST_PARSER_PERMITS
        .acquire()
        .await
        .map_err(Failure::ParserClosed)?;
    tokio::task::spawn_blocking(move || {
        // The permit goes with the work: a caller that hangs up does not free it early.
        let _permit = permit;
        let text = std::str::from_utf8(&body).map_err(|_| Failure::NotUtf8)?;
        let limits = documents::ParseLimits {
            max_documents: MAX_DOCUMENTS,
            max_values: parsed_reviews::dry_run_values(body.len()),
            max_scalar_bytes: body.len(),
            ..documents::ParseLimits::default()
        };
        let documents = documents::parse_within(text, None, &limits).map_err(Failure::Documents)?;
        Ok((documents, share))
    })
    .await
    .map_err(Failure::ParserFailed)?
}

/// Every pod-bearing object's `create` must be allowed; the error names what is missing. At
/// most [`MAX_ACCESS_CHECKS`] SubjectAccessReviews, each spending a token of the bucket.
async fn authorize(
    state: &AppState,
    authorizer: &dyn Authorizer,
    caller: &Caller,
    documents: &[Document],
    default_namespace: &str,
) -> Result<(), Refusal> {
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
    if needed.len() > MAX_ACCESS_CHECKS {
        return Err(Refusal::Failure(Failure::TooManyAccessChecks {
            count: needed.len(),
            limit: MAX_ACCESS_CHECKS,
        }));
    }
    // Every review this dry run needs, spent at once, or none sent.
    if !state.access_reviews.try_take_n(needed.len() as u32) {
        return Err(Refusal::Throttled);
    }
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
        Err(Refusal::Failure(Failure::Forbidden {
            caller: caller.username.clone(),
            missing,
        }))
    }
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim()).filter(|t| !t.is_empty())
}

/// `{"error": "..."}`: the dry-run endpoint's clients read JSON.
fn failure_json(failure: &Failure) -> Response {
    let body = serde_json::json!({ "error": failure.message() });
    let mut response = (failure.status_code(), axum::Json(body)).into_response();
    if failure.status() == 429 {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report held to its part of the dry run's share: written whole within it, refused
    /// (413) past it, never held beyond it.
    #[test]
    fn a_report_is_written_within_its_share_or_refused() {
        let report = dry_run::Report {
            objects: Vec::new(),
            errors: (0..100)
                .map(|i| dry_run::DocumentError {
                    index: i.to_string(),
                    source: None,
                    error: "x".repeat(100),
                })
                .collect(),
            summary: dry_run::Summary::default(),
        };
        let whole = serde_json::to_vec(&report).unwrap();
        assert_eq!(encode_report(&report, whole.len()).unwrap(), whole);
        let failure = encode_report(&report, whole.len() - 1).unwrap_err();
        assert!(
            matches!(failure, Failure::ReportTooLarge { cap } if cap == whole.len() - 1),
            "{failure:?}"
        );
        assert_eq!(failure.status(), 413);
        assert!(failure.message().contains("split the manifests"));
        // An ordinary dry run's report is far within: 20 KB of manifests may write 500 KB.
        assert_eq!(
            parsed_reviews::dry_run_report_bytes(20_000),
            20_000 + 10_000 * 48
        );
    }

    #[tokio::test]
    async fn manifests_are_parsed_on_the_blocking_pool_and_must_be_utf8() {
        let pool = parsed_reviews::Pool::new(1 << 20);
        let share = || pool.take(1 << 20, Duration::ZERO);
        let body = Bytes::from_static(b"apiVersion: v1\nkind: Pod\n---\nkind: Job\n");
        let (documents, held) = parse_manifests(body, share().await.expect("a share"))
            .await
            .expect("parses");
        assert_eq!(documents.len(), 2);
        assert!(share().await.is_err(), "the share comes back held");
        drop(held);
        let failure = parse_manifests(
            Bytes::from_static(b"kind: \xff"),
            share().await.expect("given back"),
        )
        .await
        .expect_err("not UTF-8");
        assert!(share().await.is_ok(), "a refused body gives its share back");
        assert_eq!(failure.status(), 400);
        assert_eq!(failure.message(), "the body is not UTF-8 text");
        assert_eq!(
            MANIFEST_PARSER_PERMITS.available_permits(),
            MANIFEST_PARSERS,
            "every permit is back once the work is done"
        );
    }

    /// A refused caller's small body is read to its end (and dropped) so that its stream ends
    /// cleanly; a large, an overlong or a slow one is left unread.
    #[tokio::test(start_paused = true)]
    async fn a_refused_callers_body_is_discarded_only_when_small_and_prompt() {
        use axum::body::Body;
        use futures::StreamExt;
        let chunks = |sizes: Vec<usize>, gap: Duration| {
            Body::from_stream(futures::stream::iter(sizes).then(move |n| async move {
                tokio::time::sleep(gap).await;
                Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; n]))
            }))
        };
        assert_eq!(
            discard_small_body(Body::from(vec![b'y'; 3000])).await,
            Discarded::Whole(3000)
        );
        assert_eq!(discard_small_body(Body::empty()).await, Discarded::Whole(0));
        assert_eq!(
            discard_small_body(chunks(vec![1000, 2000, 500], Duration::from_millis(100))).await,
            Discarded::Whole(3500)
        );
        // announced over the bound: not a byte read
        assert_eq!(
            discard_small_body(Body::from(vec![b'y'; REFUSED_BODY_DISCARD + 1])).await,
            Discarded::TooLarge
        );
        // found over the bound as it comes (chunked): the rest left unread
        assert_eq!(
            discard_small_body(chunks(vec![40 << 10, 40 << 10, 1 << 20], Duration::ZERO)).await,
            Discarded::TooLarge
        );
        // a body that trickles past the wait is left, the refusal answered after it
        let started = tokio::time::Instant::now();
        assert_eq!(
            discard_small_body(chunks(vec![10; 100], Duration::from_millis(50))).await,
            Discarded::Unfinished
        );
        assert_eq!(started.elapsed(), REFUSED_BODY_WAIT);
    }

    /// The report's bytes hold the dry run's share until the server drops them, once written:
    /// a caller reading its answer slowly holds its part of the pool meanwhile (the share was
    /// given back as the handler returned, before a byte of the answer was written).
    #[tokio::test]
    async fn a_report_holds_its_share_until_it_is_written() {
        let pool = parsed_reviews::Pool::new(1 << 20);
        let share = pool.take(1 << 20, Duration::ZERO).await.expect("a share");
        let body = super::super::answers::charged(b"{}".to_vec(), share);
        let copy = body.clone();
        drop(body);
        assert!(pool.take(1, Duration::ZERO).await.is_err(), "still held");
        assert_eq!(&copy[..], b"{}");
        drop(copy);
        assert!(
            pool.take(1 << 20, Duration::ZERO).await.is_ok(),
            "given back"
        );
    }
}
