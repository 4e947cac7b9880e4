//! A Sigstore trusted root (`trusted_root.json`, media type
//! `application/vnd.dev.sigstore.trustedroot+json`), read from a file at load, so an air-gapped
//! cluster verifies keyless signatures with no outside call: the certificate authorities
//! (Fulcio) whose chains issue signing certificates, and the transparency logs (Rekor) whose
//! keys sign entry timestamps, and the certificate transparency logs whose SCTs say a signing
//! certificate was published, and the timestamp authorities whose RFC 3161 timestamps say when
//! a signature was made (a Rekor v2 entry carries no time of its own), each with the period it
//! is trusted for. A log is found by its ID: the SHA-256 of its key (SubjectPublicKeyInfo), or
//! for an Ed25519 log (Rekor v2) its C2SP signed-note key hash, which names the log's origin.
//!
//! Owns: the file's reading, bounds and errors, and the root's fingerprint. Never: verifies a
//! certificate, an SCT or an entry (`keyless`, `sct` and `tlog` do).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use sigstore::crypto::CosignVerificationKey;

/// The largest trusted root read (the public good instance's is under 10 KiB).
pub const MAX_TRUSTED_ROOT_BYTES: usize = 1 << 20;
/// Logs, and authorities, read of one root.
const MAX_ENTRIES: usize = 64;
/// Certificates of one authority's chain.
const MAX_CHAIN: usize = 8;

/// The trust material of a Sigstore instance.
#[derive(Debug, Clone)]
pub struct TrustedRoot {
    pub(crate) logs: Vec<Log>,
    /// Certificate transparency logs (`ctlogs`), which may be none.
    pub(crate) ct_logs: Vec<Log>,
    pub(crate) authorities: Vec<Authority>,
    /// Timestamp authorities (`timestampAuthorities`), which may be none.
    pub(crate) timestamp_authorities: Vec<TimestampAuthority>,
    fingerprint: String,
}

/// A transparency log (or a certificate transparency log): its ID (hex, as a bundle's `logID`
/// and an SCT name it), key, period, and the origin its checkpoints name (the host of its
/// `baseUrl`; empty when the file gives none).
#[derive(Debug, Clone)]
pub(crate) struct Log {
    pub id: String,
    pub key: CosignVerificationKey,
    pub valid: Validity,
    pub origin: String,
    /// The key's SubjectPublicKeyInfo, DER.
    pub der: Vec<u8>,
}

/// A timestamp authority: its chain (DER, the authority's signing certificate first and its
/// root last; the file may give none, and then it vouches for nothing) and the period its
/// timestamps are trusted for.
#[derive(Debug, Clone)]
pub(crate) struct TimestampAuthority {
    pub chain: Vec<Vec<u8>>,
    pub valid: Validity,
}

/// A certificate authority: its root (the chain's last certificate), the certificates between
/// (DER) and its period.
#[derive(Debug, Clone)]
pub(crate) struct Authority {
    pub root: Vec<u8>,
    pub intermediates: Vec<Vec<u8>>,
    pub valid: Validity,
}

/// A period in Unix seconds; no end is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Validity {
    pub start: i64,
    pub end: Option<i64>,
}

impl Validity {
    pub fn contains(&self, time: i64) -> bool {
        self.start <= time && self.end.is_none_or(|end| time <= end)
    }
}

