//! `registries.resolveThrough` (issue 28) against real registries over TLS: a source registry
//! that is stopped (a disconnected cluster) and mirrors holding its content. The tag is
//! resolved at the mirrors in order, the pin keeps the source's name, the origin is in the
//! audit annotations and the metrics; `verifySource` denies a mirror that disagrees with its
//! source, naming both digests, or whose source says there is no such tag (issue 43), and
//! `verifySource: required` one whose source does not answer; pull credentials are matched to
//! the mirror's host.

use std::sync::Arc;

use crate::common::fake_kube::FakeKube;
use crate::common::fake_kube::PullSecretFormat::DockerConfigJson;
use crate::common::images;
use crate::common::pinhook::{apply_response, Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry, Transport};
use crate::common::requests::{fixture_with_image, in_namespace, message, pod_review};
use crate::common::tls::TestCa;
use pinhook::policy::{MirrorSettings, Policy, ResolveThrough, VerifySource};
use pinhook::registry::keyring::Keyring;
use pinhook::registry::pull_secrets::KubeSecrets;
use serde_json::Value;

const USER: &str = "mirror-puller";
const PASS: &str = "mirror-pass";

/// Registries sharing one CA (pinhook trusts it for all of them); the CA's directory lives as
/// long as the registries.
struct Registries {
    _ca_dir: tempfile::TempDir,
    started: Vec<TestRegistry>,
}

impl Registries {
    /// The first two: the source and its mirror.
    fn pair(&self) -> (&TestRegistry, &TestRegistry) {
        match &self.started[..] {
            [source, mirror, ..] => (source, mirror),
            _ => panic!("at least two registries"),
        }
    }
}

/// The `resolved-at-mirror-1` audit annotation of a /mutate answer ("" when absent).
fn mirror_annotation(body: &Value) -> &str {
    body["response"]["auditAnnotations"]["resolved-at-mirror-1"]
        .as_str()
        .unwrap_or_default()
}

async fn registries(auths: Vec<RegistryAuth>) -> Registries {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Arc::new(TestCa::generate(dir.path()));
    let mut started = Vec::new();
    for auth in auths {
        started.push(TestRegistry::start_with(auth, Transport::Https, Some(ca.clone())).await);
    }
    Registries {
        _ca_dir: dir,
        started,
    }
}

/// A policy routing `source/team` through each of `mirrors` (`…/team`), in order.
fn policy(source: &TestRegistry, mirrors: &[&TestRegistry], verify_source: VerifySource) -> Policy {
    Policy {
        registries: pinhook::policy::Registries {
            allow_private: mirrors.iter().map(|m| m.host()).collect(),
            resolve_through: vec![ResolveThrough {
                source: format!("{}/team", source.host()),
                mirrors: mirrors
                    .iter()
                    .map(|m| MirrorSettings {
                        location: format!("{}/team", m.host()),
                        ..MirrorSettings::default()
                    })
                    .collect(),
                verify_source,
            }],
            ..pinhook::policy::Registries::default()
        },
        ..Policy::default()
    }
}

async fn pinhook(source: &TestRegistry, policy: Policy) -> TestPinhook {
    let options = Options {
        policy,
        ..Options::default()
    };
    TestPinhook::start_with(source, options).await
}

fn image_after(review: &Value, body: &Value) -> String {
    let object = apply_response(review, body);
    object["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_stopped_source_is_pinned_through_its_mirror_under_its_own_name() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::None]).await;
    let (source, mirror) = all.pair();
    let at_source = images::push_multi_arch(source, "team/app", "1.0", "same").await;
    let at_mirror = images::push_multi_arch(mirror, "team/app", "1.0", "same").await;
    assert_eq!(at_source.index_digest, at_mirror.index_digest);
    source.stop();
    let pinhook = pinhook(source, policy(source, &[mirror], VerifySource::Off)).await;

    let review = pod_review(source, &at_source.reference);
    let body = pinhook.mutate(&review).await;

    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), at_source.pinned_with_tag());
    let annotation = &body["response"]["auditAnnotations"]["resolved-at-mirror-1"];
    assert_eq!(
        annotation.as_str(),
        Some(
            format!(
                "{} at {}/team (source not asked)",
                at_source.reference,
                mirror.host()
            )
            .as_str()
        ),
        "{body}"
    );
    mirror.settle_access_log().await;
    assert!(mirror.count_requests_now("HEAD", "/v2/team/app/manifests/1.0") >= 1);
    let metrics = pinhook.scrape_metrics().await;
    let line = format!(
        "pinhook_mirror_resolutions_total{{mirror=\"{}/team\",source_check=\"not_asked\"}} 1",
        mirror.host()
    );
    assert!(metrics.contains(&line), "{metrics}");
}

