//! Resolution through the mirrors a policy names (`registries.resolveThrough`, issue 28).
//!
//! A [`RoutedCall`] is one source reference with its mirrors, each already rewritten and given
//! its credentials: the Pod's (pull secrets, then the node's) matched against the *mirror's*
//! host, as kubelet matches them when the runtime pulls from a mirror, then the policy's
//! per-mirror credentials file ([`MirrorKeyrings`]), then anonymous. [`resolve_routed`] asks each
//! mirror in order through the same resolver stack as any registry (cache, address guard,
//! limits, backoff, breaker): each mirror is a registry of its own, so its answers are cached
//! under the mirror's repository and credentials and never alias the source's. The first fresh
//! answer wins; a stale one (served from the cache while its mirror is down) is kept only if no
//! later mirror answers fresh. The answer records its [`Origin`]. With `verifySource` the source
//! is asked at the same time, within its own deadline, and a mirror never outvotes it (issue 43):
//! a different digest is [`RegistryError::MirrorDisagrees`], an answer that the tag or manifest
//! does not exist (404, 403, `MANIFEST_UNKNOWN`) is [`RegistryError::SourceRefutes`]; no answer
//! leaves the mirror's digest unverified (the disconnected case), unless `verifySource:
//! required`, where it is [`RegistryError::SourceUnconfirmed`] and no last known digest stands
//! in.
//!
//!
//! The signatures of a routed image's digest are asked the same way ([`verify_routed`]): at its
//! mirrors in order, with their credentials, and at the source too under `verifySource`; an
//! air-gapped cluster verifies what its mirrors hold. A signature is of a digest and checked
//! cryptographically, so where it was fetched decides nothing but whether it was found.
//!
//! Never: decides policy (which references are routed is `policy::resolve_through`'s), and never
//! falls back to the source's own answer when every mirror fails: the mirrors are the policy's
//! choice of authority.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::keyring::Keyring;
use super::verified::SignatureVerifier;
use super::{Credential, RegistryError, Resolution, ResolutionSource, Resolver};
use crate::policy::{Route, VerifySource};
use crate::reference::Digest;
use crate::reference::Reference;
use crate::signatures::{Trust, Verdict};

pub use super::resolver::{Origin, SourceCheck};

/// One routed resolution, credentials chosen.
#[derive(Debug, Clone)]
pub struct RoutedCall {
    pub source: Reference,
    pub source_credentials: Vec<Credential>,
    /// Each mirror's location (the origin of its answers), reference and credentials, in order.
    pub mirrors: Vec<MirrorCall>,
    pub verify_source: VerifySource,
}

/// One mirror of a [`RoutedCall`].
#[derive(Debug, Clone)]
pub struct MirrorCall {
    pub location: String,
    pub reference: Reference,
    pub credentials: Vec<Credential>,
}

/// The policy's per-mirror credentials files, read when first needed and again after
/// [`MIRROR_CREDENTIALS_TTL`] (a mounted Secret changes in place).
#[derive(Clone)]
pub struct MirrorKeyrings {
    files: moka::sync::Cache<PathBuf, Arc<Result<Keyring, MirrorCredentialsError>>>,
}

/// Why a mirror's credentials file cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MirrorCredentialsError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path} is not a docker config.json: {reason}")]
    NotDockerConfig { path: String, reason: String },
}

/// How long a mirror credentials file is trusted before it is read again.
pub const MIRROR_CREDENTIALS_TTL: Duration = Duration::from_secs(30);

// === impl RoutedCall ===

