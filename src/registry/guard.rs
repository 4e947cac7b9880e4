//! The address guard: the one place that applies the policy's host rules to a host before
//! pinhook sends it anything (the HTTP client's resolver judges the addresses again when it
//! connects, [`super::http::dns`]). A registry named by a pod spec passes it under the cache
//! ([`AddressGuard`]); a token realm, a URL a registry names in its auth challenge, passes it
//! before the token request ([`check_realm`]). Either way the rules judge the name, then every
//! address the name resolves to, so neither a pod spec nor a registry can point pinhook at
//! loopback, link-local or metadata addresses through a name. The rules themselves are pure and
//! live in [`crate::policy::hosts`].
//!
//! The HTTP client resolves the name again when it connects; a name that changes its answer
//! between the two lookups (DNS rebinding) is caught there, by the same rules. Here is where a
//! host is refused before any connection is tried, and where IP-literal hosts, which the client
//! never resolves, are judged.
//!
//! A realm on a private network (RFC 1918 and the like) is refused for a registry whose own
//! addresses are all public, unless `allowPrivate` names the realm's host: a public registry
//! could otherwise make pinhook probe the cluster's network, and the realm's status would come
//! back in the denial ([`HostRules::for_realm_of`]).
//!
//! A realm is also refused when it is clear text (`http://`) on a host not marked insecure: the
//! token request carries the user's credentials (docker and containerd send them to the realm
//! whatever its host; so does pinhook, but never in clear text unless the user chose plain
//! HTTP for that host).

use std::sync::Arc;

use async_trait::async_trait;

use super::http::realm::{check_reachable, Blocked};
use super::{Credential, RegistryError, Resolution, Resolver, TransportError};
use crate::policy::PolicyHandle;
use crate::reference::Reference;

/// [`Resolver`] that checks resolved addresses before delegating.
pub struct AddressGuard {
    inner: Arc<dyn Resolver>,
    policy: PolicyHandle,
}

// === impl AddressGuard ===

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
        admit(&self.policy, reference.domain()).await?;
        self.inner.resolve(reference, credentials).await
    }
}

