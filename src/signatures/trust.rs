//! What one `verify` entry of the policy trusts, compiled once at load: its keys, any one of
//! which may sign, and the fingerprint of that set, which keys a verification's cache entry. A
//! verification is of a digest under this trust: two entries naming the same keys share
//! their verdicts, a key added or removed is a new fingerprint and a new verification.

use sha2::{Digest as _, Sha256};

use super::key::PublicKey;

/// The keys one entry trusts (any of them), and their fingerprint.
#[derive(Debug, Clone)]
pub struct Trust {
    keys: Vec<PublicKey>,
    fingerprint: String,
}

impl Trust {
    /// The trust of `keys`, whatever their order or repetition.
    pub fn of_keys(keys: Vec<PublicKey>) -> Trust {
        let mut names: Vec<&str> = keys.iter().map(PublicKey::fingerprint).collect();
        names.sort_unstable();
        names.dedup();
        let mut hash = Sha256::new();
        for name in names {
            hash.update(name.as_bytes());
            hash.update(b"\n");
        }
        Trust {
            fingerprint: format!("sha256:{:x}", hash.finalize()),
            keys,
        }
    }

    pub fn keys(&self) -> &[PublicKey] {
        &self.keys
    }

    /// `sha256:<hex>` over the sorted fingerprints of the keys.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
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
