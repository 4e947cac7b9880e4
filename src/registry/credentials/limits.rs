//! How many credential programs (provider plugins, docker credential helpers) run at once: a
//! review names as many distinct images as its author likes, and each may ask for a run, so
//! runs wait for a slot, at most [`RunLimits::per_program`] of one program and
//! [`RunLimits::total`] of all the programs of one source, and at most half a program's slots
//! for one tenant (the namespace whose review asked, [`crate::tenant`]): a tenant naming a hundred
//! distinct matching hosts waits behind its own runs, and another tenant's private image still
//! finds a slot (issue 44; before, slots went first come, first served, and the other tenant's
//! images resolved without the node's credentials and were denied).
//!
//! Owns: [`RunLimits`] and its [`RunPermit`]. A run holds its permit for as long as its
//! process lives; a caller that stops waiting for a slot takes none. Never: starts, times or
//! kills a process (that is [`super::exec`]), or decides what a caller that found no slot
//! answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Runs of one program at once, by default.
pub const DEFAULT_PER_PROGRAM: usize = 4;
/// Runs of all the programs of one source at once, by default.
pub const DEFAULT_TOTAL: usize = 16;
/// Tenants' slot counts kept before the unused ones are dropped.
const TENANTS_KEPT: usize = 1024;

/// Slots for program runs: per program (by name) and in total.
#[derive(Debug)]
pub struct RunLimits {
    per_program: usize,
    total: usize,
    all: Arc<Semaphore>,
    programs: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Per (program, tenant): dropped with its last holder or waiter.
    tenants: Mutex<HashMap<(String, String), Weak<Semaphore>>>,
}

/// A run's slots, given back when dropped.
#[derive(Debug)]
pub struct RunPermit {
    _tenant: OwnedSemaphorePermit,
    _program: OwnedSemaphorePermit,
    _total: OwnedSemaphorePermit,
}

// === impl RunLimits ===

impl RunLimits {
    /// At most `per_program` runs of one program and `total` in all (each at least 1).
    pub fn new(per_program: usize, total: usize) -> RunLimits {
        let total = total.max(1);
        RunLimits {
            per_program: per_program.max(1),
            total,
            all: Arc::new(Semaphore::new(total)),
            programs: Mutex::new(HashMap::new()),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    pub fn per_program(&self) -> usize {
        self.per_program
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Runs of one program one tenant may hold at once: half the program's, at least one.
    pub fn per_tenant(&self) -> usize {
        (self.per_program / 2).max(1)
    }

    /// Waits for a slot of `tenant` for `program`, then one of `program`, then one of the
    /// total (first come, first served at each); `None` only if the limits were torn down.
    /// Dropping the future gives up the place in line.
    pub async fn acquire(&self, program: &str, tenant: &str) -> Option<RunPermit> {
        let mine = {
            let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (program.to_string(), tenant.to_string());
            match tenants.get(&key).and_then(Weak::upgrade) {
                Some(semaphore) => semaphore,
                None => {
                    if tenants.len() >= TENANTS_KEPT {
                        tenants.retain(|_, slots| slots.strong_count() > 0);
                    }
                    let semaphore = Arc::new(Semaphore::new(self.per_tenant()));
                    tenants.insert(key, Arc::downgrade(&semaphore));
                    semaphore
                }
            }
        };
        // The tenant's slot first: its runs wait behind each other, holding nothing another
        // tenant could use.
        let tenant = mine.acquire_owned().await.ok()?;
        let own = {
            let mut programs = self.programs.lock().unwrap_or_else(PoisonError::into_inner);
            // Program names come from configuration files, never from a review: bounded.
            programs
                .entry(program.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_program)))
                .clone()
        };
        // The program's slot first: a run waiting for its own program holds no total slot
        // another program could use.
        let program = own.acquire_owned().await.ok()?;
        let total = self.all.clone().acquire_owned().await.ok()?;
        Some(RunPermit {
            _tenant: tenant,
            _program: program,
            _total: total,
        })
    }

    /// Slots of all programs free now (for tests and metrics).
    pub fn available(&self) -> usize {
        self.all.available_permits()
    }
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits::new(DEFAULT_PER_PROGRAM, DEFAULT_TOTAL)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_program_gets_at_most_its_slots_and_all_programs_at_most_the_total() {
        // (each run for a tenant of its own: a tenant holds half a program's slots)
        let limits = RunLimits::new(2, 3);
        let a1 = limits.acquire("a", "t1").await;
        let a2 = limits.acquire("a", "t2").await;
        assert!(a1.is_some() && a2.is_some());
        let a3 = tokio::time::timeout(Duration::from_millis(50), limits.acquire("a", "t3")).await;
        assert!(a3.is_err(), "a third run of a waits");
        let b1 = limits.acquire("b", "t1").await;
        assert!(b1.is_some());
        assert_eq!(limits.available(), 0);
        let b2 = tokio::time::timeout(Duration::from_millis(50), limits.acquire("b", "t2")).await;
        assert!(b2.is_err(), "the total is reached");
        drop(a1);
        let b2 = tokio::time::timeout(Duration::from_millis(50), limits.acquire("b", "t2")).await;
        assert!(matches!(b2, Ok(Some(_))), "a slot came back");
        assert_eq!(RunLimits::new(0, 0).total(), 1);
    }

    /// Issue 44: one tenant naming many matching hosts took every slot of the plugin, and
    /// another tenant's run waited behind all of its runs. Now a tenant holds at most half a
    /// program's slots and waits behind its own runs only.
    #[tokio::test]
    async fn one_tenant_waits_behind_its_own_runs_and_leaves_room_for_another() {
        let limits = Arc::new(RunLimits::new(4, 16));
        let a1 = limits.acquire("ecr", "team-a").await;
        let a2 = limits.acquire("ecr", "team-a").await;
        assert!(a1.is_some() && a2.is_some());
        // A's next hundred runs wait on A's own slots.
        let waiting: Vec<_> = (0..100)
            .map(|_| {
                let limits = limits.clone();
                tokio::spawn(async move { limits.acquire("ecr", "team-a").await.is_some() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let b =
            tokio::time::timeout(Duration::from_millis(50), limits.acquire("ecr", "team-b")).await;
        assert!(
            matches!(b, Ok(Some(_))),
            "team-b's run found a slot at once"
        );
        drop((a1, a2, b));
        for task in waiting {
            assert!(task.await.unwrap(), "team-a's runs each get a slot in turn");
        }
        // Unused tenants' counts go.
        assert!(limits
            .tenants
            .lock()
            .unwrap()
            .values()
            .all(|slots| slots.strong_count() == 0));
    }
}
