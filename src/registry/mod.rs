//! Registry: turning a tag into the digest it points at.
//!
//! Owns: the [`Resolver`] trait every handler talks to, the oci-client backed implementation
//! ([`OciResolver`]), pull credentials and their fingerprints. The digest returned is always the
//! digest of the top-level manifest the tag names (for a multi-arch image, the index), never a
//! platform manifest or config digest.
//!
//! Never: parses objects or decides policy; handlers decide what to do with a failure.

mod client;
pub mod credentials;

use std::time::Duration;

use async_trait::async_trait;

use crate::reference::{Digest, Reference};

pub use client::{OciResolver, RegistryConfig};
pub use credentials::{Credential, Fingerprint};

/// Why a tag could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("tag {tag} not found in {repository}")]
    NotFound { repository: String, tag: String },
    #[error("registry {registry} refused the credentials (unauthorized)")]
    Unauthorized { registry: String },
    #[error("registry {registry} denied access to {repository}")]
    Denied {
        registry: String,
        repository: String,
    },
    #[error("registry {registry} is rate limiting (429 Too Many Requests)")]
    RateLimited { registry: String },
    #[error("registry {registry} answered HTTP {status}: {message}")]
    Status {
        registry: String,
        status: u16,
        message: String,
    },
    #[error("cannot reach registry {registry}")]
    Unreachable {
        registry: String,
        #[source]
        source: oci_client::errors::OciDistributionError,
    },
    #[error("registry {registry} sent an invalid answer")]
    InvalidResponse {
        registry: String,
        #[source]
        source: oci_client::errors::OciDistributionError,
    },
    #[error("registry {registry} did not answer within {timeout:?}")]
    Timeout { registry: String, timeout: Duration },
    #[error("cannot build a registry client for {registry}")]
    ClientConfig {
        registry: String,
        #[source]
        source: oci_client::errors::OciDistributionError,
    },
    #[error("no system CA bundle found (looked for {looked_at}); install ca-certificates or set SSL_CERT_FILE")]
    NoSystemRoots { looked_at: String },
}

/// What a resolution found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub digest: Digest,
    /// Fingerprint of the credential that succeeded.
    pub credential: Fingerprint,
    pub source: ResolutionSource,
}

/// Where a digest came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolutionSource {
    Registry,
    Cache,
    /// A cached digest served because the registry could not be reached.
    Stale,
}

/// Resolves tags to digests. Implemented against a real registry ([`OciResolver`]), by the
/// cache, and by recorded resolvers in tests.
#[async_trait]
pub trait Resolver: Send + Sync {
    /// Resolves `reference`'s effective tag. `credentials` are the candidates in kubelet's order
    /// (most specific first); each is tried until one succeeds, then anonymous.
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError>;
}

// === impl RegistryError ===

impl RegistryError {
    /// True when another credential might succeed where this one failed.
    pub fn is_auth_or_not_found(&self) -> bool {
        matches!(
            self,
            RegistryError::NotFound { .. }
                | RegistryError::Unauthorized { .. }
                | RegistryError::Denied { .. }
        )
    }

    /// A fixed-vocabulary label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            RegistryError::NotFound { .. } => "not_found",
            RegistryError::Unauthorized { .. } => "unauthorized",
            RegistryError::Denied { .. } => "denied",
            RegistryError::RateLimited { .. } => "rate_limited",
            RegistryError::Status { .. } => "status",
            RegistryError::Unreachable { .. } => "unreachable",
            RegistryError::InvalidResponse { .. } => "invalid_response",
            RegistryError::Timeout { .. } => "timeout",
            RegistryError::ClientConfig { .. } | RegistryError::NoSystemRoots { .. } => "config",
        }
    }
}
