//! The resolution cache in front of a [`Resolver`]: fresh hits, negative entries, single-flight,
//! stale-if-error, per-key backoff, per-registry concurrency limits, and tag-moved detection.
//!
//! Guarantees:
//! - An entry is keyed by (normalised `repository:tag`, fingerprint of the credential that
//!   succeeded). A lookup only consults the fingerprints of the credentials the caller holds
//!   (plus anonymous), so a namespace without a secret is never answered from an entry made
//!   with another namespace's secret.
//! - Concurrent lookups of the same (tag, candidate credentials) cause one registry call, and
//!   that call is cancelled once every lookup waiting on it has given up (its review answered
//!   at its deadline): nobody's abandoned lookups hold a registry's call slots.
//! - A registry that stops answering trips its breaker ([`breaker`]): lookups on it
//!   fail at once (or serve the last known digest) instead of queueing for its slots.
//! - Only "not found" and "unauthorized/denied" answers are cached as failures; transport
//!   errors and 5xx never are. They instead serve the last known digest (up to `max_stale`)
//!   and push the key into exponential backoff.
//! - Refresh-ahead: the first admission lookup that finds an entry in the last quarter of its
//!   `hit_ttl` is answered from it at once and starts one background re-resolution with the
//!   caller's credentials, so steady traffic never waits on the registry at a TTL boundary and
//!   a tag that moved is noticed within one TTL. Registry load stays bounded: at most one
//!   refresh per entry per TTL, and only for entries used in that last quarter; a refresh
//!   keeps to the same single flight, per-registry limit, backoff and breaker as a miss.
//! - A verification admission made of an entry's digest is kept beside it ([`kept`]) and
//!   handed back with the digest, to the same candidate credentials, within its verdicts'
//!   expiry, while the entry is of that digest.

mod clock;
mod failures;
mod flight;
mod kept;
mod read_only;
mod record;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use moka::ops::compute::Op;
use tokio::sync::Semaphore;
use tracing::warn;

use self::clock::{Clock, Stamp};
use self::failures::{Backoff, FailureRecord};
use self::flight::{Cause, InFlight};
use self::kept::{KeptVerification, KeptVerifications};
use self::record::{Record, RefreshClaims};
mod breaker;
mod memo;

pub use breaker::BreakerSettings;
use breaker::Breakers;
pub use memo::RunMemo;
pub use read_only::ReadOnlyCache;

use super::{
    Credential, Fingerprint, RegistryError, Resolution, ResolutionSource, Resolver, VerifiedDigest,
};
use crate::metrics::Metrics;
use crate::reference::{Digest, Reference};
use crate::weight::weight;

/// Cache settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// How long a resolved digest answers without asking the registry.
    pub hit_ttl: Duration,
    /// How long "not found" / "unauthorized" answers are remembered.
    pub failure_ttl: Duration,
    /// How long a last known digest may be served while the registry is unavailable.
    pub max_stale: Duration,
    /// Bound on entries (positive and negative each), within [`DIGEST_BYTES`],
    /// [`FAILURE_BYTES`] and [`BACKOFF_BYTES`].
    pub max_entries: u64,
    /// First backoff after a registry failure; doubles per failure up to `backoff_cap`.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// Concurrent registry calls per registry host.
    pub per_registry_concurrency: usize,
    /// How many tag moves are kept in memory.
    pub moved_history: usize,
    /// When a registry that stops answering is left alone for a while.
    pub breaker: BreakerSettings,
    /// Re-resolve a used entry in the background before its `hit_ttl` ends (see the module
    /// header).
    pub refresh_ahead: bool,
}

/// A tag found pointing elsewhere than before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagMove {
    pub tag_reference: String,
    pub from: Digest,
    pub to: Digest,
    pub at: SystemTime,
}

/// [`Resolver`] with a cache in front.
pub struct CachingResolver {
    inner: Arc<dyn Resolver>,
    shared: Arc<SharedState>,
}

