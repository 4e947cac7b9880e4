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
//! - at most [`IDLE_PER_HOST`] idle connections per host, each closed after [`IDLE_TIMEOUT`],
//!   and only for the [`POOLED_HOSTS`] hosts [`PooledHosts`] admits (reqwest keeps any number
//!   for 90 s: a tenant naming a thousand hosts left a thousand idle TLS connections that long;
//!   issue 44). Another host's client keeps none: each of its connections closes after its
//!   answer. Token realms use such a client too (a token is cached, so they are asked rarely,
//!   and a registry names its realm).
//!
//! oci-client is not used: it builds its own reqwest client (default redirect policy, no
//! resolver hook), which could be held to none of this.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::dns::{AddressRefused, GuardedDns, Lookup};
use super::redirect;
use crate::policy::PolicyHandle;
use crate::registry::{RedirectRefusal, RegistryConfig, RegistryError, TransportError};

/// Idle connections kept per registry host (for the next lookup's HEAD and GET; over HTTP/2,
/// what registries speak, a host takes one).
pub const IDLE_PER_HOST: usize = 2;
/// How long an idle connection is kept.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Registry hosts whose connections may be kept idle at once (an ordinary cluster pulls from a
/// handful: Docker Hub, ghcr.io, quay.io, registry.k8s.io, a cloud's, its own mirror).
pub const POOLED_HOSTS: usize = 12;
/// What one idle connection to a registry holds at most: rustls' state (about 40 KiB) and
/// hyper's read buffer, which a large answer grows up to its 400 KiB.
pub const IDLE_CONNECTION_BYTES: usize = (40 << 10) + (400 << 10);

/// The registry hosts whose clients keep idle connections: at most [`POOLED_HOSTS`], each for
/// as long as one of its connections may be idle after its last request. A host past them gets
/// a client that keeps none, until one of them has been unused that long.
#[derive(Debug, Default)]
pub(crate) struct PooledHosts {
    /// Each admitted host and the start of its last request.
    hosts: Mutex<HashMap<String, Instant>>,
}

impl PooledHosts {
    /// Whether `host`'s connections may be kept idle: it is admitted, or there is room for it.
    /// `request_time`: the longest a request to it takes, whose connection then idles
    /// [`IDLE_TIMEOUT`]; so an admitted host is held that long after its last request.
    pub fn admit(&self, host: &str, request_time: Duration) -> bool {
        let now = Instant::now();
        let hold = IDLE_TIMEOUT + request_time;
        let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = hosts.get_mut(host) {
            *last = now;
            return true;
        }
        if hosts.len() >= POOLED_HOSTS {
            hosts.retain(|_, last| now.duration_since(*last) < hold);
        }
        if hosts.len() >= POOLED_HOSTS {
            return false;
        }
        hosts.insert(host.to_string(), now);
        true
    }
}

/// The HTTP client for `registry` (`host[:port]`) and the token realms it names: `settings`'
/// trust and timeouts, `policy`'s guard in the resolver (none without a policy); keeping idle
/// connections when `pooled` ([`PooledHosts`]), else none.
pub(crate) fn build(
    settings: &RegistryConfig,
    registry: &str,
    policy: Option<&PolicyHandle>,
    lookup: Lookup,
    pooled: bool,
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
        .pool_max_idle_per_host(if pooled { IDLE_PER_HOST } else { 0 })
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
        build(&settings, "rebind.invalid", Some(&policy), lookup, true).expect("client")
    }

    /// At most POOLED_HOSTS hosts keep idle connections; an admitted host stays admitted while
    /// used; one unused for its hold makes room.
    #[tokio::test(start_paused = true)]
    async fn only_a_bounded_set_of_hosts_keeps_idle_connections() {
        let pooled = PooledHosts::default();
        let request = Duration::from_secs(10);
        for i in 0..POOLED_HOSTS {
            assert!(pooled.admit(&format!("h{i}.example"), request));
        }
        assert!(!pooled.admit("late.example", request));
        tokio::time::sleep(IDLE_TIMEOUT).await;
        // h0 used again: held anew. The rest are within their hold still (30 of 40 s).
        assert!(pooled.admit("h0.example", request));
        assert!(!pooled.admit("late.example", request));
        tokio::time::sleep(request).await;
        // h1..: unused for 40 s, their connections closed; room again.
        assert!(pooled.admit("late.example", request));
        assert!(pooled.admit("h0.example", request));
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
