//! The stand-in registry of the in-process examples (`cache_scale`, `warm_path`): it answers
//! every tag at once, so only pinhook's own code is measured. Included with `#[path]`; not an
//! example itself.

use std::time::Duration;

use async_trait::async_trait;
use pinhook::reference::{Digest, Reference};
use pinhook::registry::{Credential, RegistryError, Resolution, ResolutionSource, Resolver};

/// A registry that answers every tag at once with a digest of its name, as the first
/// credential offered (anonymous when none is).
pub struct InstantRegistry;

#[async_trait]
impl Resolver for InstantRegistry {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        let credential = credentials.first().map_or_else(
            || Credential::Anonymous.fingerprint(),
            Credential::fingerprint,
        );
        Ok(Resolution {
            digest: Digest::sha256_of(reference.tag_reference().as_bytes()),
            credential,
            source: ResolutionSource::Registry,
            moved_from: None,
            age: Duration::ZERO,
            origin: None,
            verified: None,
        })
    }
}
