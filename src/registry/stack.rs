//! The resolver stack, built in this one place for `pinhook serve`, `pinhook watch` and
//! `pinhook check`, outer layer first: the cache (single flight, refresh-ahead, breaker), the
//! address guard, the identity-token exchange, the client; beside the cache, the signature
//! verdicts ([`VerifiedSignatures`]) over the same guard, exchange and client. What differs between them is an
//! option, not a copy: [`Guard::Off`] for `check`, whose manifests are the user's own.
//!
//! Owns: [`build`], [`Stack`] and its policy reload ([`Stack::reload`]: the client takes the
//! policy file's new `registries.hosts`). Never: decides credentials (the caller's keyring) or
//! reads the policy file (the policy watcher does).

use std::sync::Arc;

use super::guard::AddressGuard;
use super::identity_token::IdentityTokens;
use super::{
    CacheConfig, CachingResolver, HostCaError, OciResolver, RegistryConfig, RegistryError,
    Resolver, VerifiedSignatures,
};
use crate::metrics::Metrics;
use crate::policy::{CompiledPolicy, PolicyHandle};

/// Whether the address guard stands in the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The policy's address guard before every call, and again at connect time and for every
    /// token realm: what `serve` and `watch` resolve comes from pod specs.
    Policy,
    /// No guard: `pinhook check` contacts only what the user's own manifests name.
    Off,
}

/// Why the stack could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The policy's `registries.hosts` could not be applied.
    #[error(transparent)]
    Hosts(#[from] HostCaError),
    #[error(transparent)]
    Client(#[from] RegistryError),
}

/// The built stack.
pub struct Stack {
    /// The cache, the stack's outer layer: what the pipeline resolves through.
    pub cache: Arc<CachingResolver>,
    /// Signature verdicts (issue 46), beside the cache: fetched under the same guard, token
    /// exchange and client.
    pub signatures: Arc<VerifiedSignatures>,
    /// The client at the bottom, reconfigured by [`Stack::reload`].
    client: Arc<OciResolver>,
    /// The registry settings before the policy's `registries.hosts`.
    base: RegistryConfig,
}

/// Builds the stack from `base` (flags) and `policy` (its `registries.hosts` applied).
pub fn build(
    base: &RegistryConfig,
    cache: CacheConfig,
    policy: &PolicyHandle,
    guard: Guard,
    metrics: Arc<Metrics>,
) -> Result<Stack, StackError> {
    let config = base.with_hosts(&policy.current().registry_hosts)?;
    let client = OciResolver::new(config)?;
    // The client checks token realms and connect-time addresses against the same policy.
    let client = Arc::new(match guard {
        Guard::Policy => client.with_policy(policy.clone()),
        Guard::Off => client,
    });
    // Identity tokens are exchanged under the guard, through the client's own HTTP clients.
    let tokens = Arc::new(IdentityTokens::new(client.clone()));
    let signatures = Arc::new(VerifiedSignatures::new(
        tokens.clone(),
        (guard == Guard::Policy).then(|| policy.clone()),
        metrics.clone(),
    ));
    let exchanging: Arc<dyn Resolver> = tokens;
    let guarded = match guard {
        Guard::Policy => Arc::new(AddressGuard::new(exchanging, policy.clone())),
        Guard::Off => exchanging,
    };
    Ok(Stack {
        cache: Arc::new(CachingResolver::new(guarded, cache, metrics)),
        signatures,
        client,
        base: base.clone(),
    })
}

// === impl Stack ===

impl Stack {
    /// What the policy watcher calls with each new policy: the client takes its
    /// `registries.hosts` (a bad one is refused, and the old settings stay).
    pub fn reload(&self) -> impl Fn(&CompiledPolicy) -> Result<(), HostCaError> + Send + Sync {
        let (client, base) = (self.client.clone(), self.base.clone());
        move |compiled: &CompiledPolicy| {
            client.reconfigure(base.with_hosts(&compiled.registry_hosts)?);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::reference::Reference;
    use crate::registry::Credential;

    async fn resolve_loopback(guard: Guard) -> RegistryError {
        crate::install_crypto_provider();
        let policy = PolicyHandle::new(Policy::default().compile().expect("policy"));
        let base = RegistryConfig {
            only_configured_cas: true,
            ..RegistryConfig::default()
        };
        let stack = build(
            &base,
            CacheConfig::default(),
            &policy,
            guard,
            Arc::new(Metrics::new()),
        )
        .expect("stack");
        let image = Reference::parse("127.0.0.1:1/team/app:1.0").expect("reference");
        stack
            .cache
            .resolve(&image, &[Credential::Anonymous])
            .await
            .expect_err("nothing listens on port 1")
    }

    /// The one difference between the stacks is the guard: serve's refuses a loopback
    /// registry before any call, check's (off) calls it.
    #[tokio::test]
    async fn the_guard_is_an_option_of_the_one_stack() {
        assert_eq!(resolve_loopback(Guard::Policy).await.kind(), "refused");
        assert_eq!(resolve_loopback(Guard::Off).await.kind(), "unreachable");
    }
}
