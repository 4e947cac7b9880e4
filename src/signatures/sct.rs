//! Certificate transparency for keyless signing certificates (RFC 6962): a Fulcio certificate
//! carries, in extension 1.3.6.1.4.1.11129.2.4.2, signed certificate timestamps (SCTs), each a
//! CT log's signed promise to publish it, so that a certificate the CA issued and nobody can
//! see is not trusted. A certificate counts as published when one of its SCTs is by a CT log
//! the trusted root names, trusted at the SCT's time, and that log's key signed the
//! precertificate as RFC 6962 §3.2 defines it: the certificate's TBSCertificate without the SCT
//! extension, and the SHA-256 of its issuer's key. One such SCT is enough, as `cosign verify` and
//! sigstore-go require by default; an SCT of another log is passed over.
//!
//! Owns: reading a certificate's SCTs, the bytes a CT log signs, and that check. Never: the
//! chain (`keyless` builds it and hands the issuer's key here), or any I/O.

use std::borrow::Cow;

use der::asn1::ObjectIdentifier;
use der::{Any, Decode as _, Encode as _, Tag, TagNumber, Tagged as _};
use sha2::{Digest as _, Sha256};
use sigstore::crypto::Signature;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{CtVersion, ParsedExtension, SignedCertificateTimestamp};
use x509_parser::oid_registry::OID_CT_LIST_SCT;

use super::trusted_root::{hex, TrustedRoot};

/// The extension holding a certificate's SCT list.
const SCT_LIST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.11129.2.4.2");
/// A TBSCertificate's `extensions`: `[3] EXPLICIT`.
const EXTENSIONS: Tag = Tag::ContextSpecific {
    constructed: true,
    number: TagNumber(3),
};
/// SCTs of one certificate looked at; Fulcio embeds one.
pub(crate) const MAX_SCTS: usize = 8;
/// TLS's `HashAlgorithm` sha256.
const SHA256: u8 = 4;

/// Whether `certificate` (`der`, parsed), issued by the holder of `issuer_key` (its
/// SubjectPublicKeyInfo, DER), carries an SCT of a CT log `root` trusts; why not, on one line.
pub(crate) fn published(
    certificate: &X509Certificate<'_>,
    der: &[u8],
    issuer_key: &[u8],
    root: &TrustedRoot,
) -> Result<(), Cow<'static, str>> {
    let extension = certificate
        .get_extension_unique(&OID_CT_LIST_SCT)
        .map_err(|_| "its certificate carries more than one SCT list")?
        .ok_or("its certificate carries no SCT: no certificate transparency log published it")?;
    let ParsedExtension::SCT(scts) = extension.parsed_extension() else {
        return Err(Cow::Borrowed("its certificate's SCT list is malformed"));
    };
    if scts.len() > MAX_SCTS {
        return Err(Cow::Borrowed(
            "its certificate carries more SCTs than pinhook reads",
        ));
    }
    let precertificate =
        precertificate(der).map_err(|_| "its certificate's SCT list is malformed")?;
    let issuer_key_hash = Sha256::digest(issuer_key);
    let mut found = Found::NoTrustedLog;
    for sct in scts {
        let Some(log) = root.ct_log(&hex(sct.id.key_id), seconds(sct.timestamp)) else {
            continue;
        };
        // RFC 6962's SCTs: version 1, SHA-256 (the hash a log of the root signs with).
        if sct.version != CtVersion::V1 || sct.signature.hash_alg_id != SHA256 {
            found = found.max(Found::Unsupported);
            continue;
        }
        let Some(signed) = signed_by_log(sct, &issuer_key_hash, &precertificate) else {
            found = found.max(Found::Unsupported);
            continue;
        };
        if log
            .key
            .verify_signature(Signature::Raw(sct.signature.data), &signed)
            .is_ok()
        {
            return Ok(());
        }
        found = Found::Forged;
    }
    Err(Cow::Borrowed(match found {
        Found::NoTrustedLog => {
            "its certificate carries no SCT of a certificate transparency log the trusted root names"
        }
        Found::Unsupported => {
            "its certificate's SCT of a trusted CT log is not RFC 6962's (version 1, SHA-256)"
        }
        Found::Forged => {
            "its certificate's SCT does not verify: the CT log did not sign this certificate"
        }
    }))
}

