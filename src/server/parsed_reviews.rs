//! The memory budget of parsed reviews. Parsing a review costs memory many times its body
//! (a Pod naming one pull Secret 100,000 times, a 1.5 MB body, holds about 65 MB while it is
//! decided: every `{"name":"big"}` entry is a map of its own), and the apiserver sends as many
//! at once as tenants write, while each waits on registries. So every review takes a share of
//! [`ParsedReviews`] before it is parsed: what parsing it costs ([`parsed_cost`], an estimate
//! from the body's bytes, objects, strings and values). Reviews up to [`SMALL_BODY`] bytes
//! (every ordinary Pod and workload) share [`SMALL_BUDGET`], larger ones [`LARGE_BUDGET`], so
//! a tenant's large writes only ever wait behind each other; each waits at most its review's
//! own time budget, then is refused as busy. A review that would cost more than its whole pool
//! is refused at once ([`Refused::TooCostly`]): nothing lets one review past the memory the
//! model of docs/security.md counts.
//!
//! The budget was once counted in body bytes (8 MiB): five such 1.5 MB reviews fitted, 325 MB
//! parsed. Then it was 160 MiB of large reviews alone, small ones free, a review over the budget
//! taking all of it: that did not add up under the chart's 256 MiB (issue 44).

use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Bodies up to this size share [`SMALL_BUDGET`]; larger ones [`LARGE_BUDGET`].
pub const SMALL_BODY: usize = 64 << 10;
/// The estimated bytes ([`parsed_cost`]) of the reviews of up to [`SMALL_BODY`] decided at
/// once: an ordinary Pod review of 8 KiB costs about 100 KiB, so about 160 of them; the worst
/// 64 KiB body (`{},` repeated) about 13 MiB.
pub const SMALL_BUDGET: usize = 16 << 20;
/// The estimated bytes of the larger reviews decided at once: about 2 MiB of bodies of ordinary
/// Kubernetes JSON (an object the apiserver stores is at most 1.5 MiB).
pub const LARGE_BUDGET: usize = 32 << 20;
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

/// The shared budgets of one server.
#[derive(Debug)]
pub struct ParsedReviews {
    small: Pool,
    large: Pool,
}

#[derive(Debug)]
struct Pool {
    bytes: Semaphore,
    budget: usize,
}

/// Why a review was not decided.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(
        "pinhook is deciding other reviews (this one, {bytes} bytes, would hold about {cost} \
         bytes parsed, which did not fit in the {budget}-byte budget of reviews of its size \
         within {waited:?})"
    )]
    Busy {
        bytes: usize,
        cost: usize,
        budget: usize,
        waited: Duration,
    },
    #[error(
        "this review ({bytes} bytes) would hold about {cost} bytes parsed, more than the \
         {budget}-byte budget of all reviews of its size: pinhook does not parse it (an object \
         of that many small JSON objects and values is no workload's)"
    )]
    TooCostly {
        bytes: usize,
        cost: usize,
        budget: usize,
    },
}

/// The share a review holds while it is decided.
#[derive(Debug)]
pub struct Share<'a> {
    _permit: SemaphorePermit<'a>,
}

impl Default for ParsedReviews {
    fn default() -> Self {
        ParsedReviews::new(SMALL_BUDGET, LARGE_BUDGET)
    }
}

impl ParsedReviews {
    pub fn new(small: usize, large: usize) -> ParsedReviews {
        ParsedReviews {
            small: Pool::new(small),
            large: Pool::new(large),
        }
    }

    /// Waits, at most `wait`, for the share of a review whose body is `body`: its
    /// [`parsed_cost`], from the pool of its size.
    pub async fn admit(&self, body: &[u8], wait: Duration) -> Result<Share<'_>, Refused> {
        let pool = if body.len() <= SMALL_BODY {
            &self.small
        } else {
            &self.large
        };
        let cost = parsed_cost(body).max(1);
        if cost > pool.budget {
            return Err(Refused::TooCostly {
                bytes: body.len(),
                cost,
                budget: pool.budget,
            });
        }
        let busy = || Refused::Busy {
            bytes: body.len(),
            cost,
            budget: pool.budget,
            waited: wait,
        };
        // (cost <= budget <= Semaphore::MAX_PERMITS; u32 by the budgets' sizes)
        let want = u32::try_from(cost).map_err(|_| busy())?;
        match tokio::time::timeout(wait, pool.bytes.acquire_many(want)).await {
            Ok(Ok(permit)) => Ok(Share { _permit: permit }),
            Ok(Err(_)) | Err(_) => Err(busy()),
        }
    }
}

