//! Signatures in the plan (issue 46): which digests an admission lets in that the policy's
//! `verify` entries cover, and what their verdicts make of each image. The digest checked is
//! the one admitted: the digest pinned (the index digest of a multi-arch image, the one the
//! tag resolved to in this very step), or the one the review already carries, so writing a
//! digest by hand is no way around verification. A digest that fails any entry covering it is
//! denied in enforce and reported in audit (`unverified`), whatever `onResolutionFailure`
//! says: a signature that cannot be fetched is not one that was checked.
//!
//! A digest pinned from a cache entry that kept its verification ([`ImageOutcome::verified`])
//! under this very policy is taken as verified: no check, no verdict asked (a warm admission
//! of a tag); every other admitted digest is checked. Which verifications are worth keeping
//! beside their digests is [`SignatureChecks::to_keep`].
//!
//! Pure: [`checks`] says what to verify (each image matched once, read as the plan parsed it), the I/O half
//! verifies each distinct check once, and [`Plan::with_signatures`] applies the verdicts.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use crate::policy::{verify, CompiledPolicy, Mode};
use crate::reference::{Digest, Reference};
use crate::registry::{RegistryError, ResolutionSource, VerifiedDigest};
use crate::signatures::{Trust, Verdict};

use super::outcome::{short, Action, ImageOutcome, Plan, Reason, SignatureNote};

/// What a verification's answer is keyed by: a digest of a repository under one trust, never a
/// tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckKey {
    pub repository: String,
    pub digest: Digest,
    /// [`Trust::fingerprint`].
    pub trust: Arc<str>,
}

/// One verification to run.
#[derive(Debug, Clone)]
pub struct SignatureCheck {
    pub key: CheckKey,
    /// The image as admitted (its registry and repository say where the signatures are, and
    /// which pull credentials apply).
    pub image: Reference,
    pub trust: Arc<Trust>,
}

/// What a plan's admitted digests need: the distinct verifications, first image first, and for
/// each outcome the entries covering it with the verification each needs (an index into
/// [`SignatureChecks::distinct`]). Each image is parsed and matched once.
#[derive(Debug, Default)]
pub struct SignatureChecks {
    pub distinct: Vec<SignatureCheck>,
    /// (outcome index, the entries covering it: an index into `groups`).
    covered: Vec<(usize, usize)>,
    /// The entries covering each distinct image (sites of one image share theirs).
    groups: Vec<Covered>,
    /// Images admitted unpinned (`onResolutionFailure: allow`) that an entry covers: (outcome
    /// index, the first entry). Nothing was verified, so enforce refuses them.
    unpinned: Vec<(usize, usize)>,
    /// More distinct verifications than `limits.maxImagesPerObject`: none is made, every
    /// covered image is refused naming the limit.
    too_many: Option<String>,
    /// Outcomes whose digest's verification the resolution cache kept under this policy
    /// ([`ImageOutcome::verified`]): nothing to verify for them.
    kept: Vec<usize>,
    /// The verdicts those kept verifications stand for: one per entry of each, each counted
    /// once; at least the distinct checks they spare (two tags of one digest count twice).
    kept_verdicts: usize,
}

/// The entries covering one image: (entry index, check index) each.
type Covered = Vec<(usize, usize)>;

/// The answers, one per [`SignatureChecks::distinct`], in its order; a missing one counts as
/// not verified.
pub type Verdicts = Vec<Result<Verdict, RegistryError>>;

/// The verifications `plan`'s admitted digests need under `policy`. A digest whose
/// verification its cache entry kept under this policy needs none; but should those with what
/// is left exceed `limits.maxImagesPerObject`, every digest is counted as if none were kept,
/// so that the limit decides alike whatever one replica's cache holds.
pub fn checks(policy: &CompiledPolicy, plan: &Plan) -> SignatureChecks {
    let checks = checks_taking_kept(policy, plan, true);
    let limit = policy.policy.limits.max_images_per_object;
    match checks.distinct.len() + checks.kept_verdicts > limit {
        true => checks_taking_kept(policy, plan, false),
        false => checks,
    }
}

