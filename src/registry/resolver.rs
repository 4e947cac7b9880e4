//! The [`Resolver`] trait every layer implements and every handler talks to, and what a
//! resolution found.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{Credential, Fingerprint, RegistryError, VerifiedDigest};
use crate::reference::{Digest, Reference};

/// What a resolution found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub digest: Digest,
    /// Fingerprint of the credential that succeeded.
    pub credential: Fingerprint,
    pub source: ResolutionSource,
    /// The digest this tag pointed at before, when a refresh found that it moved.
    pub moved_from: Option<Digest>,
    /// How old a `Stale` answer is.
    pub age: Duration,
    /// Set when the policy routed the tag through a mirror: which one answered.
    pub origin: Option<Origin>,
    /// The verification kept beside this digest for these credentials, still within its
    /// verdicts' expiry ([`Resolver::keep_verified`]): only from a cache's entry of this very
    /// tag (fresh or stale), never for a tag resolved at a mirror.
    pub verified: Option<Arc<VerifiedDigest>>,
}

/// The mirror that answered a routed resolution (`registries.resolveThrough`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The mirror's location as the policy names it (canonical).
    pub mirror: String,
    pub source_check: SourceCheck,
}

/// What `verifySource` found (a disagreement is an error, never a resolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceCheck {
    /// `verifySource` is off.
    NotAsked,
    /// The source answered the same digest.
    Agreed,
    /// The source did not answer (in time): the mirror's digest is unverified.
    Unanswered,
    /// The source answered another digest: never a resolution, only what outcomes and metrics
    /// report for the denial.
    Disagreed,
}

impl SourceCheck {
    /// The fixed vocabulary of the source-check metric and the summary line.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceCheck::NotAsked => "not_asked",
            SourceCheck::Agreed => "agreed",
            SourceCheck::Unanswered => "unanswered",
            SourceCheck::Disagreed => "disagreed",
        }
    }
}

/// Where a digest came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolutionSource {
    Registry,
    Cache,
    /// A cached digest served because the registry could not be reached.
    Stale,
}

/// Resolves tags to digests. Implemented against a real registry
/// ([`OciResolver`](super::OciResolver)) and by each layer in front of it (the cache and its
/// read-only view, the address guard, the identity-token exchange, the dry run's memo), and by
/// recorded resolvers in tests.
#[async_trait]
pub trait Resolver: Send + Sync {
    /// Resolves `reference`'s effective tag. `credentials` are the candidates in kubelet's order
    /// (most specific first); each is tried until one succeeds, then anonymous.
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError>;

    /// The newest digest remembered for `reference` under these credentials (or anonymous),
    /// however old within the resolver's staleness limit, marked `Stale`: what an admission
    /// pins when its deadline passes before the registry answers. Only caches remember.
    fn last_known(
        &self,
        _reference: &Reference,
        _credentials: &[Credential],
    ) -> Option<Resolution> {
        None
    }

    /// Keeps `verified` beside the entry a lookup of `reference` with `credentials` finds,
    /// while that entry is of `digest`, until `until` (the earliest expiry of its verdicts):
    /// later lookups hand it back with the digest ([`Resolution::verified`]). Only the cache
    /// keeps; a tag that moves, a refresh that finds another digest, or other credentials find
    /// none.
    fn keep_verified(
        &self,
        _reference: &Reference,
        _credentials: &[Credential],
        _digest: &Digest,
        _verified: Arc<VerifiedDigest>,
        _until: Instant,
    ) {
    }
}
