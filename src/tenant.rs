//! The tenant a piece of work is done for: the namespace of the review being decided, or a dry
//! run's caller account (`dry-run:<user>`), set by the server around each review ([`scope`])
//! and carried into the registry lookups it leads. What is shared out by tenant reads it here:
//! credential program slots and remembered failures, and the reserves of registry read bytes
//! and pull Secret bytes ([`crate::shares`]). Unset (a background refresh, the CLI): one shared
//! tenant, the empty name.

use std::future::Future;

tokio::task_local! {
    static TENANT: String;
}

/// Runs `work` as `tenant`'s.
pub async fn scope<F: Future>(tenant: &str, work: F) -> F::Output {
    TENANT.scope(tenant.to_string(), work).await
}

/// The tenant of the running task (empty when none is set).
pub fn current() -> String {
    TENANT.try_with(Clone::clone).unwrap_or_default()
}
