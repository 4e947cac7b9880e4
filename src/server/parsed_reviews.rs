//! The memory budget of parsed reviews. Parsing a review costs memory many times its body
//! (a Pod naming one pull Secret 100,000 times, a 1.5 MB body, holds about 65 MB while it is
//! decided: every `{"name":"big"}` entry is a map of its own), and the apiserver sends as many
//! at once as tenants write, while each waits on registries. So every review takes a share of
//! [`ParsedReviews`] before it is parsed: what parsing it costs ([`parsed_cost`], an estimate
//! from the body's bytes, objects, strings and values). Reviews up to [`SMALL_BODY`] bytes
//! (every ordinary Pod and workload) share [`SMALL_BUDGET`], larger ones [`LARGE_BUDGET`], so
//! a tenant's large writes only ever wait behind each other; each waits at most its review's
//! own time budget, then is refused as busy (429, `Retry-After: 1`). A review waits by trying
//! again every few milliseconds, not in a queue: a large share the pool cannot give yet never
//! holds up a smaller one it can. A review that would cost more than its whole pool
//! is refused at once ([`Refused::TooCostly`]): nothing lets one review past the memory the
//! model of docs/security.md counts.
//!
//! A dry run's documents are parsed input too, held while the dry run resolves their images (up
//! to a minute): each takes [`dry_run_cost`] of a pool of their own, [`DRY_RUN_BUDGET`], before
//! its body is parsed, and its parser is held to [`dry_run_values`] values and as many scalar
//! bytes as the body has ([`documents::ParseLimits`](crate::documents::ParseLimits)), so the
//! cost bounds what parsing can hold. They had no share of anything before (issue 44).
//!
//! The budget was once counted in body bytes (8 MiB): five such 1.5 MB reviews fitted, 325 MB
//! parsed. Then it was 160 MiB of large reviews alone, small ones free, a review over the budget
//! taking all of it: that did not add up under the chart's 256 MiB (issue 44).

use std::time::Duration;

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::documents::JsonShape;

pub use crate::admission::failure::Refused;

/// Bodies up to this size share [`SMALL_BUDGET`]; larger ones [`LARGE_BUDGET`].
pub const SMALL_BODY: usize = 64 << 10;
/// The estimated bytes ([`parsed_cost`]) of the reviews of up to [`SMALL_BODY`] decided at
/// once: an ordinary Pod review of 8 KiB costs about 100 KiB, so about 160 of them; the worst
/// 64 KiB body (`{},` repeated) about 13 MiB.
pub const SMALL_BUDGET: usize = 16 << 20;
/// The estimated bytes of the larger reviews decided at once: the UPDATE of the largest object
/// the apiserver stores (1.5 MiB, in `object` and `oldObject`: about 3 MiB of ordinary
/// Kubernetes JSON, some 60 MiB estimated).
pub const LARGE_BUDGET: usize = 64 << 20;
/// The estimated bytes of the dry runs' documents and reports held at once: one of the largest
/// body ([`dry_run_cost`] of 2 MiB: 24.2 MB) or several ordinary ones (a 20 KB manifest,
/// 4.5 MB).
pub const DRY_RUN_BUDGET: usize = 24 << 20;
/// The most values (mappings, sequences, scalars, YAML alias replays included) one dry run
/// reads: about 320 KB of ordinary Kubernetes YAML; split larger sets. (50,000 until the
/// report was charged too.)
pub const DRY_RUN_MAX_VALUES: usize = 40_000;
/// The fewest values a dry-run body may hold, however short.
const DRY_RUN_MIN_VALUES: usize = 4_096;
/// What one value costs at most while parsed and held, as measured on the worst inputs at
/// 50,000 values (debug build, peak RSS): YAML whose aliases replay anchors 390 B, flow and
/// block sequences of one-letter scalars 200-220 B, mappings of one key 280 B; JSON
/// `[{"k":"v"},…]` 180 B.
pub const DRY_RUN_VALUE_BYTES: usize = 400;
/// What the report may add per value beyond the body's length: JSON quotes, commas and keys
/// (a YAML `a: b` is `"a":"b",`), and each image's lines (path, container, result, digest).
pub const DRY_RUN_REPORT_VALUE_BYTES: usize = 48;

