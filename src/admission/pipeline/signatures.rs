//! The signatures half of the pipeline (issue 46): `Pinner::verify_signatures` asks the
//! verifier about every digest a plan admits that a `verify` entry covers, each distinct
//! (repository, digest, trust) once: what the verdict cache holds is answered at once (a warm
//! admission: no call, no deadline, nothing joined), the rest are asked all at once within the
//! review's deadline, through the image's mirrors where the policy routes its tag, with the
//! pod's pull credentials. The pure core ([`super::super::plan`]) says what to check and what
//! the verdicts make of each image. A digest pinned from a cache entry that kept its
//! verification is not checked at all; one the verdicts all verified is handed back to the
//! cache to keep beside its digest (`Resolver::keep_verified`), until the earliest of those
//! verdicts' expiries, so that the next warm admission of its tag asks nothing. A Pod whose
//! digests were all written by its author, verified, is remembered whole
//! ([`super::verified_pods`]), so that the next Pod of its shape asks nothing either.
//!
//! Never: decides what a verdict costs an admission.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::super::plan::{self, Plan, SignatureChecks, SignatureNote, Verdicts};
use super::{Pinner, Target};
use crate::policy::CompiledPolicy;
use crate::reference::Reference;
use crate::registry::keyring::Keyring;
use crate::registry::mirrored::{self, RoutedCall};
use crate::registry::{Credential, RegistryError, SignatureVerifier, VerifiedDigest};
use crate::signatures::Verdict;

use super::verified_pods;

