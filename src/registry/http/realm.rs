//! Token realms: a URL a registry names in its auth challenge, judged before pinhook sends it
//! the token request ([`check_realm`]), by the same host rules as the registries pod specs
//! name ([`check_reachable`], which the address guard uses too): the name, then every address
//! it resolves to, so no registry can point pinhook at loopback, link-local or metadata
//! addresses through a realm.
//!
//! A realm on a private network (RFC 1918 and the like) is refused for a registry whose own
//! addresses are all public, unless `allowPrivate` names the realm's host: a public registry
//! could otherwise make pinhook probe the cluster's network, and the realm's status would come
//! back in the denial ([`HostRules::for_realm_of`]). A realm is also refused when it is clear
//! text (`http://`) on a host not marked insecure: the token request carries the user's
//! credentials.
//!
//! Owns: [`check_realm`], [`check_reachable`]. Never: sends a request.

use std::net::IpAddr;

use super::dns;
use crate::policy::hosts::{self, HostRefusal, HostRules};
use crate::policy::PolicyHandle;
use crate::registry::{RealmRefusal, RegistryError};

/// Why a host did not pass the guard.
pub(crate) enum Blocked {
    /// The rules refused the name or one of its addresses.
    Refused(HostRefusal),
    /// The name did not resolve.
    Lookup(std::io::Error),
}

/// Refuses a token realm URL that is not http(s); when a `policy` is given, one whose host the
/// policy's internal-address guard refuses (a registry must not make pinhook probe loopback or
/// metadata addresses either); and a clear-text one unless `insecure` says its host
/// (`host[:port]`) is reached over plain HTTP anyway. The registry allow and deny lists do not
/// apply: the realm is the registry's choice, not the user's.
pub(crate) async fn check_realm(
    policy: Option<&PolicyHandle>,
    realm: &str,
    registry: &str,
    insecure: impl Fn(&str) -> bool,
) -> Result<(), RegistryError> {
    judge_realm(policy, realm, registry, insecure)
        .await
        .map_err(RegistryError::RealmRefused)
}

async fn judge_realm(
    policy: Option<&PolicyHandle>,
    realm: &str,
    registry: &str,
    insecure: impl Fn(&str) -> bool,
) -> Result<(), RealmRefusal> {
    let url = reqwest::Url::parse(realm).map_err(|problem| RealmRefusal::Invalid {
        registry: registry.to_string(),
        realm: realm.to_string(),
        problem,
    })?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(RealmRefusal::NotHttp {
            registry: registry.to_string(),
            realm: realm.to_string(),
        });
    }
    let host = match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => {
            return Err(RealmRefusal::NoHost {
                realm: realm.to_string(),
            })
        }
    };
    if let Some(policy) = policy {
        check_named(policy, &host, registry)
            .await
            .map_err(|named| match named {
                Named::Blocked(Blocked::Refused(reason)) => RealmRefusal::Refused {
                    registry: registry.to_string(),
                    reason,
                },
                Named::Blocked(Blocked::Lookup(source)) => RealmRefusal::Unresolvable {
                    registry: registry.to_string(),
                    host: host.clone(),
                    source,
                },
                Named::PrivateForPublic => RealmRefusal::PrivateForPublic {
                    registry: registry.to_string(),
                    host: host.clone(),
                },
            })?;
    }
    if url.scheme() == "http" && !insecure(&host) {
        return Err(RealmRefusal::ClearText {
            registry: registry.to_string(),
            realm: realm.to_string(),
        });
    }
    Ok(())
}

/// Why a host a registry names (a token realm, a blob's storage) may not be contacted.
pub(crate) enum Named {
    Blocked(Blocked),
    /// On a private network, named by a registry whose own addresses are public.
    PrivateForPublic,
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Named::Blocked(Blocked::Refused(reason)) => write!(f, "{reason}"),
            Named::Blocked(Blocked::Lookup(source)) => write!(f, "cannot resolve it: {source}"),
            Named::PrivateForPublic => {
                f.write_str("on a private network, named by a registry on a public one")
            }
        }
    }
}

/// The rules on a host `registry` names for pinhook to contact next: the rules that keep
/// pinhook off internal addresses on its name and addresses, and a host on a private network
/// only for a registry that is not public itself (the registry is looked up only then, so the
/// common public host costs no extra lookup).
pub(crate) async fn check_named(
    policy: &PolicyHandle,
    host: &str,
    registry: &str,
) -> Result<(), Named> {
    let hosts = &policy.current().hosts;
    check_reachable(&hosts.internal_only(), host)
        .await
        .map_err(Named::Blocked)?;
    let strict = hosts.for_realm_of(&[]);
    if let Err(Blocked::Refused(_)) = check_reachable(&strict, host).await {
        let registry_addresses = addresses_of(registry).await;
        if hosts
            .for_realm_of(&registry_addresses)
            .deny_private_networks
        {
            return Err(Named::PrivateForPublic);
        }
    }
    Ok(())
}

/// The addresses `registry` (`name[:port]`) stands for: itself when an IP literal, else what
/// it resolves to now (none when the lookup fails).
async fn addresses_of(registry: &str) -> Vec<IpAddr> {
    let name = hosts::host_without_port(registry);
    match name.parse::<IpAddr>() {
        Ok(address) => vec![address],
        Err(_) => dns::system_lookup(name).await.unwrap_or_default(),
    }
}

/// Whether pinhook may contact `host` (`name[:port]`): the host rules on the name, then on
/// every address the name resolves to.
pub(crate) async fn check_reachable(rules: &HostRules, host: &str) -> Result<(), Blocked> {
    rules.check_host(host).map_err(Blocked::Refused)?;
    let name = hosts::host_without_port(host);
    if name.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let addresses = dns::system_lookup(name).await.map_err(Blocked::Lookup)?;
    for address in addresses {
        rules
            .check_address(host, address)
            .map_err(Blocked::Refused)?;
    }
    Ok(())
}
