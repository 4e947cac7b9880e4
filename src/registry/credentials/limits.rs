//! How many credential programs (provider plugins, docker credential helpers) run at once: a
//! review names as many distinct images as its author likes, and each may ask for a run, so
//! runs wait for a slot, at most [`RunLimits::per_program`] of one program and
//! [`RunLimits::total`] of all the programs of one source.
//!
//! Owns: [`RunLimits`] and its [`RunPermit`]. A run holds its permit for as long as its
//! process lives; a caller that stops waiting for a slot takes none. Never: starts, times or
//! kills a process (that is [`super::exec`]), or decides what a caller that found no slot
//! answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Runs of one program at once, by default.
pub const DEFAULT_PER_PROGRAM: usize = 4;
/// Runs of all the programs of one source at once, by default.
pub const DEFAULT_TOTAL: usize = 16;

/// Slots for program runs: per program (by name) and in total.
#[derive(Debug)]
pub struct RunLimits {
    per_program: usize,
    total: usize,
    all: Arc<Semaphore>,
    programs: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A run's slots, given back when dropped.
#[derive(Debug)]
pub struct RunPermit {
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
        }
    }

    pub fn per_program(&self) -> usize {
        self.per_program
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Waits (first come, first served) for a slot of `program` and then one of the total;
    /// `None` only if the limits were torn down. Dropping the future gives up the place in
    /// line.
    pub async fn acquire(&self, program: &str) -> Option<RunPermit> {
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
        let limits = RunLimits::new(2, 3);
        let a1 = limits.acquire("a").await;
        let a2 = limits.acquire("a").await;
        assert!(a1.is_some() && a2.is_some());
        let a3 = tokio::time::timeout(Duration::from_millis(50), limits.acquire("a")).await;
        assert!(a3.is_err(), "a third run of a waits");
        let b1 = limits.acquire("b").await;
        assert!(b1.is_some());
        assert_eq!(limits.available(), 0);
        let b2 = tokio::time::timeout(Duration::from_millis(50), limits.acquire("b")).await;
        assert!(b2.is_err(), "the total is reached");
        drop(a1);
        let b2 = tokio::time::timeout(Duration::from_millis(50), limits.acquire("b")).await;
        assert!(matches!(b2, Ok(Some(_))), "a slot came back");
        assert_eq!(RunLimits::new(0, 0).total(), 1);
    }
}