#[tokio::test]
async fn mirrors_are_tried_in_order_a_failing_first_gives_way_to_the_second() {
    let all = registries(vec![
        RegistryAuth::None,
        RegistryAuth::None,
        RegistryAuth::None,
    ])
    .await;
    let [source, first, second] = &all.started[..] else {
        panic!("three registries")
    };
    let pushed = images::push_multi_arch(source, "team/app", "1.0", "same").await;
    images::push_multi_arch(first, "team/app", "1.0", "same").await;
    images::push_multi_arch(second, "team/app", "1.0", "same").await;
    images::push_multi_arch(second, "team/app", "2.0", "second-only").await;
    source.stop();
    let pinhook = pinhook(source, policy(source, &[first, second], VerifySource::Off)).await;

    // Both answer: the first decides and the second is never asked.
    let body = pinhook.mutate(&pod_review(source, &pushed.reference)).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    second.settle_access_log().await;
    assert_eq!(second.count_requests_now("HEAD", "/manifests/"), 0);

    // The first does not have 2.0: the second answers, and is the origin.
    let two = pushed.reference.replace(":1.0", ":2.0");
    let review = pod_review(source, &two);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(image_after(&review, &body).starts_with(&format!("{two}@sha256:")));
    let annotation = mirror_annotation(&body);
    assert!(
        annotation.contains(&format!("at {}/team", second.host())),
        "{body}"
    );

    // The first is down: the second answers 1.0, fresh, before the first's stale answer.
    first.stop();
    pinhook.resolver.expire_all();
    let body = pinhook.mutate(&pod_review(source, &pushed.reference)).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let annotation = mirror_annotation(&body);
    assert!(
        annotation.contains(&format!("at {}/team", second.host())),
        "{body}"
    );
}

#[tokio::test]
async fn every_mirror_failing_is_denied_naming_each() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::None]).await;
    let (source, mirror) = all.pair();
    let pushed = images::push_multi_arch(source, "team/app", "1.0", "same").await;
    let pinhook = pinhook(source, policy(source, &[mirror], VerifySource::Off)).await;

    // The mirror is up but has not got the tag; the source has it and is not asked.
    let body = pinhook.mutate(&pod_review(source, &pushed.reference)).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let text = message(&body);
    assert!(
        text.contains(&format!(
            "no mirror answered for {}: {}/team: tag 1.0 not found",
            pushed.reference,
            mirror.host()
        )),
        "{text}"
    );
    source.settle_access_log().await;
    assert_eq!(source.count_requests_now("HEAD", "/manifests/"), 0);
}

