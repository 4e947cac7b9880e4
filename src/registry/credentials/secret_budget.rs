//! The memory of the pull Secrets that reviews in flight hold. A Pod may name up to
//! [`MAX_PULL_SECRETS`](super::pull_secrets::MAX_PULL_SECRETS) Secrets of up to 1 MiB each:
//! every one was read into the review's keyring and held while it waited on registries, 128 MiB
//! for one review and as many of those as the apiserver sent at once (issue 44). Now a review
//! keeps what it reads only as far as three shares allow, taken without waiting as each Secret
//! is read: [`REVIEW_SECRET_BYTES`] for one review, [`NAMESPACE_SECRET_BYTES`] for the reviews
//! of one namespace in flight, [`SECRET_BYTES_IN_FLIGHT`] for all. A Secret past a share is not
//! used, with a warning that says which share: that tenant's private images then resolve
//! without it, and another namespace's reviews keep their own share.
//!
//! Owns: [`SecretBudget`] and the [`Held`] bytes of one review, given back when it is dropped.
//! Never: reads a Secret, or decides what a review without one answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of pull Secrets (as parsed into a keyring) one review keeps: ordinary docker configs
/// are a few KiB, so some 60 of them.
pub const REVIEW_SECRET_BYTES: usize = 256 << 10;
/// Bytes the reviews of one namespace in flight keep in all: 16 reviews at their full share.
pub const NAMESPACE_SECRET_BYTES: usize = 4 << 20;
/// Bytes every review in flight keeps in all (in the memory model of docs/security.md).
pub const SECRET_BYTES_IN_FLIGHT: usize = 16 << 20;
/// Shares are counted in units of this many bytes (a semaphore counts in `u32`).
const UNIT: usize = 1024;
/// Namespaces' shares kept before the unused ones are dropped.
const NAMESPACES_KEPT: usize = 1024;

/// The shares of pull Secret bytes.
#[derive(Debug)]
pub struct SecretBudget {
    review: usize,
    namespace: usize,
    all_bytes: usize,
    all: Arc<Semaphore>,
    namespaces: Mutex<HashMap<String, Weak<Semaphore>>>,
}

/// What one review keeps of the shares.
#[derive(Debug, Default)]
pub struct Held {
    bytes: usize,
    permits: Vec<OwnedSemaphorePermit>,
}

/// Which share a Secret did not fit in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Short {
    #[error("this Pod's pull secrets pass {} KiB", .0 / UNIT)]
    Review(usize),
    #[error("this namespace's reviews in flight hold {} KiB of pull secrets; retry", .0 / UNIT)]
    Namespace(usize),
    #[error("reviews in flight hold {} KiB of pull secrets; retry", .0 / UNIT)]
    All(usize),
}

// === impl SecretBudget ===

impl SecretBudget {
    /// Shares of `review`, `namespace` and `all` bytes.
    pub fn new(review: usize, namespace: usize, all: usize) -> SecretBudget {
        SecretBudget {
            review,
            namespace,
            all_bytes: all,
            all: Arc::new(Semaphore::new(units(all))),
            namespaces: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `bytes` more for a review of `namespace` that holds `held`, or says which share
    /// they do not fit in (and takes nothing).
    pub fn take(&self, namespace: &str, bytes: usize, held: &mut Held) -> Result<(), Short> {
        if held.bytes.saturating_add(bytes) > self.review {
            return Err(Short::Review(self.review));
        }
        let count = u32::try_from(units(bytes)).unwrap_or(u32::MAX);
        let mine = self.namespace_share(namespace);
        let own = mine
            .try_acquire_many_owned(count)
            .map_err(|_| Short::Namespace(self.namespace))?;
        let all = self
            .all
            .clone()
            .try_acquire_many_owned(count)
            .map_err(|_| Short::All(self.all_bytes))?;
        held.bytes += bytes;
        held.permits.extend([own, all]);
        Ok(())
    }

    fn namespace_share(&self, namespace: &str) -> Arc<Semaphore> {
        let mut namespaces = self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(share) = namespaces.get(namespace).and_then(Weak::upgrade) {
            return share;
        }
        if namespaces.len() >= NAMESPACES_KEPT {
            namespaces.retain(|_, share| share.strong_count() > 0);
        }
        let share = Arc::new(Semaphore::new(units(self.namespace)));
        namespaces.insert(namespace.to_string(), Arc::downgrade(&share));
        share
    }
}

impl Default for SecretBudget {
    fn default() -> Self {
        SecretBudget::new(
            REVIEW_SECRET_BYTES,
            NAMESPACE_SECRET_BYTES,
            SECRET_BYTES_IN_FLIGHT,
        )
    }
}

// === impl Held ===

impl Held {
    /// The bytes this review keeps.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// `bytes` in whole units, rounded up, at least one.
fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT).clamp(1, Semaphore::MAX_PERMITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_a_namespace_and_all_reviews_each_keep_their_share() {
        let budget = SecretBudget::new(256 << 10, 1 << 20, 2 << 20);
        let mut one = Held::default();
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
        let mut more: Vec<Held> = (0..3).map(|_| Held::default()).collect();
        for held in &mut more {
            budget.take("a", 256 << 10, held).expect("within a's share");
        }
        let mut fifth = Held::default();
        assert_eq!(
            budget.take("a", 256 << 10, &mut fifth),
            Err(Short::Namespace(1 << 20))
        );
        // Namespace b has its own share, up to what is left of all.
        let mut b: Vec<Held> = (0..4).map(|_| Held::default()).collect();
        let fitted = b
            .iter_mut()
            .map(|held| budget.take("b", 256 << 10, held))
            .filter(Result::is_ok)
            .count();
        assert_eq!(fitted, 4, "b's own 1 MiB, beside a's 968 KiB");
        let mut c = Held::default();
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
}
