//! The floor of `benches/load.sh`: a bare axum + axum-server/rustls server with pinhook's TLS
//! settings (ring provider, HTTP/1.1 and HTTP/2, TCP_NODELAY) and allocator (mimalloc) that
//! parses each POST body into a `serde_json::Value` and answers a canned body, the answer
//! pinhook gave to the same review.
//! What TLS, HTTP and JSON parsing cost on their own: pinhook's warm path is measured against it.
//!
//! Usage: `floor LISTEN CERT KEY ANSWER_FILE` (prints `listening on ADDR` once it listens).

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

#[path = "support/tls_server.rs"]
mod tls_server;

/// The allocator pinhook's binary uses, so the floor differs from pinhook only in what pinhook
/// does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, cert, key, answer] = args.as_slice() else {
        anyhow::bail!("usage: floor LISTEN CERT KEY ANSWER_FILE");
    };
    let answer = Arc::new(Bytes::from(std::fs::read(answer)?));
    let app = Router::new().route(
        "/mutate",
        post(move |body: Bytes| {
            let answer = answer.clone();
            async move { respond(&body, &answer) }
        }),
    );
    tls_server::serve(listen, cert, key, app).await
}

fn respond(body: &[u8], answer: &Bytes) -> Response {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(_) => ([(header::CONTENT_TYPE, "application/json")], answer.clone()).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}
