//! Keyless signatures as `cosign sign` makes them without a key: the signature layer carries a
//! short-lived certificate (annotation `dev.sigstore.cosign/certificate`) issued by a Fulcio CA
//! to an OIDC identity, its chain, and a transparency log bundle (`dev.sigstore.cosign/bundle`):
//! a `hashedrekord` entry and the log's signed entry timestamp (SET). A layer counts as signed by
//! that identity only when, offline and against the entry's trusted root ([`TrustedRoot`]):
//! the SET is a trusted log's, the entry is of this very signature, payload and certificate, the
//! certificate chains to a trusted authority at the time the log integrated the entry (the
//! certificate lives minutes; the log's time is what proves it signed while valid), a CT log of
//! the root published the certificate (its SCT, [`super::sct`]; unless the entry says
//! `insecureIgnoreSCT`), and the certificate's key made the signature. Only then is its identity (SAN email or URI, and the
//! issuer extension 1.3.6.1.4.1.57264.1.8, or .1.1) compared with the entry's identities, exact
//! or by regular expression (unanchored, as cosign's `--certificate-identity-regexp`).
//!
//! Owns: that reading of a layer, the identities and their matching, and the fingerprint of what
//! an entry trusts keyless. Never: the payload's digest (`simple_signing` reads it) or any I/O.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use rustls::pki_types::{CertificateDer, UnixTime};
use sha2::{Digest as _, Sha256};
use sigstore::crypto::{CosignVerificationKey, Signature};

use super::layer::SignatureLayer;
pub use super::tlog::BUNDLE_ANNOTATION;
use super::tlog::{logged_rekord, LayerBundle, Vouched};
use super::trusted_root::TrustedRoot;

/// The annotation holding a keyless signature's certificate (PEM).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// The annotation holding the certificate's chain (PEM, the CA's certificates).
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";

/// The extended key usage Fulcio certificates carry: code signing (1.3.6.1.5.5.7.3.3).
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];
/// Fulcio's OIDC issuer extension (a DER UTF8String), and its deprecated raw form.
const ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
const ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
/// Certificates of a layer's chain read; a chain with more is untrusted.
pub(crate) const MAX_CHAIN: usize = 8;
/// The longest identity text a message quotes.
const MAX_QUOTED: usize = 200;
/// The largest compiled regular expression of an identity.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// An exact text or a regular expression (matching anywhere, as cosign's do).
#[derive(Debug, Clone)]
pub enum Matcher {
    Exact(String),
    Pattern(regex::Regex),
}

impl Matcher {
    /// The regular expression `pattern`, bounded in compiled size.
    pub fn pattern(pattern: &str) -> Result<Matcher, String> {
        regex::RegexBuilder::new(pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map(Matcher::Pattern)
            .map_err(|e| crate::text::one_line(&e.to_string()).into_owned())
    }

    fn matches(&self, text: &str) -> bool {
        match self {
            Matcher::Exact(exact) => exact == text,
            Matcher::Pattern(pattern) => pattern.is_match(text),
        }
    }

    fn describe(&self) -> String {
        match self {
            Matcher::Exact(exact) => format!("={exact}"),
            Matcher::Pattern(pattern) => format!("~{}", pattern.as_str()),
        }
    }
}

/// An identity an entry trusts: the OIDC issuer and the subject (email or URI).
#[derive(Debug, Clone)]
pub struct Identity {
    pub issuer: Matcher,
    pub subject: Matcher,
}

/// Who a certificate was issued to, as it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    pub issuer: String,
    pub subjects: Vec<String>,
}

impl Signer {
    /// `subject (issuer)`, on one line and bounded.
    pub fn describe(&self) -> String {
        let text = format!("{} ({})", self.subjects.join(", "), self.issuer);
        let text = crate::text::one_line(&text).into_owned();
        match text.char_indices().nth(MAX_QUOTED) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        }
    }
}

/// What one layer's keyless evidence says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// The trusted root vouches for the certificate and the entry, and the certificate's key
    /// made the signature: the layer is `signer`'s.
    Signed(Signer),
    /// A keyless signature the trusted root does not vouch for, and why.
    Untrusted(String),
}

/// What an entry trusts keyless: a root and identities (any of them).
#[derive(Debug, Clone)]
pub struct Keyless {
    root: Arc<TrustedRoot>,
    identities: Vec<Identity>,
    /// Whether a certificate needs no SCT (`insecureIgnoreSCT`).
    ignore_sct: bool,
    fingerprint: String,
}