/// [`checks`], taking kept verifications as verified or not.
fn checks_taking_kept(policy: &CompiledPolicy, plan: &Plan, take_kept: bool) -> SignatureChecks {
    let mut checks = SignatureChecks::default();
    if policy.verify.is_empty() {
        return checks;
    }
    // The kept verifications counted, each once (sites of one tag share their resolution's).
    let mut counted: FewOrMany<*const VerifiedDigest, ()> = FewOrMany::default();
    // The checks' keys, hashed once there are more than a few (scanned while few).
    let mut index: Option<HashMap<CheckKey, usize>> = None;
    // Sites of one image (a Deployment's containers and init containers alike) are parsed and
    // matched once.
    let mut seen: FewOrMany<(&str, Option<&Digest>), Option<usize>> = FewOrMany::default();
    for (i, outcome) in plan.outcomes.iter().enumerate() {
        if let Some(entry) = unpinned_but_covered(policy, outcome) {
            checks.unpinned.push((i, entry));
            continue;
        }
        if !is_admitted(outcome) {
            continue;
        }
        if let Some(kept) = take_kept.then(|| kept(policy, outcome)).flatten() {
            if counted.get(&Arc::as_ptr(kept)).is_none() {
                counted.insert(Arc::as_ptr(kept), ());
                checks.kept_verdicts += kept.signers.len();
            }
            checks.kept.push(i);
            continue;
        }
        let site = (outcome.site.image.as_str(), outcome.digest.as_ref());
        if let Some(group) = seen.get(&site) {
            if let Some(group) = *group {
                checks.covered.push((i, group));
            }
            continue;
        }
        let Some(image) = admitted(outcome) else {
            continue;
        };
        let Some(digest) = outcome.digest.as_ref().or_else(|| image.digest()) else {
            continue;
        };
        let mut entries = Vec::new();
        // (the repository as the entries match it, made once; it keys the checks too, so two
        // spellings of one host are one check)
        let repository = verify::repository_of(&image);
        for rule in policy.verify.iter().filter(|rule| rule.covers(&repository)) {
            let key = CheckKey {
                repository: repository.clone(),
                digest: digest.clone(),
                trust: rule.trust.shared_fingerprint(),
            };
            let found = match &index {
                Some(index) => index.get(&key).copied(),
                None => checks.distinct.iter().position(|check| check.key == key),
            };
            let at = match found {
                Some(at) => at,
                None => {
                    let at = checks.distinct.len();
                    if let Some(index) = &mut index {
                        index.insert(key.clone(), at);
                    }
                    checks.distinct.push(SignatureCheck {
                        key,
                        image: Reference::clone(&image),
                        trust: rule.trust.clone(),
                    });
                    if index.is_none() && checks.distinct.len() > FEW {
                        index = Some(
                            (checks.distinct.iter().enumerate())
                                .map(|(at, check)| (check.key.clone(), at))
                                .collect(),
                        );
                    }
                    at
                }
            };
            entries.push((rule.index, at));
        }
        let group = match entries.is_empty() {
            true => None,
            false => {
                checks.groups.push(entries);
                checks.covered.push((i, checks.groups.len() - 1));
                Some(checks.groups.len() - 1)
            }
        };
        seen.insert(site, group);
    }
    let limit = policy.policy.limits.max_images_per_object;
    if checks.distinct.len() > limit {
        checks.too_many = Some(format!(
            "the object names {} digests to verify, more than the policy's limit of {limit} \
             (limits.maxImagesPerObject); none was verified",
            checks.distinct.len()
        ));
        checks.distinct.clear();
    }
    checks
}

/// How many keys are scanned before they are hashed.
const FEW: usize = 16;

/// A map for the handful of keys one object has: scanned while short, hashed past [`FEW`]
/// keys, so an object of thousands of images stays linear while the usual few are compared
/// rather than SipHashed (a repository, a digest and a fingerprint each time). The checks'
/// keys are kept the same way, scanned in place in [`SignatureChecks::distinct`].
enum FewOrMany<K, V> {
    Few(Vec<(K, V)>),
    Many(HashMap<K, V>),
}

impl<K, V> Default for FewOrMany<K, V> {
    fn default() -> Self {
        FewOrMany::Few(Vec::new())
    }
}

impl<K: Eq + Hash, V> FewOrMany<K, V> {
    fn get(&self, key: &K) -> Option<&V> {
        match self {
            FewOrMany::Few(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            FewOrMany::Many(map) => map.get(key),
        }
    }

    /// Adds `key`, which is not there yet.
    fn insert(&mut self, key: K, value: V) {
        match self {
            FewOrMany::Few(pairs) if pairs.len() < FEW => pairs.push((key, value)),
            FewOrMany::Few(pairs) => {
                let mut map: HashMap<K, V> = std::mem::take(pairs).into_iter().collect();
                map.insert(key, value);
                *self = FewOrMany::Many(map);
            }
            FewOrMany::Many(map) => {
                map.insert(key, value);
            }
        }
    }
}

/// The first entry covering an image admitted without a digest because its tag could not be
/// resolved and `onResolutionFailure: allow` lets it in: no digest, no signature checked.
fn unpinned_but_covered(policy: &CompiledPolicy, outcome: &ImageOutcome) -> Option<usize> {
    let allowed_unpinned = outcome.site.is_new
        && outcome.action == Action::Violation
        && matches!(
            outcome.violation,
            Some(Reason::ResolutionFailed | Reason::Unpinned)
        );
    if !allowed_unpinned {
        return None;
    }
    let image = Reference::parse(&outcome.site.image).ok()?;
    if image.digest().is_some() {
        return None;
    }
    let entry = policy.verify_rules(&image).next().map(|rule| rule.index);
    entry
}

/// The verification kept beside the digest an outcome pinned, when this policy made it and the
/// tag was resolved at its own registry (a mirror's entry keeps what the entries covering the
/// mirror's repository said, never the source's).
fn kept<'a>(policy: &CompiledPolicy, outcome: &'a ImageOutcome) -> Option<&'a Arc<VerifiedDigest>> {
    let kept = outcome.verified.as_ref()?;
    let own = outcome.origin.is_none() && outcome.digest.is_some();
    (kept.policy == policy.generation() && own).then_some(kept)
}

/// Whether an outcome admits an image new in this request: pinned, left as it is, or let in
/// although it breaks the policy (audit, `onResolutionFailure: allow`).
fn is_admitted(outcome: &ImageOutcome) -> bool {
    outcome.site.is_new
        && matches!(
            outcome.action,
            Action::Pinned | Action::Unchanged | Action::Violation
        )
}

