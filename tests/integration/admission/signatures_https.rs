//! Signatures at admission (issue 46), over real HTTPS against the real token-auth registry
//! with signatures made here: the digest pinned is the digest verified. A signed tag is pinned;
//! unsigned, signed by another key, and a signature of another digest are denied in enforce
//! naming the `verify` entry and why; a digest written by hand is verified at `/mutate` and
//! at `/validate`; a tag moved to an unsigned digest after its first verification is denied
//! at its next resolution; audit admits and warns; the verdicts are counted; a Pod verified a
//! moment ago is remembered only for its namespace and the policy it was verified under.

use std::sync::Arc;
use std::time::Duration;

use pinhook::policy::{
    IdentityEntry, KeySource, KeylessEntry, Mode, Policy, TransparencyLogEntry, VerifyEntry,
};
use pinhook::registry::keyring::Keyring;
use pinhook::registry::pull_secrets::KubeSecrets;
use pinhook::registry::CacheConfig;

use crate::common::cli::docker_config_json;
use crate::common::fake_kube::FakeKube;
use crate::common::fake_kube::PullSecretFormat::DockerConfigJson;
use crate::common::images::{self, PushedIndex};
use crate::common::pinhook::{Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{
    fixture_with_image, image_after, in_namespace, message, pod_review, warned,
};
use crate::common::signing::{key_pair_pem, sign, sign_keyless, sign_keyless_with, sign_logged};
use crate::common::sigstore_authority::{Sct, TestSigstore};

const USER: &str = "robot";
const PASS: &str = "v3rify-pass";

struct Signed {
    registry: TestRegistry,
    signed: PushedIndex,
    unsigned: PushedIndex,
    other_key: PushedIndex,
    other_digest: PushedIndex,
    key_file: std::path::PathBuf,
    signer: sigstore::crypto::SigStoreSigner,
    _config: tempfile::TempDir,
    config: std::path::PathBuf,
}

/// The token-auth registry with four images of `team/app`: 1.0 signed by our key, 2.0
/// unsigned, 3.0 signed by another key, 4.0 carrying 1.0's signature (of another digest).
async fn signed_registry() -> Signed {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let signed = images::push_multi_arch(&registry, "team/app", "1.0", "verify-1").await;
    let unsigned = images::push_multi_arch(&registry, "team/app", "2.0", "verify-2").await;
    let other_key = images::push_multi_arch(&registry, "team/app", "3.0", "verify-3").await;
    let other_digest = images::push_multi_arch(&registry, "team/app", "4.0", "verify-4").await;
    let (signer, pem) = key_pair_pem();
    let (other, _) = key_pair_pem();
    sign(&registry, "team/app", &signed.index_digest, &signer).await;
    sign(&registry, "team/app", &other_key.index_digest, &other).await;
    // 4.0's signature manifest holds a signature of 1.0's digest.
    let copied =
        crate::common::signing::signature_of(&registry, "team/app", &signed.index_digest, &signer);
    crate::common::signing::push_signatures(
        &registry,
        "team/app",
        &other_digest.index_digest,
        &[copied],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.json");
    std::fs::write(&config, docker_config_json(&registry.host(), USER, PASS)).expect("config");
    let key_file = dir.path().join("cosign.pub");
    std::fs::write(&key_file, pem).expect("key");
    Signed {
        registry,
        signed,
        unsigned,
        other_key,
        other_digest,
        key_file,
        signer,
        _config: dir,
        config,
    }
}

fn verifying(setup: &Signed, mode: Mode) -> Options {
    let entry = VerifyEntry {
        images: vec![format!("{}/team/*", setup.registry.host())],
        // The key as a mounted Secret gives it: a file.
        keys: vec![KeySource {
            pem: None,
            file: Some(setup.key_file.clone()),
        }],
        keyless: None,
        transparency_log: None,
    };
    options(&setup.registry, &setup.config, mode, entry)
}

/// pinhook with the registry's credentials and one `verify` entry.
fn options(
    registry: &TestRegistry,
    config: &std::path::Path,
    mode: Mode,
    entry: VerifyEntry,
) -> Options {
    let mut policy = Policy {
        mode,
        verify: vec![entry],
        ..Policy::default()
    };
    // The token server listens on loopback too.
    let tokens = registry.token_server().expect("token auth");
    policy
        .registries
        .allow_private
        .push(tokens.addr().to_string());
    Options {
        policy,
        docker_config: Some(config.to_path_buf()),
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_digest_signed_by_the_trusted_key_is_pinned() {
    let setup = signed_registry().await;
    let pinhook = TestPinhook::start_with(&setup.registry, verifying(&setup, Mode::Enforce)).await;

    let review = pod_review(&setup.registry, &setup.signed.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), setup.signed.pinned_with_tag());
    // `/validate` sees the pinned Pod and verifies the digest again (from its cache).
    let mut pinned = review.clone();
    pinned["request"]["object"]["spec"]["containers"][0]["image"] =
        setup.signed.pinned_with_tag().into();
    let body = pinhook.validate(&pinned).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");

    for (image, why) in [
        (&setup.unsigned, "no signature found"),
        (&setup.other_key, "signed by another key"),
        (
            &setup.other_digest,
            "the trusted signer signed another digest",
        ),
    ] {
        let body = pinhook
            .mutate(&pod_review(&setup.registry, &image.reference))
            .await;
        assert_eq!(body["response"]["allowed"], false, "{}: {body}", image.tag);
        let text = message(&body);
        assert!(text.contains("not verified: verify[0]: "), "{text}");
        assert!(text.contains(why), "{text} lacks {why}");
        assert!(!text.contains('\n'), "{text}");
    }

    let metrics = pinhook.scrape_metrics().await;
    for line in [
        "pinhook_signature_verifications_total{outcome=\"verified\",source=\"registry\"} 1",
        "pinhook_signature_verifications_total{outcome=\"verified\",source=\"cache\"} 1",
        "pinhook_signature_verifications_total{outcome=\"no_signature\",source=\"registry\"} 1",
        "pinhook_signature_verifications_total{outcome=\"other_key\",source=\"registry\"} 1",
        "pinhook_signature_verifications_total{outcome=\"other_digest\",source=\"registry\"} 1",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
}

/// Writing the digest by hand is no way around verification: `/mutate` and `/validate` both
/// verify a digest the review already carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_written_by_hand_is_verified_at_mutate_and_at_validate() {
    let setup = signed_registry().await;
    let pinhook = TestPinhook::start_with(&setup.registry, verifying(&setup, Mode::Enforce)).await;
    let by_hand = format!(
        "{}/team/app@{}",
        setup.registry.host(),
        setup.unsigned.index_digest
    );
    let review = pod_review(&setup.registry, &by_hand);
    for body in [
        pinhook.mutate(&review).await,
        pinhook.validate(&review).await,
    ] {
        assert_eq!(body["response"]["allowed"], false, "{body}");
        assert!(message(&body).contains("no signature found"), "{body}");
    }
    let signed = format!(
        "{}/team/app@{}",
        setup.registry.host(),
        setup.signed.index_digest
    );
    let review = pod_review(&setup.registry, &signed);
    for body in [
        pinhook.mutate(&review).await,
        pinhook.validate(&review).await,
    ] {
        assert_eq!(body["response"]["allowed"], true, "{body}");
    }
}

/// A tag verified once and then moved to an unsigned digest: its next resolution names the new
/// digest, which has its own verification, never the tag's cached one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_moved_to_an_unsigned_digest_is_denied_at_its_next_resolution() {
    let setup = signed_registry().await;
    let mut options = verifying(&setup, Mode::Enforce);
    options.cache = CacheConfig {
        hit_ttl: Duration::from_millis(200),
        refresh_ahead: false,
        ..CacheConfig::default()
    };
    let pinhook = TestPinhook::start_with(&setup.registry, options).await;
    let first = images::push_multi_arch(&setup.registry, "team/app", "moving", "moving-1").await;
    sign(
        &setup.registry,
        "team/app",
        &first.index_digest,
        &setup.signer,
    )
    .await;
    let review = pod_review(&setup.registry, &first.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), first.pinned_with_tag());

    let moved = images::push_multi_arch(&setup.registry, "team/app", "moving", "moving-2").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let text = message(&body);
    assert!(text.contains("no signature found"), "{text}");
    let short = &moved.index_digest[..19];
    assert!(
        text.contains(short),
        "{text} names the moved-to digest {short}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_admits_an_unsigned_image_and_warns() {
    let setup = signed_registry().await;
    let pinhook = TestPinhook::start_with(&setup.registry, verifying(&setup, Mode::Audit)).await;
    let review = pod_review(&setup.registry, &setup.unsigned.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(
        body["response"]["patch"].is_null(),
        "audit never mutates: {body}"
    );
    assert!(warned(&body, "no signature found"), "{body}");
}

const ISSUER: &str = "https://token.actions.githubusercontent.com";
const RELEASE: &str = "https://github.com/acme/app/.github/workflows/release.yml@refs/tags/v1.0";

/// Keyless: an entry trusting the release workflow's identity (issuer exact, subject by pattern)
/// under the tests' own trusted root, given as a file. 1.0 is signed by that workflow: pinned.
/// 2.0 by another repository's workflow, 3.0 by a CA the root does not name (logged in its
/// log), 4.0 with a certificate no CT log published (no SCT): each denied naming why, and
/// counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_signatures_of_a_trusted_identity_are_pinned_and_others_denied() {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let release = images::push_multi_arch(&registry, "team/app", "1.0", "keyless-1").await;
    let other = images::push_multi_arch(&registry, "team/app", "2.0", "keyless-2").await;
    let rogue = images::push_multi_arch(&registry, "team/app", "3.0", "keyless-3").await;
    let sigstore = TestSigstore::new();
    let repo = "team/app";
    sign_keyless(
        &registry,
        repo,
        &release.index_digest,
        &sigstore,
        ISSUER,
        RELEASE,
    )
    .await;
    let fork = "https://github.com/evil/app/.github/workflows/release.yml@refs/tags/v1.0";
    sign_keyless(
        &registry,
        repo,
        &other.index_digest,
        &sigstore,
        ISSUER,
        fork,
    )
    .await;
    let rogue_ca = sigstore.sharing_log();
    sign_keyless(
        &registry,
        repo,
        &rogue.index_digest,
        &rogue_ca,
        ISSUER,
        RELEASE,
    )
    .await;
    // 4.0 by the trusted identity, under the trusted CA, but no CT log published the
    // certificate (no SCT): a certificate issued where nobody could see it.
    let unpublished = images::push_multi_arch(&registry, "team/app", "4.0", "keyless-4").await;
    sign_keyless_with(
        &registry,
        repo,
        &unpublished.index_digest,
        &sigstore,
        (ISSUER, RELEASE),
        Sct::None,
    )
    .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.json");
    std::fs::write(&config, docker_config_json(&registry.host(), USER, PASS)).expect("config");
    let root = dir.path().join("trusted_root.json");
    std::fs::write(&root, sigstore.trusted_root()).expect("root");
    let entry = VerifyEntry {
        images: vec![format!("{}/team/*", registry.host())],
        keys: Vec::new(),
        keyless: Some(KeylessEntry {
            trusted_root: root,
            identities: vec![IdentityEntry {
                issuer: Some(ISSUER.to_string()),
                subject_reg_exp: Some(
                    r"^https://github\.com/acme/app/\.github/workflows/release\.yml@refs/tags/v"
                        .to_string(),
                ),
                ..IdentityEntry::default()
            }],
            insecure_ignore_sct: false,
        }),
        transparency_log: None,
    };
    let pinhook =
        TestPinhook::start_with(&registry, options(&registry, &config, Mode::Enforce, entry)).await;

    let review = pod_review(&registry, &release.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), release.pinned_with_tag());

    for (image, why) in [
        (&other, "signed keyless by https://github.com/evil/app/"),
        (&rogue, "the trusted root does not vouch for"),
        (&unpublished, "its certificate carries no SCT"),
    ] {
        let body = pinhook
            .mutate(&pod_review(&registry, &image.reference))
            .await;
        assert_eq!(body["response"]["allowed"], false, "{}: {body}", image.tag);
        let text = message(&body);
        assert!(text.contains("not verified: verify[0]: "), "{text}");
        assert!(text.contains(why), "{text} lacks {why}");
    }
    let metrics = pinhook.scrape_metrics().await;
    for line in [
        "pinhook_signature_verifications_total{outcome=\"verified\",source=\"registry\"} 1",
        "pinhook_signature_verifications_total{outcome=\"other_identity\",source=\"registry\"} 1",
        "pinhook_signature_verifications_total{outcome=\"untrusted\",source=\"registry\"} 2",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
}

/// A key's signatures under an entry naming a transparency log (`cosign verify --key` without
/// `--insecure-ignore-tlog`): 1.0 signed and logged in the trusted root's log is pinned; 2.0
/// signed by the same key but not logged, and 3.0 logged in a log the root does not name, are
/// denied saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_signature_must_be_logged_where_the_entry_names_a_transparency_log() {
    let registry = TestRegistry::start(RegistryAuth::token(USER, PASS)).await;
    let logged = images::push_multi_arch(&registry, "team/app", "1.0", "tlog-1").await;
    let unlogged = images::push_multi_arch(&registry, "team/app", "2.0", "tlog-2").await;
    let elsewhere = images::push_multi_arch(&registry, "team/app", "3.0", "tlog-3").await;
    let sigstore = TestSigstore::new();
    let (signer, pem) = key_pair_pem();
    let key = (&signer, pem.as_str());
    sign_logged(&registry, "team/app", &logged.index_digest, key, &sigstore).await;
    sign(&registry, "team/app", &unlogged.index_digest, &signer).await;
    let other_log = TestSigstore::new();
    sign_logged(
        &registry,
        "team/app",
        &elsewhere.index_digest,
        key,
        &other_log,
    )
    .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.json");
    std::fs::write(&config, docker_config_json(&registry.host(), USER, PASS)).expect("config");
    let root = dir.path().join("trusted_root.json");
    std::fs::write(&root, sigstore.trusted_root()).expect("root");
    let entry = VerifyEntry {
        images: vec![format!("{}/team/*", registry.host())],
        keys: vec![KeySource {
            pem: Some(pem.clone()),
            file: None,
        }],
        keyless: None,
        transparency_log: Some(TransparencyLogEntry { trusted_root: root }),
    };
    let pinhook =
        TestPinhook::start_with(&registry, options(&registry, &config, Mode::Enforce, entry)).await;

    let review = pod_review(&registry, &logged.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), logged.pinned_with_tag());
    for (image, why) in [
        (&unlogged, "it carries no transparency log bundle"),
        (&elsewhere, "it was logged in no log the trusted root names"),
    ] {
        let body = pinhook
            .mutate(&pod_review(&registry, &image.reference))
            .await;
        assert_eq!(body["response"]["allowed"], false, "{}: {body}", image.tag);
        let text = message(&body);
        assert!(
            text.contains("not verified: verify[0]: signed by key sha256:"),
            "{text}"
        );
        assert!(
            text.contains("but not logged in a transparency log the entry trusts"),
            "{text}"
        );
        assert!(text.contains(why), "{text} lacks {why}");
    }
}