struct SharedState {
    config: CacheConfig,
    metrics: Arc<Metrics>,
    /// Positive entries, bounded by `max_entries` and [`DIGEST_BYTES`]: fresh for `hit_ttl`, served stale up to
    /// `max_stale`, and older than both treated as absent (see [`SharedState::entry`]); each
    /// record's `resolved_at` says its age, so moka keeps no expiry of its own per entry; the
    /// record is held inline (no `Arc`), its refresh claim in `refresh_claims`.
    digests: moka::sync::Cache<EntryKey, Record>,
    clock: Clock,
    refresh_claims: RefreshClaims,
    failures: moka::sync::Cache<FlightKey, Arc<FailureRecord>>,
    backoff: moka::sync::Cache<FlightKey, Arc<Backoff>>,
    in_flight: Mutex<HashMap<FlightKey, InFlight>>,
    next_flight: AtomicU64,
    breakers: Breakers,
    /// Per registry host; bounded, since hosts come from pod specs.
    limits: moka::sync::Cache<String, Arc<Semaphore>>,
    /// Registries named in metric labels so far (bounded: hosts come from pod specs).
    labelled: Mutex<HashSet<String>>,
    moves: Mutex<VecDeque<TagMove>>,
}

/// (tag reference, fingerprint of the credential that resolved it); the tag without spare
/// capacity.
#[derive(Clone, PartialEq, Eq, Hash)]
struct EntryKey {
    tag: Box<str>,
    credential: Fingerprint,
}

/// An [`EntryKey`] borrowed, to look an entry up without copying the tag. Hashes as the key
/// does (the same fields in the same order).
#[derive(Hash)]
struct EntryRef<'a> {
    tag: &'a str,
    credential: Fingerprint,
}
/// (tag reference, fingerprints of every candidate credential in order).
type FlightKey = (String, Vec<Fingerprint>);

/// Bytes the positive entries may hold (the memory model of docs/security.md); `max_entries`
/// bounds their count within it.
pub const DIGEST_BYTES: u64 = 8 << 20;
/// Bytes the remembered "not found" / "unauthorized" answers may hold, their error texts
/// included (a registry's error body is part of one).
pub const FAILURE_BYTES: u64 = 2 << 20;
/// Bytes the backoffs after "unavailable" may hold, their last error texts included.
pub const BACKOFF_BYTES: u64 = 2 << 20;
/// What an entry costs beyond its strings: moka's node, the `Arc`, the record.
const ENTRY_OVERHEAD: usize = 256;

fn flight_key_bytes(key: &FlightKey) -> usize {
    key.0.len() + key.1.len() * size_of::<Fingerprint>() + size_of::<FlightKey>()
}

// === impl CacheConfig ===

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            hit_ttl: Duration::from_secs(300),
            failure_ttl: Duration::from_secs(30),
            max_stale: Duration::from_secs(24 * 3600),
            max_entries: 10_000,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(60),
            per_registry_concurrency: 16,
            moved_history: 256,
            breaker: BreakerSettings::default(),
            refresh_ahead: true,
        }
    }
}

// === impl CachingResolver ===

impl CachingResolver {
    pub fn new(inner: Arc<dyn Resolver>, config: CacheConfig, metrics: Arc<Metrics>) -> Self {
        let entries = config.max_entries;
        let digests = moka::sync::Cache::builder()
            .max_capacity(DIGEST_BYTES)
            .weigher(move |key: &EntryKey, record: &Record| {
                let kept = record.kept().map_or(0, |kept| kept.bytes());
                weight(
                    key.tag.len() + size_of::<EntryKey>() + size_of::<Record>() + kept,
                    DIGEST_BYTES,
                    entries,
                )
            })
            .build();
        let failures = moka::sync::Cache::builder()
            .max_capacity(FAILURE_BYTES)
            .time_to_live(config.failure_ttl)
            .weigher(move |key: &FlightKey, record: &Arc<FailureRecord>| {
                weight(
                    flight_key_bytes(key) + record.error.to_string().len() + ENTRY_OVERHEAD,
                    FAILURE_BYTES,
                    entries,
                )
            })
            .build();
        let backoff = moka::sync::Cache::builder()
            .max_capacity(BACKOFF_BYTES)
            .time_to_live(config.backoff_cap * 2)
            .weigher(move |key: &FlightKey, backoff: &Arc<Backoff>| {
                weight(
                    flight_key_bytes(key) + backoff.last.to_string().len() + ENTRY_OVERHEAD,
                    BACKOFF_BYTES,
                    entries,
                )
            })
            .build();
        let breakers = Breakers::new(config.breaker);
        CachingResolver {
            inner,
            shared: Arc::new(SharedState {
                config,
                metrics,
                digests,
                clock: Clock::new(),
                refresh_claims: RefreshClaims::new(),
                failures,
                backoff,
                in_flight: Mutex::new(HashMap::new()),
                next_flight: AtomicU64::new(0),
                breakers,
                limits: moka::sync::Cache::builder()
                    .max_capacity(4096)
                    .time_to_idle(Duration::from_secs(3600))
                    .build(),
                labelled: Mutex::new(HashSet::new()),
                moves: Mutex::new(VecDeque::new()),
            }),
        }
    }