/// What the SCTs of trusted logs came to, the most telling last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Found {
    NoTrustedLog,
    Unsupported,
    Forged,
}

/// An SCT's time (milliseconds since the epoch) in Unix seconds.
fn seconds(milliseconds: u64) -> i64 {
    i64::try_from(milliseconds / 1000).unwrap_or(i64::MAX)
}

/// What a CT log signs for a precertificate entry (RFC 6962 §3.2, `digitally-signed struct`):
/// the SCT's version, `certificate_timestamp` (0), its time, `precert_entry` (1), the issuer's
/// key hash, the TBSCertificate (24-bit length) and the SCT's extensions (16-bit length).
fn signed_by_log(
    sct: &SignedCertificateTimestamp<'_>,
    issuer_key_hash: &[u8],
    precertificate: &[u8],
) -> Option<Vec<u8>> {
    // Lengths the structure cannot carry (the TBSCertificate's 24 bits) sign nothing.
    let tbs_length = u32::try_from(precertificate.len())
        .ok()
        .filter(|length| *length < 1 << 24)?;
    let extensions = sct.extensions.0;
    let extensions_length = u16::try_from(extensions.len()).ok()?;
    let mut signed = Vec::with_capacity(precertificate.len() + extensions.len() + 48);
    signed.push(sct.version.0);
    signed.push(0);
    signed.extend_from_slice(&sct.timestamp.to_be_bytes());
    signed.extend_from_slice(&1u16.to_be_bytes());
    signed.extend_from_slice(issuer_key_hash);
    signed.extend_from_slice(&tbs_length.to_be_bytes()[1..]);
    signed.extend_from_slice(precertificate);
    signed.extend_from_slice(&extensions_length.to_be_bytes());
    signed.extend_from_slice(extensions);
    Some(signed)
}

