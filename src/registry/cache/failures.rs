//! What the cache remembers of a registry's failures, and what it answers meanwhile: "not
//! found" and "unauthorized" answers for `failure_ttl` (never a transport error or a 5xx), the
//! backoff of a key whose registry was unavailable (doubling from `backoff_base` to
//! `backoff_cap`), and the last known digest served while it is (`max_stale`), marked `Stale`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{CacheConfig, EntryRef, FlightKey, SharedState};
use crate::registry::{RegistryError, Resolution, ResolutionSource};

/// A remembered "not found" or "unauthorized" answer.
pub(super) struct FailureRecord {
    pub(super) error: Arc<RegistryError>,
}

/// A key backing off after its registry was unavailable.
pub(super) struct Backoff {
    failures: u32,
    until: Instant,
    pub(super) last: Arc<RegistryError>,
}

// === impl SharedState ===

impl SharedState {
    /// The newest entry for any of the caller's credentials, however old (within `max_stale`).
    pub(super) fn last_known(&self, key: &FlightKey) -> Option<Resolution> {
        key.1
            .iter()
            .filter_map(|fp| {
                let (record, age, now) = self.entry(&EntryRef {
                    tag: &key.0,
                    credential: *fp,
                })?;
                Some((*fp, record, age, now))
            })
            .min_by_key(|(_, _, age, _)| *age)
            .filter(|(_, _, age, _)| *age <= self.config.max_stale)
            .map(|(fp, record, age, now)| Resolution {
                digest: record.digest(),
                credential: fp,
                source: ResolutionSource::Stale,
                moved_from: None,
                age,
                origin: None,
                verified: record.verified_for(&key.1, now),
            })
    }

    pub(super) fn stale_or(
        &self,
        key: &FlightKey,
        error: RegistryError,
    ) -> Result<Resolution, RegistryError> {
        match self.last_known(key) {
            Some(stale) => {
                self.metrics.cache("stale");
                Ok(stale)
            }
            None => Err(error),
        }
    }

    pub(super) fn active_backoff(&self, key: &FlightKey) -> Option<RegistryError> {
        let backoff = self.backoff.get(key)?;
        let now = Instant::now();
        (backoff.until > now).then(|| RegistryError::BackingOff {
            registry: registry_of(&key.0),
            retry_in: backoff.until - now,
            last: backoff.last.clone(),
        })
    }

    pub(super) fn record_failure(
        &self,
        key: &FlightKey,
        error: RegistryError,
    ) -> Arc<RegistryError> {
        let error = Arc::new(error);
        if error.is_auth_or_not_found() {
            self.failures.insert(
                key.clone(),
                Arc::new(FailureRecord {
                    error: error.clone(),
                }),
            );
        } else if error.is_unavailable() {
            let failures = self.backoff.get(key).map_or(0, |b| b.failures) + 1;
            let delay = backoff_delay(&self.config, failures);
            self.backoff.insert(
                key.clone(),
                Arc::new(Backoff {
                    failures,
                    until: Instant::now() + delay,
                    last: error.clone(),
                }),
            );
        }
        error
    }
}

/// How long a key backs off after `failures` failures in a row.
pub(super) fn backoff_delay(config: &CacheConfig, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
    config
        .backoff_base
        .saturating_mul(factor)
        .min(config.backoff_cap)
}

fn registry_of(tag_reference: &str) -> String {
    tag_reference
        .split_once('/')
        .map_or(tag_reference, |(domain, _)| domain)
        .to_string()
}
