//! Verified Pods, remembered (issue 46, item 6): every Pod of a pinned workload comes to
//! `/validate` with its digests written, and nothing of a resolution is there to keep a
//! verification beside. A Pod the same as one this replica verified a moment ago is answered
//! with what that verification found, in one lookup: its pull credentials are not read again,
//! nor the verdict cache asked, nor its checks worked out.
//!
//! "The same" is everything the verification read, in the key: the policy's generation, the
//! namespace (the request's), the Pod's pull Secret names (what its credentials are read by),
//! its ServiceAccount when a credential plugin is handed the account's token, and each image
//! site in order (new or not, what the plan did with it, its reference and digest: what a
//! plugin or helper is asked about). Only a Pod whose new images all carry their digests is
//! remembered, and only when every check verified, with no warning and no routed image. It is
//! kept until the earliest of its verdicts' own expiries and at most [`OBJECT_TTL`], what a
//! read Secret answers for before it is read again: a pull Secret rotated or removed, or a
//! plugin's answer renewed, keys the verdicts anew within that much more than the verdict cache
//! alone takes. Never for a dry run, nor through another resolver than pinhook's, nor for a
//! review that read the credentials for its tags (what they say now stands), nor for a Pod
//! with nothing to verify (it would save no verification, only take a slot), nor when the pull
//! credentials' source cannot say its keyring is a function of these
//! ([`PullSecrets::keyring_by_names`]).
//!
//! Never: decides. What it gives back is what the verification it remembers gave.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::super::plan::{Action, Plan, SignatureNote};
use super::Target;
use crate::policy::{CompiledPolicy, Mode};
use crate::reference::Reference;
use crate::registry::pull_secrets::{account_of, PullSecrets, MAX_PULL_SECRETS, OBJECT_TTL};
use crate::registry::Signers;
use crate::weight::weight;

/// Bytes the remembered Pods may hold by the weigher, keys included.
pub const VERIFIED_PODS_BYTES: u64 = 256 << 10;
/// What the memory model counts for them: four times what the weigher counts (moka's own
/// entry, the allocator's rounding); not measured on its own.
pub const VERIFIED_PODS_RSS_BYTES: u64 = 4 * VERIFIED_PODS_BYTES;
/// The least an entry weighs, whatever its key: at most 512 remembered Pods.
const ENTRY_SHARE: usize = 512;

/// What a verification of one Pod found: the note of each image site a `verify` entry
/// covered (an index into the plan's outcomes), how many verdicts it took (what the metric
/// counts as verified from a cache), and until when it stands.
#[derive(Debug)]
pub(super) struct Remembered {
    notes: Vec<(usize, Signers)>,
    verdicts: usize,
    until: Instant,
}

/// The remembered Pods of this replica.
pub(super) struct VerifiedPods {
    memo: moka::sync::Cache<Vec<u8>, Arc<Remembered>>,
}

impl VerifiedPods {
    pub(super) fn new() -> VerifiedPods {
        VerifiedPods {
            memo: moka::sync::Cache::builder()
                .max_capacity(VERIFIED_PODS_BYTES)
                .time_to_live(OBJECT_TTL)
                .weigher(|key: &Vec<u8>, remembered: &Arc<Remembered>| {
                    let notes = remembered.notes.len() * 64;
                    weight(
                        (key.len() + notes).max(ENTRY_SHARE),
                        VERIFIED_PODS_BYTES,
                        512,
                    )
                })
                .build(),
        }
    }

    /// What this Pod's verification found, if one of its very shape was remembered and still
    /// stands: each covered site's note set in `plan`; the verdicts it took returned.
    pub(super) fn answer(&self, key: &[u8], plan: &mut Plan) -> Option<usize> {
        let remembered = self.memo.get(key)?;
        let fits = (remembered.notes.iter()).all(|(at, _)| *at < plan.outcomes.len());
        if Instant::now() >= remembered.until || !fits {
            return None;
        }
        for (at, signers) in &remembered.notes {
            if let Some(outcome) = plan.outcomes.get_mut(*at) {
                outcome.signature = Some(SignatureNote::Verified(signers.clone()));
            }
        }
        Some(remembered.verdicts)
    }

