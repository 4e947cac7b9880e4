//! Signatures bound to the digest pinhook pins (issue 46): what a signature must say for an
//! image to count as signed, judged without I/O. A cosign signature in the tag scheme is an
//! OCI manifest at tag `sha256-<hex>.sig` ([`signature_tag`]) whose layers are simple signing
//! payloads, each signed in its `dev.cosignproject.cosign/signature` annotation; one verifies
//! the image only if a trusted key ([`PublicKey`]) signed it **and** its payload names the very
//! digest pinned ([`simple_signing::judge`]). A signature of another digest, a tag's or a
//! former one's, is no signature of this one.
//!
//! Keyless signatures are verified offline against a Sigstore trusted root ([`keyless`],
//! [`TrustedRoot`]), their certificates' SCTs too ([`sct`]).
//!
//! Owns: trusted keys, keyless identities and trusted roots and their fingerprints, the trust of
//! one policy entry ([`Trust`]), the payload's reading, the verdict and its fixed vocabulary. Never: fetches a signature (the registry client does), or decides what a
//! verdict costs an admission (the policy's mode does).

pub mod bundle;
pub mod checkpoint;
pub mod key;
pub mod keyless;
pub mod layer;
pub mod sct;
pub mod simple_signing;
pub(crate) mod timestamp;
pub mod tlog;
pub mod trust;
pub mod trusted_root;
pub mod verdict;

pub use key::{KeyError, PublicKey};
pub use keyless::{Identity, Keyless, Matcher};
pub use layer::SignatureLayer;
pub use simple_signing::{judge, judge_all, judge_layers, LayersJudged};
pub use trust::Trust;
pub use trusted_root::{TrustedRoot, TrustedRootError};
pub use verdict::Verdict;

use crate::reference::Digest;

/// The tag cosign stores the signatures of `digest` at: `sha256-<hex>.sig`.
pub fn signature_tag(digest: &Digest) -> String {
    format!("{}.sig", digest.to_string().replacen(':', "-", 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_tag_is_cosigns() {
        let digest: Digest = format!("sha256:{}", "ab".repeat(32)).parse().unwrap();
        assert_eq!(
            signature_tag(&digest),
            format!("sha256-{}.sig", "ab".repeat(32))
        );
    }
}