impl Keyless {
    /// What `identities` signing under `root` are trusted for, their certificates published in
    /// a CT log of the root.
    pub fn new(root: Arc<TrustedRoot>, identities: Vec<Identity>) -> Keyless {
        Keyless::with_sct(root, identities, false)
    }

    /// [`Keyless::new`], but a certificate needs no SCT (`insecureIgnoreSCT`, as `cosign
    /// verify --insecure-ignore-sct`): for a private Sigstore without a CT log.
    pub fn ignoring_sct(root: Arc<TrustedRoot>, identities: Vec<Identity>) -> Keyless {
        Keyless::with_sct(root, identities, true)
    }

    fn with_sct(root: Arc<TrustedRoot>, identities: Vec<Identity>, ignore_sct: bool) -> Keyless {
        let mut names: Vec<String> = identities
            .iter()
            .map(|i| format!("{}\t{}", i.issuer.describe(), i.subject.describe()))
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut hash = Sha256::new();
        hash.update(root.fingerprint().as_bytes());
        if ignore_sct {
            hash.update(b"\ninsecureIgnoreSCT");
        }
        for name in names {
            hash.update(b"\n");
            hash.update(name.as_bytes());
        }
        Keyless {
            fingerprint: format!("sha256:{:x}", hash.finalize()),
            root,
            identities,
            ignore_sct,
        }
    }

    /// `sha256:<hex>` over the root's fingerprint, whether SCTs are ignored, and the identities.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Whether an identity of the entry names `signer`.
    pub fn admits(&self, signer: &Signer) -> bool {
        self.identities.iter().any(|identity| {
            identity.issuer.matches(&signer.issuer)
                && signer.subjects.iter().any(|s| identity.subject.matches(s))
        })
    }

    /// The layer's keyless evidence; `None` when it carries no certificate (a key's signature).
    pub fn evidence(&self, layer: &SignatureLayer<'_>) -> Option<Evidence> {
        let certificate = layer.certificate?;
        Some(match self.layer_signer(layer, certificate) {
            Ok(signer) => Evidence::Signed(signer),
            Err(why) => Evidence::Untrusted(why.to_string()),
        })
    }

