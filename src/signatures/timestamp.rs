//! RFC 3161 timestamps as a Sigstore bundle carries them: a Rekor v2 entry has no signed entry
//! timestamp, so the time of a signature is a timestamp authority's word, a DER TimeStampResp
//! (`timestampVerificationData.rfc3161Timestamps[].signedTimestamp`) whose TSTInfo carries the
//! hash of the signature bytes. It counts only as a timestamp authority of the trusted root gives
//! it, as sigstore-go (`pkg/verify/tsa.go`) and sigstore/timestamp-authority
//! (`pkg/verification/verify.go`) check: the token is CMS SignedData with one signer, which the
//! authority's signing certificate names and whose key signed the token's attributes; that
//! certificate chains to the authority's root at the token's time and is for time stamping only;
//! and the time is within the period the trusted root trusts that same authority for.
//!
//! Owns: reading a TimeStampResp (bounded) and that check. Never: decides what the time is used
//! for (the caller checks a certificate or a log entry at it), or any I/O.

use std::borrow::Cow;
use std::time::Duration;

use cms::cert::x509::attr::Attributes;
use cms::cert::x509::ext::pkix::{ExtendedKeyUsage, SubjectKeyIdentifier};
use cms::cert::x509::ext::Extensions;
use cms::cert::x509::spki::AlgorithmIdentifierOwned;
use cms::cert::x509::Certificate;
use cms::content_info::ContentInfo;
use cms::signed_data::{SignedData, SignerIdentifier, SignerInfo};
use der::asn1::{Any, BitString, Int, ObjectIdentifier, OctetString};
use der::{Decode as _, Encode as _, Sequence, Tag, Tagged as _};
use rustls::pki_types::{CertificateDer, SignatureVerificationAlgorithm, UnixTime};
use sha2::{Digest as _, Sha256, Sha384, Sha512};

use super::trusted_root::TimestampAuthority;

/// The largest TimeStampResp read (the staging authority's is under 1 KiB).
pub(crate) const MAX_TIMESTAMP_BYTES: usize = 64 << 10;

const SIGNED_DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.2");
const TST_INFO: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.16.1.4");
const CONTENT_TYPE: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.3");
const MESSAGE_DIGEST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.4");
const SIGNING_CERTIFICATE_V2: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.16.2.47");
const TIME_STAMPING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.8");
/// Time stamping's OID, DER content, as webpki asks for an extended key usage.
const TIME_STAMPING_DER: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x08];
const SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
const SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.2");
const SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.3");
const ECDSA_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const RSA_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const RSA_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const RSA_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");

const UNSIGNED: &str =
    "its timestamp's signature does not verify with the key of a timestamp authority of the trusted root";

/// RFC 3161 §2.4.2 `TimeStampResp`.
#[derive(Clone, Debug, Eq, PartialEq, Sequence)]
pub(crate) struct TimeStampResp {
    pub status: PkiStatusInfo,
    pub time_stamp_token: Option<ContentInfo>,
}

/// RFC 3161 §2.4.2 `PKIStatusInfo`: granted is 0, granted with modifications 1.
#[derive(Clone, Debug, Eq, PartialEq, Sequence)]
pub(crate) struct PkiStatusInfo {
    pub status: u32,
    pub status_string: Option<Vec<String>>,
    pub fail_info: Option<BitString>,
}

/// RFC 3161 §2.4.2 `TSTInfo`; `gen_time` is kept as read, since a GeneralizedTime here may
/// carry fractions of a second (der's type refuses them, as RFC 5280 does in certificates).
#[derive(Clone, Debug, Eq, PartialEq, Sequence)]
pub(crate) struct TstInfo {
    pub version: u8,
    pub policy: ObjectIdentifier,
    pub message_imprint: MessageImprint,
    pub serial_number: Int,
    pub gen_time: Any,
    pub accuracy: Option<Accuracy>,
    pub ordering: Option<bool>,
    pub nonce: Option<Int>,
    #[asn1(context_specific = "0", tag_mode = "EXPLICIT", optional = "true")]
    pub tsa: Option<Any>,
    #[asn1(
        context_specific = "1",
        tag_mode = "IMPLICIT",
        constructed = "true",
        optional = "true"
    )]
    pub extensions: Option<Extensions>,
}

#[derive(Clone, Debug, Eq, PartialEq, Sequence)]
pub(crate) struct MessageImprint {
    pub hash_algorithm: AlgorithmIdentifierOwned,
    pub hashed_message: OctetString,
}

#[derive(Clone, Debug, Eq, PartialEq, Sequence)]
pub(crate) struct Accuracy {
    pub seconds: Option<Int>,
    #[asn1(context_specific = "0", tag_mode = "IMPLICIT", optional = "true")]
    pub millis: Option<u16>,
    #[asn1(context_specific = "1", tag_mode = "IMPLICIT", optional = "true")]
    pub micros: Option<u16>,
}

/// RFC 5035 `SigningCertificateV2`, of which the first certificate hash is read.
#[derive(Clone, Debug, Eq, PartialEq, Sequence)]
struct SigningCertificateV2 {
    certs: Vec<EssCertIdV2>,
    policies: Option<Vec<Any>>,
}

#[derive(Clone, Debug, Eq, PartialEq, Sequence)]
struct EssCertIdV2 {
    /// SHA-256 when absent.
    hash_algorithm: Option<AlgorithmIdentifierOwned>,
    cert_hash: OctetString,
    issuer_serial: Option<Any>,
}

