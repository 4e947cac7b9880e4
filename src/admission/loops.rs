//! The loop breaker: the safety net under `owners.pinPodsOf`. An operator listed as safe to pin
//! that does compare its Pods' images with its own resource deletes every pinned Pod and
//! creates another: pinhook sees the same owner create Pod after Pod of the same image. Past
//! `maxPods` creations of one image by one owner within `window`, pinhook stops pinning that
//! owner's Pods for `pause` (it leaves them as written, as for any operator it does not know),
//! so the operator settles; the trip is counted (`pinhook_owner_loops_total`), logged, and an
//! Event goes to the owner.
//!
//! Only Pods of owners the policy lists as safe to pin are counted: the built-in Pod controllers
//! never compare images (a ReplicaSet scaled to 100 creates 100 Pods of one image, legitimately),
//! and every other owner's Pods are left alone anyway. Memory is bounded: at most
//! [`MAX_OWNERS`] owners are tracked, each with at most `maxPods + 1` creation times per image
//! and [`MAX_IMAGES_PER_OWNER`] images. The clock is the caller's argument, so the rule is
//! tested without sleeping.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::policy::LoopBreakerSettings;

/// Owners tracked at once (least recently seen dropped first).
pub const MAX_OWNERS: u64 = 10_000;
/// Distinct images tracked per owner.
const MAX_IMAGES_PER_OWNER: usize = 64;

/// What the breaker says about one Pod creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopVerdict {
    /// Pin it as usual.
    Pin,
    /// This creation tripped the breaker: `count` Pods of `image` within the window.
    Tripped { image: String, count: usize },
    /// The owner's Pods are left as written until the pause ends.
    Paused { left: Duration },
}

/// Per-owner creation counts, bounded.
pub struct LoopBreaker {
    owners: moka::sync::Cache<(String, String), Arc<Mutex<OwnerTrack>>>,
}

#[derive(Default)]
struct OwnerTrack {
    created: HashMap<String, VecDeque<Instant>>,
    paused_until: Option<Instant>,
}

// === impl LoopBreaker ===

impl LoopBreaker {
    pub fn new() -> LoopBreaker {
        LoopBreaker {
            owners: moka::sync::Cache::builder()
                .max_capacity(MAX_OWNERS)
                // An owner not seen for an hour starts afresh (longer than any sane pause).
                .time_to_idle(Duration::from_secs(3600))
                .build(),
        }
    }

    /// Records the creation of a Pod of `owner` (its namespace and uid) with `images` at `now`.
    pub fn created(
        &self,
        settings: &LoopBreakerSettings,
        owner: (&str, &str),
        images: &[&str],
        now: Instant,
    ) -> LoopVerdict {
        if settings.max_pods == 0 {
            return LoopVerdict::Pin;
        }
        let track = self
            .owners
            .get_with((owner.0.to_string(), owner.1.to_string()), Default::default);
        let mut track = track.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(left) = track.paused(now) {
            return LoopVerdict::Paused { left };
        }
        let window = Duration::from_secs(settings.window_seconds);
        let limit = usize::try_from(settings.max_pods).unwrap_or(usize::MAX);
        let mut tripped = None;
        for image in images {
            if !track.created.contains_key(*image) && track.created.len() >= MAX_IMAGES_PER_OWNER {
                continue;
            }
            let times = track.created.entry((*image).to_string()).or_default();
            while times
                .front()
                .is_some_and(|t| now.duration_since(*t) > window)
            {
                times.pop_front();
            }
            times.push_back(now);
            while times.len() > limit + 1 {
                times.pop_front();
            }
            if times.len() > limit && tripped.is_none() {
                tripped = Some(((*image).to_string(), times.len()));
            }
        }
        match tripped {
            Some((image, count)) => {
                track.paused_until = Some(now + Duration::from_secs(settings.pause_seconds));
                track.created.clear();
                LoopVerdict::Tripped { image, count }
            }
            None => LoopVerdict::Pin,
        }
    }

