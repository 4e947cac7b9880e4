//! pinhook's registry client against a real registry over real HTTPS with htpasswd auth:
//! which digest a tag resolves to, credentials, errors, trust and deadlines.

use std::time::{Duration, Instant};

use crate::common::cli::{docker_config_json, pinhook_command};
use crate::common::images::{self, Flavor};
use crate::common::pinhook::registry_config;
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::resolving::{reference, resolver};
use crate::common::silent::SilentServer;
use crate::common::tls::{init_crypto, TestCa};
use pinhook::registry::{Credential, RegistryConfig, RegistryError, Resolver};

const USER: &str = "ci";
const PASS: &str = "correct horse";

async fn authed_registry() -> TestRegistry {
    init_crypto();
    TestRegistry::start(RegistryAuth::htpasswd(USER, PASS)).await
}

#[tokio::test]
async fn multi_arch_tag_resolves_to_the_index_digest_never_a_platform_or_config() {
    let registry = authed_registry().await;
    let oci = images::push_multi_arch(&registry, "team/multi", "1.0", "s1").await;
    let docker = images::push_docker_list(&registry, "team/list", "1.0", "s2").await;
    let resolver = resolver(registry_config(&registry));
    let creds = [Credential::basic(USER, PASS)];

    for pushed in [&oci, &docker] {
        let resolved = resolver
            .resolve(&reference(&pushed.reference), &creds)
            .await
            .expect("resolves");
        let digest = resolved.digest.to_string();
        assert_eq!(digest, pushed.index_digest, "{}", pushed.reference);
        assert!(!pushed.platform_digests().contains(&digest.as_str()));
        assert!(!pushed.config_digests().contains(&digest.as_str()));
        assert_eq!(resolved.credential, creds[0].fingerprint());
    }
}

#[tokio::test]
async fn single_platform_tag_resolves_to_the_manifest_digest_not_the_config() {
    let registry = authed_registry().await;
    let oci = images::push_image(&registry, "team/single", "2.0", "s3", Flavor::Oci).await;
    let docker = images::push_image(&registry, "team/v2", "2.0", "s3d", Flavor::Docker).await;
    let resolver = resolver(registry_config(&registry));

    for pushed in [&oci, &docker] {
        let resolved = resolver
            .resolve(
                &reference(&pushed.reference),
                &[Credential::basic(USER, PASS)],
            )
            .await
            .expect("resolves");

        let digest = resolved.digest.to_string();
        assert_eq!(digest, pushed.manifest_digest(), "{}", pushed.reference);
        assert_ne!(digest, pushed.config_digest(), "{}", pushed.reference);
    }
}

#[tokio::test]
async fn wrong_password_and_no_credentials_are_unauthorized() {
    let registry = authed_registry().await;
    let pushed = images::push_single(&registry, "team/private", "1.0", "s4").await;
    let resolver = resolver(registry_config(&registry));
    let image = reference(&pushed.reference);

    let wrong = resolver
        .resolve(&image, &[Credential::basic(USER, "nope")])
        .await;
    assert!(
        matches!(wrong, Err(RegistryError::Unauthorized { .. })),
        "{wrong:?}"
    );
    let anonymous = resolver.resolve(&image, &[]).await;
    assert!(
        matches!(anonymous, Err(RegistryError::Unauthorized { .. })),
        "{anonymous:?}"
    );
}

#[tokio::test]
async fn every_candidate_credential_is_tried_in_order_until_one_works() {
    let registry = authed_registry().await;
    let pushed = images::push_single(&registry, "team/app", "1.0", "s5").await;
    let resolver = resolver(registry_config(&registry));
    let good = Credential::basic(USER, PASS);

    let resolved = resolver
        .resolve(
            &reference(&pushed.reference),
            &[Credential::basic(USER, "stale-secret"), good.clone()],
        )
        .await
        .expect("second credential works");

    assert_eq!(resolved.credential, good.fingerprint());
}