/// A timestamp token read and checked as far as it can be without an authority.
struct Token {
    time: i64,
    signer: SignerInfo,
    /// The DER of the signed attributes as a SET, which the signer's key signed.
    signed_attributes: Vec<u8>,
    /// The ESS signingCertificateV2 attribute's first hash of the signing certificate, and its
    /// algorithm.
    signing_certificate: Option<(AlgorithmIdentifierOwned, Vec<u8>)>,
}

/// How far an authority got before it failed: the reason of the one that got furthest is the
/// most telling.
type Failure = (u8, Cow<'static, str>);

/// The time (Unix seconds) a timestamp authority of `authorities` says `signature` existed: the
/// TSTInfo's genTime, once `signed_timestamp` (a DER TimeStampResp) is found to carry the hash of
/// `signature` and be signed by an authority whose chain holds at that time, within the period
/// the root trusts that authority for; why not, on one line.
pub(crate) fn timestamped(
    signed_timestamp: &[u8],
    signature: &[u8],
    authorities: &[TimestampAuthority],
) -> Result<i64, Cow<'static, str>> {
    if signed_timestamp.len() > MAX_TIMESTAMP_BYTES {
        return Err(Cow::Borrowed(
            "its timestamp is larger than pinhook reads (64 KiB)",
        ));
    }
    let token = Token::read(signed_timestamp, signature)?;
    let mut failure: Failure = (
        0,
        Cow::Borrowed("the trusted root names no timestamp authority with a certificate"),
    );
    for authority in authorities {
        match token.signed_by(authority) {
            Ok(()) => return Ok(token.time),
            Err(found) if found.0 > failure.0 => failure = found,
            Err(_) => {}
        }
    }
    Err(failure.1)
}

// === impl Token ===

impl Token {
    /// The token of `response`, if it is a timestamp of `signature` whose signed attributes say
    /// so; its signer is not yet looked at.
    fn read(response: &[u8], signature: &[u8]) -> Result<Token, Cow<'static, str>> {
        let response = TimeStampResp::from_der(response)
            .map_err(|_| "its timestamp is not a DER TimeStampResp")?;
        if response.status.status > 1 {
            return Err(Cow::Owned(format!(
                "its timestamp authority did not grant the timestamp (status {})",
                response.status.status
            )));
        }
        let token = response
            .time_stamp_token
            .ok_or("its timestamp response carries no timestamp token")?;
        if token.content_type != SIGNED_DATA {
            return Err(Cow::Borrowed("its timestamp token is not CMS SignedData"));
        }
        let signed_data: SignedData = token
            .content
            .decode_as()
            .map_err(|_| "its timestamp token's SignedData is malformed")?;
        let content = &signed_data.encap_content_info;
        if content.econtent_type != TST_INFO {
            return Err(Cow::Borrowed("its timestamp token does not hold a TSTInfo"));
        }
        let tst_der = content
            .econtent
            .as_ref()
            .filter(|e| e.tag() == Tag::OctetString)
            .ok_or("its timestamp token holds no TSTInfo")?
            .value();
        let mut signers = signed_data.signer_infos.0.into_vec().into_iter();
        let (Some(signer), None) = (signers.next(), signers.next()) else {
            return Err(Cow::Borrowed(
                "its timestamp token has not exactly one signer",
            ));
        };

        let tst = TstInfo::from_der(tst_der).map_err(|_| "its timestamp's TSTInfo is malformed")?;
        if tst.version != 1 {
            return Err(Cow::Borrowed("its timestamp's TSTInfo is not version 1"));
        }
        let time = generalized_time(&tst.gen_time)
            .ok_or("its timestamp's time is malformed or before 1970")?;
        let imprint = &tst.message_imprint;
        let hashed = hash(&imprint.hash_algorithm, signature)
            .ok_or("its timestamp's message imprint is not a SHA-256, SHA-384 or SHA-512 hash")?;
        if hashed != imprint.hashed_message.as_bytes() {
            return Err(Cow::Borrowed(
                "its timestamp is of other bytes than its signature",
            ));
        }

