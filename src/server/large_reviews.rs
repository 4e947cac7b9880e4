//! The memory budget of large reviews. Parsing a review costs memory several times its body
//! (a Pod naming one pull Secret 100,000 times, a 1.5 MB body, holds about 25 MB while it is
//! decided), and the apiserver sends as many at once as tenants write, so a tenant writing a
//! dozen such Pods at once could take pinhook past its memory limit and every tenant's
//! admissions with it. Reviews up to [`SMALL_BODY`] bytes (every ordinary Pod and workload)
//! never wait here; larger ones share [`LargeReviews`]: their bodies together at most
//! [`BUDGET`] bytes (a body larger than the whole budget takes all of it), each waiting at
//! most its review's own time budget, then refused as busy. A tenant's large writes so only
//! ever wait behind each other.

use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Bodies up to this size are decided without a share of the budget.
pub const SMALL_BODY: usize = 64 << 10;
/// The bytes of large bodies decided at once.
pub const BUDGET: usize = 8 << 20;

/// The shared budget of one server.
#[derive(Debug)]
pub struct LargeReviews {
    bytes: Semaphore,
    budget: usize,
}

/// Why a large review was not decided.
#[derive(Debug, thiserror::Error)]
#[error(
    "pinhook is deciding other large reviews ({bytes} bytes of this one did not fit in its \
     {budget}-byte budget for large reviews within {waited:?}); smaller objects are not affected"
)]
pub struct Busy {
    pub bytes: usize,
    pub budget: usize,
    pub waited: Duration,
}

/// The share a large review holds while it is decided (nothing for a small one).
#[derive(Debug)]
pub struct Share<'a> {
    _permit: Option<SemaphorePermit<'a>>,
}

impl Default for LargeReviews {
    fn default() -> Self {
        LargeReviews::new(BUDGET)
    }
}

impl LargeReviews {
    pub fn new(budget: usize) -> LargeReviews {
        let budget = budget.clamp(1, Semaphore::MAX_PERMITS);
        LargeReviews {
            bytes: Semaphore::new(budget),
            budget,
        }
    }

    /// Waits, at most `wait`, for a `body`-byte review's share.
    pub async fn admit(&self, body: usize, wait: Duration) -> Result<Share<'_>, Busy> {
        if body <= SMALL_BODY {
            return Ok(Share { _permit: None });
        }
        let want = u32::try_from(body.min(self.budget)).unwrap_or(u32::MAX);
        let busy = || Busy {
            bytes: body,
            budget: self.budget,
            waited: wait,
        };
        match tokio::time::timeout(wait, self.bytes.acquire_many(want)).await {
            Ok(Ok(permit)) => Ok(Share {
                _permit: Some(permit),
            }),
            Ok(Err(_)) | Err(_) => Err(busy()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn small_reviews_never_wait_and_large_ones_wait_for_each_other_within_their_time() {
        let large = LargeReviews::new(1 << 20);
        let first = large.admit(800 << 10, Duration::from_millis(10)).await;
        assert!(first.is_ok());
        // The budget is spent: a small review goes through, a large one is refused in time.
        let small = large.admit(SMALL_BODY, Duration::ZERO).await;
        assert!(small.is_ok());
        let started = std::time::Instant::now();
        let refused = large.admit(300 << 10, Duration::from_millis(50)).await;
        assert!(started.elapsed() < Duration::from_secs(2));
        let busy = refused.expect_err("over the budget");
        assert_eq!((busy.bytes, busy.budget), (300 << 10, 1 << 20));
        // A body larger than the whole budget takes all of it once it is free.
        drop(first);
        let whole = large.admit(7 << 20, Duration::from_millis(10)).await;
        assert!(whole.is_ok());
        assert!(large.admit(SMALL_BODY + 1, Duration::ZERO).await.is_err());
    }
}
