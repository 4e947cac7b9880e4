//! A Sigstore of the tests' own, made offline: a Fulcio-like CA that issues short-lived
//! code-signing certificates naming an OIDC issuer (extension 1.3.6.1.4.1.57264.1.8) and a
//! subject (an email or URI SAN), each carrying the SCT of a CT log of its own (RFC 6962 §3.3,
//! the precertificate signed), a Rekor-like log key that signs entry timestamps over
//! `hashedrekord` entries, and the `trusted_root.json` naming all three, as `cosign sign`
//! keyless leaves them in a signature layer's annotations. Shared by path by the unit tests
//! (`src/signatures/keyless.rs`) and the integration tests (`tests/common`), so it names no
//! crate of its own.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType,
    SigningKey, PKCS_ECDSA_P256_SHA256,
};
use sha2::{Digest as _, Sha256};

/// The certificate extension Fulcio writes the OIDC issuer in (a DER UTF8String).
const ISSUER_V2: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 8];
/// The certificate extension holding the SCT list (RFC 6962 §3.3).
const SCT_LIST: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 2];

/// The SCTs a certificate carries. (The unit tests of `sct` make each; the integration tests
/// only some.)
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
pub enum Sct {
    /// One, of the CT log of the trusted root, over this certificate, now.
    Good,
    /// None: the certificate has no SCT list.
    None,
    /// One, of a CT log the root does not name.
    OtherLog,
    /// One, of the trusted CT log, over another certificate.
    OverAnotherCertificate,
    /// One, of the trusted CT log, at this time (milliseconds).
    At(u64),
    /// A list that does not parse.
    Malformed,
    /// The good list, twice (two extensions).
    TwoLists,
    /// One, of the trusted CT log, over this certificate, but naming SHA-384 as its hash.
    Sha384,
    /// This many of other logs, then a good one.
    AfterOthers(usize),
    /// One, of the trusted CT log, over this certificate, but naming the key of the issuer's
    /// own issuer (of [`TestSigstore::with_two_intermediates`]) as the issuer's.
    IssuersIssuerKey,
}

/// A test Sigstore: one CA, one log, one CT log.
pub struct TestSigstore {
    ca: Issuer<'static, KeyPair>,
    ca_der: Vec<u8>,
    ca_key: Vec<u8>,
    /// The trusted root's chain, the issuing CA first and the root last: the CA alone, or
    /// (two intermediates) the CA, the CA's issuer and their root.
    chain_der: Vec<Vec<u8>>,
    /// The key of the CA's own issuer, when it is an intermediate.
    issuers_issuer_key: Option<Vec<u8>>,
    log: Arc<KeyPair>,
    ct: Arc<KeyPair>,
    /// The moment entries are logged at, and certificates are valid around (Unix seconds).
    pub now: i64,
}

/// What `cosign sign` keyless leaves on a signature layer: the signature, the certificate
/// (PEM), the chain (PEM) and the log's bundle (JSON).
#[derive(Debug, Clone)]
pub struct KeylessSignature {
    pub signature: String,
    pub certificate: String,
    pub chain: String,
    pub bundle: String,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A CA's parameters: `name`, valid a day ago to a year on, for certificates and CRLs.
fn ca_params(name: &str, now: i64) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = at(now - 86_400);
    params.not_after = at(now + 365 * 86_400);
    params
}

fn at(seconds: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(seconds).unwrap()
}

impl TestSigstore {
    /// A fresh CA and log.
    pub fn new() -> TestSigstore {
        TestSigstore::with_log(Arc::new(
            KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap(),
        ))
    }

    /// Another CA that logs in this one's logs: its certificates are logged, but not issued by
    /// this CA.
    pub fn sharing_log(&self) -> TestSigstore {
        let mut other = TestSigstore::with_log(self.log.clone());
        other.ct = self.ct.clone();
        other
    }