        let attributes = signer
            .signed_attrs
            .as_ref()
            .ok_or("its timestamp token's signer signs no attributes")?;
        let content_type = attribute(attributes, CONTENT_TYPE)?
            .ok_or("its timestamp token's signed attributes name no content type")?;
        if content_type.decode_as::<ObjectIdentifier>().ok() != Some(TST_INFO) {
            return Err(Cow::Borrowed(
                "its timestamp token's signed attributes name another content type than TSTInfo",
            ));
        }
        let digest = attribute(attributes, MESSAGE_DIGEST)?
            .and_then(|d| d.decode_as::<OctetString>().ok())
            .ok_or("its timestamp token's signed attributes carry no message digest")?;
        let expected = hash(&signer.digest_alg, tst_der)
            .ok_or("its timestamp token's digest algorithm is not SHA-256, SHA-384 or SHA-512")?;
        if digest.as_bytes() != expected {
            return Err(Cow::Borrowed(
                "its timestamp token's signed message digest is not its TSTInfo's",
            ));
        }
        // RFC 5035: the signing certificate's hash, if given, names the authority's.
        let signing_certificate = attribute(attributes, SIGNING_CERTIFICATE_V2)?
            .map(|value| {
                let id = value
                    .decode_as::<SigningCertificateV2>()
                    .ok()
                    .and_then(|s| s.certs.into_iter().next())
                    .ok_or("its timestamp token's signing certificate attribute is malformed")?;
                let algorithm = id.hash_algorithm.unwrap_or(AlgorithmIdentifierOwned {
                    oid: SHA256,
                    parameters: None,
                });
                Ok::<_, &str>((algorithm, id.cert_hash.into_bytes().into_vec()))
            })
            .transpose()?;
        // RFC 5652 §5.4: the signature is over the DER of the attributes as a SET (tag 0x31),
        // not as the [0] IMPLICIT field they are carried in.
        let signed_attributes = attributes
            .to_der()
            .map_err(|_| "its timestamp token's signed attributes are malformed")?;
        Ok(Token {
            time,
            signer,
            signed_attributes,
            signing_certificate,
        })
    }

    /// Whether `authority` signed this token, its chain holding at the token's time, and trusts
    /// that time.
    fn signed_by(&self, authority: &TimestampAuthority) -> Result<(), Failure> {
        let fail = |rank, why| (rank, Cow::Borrowed(why));
        // An authority with no certificate vouches for nothing, whatever its period.
        let Some(leaf_der) = authority.chain.first() else {
            return Err(fail(
                0,
                "a timestamp authority of the trusted root has no certificate",
            ));
        };
        let leaf = Certificate::from_der(leaf_der).map_err(|_| {
            fail(
                1,
                "a timestamp authority's certificate in the trusted root is malformed",
            )
        })?;
        if !names(&self.signer.sid, &leaf) {
            return Err(fail(
                2,
                "its timestamp was not signed by a timestamp authority of the trusted root",
            ));
        }
        if let Some((algorithm, certificate_hash)) = &self.signing_certificate {
            if hash(algorithm, leaf_der).as_deref() != Some(certificate_hash.as_slice()) {
                return Err(fail(
                    3,
                    "its timestamp names another signing certificate than its authority's",
                ));
            }
        }
        self.verify(leaf_der).map_err(|e| (4, e))?;
        usage(&leaf).map_err(|e| (5, e))?;
        chained(&authority.chain, &leaf, self.time).map_err(|e| (5, e))?;
        if !authority.valid.contains(self.time) {
            return Err(fail(
                6,
                "its timestamp's time is outside the period the trusted root trusts its timestamp authority for",
            ));
        }
        Ok(())
    }

    /// Whether the key of `leaf` (DER) signed the signed attributes, with the algorithm the
    /// signer names.
    fn verify(&self, leaf: &[u8]) -> Result<(), Cow<'static, str>> {
        let algorithms = algorithms(&self.signer);
        if algorithms.is_empty() {
            return Err(Cow::Borrowed(
                "its timestamp is signed with an algorithm pinhook does not verify",
            ));
        }
        let leaf = CertificateDer::from(leaf);
        let leaf = webpki::EndEntityCert::try_from(&leaf).map_err(|_| UNSIGNED)?;
        let signature = self.signer.signature.as_bytes();
        // An ECDSA algorithm names the hash, not the curve: the one of the key's curve verifies.
        algorithms
            .iter()
            .any(|alg| {
                leaf.verify_signature(*alg, &self.signed_attributes, signature)
                    .is_ok()
            })
            .then_some(())
            .ok_or(Cow::Borrowed(UNSIGNED))
    }
}

/// The one value of the attribute `oid` in `attributes`, if there: more than one such attribute,
/// or values, is malformed (RFC 5652 §5.3).
fn attribute(
    attributes: &Attributes,
    oid: ObjectIdentifier,
) -> Result<Option<&Any>, Cow<'static, str>> {
    let mut found = attributes.iter().filter(|a| a.oid == oid);
    let Some(attribute) = found.next() else {
        return Ok(None);
    };
    if found.next().is_some() {
        return Err(Cow::Borrowed(
            "its timestamp token repeats a signed attribute",
        ));
    }
    let mut values = attribute.values.iter();
    match (values.next(), values.next()) {
        (Some(value), None) => Ok(Some(value)),
        _ => Err(Cow::Borrowed(
            "its timestamp token has a signed attribute with not exactly one value",
        )),
    }
}

/// Whether the signer identifier `sid` names `certificate`.
fn names(sid: &SignerIdentifier, certificate: &Certificate) -> bool {
    let tbs = certificate.tbs_certificate();
    match sid {
        SignerIdentifier::IssuerAndSerialNumber(id) => {
            id.issuer == *tbs.issuer() && id.serial_number == *tbs.serial_number()
        }
        SignerIdentifier::SubjectKeyIdentifier(id) => matches!(
            tbs.get_extension::<SubjectKeyIdentifier>(),
            Ok(Some((_, own))) if own == *id
        ),
    }
}

/// Whether `leaf`'s extended key usage is critical and time stamping only (RFC 3161 §2.3).
fn usage(leaf: &Certificate) -> Result<(), Cow<'static, str>> {
    match leaf.tbs_certificate().get_extension::<ExtendedKeyUsage>() {
        Ok(Some((true, usage))) if usage.0 == [TIME_STAMPING] => Ok(()),
        _ => Err(Cow::Borrowed(
            "its timestamp authority's certificate is not for time stamping only (a critical extended key usage)",
        )),
    }
}

