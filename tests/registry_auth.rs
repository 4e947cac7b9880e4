//! pinhook's resolver against registries that need more than Basic auth over
//! TLS: bearer tokens from a token server (the distribution token spec) and
//! an "insecure" registry over plain HTTP.

mod common;

use std::time::{Duration, Instant};

use common::images;
use common::pinhook::registry_config;
use common::registry::{repository_of, RegistryAuth, TestRegistry, Transport};
use common::token::{decode_jwt, ecdsa_der_to_raw, rfc3339, Access, TOKEN_ISSUER, TOKEN_SERVICE};
use pinhook::reference::Reference;
use pinhook::registry::{Credential, OciResolver, RegistryConfig, RegistryError, Resolver};
use reqwest::{Method, StatusCode};

const USER: &str = "robot";
const PASS: &str = "t0ken-pass";

async fn token_registry() -> TestRegistry {
    TestRegistry::start(RegistryAuth::token(USER, PASS)).await
}

fn resolver(config: RegistryConfig) -> OciResolver {
    OciResolver::new(config).expect("resolver builds")
}

fn reference(text: &str) -> Reference {
    Reference::parse(text).expect("valid reference")
}

fn insecure_config(registry: &TestRegistry) -> RegistryConfig {
    RegistryConfig {
        insecure_hosts: [registry.host()].into_iter().collect(),
        ..registry_config(registry)
    }
}

/// `(method, uri, status)` of every access-log line after the first `skip`.
async fn requests_since(registry: &TestRegistry, skip: usize) -> Vec<(String, String, u16)> {
    registry.settle_access_log().await;
    registry
        .requests()
        .into_iter()
        .skip(skip)
        .map(|e| (e.method, e.uri, e.status))
        .collect()
}

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

// === token auth ===

#[tokio::test]
async fn token_auth_resolves_multi_arch_tag_to_the_index_digest() {
    let registry = token_registry().await;
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "tok-1").await;
    assert_eq!(registry.tokens_issued(), 0, "pushes use minted tokens");
    registry.settle_access_log().await;
    let before = registry.requests().len();
    let resolver = resolver(registry_config(&registry));
    let creds = [Credential::basic(USER, PASS)];

    let resolved = resolver
        .resolve(&reference(&pushed.reference), &creds)
        .await
        .expect("resolves with a bearer token");

    let digest = resolved.digest.to_string();
    assert_eq!(digest, pushed.index_digest);
    assert!(!pushed.platform_digests().contains(&digest.as_str()));
    assert_eq!(resolved.credential, creds[0].fingerprint());

    let tokens = registry.token_server().expect("token server");
    assert_eq!(tokens.tokens_issued(), 1);
    let asked = &tokens.requests()[0];
    assert_eq!(asked.username.as_deref(), Some(USER));
    assert_eq!(asked.service.as_deref(), Some(TOKEN_SERVICE));
    assert_eq!(asked.scopes, ["repository:team/app:pull"]);
    assert_eq!(asked.granted, [Access::repository("team/app", &["pull"])]);

    // One resolution: the HEAD that brings the challenge (no separate /v2/ ping), the token
    // from the realm (the token server, not the registry), the HEAD again.
    let seen = requests_since(&registry, before).await;
    assert_eq!(
        seen,
        [
            ("HEAD".into(), "/v2/team/app/manifests/1.0".into(), 401),
            ("HEAD".into(), "/v2/team/app/manifests/1.0".into(), 200),
        ],
        "{}",
        registry.log_tail(10)
    );
}

#[tokio::test]
async fn second_resolution_reuses_the_token() {
    let registry = token_registry().await;
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "tok-2").await;
    let resolver = resolver(registry_config(&registry));
    let creds = [Credential::basic(USER, PASS)];
    let image = reference(&pushed.reference);

    resolver.resolve(&image, &creds).await.expect("first");
    registry.settle_access_log().await;
    let before = registry.requests().len();
    let second = resolver.resolve(&image, &creds).await.expect("second");

    assert_eq!(second.digest.to_string(), pushed.index_digest);
    assert_eq!(registry.tokens_issued(), 1, "the cached token is reused");
    let seen = requests_since(&registry, before).await;
    assert_eq!(
        seen,
        [("HEAD".into(), "/v2/team/app/manifests/1.0".into(), 200)],
        "{}",
        registry.log_tail(10)
    );
}