/// The values a dry-run body of `len` bytes may hold: half its bytes (`a,` is one value in two
/// bytes), at least [`DRY_RUN_MIN_VALUES`], at most [`DRY_RUN_MAX_VALUES`].
pub fn dry_run_values(len: usize) -> usize {
    (len / 2).clamp(DRY_RUN_MIN_VALUES, DRY_RUN_MAX_VALUES)
}

/// The most bytes the report of a dry-run body of `len` bytes is written in (past it the dry
/// run is refused, 413): the body's length and [`DRY_RUN_REPORT_VALUE_BYTES`] per value.
pub fn dry_run_report_bytes(len: usize) -> usize {
    len.saturating_add(dry_run_values(len).saturating_mul(DRY_RUN_REPORT_VALUE_BYTES))
}

/// The share of [`DRY_RUN_BUDGET`] a dry-run body of `len` bytes takes: the body, its scalars
/// (at most its own length, alias replays included), [`dry_run_values`] values and the report
/// ([`dry_run_report_bytes`]).
pub fn dry_run_cost(len: usize) -> usize {
    len.saturating_mul(2)
        .saturating_add(dry_run_values(len).saturating_mul(DRY_RUN_VALUE_BYTES))
        .saturating_add(dry_run_report_bytes(len))
}

/// What parsing costs per JSON object (`{`) beyond its text: serde_json's ordered map (an
/// index table and an entries vector, allocated even for one key).
const PER_OBJECT: usize = 512;
/// Per JSON value in an array or object (`,`): its slot, a `Value` and a map entry's hash.
const PER_VALUE: usize = 80;
/// Per string: its allocation.
const PER_STRING: usize = 32;
/// How long a review waits between two tries for its share.
const RETRY_EVERY: Duration = Duration::from_millis(5);

/// Roughly the bytes `body` holds once parsed: its own bytes plus [`PER_OBJECT`] for each
/// object, [`PER_VALUE`] for each `,` and [`PER_STRING`] for each string, counted outside
/// strings (a `{` or `,` inside one, JSON in an annotation, is text). Calibrated on the review
/// naming a pull Secret 100,000 times (about 67 MB estimated, 65 MB measured).
pub fn parsed_cost(body: &[u8]) -> usize {
    let shape = JsonShape::of(body);
    body.len()
        .saturating_add(shape.objects.saturating_mul(PER_OBJECT))
        .saturating_add(shape.commas.saturating_mul(PER_VALUE))
        .saturating_add(shape.strings.saturating_mul(PER_STRING))
}

/// The shared budgets of one server.
#[derive(Debug)]
pub struct ParsedReviews {
    small: Pool,
    large: Pool,
    /// The dry runs' documents ([`DRY_RUN_BUDGET`]).
    pub dry_runs: Pool,
}

/// A budget of estimated parsed bytes that waiters take shares of: each of
/// [`ParsedReviews`]'s two, and the dry runs' (`server::dry_run`).
#[derive(Debug)]
pub struct Pool {
    bytes: Arc<Semaphore>,
    budget: usize,
}

/// Why a [`Pool`] gave no share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoShare {
    /// The cost is more than the whole budget.
    TooCostly,
    /// No room within the wait.
    Busy,
}

/// The share a review (or a dry run) holds while it is decided.
#[derive(Debug)]
pub struct Share {
    _permit: OwnedSemaphorePermit,
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
            dry_runs: Pool::new(DRY_RUN_BUDGET),
        }
    }

    /// Waits, at most `wait`, for the share of a review whose body is `body`: its
    /// [`parsed_cost`], from the pool of its size.
    pub async fn admit(&self, body: &[u8], wait: Duration) -> Result<Share, Refused> {
        let pool = if body.len() <= SMALL_BODY {
            &self.small
        } else {
            &self.large
        };
        let cost = parsed_cost(body).max(1);
        match pool.take(cost, wait).await {
            Ok(share) => Ok(share),
            Err(NoShare::TooCostly) => Err(Refused::TooCostly {
                bytes: body.len(),
                cost,
                budget: pool.budget,
            }),
            Err(NoShare::Busy) => Err(Refused::Busy {
                bytes: body.len(),
                cost,
                budget: pool.budget,
                waited: wait,
            }),
        }
    }
}

