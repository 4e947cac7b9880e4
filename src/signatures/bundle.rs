//! Sigstore bundles as cosign 3 attaches an image's signature (`cosign sign`, the new bundle
//! format): an OCI referrer of the image whose one layer is a bundle
//! (`application/vnd.dev.sigstore.bundle.v0.3+json`) holding a DSSE envelope over an in-toto
//! statement with predicate type `https://sigstore.dev/cosign/sign/v1` that names the image's
//! digest as its subject, and the verification material: a key's hint, or a certificate and
//! transparency log entries. A bundle counts when a trusted key made the envelope's signature
//! over its PAE (and, where the entry names a transparency log, an entry of that log is of this
//! signature and key, [`super::tlog`]), or a trusted identity did keyless
//! ([`super::keyless`]), logged as a `dsse` entry (cosign before 3.1) or a `hashedrekord` of the
//! PAE (cosign 3.1 on): a Rekor v1 entry with its signed entry timestamp, or a Rekor v2 entry
//! by its inclusion proof and RFC 3161 timestamps (its entries read by [`entry`]); **and** its
//! statement's subject is the digest pinned. A bundle of another predicate (an attestation) is
//! none of the image's signatures; one pinhook cannot read is counted untrusted, saying why.
//!
//! Owns: reading a bundle and judging it into a [`Tally`]. Never: finds or fetches one (the
//! registry client does).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;

mod entry;

use self::entry::{first_that_holds, BundleEntry, TimestampData, TlogEntry};
use super::keyless::{Logged, MAX_CHAIN};
use super::tlog::{logged_rekord, logged_verifier, HashV2, SignatureV2};
use super::trust::Trust;
use super::verdict::{Tally, Verdict};
use crate::reference::Digest;