    fn with_log(log: Arc<KeyPair>) -> TestSigstore {
        let now = unix_now();
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let params = ca_params("test-fulcio", now);
        let ca_der = params.self_signed(&key).unwrap().der().to_vec();
        TestSigstore {
            ca_key: key.subject_public_key_info(),
            ca: Issuer::new(params, key),
            chain_der: vec![ca_der.clone()],
            ca_der,
            issuers_issuer_key: None,
            log,
            ct: Arc::new(KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap()),
            now,
        }
    }

    /// A Sigstore whose certificates are issued by an intermediate CA, itself issued by a
    /// second intermediate under the root: the leaf's issuer is the first intermediate of the
    /// path, the one whose key an SCT signs.
    #[allow(dead_code)]
    pub fn with_two_intermediates() -> TestSigstore {
        TestSigstore::with_two_intermediates_using(None)
    }

    /// [`Self::with_two_intermediates`], each intermediate naming `usage` as its only extended
    /// key usage (`None`: naming none; Fulcio's name code signing).
    #[allow(dead_code)]
    pub fn with_two_intermediates_using(usage: Option<ExtendedKeyUsagePurpose>) -> TestSigstore {
        let now = unix_now();
        let ca = |name: &str| {
            (
                KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap(),
                ca_params(name, now),
            )
        };
        let intermediate = |name: &str| {
            let (key, mut params) = ca(name);
            params.extended_key_usages = usage.iter().cloned().collect();
            (key, params)
        };
        let (root_key, root_params) = ca("test-root");
        let root_der = root_params.self_signed(&root_key).unwrap().der().to_vec();
        let root = Issuer::new(root_params, root_key);
        let (upper_key, upper_params) = intermediate("test-intermediate-upper");
        let upper_der = upper_params
            .signed_by(&upper_key, &root)
            .unwrap()
            .der()
            .to_vec();
        let upper_spki = upper_key.subject_public_key_info();
        let upper = Issuer::new(upper_params, upper_key);
        let (key, params) = intermediate("test-fulcio");
        let ca_der = params.signed_by(&key, &upper).unwrap().der().to_vec();
        TestSigstore {
            ca_key: key.subject_public_key_info(),
            ca: Issuer::new(params, key),
            chain_der: vec![ca_der.clone(), upper_der, root_der],
            ca_der,
            issuers_issuer_key: Some(upper_spki),
            log: Arc::new(KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap()),
            ct: Arc::new(KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap()),
            now,
        }
    }

    /// The CA's key (SubjectPublicKeyInfo, DER), whose hash an SCT signs.
    #[allow(dead_code)]
    pub fn ca_key(&self) -> Vec<u8> {
        self.ca_key.clone()
    }

    /// `sha256(log key)`, hex: the log's ID as a bundle names it.
    pub fn log_id(&self) -> String {
        hex(&Sha256::digest(self.log.subject_public_key_info()))
    }