impl RoutedCall {
    /// The call for `source` along `route`: `pod` is the Pod's keyring (its pull secrets, then the
    /// node's credentials); each mirror gets what `pod` gives the mirror's reference, then what
    /// its credentials file gives it. Warnings name a credentials file that cannot be read.
    pub fn new(
        source: &Reference,
        route: &Route,
        pod: &Keyring,
        files: &MirrorKeyrings,
        warnings: &mut Vec<String>,
    ) -> RoutedCall {
        let mirrors = route
            .mirrors
            .iter()
            .map(|mirror| {
                let mut credentials = pod.lookup(&mirror.reference);
                if let Some(path) = &mirror.credentials {
                    match files.keyring(path) {
                        Ok(keyring) => {
                            for credential in keyring.lookup(&mirror.reference) {
                                if !credentials.contains(&credential) {
                                    credentials.push(credential);
                                }
                            }
                        }
                        Err(problem) => warnings.push(format!(
                            "pinhook: mirror {} credentials unusable: {problem}",
                            mirror.location
                        )),
                    }
                }
                MirrorCall {
                    location: mirror.location.clone(),
                    reference: mirror.reference.clone(),
                    credentials,
                }
            })
            .collect();
        RoutedCall {
            source: source.clone(),
            source_credentials: pod.lookup(source),
            mirrors,
            verify_source: route.verify_source,
        }
    }

    /// Every credential fingerprint the call may use, in order: what keys it among others.
    pub fn fingerprints(&self) -> Vec<super::Fingerprint> {
        self.mirrors
            .iter()
            .flat_map(|m| m.credentials.iter())
            .chain(
                self.verify_source
                    .asks_source()
                    .then_some(&self.source_credentials)
                    .into_iter()
                    .flatten(),
            )
            .map(Credential::fingerprint)
            .collect()
    }
}

// === impl MirrorKeyrings ===

impl Default for MirrorKeyrings {
    fn default() -> Self {
        MirrorKeyrings {
            files: moka::sync::Cache::builder()
                .max_capacity(1024)
                .time_to_live(MIRROR_CREDENTIALS_TTL)
                .build(),
        }
    }
}

impl MirrorKeyrings {
    pub fn new() -> MirrorKeyrings {
        MirrorKeyrings::default()
    }

    /// The keyring of the docker `config.json` at `path`, or why it cannot be used. A failure
    /// is remembered as long as a success, so a broken file is read once per TTL, not per image.
    pub fn keyring(&self, path: &Path) -> Result<Keyring, MirrorCredentialsError> {
        let read = self
            .files
            .get_with_by_ref(path, || Arc::new(read_keyring(path)));
        (*read).clone()
    }
}

fn read_keyring(path: &Path) -> Result<Keyring, MirrorCredentialsError> {
    let shown = || path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| MirrorCredentialsError::Read {
        path: shown(),
        reason: e.to_string(),
    })?;
    Keyring::from_docker_config_json(&bytes).map_err(|e| MirrorCredentialsError::NotDockerConfig {
        path: shown(),
        reason: e.to_string(),
    })
}

/// Resolves `call`'s tag at its mirrors, in order (see the module docs); with `verifySource`,
/// asks the source too, giving it until `verify_deadline` (`None`: as long as it takes).
pub async fn resolve_routed(
    resolver: &dyn Resolver,
    call: &RoutedCall,
    verify_deadline: Option<Instant>,
) -> Result<Resolution, RegistryError> {
    let verify = async {
        if !call.verify_source.asks_source() {
            return None;
        }
        let ask = resolver.resolve(&call.source, &call.source_credentials);
        Some(match verify_deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, ask).await.ok(),
            None => Some(ask.await),
        })
    };
    let (mirrored, verified) = tokio::join!(at_mirrors(resolver, call), verify);
    let mut resolution = mirrored?;
    let image = || call.source.tag_reference();
    let mirror = || {
        resolution
            .origin
            .as_ref()
            .map(|o| o.mirror.clone())
            .unwrap_or_default()
    };
    let check = match verified {
        None => SourceCheck::NotAsked,
        Some(Some(Ok(source))) if source.source != ResolutionSource::Stale => {
            if source.digest != resolution.digest {
                return Err(RegistryError::MirrorDisagrees {
                    image: image(),
                    mirror: mirror(),
                    mirror_digest: resolution.digest.to_string(),
                    source_digest: source.digest.to_string(),
                });
            }
            SourceCheck::Agreed
        }
        // The source answered that there is no such tag: the mirror invented it, or kept one
        // the source deleted. Either way the mirror does not outvote its source.
        Some(Some(Err(error))) if error.says_absent() => {
            return Err(RegistryError::SourceRefutes {
                image: image(),
                mirror: mirror(),
                mirror_digest: resolution.digest.to_string(),
                source_says: crate::error::error_chain(&error),
            });
        }
        // No answer, another error, or only a cached one: the source could not confirm.
        Some(unanswered) => {
            if call.verify_source == VerifySource::Required {
                let why = match unanswered {
                    None => "it did not answer in time".to_string(),
                    Some(Err(error)) => crate::error::error_chain(&error),
                    Some(Ok(_)) => "only a cached answer of it was at hand".to_string(),
                };
                return Err(RegistryError::SourceUnconfirmed {
                    image: image(),
                    mirror: mirror(),
                    mirror_digest: resolution.digest.to_string(),
                    why,
                });
            }
            SourceCheck::Unanswered
        }
    };
    if let Some(origin) = resolution.origin.as_mut() {
        origin.source_check = check;
    }
    Ok(resolution)
}