    /// Remembers what `plan`'s verification found, when every note it carries says verified:
    /// `verdicts` it took, standing until `until` (at most [`OBJECT_TTL`] from now).
    pub(super) fn remember(&self, mut key: Vec<u8>, plan: &Plan, verdicts: usize, until: Instant) {
        let mut notes = Vec::new();
        for (at, outcome) in plan.outcomes.iter().enumerate() {
            match &outcome.signature {
                Some(SignatureNote::Verified(signers)) => notes.push((at, signers.clone())),
                Some(SignatureNote::Refused(_)) => return,
                None => {}
            }
        }
        let until = until.min(Instant::now() + OBJECT_TTL);
        // (what the weigher counts is what is held)
        key.shrink_to_fit();
        self.memo.insert(
            key,
            Arc::new(Remembered {
                notes,
                verdicts,
                until,
            }),
        );
    }
}

/// The key of `target`'s verification under `policy`, when it may be remembered: a Pod (not
/// a template, not a subresource) whose new images all carry their digests, nothing routed,
/// its keyring a function of what the key holds; `None` otherwise.
pub(super) fn key(
    policy: &CompiledPolicy,
    target: &Target<'_>,
    plan: &Plan,
    secrets: &dyn PullSecrets,
) -> Option<Vec<u8>> {
    let view = &target.view;
    let pod = view.group.is_empty() && view.kind == "Pod" && view.subresource.is_empty();
    if !pod || target.dry_run || target.resolver.is_some() || plan.mode == Mode::Off {
        return None;
    }
    if !secrets.keyring_by_names() {
        return None;
    }
    let spec = view.object.get("spec")?;
    let mut key = Vec::with_capacity(256);
    key.extend_from_slice(&policy.generation().to_le_bytes());
    put(&mut key, Some(view.namespace));
    // (a Pod's pull secret names are its keyring's, as kubelet reads them; its ServiceAccount
    // names a credential only to a plugin handed its token)
    if secrets.hands_tokens() {
        put(&mut key, account_of(spec, false));
    }
    let entries = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if entries.len() > MAX_PULL_SECRETS {
        return None;
    }
    key.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for entry in entries {
        put(&mut key, entry.get("name").and_then(Value::as_str));
    }
    key.extend_from_slice(&(plan.outcomes.len() as u32).to_le_bytes());
    for outcome in &plan.outcomes {
        let plain = outcome.verified.is_none()
            && outcome.origin.is_none()
            && outcome.violation.is_none()
            && outcome.signature.is_none();
        let carried = !outcome.site.is_new
            || (outcome.action == Action::Unchanged
                && outcome
                    .parsed
                    .as_ref()
                    .is_some_and(|p| p.digest().is_some()));
        let routed = (outcome.parsed.as_ref()).is_some_and(|p| policy.routes.route(p).is_some());
        if !(plain && carried) || routed {
            return None;
        }
        key.push(u8::from(outcome.site.is_new));
        key.push(outcome.action as u8);
        put(&mut key, Some(&outcome.site.image));
        // (the digest checked: the one the image carries, written in it, unless the plan
        // says another)
        let written = outcome.parsed.as_ref().and_then(Reference::digest);
        match &outcome.digest {
            Some(digest) if Some(digest) != written => {
                key.push(digest.algorithm() as u8 + 1);
                put(&mut key, Some(digest.hex()));
            }
            _ => key.push(0),
        }
    }
    Some(key)
}