    /// How long `owner`'s Pods are still left as written, if they are (what `/validate` asks:
    /// it must not deny the Pods `/mutate` left alone).
    pub fn paused(&self, owner: (&str, &str), now: Instant) -> Option<Duration> {
        let track = self
            .owners
            .get(&(owner.0.to_string(), owner.1.to_string()))?;
        let mut track = track.lock().unwrap_or_else(PoisonError::into_inner);
        track.paused(now)
    }
}

impl Default for LoopBreaker {
    fn default() -> Self {
        LoopBreaker::new()
    }
}

// === impl OwnerTrack ===

impl OwnerTrack {
    fn paused(&mut self, now: Instant) -> Option<Duration> {
        match self.paused_until {
            Some(until) if until > now => Some(until - now),
            Some(_) => {
                self.paused_until = None;
                None
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(max_pods: u32) -> LoopBreakerSettings {
        LoopBreakerSettings {
            max_pods,
            window_seconds: 60,
            pause_seconds: 600,
        }
    }

    const OWNER: (&str, &str) = ("team", "uid-1");

    #[test]
    fn an_owner_recreating_one_image_is_paused_past_the_bound() {
        let breaker = LoopBreaker::new();
        let start = Instant::now();
        let settings = settings(3);
        for i in 0..3 {
            let now = start + Duration::from_secs(i);
            assert_eq!(
                breaker.created(&settings, OWNER, &["app:1"], now),
                LoopVerdict::Pin
            );
        }
        let fourth = start + Duration::from_secs(3);
        assert_eq!(
            breaker.created(&settings, OWNER, &["app:1"], fourth),
            LoopVerdict::Tripped {
                image: "app:1".to_string(),
                count: 4
            }
        );
        let later = fourth + Duration::from_secs(10);
        assert_eq!(
            breaker.created(&settings, OWNER, &["app:1"], later),
            LoopVerdict::Paused {
                left: Duration::from_secs(590)
            }
        );
        assert_eq!(breaker.paused(OWNER, later), Some(Duration::from_secs(590)));
        // Another owner, and the same owner after the pause, are pinned again.
        assert_eq!(
            breaker.created(&settings, ("team", "uid-2"), &["app:1"], later),
            LoopVerdict::Pin
        );
        let after = fourth + Duration::from_secs(601);
        assert_eq!(breaker.paused(OWNER, after), None);
        assert_eq!(
            breaker.created(&settings, OWNER, &["app:1"], after),
            LoopVerdict::Pin
        );
    }

    #[test]
    fn creations_spread_beyond_the_window_or_over_images_do_not_trip() {
        let breaker = LoopBreaker::new();
        let start = Instant::now();
        let settings = settings(3);
        for i in 0..20 {
            let now = start + Duration::from_secs(i * 61);
            assert_eq!(
                breaker.created(&settings, OWNER, &["app:1"], now),
                LoopVerdict::Pin
            );
        }
        for i in 0..20 {
            let image = format!("step-{i}:1");
            assert_eq!(
                breaker.created(&settings, ("team", "uid-3"), &[&image], start),
                LoopVerdict::Pin
            );
        }
    }

    #[test]
    fn zero_turns_it_off_and_memory_per_owner_is_bounded() {
        let breaker = LoopBreaker::new();
        let now = Instant::now();
        for _ in 0..100 {
            assert_eq!(
                breaker.created(&settings(0), OWNER, &["app:1"], now),
                LoopVerdict::Pin
            );
        }
        let settings = settings(1000);
        for i in 0..500 {
            let image = format!("img-{i}:1");
            let _ = breaker.created(&settings, OWNER, &[&image], now);
        }
        for _ in 0..5000 {
            let _ = breaker.created(&settings, ("team", "uid-4"), &["app:1"], now);
        }
        let kept = |owner: (&str, &str)| {
            breaker
                .owners
                .get(&(owner.0.to_string(), owner.1.to_string()))
                .map(|t| {
                    let t = t.lock().unwrap_or_else(PoisonError::into_inner);
                    (t.created.len(), t.created.values().map(VecDeque::len).max())
                })
        };
        assert_eq!(kept(OWNER).map(|k| k.0), Some(MAX_IMAGES_PER_OWNER));
        assert_eq!(
            kept(("team", "uid-4")),
            Some((0, None)),
            "tripped at 1001: its counts were cleared when it was paused"
        );
    }
}
