//! The loop breaker: the safety net under `owners.pinPodsOf`. An operator listed as safe to pin
//! that does compare its Pods' images with its own resource deletes every pinned Pod and
//! creates another: pinhook sees the same owner create Pod after Pod of the same image. Past
//! `maxPods` creations of one image by one owner within `window`, pinhook stops pinning that
//! owner's Pods for `pause` (`/mutate` leaves them as written; `/validate` still checks them,
//! so in enforce they are denied), so the operator stops churning Pods; the trip is counted
//! (`pinhook_owner_loops_total`), logged, and an Event goes to the owner.
//!
//! Every replica must count alike (issue 43): with the chart's two replicas each would see half
//! the creations and pause on its own. So the counts ([`OwnerTrack`], plain data in seconds of
//! UNIX time) live in the cluster, in a ConfigMap pinhook owns ([`ledger`]), and this process's
//! memory ([`LoopBreaker`]) only stands in when there is no cluster or it cannot be reached.
//!
//! Only Pods of owners the policy lists as safe to pin are counted: the built-in Pod controllers
//! never compare images (a ReplicaSet scaled to 100 creates 100 Pods of one image, legitimately),
//! and every other owner's Pods are left alone anyway. Memory is bounded: at most
//! [`MAX_OWNERS`] owners are tracked in memory ([`ledger::MAX_LEDGER_OWNERS`] in the ledger),
//! each with at most `maxPods + 1` creation times per image and [`MAX_IMAGES_PER_OWNER`]
//! images, each counted under a 16-character hash of its name ([`image_key`]). The clock is the
//! caller's argument, so the rule is tested without sleeping.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::policy::LoopBreakerSettings;
use crate::weight::weight;

pub mod ledger;

/// Owners tracked at once (least recently seen dropped first), within [`LOOP_BREAKER_BYTES`].
pub const MAX_OWNERS: u64 = 10_000;
/// Bytes the owners tracked in memory may hold, each weighed at its most: its key and
/// [`MAX_IMAGES_PER_OWNER`] images of `maxPods + 1` creation times (about 9 KiB at the default
/// `maxPods` of 10, so some 450 owners; the cluster's ledger keeps 256).
pub const LOOP_BREAKER_BYTES: u64 = 4 << 20;
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

/// One owner's creations: per image (by [`image_key`]), the seconds (UNIX time) of its last
/// creations within the window, and the end of a pause. Plain data, the same in one replica's
/// memory and in the cluster's ledger ([`ledger`]), so every replica counts alike.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerTrack {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    created: BTreeMap<String, VecDeque<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paused_until: Option<u64>,
}

/// Per-owner creation counts in this process's memory, bounded: the breaker of a replica that
/// has no cluster ledger, and the stand-in when the ledger cannot be reached.
pub struct LoopBreaker {
    owners: moka::sync::Cache<(String, String), Arc<Tracked>>,
}

/// One owner's track in memory, with the most bytes it can grow to under the settings it was
/// first counted with (a moka weight is taken once, at insertion).
struct Tracked {
    most: usize,
    track: Mutex<OwnerTrack>,
}