/// The image an outcome admits, when it is new in this request; the digest admitted is the one
/// pinned (or, in audit, the one enforce would pin), else the one the image carries.
fn admitted(outcome: &ImageOutcome) -> Option<Cow<'_, Reference>> {
    if !is_admitted(outcome) {
        return None;
    }
    let image = match &outcome.parsed {
        Some(parsed) => Cow::Borrowed(parsed),
        None => Cow::Owned(Reference::parse(&outcome.site.image).ok()?),
    };
    Some(image)
}

// === impl SignatureChecks ===

impl SignatureChecks {
    /// Nothing to verify, nothing kept to note and nothing to refuse.
    pub fn is_empty(&self) -> bool {
        self.distinct.is_empty()
            && self.kept.is_empty()
            && self.unpinned.is_empty()
            && self.too_many.is_none()
    }

    /// The verdicts the kept verifications stand for (what the metric counts as verified from
    /// the cache).
    pub fn kept_verdicts(&self) -> usize {
        self.kept_verdicts
    }

    /// The verifications worth keeping beside their digests in the resolution cache, once `plan`
    /// has their verdicts: each image pinned from a fresh resolution (not one routed through a
    /// mirror, not one whose entry already keeps a verification under this policy, as when
    /// the limit made every digest be checked) that every entry covering it verified, with the
    /// checks its verification is made of (indexes into [`SignatureChecks::distinct`]); sites
    /// of one image once.
    pub fn to_keep<'a>(
        &'a self,
        policy: &CompiledPolicy,
        plan: &'a Plan,
    ) -> Vec<(&'a ImageOutcome, Vec<usize>)> {
        if self.too_many.is_some() {
            return Vec::new();
        }
        let mut done = vec![false; self.groups.len()];
        let mut keep = Vec::new();
        for &(i, group) in &self.covered {
            let (Some(outcome), Some(entries)) = (plan.outcomes.get(i), self.groups.get(group))
            else {
                continue;
            };
            if std::mem::replace(&mut done[group], true) {
                continue;
            }
            let fresh = matches!(
                outcome.source,
                Some(ResolutionSource::Registry | ResolutionSource::Cache)
            );
            let verified = matches!(outcome.signature, Some(SignatureNote::Verified(_)));
            let kept_already = kept(policy, outcome).is_some();
            if fresh
                && verified
                && !kept_already
                && outcome.origin.is_none()
                && outcome.parsed.is_some()
                && outcome.digest.is_some()
            {
                keep.push((outcome, entries.iter().map(|&(_, at)| at).collect()));
            }
        }
        keep
    }
}

// === impl Plan ===

