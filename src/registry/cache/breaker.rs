//! A circuit breaker per registry host, in front of the per-registry concurrency limit: after
//! [`BreakerSettings::threshold`] registry calls in a row got no answer (timeouts, refused
//! connections, 5xx, 429), the registry is not asked again for a while and every lookup on it
//! fails at once ([`RegistryError::NotAnswering`], which serves a last known digest like any
//! unavailable registry). Without it a hanging registry holds its 16 call slots for minutes
//! and every other image on it waits behind them; with it they are answered at once, and
//! other registries are never affected.
//!
//! When the pause is over one call goes through (the probe); an answer of any kind closes the
//! breaker, no answer opens it again for twice as long (up to the cap). A probe that never
//! reports (its waiters gave up and it was cancelled) is replaced after the cap.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::warn;

use crate::registry::RegistryError;

/// When the breaker opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Calls in a row without an answer that open the breaker.
    pub threshold: u32,
    /// The first pause; doubled each time the probe gets no answer.
    pub pause: Duration,
    /// The longest pause.
    pub pause_cap: Duration,
}

/// The breakers of every registry host seen (bounded: hosts come from pod specs).
pub(crate) struct Breakers {
    settings: BreakerSettings,
    hosts: moka::sync::Cache<String, Arc<Mutex<State>>>,
}

/// What a finished registry call says about the registry's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// Any answer, error statuses included: the registry is there.
    Answered,
    /// No answer: timeout, unreachable, 5xx, 429.
    Silent,
}

#[derive(Debug, Default)]
struct State {
    /// Calls in a row without an answer.
    silent: u32,
    /// How many times the breaker opened since the last answer (doubles the pause).
    opened: u32,
    /// Until when lookups are refused; `None` while closed.
    open_until: Option<Instant>,
    /// When the probe now under way started.
    probe_since: Option<Instant>,
}

// === impl BreakerSettings ===

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            threshold: 5,
            pause: Duration::from_secs(5),
            pause_cap: Duration::from_secs(60),
        }
    }
}

// === impl Breakers ===

impl Breakers {
    pub(crate) fn new(settings: BreakerSettings) -> Breakers {
        Breakers {
            settings,
            hosts: moka::sync::Cache::builder()
                .max_capacity(4096)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
        }
    }

    /// `Ok` when `registry` may be asked now (closed, or this caller is the probe);
    /// otherwise the error every lookup on it gets until the pause is over.
    pub(crate) fn check(&self, registry: &str) -> Result<(), RegistryError> {
        let Some(state) = self.hosts.get(registry) else {
            return Ok(());
        };
        let mut state = lock(&state);
        let Some(until) = state.open_until else {
            return Ok(());
        };
        let now = Instant::now();
        let probing = state
            .probe_since
            .is_some_and(|since| now.duration_since(since) < self.settings.pause_cap);
        if now >= until && !probing {
            state.probe_since = Some(now);
            return Ok(());
        }
        Err(RegistryError::NotAnswering {
            registry: registry.to_string(),
            silent: state.silent,
            retry_in: until.saturating_duration_since(now),
        })
    }

    /// The error for `registry` while its breaker is open and its pause not over; `None`
    /// otherwise. Unlike [`Breakers::check`] it never makes the caller the probe: for a call
    /// that waited for a slot while the breaker opened.
    pub(crate) fn paused(&self, registry: &str) -> Option<RegistryError> {
        let state = self.hosts.get(registry)?;
        let state = lock(&state);
        let until = state.open_until?;
        let now = Instant::now();
        (now < until).then(|| RegistryError::NotAnswering {
            registry: registry.to_string(),
            silent: state.silent,
            retry_in: until - now,
        })
    }

    /// Records how a call to `registry` ended.
    pub(crate) fn record(&self, registry: &str, health: Health) {
        let state = self.hosts.get_with(registry.to_string(), Arc::default);
        let mut state = lock(&state);
        match health {
            Health::Answered => *state = State::default(),
            Health::Silent => {
                state.silent = state.silent.saturating_add(1);
                let probe_failed = state.probe_since.take().is_some();
                if probe_failed || state.silent >= self.settings.threshold {
                    state.opened = state.opened.saturating_add(1);
                    let pause = self.pause(state.opened);
                    state.open_until = Some(Instant::now() + pause);
                    warn!(
                        registry,
                        silent = state.silent,
                        pause_seconds = pause.as_secs_f64(),
                        "registry not answering: lookups on it fail at once for the pause"
                    );
                }
            }
        }
    }

    /// The pause after the breaker opened `opened` times in a row.
    fn pause(&self, opened: u32) -> Duration {
        let factor = 2u32.saturating_pow(opened.saturating_sub(1).min(20));
        self.settings
            .pause
            .saturating_mul(factor)
            .min(self.settings.pause_cap)
    }
}

// === impl Health ===

impl Health {
    /// What `result` says of the registry; `None` when the registry was never asked (the
    /// guard refused it, no client could be built, the lookup was cut short).
    pub(crate) fn of<T>(result: &Result<T, RegistryError>) -> Option<Health> {
        match result {
            Ok(_) => Some(Health::Answered),
            Err(error) => Health::of_error(error),
        }
    }

