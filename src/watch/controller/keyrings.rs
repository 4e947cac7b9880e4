//! A recheck's pull credentials, read in time: each group of Pods sharing a namespace, pull
//! Secret names and (when a plugin is handed tokens) ServiceAccount gets its keyring (Secrets,
//! ServiceAccount, token; plugins and helpers) within [`KEYRING_TIMEOUT`], or none: the cycle
//! then leaves that namespace as it is rather than judge it without its credentials.
//!
//! Never: decides what a missing keyring means (the cycle does).

use crate::registry::pull_secrets::{PodContext, PodKeyring, PullSecrets, SecretNames};
use crate::watch::recheck::KeyringRequest;

/// How long one group's pull credentials may take to read (plugins and helpers 3/4 of it):
/// an API server that holds reads open costs a cycle this much per namespace, not the
/// client's own read timeout (295 s) per read.
pub(super) const KEYRING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `request`'s keyring, or `None` when it was not read within [`KEYRING_TIMEOUT`].
pub(super) async fn read_in_time(
    secrets: &dyn PullSecrets,
    request: &KeyringRequest<'_>,
) -> Option<PodKeyring> {
    let asked_at = tokio::time::Instant::now();
    let context = PodContext {
        namespace: request.namespace,
        secrets: SecretNames::Listed(request.pull_secrets),
        images: &request.repositories,
        sources_deadline: Some(asked_at + KEYRING_TIMEOUT * 3 / 4),
        service_account: request.service_account,
    };
    let asked = secrets.keyring_for(&context);
    tokio::time::timeout_at(asked_at + KEYRING_TIMEOUT, asked)
        .await
        .ok()
}
