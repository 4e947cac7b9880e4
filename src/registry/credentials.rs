//! Pull credentials and their fingerprints.
//!
//! Owns: the [`Credential`] a registry call is made with, and the SHA-256 [`Fingerprint`] that
//! keys clients and cache entries, so a resolution made with one secret never answers for a
//! pod that lacks it. Never logs a password.

use std::fmt;

use sha2::{Digest as _, Sha256};

/// A credential for one registry call.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Credential {
    Anonymous,
    Basic { username: String, password: String },
}

/// SHA-256 of a credential (`anonymous` for none): safe to log, to key caches and clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(String);

// === impl Credential ===

impl Credential {
    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> Credential {
        Credential::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Credential::Anonymous => Fingerprint("anonymous".to_string()),
            Credential::Basic { username, password } => {
                let mut hasher = Sha256::new();
                hasher.update(username.as_bytes());
                // A separator no username contains keeps ("a:b","c") and ("a","b:c") apart.
                hasher.update([0u8]);
                hasher.update(password.as_bytes());
                let hex: String = hasher
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                Fingerprint(format!("sha256:{hex}"))
            }
        }
    }

    /// The `Authorization` value for HTTP basic auth, `None` for anonymous.
    pub(crate) fn basic_authorization(&self) -> Option<String> {
        use base64::Engine as _;
        match self {
            Credential::Anonymous => None,
            Credential::Basic { username, password } => {
                let pair = format!("{username}:{password}");
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                Some(format!("Basic {encoded}"))
            }
        }
    }
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
        }
    }
}

// === impl Fingerprint ===

impl Fingerprint {
    pub fn anonymous() -> Fingerprint {
        Credential::Anonymous.fingerprint()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
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
        assert!(!a.fingerprint().as_str().contains("p1"));
    }

    #[test]
    fn separator_keeps_split_points_apart() {
        let a = Credential::basic("a:b", "c");
        let b = Credential::basic("a", "b:c");
        assert_ne!(a.fingerprint(), b.fingerprint());
    }
}
