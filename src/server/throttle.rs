//! The budget of TokenReviews `/v1/dry-run` may send: a token bucket (`--token-review-rate`
//! per second, up to `--token-review-burst` at once) shared by every caller. A request that
//! finds it empty is answered 429 before any apiserver call, so a flood of made-up tokens
//! costs the apiserver at most the bucket's rate, not one TokenReview per request.

use std::sync::Mutex;

use tokio::time::Instant;

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
        }
    }

    /// Spends a token; `false` when none is left (the caller must not call the apiserver).
    pub fn try_take(&self) -> bool {
        // A poisoned lock only means a panic elsewhere while holding it; the count is still
        // a number.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(state.1).as_secs_f64();
        let refilled = state.0 + elapsed * self.limit.per_second.max(0.0);
        state.0 = refilled.min(f64::from(self.limit.burst));
        state.1 = now;
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            true
        } else {
            false
        }
    }
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
}