/// Why a text is not a trusted root pinhook can verify with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustedRootError {
    #[error("larger than a trusted root ({MAX_TRUSTED_ROOT_BYTES} bytes at most)")]
    TooLarge,
    #[error("not a Sigstore trusted root: {0}")]
    Malformed(String),
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RootFile {
    #[serde(default)]
    media_type: String,
    #[serde(default)]
    tlogs: Vec<TlogFile>,
    #[serde(default)]
    ctlogs: Vec<TlogFile>,
    #[serde(default)]
    certificate_authorities: Vec<AuthorityFile>,
    #[serde(default)]
    timestamp_authorities: Vec<AuthorityFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TlogFile {
    #[serde(default)]
    base_url: String,
    public_key: PublicKeyFile,
    log_id: LogIdFile,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PublicKeyFile {
    raw_bytes: String,
    #[serde(default)]
    key_details: String,
    #[serde(default)]
    valid_for: Option<PeriodFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogIdFile {
    key_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthorityFile {
    cert_chain: ChainFile,
    #[serde(default)]
    valid_for: Option<PeriodFile>,
}

#[derive(Deserialize)]
struct ChainFile {
    certificates: Vec<CertificateFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CertificateFile {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct PeriodFile {
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    end: Option<String>,
}

const MEDIA_TYPE: &str = "application/vnd.dev.sigstore.trustedroot+json";

impl TrustedRoot {
    /// The root in `text`; every problem names its field (`tlogs[0].publicKey.rawBytes`).
    pub fn parse(text: &[u8]) -> Result<TrustedRoot, TrustedRootError> {
        if text.len() > MAX_TRUSTED_ROOT_BYTES {
            return Err(TrustedRootError::TooLarge);
        }
        let file: RootFile = serde_json::from_slice(text).map_err(|e| {
            TrustedRootError::Malformed(crate::text::one_line(&e.to_string()).into_owned())
        })?;
        if !file.media_type.starts_with(MEDIA_TYPE) {
            return Err(invalid(
                "mediaType",
                format!("must be {MEDIA_TYPE};version=…"),
            ));
        }
        if file.tlogs.is_empty() || file.tlogs.len() > MAX_ENTRIES {
            return Err(invalid(
                "tlogs",
                format!("must name 1 to {MAX_ENTRIES} transparency logs"),
            ));
        }
        if file.certificate_authorities.is_empty()
            || file.certificate_authorities.len() > MAX_ENTRIES
        {
            return Err(invalid(
                "certificateAuthorities",
                format!("must name 1 to {MAX_ENTRIES} certificate authorities"),
            ));
        }
        if file.ctlogs.len() > MAX_ENTRIES {
            return Err(invalid(
                "ctlogs",
                format!("must name at most {MAX_ENTRIES} certificate transparency logs"),
            ));
        }
        if file.timestamp_authorities.len() > MAX_ENTRIES {
            return Err(invalid(
                "timestampAuthorities",
                format!("must name at most {MAX_ENTRIES} timestamp authorities"),
            ));
        }
        let logs = read_logs(&file.tlogs, "tlogs")?;
        let ct_logs = read_logs(&file.ctlogs, "ctlogs")?;
        let mut authorities = Vec::with_capacity(file.certificate_authorities.len());
        for (i, authority) in file.certificate_authorities.iter().enumerate() {
            let field = format!("certificateAuthorities[{i}]");
            let (mut certificates, valid) = read_chain(authority, &field, 1, false)?;
            let root = certificates.pop().unwrap_or_default();
            authorities.push(Authority {
                root,
                intermediates: certificates,
                valid,
            });
        }
        let mut timestamp_authorities = Vec::with_capacity(file.timestamp_authorities.len());
        for (i, authority) in file.timestamp_authorities.iter().enumerate() {
            let field = format!("timestampAuthorities[{i}]");
            let (chain, valid) = read_chain(authority, &field, 0, true)?;
            timestamp_authorities.push(TimestampAuthority { chain, valid });
        }
        Ok(TrustedRoot {
            logs,
            ct_logs,
            authorities,
            timestamp_authorities,
            fingerprint: format!("sha256:{:x}", Sha256::digest(text)),
        })
    }

    /// `sha256:<hex>` of the file's bytes.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The log whose ID is `id`, trusted at `time`.
    pub(crate) fn log(&self, id: &str, time: i64) -> Option<&Log> {
        self.logs
            .iter()
            .find(|log| log.id.eq_ignore_ascii_case(id) && log.valid.contains(time))
    }

    /// The certificate transparency log whose ID is `id` (hex), trusted at `time`.
    pub(crate) fn ct_log(&self, id: &str, time: i64) -> Option<&Log> {
        self.ct_logs
            .iter()
            .find(|log| log.id.eq_ignore_ascii_case(id) && log.valid.contains(time))
    }

    /// Whether the root names any certificate transparency log.
    pub fn has_ct_logs(&self) -> bool {
        !self.ct_logs.is_empty()
    }

    /// The authorities trusted at `time`.
    pub(crate) fn authorities_at(&self, time: i64) -> impl Iterator<Item = &Authority> {
        self.authorities
            .iter()
            .filter(move |authority| authority.valid.contains(time))
    }
}

/// An authority's chain (DER, as the file orders it: at least `least` certificates, each one
/// parsed) and its period.
fn read_chain(
    authority: &AuthorityFile,
    field: &str,
    least: usize,
    starts: bool,
) -> Result<(Vec<Vec<u8>>, Validity), TrustedRootError> {
    let chain = &authority.cert_chain.certificates;
    if chain.len() < least || chain.len() > MAX_CHAIN {
        return Err(invalid(
            &format!("{field}.certChain.certificates"),
            format!("must hold {least} to {MAX_CHAIN} certificates"),
        ));
    }
    let mut certificates = Vec::with_capacity(chain.len());
    for (j, certificate) in chain.iter().enumerate() {
        let at = format!("{field}.certChain.certificates[{j}].rawBytes");
        let der = decode(&certificate.raw_bytes, &at)?;
        x509_parser::parse_x509_certificate(&der)
            .map_err(|_| invalid(&at, "is not a DER certificate".to_string()))?;
        certificates.push(der);
    }
    let valid = period(
        authority.valid_for.as_ref(),
        &format!("{field}.validFor"),
        starts,
    )?;
    Ok((certificates, valid))
}

/// The SubjectPublicKeyInfo (DER) of a PKCS#1 RSAPublicKey `pkcs1`: rsaEncryption with NULL
/// parameters, the key as its bit string.
fn rsa_spki(pkcs1: &[u8]) -> Vec<u8> {
    fn tagged(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let length = content.len().to_be_bytes();
        let significant: Vec<u8> = length.iter().copied().skip_while(|b| *b == 0).collect();
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.push(0x80 | significant.len() as u8);
            out.extend(significant);
        }
        out.extend_from_slice(content);
        out
    }
    const RSA_ENCRYPTION: [u8; 15] = [
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    let mut bits = vec![0x00];
    bits.extend_from_slice(pkcs1);
    let mut content = RSA_ENCRYPTION.to_vec();
    content.extend(tagged(0x03, &bits));
    tagged(0x30, &content)
}

/// The origin a log's checkpoints name: its `baseUrl` without the scheme and any trailing `/`.
fn origin(base_url: &str) -> &str {
    let origin = base_url
        .strip_prefix("https://")
        .or_else(|| base_url.strip_prefix("http://"))
        .unwrap_or(base_url);
    origin.trim_end_matches('/')
}

/// The IDs a log with key `der` (SubjectPublicKeyInfo) and `origin` may go by: the SHA-256 of
/// its key, and its signed-note key hash ([`note_key_hash`]), as Rekor v2 logs are named.
fn log_ids(der: &[u8], origin: &str) -> [[u8; 32]; 2] {
    [Sha256::digest(der).into(), note_key_hash(der, origin)]
}

/// A log's signed-note key hash, as rekor-tiles names its keys (`pkg/note`): for an Ed25519
/// key, C2SP's SHA-256 of the origin, a newline, the signature type 0x01 and the raw key; for
/// an RSA key, SHA-256 of the origin, a newline, 0xFF, `PKIX-RSA-PKCS#1v1.5` and its
/// SubjectPublicKeyInfo; for another key (ECDSA), the SHA-256 of its SubjectPublicKeyInfo.
/// A checkpoint's signature line names the key by this hash's first four bytes.
pub(crate) fn note_key_hash(der: &[u8], origin: &str) -> [u8; 32] {
    const RSA_ENCRYPTION: [u8; 11] = [
        0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
    ];
    let mut hash = Sha256::new();
    if let Some(raw) = ed25519_raw(der) {
        hash.update(origin.as_bytes());
        hash.update([b'\n', 0x01]);
        hash.update(raw);
    } else if der
        .windows(RSA_ENCRYPTION.len())
        .take(8)
        .any(|w| w == RSA_ENCRYPTION)
    {
        // (rsaEncryption is the first thing in an RSA SubjectPublicKeyInfo's algorithm)
        hash.update(origin.as_bytes());
        hash.update([b'\n', 0xff]);
        hash.update(b"PKIX-RSA-PKCS#1v1.5");
        hash.update(der);
    } else {
        hash.update(der);
    }
    hash.finalize().into()
}

/// The raw 32-byte key of an Ed25519 SubjectPublicKeyInfo (OID 1.3.101.112).
pub(crate) fn ed25519_raw(der: &[u8]) -> Option<&[u8]> {
    const PREFIX: [u8; 12] = [
        0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
    ];
    der.strip_prefix(&PREFIX).filter(|raw| raw.len() == 32)
}

/// The logs of `files` (the root's `field`), each key parsed and its ID checked against it.
fn read_logs(files: &[TlogFile], field: &str) -> Result<Vec<Log>, TrustedRootError> {
    let mut logs = Vec::with_capacity(files.len());
    for (i, log) in files.iter().enumerate() {
        let field = format!("{field}[{i}]");
        let mut der = decode(
            &log.public_key.raw_bytes,
            &format!("{field}.publicKey.rawBytes"),
        )?;
        if log.public_key.key_details.starts_with("PKCS1_RSA") {
            // A PKCS#1 RSAPublicKey, as the staging root gives its first CT log's key.
            der = rsa_spki(&der);
        }
        let key = CosignVerificationKey::try_from_der(&der)
            .map_err(|e| invalid(&format!("{field}.publicKey.rawBytes"), e.to_string()))?;
        let key_id = decode(&log.log_id.key_id, &format!("{field}.logId.keyId"))?;
        let origin = origin(&log.base_url);
        if !log_ids(&der, origin)
            .iter()
            .any(|id| id.as_slice() == key_id.as_slice())
        {
            return Err(invalid(
                &format!("{field}.logId.keyId"),
                "is not the SHA-256 of the log's key (nor, for an Ed25519 key, its signed-note \
                 key hash under the origin of baseUrl)"
                    .to_string(),
            ));
        }
        logs.push(Log {
            id: hex(&key_id),
            key,
            valid: period(
                log.public_key.valid_for.as_ref(),
                &format!("{field}.publicKey.validFor"),
                true,
            )?,
            origin: origin.to_string(),
            der,
        });
    }
    Ok(logs)
}

fn invalid(field: &str, problem: String) -> TrustedRootError {
    TrustedRootError::Invalid {
        field: field.to_string(),
        problem,
    }
}

fn decode(text: &str, field: &str) -> Result<Vec<u8>, TrustedRootError> {
    STANDARD
        .decode(text.trim())
        .map_err(|_| invalid(field, "is not base64".to_string()))
}

/// The period `period` gives; with `starts`, one without a start is refused (a log's or a
/// timestamp authority's, as sigstore-go refuses it: trusted since ever, it would vouch for
/// any time).
fn period(
    period: Option<&PeriodFile>,
    field: &str,
    starts: bool,
) -> Result<Validity, TrustedRootError> {
    if starts && period.and_then(|p| p.start.as_ref()).is_none() {
        return Err(invalid(&format!("{field}.start"), "is missing".to_string()));
    }
    let time = |text: &Option<String>, which: &str| -> Result<Option<i64>, TrustedRootError> {
        text.as_deref()
            .map(|text| {
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .map(|t| t.unix_timestamp())
                    .map_err(|_| {
                        invalid(
                            &format!("{field}.{which}"),
                            "is not an RFC 3339 time".to_string(),
                        )
                    })
            })
            .transpose()
    };
    match period {
        None => Ok(Validity {
            start: i64::MIN,
            end: None,
        }),
        Some(p) => Ok(Validity {
            start: time(&p.start, "start")?.unwrap_or(i64::MIN),
            end: time(&p.end, "end")?,
        }),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signatures::keyless::test_authority::TestSigstore;

    #[test]
    fn a_test_root_reads_with_its_log_and_authority() {
        let sigstore = TestSigstore::new();
        let root = TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap();
        assert_eq!(root.logs.len(), 1);
        assert!(root.log(&sigstore.log_id(), sigstore.now).is_some());
        assert!(root
            .log(&sigstore.log_id().to_uppercase(), sigstore.now)
            .is_some());
        assert!(root.log("00", sigstore.now).is_none());
        assert_eq!(root.authorities_at(sigstore.now).count(), 1);
        assert!(root.fingerprint().starts_with("sha256:"));
        // its CT log, by its ID, within its period only
        assert_eq!(root.ct_logs.len(), 1);
        let ct = root.ct_logs[0].id.clone();
        assert!(root.ct_log(&ct, sigstore.now).is_some());
        assert!(root.ct_log(&ct, 1_500_000_000).is_none());
        assert!(root.ct_log(&sigstore.log_id(), sigstore.now).is_none());
    }

    #[test]
    fn each_problem_names_its_field() {
        let good: serde_json::Value =
            serde_json::from_str(&TestSigstore::new().trusted_root()).unwrap();
        let cases: Vec<(&str, serde_json::Value, &str)> = vec![
            ("/mediaType", "text/plain".into(), "mediaType"),
            ("/tlogs", serde_json::json!([]), "tlogs"),
            (
                "/tlogs/0/publicKey/rawBytes",
                "!!".into(),
                "tlogs[0].publicKey.rawBytes",
            ),
            (
                "/tlogs/0/publicKey/rawBytes",
                "AAAA".into(),
                "tlogs[0].publicKey.rawBytes",
            ),
            (
                "/tlogs/0/logId/keyId",
                "AAAA".into(),
                "tlogs[0].logId.keyId",
            ),
            (
                "/tlogs/0/publicKey/validFor/start",
                "yesterday".into(),
                "tlogs[0].publicKey.validFor.start",
            ),
            (
                "/ctlogs/0/publicKey/rawBytes",
                "AAAA".into(),
                "ctlogs[0].publicKey.rawBytes",
            ),
            (
                "/ctlogs/0/logId/keyId",
                "AAAA".into(),
                "ctlogs[0].logId.keyId",
            ),
            (
                "/ctlogs",
                serde_json::Value::Array(vec![good["ctlogs"][0].clone(); MAX_ENTRIES + 1]),
                "ctlogs",
            ),
            (
                "/certificateAuthorities/0/certChain/certificates",
                serde_json::json!([]),
                "certificateAuthorities[0].certChain.certificates",
            ),
            (
                "/certificateAuthorities/0/certChain/certificates/0/rawBytes",
                "AAAA".into(),
                "certificateAuthorities[0].certChain.certificates[0].rawBytes",
            ),
        ];
        for (pointer, value, field) in cases {
            let mut root = good.clone();
            *root.pointer_mut(pointer).unwrap() = value;
            match TrustedRoot::parse(root.to_string().as_bytes()) {
                Err(TrustedRootError::Invalid { field: f, .. }) => {
                    assert_eq!(f, field, "{pointer}")
                }
                other => panic!("{pointer}: {other:?}"),
            }
        }
    }

    #[test]
    fn hostile_files_are_refused_in_bounds() {
        assert_eq!(
            TrustedRoot::parse(&vec![b' '; MAX_TRUSTED_ROOT_BYTES + 1]).unwrap_err(),
            TrustedRootError::TooLarge
        );
        let deep = "[".repeat(10_000);
        assert!(matches!(
            TrustedRoot::parse(deep.as_bytes()),
            Err(TrustedRootError::Malformed(_))
        ));
        let message = TrustedRoot::parse(b"{\"mediaType\":1}\n\x1b")
            .unwrap_err()
            .to_string();
        assert!(!message.contains('\n'), "{message}");
    }

    /// A Rekor v2 log is named by its signed-note key hash; before 2026-12-01 such a root, the
    /// public good instance's of today among them, was refused at load.
    #[test]
    fn todays_public_good_and_staging_roots_load() {
        let read = |path: &str| {
            let text = std::fs::read(format!(
                "{}/tests/fixtures/{path}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            TrustedRoot::parse(&text).unwrap()
        };
        let public_good = read("sigstore-public-good/trusted_root-4.5.1.json");
        let v2 = public_good
            .logs
            .iter()
            .find(|log| log.origin == "log2025-1.rekor.sigstore.dev")
            .unwrap();
        assert!(ed25519_raw(&v2.der).is_some());
        assert_ne!(v2.id, hex(&Sha256::digest(&v2.der)));
        assert_eq!(public_good.timestamp_authorities.len(), 1);
        assert_eq!(public_good.timestamp_authorities[0].chain.len(), 2);
        let v1 = public_good
            .logs
            .iter()
            .find(|log| log.origin == "rekor.sigstore.dev")
            .unwrap();
        assert_eq!(v1.id, hex(&Sha256::digest(&v1.der)));

        let staging = read("sigstore-staging-rekor2/trusted_root.json");
        assert_eq!(staging.logs.len(), 4);
        // Its first CT log's key is a PKCS#1 RSA key, named by the SHA-256 of its SPKI.
        let rsa = &staging.ct_logs[0];
        assert_eq!(rsa.id, hex(&Sha256::digest(&rsa.der)));
        assert_eq!(
            rsa.id,
            "1b7c142a4e992ba7df1e1fc5742454136c157a4cb31c4108a521b8b1abe7bf4c"
        );

        // A v2 log named by a hash of another origin is refused, naming the field.
        let text: serde_json::Value = serde_json::from_slice(
            &std::fs::read(format!(
                "{}/tests/fixtures/sigstore-staging-rekor2/trusted_root.json",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap(),
        )
        .unwrap();
        let mut elsewhere = text.clone();
        elsewhere["tlogs"][1]["baseUrl"] = "https://log2025-alpha9.rekor.sigstage.dev".into();
        assert!(matches!(
            TrustedRoot::parse(elsewhere.to_string().as_bytes()),
            Err(TrustedRootError::Invalid { field, .. }) if field == "tlogs[1].logId.keyId"
        ));
        // A log or a timestamp authority trusted since ever is refused (sigstore-conformance's
        // trust-root-tlog-missing-validity-start_fail).
        for (pointer, field) in [
            (
                "/tlogs/0/publicKey/validFor",
                "tlogs[0].publicKey.validFor.start",
            ),
            (
                "/timestampAuthorities/0/validFor",
                "timestampAuthorities[0].validFor.start",
            ),
        ] {
            let mut open = text.clone();
            open.pointer_mut(pointer)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove("start");
            assert_eq!(
                TrustedRoot::parse(open.to_string().as_bytes()).unwrap_err(),
                TrustedRootError::Invalid {
                    field: field.to_string(),
                    problem: "is missing".to_string()
                }
            );
        }
    }

    #[test]
    fn validity_is_inclusive_and_open_ended_without_an_end() {
        let v = Validity {
            start: 10,
            end: Some(20),
        };
        assert!(!v.contains(9) && v.contains(10) && v.contains(20) && !v.contains(21));
        assert!(Validity {
            start: 10,
            end: None
        }
        .contains(i64::MAX));
    }
}