/// Writes `text` length first (`u32::MAX` for none), so no two keys read alike.
fn put(key: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) => {
            key.extend_from_slice(&(text.len() as u32).to_le_bytes());
            key.extend_from_slice(text.as_bytes());
        }
        None => key.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;
    use serde_json::json;

    use super::super::super::plan::Action;
    use super::super::tests::{created_pod, parts};
    use super::super::{Pinner, PinnerParts};
    use super::*;
    use crate::policy::{Policy, PolicyHandle};
    use crate::reference::Digest;
    use crate::registry::pull_secrets::{PodContext, PodKeyring};
    use crate::registry::testing::Scripted;
    use crate::registry::{Credential, RegistryError, SignatureVerifier};
    use crate::signatures::key::tests::key_pair;
    use crate::signatures::{Trust, Verdict};

    const SIGNED: &str = "registry.example/team/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const OTHER: &str = "registry.example/team/app@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const UNSIGNED: &str = "registry.example/team/unsigned@sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    /// Verifies every repository but `unsigned` (signed by another key there), holding
    /// nothing, each `verified` verdict kept `until`; counts what it is asked, and the
    /// verdicts counted as answered from a cache.
    struct Tally {
        asked: AtomicUsize,
        kept: AtomicUsize,
        until: Duration,
    }

    impl Tally {
        fn new(until: Duration) -> Arc<Tally> {
            Arc::new(Tally {
                asked: AtomicUsize::new(0),
                kept: AtomicUsize::new(0),
                until,
            })
        }

        fn asked(&self) -> usize {
            self.asked.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl SignatureVerifier for Tally {
        async fn verify(
            &self,
            image: &Reference,
            _: &Digest,
            _: &[Credential],
            _: &Arc<Trust>,
        ) -> Result<Verdict, RegistryError> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Ok(match image.path().contains("unsigned") {
                true => Verdict::OtherKey,
                false => Verdict::Verified {
                    signer: "key tallied".into(),
                },
            })
        }

        async fn verified_until(
            &self,
            _: &Reference,
            _: &Digest,
            _: &[Credential],
            _: &Arc<Trust>,
        ) -> Option<Instant> {
            Some(Instant::now() + self.until)
        }

        fn count_kept(&self, verdicts: usize) {
            self.kept.fetch_add(verdicts, Ordering::SeqCst);
        }
    }

    /// Pull credentials from a source that cannot say what its keyring is a function of:
    /// none, here.
    struct Plugins;

    #[async_trait]
    impl PullSecrets for Plugins {
        async fn keyring_for(&self, _: &PodContext<'_>) -> PodKeyring {
            PodKeyring::default()
        }
    }

    fn policy_text() -> Result<String, serde_json::Error> {
        let pem = serde_json::to_string(&key_pair().1)?;
        Ok(format!(
            "mode: enforce\nverify:\n  - images: [\"registry.example/*\"]\n    keys:\n    - pem: {pem}\n"
        ))
    }

    fn pinner(verifier: &Arc<Tally>, policy: &PolicyHandle) -> Pinner {
        Pinner::new(pinner_parts(verifier, policy))
    }

    fn pinner_parts(verifier: &Arc<Tally>, policy: &PolicyHandle) -> PinnerParts {
        PinnerParts {
            policy: policy.clone(),
            signatures: Some(verifier.clone()),
            ..parts(Scripted::new(&[]))
        }
    }

    /// [`pinner`], its pull credentials read from `secrets`.
    fn pinner_reading(
        verifier: &Arc<Tally>,
        policy: &PolicyHandle,
        secrets: Arc<dyn PullSecrets>,
    ) -> Pinner {
        Pinner::new(PinnerParts {
            secrets,
            ..pinner_parts(verifier, policy)
        })
    }

    fn pod(images: &[&str], account: &str, secrets: &[&str]) -> Value {
        let containers: Vec<Value> = (images.iter().enumerate())
            .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
            .collect();
        let secrets: Vec<Value> = secrets.iter().map(|name| json!({"name": name})).collect();
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"serviceAccountName": account, "imagePullSecrets": secrets,
                "containers": containers}})
    }

    /// `/validate` of `pod` in `namespace`: each image's action and signature note.
    async fn validate(
        pinner: &Pinner,
        pod: &Value,
        namespace: &str,
        dry_run: bool,
    ) -> Result<Vec<(Action, Option<String>)>, Box<dyn std::error::Error>> {
        let mut target = created_pod(pod);
        target.view.namespace = namespace;
        target.dry_run = dry_run;
        let plan = pinner.check_pinned(&target, Duration::from_secs(5)).await?;
        Ok((plan.outcomes.iter())
            .map(|o| (o.action, o.signature.as_ref().map(ToString::to_string)))
            .collect())
    }

    /// A Pod the same as one verified a moment ago gets what that verification found, and the
    /// metric counts its verdicts as answered from a cache; any change to what its
    /// verification read (the namespace, a pull Secret's name, a digest, the policy) verifies anew, and so does a dry run, which neither reads nor keeps one.
    #[tokio::test]
    async fn a_pod_of_the_shape_verified_a_moment_ago_is_answered_with_what_was_found(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let policy = PolicyHandle::new(Policy::parse(&policy_text()?)?);
        let verifier = Tally::new(Duration::from_secs(60));
        let pinner = pinner(&verifier, &policy);
        let signed = pod(&[SIGNED, SIGNED], "web", &["pull"]);
        let verified = Some("verify[0]: signed by key tallied".to_string());
        let expected = vec![(Action::Unchanged, verified.clone()); 2];
        assert_eq!(validate(&pinner, &signed, "team", false).await?, expected);
        assert_eq!(verifier.asked(), 1, "two sites of one digest: one check");
        for _ in 0..3 {
            assert_eq!(validate(&pinner, &signed, "team", false).await?, expected);
        }
        assert_eq!(verifier.asked(), 1, "remembered");
        assert_eq!(
            verifier.kept.load(Ordering::SeqCst),
            3,
            "one verdict each time"
        );

        let changed = [
            (pod(&[SIGNED, SIGNED], "web", &["pull"]), "other-team"),
            (pod(&[SIGNED, SIGNED], "web", &["pull", "more"]), "team"),
            (pod(&[SIGNED, SIGNED], "web", &[]), "team"),
            (pod(&[SIGNED, OTHER], "web", &["pull"]), "team"),
        ];
        for (at, (changed, namespace)) in changed.iter().enumerate() {
            let before = verifier.asked();
            validate(&pinner, changed, namespace, false).await?;
            assert!(verifier.asked() > before, "change {at} verified anew");
        }
        let before = verifier.asked();
        assert_eq!(validate(&pinner, &signed, "team", true).await?, expected);
        assert_eq!(verifier.asked(), before + 1, "a dry run reads no memo");
        policy.replace(Policy::parse(&policy_text()?)?);
        validate(&pinner, &signed, "team", false).await?;
        assert_eq!(verifier.asked(), before + 2, "a new policy verifies anew");
        validate(&pinner, &signed, "team", false).await?;
        assert_eq!(verifier.asked(), before + 2);
        Ok(())
    }

    /// What failed is never remembered: a Pod with an image signed by another key is
    /// verified, and denied, every time, its signed image with it.
    #[tokio::test]
    async fn a_refused_verification_is_never_remembered() -> Result<(), Box<dyn std::error::Error>>
    {
        let policy = PolicyHandle::new(Policy::parse(&policy_text()?)?);
        let verifier = Tally::new(Duration::from_secs(60));
        let pinner = pinner(&verifier, &policy);
        let mixed = pod(&[SIGNED, UNSIGNED], "web", &[]);
        for round in 1..=3 {
            let outcomes = validate(&pinner, &mixed, "team", false).await?;
            assert_eq!(outcomes[1].0, Action::Denied);
            assert_eq!(verifier.asked(), 2 * round);
        }
        Ok(())
    }

    /// A remembered Pod stands no longer than its verdicts: once the earliest has expired,
    /// the next Pod is verified anew.
    #[tokio::test]
    async fn a_remembered_pod_stands_no_longer_than_its_verdicts(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let policy = PolicyHandle::new(Policy::parse(&policy_text()?)?);
        let verifier = Tally::new(Duration::from_millis(50));
        let pinner = pinner(&verifier, &policy);
        let signed = pod(&[SIGNED], "web", &[]);
        validate(&pinner, &signed, "team", false).await?;
        validate(&pinner, &signed, "team", false).await?;
        assert_eq!(verifier.asked(), 1);
        tokio::time::sleep(Duration::from_millis(120)).await;
        validate(&pinner, &signed, "team", false).await?;
        assert_eq!(verifier.asked(), 2, "expired with its verdict");
        Ok(())
    }

    /// Credentials from a source that cannot say what they depend on are never stood in for
    /// by the names of a Pod's Secrets: each Pod is verified.
    #[tokio::test]
    async fn nothing_is_remembered_unless_credentials_are_a_function_of_the_key(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let policy = PolicyHandle::new(Policy::parse(&policy_text()?)?);
        let verifier = Tally::new(Duration::from_secs(60));
        let pinner = pinner_reading(&verifier, &policy, Arc::new(Plugins));
        let signed = pod(&[SIGNED], "web", &[]);
        for round in 1..=3 {
            validate(&pinner, &signed, "team", false).await?;
            assert_eq!(verifier.asked(), round);
        }
        Ok(())
    }

    /// Pull credentials a plugin handed the account's token gives: none, here.
    struct Tokens;

    #[async_trait]
    impl PullSecrets for Tokens {
        fn hands_tokens(&self) -> bool {
            true
        }

        fn keyring_by_names(&self) -> bool {
            true
        }

        async fn keyring_for(&self, _: &PodContext<'_>) -> PodKeyring {
            PodKeyring::default()
        }
    }

    /// Where a plugin is handed the ServiceAccount's token, the account is in the key: a Pod
    /// of another account is verified anew, one of the same is remembered.
    #[tokio::test]
    async fn the_account_keys_a_pod_whose_plugin_is_handed_its_token(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let policy = PolicyHandle::new(Policy::parse(&policy_text()?)?);
        let verifier = Tally::new(Duration::from_secs(60));
        let pinner = pinner_reading(&verifier, &policy, Arc::new(Tokens));
        validate(&pinner, &pod(&[SIGNED], "web", &[]), "team", false).await?;
        validate(&pinner, &pod(&[SIGNED], "web", &[]), "team", false).await?;
        assert_eq!(verifier.asked(), 1, "the same account: remembered");
        validate(&pinner, &pod(&[SIGNED], "batch", &[]), "team", false).await?;
        assert_eq!(verifier.asked(), 2, "another account: verified anew");
        // Without tokens the account names no credential: it keys nothing.
        let verifier = Tally::new(Duration::from_secs(60));
        let no_tokens = super::tests::pinner(&verifier, &policy);
        validate(&no_tokens, &pod(&[SIGNED], "web", &[]), "team", false).await?;
        validate(&no_tokens, &pod(&[SIGNED], "batch", &[]), "team", false).await?;
        assert_eq!(
            verifier.asked(),
            1,
            "no token: the account is not in the key"
        );
        Ok(())
    }

    /// Pull credentials that warn (a Secret not found) or refuse (one kubelet cannot read),
    /// as `refused` says.
    struct Warned {
        refused: bool,
    }

    #[async_trait]
    impl PullSecrets for Warned {
        fn keyring_by_names(&self) -> bool {
            true
        }

        async fn keyring_for(&self, _: &PodContext<'_>) -> PodKeyring {
            let line = "imagePullSecret team/pull not found or not a docker config secret";
            PodKeyring {
                warnings: (!self.refused)
                    .then(|| line.to_string())
                    .into_iter()
                    .collect(),
                refused: self.refused.then(|| line.to_string()).into_iter().collect(),
                ..PodKeyring::default()
            }
        }
    }

    /// What reading the credentials said must be said again: a Pod whose credentials warned or
    /// were refused is never remembered, nor one whose image is resolved through a mirror (its
    /// signatures are asked there, with the mirror's credentials).
    #[tokio::test]
    async fn nothing_is_remembered_when_credentials_warn_or_an_image_is_routed(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let signed = pod(&[SIGNED], "web", &["pull"]);
        for refused in [false, true] {
            let policy = PolicyHandle::new(Policy::parse(&policy_text()?)?);
            let verifier = Tally::new(Duration::from_secs(60));
            let pinner = pinner_reading(&verifier, &policy, Arc::new(Warned { refused }));
            for round in 1..=3 {
                validate(&pinner, &signed, "team", false).await?;
                assert_eq!(verifier.asked(), round, "refused: {refused}");
            }
        }
        let routed = format!(
            "{}registries:\n  resolveThrough:\n    - {{source: registry.example/team, mirrors: [{{location: mirror.example/team}}]}}\n",
            policy_text()?
        );
        let policy = PolicyHandle::new(Policy::parse(&routed)?);
        let verifier = Tally::new(Duration::from_secs(60));
        let pinner = pinner(&verifier, &policy);
        for round in 1..=3 {
            validate(&pinner, &signed, "team", false).await?;
            assert_eq!(verifier.asked(), round, "routed");
        }
        Ok(())
    }

    /// In audit, a verified Pod is remembered and answered alike.
    #[tokio::test]
    async fn audit_remembers_alike() -> Result<(), Box<dyn std::error::Error>> {
        let text = policy_text()?.replace("mode: enforce", "mode: audit");
        let policy = PolicyHandle::new(Policy::parse(&text)?);
        let verifier = Tally::new(Duration::from_secs(60));
        let pinner = pinner(&verifier, &policy);
        let signed = pod(&[SIGNED], "web", &[]);
        let first = validate(&pinner, &signed, "team", false).await?;
        assert_eq!(
            first,
            vec![(
                Action::Unchanged,
                Some("verify[0]: signed by key tallied".to_string())
            )]
        );
        assert_eq!(validate(&pinner, &signed, "team", false).await?, first);
        assert_eq!(verifier.asked(), 1);
        Ok(())
    }

    /// Keys are written length first: texts that join alike never make one key.
    #[test]
    fn texts_that_join_alike_make_different_keys() {
        let key = |texts: &[Option<&str>]| {
            let mut key = Vec::new();
            texts.iter().for_each(|t| put(&mut key, *t));
            key
        };
        assert_ne!(key(&[Some("ab"), Some("c")]), key(&[Some("a"), Some("bc")]));
        assert_ne!(key(&[None]), key(&[Some("")]));
        assert_ne!(key(&[Some(""), None]), key(&[None, Some("")]));
    }
}
