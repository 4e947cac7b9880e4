//! What one `verify` entry of the policy trusts, compiled once at load: its keys and its keyless
//! identities under a trusted root, any one of which may sign, the trusted root whose logs must
//! hold a key's signature (when the entry names a `transparencyLog`), and the fingerprint of all that,
//! which keys a verification's cache entry. A verification is of a digest under this trust: two
//! entries trusting the same share their verdicts; a key, an identity or a root added or
//! removed is a new fingerprint and a new verification.

use sha2::{Digest as _, Sha256};

use std::sync::Arc;

use super::key::PublicKey;
use super::keyless::Keyless;
use super::trusted_root::TrustedRoot;

/// The keys and keyless identities one entry trusts (any of them), and their fingerprint.
#[derive(Debug, Clone)]
pub struct Trust {
    keys: Vec<PublicKey>,
    keyless: Option<Keyless>,
    /// The root whose transparency logs must hold a key's signature; `None`: not looked for.
    key_log: Option<Arc<TrustedRoot>>,
    fingerprint: Arc<str>,
}

impl Trust {
    /// The trust of `keys`, whatever their order or repetition.
    pub fn of_keys(keys: Vec<PublicKey>) -> Trust {
        Trust::new(keys, None)
    }

    /// The trust of `keys` and `keyless`, whatever the keys' order or repetition.
    pub fn new(keys: Vec<PublicKey>, keyless: Option<Keyless>) -> Trust {
        let mut names: Vec<&str> = keys.iter().map(PublicKey::fingerprint).collect();
        names.sort_unstable();
        names.dedup();
        let mut hash = Sha256::new();
        for name in names {
            hash.update(name.as_bytes());
            hash.update(b"\n");
        }
        if let Some(keyless) = &keyless {
            hash.update(b"keyless ");
            hash.update(keyless.fingerprint().as_bytes());
        }
        Trust {
            fingerprint: format!("sha256:{:x}", hash.finalize()).into(),
            keys,
            keyless,
            key_log: None,
        }
    }

    /// This trust, its keys' signatures counting only when logged in a log of `root` (a SET
    /// over an entry of that signature), as `cosign verify --key` checks by default.
    pub fn with_key_log(self, root: Arc<TrustedRoot>) -> Trust {
        let mut hash = Sha256::new();
        hash.update(self.fingerprint.as_bytes());
        hash.update(b"\nkeys logged in ");
        hash.update(root.fingerprint().as_bytes());
        Trust {
            fingerprint: format!("sha256:{:x}", hash.finalize()).into(),
            key_log: Some(root),
            ..self
        }
    }

    /// The root whose logs must hold a key's signature, if any.
    pub fn key_log(&self) -> Option<&TrustedRoot> {
        self.key_log.as_deref()
    }

    pub fn keys(&self) -> &[PublicKey] {
        &self.keys
    }

    pub fn keyless(&self) -> Option<&Keyless> {
        self.keyless.as_ref()
    }

    /// `sha256:<hex>` over the sorted fingerprints of the keys, the keyless trust's, and the
    /// key log's root.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// [`Trust::fingerprint`], shared: a cache key holds it without copying it.
    pub fn shared_fingerprint(&self) -> Arc<str> {
        self.fingerprint.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signatures::key::tests::key_pair;

    #[test]
    fn the_fingerprint_names_the_set_of_keys() {
        let key = || PublicKey::from_pem(&key_pair().1).unwrap();
        let (a, b) = (key(), key());
        let ab = Trust::of_keys(vec![a.clone(), b.clone()]);
        let ba = Trust::of_keys(vec![b.clone(), a.clone(), b.clone()]);
        assert_eq!(ab.fingerprint(), ba.fingerprint());
        assert_ne!(ab.fingerprint(), Trust::of_keys(vec![a]).fingerprint());
        assert_eq!(ab.keys().len(), 2);
    }
}
