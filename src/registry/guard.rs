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
        let host = reference.domain();
        let name = hosts::host_without_port(host);
        // Literal addresses were judged before any lookup, in the pipeline.
        if name.parse::<IpAddr>().is_err() {
            let port = host
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .unwrap_or(443);
            let rules = self.policy.current().hosts.clone();
            let addresses = tokio::net::lookup_host((name, port)).await.map_err(|e| {
                RegistryError::Unreachable {
                    registry: host.to_string(),
                    source: oci_client::errors::OciDistributionError::IoError(e),
                }
            })?;
            for address in addresses {
                rules
                    .check_address(host, address.ip())
                    .map_err(|e| RegistryError::Refused {
                        reason: e.to_string(),
                    })?;
            }
        }
        self.inner.resolve(reference, credentials).await
    }
}
