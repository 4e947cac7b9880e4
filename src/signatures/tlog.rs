//! Transparency log entries (Rekor) as cosign carries them, and the log's word on one, which
//! also says **when** the signature existed ([`Vouched`]):
//! - a Rekor v1 entry's signed entry timestamp (SET), which verifies with the key of a log the
//!   trusted root names, trusted at the entry's integrated time, over the entry's canonical JSON
//!   (RFC 8785); the time is the integrated time;
//! - a Rekor v2 entry (no SET; its integrated time is no time) proven by its inclusion proof up
//!   to a checkpoint its log signed ([`super::checkpoint`]), the time being the one an RFC 3161
//!   timestamp of a timestamp authority of the root gives the signature
//!   ([`super::timestamp`]), and the log trusted at that time.
//!
//! And whether the entry's body is of a given payload, signature and verifier (a certificate for
//! keyless, a public key for a key's signature), in either version's body. In a tag-scheme
//! layer the entry and its SET come in the `dev.sigstore.cosign/bundle` annotation
//! ([`LayerBundle`]); a Sigstore bundle carries them in its verification material (`bundle`).
//!
//! Owns: reading those entries, the SET check, and whether an entry is of a given signature.
//! Never: decides what a logged signature is worth (`keyless` for certificates,
//! `simple_signing` and `bundle` for keys), or any I/O.

use std::borrow::Cow;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use sigstore::crypto::Signature;

use super::checkpoint::InclusionProof;
use super::trusted_root::TrustedRoot;
use crate::reference::Digest;

/// RFC 3161 timestamps of one entry read.
pub(crate) const MAX_TIMESTAMPS: usize = 4;

/// The annotation holding the transparency log bundle (JSON).
pub const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";

/// A tag-scheme layer's bundle annotation: one log entry and its SET.
#[derive(Deserialize)]
pub(crate) struct LayerBundle {
    #[serde(rename = "SignedEntryTimestamp")]
    set: String,
    #[serde(rename = "Payload")]
    payload: BundlePayload,
}

#[derive(Deserialize)]
struct BundlePayload {
    body: String,
    #[serde(rename = "integratedTime")]
    integrated_time: i64,
    #[serde(rename = "logIndex")]
    log_index: i64,
    #[serde(rename = "logID")]
    log_id: String,
}

#[derive(Deserialize)]
struct Entry {
    kind: String,
    spec: EntrySpec,
}

/// A Rekor v2 `hashedrekord` 0.0.2 entry.
#[derive(Deserialize)]
struct EntryV2 {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    spec: EntrySpecV2,
}

#[derive(Deserialize)]
struct EntrySpecV2 {
    #[serde(rename = "hashedRekordV002")]
    hashed_rekord: HashedRekordV2,
}

#[derive(Deserialize)]
struct HashedRekordV2 {
    data: HashV2,
    signature: SignatureV2,
}

/// A Rekor v2 hash: its algorithm (`SHA2_256`) and digest (base64).
#[derive(Deserialize)]
pub(crate) struct HashV2 {
    pub algorithm: String,
    pub digest: String,
}

/// A Rekor v2 signature: its content (base64) and verifier.
#[derive(Deserialize)]
pub(crate) struct SignatureV2 {
    pub content: String,
    pub verifier: VerifierV2,
}

/// A Rekor v2 verifier: a certificate or a public key, DER in base64.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifierV2 {
    #[serde(default)]
    x509_certificate: Option<RawV2>,
    #[serde(default)]
    public_key: Option<RawV2>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawV2 {
    raw_bytes: String,
}

impl HashV2 {
    /// Whether this is the SHA-256 `digest` (raw).
    pub(crate) fn is_sha256(&self, digest: &[u8]) -> bool {
        self.algorithm == "SHA2_256"
            && STANDARD.decode(self.digest.trim()).ok().as_deref() == Some(digest)
    }
}

impl SignatureV2 {
    /// Whether this is `signature` (raw) by the verifier `der`.
    pub(crate) fn is(&self, signature: &[u8], der: &[u8]) -> bool {
        let verifier = self
            .verifier
            .x509_certificate
            .as_ref()
            .or(self.verifier.public_key.as_ref())
            .and_then(|raw| STANDARD.decode(raw.raw_bytes.trim()).ok());
        STANDARD.decode(self.content.trim()).ok().as_deref() == Some(signature)
            && verifier.as_deref() == Some(der)
    }
}

