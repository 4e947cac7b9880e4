//! Routed resolution against a stand-in that answers per registry host: order, failures,
//! stale answers, verifySource and which credentials each mirror is asked with.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::*;
use crate::policy::Policy;
use crate::registry::testing::{digest, reference};
use crate::registry::Fingerprint;

/// What one host answers.
#[derive(Clone)]
enum Host {
    Digest(char),
    Stale(char),
    Down,
    Hangs,
    /// 404: no such tag (`MANIFEST_UNKNOWN`).
    Absent,
    /// 403 (`DENIED`).
    Forbidden,
    /// 401: no credential pinhook holds is accepted.
    Unauthorized,
}

#[derive(Default)]
struct ByHost {
    hosts: HashMap<String, Host>,
    /// (reference, credential fingerprints) of every call, in order.
    calls: Mutex<Vec<(String, Vec<Fingerprint>)>>,
}

#[async_trait]
impl Resolver for ByHost {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((
                reference.to_string(),
                credentials.iter().map(Credential::fingerprint).collect(),
            ));
        let answer = |c, source| Resolution {
            digest: digest(c),
            credential: Fingerprint::anonymous(),
            source,
            moved_from: None,
            age: Duration::ZERO,
            origin: None,
            verified: None,
        };
        match self
            .hosts
            .get(reference.domain())
            .cloned()
            .unwrap_or(Host::Down)
        {
            Host::Digest(c) => Ok(answer(c, ResolutionSource::Registry)),
            Host::Stale(c) => Ok(answer(c, ResolutionSource::Stale)),
            Host::Down => Err(RegistryError::Status {
                registry: reference.domain().to_string(),
                status: 503,
                message: "down".to_string(),
            }),
            Host::Absent => Err(RegistryError::NotFound {
                repository: reference.repository(),
                tag: reference.effective_tag().to_string(),
            }),
            Host::Forbidden => Err(RegistryError::Denied {
                registry: reference.domain().to_string(),
                repository: reference.repository(),
            }),
            Host::Unauthorized => Err(RegistryError::Unauthorized {
                registry: reference.domain().to_string(),
            }),
            Host::Hangs => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Err(RegistryError::Timeout {
                    registry: reference.domain().to_string(),
                    timeout: Duration::from_secs(3600),
                })
            }
        }
    }

    fn last_known(&self, reference: &Reference, _: &[Credential]) -> Option<Resolution> {
        self.remembered(reference)
    }
}

impl ByHost {
    /// What a cache would remember of a host that answers a digest.
    fn remembered(&self, reference: &Reference) -> Option<Resolution> {
        match self.hosts.get(reference.domain())? {
            Host::Digest(c) | Host::Stale(c) => Some(Resolution {
                digest: digest(*c),
                credential: Fingerprint::anonymous(),
                source: ResolutionSource::Stale,
                moved_from: None,
                age: Duration::from_secs(30),
                origin: None,
                verified: None,
            }),
            _ => None,
        }
    }

    fn new(hosts: &[(&str, Host)]) -> ByHost {
        ByHost {
            hosts: hosts
                .iter()
                .map(|(h, a)| (h.to_string(), a.clone()))
                .collect(),
            calls: Mutex::default(),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(r, _)| r.clone())
            .collect()
    }
}

const POLICY: &str = r#"
registries:
  resolveThrough:
    - source: source.example/team
      mirrors:
        - location: first.example/copy
        - location: second.example
"#;

fn call_for(
    policy: &str,
    image: &str,
    pod: &Keyring,
) -> Result<RoutedCall, Box<dyn std::error::Error>> {
    let compiled = Policy::parse(policy)?;
    let source = reference(image);
    let route = compiled.routes.route(&source).ok_or("not routed")?;
    let mut warnings = Vec::new();
    let call = RoutedCall::new(&source, &route, pod, &MirrorKeyrings::new(), &mut warnings);
    assert!(warnings.is_empty(), "{warnings:?}");
    Ok(call)
}

