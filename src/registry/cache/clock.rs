//! The cache's clock: when an entry was resolved and until when a verification kept beside it
//! answers, as [`Stamp`]s, nanoseconds on one [`Clock`] per cache, eight bytes with a spare
//! value (zero) for [`super::record::Record`] to keep its variant in.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

/// A time on the cache's [`Clock`]. Never zero: a record keeps its variant in that spare
/// value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Stamp(NonZeroU64);

/// Nanoseconds since the cache was made, plus [`Clock::BIAS`] so that a time before it (an
/// entry made stale on purpose, `hit_ttl` ago) still has a stamp.
pub(super) struct Clock {
    epoch: Instant,
}

// === impl Stamp ===

impl Stamp {
    /// How long before `now` this is (zero if after it).
    pub(super) fn age_at(self, now: Stamp) -> Duration {
        Duration::from_nanos(now.0.get().saturating_sub(self.0.get()))
    }

    /// `ago` before this (the clock's earliest stamp at most).
    pub(super) fn minus(self, ago: Duration) -> Stamp {
        let ago = u64::try_from(ago.as_nanos()).unwrap_or(u64::MAX);
        Stamp(NonZeroU64::new(self.0.get().saturating_sub(ago)).unwrap_or(NonZeroU64::MIN))
    }
}

// === impl Clock ===

impl Clock {
    /// 2^62 ns: 146 years before the cache was made.
    const BIAS: u64 = 1 << 62;

    pub(super) fn new() -> Clock {
        Clock {
            epoch: Instant::now(),
        }
    }

    pub(super) fn now(&self) -> Stamp {
        self.stamp(Instant::now())
    }

    /// `at` on this clock (its earliest stamp if long before the clock was made).
    pub(super) fn stamp(&self, at: Instant) -> Stamp {
        let since =
            u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        Stamp(NonZeroU64::new(since.saturating_add(Self::BIAS)).unwrap_or(NonZeroU64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_before_the_clock_was_made_still_ages() {
        let clock = Clock::new();
        let now = clock.now();
        let day_ago = now.minus(Duration::from_secs(86_400));
        assert_eq!(day_ago.age_at(now), Duration::from_secs(86_400));
        assert_eq!(now.age_at(day_ago), Duration::ZERO);
        assert_eq!(
            now.minus(Duration::MAX).age_at(now),
            Duration::from_nanos(now.0.get() - 1)
        );
    }
}
