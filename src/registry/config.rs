//! How registries are reached: [`RegistryConfig`], the trust (CA bundles, global and per host),
//! plain-HTTP hosts and timeouts every outbound client is built from, and the policy's
//! `registries.hosts` applied to it (the CA files it names are read here). No client, no
//! request.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use crate::policy::hosts;
use crate::policy::HostSettings;

/// A CA file named by the policy's `registries.hosts` that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("registries.hosts[{host:?}].ca: cannot read '{}'", path.display())]
pub struct HostCaError {
    pub host: String,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// How registries are reached.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Extra PEM CA bundles trusted for every registry.
    pub ca_pems: Vec<Vec<u8>>,
    /// Extra PEM CA bundles trusted for one registry host (`host[:port]`, compared normalised:
    /// `Reg.Example:443` is `reg.example`).
    pub host_ca_pems: HashMap<String, Vec<Vec<u8>>>,
    /// Hosts (`host[:port]`, compared normalised) reached over plain HTTP.
    pub insecure_hosts: HashSet<String>,
    /// Bound on each HTTP call (connect and read).
    pub request_timeout: Duration,
    /// Trust only the configured CAs, not the system roots (tests and air-gapped clusters).
    pub only_configured_cas: bool,
}

// === impl RegistryConfig ===

impl RegistryConfig {
    /// This configuration plus the policy's per-host settings (`registries.hosts`): CA files are
    /// read here, so a policy naming a missing file is refused with the file's name.
    pub fn with_hosts(
        &self,
        hosts: &BTreeMap<String, HostSettings>,
    ) -> Result<RegistryConfig, HostCaError> {
        let mut config = self.clone();
        for (host, settings) in hosts {
            if let Some(path) = &settings.ca {
                let pem = std::fs::read(path).map_err(|source| HostCaError {
                    host: host.clone(),
                    path: path.clone(),
                    source,
                })?;
                config
                    .host_ca_pems
                    .entry(host.clone())
                    .or_default()
                    .push(pem);
            }
            if settings.insecure {
                config.insecure_hosts.insert(host.clone());
            }
        }
        Ok(config)
    }

    /// True when `host` (`host[:port]`) is reached over plain HTTP.
    pub fn is_insecure(&self, host: &str) -> bool {
        self.insecure_hosts
            .iter()
            .any(|insecure| hosts::same_host(insecure, host))
    }

    /// Which configured trust `registry` gets: the hosts of `host_ca_pems` that name it, in
    /// order (empty for the global bundles alone). Registries of one trust share one client.
    pub(super) fn trust_of(&self, registry: &str) -> String {
        let mut own: Vec<&str> = self
            .host_ca_pems
            .keys()
            .filter(|host| hosts::same_host(host, registry))
            .map(String::as_str)
            .collect();
        own.sort_unstable();
        own.join("\n")
    }

    /// The CA bundles trusted for `registry`: the global ones, then the host's own.
    pub(super) fn pems_for<'a>(
        &'a self,
        registry: &'a str,
    ) -> impl Iterator<Item = &'a Vec<u8>> + 'a {
        let own = self
            .host_ca_pems
            .iter()
            .filter(move |(host, _)| hosts::same_host(host, registry))
            .flat_map(|(_, pems)| pems);
        self.ca_pems.iter().chain(own)
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            ca_pems: Vec::new(),
            host_ca_pems: HashMap::new(),
            insecure_hosts: HashSet::new(),
            request_timeout: Duration::from_secs(5),
            only_configured_cas: false,
        }
    }
}