    fn layer_signer(
        &self,
        layer: &SignatureLayer<'_>,
        certificate: &str,
    ) -> Result<Signer, Cow<'static, str>> {
        let bundle = LayerBundle::read(layer.bundle)?;
        let (_, pem) = x509_parser::pem::parse_x509_pem(certificate.trim().as_bytes())
            .map_err(|_| "its certificate is not PEM")?;
        let mut chain = Vec::new();
        if let Some(text) = layer.chain {
            for block in x509_parser::pem::Pem::iter_from_buffer(text.as_bytes()) {
                let block = block.map_err(|_| "its chain is not PEM")?;
                if chain.len() == MAX_CHAIN {
                    return Err(Cow::Borrowed("its chain is longer than pinhook reads"));
                }
                chain.push(block.contents);
            }
        }
        let signature = STANDARD
            .decode(layer.signature.trim())
            .map_err(|_| "its signature is not base64")?;
        self.signer(&Logged {
            certificate: &pem.contents,
            chain: &chain,
            entry: Vouched::Promised(bundle.entry()),
            signed: layer.payload,
            signature: &signature,
            logged: &|body: &[u8]| logged_rekord(body, layer.payload, &signature, &pem.contents),
        })
    }

    /// Who signed `logged`, if the trusted root vouches for it: the log's word on the entry
    /// (its SET, or its inclusion proof and timestamps), the entry of this signature
    /// (`logged.logged`), the certificate's chain at every time the log's word gives, its SCT,
    /// and the certificate's key over the bytes signed.
    pub(crate) fn signer(&self, logged: &Logged<'_>) -> Result<Signer, Cow<'static, str>> {
        let (_, parsed) = x509_parser::parse_x509_certificate(logged.certificate)
            .map_err(|_| "its certificate is not a certificate")?;
        let times = super::tlog::logged(
            &self.root,
            &logged.entry,
            logged.logged,
            "the log's entry is of another signature, payload or certificate",
        )?;
        // The leaf must be for code signing; an intermediate may say nothing of its usages, as
        // Go's crypto/x509 (cosign, policy-controller) reads a chain.
        let code_signing = parsed
            .extended_key_usage()
            .ok()
            .flatten()
            .is_some_and(|eku| eku.value.code_signing);
        if !code_signing {
            return Err(Cow::Borrowed("its certificate is not for code signing"));
        }
        let mut issuer_key = Vec::new();
        for time in times {
            issuer_key = self.chains(logged.certificate, logged.chain, time)?;
        }
        if !self.ignore_sct {
            super::sct::published(&parsed, logged.certificate, &issuer_key, &self.root)?;
        }
        let key = CosignVerificationKey::try_from_der(parsed.public_key().raw)
            .map_err(|_| "its certificate's key is of a kind cosign does not sign with")?;
        key.verify_signature(Signature::Raw(logged.signature), logged.signed)
            .map_err(|_| "its certificate's key did not make the signature")?;
        signer_of(&parsed).ok_or(Cow::Borrowed(
            "its certificate names no OIDC issuer or subject",
        ))
    }

    /// Whether `der` chains, at `time`, to an authority of the root trusted then, through the
    /// root's intermediates and `chain`, each certificate for code signing where it names its
    /// usages: its issuer's key (SubjectPublicKeyInfo,
    /// DER) if so; why not says what the path builder found (expired, unknown issuer, …).
    fn chains(
        &self,
        der: &[u8],
        chain: &[Vec<u8>],
        time: i64,
    ) -> Result<Vec<u8>, Cow<'static, str>> {
        const UNTRUSTED: &str =
            "its certificate was not issued by an authority of the trusted root at the logged time";
        let time = u64::try_from(time).map_err(|_| UNTRUSTED)?;
        let mut intermediates: Vec<CertificateDer<'_>> = chain
            .iter()
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        let mut roots = Vec::new();
        for authority in self.root.authorities_at(time as i64) {
            intermediates.extend(
                authority
                    .intermediates
                    .iter()
                    .map(|c| CertificateDer::from(c.as_slice())),
            );
            roots.push(CertificateDer::from(authority.root.as_slice()));
        }
        let (anchors, anchored): (Vec<_>, Vec<_>) = roots
            .iter()
            .filter_map(|root| Some((webpki::anchor_from_trusted_cert(root).ok()?, root)))
            .unzip();
        let leaf = CertificateDer::from(der);
        let leaf = webpki::EndEntityCert::try_from(&leaf)
            .map_err(|e| Cow::Owned(format!("{UNTRUSTED} ({e})")))?;
        let path = leaf
            .verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &anchors,
                &intermediates,
                UnixTime::since_unix_epoch(Duration::from_secs(time)),
                // (the leaf's own usage is checked by the caller)
                webpki::KeyUsage::required_if_present(CODE_SIGNING),
                None,
                None,
            )
            .map_err(|e| Cow::Owned(format!("{UNTRUSTED} ({e})")))?;
        // The leaf's issuer: the path's first intermediate, or else its anchor.
        if let Some(issuer) = path.intermediate_certificates().next() {
            return Ok(issuer.subject_public_key_info().as_ref().to_vec());
        }
        let anchor = anchors
            .iter()
            .position(|a| std::ptr::eq(a, path.anchor()))
            .and_then(|i| anchored.get(i))
            .ok_or(UNTRUSTED)?;
        let (_, root) = x509_parser::parse_x509_certificate(anchor).map_err(|_| UNTRUSTED)?;
        Ok(root.tbs_certificate.subject_pki.raw.to_vec())
    }
}

/// A certificate's signature and the log's word on it, however it was carried (a tag-scheme
/// layer's annotations, or a Sigstore bundle).
pub(crate) struct Logged<'a> {
    /// The signing certificate, DER.
    pub certificate: &'a [u8],
    /// Certificates between it and the root the carrier gave, DER.
    pub chain: &'a [Vec<u8>],
    pub entry: Vouched<'a>,
    /// The bytes signed, and the signature, raw.
    pub signed: &'a [u8],
    pub signature: &'a [u8],
    /// Whether the log's entry (decoded) is of this signature, payload and certificate.
    pub logged: &'a dyn Fn(&[u8]) -> bool,
}

