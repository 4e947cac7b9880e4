//! Issue 10, item 3: the policy's host lists compare hosts in normalised form, so a spelling
//! cannot get past the deny list. Driven through the stack `pinhook serve` builds (the address
//! guard in front of the registry client, both holding the policy).

use std::sync::Arc;

use crate::common::stand_in::Canary;
use crate::common::tls::init_crypto;
use pinhook::policy::{HostRefusal, Policy, PolicyHandle};
use pinhook::reference::Reference;
use pinhook::registry::guard::AddressGuard;
use pinhook::registry::{OciResolver, RegistryConfig, RegistryError, Resolver};

fn guarded(deny: &[&str], allow_private: &[&str]) -> AddressGuard {
    init_crypto();
    let mut policy = Policy::default();
    policy.registries.deny = deny.iter().map(|h| h.to_string()).collect();
    policy.registries.allow_private = allow_private.iter().map(|h| h.to_string()).collect();
    let handle = PolicyHandle::new(policy.compile().expect("policy"));
    let client = OciResolver::new(RegistryConfig {
        only_configured_cas: true,
        ..RegistryConfig::default()
    })
    .expect("resolver")
    .with_policy(handle.clone());
    AddressGuard::new(Arc::new(client), handle)
}

async fn denied(resolver: &AddressGuard, image: &str) -> RegistryError {
    let reference = Reference::parse(image).expect("a valid reference");
    let error = resolver
        .resolve(&reference, &[])
        .await
        .expect_err("refused");
    assert!(
        matches!(
            &error,
            RegistryError::Refused {
                reason: HostRefusal::Denied { .. },
                ..
            }
        ),
        "{image}: {error:?}"
    );
    error
}

/// The probe. `bad.corp.example` does not resolve: a lookup would have answered
/// "cannot reach", not "deny list".
#[tokio::test]
async fn case_and_the_default_port_do_not_get_past_the_deny_list() {
    let resolver = guarded(&["bad.corp.example"], &[]);
    for image in ["BAD.corp.example/x:1", "bad.corp.example:443/x:1"] {
        let error = denied(&resolver, image).await;
        let host = image.split('/').next().unwrap_or(image);
        assert_eq!(
            error.to_string(),
            format!("registry {host} is on the policy's deny list")
        );
    }
}

/// A host that would be contacted (every private address is opted in, and `LOCALHOST`
/// resolves to the canary's loopback address) is refused by the deny list under another
/// spelling, and the canary accepts no connection.
#[tokio::test]
async fn a_denied_host_in_capitals_is_never_contacted() {
    let canary = Canary::start().await;
    let port = canary.host().rsplit_once(':').map(|(_, p)| p.to_string());
    let port = port.expect("the canary's port");
    let resolver = guarded(&[&format!("localhost:{port}")], &["*"]);

    denied(&resolver, &format!("LOCALHOST:{port}/x:1")).await;
    denied(&resolver, &format!("LocalHost:{port}/team/app:2")).await;

    assert_eq!(canary.accepted(), 0, "the denied host was contacted");
}
