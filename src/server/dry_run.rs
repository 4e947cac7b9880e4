//! `POST /v1/dry-run`: what admission would do to a set of manifests, for callers the cluster
//! authenticates (TokenReview) and allows to create each pod-bearing object
//! (SubjectAccessReview), because the answer is computed with the namespace's own pull
//! secrets. Each TokenReview spends a token of [`super::throttle`]'s bucket; with none left
//! the caller gets 429 and the apiserver no call. Manifests are parsed on the blocking pool, a
//! few bodies at a time.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracing::info;

use super::routes::status_of;
use super::AppState;
use crate::admission::dry_run::{self, Identity};
use crate::admission::Failure;
use crate::cluster::{Authorizer, Caller};
use crate::documents::{self, Document};
use crate::error::error_chain;

/// Dry-run bodies parsed at once. Parsing up to 7 MiB of YAML takes long enough to stall every
/// request queued on the worker doing it, so it runs on the blocking pool, and only a few at a
/// time so that concurrent dry runs cannot take every core from admission reviews.
const MANIFEST_PARSERS: usize = 2;
static MANIFEST_PARSER_PERMITS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(MANIFEST_PARSERS);

/// The dry run's overall time budget (a CI step, not an apiserver call).
const DRY_RUN_BUDGET: Duration = Duration::from_secs(60);

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
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match dry_run_answer(&state, query, &headers, body).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(Refusal::Failure(failure)) => failure_json(&failure),
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
    /// No TokenReview left in the bucket: 429, with no apiserver call.
    Throttled,
}

impl From<Failure> for Refusal {
    fn from(failure: Failure) -> Self {
        Refusal::Failure(failure)
    }
}

/// The dry-run report as JSON, once the caller is known and allowed.
async fn dry_run_answer(
    state: &AppState,
    query: DryRunQuery,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Vec<u8>, Refusal> {
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
    let documents = parse_manifests(body).await?;
    let namespace = query.namespace.unwrap_or_else(|| "default".to_string());
    authorize(state, authorizer.as_ref(), &caller, &documents, &namespace).await?;
    info!(user = %caller.username, documents = documents.len(), "dry run");
    let report = dry_run::run(&state.pinner, documents, &namespace, DRY_RUN_BUDGET).await;
    Ok(serde_json::to_vec(&report).map_err(Failure::EncodeReport)?)
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

/// `{"error": "..."}`: the dry-run endpoint's clients read JSON.
fn failure_json(failure: &Failure) -> Response {
    let body = serde_json::json!({ "error": failure.message() });
    (status_of(failure), axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