#[tokio::test]
async fn missing_tag_is_not_found_naming_repository_and_tag() {
    let registry = authed_registry().await;
    images::push_single(&registry, "team/app", "1.0", "s6").await;
    let resolver = resolver(registry_config(&registry));

    let missing = resolver
        .resolve(
            &reference(&format!("{}/team/app:9.9", registry.host())),
            &[Credential::basic(USER, PASS)],
        )
        .await;

    match missing {
        Err(e @ RegistryError::NotFound { .. }) => {
            let text = e.to_string();
            assert!(text.contains("tag 9.9 not found"), "{text}");
            assert!(text.contains("team/app"), "{text}");
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[tokio::test]
async fn a_registry_signed_by_an_untrusted_ca_is_refused() {
    let registry = authed_registry().await;
    let pushed = images::push_single(&registry, "team/app", "1.0", "s7").await;
    let other = tempfile::tempdir().expect("tempdir");
    let stranger = TestCa::generate(other.path());
    let resolver = resolver(RegistryConfig {
        ca_pems: vec![stranger.ca_pem().as_bytes().to_vec()],
        only_configured_cas: true,
        ..RegistryConfig::default()
    });

    let refused = resolver
        .resolve(
            &reference(&pushed.reference),
            &[Credential::basic(USER, PASS)],
        )
        .await;

    assert!(
        matches!(refused, Err(RegistryError::Unreachable { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_registry_that_never_answers_hits_the_deadline() {
    init_crypto();
    // Accepts connections and never speaks: the TLS handshake hangs.
    let silent = SilentServer::start().await;
    let resolver = resolver(RegistryConfig {
        request_timeout: Duration::from_millis(300),
        only_configured_cas: true,
        ..RegistryConfig::default()
    });
    let started = Instant::now();

    let result = resolver
        .resolve(&reference(&format!("{}/team/app:1.0", silent.host())), &[])
        .await;

    let elapsed = started.elapsed();
    assert!(
        matches!(
            result,
            Err(RegistryError::Timeout { .. } | RegistryError::Unreachable { .. })
        ),
        "{result:?}"
    );
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}

/// A HEAD without `Content-Length` or without `Docker-Content-Digest` is incomplete (facts §5,
/// as containerd treats it): the manifest is fetched and its exact bytes hashed, which gives
/// the index digest all the same.
#[tokio::test]
async fn an_incomplete_head_falls_back_to_get_and_hashes_the_bytes() {
    init_crypto();
    let registry = TestRegistry::start_plain(RegistryAuth::None).await;
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "strip").await;
    for strip in [&["content-length"][..], &["docker-content-digest"][..]] {
        let proxy = crate::common::strip_proxy::StripProxy::start(registry.port(), strip).await;
        let resolver = resolver(RegistryConfig {
            insecure_hosts: [proxy.host()].into_iter().collect(),
            only_configured_cas: true,
            ..RegistryConfig::default()
        });
        registry.settle_access_log().await;
        let gets_before = registry.count_requests_now("GET", "/v2/team/app/manifests/1.0");
        let resolved = resolver
            .resolve(&reference(&format!("{}/team/app:1.0", proxy.host())), &[])
            .await
            .unwrap_or_else(|e| panic!("{strip:?}: {e}"));
        assert_eq!(
            resolved.digest.to_string(),
            pushed.index_digest,
            "{strip:?}"
        );
        let gets = registry
            .count_requests("GET", "/v2/team/app/manifests/1.0")
            .await;
        assert_eq!(gets, gets_before + 1, "{strip:?}: one GET fallback");
    }
}

/// "Not found" costs one request: the HEAD's 404 is the answer (oci-client followed every 404
/// with a manifest GET, which is what Docker Hub counts as a pull).
#[tokio::test]
async fn a_missing_tag_costs_one_head_and_no_get() {
    init_crypto();
    let registry = TestRegistry::start(RegistryAuth::None).await;
    images::push_multi_arch(&registry, "team/app", "1.0", "nf").await;
    let resolver = resolver(registry_config(&registry));
    let missing = reference(&format!("{}/team/app:nope", registry.host()));
    let error = resolver
        .resolve(&missing, &[])
        .await
        .expect_err("not found");
    assert!(matches!(error, RegistryError::NotFound { .. }), "{error}");
    assert_eq!(registry.count_requests("HEAD", "/manifests/nope").await, 1);
    assert_eq!(registry.count_requests("GET", "/manifests/nope").await, 0);
    assert_eq!(
        registry.count_requests("GET", "/v2/").await,
        1,
        "only the harness's readiness probe; pinhook sends no /v2/ ping"
    );
}

/// `pinhook resolve` as a user runs it: flags or their `PINHOOK_*` variables, the user's
/// docker credentials, the pinned reference on stdout, exit 1 when it cannot resolve.
#[tokio::test]
async fn pinhook_resolve_prints_the_pinned_reference() {
    let registry = authed_registry().await;
    let pushed = images::push_multi_arch(&registry, "team/cli", "1.0", "cli").await;
    let docker_config = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        docker_config.path().join("config.json"),
        docker_config_json(&registry.host(), USER, PASS),
    )
    .expect("write");
    let run = |args: &[&str], env: &[(&str, &std::ffi::OsStr)]| {
        let mut command = pinhook_command("resolve");
        command.args(args);
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().expect("pinhook runs")
    };
    let image = pushed.reference.clone();
    let ca = registry.ca_path().as_os_str();
    let creds = docker_config.path().as_os_str();

    let output = run(
        &[
            &image,
            "--registry-ca",
            &registry.ca_path().to_string_lossy(),
        ],
        &[("DOCKER_CONFIG", creds)],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let expected = format!("{}\n", pushed.pinned_with_tag());
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);

    let output = run(
        &[&image, "--form", "digest"],
        &[("DOCKER_CONFIG", creds), ("PINHOOK_REGISTRY_CA", ca)],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let digest_only = format!("{}\n", pushed.pinned_reference());
    assert_eq!(String::from_utf8_lossy(&output.stdout), digest_only);

    let output = run(&[&image], &[("PINHOOK_REGISTRY_CA", ca)]);
    assert_eq!(output.status.code(), Some(1), "no credentials: {output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("unauthorized"),
        "{output:?}"
    );
    let output = run(&["Not A Reference"], &[]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}
