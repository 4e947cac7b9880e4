//! The memory of the pull Secrets that reviews in flight hold. A Pod may name up to
//! [`MAX_PULL_SECRETS`](super::pull_secrets::MAX_PULL_SECRETS) Secrets of up to 1 MiB each:
//! every one was read into the review's keyring and held while it waited on registries, 128 MiB
//! for one review and as many of those as the apiserver sent at once (issue 44). Now a review
//! keeps what it reads only as far as three shares allow, taken without waiting as each Secret
//! is read: [`REVIEW_SECRET_BYTES`] for one review, [`NAMESPACE_SECRET_BYTES`] for the reviews
//! of one namespace in flight, [`SECRET_BYTES_IN_FLIGHT`] for all; with all of that held, a
//! Secret comes from a reserve ([`SECRET_RESERVE_BYTES`], at most
//! [`NAMESPACE_RESERVE_BYTES`] a namespace), so that the three or four namespaces that fill the
//! whole leave every other namespace room for its ordinary pull Secrets. A Secret past a share
//! is not used, with a warning (or, past the review's own share, a refusal) that says which.
//!
//! Owns: [`SecretBudget`] (on [`crate::shares`]) and the bytes of one review ([`Taken`]), given
//! back when it is dropped. Never: reads a Secret, or decides what a review without one answers.

use crate::shares::{self, Shares, Taken};

/// Bytes of pull Secrets (as parsed into a keyring) one review keeps: ordinary docker configs
/// are a few KiB, so some 60 of them.
pub const REVIEW_SECRET_BYTES: usize = 256 << 10;
/// Bytes the reviews of one namespace in flight keep in all: 16 reviews at their full share.
pub const NAMESPACE_SECRET_BYTES: usize = 4 << 20;
/// Bytes every review in flight keeps in all, the reserve apart (in the memory model of
/// docs/security.md with it).
pub const SECRET_BYTES_IN_FLIGHT: usize = 12 << 20;
/// Bytes kept for namespaces when [`SECRET_BYTES_IN_FLIGHT`] is held: a namespace's reviews
/// take at most [`NAMESPACE_RESERVE_BYTES`] of it, so sixteen namespaces would have to hold
/// their part at once to use it up.
pub const SECRET_RESERVE_BYTES: usize = 4 << 20;
/// What the reviews of one namespace take of the reserve: a review's whole share.
pub const NAMESPACE_RESERVE_BYTES: usize = REVIEW_SECRET_BYTES;

/// The shares of pull Secret bytes.
#[derive(Debug)]
pub struct SecretBudget {
    review: usize,
    shares: Shares,
}

/// Which share a Secret did not fit in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Short {
    #[error("this Pod's pull secrets pass {} KiB", .0 >> 10)]
    Review(usize),
    #[error("this namespace's reviews in flight hold {} KiB of pull secrets; retry", .0 >> 10)]
    Namespace(usize),
    #[error("reviews in flight hold {} KiB of pull secrets; retry", .0 >> 10)]
    All(usize),
}

// === impl SecretBudget ===

impl SecretBudget {
    /// Shares of `review`, `namespace` and `all` bytes.
    pub fn new(review: usize, namespace: usize, all: usize) -> SecretBudget {
        SecretBudget {
            review,
            shares: Shares::new(namespace, all),
        }
    }

    /// This budget with a reserve of `total` bytes, `per_namespace` of them for one
    /// namespace's reviews, taken from when all is held.
    pub fn with_reserve(mut self, per_namespace: usize, total: usize) -> SecretBudget {
        self.shares = self.shares.with_reserve(per_namespace, total);
        self
    }

    /// Takes `bytes` more for a review of `namespace` that holds `held`, or says which share
    /// they do not fit in (and takes nothing).
    pub fn take(&self, namespace: &str, bytes: usize, held: &mut Taken) -> Result<(), Short> {
        if held.bytes().saturating_add(bytes) > self.review {
            return Err(Short::Review(self.review));
        }
        self.shares
            .take(namespace, namespace, bytes, held)
            .map_err(|short| match short {
                shares::Short::Key(bytes) => Short::Namespace(bytes),
                shares::Short::Total(bytes) => Short::All(bytes),
            })
    }
}

