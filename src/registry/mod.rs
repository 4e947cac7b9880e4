//! Registry: turning a tag into the digest it points at.
//!
//! Owns: the [`Resolver`] trait every handler talks to and the resolvers stacked behind it, outer
//! first: the [`cache`] (its single-flight lookups cancelled once nobody waits, and each
//! registry's breaker), the address [`guard`] (the one place host rules meet what is about to be
//! contacted, before the request), the [`identity_token`] exchange (`IdentityTokens`), and the
//! registry client ([`OciResolver`]: manifest HEAD,
//! bearer tokens, GET fallback) with the one outbound HTTP path all of its requests take (its
//! resolver judges the addresses actually connected to, its redirect policy keeps every hop
//! within the origin, its bodies are bounded); pull credentials, their fingerprints, and the
//! [`keyring`] and [`pull_secrets`] that choose them. The digest returned is always the digest
//! of the top-level manifest the tag names (for a multi-arch image, the index), never a platform
//! manifest or config digest.
//!
//! The folders follow the layers, outer first, each importing only those below it: [`stack`]
//! (builds the rest, once), [`cache`] (with its breaker and the dry run's memo), [`guard`],
//! [`identity_token`], [`client`] (manifest HEAD and GET, bearer tokens), [`http`] (the one
//! outbound path: guarded name lookup, token realms, redirect policy, bounded bodies); on the
//! ground floor, [`credentials`] (the keyring, credential provider plugins, docker credential
//! helpers and pull secrets, with no outbound HTTP of their own), the errors every layer
//! returns (refusals included) and [`config`]; beside the stack, [`mirrored`] (a tag resolved
//! at the mirrors the policy names, each through this same stack, its answer's origin
//! recorded). This file only declares and re-exports.
//!
//! Never: decides policy; handlers decide what to do with a failure. Never sends a request
//! through any HTTP client but the one [`http`] builds. The only objects read are the ones
//! credentials come from (Secrets, ServiceAccounts, the stored Pod of an `EphemeralContainers`
//! request, and a PodSpec's `imagePullSecrets` and `serviceAccountName`).

// The resolver layers, outer first.
pub mod cache;
mod client;
pub mod guard;
mod http;
pub mod identity_token;

// Beside them: credentials, configuration, and what every layer shares.
mod config;
pub mod credentials;
mod error;
pub mod mirrored;
mod resolver;
pub mod stack;
#[cfg(test)]
pub(crate) mod testing;
pub mod verified;

pub use cache::{BreakerSettings, CacheConfig, CachingResolver, ReadOnlyCache, RunMemo, TagMove};
pub use client::signatures::{Enough, FetchedLayer, FetchedSignatures};
pub use client::token::TOKEN_CACHE_BYTES;
pub use client::{Bearer, OciResolver};
pub use config::{HostCaError, RegistryConfig};
pub use credentials::{docker_helpers, keyring, provider, pull_secrets, Credential, Fingerprint};
pub use error::{AnswerError, RealmRefusal, RedirectRefusal, RegistryError, TransportError};
pub use http::body::{READ_BYTES_IN_FLIGHT, READ_RESERVE_BYTES};
pub use http::outbound::{IDLE_CONNECTION_BYTES, IDLE_PER_HOST, POOLED_HOSTS};
pub use resolver::{Origin, Resolution, ResolutionSource, Resolver, SourceCheck};
pub use verified::{
    SignatureSource, SignatureVerifier, Signers, VerifiedDigest, VerifiedSignatures,
};
