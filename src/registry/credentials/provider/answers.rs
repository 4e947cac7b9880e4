//! One provider's cached answers, as kubelet caches them (keyed by image, registry or
//! `global`, each for its own `cacheDuration`), bounded in bytes: every distinct image of a
//! review may leave an answer behind, so the cache holds at most [`Settings::cache_bytes`]
//! of them, each weighed as its keys and credentials plus a fixed [`ENTRY_OVERHEAD`] (which
//! also bounds how many entries fit). The least used go first when it is full.
//!
//! Owns: [`Answers`]. Never: decides the key or the duration (that is the provider's answer).
//!
//! [`Settings::cache_bytes`]: super::Settings::cache_bytes

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::registry::credentials::Credential;

/// What an entry costs beyond its strings (the map's own bookkeeping, the `Arc`s), in bytes.
pub(super) const ENTRY_OVERHEAD: usize = 256;

/// One answer: the entries and how long they stand.
#[derive(Clone)]
pub(super) struct Answer {
    pub entries: Arc<Vec<(String, Credential)>>,
    pub ttl: Duration,
}

/// A provider's answers by cache key.
pub(super) struct Answers {
    cache: moka::sync::Cache<String, Answer>,
}

struct ByTtl;

impl moka::Expiry<String, Answer> for ByTtl {
    fn expire_after_create(&self, _: &String, answer: &Answer, _: Instant) -> Option<Duration> {
        Some(answer.ttl)
    }
}

/// The bytes an answer under `key` is counted as.
pub(super) fn weight(key: &str, answer: &Answer) -> u32 {
    let entries: usize = answer
        .entries
        .iter()
        .map(|(registry, credential)| registry.len() + credential.approximate_bytes())
        .sum();
    u32::try_from(ENTRY_OVERHEAD + key.len() + entries).unwrap_or(u32::MAX)
}

// === impl Answers ===

impl Answers {
    /// At most `max_bytes` of answers (weighed by [`weight`]).
    pub fn new(max_bytes: u64) -> Answers {
        Answers {
            cache: moka::sync::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|key: &String, answer: &Answer| weight(key, answer))
                .expire_after(ByTtl)
                .build(),
        }
    }

    /// The answer under `key`, unless it expired.
    pub fn get(&self, key: &str) -> Option<Arc<Vec<(String, Credential)>>> {
        self.cache.get(key).map(|answer| answer.entries)
    }

    pub fn insert(&self, key: String, answer: Answer) {
        self.cache.insert(key, answer);
    }

    /// Bytes held now, once pending evictions are done (for tests).
    #[cfg(test)]
    pub fn weighed_size(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.weighted_size()
    }

    #[cfg(test)]
    pub fn entry_count(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }
}