/// Whether `chain` (the authority's, `leaf` first, DER) holds at `time`: the leaf chains to the
/// last certificate through those between; a chain of one is its own anchor.
fn chained(chain: &[Vec<u8>], leaf: &Certificate, time: i64) -> Result<(), Cow<'static, str>> {
    const UNCHAINED: &str =
        "its timestamp authority's certificate does not chain to its root at the timestamp's time";
    let seconds = u64::try_from(time).map_err(|_| UNCHAINED)?;
    let (Some(leaf_der), Some(root)) = (chain.first(), chain.last()) else {
        return Err(Cow::Borrowed(UNCHAINED));
    };
    if chain.len() == 1 {
        let validity = leaf.tbs_certificate().validity();
        let within = validity.not_before.to_unix_duration().as_secs() <= seconds
            && seconds <= validity.not_after.to_unix_duration().as_secs();
        return within.then_some(()).ok_or(Cow::Borrowed(UNCHAINED));
    }
    let root = CertificateDer::from(root.as_slice());
    let anchor = webpki::anchor_from_trusted_cert(&root).map_err(|_| UNCHAINED)?;
    let between: Vec<CertificateDer<'_>> = chain[1..chain.len() - 1]
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let leaf = CertificateDer::from(leaf_der.as_slice());
    webpki::EndEntityCert::try_from(&leaf)
        .map_err(|_| UNCHAINED)?
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &[anchor],
            &between,
            UnixTime::since_unix_epoch(Duration::from_secs(seconds)),
            webpki::KeyUsage::required(TIME_STAMPING_DER),
            None,
            None,
        )
        .map(|_| ())
        .map_err(|e| Cow::Owned(format!("{UNCHAINED} ({e})")))
}

/// The algorithms `signer`'s signature may be verified with (ECDSA's: one per curve).
fn algorithms(signer: &SignerInfo) -> Vec<&'static dyn SignatureVerificationAlgorithm> {
    use webpki::ring as alg;
    let digest = signer.digest_alg.oid;
    match signer.signature_algorithm.oid {
        ECDSA_SHA256 => vec![alg::ECDSA_P256_SHA256, alg::ECDSA_P384_SHA256],
        ECDSA_SHA384 => vec![alg::ECDSA_P384_SHA384, alg::ECDSA_P256_SHA384],
        // Some signers name the key's algorithm and leave the hash to the digest algorithm.
        EC_PUBLIC_KEY if digest == SHA256 => vec![alg::ECDSA_P256_SHA256, alg::ECDSA_P384_SHA256],
        EC_PUBLIC_KEY if digest == SHA384 => vec![alg::ECDSA_P384_SHA384, alg::ECDSA_P256_SHA384],
        RSA_SHA256 => vec![alg::RSA_PKCS1_2048_8192_SHA256],
        RSA_SHA384 => vec![alg::RSA_PKCS1_2048_8192_SHA384],
        RSA_SHA512 => vec![alg::RSA_PKCS1_2048_8192_SHA512],
        RSA if digest == SHA256 => vec![alg::RSA_PKCS1_2048_8192_SHA256],
        RSA if digest == SHA384 => vec![alg::RSA_PKCS1_2048_8192_SHA384],
        RSA if digest == SHA512 => vec![alg::RSA_PKCS1_2048_8192_SHA512],
        ED25519 => vec![alg::ED25519],
        _ => vec![],
    }
}

/// `data`'s hash by `algorithm`, if SHA-256, SHA-384 or SHA-512 (parameters absent or NULL).
fn hash(algorithm: &AlgorithmIdentifierOwned, data: &[u8]) -> Option<Vec<u8>> {
    if algorithm
        .parameters
        .as_ref()
        .is_some_and(|p| p.tag() != Tag::Null || !p.value().is_empty())
    {
        return None;
    }
    match algorithm.oid {
        SHA256 => Some(Sha256::digest(data).to_vec()),
        SHA384 => Some(Sha384::digest(data).to_vec()),
        SHA512 => Some(Sha512::digest(data).to_vec()),
        _ => None,
    }
}

/// A GeneralizedTime `YYYYMMDDHHMMSS[.f...]Z` in Unix seconds (fractions dropped).
fn generalized_time(time: &Any) -> Option<i64> {
    if time.tag() != Tag::GeneralizedTime {
        return None;
    }
    let text = std::str::from_utf8(time.value()).ok()?.strip_suffix('Z')?;
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() != 14 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let field = |from: usize, to: usize| whole.get(from..to)?.parse::<u16>().ok();
    let small = |from: usize, to: usize| u8::try_from(field(from, to)?).ok();
    let time = der::DateTime::new(
        field(0, 4)?,
        small(4, 6)?,
        small(6, 8)?,
        small(8, 10)?,
        small(10, 12)?,
        small(12, 14)?,
    )
    .ok()?;
    i64::try_from(time.unix_duration().as_secs()).ok()
}

/// A timestamp authority made in tests: a root and a signing certificate (ECDSA P-256) with a
/// critical time-stamping-only extended key usage, and the TimeStampResp it signs.
#[cfg(test)]
pub(crate) mod test_tsa {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use cms::cert::x509::attr::Attribute;
    use cms::cert::IssuerAndSerialNumber;
    use cms::content_info::CmsVersion;
    use cms::signed_data::{EncapsulatedContentInfo, SignerInfos};
    use der::asn1::{GeneralizedTime, SetOfVec};
    use rcgen::{
        BasicConstraints, CertificateParams, CustomExtension, DnType, IsCa, KeyPair,
        KeyUsagePurpose, SigningKey as _, PKCS_ECDSA_P256_SHA256,
    };

    use super::*;
    use crate::signatures::trusted_root::Validity;

    /// Code signing, an extended key usage a timestamp authority must not have.
    pub(crate) const CODE_SIGNING: ObjectIdentifier =
        ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.3");