#[tokio::test]
async fn verify_source_denies_a_mirror_that_disagrees_naming_both_digests() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::None]).await;
    let (source, mirror) = all.pair();
    let at_source = images::push_multi_arch(source, "team/app", "1.0", "genuine").await;
    let at_mirror = images::push_multi_arch(mirror, "team/app", "1.0", "substituted").await;
    assert_ne!(at_source.index_digest, at_mirror.index_digest);
    let pinhook = pinhook(source, policy(source, &[mirror], VerifySource::IfAnswered)).await;

    let body = pinhook
        .mutate(&pod_review(source, &at_source.reference))
        .await;

    assert_eq!(body["response"]["allowed"], false, "{body}");
    let text = message(&body);
    assert!(
        text.contains(&at_source.index_digest) && text.contains(&at_mirror.index_digest),
        "{text}"
    );
    assert!(
        text.contains(&format!("mirror {}/team says", mirror.host())),
        "{text}"
    );
    let metrics = pinhook.scrape_metrics().await;
    assert!(
        metrics.contains(&format!(
            "pinhook_mirror_resolutions_total{{mirror=\"{}/team\",source_check=\"disagreed\"}} 1",
            mirror.host()
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "pinhook_policy_violations_total{mode=\"enforce\",reason=\"mirror_disagrees\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn verify_source_agrees_and_a_stopped_source_leaves_the_digest_unverified() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::None]).await;
    let (source, mirror) = all.pair();
    let pushed = images::push_multi_arch(source, "team/app", "1.0", "same").await;
    images::push_multi_arch(mirror, "team/app", "1.0", "same").await;
    let pinhook = pinhook(source, policy(source, &[mirror], VerifySource::IfAnswered)).await;

    let review = pod_review(source, &pushed.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(
        image_after(&review, &body),
        pushed.pinned_with_tag(),
        "{body}"
    );
    let annotation = mirror_annotation(&body);
    assert!(annotation.ends_with("(source agreed)"), "{body}");

    source.stop();
    pinhook.resolver.expire_all();
    let body = pinhook.mutate(&review).await;
    assert_eq!(
        image_after(&review, &body),
        pushed.pinned_with_tag(),
        "{body}"
    );
    let annotation = mirror_annotation(&body);
    assert!(annotation.ends_with("(source unanswered)"), "{body}");
}

/// Issue 43: a mirror never outvotes its source. The source is up and has no such tag; the
/// mirror holds one. Before, the source's 404 counted as "unanswered" and the mirror's digest
/// was pinned (a poisoned mirror could invent tags); now it is denied, naming the mirror and
/// what the source said, whatever `onResolutionFailure` says.
#[tokio::test]
async fn verify_source_denies_a_tag_the_source_says_does_not_exist() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::None]).await;
    let (source, mirror) = all.pair();
    images::push_multi_arch(source, "team/app", "2.0", "genuine").await;
    let invented = images::push_multi_arch(mirror, "team/app", "1.0", "invented").await;
    let mut settings = policy(source, &[mirror], VerifySource::IfAnswered);
    settings.on_resolution_failure = pinhook::policy::FailureAction::Allow;
    let pinhook = pinhook(source, settings).await;
    let reference = format!("{}/team/app:1.0", source.host());

    let body = pinhook.mutate(&pod_review(source, &reference)).await;

    assert_eq!(body["response"]["allowed"], false, "{body}");
    let text = message(&body);
    assert!(
        text.contains(&format!(
            "mirror {}/team says {reference} is {} but its source says: tag 1.0 not found",
            mirror.host(),
            invented.index_digest
        )),
        "{text}"
    );
    let metrics = pinhook.scrape_metrics().await;
    assert!(
        metrics.contains(
            "pinhook_policy_violations_total{mode=\"enforce\",reason=\"mirror_disagrees\"} 1"
        ),
        "{metrics}"
    );
}

/// `verifySource: required`: a source that does not answer (stopped) denies too, where `true`
/// pins the mirror's digest unverified.
#[tokio::test]
async fn verify_source_required_denies_when_the_source_does_not_answer() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::None]).await;
    let (source, mirror) = all.pair();
    let pushed = images::push_multi_arch(source, "team/app", "1.0", "same").await;
    images::push_multi_arch(mirror, "team/app", "1.0", "same").await;
    let pinhook = pinhook(source, policy(source, &[mirror], VerifySource::Required)).await;
    let review = pod_review(source, &pushed.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(
        image_after(&review, &body),
        pushed.pinned_with_tag(),
        "agreed: {body}"
    );

    source.stop();
    pinhook.resolver.expire_all();
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let text = message(&body);
    assert!(
        text.contains("but its source did not confirm it (verifySource: required)"),
        "{text}"
    );
}

