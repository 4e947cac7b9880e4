//! Shares of a memory budget held by many callers at once, keyed by who asks (a namespace, a
//! registry host): each key holds at most its share, and all keys together at most the whole,
//! taken **without waiting** (a caller that finds no room is told at once which bound it met,
//! and holds nothing). What is taken is given back when the [`Taken`] is dropped.
//!
//! A budget may keep a **reserve** ([`Shares::with_reserve`]): when the whole is held, a
//! taking is made from the reserve instead, at most a small share of it per tenant
//! ([`crate::tenant`]). So a few tenants that fill the whole (a tenant's six slow registries,
//! four namespaces' Secrets) leave every other tenant room for ordinary takings: to shut one
//! out, the reserve too must be held, a small share by each of many tenants. Used where
//! what outside parties send is kept for a while: pull Secrets kept by reviews
//! (`registry::credentials::secret_budget`), bodies read from registries (`registry::http::body`).
//!
//! Owns: [`Shares`], [`Taken`], [`Short`]. Never: decides the bounds, or what a caller without
//! room does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Shares are counted in units of this many bytes (a semaphore counts permits in `u32`).
const UNIT: usize = 1024;
/// Keys kept before the unused ones are dropped.
const KEYS_KEPT: usize = 1024;

/// A budget of `total` bytes, at most `per_key` of them for one key.
#[derive(Debug)]
pub struct Shares {
    per_key: usize,
    total: usize,
    all: Arc<Semaphore>,
    keys: Mutex<HashMap<String, Weak<Semaphore>>>,
    /// Taken from, by tenant, when the whole is held.
    reserve: Option<Box<Shares>>,
}

/// Bytes taken from [`Shares`], given back when dropped; takings add up in one.
#[derive(Debug, Default)]
pub struct Taken {
    bytes: usize,
    permits: Vec<OwnedSemaphorePermit>,
}

/// The bound a taking met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// The key's share (its size in bytes) is held.
    Key(usize),
    /// The whole (its size in bytes) is held.
    Total(usize),
}

// === impl Shares ===

impl Shares {
    pub fn new(per_key: usize, total: usize) -> Shares {
        Shares {
            per_key,
            total,
            all: Arc::new(Semaphore::new(units(total))),
            keys: Mutex::new(HashMap::new()),
            reserve: None,
        }
    }

    /// These shares with a reserve of `total` bytes, at most `per_tenant` of them for one
    /// tenant, taken from when the whole is held.
    pub fn with_reserve(mut self, per_tenant: usize, total: usize) -> Shares {
        self.reserve = Some(Box::new(Shares::new(per_tenant, total)));
        self
    }

    /// Adds `bytes` for `key` to `taken`, or says which bound they do not fit (and takes
    /// nothing). With the whole held, they come from the reserve, as `tenant`'s.
    pub fn take(
        &self,
        key: &str,
        tenant: &str,
        bytes: usize,
        taken: &mut Taken,
    ) -> Result<(), Short> {
        let count = u32::try_from(units(bytes)).unwrap_or(u32::MAX);
        let own = self
            .share_of(key)
            .try_acquire_many_owned(count)
            .map_err(|_| Short::Key(self.per_key))?;
        match self.all.clone().try_acquire_many_owned(count) {
            Ok(all) => {
                taken.bytes += bytes;
                taken.permits.extend([own, all]);
                Ok(())
            }
            Err(_) => match &self.reserve {
                Some(reserve) => {
                    reserve
                        .take(tenant, tenant, bytes, taken)
                        .map_err(|_| Short::Total(self.total + reserve.total))?;
                    // Still counted in the key's share.
                    taken.permits.push(own);
                    Ok(())
                }
                None => Err(Short::Total(self.total)),
            },
        }
    }

    fn share_of(&self, key: &str) -> Arc<Semaphore> {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(share) = keys.get(key).and_then(Weak::upgrade) {
            return share;
        }
        if keys.len() >= KEYS_KEPT {
            keys.retain(|_, share| share.strong_count() > 0);
        }
        let share = Arc::new(Semaphore::new(units(self.per_key)));
        keys.insert(key.to_string(), Arc::downgrade(&share));
        share
    }

    /// Bytes free in all now (whole units).
    pub fn available(&self) -> usize {
        self.all.available_permits() * UNIT
    }
}

// === impl Taken ===

impl Taken {
    /// The bytes taken.
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
    fn a_key_and_all_keys_each_keep_their_bound_and_drops_give_back() {
        let shares = Shares::new(1 << 20, 2 << 20);
        let mut a: Vec<Taken> = (0..4).map(|_| Taken::default()).collect();
        for taken in &mut a {
            shares
                .take("a", "", 256 << 10, taken)
                .expect("within a's share");
        }
        let mut fifth = Taken::default();
        assert_eq!(
            shares.take("a", "", 1, &mut fifth),
            Err(Short::Key(1 << 20))
        );
        assert_eq!(fifth.bytes(), 0, "nothing taken");
        let mut b = Taken::default();
        shares
            .take("b", "", 1 << 20, &mut b)
            .expect("b's own share");
        let mut c = Taken::default();
        assert_eq!(shares.take("c", "", 1, &mut c), Err(Short::Total(2 << 20)));
        drop(a);
        shares
            .take("a", "", 256 << 10, &mut fifth)
            .expect("a's share is back");
        shares
            .take("c", "", 512 << 10, &mut c)
            .expect("all's share is back");
        assert_eq!(shares.available(), 256 << 10);
    }

    /// Issue 44: a few keys filling the whole shut every other tenant out. With a reserve,
    /// another tenant's ordinary taking is made from it, up to its small share; the tenant
    /// that filled the whole gets only its own small share of the reserve.
    #[test]
    fn with_the_whole_held_another_tenant_takes_from_the_reserve() {
        let shares = Shares::new(1 << 20, 2 << 20).with_reserve(64 << 10, 256 << 10);
        let mut attacker = Taken::default();
        shares
            .take("host-1", "team-a", 1 << 20, &mut attacker)
            .unwrap();
        shares
            .take("host-2", "team-a", 1 << 20, &mut attacker)
            .unwrap();
        // The whole is held: team-a gets its reserve share and no more.
        shares
            .take("host-3", "team-a", 64 << 10, &mut attacker)
            .unwrap();
        let mut more = Taken::default();
        assert_eq!(
            shares.take("host-3", "team-a", 1, &mut more),
            Err(Short::Total((2 << 20) + (256 << 10)))
        );
        // Another tenant's reads still find room, on any host.
        let mut victim = Taken::default();
        shares
            .take("host-4", "team-b", 48 << 10, &mut victim)
            .unwrap();
        assert_eq!(victim.bytes(), 48 << 10);
        // A key over its share gets no reserve either.
        let mut over = Taken::default();
        assert_eq!(
            shares.take("host-1", "team-c", 1, &mut over),
            Err(Short::Key(1 << 20))
        );
        drop(victim);
        drop(attacker);
        assert_eq!(shares.available(), 2 << 20);
    }
}