    fn of_error(error: &RegistryError) -> Option<Health> {
        match error {
            RegistryError::Shared(inner) => Health::of_error(inner),
            RegistryError::Refused { .. }
            | RegistryError::RealmRefused(_)
            | RegistryError::ClientConfig { .. }
            | RegistryError::NoSystemRoots { .. }
            | RegistryError::BackingOff { .. }
            | RegistryError::ReadsFull { .. }
            | RegistryError::NotAnswering { .. } => None,
            e if e.is_unavailable() => Some(Health::Silent),
            _ => Some(Health::Answered),
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGISTRY: &str = "registry.example";

    fn quick() -> Breakers {
        Breakers::new(BreakerSettings {
            threshold: 3,
            pause: Duration::from_millis(100),
            pause_cap: Duration::from_millis(250),
        })
    }

    fn refused_for(breakers: &Breakers) -> Option<Duration> {
        match breakers.check(REGISTRY) {
            Ok(()) => None,
            Err(RegistryError::NotAnswering { retry_in, .. }) => Some(retry_in),
            Err(other) => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn it_opens_after_the_threshold_of_silent_calls_in_a_row_and_an_answer_resets_the_count() {
        let breakers = quick();
        breakers.record(REGISTRY, Health::Silent);
        breakers.record(REGISTRY, Health::Silent);
        breakers.record(REGISTRY, Health::Answered);
        breakers.record(REGISTRY, Health::Silent);
        breakers.record(REGISTRY, Health::Silent);
        assert_eq!(refused_for(&breakers), None, "2 in a row, not 3");
        breakers.record(REGISTRY, Health::Silent);
        let retry_in = refused_for(&breakers).expect("open after 3 in a row");
        assert!(retry_in <= Duration::from_millis(100), "{retry_in:?}");
        assert_eq!(breakers.check("other.example").ok(), Some(()), "per host");
        assert!(breakers.paused(REGISTRY).is_some());
        assert!(breakers.paused("other.example").is_none());
        let message = breakers.check(REGISTRY).err().map(|e| e.to_string());
        assert!(
            message.as_deref().is_some_and(|m| m.starts_with(
                "registry registry.example did not answer 3 times in a row; pinhook asks it again in"
            )),
            "{message:?}"
        );
    }

    #[test]
    fn after_the_pause_one_probe_goes_through_and_its_silence_doubles_the_pause() {
        let breakers = quick();
        for _ in 0..3 {
            breakers.record(REGISTRY, Health::Silent);
        }
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(refused_for(&breakers), None, "the probe");
        assert!(refused_for(&breakers).is_some(), "only one probe at a time");
        breakers.record(REGISTRY, Health::Silent);
        let retry_in = refused_for(&breakers).expect("open again");
        assert!(
            retry_in > Duration::from_millis(150),
            "doubled: {retry_in:?}"
        );
        std::thread::sleep(Duration::from_millis(220));
        assert_eq!(refused_for(&breakers), None, "the next probe");
        breakers.record(REGISTRY, Health::Answered);
        assert_eq!(refused_for(&breakers), None, "closed");
        assert_eq!(refused_for(&breakers), None, "closed for everyone");
    }

    #[test]
    fn a_probe_that_never_reports_is_replaced_after_the_cap() {
        let breakers = quick();
        for _ in 0..3 {
            breakers.record(REGISTRY, Health::Silent);
        }
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(refused_for(&breakers), None, "the probe, then cancelled");
        assert!(refused_for(&breakers).is_some());
        std::thread::sleep(Duration::from_millis(260));
        assert_eq!(refused_for(&breakers), None, "a new probe");
    }

    #[test]
    fn pauses_double_up_to_the_cap() {
        let breakers = Breakers::new(BreakerSettings::default());
        let secs = |opened| breakers.pause(opened).as_secs();
        assert_eq!([1, 2, 3, 4, 5, 100].map(secs), [5, 10, 20, 40, 60, 60]);
    }

    #[test]
    fn only_calls_that_reached_the_registry_count() {
        let timeout: Result<(), _> = Err(RegistryError::Timeout {
            registry: REGISTRY.into(),
            timeout: Duration::from_secs(5),
        });
        let not_found: Result<(), _> = Err(RegistryError::NotFound {
            repository: "r".into(),
            tag: "t".into(),
        });
        let backing_off: Result<(), _> = Err(RegistryError::BackingOff {
            registry: REGISTRY.into(),
            retry_in: Duration::ZERO,
            last: Arc::new(RegistryError::Timeout {
                registry: REGISTRY.into(),
                timeout: Duration::from_secs(5),
            }),
        });
        let shared_timeout: Result<(), _> =
            Err(RegistryError::Shared(Arc::new(RegistryError::Timeout {
                registry: REGISTRY.into(),
                timeout: Duration::from_secs(5),
            })));
        assert_eq!(Health::of(&timeout), Some(Health::Silent));
        assert_eq!(Health::of(&shared_timeout), Some(Health::Silent));
        assert_eq!(Health::of(&not_found), Some(Health::Answered));
        assert_eq!(
            Health::of(&Ok::<(), RegistryError>(())),
            Some(Health::Answered)
        );
        assert_eq!(Health::of(&backing_off), None);
    }
}
