//! A trusted cosign public key: parsed from PEM once (when the policy is loaded, so a key that
//! cannot be read is a load error, not an admission's), and named by its fingerprint, the
//! SHA-256 of its DER form, which a verification's cache key carries. The cryptography is the
//! `sigstore` crate's (ECDSA P-256/384/521, Ed25519, RSA).

use sha2::{Digest as _, Sha256};
use sigstore::crypto::{CosignVerificationKey, Signature};

/// A public key a policy trusts.
#[derive(Debug, Clone)]
pub struct PublicKey {
    fingerprint: String,
    key: CosignVerificationKey,
    der: Vec<u8>,
}

/// Why a PEM text is not a key pinhook can verify with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("not a PEM public key (-----BEGIN PUBLIC KEY-----)")]
    NotPem,
    #[error("not a public key cosign signs with (ECDSA P-256/384/521, Ed25519 or RSA): {0}")]
    Unsupported(String),
}

impl PublicKey {
    /// The key in `pem` (one `PUBLIC KEY` block, as `cosign generate-key-pair` writes it).
    pub fn from_pem(pem: &str) -> Result<PublicKey, KeyError> {
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.trim().as_bytes())
            .map_err(|_| KeyError::NotPem)?;
        if block.label != "PUBLIC KEY" {
            return Err(KeyError::NotPem);
        }
        let key = CosignVerificationKey::try_from_der(&block.contents)
            .map_err(|e| KeyError::Unsupported(e.to_string()))?;
        let fingerprint = format!("sha256:{:x}", Sha256::digest(&block.contents));
        Ok(PublicKey {
            fingerprint,
            key,
            der: block.contents,
        })
    }

    /// The key's SubjectPublicKeyInfo, DER: what a log entry of its signature names.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// `sha256:<hex>` of the key's DER form.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Whether `signature` (base64, as cosign writes it) is this key's over `payload`.
    pub fn signed(&self, signature: &str, payload: &[u8]) -> bool {
        self.key
            .verify_signature(
                Signature::Base64Encoded(signature.trim().as_bytes()),
                payload,
            )
            .is_ok()
    }

    /// Whether `signature` (raw bytes) is this key's over `payload`.
    pub fn signed_raw(&self, signature: &[u8], payload: &[u8]) -> bool {
        self.key
            .verify_signature(Signature::Raw(signature), payload)
            .is_ok()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use base64::Engine as _;
    use sigstore::crypto::{SigStoreSigner, SigningScheme};

    use super::*;

    /// A fresh P-256 key pair, as `cosign generate-key-pair` makes: the signer and its PEM.
    pub(crate) fn key_pair() -> (SigStoreSigner, String) {
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .unwrap();
        let pem = signer
            .to_sigstore_keypair()
            .unwrap()
            .public_key_to_pem()
            .unwrap();
        (signer, pem)
    }

    /// `payload` signed by `signer`, base64 as in the annotation.
    pub(crate) fn sign(signer: &SigStoreSigner, payload: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(signer.sign(payload).unwrap())
    }

    #[test]
    fn a_key_verifies_its_own_signatures_and_no_others() {
        let (signer, pem) = key_pair();
        let (other, other_pem) = key_pair();
        let key = PublicKey::from_pem(&pem).unwrap();
        let payload = b"payload";
        assert!(key.signed(&sign(&signer, payload), payload));
        assert!(!key.signed(&sign(&other, payload), payload));
        assert!(!key.signed(&sign(&signer, payload), b"another payload"));
        assert!(!key.signed("not base64 !", payload));
        let fingerprint = PublicKey::from_pem(&other_pem)
            .unwrap()
            .fingerprint()
            .to_string();
        assert_ne!(key.fingerprint(), fingerprint);
        assert!(key.fingerprint().starts_with("sha256:"));
    }

    #[test]
    fn what_is_not_a_public_key_is_named() {
        assert_eq!(PublicKey::from_pem("hello").unwrap_err(), KeyError::NotPem);
        let certificate = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(
            PublicKey::from_pem(certificate).unwrap_err(),
            KeyError::NotPem
        );
        let garbage = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
        assert!(matches!(
            PublicKey::from_pem(garbage).unwrap_err(),
            KeyError::Unsupported(_)
        ));
    }
}