impl Default for SecretBudget {
    fn default() -> Self {
        SecretBudget::new(
            REVIEW_SECRET_BYTES,
            NAMESPACE_SECRET_BYTES,
            SECRET_BYTES_IN_FLIGHT,
        )
        .with_reserve(NAMESPACE_RESERVE_BYTES, SECRET_RESERVE_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_a_namespace_and_all_reviews_each_keep_their_share() {
        let budget = SecretBudget::new(256 << 10, 1 << 20, 2 << 20);
        let mut one = Taken::default();
        budget.take("a", 200 << 10, &mut one).expect("fits");
        assert_eq!(
            budget.take("a", 100 << 10, &mut one),
            Err(Short::Review(256 << 10))
        );
        assert_eq!(
            one.bytes(),
            200 << 10,
            "nothing taken for a Secret that did not fit"
        );

        // Namespace a's reviews: 1 MiB in all.
        let mut more: Vec<Taken> = (0..3).map(|_| Taken::default()).collect();
        for held in &mut more {
            budget.take("a", 256 << 10, held).expect("within a's share");
        }
        let mut fifth = Taken::default();
        assert_eq!(
            budget.take("a", 256 << 10, &mut fifth),
            Err(Short::Namespace(1 << 20))
        );
        // Namespace b has its own share, up to what is left of all.
        let mut b: Vec<Taken> = (0..4).map(|_| Taken::default()).collect();
        let fitted = b
            .iter_mut()
            .map(|held| budget.take("b", 256 << 10, held))
            .filter(Result::is_ok)
            .count();
        assert_eq!(fitted, 4, "b's own 1 MiB, beside a's 968 KiB");
        let mut c = Taken::default();
        // 56 KiB of the 2 MiB are left.
        assert_eq!(
            budget.take("c", 256 << 10, &mut c),
            Err(Short::All(2 << 20))
        );

        // Dropped reviews give their bytes back.
        drop(more);
        budget
            .take("a", 256 << 10, &mut fifth)
            .expect("a's share is back");
        budget
            .take("c", 200 << 10, &mut c)
            .expect("all's share is back");
    }

    /// Issue 44: the namespaces that filled the whole (at the defaults three namespaces' 4 MiB
    /// of 12) left another namespace's review no room, and its private images resolved without
    /// their Secret. With the reserve, another namespace's review keeps its ordinary Secrets.
    #[test]
    fn namespaces_that_fill_the_whole_leave_the_others_the_reserve() {
        let budget = SecretBudget::default();
        let mut filling: Vec<Taken> = Vec::new();
        for namespace in ["a", "b", "c"] {
            for _ in 0..NAMESPACE_SECRET_BYTES / REVIEW_SECRET_BYTES {
                let mut held = Taken::default();
                budget
                    .take(namespace, REVIEW_SECRET_BYTES, &mut held)
                    .expect("within its share");
                filling.push(held);
            }
        }
        // The whole is held. a, holding its namespace's share, gets nothing more; d and e,
        // holding nothing, get their part of the reserve.
        let mut a = Taken::default();
        assert_eq!(
            budget.take("a", 4 << 10, &mut a),
            Err(Short::Namespace(NAMESPACE_SECRET_BYTES))
        );
        let mut d = Taken::default();
        budget
            .take("d", 200 << 10, &mut d)
            .expect("from the reserve");
        let mut d2 = Taken::default();
        assert_eq!(
            budget.take("d", 100 << 10, &mut d2),
            Err(Short::All((12 << 20) + (4 << 20)))
        );
        let mut e = Taken::default();
        budget
            .take("e", 8 << 10, &mut e)
            .expect("another namespace too");
    }
}