    /// The `trusted_root.json` trusting this CA and this log.
    pub fn trusted_root(&self) -> String {
        let key = self.log.subject_public_key_info();
        serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{
                "baseUrl": "https://rekor.test",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": STANDARD.encode(&key),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": "2020-01-01T00:00:00Z"},
                },
                "logId": {"keyId": STANDARD.encode(Sha256::digest(&key))},
            }],
            "certificateAuthorities": [{
                "subject": {"organization": "test", "commonName": "test-fulcio"},
                "uri": "https://fulcio.test",
                "certChain": {"certificates": self.chain_der.iter()
                    .map(|der| serde_json::json!({"rawBytes": STANDARD.encode(der)}))
                    .collect::<Vec<_>>()},
                "validFor": {"start": "2020-01-01T00:00:00Z"},
            }],
            "ctlogs": [{
                "baseUrl": "https://ctfe.test",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": STANDARD.encode(self.ct.subject_public_key_info()),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": "2020-01-01T00:00:00Z"},
                },
                "logId": {"keyId": STANDARD.encode(Sha256::digest(self.ct.subject_public_key_info()))},
            }],
            "timestampAuthorities": [],
        })
        .to_string()
    }

    /// A certificate for `subject` of `issuer` valid from `from` for ten minutes, carrying
    /// `sct`, and its key.
    pub fn certificate_with(
        &self,
        issuer: &str,
        subject: &str,
        from: i64,
        sct: Sct,
    ) -> (String, KeyPair) {
        let (certificate, key) = self.issue_with(issuer, subject, from, sct);
        (certificate.pem(), key)
    }

    /// A certificate for `subject` of `issuer`, valid now, with its SCT, that names no extended
    /// key usage (so not code signing), and its key.
    #[allow(dead_code)]
    pub fn certificate_for_anything(&self, issuer: &str, subject: &str) -> (String, KeyPair) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = self.leaf(issuer, subject, self.now - 30);
        params.extended_key_usages.clear();
        let precertificate = params.signed_by(&key, &self.ca).unwrap();
        let sct = self.sct(
            &self.ct,
            self.now as u64 * 1000,
            &tbs_of(precertificate.der()),
        );
        params
            .custom_extensions
            .push(sct_extension(&sct_list(&[sct])));
        (params.signed_by(&key, &self.ca).unwrap().pem(), key)
    }

    /// One certificate (DER) with its SCT and without: the second is the precertificate the
    /// CT log saw, but signed.
    #[allow(dead_code)]
    pub fn certificate_pair(&self, issuer: &str, subject: &str, from: i64) -> (Vec<u8>, Vec<u8>) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = self.leaf(issuer, subject, from);
        let without = params.signed_by(&key, &self.ca).unwrap().der().to_vec();
        let sct = self.sct(&self.ct, self.now as u64 * 1000, &tbs_of(&without));
        params
            .custom_extensions
            .push(sct_extension(&sct_list(&[sct])));
        let with = params.signed_by(&key, &self.ca).unwrap().der().to_vec();
        (with, without)
    }

    fn issue(&self, issuer: &str, subject: &str, from: i64) -> (rcgen::Certificate, KeyPair) {
        self.issue_with(issuer, subject, from, Sct::Good)
    }

    fn issue_with(
        &self,
        issuer: &str,
        subject: &str,
        from: i64,
        sct: Sct,
    ) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = self.leaf(issuer, subject, from);
        let precertificate = params.signed_by(&key, &self.ca).unwrap();
        let tbs = tbs_of(precertificate.der());
        let now = self.now as u64 * 1000;
        let other_log = || KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let list = match sct {
            Sct::None => return (precertificate, key),
            Sct::Good | Sct::TwoLists => sct_list(&[self.sct(&self.ct, now, &tbs)]),
            Sct::Sha384 => sct_list(&[self.sct_hashed(&self.ct, now, &tbs, 5)]),
            Sct::OtherLog => sct_list(&[self.sct(&other_log(), now, &tbs)]),
            Sct::OverAnotherCertificate => {
                let other = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
                let another = params.signed_by(&other, &self.ca).unwrap();
                sct_list(&[self.sct(&self.ct, now, &tbs_of(another.der()))])
            }
            Sct::At(time) => sct_list(&[self.sct(&self.ct, time, &tbs)]),
            Sct::Malformed => vec![0x00, 0x05, 0x01],
            Sct::IssuersIssuerKey => {
                let key = self.issuers_issuer_key.as_deref().unwrap();
                sct_list(&[self.sct_keyed(&self.ct, now, &tbs, 4, key)])
            }
            Sct::AfterOthers(n) => {
                let mut scts: Vec<Vec<u8>> =
                    (0..n).map(|_| self.sct(&other_log(), now, &tbs)).collect();
                scts.push(self.sct(&self.ct, now, &tbs));
                sct_list(&scts)
            }
        };
        params.custom_extensions.push(sct_extension(&list));
        if let Sct::TwoLists = sct {
            params.custom_extensions.push(sct_extension(&list));
        }
        (params.signed_by(&key, &self.ca).unwrap(), key)
    }

    /// A leaf's parameters: `subject` of `issuer`, valid from `from` for ten minutes.
    fn leaf(&self, issuer: &str, subject: &str, from: i64) -> CertificateParams {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params.subject_alt_names = vec![if subject.contains("://") {
            SanType::URI(subject.try_into().unwrap())
        } else {
            SanType::Rfc822Name(subject.try_into().unwrap())
        }];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.not_before = at(from);
        params.not_after = at(from + 600);
        let mut value = vec![0x0c];
        if issuer.len() >= 0x80 {
            value.push(0x81);
        }
        value.push(issuer.len() as u8);
        value.extend_from_slice(issuer.as_bytes());
        params
            .custom_extensions
            .push(CustomExtension::from_oid_content(ISSUER_V2, value));
        params
    }

    /// An SCT (RFC 6962 §3.2) of `log` at `time` (milliseconds) over the precertificate `tbs`
    /// this CA issued.
    fn sct(&self, log: &KeyPair, time: u64, tbs: &[u8]) -> Vec<u8> {
        self.sct_hashed(log, time, tbs, 4)
    }

    /// [`Self::sct`], naming `hash` (TLS's HashAlgorithm: 4 is SHA-256) as its hash.
    fn sct_hashed(&self, log: &KeyPair, time: u64, tbs: &[u8], hash: u8) -> Vec<u8> {
        self.sct_keyed(log, time, tbs, hash, &self.ca_key)
    }

    /// [`Self::sct_hashed`], naming `issuer_key` (SubjectPublicKeyInfo, DER) as the issuer's.
    fn sct_keyed(
        &self,
        log: &KeyPair,
        time: u64,
        tbs: &[u8],
        hash: u8,
        issuer_key: &[u8],
    ) -> Vec<u8> {
        let mut signed = vec![0u8, 0];
        signed.extend_from_slice(&time.to_be_bytes());
        signed.extend_from_slice(&1u16.to_be_bytes());
        signed.extend_from_slice(&Sha256::digest(issuer_key));
        signed.extend_from_slice(&(tbs.len() as u32).to_be_bytes()[1..]);
        signed.extend_from_slice(tbs);
        signed.extend_from_slice(&[0, 0]);
        let signature = log.sign(&signed).unwrap();
        let mut sct = vec![0u8];
        sct.extend_from_slice(&Sha256::digest(log.subject_public_key_info()));
        sct.extend_from_slice(&time.to_be_bytes());
        sct.extend_from_slice(&[0, 0, hash, 3]);
        sct.extend_from_slice(&(signature.len() as u16).to_be_bytes());
        sct.extend_from_slice(&signature);
        sct
    }

    /// `payload` signed keyless by `subject` of `issuer`, logged now.
    #[allow(dead_code)]
    pub fn sign(&self, payload: &[u8], issuer: &str, subject: &str) -> KeylessSignature {
        self.sign_with(payload, issuer, subject, Sct::Good)
    }

    /// [`Self::sign`], the certificate carrying `sct`.
    pub fn sign_with(
        &self,
        payload: &[u8],
        issuer: &str,
        subject: &str,
        sct: Sct,
    ) -> KeylessSignature {
        let (certificate, key) = self.certificate_with(issuer, subject, self.now - 30, sct);
        let signature = STANDARD.encode(key.sign(payload).unwrap());
        let bundle = self.log_entry(payload, &signature, &certificate, self.now);
        KeylessSignature {
            signature,
            certificate,
            chain: self.ca_pem(),
            bundle,
        }
    }

    /// The CA's certificate, PEM.
    pub fn ca_pem(&self) -> String {
        let body = STANDARD.encode(&self.ca_der);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            lines.join("\n")
        )
    }

    /// The bundle annotation of a `hashedrekord` entry of (`payload`, `signature`,
    /// `certificate`) logged at `time`: the entry and the log's signed timestamp over it.
    pub fn log_entry(
        &self,
        payload: &[u8],
        signature: &str,
        certificate: &str,
        time: i64,
    ) -> String {
        let body = serde_json::json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hex(&Sha256::digest(payload))}},
                "signature": {
                    "content": signature,
                    "publicKey": {"content": STANDARD.encode(certificate)},
                },
            },
        });
        let body = STANDARD.encode(body.to_string());
        let log_id = self.log_id();
        let set = self.set_over(&body, time);
        serde_json::json!({
            "SignedEntryTimestamp": set,
            "Payload": {"body": body, "integratedTime": time, "logIndex": 7, "logID": log_id},
        })
        .to_string()
    }

    /// The log's SET (base64) over an entry of `body` (base64) integrated at `time`, index 7:
    /// its signature over the entry's canonical JSON (RFC 8785: keys sorted, no blanks).
    pub fn set_over(&self, body: &str, time: i64) -> String {
        let log_id = self.log_id();
        let canonical = format!(
            r#"{{"body":"{body}","integratedTime":{time},"logID":"{log_id}","logIndex":7}}"#
        );
        STANDARD.encode(self.log.sign(canonical.as_bytes()).unwrap())
    }

    /// [`key_bundle`], logged in this Sigstore's log as cosign 3.1 logs it: a `hashedrekord`
    /// of the envelope's PAE naming the key, with a SET.
    #[allow(dead_code)]
    pub fn logged_key_bundle(&self, key: &KeyPair, statement: &[u8]) -> String {
        self.logged_key_bundle_as(key, statement, "hashedrekord")
    }

    /// [`Self::logged_key_bundle`], its log entry of `kind`: `dsse` as cosign before 3.1 logs
    /// it, `hashedrekord` (of the PAE) as cosign 3.1 on does.
    #[allow(dead_code)]
    pub fn logged_key_bundle_as(&self, key: &KeyPair, statement: &[u8], kind: &str) -> String {
        let signature = key.sign(&pae(statement)).unwrap();
        self.logged_bundle(
            statement,
            &signature,
            &key.public_key_pem(),
            ("publicKey", serde_json::json!({"hint": "test-key"})),
            kind,
        )
    }

    /// A cosign 3 bundle (v0.3) of `statement` signed keyless by `subject` of `issuer`: a DSSE
    /// envelope, the certificate, and a `dsse` log entry with its SET.
    pub fn keyless_bundle(&self, statement: &[u8], issuer: &str, subject: &str) -> String {
        self.keyless_bundle_logged(statement, issuer, subject, "dsse")
    }

    /// [`Self::keyless_bundle`], its log entry of `kind`: `dsse` as cosign before 3.1 logs it,
    /// `hashedrekord` (of the PAE) as cosign 3.1 on does.
    pub fn keyless_bundle_logged(
        &self,
        statement: &[u8],
        issuer: &str,
        subject: &str,
        kind: &str,
    ) -> String {
        let (certificate, key) = self.issue(issuer, subject, self.now - 30);
        let signature = key.sign(&pae(statement)).unwrap();
        let material = serde_json::json!({"rawBytes": STANDARD.encode(certificate.der())});
        self.logged_bundle(
            statement,
            &signature,
            &certificate.pem(),
            ("certificate", material),
            kind,
        )
    }

    /// A cosign 3 bundle (v0.3) of `statement` with `signature` over its PAE by `verifier`
    /// (PEM: a key or a certificate), verification material `material` (its field and value)
    /// and a log entry of `kind` (`dsse`, or `hashedrekord` of the PAE) with its SET.
    fn logged_bundle(
        &self,
        statement: &[u8],
        signature: &[u8],
        verifier: &str,
        (field, material): (&str, serde_json::Value),
        kind: &str,
    ) -> String {
        let signed = pae(statement);
        let verifier = STANDARD.encode(verifier);
        let body = if kind == "dsse" {
            serde_json::json!({
                "apiVersion": "0.0.1",
                "kind": "dsse",
                "spec": {
                    "envelopeHash": {"algorithm": "sha256", "value": hex(&Sha256::digest(b"envelope"))},
                    "payloadHash": {"algorithm": "sha256", "value": hex(&Sha256::digest(statement))},
                    "signatures": [{"signature": STANDARD.encode(signature), "verifier": verifier}],
                },
            })
        } else {
            serde_json::json!({
                "apiVersion": "0.0.1",
                "kind": kind,
                "spec": {
                    "data": {"hash": {"algorithm": "sha256", "value": hex(&Sha256::digest(&signed))}},
                    "signature": {"content": STANDARD.encode(signature), "publicKey": {"content": verifier}},
                },
            })
        };
        let body = STANDARD.encode(body.to_string());
        let key_id = Sha256::digest(self.log.subject_public_key_info());
        serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                field: material,
                "tlogEntries": [{
                    "logIndex": "7",
                    "logId": {"keyId": STANDARD.encode(key_id)},
                    "kindVersion": {"kind": kind, "version": "0.0.1"},
                    "integratedTime": self.now.to_string(),
                    "inclusionPromise": {"signedEntryTimestamp": self.set_over(&body, self.now)},
                    "canonicalizedBody": body,
                }],
            },
            "dsseEnvelope": envelope(statement, signature),
        })
        .to_string()
    }
}