#[derive(Deserialize)]
struct EntrySpec {
    data: EntryData,
    signature: EntrySignature,
}

#[derive(Deserialize)]
struct EntryData {
    hash: EntryHash,
}

#[derive(Deserialize)]
struct EntryHash {
    algorithm: String,
    value: String,
}

#[derive(Deserialize)]
struct EntrySignature {
    content: String,
    #[serde(rename = "publicKey")]
    public_key: EntryKey,
}

#[derive(Deserialize)]
struct EntryKey {
    content: String,
}

impl LayerBundle {
    /// The bundle annotation `text` of a layer, read.
    pub(crate) fn read(text: Option<&str>) -> Result<LayerBundle, &'static str> {
        let text = text.ok_or("it carries no transparency log bundle")?;
        serde_json::from_str(text).map_err(|_| "its transparency log bundle is malformed")
    }

    /// Its entry, as the SET covers it.
    pub(crate) fn entry(&self) -> LogEntry<'_> {
        LogEntry {
            body: &self.payload.body,
            integrated_time: self.payload.integrated_time,
            log_index: self.payload.log_index,
            log_id: &self.payload.log_id,
            set: &self.set,
        }
    }
}

/// A transparency log entry as its SET covers it: the body (base64), the time it was
/// integrated, its index, the log's ID (hex) and the SET (base64).
pub(crate) struct LogEntry<'a> {
    pub body: &'a str,
    pub integrated_time: i64,
    pub log_index: i64,
    pub log_id: &'a str,
    pub set: &'a str,
}

/// Whether `body` is a `hashedrekord` (Rekor v1, or v2's 0.0.2; or the older `rekord`) entry
/// of `payload`, `signature` (raw) and the verifier `der` (a certificate, or a public key's
/// SubjectPublicKeyInfo).
pub(crate) fn logged_rekord(body: &[u8], payload: &[u8], signature: &[u8], der: &[u8]) -> bool {
    if let Ok(entry) = serde_json::from_slice::<EntryV2>(body) {
        let rekord = &entry.spec.hashed_rekord;
        return entry.kind == "hashedrekord"
            && entry.api_version == "0.0.2"
            && rekord.data.is_sha256(&Sha256::digest(payload))
            && rekord.signature.is(signature, der);
    }
    let Ok(entry) = serde_json::from_slice::<Entry>(body) else {
        return false;
    };
    let logged_signature = STANDARD.decode(entry.spec.signature.content.trim()).ok();
    matches!(entry.kind.as_str(), "hashedrekord" | "rekord")
        && entry.spec.data.hash.algorithm == "sha256"
        && entry
            .spec
            .data
            .hash
            .value
            .eq_ignore_ascii_case(Digest::sha256_of(payload).hex())
        && logged_signature.as_deref() == Some(signature)
        && logged_verifier(&entry.spec.signature.public_key.content).as_deref() == Some(der)
}

/// The DER of a log entry's verifier (a certificate, or a public key): base64 of its PEM.
pub(crate) fn logged_verifier(content: &str) -> Option<Vec<u8>> {
    let pem = STANDARD.decode(content.trim()).ok()?;
    x509_parser::pem::parse_x509_pem(&pem)
        .ok()
        .map(|(_, block)| block.contents)
}

