//! Self-tests of the integration-test harness, kept apart from pinhook's own tests (and
//! counted apart by `scripts/test.sh`): what the harness does that no test of pinhook would
//! catch if it broke. The token server must follow the token spec pinhook's client is written
//! against; the parsers behind access-log counting and token minting must read what the
//! registry writes. What the real registry already proves (pushed digests, htpasswd, restarts)
//! is proven by pinhook's own tests against it and is not repeated here.

use crate::common::images;
use crate::common::registry::{parse_access_line, repository_of, RegistryAuth, TestRegistry};
use crate::common::token::{
    decode_jwt, ecdsa_der_to_raw, rfc3339, Access, TOKEN_ISSUER, TOKEN_SERVICE,
};
use reqwest::StatusCode;

const USER: &str = "robot";
const PASS: &str = "t0ken-pass";

/// `HEAD /v2/<repo>/manifests/1.0` with `Authorization: Bearer <token>`.
async fn head_with_token(registry: &TestRegistry, repo: &str, token: &str) -> reqwest::Response {
    registry
        .client()
        .head(registry.url(&format!("/v2/{repo}/manifests/1.0")))
        .header(reqwest::header::ACCEPT, images::MANIFEST_ACCEPT)
        .bearer_auth(token)
        .send()
        .await
        .expect("HEAD reaches the registry")
}

/// The token server itself, as a registry client sees it, and the registry's
/// verdict on its tokens.
#[tokio::test]
async fn token_server_follows_the_token_spec() {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let pushed = images::push_single(&registry, "team/app", "1.0", "tok-7").await;
    let tokens = registry.token_server().expect("token server");
    let client = registry.client();
    let scope = "repository:team/app:pull,push";

    let (status, body) = tokens.fetch(client, Some((USER, PASS)), &[scope]).await;
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().expect("token").to_string();
    assert_eq!(body["access_token"], body["token"]);
    assert_eq!(body["expires_in"], 300);
    let issued_at = body["issued_at"].as_str().expect("issued_at");
    assert_eq!(issued_at.len(), "2024-01-01T00:00:00Z".len(), "{issued_at}");
    let (header, claims) = decode_jwt(&token).expect("a JWT");
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["typ"], "JWT");
    assert_eq!(header["x5c"].as_array().map(Vec::len), Some(1));
    assert_eq!(claims["iss"], TOKEN_ISSUER);
    assert_eq!(claims["aud"], TOKEN_SERVICE);
    assert_eq!(claims["sub"], USER);
    assert_eq!(
        claims["access"],
        serde_json::json!([{"type": "repository", "name": "team/app", "actions": ["pull", "push"]}])
    );

    // The registry accepts the token for this repository only.
    let ok = head_with_token(&registry, "team/app", &token).await;
    assert_eq!(ok.status(), StatusCode::OK, "{}", registry.log_tail(10));
    assert_eq!(
        ok.headers()["docker-content-digest"],
        pushed.manifest_digest()
    );
    let other = head_with_token(&registry, "team/other", &token).await;
    assert_eq!(other.status(), StatusCode::UNAUTHORIZED);

    // Anonymous: a token granting nothing, which the registry refuses.
    let (status, body) = tokens.fetch(client, None, &[scope]).await;
    assert_eq!(status, 200, "{body}");
    let anonymous = body["token"].as_str().expect("token").to_string();
    let (_, claims) = decode_jwt(&anonymous).expect("a JWT");
    assert_eq!(claims["access"], serde_json::json!([]));
    let refused = head_with_token(&registry, "team/app", &anonymous).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let challenge = refused.headers()["www-authenticate"]
        .to_str()
        .expect("ASCII")
        .to_string();
    assert!(challenge.contains("insufficient_scope"), "{challenge}");

    // Wrong password and unknown user: 401, no token.
    for creds in [(USER, "wrong"), ("nobody", PASS)] {
        let (status, body) = tokens.fetch(client, Some(creds), &[scope]).await;
        assert_eq!(status, 401, "{body}");
        assert!(body.get("token").is_none(), "{body}");
    }
    // Unknown service: 400.
    let resp = client
        .get(tokens.realm())
        .query(&[("service", "elsewhere"), ("scope", scope)])
        .basic_auth(USER, Some(PASS))
        .send()
        .await
        .expect("token server answers");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    // A forged signature is rejected by the registry.
    let (status, body) = tokens.fetch(client, Some((USER, PASS)), &[scope]).await;
    assert_eq!(status, 200);
    let good = body["token"].as_str().expect("token");
    let (signed, sig) = good.rsplit_once('.').expect("three parts");
    let forged = format!("{signed}.{}", sig.chars().rev().collect::<String>());
    let rejected = head_with_token(&registry, "team/app", &forged).await;
    assert_eq!(rejected.status(), StatusCode::UNAUTHORIZED);

    assert_eq!(tokens.tokens_issued(), 3, "{:?}", tokens.requests());
}

#[test]
fn repository_is_found_in_registry_paths() {
    let cases = [
        ("/v2/", None),
        ("/v2/_catalog", None),
        ("/v2/app/manifests/v1", Some("app")),
        ("/v2/team/app/blobs/sha256:ab", Some("team/app")),
        ("/v2/blobs/blobs/sha256:ab", Some("blobs")),
        ("/v2/a/blobs/b/blobs/uploads/uuid-1", Some("a/blobs/b")),
        ("/v2/a/manifests/b/blobs/uploads/", Some("a/manifests/b")),
        ("/v2/team/app/tags/list", Some("team/app")),
    ];
    for (path, want) in cases {
        assert_eq!(repository_of(path).as_deref(), want, "{path}");
    }
}

#[test]
fn scopes_parse() {
    assert_eq!(
        Access::parse_scope("repository:team/app:pull,push"),
        Some(Access::repository("team/app", &["pull", "push"]))
    );
    assert_eq!(
        Access::parse_scope("repository:localhost:5000/app:pull"),
        Some(Access::repository("localhost:5000/app", &["pull"]))
    );
    assert_eq!(Access::parse_scope("nonsense"), None);
}

#[test]
fn der_signatures_become_fixed_width() {
    // r with a sign byte, s short (leading zeros dropped by DER).
    let mut der = vec![0x30, 0x00, 0x02, 33, 0x00];
    der.extend([0x80; 32]);
    der.extend([0x02, 31]);
    der.extend([0x11; 31]);
    der[1] = u8::try_from(der.len() - 2).expect("short form");
    let raw = ecdsa_der_to_raw(&der).expect("parses");
    assert_eq!(&raw[..32], &[0x80; 32]);
    assert_eq!(raw[32], 0);
    assert_eq!(&raw[33..], &[0x11; 31]);
    assert_eq!(ecdsa_der_to_raw(&der[..der.len() - 1]), None);
}

#[test]
fn issued_at_is_rfc3339() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
}

#[test]
fn access_log_lines_parse() {
    let line = r#"127.0.0.1 - - [21/Nov/2026:13:56:39 +0000] "HEAD /v2/foo/bar/manifests/latest HTTP/2.0" 404 96 "" "curl/7.88.1""#;
    let entry = parse_access_line(line).expect("combined log line parses");
    assert_eq!(entry.method, "HEAD");
    assert_eq!(entry.uri, "/v2/foo/bar/manifests/latest");
    assert_eq!(entry.status, 404);
    assert_eq!(parse_access_line("time=\"x\" level=info msg=hi"), None);
}
