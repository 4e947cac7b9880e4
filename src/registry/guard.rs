//! The address guard under the cache: before a registry named by a DNS name is contacted,
//! every address the name resolves to must pass the policy's host rules, so a pod spec cannot
//! point pinhook at loopback, link-local or metadata addresses through a name.
//!
//! Caveat: the HTTP client resolves the name again when it connects; a name that changes its
//! answer between the two lookups (DNS rebinding) is not caught here.

use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;

use super::{Credential, RegistryError, Resolution, Resolver};
use crate::policy::{hosts, PolicyHandle};
use crate::reference::Reference;

/// [`Resolver`] that checks resolved addresses before delegating.
pub struct AddressGuard {
    inner: Arc<dyn Resolver>,
    policy: PolicyHandle,
}

impl AddressGuard {
    pub fn new(inner: Arc<dyn Resolver>, policy: PolicyHandle) -> AddressGuard {
        AddressGuard { inner, policy }
    }
}

#[async_trait]
impl Resolver for AddressGuard {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        check_reachable(&self.policy.current().hosts, reference.domain()).await?;
        self.inner.resolve(reference, credentials).await
    }
}

/// Whether pinhook may contact `host` (`name[:port]`): the host rules on the name, then on
/// every address the name resolves to. Also used for the token realm a registry's challenge
/// names, which is a URL of the registry's choosing.
pub async fn check_reachable(rules: &hosts::HostRules, host: &str) -> Result<(), RegistryError> {
    let refused = |e: hosts::HostRefusal| RegistryError::Refused {
        reason: e.to_string(),
    };
    rules.check_host(host).map_err(refused)?;
    let name = hosts::host_without_port(host);
    if name.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let port = host
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .unwrap_or(443);
    let addresses =
        tokio::net::lookup_host((name, port))
            .await
            .map_err(|e| RegistryError::Unreachable {
                registry: host.to_string(),
                source: oci_client::errors::OciDistributionError::IoError(e),
            })?;
    for address in addresses {
        rules.check_address(host, address.ip()).map_err(refused)?;
    }
    Ok(())
}
