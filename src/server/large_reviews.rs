//! The memory budget of large reviews. Parsing a review costs memory many times its body
//! (a Pod naming one pull Secret 100,000 times, a 1.5 MB body, holds about 65 MB while it is
//! decided: every `{"name":"big"}` entry is a map of its own), and the apiserver sends as many
//! at once as tenants write, so a tenant writing a dozen such Pods at once could take pinhook
//! past its memory limit and every tenant's admissions with it. Reviews up to [`SMALL_BODY`]
//! bytes (every ordinary Pod and workload) never wait here; larger ones share
//! [`LargeReviews`]: what parsing them costs ([`parsed_cost`], an estimate from the body's
//! bytes, objects, strings and values) together at most [`BUDGET`] bytes (a review costing more
//! than the whole budget takes all of it), each waiting at most its review's own time budget,
//! then refused as busy. A tenant's large writes so only ever wait behind each other.
//!
//! The budget was once counted in body bytes (8 MiB): five such 1.5 MB reviews fitted, 325 MB
//! parsed. That held only while deciding a review never yielded between its parse and its
//! answer, so that each worker thread finished one before parsing the next; once reading a
//! review's pull secret names yielded, all five were parsed at once.

use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Bodies up to this size are decided without a share of the budget.
pub const SMALL_BODY: usize = 64 << 10;
/// The estimated bytes ([`parsed_cost`]) of the large reviews decided at once: two of the
/// 1.5 MB reviews above, or about 8 MiB of bodies of ordinary Kubernetes JSON (as many as the
/// budget in body bytes let in).
pub const BUDGET: usize = 160 << 20;
/// What parsing costs per JSON object (`{`) beyond its text: serde_json's ordered map (an
/// index table and an entries vector, allocated even for one key).
const PER_OBJECT: usize = 512;
/// Per JSON value in an array or object (`,`): its slot, a `Value` and a map entry's hash.
const PER_VALUE: usize = 80;
/// Per string (a `"` each end): its allocation.
const PER_QUOTE: usize = 16;

/// Roughly the bytes `body` holds once parsed: its own bytes plus [`PER_OBJECT`] for each `{`,
/// [`PER_VALUE`] for each `,` and [`PER_QUOTE`] for each `"` (inside strings too, so rather
/// more than less). Calibrated on the review naming a pull Secret 100,000 times (about 67 MB
/// estimated, 65 MB measured).
pub fn parsed_cost(body: &[u8]) -> usize {
    let count = |byte: u8| body.iter().filter(|&&b| b == byte).count();
    body.len()
        .saturating_add(count(b'{').saturating_mul(PER_OBJECT))
        .saturating_add(count(b',').saturating_mul(PER_VALUE))
        .saturating_add(count(b'"').saturating_mul(PER_QUOTE))
}

/// The shared budget of one server.
#[derive(Debug)]
pub struct LargeReviews {
    bytes: Semaphore,
    budget: usize,
}

/// Why a large review was not decided.
#[derive(Debug, thiserror::Error)]
#[error(
    "pinhook is deciding other large reviews (this one, {bytes} bytes, would hold about {cost} \
     bytes parsed, which did not fit in the {budget}-byte budget for large reviews within \
     {waited:?}); smaller objects are not affected"
)]
pub struct Busy {
    pub bytes: usize,
    pub cost: usize,
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

    /// Waits, at most `wait`, for the share of a review whose body is `body`: its
    /// [`parsed_cost`].
    pub async fn admit(&self, body: &[u8], wait: Duration) -> Result<Share<'_>, Busy> {
        if body.len() <= SMALL_BODY {
            return Ok(Share { _permit: None });
        }
        let cost = parsed_cost(body);
        let want = u32::try_from(cost.min(self.budget)).unwrap_or(u32::MAX);
        let busy = || Busy {
            bytes: body.len(),
            cost,
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

    /// A body of `n` spaces: it costs its bytes and nothing more.
    fn blank(n: usize) -> Vec<u8> {
        vec![b' '; n]
    }

    #[tokio::test]
    async fn small_reviews_never_wait_and_large_ones_wait_for_each_other_within_their_time() {
        let large = LargeReviews::new(1 << 20);
        let first = large
            .admit(&blank(800 << 10), Duration::from_millis(10))
            .await;
        assert!(first.is_ok());
        // The budget is spent: a small review goes through, a large one is refused in time.
        let small = large.admit(&blank(SMALL_BODY), Duration::ZERO).await;
        assert!(small.is_ok());
        let started = std::time::Instant::now();
        let refused = large
            .admit(&blank(300 << 10), Duration::from_millis(50))
            .await;
        assert!(started.elapsed() < Duration::from_secs(2));
        let busy = refused.expect_err("over the budget");
        assert_eq!(
            (busy.bytes, busy.cost, busy.budget),
            (300 << 10, 300 << 10, 1 << 20)
        );
        // A body larger than the whole budget takes all of it once it is free.
        drop(first);
        let whole = large
            .admit(&blank(7 << 20), Duration::from_millis(10))
            .await;
        assert!(whole.is_ok());
        assert!(large
            .admit(&blank(SMALL_BODY + 1), Duration::ZERO)
            .await
            .is_err());
    }

    /// A review naming one pull Secret 100,000 times, 1.5 MB of body: it weighs as what it
    /// holds parsed (about 65 MB), not as its body, so only two are decided at once; five fitted
    /// when the budget counted 8 MiB of bodies, and together held 325 MB.
    #[tokio::test]
    async fn a_review_of_many_small_objects_weighs_what_it_holds_parsed() {
        let entries = vec![r#"{"name":"big"}"#; 100_000].join(",");
        let body = format!(r#"{{"spec":{{"imagePullSecrets":[{entries}]}}}}"#).into_bytes();
        assert!(body.len() > 1_500_000, "{}", body.len());
        let cost = parsed_cost(&body);
        assert!((60 << 20..80 << 20).contains(&cost), "{cost}");
        let large = LargeReviews::default();
        let first = large.admit(&body, Duration::from_millis(10)).await;
        let second = large.admit(&body, Duration::from_millis(10)).await;
        assert!(first.is_ok() && second.is_ok());
        let third = large.admit(&body, Duration::from_millis(10)).await;
        let busy = third.expect_err("two are decided at once");
        assert_eq!((busy.bytes, busy.cost), (body.len(), cost));
        drop(first);
        assert!(large.admit(&body, Duration::from_millis(10)).await.is_ok());
    }

    /// Ordinary Kubernetes JSON (longer keys and values) is estimated at under 25 times its
    /// body: at least 8 MiB of it still fits at once, as much as the budget in body bytes let
    /// in.
    #[test]
    fn ordinary_json_fits_as_much_as_before() {
        let container = r#"{"name":"app","image":"registry.example.com/team/app:v1.2.3","env":[{"name":"LOG_LEVEL","value":"info"}],"resources":{"limits":{"cpu":"500m","memory":"256Mi"}}}"#;
        let body = format!("[{}]", vec![container; 5_000].join(",")).into_bytes();
        let times = parsed_cost(&body) / body.len();
        assert!((10..25).contains(&times), "{times}");
        assert!(BUDGET / times >= 8 << 20, "{times}");
    }
}
