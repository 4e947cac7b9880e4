//! Which registry hosts pinhook may contact for a pod spec: allow and deny lists, and a guard
//! that keeps a pod spec from making pinhook probe internal addresses (loopback, link-local,
//! cloud metadata, unspecified; with `denyPrivateNetworks`, also RFC 1918, 100.64/10 and
//! fc00::/7) unless a host is opted in explicitly.
//!
//! Hosts are compared in normalised form wherever these rules match them, so a spelling cannot
//! slip past a list: ASCII lower case, no trailing dot, the default port `:443` dropped, and
//! Docker Hub's other names (`index.docker.io`, which the reference module already writes
//! `docker.io`, and `registry-1.docker.io`, the host containerd contacts) read as `docker.io`.
//! A pattern matches a host when it matches any of its spellings (as written, normalised, with
//! or without `:443`), so normalising never lets through a host a pattern matched before.
//!
//! Pure: judges host strings and addresses, and never resolves or contacts anything. Applying
//! the rules to a host about to be contacted (a registry, or a token realm a registry names),
//! including every address its name resolves to, is `registry::guard`'s job before the request
//! and the HTTP client's resolver's (`registry::dns`) at connect time.

use std::borrow::Cow;
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
    /// Private networks (RFC 1918, 100.64.0.0/10, fc00::/7) are internal too.
    pub deny_private_networks: bool,
}

// === impl HostRules ===

impl HostRules {
    /// Judges a registry host (`host[:port]`, IPv6 in brackets) before any connection.
    pub fn check_host(&self, host: &str) -> Result<(), HostRefusal> {
        let refuse = |what| HostRefusal::Internal {
            host: host.to_string(),
            what,
        };
        if matches_any(&self.deny, host) {
            return Err(HostRefusal::Denied {
                host: host.to_string(),
            });
        }
        if !self.allow.is_empty() && !matches_any(&self.allow, host) {
            return Err(HostRefusal::NotAllowed {
                host: host.to_string(),
            });
        }
        if self.is_opted_in(host) {
            return Ok(());
        }
        let name = host_without_port(host);
        if let Ok(ip) = name.parse::<IpAddr>() {
            return match internal_kind(ip, self.deny_private_networks) {
                Some(what) => Err(refuse(what)),
                None => Ok(()),
            };
        }
        let lower = normalize_name(name);
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
        refuse_internal(host, address, self.deny_private_networks)
    }

    /// Judges one address `name` resolved to when the port is not known: the HTTP client's
    /// resolver sees only the name. An `allowPrivate` entry for the name opts it in at any
    /// port; which port may be contacted was judged, with the port, before the request
    /// ([`Self::check_host`], [`Self::check_address`]).
    pub fn check_resolved(&self, name: &str, address: IpAddr) -> Result<(), HostRefusal> {
        let names = spellings(name);
        let opted_in = self.allow_private.iter().any(|pattern| {
            let pattern = normalize_pattern(pattern);
            let pattern = host_without_port(&pattern);
            names.iter().any(|n| glob::matches(pattern, n))
        });
        match opted_in {
            true => Ok(()),
            false => refuse_internal(name, address, self.deny_private_networks),
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
            deny_private_networks: self.deny_private_networks,
        }
    }

    /// The rules for a token realm named by a registry at `registry_addresses`:
    /// [`Self::internal_only`], and when every one of those addresses is public (none internal,
    /// none on a private network; no address known counts as public), private networks refused
    /// too unless `allowPrivate` names the realm's host. A public registry has no business
    /// sending pinhook into the cluster's own network, where the realm's answer would tell a
    /// tenant what listens there; an in-cluster or VPC registry may name a realm beside it.
    pub fn for_realm_of(&self, registry_addresses: &[IpAddr]) -> HostRules {
        let public = registry_addresses
            .iter()
            .all(|&address| internal_kind(address, true).is_none());
        let mut rules = self.internal_only();
        rules.deny_private_networks |= public;
        rules
    }

    fn is_opted_in(&self, host: &str) -> bool {
        matches_any(&self.allow_private, host)
    }
}