/// The verdict on the signatures of `digest` for `call` under `trust`, asked at its mirrors in
/// order, then at the source when `verifySource` asks it: the first `verified` wins; else the
/// first verdict any of them gave (a mirror that holds no signature says so); else, when every
/// one failed, the first error.
pub async fn verify_routed(
    verifier: &dyn SignatureVerifier,
    call: &RoutedCall,
    digest: &Digest,
    trust: &Arc<Trust>,
) -> Result<Verdict, RegistryError> {
    let source = call
        .verify_source
        .asks_source()
        .then_some((&call.source, &call.source_credentials));
    let asks = call
        .mirrors
        .iter()
        .map(|mirror| (&mirror.reference, &mirror.credentials))
        .chain(source);
    let (mut verdict, mut error) = (None, None);
    for (reference, credentials) in asks {
        match verifier.verify(reference, digest, credentials, trust).await {
            Ok(found @ Verdict::Verified { .. }) => return Ok(found),
            Ok(found) => {
                verdict.get_or_insert(found);
            }
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    match (verdict, error) {
        (Some(verdict), _) => Ok(verdict),
        (None, Some(error)) => Err(error),
        (None, None) => Ok(Verdict::NoSignature),
    }
}

/// The newest digest any mirror's cache remembers for `call`, first mirror first; none under
/// `verifySource: required`, where only a digest the source confirmed is pinned.
pub fn last_known_routed(resolver: &dyn Resolver, call: &RoutedCall) -> Option<Resolution> {
    if call.verify_source == VerifySource::Required {
        return None;
    }
    call.mirrors.iter().find_map(|mirror| {
        let mut resolution = resolver.last_known(&mirror.reference, &mirror.credentials)?;
        resolution.origin = Some(origin(mirror));
        // What the mirror's own entry kept was verified under the entries covering the
        // mirror's repository, not the source's.
        resolution.verified = None;
        Some(resolution)
    })
}

async fn at_mirrors(
    resolver: &dyn Resolver,
    call: &RoutedCall,
) -> Result<Resolution, RegistryError> {
    let mut stale = None;
    let mut failures = Vec::new();
    for mirror in &call.mirrors {
        match resolver
            .resolve(&mirror.reference, &mirror.credentials)
            .await
        {
            Ok(mut resolution) => {
                resolution.origin = Some(origin(mirror));
                // (a verification kept by the mirror's entry is of the mirror's repository)
                resolution.verified = None;
                if resolution.source != ResolutionSource::Stale {
                    return Ok(resolution);
                }
                stale.get_or_insert(resolution);
            }
            Err(error) => failures.push(format!(
                "{}: {}",
                mirror.location,
                crate::error::error_chain(&error)
            )),
        }
    }
    stale.ok_or_else(|| RegistryError::MirrorsFailed {
        image: call.source.tag_reference(),
        failures: failures.join("; "),
    })
}

fn origin(mirror: &MirrorCall) -> Origin {
    Origin {
        mirror: mirror.location.clone(),
        source_check: SourceCheck::NotAsked,
    }
}

#[cfg(test)]
#[path = "mirrored_tests.rs"]
mod tests;