/// A cosign 3 bundle (v0.3) of `statement` signed with `key`: a DSSE envelope and the key's
/// hint, no log entry (as `cosign sign --tlog-upload=false` leaves it).
pub fn key_bundle(key: &KeyPair, statement: &[u8]) -> String {
    let signature = key.sign(&pae(statement)).unwrap();
    serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "test-key"}},
        "dsseEnvelope": envelope(statement, &signature),
    })
    .to_string()
}

/// The in-toto statement `cosign sign` (new bundle format) signs for `digest` of `repository`.
pub fn statement(repository: &str, digest: &str) -> Vec<u8> {
    let (algorithm, value) = digest.split_once(':').unwrap();
    serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": repository, "digest": {algorithm: value}}],
        "predicateType": "https://sigstore.dev/cosign/sign/v1",
        "predicate": {},
    })
    .to_string()
    .into_bytes()
}

fn envelope(statement: &[u8], signature: &[u8]) -> serde_json::Value {
    serde_json::json!({
        "payload": STANDARD.encode(statement),
        "payloadType": "application/vnd.in-toto+json",
        "signatures": [{"sig": STANDARD.encode(signature)}],
    })
}

/// DSSE's pre-authentication encoding of an in-toto `statement`.
fn pae(statement: &[u8]) -> Vec<u8> {
    let kind = "application/vnd.in-toto+json";
    let mut out = format!("DSSEv1 {} {kind} {} ", kind.len(), statement.len()).into_bytes();
    out.extend_from_slice(statement);
    out
}