impl Pool {
    pub fn new(budget: usize) -> Pool {
        let budget = budget.clamp(1, (u32::MAX as usize).min(Semaphore::MAX_PERMITS));
        Pool {
            bytes: Arc::new(Semaphore::new(budget)),
            budget,
        }
    }

    /// The whole budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Waits, at most `wait`, for a share of `cost` bytes; a cost over the whole budget is
    /// refused at once. Waiters try again every few milliseconds, not in a queue, so a large
    /// share the pool cannot give yet never holds up a smaller one it can.
    pub async fn take(&self, cost: usize, wait: Duration) -> Result<Share, NoShare> {
        let cost = cost.max(1);
        if cost > self.budget {
            return Err(NoShare::TooCostly);
        }
        // (cost <= budget <= Semaphore::MAX_PERMITS, which fits a u32)
        let want = u32::try_from(cost).map_err(|_| NoShare::TooCostly)?;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self.bytes.clone().try_acquire_many_owned(want) {
                Ok(permit) => return Ok(Share { _permit: permit }),
                Err(TryAcquireError::NoPermits) => {}
                Err(TryAcquireError::Closed) => return Err(NoShare::Busy),
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(NoShare::Busy);
            }
            tokio::time::sleep(RETRY_EVERY.min(deadline - now)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A body of `n` spaces: it costs its bytes and nothing more.
    fn blank(n: usize) -> Vec<u8> {
        vec![b' '; n]
    }

    /// The largest dry-run body fits the dry runs' pool alone; an ordinary manifest takes a
    /// small share of it; a tiny body still may hold a few thousand values.
    #[test]
    fn a_dry_run_costs_its_body_its_scalars_and_its_values() {
        let largest = crate::server::dry_run::MAX_DRY_RUN_BODY;
        assert_eq!(dry_run_values(largest), DRY_RUN_MAX_VALUES);
        assert_eq!(
            dry_run_cost(largest),
            2 * largest + 40_000 * 400 + (largest + 40_000 * 48)
        );
        assert!(dry_run_cost(largest) <= DRY_RUN_BUDGET);
        assert!(
            2 * dry_run_cost(largest) > DRY_RUN_BUDGET,
            "one of the largest at a time"
        );
        assert_eq!(dry_run_values(20_000), 10_000);
        assert_eq!(
            dry_run_cost(20_000),
            40_000 + 10_000 * 400 + (20_000 + 10_000 * 48)
        );
        assert_eq!(dry_run_values(300), 4_096);
    }

    #[tokio::test]
    async fn a_pool_gives_shares_within_its_budget_and_refuses_past_it() {
        let pool = Pool::new(1 << 20);
        assert_eq!(
            pool.take(2 << 20, Duration::ZERO).await.err(),
            Some(NoShare::TooCostly)
        );
        let held = pool.take(768 << 10, Duration::ZERO).await.expect("fits");
        let started = std::time::Instant::now();
        assert_eq!(
            pool.take(512 << 10, Duration::from_millis(30)).await.err(),
            Some(NoShare::Busy)
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(
            pool.take(256 << 10, Duration::ZERO).await.is_ok(),
            "a smaller one fits"
        );
        drop(held);
        assert!(
            pool.take(1 << 20, Duration::ZERO).await.is_ok(),
            "given back"
        );
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

    /// A large share the pool cannot give yet does not hold up a smaller one it can (a FIFO
    /// queue did: one tenant's big review at the head kept everyone's small ones waiting).
    #[tokio::test]
    async fn a_waiting_large_share_never_holds_up_a_smaller_one() {
        let reviews = Arc::new(ParsedReviews::new(SMALL_BODY * 2, 1 << 20));
        let held = reviews
            .admit(&blank(600 << 10), Duration::ZERO)
            .await
            .expect("fits");
        let waiting = {
            let reviews = reviews.clone();
            tokio::spawn(async move {
                reviews
                    .admit(&blank(900 << 10), Duration::from_secs(5))
                    .await
                    .map(|_| ())
                    .is_ok()
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // 400 KiB are free: a 300 KiB review gets them at once, the 900 KiB one still waits.
        let started = std::time::Instant::now();
        let small = reviews
            .admit(&blank(300 << 10), Duration::from_secs(5))
            .await;
        assert!(small.is_ok());
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        drop((small, held));
        assert!(
            waiting.await.expect("task"),
            "the large one gets its share once there is room"
        );
    }

    /// Text is text: JSON inside a string (an annotation, a ConfigMap's data) costs its bytes,
    /// not an object per `{`.
    #[test]
    fn json_inside_a_string_costs_its_bytes() {
        let inner = r#"{\"a\":{\"b\":1},\"c\":[1,2,3]}"#.repeat(1000);
        let body = format!(r#"{{"annotation":"{inner}"}}"#).into_bytes();
        let cost = parsed_cost(&body);
        assert!(
            cost < body.len() + 2 * PER_OBJECT + 4 * PER_STRING,
            "{cost} for {}",
            body.len()
        );
        // The same structure outside a string costs an object per `{`.
        let outer = format!(
            "[{}]",
            r#"{"a":{"b":1},"c":[1,2,3]}"#.repeat(1000).replace("}{", "},{")
        );
        assert!(parsed_cost(outer.as_bytes()) > 2000 * PER_OBJECT);
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
    /// holds parsed (about 65 MB), not as its body. Under the old 160 MiB budget of large
    /// reviews two were decided at once (130 MB, half the chart's limit then); now one takes
    /// nearly the whole pool, and one naming it 120,000 times costs more than the pool: refused.
    #[tokio::test]
    async fn a_review_of_many_small_objects_weighs_what_it_holds_parsed() {
        let review = |names: usize| {
            let entries = vec![r#"{"name":"big"}"#; names].join(",");
            format!(r#"{{"spec":{{"imagePullSecrets":[{entries}]}}}}"#).into_bytes()
        };
        let body = review(100_000);
        assert!(body.len() > 1_500_000, "{}", body.len());
        let cost = parsed_cost(&body);
        assert!((60 << 20..LARGE_BUDGET).contains(&cost), "{cost}");
        let reviews = ParsedReviews::default();
        let first = reviews.admit(&body, Duration::from_millis(10)).await;
        assert!(first.is_ok());
        match reviews.admit(&body, Duration::from_millis(10)).await {
            Err(Refused::Busy { cost: c, .. }) => assert_eq!(c, cost),
            other => panic!("one at a time: {other:?}"),
        }
        drop(first);
        let bigger = review(120_000);
        match reviews.admit(&bigger, Duration::from_millis(10)).await {
            Err(Refused::TooCostly { bytes, budget, .. }) => {
                assert_eq!((bytes, budget), (bigger.len(), LARGE_BUDGET))
            }
            other => panic!("{other:?}"),
        }
        // The worst small body fits its pool.
        let worst_small = "{},".repeat(SMALL_BODY / 3).into_bytes();
        assert!(parsed_cost(&worst_small) <= SMALL_BUDGET);
        assert!(reviews.admit(&worst_small, Duration::ZERO).await.is_ok());
    }

    /// Ordinary Kubernetes JSON (longer keys and values) is estimated at under 25 times its
    /// body: the UPDATE of a 1.5 MiB object of it (the most the apiserver stores), in `object`
    /// and `oldObject`, is decided.
    #[tokio::test]
    async fn the_update_of_the_largest_stored_object_fits() {
        let container = r#"{"name":"app","image":"registry.example.com/team/app:v1.2.3","env":[{"name":"LOG_LEVEL","value":"info"}],"resources":{"limits":{"cpu":"500m","memory":"256Mi"}}}"#;
        let object = format!("[{}]", vec![container; 9_800].join(","));
        assert!(object.len() >= 3 << 19, "{}", object.len());
        let body = format!(r#"{{"object":{object},"oldObject":{object}}}"#).into_bytes();
        let times = parsed_cost(&body) / body.len();
        assert!((10..25).contains(&times), "{times}");
        let reviews = ParsedReviews::default();
        assert!(reviews.admit(&body, Duration::ZERO).await.is_ok());
    }
}