#[tokio::test]
async fn tag_moved_under_token_auth_resolves_to_the_new_digest() {
    let registry = token_registry().await;
    let first = images::push_multi_arch(&registry, "team/app", "1.0", "tok-3a").await;
    let resolver = resolver(registry_config(&registry));
    let creds = [Credential::basic(USER, PASS)];
    let image = reference(&first.reference);
    let a = resolver.resolve(&image, &creds).await.expect("first");

    let second = images::push_multi_arch(&registry, "team/app", "1.0", "tok-3b").await;
    let b = resolver.resolve(&image, &creds).await.expect("second");

    assert_eq!(a.digest.to_string(), first.index_digest);
    assert_eq!(b.digest.to_string(), second.index_digest);
    assert_ne!(a.digest, b.digest);
}

#[tokio::test]
async fn token_auth_wrong_password_is_unauthorized() {
    let registry = token_registry().await;
    let pushed = images::push_single(&registry, "team/private", "1.0", "tok-4").await;
    let resolver = resolver(registry_config(&registry));

    let result = resolver
        .resolve(
            &reference(&pushed.reference),
            &[Credential::basic(USER, "wrong")],
        )
        .await;

    assert!(
        matches!(result, Err(RegistryError::Unauthorized { .. })),
        "{result:?}"
    );
    let tokens = registry.token_server().expect("token server");
    let requests = tokens.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.username.as_deref() == Some(USER) && r.status == 401),
        "{requests:?}"
    );
    // The anonymous fallback got a token, but one granting nothing.
    assert!(
        requests.iter().all(|r| r.granted.is_empty()),
        "{requests:?}"
    );
}

#[tokio::test]
async fn token_auth_anonymous_is_refused() {
    let registry = token_registry().await;
    let pushed = images::push_single(&registry, "team/private", "1.0", "tok-5").await;
    let resolver = resolver(registry_config(&registry));

    let result = resolver.resolve(&reference(&pushed.reference), &[]).await;

    assert!(
        matches!(result, Err(RegistryError::Unauthorized { .. })),
        "{result:?}"
    );
    let requests = registry.token_server().expect("token server").requests();
    assert!(!requests.is_empty(), "anonymous asked the token server");
    assert!(
        requests
            .iter()
            .all(|r| r.username.is_none() && r.status == 200 && r.granted.is_empty()),
        "{requests:?}"
    );
    assert!(
        registry
            .requests()
            .iter()
            .any(|e| e.uri.contains("/manifests/1.0") && e.status == 401),
        "{}",
        registry.log_tail(10)
    );
}

#[tokio::test]
async fn token_auth_missing_tag_is_not_found() {
    let registry = token_registry().await;
    let pushed = images::push_single(&registry, "team/app", "1.0", "tok-6").await;
    let resolver = resolver(registry_config(&registry));
    let missing = pushed.reference.replace(":1.0", ":nope");

    let result = resolver
        .resolve(&reference(&missing), &[Credential::basic(USER, PASS)])
        .await;

    assert!(
        matches!(result, Err(RegistryError::NotFound { .. })),
        "{result:?}"
    );
}

/// The token server itself, as a registry client sees it, and the registry's
/// verdict on its tokens.
#[tokio::test]
async fn token_server_follows_the_token_spec() {
    let registry = token_registry().await;
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

#[tokio::test]
async fn challenge_names_the_token_realm_and_service() {
    let registry = token_registry().await;
    let resp = registry
        .client()
        .get(registry.url("/v2/"))
        .send()
        .await
        .expect("GET /v2/ reaches the registry");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let challenge = resp.headers()["www-authenticate"].to_str().expect("ASCII");
    let tokens = registry.token_server().expect("token server");
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(
        challenge.contains(&format!("realm=\"{}\"", tokens.realm())),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!("service=\"{TOKEN_SERVICE}\"")),
        "{challenge}"
    );
    // The harness's own requests carry minted tokens.
    let resp = registry
        .request(Method::GET, &registry.url("/v2/"))
        .send()
        .await
        .expect("GET /v2/");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(tokens.tokens_minted() >= 1);
    assert_eq!(tokens.tokens_issued(), 0);
}

// === plain HTTP ===

#[tokio::test]
async fn plain_http_registry_resolves_when_marked_insecure() {
    let registry = TestRegistry::start_plain(RegistryAuth::None).await;
    assert_eq!(registry.transport(), Transport::PlainHttp);
    assert!(registry.url("/v2/").starts_with("http://127.0.0.1:"));
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "plain-1").await;
    let resolver = resolver(insecure_config(&registry));

    let resolved = resolver
        .resolve(&reference(&pushed.reference), &[])
        .await
        .expect("resolves over plain HTTP");

    assert_eq!(resolved.digest.to_string(), pushed.index_digest);
}