fn verified(policy: &str) -> String {
    verified_as(policy, "true")
}

fn verified_as(policy: &str, setting: &str) -> String {
    policy.replace(
        "    - source: source.example/team\n",
        &format!("    - source: source.example/team\n      verifySource: {setting}\n"),
    )
}

#[tokio::test]
async fn the_first_mirror_that_answers_decides_and_is_the_origin(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = ByHost::new(&[
        ("first.example", Host::Down),
        ("second.example", Host::Digest('b')),
    ]);
    let call = call_for(POLICY, "source.example/team/app:1.0", &Keyring::new())?;
    let resolution = resolve_routed(&registry, &call, None).await?;
    assert_eq!(resolution.digest, digest('b'));
    assert_eq!(
        resolution.origin,
        Some(Origin {
            mirror: "second.example".to_string(),
            source_check: SourceCheck::NotAsked
        })
    );
    assert_eq!(
        registry.asked(),
        ["first.example/copy/app:1.0", "second.example/app:1.0"]
    );
    Ok(())
}

#[tokio::test]
async fn the_source_is_never_asked_without_verify_source() -> Result<(), Box<dyn std::error::Error>>
{
    let registry = ByHost::new(&[
        ("first.example", Host::Digest('a')),
        ("source.example", Host::Digest('a')),
    ]);
    let call = call_for(POLICY, "source.example/team/app:1.0", &Keyring::new())?;
    resolve_routed(&registry, &call, None).await?;
    assert_eq!(registry.asked(), ["first.example/copy/app:1.0"]);
    Ok(())
}

#[tokio::test]
async fn every_mirror_failing_names_each_failure() -> Result<(), Box<dyn std::error::Error>> {
    let registry = ByHost::new(&[("source.example", Host::Digest('a'))]);
    let call = call_for(POLICY, "source.example/team/app:1.0", &Keyring::new())?;
    let error = match resolve_routed(&registry, &call, None).await {
        Err(e) => e,
        Ok(r) => return Err(format!("resolved: {r:?}").into()),
    };
    assert_eq!(
        error.to_string(),
        "no mirror answered for source.example/team/app:1.0: first.example/copy: registry \
         first.example answered HTTP 503: down; second.example: registry second.example \
         answered HTTP 503: down"
    );
    assert_eq!(error.kind(), "mirrors_failed");
    Ok(())
}

#[tokio::test]
async fn a_stale_first_mirror_gives_way_to_a_fresh_second() -> Result<(), Box<dyn std::error::Error>>
{
    let registry = ByHost::new(&[
        ("first.example", Host::Stale('a')),
        ("second.example", Host::Digest('b')),
    ]);
    let call = call_for(POLICY, "source.example/team/app:1.0", &Keyring::new())?;
    assert_eq!(
        resolve_routed(&registry, &call, None).await?.digest,
        digest('b')
    );
    let registry = ByHost::new(&[("first.example", Host::Stale('a'))]);
    let resolution = resolve_routed(&registry, &call, None).await?;
    assert_eq!(
        (resolution.digest, resolution.source),
        (digest('a'), ResolutionSource::Stale)
    );
    Ok(())
}

