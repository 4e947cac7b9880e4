//! The webhook floor of `benches/e2e-admission.sh`: an admission webhook of pinhook's shape that
//! does nothing but answer. Same stack and settings as pinhook's server (axum + axum-server/rustls,
//! ring, TCP_NODELAY, mimalloc), it parses each AdmissionReview into a `serde_json::Value` and
//! answers `/mutate` with the JSON Patch pinhook gives for the same Pod (one `replace` of each
//! container's `image` by its pinned form, from a table given at start) and `/validate` with
//! `allowed: true`. What a patching and a validating webhook cost a create through the apiserver
//! when the webhook itself costs nearly nothing: pinhook's warm arm is measured against it.
//!
//! Usage: `e2e_webhook_floor LISTEN CERT KEY PINS_FILE` (PINS_FILE: `IMAGE PINNED` a line; prints
//! `listening on ADDR` once it listens). An image not in the table is left as written.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{bail, Context};
use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use base64::Engine as _;
use serde_json::{json, Value};

#[path = "support/tls_server.rs"]
mod tls_server;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, cert, key, pins] = args.as_slice() else {
        bail!("usage: e2e_webhook_floor LISTEN CERT KEY PINS_FILE");
    };
    let pins: HashMap<String, String> = std::fs::read_to_string(pins)
        .with_context(|| format!("read {pins}"))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (image, pinned) = l
                .split_once(' ')
                .context("PINS_FILE: IMAGE PINNED a line")?;
            Ok((image.to_string(), pinned.trim().to_string()))
        })
        .collect::<anyhow::Result<_>>()?;
    let pins = Arc::new(pins);
    let app = Router::new()
        .route(
            "/mutate",
            post(move |body: Bytes| {
                let pins = pins.clone();
                async move { answer(&body, Some(&pins)) }
            }),
        )
        .route(
            "/validate",
            post(|body: Bytes| async move { answer(&body, None) }),
        );
    tls_server::serve(listen, cert, key, app).await
}

/// The answer to one review: allowed, with the pinning patch when `pins` is given (`/mutate`).
fn answer(body: &[u8], pins: Option<&HashMap<String, String>>) -> Response {
    let review: Value = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let request = &review["request"];
    let mut response = json!({ "uid": request["uid"], "allowed": true });
    if let Some(pins) = pins {
        let ops: Vec<Value> = request["object"]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, c)| {
                let pinned = pins.get(c["image"].as_str()?)?;
                Some(json!({ "op": "replace", "path": format!("/spec/containers/{i}/image"), "value": pinned }))
            })
            .collect();
        if !ops.is_empty() {
            // (a Value's text: serializing it cannot fail)
            let patch = Value::Array(ops).to_string();
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
        }
    }
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        review.to_string(),
    )
        .into_response()
}
