//! Signatures in the plan (issue 46): which digests an admission lets in that the policy's
//! `verify` entries cover, and what their verdicts make of each image. The digest checked is
//! the one admitted: the digest pinned (the index digest of a multi-arch image, the one the
//! tag resolved to in this very step), or the one the review already carries, so writing a
//! digest by hand is no way around verification. A digest that fails any entry covering it is
//! denied in enforce and reported in audit (`unverified`), whatever `onResolutionFailure`
//! says: a signature that cannot be fetched is not one that was checked.
//!
//! Pure: [`checks`] says what to verify, the I/O half verifies each once, and
//! [`Plan::with_signatures`] applies the verdicts.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::policy::{CompiledPolicy, Mode, VerifyRule};
use crate::reference::{Digest, Reference};
use crate::registry::RegistryError;
use crate::signatures::{Trust, Verdict};

use super::outcome::{short, Action, ImageOutcome, Plan, Reason};

/// What a verification's answer is keyed by: a digest of a repository under one trust, never a
/// tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckKey {
    pub repository: String,
    pub digest: Digest,
    /// [`Trust::fingerprint`].
    pub trust: String,
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

/// The answers, one per [`CheckKey`]; a missing one counts as not verified.
pub type Verdicts = HashMap<CheckKey, Result<Verdict, RegistryError>>;

/// The distinct verifications `plan`'s admitted digests need under `policy`, first image first.
pub fn checks(policy: &CompiledPolicy, plan: &Plan) -> Vec<SignatureCheck> {
    if policy.verify.is_empty() {
        return Vec::new();
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (image, digest) in plan.outcomes.iter().filter_map(admitted) {
        for rule in policy.verify_rules(&image) {
            let check = check_of(&image, &digest, rule);
            if seen.insert(check.key.clone()) {
                out.push(check);
            }
        }
    }
    out
}

fn check_of(image: &Reference, digest: &Digest, rule: &VerifyRule) -> SignatureCheck {
    SignatureCheck {
        key: CheckKey {
            repository: image.repository(),
            digest: digest.clone(),
            trust: rule.trust.fingerprint().to_string(),
        },
        image: image.clone(),
        trust: rule.trust.clone(),
    }
}

/// The image and the digest an outcome admits, when it is new in this request: the digest
/// pinned (or, in audit, the one enforce would pin), else the one the image carries.
fn admitted(outcome: &ImageOutcome) -> Option<(Reference, Digest)> {
    if !outcome.site.is_new || !matches!(outcome.action, Action::Pinned | Action::Unchanged) {
        return None;
    }
    let image = Reference::parse(&outcome.site.image).ok()?;
    let digest = outcome.digest.clone().or_else(|| image.digest().cloned())?;
    Some((image, digest))
}

// === impl Plan ===

impl Plan {
    /// Applies the verdicts: each admitted digest must hold under every entry covering it, or
    /// its image is denied (enforce) or reported (audit) as `unverified`, naming the entry and
    /// why in one line; a verified one says by which key.
    pub fn with_signatures(mut self, policy: &CompiledPolicy, verdicts: &Verdicts) -> Plan {
        if policy.verify.is_empty() {
            return self;
        }
        let failed = match self.mode {
            Mode::Enforce => Action::Denied,
            Mode::Audit => Action::Violation,
            Mode::Off => return self,
        };
        for outcome in &mut self.outcomes {
            let Some((image, digest)) = admitted(outcome) else {
                continue;
            };
            let mut notes = Vec::new();
            let mut refusal = None;
            for rule in policy.verify_rules(&image) {
                let key = check_of(&image, &digest, rule).key;
                match verdicts.get(&key) {
                    Some(Ok(verdict @ Verdict::Verified { .. })) => {
                        notes.push(format!("{}: {}", rule.name(), verdict.describe()));
                    }
                    Some(Ok(verdict)) => {
                        refusal.get_or_insert_with(|| {
                            format!(
                                "{}: {} for {}",
                                rule.name(),
                                verdict.describe(),
                                short(&digest)
                            )
                        });
                    }
                    Some(Err(error)) => {
                        refusal.get_or_insert_with(|| {
                            format!(
                                "{}: registry did not answer for the signatures of {}: {}",
                                rule.name(),
                                short(&digest),
                                crate::error::error_chain(error)
                            )
                        });
                    }
                    None => {
                        refusal.get_or_insert_with(|| {
                            format!("{}: verification did not run", rule.name())
                        });
                    }
                }
            }
            match refusal {
                Some(text) => {
                    outcome.signature = Some(text.clone());
                    outcome.action = failed;
                    outcome.violation = Some(Reason::Unverified);
                    outcome.reason = Some(format!("not verified: {text}"));
                    outcome.result = outcome.site.image.clone();
                }
                None if !notes.is_empty() => outcome.signature = Some(notes.join("; ")),
                None => {}
            }
        }
        self
    }
}

/// The outcome of each verification for the metric: `verified`, a verdict's reason, or
/// `registry_error`.
pub fn outcome_name(answer: &Result<Verdict, RegistryError>) -> &'static str {
    match answer {
        Ok(verdict) => verdict.reason(),
        Err(_) => "registry_error",
    }
}