/// The identity a Fulcio certificate names: its issuer extension and its email and URI SANs.
fn signer_of(certificate: &x509_parser::certificate::X509Certificate<'_>) -> Option<Signer> {
    use x509_parser::extensions::GeneralName;
    let mut issuer = None;
    for extension in certificate.extensions() {
        match extension.oid.to_id_string().as_str() {
            ISSUER_V2 => {
                let (_, value) =
                    x509_parser::der_parser::der::parse_der_utf8string(extension.value).ok()?;
                issuer = Some(value.as_str().ok()?.to_string());
            }
            ISSUER_V1 if issuer.is_none() => {
                issuer = Some(std::str::from_utf8(extension.value).ok()?.to_string());
            }
            _ => {}
        }
    }
    let subjects: Vec<String> = certificate
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::RFC822Name(email) => Some(email.to_string()),
                    GeneralName::URI(uri) => Some(uri.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    match (issuer, subjects.is_empty()) {
        (Some(issuer), false) => Some(Signer { issuer, subjects }),
        _ => None,
    }
}

/// The tests' own Sigstore, shared with the integration tests.
#[cfg(test)]
#[path = "../../tests/common/sigstore_authority.rs"]
pub(crate) mod test_authority;

/// The tag-scheme layer `cosign sign` keyless leaves: `payload` and what `made` holds.
#[cfg(test)]
pub(crate) fn signed_layer<'a>(
    payload: &'a [u8],
    made: &'a test_authority::KeylessSignature,
) -> SignatureLayer<'a> {
    SignatureLayer {
        payload,
        signature: &made.signature,
        certificate: Some(&made.certificate),
        chain: Some(&made.chain),
        bundle: Some(&made.bundle),
    }
}

#[cfg(test)]
mod tests {
    use super::test_authority::{KeylessSignature, Sct, TestSigstore};
    use super::*;
    use rcgen::{ExtendedKeyUsagePurpose, SigningKey as _};

    const ISSUER: &str = "https://token.actions.githubusercontent.com";
    const SUBJECT: &str = "https://github.com/acme/app/.github/workflows/release.yml@refs/tags/v1";

    fn keyless(sigstore: &TestSigstore, identities: Vec<Identity>) -> Keyless {
        let root = TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap();
        Keyless::new(Arc::new(root), identities)
    }

    fn exact(issuer: &str, subject: &str) -> Identity {
        Identity {
            issuer: Matcher::Exact(issuer.to_string()),
            subject: Matcher::Exact(subject.to_string()),
        }
    }

    /// `signed` is evidence of a signer under `keyless`, else panics saying what it was.
    fn assert_signed(keyless: &Keyless, signed: &KeylessSignature, what: &str) {
        let found = evidence(keyless, b"payload", signed);
        assert!(
            matches!(found, Some(Evidence::Signed(_))),
            "{what}: {found:?}"
        );
    }

    fn evidence(keyless: &Keyless, payload: &[u8], signed: &KeylessSignature) -> Option<Evidence> {
        keyless.evidence(&super::signed_layer(payload, signed))
    }

    #[test]
    fn a_logged_certificate_of_the_trusted_authority_names_its_signer() {
        let sigstore = TestSigstore::new();
        let keyless = keyless(&sigstore, vec![exact(ISSUER, SUBJECT)]);
        let signed = sigstore.sign(b"payload", ISSUER, SUBJECT);
        let signer = Signer {
            issuer: ISSUER.to_string(),
            subjects: vec![SUBJECT.to_string()],
        };
        assert_eq!(
            evidence(&keyless, b"payload", &signed),
            Some(Evidence::Signed(signer.clone()))
        );
        assert!(keyless.admits(&signer));
        let email = sigstore.sign(
            b"payload",
            "https://accounts.google.com",
            "dev@acme.example",
        );
        match evidence(&keyless, b"payload", &email) {
            Some(Evidence::Signed(s)) => {
                assert_eq!(s.subjects, ["dev@acme.example"]);
                assert!(!keyless.admits(&s));
            }
            other => panic!("{other:?}"),
        }
    }

