//! The per-run memo a dry run resolves through: every answer remembered for as long as the run
//! lives, and concurrent lookups of one key joined into a single call, so a dry run over 500
//! objects with 50 images asks the registry 50 times.
//!
//! Never: records anything outside itself (no cache entries, tag moves or backoff): it lives for
//! one run and is dropped with it.

use std::sync::Arc;

use async_trait::async_trait;

use crate::reference::Reference;
use crate::registry::{Credential, Fingerprint, RegistryError, Resolution, Resolver};

/// A resolver that remembers every answer for as long as it lives, and makes concurrent
/// lookups of one key wait for a single call.
pub struct RunMemo {
    inner: Arc<dyn Resolver>,
    answers: moka::future::Cache<MemoKey, Result<Resolution, Arc<RegistryError>>>,
}

/// (tag reference, fingerprints of the caller's credentials in order).
type MemoKey = (String, Vec<Fingerprint>);

// === impl RunMemo ===

impl RunMemo {
    pub fn new(inner: Arc<dyn Resolver>) -> RunMemo {
        RunMemo {
            inner,
            answers: moka::future::Cache::builder().max_capacity(100_000).build(),
        }
    }
}

#[async_trait]
impl Resolver for RunMemo {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        let fingerprints = credentials.iter().map(Credential::fingerprint).collect();
        let key: MemoKey = (reference.manifest_reference(), fingerprints);
        let answer = self
            .answers
            .get_with(key, async {
                self.inner
                    .resolve(reference, credentials)
                    .await
                    .map_err(Arc::new)
            })
            .await;
        answer.map_err(RegistryError::Shared)
    }

    fn last_known(&self, reference: &Reference, credentials: &[Credential]) -> Option<Resolution> {
        self.inner.last_known(reference, credentials)
    }
}