#[tokio::test]
async fn the_pods_pull_secret_for_the_mirror_host_is_used_at_the_mirror() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::htpasswd(USER, PASS)]).await;
    let (source, mirror) = all.pair();
    let pushed = images::push_multi_arch(source, "team/app", "1.0", "same").await;
    images::push_multi_arch(mirror, "team/app", "1.0", "same").await;
    source.stop();
    let kube = FakeKube::start().await;
    // The secret names the mirror's host, not the source's: as kubelet matches it when the
    // runtime pulls from the mirror.
    kube.add_pull_secret(
        DockerConfigJson,
        "team-a",
        "regcred",
        &mirror.host(),
        (USER, PASS),
    );
    let options = Options {
        policy: policy(source, &[mirror], VerifySource::Off),
        secrets: Arc::new(KubeSecrets::new(kube.client(), Keyring::new())),
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(source, options).await;

    let mut review = fixture_with_image(
        "v1.26/pod-create-pullsecrets-mutate.json",
        source,
        &pushed.reference,
    );
    in_namespace(&mut review, "team-a");
    let body = pinhook.mutate(&review).await;
    assert_eq!(
        image_after(&review, &body),
        pushed.pinned_with_tag(),
        "{body}"
    );

    // Without the secret the mirror refuses, and nothing is pinned.
    let mut review = pod_review(source, &pushed.reference);
    in_namespace(&mut review, "team-b");
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(message(&body).contains("unauthorized"), "{body}");
}

#[tokio::test]
async fn the_policys_mirror_credentials_file_is_used_after_the_pods() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::htpasswd(USER, PASS)]).await;
    let (source, mirror) = all.pair();
    let pushed = images::push_multi_arch(source, "team/app", "1.0", "same").await;
    images::push_multi_arch(mirror, "team/app", "1.0", "same").await;
    source.stop();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config.json");
    let auth = base64_basic(USER, PASS);
    std::fs::write(
        &file,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            mirror.host()
        ),
    )
    .expect("write credentials");
    let mut policy = policy(source, &[mirror], VerifySource::Off);
    policy.registries.resolve_through[0].mirrors[0].credentials = Some(file);
    let pinhook = pinhook(source, policy).await;

    let review = pod_review(source, &pushed.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(
        image_after(&review, &body),
        pushed.pinned_with_tag(),
        "{body}"
    );
}

fn base64_basic(user: &str, pass: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}

/// Issue 46: an image routed through a mirror has its signatures asked there, with the
/// mirror's credentials, as its tag was: with the source stopped (an air-gapped cluster), the
/// mirror's signed image is pinned and verified; its unsigned one is denied, saying so.
#[tokio::test]
async fn a_routed_images_signatures_are_verified_at_its_mirror() {
    let all = registries(vec![RegistryAuth::None, RegistryAuth::None]).await;
    let (source, mirror) = all.pair();
    let signed = images::push_multi_arch(mirror, "team/app", "1.0", "signed").await;
    let unsigned = images::push_multi_arch(mirror, "team/app", "2.0", "unsigned").await;
    let (signer, pem) = crate::common::signing::key_pair_pem();
    crate::common::signing::sign(mirror, "team/app", &signed.index_digest, &signer).await;
    source.stop();
    let mut policy = policy(source, &[mirror], VerifySource::Off);
    policy.mode = pinhook::policy::Mode::Enforce;
    policy.verify = vec![pinhook::policy::VerifyEntry {
        images: vec![format!("{}/team/*", source.host())],
        keys: vec![pinhook::policy::KeySource {
            pem: Some(pem),
            file: None,
        }],
        keyless: None,
        transparency_log: None,
    }];
    let pinhook = pinhook(source, policy).await;

    let image = format!("{}/team/app:1.0", source.host());
    let review = pod_review(source, &image);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(
        image_after(&review, &body),
        format!("{image}@{}", signed.index_digest)
    );
    mirror.settle_access_log().await;
    let signature_tag = format!(
        "/v2/team/app/manifests/{}.sig",
        signed.index_digest.replacen(':', "-", 1)
    );
    assert!(mirror.count_requests_now("GET", &signature_tag) >= 1);

    let body = pinhook
        .mutate(&pod_review(
            source,
            &format!("{}/team/app:2.0", source.host()),
        ))
        .await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let text = message(&body);
    assert!(
        text.contains(&format!(
            "not verified: verify[0]: no signature found for {}",
            &unsigned.index_digest[..19]
        )),
        "{text}"
    );
}
