//! Who may read the watch's `/inventory` (issue 25), the pure half: the bearer token of an
//! `Authorization` header, what each outcome of the cluster's TokenReview and
//! SubjectAccessReview means for the caller ([`Decision`]), and the token bucket that bounds
//! how many reviews callers can make the watch send ([`ReviewBudget`]).
//!
//! The inventory names every namespace's workloads, images and digests, so it is for callers
//! the cluster allows to `list pods` cluster-wide, the same data `kubectl get pods -A` would
//! give them. The reviews themselves are sent by the I/O edge,
//! [`controller::access`](super::controller::access); nothing here reads a clock (the caller
//! passes `now`) or knows of HTTP.

use std::time::Instant;

/// What the caller gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Authenticated and allowed to list pods cluster-wide: the inventory.
    Allowed,
    /// No token, or one the cluster does not authenticate.
    Unauthenticated,
    /// Authenticated, not allowed to list pods cluster-wide.
    Forbidden,
    /// Too many reviews asked for lately: try again shortly.
    Throttled,
    /// The cluster could not be asked (TokenReview or SubjectAccessReview failed).
    Unavailable,
}

/// The token of an `Authorization: Bearer <token>` header value (scheme case-insensitive);
/// `None` for any other value or an empty token.
pub fn bearer_token(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    Some(token.trim()).filter(|t| !t.is_empty())
}

/// A token bucket: at most `burst` reviews at once, refilled at `per_second`. Reviews are
/// only asked for on a miss of the decision cache, so callers already known never wait on it,
/// and a flood of unknown tokens costs the apiserver at most this rate.
#[derive(Debug, Clone)]
pub struct ReviewBudget {
    burst: f64,
    per_second: f64,
    tokens: f64,
    last: Option<Instant>,
}

// === impl ReviewBudget ===

impl ReviewBudget {
    pub fn new(burst: u32, per_second: u32) -> ReviewBudget {
        ReviewBudget {
            burst: f64::from(burst),
            per_second: f64::from(per_second),
            tokens: f64::from(burst),
            last: None,
        }
    }

    /// Takes one review from the bucket at `now`; `false` when it is empty.
    pub fn take(&mut self, now: Instant) -> bool {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn only_a_non_empty_bearer_token_is_a_token() {
        assert_eq!(bearer_token(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(Some("BEARER abc")), Some("abc"));
        assert_eq!(bearer_token(Some("Bearer ")), None);
        assert_eq!(bearer_token(Some("Bearer")), None);
        assert_eq!(bearer_token(Some("Basic dXNlcjpwYXNz")), None);
        assert_eq!(bearer_token(None), None);
    }

    #[test]
    fn the_budget_allows_a_burst_then_its_rate() {
        let start = Instant::now();
        let mut budget = ReviewBudget::new(3, 2);
        assert!((0..3).all(|_| budget.take(start)));
        assert!(!budget.take(start), "the burst is spent");
        assert!(!budget.take(start + Duration::from_millis(100)));
        // Two per second: half a second later, one more.
        assert!(budget.take(start + Duration::from_millis(600)));
        assert!(!budget.take(start + Duration::from_millis(600)));
        // Never more than the burst, however long idle.
        let later = start + Duration::from_secs(3600);
        assert_eq!((0..10).filter(|_| budget.take(later)).count(), 3);
    }
}
