//! pinhook's registry client against real registries and hostile stand-ins: which digest a tag
//! resolves to, token and Basic auth, the bounds on what it sends and reads, the resolution
//! cache and the breaker in front of it, and the credentials it resolves with (pull Secrets
//! and ServiceAccounts, docker credential helpers, kubelet credential provider plugins).

mod cache;
mod credential_helpers;
mod credential_limits;
mod credential_providers;
mod credentials;
mod hanging_registry;
mod outbound_hosts;
mod outbound_limits;
mod outbound_redirects;
mod registry_auth;
mod registry_resolve;
mod resolve_through;
mod signatures;