/// The policy's host rules on `host` and every address it resolves to, before anything is
/// sent to it: what the guard asks of every tag resolved and every signature fetched.
pub async fn admit(policy: &PolicyHandle, host: &str) -> Result<(), RegistryError> {
    check_reachable(&policy.current().hosts, host)
        .await
        .map_err(|blocked| match blocked {
            Blocked::Refused(reason) => RegistryError::Refused {
                host: host.to_string(),
                reason,
            },
            Blocked::Lookup(source) => RegistryError::Unreachable {
                registry: host.to_string(),
                source: TransportError::Lookup(source),
            },
        })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::policy::HostRefusal;
    use crate::policy::Policy;
    use crate::registry::http::realm::check_realm;
    use crate::registry::testing::{reference, Answer, Scripted};
    use crate::registry::RealmRefusal;

    fn policy() -> PolicyHandle {
        PolicyHandle::new(
            Policy::default()
                .compile()
                .expect("the default policy compiles"),
        )
    }

    #[tokio::test]
    async fn a_registry_on_an_internal_address_is_refused_before_it_is_asked() {
        let inner = Scripted::new(&[Answer::Digest('a')]);
        let guard = AddressGuard::new(inner.clone(), policy());
        let image = reference("127.0.0.1:5000/team/app:1.0");
        let error = guard.resolve(&image, &[]).await.expect_err("loopback");
        assert!(
            matches!(
                &error,
                RegistryError::Refused { host, reason: HostRefusal::Internal { .. } }
                    if host == "127.0.0.1:5000"
            ),
            "{error:?}"
        );
        assert_eq!(error.kind(), "refused");
        assert_eq!(inner.calls(), 0, "the registry saw no request");
    }

    #[rstest]
    #[case::not_a_url("not a url", "Invalid")]
    #[case::not_http("ftp://auth.example/token", "NotHttp")]
    #[case::loopback("https://127.0.0.1:8443/token", "Refused")]
    #[case::metadata("http://169.254.169.254/token", "Refused")]
    #[case::bracketed_loopback("https://[::1]/token", "Refused")]
    #[tokio::test]
    async fn token_realms_are_judged_before_any_request(
        #[case] realm: &str,
        #[case] variant: &str,
    ) {
        let error = check_realm(Some(&policy()), realm, "registry.example", |_| false)
            .await
            .expect_err("refused");
        match &error {
            RegistryError::RealmRefused(refusal) => {
                assert!(format!("{refusal:?}").starts_with(variant), "{refusal:?}")
            }
            other => panic!("not a realm refusal: {other:?}"),
        }
        assert_eq!(error.kind(), "refused");
    }

    #[tokio::test]
    async fn a_refused_realm_names_the_registry_and_the_reason_once() {
        let error = check_realm(
            Some(&policy()),
            "https://127.0.0.1/token",
            "reg.example",
            |_| false,
        )
        .await
        .expect_err("loopback");
        assert_eq!(
            error.to_string(),
            "token realm of registry reg.example: registry 127.0.0.1 is a loopback address; \
             pinhook does not contact it unless registries.allowPrivate names it"
        );
        assert!(std::error::Error::source(&error).is_none());
    }

    #[rstest]
    // A public registry (IP literals: no lookup) naming a realm in the cluster's network.
    #[case::public_to_rfc1918("203.0.113.7", "https://10.0.0.5/token", false)]
    #[case::public_with_port_to_cgnat("203.0.113.7:443", "https://100.64.1.2:8443/t", false)]
    #[case::public_to_ula("[2001:db8::7]:5000", "https://[fd00::5]/token", false)]
    // A registry in a private network may keep its realm beside it; a public realm is fine.
    #[case::private_to_private("10.0.0.4:5000", "https://10.0.0.5/token", true)]
    #[case::public_to_public("203.0.113.7", "https://198.51.100.9/token", true)]
    #[tokio::test]
    async fn a_public_registry_cannot_send_pinhook_into_a_private_network(
        #[case] registry: &str,
        #[case] realm: &str,
        #[case] asked: bool,
    ) {
        let judged = check_realm(Some(&policy()), realm, registry, |_| false).await;
        match (asked, &judged) {
            (true, Ok(())) => {}
            (false, Err(RegistryError::RealmRefused(RealmRefusal::PrivateForPublic { .. }))) => {
                assert_eq!(judged.as_ref().map_err(RegistryError::kind), Err("refused"));
            }
            _ => panic!("{registry} -> {realm}: {judged:?}"),
        }
    }

    #[tokio::test]
    async fn allow_private_opts_a_realm_host_in_for_a_public_registry() {
        let mut policy = Policy::default();
        policy.registries.allow_private = vec!["10.0.0.5".into()];
        let policy = PolicyHandle::new(policy.compile().expect("compiles"));
        let judged = check_realm(
            Some(&policy),
            "https://10.0.0.5/token",
            "203.0.113.7",
            |_| false,
        )
        .await;
        assert!(judged.is_ok(), "{judged:?}");
    }

    #[tokio::test]
    async fn without_a_policy_only_the_realm_url_is_judged() {
        let internal = check_realm(None, "https://127.0.0.1/token", "reg.example", |_| false).await;
        assert!(internal.is_ok(), "{internal:?}");
        let invalid = check_realm(None, "ftp://auth.example/token", "reg.example", |_| false).await;
        assert!(
            matches!(
                invalid,
                Err(RegistryError::RealmRefused(RealmRefusal::NotHttp { .. }))
            ),
            "{invalid:?}"
        );
    }

    #[tokio::test]
    async fn a_clear_text_realm_is_refused_unless_its_host_is_marked_insecure() {
        // An IP literal: the guard judges it without a lookup.
        let realm = "http://203.0.113.5:8080/token";
        for policy in [None, Some(policy())] {
            let error = check_realm(policy.as_ref(), realm, "reg.example", |_| false)
                .await
                .expect_err("clear text");
            assert_eq!(
                error.to_string(),
                "registry reg.example named a clear-text token realm \
                 http://203.0.113.5:8080/token; pinhook sends credentials over plain HTTP only \
                 to hosts marked insecure"
            );
            assert_eq!(error.kind(), "refused");
        }
        let marked = check_realm(None, realm, "reg.example", |host| {
            host == "203.0.113.5:8080"
        })
        .await;
        assert!(marked.is_ok(), "{marked:?}");
    }
}