/// A TLS `SignedCertificateTimestampList` of `scts`.
fn sct_list(scts: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Vec::new();
    for sct in scts {
        body.extend_from_slice(&(sct.len() as u16).to_be_bytes());
        body.extend_from_slice(sct);
    }
    let mut list = (body.len() as u16).to_be_bytes().to_vec();
    list.extend_from_slice(&body);
    list
}

/// The SCT list extension: its value a DER OCTET STRING holding `list`.
fn sct_extension(list: &[u8]) -> CustomExtension {
    let mut value = vec![0x04];
    value.extend_from_slice(&der_length(list.len()));
    value.extend_from_slice(list);
    CustomExtension::from_oid_content(SCT_LIST, value)
}

fn der_length(length: usize) -> Vec<u8> {
    match length {
        0..0x80 => vec![length as u8],
        0x80..0x100 => vec![0x81, length as u8],
        _ => vec![0x82, (length >> 8) as u8, length as u8],
    }
}

/// A certificate's TBSCertificate: the first element of its SEQUENCE.
fn tbs_of(certificate: &[u8]) -> Vec<u8> {
    let header = |der: &[u8]| -> (usize, usize) {
        match der[1] {
            n if n < 0x80 => (2, n as usize),
            0x81 => (3, der[2] as usize),
            _ => (4, u16::from_be_bytes([der[2], der[3]]) as usize),
        }
    };
    let inner = &certificate[header(certificate).0..];
    let (head, length) = header(inner);
    inner[..head + length].to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