/// Now, in seconds of UNIX time (the unit of [`OwnerTrack`]).
pub fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The key an image is counted under: a short hash, so a tenant's image string of any length
/// costs the ledger the same few bytes.
pub fn image_key(image: &str) -> String {
    let digest = Sha256::digest(image.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

// === impl LoopBreaker ===

impl LoopBreaker {
    pub fn new() -> LoopBreaker {
        LoopBreaker {
            owners: moka::sync::Cache::builder()
                .max_capacity(LOOP_BREAKER_BYTES)
                .weigher(|key: &(String, String), tracked: &Arc<Tracked>| {
                    let bytes = key.0.len() + key.1.len() + tracked.most;
                    weight(bytes, LOOP_BREAKER_BYTES, MAX_OWNERS)
                })
                // An owner not seen for an hour starts afresh (longer than any sane pause).
                .time_to_idle(Duration::from_secs(3600))
                .build(),
        }
    }

    /// Records the creation of a Pod of `owner` (its namespace and uid) with `images` at `now`
    /// (seconds of UNIX time).
    pub fn created(
        &self,
        settings: &LoopBreakerSettings,
        owner: (&str, &str),
        images: &[&str],
        now: u64,
    ) -> LoopVerdict {
        if settings.max_pods == 0 {
            return LoopVerdict::Pin;
        }
        let tracked = self
            .owners
            .get_with((owner.0.to_string(), owner.1.to_string()), || {
                Arc::new(Tracked {
                    most: most_bytes(settings),
                    track: Mutex::default(),
                })
            });
        let mut track = tracked.track.lock().unwrap_or_else(PoisonError::into_inner);
        track.record(settings, images, now)
    }

    /// How long `owner`'s Pods are still left as written, if they are.
    pub fn paused(&self, owner: (&str, &str), now: u64) -> Option<Duration> {
        let tracked = self
            .owners
            .get(&(owner.0.to_string(), owner.1.to_string()))?;
        let mut track = tracked.track.lock().unwrap_or_else(PoisonError::into_inner);
        track.paused(now)
    }
}

/// The most bytes one owner's [`OwnerTrack`] holds under `settings`: per image its key and map
/// node (about 64 bytes) and `maxPods + 1` times.
fn most_bytes(settings: &LoopBreakerSettings) -> usize {
    let times = usize::try_from(settings.max_pods)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    MAX_IMAGES_PER_OWNER.saturating_mul(times.saturating_mul(8).saturating_add(64))
}

impl Default for LoopBreaker {
    fn default() -> Self {
        LoopBreaker::new()
    }
}

// === impl OwnerTrack ===

impl OwnerTrack {
    /// Counts one creation of a Pod with `images` at `now` (the rule of the module docs).
    pub fn record(
        &mut self,
        settings: &LoopBreakerSettings,
        images: &[&str],
        now: u64,
    ) -> LoopVerdict {
        if settings.max_pods == 0 {
            return LoopVerdict::Pin;
        }
        if let Some(left) = self.paused(now) {
            return LoopVerdict::Paused { left };
        }
        let window = settings.window_seconds;
        let limit = usize::try_from(settings.max_pods).unwrap_or(usize::MAX);
        let mut tripped = None;
        for image in images {
            let key = image_key(image);
            if !self.created.contains_key(&key) && self.created.len() >= MAX_IMAGES_PER_OWNER {
                continue;
            }
            let times = self.created.entry(key).or_default();
            while times
                .front()
                .is_some_and(|t| now.saturating_sub(*t) > window)
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
                self.paused_until = Some(now.saturating_add(settings.pause_seconds));
                self.created.clear();
                LoopVerdict::Tripped { image, count }
            }
            None => LoopVerdict::Pin,
        }
    }

    /// How long the pause lasts from `now`, if there is one.
    pub fn paused_now(&mut self, now: u64) -> Option<Duration> {
        self.paused(now)
    }

    fn paused(&mut self, now: u64) -> Option<Duration> {
        match self.paused_until {
            Some(until) if until > now => Some(Duration::from_secs(until - now)),
            Some(_) => {
                self.paused_until = None;
                None
            }
            None => None,
        }
    }

    /// Nothing here matters any more at `now`: no pause, and no creation within `window`.
    pub fn is_stale(&self, now: u64, window: u64) -> bool {
        self.paused_until.is_none_or(|until| until <= now)
            && self
                .created
                .values()
                .flatten()
                .all(|t| now.saturating_sub(*t) > window)
    }

    /// The last second anything happened here (a creation or the end of a pause).
    pub fn last_seen(&self) -> u64 {
        let created = self.created.values().flatten().max().copied().unwrap_or(0);
        created.max(self.paused_until.unwrap_or(0))
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
        let start: u64 = 1_700_000_000;
        let settings = settings(3);
        for i in 0..3 {
            let now = start + i;
            assert_eq!(
                breaker.created(&settings, OWNER, &["app:1"], now),
                LoopVerdict::Pin
            );
        }
        let fourth = start + 3;
        assert_eq!(
            breaker.created(&settings, OWNER, &["app:1"], fourth),
            LoopVerdict::Tripped {
                image: "app:1".to_string(),
                count: 4
            }
        );
        let later = fourth + 10;
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
        let after = fourth + 601;
        assert_eq!(breaker.paused(OWNER, after), None);
        assert_eq!(
            breaker.created(&settings, OWNER, &["app:1"], after),
            LoopVerdict::Pin
        );
    }

    #[test]
    fn creations_spread_beyond_the_window_or_over_images_do_not_trip() {
        let breaker = LoopBreaker::new();
        let start: u64 = 1_700_000_000;
        let settings = settings(3);
        for i in 0..20 {
            let now = start + i * 61;
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
        let now: u64 = 1_700_000_000;
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
                    let t = t.track.lock().unwrap_or_else(PoisonError::into_inner);
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
