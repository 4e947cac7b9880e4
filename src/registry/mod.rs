//! Registry: turning a tag into the digest it points at.
//!
//! Owns: the [`Resolver`] trait every handler talks to and the resolvers stacked behind it, outer
//! first: the [`cache`] (its single-flight lookups cancelled once nobody waits, and each
//! registry's breaker), the address [`guard`] (the one place host rules meet what is about to be
//! contacted, before the request), and the registry client ([`OciResolver`]: manifest HEAD,
//! bearer tokens, GET fallback) with the one outbound HTTP path all of its requests take (its
//! resolver judges the addresses actually connected to, its redirect policy keeps every hop
//! within the origin, its bodies are bounded); pull credentials, their fingerprints, and the
//! [`keyring`] and [`pull_secrets`] that choose them. The digest returned is always the digest
//! of the top-level manifest the tag names (for a multi-arch image, the index), never a platform
//! manifest or config digest.
//!
//! Never: parses objects or decides policy; handlers decide what to do with a failure. Never
//! sends a request through any HTTP client but the one `outbound` builds.

mod body;
mod breaker;
pub mod cache;
mod client;
mod config;
pub mod credentials;
mod dns;
pub mod docker_helpers;
mod exec;
mod get;
pub mod guard;
mod head;
pub mod identity_token;
pub mod keyring;
mod memo;
mod outbound;
pub mod provider;
pub mod pull_secrets;
mod redirect;
#[cfg(test)]
pub(crate) mod testing;
mod token;

use std::time::Duration;

use async_trait::async_trait;

use crate::policy::HostRefusal;
use crate::reference::{Digest, Reference};

pub use breaker::BreakerSettings;
pub use cache::{CacheConfig, CachingResolver, ReadOnlyCache, TagMove};
pub use client::OciResolver;
pub use config::{HostCaError, RegistryConfig};
pub use credentials::{Credential, Fingerprint};
pub use guard::RealmRefusal;
pub use memo::RunMemo;
pub use redirect::RedirectRefusal;
pub use token::Bearer;

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
        source: TransportError,
    },
    #[error("registry {registry} sent an invalid answer")]
    InvalidResponse {
        registry: String,
        #[source]
        source: AnswerError,
    },
    /// A manifest, token answer or error body over what pinhook reads of it.
    #[error("registry {registry} sent {what} larger than {}, pinhook's limit", body::size(*.limit))]
    TooLarge {
        registry: String,
        what: &'static str,
        limit: u64,
    },
    #[error("registry {registry} did not answer within {timeout:?}")]
    Timeout { registry: String, timeout: Duration },
    #[error("cannot build a registry client for {registry}")]
    ClientConfig {
        registry: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("no system CA bundle found (looked for {looked_at}); install ca-certificates or set SSL_CERT_FILE")]
    NoSystemRoots { looked_at: String },
    /// The registry failed with `last` a moment ago: pinhook waits before asking it again.
    #[error("registry {registry} is failing; not retrying for {retry_in:?}")]
    BackingOff {
        registry: String,
        retry_in: Duration,
        #[source]
        last: std::sync::Arc<RegistryError>,
    },
    /// The registry's breaker is open: it did not answer `silent` calls in a row.
    #[error("registry {registry} did not answer {silent} times in a row; pinhook asks it again in {retry_in:.1?}")]
    NotAnswering {
        registry: String,
        silent: u32,
        retry_in: Duration,
    },
    /// The address guard refused the registry host, or an address its name resolves to.
    #[error("{reason}")]
    Refused { host: String, reason: HostRefusal },
    /// The address guard refused the token realm the registry's challenge named.
    #[error(transparent)]
    RealmRefused(RealmRefusal),
    /// The registry or its token realm redirected a request where pinhook does not follow.
    #[error("registry {registry} {refusal}")]
    Redirected {
        registry: String,
        refusal: RedirectRefusal,
    },
    /// One failure shared by every admission that waited on the same registry call.
    #[error(transparent)]
    Shared(std::sync::Arc<RegistryError>),
    /// The task that called the registry panicked or was cancelled (a bug, never an answer).
    #[error("the registry call for {registry} did not finish")]
    TaskFailed {
        registry: String,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Why a request got no answer: the HTTP client's error, or the guard's name lookup.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error(transparent)]
    Http(reqwest::Error),
    #[error(transparent)]
    Lookup(std::io::Error),
}

