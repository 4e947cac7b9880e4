//! One provider's cached answers, as kubelet caches them (keyed by image, registry or
//! `global`, each for its own `cacheDuration`), and its failures by registry (kubelet keeps
//! none; pinhook does, issue 44: a review naming a hundred images of one registry whose plugin
//! fails would run it a hundred times), bounded in bytes together: every distinct image of a
//! review may leave an answer behind, so the cache holds at most [`Settings::cache_bytes`]
//! of them, each weighed as its keys and credentials (or its failure) plus a fixed
//! [`ENTRY_OVERHEAD`] (which also bounds how many entries fit). The least used go first when
//! it is full.
//!
//! Owns: [`Answers`]. Never: decides the key or the duration (that is the provider's answer,
//! or its settings' `failure_ttl`).
//!
//! [`Settings::cache_bytes`]: super::Settings::cache_bytes

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::PluginError;
use crate::registry::credentials::Credential;

/// What an entry costs beyond its strings (the map's own bookkeeping, the `Arc`s), in bytes.
pub(super) const ENTRY_OVERHEAD: usize = 256;

/// One answer: the entries and how long they stand.
#[derive(Clone)]
pub(super) struct Answer {
    pub entries: Arc<Vec<(String, Credential)>>,
    pub ttl: Duration,
}

/// A provider's answers by cache key, and its failures by registry.
pub(super) struct Answers {
    cache: moka::sync::Cache<Key, Kept>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Answer(String),
    /// (tenant, registry)
    Failure(String, String),
}

#[derive(Clone)]
enum Kept {
    Answer(Answer),
    Failure { error: PluginError, ttl: Duration },
}

struct ByTtl;

impl moka::Expiry<Key, Kept> for ByTtl {
    fn expire_after_create(&self, _: &Key, kept: &Kept, _: Instant) -> Option<Duration> {
        Some(match kept {
            Kept::Answer(answer) => answer.ttl,
            Kept::Failure { ttl, .. } => *ttl,
        })
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

fn weight_kept(key: &Key, kept: &Kept) -> u32 {
    let key_bytes = match key {
        Key::Answer(key) => key.len(),
        Key::Failure(tenant, registry) => tenant.len() + registry.len(),
    };
    match kept {
        Kept::Answer(answer) => weight("", answer).saturating_add(key_bytes as u32),
        Kept::Failure { error, .. } => {
            u32::try_from(ENTRY_OVERHEAD + key_bytes + error.to_string().len()).unwrap_or(u32::MAX)
        }
    }
}

// === impl Answers ===

impl Answers {
    /// At most `max_bytes` of answers (weighed by [`weight`]).
    pub fn new(max_bytes: u64) -> Answers {
        Answers {
            cache: moka::sync::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(weight_kept)
                .expire_after(ByTtl)
                .build(),
        }
    }

    /// The answer under `key`, unless it expired.
    pub fn get(&self, key: &str) -> Option<Arc<Vec<(String, Credential)>>> {
        match self.cache.get(&Key::Answer(key.to_string()))? {
            Kept::Answer(answer) => Some(answer.entries),
            Kept::Failure { .. } => None,
        }
    }

    pub fn insert(&self, key: String, answer: Answer) {
        self.cache.insert(Key::Answer(key), Kept::Answer(answer));
    }

    /// How the provider last failed for `tenant`'s image of `registry`, if that was less
    /// than its ttl ago. (By tenant: an image one tenant names may make a plugin fail, and
    /// that must not cost another tenant its credentials.)
    pub fn failure(&self, tenant: &str, registry: &str) -> Option<PluginError> {
        let key = Key::Failure(tenant.to_string(), registry.to_string());
        match self.cache.get(&key)? {
            Kept::Failure { error, .. } => Some(error),
            Kept::Answer(_) => None,
        }
    }

    /// Remembers for `ttl` (zero: not at all) that the provider failed for `tenant`'s image
    /// of `registry`.
    pub fn insert_failure(&self, tenant: &str, registry: &str, error: PluginError, ttl: Duration) {
        if !ttl.is_zero() {
            let key = Key::Failure(tenant.to_string(), registry.to_string());
            self.cache.insert(key, Kept::Failure { error, ttl });
        }
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
