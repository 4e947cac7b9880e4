//! Verifications kept beside the digest they are of (issue 46): when every `verify` entry
//! covering an image verified the digest its tag resolved to, admission hands the cache that
//! [`VerifiedDigest`] (`Resolver::keep_verified`), and the entry the tag's lookup finds keeps
//! it, so that the next warm admission of the tag gets its digest and its verification from
//! one lookup, with no verdict asked for.
//!
//! Guarantees:
//! - A verification answers only a lookup with the same candidate credentials (anonymous
//!   included) that verified it, and only until the earliest expiry of the verdicts it was
//!   made of. An entry keeps one per set of candidates, at most [`KEPT_PER_ENTRY`] (the oldest
//!   goes first), so namespaces whose credentials differ but find the same entry do not
//!   replace each other's at every admission. (Past that many sets, they take turns: an
//!   admission whose set was pushed out asks the verdict cache, as before, and keeps its own
//!   again. It takes namespaces whose different pull secrets for one registry all fail where
//!   anonymous pulls succeed: an entry is keyed by the credential that succeeded.)
//! - They stay with their digest (the cache's part, [`super::CachingResolver`]): a refresh
//!   that finds the same digest keeps them; one that finds another (the tag moved) drops them,
//!   and one is kept only while the entry is still of the digest verified (checked and
//!   replaced in one step on the entry's own lock).
//! - Each names the compiled policy that verified it: under any other, admission ignores it.
//!
//! Never: judges a signature or decides an admission (the verdicts and the plan do).

use std::sync::Arc;

use super::clock::Stamp;
use crate::registry::{Fingerprint, VerifiedDigest};

/// Verifications an entry keeps, one per set of candidate credentials.
pub const KEPT_PER_ENTRY: usize = 4;

/// What an entry keeps of its digest's verifications, oldest first.
#[derive(Debug)]
pub(super) struct KeptVerifications(Box<[KeptVerification]>);

#[derive(Debug)]
pub(super) struct KeptVerification {
    verified: Arc<VerifiedDigest>,
    /// The fingerprints of the candidate credentials it was verified with, anonymous last.
    candidates: Box<[Fingerprint]>,
    /// The earliest expiry of the verdicts it was made of.
    until: Stamp,
}

// === impl KeptVerification ===

impl KeptVerification {
    /// `verified`, for lookups with `candidates` (anonymous last), until `until`.
    pub(super) fn new(
        verified: Arc<VerifiedDigest>,
        candidates: Vec<Fingerprint>,
        until: Stamp,
    ) -> KeptVerification {
        KeptVerification {
            verified,
            candidates: candidates.into_boxed_slice(),
            until,
        }
    }
}

// === impl KeptVerifications ===

impl KeptVerifications {
    /// The verification for a lookup with `candidates` at `now`, if one answers it.
    pub(super) fn answering(
        &self,
        candidates: &[Fingerprint],
        now: Stamp,
    ) -> Option<Arc<VerifiedDigest>> {
        let kept = self.0.iter().find(|kept| *kept.candidates == *candidates)?;
        (now < kept.until).then(|| kept.verified.clone())
    }

    /// These with `kept` in place of the one for its candidates, or added (the oldest dropped
    /// past [`KEPT_PER_ENTRY`]).
    pub(super) fn with(
        this: Option<&KeptVerifications>,
        kept: KeptVerification,
    ) -> KeptVerifications {
        let others = this.map_or(&[][..], |this| &this.0[..]);
        let mut all: Vec<KeptVerification> = others
            .iter()
            .filter(|other| other.candidates != kept.candidates)
            .map(|other| KeptVerification {
                verified: other.verified.clone(),
                candidates: other.candidates.clone(),
                until: other.until,
            })
            .collect();
        let over = (all.len() + 1).saturating_sub(KEPT_PER_ENTRY);
        all.drain(..over);
        all.push(kept);
        KeptVerifications(all.into_boxed_slice())
    }

    /// Bytes beyond the record: what the cache's weigher adds.
    pub(super) fn bytes(&self) -> usize {
        let each = |kept: &KeptVerification| {
            size_of::<KeptVerification>()
                + size_of::<VerifiedDigest>()
                + kept.candidates.len() * size_of::<Fingerprint>()
                + kept.verified.signers.len() * size_of::<(usize, Arc<str>)>()
                + 64
        };
        size_of::<KeptVerifications>() + self.0.iter().map(each).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::registry::cache::clock::Clock;
    use crate::registry::Credential;

    fn user(candidate: u8) -> Fingerprint {
        Credential::Basic {
            username: format!("user-{candidate}"),
            password: "secret".to_string(),
        }
        .fingerprint()
    }

    fn kept(candidate: u8, until: Stamp) -> KeptVerification {
        KeptVerification {
            verified: Arc::new(VerifiedDigest {
                policy: u64::from(candidate),
                signers: Arc::from(vec![(0, Arc::from("key"))]),
            }),
            candidates: vec![user(candidate), Fingerprint::anonymous()].into_boxed_slice(),
            until,
        }
    }

    /// One verification per set of candidates, the newest replacing the one for the same set,
    /// at most four (the oldest dropped); each answers its own candidates only, until its time.
    #[test]
    fn one_per_set_of_candidates_at_most_four_each_until_its_time() {
        let clock = Clock::new();
        let now = clock.now();
        let later = clock.stamp(Instant::now() + Duration::from_secs(60));
        let mut all = KeptVerifications::with(None, kept(1, later));
        for candidate in 2..=5 {
            all = KeptVerifications::with(Some(&all), kept(candidate, later));
        }
        assert_eq!(all.0.len(), KEPT_PER_ENTRY);
        let candidates = |c: u8| [user(c), Fingerprint::anonymous()];
        assert_eq!(
            all.answering(&candidates(1), now),
            None,
            "the oldest dropped"
        );
        for c in 2..=5 {
            let answer = all.answering(&candidates(c), now);
            assert_eq!(answer.map(|v| v.policy), Some(u64::from(c)));
        }
        assert_eq!(all.answering(&[Fingerprint::anonymous()], now), None);
        // the same candidates again: replaced in place, nothing dropped
        let all = KeptVerifications::with(Some(&all), kept(3, now));
        assert_eq!(all.0.len(), KEPT_PER_ENTRY);
        assert_eq!(all.answering(&candidates(3), now), None, "past its time");
        assert!(all.answering(&candidates(2), now).is_some());
    }
}
