//! A positive entry as the cache holds it, inline in moka's own entry: the digest, when it was
//! resolved and the verification kept beside it, if any ([`super::kept`]), 48 bytes with no
//! allocation of its own for a sha256 digest; and the claims of the entries whose
//! refresh-ahead a lookup has started, kept beside the entries rather than in them.
//!
//! Never: grows with anything but the entries (claims of records past their TTL are dropped as
//! the claims grow).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::clock::Stamp;
use super::kept::KeptVerifications;
use super::lock;
use crate::reference::Digest;
use crate::registry::{Fingerprint, VerifiedDigest};

/// A positive entry: the digest (sha256, nearly every registry's, as its 32 bytes, written out
/// again on a hit; any other algorithm as it is, boxed), when it was resolved, and the
/// verification kept beside it.
#[derive(Clone, Debug)]
pub(super) enum Record {
    Sha256 {
        digest: [u8; 32],
        resolved_at: Stamp,
        kept: Option<Arc<KeptVerifications>>,
    },
    Other(Box<(Digest, Stamp, Option<Arc<KeptVerifications>>)>),
}

/// The entries whose refresh-ahead a lookup has started: each by its key's hash (keyed at
/// random per cache) and the stamp of the record being refreshed. A claim is for one record, so
/// the record that replaces it can be claimed again; a claim left by a refresh that failed keeps
/// the record from being refreshed again, as the lookups that find it stale will resolve it.
pub(super) struct RefreshClaims {
    hasher: RandomState,
    claims: Mutex<Claims>,
}

struct Claims {
    by_key: HashMap<u64, Stamp>,
    /// The size at which claims of records past their TTL are dropped: twice what was left the
    /// last time, so dropping costs a constant per claim.
    prune_at: usize,
}

/// Claims held before the first pruning.
const MIN_PRUNE_AT: usize = 1024;

// === impl Record ===

impl Record {
    pub(super) fn new(digest: &Digest, resolved_at: Stamp) -> Record {
        match digest.sha256_bytes() {
            Some(digest) => Record::Sha256 {
                digest,
                resolved_at,
                kept: None,
            },
            None => Record::Other(Box::new((digest.clone(), resolved_at, None))),
        }
    }

    pub(super) fn digest(&self) -> Digest {
        match self {
            Record::Sha256 { digest, .. } => Digest::from_sha256_bytes(digest),
            Record::Other(other) => other.0.clone(),
        }
    }

    pub(super) fn resolved_at(&self) -> Stamp {
        match self {
            Record::Sha256 { resolved_at, .. } => *resolved_at,
            Record::Other(other) => other.1,
        }
    }

    /// The verification kept beside the digest, if any.
    pub(super) fn kept(&self) -> Option<&Arc<KeptVerifications>> {
        match self {
            Record::Sha256 { kept, .. } => kept.as_ref(),
            Record::Other(other) => other.2.as_ref(),
        }
    }

    /// The same digest, resolved at `at`, with the same verification kept.
    pub(super) fn resolved(&self, at: Stamp) -> Record {
        match self {
            Record::Sha256 { digest, kept, .. } => Record::Sha256 {
                digest: *digest,
                resolved_at: at,
                kept: kept.clone(),
            },
            Record::Other(other) => Record::Other(Box::new((other.0.clone(), at, other.2.clone()))),
        }
    }

    /// The same digest and time, with `kept` beside it instead.
    pub(super) fn with_kept(self, kept: Option<Arc<KeptVerifications>>) -> Record {
        match self {
            Record::Sha256 {
                digest,
                resolved_at,
                ..
            } => Record::Sha256 {
                digest,
                resolved_at,
                kept,
            },
            Record::Other(mut other) => {
                other.2 = kept;
                Record::Other(other)
            }
        }
    }

    pub(super) fn same_digest(&self, other: &Record) -> bool {
        match (self, other) {
            (Record::Sha256 { digest: a, .. }, Record::Sha256 { digest: b, .. }) => a == b,
            (Record::Other(a), Record::Other(b)) => a.0 == b.0,
            _ => false,
        }
    }

    /// The verification kept beside the digest for a lookup with `candidates` at `now`, if
    /// one answers it.
    pub(super) fn verified_for(
        &self,
        candidates: &[Fingerprint],
        now: Stamp,
    ) -> Option<Arc<VerifiedDigest>> {
        self.kept()?.answering(candidates, now)
    }