/// A Pod verified a moment ago is remembered whole, but only for what that verification read:
/// the same Pod in a namespace whose `regcred` does not open the registry is verified anew and
/// denied, and a policy that no longer trusts the key denies it at once. Neither may be
/// answered from what another namespace, or the policy before, found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_verified_a_moment_ago_is_remembered_only_for_its_namespace_and_policy() {
    let setup = signed_registry().await;
    let kube = FakeKube::start().await;
    let host = setup.registry.host();
    kube.add_pull_secret(DockerConfigJson, "team-a", "regcred", &host, (USER, PASS));
    kube.add_pull_secret(
        DockerConfigJson,
        "team-b",
        "regcred",
        &host,
        (USER, "not-it"),
    );
    let mut options = verifying(&setup, Mode::Enforce);
    // Each namespace's pull Secret is all there is to read the registry with.
    options.docker_config = None;
    options.secrets = Arc::new(KubeSecrets::new(kube.client(), Keyring::new()));
    let policy = options.policy.clone();
    let pinhook = TestPinhook::start_with(&setup.registry, options).await;
    let pod = |namespace: &str| {
        let mut review = fixture_with_image(
            "v1.26/pod-create-pullsecrets-mutate.json",
            &setup.registry,
            &setup.signed.pinned_with_tag(),
        );
        in_namespace(&mut review, namespace);
        review
    };

    for _ in 0..3 {
        let body = pinhook.validate(&pod("team-a")).await;
        assert_eq!(body["response"]["allowed"], true, "{body}");
    }
    let body = pinhook.validate(&pod("team-b")).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let text = message(&body);
    assert!(
        text.contains("not verified: verify[0]: the signatures of sha256:"),
        "{text}"
    );
    assert!(
        text.contains("refused the credentials (unauthorized)"),
        "{text}"
    );

    let metrics = pinhook.scrape_metrics().await;
    for line in [
        "pinhook_signature_verifications_total{outcome=\"verified\",source=\"registry\"} 1",
        "pinhook_signature_verifications_total{outcome=\"verified\",source=\"cache\"} 2",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }

    // The key rotated out: the Pod remembered a moment ago is denied at its next review.
    let (_, other_pem) = key_pair_pem();
    let mut rotated = policy;
    // (what `TestPinhook::start_with` adds to the policy it is given)
    rotated.registries.allow_private.push(host);
    rotated.verify[0].keys = vec![KeySource {
        pem: Some(other_pem),
        file: None,
    }];
    pinhook
        .policy
        .replace(rotated.compile().expect("the rotated policy compiles"));
    let body = pinhook.validate(&pod("team-a")).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let text = message(&body);
    assert!(text.contains("signed by another key"), "{text}");
}