/// Docker Hub's canonical name, as the reference module writes it.
const DOCKER_HUB: &str = "docker.io";
/// Other names of Docker Hub's registry: the legacy index and the API host.
const DOCKER_HUB_ALIASES: &[&str] = &["index.docker.io", "registry-1.docker.io"];
/// The port a registry host without one is reached on.
const DEFAULT_PORT: &str = "443";

const METADATA_NAMES: &[&str] = &[
    "metadata.google.internal",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// What kind of internal address `ip` is, if it is one; private networks only when `private`.
fn internal_kind(ip: IpAddr, private: bool) -> Option<&'static str> {
    let kind = match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal_v4(v4),
            None => internal_v6(v6),
        },
    };
    kind.or_else(|| (private && is_private_network(ip)).then_some("private network"))
}

/// RFC 1918, the shared address space of RFC 6598 (100.64.0.0/10) and IPv6 unique local
/// addresses (fc00::/7): where in-cluster and VPC registries live, and other internal services.
fn is_private_network(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private() || (v4.octets()[0] == 100 && v4.octets()[1] & 0xc0 == 64),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_private_network(IpAddr::V4(v4)),
            None => v6.segments()[0] & 0xfe00 == 0xfc00,
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

fn refuse_internal(host: &str, address: IpAddr, private: bool) -> Result<(), HostRefusal> {
    match internal_kind(address, private) {
        Some(what) => Err(HostRefusal::Internal {
            host: format!("{host} ({address})"),
            what,
        }),
        None => Ok(()),
    }
}

/// `host` (`name[:port]`) as the policy compares it: lower case, no trailing dot, no `:443`,
/// Docker Hub's aliases as `docker.io`. `BAD.corp.example:443` is `bad.corp.example`.
pub fn normalize_host(host: &str) -> String {
    normal_host(host).into_owned()
}

/// [`normalize_host`], borrowing `host` when it is already in that form, as hosts in image
/// references nearly always are (lower case, no trailing dot, no `:443`, no Docker Hub
/// alias): this runs for every image a `verify` entry is matched against.
pub fn normal_host(host: &str) -> Cow<'_, str> {
    let (name, port) = split_port(host);
    let already = !host.bytes().any(|b| b.is_ascii_uppercase())
        && !name.ends_with('.')
        && port.map_or(name.len() == host.len(), |port| {
            name.len() + 1 + port.len() == host.len()
        })
        && !DOCKER_HUB_ALIASES.contains(&name);
    match already {
        true => Cow::Borrowed(host),
        false => Cow::Owned(join(&canonical_name(&normalize_name(name)), port)),
    }
}

/// True when `a` and `b` name the same registry host once normalised.
pub fn same_host(a: &str, b: &str) -> bool {
    normalize_host(a) == normalize_host(b)
}

/// True when some pattern matches some spelling of `host`.
fn matches_any(patterns: &[String], host: &str) -> bool {
    if patterns.is_empty() {
        return false;
    }
    let spelled = spellings(host);
    patterns.iter().any(|pattern| {
        let pattern = normalize_pattern(pattern);
        spelled.iter().any(|s| glob::matches(&pattern, s))
    })
}

/// Every spelling of `host` a pattern may name it by: the name as written and its canonical
/// name (both lower case, without a trailing dot), each bare and with its port (`:443` when
/// none is written).
fn spellings(host: &str) -> Vec<String> {
    let (name, port) = split_port(host);
    let written = normalize_name(name);
    let canonical = canonical_name(&written);
    let mut names = vec![written];
    if names[0] != canonical {
        names.push(canonical);
    }
    let mut spelled = Vec::with_capacity(names.len() * 2);
    for name in names {
        spelled.push(join(&name, port));
        spelled.push(format!("{name}:{}", port.unwrap_or(DEFAULT_PORT)));
    }
    spelled
}

/// A list entry in the form hosts are compared in: lower case, and a Docker Hub alias (with
/// or without `:443`) as `docker.io`. Globs are left as written.
/// Borrows when the entry is already in that form, as entries usually are: this runs for
/// every entry on every image of every review (issue 13).
fn normalize_pattern(pattern: &str) -> Cow<'_, str> {
    let lower = match pattern.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(pattern.to_ascii_lowercase()),
        false => Cow::Borrowed(pattern),
    };
    let bare = lower
        .strip_suffix(DEFAULT_PORT)
        .and_then(|rest| rest.strip_suffix(':'))
        .unwrap_or(&lower);
    match DOCKER_HUB_ALIASES.contains(&bare) {
        true => Cow::Borrowed(DOCKER_HUB),
        false => lower,
    }
}

