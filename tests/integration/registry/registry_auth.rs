//! pinhook's resolver against registries that need more than Basic auth over
//! TLS: bearer tokens from a token server (the distribution token spec) and
//! an "insecure" registry over plain HTTP.

use std::time::{Duration, Instant};

use crate::common::images;
use crate::common::pinhook::registry_config;
use crate::common::registry::{RegistryAuth, TestRegistry, Transport};
use crate::common::resolving::{reference, resolver};
use crate::common::token::{Access, TOKEN_SERVICE};
use pinhook::registry::{Credential, RegistryConfig, RegistryError, Resolver};

const USER: &str = "robot";
const PASS: &str = "t0ken-pass";

async fn token_registry() -> TestRegistry {
    TestRegistry::start(RegistryAuth::token(USER, PASS)).await
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
