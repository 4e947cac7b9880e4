//! A kubelet credential provider plugin for tests: speaks `credentialprovider.kubelet.k8s.io/v1`
//! (a `CredentialProviderRequest` on stdin, a `CredentialProviderResponse` on stdout) and does
//! what its environment says, so a test's `CredentialProviderConfig` (`env:` entries) can make
//! it answer, sleep, fail or print garbage, and count how often it ran.
//!
//! Environment (all optional):
//! - `PLUGIN_MODE`: `answer` (default), `fail` (exit 1), `garbage` (print non-JSON),
//!   `wrong-version` (answer in v1beta1), `huge` (print 4 MiB);
//! - `PLUGIN_SLEEP_MS`: sleep this long first;
//! - `PLUGIN_COUNT_FILE`: append the requested image and a newline, once per run;
//! - `PLUGIN_USERNAME`, `PLUGIN_PASSWORD`: the credential answered (default `plugin`/`plugin`);
//! - `PLUGIN_AUTH_KEY`: the `auth` key (default: the image's registry host);
//! - `PLUGIN_CACHE_KEY_TYPE`: `Image` (default), `Registry` or `Global`;
//! - `PLUGIN_CACHE_DURATION`: the `cacheDuration` (left out by default);
//! - `PLUGIN_TOKEN_AUDIENCE` (KEP-4412): the request must carry a `serviceAccountToken`, which
//!   is checked by a TokenReview for that audience on the cluster of `KUBECONFIG`; unless the
//!   apiserver authenticates it with that audience, the plugin exits 4. It then appends
//!   `<username> <annotations as JSON>` to `PLUGIN_TOKEN_USERS_FILE` and the token itself to
//!   `PLUGIN_TOKEN_FILE` (so a test can look for it where it must never be).
//!
//! Whatever the mode, it also writes the password (and a token it is handed) to stderr: pinhook
//! must never show them.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{json, Value};

const API_VERSION: &str = "credentialprovider.kubelet.k8s.io/v1";

fn main() {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut input = String::new();
    if std::io::stdin().read_to_string(&mut input).is_err() {
        std::process::exit(2);
    }
    let request: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
    let (Some("CredentialProviderRequest"), Some(API_VERSION), Some(image)) = (
        request["kind"].as_str(),
        request["apiVersion"].as_str(),
        request["image"].as_str(),
    ) else {
        eprintln!("not a v1 CredentialProviderRequest");
        std::process::exit(2);
    };
    if let Some(path) = env("PLUGIN_COUNT_FILE") {
        append(&path, image);
    }
    if let Some(audience) = env("PLUGIN_TOKEN_AUDIENCE") {
        let Some(token) = request["serviceAccountToken"].as_str() else {
            eprintln!("no serviceAccountToken in the request");
            std::process::exit(4);
        };
        let Some(username) = token_review(token, &audience) else {
            eprintln!("the apiserver does not authenticate the token for {audience}");
            std::process::exit(4);
        };
        // Like the password below: pinhook must never show what a plugin prints.
        eprintln!("plugin debug output: token={token}");
        let annotations = request["serviceAccountAnnotations"].to_string();
        for (file, line) in [
            (
                "PLUGIN_TOKEN_USERS_FILE",
                format!("{username} {annotations}"),
            ),
            ("PLUGIN_TOKEN_FILE", token.to_string()),
        ] {
            if let Some(path) = env(file) {
                append(&path, &line);
            }
        }
    }
    if let Some(ms) = env("PLUGIN_SLEEP_MS").and_then(|ms| ms.parse().ok()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let username = env("PLUGIN_USERNAME").unwrap_or_else(|| "plugin".into());
    let password = env("PLUGIN_PASSWORD").unwrap_or_else(|| "plugin".into());
    eprintln!("plugin debug output: password={password}");
    let registry = image.split('/').next().unwrap_or(image).to_string();
    let mut response = json!({
        "apiVersion": API_VERSION,
        "kind": "CredentialProviderResponse",
        "cacheKeyType": env("PLUGIN_CACHE_KEY_TYPE").unwrap_or_else(|| "Image".into()),
        "auth": {
            env("PLUGIN_AUTH_KEY").unwrap_or(registry): {
                "username": username,
                "password": password,
            }
        }
    });
    if let Some(duration) = env("PLUGIN_CACHE_DURATION") {
        response["cacheDuration"] = json!(duration);
    }
    let out = match env("PLUGIN_MODE").as_deref().unwrap_or("answer") {
        "answer" => response.to_string(),
        "fail" => {
            println!("failed, password={password}");
            std::process::exit(1);
        }
        "garbage" => format!("<html>password={password}</html>"),
        "wrong-version" => {
            response["apiVersion"] = json!("credentialprovider.kubelet.k8s.io/v1beta1");
            response.to_string()
        }
        "huge" => "x".repeat(4 * 1024 * 1024),
        other => {
            eprintln!("unknown PLUGIN_MODE {other}");
            std::process::exit(2);
        }
    };
    // A closed pipe (pinhook gave up on the output) is the reader's business.
    let _ = std::io::stdout().write_all(out.as_bytes());
}

/// Appends `line` and a newline to `path`; exits 3 when it cannot.
fn append(path: &str, line: &str) {
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| writeln!(file, "{line}"));
    if appended.is_err() {
        std::process::exit(3);
    }
}

/// The user the apiserver of `KUBECONFIG` authenticates `token` as, for `audience` (a
/// TokenReview); `None` when it does not, or cannot be asked.
fn token_review(token: &str, audience: &str) -> Option<String> {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let client = kube::Client::try_default().await.ok()?;
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(vec![audience.to_string()]),
            },
            ..TokenReview::default()
        };
        let api: kube::Api<TokenReview> = kube::Api::all(client);
        let answer = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .ok()?;
        let status = answer.status?;
        let for_audience = status
            .audiences
            .is_some_and(|a| a.iter().any(|a| a == audience));
        match (status.authenticated, for_audience) {
            (Some(true), true) => status.user?.username,
            _ => None,
        }
    })
}