    /// A view for dry runs: answers from the cache, asks the registry on a miss within the same
    /// per-registry limit, backoff and breaker as admission, and records nothing (no entries,
    /// no moves, no backoff).
    pub fn read_only(&self) -> ReadOnlyCache {
        ReadOnlyCache {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }

    /// The most recent tag moves, newest last.
    pub fn recent_moves(&self) -> Vec<TagMove> {
        lock(&self.shared.moves).iter().cloned().collect()
    }

    /// Makes every positive entry stale, as if `hit_ttl` had passed, and forgets every
    /// remembered failure: the watch calls it at the start of each recheck cycle, so each
    /// (tag, credentials) key is asked once per cycle.
    /// An entry already stale keeps its age, so `max_stale` still counts from its resolution.
    pub fn expire_all(&self) {
        let stale_at = self.shared.clock.now().minus(self.shared.config.hit_ttl);
        for (key, record) in self.shared.digests.iter() {
            if record.resolved_at() <= stale_at {
                continue;
            }
            self.shared
                .digests
                .insert((*key).clone(), record.resolved(stale_at));
        }
        self.shared.failures.invalidate_all();
    }
}

#[async_trait]
impl Resolver for CachingResolver {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        let (key, candidates) = match self.shared.lookup(reference, credentials, true) {
            Lookup::Answered(answer) => return answer,
            Lookup::RefreshAhead(hit, key, candidates) => {
                self.refresh_in_background(key, reference, candidates);
                return Ok(hit);
            }
            Lookup::Miss(key, candidates) => (key, candidates),
        };
        if let Some(backoff) = self.shared.active_backoff(&key) {
            return self.shared.stale_or(&key, backoff);
        }
        if let Err(silent) = self.shared.breakers.check(reference.domain()) {
            self.shared.metrics.cache("breaker_open");
            return self.shared.stale_or(&key, silent);
        }
        // `_interest` lives as long as this lookup waits: dropped with it at the deadline.
        let (flight, _interest) =
            self.join_or_lead(key.clone(), reference, candidates, Cause::Miss);
        match flight.await {
            Ok(resolution) => Ok(resolution),
            Err(error) if error.is_unavailable() => {
                self.shared.stale_or(&key, RegistryError::Shared(error))
            }
            Err(error) => Err(RegistryError::Shared(error)),
        }
    }

    fn last_known(&self, reference: &Reference, credentials: &[Credential]) -> Option<Resolution> {
        let stale = self
            .shared
            .last_known(&flight_key(reference, credentials))?;
        self.shared.metrics.cache("stale");
        Some(stale)
    }

    fn keep_verified(
        &self,
        reference: &Reference,
        credentials: &[Credential],
        digest: &Digest,
        verified: Arc<VerifiedDigest>,
        until: Instant,
    ) {
        let shared = &self.shared;
        let (tag, candidates) = flight_key(reference, credentials);
        // The entry a lookup with these credentials finds.
        let Some(credential) = candidates.iter().copied().find(|fp| {
            shared
                .entry(&EntryRef {
                    tag: &tag,
                    credential: *fp,
                })
                .is_some_and(|(_, age, _)| age < shared.config.hit_ttl)
        }) else {
            return;
        };
        let kept = KeptVerification::new(verified, candidates, shared.clock.stamp(until));
        let key = EntryKey {
            tag: tag.into_boxed_str(),
            credential,
        };
        // Checked and replaced under the entry's own lock: a refresh that put another digest
        // there in between is left as it is.
        shared
            .digests
            .entry(key)
            .and_compute_with(|entry| match entry {
                Some(entry) if entry.value().is_of(digest) => {
                    let record = entry.into_value();
                    let kept = KeptVerifications::with(record.kept().map(Arc::as_ref), kept);
                    Op::Put(record.with_kept(Some(Arc::new(kept))))
                }
                _ => Op::Nop,
            });
    }
}