/// The media type (and artifact type) of a bundle, as cosign 3 attaches it.
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The prefix every bundle version's media type shares.
const BUNDLE_MEDIA_TYPES: &str = "application/vnd.dev.sigstore.bundle";
/// The payload type of an in-toto statement in a DSSE envelope.
pub const IN_TOTO: &str = "application/vnd.in-toto+json";
/// The predicate type of cosign's image signature statement.
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// Signatures of one envelope read.
const MAX_SIGNATURES: usize = 4;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BundleFile {
    media_type: String,
    verification_material: Material,
    #[serde(default)]
    dsse_envelope: Option<Envelope>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Material {
    #[serde(default)]
    certificate: Option<Raw>,
    #[serde(default)]
    x509_certificate_chain: Option<Chain>,
    #[serde(default)]
    tlog_entries: Vec<TlogEntry>,
    #[serde(default)]
    timestamp_verification_data: Option<TimestampData>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct Chain {
    certificates: Vec<Raw>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    payload: String,
    payload_type: String,
    signatures: Vec<EnvelopeSignature>,
}

#[derive(Deserialize)]
struct EnvelopeSignature {
    sig: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Statement {
    #[serde(rename = "_type")]
    kind: String,
    predicate_type: String,
    subject: Vec<Subject>,
}

#[derive(Deserialize)]
struct Subject {
    digest: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct DsseEntry {
    kind: String,
    spec: DsseSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DsseSpec {
    payload_hash: Hash,
    signatures: Vec<DsseEntrySignature>,
}

#[derive(Deserialize)]
struct Hash {
    algorithm: String,
    value: String,
}

#[derive(Deserialize)]
struct DsseEntrySignature {
    signature: String,
    verifier: String,
}

/// A Rekor v2 `dsse` 0.0.2 entry.
#[derive(Deserialize)]
struct DsseEntryV2 {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    spec: DsseSpecV2,
}

#[derive(Deserialize)]
struct DsseSpecV2 {
    #[serde(rename = "dsseV002")]
    dsse: DsseV2,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DsseV2 {
    payload_hash: HashV2,
    signatures: Vec<SignatureV2>,
}

/// DSSE's pre-authentication encoding of `payload` of `payload_type`: what is signed.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Judges `bundle` under `trust` for `pinned` into `tally`; `Some(verified)` when it holds.
pub(crate) fn tally(
    bundle: &[u8],
    trust: &Trust,
    pinned: &Digest,
    tally: &mut Tally,
) -> Option<Verdict> {
    let unreadable = |tally: &mut Tally, why: &str| {
        tally.seen = true;
        tally.untrusted(format!("a Sigstore bundle pinhook cannot read: {why}"));
        None
    };
    let Ok(file) = serde_json::from_slice::<BundleFile>(bundle) else {
        return unreadable(tally, "not a bundle");
    };
    if !file.media_type.starts_with(BUNDLE_MEDIA_TYPES) {
        return unreadable(tally, "not a bundle media type");
    }
    let Some(envelope) = &file.dsse_envelope else {
        return unreadable(
            tally,
            "a message signature, not an image signature (cosign signs a DSSE envelope)",
        );
    };
    if envelope.payload_type != IN_TOTO {
        return unreadable(tally, "its envelope is not an in-toto statement");
    }
    let Ok(payload) = STANDARD.decode(envelope.payload.trim()) else {
        return unreadable(tally, "its envelope's payload is not base64");
    };
    let Ok(statement) = serde_json::from_slice::<Statement>(&payload) else {
        return unreadable(tally, "its payload is not an in-toto statement");
    };
    if !statement.kind.starts_with("https://in-toto.io/Statement/v")
        || statement.predicate_type != COSIGN_SIGN_PREDICATE
    {
        // An attestation (provenance, an SBOM): none of the image's signatures.
        return None;
    }
    tally.seen = true;
    let signed = pae(&envelope.payload_type, &payload);
    let mut signers = Vec::new();
    for signature in envelope.signatures.iter().take(MAX_SIGNATURES) {
        let Ok(raw) = STANDARD.decode(signature.sig.trim()) else {
            continue;
        };
        for key in trust.keys() {
            if !key.signed_raw(&raw, &signed) {
                continue;
            }
            let logged = match trust.key_log() {
                None => Ok(()),
                Some(root) => key_logged(
                    &file.verification_material,
                    root,
                    &payload,
                    &signed,
                    &raw,
                    key.der(),
                ),
            };
            match logged {
                Ok(()) => signers.push(format!("key {}", key.fingerprint())),
                Err(why) => tally.untrusted(super::tlog::unlogged(key.fingerprint(), &why)),
            }
        }
        if let Some(keyless) = trust.keyless() {
            let evidence =
                match keyless_logged(&file.verification_material, &payload, &signed, &raw) {
                    Some(Ok(logged)) => logged.judge(keyless),
                    Some(Err(why)) => super::keyless::Evidence::Untrusted(why.to_string()),
                    None => continue,
                };
            signers.extend(tally.keyless(keyless, evidence));
        }
    }
    let pinned_text = pinned.to_string();
    let (algorithm, pinned_hex) = pinned_text.split_once(':').unwrap_or(("", ""));
    for signer in signers {
        if statement.subject.iter().any(|s| {
            s.digest
                .get(algorithm)
                .is_some_and(|d| d.eq_ignore_ascii_case(pinned_hex))
        }) {
            return Some(Verdict::Verified {
                signer: signer.into(),
            });
        }
        let named = statement
            .subject
            .iter()
            .find_map(|s| s.digest.get("sha256"))
            .map_or_else(
                || "no sha256 subject".to_string(),
                |d| format!("sha256:{d}"),
            );
        tally.other_digest(&named);
    }
    None
}

/// Whether a key bundle's envelope signature (`signature`, raw, over `signed`, the PAE of
/// `payload`) by `key` (its SubjectPublicKeyInfo) is logged in a log of `root`: the bundle's
/// entry with a SET, a `dsse` entry or a `hashedrekord` of the PAE naming that key.
fn key_logged(
    material: &Material,
    root: &super::TrustedRoot,
    payload: &[u8],
    signed: &[u8],
    signature: &[u8],
    key: &[u8],
) -> Result<(), std::borrow::Cow<'static, str>> {
    let is_of = |body: &[u8]| {
        logged_dsse(body, payload, signature, key) || logged_rekord(body, signed, signature, key)
    };
    first_that_holds(&BundleEntry::all(material)?, |entry| {
        super::tlog::logged(
            root,
            &entry.vouched(signature),
            &is_of,
            super::tlog::OTHER_KEY_ENTRY,
        )
    })
    .map(|_| ())
}

/// A keyless bundle's certificate, chain and log entries, owned.
struct BundleLogged {
    certificate: Vec<u8>,
    chain: Vec<Vec<u8>>,
    entries: Vec<Result<BundleEntry, &'static str>>,
    payload: Vec<u8>,
    signature: Vec<u8>,
    signed: Vec<u8>,
}

impl BundleLogged {
    fn judge(&self, keyless: &super::keyless::Keyless) -> super::keyless::Evidence {
        // cosign before 3.1 logs a `dsse` entry; from 3.1 a `hashedrekord` of the PAE.
        let logged = |body: &[u8]| {
            logged_dsse(body, &self.payload, &self.signature, &self.certificate)
                || logged_rekord(body, &self.signed, &self.signature, &self.certificate)
        };
        let result = first_that_holds(&self.entries, |entry| {
            keyless.signer(&Logged {
                certificate: &self.certificate,
                chain: &self.chain,
                entry: entry.vouched(&self.signature),
                signed: &self.signed,
                signature: &self.signature,
                logged: &logged,
            })
        });
        match result {
            Ok(signer) => super::keyless::Evidence::Signed(signer),
            Err(why) => super::keyless::Evidence::Untrusted(why.to_string()),
        }
    }
}

/// The keyless material of `material` for one envelope signature; `None` for a key bundle.
fn keyless_logged(
    material: &Material,
    payload: &[u8],
    signed: &[u8],
    signature: &[u8],
) -> Option<Result<BundleLogged, &'static str>> {
    let mut certificates: Vec<&Raw> =
        match (&material.certificate, &material.x509_certificate_chain) {
            (Some(certificate), _) => vec![certificate],
            (None, Some(chain)) => chain.certificates.iter().collect(),
            (None, None) => return None,
        };
    Some((|| {
        if certificates.is_empty() || certificates.len() > MAX_CHAIN + 1 {
            return Err("its certificate chain is empty or longer than pinhook reads");
        }
        let leaf = certificates.remove(0);
        let decode = |raw: &Raw| STANDARD.decode(raw.raw_bytes.trim());
        let certificate = decode(leaf).map_err(|_| "its certificate is not base64")?;
        let chain = certificates
            .into_iter()
            .map(decode)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| "its chain is not base64")?;
        Ok(BundleLogged {
            certificate,
            chain,
            entries: BundleEntry::all(material)?,
            payload: payload.to_vec(),
            signature: signature.to_vec(),
            signed: signed.to_vec(),
        })
    })())
}

/// Whether `body` is a `dsse` entry (Rekor v1, or v2's 0.0.2) of `payload`, signed with
/// `signature` (raw) by the verifier `der` (a certificate, or a key's SubjectPublicKeyInfo).
fn logged_dsse(body: &[u8], payload: &[u8], signature: &[u8], der: &[u8]) -> bool {
    if let Ok(entry) = serde_json::from_slice::<DsseEntryV2>(body) {
        let dsse = &entry.spec.dsse;
        return entry.kind == "dsse"
            && entry.api_version == "0.0.2"
            && dsse
                .payload_hash
                .is_sha256(&<sha2::Sha256 as sha2::Digest>::digest(payload))
            && dsse.signatures.iter().any(|s| s.is(signature, der));
    }
    let Ok(entry) = serde_json::from_slice::<DsseEntry>(body) else {
        return false;
    };
    let payload_hash = Digest::sha256_of(payload);
    let payload_hash = payload_hash.hex();
    entry.kind == "dsse"
        && entry.spec.payload_hash.algorithm == "sha256"
        && entry
            .spec
            .payload_hash
            .value
            .eq_ignore_ascii_case(payload_hash)
        && entry.spec.signatures.iter().any(|s| {
            STANDARD.decode(s.signature.trim()).ok().as_deref() == Some(signature)
                && logged_verifier(&s.verifier).as_deref() == Some(der)
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256};

    use super::*;
    use crate::signatures::keyless::test_authority::{key_bundle, statement, TestSigstore};
    use crate::signatures::keyless::{Identity, Keyless, Matcher};
    use crate::signatures::{judge_all, PublicKey, TrustedRoot};

    const ISSUER: &str = "https://token.actions.githubusercontent.com";
    const SUBJECT: &str = "https://github.com/acme/app/.github/workflows/release.yml@refs/tags/v1";
    const REPOSITORY: &str = "registry.example/team/app";

    fn digest(c: char) -> Digest {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .unwrap()
    }

    /// A trust of one key (its pair returned) and the identity `SUBJECT` under `sigstore`.
    fn trust(sigstore: &TestSigstore) -> (KeyPair, Trust) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let root = TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap();
        let identity = Identity {
            issuer: Matcher::Exact(ISSUER.to_string()),
            subject: Matcher::Exact(SUBJECT.to_string()),
        };
        let trust = Trust::new(
            vec![PublicKey::from_pem(&key.public_key_pem()).unwrap()],
            Some(Keyless::new(Arc::new(root), vec![identity])),
        );
        (key, trust)
    }

    fn verdict(bundle: &str, trust: &Trust, pinned: char) -> Verdict {
        judge_all(&[], &[bundle.as_bytes()], trust, &digest(pinned))
    }

    #[test]
    fn a_bundle_signed_by_a_trusted_key_or_identity_for_the_pinned_digest_is_verified() {
        let sigstore = TestSigstore::new();
        let (key, trust) = trust(&sigstore);
        let signed = statement(REPOSITORY, &digest('a').to_string());
        let by_key = key_bundle(&key, &signed);
        assert_eq!(verdict(&by_key, &trust, 'a').reason(), "verified");
        let keyless = sigstore.keyless_bundle(&signed, ISSUER, SUBJECT);
        assert_eq!(
            verdict(&keyless, &trust, 'a'),
            Verdict::Verified {
                signer: format!("{SUBJECT} ({ISSUER})").into()
            }
        );
    }

    /// Under an entry naming a transparency log, a key bundle counts only with a log entry of
    /// its signature and key under a SET of that log.
    #[test]
    fn a_key_bundle_must_be_logged_where_the_entry_names_a_transparency_log() {
        let sigstore = TestSigstore::new();
        let (key, trust) = trust(&sigstore);
        let root = Arc::new(TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap());
        let logging = trust.clone().with_key_log(root);
        let signed = statement(REPOSITORY, &digest('a').to_string());
        let logged = sigstore.logged_key_bundle(&key, &signed);
        assert_eq!(verdict(&logged, &logging, 'a').reason(), "verified");
        // A `dsse` entry, as cosign before 3.1 logs it.
        let dsse = sigstore.logged_key_bundle_as(&key, &signed, "dsse");
        assert_eq!(verdict(&dsse, &logging, 'a').reason(), "verified");
        assert_eq!(verdict(&logged, &trust, 'a').reason(), "verified");
        let unlogged = key_bundle(&key, &signed);
        match verdict(&unlogged, &logging, 'a') {
            Verdict::Untrusted { why } => {
                assert!(why.contains("but not logged"), "{why}");
                assert!(
                    why.contains("no log entry with a signed entry timestamp"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Logged in a log the root does not name.
        let elsewhere = TestSigstore::new().logged_key_bundle(&key, &signed);
        assert!(matches!(
            verdict(&elsewhere, &logging, 'a'),
            Verdict::Untrusted { why } if why.contains("no log the trusted root names")
        ));
        // The entry of another key's signature, moved into this key's bundle.
        let other = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut swapped: serde_json::Value = serde_json::from_str(&logged).unwrap();
        let theirs: serde_json::Value =
            serde_json::from_str(&sigstore.logged_key_bundle(&other, &signed)).unwrap();
        swapped["verificationMaterial"] = theirs["verificationMaterial"].clone();
        assert!(matches!(
            verdict(&swapped.to_string(), &logging, 'a'),
            Verdict::Untrusted { why } if why.contains("another signature, payload or key")
        ));
    }

    /// The class of Kyverno GHSA-2r43-6962-xcw5, for bundles: a statement is of a digest.
    #[test]
    fn a_bundle_of_another_digest_or_by_another_signer_is_not_this_images() {
        let sigstore = TestSigstore::new();
        let (key, trust) = trust(&sigstore);
        let signed = statement(REPOSITORY, &digest('a').to_string());
        assert_eq!(
            verdict(&key_bundle(&key, &signed), &trust, 'b'),
            Verdict::OtherDigest {
                signed: digest('a').to_string()
            }
        );
        let other = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        assert_eq!(
            verdict(&key_bundle(&other, &signed), &trust, 'a'),
            Verdict::OtherKey
        );
        let fork = "https://github.com/evil/app/.github/workflows/release.yml@refs/tags/v1";
        let verdict_fork = verdict(&sigstore.keyless_bundle(&signed, ISSUER, fork), &trust, 'a');
        assert_eq!(verdict_fork.reason(), "other_identity");
        let rogue = sigstore
            .sharing_log()
            .keyless_bundle(&signed, ISSUER, SUBJECT);
        let untrusted = verdict(&rogue, &trust, 'a');
        assert_eq!(untrusted.reason(), "untrusted");
        assert!(
            untrusted.describe().contains("not issued by an authority"),
            "{untrusted:?}"
        );
    }

    /// A keyless bundle whose log entry is of another payload, or that carries no SET, or
    /// whose envelope was swapped after signing: untrusted, saying why.
    #[test]
    fn a_keyless_bundle_the_log_does_not_vouch_for_is_untrusted() {
        let sigstore = TestSigstore::new();
        let (_, trust) = trust(&sigstore);
        let signed = statement(REPOSITORY, &digest('a').to_string());
        let good: serde_json::Value =
            serde_json::from_str(&sigstore.keyless_bundle(&signed, ISSUER, SUBJECT)).unwrap();
        let entry = "/verificationMaterial/tlogEntries/0";
        let mut no_set = good.clone();
        no_set
            .pointer_mut(entry)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("inclusionPromise");
        let why = verdict(&no_set.to_string(), &trust, 'a').describe();
        assert!(
            why.contains("no log entry with a signed entry timestamp"),
            "{why}"
        );
        // The envelope swapped for another statement (of the pinned digest 'b'), signature kept.
        let mut swapped = good.clone();
        *swapped.pointer_mut("/dsseEnvelope/payload").unwrap() = STANDARD
            .encode(statement(REPOSITORY, &digest('b').to_string()))
            .into();
        let why = verdict(&swapped.to_string(), &trust, 'b').describe();
        assert!(
            why.contains("another signature, payload or certificate"),
            "{why}"
        );
        // A timestamp edited: the SET no longer verifies.
        let mut late = good.clone();
        *late
            .pointer_mut(&format!("{entry}/integratedTime"))
            .unwrap() = (sigstore.now + 1).to_string().into();
        let why = verdict(&late.to_string(), &trust, 'a').describe();
        assert!(why.contains("does not verify"), "{why}");
    }

    /// Bundles pinhook cannot read are counted, on one line; an attestation (another
    /// predicate) is none of the image's signatures.
    #[test]
    fn unreadable_bundles_are_untrusted_and_attestations_are_not_signatures() {
        let sigstore = TestSigstore::new();
        let (key, trust) = trust(&sigstore);
        for (bundle, why) in [
            ("not json".to_string(), "not a bundle"),
            (r#"{"mediaType":"text/plain","verificationMaterial":{}}"#.to_string(), "media type"),
            (
                r#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{},"messageSignature":{}}"#.to_string(),
                "a message signature",
            ),
            (
                r#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{},"dsseEnvelope":{"payload":"!!","payloadType":"application/vnd.in-toto+json","signatures":[]}}"#.to_string(),
                "not base64",
            ),
        ] {
            let verdict = verdict(&bundle, &trust, 'a');
            assert_eq!(verdict.reason(), "untrusted", "{why}");
            assert!(verdict.describe().contains(why), "{verdict:?}");
            assert!(!verdict.describe().contains('\n'));
        }
        let mut provenance: serde_json::Value =
            serde_json::from_slice(&statement(REPOSITORY, &digest('a').to_string())).unwrap();
        provenance["predicateType"] = "https://slsa.dev/provenance/v1".into();
        let attestation = key_bundle(&key, provenance.to_string().as_bytes());
        assert_eq!(verdict(&attestation, &trust, 'a'), Verdict::NoSignature);
    }

    /// cosign 3.1 on logs a bundle's DSSE signature as a `hashedrekord` of the PAE: verified as
    /// the `dsse` entry is; a `hashedrekord` of the statement itself (not what was signed) is not.
    #[test]
    fn a_keyless_bundle_logged_as_a_hashedrekord_of_its_pae_is_verified() {
        let sigstore = TestSigstore::new();
        let (_, trust) = trust(&sigstore);
        let signed = statement(REPOSITORY, &digest('a').to_string());
        let bundle = sigstore.keyless_bundle_logged(&signed, ISSUER, SUBJECT, "hashedrekord");
        assert_eq!(verdict(&bundle, &trust, 'a').reason(), "verified");
        // The same bundle whose entry hashes the statement instead of the PAE.
        let mut wrong: serde_json::Value = serde_json::from_str(&bundle).unwrap();
        let entry = "/verificationMaterial/tlogEntries/0/canonicalizedBody";
        let body = STANDARD
            .decode(wrong.pointer(entry).unwrap().as_str().unwrap())
            .unwrap();
        let mut body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        body["spec"]["data"]["hash"]["value"] = Digest::sha256_of(&signed).hex().into();
        *wrong.pointer_mut(entry).unwrap() = STANDARD.encode(body.to_string()).into();
        let why = verdict(&wrong.to_string(), &trust, 'a').describe();
        // The SET no longer covers the edited body: refused either way, never verified.
        assert!(why.contains("does not verify"), "{why}");
    }

    /// A real bundle of Sigstore's public-good instance (Fulcio, Rekor v1; DSSE logged as a
    /// `hashedrekord` of the PAE, as cosign 3.1 logs them), verified offline against the
    /// public-good trusted root: the SET by Rekor's key, the entry of this signature and
    /// certificate, the chain to Fulcio's intermediate at the logged time, the signature by the
    /// certificate's key, the identity. (tests/fixtures/sigstore-public-good/README.md says
    /// where both files come from.)
    #[test]
    fn a_public_good_bundle_verifies_offline_against_the_public_good_root() {
        const WORKFLOW: &str = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
        let fixture = |name: &str| {
            std::fs::read(format!(
                "{}/tests/fixtures/sigstore-public-good/{name}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap()
        };
        let root = Arc::new(TrustedRoot::parse(&fixture("trusted_root.json")).unwrap());
        let bundle = fixture("dsse-hashedrekord.sigstore.json");
        let file: BundleFile = serde_json::from_slice(&bundle).unwrap();
        let envelope = file.dsse_envelope.as_ref().unwrap();
        let payload = STANDARD.decode(&envelope.payload).unwrap();
        let signed = pae(&envelope.payload_type, &payload);
        let raw = STANDARD.decode(&envelope.signatures[0].sig).unwrap();
        let identity = |subject: &str| Identity {
            issuer: Matcher::Exact(ISSUER.to_string()),
            subject: Matcher::Exact(subject.to_string()),
        };
        let keyless = Keyless::new(root.clone(), vec![identity(WORKFLOW)]);
        let logged = |signature: &[u8]| {
            keyless_logged(&file.verification_material, &payload, &signed, signature)
                .expect("keyless material")
                .expect("read")
        };
        let evidence = logged(&raw).judge(&keyless);
        assert_eq!(
            evidence,
            super::super::keyless::Evidence::Signed(super::super::keyless::Signer {
                issuer: ISSUER.to_string(),
                subjects: vec![WORKFLOW.to_string()],
            })
        );
        let mut tally = Tally::default();
        assert!(tally.keyless(&keyless, evidence.clone()).is_some());
        // another workflow of the same issuer: the signer is named, not trusted
        let mut tally = Tally::default();
        tally.seen = true;
        let other = Keyless::new(root.clone(), vec![identity(SUBJECT)]);
        assert_eq!(tally.keyless(&other, evidence), None);
        assert!(
            matches!(tally.verdict(), Verdict::OtherIdentity { signer } if signer.contains(WORKFLOW)),
        );
        // one bit of the signature changed: neither the signature nor the log entry holds
        let mut forged = raw.clone();
        let last = forged.len() - 1;
        forged[last] ^= 1;
        assert!(matches!(
            logged(&forged).judge(&keyless),
            super::super::keyless::Evidence::Untrusted(_)
        ));
        // the same bundle under another root (a private Sigstore): not vouched for
        let private = TestSigstore::new();
        let private = Keyless::new(
            Arc::new(TrustedRoot::parse(private.trusted_root().as_bytes()).unwrap()),
            vec![identity(WORKFLOW)],
        );
        assert!(matches!(
            logged(&raw).judge(&private),
            super::super::keyless::Evidence::Untrusted(_)
        ));
        // its certificate's SCT is the public good CT log's (checked above): with that log's
        // key swapped for another's, or the log gone from the root, it is not trusted, unless
        // the entry ignores SCTs
        let mut edited: serde_json::Value =
            serde_json::from_slice(&fixture("trusted_root.json")).unwrap();
        let other_ct: serde_json::Value =
            serde_json::from_str(&TestSigstore::new().trusted_root()).unwrap();
        let ct_logs = edited["ctlogs"].as_array().unwrap().len();
        for i in 0..ct_logs {
            edited["ctlogs"][i]["publicKey"]["rawBytes"] =
                other_ct["ctlogs"][0]["publicKey"]["rawBytes"].clone();
            edited["ctlogs"][i]["logId"] = other_ct["ctlogs"][0]["logId"].clone();
        }
        let swapped = Arc::new(TrustedRoot::parse(edited.to_string().as_bytes()).unwrap());
        let why = match logged(&raw).judge(&Keyless::new(swapped, vec![identity(WORKFLOW)])) {
            super::super::keyless::Evidence::Untrusted(why) => why,
            other => panic!("{other:?}"),
        };
        assert!(
            why.contains("no SCT of a certificate transparency log"),
            "{why}"
        );
        edited["ctlogs"] = serde_json::json!([]);
        let without = Arc::new(TrustedRoot::parse(edited.to_string().as_bytes()).unwrap());
        assert!(matches!(
            logged(&raw).judge(&Keyless::new(without.clone(), vec![identity(WORKFLOW)])),
            super::super::keyless::Evidence::Untrusted(why) if why.contains("SCT")
        ));
        assert!(matches!(
            logged(&raw).judge(&Keyless::ignoring_sct(without, vec![identity(WORKFLOW)])),
            super::super::keyless::Evidence::Signed(_)
        ));
        // whole, it is an attestation (predicate https://example.com/predicate/v1), none of
        // an image's signatures, whatever digest is pinned
        let trust = Trust::new(Vec::new(), Some(keyless));
        let subject: Digest =
            "sha256:70ed0277251d0cf2eb5eda8b574ce012de485e39a3de1fb4b1e0717e14b02d6a"
                .parse()
                .unwrap();
        assert_eq!(
            judge_all(&[], &[bundle.as_slice()], &trust, &subject),
            Verdict::NoSignature
        );
    }

    #[test]
    fn pae_is_dsse_v1s() {
        assert_eq!(pae("t", b"ab"), b"DSSEv1 1 t 2 ab".to_vec());
    }

    #[test]
    fn a_staging_rekor_v2_bundle_verifies_offline_by_its_proof_and_timestamp() {
        const WORKFLOW: &str = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
        let fixture = |name: &str| {
            std::fs::read(format!(
                "{}/tests/fixtures/sigstore-staging-rekor2/{name}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap()
        };
        let root_text: serde_json::Value =
            serde_json::from_slice(&fixture("trusted_root.json")).unwrap();
        let keyless = |root: &serde_json::Value| {
            Keyless::new(
                Arc::new(TrustedRoot::parse(root.to_string().as_bytes()).unwrap()),
                vec![Identity {
                    issuer: Matcher::Exact(ISSUER.to_string()),
                    subject: Matcher::Exact(WORKFLOW.to_string()),
                }],
            )
        };
        let bundle: serde_json::Value =
            serde_json::from_slice(&fixture("bundle.sigstore.json")).unwrap();
        let judge = |bundle: &serde_json::Value, root: &serde_json::Value| {
            let file: BundleFile = serde_json::from_value(bundle.clone()).unwrap();
            let envelope = file.dsse_envelope.as_ref().unwrap();
            let payload = STANDARD.decode(&envelope.payload).unwrap();
            let signed = pae(&envelope.payload_type, &payload);
            let raw = STANDARD.decode(&envelope.signatures[0].sig).unwrap();
            match keyless_logged(&file.verification_material, &payload, &signed, &raw) {
                Some(Ok(logged)) => logged.judge(&keyless(root)),
                Some(Err(why)) => super::super::keyless::Evidence::Untrusted(why.to_string()),
                None => panic!("no keyless material"),
            }
        };
        let untrusted =
            |bundle: &serde_json::Value, root: &serde_json::Value| match judge(bundle, root) {
                super::super::keyless::Evidence::Untrusted(why) => why,
                other => panic!("{other:?}"),
            };
        // Its entry has no SET: the inclusion proof up to the log's signed checkpoint, the
        // TSA's timestamp of the signature (2025-07-25), the chain and SCT at that time.
        assert_eq!(
            judge(&bundle, &root_text),
            super::super::keyless::Evidence::Signed(super::super::keyless::Signer {
                issuer: ISSUER.to_string(),
                subjects: vec![WORKFLOW.to_string()],
            })
        );
        // No timestamp: nothing says when it was signed.
        let mut edited = bundle.clone();
        edited["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"] =
            serde_json::json!([]);
        let why = untrusted(&edited, &root_text);
        assert!(why.contains("carries no RFC 3161 timestamp"), "{why}");
        // A root without the timestamp authority, or whose authority ended before the time.
        let mut without = root_text.clone();
        without["timestampAuthorities"] = serde_json::json!([]);
        untrusted(&bundle, &without);
        let mut ended = root_text.clone();
        ended["timestampAuthorities"][0]["validFor"]["end"] = "2025-06-01T00:00:00Z".into();
        untrusted(&bundle, &ended);
        // The checkpoint's root changed, or the proof's path: not proven.
        let entry = "/verificationMaterial/tlogEntries/0/inclusionProof";
        let mut forged = bundle.clone();
        let checkpoint = forged
            .pointer(&format!("{entry}/checkpoint/envelope"))
            .unwrap()
            .as_str()
            .unwrap()
            .replace("oxP/", "oxQ/");
        *forged
            .pointer_mut(&format!("{entry}/checkpoint/envelope"))
            .unwrap() = checkpoint.into();
        assert!(untrusted(&forged, &root_text).contains("checkpoint"));
        let mut bent = bundle.clone();
        *bent.pointer_mut(&format!("{entry}/hashes/0")).unwrap() =
            STANDARD.encode([7u8; 32]).into();
        assert!(untrusted(&bent, &root_text).contains("inclusion proof"));
        // The log trusted only before the time (log2025-alpha1 from 2025-04-16).
        let mut early = root_text.clone();
        for log in early["tlogs"].as_array_mut().unwrap() {
            log["publicKey"]["validFor"]["end"] = "2025-05-01T00:00:00Z".into();
        }
        assert!(untrusted(&bundle, &early).contains("no log the trusted root names"));
    }

    /// `bundle` (v0.3, made by the test authority) as a Rekor v2 log records it: its entry a
    /// `kind` 0.0.2 entry of the envelope's signature by `verifier` (a v2 verifier), appended to
    /// `log` between two others and proven by an inclusion proof and the log's checkpoint, no
    /// SET, and `tsa`'s timestamp of the signature at `time`.
    fn as_rekor_v2(
        bundle: &str,
        verifier: serde_json::Value,
        kind: &str,
        log: &mut crate::signatures::checkpoint::test_log::TestLog,
        tsa: &crate::signatures::timestamp::test_tsa::TestTsa,
        time: i64,
    ) -> String {
        use sha2::Digest as _;
        let mut bundle: serde_json::Value = serde_json::from_str(bundle).unwrap();
        let envelope = &bundle["dsseEnvelope"];
        let sig = envelope["signatures"][0]["sig"]
            .as_str()
            .unwrap()
            .to_string();
        let payload = STANDARD
            .decode(envelope["payload"].as_str().unwrap())
            .unwrap();
        let signed = pae(envelope["payloadType"].as_str().unwrap(), &payload);
        let signature = serde_json::json!({"content": sig, "verifier": verifier});
        let body = if kind == "dsse" {
            serde_json::json!({"apiVersion": "0.0.2", "kind": "dsse", "spec": {"dsseV002": {
                "payloadHash": {"algorithm": "SHA2_256", "digest": STANDARD.encode(sha2::Sha256::digest(&payload))},
                "signatures": [signature],
            }}})
        } else {
            serde_json::json!({"apiVersion": "0.0.2", "kind": "hashedrekord", "spec": {"hashedRekordV002": {
                "data": {"algorithm": "SHA2_256", "digest": STANDARD.encode(sha2::Sha256::digest(&signed))},
                "signature": signature,
            }}})
        }
        .to_string();
        log.append(b"before");
        let index = log.append(body.as_bytes()) as usize;
        log.append(b"after");
        let size = log.leaves.len();
        let id = log.raw_id();
        let material = &mut bundle["verificationMaterial"];
        material["tlogEntries"] = serde_json::json!([{
            "logIndex": index.to_string(),
            "logId": {"keyId": STANDARD.encode(id)},
            "kindVersion": {"kind": kind, "version": "0.0.2"},
            "inclusionProof": {
                "logIndex": index.to_string(),
                "rootHash": STANDARD.encode(log.root(size)),
                "treeSize": size.to_string(),
                "hashes": log.path(index, size).iter().map(|h| STANDARD.encode(h)).collect::<Vec<_>>(),
                "checkpoint": {"envelope": log.checkpoint(size)},
            },
            "canonicalizedBody": STANDARD.encode(&body),
        }]);
        let stamp = tsa.stamp(&STANDARD.decode(&sig).unwrap(), time);
        material["timestampVerificationData"] =
            serde_json::json!({"rfc3161Timestamps": [{"signedTimestamp": STANDARD.encode(stamp)}]});
        bundle.to_string()
    }

    /// The test authority's root, with `log` among its transparency logs and `tsa` its one
    /// timestamp authority.
    fn root_with(
        sigstore: &TestSigstore,
        log: &crate::signatures::checkpoint::test_log::TestLog,
        tsa: &crate::signatures::timestamp::test_tsa::TestTsa,
    ) -> Arc<TrustedRoot> {
        let mut root: serde_json::Value = serde_json::from_str(&sigstore.trusted_root()).unwrap();
        let id = log.raw_id();
        root["tlogs"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "baseUrl": format!("https://{}", log.origin),
                "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": STANDARD.encode(log.der()), "keyDetails": "PKIX_ED25519",
                    "validFor": {"start": "2020-01-01T00:00:00Z"}},
                "logId": {"keyId": STANDARD.encode(id)},
            }));
        root["timestampAuthorities"] = serde_json::json!([tsa.trusted_root_entry()]);
        Arc::new(TrustedRoot::parse(root.to_string().as_bytes()).unwrap())
    }

    /// The test authority, a Rekor v2 test log, a test TSA, the root naming all three, and the
    /// identity `SUBJECT` of `ISSUER`.
    fn v2_sigstore() -> (
        TestSigstore,
        crate::signatures::checkpoint::test_log::TestLog,
        crate::signatures::timestamp::test_tsa::TestTsa,
        Arc<TrustedRoot>,
        Identity,
    ) {
        let sigstore = TestSigstore::new();
        let log = crate::signatures::checkpoint::test_log::TestLog::new(
            "log2025-1.rekor.test",
            &rcgen::PKCS_ED25519,
        );
        let tsa = crate::signatures::timestamp::test_tsa::TestTsa::new();
        let root = root_with(&sigstore, &log, &tsa);
        let identity = Identity {
            issuer: Matcher::Exact(ISSUER.to_string()),
            subject: Matcher::Exact(SUBJECT.to_string()),
        };
        (sigstore, log, tsa, root, identity)
    }

    /// A cosign 3 bundle whose entry is in a Rekor v2 log counts by its inclusion proof and its
    /// RFC 3161 timestamp, keyless and by a key, through the very path an image's bundle takes.
    #[test]
    fn a_rekor_v2_bundle_counts_by_its_proof_and_timestamp_and_nothing_less() {
        use crate::signatures::timestamp::test_tsa::TestTsa;
        use rcgen::PublicKeyData as _;
        let (sigstore, mut log, tsa, root, identity) = v2_sigstore();
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let trust = Trust::new(
            vec![PublicKey::from_pem(&key.public_key_pem()).unwrap()],
            Some(Keyless::new(root.clone(), vec![identity])),
        )
        .with_key_log(root.clone());
        let signed = statement(REPOSITORY, &digest('a').to_string());
        let certificate = |bundle: &str| {
            let bundle: serde_json::Value = serde_json::from_str(bundle).unwrap();
            serde_json::json!({"x509Certificate": {"rawBytes": bundle["verificationMaterial"]["certificate"]["rawBytes"]},
                "keyDetails": "PKIX_ECDSA_P256_SHA_256"})
        };
        let keyless = sigstore.keyless_bundle(&signed, ISSUER, SUBJECT);
        let now = sigstore.now;
        for kind in ["dsse", "hashedrekord"] {
            let v2 = as_rekor_v2(&keyless, certificate(&keyless), kind, &mut log, &tsa, now);
            assert_eq!(
                verdict(&v2, &trust, 'a'),
                Verdict::Verified {
                    signer: format!("{SUBJECT} ({ISSUER})").into()
                },
                "{kind}"
            );
            // The same bundle is of digest a only.
            assert!(matches!(
                verdict(&v2, &trust, 'b'),
                Verdict::OtherDigest { .. }
            ));
        }
        let by_key = key_bundle(&key, &signed);
        let key_verifier = serde_json::json!({"publicKey": {"rawBytes": STANDARD.encode(key.subject_public_key_info())},
            "keyDetails": "PKIX_ECDSA_P256_SHA_256"});
        let v2 = as_rekor_v2(&by_key, key_verifier.clone(), "dsse", &mut log, &tsa, now);
        assert_eq!(verdict(&v2, &trust, 'a').reason(), "verified");

        let untrusted = |bundle: &str| match verdict(bundle, &trust, 'a') {
            Verdict::Untrusted { why } => why.to_string(),
            other => panic!("{other:?}"),
        };
        // Timestamped when the ten-minute certificate had expired: the chain fails at that time.
        let late = as_rekor_v2(
            &keyless,
            certificate(&keyless),
            "dsse",
            &mut log,
            &tsa,
            now + 3_600,
        );
        assert!(
            untrusted(&late).contains("not issued by an authority"),
            "{}",
            untrusted(&late)
        );
        // Timestamped by an authority the root does not name.
        let stranger = TestTsa::new();
        let elsewhere = as_rekor_v2(
            &keyless,
            certificate(&keyless),
            "dsse",
            &mut log,
            &stranger,
            now,
        );
        assert!(
            untrusted(&elsewhere)
                .contains("not signed by a timestamp authority of the trusted root"),
            "{}",
            untrusted(&elsewhere)
        );
        // Proven in a log the root does not name, under the same origin.
        let mut other_log = crate::signatures::checkpoint::test_log::TestLog::new(
            "log2025-1.rekor.test",
            &rcgen::PKCS_ED25519,
        );
        let unnamed = as_rekor_v2(
            &keyless,
            certificate(&keyless),
            "dsse",
            &mut other_log,
            &tsa,
            now,
        );
        assert!(
            untrusted(&unnamed).contains("no log the trusted root names"),
            "{}",
            untrusted(&unnamed)
        );
        // The entry of another certificate's signature; the key's entry naming another key.
        let other = sigstore.keyless_bundle(&signed, ISSUER, SUBJECT);
        let mut swapped: serde_json::Value = serde_json::from_str(&as_rekor_v2(
            &keyless,
            certificate(&other),
            "dsse",
            &mut log,
            &tsa,
            now,
        ))
        .unwrap();
        assert!(untrusted(&swapped.to_string()).contains("another signature"));
        let other_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let wrong_key = serde_json::json!({"publicKey": {"rawBytes": STANDARD.encode(other_key.subject_public_key_info())}});
        let misnamed = as_rekor_v2(&by_key, wrong_key, "dsse", &mut log, &tsa, now);
        assert!(untrusted(&misnamed).contains("another signature, payload or key"));
        // No timestamp, or its proof cut short.
        swapped = serde_json::from_str(&as_rekor_v2(
            &keyless,
            certificate(&keyless),
            "dsse",
            &mut log,
            &tsa,
            now,
        ))
        .unwrap();
        let mut stampless = swapped.clone();
        stampless["verificationMaterial"]["timestampVerificationData"] = serde_json::Value::Null;
        assert!(untrusted(&stampless.to_string()).contains("carries no RFC 3161 timestamp"));
        let mut short = swapped.clone();
        short["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["hashes"]
            .as_array_mut()
            .unwrap()
            .pop();
        assert!(untrusted(&short.to_string()).contains("inclusion proof"));
        // A key bundle in a v2 log, but no timestamp: the log's period cannot be checked.
        let mut keyed: serde_json::Value = serde_json::from_str(&as_rekor_v2(
            &by_key,
            key_verifier,
            "hashedrekord",
            &mut log,
            &tsa,
            now,
        ))
        .unwrap();
        assert_eq!(
            verdict(&keyed.to_string(), &trust, 'a').reason(),
            "verified"
        );
        keyed["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"] =
            serde_json::json!([]);
        assert!(untrusted(&keyed.to_string()).contains("but not logged"));
    }

    /// Every timestamp must verify and the certificate hold at each (sigstore-conformance's
    /// `rekor2-multiple-timestamps-one-outside-cert-validity_fail`); every log entry is tried;
    /// an entry's index is its proof's.
    #[test]
    fn a_rekor_v2_bundle_holds_at_every_timestamp_and_any_entry_may_prove_it() {
        use crate::signatures::timestamp::test_tsa::TestTsa;
        let (sigstore, mut log, tsa, root, identity) = v2_sigstore();
        let trust = Trust::new(Vec::new(), Some(Keyless::new(root, vec![identity])));
        let signed = statement(REPOSITORY, &digest('a').to_string());
        let keyless = sigstore.keyless_bundle(&signed, ISSUER, SUBJECT);
        let raw: serde_json::Value = serde_json::from_str(&keyless).unwrap();
        let verifier = serde_json::json!({"x509Certificate": {"rawBytes": raw["verificationMaterial"]["certificate"]["rawBytes"]}});
        let signature = STANDARD
            .decode(
                raw["dsseEnvelope"]["signatures"][0]["sig"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
        let now = sigstore.now;
        let v2: serde_json::Value = serde_json::from_str(&as_rekor_v2(
            &keyless,
            verifier.clone(),
            "dsse",
            &mut log,
            &tsa,
            now,
        ))
        .unwrap();
        let verdict_of = |bundle: &serde_json::Value| verdict(&bundle.to_string(), &trust, 'a');
        assert_eq!(verdict_of(&v2).reason(), "verified");
        let stamps = "/verificationMaterial/timestampVerificationData/rfc3161Timestamps";
        let with_stamps = |stamps_of: Vec<Vec<u8>>| {
            let mut bundle = v2.clone();
            *bundle.pointer_mut(stamps).unwrap() = stamps_of
                .iter()
                .map(|s| serde_json::json!({"signedTimestamp": STANDARD.encode(s)}))
                .collect();
            bundle
        };
        let untrusted = |bundle: &serde_json::Value| match verdict_of(bundle) {
            Verdict::Untrusted { why } => why.to_string(),
            other => panic!("{other:?}"),
        };
        // Two good timestamps: verified; a second after the certificate expired: not.
        let good = tsa.stamp(&signature, now);
        assert_eq!(
            verdict_of(&with_stamps(vec![
                good.clone(),
                tsa.stamp(&signature, now + 60)
            ]))
            .reason(),
            "verified"
        );
        let why = untrusted(&with_stamps(vec![
            good.clone(),
            tsa.stamp(&signature, now + 3_600),
        ]));
        assert!(why.contains("not issued by an authority"), "{why}");
        // A good one beside one of another signature, or one of an authority the root does not
        // name: not (each must verify).
        let why = untrusted(&with_stamps(vec![good.clone(), tsa.stamp(b"other", now)]));
        assert!(why.contains("of other bytes than its signature"), "{why}");
        let why = untrusted(&with_stamps(vec![
            TestTsa::new().stamp(&signature, now),
            good.clone(),
        ]));
        assert!(why.contains("not signed by a timestamp authority"), "{why}");
        // More than four: refused unread.
        let why = untrusted(&with_stamps(vec![good.clone(); 5]));
        assert!(
            why.contains("more RFC 3161 timestamps than pinhook reads"),
            "{why}"
        );

        // An entry whose index is not its proof's.
        let mut moved = v2.clone();
        moved["verificationMaterial"]["tlogEntries"][0]["logIndex"] = "0".into();
        assert!(untrusted(&moved).contains("another index than its log entry"));
        // A Rekor v1 entry of a log the root does not name first, the good v2 entry after:
        // the second proves it. Five entries: refused unread.
        let elsewhere: serde_json::Value =
            serde_json::from_str(&TestSigstore::new().keyless_bundle(&signed, ISSUER, SUBJECT))
                .unwrap();
        let mut mixed = v2.clone();
        let good_entry = v2["verificationMaterial"]["tlogEntries"][0].clone();
        mixed["verificationMaterial"]["tlogEntries"] = serde_json::json!([
            elsewhere["verificationMaterial"]["tlogEntries"][0].clone(),
            good_entry.clone(),
        ]);
        assert_eq!(verdict_of(&mixed).reason(), "verified");
        mixed["verificationMaterial"]["tlogEntries"] =
            serde_json::json!([elsewhere["verificationMaterial"]["tlogEntries"][0].clone()]);
        assert!(untrusted(&mixed).contains("no log the trusted root names"));
        mixed["verificationMaterial"]["tlogEntries"] = serde_json::json!(vec![good_entry; 5]);
        assert!(untrusted(&mixed).contains("more log entries than pinhook reads"));
    }
}