    /// Under a root of two intermediates, the SCT is over the key of the leaf's own issuer (the
    /// path's first intermediate): signed naming the next intermediate's key, it does not
    /// verify.
    #[test]
    fn the_sct_is_of_the_leafs_own_issuer_under_two_intermediates() {
        let sigstore = TestSigstore::with_two_intermediates();
        let keyless = keyless(&sigstore, vec![exact(ISSUER, SUBJECT)]);
        let good = sigstore.sign(b"payload", ISSUER, SUBJECT);
        assert_signed(&keyless, &good, "two intermediates");
        let upper = sigstore.sign_with(b"payload", ISSUER, SUBJECT, Sct::IssuersIssuerKey);
        match evidence(&keyless, b"payload", &upper) {
            Some(Evidence::Untrusted(why)) => assert!(why.contains("SCT does not verify"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// The leaf must say it is for code signing; an intermediate that names no usage passes
    /// (as Go's crypto/x509 reads a chain), one that names others does not.
    #[test]
    fn the_leaf_is_for_code_signing_and_no_intermediate_says_otherwise() {
        for eku in [None, Some(ExtendedKeyUsagePurpose::CodeSigning)] {
            let sigstore = TestSigstore::with_two_intermediates_using(eku.clone());
            let keyless = keyless(&sigstore, vec![exact(ISSUER, SUBJECT)]);
            let good = sigstore.sign(b"payload", ISSUER, SUBJECT);
            assert_signed(&keyless, &good, &format!("intermediates' usage {eku:?}"));
            let mut leaf = good.clone();
            let (certificate, key) = sigstore.certificate_for_anything(ISSUER, SUBJECT);
            leaf.signature = STANDARD.encode(key.sign(b"payload").unwrap());
            leaf.bundle =
                sigstore.log_entry(b"payload", &leaf.signature, &certificate, sigstore.now);
            leaf.certificate = certificate;
            match evidence(&keyless, b"payload", &leaf) {
                Some(Evidence::Untrusted(why)) => {
                    assert!(why.contains("not for code signing"), "{why}")
                }
                other => panic!("{other:?}"),
            }
        }
        let server_only =
            TestSigstore::with_two_intermediates_using(Some(ExtendedKeyUsagePurpose::ServerAuth));
        let keyless = keyless(&server_only, vec![exact(ISSUER, SUBJECT)]);
        let signed = server_only.sign(b"payload", ISSUER, SUBJECT);
        match evidence(&keyless, b"payload", &signed) {
            Some(Evidence::Untrusted(why)) => {
                assert!(why.contains("not issued by an authority"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn identities_match_exactly_or_by_pattern_issuer_and_subject_both() {
        let sigstore = TestSigstore::new();
        let pattern = Identity {
            issuer: Matcher::Exact(ISSUER.to_string()),
            subject: Matcher::pattern(r"^https://github\.com/acme/.*@refs/tags/v\d+$").unwrap(),
        };
        let keyless = keyless(&sigstore, vec![pattern]);
        let signer = |issuer: &str, subject: &str| Signer {
            issuer: issuer.to_string(),
            subjects: vec![subject.to_string()],
        };
        assert!(keyless.admits(&signer(ISSUER, SUBJECT)));
        assert!(!keyless.admits(&signer(
            ISSUER,
            "https://github.com/evil/app/.github/workflows/x.yml@refs/tags/v1"
        )));
        assert!(!keyless.admits(&signer("https://evil.example", SUBJECT)));
        assert!(Matcher::pattern("(").is_err());
        assert!(
            Matcher::pattern(&"a{1000}{1000}".repeat(3)).is_err(),
            "bounded in size"
        );
    }

    /// Each way a keyless signature can lack the trusted root's word, with the input that
    /// makes it.
    #[test]
    fn evidence_the_trusted_root_does_not_vouch_for_is_untrusted_and_says_why() {
        let sigstore = TestSigstore::new();
        let keyless = keyless(&sigstore, vec![exact(ISSUER, SUBJECT)]);
        let good = sigstore.sign(b"payload", ISSUER, SUBJECT);
        let untrusted =
            |signed: &KeylessSignature, payload: &[u8]| match evidence(&keyless, payload, signed) {
                Some(Evidence::Untrusted(why)) => why,
                other => panic!("{other:?}"),
            };

        // Another CA, logged in the trusted log.
        let other_ca = sigstore.sharing_log().sign(b"payload", ISSUER, SUBJECT);
        let why = untrusted(&other_ca, b"payload");
        assert!(why.contains("not issued by an authority"), "{why}");
        assert!(
            why.contains("InvalidSignature"),
            "the path builder's reason kept: {why}"
        );
        // Another log altogether.
        let other_log = TestSigstore::new().sign(b"payload", ISSUER, SUBJECT);
        assert!(untrusted(&other_log, b"payload").contains("no log"));
        // A timestamp tampered with: the SET no longer verifies.
        let mut tampered = good.clone();
        tampered.bundle = tampered.bundle.replace(
            &format!("\"integratedTime\":{}", sigstore.now),
            &format!("\"integratedTime\":{}", sigstore.now + 1),
        );
        assert!(untrusted(&tampered, b"payload").contains("does not verify"));
        // The entry logged is of another payload.
        let mut other_entry = good.clone();
        other_entry.bundle =
            sigstore.log_entry(b"other", &good.signature, &good.certificate, sigstore.now);
        assert!(untrusted(&other_entry, b"payload").contains("another signature"));
        // Logged at a time the certificate was not valid (an hour later).
        let mut late = good.clone();
        late.bundle = sigstore.log_entry(
            b"payload",
            &good.signature,
            &good.certificate,
            sigstore.now + 3600,
        );
        let why = untrusted(&late, b"payload");
        assert!(why.contains("not issued by an authority"), "{why}");
        assert!(
            why.contains("Expired"),
            "the path builder's reason kept: {why}"
        );
        // The signature is not the certificate's key's (payload swapped, entry made to match).
        let swapped = sigstore.sign(b"other", ISSUER, SUBJECT);
        let mut forged = swapped.clone();
        forged.bundle = sigstore.log_entry(
            b"payload",
            &swapped.signature,
            &swapped.certificate,
            sigstore.now,
        );
        assert!(untrusted(&forged, b"payload").contains("did not make the signature"));
        // A certificate no CT log of the root published, or one whose SCT is over another
        // certificate: not trusted, unless the entry ignores SCTs.
        let unpublished = sigstore.sign_with(b"payload", ISSUER, SUBJECT, Sct::None);
        assert!(untrusted(&unpublished, b"payload").contains("carries no SCT"));
        let misissued =
            sigstore.sign_with(b"payload", ISSUER, SUBJECT, Sct::OverAnotherCertificate);
        assert!(untrusted(&misissued, b"payload").contains("SCT does not verify"));
        let root = Arc::new(TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap());
        let ignoring = Keyless::ignoring_sct(root, vec![exact(ISSUER, SUBJECT)]);
        assert!(matches!(
            evidence(&ignoring, b"payload", &unpublished),
            Some(Evidence::Signed(_))
        ));
        assert_ne!(ignoring.fingerprint(), keyless.fingerprint());
        // No bundle, a malformed one, a certificate that is not one.
        let mut no_bundle = good.clone();
        no_bundle.bundle = String::new();
        assert!(untrusted(&no_bundle, b"payload").contains("malformed"));
        let layer = SignatureLayer {
            payload: b"payload",
            signature: &good.signature,
            certificate: Some(&good.certificate),
            chain: None,
            bundle: None,
        };
        assert!(
            matches!(keyless.evidence(&layer), Some(Evidence::Untrusted(why)) if why.contains("no transparency log bundle"))
        );
        let mut not_pem = good.clone();
        not_pem.certificate =
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_string();
        assert!(untrusted(&not_pem, b"payload").starts_with("its certificate is not"));
    }

    #[test]
    fn a_layer_without_a_certificate_has_no_keyless_evidence() {
        let sigstore = TestSigstore::new();
        let keyless = keyless(&sigstore, vec![exact(ISSUER, SUBJECT)]);
        let layer = SignatureLayer {
            payload: b"payload",
            signature: "c2ln",
            certificate: None,
            chain: None,
            bundle: None,
        };
        assert_eq!(keyless.evidence(&layer), None);
    }

    #[test]
    fn the_fingerprint_names_the_root_and_the_set_of_identities() {
        let sigstore = TestSigstore::new();
        let a = exact(ISSUER, SUBJECT);
        let b = exact(ISSUER, "dev@acme.example");
        let ab = keyless(&sigstore, vec![a.clone(), b.clone()]);
        let ba = keyless(&sigstore, vec![b.clone(), a.clone(), b]);
        assert_eq!(ab.fingerprint(), ba.fingerprint());
        assert_ne!(
            ab.fingerprint(),
            keyless(&sigstore, vec![a.clone()]).fingerprint()
        );
        assert_ne!(
            keyless(&sigstore, vec![a.clone()]).fingerprint(),
            keyless(&TestSigstore::new(), vec![a]).fingerprint()
        );
    }

    #[test]
    fn a_signer_is_described_on_one_bounded_line() {
        let signer = Signer {
            issuer: "https://issuer\n\u{1b}[31m".to_string(),
            subjects: vec!["x".repeat(10_000)],
        };
        let text = signer.describe();
        assert!(!text.contains('\n') && !text.contains('\u{1b}'), "{text}");
        assert!(text.chars().count() <= MAX_QUOTED + 1);
    }
}