impl Pinner {
    /// Verifies the signatures of every digest `plan` admits that a `verify` entry covers, each
    /// distinct (repository, digest, trust) once and all at once, within `deadline`, with the
    /// pod's pull credentials (read now unless the tags' resolution read them), and applies
    /// the verdicts. No verifier (a test's Pinner) verifies nothing: every covered digest is
    /// then refused, never let through (but for one whose cache entry kept a verification
    /// under this policy, which a verifier made).
    pub(super) async fn verify_signatures(
        &self,
        policy: &CompiledPolicy,
        target: &Target<'_>,
        mut plan: Plan,
        keyring: Option<Keyring>,
        deadline: Instant,
    ) -> Plan {
        if policy.verify.is_empty() {
            return plan;
        }
        // A Pod the same as one verified a moment ago: what that found, in one lookup (not
        // when this review read the credentials already, for its tags: what they say now
        // stands).
        let memo_key = match (&self.signatures, &keyring) {
            (Some(_), None) => verified_pods::key(policy, target, &plan, self.secrets.as_ref()),
            _ => None,
        };
        if let (Some(key), Some(verifier)) = (&memo_key, &self.signatures) {
            if let Some(verdicts) = self.verified_pods.answer(key, &mut plan) {
                if verdicts > 0 {
                    verifier.count_kept(verdicts);
                }
                return plan;
            }
        }
        let checks = plan::signature_checks(policy, &plan);
        if checks.is_empty() {
            // (nothing remembered: it would save a Pod no verification, only a slot)
            return plan;
        }
        // Whether what is found may be remembered: credentials read here without a word, each
        // check answered `verified`.
        let mut rememberable = memo_key.is_some();
        let mut verdicts = Verdicts::new();
        // Each check's credentials, in the checks' order (what its verdict is held for).
        let mut credentials_of = Vec::with_capacity(checks.distinct.len());
        // The pod's pull credentials, once read (what a kept verification is for).
        let mut pod_keyring = None;
        if let (false, Some(verifier)) = (checks.distinct.is_empty(), &self.signatures) {
            let keyring = match keyring {
                Some(keyring) => keyring,
                None => {
                    let images: Vec<&Reference> =
                        checks.distinct.iter().map(|c| &c.image).collect();
                    let pod = self.keyring_for(policy, target, &images, deadline).await;
                    rememberable &= pod.warnings.is_empty() && pod.refused.is_empty();
                    plan.warnings.extend(pod.warnings);
                    pod.keyring
                }
            };
            // One pass: a routed image's signatures are asked where its tag is resolved (its
            // mirrors); any other's verdict, if held, answers at once (a warm admission: no
            // call, no deadline); the rest are asked after the pass, all at once, each under the
            // deadline. (Each check's credentials are looked up once, for both.)
            let mut unusable = Vec::new();
            let mut held = Vec::with_capacity(checks.distinct.len());
            let mut asked = Vec::new();
            for check in &checks.distinct {
                let routed = policy.routes.route(&check.image).map(|route| {
                    RoutedCall::new(
                        &check.image,
                        &route,
                        &keyring,
                        &self.mirror_keyrings,
                        &mut unusable,
                    )
                });
                let credentials = match routed {
                    Some(_) => Vec::new(),
                    None => keyring.lookup(&check.image),
                };
                let verdict = match routed {
                    Some(_) => None,
                    None => {
                        verifier
                            .held(&check.image, &check.key.digest, &credentials, &check.trust)
                            .await
                    }
                };
                if verdict.is_none() {
                    asked.push((check, routed, credentials.clone()));
                }
                credentials_of.push(credentials);
                held.push(verdict);
            }
            if !unusable.is_empty() {
                rememberable = false;
                unusable.sort();
                unusable.dedup();
                plan.warnings.extend(unusable);
            }
            let calls = asked.into_iter().map(|(check, routed, credentials)| {
                let verifier = verifier.clone();
                async move {
                    let started = Instant::now();
                    let call = async {
                        match &routed {
                            Some(routed) => {
                                mirrored::verify_routed(
                                    verifier.as_ref(),
                                    routed,
                                    &check.key.digest,
                                    &check.trust,
                                )
                                .await
                            }
                            None => {
                                verifier
                                    .verify(
                                        &check.image,
                                        &check.key.digest,
                                        &credentials,
                                        &check.trust,
                                    )
                                    .await
                            }
                        }
                    };
                    let answer =
                        tokio::time::timeout_at(deadline, call)
                            .await
                            .unwrap_or_else(|_| {
                                Err(RegistryError::Timeout {
                                    registry: check.image.domain().to_string(),
                                    timeout: Duration::from_millis(
                                        started.elapsed().as_millis() as u64
                                    ),
                                })
                            });
                    answer
                }
            });
            let mut answered = join_all(calls).await.into_iter();
            // (one answer per check not held; were one missing, the checks from it on would
            // count as not run, and be refused)
            verdicts = held
                .into_iter()
                .map_while(|held| match held {
                    Some(verdict) => Some(Ok(verdict)),
                    None => answered.next(),
                })
                .collect();
            pod_keyring = Some(keyring);
        }
        if let (kept @ 1.., Some(verifier)) = (checks.kept_verdicts(), &self.signatures) {
            verifier.count_kept(kept);
        }
        rememberable &= verdicts.len() == checks.distinct.len()
            && (verdicts.iter()).all(|v| matches!(v, Ok(Verdict::Verified { .. })));
        let plan = plan.with_signatures(&checks, &verdicts);
        // What the cache keeps is this replica's own: never from a dry run, nor through
        // another resolver than pinhook's.
        if let (Some(verifier), Some(keyring), false, None) = (
            &self.signatures,
            &pod_keyring,
            target.dry_run,
            target.resolver,
        ) {
            let held = Held {
                checks: &checks,
                credentials_of: &credentials_of,
                verifier: verifier.as_ref(),
            };
            self.keep_verified(policy, target, &plan, keyring, &held)
                .await;
            if let (true, Some(key)) = (rememberable, memo_key) {
                let all: Vec<usize> = (0..checks.distinct.len()).collect();
                if let Some(until) = held.until(&all).await {
                    self.verified_pods
                        .remember(key, &plan, verdicts.len(), until);
                }
            }
        }
        plan
    }

    /// Hands the cache each verification worth keeping beside its digest
    /// ([`SignatureChecks::to_keep`]), until the earliest expiry of the verdicts it is made of
    /// (none kept if any of them is no longer held). Not for the Pod of an owner revision:
    /// its tags are answered by the revision's memo, never by the cache entry that would keep
    /// it, and a verification kept at each of its Pods would cost each one more than it saves.
    async fn keep_verified(
        &self,
        policy: &CompiledPolicy,
        target: &Target<'_>,
        plan: &Plan,
        keyring: &Keyring,
        held: &Held<'_>,
    ) {
        let keep = held.checks.to_keep(policy, plan);
        if keep.is_empty() || target.view.owner_revision().is_some() {
            return;
        }
        for (outcome, made_of) in keep {
            let (Some(image), Some(digest), Some(SignatureNote::Verified(signers))) =
                (&outcome.parsed, &outcome.digest, &outcome.signature)
            else {
                continue;
            };
            let Some(until) = held.until(&made_of).await else {
                continue;
            };
            // (the credentials the tag's own lookup uses)
            let credentials = keyring.lookup(image);
            let verified = Arc::new(VerifiedDigest {
                policy: policy.generation(),
                signers: signers.clone(),
            });
            self.resolver
                .keep_verified(image, &credentials, digest, verified, until);
        }
    }
}

