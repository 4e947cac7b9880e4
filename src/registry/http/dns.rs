//! Name resolution for pinhook's HTTP client ([`GuardedDns`], given to reqwest as its
//! resolver) and for the address guard's pre-check ([`system_lookup`]).
//!
//! Why a resolver of its own: the guard resolves a registry's name and judges every address
//! before the request, but the HTTP client resolves the name again when it connects, and a
//! name may answer differently the second time (DNS rebinding). [`GuardedDns`] judges the
//! addresses the connection will actually use, and refuses the name when the policy refuses
//! any of them, so no connection to a refused address is ever opened. It applies the
//! internal-address guard only: every host reaching it was judged against the allow and deny
//! lists before the request (a redirect never leaves its origin, see [`super::redirect`]).
//! IP-literal hosts never reach a resolver; the guard judges them before the request.
//!
//! Caveat: with an HTTP proxy configured (`HTTPS_PROXY`), the proxy resolves the registry's
//! name, and only the proxy's own name passes through here.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::policy::hosts::HostRefusal;
use crate::policy::PolicyHandle;

/// Resolves a host name to its addresses; injected so tests can play a rebinding name.
pub(crate) type Lookup =
    Arc<dyn Fn(String) -> BoxFuture<'static, io::Result<Vec<IpAddr>>> + Send + Sync>;

/// reqwest's resolver: the system's answer, refused whole when the policy refuses an address.
pub(crate) struct GuardedDns {
    /// `None`: no policy (`pinhook resolve`, `pinhook check`), every address is used.
    policy: Option<PolicyHandle>,
    lookup: Lookup,
}

/// The policy refused an address the HTTP client was about to connect to; carried through
/// reqwest's error to [`super::outbound::failed`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct AddressRefused(pub HostRefusal);

// === impl GuardedDns ===

impl GuardedDns {
    pub fn new(policy: Option<PolicyHandle>, lookup: Lookup) -> GuardedDns {
        GuardedDns { policy, lookup }
    }

    /// The addresses `name` resolves to, or the refusal of the first one the policy refuses.
    async fn vetted(
        policy: Option<PolicyHandle>,
        lookup: Lookup,
        name: String,
    ) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let addresses = lookup(name.clone()).await?;
        if let Some(policy) = policy {
            let rules = &policy.current().hosts;
            for address in &addresses {
                rules
                    .check_resolved(&name, *address)
                    .map_err(AddressRefused)?;
            }
        }
        Ok(addresses)
    }
}

impl Resolve for GuardedDns {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let lookup = self.lookup.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addresses = GuardedDns::vetted(policy, lookup, name).await?;
            // Port 0: reqwest puts the URL's port in.
            let addrs: Addrs = Box::new(
                addresses
                    .into_iter()
                    .map(|address| SocketAddr::new(address, 0)),
            );
            Ok(addrs)
        })
    }
}

/// The system resolver (`getaddrinfo` on tokio's blocking pool).
pub(crate) async fn system_lookup(name: &str) -> io::Result<Vec<IpAddr>> {
    let addresses = tokio::net::lookup_host((name, 0)).await?;
    Ok(addresses.map(|address| address.ip()).collect())
}

/// [`system_lookup`] as a [`Lookup`].
pub(crate) fn system() -> Lookup {
    Arc::new(|name: String| Box::pin(async move { system_lookup(&name).await }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::policy::Policy;

    /// A lookup that answers `address` for every name, without asking any resolver.
    pub(crate) fn answering(address: &'static str) -> Lookup {
        Arc::new(move |_name: String| {
            Box::pin(async move {
                let address = address
                    .parse::<IpAddr>()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                Ok(vec![address])
            })
        })
    }

    fn policy(allow_private: &[&str]) -> PolicyHandle {
        let mut policy = Policy::default();
        policy.registries.allow_private = allow_private.iter().map(|h| h.to_string()).collect();
        PolicyHandle::new(policy.compile().expect("the policy compiles"))
    }

    async fn resolved(
        policy: Option<PolicyHandle>,
        address: &'static str,
    ) -> Result<Vec<SocketAddr>, String> {
        let dns = GuardedDns::new(policy, answering(address));
        let name: Name = "rebind.example".parse().expect("a host name");
        match dns.resolve(name).await {
            Ok(addrs) => Ok(addrs.collect()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[tokio::test]
    async fn a_name_that_rebinds_to_loopback_is_refused_at_connect_time() {
        let refused = resolved(Some(policy(&[])), "127.0.0.1").await;
        assert_eq!(
            refused,
            Err(
                "registry rebind.example (127.0.0.1) is a loopback address; pinhook does not \
                 contact it unless registries.allowPrivate names it"
                    .to_string()
            )
        );
        let metadata = resolved(Some(policy(&[])), "169.254.169.254").await;
        assert!(
            metadata
                .as_ref()
                .is_err_and(|e| e.contains("cloud metadata")),
            "{metadata:?}"
        );
    }

    #[tokio::test]
    async fn public_and_opted_in_addresses_are_used() {
        let public = resolved(Some(policy(&[])), "93.184.216.34").await;
        assert_eq!(public, Ok(vec!["93.184.216.34:0".parse().expect("addr")]));
        let opted_in = resolved(Some(policy(&["rebind.example:5000"])), "127.0.0.1").await;
        assert_eq!(opted_in, Ok(vec!["127.0.0.1:0".parse().expect("addr")]));
        let unguarded = resolved(None, "127.0.0.1").await;
        assert!(unguarded.is_ok(), "{unguarded:?}");
    }
}
