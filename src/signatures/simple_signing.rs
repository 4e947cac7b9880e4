//! cosign's simple signing payload and the verdict on an image's signatures: a layer counts
//! when a trusted key signed its payload and the payload, a cosign container image signature,
//! names the digest pinned. Every other outcome has one name of a fixed vocabulary
//! ([`Verdict::reason`]) for denials, reports and metrics.

use serde::Deserialize;

use super::key::PublicKey;
use crate::reference::Digest;

/// The `type` of a cosign container image signature's payload.
pub const COSIGN_TYPE: &str = "cosign container image signature";
/// The annotation of a signature layer that holds its signature, base64.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// One layer of a signature manifest: its payload (already checked against its descriptor's
/// digest and size) and its signature annotation.
#[derive(Debug, Clone, Copy)]
pub struct SignatureLayer<'a> {
    pub payload: &'a [u8],
    pub signature: &'a str,
}

/// What an image's signatures say of the digest pinned, for one set of trusted keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A trusted key signed a payload naming the pinned digest.
    Verified { key: String },
    /// No signature at all (no signature manifest, or one without layers).
    NoSignature,
    /// Signatures, none of them by a trusted key.
    OtherKey,
    /// A trusted key signed, but a payload naming another digest (or not a cosign payload).
    OtherDigest { signed: String },
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

impl Verdict {
    /// The verdict's name in the fixed vocabulary.
    pub fn reason(&self) -> &'static str {
        match self {
            Verdict::Verified { .. } => "verified",
            Verdict::NoSignature => "no_signature",
            Verdict::OtherKey => "other_key",
            Verdict::OtherDigest { .. } => "other_digest",
        }
    }

    /// One line for a person: why the image counts as signed, or why not.
    pub fn describe(&self) -> String {
        match self {
            Verdict::Verified { key } => format!("signed by key {key}"),
            Verdict::NoSignature => "no signature found".to_string(),
            Verdict::OtherKey => "signed by another key".to_string(),
            Verdict::OtherDigest { signed } => {
                format!("the trusted key signed another digest ({signed}), not this one")
            }
        }
    }
}

/// The verdict on `layers` for `keys` and the digest `pinned`.
pub fn judge(layers: &[SignatureLayer<'_>], keys: &[PublicKey], pinned: &Digest) -> Verdict {
    if layers.is_empty() {
        return Verdict::NoSignature;
    }
    let pinned = pinned.to_string();
    let mut other_digest = None;
    for layer in layers {
        for key in keys {
            if !key.signed(layer.signature, layer.payload) {
                continue;
            }
            match serde_json::from_slice::<Payload>(layer.payload) {
                Ok(payload)
                    if payload.critical.kind == COSIGN_TYPE
                        && payload.critical.image.digest == pinned =>
                {
                    return Verdict::Verified {
                        key: key.fingerprint().to_string(),
                    };
                }
                Ok(payload) => {
                    other_digest.get_or_insert_with(|| {
                        crate::text::one_line(&payload.critical.image.digest).into_owned()
                    });
                }
                Err(_) => {
                    other_digest.get_or_insert_with(|| "not a cosign payload".to_string());
                }
            }
        }
    }
    match other_digest {
        Some(signed) => Verdict::OtherDigest { signed },
        None => Verdict::OtherKey,
    }
}

/// The simple signing payload cosign signs for `digest` of `repository`.
pub fn payload_for(repository: &str, digest: &Digest) -> Vec<u8> {
    serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest.to_string()},
            "type": COSIGN_TYPE,
        },
        "optional": null,
    })
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signatures::key::tests::{key_pair, sign};

    fn digest(c: char) -> Digest {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .unwrap()
    }

    /// A trusted key, and the verdict on one signature over the payload for digest `signed`,
    /// made by the trusted key or (`other_signer`) another, judged for digest `pinned`.
    fn verdict_of(other_signer: bool, signed: char, pinned: char) -> (PublicKey, Verdict) {
        let (signer, pem) = key_pair();
        let (other, _) = key_pair();
        let key = PublicKey::from_pem(&pem).unwrap();
        let payload = payload_for("registry.example/team/app", &digest(signed));
        let signature = sign(if other_signer { &other } else { &signer }, &payload);
        let layer = SignatureLayer {
            payload: &payload,
            signature: &signature,
        };
        let verdict = judge(&[layer], std::slice::from_ref(&key), &digest(pinned));
        (key, verdict)
    }

    #[test]
    fn signed_by_a_trusted_key_for_the_pinned_digest_is_verified() {
        let (key, verdict) = verdict_of(false, 'a', 'a');
        assert_eq!(
            verdict,
            Verdict::Verified {
                key: key.fingerprint().to_string()
            }
        );
        assert_eq!(verdict.reason(), "verified");
    }

    /// The class of Kyverno GHSA-2r43-6962-xcw5: a signature is of a digest; a signature of
    /// the tag's former digest is none of the current one's.
    #[test]
    fn a_signature_of_another_digest_is_not_this_ones() {
        let (_, verdict) = verdict_of(false, 'a', 'b');
        assert_eq!(
            verdict,
            Verdict::OtherDigest {
                signed: digest('a').to_string()
            }
        );
        assert!(verdict.describe().contains("another digest"));
    }

    #[test]
    fn unsigned_or_signed_by_another_key_is_not_verified() {
        let (key, _) = verdict_of(false, 'a', 'a');
        assert_eq!(judge(&[], &[key], &digest('a')), Verdict::NoSignature);
        assert_eq!(verdict_of(true, 'a', 'a').1, Verdict::OtherKey);
    }

    /// A payload the trusted key signed that is not a cosign image signature (another type,
    /// not JSON, a hostile digest string) verifies nothing, and says so on one line.
    #[test]
    fn a_signed_payload_that_is_not_a_cosign_image_signature_verifies_nothing() {
        let (signer, pem) = key_pair();
        let key = PublicKey::from_pem(&pem).unwrap();
        let wrong_type =
            br#"{"critical":{"image":{"docker-manifest-digest":"sha256:aa"},"type":"other"}}"#;
        let hostile = br#"{"critical":{"image":{"docker-manifest-digest":"x\ny\u001b[31m"},"type":"cosign container image signature"}}"#;
        for payload in [&wrong_type[..], b"not json", &hostile[..]] {
            let signature = sign(&signer, payload);
            let layer = SignatureLayer {
                payload,
                signature: &signature,
            };
            let verdict = judge(&[layer], std::slice::from_ref(&key), &digest('a'));
            assert_eq!(verdict.reason(), "other_digest", "{verdict:?}");
            assert!(!verdict.describe().contains('\n'), "{verdict:?}");
        }
    }
}
