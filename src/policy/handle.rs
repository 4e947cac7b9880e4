//! The policy in force: one compiled policy, replaced whole when the file changes, of which
//! each request takes a snapshot (an `Arc`) and keeps it for the whole request.

use std::sync::{Arc, PoisonError, RwLock};

use super::CompiledPolicy;

/// The policy in force, replaced whole on reload; readers take a cheap snapshot per request.
#[derive(Debug, Clone, Default)]
pub struct PolicyHandle(Arc<RwLock<Arc<CompiledPolicy>>>);

// === impl PolicyHandle ===

impl PolicyHandle {
    pub fn new(policy: CompiledPolicy) -> PolicyHandle {
        PolicyHandle(Arc::new(RwLock::new(Arc::new(policy))))
    }

    pub fn current(&self) -> Arc<CompiledPolicy> {
        // A poisoned lock only means a writer panicked between two plain assignments.
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn replace(&self, policy: CompiledPolicy) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(policy);
    }
}
