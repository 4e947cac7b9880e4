//! The verdict on an image's signatures under one entry's trust, its fixed vocabulary
//! ([`Verdict::reason`]) and its one line for a person, and the [`Tally`] of failures that
//! decides it when no signature holds.
//!
//! Owns: the verdict's names and precedence. Never: reads a signature (`simple_signing`,
//! `keyless` and `bundle` do).

use std::sync::Arc;

use super::keyless::{Evidence, Keyless};

/// What an image's signatures say of the digest pinned, under one entry's trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A trusted key (`key sha256:…`) or identity (`subject (issuer)`) signed a payload naming
    /// the pinned digest.
    Verified { signer: Arc<str> },
    /// No signature at all (no signature manifest, or one without layers).
    NoSignature,
    /// Signatures, none of them by a trusted key or with a certificate.
    OtherKey,
    /// A trusted signer signed, but a payload naming another digest (or not a cosign payload).
    OtherDigest { signed: String },
    /// Keyless signatures the trusted root vouches for, by an identity no entry names.
    OtherIdentity { signer: String },
    /// Signatures that cannot be trusted (keyless ones the trusted root does not vouch for, a
    /// bundle pinhook cannot read), and why, as one sentence (the first's).
    Untrusted { why: String },
}

impl Verdict {
    /// The verdict's name in the fixed vocabulary.
    pub fn reason(&self) -> &'static str {
        match self {
            Verdict::Verified { .. } => "verified",
            Verdict::NoSignature => "no_signature",
            Verdict::OtherKey => "other_key",
            Verdict::OtherDigest { .. } => "other_digest",
            Verdict::OtherIdentity { .. } => "other_identity",
            Verdict::Untrusted { .. } => "untrusted",
        }
    }

    /// One line for a person: why the image counts as signed, or why not.
    pub fn describe(&self) -> String {
        self.to_string()
    }
}

impl std::fmt::Display for Verdict {
    /// [`Verdict::describe`], written where it goes (a note of several entries is one string).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Verified { signer } => write!(f, "signed by {signer}"),
            Verdict::NoSignature => f.write_str("no signature found"),
            Verdict::OtherKey => f.write_str("signed by another key"),
            Verdict::OtherDigest { signed } => write!(
                f,
                "the trusted signer signed another digest ({signed}), not this one"
            ),
            Verdict::OtherIdentity { signer } => write!(
                f,
                "signed keyless by {signer}, an identity the entry does not name"
            ),
            Verdict::Untrusted { why } => f.write_str(why),
        }
    }
}

/// The failures seen so far, the first of each kind.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub seen: bool,
    other_digest: Option<String>,
    other_identity: Option<String>,
    untrusted: Option<String>,
}

impl Tally {
    /// A trusted signer signed `signed` (a digest, or what the payload is instead).
    pub fn other_digest(&mut self, signed: &str) {
        self.other_digest
            .get_or_insert_with(|| crate::text::one_line(signed).into_owned());
    }

    /// Why a signature cannot be trusted, as one sentence.
    pub fn untrusted(&mut self, why: String) {
        self.untrusted.get_or_insert(why);
    }

    /// The signer of keyless `evidence` if the entry names it; tallies it otherwise.
    pub fn keyless(&mut self, keyless: &Keyless, evidence: Evidence) -> Option<String> {
        match evidence {
            Evidence::Signed(signer) if keyless.admits(&signer) => Some(signer.describe()),
            Evidence::Signed(signer) => {
                self.other_identity.get_or_insert_with(|| signer.describe());
                None
            }
            Evidence::Untrusted(why) => {
                self.untrusted(format!(
                    "a keyless signature the trusted root does not vouch for: {why}"
                ));
                None
            }
        }
    }

    pub fn verdict(self) -> Verdict {
        match (
            self.seen,
            self.other_digest,
            self.other_identity,
            self.untrusted,
        ) {
            (false, ..) => Verdict::NoSignature,
            (_, Some(signed), _, _) => Verdict::OtherDigest { signed },
            (_, None, Some(signer), _) => Verdict::OtherIdentity { signer },
            (_, None, None, Some(why)) => Verdict::Untrusted { why },
            (_, None, None, None) => Verdict::OtherKey,
        }
    }
}
