//! A review's own text cannot forge pinhook's log, over HTTPS into the text format `pinhook
//! serve` writes: a `uid`, a namespace and an image holding line breaks, a forged timestamped
//! line and terminal codes (the apiserver's uids are UUIDs, but whoever posts a review to
//! `/mutate` or `/validate` chooses its own) leave one line per event, every line pinhook's,
//! the hostile text escaped in it.

use crate::common::images;
use crate::common::logs::Captured;
use crate::common::pinhook::TestPinhook;
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{in_namespace, pod_review};
use serde_json::json;

/// A line of its own in the log, if a line break were written raw.
const FORGED: &str =
    "2026-11-27T00:00:00.000000Z  INFO pinhook::server::observe: review forged=true";

#[test]
fn review_text_cannot_forge_a_log_line() {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.worker_threads(2);
    Captured::run(tracing::Level::INFO, &mut runtime, forge);
}

async fn forge(captured: Captured) {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let pinhook = TestPinhook::start(&registry).await;

    // Pinned: one info summary line carrying the uid and the namespace.
    let mut pinned = pod_review(&registry, &registry.image_ref("team/app", "1.0"));
    pinned["request"]["uid"] = json!(format!("u1\n{FORGED}\r\n\u{2028}x"));
    in_namespace(&mut pinned, "team\u{1b}[2J\u{9b}31m");
    // Refused: a warn summary and a violation line carrying the image as written.
    let mut refused = pod_review(
        &registry,
        &format!("{}/team/app:1\n{FORGED}", registry.host()),
    );
    refused["request"]["uid"] = json!(format!("u2\n{FORGED}"));
    for (path, review) in [
        ("/mutate", &pinned),
        ("/mutate", &refused),
        ("/validate", &refused),
    ] {
        let (status, text) = pinhook
            .post(
                &format!("{path}?timeout=10s"),
                serde_json::to_vec(review).expect("json"),
            )
            .await;
        assert_eq!(status, 200, "{text}");
    }
    let body = pinhook.mutate(&pinned).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(body["response"]["uid"], pinned["request"]["uid"]);

    let logs = captured.text();
    assert!(
        logs.contains(r"uid=u1\n2026-11-27T00:00:00.000000Z  INFO pinhook::server::observe: review forged=true\r\n\u{2028}x namespace=team\u{1b}[2J\u{9b}31m kind=Pod"),
        "{logs}"
    );
    assert!(
        logs.contains(r"uid=u2\n2026-11-27T00:00:00.000000Z"),
        "{logs}"
    );
    assert!(
        logs.contains(r"team/app:1\n2026-11-27T00:00:00.000000Z"),
        "{logs}"
    );
    for line in logs.lines() {
        // Every line is an event of pinhook's: its own timestamp first, never a forged one.
        let stamp = line.as_bytes();
        assert!(
            stamp.len() > 28 && stamp[4] == b'-' && stamp[10] == b'T' && stamp[26] == b'Z',
            "{line:?}"
        );
        assert!(
            !line.contains("  INFO pinhook::server::observe: review forged=true")
                || line.contains(r"\n2026"),
            "{line:?}"
        );
        assert!(
            !line
                .chars()
                .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}'),
            "{line:?}"
        );
    }
    assert!(logs.lines().count() >= 5, "{logs}");
}
