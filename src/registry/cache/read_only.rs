//! The side-effect-free view of the cache for dry runs: answers from it, asks the registry on
//! a miss within the same per-registry limit, backoff and breaker as admission, and records
//! nothing (no entries, no moves, no backoff).
//!
//! Owns: [`ReadOnlyCache`]. Never: writes to the cache.

use std::sync::Arc;

use async_trait::async_trait;

use super::{flight_key, Lookup, SharedState};
use crate::reference::Reference;
use crate::registry::{Credential, RegistryError, Resolution, Resolver};

/// The side-effect-free view of a [`CachingResolver`] (see [`CachingResolver::read_only`]).
pub struct ReadOnlyCache {
    pub(super) inner: Arc<dyn Resolver>,
    pub(super) shared: Arc<SharedState>,
}

#[async_trait]
impl Resolver for ReadOnlyCache {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        let (key, candidates) = match self.shared.lookup(reference, credentials, false) {
            Lookup::Answered(answer) => return answer,
            // Never returned when the lookup does not record (a dry run changes nothing).
            Lookup::RefreshAhead(hit, _, _) => return Ok(hit),
            Lookup::Miss(key, candidates) => (key, candidates),
        };
        // The same limits as admission's lookups (not recorded: a dry run changes nothing).
        if let Some(backoff) = self.shared.active_backoff(&key) {
            return self.shared.stale_or(&key, backoff);
        }
        if let Some(paused) = self.shared.breakers.paused(reference.domain()) {
            return self.shared.stale_or(&key, paused);
        }
        let limit = self.shared.limit_for(reference.domain());
        let _permit = limit.acquire_owned().await.ok();
        match self.inner.resolve(reference, &candidates).await {
            Ok(resolution) => Ok(resolution),
            Err(error) if error.is_unavailable() => self.shared.stale_or(&key, error),
            Err(error) => Err(error),
        }
    }

    fn last_known(&self, reference: &Reference, credentials: &[Credential]) -> Option<Resolution> {
        self.shared.last_known(&flight_key(reference, credentials))
    }
}