    pub(crate) struct TestTsa {
        /// DER.
        pub root: Vec<u8>,
        /// DER, issued by `root`.
        pub leaf: Vec<u8>,
        key: KeyPair,
    }

    /// What a stamp does otherwise than a good one.
    #[derive(Default)]
    pub(crate) struct Tweak {
        /// The PKIStatus (0, granted, by default).
        pub status: u32,
        /// The bytes the message-digest attribute is the hash of, instead of the TSTInfo.
        pub digest_of: Option<Vec<u8>>,
        /// A second SignerInfo.
        pub two_signers: bool,
        /// The bytes the signingCertificateV2 hash is of, instead of the signing certificate.
        pub certificate_hash_of: Option<Vec<u8>>,
        /// The signer named by its subject key identifier, not its issuer and serial number.
        pub by_key_identifier: bool,
    }

    impl TestTsa {
        pub(crate) fn new() -> TestTsa {
            TestTsa::with_usage(TIME_STAMPING, true)
        }

        /// An authority whose signing certificate's extended key usage is `purpose` alone.
        pub(crate) fn with_usage(purpose: ObjectIdentifier, critical: bool) -> TestTsa {
            let root_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
            let mut root = CertificateParams::new(Vec::<String>::new()).unwrap();
            root.distinguished_name
                .push(DnType::CommonName, "pinhook test TSA root");
            root.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            root.key_usages = vec![KeyUsagePurpose::KeyCertSign];
            let root_der = root.self_signed(&root_key).unwrap().der().to_vec();
            let issuer = rcgen::Issuer::new(root, root_key);

            let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
            let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
            leaf.distinguished_name
                .push(DnType::CommonName, "pinhook test TSA");
            leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            let usage = ExtendedKeyUsage(vec![purpose]).to_der().unwrap();
            let mut usage = CustomExtension::from_oid_content(&[2, 5, 29, 37], usage);
            usage.set_criticality(critical);
            leaf.custom_extensions.push(usage);
            let key_id = Sha256::digest(key.public_key_raw());
            let key_id = SubjectKeyIdentifier(OctetString::new(&key_id[..20]).unwrap());
            let key_id =
                CustomExtension::from_oid_content(&[2, 5, 29, 14], key_id.to_der().unwrap());
            leaf.custom_extensions.push(key_id);
            let leaf = leaf.signed_by(&key, &issuer).unwrap().der().to_vec();
            TestTsa {
                root: root_der,
                leaf,
                key,
            }
        }

        /// Its signing key, PKCS#8 PEM (for another implementation to sign with).
        pub(crate) fn key_pem(&self) -> String {
            self.key.serialize_pem()
        }

        /// The authority a trusted root gives for it, trusted from 1970 on.
        pub(crate) fn authority(&self) -> TimestampAuthority {
            TimestampAuthority {
                chain: vec![self.leaf.clone(), self.root.clone()],
                valid: Validity {
                    start: 0,
                    end: None,
                },
            }
        }

        /// Its chain as a trusted root's `certChain.certificates[].rawBytes`: leaf first.
        pub(crate) fn chain_base64(&self) -> Vec<String> {
            [&self.leaf, &self.root]
                .iter()
                .map(|c| STANDARD.encode(c))
                .collect()
        }

        /// An entry of a trusted root's `timestampAuthorities`, trusted from 1970 on.
        pub(crate) fn trusted_root_entry(&self) -> serde_json::Value {
            let certificates: Vec<_> = self
                .chain_base64()
                .into_iter()
                .map(|c| serde_json::json!({ "rawBytes": c }))
                .collect();
            serde_json::json!({
                "subject": { "organization": "pinhook", "commonName": "pinhook test TSA" },
                "certChain": { "certificates": certificates },
                "validFor": { "start": "1970-01-01T00:00:00Z" },
            })
        }

        /// A DER TimeStampResp saying `signature` existed at `gen_time` (Unix seconds).
        pub(crate) fn stamp(&self, signature: &[u8], gen_time: i64) -> Vec<u8> {
            self.stamp_with(signature, gen_time, Tweak::default())
        }