/// What the cache knows before any registry call.
enum Lookup {
    /// A fresh digest or a remembered failure.
    Answered(Result<Resolution, RegistryError>),
    /// A fresh digest whose entry this lookup is to refresh ahead of its TTL, with the flight
    /// key and candidates to do it with.
    RefreshAhead(Resolution, FlightKey, Vec<Credential>),
    /// The flight key and the candidate credentials to ask the registry with.
    Miss(FlightKey, Vec<Credential>),
}

// === impl EntryRef ===

impl moka::Equivalent<EntryKey> for EntryRef<'_> {
    fn equivalent(&self, key: &EntryKey) -> bool {
        self.credential == key.credential && *self.tag == *key.tag
    }
}

// === impl SharedState ===

impl SharedState {
    /// Fresh hits, then remembered failures; `record` says whether to record metrics and
    /// claim refreshes (admission lookups do, dry runs do not).
    fn lookup(&self, reference: &Reference, credentials: &[Credential], record: bool) -> Lookup {
        let candidates = with_anonymous(credentials);
        let key = flight_key(reference, &candidates);
        if let Some((hit, entry)) = self.fresh_entry(&key.0, &key.1) {
            if !record {
                return Lookup::Answered(Ok(hit));
            }
            self.metrics.cache("hit");
            let found = EntryRef {
                tag: &key.0,
                credential: hit.credential,
            };
            if self.refresh_due(&found, &entry, hit.age) {
                return Lookup::RefreshAhead(hit, key, candidates);
            }
            return Lookup::Answered(Ok(hit));
        }
        // No fresh entry (just looked): only a remembered failure can answer now.
        match self.failures.get(&key) {
            Some(failure) => {
                if record {
                    self.metrics.cache("negative_hit");
                }
                Lookup::Answered(Err(RegistryError::Shared(failure.error.clone())))
            }
            None => Lookup::Miss(key, candidates),
        }
    }

    /// A fresh digest or a remembered failure for `key`.
    fn remembered(&self, key: &FlightKey) -> Option<Result<Resolution, Arc<RegistryError>>> {
        if let Some(hit) = self.fresh_hit(&key.0, &key.1) {
            return Some(Ok(hit));
        }
        let failure = self.failures.get(key)?;
        Some(Err(failure.error.clone()))
    }

    fn fresh_hit(&self, tag: &str, fingerprints: &[Fingerprint]) -> Option<Resolution> {
        self.fresh_entry(tag, fingerprints).map(|(hit, _)| hit)
    }

    /// The first of the caller's credentials with a fresh entry: the answer and the entry.
    fn fresh_entry(&self, tag: &str, fingerprints: &[Fingerprint]) -> Option<(Resolution, Record)> {
        fingerprints.iter().find_map(|fp| {
            let (record, age, now) = self.entry(&EntryRef {
                tag,
                credential: *fp,
            })?;
            (age < self.config.hit_ttl).then(|| {
                let hit = Resolution {
                    digest: record.digest(),
                    credential: *fp,
                    source: ResolutionSource::Cache,
                    moved_from: None,
                    age,
                    origin: None,
                    verified: record.verified_for(fingerprints, now),
                };
                (hit, record)
            })
        })
    }