    /// Whether this is a record of `digest`.
    pub(super) fn is_of(&self, digest: &Digest) -> bool {
        match self {
            Record::Sha256 { digest: bytes, .. } => digest.sha256_bytes().as_ref() == Some(bytes),
            Record::Other(other) => other.0 == *digest,
        }
    }
}

// === impl RefreshClaims ===

impl RefreshClaims {
    pub(super) fn new() -> RefreshClaims {
        RefreshClaims {
            hasher: RandomState::new(),
            claims: Mutex::new(Claims {
                by_key: HashMap::new(),
                prune_at: MIN_PRUNE_AT,
            }),
        }
    }

    /// True for the first call for `key`'s record resolved at `record`; false after. Claims of
    /// records `hit_ttl` old at `now` (past refreshing) are dropped as the claims grow.
    pub(super) fn claim(
        &self,
        key: &impl Hash,
        record: Stamp,
        now: Stamp,
        hit_ttl: Duration,
    ) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut claims = lock(&self.claims);
        if claims.by_key.get(&hash) == Some(&record) {
            return false;
        }
        if claims.by_key.len() >= claims.prune_at {
            claims.by_key.retain(|_, at| at.age_at(now) < hit_ttl);
            claims.prune_at = (claims.by_key.len() * 2).max(MIN_PRUNE_AT);
        }
        claims.by_key.insert(hash, record);
        true
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        lock(&self.claims).by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::clock::Clock;
    use super::*;

    fn sha256() -> Digest {
        format!("sha256:{}", "ab".repeat(32))
            .parse()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_record_is_forty_eight_bytes_inline() {
        assert_eq!(std::mem::size_of::<Record>(), 48);
    }

    #[test]
    fn sha256_kept_as_its_bytes_and_written_back() {
        let clock = Clock::new();
        let record = Record::new(&sha256(), clock.now());
        assert!(matches!(record, Record::Sha256 { .. }));
        assert_eq!(record.digest(), sha256());
    }

    #[test]
    fn other_algorithms_kept_as_they_are() {
        let sha512: Digest = format!("sha512:{}", "cd".repeat(64))
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let at = Clock::new().now();
        let record = Record::new(&sha512, at);
        assert!(matches!(record, Record::Other(_)));
        assert_eq!(record.digest(), sha512);
        assert_eq!(record.resolved_at(), at);
        assert!(!record.same_digest(&Record::new(&sha256(), at)));
        assert!(record.same_digest(&record.resolved(at.minus(Duration::from_secs(9)))));
    }

    #[test]
    fn a_claim_is_for_one_record() {
        let claims = RefreshClaims::new();
        let ttl = Duration::from_secs(300);
        let now = Clock::new().now();
        let first = now.minus(Duration::from_secs(250));
        assert!(claims.claim(&"a", first, now, ttl));
        assert!(!claims.claim(&"a", first, now, ttl), "claimed once");
        assert!(claims.claim(&"b", first, now, ttl), "another key");
        assert!(
            claims.claim(&"a", now, now, ttl),
            "the record that replaced it"
        );
        assert!(!claims.claim(&"a", now, now, ttl));
    }

    #[test]
    fn claims_past_their_ttl_are_dropped_as_claims_grow() {
        let claims = RefreshClaims::new();
        let ttl = Duration::from_secs(300);
        let now = Clock::new().now();
        let old = now.minus(Duration::from_secs(301));
        for i in 0..MIN_PRUNE_AT {
            assert!(claims.claim(&i, old, now, ttl));
        }
        assert_eq!(claims.len(), MIN_PRUNE_AT);
        let fresh = now.minus(Duration::from_secs(240));
        assert!(claims.claim(&"fresh", fresh, now, ttl));
        assert_eq!(claims.len(), 1, "every claim past its TTL dropped");
        for i in 0..10 * MIN_PRUNE_AT {
            assert!(claims.claim(&(i, "live"), fresh, now, ttl));
        }
        assert_eq!(
            claims.len(),
            10 * MIN_PRUNE_AT + 1,
            "claims of records within their TTL kept"
        );
    }
}