        pub(crate) fn stamp_with(&self, signature: &[u8], gen_time: i64, tweak: Tweak) -> Vec<u8> {
            let sha256 = AlgorithmIdentifierOwned {
                oid: SHA256,
                parameters: None,
            };
            let octets = |bytes: &[u8]| OctetString::new(bytes.to_vec()).unwrap();
            let time = GeneralizedTime::from_unix_duration(Duration::from_secs(
                u64::try_from(gen_time).unwrap(),
            ))
            .unwrap();
            let tst = TstInfo {
                version: 1,
                policy: ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.2"),
                message_imprint: MessageImprint {
                    hash_algorithm: sha256.clone(),
                    hashed_message: octets(&Sha256::digest(signature)),
                },
                serial_number: Int::new(&[0x01, 0x02]).unwrap(),
                gen_time: Any::encode_from(&time).unwrap(),
                accuracy: None,
                ordering: None,
                nonce: None,
                tsa: None,
                extensions: None,
            }
            .to_der()
            .unwrap();
            let digested = tweak.digest_of.as_deref().unwrap_or(&tst);
            let signing_certificate = SigningCertificateV2 {
                certs: vec![EssCertIdV2 {
                    hash_algorithm: None,
                    cert_hash: octets(&Sha256::digest(
                        tweak.certificate_hash_of.as_deref().unwrap_or(&self.leaf),
                    )),
                    issuer_serial: None,
                }],
                policies: None,
            };
            let attribute = |oid, value: Any| Attribute {
                oid,
                values: SetOfVec::try_from(vec![value]).unwrap(),
            };
            let attributes: Attributes = SetOfVec::try_from(vec![
                attribute(CONTENT_TYPE, Any::encode_from(&TST_INFO).unwrap()),
                attribute(
                    MESSAGE_DIGEST,
                    Any::encode_from(&octets(&Sha256::digest(digested))).unwrap(),
                ),
                attribute(
                    SIGNING_CERTIFICATE_V2,
                    Any::encode_from(&signing_certificate).unwrap(),
                ),
            ])
            .unwrap();
            let signed = self.key.sign(&attributes.to_der().unwrap()).unwrap();
            let leaf = Certificate::from_der(&self.leaf).unwrap();
            let tbs = leaf.tbs_certificate();
            let (version, sid) = if tweak.by_key_identifier {
                let (_, id) = tbs
                    .get_extension::<SubjectKeyIdentifier>()
                    .unwrap()
                    .unwrap();
                (CmsVersion::V3, SignerIdentifier::SubjectKeyIdentifier(id))
            } else {
                let id = IssuerAndSerialNumber {
                    issuer: tbs.issuer().clone(),
                    serial_number: tbs.serial_number().clone(),
                };
                (CmsVersion::V1, SignerIdentifier::IssuerAndSerialNumber(id))
            };
            let signer = SignerInfo {
                version,
                sid,
                digest_alg: sha256.clone(),
                signed_attrs: Some(attributes),
                signature_algorithm: AlgorithmIdentifierOwned {
                    oid: ECDSA_SHA256,
                    parameters: None,
                },
                signature: octets(&signed),
                unsigned_attrs: None,
            };
            let mut signers = vec![signer.clone()];
            if tweak.two_signers {
                signers.push(SignerInfo {
                    signature: octets(b"another"),
                    ..signer
                });
            }
            let signed_data = SignedData {
                version: CmsVersion::V3,
                digest_algorithms: SetOfVec::try_from(vec![sha256]).unwrap(),
                encap_content_info: EncapsulatedContentInfo {
                    econtent_type: TST_INFO,
                    econtent: Some(Any::new(Tag::OctetString, tst).unwrap()),
                },
                certificates: None,
                crls: None,
                signer_infos: SignerInfos(SetOfVec::try_from(signers).unwrap()),
            };
            TimeStampResp {
                status: PkiStatusInfo {
                    status: tweak.status,
                    status_string: None,
                    fail_info: None,
                },
                time_stamp_token: Some(ContentInfo {
                    content_type: SIGNED_DATA,
                    content: Any::encode_from(&signed_data).unwrap(),
                }),
            }
            .to_der()
            .unwrap()
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;

    use super::test_tsa::{TestTsa, Tweak, CODE_SIGNING};
    use super::*;
    use crate::signatures::trusted_root::Validity;
    use crate::signatures::TrustedRoot;

    /// 2025-07-25T19:53:04Z, the staging timestamp's genTime.
    const STAGING_TIME: i64 = 1_753_473_184;
    const NOW: i64 = 1_760_000_000;

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/tests/fixtures/sigstore-staging-rekor2/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(path).unwrap()
    }

    /// The staging bundle's timestamp, its DSSE signature (raw) and the staging TSA.
    fn staging() -> (Vec<u8>, Vec<u8>, Vec<TimestampAuthority>) {
        let bundle: serde_json::Value =
            serde_json::from_slice(&fixture("bundle.sigstore.json")).unwrap();
        let base64 = |pointer: &str| {
            STANDARD
                .decode(bundle.pointer(pointer).unwrap().as_str().unwrap())
                .unwrap()
        };
        let timestamp = base64(
            "/verificationMaterial/timestampVerificationData/rfc3161Timestamps/0/signedTimestamp",
        );
        let signature = base64("/dsseEnvelope/signatures/0/sig");
        let root = TrustedRoot::parse(&fixture("trusted_root.json")).unwrap();
        (timestamp, signature, root.timestamp_authorities)
    }

    fn fails(result: Result<i64, Cow<'static, str>>, reason: &str) {
        match result {
            Ok(time) => panic!("verified at {time}, expected: {reason}"),
            Err(why) => assert!(why.contains(reason), "{why:?} does not say {reason:?}"),
        }
    }

    #[test]
    fn the_staging_timestamp_verifies_to_its_time() {
        let (timestamp, signature, authorities) = staging();
        assert_eq!(authorities.len(), 1);
        assert_eq!(
            timestamped(&timestamp, &signature, &authorities),
            Ok(STAGING_TIME)
        );
    }

    #[test]
    fn the_staging_timestamp_of_other_bytes_or_tampered_with_fails() {
        let (timestamp, signature, authorities) = staging();
        let mut flipped = signature.clone();
        flipped[10] ^= 0x01;
        fails(
            timestamped(&timestamp, &flipped, &authorities),
            "of other bytes than its signature",
        );
        fails(
            timestamped(&timestamp, b"another signature", &authorities),
            "of other bytes than its signature",
        );
        // one bit of the token's own signature (its last byte is the ECDSA signature's)
        let mut forged = timestamp.clone();
        *forged.last_mut().unwrap() ^= 0x01;
        fails(
            timestamped(&forged, &signature, &authorities),
            "does not verify with the key of a timestamp authority",
        );
        // one byte of the TSTInfo: its genTime a second later
        let at = timestamp
            .windows(15)
            .position(|w| w == b"20250725195304Z")
            .unwrap();
        let mut later = timestamp.clone();
        later[at + 13] = b'5';
        fails(
            timestamped(&later, &signature, &authorities),
            "signed message digest is not its TSTInfo's",
        );
    }