impl Pool {
    fn new(budget: usize) -> Pool {
        let budget = budget.clamp(1, (u32::MAX as usize).min(Semaphore::MAX_PERMITS));
        Pool {
            bytes: Semaphore::new(budget),
            budget,
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
    async fn small_and_large_reviews_wait_in_pools_of_their_own_within_their_time() {
        let reviews = ParsedReviews::new(SMALL_BODY * 2, 1 << 20);
        let first = reviews
            .admit(&blank(800 << 10), Duration::from_millis(10))
            .await;
        assert!(first.is_ok());
        // The large pool is spent: a small review goes through, a large one is refused in time.
        let small = reviews.admit(&blank(SMALL_BODY), Duration::ZERO).await;
        assert!(small.is_ok());
        let started = std::time::Instant::now();
        let refused = reviews
            .admit(&blank(300 << 10), Duration::from_millis(50))
            .await;
        assert!(started.elapsed() < Duration::from_secs(2));
        match refused {
            Err(Refused::Busy {
                bytes,
                cost,
                budget,
                ..
            }) => {
                assert_eq!((bytes, cost, budget), (300 << 10, 300 << 10, 1 << 20))
            }
            other => panic!("{other:?}"),
        }
        // Small reviews wait for each other too: two of SMALL_BODY fill their pool.
        let second_small = reviews.admit(&blank(SMALL_BODY), Duration::ZERO).await;
        assert!(second_small.is_ok());
        assert!(matches!(
            reviews.admit(&blank(10), Duration::from_millis(10)).await,
            Err(Refused::Busy { .. })
        ));
        drop(small);
        assert!(reviews.admit(&blank(10), Duration::ZERO).await.is_ok());
    }

    #[tokio::test]
    async fn a_review_costing_more_than_its_pool_is_refused_at_once() {
        let reviews = ParsedReviews::new(SMALL_BODY * 2, 1 << 20);
        let started = std::time::Instant::now();
        let refused = reviews
            .admit(&blank(7 << 20), Duration::from_secs(30))
            .await;
        assert!(started.elapsed() < Duration::from_secs(1));
        match refused {
            Err(e @ Refused::TooCostly { .. }) => {
                assert!(e.to_string().contains("pinhook does not parse it"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// A review naming one pull Secret 100,000 times, 1.5 MB of body: it weighs as what it
    /// holds parsed (about 65 MB), not as its body. Under the 160 MiB budget two were decided
    /// at once (130 MB, half the chart's limit); now none is: it costs more than the whole pool.
    #[tokio::test]
    async fn a_review_of_many_small_objects_weighs_what_it_holds_parsed() {
        let entries = vec![r#"{"name":"big"}"#; 100_000].join(",");
        let body = format!(r#"{{"spec":{{"imagePullSecrets":[{entries}]}}}}"#).into_bytes();
        assert!(body.len() > 1_500_000, "{}", body.len());
        let cost = parsed_cost(&body);
        assert!((60 << 20..80 << 20).contains(&cost), "{cost}");
        let reviews = ParsedReviews::default();
        match reviews.admit(&body, Duration::from_millis(10)).await {
            Err(Refused::TooCostly {
                bytes,
                cost: c,
                budget,
            }) => {
                assert_eq!((bytes, c, budget), (body.len(), cost, LARGE_BUDGET))
            }
            other => panic!("{other:?}"),
        }
        // The worst small body fits its pool.
        let worst_small = "{},".repeat(SMALL_BODY / 3).into_bytes();
        assert!(parsed_cost(&worst_small) <= SMALL_BUDGET);
        assert!(reviews.admit(&worst_small, Duration::ZERO).await.is_ok());
    }

    /// Ordinary Kubernetes JSON (longer keys and values) is estimated at under 25 times its
    /// body: a 1.5 MiB object of it (the most the apiserver stores) is decided.
    #[tokio::test]
    async fn ordinary_json_of_the_largest_stored_object_fits() {
        let container = r#"{"name":"app","image":"registry.example.com/team/app:v1.2.3","env":[{"name":"LOG_LEVEL","value":"info"}],"resources":{"limits":{"cpu":"500m","memory":"256Mi"}}}"#;
        let body = format!("[{}]", vec![container; 9_800].join(",")).into_bytes();
        assert!(body.len() >= 3 << 19, "{}", body.len());
        let times = parsed_cost(&body) / body.len();
        assert!((10..25).contains(&times), "{times}");
        let reviews = ParsedReviews::default();
        assert!(reviews.admit(&body, Duration::ZERO).await.is_ok());
    }
}