#[tokio::test]
async fn verify_source_denies_a_disagreement_naming_both_digests(
) -> Result<(), Box<dyn std::error::Error>> {
    let registry = ByHost::new(&[
        ("first.example", Host::Digest('a')),
        ("source.example", Host::Digest('f')),
    ]);
    let call = call_for(
        &verified(POLICY),
        "source.example/team/app:1.0",
        &Keyring::new(),
    )?;
    let error = match resolve_routed(&registry, &call, None).await {
        Err(e) => e,
        Ok(r) => return Err(format!("resolved: {r:?}").into()),
    };
    let text = error.to_string();
    assert!(
        text.contains(&digest('a').to_string()) && text.contains(&digest('f').to_string()),
        "{text}"
    );
    assert!(
        text.starts_with("mirror first.example/copy says source.example/team/app:1.0 is"),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn verify_source_agrees_or_is_unanswered() -> Result<(), Box<dyn std::error::Error>> {
    let call = call_for(
        &verified(POLICY),
        "source.example/team/app:1.0",
        &Keyring::new(),
    )?;
    let check = |r: Resolution| r.origin.map(|o| o.source_check);
    let agreeing = ByHost::new(&[
        ("first.example", Host::Digest('a')),
        ("source.example", Host::Digest('a')),
    ]);
    assert_eq!(
        check(resolve_routed(&agreeing, &call, None).await?),
        Some(SourceCheck::Agreed)
    );
    let down = ByHost::new(&[("first.example", Host::Digest('a'))]);
    assert_eq!(
        check(resolve_routed(&down, &call, None).await?),
        Some(SourceCheck::Unanswered)
    );
    let stale = ByHost::new(&[
        ("first.example", Host::Digest('a')),
        ("source.example", Host::Stale('f')),
    ]);
    assert_eq!(
        check(resolve_routed(&stale, &call, None).await?),
        Some(SourceCheck::Unanswered)
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_hanging_source_costs_only_its_deadline() -> Result<(), Box<dyn std::error::Error>> {
    let call = call_for(
        &verified(POLICY),
        "source.example/team/app:1.0",
        &Keyring::new(),
    )?;
    let hanging = ByHost::new(&[
        ("first.example", Host::Digest('a')),
        ("source.example", Host::Hangs),
    ]);
    let started = Instant::now();
    let resolution =
        resolve_routed(&hanging, &call, Some(started + Duration::from_secs(2))).await?;
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(
        resolution.origin.map(|o| o.source_check),
        Some(SourceCheck::Unanswered)
    );
    Ok(())
}

#[tokio::test]
async fn pod_credentials_are_matched_against_the_mirror_host_then_the_mirror_file(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("config.json");
    // `first.example:user2:pass2`, and a key for another host that must not be used.
    std::fs::write(
        &file,
        r#"{"auths": {"first.example": {"auth": "dXNlcjI6cGFzczI="}, "source.example": {"auth": "eDp5"}}}"#,
    )?;
    let policy = format!(
        "registries:\n  resolveThrough:\n    - source: source.example/team\n      mirrors:\n        - location: first.example/copy\n          credentials: {}\n",
        file.display()
    );
    let mut pod = Keyring::new();
    pod.add("source.example", Credential::basic("source-user", "s"));
    pod.add("first.example/copy", Credential::basic("pod-user", "p"));
    let call = call_for(&policy, "source.example/team/app:1.0", &pod)?;
    assert_eq!(
        call.mirrors[0].credentials,
        [
            Credential::basic("pod-user", "p"),
            Credential::basic("user2", "pass2")
        ]
    );
    assert_eq!(
        call.source_credentials,
        [Credential::basic("source-user", "s")]
    );
    Ok(())
}

#[test]
fn an_unreadable_credentials_file_is_a_warning() -> Result<(), Box<dyn std::error::Error>> {
    let policy = "registries:\n  resolveThrough:\n    - source: source.example\n      mirrors:\n        - {location: first.example, credentials: /nonexistent/pinhook/config.json}\n";
    let compiled = Policy::parse(policy)?;
    let source = reference("source.example/app:1");
    let route = compiled.routes.route(&source).ok_or("not routed")?;
    let mut warnings = Vec::new();
    let call = RoutedCall::new(
        &source,
        &route,
        &Keyring::new(),
        &MirrorKeyrings::new(),
        &mut warnings,
    );
    assert!(call.mirrors[0].credentials.is_empty());
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with(
            "pinhook: mirror first.example credentials unusable: cannot read /nonexistent"
        ),
        "{warnings:?}"
    );
    Ok(())
}

#[tokio::test]
async fn last_known_comes_from_the_mirrors_in_order() -> Result<(), Box<dyn std::error::Error>> {
    let registry = ByHost::new(&[]);
    let call = call_for(POLICY, "source.example/team/app:1.0", &Keyring::new())?;
    assert!(last_known_routed(&registry, &call).is_none());
    Ok(())
}

/// Issue 43: a mirror never outvotes its source. A source that is up and answers that the tag
/// does not exist (404 `MANIFEST_UNKNOWN`) or refuses it (403) contradicts the mirror that holds
/// it: denied, naming the mirror, its digest and the source's words, under `true` and
/// `required` alike. (Before, such an answer counted as "unanswered" and the mirror's digest was
/// pinned: a poisoned mirror could invent tags.)
#[tokio::test]
async fn a_source_that_says_the_tag_does_not_exist_outvotes_the_mirror(
) -> Result<(), Box<dyn std::error::Error>> {
    for setting in ["true", "required"] {
        let call = call_for(
            &verified_as(POLICY, setting),
            "source.example/team/app:1.0",
            &Keyring::new(),
        )?;
        for (source, says) in [
            (Host::Absent, "tag 1.0 not found in source.example/team/app"),
            (Host::Forbidden, "registry source.example denied access"),
        ] {
            let registry = ByHost::new(&[
                ("first.example", Host::Digest('a')),
                ("source.example", source),
            ]);
            let error = match resolve_routed(&registry, &call, None).await {
                Err(e) => e,
                Ok(r) => return Err(format!("{setting}: pinned the mirror's {r:?}").into()),
            };
            let text = error.to_string();
            assert!(
                matches!(error, RegistryError::SourceRefutes { .. }),
                "{setting}: {text}"
            );
            assert!(
                text.starts_with(&format!(
                    "mirror first.example/copy says source.example/team/app:1.0 is {} but its source says: {says}",
                    digest('a')
                )),
                "{setting}: {text}"
            );
            assert_eq!(error.kind(), "mirror_disagrees");
        }
    }
    Ok(())
}

/// `verifySource: true` keeps the disconnected case: a source that gives no answer (down, a
/// 401 for want of credentials, only a cached answer) leaves the mirror's digest unverified.
/// `required` denies it, and no last known digest stands in for it.
#[tokio::test]
async fn required_denies_what_the_source_does_not_confirm() -> Result<(), Box<dyn std::error::Error>>
{
    let if_answered = call_for(
        &verified(POLICY),
        "source.example/team/app:1.0",
        &Keyring::new(),
    )?;
    let required = call_for(
        &verified_as(POLICY, "required"),
        "source.example/team/app:1.0",
        &Keyring::new(),
    )?;
    for (name, source) in [
        ("down", Host::Down),
        ("unauthorized", Host::Unauthorized),
        ("stale", Host::Stale('a')),
    ] {
        let registry = ByHost::new(&[
            ("first.example", Host::Digest('a')),
            ("source.example", source),
        ]);
        let resolution = resolve_routed(&registry, &if_answered, None).await?;
        assert_eq!(
            resolution.origin.map(|o| o.source_check),
            Some(SourceCheck::Unanswered),
            "{name}"
        );
        let error = match resolve_routed(&registry, &required, None).await {
            Err(e) => e,
            Ok(r) => return Err(format!("{name}: pinned unconfirmed {r:?}").into()),
        };
        assert!(
            matches!(error, RegistryError::SourceUnconfirmed { .. }),
            "{name}: {error}"
        );
        assert!(
            error
                .to_string()
                .contains("its source did not confirm it (verifySource: required)"),
            "{name}: {error}"
        );
        assert_eq!(error.kind(), "source_unconfirmed");
    }
    let agreeing = ByHost::new(&[
        ("first.example", Host::Digest('a')),
        ("source.example", Host::Digest('a')),
    ]);
    assert_eq!(
        resolve_routed(&agreeing, &required, None)
            .await?
            .origin
            .map(|o| o.source_check),
        Some(SourceCheck::Agreed)
    );
    // Out of time, a last known digest of the mirror's may stand in, unless required.
    assert_eq!(
        last_known_routed(&agreeing, &if_answered).map(|r| r.digest),
        Some(digest('a'))
    );
    assert!(last_known_routed(&agreeing, &required).is_none());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn required_denies_a_source_that_hangs_past_its_deadline(
) -> Result<(), Box<dyn std::error::Error>> {
    let call = call_for(
        &verified_as(POLICY, "required"),
        "source.example/team/app:1.0",
        &Keyring::new(),
    )?;
    let hanging = ByHost::new(&[
        ("first.example", Host::Digest('a')),
        ("source.example", Host::Hangs),
    ]);
    let started = Instant::now();
    let answer = resolve_routed(&hanging, &call, Some(started + Duration::from_secs(2))).await;
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    match answer {
        Err(RegistryError::SourceUnconfirmed { why, .. }) => {
            assert_eq!(why, "it did not answer in time");
        }
        other => return Err(format!("{other:?}").into()),
    }
    Ok(())
}

/// A signature verifier answering per registry host: `Some(true)` verified, `Some(false)` no
/// signature, `None` down; it records the hosts asked.
struct SignaturesByHost {
    hosts: HashMap<&'static str, Option<bool>>,
    asked: Mutex<Vec<String>>,
}

#[async_trait]
impl SignatureVerifier for SignaturesByHost {
    async fn verify(
        &self,
        image: &Reference,
        _digest: &Digest,
        _credentials: &[Credential],
        _trust: &Arc<Trust>,
    ) -> Result<Verdict, RegistryError> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(image.domain().to_string());
        match self.hosts.get(image.domain()).copied().flatten() {
            Some(true) => Ok(Verdict::Verified {
                signer: "key k".into(),
            }),
            Some(false) => Ok(Verdict::NoSignature),
            None => Err(RegistryError::Timeout {
                registry: image.domain().to_string(),
                timeout: Duration::ZERO,
            }),
        }
    }
}

/// Issue 46: a routed image's signatures are asked at its mirrors in order (then at the source
/// under `verifySource`): the first `verified` wins, else the first verdict, else the first
/// error; the source is not asked otherwise.
#[tokio::test]
async fn a_routed_images_signatures_are_asked_at_its_mirrors_in_order(
) -> Result<(), Box<dyn std::error::Error>> {
    let trust = Arc::new(Trust::of_keys(Vec::new()));
    let ask = |hosts: &[(&'static str, Option<bool>)], policy: &str| {
        let verifier = SignaturesByHost {
            hosts: hosts.iter().copied().collect(),
            asked: Mutex::default(),
        };
        let call = call_for(policy, "source.example/team/app:1.0", &Keyring::new());
        let trust = trust.clone();
        async move {
            let call = call.map_err(|e| e.to_string())?;
            let verdict = verify_routed(&verifier, &call, &digest('a'), &trust).await;
            let asked = verifier
                .asked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            Ok::<_, String>((verdict, asked))
        }
    };
    let (verdict, asked) = ask(
        &[
            ("first.example", Some(false)),
            ("second.example", Some(true)),
        ],
        POLICY,
    )
    .await?;
    assert_eq!(verdict?.reason(), "verified");
    assert_eq!(asked, ["first.example", "second.example"]);
    let (verdict, asked) = ask(&[("first.example", Some(true))], POLICY).await?;
    assert_eq!(verdict?.reason(), "verified");
    assert_eq!(asked, ["first.example"], "the first verified decides");
    let (verdict, _) = ask(&[("second.example", Some(false))], POLICY).await?;
    assert_eq!(
        verdict?.reason(),
        "no_signature",
        "a verdict outweighs a failure"
    );
    let (verdict, asked) = ask(&[], POLICY).await?;
    assert!(verdict.is_err(), "every mirror down: the first error");
    assert_eq!(
        asked,
        ["first.example", "second.example"],
        "the source is not asked"
    );
    let (verdict, asked) = ask(&[("source.example", Some(true))], &verified(POLICY)).await?;
    assert_eq!(verdict?.reason(), "verified");
    assert_eq!(asked, ["first.example", "second.example", "source.example"]);
    Ok(())
}
