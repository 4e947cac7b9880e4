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
//! - A registry that stops answering trips its breaker ([`super::breaker`]): lookups on it
//!   fail at once (or serve the last known digest) instead of queueing for its slots.
//! - Only "not found" and "unauthorized/denied" answers are cached as failures; transport
//!   errors and 5xx never are. They instead serve the last known digest (up to `max_stale`)
//!   and push the key into exponential backoff.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::Semaphore;
use tracing::warn;

use super::breaker::{BreakerSettings, Breakers, Health};
use super::{Credential, Fingerprint, RegistryError, Resolution, ResolutionSource, Resolver};
use crate::metrics::{Metrics, RegistryLabels};
use crate::reference::{Digest, Reference};

/// Cache settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// How long a resolved digest answers without asking the registry.
    pub hit_ttl: Duration,
    /// How long "not found" / "unauthorized" answers are remembered.
    pub failure_ttl: Duration,
    /// How long a last known digest may be served while the registry is unavailable.
    pub max_stale: Duration,
    /// Bound on entries (positive and negative each).
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
    /// Positive entries; kept for `max_stale`, fresh for `hit_ttl`.
    digests: moka::sync::Cache<EntryKey, Arc<Record>>,
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

type EntryKey = (String, Fingerprint);
/// (tag reference, fingerprints of every candidate credential in order).
type FlightKey = (String, Vec<Fingerprint>);
type Flight = Shared<BoxFuture<'static, Result<Resolution, Arc<RegistryError>>>>;

/// A registry call under way and who still waits on it.
struct InFlight {
    /// Tells this flight from a later one for the same key.
    id: u64,
    flight: Flight,
    /// Alive while a lookup waits; when the last one gives up, the call is cancelled.
    interest: Weak<Interest>,
}

/// Held by each lookup waiting on a flight; the last one dropped cancels the call.
struct Interest {
    call: tokio::task::AbortHandle,
    metrics: Arc<Metrics>,
}

struct Record {
    digest: Digest,
    resolved_at: Instant,
}

struct FailureRecord {
    error: Arc<RegistryError>,
}

struct Backoff {
    failures: u32,
    until: Instant,
    last: String,
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
        }
    }
}

// === impl CachingResolver ===

