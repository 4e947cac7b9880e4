//! Which registry hosts pinhook may contact for a pod spec: allow and deny lists, and a guard
//! that keeps a pod spec from making pinhook probe internal addresses (loopback, link-local,
//! cloud metadata, unspecified) unless a host is opted in explicitly.
//!
//! Pure: judges host strings and addresses, and never resolves or contacts anything. Applying
//! the rules to a host about to be contacted (a registry, or a token realm a registry names),
//! including every address its name resolves to, is `registry::guard`'s job, the one place that
//! does it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::glob;

/// Why a registry host may not be contacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRefusal {
    #[error("registry {host} is on the policy's deny list")]
    Denied { host: String },
    #[error("registry {host} is not on the policy's allow list")]
    NotAllowed { host: String },
    #[error("registry {host} is a {what} address; pinhook does not contact it unless registries.allowPrivate names it")]
    Internal { host: String, what: &'static str },
}

/// Host rules compiled from the policy's `registries` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostRules {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub allow_private: Vec<String>,
}

// === impl HostRules ===

impl HostRules {
    /// Judges a registry host (`host[:port]`, IPv6 in brackets) before any connection.
    pub fn check_host(&self, host: &str) -> Result<(), HostRefusal> {
        let refuse = |what| HostRefusal::Internal {
            host: host.to_string(),
            what,
        };
        if self.deny.iter().any(|p| glob::matches(p, host)) {
            return Err(HostRefusal::Denied {
                host: host.to_string(),
            });
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|p| glob::matches(p, host)) {
            return Err(HostRefusal::NotAllowed {
                host: host.to_string(),
            });
        }
        if self.is_opted_in(host) {
            return Ok(());
        }
        let name = host_without_port(host);
        if let Ok(ip) = name.parse::<IpAddr>() {
            return match internal_kind(ip) {
                Some(what) => Err(refuse(what)),
                None => Ok(()),
            };
        }
        let lower = name.to_ascii_lowercase();
        if lower == "localhost" || lower.ends_with(".localhost") {
            return Err(refuse("loopback"));
        }
        if METADATA_NAMES.contains(&lower.as_str()) {
            return Err(refuse("cloud metadata"));
        }
        Ok(())
    }

    /// Judges one address a registry name resolved to (the guard against names that point
    /// inside).
    pub fn check_address(&self, host: &str, address: IpAddr) -> Result<(), HostRefusal> {
        if self.is_opted_in(host) {
            return Ok(());
        }
        match internal_kind(address) {
            Some(what) => Err(HostRefusal::Internal {
                host: format!("{host} ({address})"),
                what,
            }),
            None => Ok(()),
        }
    }

    /// These rules without the registry allow and deny lists: only the internal-address guard
    /// (and its `allowPrivate` opt-ins), for hosts a registry names rather than the user, such
    /// as the token realm of an auth challenge.
    pub fn internal_only(&self) -> HostRules {
        HostRules {
            allow: Vec::new(),
            deny: Vec::new(),
            allow_private: self.allow_private.clone(),
        }
    }

    fn is_opted_in(&self, host: &str) -> bool {
        self.allow_private.iter().any(|p| glob::matches(p, host))
    }
}

const METADATA_NAMES: &[&str] = &[
    "metadata.google.internal",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// What kind of internal address `ip` is, if it is one.
fn internal_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal_v4(v4),
            None => internal_v6(v6),
        },
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    const METADATA: [Ipv4Addr; 2] = [
        Ipv4Addr::new(169, 254, 169, 254),
        Ipv4Addr::new(100, 100, 100, 200),
    ];
    if METADATA.contains(&ip) {
        Some("cloud metadata")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else {
        None
    }
}

fn internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    // fd00:ec2::254 is AWS's IPv6 instance metadata endpoint.
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        Some("cloud metadata")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.segments()[0] & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else {
        None
    }
}

/// `host` of `host[:port]`, without IPv6 brackets.
pub fn host_without_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> HostRules {
        HostRules::default()
    }

    #[test]
    fn internal_addresses_are_refused_by_default() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:5000",
            "169.254.169.254",
            "[::1]:5000",
            "[fe80::1]:5000",
            "[::ffff:127.0.0.1]:443",
            "0.0.0.0:80",
            "localhost:5000",
            "registry.localhost",
            "metadata.google.internal",
            "100.100.100.200",
            "[fd00:ec2::254]",
        ] {
            assert!(
                matches!(rules().check_host(host), Err(HostRefusal::Internal { .. })),
                "{host}"
            );
        }
    }

    #[test]
    fn public_hosts_pass_and_opt_in_is_per_host() {
        assert_eq!(rules().check_host("registry.example.com"), Ok(()));
        assert_eq!(rules().check_host("10.0.0.5:5000"), Ok(()));
        let opted = HostRules {
            allow_private: vec!["127.0.0.1:5000".into()],
            ..HostRules::default()
        };
        assert_eq!(opted.check_host("127.0.0.1:5000"), Ok(()));
        assert!(opted.check_host("127.0.0.1:5001").is_err());
    }

    #[test]
    fn allow_and_deny_lists() {
        let rules = HostRules {
            allow: vec!["*.corp.example".into(), "docker.io".into()],
            deny: vec!["bad.corp.example".into()],
            ..HostRules::default()
        };
        assert_eq!(rules.check_host("reg.corp.example"), Ok(()));
        assert_eq!(rules.check_host("docker.io"), Ok(()));
        assert!(matches!(
            rules.check_host("bad.corp.example"),
            Err(HostRefusal::Denied { .. })
        ));
        assert!(matches!(
            rules.check_host("quay.io"),
            Err(HostRefusal::NotAllowed { .. })
        ));
    }

    #[test]
    fn resolved_addresses_are_checked() {
        let loopback: IpAddr = "127.0.0.1".parse().expect("ip");
        assert!(rules().check_address("sneaky.example", loopback).is_err());
        let public: IpAddr = "93.184.216.34".parse().expect("ip");
        assert_eq!(rules().check_address("sneaky.example", public), Ok(()));
    }
}