/// A host name in lower case without its trailing dot (`Reg.Example.` is `reg.example`).
fn normalize_name(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    match lower.strip_suffix('.') {
        Some(stripped) if !stripped.is_empty() => stripped.to_string(),
        _ => lower,
    }
}

fn canonical_name(name: &str) -> String {
    match DOCKER_HUB_ALIASES.contains(&name) {
        true => DOCKER_HUB.to_string(),
        false => name.to_string(),
    }
}

/// `name` and the port of `name[:port]` (IPv6 names keep their brackets); `:443` counts as
/// no port.
fn split_port(host: &str) -> (&str, Option<&str>) {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((_, after)) => {
                let name = &host[..host.len() - after.len()];
                (name, after.strip_prefix(':'))
            }
            None => (host, None),
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    (name, port.filter(|p| *p != DEFAULT_PORT))
}

fn join(name: &str, port: Option<&str>) -> String {
    match port {
        Some(port) => format!("{name}:{port}"),
        None => name.to_string(),
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
    use rstest::rstest;

    use super::*;

    fn rules() -> HostRules {
        HostRules::default()
    }

    /// Private networks are contacted by default (registries live there) and refused with
    /// `denyPrivateNetworks`, unless opted in; the other internal kinds are refused either way.
    #[rstest::rstest]
    #[case::rfc1918_10("10.1.2.3", "private network")]
    #[case::rfc1918_172("172.16.0.1:5000", "private network")]
    #[case::rfc1918_172_top("172.31.255.254", "private network")]
    #[case::rfc1918_192("192.168.1.1", "private network")]
    #[case::cgnat("100.64.0.1", "private network")]
    #[case::cgnat_top("100.127.255.254", "private network")]
    #[case::ula("[fd12:3456::1]", "private network")]
    #[case::ula_fc("[fc00::1]:5000", "private network")]
    #[case::mapped("[::ffff:10.0.0.1]", "private network")]
    fn private_networks_are_one_switch(#[case] host: &str, #[case] what: &str) {
        assert_eq!(rules().check_host(host), Ok(()), "allowed by default");
        let strict = HostRules {
            deny_private_networks: true,
            ..rules()
        };
        assert_eq!(
            strict.check_host(host).map_err(|e| e.to_string()),
            Err(format!(
                "registry {host} is a {what} address; pinhook does not contact it unless \
                 registries.allowPrivate names it"
            ))
        );
        let opted_in = HostRules {
            allow_private: vec![host.to_string()],
            ..strict.clone()
        };
        assert_eq!(opted_in.check_host(host), Ok(()));
        let address: IpAddr = host_without_port(host)
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .expect("an address");
        assert!(strict.check_resolved("reg.example", address).is_err());
        assert_eq!(rules().check_resolved("reg.example", address), Ok(()));
    }

    #[rstest::rstest]
    #[case("172.32.0.1")]
    #[case("172.15.255.255")]
    #[case("100.128.0.1")]
    #[case("100.63.255.255")]
    #[case("192.169.0.1")]
    #[case("[fe00::1]")]
    #[case("8.8.8.8")]
    fn neighbours_of_private_networks_are_public(#[case] host: &str) {
        let strict = HostRules {
            deny_private_networks: true,
            ..rules()
        };
        assert_eq!(strict.check_host(host), Ok(()));
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

    fn deny(patterns: &[&str]) -> HostRules {
        HostRules {
            deny: patterns.iter().map(|p| p.to_string()).collect(),
            ..HostRules::default()
        }
    }

    #[rstest]
    #[case::upper_case("BAD.corp.example", "bad.corp.example")]
    #[case::default_port("bad.corp.example:443", "bad.corp.example")]
    #[case::both("Bad.Corp.Example:443", "bad.corp.example")]
    #[case::trailing_dot("bad.corp.example.", "bad.corp.example")]
    #[case::upper_case_pattern("bad.corp.example", "BAD.corp.example")]
    #[case::pattern_with_default_port("bad.corp.example", "bad.corp.example:443")]
    #[case::glob_and_default_port("reg.corp.example:443", "*.corp.example")]
    #[case::hub_api_host("registry-1.docker.io", "docker.io")]
    #[case::hub_legacy_host("INDEX.docker.io", "docker.io")]
    #[case::hub_alias_pattern("docker.io", "registry-1.docker.io")]
    #[case::hub_alias_pattern_with_port("docker.io", "index.docker.io:443")]
    #[case::ipv6_default_port("[2001:db8::1]:443", "[2001:db8::1]")]
    fn the_deny_list_matches_every_spelling_of_a_host(#[case] host: &str, #[case] pattern: &str) {
        assert_eq!(
            deny(&[pattern]).check_host(host),
            Err(HostRefusal::Denied {
                host: host.to_string()
            }),
            "{pattern} must deny {host}"
        );
    }

    #[rstest]
    #[case::other_port("bad.corp.example:5000", "bad.corp.example")]
    #[case::other_host("good.corp.example", "bad.corp.example")]
    #[case::subdomain_glob_is_not_the_hub("docker.io", "*.docker.io")]
    #[case::port_pattern_other_port("bad.corp.example:5000", "bad.corp.example:443")]
    fn normalising_does_not_widen_a_pattern(#[case] host: &str, #[case] pattern: &str) {
        assert_eq!(
            deny(&[pattern]).check_host(host),
            Ok(()),
            "{pattern} vs {host}"
        );
    }

    #[test]
    fn a_glob_keeps_matching_the_spelling_it_matched_before() {
        // `*.docker.io` named registry-1.docker.io as written; it still does.
        assert!(deny(&["*.docker.io"])
            .check_host("registry-1.docker.io")
            .is_err());
    }

    #[test]
    fn the_allow_list_and_opt_ins_are_normalised_too() {
        let rules = HostRules {
            allow: vec!["reg.corp.example".into(), "LOCALHOST:5000".into()],
            allow_private: vec!["localhost:5000".into()],
            ..HostRules::default()
        };
        assert_eq!(rules.check_host("REG.corp.example:443"), Ok(()));
        assert_eq!(rules.check_host("LocalHost:5000"), Ok(()));
        assert!(matches!(
            rules.check_host("reg.corp.example:5000"),
            Err(HostRefusal::NotAllowed { .. })
        ));
    }

    #[test]
    fn hosts_normalise_to_one_form() {
        for (host, normal) in [
            ("BAD.corp.example:443", "bad.corp.example"),
            ("bad.corp.example:5000", "bad.corp.example:5000"),
            ("registry-1.docker.io", "docker.io"),
            ("Index.Docker.IO:443", "docker.io"),
            ("[::1]:443", "[::1]"),
            ("[::1]:5000", "[::1]:5000"),
            ("reg.example.", "reg.example"),
            ("docker.io", "docker.io"),
            ("reg.example", "reg.example"),
            ("reg.example:5000", "reg.example:5000"),
            ("[::1", "[::1"),
            ("reg.example:", "reg.example:"),
        ] {
            assert_eq!(normalize_host(host), normal, "{host}");
            // borrowed exactly when nothing changes
            let borrowed = matches!(normal_host(host), Cow::Borrowed(_));
            assert_eq!(borrowed, host == normal, "{host}");
        }
        assert!(same_host("REG.example:443", "reg.example"));
        assert!(!same_host("reg.example:5000", "reg.example"));
    }

    #[test]
    fn resolved_addresses_are_opted_in_by_name_at_any_port() {
        let loopback: IpAddr = "127.0.0.1".parse().expect("ip");
        let rules = HostRules {
            allow_private: vec!["Reg.Internal:5000".into()],
            ..HostRules::default()
        };
        assert_eq!(rules.check_resolved("reg.internal", loopback), Ok(()));
        assert_eq!(
            rules.check_resolved("other.internal", loopback),
            Err(HostRefusal::Internal {
                host: "other.internal (127.0.0.1)".into(),
                what: "loopback"
            })
        );
        let public: IpAddr = "93.184.216.34".parse().expect("ip");
        assert_eq!(rules.check_resolved("other.internal", public), Ok(()));
    }
}
