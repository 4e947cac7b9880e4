//! Pull credentials, their fingerprints, and where they come from.
//!
//! Owns: the [`Credential`] a registry call is made with, and the SHA-256 [`Fingerprint`] that
//! keys bearer tokens and cache entries, so a resolution made with one secret never answers for a
//! pod that lacks it. An identity token (docker's OAuth2 refresh token) is a credential too; it
//! is exchanged for an access token ([`identity_token`]) that keeps its fingerprint, so
//! cache entries outlive the short-lived access tokens. Never logs a password or a token.
//!
//! Where credentials come from, each in its own module: the [`keyring`] that matches them to
//! images as kubelet does, the pod's [`pull_secrets`], the node's credential [`provider`]
//! plugins and [`docker_helpers`] (run through [`exec`]'s bounded process runner, at most
//! [`limits`] of them at once), the [`service_account_tokens`] some plugins are handed (KEP-4412),
//! and the [`identity_token`] exchange.

pub mod docker_helpers;
pub mod exec;
pub mod keyring;
pub mod limits;
pub mod node;
pub mod provider;
pub mod pull_secrets;
pub mod secret_budget;
pub mod service_account_tokens;

use std::fmt;

use sha2::{Digest as _, Sha256};

/// A credential for one registry call.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Credential {
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
    /// A docker identity token (`identitytoken`, or a credential helper's `<token>` user): an
    /// OAuth2 refresh token for the registry's token service, unusable until exchanged.
    IdentityToken {
        token: String,
    },
    /// The access token an identity token was exchanged for; fingerprinted as that identity
    /// token, so every exchange of it keys the same cache entries.
    AccessToken {
        identity: Fingerprint,
        token: String,
    },
}

/// SHA-256 of a credential (`anonymous` for none): safe to log, to key caches and tokens.
/// Held as the 32 bytes themselves (every cache entry carries one), anonymous as 32 zero bytes
/// (no flag byte beside them: a credential hashing to zeros would take a SHA-256 preimage),
/// written `sha256:<hex>` or `anonymous`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

// === impl Credential ===

impl Credential {
    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> Credential {
        Credential::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    pub fn identity_token(token: impl Into<String>) -> Credential {
        Credential::IdentityToken {
            token: token.into(),
        }
    }

    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Credential::Anonymous => Fingerprint::ANONYMOUS,
            // A separator no username contains keeps ("a:b","c") and ("a","b:c") apart.
            Credential::Basic { username, password } => {
                hash(&[username.as_bytes(), b"\0", password.as_bytes()])
            }
            // The prefix keeps a token apart from any username/password pair.
            Credential::IdentityToken { token } => hash(&[b"identitytoken\0", token.as_bytes()]),
            Credential::AccessToken { identity, .. } => *identity,
        }
    }

    /// Roughly how many bytes this credential holds, for caches bounded in bytes.
    pub(crate) fn approximate_bytes(&self) -> usize {
        let held = match self {
            Credential::Anonymous => 0,
            Credential::Basic { username, password } => username.len() + password.len(),
            Credential::IdentityToken { token } => token.len(),
            Credential::AccessToken { token, .. } => token.len(),
        };
        std::mem::size_of::<Credential>() + held
    }

    /// The `Authorization` value the first request carries: HTTP basic for a username and
    /// password, the bearer access token an identity token was exchanged for; `None` for
    /// anonymous and for an identity token not exchanged (it then counts as anonymous).
    pub(crate) fn basic_authorization(&self) -> Option<String> {
        use base64::Engine as _;
        match self {
            Credential::Anonymous | Credential::IdentityToken { .. } => None,
            Credential::Basic { username, password } => {
                let pair = format!("{username}:{password}");
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                Some(format!("Basic {encoded}"))
            }
            Credential::AccessToken { token, .. } => Some(format!("Bearer {token}")),
        }
    }
}

/// SHA-256 of the concatenated parts.
fn hash(parts: &[&[u8]]) -> Fingerprint {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    Fingerprint(hasher.finalize().into())
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Anonymous => f.write_str("Anonymous"),
            Credential::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credential::IdentityToken { .. } => f.write_str("IdentityToken(<redacted>)"),
            Credential::AccessToken { identity, .. } => f
                .debug_struct("AccessToken")
                .field("identity", identity)
                .field("token", &"<redacted>")
                .finish(),
        }
    }
}

// === impl Fingerprint ===

impl Fingerprint {
    const ANONYMOUS: Fingerprint = Fingerprint([0; 32]);

    pub fn anonymous() -> Fingerprint {
        Credential::Anonymous.fingerprint()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Fingerprint::ANONYMOUS {
            return f.write_str("anonymous");
        }
        f.write_str("sha256:")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_differ_by_secret_and_never_show_the_password() {
        let a = Credential::basic("u", "p1");
        let b = Credential::basic("u", "p2");
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), Fingerprint::anonymous());
        assert!(!format!("{a:?}").contains("p1"));
        assert!(!a.fingerprint().to_string().contains("p1"));
    }

    #[test]
    fn an_access_token_answers_for_the_identity_token_it_came_from() {
        let identity = Credential::identity_token("refresh-me");
        let access = Credential::AccessToken {
            identity: identity.fingerprint(),
            token: "short-lived".to_string(),
        };
        assert_eq!(access.fingerprint(), identity.fingerprint());
        assert_ne!(
            identity.fingerprint(),
            Credential::basic("refresh-me", "").fingerprint()
        );
        assert_eq!(identity.basic_authorization(), None);
        assert_eq!(
            access.basic_authorization().as_deref(),
            Some("Bearer short-lived")
        );
        for shown in [format!("{identity:?}"), format!("{access:?}")] {
            assert!(
                !shown.contains("refresh-me") && !shown.contains("short-lived"),
                "{shown}"
            );
        }
    }

    #[test]
    fn separator_keeps_split_points_apart() {
        let a = Credential::basic("a:b", "c");
        let b = Credential::basic("a", "b:c");
        assert_ne!(a.fingerprint(), b.fingerprint());
    }
}