    #[test]
    fn the_staging_timestamp_needs_its_own_authority_trusted_at_its_time() {
        let (timestamp, signature, authorities) = staging();
        let mut ended = authorities.clone();
        ended[0].valid.end = Some(STAGING_TIME - 1);
        fails(
            timestamped(&timestamp, &signature, &ended),
            "outside the period the trusted root trusts",
        );
        // sigstore-conformance: an authority with no certificate whose period covers the time
        // lends it to none.
        let mut borrowed = ended.clone();
        borrowed.push(TimestampAuthority {
            chain: Vec::new(),
            valid: Validity {
                start: 0,
                end: None,
            },
        });
        fails(
            timestamped(&timestamp, &signature, &borrowed),
            "outside the period the trusted root trusts",
        );
        fails(
            timestamped(&timestamp, &signature, &borrowed[1..]),
            "no timestamp authority with a certificate",
        );
        fails(
            timestamped(&timestamp, &signature, &[TestTsa::new().authority()]),
            "not signed by a timestamp authority of the trusted root",
        );
        fails(
            timestamped(&timestamp, &signature, &[]),
            "no timestamp authority",
        );
    }

    #[test]
    fn a_test_timestamp_verifies_to_its_time() {
        let tsa = TestTsa::new();
        let stamp = tsa.stamp(b"signature", NOW);
        assert_eq!(
            timestamped(&stamp, b"signature", &[tsa.authority()]),
            Ok(NOW)
        );
        // among other authorities, and with its leaf alone as its own anchor
        let other = TestTsa::new().authority();
        let mut alone = tsa.authority();
        alone.chain.truncate(1);
        assert_eq!(
            timestamped(&stamp, b"signature", &[other.clone(), alone]),
            Ok(NOW)
        );
        fails(
            timestamped(&stamp, b"signature", &[other]),
            "not signed by a timestamp authority",
        );
        // its chain read back from a trusted root's entry
        let entry = tsa.trusted_root_entry();
        let chain: Vec<Vec<u8>> = entry["certChain"]["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| STANDARD.decode(c["rawBytes"].as_str().unwrap()).unwrap())
            .collect();
        assert_eq!(chain, tsa.authority().chain);
    }

    #[test]
    fn hostile_timestamps_fail_with_a_reason() {
        let tsa = TestTsa::new();
        let authorities = [tsa.authority()];
        let check = |stamp: &[u8], reason: &str| {
            fails(timestamped(stamp, b"signature", &authorities), reason)
        };
        let good = tsa.stamp(b"signature", NOW);
        check(&good[..good.len() - 7], "not a DER TimeStampResp");
        check(&vec![0x30; 70 << 10], "larger than pinhook reads");
        let mut nested = Vec::new();
        for _ in 0..2000 {
            let mut outer = vec![0x30];
            let length = nested.len();
            if length < 0x80 {
                outer.push(length as u8);
            } else if length < 0x100 {
                outer.extend([0x81, length as u8]);
            } else {
                outer.extend([0x82, (length >> 8) as u8, length as u8]);
            }
            outer.extend(nested);
            nested = outer;
        }
        check(&nested, "not a DER TimeStampResp");
        let tweaked = |tweak| tsa.stamp_with(b"signature", NOW, tweak);
        check(
            &tweaked(Tweak {
                status: 2,
                ..Tweak::default()
            }),
            "did not grant the timestamp (status 2)",
        );
        check(
            &tweaked(Tweak {
                two_signers: true,
                ..Tweak::default()
            }),
            "not exactly one signer",
        );
        check(
            &tweaked(Tweak {
                digest_of: Some(b"other content".to_vec()),
                ..Tweak::default()
            }),
            "signed message digest is not its TSTInfo's",
        );
        check(
            &tweaked(Tweak {
                certificate_hash_of: Some(tsa.root.clone()),
                ..Tweak::default()
            }),
            "names another signing certificate than its authority's",
        );
        let by_key = tweaked(Tweak {
            by_key_identifier: true,
            ..Tweak::default()
        });
        assert_eq!(timestamped(&by_key, b"signature", &authorities), Ok(NOW));
        fails(
            timestamped(&by_key, b"signature", &[TestTsa::new().authority()]),
            "not signed by a timestamp authority",
        );
        // a signing certificate whose usage is time stamping but not critical, or code signing
        for tsa in [
            TestTsa::with_usage(TIME_STAMPING, false),
            TestTsa::with_usage(CODE_SIGNING, true),
        ] {
            let stamp = tsa.stamp(b"signature", NOW);
            fails(
                timestamped(&stamp, b"signature", &[tsa.authority()]),
                "not for time stamping only",
            );
        }
        // every prefix, and every byte changed, fails without a panic
        for end in 0..good.len() {
            assert!(timestamped(&good[..end], b"signature", &authorities).is_err());
        }
        // (but SignedData's digestAlgorithms, a hint for one-pass readers that no signature
        // covers and that sigstore-go does not read either)
        let hint: &[u8] = &[
            0x31, 0x0d, 0x30, 0x0b, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
            0x01,
        ];
        let hint = good.windows(hint.len()).position(|w| w == hint).unwrap();
        for at in (0..good.len()).filter(|at| !(hint..hint + 15).contains(at)) {
            let mut changed = good.clone();
            changed[at] ^= 0x41;
            assert!(
                timestamped(&changed, b"signature", &authorities).is_err(),
                "byte {at} changed still verifies"
            );
        }
    }

    #[test]
    fn a_timestamp_outside_its_chain_or_period_fails() {
        let tsa = TestTsa::new();
        // before the certificates' notBefore (rcgen: 1975)
        let early = tsa.stamp(b"signature", 100);
        fails(
            timestamped(&early, b"signature", &[tsa.authority()]),
            "does not chain to its root at the timestamp's time",
        );
        let stamp = tsa.stamp(b"signature", NOW);
        let mut later = tsa.authority();
        later.valid.start = NOW + 1;
        fails(
            timestamped(&stamp, b"signature", &[later]),
            "outside the period",
        );
    }

    /// A scratch directory for OpenSSL holding `tsa`'s certificates (PEM), and the `openssl`
    /// command run in it, which must succeed.
    fn openssl_scratch(tsa: &TestTsa, name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "pinhook-openssl-{name}-{}-{}",
            std::process::id(),
            Sha256::digest(&tsa.leaf)[0]
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let pem = |der: &[u8]| {
            format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                STANDARD.encode(der)
            )
        };
        std::fs::write(dir.join("leaf.pem"), pem(&tsa.leaf)).unwrap();
        std::fs::write(dir.join("root.pem"), pem(&tsa.root)).unwrap();
        dir
    }

