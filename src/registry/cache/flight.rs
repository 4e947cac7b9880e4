//! The single flight: one registry call per (tag, candidate credentials) at a time, shared
//! by every lookup waiting on it, cancelled once none waits any more, counted by the breaker
//! when it hangs; and refresh-ahead, a flight that no lookup waits on.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};

use super::breaker::Health;
use super::{lock, CachingResolver, FlightKey, SharedState};
use crate::metrics::{Metrics, RegistryLabels};
use crate::reference::Reference;
use crate::registry::{Credential, RegistryError, Resolution, Resolver};

pub(super) type Flight = Shared<BoxFuture<'static, Result<Resolution, Arc<RegistryError>>>>;

/// Why a flight is led: a lookup found no fresh entry, or a refresh-ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    Miss,
    Refresh,
}

impl Cause {
    /// The `result` label of `pinhook_cache_lookups_total` for a new flight.
    fn label(self) -> &'static str {
        match self {
            Cause::Miss => "miss",
            Cause::Refresh => "refresh",
        }
    }
}

/// A registry call under way and who still waits on it.
pub(super) struct InFlight {
    /// Tells this flight from a later one for the same key.
    id: u64,
    flight: Flight,
    /// Alive while a lookup waits; when the last one gives up, the call is cancelled.
    interest: Weak<Interest>,
}

/// Held by each lookup waiting on a flight; the last one dropped cancels the call.
pub(super) struct Interest {
    call: tokio::task::AbortHandle,
    metrics: Arc<Metrics>,
}

// === impl CachingResolver ===

impl CachingResolver {
    /// The flight for `key` and this lookup's interest in it: the running one, or a new one.
    pub(super) fn join_or_lead(
        &self,
        key: FlightKey,
        reference: &Reference,
        candidates: Vec<Credential>,
        cause: Cause,
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
        // records before it leaves `in_flight`): use that rather than asking again. A refresh
        // asks although the entry is still fresh: that is its point.
        if let Some(answer) = (cause == Cause::Miss)
            .then(|| self.shared.remembered(&key))
            .flatten()
        {
            self.shared.metrics.cache("coalesced");
            return (futures::future::ready(answer).boxed().shared(), None);
        }
        self.shared.metrics.cache(cause.label());
        let id = self.shared.next_flight.fetch_add(1, Ordering::Relaxed);
        // The call runs as the tenant of the lookup that leads it (its reads take from that
        // tenant's part of the reserve, `registry::http::body`).
        let tenant = crate::tenant::current();
        let call = lead(
            self.inner.clone(),
            self.shared.clone(),
            (key.clone(), id),
            reference.clone(),
            candidates,
        );
        let task = tokio::spawn(async move { crate::tenant::scope(&tenant, call).await });
        let interest = Arc::new(Interest {
            call: task.abort_handle(),
            metrics: self.shared.metrics.clone(),
        });
        let registry = reference.domain().to_string();
        let flight: Flight = async move {
            match task.await {
                Ok(result) => result,
                Err(source) => Err(Arc::new(RegistryError::TaskFailed { registry, source })),
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

    /// Starts (or joins) the flight that re-resolves `key`, held by a task of its own so that
    /// no review waits for it. Skipped while the key backs off or its registry's breaker is
    /// open: the entry then ends at its TTL, and the next lookup takes the miss path.
    pub(super) fn refresh_in_background(
        &self,
        key: FlightKey,
        reference: &Reference,
        candidates: Vec<Credential>,
    ) {
        if self.shared.active_backoff(&key).is_some()
            || self.shared.breakers.paused(reference.domain()).is_some()
        {
            self.shared.metrics.cache("refresh_skipped");
            return;
        }
        let (flight, interest) = self.join_or_lead(key, reference, candidates, Cause::Refresh);
        tokio::spawn(async move {
            // Holding the interest keeps the call from being cancelled as abandoned.
            let _interest = interest;
            let _ = flight.await;
        });
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
    let registry = shared.registry_label(registry, result.is_ok());
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
