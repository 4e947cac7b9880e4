//! The budget of TokenReviews `/v1/dry-run` may send: a token bucket (`--token-review-rate`
//! per second, up to `--token-review-burst` at once) shared by every caller. A request that
//! finds it empty is answered 429 before any apiserver call, so a flood of made-up tokens
//! costs the apiserver at most the bucket's rate, not one TokenReview per request. A token
//! that authenticated in the last 9 s skips the bucket: the authorizer answers it from its own
//! 10 s cache without a TokenReview, so a flood does not lock out callers already known.

use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// How long a token that authenticated skips the bucket: under the authorizer's 10 s cache of
/// TokenReview answers, so that a skipped token is always answered from that cache.
const KNOWN_FOR: Duration = Duration::from_secs(9);

/// How many TokenReviews per second, and how many at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenReviewLimit {
    pub per_second: f64,
    pub burst: u32,
}

/// A token bucket: [`TokenBucket::try_take`] spends one token when there is one.
#[derive(Debug)]
pub struct TokenBucket {
    limit: TokenReviewLimit,
    /// Tokens left, and when they were last counted.
    state: Mutex<(f64, Instant)>,
    /// SHA-256 of bearer tokens that authenticated in the last [`KNOWN_FOR`].
    known: moka::sync::Cache<[u8; 32], ()>,
}

// === impl TokenReviewLimit ===

impl Default for TokenReviewLimit {
    fn default() -> Self {
        TokenReviewLimit {
            per_second: 10.0,
            burst: 20,
        }
    }
}

// === impl TokenBucket ===

impl TokenBucket {
    /// A full bucket.
    pub fn new(limit: TokenReviewLimit) -> TokenBucket {
        TokenBucket {
            limit,
            state: Mutex::new((f64::from(limit.burst), Instant::now())),
            known: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(KNOWN_FOR)
                .build(),
        }
    }

    /// The SubjectAccessReview budget that goes with a TokenReview budget of `limit`: four
    /// times its rate, and a burst of [`super::dry_run::MAX_ACCESS_CHECKS`] twice over, so that
    /// one dry run's checks never wait on it alone.
    pub fn for_access_reviews(limit: TokenReviewLimit) -> TokenBucket {
        TokenBucket::new(TokenReviewLimit {
            per_second: limit.per_second * 4.0,
            burst: limit
                .burst
                .max(2 * super::dry_run::MAX_ACCESS_CHECKS as u32),
        })
    }

    /// May a TokenReview be sent for `token`? Yes, without spending, for a token that
    /// authenticated lately (answered from the authorizer's cache); otherwise when the bucket
    /// has a token left.
    pub fn admit(&self, bearer: &str) -> bool {
        self.known.contains_key(&fingerprint(bearer)) || self.try_take()
    }

    /// `bearer` authenticated: it skips the bucket for the next [`KNOWN_FOR`].
    pub fn authenticated(&self, bearer: &str) {
        self.known.insert(fingerprint(bearer), ());
    }

    /// Spends `n` tokens at once, or none; `false` when fewer are left.
    pub fn try_take_n(&self, n: u32) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(state.1).as_secs_f64();
        let refilled = state.0 + elapsed * self.limit.per_second.max(0.0);
        state.0 = refilled.min(f64::from(self.limit.burst));
        state.1 = now;
        if state.0 >= f64::from(n) {
            state.0 -= f64::from(n);
            true
        } else {
            false
        }
    }

    /// Spends a token; `false` when none is left (the caller must not call the apiserver).
    pub fn try_take(&self) -> bool {
        self.try_take_n(1)
    }
}

fn fingerprint(bearer: &str) -> [u8; 32] {
    Sha256::digest(bearer.as_bytes()).into()
}

impl Default for TokenBucket {
    fn default() -> Self {
        TokenBucket::new(TokenReviewLimit::default())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate_and_never_more() {
        let bucket = TokenBucket::new(TokenReviewLimit {
            per_second: 2.0,
            burst: 5,
        });
        let taken = (0..100).filter(|_| bucket.try_take()).count();
        assert_eq!(taken, 5, "a full bucket gives its burst at once");
        tokio::time::advance(Duration::from_millis(1500)).await;
        let taken = (0..100).filter(|_| bucket.try_take()).count();
        assert_eq!(taken, 3, "1.5 s at 2/s");
        tokio::time::advance(Duration::from_secs(3600)).await;
        let taken = (0..100).filter(|_| bucket.try_take()).count();
        assert_eq!(taken, 5, "a quiet hour refills up to the burst, no further");
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_that_authenticated_is_admitted_while_the_bucket_is_empty() {
        let bucket = TokenBucket::new(TokenReviewLimit {
            per_second: 0.001,
            burst: 1,
        });
        assert!(bucket.admit("good"));
        bucket.authenticated("good");
        assert!(!bucket.admit("bad"), "the bucket is empty");
        assert!(bucket.admit("good"), "known for a while");
        assert!(bucket.admit("good"), "and it spends nothing");
    }
}