impl CachingResolver {
    pub fn new(inner: Arc<dyn Resolver>, config: CacheConfig, metrics: Arc<Metrics>) -> Self {
        let digests = moka::sync::Cache::builder()
            .max_capacity(config.max_entries)
            .time_to_live(config.max_stale.max(config.hit_ttl))
            .build();
        let failures = moka::sync::Cache::builder()
            .max_capacity(config.max_entries)
            .time_to_live(config.failure_ttl)
            .build();
        let backoff = moka::sync::Cache::builder()
            .max_capacity(config.max_entries)
            .time_to_live(config.backoff_cap * 2)
            .build();
        let breakers = Breakers::new(config.breaker);
        CachingResolver {
            inner,
            shared: Arc::new(SharedState {
                config,
                metrics,
                digests,
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

    /// Forgets every positive entry's freshness, as if `hit_ttl` had passed (tests, admin).
    pub fn expire_all(&self) {
        let stale_at = Instant::now()
            .checked_sub(self.shared.config.hit_ttl)
            .unwrap_or_else(Instant::now);
        for (key, record) in self.shared.digests.iter() {
            self.shared.digests.insert(
                (*key).clone(),
                Arc::new(Record {
                    digest: record.digest.clone(),
                    resolved_at: stale_at,
                }),
            );
        }
        self.shared.failures.invalidate_all();
    }

    /// The flight for `key` and this lookup's interest in it: the running one, or a new one.
    fn join_or_lead(
        &self,
        key: FlightKey,
        reference: &Reference,
        candidates: Vec<Credential>,
    ) -> (Flight, Option<Arc<Interest>>) {
        let mut flights = lock(&self.shared.in_flight);
        // A flight whose interest is gone is being cancelled: lead a new one instead.
        if let Some(running) = flights.get(&key) {
            if let Some(interest) = running.interest.upgrade() {
                self.shared.metrics.cache("coalesced");
                return (running.flight.clone(), Some(interest));
            }
        }
        // A flight that ended between our lookup and this lock has recorded its answer (it
        // records before it leaves `in_flight`): use that rather than asking again.
        if let Some(answer) = self.shared.remembered(&key) {
            self.shared.metrics.cache("coalesced");
            return (futures::future::ready(answer).boxed().shared(), None);
        }
        self.shared.metrics.cache("miss");
        let id = self.shared.next_flight.fetch_add(1, Ordering::Relaxed);
        let task = tokio::spawn(lead(
            self.inner.clone(),
            self.shared.clone(),
            (key.clone(), id),
            reference.clone(),
            candidates,
        ));
        let interest = Arc::new(Interest {
            call: task.abort_handle(),
            metrics: self.shared.metrics.clone(),
        });
        let flight: Flight = async move {
            match task.await {
                Ok(result) => result,
                Err(_) => Err(Arc::new(RegistryError::Status {
                    registry: String::new(),
                    status: 500,
                    message: "resolution task failed".to_string(),
                })),
            }
        }
        .boxed()
        .shared();
        let running = InFlight {
            id,
            flight: flight.clone(),
            interest: Arc::downgrade(&interest),
        };
        flights.insert(key, running);
        (flight, Some(interest))
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
        let (flight, _interest) = self.join_or_lead(key.clone(), reference, candidates);
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
}

/// The side-effect-free view of a [`CachingResolver`] (see [`CachingResolver::read_only`]).
pub struct ReadOnlyCache {
    inner: Arc<dyn Resolver>,
    shared: Arc<SharedState>,
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

/// The one registry call of a flight; records its result for every waiter and later lookups.
async fn lead(
    inner: Arc<dyn Resolver>,
    shared: Arc<SharedState>,
    (key, id): (FlightKey, u64),
    reference: Reference,
    candidates: Vec<Credential>,
) -> Result<Resolution, Arc<RegistryError>> {
    // Leaves `in_flight` however the call ends, panics and cancellation included, so a key
    // never stays stuck.
    let _leave = LeaveFlight {
        shared: shared.clone(),
        key: key.clone(),
        id,
    };
    let registry = reference.domain().to_string();
    let started = Instant::now();
    let result = {
        let limit = shared.limit_for(&registry);
        // The semaphore is never closed, so acquire only fails if it were; then go unlimited.
        let _permit = limit.acquire_owned().await.ok();
        // The breaker may have opened while this call waited for its slot.
        if let Some(paused) = shared.breakers.paused(&registry) {
            shared.metrics.cache("breaker_open");
            return Err(Arc::new(paused));
        }
        let mut call = CallWatch {
            shared: &shared,
            registry: &registry,
            since: Instant::now(),
            ended: false,
        };
        let result = inner.resolve(&reference, &candidates).await;
        call.ended = true;
        result
    };
    if let Some(health) = Health::of(&result) {
        shared.breakers.record(&registry, health);
    }
    shared
        .metrics
        .registry_duration
        .observe(started.elapsed().as_secs_f64());
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) => e.kind(),
    };
    let registry = shared.registry_label(registry);
    shared
        .metrics
        .registry_requests
        .get_or_create(&RegistryLabels { registry, outcome })
        .inc();
    match result {
        Ok(resolution) => {
            shared.backoff.invalidate(&key);
            Ok(shared.record_success(&key.0, resolution))
        }
        Err(error) => Err(shared.record_failure(&key, error)),
    }
}

/// Removes a flight from `in_flight` when its leader finishes (after it recorded its answer)
/// or is cancelled; only this flight, not a later one for the same key.
struct LeaveFlight {
    shared: Arc<SharedState>,
    key: FlightKey,
    id: u64,
}

impl Drop for LeaveFlight {
    fn drop(&mut self) {
        let mut flights = lock(&self.shared.in_flight);
        if flights.get(&self.key).is_some_and(|f| f.id == self.id) {
            flights.remove(&self.key);
        }
    }
}

/// A call that is cancelled (nobody waits any more) after talking to its registry for
/// [`SILENT_AFTER`] got no answer in that time: the breaker counts it, so a registry that
/// hangs past every review's deadline still trips it.
struct CallWatch<'a> {
    shared: &'a SharedState,
    registry: &'a str,
    since: Instant,
    ended: bool,
}

/// A registry answers a manifest HEAD in well under this.
const SILENT_AFTER: Duration = Duration::from_secs(1);

impl Drop for CallWatch<'_> {
    fn drop(&mut self) {
        if !self.ended && self.since.elapsed() >= SILENT_AFTER {
            self.shared.breakers.record(self.registry, Health::Silent);
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if !self.call.is_finished() {
            self.call.abort();
            self.metrics.cache("cancelled");
        }
    }
}

/// What the cache knows before any registry call.
enum Lookup {
    /// A fresh digest or a remembered failure.
    Answered(Result<Resolution, RegistryError>),
    /// The flight key and the candidate credentials to ask the registry with.
    Miss(FlightKey, Vec<Credential>),
}

// === impl SharedState ===

impl SharedState {
    /// Fresh hits, then remembered failures; `count` says whether to record metrics.
    fn lookup(&self, reference: &Reference, credentials: &[Credential], count: bool) -> Lookup {
        let candidates = with_anonymous(credentials);
        let key = flight_key(reference, &candidates);
        match self.remembered(&key) {
            Some(Ok(hit)) => {
                if count {
                    self.metrics.cache("hit");
                }
                Lookup::Answered(Ok(hit))
            }
            Some(Err(failure)) => {
                if count {
                    self.metrics.cache("negative_hit");
                }
                Lookup::Answered(Err(RegistryError::Shared(failure)))
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
        fingerprints.iter().find_map(|fp| {
            let record = self.digests.get(&(tag.to_string(), fp.clone()))?;
            let age = record.resolved_at.elapsed();
            (age < self.config.hit_ttl).then(|| Resolution {
                digest: record.digest.clone(),
                credential: fp.clone(),
                source: ResolutionSource::Cache,
                moved_from: None,
                age,
            })
        })
    }

    /// The newest entry for any of the caller's credentials, however old (within `max_stale`).
    fn last_known(&self, key: &FlightKey) -> Option<Resolution> {
        key.1
            .iter()
            .filter_map(|fp| {
                let record = self.digests.get(&(key.0.clone(), fp.clone()))?;
                Some((fp.clone(), record))
            })
            .min_by_key(|(_, record)| record.resolved_at.elapsed())
            .filter(|(_, record)| record.resolved_at.elapsed() <= self.config.max_stale)
            .map(|(fp, record)| Resolution {
                digest: record.digest.clone(),
                credential: fp,
                source: ResolutionSource::Stale,
                moved_from: None,
                age: record.resolved_at.elapsed(),
            })
    }

    fn stale_or(&self, key: &FlightKey, error: RegistryError) -> Result<Resolution, RegistryError> {
        match self.last_known(key) {
            Some(stale) => {
                self.metrics.cache("stale");
                Ok(stale)
            }
            None => Err(error),
        }
    }

    fn active_backoff(&self, key: &FlightKey) -> Option<RegistryError> {
        let backoff = self.backoff.get(key)?;
        let now = Instant::now();
        (backoff.until > now).then(|| RegistryError::BackingOff {
            registry: registry_of(&key.0),
            retry_in: backoff.until - now,
            last: backoff.last.clone(),
        })
    }

    fn record_success(&self, tag: &str, mut resolution: Resolution) -> Resolution {
        let key = (tag.to_string(), resolution.credential.clone());
        if let Some(previous) = self.digests.get(&key) {
            if previous.digest != resolution.digest {
                self.record_move(tag, &previous.digest, &resolution.digest);
                resolution.moved_from = Some(previous.digest.clone());
            }
        }
        self.digests.insert(
            key,
            Arc::new(Record {
                digest: resolution.digest.clone(),
                resolved_at: Instant::now(),
            }),
        );
        resolution
    }

    fn record_failure(&self, key: &FlightKey, error: RegistryError) -> Arc<RegistryError> {
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
                    last: error.to_string(),
                }),
            );
        }
        error
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

    /// The registry as a metric label: its name for the first [`MAX_REGISTRY_LABELS`]
    /// registries seen, `other` after that, so a pod spec naming endless hosts cannot grow
    /// `/metrics` without bound.
    fn registry_label(&self, registry: String) -> String {
        let mut labelled = lock(&self.labelled);
        if labelled.contains(&registry) || labelled.len() < MAX_REGISTRY_LABELS {
            labelled.insert(registry.clone());
            registry
        } else {
            "other".to_string()
        }
    }
}

/// Distinct `registry` label values on `pinhook_registry_requests_total`.
const MAX_REGISTRY_LABELS: usize = 64;

fn backoff_delay(config: &CacheConfig, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
    config
        .backoff_base
        .saturating_mul(factor)
        .min(config.backoff_cap)
}

/// (tag reference, fingerprints of the caller's candidates and anonymous).
fn flight_key(reference: &Reference, credentials: &[Credential]) -> FlightKey {
    let fingerprints = with_anonymous(credentials)
        .iter()
        .map(Credential::fingerprint)
        .collect();
    (reference.tag_reference(), fingerprints)
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

fn registry_of(tag_reference: &str) -> String {
    tag_reference
        .split_once('/')
        .map_or(tag_reference, |(domain, _)| domain)
        .to_string()
}

/// A poisoned lock only means another thread panicked mid-update of plain maps; the data is
/// still usable, and admission must keep serving.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::registry::testing::{digest, reference, Answer, Scripted};

    fn cache(inner: Arc<Scripted>, config: CacheConfig) -> CachingResolver {
        CachingResolver::new(inner, config, Arc::new(Metrics::new()))
    }

    fn quick() -> CacheConfig {
        CacheConfig {
            hit_ttl: Duration::from_millis(250),
            failure_ttl: Duration::from_millis(500),
            backoff_base: Duration::from_millis(200),
            backoff_cap: Duration::from_millis(500),
            ..CacheConfig::default()
        }
    }

    #[test]
    fn backoff_doubles_per_failure_up_to_the_cap() {
        let config = CacheConfig::default();
        let secs = |failures| backoff_delay(&config, failures).as_secs();
        assert_eq!(
            [1, 2, 3, 4, 6, 7, 8, 1000].map(secs),
            [1, 2, 4, 8, 32, 60, 60, 60]
        );
    }

    #[tokio::test]
    async fn not_found_is_remembered_for_the_failure_ttl_then_asked_again() {
        let inner = Scripted::new(&[Answer::NotFound, Answer::Digest('a')]);
        let cache = cache(inner.clone(), quick());
        let image = reference("registry.example/team/app:1.0");
        for _ in 0..3 {
            assert!(cache.resolve(&image, &[]).await.is_err());
        }
        assert_eq!(inner.calls(), 1, "the failure answers for its TTL");
        tokio::time::sleep(Duration::from_millis(750)).await;
        let resolution = cache.resolve(&image, &[]).await;
        assert_eq!(resolution.map(|r| r.digest).ok(), Some(digest('a')));
        assert_eq!(inner.calls(), 2);
    }

    #[tokio::test]
    async fn transport_errors_are_not_cached_but_back_off_and_success_resets_the_backoff() {
        let script = [
            Answer::Unreachable,
            Answer::Unreachable,
            Answer::Digest('a'),
            Answer::Unreachable,
            Answer::Digest('a'),
        ];
        let inner = Scripted::new(&script);
        let cache = cache(inner.clone(), quick());
        let image = reference("registry.example/team/app:1.0");

        assert!(cache.resolve(&image, &[]).await.is_err());
        let backing_off = cache.resolve(&image, &[]).await;
        assert!(
            matches!(backing_off, Err(RegistryError::BackingOff { .. })),
            "{backing_off:?}"
        );
        assert_eq!(inner.calls(), 1, "no call while backing off");
        tokio::time::sleep(Duration::from_millis(250)).await; // past 200 ms
        assert!(cache.resolve(&image, &[]).await.is_err());
        assert_eq!(
            inner.calls(),
            2,
            "a transport error is not remembered as an answer"
        );
        tokio::time::sleep(Duration::from_millis(450)).await; // past 400 ms (doubled)
        assert!(cache.resolve(&image, &[]).await.is_ok());
        assert_eq!(inner.calls(), 3);

        // After a success the next outage starts again at the base delay, not at 800 ms
        // (capped 500 ms).
        tokio::time::sleep(Duration::from_millis(300)).await; // past hit_ttl
        let stale = cache.resolve(&image, &[]).await;
        assert_eq!(
            stale.map(|r| r.source).ok(),
            Some(ResolutionSource::Stale),
            "the failure is answered with the last known digest"
        );
        assert_eq!(inner.calls(), 4);
        tokio::time::sleep(Duration::from_millis(250)).await; // past 200 ms only
        let fresh = cache.resolve(&image, &[]).await;
        assert_eq!(
            fresh.map(|r| r.source).ok(),
            Some(ResolutionSource::Registry)
        );
        assert_eq!(inner.calls(), 5);
    }

    #[tokio::test]
    async fn a_stale_digest_is_served_only_within_max_stale() {
        let inner = Scripted::new(&[Answer::Digest('a'), Answer::Unreachable]);
        let config = CacheConfig {
            max_stale: Duration::from_millis(1000),
            backoff_base: Duration::ZERO,
            ..quick()
        };
        let cache = cache(inner.clone(), config);
        let image = reference("registry.example/team/app:1.0");
        assert!(cache.resolve(&image, &[]).await.is_ok());
        tokio::time::sleep(Duration::from_millis(300)).await; // past hit_ttl
        let stale = cache.resolve(&image, &[]).await;
        assert_eq!(stale.map(|r| r.source).ok(), Some(ResolutionSource::Stale));
        assert!(cache.last_known(&image, &[]).is_some());
        tokio::time::sleep(Duration::from_millis(1000)).await; // past max_stale
        assert!(cache.resolve(&image, &[]).await.is_err());
        assert!(cache.last_known(&image, &[]).is_none());
    }

    #[tokio::test]
    async fn another_credential_never_sees_an_entry_it_did_not_make() {
        let inner = Scripted::new(&[Answer::Digest('a'), Answer::NotFound]);
        let cache = cache(inner.clone(), CacheConfig::default());
        let image = reference("registry.example/team/app:1.0");
        let secret = Credential::basic("team-a", "s3cret");
        assert!(cache
            .resolve(&image, std::slice::from_ref(&secret))
            .await
            .is_ok());
        assert!(cache.resolve(&image, &[secret]).await.is_ok());
        assert_eq!(inner.calls(), 1);
        assert!(
            cache.resolve(&image, &[]).await.is_err(),
            "without the secret the registry is asked, and says no"
        );
        assert!(cache.last_known(&image, &[]).is_none());
    }

    #[tokio::test]
    async fn registry_labels_are_bounded() {
        let inner = Scripted::new(&[Answer::NotFound]);
        let cache = cache(inner, CacheConfig::default());
        for i in 0..(MAX_REGISTRY_LABELS + 10) {
            let image = reference(&format!("registry{i}.example/team/app:1.0"));
            assert!(cache.resolve(&image, &[]).await.is_err());
        }
        let text = cache.shared.metrics.encode().unwrap_or_default();
        let labelled = text
            .lines()
            .filter(|l| l.starts_with("pinhook_registry_requests_total{"))
            .count();
        assert_eq!(labelled, MAX_REGISTRY_LABELS + 1, "{text}");
        assert!(text.contains("registry=\"other\""), "{text}");
    }

    #[tokio::test]
    async fn calls_to_one_registry_are_limited() {
        let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_millis(50));
        let config = CacheConfig {
            per_registry_concurrency: 2,
            ..CacheConfig::default()
        };
        let cache = cache(inner.clone(), config);
        let images: Vec<Reference> = (0..8)
            .map(|i| reference(&format!("registry.example/team/app:{i}")))
            .collect();
        let calls = images.iter().map(|image| cache.resolve(image, &[]));
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(inner.calls(), 8);
        assert_eq!(inner.most_at_once.load(Ordering::SeqCst), 2);
    }

    fn cache_lookups(cache: &CachingResolver, result: &str) -> String {
        let text = cache.shared.metrics.encode().unwrap_or_default();
        let prefix = format!("pinhook_cache_lookups_total{{result=\"{result}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or("0")
            .to_string()
    }

    #[tokio::test]
    async fn a_call_nobody_waits_for_any_more_is_cancelled_and_the_next_lookup_asks_again() {
        let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_secs(30));
        let cache = cache(inner.clone(), CacheConfig::default());
        let image = reference("registry.example/team/app:1.0");
        let waits = (0..3)
            .map(|_| tokio::time::timeout(Duration::from_millis(100), cache.resolve(&image, &[])));
        let gave_up = futures::future::join_all(waits).await;
        assert!(
            gave_up.iter().all(Result::is_err),
            "all three hit their deadline"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            (inner.calls(), inner.running(), inner.finished()),
            (1, 0, 0),
            "one call for the three, dropped when the last gave up"
        );
        assert_eq!(cache_lookups(&cache, "cancelled"), "1");
        assert!(lock(&cache.shared.in_flight).is_empty());
        // A later lookup is not stuck on the cancelled flight: it leads a new one.
        let again = tokio::time::timeout(Duration::from_millis(100), cache.resolve(&image, &[]));
        assert!(again.await.is_err());
        assert_eq!(inner.calls(), 2);
    }

    #[tokio::test]
    async fn a_call_that_one_lookup_still_waits_for_goes_on() {
        let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_millis(300));
        let cache = cache(inner.clone(), CacheConfig::default());
        let image = reference("registry.example/team/app:1.0");
        let impatient = tokio::time::timeout(Duration::from_millis(50), cache.resolve(&image, &[]));
        let patient = cache.resolve(&image, &[]);
        let (impatient, patient) = tokio::join!(impatient, patient);
        assert!(impatient.is_err());
        assert_eq!(patient.map(|r| r.digest).ok(), Some(digest('a')));
        assert_eq!((inner.calls(), inner.finished()), (1, 1));
        assert_eq!(cache_lookups(&cache, "cancelled"), "0");
    }

