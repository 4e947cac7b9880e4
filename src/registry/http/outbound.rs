//! The one outbound HTTP path: every request pinhook sends to a registry or a token realm
//! (manifest HEAD, manifest GET, token) goes through a client [`build`] makes, one per registry
//! host for its TLS trust, and every failure to get an answer is mapped by [`failed`].
//!
//! What each client holds to, whatever the registry answers:
//! - its resolver ([`super::dns::GuardedDns`]) refuses a name whose addresses the policy
//!   refuses, at connect time, so a name cannot rebind past the guard's pre-check;
//! - its redirect policy ([`super::redirect`]) follows only within one origin and never from
//!   HTTPS to HTTP, so neither a request nor its credentials go anywhere the guard did not
//!   judge;
//! - connect and read timeouts of `--registry-timeout`; the resolver bounds each attempt as a
//!   whole;
//! - bodies are read through [`super::body`], bounded;
//! - at most [`IDLE_PER_HOST`] idle connections per host, each closed after [`IDLE_TIMEOUT`]
//!   (reqwest keeps any number for 90 s: a tenant naming a thousand hosts left a thousand
//!   idle TLS connections that long; issue 44). The number of hosts is still not bounded.
//!
//! oci-client is not used: it builds its own reqwest client (default redirect policy, no
//! resolver hook), which could be held to none of this.

use std::sync::Arc;

use super::dns::{AddressRefused, GuardedDns, Lookup};
use super::redirect;
use crate::policy::PolicyHandle;
use crate::registry::{RedirectRefusal, RegistryConfig, RegistryError, TransportError};

/// Idle connections kept per registry host (for the next lookup's HEAD and GET).
pub const IDLE_PER_HOST: usize = 4;
/// How long an idle connection is kept.
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The HTTP client for `registry` (`host[:port]`) and the token realms it names: `settings`'
/// trust and timeouts, `policy`'s guard in the resolver (none without a policy).
pub(crate) fn build(
    settings: &RegistryConfig,
    registry: &str,
    policy: Option<&PolicyHandle>,
    lookup: Lookup,
) -> Result<reqwest::Client, RegistryError> {
    let config_error = |source: reqwest::Error| RegistryError::ClientConfig {
        registry: registry.to_string(),
        source,
    };
    let mut certificates = Vec::new();
    for pem in settings.pems_for(registry) {
        certificates.extend(reqwest::Certificate::from_pem_bundle(pem).map_err(config_error)?);
    }
    let builder = reqwest::Client::builder()
        .connect_timeout(settings.request_timeout)
        .read_timeout(settings.request_timeout)
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .pool_idle_timeout(IDLE_TIMEOUT)
        .user_agent(concat!("pinhook/", env!("CARGO_PKG_VERSION")))
        .redirect(redirect::policy())
        .dns_resolver(Arc::new(GuardedDns::new(policy.cloned(), lookup)));
    let builder = if settings.only_configured_cas {
        builder.tls_certs_only(certificates)
    } else {
        builder.tls_certs_merge(certificates)
    };
    builder.build().map_err(config_error)
}

/// What a request to `registry` that got no usable answer means: a redirect pinhook refused,
/// an address the resolver refused, or no answer at all (refused, reset, timed out: the
/// source says which). One mapping for the HEAD, the GET, the token request and body reads.
pub(crate) fn failed(registry: &str, error: reqwest::Error) -> RegistryError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(current) = cause {
        if let Some(refusal) = current.downcast_ref::<RedirectRefusal>() {
            return RegistryError::Redirected {
                registry: registry.to_string(),
                refusal: refusal.clone(),
            };
        }
        if let Some(AddressRefused(reason)) = current.downcast_ref::<AddressRefused>() {
            return RegistryError::Refused {
                host: registry.to_string(),
                reason: reason.clone(),
            };
        }
        cause = current.source();
    }
    RegistryError::Unreachable {
        registry: registry.to_string(),
        source: TransportError::Http(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{HostRefusal, Policy};
    use crate::registry::http::dns::tests::answering;

    fn client(lookup: Lookup) -> reqwest::Client {
        crate::install_crypto_provider();
        let policy = PolicyHandle::new(Policy::default().compile().expect("policy"));
        let settings = RegistryConfig {
            only_configured_cas: true,
            ..RegistryConfig::default()
        };
        build(&settings, "rebind.invalid", Some(&policy), lookup).expect("client")
    }

    /// The client's own resolver refuses the rebound address, so the request never leaves:
    /// nothing listens on the port, and nothing needs to.
    #[tokio::test]
    async fn the_client_refuses_a_name_that_resolves_inside_before_connecting() {
        let http = client(answering("127.0.0.1"));
        let error = http
            .get("http://rebind.invalid:1/v2/")
            .send()
            .await
            .expect_err("refused");
        let mapped = failed("rebind.invalid", error);
        assert!(
            matches!(
                &mapped,
                RegistryError::Refused { host, reason: HostRefusal::Internal { what: "loopback", .. } }
                    if host == "rebind.invalid"
            ),
            "{mapped:?}"
        );
        assert_eq!(mapped.kind(), "refused");
        assert_eq!(
            mapped.to_string(),
            "registry rebind.invalid (127.0.0.1) is a loopback address; pinhook does not \
             contact it unless registries.allowPrivate names it"
        );
    }
}