    /// The entry for `key`, its age and the time read, unless it is older than both
    /// `max_stale` and `hit_ttl`: such an entry is removed and treated as absent. (A record
    /// resolved between the read and the removal can be removed with it: the next lookup asks
    /// the registry once more.) The time is read once here for every decision the caller makes
    /// on it.
    fn entry(&self, key: &EntryRef<'_>) -> Option<(Record, Duration, Stamp)> {
        let record = self.digests.get(key)?;
        let now = self.clock.now();
        let age = record.resolved_at().age_at(now);
        if age > self.config.max_stale.max(self.config.hit_ttl) {
            self.digests.invalidate(key);
            return None;
        }
        Some((record, age, now))
    }

    /// True for the one lookup that finds `entry` (`age` old, under `key`) in the last quarter
    /// of its TTL first.
    fn refresh_due(&self, key: &EntryRef<'_>, entry: &Record, age: Duration) -> bool {
        self.config.refresh_ahead
            && age >= self.config.hit_ttl / 4 * 3
            && self.refresh_claims.claim(
                key,
                entry.resolved_at(),
                self.clock.now(),
                self.config.hit_ttl,
            )
    }

    fn record_success(&self, tag: &str, mut resolution: Resolution) -> Resolution {
        let mut record = Record::new(&resolution.digest, self.clock.now());
        let found = EntryRef {
            tag,
            credential: resolution.credential,
        };
        if let Some((previous, _, _)) = self.entry(&found) {
            if previous.same_digest(&record) {
                // The verification is of the digest, which has not changed.
                record = record.with_kept(previous.kept().cloned());
            } else {
                let from = previous.digest();
                self.record_move(tag, &from, &resolution.digest);
                resolution.moved_from = Some(from);
            }
        }
        let key = EntryKey {
            tag: tag.into(),
            credential: resolution.credential,
        };
        self.digests.insert(key, record);
        resolution
    }

    fn record_move(&self, tag: &str, from: &Digest, to: &Digest) {
        warn!(tag = %tag, from = %from, to = %to, "tag moved to a different digest");
        self.metrics.tag_moved.inc();
        let mut moves = lock(&self.moves);
        moves.push_back(TagMove {
            tag_reference: tag.to_string(),
            from: from.clone(),
            to: to.clone(),
            at: SystemTime::now(),
        });
        while moves.len() > self.config.moved_history {
            moves.pop_front();
        }
    }

    fn limit_for(&self, registry: &str) -> Arc<Semaphore> {
        let permits = self.config.per_registry_concurrency.max(1);
        self.limits
            .get_with(registry.to_string(), || Arc::new(Semaphore::new(permits)))
    }

    /// The registry as a metric label: its name once it has answered a resolution (`ok`), for
    /// the first [`MAX_REGISTRY_LABELS`] registries that have, else `other`. Hosts come from
    /// pod specs: one that never answered (made up, refused, down) takes no label, so a tenant
    /// naming a thousand hosts leaves the labels to the registries that serve images, and
    /// `/metrics` cannot grow without bound.
    fn registry_label(&self, registry: String, ok: bool) -> String {
        let mut labelled = lock(&self.labelled);
        if labelled.contains(&registry) || (ok && labelled.len() < MAX_REGISTRY_LABELS) {
            labelled.insert(registry.clone());
            registry
        } else {
            "other".to_string()
        }
    }
}

/// Distinct `registry` label values on `pinhook_registry_requests_total`.
const MAX_REGISTRY_LABELS: usize = 64;

/// (tag reference, fingerprints of the caller's candidates and anonymous).
fn flight_key(reference: &Reference, credentials: &[Credential]) -> FlightKey {
    let fingerprints = with_anonymous(credentials)
        .iter()
        .map(Credential::fingerprint)
        .collect();
    (reference.manifest_reference(), fingerprints)
}

/// The candidates in kubelet's order, then anonymous (always available to everyone).
fn with_anonymous(credentials: &[Credential]) -> Vec<Credential> {
    let mut candidates: Vec<Credential> = Vec::with_capacity(credentials.len() + 1);
    for credential in credentials {
        if !candidates.contains(credential) {
            candidates.push(credential.clone());
        }
    }
    if !candidates.contains(&Credential::Anonymous) {
        candidates.push(Credential::Anonymous);
    }
    candidates
}

/// A poisoned lock only means another thread panicked mid-update of plain maps; the data is
/// still usable, and admission must keep serving.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