impl Plan {
    /// Applies the verdicts: each admitted digest must hold under every entry covering it, or
    /// its image is denied (enforce) or reported (audit) as `unverified`, naming the entry and
    /// why in one line; a verified one says by which key.
    pub fn with_signatures(mut self, checks: &SignatureChecks, verdicts: &Verdicts) -> Plan {
        let failed = match self.mode {
            Mode::Enforce => Action::Denied,
            Mode::Audit => Action::Violation,
            Mode::Off => return self,
        };
        for &i in &checks.kept {
            if let Some(outcome) = self.outcomes.get_mut(i) {
                let signers = outcome.verified.as_ref().map(|kept| kept.signers.clone());
                outcome.signature = signers.map(SignatureNote::Verified);
            }
        }
        for &(i, entry) in &checks.unpinned {
            let Some(outcome) = self.outcomes.get_mut(i) else {
                continue;
            };
            let text =
                format!("verify[{entry}]: not pinned to a digest, so no signature was verified");
            outcome.action = failed;
            outcome.violation = Some(Reason::Unverified);
            outcome.reason = Some(format!(
                "not verified: {text} ({})",
                outcome
                    .reason
                    .as_deref()
                    .unwrap_or("the tag was not resolved")
            ));
            outcome.signature = Some(SignatureNote::Refused(text));
        }
        for &(i, group) in &checks.covered {
            let entries = checks.groups.get(group).map_or(&[][..], Vec::as_slice);
            let Some(outcome) = self.outcomes.get_mut(i) else {
                continue;
            };
            let mut signers = Vec::new();
            let mut refusal = None;
            if let Some(text) = &checks.too_many {
                outcome.action = failed;
                outcome.violation = Some(Reason::TooManyImages);
                outcome.reason = Some(format!("not verified: {text}"));
                outcome.signature = Some(SignatureNote::Refused(text.clone()));
                outcome.result = outcome.site.image.clone();
                continue;
            }
            for &(entry, at) in entries {
                let Some(digest) = checks.distinct.get(at).map(|c| &c.key.digest) else {
                    continue;
                };
                match verdicts.get(at) {
                    Some(Ok(Verdict::Verified { signer })) => {
                        signers.push((entry, signer.clone()));
                    }
                    Some(Ok(verdict)) => {
                        refusal.get_or_insert_with(|| {
                            format!(
                                "verify[{entry}]: {} for {}",
                                verdict.describe(),
                                short(digest)
                            )
                        });
                    }
                    Some(Err(error)) => {
                        refusal.get_or_insert_with(|| {
                            format!(
                                "verify[{entry}]: the signatures of {} could not be fetched: {}",
                                short(digest),
                                crate::error::error_chain(error)
                            )
                        });
                    }
                    None => {
                        refusal.get_or_insert_with(|| {
                            format!("verify[{entry}]: verification did not run")
                        });
                    }
                }
            }
            match refusal {
                Some(text) => {
                    outcome.action = failed;
                    outcome.violation = Some(Reason::Unverified);
                    outcome.reason = Some(format!("not verified: {text}"));
                    outcome.signature = Some(SignatureNote::Refused(text));
                    outcome.result = outcome.site.image.clone();
                }
                None => outcome.signature = Some(SignatureNote::Verified(signers.into())),
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{json, Value};

    use super::super::{mutation, validation, Object, Resolutions};
    use super::*;
    use crate::policy::Policy;
    use crate::registry::{Fingerprint, Resolution, ResolutionSource};
    use crate::signatures::key::tests::key_pair;

    const TAG: &str = "registry.example/team/app:1.0";

    fn digest(c: char) -> Digest {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .unwrap()
    }

    /// A policy whose `verify` entries each trust one fresh key and cover `globs`.
    fn policy(mode: &str, globs: &[&str]) -> CompiledPolicy {
        let mut text = format!("mode: {mode}\nexempt:\n  images: [\"*/exempt/*\"]\nverify:\n");
        for glob in globs {
            // A JSON string is a YAML string.
            let pem = serde_json::to_string(&key_pair().1).unwrap();
            text.push_str(&format!(
                "  - images: [\"{glob}\"]\n    keys:\n    - pem: {pem}\n"
            ));
        }
        Policy::parse(&text).unwrap()
    }

    fn pod(image: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": image}]}})
    }

    /// A Pod with a container on each of `images`.
    fn pod_of(images: &[String]) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": images.iter().enumerate()
                .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
                .collect::<Vec<_>>()}})
    }

    fn object<'a>(value: &'a Value, old: Option<&'a Value>) -> Object<'a> {
        Object {
            group: "",
            kind: "Pod",
            subresource: "",
            namespace: "shop",
            object: value,
            old_object: old,
            user: "",
        }
    }

    /// The mutating plan with `app:1.0` resolved to `digest(answer)`.
    fn mutated(policy: &CompiledPolicy, mode: Mode, value: &Value, answer: char) -> Plan {
        mutated_kept(policy, mode, value, answer, None)
    }

    /// [`mutated`], each resolution handing back a copy of `kept` as the verification its cache
    /// entry kept.
    fn mutated_kept(
        policy: &CompiledPolicy,
        mode: Mode,
        value: &Value,
        answer: char,
        kept: Option<Arc<VerifiedDigest>>,
    ) -> Plan {
        let triaged = mutation(policy, object(value, None)).triage(mode).unwrap();
        let resolutions: Resolutions = triaged
            .wanted()
            .iter()
            .map(|r| {
                let resolution = Resolution {
                    digest: digest(answer),
                    credential: Fingerprint::anonymous(),
                    source: ResolutionSource::Registry,
                    moved_from: None,
                    age: Duration::ZERO,
                    origin: None,
                    // (each tag's entry keeps its own)
                    verified: kept.as_deref().cloned().map(Arc::new),
                };
                (r.tag_reference(), Ok(resolution))
            })
            .collect();
        triaged.finish(&resolutions, Vec::new())
    }

    /// Every wanted tag's resolution failed (the registry did not answer).
    fn unresolved(triaged: &super::super::Triaged<'_>) -> Resolutions {
        triaged
            .wanted()
            .iter()
            .map(|r| {
                let error = RegistryError::Timeout {
                    registry: "registry.example".to_string(),
                    timeout: Duration::from_secs(2),
                };
                (r.tag_reference(), Err(error))
            })
            .collect()
    }

    fn verified() -> Result<Verdict, RegistryError> {
        Ok(Verdict::Verified {
            signer: "key sha256:key".into(),
        })
    }

    fn answer_all(checks: &SignatureChecks, answer: Result<Verdict, RegistryError>) -> Verdicts {
        checks
            .distinct
            .iter()
            .map(|_| match &answer {
                Ok(v) => Ok(v.clone()),
                Err(_) => Err(RegistryError::Timeout {
                    registry: "registry.example".to_string(),
                    timeout: Duration::from_secs(2),
                }),
            })
            .collect()
    }

    #[test]
    fn the_digest_checked_is_the_digest_pinned_and_a_verified_one_stays_pinned() {
        let policy = policy("enforce", &["registry.example/team/*"]);
        let value = pod(TAG);
        let plan = mutated(&policy, Mode::Enforce, &value, 'd');
        let checks = checks(&policy, &plan);
        assert_eq!(checks.distinct.len(), 1);
        assert_eq!(checks.distinct[0].key.digest, digest('d'));
        assert_eq!(
            checks.distinct[0].key.repository,
            "registry.example/team/app"
        );
        assert_eq!(
            checks.distinct[0].key.trust,
            policy.verify[0].trust.shared_fingerprint()
        );
        let plan = plan.with_signatures(&checks, &answer_all(&checks, verified()));
        let outcome = &plan.outcomes[0];
        assert_eq!(outcome.action, Action::Pinned);
        assert_eq!(outcome.result, format!("{TAG}@{}", digest('d')));
        assert_eq!(
            outcome
                .signature
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("verify[0]: signed by key sha256:key")
        );
        assert_eq!(plan.patch().unwrap().0.len(), 1);
    }

    #[test]
    fn every_other_answer_denies_in_enforce_naming_the_entry_and_why() {
        let policy = policy("enforce", &["registry.example/team/*"]);
        let value = pod(TAG);
        let cases: [(Option<Result<Verdict, RegistryError>>, &str); 7] = [
            (Some(Ok(Verdict::NoSignature)), "no signature found"),
            (Some(Ok(Verdict::OtherKey)), "signed by another key"),
            (
                Some(Ok(Verdict::OtherDigest {
                    signed: digest('e').to_string(),
                })),
                "the trusted signer signed another digest",
            ),
            (
                Some(Ok(Verdict::OtherIdentity {
                    signer: "dev@evil.example (https://issuer.example)".to_string(),
                })),
                "signed keyless by dev@evil.example (https://issuer.example), an identity the entry does not name",
            ),
            (
                Some(Ok(Verdict::Untrusted {
                    why: "a keyless signature the trusted root does not vouch for: it was logged in no log the trusted root names".to_string(),
                })),
                "the trusted root does not vouch for: it was logged in no log",
            ),
            (
                Some(Err(RegistryError::Timeout {
                    registry: String::new(),
                    timeout: Duration::ZERO,
                })),
                "the signatures of sha256:dddddddddddd could not be fetched",
            ),
            (None, "verification did not run"),
        ];
        for (answer, why) in cases {
            let plan = mutated(&policy, Mode::Enforce, &value, 'd');
            let checks = checks(&policy, &plan);
            let verdicts = match answer {
                Some(answer) => answer_all(&checks, answer),
                None => Verdicts::new(),
            };
            let plan = plan.with_signatures(&checks, &verdicts);
            let outcome = &plan.outcomes[0];
            assert_eq!(outcome.action, Action::Denied, "{why}");
            assert_eq!(outcome.violation, Some(Reason::Unverified));
            assert_eq!(outcome.result, TAG, "nothing is pinned");
            let reason = outcome.reason.as_deref().unwrap();
            assert!(reason.starts_with("not verified: verify[0]: "), "{reason}");
            assert!(reason.contains(why), "{reason} lacks {why}");
            assert!(!reason.contains('\n'));
            assert!(plan.patch().unwrap().0.is_empty());
            assert!(plan.denial_message().unwrap().contains(why));
        }
    }

    #[test]
    fn audit_reports_what_enforce_would_deny_and_admits_it() {
        let policy = policy("audit", &["registry.example/team/*"]);
        let value = pod(TAG);
        let plan = mutated(&policy, Mode::Audit, &value, 'd');
        let checks = checks(&policy, &plan);
        assert_eq!(
            checks.distinct[0].key.digest,
            digest('d'),
            "the digest enforce would pin"
        );
        let plan = plan.with_signatures(&checks, &answer_all(&checks, Ok(Verdict::NoSignature)));
        assert_eq!(plan.outcomes[0].action, Action::Violation);
        assert_eq!(plan.outcomes[0].violation, Some(Reason::Unverified));
        assert!(plan.denial_message().is_none());
    }

    #[test]
    fn a_digest_written_by_hand_is_checked_like_one_pinned() {
        let policy = policy("enforce", &["registry.example/team/*"]);
        for image in [
            format!("{TAG}@{}", digest('f')),
            format!("registry.example/team/app@{}", digest('f')),
        ] {
            let value = pod(&image);
            let plan = mutated(&policy, Mode::Enforce, &value, 'd');
            let checks = checks(&policy, &plan);
            assert_eq!(checks.distinct.len(), 1, "{image}");
            assert_eq!(checks.distinct[0].key.digest, digest('f'));
            let plan =
                plan.with_signatures(&checks, &answer_all(&checks, Ok(Verdict::NoSignature)));
            assert_eq!(plan.outcomes[0].action, Action::Denied, "{image}");
            // `/validate` checks it too, after every other mutating webhook.
            let checked = validation(&policy, object(&value, None))
                .finish(Mode::Enforce, Vec::new())
                .unwrap();
            let again = super::checks(&policy, &checked);
            assert_eq!(again.distinct.len(), 1);
            let checked = checked.with_signatures(&again, &Verdicts::new());
            assert_eq!(checked.outcomes[0].action, Action::Denied);
        }
    }

    #[test]
    fn a_verdict_is_of_a_digest_never_of_a_tag() {
        let policy = policy("enforce", &["registry.example/team/*"]);
        let value = pod(TAG);
        let first = checks(&policy, &mutated(&policy, Mode::Enforce, &value, 'd'));
        // The tag moved to `e`: what is asked (and cached) is `e`'s verification, not the tag's.
        let moved = checks(&policy, &mutated(&policy, Mode::Enforce, &value, 'e'));
        assert_eq!(moved.distinct[0].key.digest, digest('e'));
        assert_ne!(first.distinct[0].key, moved.distinct[0].key);
        assert_eq!(
            first.distinct[0].key.repository,
            moved.distinct[0].key.repository
        );
    }

    #[test]
    fn every_entry_covering_an_image_must_hold() {
        let policy = policy(
            "enforce",
            &["registry.example/team/*", "registry.example/*/app:*"],
        );
        let value = pod(TAG);
        let plan = mutated(&policy, Mode::Enforce, &value, 'd');
        let checks = checks(&policy, &plan);
        assert_eq!(checks.distinct.len(), 2);
        let mut verdicts = answer_all(&checks, verified());
        verdicts[1] = Ok(Verdict::OtherKey);
        let plan = plan.with_signatures(&checks, &verdicts);
        let reason = plan.outcomes[0].reason.as_deref().unwrap();
        assert!(
            reason.contains("verify[1]: signed by another key"),
            "{reason}"
        );
    }

    /// `onResolutionFailure: allow` admits a tag it could not resolve, unpinned: under a `verify`
    /// entry nothing was verified, so enforce refuses it (at `/mutate` and at `/validate`).
    #[test]
    fn a_covered_tag_admitted_unpinned_is_refused_in_enforce() {
        let mut compiled = policy("enforce", &["registry.example/team/*"]);
        compiled.policy.on_resolution_failure = crate::policy::FailureAction::Allow;
        let value = pod(TAG);
        let triaged = mutation(&compiled, object(&value, None))
            .triage(Mode::Enforce)
            .unwrap();
        let failed = unresolved(&triaged);
        let plan = triaged.finish(&failed, Vec::new());
        assert_eq!(
            plan.outcomes[0].action,
            Action::Violation,
            "allowed unpinned"
        );
        let needed = checks(&compiled, &plan);
        assert!(!needed.is_empty());
        let plan = plan.with_signatures(&needed, &Verdicts::new());
        assert_eq!(plan.outcomes[0].action, Action::Denied);
        assert_eq!(plan.outcomes[0].violation, Some(Reason::Unverified));
        let reason = plan.outcomes[0].reason.as_deref().unwrap();
        assert!(
            reason.starts_with("not verified: verify[0]: not pinned to a digest"),
            "{reason}"
        );
        let checked = validation(&compiled, object(&value, None))
            .finish(Mode::Enforce, Vec::new())
            .unwrap();
        assert_eq!(checked.outcomes[0].action, Action::Violation);
        let again = checks(&compiled, &checked);
        let checked = checked.with_signatures(&again, &Verdicts::new());
        assert_eq!(checked.outcomes[0].action, Action::Denied);
        // An image no entry covers stays admitted as the policy allows.
        let other = pod("registry.example/other/app:1.0");
        let checked = validation(&compiled, object(&other, None))
            .finish(Mode::Enforce, Vec::new())
            .unwrap();
        assert!(checks(&compiled, &checked).is_empty());
    }

    fn kept_by(policy: &CompiledPolicy) -> Arc<VerifiedDigest> {
        Arc::new(VerifiedDigest {
            policy: policy.generation(),
            signers: Arc::from(vec![(0, Arc::from("key held"))]),
        })
    }

    /// A digest pinned from a cache entry that kept its verification under this policy needs
    /// no check: it is noted verified by what was kept, counted once per image, and nothing is
    /// to be kept again.
    #[test]
    fn a_verification_kept_under_this_policy_is_taken_as_it_is() {
        let policy = policy("enforce", &["registry.example/team/*"]);
        // two sites of one tag: one resolution, one kept verification
        let value = pod_of(&[TAG.to_string(), TAG.to_string()]);
        let plan = mutated_kept(&policy, Mode::Enforce, &value, 'd', Some(kept_by(&policy)));
        let needed = checks(&policy, &plan);
        assert!(needed.distinct.is_empty(), "nothing to verify");
        assert!(!needed.is_empty(), "the notes still to write");
        assert_eq!(needed.kept_verdicts(), 1);
        let plan = plan.with_signatures(&needed, &Verdicts::new());
        for outcome in &plan.outcomes {
            assert_eq!(outcome.action, Action::Pinned);
            assert_eq!(outcome.result, format!("{TAG}@{}", digest('d')));
            let note = outcome.signature.as_ref().map(ToString::to_string);
            assert_eq!(note.as_deref(), Some("verify[0]: signed by key held"));
        }
        assert!(needed.to_keep(&policy, &plan).is_empty());
    }

    /// A tag resolved at a mirror is checked whatever verification comes with it: a mirror's
    /// entry keeps what the entries covering the mirror's repository said.
    #[test]
    fn a_verification_that_comes_with_a_mirrors_digest_is_not_taken() {
        let policy = policy("enforce", &["registry.example/team/*"]);
        let value = pod(TAG);
        let mut plan = mutated_kept(&policy, Mode::Enforce, &value, 'd', Some(kept_by(&policy)));
        plan.outcomes[0].origin = Some(crate::registry::Origin {
            mirror: "mirror.example/team".to_string(),
            source_check: crate::registry::SourceCheck::NotAsked,
        });
        let needed = checks(&policy, &plan);
        assert_eq!(needed.distinct.len(), 1, "checked");
        assert_eq!(needed.kept_verdicts(), 0);
    }

    /// A verification kept under another policy (a key rotated, an entry changed) is no
    /// verification: the digest is checked, and its verdicts decide it, whatever was kept.
    #[test]
    fn a_verification_kept_under_another_policy_is_checked_again() {
        let before = policy("enforce", &["registry.example/team/*"]);
        let policy = policy("enforce", &["registry.example/team/*"]);
        assert_ne!(before.generation(), policy.generation());
        let value = pod(TAG);
        let plan = mutated_kept(&policy, Mode::Enforce, &value, 'd', Some(kept_by(&before)));
        let needed = checks(&policy, &plan);
        assert_eq!(needed.distinct.len(), 1);
        assert_eq!(needed.kept_verdicts(), 0);
        let refused = plan
            .clone()
            .with_signatures(&needed, &answer_all(&needed, Ok(Verdict::OtherKey)));
        assert_eq!(refused.outcomes[0].action, Action::Denied);
        assert!(
            needed.to_keep(&policy, &refused).is_empty(),
            "only what verified"
        );
        let plan = plan.with_signatures(&needed, &answer_all(&needed, verified()));
        let keep = needed.to_keep(&policy, &plan);
        assert_eq!(keep.len(), 1);
        assert_eq!(keep[0].1, [0]);
    }

    /// Only a digest pinned from a fresh resolution at the image's own registry is kept: not a
    /// stale one, nor one resolved at a mirror, nor a digest the review carried.
    #[test]
    fn only_fresh_resolutions_at_the_images_registry_are_kept() {
        let policy = policy("enforce", &["registry.example/team/*"]);
        let value = pod(TAG);
        let keep = |edit: &dyn Fn(&mut ImageOutcome)| {
            let mut plan = mutated(&policy, Mode::Enforce, &value, 'd');
            edit(&mut plan.outcomes[0]);
            let needed = checks(&policy, &plan);
            let plan = plan.with_signatures(&needed, &answer_all(&needed, verified()));
            needed.to_keep(&policy, &plan).len()
        };
        assert_eq!(keep(&|_| {}), 1);
        assert_eq!(keep(&|o| o.source = Some(ResolutionSource::Cache)), 1);
        assert_eq!(keep(&|o| o.source = Some(ResolutionSource::Stale)), 0);
        assert_eq!(
            keep(&|o| {
                o.origin = Some(crate::registry::Origin {
                    mirror: "mirror.example/team".to_string(),
                    source_check: crate::registry::SourceCheck::Agreed,
                })
            }),
            0
        );
        let by_hand = pod(&format!("registry.example/team/app@{}", digest('d')));
        let plan = mutated(&policy, Mode::Enforce, &by_hand, 'd');
        let needed = checks(&policy, &plan);
        let plan = plan.with_signatures(&needed, &answer_all(&needed, verified()));
        assert!(needed.to_keep(&policy, &plan).is_empty());
    }

    /// Kept verifications count toward `limits.maxImagesPerObject` as the checks they stand
    /// for: an object past the limit is refused whatever this replica's cache kept.
    #[test]
    fn kept_verifications_count_toward_the_limit() {
        // two entries cover each image: two checks an image
        let mut compiled = policy("enforce", &["registry.example/team/*", "*/team/*"]);
        compiled.policy.limits.max_images_per_object = 3;
        let images: Vec<String> = ["a", "b"]
            .iter()
            .map(|tag| format!("registry.example/team/{tag}:1.0"))
            .collect();
        let value = pod_of(&images);
        let kept = |policy: &CompiledPolicy| {
            Some(Arc::new(VerifiedDigest {
                policy: policy.generation(),
                signers: Arc::from(vec![(0, Arc::from("key 0")), (1, Arc::from("key 1"))]),
            }))
        };
        let plan = mutated_kept(&compiled, Mode::Enforce, &value, 'd', kept(&compiled));
        let needed = checks(&compiled, &plan);
        assert_eq!(needed.kept_verdicts(), 0, "none taken");
        let plan = plan.with_signatures(&needed, &Verdicts::new());
        for outcome in &plan.outcomes {
            assert_eq!(outcome.action, Action::Denied);
            assert_eq!(outcome.violation, Some(Reason::TooManyImages));
            let reason = outcome.reason.as_deref().unwrap();
            assert!(reason.contains("4 digests to verify"), "{reason}");
        }
        // within the limit, they are taken
        compiled.policy.limits.max_images_per_object = 4;
        let plan = mutated_kept(&compiled, Mode::Enforce, &value, 'd', kept(&compiled));
        let needed = checks(&compiled, &plan);
        assert!(needed.distinct.is_empty());
        assert!(needed.kept_verdicts() > 0);
        let plan = plan.with_signatures(&needed, &Verdicts::new());
        assert!(plan.outcomes.iter().all(|o| o.action == Action::Pinned));
    }

    /// `limits.maxImagesPerObject` bounds the verifications one object asks for, as it bounds
    /// the tags it resolves: past it none is made and every covered image is refused.
    #[test]
    fn an_object_asking_more_verifications_than_the_limit_gets_none() {
        let mut compiled = policy("enforce", &["registry.example/team/*"]);
        compiled.policy.limits.max_images_per_object = 2;
        let images: Vec<String> = ['a', 'b', 'c']
            .iter()
            .map(|c| format!("registry.example/team/app@{}", digest(*c)))
            .collect();
        let value = pod_of(&images);
        let plan = mutated(&compiled, Mode::Enforce, &value, 'd');
        let needed = checks(&compiled, &plan);
        assert!(needed.distinct.is_empty(), "nothing is fetched");
        assert!(!needed.is_empty());
        let plan = plan.with_signatures(&needed, &Verdicts::new());
        for outcome in &plan.outcomes {
            assert_eq!(outcome.action, Action::Denied);
            assert_eq!(outcome.violation, Some(Reason::TooManyImages));
            let reason = outcome.reason.as_deref().unwrap();
            assert!(
                reason.contains("3 digests to verify, more than the policy's limit of 2"),
                "{reason}"
            );
        }
    }

    /// Past [`FEW`] distinct checks the keys are hashed: each (repository, digest, trust) is
    /// still one check, whichever site or spelling of its host names it, and every site is
    /// answered by its own.
    #[test]
    fn many_images_each_checked_once_past_the_few() {
        let compiled = policy("enforce", &["registry.example/team/*", "*/team/*"]);
        let hexes: Vec<char> = "0123456789abcdef0123".chars().collect();
        let mut images = Vec::new();
        for (n, c) in hexes.iter().enumerate() {
            let digest = format!("sha256:{}{n:02}", c.to_string().repeat(62));
            images.push(format!("registry.example/team/app@{digest}"));
            // the same digest again, its host spelled otherwise: the same checks
            images.push(format!("REGISTRY.example:443/team/app@{digest}"));
        }
        let value = pod_of(&images);
        let plan = mutated(&compiled, Mode::Enforce, &value, 'd');
        let needed = checks(&compiled, &plan);
        // 20 digests, under 2 entries each
        assert_eq!(needed.distinct.len(), 40);
        assert!(needed.distinct.len() > FEW);
        // each check's verdict names its digest: every site gets the verdicts of its digest
        let verdicts: Verdicts = needed
            .distinct
            .iter()
            .map(|check| {
                Ok(Verdict::Verified {
                    signer: check.key.digest.to_string().into(),
                })
            })
            .collect();
        let plan = plan.with_signatures(&needed, &verdicts);
        for outcome in &plan.outcomes {
            let digest = outcome.site.image.split('@').nth(1).unwrap();
            assert_eq!(
                outcome.signature.as_ref().map(ToString::to_string),
                Some(format!(
                    "verify[0]: signed by {digest}; verify[1]: signed by {digest}"
                )),
                "{}",
                outcome.site.image
            );
        }
    }

    /// A digest the review carries is verified even when the outcome is a violation let in
    /// (`resolve: Always` with `onResolutionFailure: allow`, its tag not resolved).
    #[test]
    fn a_digest_let_in_as_a_violation_is_verified() {
        let mut compiled = policy("enforce", &["registry.example/team/*"]);
        compiled.policy.on_resolution_failure = crate::policy::FailureAction::Allow;
        compiled.policy.resolve = crate::policy::ResolveMode::Always;
        let value = pod(&format!("registry.example/team/app:nope@{}", digest('f')));
        let triaged = mutation(&compiled, object(&value, None))
            .triage(Mode::Enforce)
            .unwrap();
        let failed = unresolved(&triaged);
        let plan = triaged.finish(&failed, Vec::new());
        assert_eq!(plan.outcomes[0].action, Action::Violation);
        let needed = checks(&compiled, &plan);
        assert_eq!(needed.distinct.len(), 1);
        assert_eq!(needed.distinct[0].key.digest, digest('f'));
        let plan = plan.with_signatures(&needed, &answer_all(&needed, Ok(Verdict::NoSignature)));
        assert_eq!(plan.outcomes[0].action, Action::Denied);
    }

    #[test]
    fn what_no_entry_covers_what_is_exempt_and_what_the_update_left_are_not_checked() {
        let policy = policy("enforce", &["registry.example/team/*"]);
        for image in [
            "registry.example/other/app:1.0".to_string(),
            "registry.example/exempt/app:1.0".to_string(),
        ] {
            let value = pod(&image);
            let plan = mutated(&policy, Mode::Enforce, &value, 'd');
            let none = checks(&policy, &plan);
            assert!(none.is_empty(), "{image}");
            let plan = plan.with_signatures(&none, &Verdicts::new());
            assert_ne!(plan.outcomes[0].action, Action::Denied, "{image}");
        }
        let pinned = pod(&format!("{TAG}@{}", digest('f')));
        let triaged = mutation(&policy, object(&pinned, Some(&pinned)))
            .triage(Mode::Enforce)
            .unwrap();
        let plan = triaged.finish(&Resolutions::new(), Vec::new());
        assert!(
            checks(&policy, &plan).is_empty(),
            "not changed by this update"
        );
    }

    /// The map keeps every key and its value across the change from scanning to hashing.
    #[test]
    fn few_or_many_keeps_every_key_past_the_few() {
        let mut map = FewOrMany::default();
        for i in 0..40 {
            assert_eq!(map.get(&i), None);
            map.insert(i, i * 10);
            assert!(matches!(
                (&map, i < FEW as i32),
                (FewOrMany::Few(_), true) | (FewOrMany::Many(_), false)
            ));
        }
        for i in 0..40 {
            assert_eq!(map.get(&i), Some(&(i * 10)));
        }
        assert_eq!(map.get(&40), None);
    }
}