/// Why an answer that arrived cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("the token endpoint's answer is not token JSON")]
    TokenJson(#[source] serde_json::Error),
    #[error("the manifest's digest is {computed}, not the {announced} its Docker-Content-Digest header announces")]
    DigestMismatch { announced: String, computed: String },
    #[error("its Docker-Content-Digest header {0:?} is not a digest")]
    DigestHeader(String),
    #[error("the manifest GET answered HTTP {0} instead of 200")]
    UnexpectedStatus(u16),
}

/// What a resolution found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub digest: Digest,
    /// Fingerprint of the credential that succeeded.
    pub credential: Fingerprint,
    pub source: ResolutionSource,
    /// The digest this tag pointed at before, when a refresh found that it moved.
    pub moved_from: Option<Digest>,
    /// How old a `Stale` answer is.
    pub age: Duration,
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

    /// The newest digest remembered for `reference` under these credentials (or anonymous),
    /// however old within the resolver's staleness limit, marked `Stale`: what an admission
    /// pins when its deadline passes before the registry answers. Only caches remember.
    fn last_known(
        &self,
        _reference: &Reference,
        _credentials: &[Credential],
    ) -> Option<Resolution> {
        None
    }
}

// === impl RegistryError ===

impl RegistryError {
    /// True when another credential might succeed where this one failed.
    pub fn is_auth_or_not_found(&self) -> bool {
        if let RegistryError::Shared(inner) = self {
            return inner.is_auth_or_not_found();
        }
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
            RegistryError::TooLarge { .. } => "too_large",
            RegistryError::Timeout { .. } => "timeout",
            RegistryError::ClientConfig { .. } | RegistryError::NoSystemRoots { .. } => "config",
            RegistryError::BackingOff { .. } => "backing_off",
            RegistryError::NotAnswering { .. } => "not_answering",
            RegistryError::Refused { .. }
            | RegistryError::RealmRefused(_)
            | RegistryError::Redirected { .. } => "refused",
            RegistryError::Shared(inner) => inner.kind(),
            RegistryError::TaskFailed { .. } => "internal",
        }
    }

    /// True when the registry could not give any answer (down, 5xx, timeout, rate limited):
    /// the cases where a last known digest may be served.
    pub fn is_unavailable(&self) -> bool {
        match self {
            RegistryError::Shared(inner) => inner.is_unavailable(),
            RegistryError::Unreachable { .. }
            | RegistryError::Timeout { .. }
            | RegistryError::RateLimited { .. }
            | RegistryError::BackingOff { .. }
            | RegistryError::NotAnswering { .. } => true,
            RegistryError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::error_chain;

    /// Each new failure reads as one line naming the registry, every cause once.
    #[test]
    fn outbound_failures_name_the_registry_on_one_line() {
        let not_json =
            serde_json::from_slice::<serde_json::Value>(b"<html>").expect_err("not JSON");
        let errors = [
            RegistryError::InvalidResponse {
                registry: "reg.example".into(),
                source: AnswerError::TokenJson(not_json),
            },
            RegistryError::Redirected {
                registry: "reg.example".into(),
                refusal: RedirectRefusal::TooMany {
                    from: "https://reg.example".into(),
                },
            },
            RegistryError::TooLarge {
                registry: "reg.example".into(),
                what: "a manifest",
                limit: 4 << 20,
            },
        ];
        let chains: Vec<String> = errors.iter().map(|e| error_chain(e)).collect();
        assert_eq!(
            chains,
            [
                "registry reg.example sent an invalid answer: the token endpoint's answer is not \
                 token JSON: expected value at line 1 column 1",
                "registry reg.example redirected more than 5 times in a row from \
                 https://reg.example",
                "registry reg.example sent a manifest larger than 4 MiB, pinhook's limit",
            ]
        );
    }
}