/// The verdicts an admission's checks got: what a kept verification is made of.
struct Held<'a> {
    checks: &'a SignatureChecks,
    /// Each check's credentials, in the checks' order.
    credentials_of: &'a [Vec<Credential>],
    verifier: &'a dyn SignatureVerifier,
}

impl Held<'_> {
    /// The earliest expiry of the `verified` verdicts of the checks `made_of`, if each is
    /// still held.
    async fn until(&self, made_of: &[usize]) -> Option<std::time::Instant> {
        let mut until: Option<std::time::Instant> = None;
        for &at in made_of {
            let check = self.checks.distinct.get(at)?;
            let credentials = self.credentials_of.get(at)?;
            let held = (self.verifier)
                .verified_until(&check.image, &check.key.digest, credentials, &check.trust)
                .await?;
            until = Some(until.map_or(held, |until| until.min(held)));
        }
        until
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use serde_json::json;

    use super::super::tests::{created_pod, parts};
    use super::super::PinnerParts;
    use super::*;
    use crate::admission::plan::Action;
    use crate::policy::{Policy, PolicyHandle};
    use crate::reference::Digest;
    use crate::registry::testing::Scripted;
    use crate::registry::{Credential, SignatureVerifier};
    use crate::signatures::key::tests::key_pair;
    use crate::signatures::{Trust, Verdict};

    /// Holds `verified` for repositories whose path says `held`; asked, answers every other
    /// `signed by another key`, noting which it was asked.
    #[derive(Default)]
    struct HalfHeld {
        asked: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl SignatureVerifier for HalfHeld {
        async fn verify(
            &self,
            image: &Reference,
            _: &Digest,
            _: &[Credential],
            _: &Arc<Trust>,
        ) -> Result<Verdict, RegistryError> {
            self.asked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(image.path().to_string());
            Ok(Verdict::OtherKey)
        }

        async fn held(
            &self,
            image: &Reference,
            _: &Digest,
            _: &[Credential],
            _: &Arc<Trust>,
        ) -> Option<Verdict> {
            image.path().contains("held").then(|| Verdict::Verified {
                signer: "key held".into(),
            })
        }
    }

    /// Verifies everything, counting what it is asked, and for how long it holds a verdict.
    #[derive(Default)]
    struct Counting {
        asked: std::sync::atomic::AtomicUsize,
        until_asked: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl SignatureVerifier for Counting {
        async fn verify(
            &self,
            _: &Reference,
            _: &Digest,
            _: &[Credential],
            _: &Arc<Trust>,
        ) -> Result<Verdict, RegistryError> {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Verdict::Verified {
                signer: "key counted".into(),
            })
        }

        async fn verified_until(
            &self,
            _: &Reference,
            _: &Digest,
            _: &[Credential],
            _: &Arc<Trust>,
        ) -> Option<std::time::Instant> {
            self.until_asked
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Some(std::time::Instant::now() + Duration::from_secs(60))
        }
    }

    /// A tag whose digest every entry verified is, from its next admission on, answered with
    /// the verification its cache entry kept: no verdict asked. Not after a dry run (which
    /// keeps nothing), nor under a new policy (a key rotated), whose entries verify it anew.
    #[tokio::test]
    async fn a_verification_kept_with_its_digest_answers_the_next_admission_of_the_tag(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let text = |pem: &str| {
            format!(
                "mode: enforce\nverify:\n  - images: [\"registry.example/*\"]\n    keys:\n    - pem: {pem}\n"
            )
        };
        let policy = PolicyHandle::new(Policy::parse(&text(&serde_json::to_string(
            &key_pair().1,
        )?))?);
        let cache = Arc::new(crate::registry::CachingResolver::new(
            Scripted::new(&[crate::registry::testing::Answer::Digest('a')]),
            crate::registry::CacheConfig::default(),
            Arc::new(crate::metrics::Metrics::new()),
        ));
        let verifier = Arc::new(Counting::default());
        let elsewhere = cache.read_only();
        let pinner = Pinner::new(PinnerParts {
            policy: policy.clone(),
            dry_run_resolver: Arc::new(cache.read_only()),
            resolver: cache,
            signatures: Some(verifier.clone()),
            ..parts(Scripted::new(&[]))
        });
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "registry.example/team/app:1.0"}]}});
        let asked = || verifier.asked.load(std::sync::atomic::Ordering::SeqCst);
        // a dry run, or through another resolver than pinhook's
        let admit_with = |dry_run: bool, through_another: bool| {
            let target = Target {
                dry_run,
                resolver: through_another.then_some(&elsewhere as &dyn crate::registry::Resolver),
                ..created_pod(&pod)
            };
            let pinner = &pinner;
            async move {
                let plan = pinner.plan(&target, Duration::from_secs(5)).await?;
                let outcome = &plan.outcomes[0];
                assert_eq!(outcome.action, Action::Pinned);
                let note = outcome.signature.as_ref().map(ToString::to_string);
                assert_eq!(note.as_deref(), Some("verify[0]: signed by key counted"));
                Ok::<_, Box<dyn std::error::Error>>(())
            }
        };
        let admit = |dry_run: bool| admit_with(dry_run, false);
        admit(true).await?;
        assert_eq!(asked(), 1);
        admit(false).await?;
        assert_eq!(asked(), 2);
        for _ in 0..3 {
            admit(false).await?;
        }
        assert_eq!(asked(), 2, "the kept verification answered");
        let rotate = || -> Result<(), Box<dyn std::error::Error>> {
            let pem = serde_json::to_string(&key_pair().1)?;
            policy.replace(Policy::parse(&text(&pem))?);
            Ok(())
        };
        rotate()?;
        admit(false).await?;
        assert_eq!(asked(), 3, "a new policy verifies anew");
        admit(false).await?;
        assert_eq!(asked(), 3);
        // Under a new policy again, neither a dry run nor an admission through another
        // resolver keeps what it verified: the next admission asks.
        rotate()?;
        admit(true).await?;
        admit_with(false, true).await?;
        assert_eq!(asked(), 5);
        admit(false).await?;
        assert_eq!(asked(), 6, "nothing was kept");
        admit(false).await?;
        assert_eq!(asked(), 6);

        // The Pods of an owner revision are answered by its memo: nothing is kept for them.
        let until_asked = || {
            verifier
                .until_asked
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        let kept_before = until_asked();
        let owned = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"pod-template-hash": "5d8f"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-5d8f", "uid": "u-1", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "registry.example/team/web:1.0"}]}});
        for round in 1..=3 {
            let plan = pinner
                .plan(&created_pod(&owned), Duration::from_secs(5))
                .await?;
            assert_eq!(plan.outcomes[0].action, Action::Pinned);
            assert_eq!(asked(), 6 + round, "asked at each Pod, as before");
        }
        assert_eq!(until_asked(), kept_before, "nothing kept");
        Ok(())
    }

    /// Verdicts held answer at once and are never asked again; the others are asked, and each
    /// answer lands on its own image whatever the order of held and asked.
    #[tokio::test]
    async fn held_verdicts_answer_at_once_and_the_rest_are_asked_in_their_place(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let pem = serde_json::to_string(&key_pair().1)?;
        let policy = Policy::parse(&format!(
            "mode: enforce\nverify:\n  - images: [\"registry.example/*\"]\n    keys:\n    - pem: {pem}\n"
        ))?;
        let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let images = [
            format!("registry.example/team/held-a@{}", digest('a')),
            format!("registry.example/team/other-b@{}", digest('b')),
            format!("registry.example/team/held-c@{}", digest('c')),
            format!("registry.example/team/other-d@{}", digest('d')),
        ];
        let containers: Vec<_> = images
            .iter()
            .enumerate()
            .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
            .collect();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": containers}});
        let verifier = Arc::new(HalfHeld::default());
        let pinner = Pinner::new(PinnerParts {
            policy: PolicyHandle::new(policy),
            signatures: Some(verifier.clone()),
            ..parts(Scripted::new(&[]))
        });
        let plan = pinner
            .check_pinned(&created_pod(&pod), Duration::from_secs(5))
            .await?;
        let seen: Vec<(Action, Option<String>)> = plan
            .outcomes
            .iter()
            .map(|o| (o.action, o.signature.as_ref().map(ToString::to_string)))
            .collect();
        let held = Some("verify[0]: signed by key held".to_string());
        let other = |c: char| format!("verify[0]: signed by another key for {}", &digest(c)[..19]);
        assert_eq!(seen[0], (Action::Unchanged, held.clone()));
        assert_eq!(seen[2], (Action::Unchanged, held));
        assert_eq!(seen[1].0, Action::Denied);
        assert_eq!(seen[3].0, Action::Denied);
        assert!(
            seen[1]
                .1
                .as_ref()
                .is_some_and(|s| s.starts_with(&other('b'))),
            "{seen:?}"
        );
        assert!(
            seen[3]
                .1
                .as_ref()
                .is_some_and(|s| s.starts_with(&other('d'))),
            "{seen:?}"
        );
        assert_eq!(
            *verifier
                .asked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            ["team/other-b", "team/other-d"]
        );
        Ok(())
    }
}