#[tokio::test]
async fn plain_http_registry_without_insecure_flag_fails_fast() {
    let registry = TestRegistry::start_plain(RegistryAuth::None).await;
    let pushed = images::push_single(&registry, "team/app", "1.0", "plain-2").await;
    let resolver = resolver(registry_config(&registry));

    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        resolver.resolve(&reference(&pushed.reference), &[]),
    )
    .await
    .expect("resolve returns instead of hanging");
    let elapsed = started.elapsed();

    let error = result.expect_err("HTTPS to a plain HTTP registry fails");
    assert!(
        elapsed < Duration::from_secs(4),
        "took {elapsed:?} to fail: {error:?}"
    );
    assert!(
        matches!(error, RegistryError::Unreachable { .. }),
        "{error:?}"
    );
    // Nothing that is HTTP ever reached the registry's handlers.
    assert_eq!(registry.count_requests("HEAD", "/manifests/").await, 0);
}

#[tokio::test]
async fn plain_http_registry_with_htpasswd() {
    let registry = TestRegistry::start_plain(RegistryAuth::htpasswd(USER, PASS)).await;
    let pushed = images::push_single(&registry, "team/app", "1.0", "plain-3").await;
    let resolver = resolver(insecure_config(&registry));
    let image = reference(&pushed.reference);

    let resolved = resolver
        .resolve(&image, &[Credential::basic(USER, PASS)])
        .await
        .expect("resolves");
    assert_eq!(resolved.digest.to_string(), pushed.manifest_digest());
    let refused = resolver.resolve(&image, &[]).await;
    assert!(
        matches!(refused, Err(RegistryError::Unauthorized { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn plain_http_registry_with_token_auth() {
    let registry = TestRegistry::start_plain(RegistryAuth::token(USER, PASS)).await;
    let pushed = images::push_docker_list(&registry, "team/app", "1.0", "plain-4").await;
    let resolver = resolver(insecure_config(&registry));

    let resolved = resolver
        .resolve(
            &reference(&pushed.reference),
            &[Credential::basic(USER, PASS)],
        )
        .await
        .expect("resolves; the realm itself is HTTPS");

    assert_eq!(resolved.digest.to_string(), pushed.index_digest);
    assert_eq!(registry.tokens_issued(), 1);
}

#[tokio::test]
async fn plain_registry_survives_restart() {
    let registry = TestRegistry::start_plain(RegistryAuth::token(USER, PASS)).await;
    let pushed = images::push_single(&registry, "keep", "v1", "plain-5").await;
    registry.restart().await;
    let resp = registry
        .request(Method::HEAD, &registry.url("/v2/keep/manifests/v1"))
        .header(reqwest::header::ACCEPT, images::MANIFEST_ACCEPT)
        .send()
        .await
        .expect("HEAD after restart");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()["docker-content-digest"],
        pushed.manifest_digest()
    );
}

// === harness pieces ===

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

/// The token realm is a URL the registry chooses: with a policy, pinhook asks it for a token
/// only when the internal-address guard lets it (here the token server listens on loopback,
/// so it must be named in `registries.allowPrivate` like the registry itself).
#[tokio::test]
async fn a_token_realm_on_an_internal_address_is_refused_without_a_request() {
    let registry = token_registry().await;
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "realm").await;
    let tokens = registry.token_server().expect("token server");
    let realm_host = tokens.addr().to_string();
    let policy_with = |allow_private: Vec<String>| {
        let mut policy = pinhook::policy::Policy::default();
        policy.registries.allow_private = allow_private;
        pinhook::policy::PolicyHandle::new(policy.compile().expect("policy"))
    };
    let creds = [Credential::basic(USER, PASS)];
    let image = reference(&pushed.reference);

    let guarded =
        resolver(registry_config(&registry)).with_policy(policy_with(vec![registry.host()]));
    let error = guarded
        .resolve(&image, &creds)
        .await
        .expect_err("the realm is on loopback");
    let text = error.to_string();
    assert!(
        text.contains("token realm of registry")
            && text.contains(&realm_host)
            && text.contains("loopback"),
        "{text}"
    );
    assert_eq!(tokens.tokens_issued(), 0, "the realm saw no request");

    let allowed = resolver(registry_config(&registry))
        .with_policy(policy_with(vec![registry.host(), realm_host]));
    let resolved = allowed
        .resolve(&image, &creds)
        .await
        .expect("allowed realm");
    assert_eq!(resolved.digest.to_string(), pushed.index_digest);
    assert_eq!(tokens.tokens_issued(), 1);
}