/// The certificate's TBSCertificate without its SCT list, as the CA showed it to the log. Read
/// as a list of elements and written back with only the extensions' lengths changed, so every
/// other byte is the certificate's own (a decoded and re-encoded TBSCertificate need not be:
/// times, for one).
fn precertificate(certificate: &[u8]) -> der::Result<Vec<u8>> {
    let fields = Vec::<Any>::from_der(certificate)?;
    let tbs = fields.first().ok_or_else(|| Tag::Sequence.value_error())?;
    let mut tbs_fields: Vec<Any> = tbs.decode_as()?;
    if let Some(extensions) = tbs_fields.iter_mut().find(|f| f.tag() == EXTENSIONS) {
        let mut kept = Vec::new();
        for extension in Vec::<Any>::from_der(extensions.value())? {
            let parts: Vec<Any> = extension.decode_as()?;
            let oid = parts
                .first()
                .ok_or_else(|| Tag::Sequence.value_error())?
                .decode_as::<ObjectIdentifier>()?;
            if oid != SCT_LIST {
                kept.push(extension);
            }
        }
        *extensions = Any::new(EXTENSIONS, kept.to_der()?)?;
    }
    tbs_fields.to_der()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signatures::keyless::test_authority::{Sct, TestSigstore};

    const ISSUER: &str = "https://accounts.example";
    const SUBJECT: &str = "dev@acme.example";

    fn root(sigstore: &TestSigstore) -> TrustedRoot {
        TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap()
    }

    fn der(pem: &str) -> Vec<u8> {
        x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .unwrap()
            .1
            .contents
    }

    /// [`published`] of the certificate in `pem`.
    fn published_pem(
        pem: &str,
        issuer_key: &[u8],
        root: &TrustedRoot,
    ) -> Result<(), Cow<'static, str>> {
        let der = der(pem);
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        published(&parsed, &der, issuer_key, root)
    }

    #[test]
    fn a_certificate_with_the_trusted_logs_sct_is_published() {
        let sigstore = TestSigstore::new();
        let (certificate, _) = sigstore.certificate_with(ISSUER, SUBJECT, sigstore.now, Sct::Good);
        assert_eq!(
            published_pem(&certificate, &sigstore.ca_key(), &root(&sigstore)),
            Ok(())
        );
    }

    /// Each way an SCT can fail to vouch for a certificate, with the input that makes it.
    #[test]
    fn an_sct_that_does_not_vouch_for_the_certificate_says_why() {
        let sigstore = TestSigstore::new();
        let root = root(&sigstore);
        let why = |sct: Sct| {
            let (certificate, _) = sigstore.certificate_with(ISSUER, SUBJECT, sigstore.now, sct);
            published_pem(&certificate, &sigstore.ca_key(), &root).unwrap_err()
        };
        assert!(why(Sct::None).contains("carries no SCT:"));
        assert!(why(Sct::OtherLog).contains("no SCT of a certificate transparency log"));
        assert!(why(Sct::OverAnotherCertificate).contains("does not verify"));
        // Before the CT log's period in the root (2020-01-01).
        assert!(why(Sct::At(1_500_000_000_000)).contains("no SCT of a certificate transparency"));
        assert!(why(Sct::Malformed).contains("malformed"));
        assert!(why(Sct::TwoLists).contains("more than one SCT list"));
        // Signed by the trusted log, but not as RFC 6962 says (SHA-384 named): not read.
        assert!(why(Sct::Sha384).contains("not RFC 6962's"));
        // The SCT is right, but the issuer's key hashed is another's.
        let (certificate, _) = sigstore.certificate_with(ISSUER, SUBJECT, sigstore.now, Sct::Good);
        let other = TestSigstore::new();
        assert!(published_pem(&certificate, &other.ca_key(), &root)
            .unwrap_err()
            .contains("does not verify"));
    }

    #[test]
    fn one_good_sct_among_others_is_enough_and_too_many_are_refused() {
        let sigstore = TestSigstore::new();
        let root = root(&sigstore);
        let (certificate, _) =
            sigstore.certificate_with(ISSUER, SUBJECT, sigstore.now, Sct::AfterOthers(2));
        assert_eq!(
            published_pem(&certificate, &sigstore.ca_key(), &root),
            Ok(())
        );
        let (certificate, _) = sigstore.certificate_with(
            ISSUER,
            SUBJECT,
            sigstore.now,
            Sct::AfterOthers(MAX_SCTS - 1),
        );
        assert_eq!(
            published_pem(&certificate, &sigstore.ca_key(), &root),
            Ok(()),
            "{MAX_SCTS} SCTs are read"
        );
        let (certificate, _) =
            sigstore.certificate_with(ISSUER, SUBJECT, sigstore.now, Sct::AfterOthers(MAX_SCTS));
        assert!(published_pem(&certificate, &sigstore.ca_key(), &root)
            .unwrap_err()
            .contains("more SCTs"));
    }

    #[test]
    fn the_precertificate_is_the_certificate_without_its_sct_list_byte_for_byte() {
        let sigstore = TestSigstore::new();
        let (with, without) = sigstore.certificate_pair(ISSUER, SUBJECT, sigstore.now);
        let (_, plain) = x509_parser::parse_x509_certificate(&without).unwrap();
        assert_eq!(
            precertificate(&with).unwrap(),
            plain.tbs_certificate.as_ref()
        );
        // A certificate without the extension is its own precertificate.
        assert_eq!(
            precertificate(&without).unwrap(),
            plain.tbs_certificate.as_ref()
        );
        assert!(precertificate(b"\x30\x03\x02\x01").is_err());
    }
}