    #[tokio::test]
    async fn a_registry_that_stops_answering_trips_its_breaker_and_no_other() {
        let inner = Scripted::new(&[Answer::Unreachable]);
        let config = CacheConfig {
            breaker: BreakerSettings {
                threshold: 3,
                pause: Duration::from_secs(30),
                pause_cap: Duration::from_secs(60),
            },
            ..CacheConfig::default()
        };
        let cache = cache(inner.clone(), config);
        for i in 0..3 {
            let image = reference(&format!("hung.example/team/app{i}:1.0"));
            assert!(cache.resolve(&image, &[]).await.is_err());
        }
        assert_eq!(inner.calls(), 3);
        let refused = cache
            .resolve(&reference("hung.example/team/other:1.0"), &[])
            .await;
        assert!(
            matches!(&refused, Err(RegistryError::NotAnswering { silent: 3, .. })),
            "{refused:?}"
        );
        assert_eq!(inner.calls(), 3, "no call while the breaker is open");
        assert_eq!(cache_lookups(&cache, "breaker_open"), "1");
        let elsewhere = cache
            .resolve(&reference("fine.example/team/app:1.0"), &[])
            .await;
        assert!(elsewhere.is_err());
        assert_eq!(inner.calls(), 4, "another registry is still asked");
    }