/// Whether the log's promise over `entry` holds: a log `root` names, trusted at the entry's
/// integrated time, signed its SET over the entry's canonical JSON.
pub(crate) fn promised(root: &TrustedRoot, entry: &LogEntry<'_>) -> Result<(), Cow<'static, str>> {
    let log = root
        .log(entry.log_id, entry.integrated_time)
        .ok_or("it was logged in no log the trusted root names")?;
    let canonical = serde_json::json!({
        "body": entry.body,
        "integratedTime": entry.integrated_time,
        "logID": entry.log_id,
        "logIndex": entry.log_index,
    });
    // serde_json's map keeps insertion order (preserve_order), which is RFC 8785's here:
    // keys sorted, integers and ASCII strings as they are, no blanks.
    let canonical = serde_json::to_vec(&canonical).map_err(|_| "its bundle is malformed")?;
    log.key
        .verify_signature(
            Signature::Base64Encoded(entry.set.trim().as_bytes()),
            &canonical,
        )
        .map_err(|_| Cow::Borrowed("the log's signed entry timestamp does not verify"))
}

/// A log's word on an entry, and so on when a signature existed.
pub(crate) enum Vouched<'a> {
    /// A Rekor v1 entry and its SET: logged at its integrated time.
    Promised(LogEntry<'a>),
    /// An entry proven by its inclusion proof (a Rekor v2 entry), timestamped.
    Proven(ProvenEntry<'a>),
}

/// An entry proven by its inclusion proof: its body (base64), its log's ID (hex), the proof, and
/// the RFC 3161 timestamps (DER) over `signature`, the signature logged.
pub(crate) struct ProvenEntry<'a> {
    pub body: &'a str,
    pub log_id: &'a str,
    pub proof: InclusionProof<'a>,
    pub timestamps: &'a [Vec<u8>],
    pub signature: &'a [u8],
}

impl Vouched<'_> {
    /// The times the log's word says the signature existed, if its word holds: the SET of a
    /// log of `root` ([`promised`]) and its integrated time; or **every** timestamp's time, each
    /// by an authority of `root` (one that does not verify refuses them all, as sigstore-go
    /// checks each), and the entry in a log of `root` trusted at each. The caller checks the
    /// certificate at each time too.
    fn times(&self, root: &TrustedRoot, body: &[u8]) -> Result<Vec<i64>, Cow<'static, str>> {
        match self {
            Vouched::Promised(entry) => {
                promised(root, entry)?;
                Ok(vec![entry.integrated_time])
            }
            Vouched::Proven(entry) => {
                if entry.timestamps.is_empty() {
                    return Err(Cow::Borrowed(
                        "its log entry has no signed entry timestamp and it carries no RFC 3161 \
                         timestamp to say when it was signed",
                    ));
                }
                if entry.timestamps.len() > MAX_TIMESTAMPS {
                    return Err(Cow::Borrowed(
                        "it carries more RFC 3161 timestamps than pinhook reads",
                    ));
                }
                let times = entry
                    .timestamps
                    .iter()
                    .map(|stamp| {
                        super::timestamp::timestamped(
                            stamp,
                            entry.signature,
                            &root.timestamp_authorities,
                        )
                    })
                    .collect::<Result<Vec<i64>, _>>()?;
                super::checkpoint::included(root, entry.log_id, &times, body, &entry.proof)?;
                Ok(times)
            }
        }
    }

    /// The entry's body, base64.
    fn body(&self) -> &str {
        match self {
            Vouched::Promised(entry) => entry.body,
            Vouched::Proven(entry) => entry.body,
        }
    }
}

/// Whether `entry` is logged (its log's word, [`Vouched`]) and its body is of what the caller
/// signed (`is_of`, over the decoded body); the times the log's word gives (one or more, each
/// of which the caller must hold the signature to). `other` says why not when the body is of
/// something else.
pub(crate) fn logged(
    root: &TrustedRoot,
    entry: &Vouched<'_>,
    is_of: &dyn Fn(&[u8]) -> bool,
    other: &'static str,
) -> Result<Vec<i64>, Cow<'static, str>> {
    let body = STANDARD
        .decode(entry.body().trim())
        .map_err(|_| "the log's entry is not base64")?;
    let times = entry.times(root, &body)?;
    if is_of(&body) {
        Ok(times)
    } else {
        Err(Cow::Borrowed(other))
    }
}

/// Why a trusted key's signature (the key's fingerprint) does not count: the entry wants it
/// logged, and it is not.
pub(crate) fn unlogged(key: &str, why: &str) -> String {
    format!("signed by key {key}, but not logged in a transparency log the entry trusts: {why}")
}

/// Why a key's signature is not the one a log entry names.
pub(crate) const OTHER_KEY_ENTRY: &str = "the log's entry is of another signature, payload or key";

/// Whether a key's signature in a tag-scheme layer (`signature`, raw, over `payload`) is
/// logged: the layer's bundle annotation holds a SET of a log of `root` over a `hashedrekord`
/// entry of this payload, signature and key (`key`, its SubjectPublicKeyInfo).
pub(crate) fn key_logged(
    root: &TrustedRoot,
    bundle: Option<&str>,
    payload: &[u8],
    signature: &[u8],
    key: &[u8],
) -> Result<(), Cow<'static, str>> {
    let bundle = LayerBundle::read(bundle)?;
    let is_of = |body: &[u8]| logged_rekord(body, payload, signature, key);
    logged(
        root,
        &Vouched::Promised(bundle.entry()),
        &is_of,
        OTHER_KEY_ENTRY,
    )
    .map(|_| ())
}