    /// `openssl args` run in `dir`: its output.
    fn openssl(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
        std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (scripts/install-test-deps.sh installs it)")
    }

    /// Another implementation's timestamps read: OpenSSL's `ts -reply` (a TSA of its own, with
    /// an accuracy, ordering, its name, the signer's chain in the token and an ESS
    /// signingCertificateV2), signing with the test TSA's key and certificate.
    #[test]
    fn an_openssl_timestamp_verifies_to_its_time() {
        let tsa = TestTsa::new();
        let dir = openssl_scratch(&tsa, "reply");
        let write = |name: &str, text: &[u8]| std::fs::write(dir.join(name), text).unwrap();
        write("key.pem", tsa.key_pem().as_bytes());
        write("serial", b"01\n");
        let signature = b"a signature's own bytes";
        write("signature", signature);
        write(
            "ts.cnf",
            format!(
                "[ tsa ]\ndefault_tsa = test\n[ test ]\nserial = {}\nsigner_digest = sha256\n\
                 default_policy = 1.3.6.1.4.1.57264.2\ndigests = sha256, sha384, sha512\n\
                 accuracy = secs:1\nordering = yes\ntsa_name = yes\ness_cert_id_chain = no\n\
                 ess_cert_id_alg = sha256\n",
                dir.join("serial").display()
            )
            .as_bytes(),
        );
        let openssl = |args: &[&str]| {
            let out = openssl(&dir, args);
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        openssl(&[
            "ts",
            "-query",
            "-data",
            "signature",
            "-sha256",
            "-cert",
            "-out",
            "query",
        ]);
        openssl(&[
            "ts",
            "-reply",
            "-config",
            "ts.cnf",
            "-queryfile",
            "query",
            "-signer",
            "leaf.pem",
            "-inkey",
            "key.pem",
            "-chain",
            "root.pem",
            "-out",
            "reply",
        ]);
        let reply = std::fs::read(dir.join("reply")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let at = timestamped(&reply, signature, &[tsa.authority()]).unwrap();
        assert!((now - 300..=now + 5).contains(&at), "{at} vs {now}");
        fails(
            timestamped(&reply, b"another signature", &[tsa.authority()]),
            "of other bytes than its signature",
        );
        fails(
            timestamped(&reply, signature, &[TestTsa::new().authority()]),
            "not signed by a timestamp authority of the trusted root",
        );
    }

    /// The test TSA's timestamps are RFC 3161's as another implementation reads them: OpenSSL's
    /// `ts -verify` accepts one for its signature's bytes and refuses it for others.
    #[test]
    fn openssl_verifies_the_test_tsas_timestamps() {
        let tsa = TestTsa::new();
        let dir = openssl_scratch(&tsa, "verify");
        let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
        write("signature", b"signed");
        write("other", b"something else");
        write("reply", &tsa.stamp(b"signed", 1_800_000_000));
        let verify = |data: &str| {
            openssl(
                &dir,
                &[
                    "ts",
                    "-verify",
                    "-data",
                    data,
                    "-in",
                    "reply",
                    "-CAfile",
                    "root.pem",
                    "-untrusted",
                    "leaf.pem",
                ],
            )
        };
        let good = verify("signature");
        let bad = verify("other");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(good.status.success(), "{good:?}");
        assert!(!bad.status.success(), "{bad:?}");
    }

    #[test]
    fn generalized_times_with_fractions_read() {
        let time = |text: &str| {
            generalized_time(&Any::new(Tag::GeneralizedTime, text.as_bytes()).unwrap())
        };
        assert_eq!(time("20250725195304Z"), Some(STAGING_TIME));
        assert_eq!(time("20250725195304.125Z"), Some(STAGING_TIME));
        for bad in [
            "20250725195304",
            "20250725195304.Z",
            "2025072519530Z",
            "20251325195304Z",
            "2025072519530+Z",
        ] {
            assert_eq!(time(bad), None, "{bad}");
        }
    }
}