    #[tokio::test]
    async fn a_call_cancelled_after_hanging_a_second_counts_as_silent() {
        let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_secs(30));
        let config = CacheConfig {
            breaker: BreakerSettings {
                threshold: 2,
                pause: Duration::from_secs(30),
                pause_cap: Duration::from_secs(60),
            },
            ..CacheConfig::default()
        };
        let cache = cache(inner.clone(), config);
        let hung = (0..2).map(|i| {
            let image = reference(&format!("hung.example/team/app{i}:1.0"));
            let cache = &cache;
            async move {
                tokio::time::timeout(Duration::from_millis(1100), cache.resolve(&image, &[])).await
            }
        });
        futures::future::join_all(hung).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused = cache
            .resolve(&reference("hung.example/team/other:1.0"), &[])
            .await;
        assert!(
            matches!(&refused, Err(RegistryError::NotAnswering { silent: 2, .. })),
            "{refused:?}"
        );
        assert_eq!(inner.calls(), 2);
    }

    #[tokio::test]
    async fn dry_runs_keep_to_the_registry_limit_backoff_and_breaker() {
        let inner = Scripted::slow(&[Answer::Digest('a')], Duration::from_millis(50));
        let config = CacheConfig {
            per_registry_concurrency: 2,
            ..CacheConfig::default()
        };
        let cache = cache(inner.clone(), config);
        let dry = cache.read_only();
        let images: Vec<Reference> = (0..6)
            .map(|i| reference(&format!("registry.example/team/app:{i}")))
            .collect();
        let results = futures::future::join_all(images.iter().map(|i| dry.resolve(i, &[]))).await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(
            inner.most_at_once.load(Ordering::SeqCst),
            2,
            "the registry's limit"
        );

        // A key admission found failing is backing off for dry runs too.
        let failing = Scripted::new(&[Answer::Unreachable]);
        let cache = super::tests::cache(failing.clone(), quick());
        let image = reference("registry.example/team/down:1.0");
        assert!(cache.resolve(&image, &[]).await.is_err());
        let dry = cache.read_only();
        let backing_off = dry.resolve(&image, &[]).await;
        assert!(
            matches!(backing_off, Err(RegistryError::BackingOff { .. })),
            "{backing_off:?}"
        );
        assert_eq!(failing.calls(), 1, "no call while backing off");
    }
}
