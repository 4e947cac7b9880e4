//! cosign's simple signing payload and the judgement of an image's signatures under one entry's
//! [`Trust`]: a layer counts when a trusted key signed its payload (and, where the entry names a
//! transparency log, the layer's bundle shows it logged there, [`super::tlog`]), or a trusted
//! identity did keyless ([`super::keyless`]), **and** the payload, a cosign container image signature, names
//! the digest pinned. Every other outcome has one name of a fixed vocabulary
//! ([`Verdict::reason`]) for denials, reports and metrics.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;

use super::layer::SignatureLayer;
use super::trust::Trust;
use super::verdict::{Tally, Verdict};
use crate::reference::Digest;

/// The `type` of a cosign container image signature's payload.
pub const COSIGN_TYPE: &str = "cosign container image signature";
/// The annotation of a signature layer that holds its signature, base64.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

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

/// The verdict on `layers` under `trust` for the digest `pinned`.
pub fn judge(layers: &[SignatureLayer<'_>], trust: &Trust, pinned: &Digest) -> Verdict {
    judge_all(layers, &[], trust, pinned)
}

/// The verdict on an image's signatures, tag-scheme `layers` and Sigstore `bundles` (cosign 3,
/// found through OCI referrers), under `trust` for the digest `pinned`: `verified` if any one
/// holds; else, of the failures, the most telling (another digest, then another identity, then
/// an untrusted signature, then another key).
pub fn judge_all(
    layers: &[SignatureLayer<'_>],
    bundles: &[&[u8]],
    trust: &Trust,
    pinned: &Digest,
) -> Verdict {
    judge_layers(layers, trust, pinned).with_bundles(bundles, trust, pinned)
}

/// The tag-scheme layers judged alone: settled (a trusted signature of the digest pinned), or
/// what they found, for the bundles to be judged after them without judging them again.
#[derive(Debug)]
pub struct LayersJudged(Result<Verdict, Tally>);

impl LayersJudged {
    /// Whether a trusted signature among the layers settles it (no bundle need be looked for).
    pub fn verified(&self) -> bool {
        self.0.is_ok()
    }

    /// The verdict once `bundles` are judged too, after the layers.
    pub fn with_bundles(self, bundles: &[&[u8]], trust: &Trust, pinned: &Digest) -> Verdict {
        let mut tally = match self.0 {
            Ok(verdict) => return verdict,
            Err(tally) => tally,
        };
        for bundle in bundles {
            if let Some(verdict) = super::bundle::tally(bundle, trust, pinned, &mut tally) {
                return verdict;
            }
        }
        tally.verdict()
    }
}

/// `layers` under `trust` for the digest `pinned`, each signature checked once.
pub fn judge_layers(layers: &[SignatureLayer<'_>], trust: &Trust, pinned: &Digest) -> LayersJudged {
    let mut tally = Tally::default();
    let pinned_text = pinned.to_string();
    for layer in layers {
        #[cfg(test)]
        tests::LAYERS_JUDGED.with(|n| n.set(n.get() + 1));
        tally.seen = true;
        let mut signers: Vec<String> = Vec::new();
        // (a signature that is not base64 is no key's: `signed` decodes it the same way)
        let raw = STANDARD.decode(layer.signature.trim()).ok();
        for key in trust.keys() {
            let Some(raw) = raw.as_deref() else {
                break;
            };
            if !key.signed_raw(raw, layer.payload) {
                continue;
            }
            match trust.key_log() {
                None => signers.push(format!("key {}", key.fingerprint())),
                Some(root) => {
                    match super::tlog::key_logged(root, layer.bundle, layer.payload, raw, key.der())
                    {
                        Ok(()) => signers.push(format!("key {}", key.fingerprint())),
                        Err(why) => tally.untrusted(super::tlog::unlogged(key.fingerprint(), &why)),
                    }
                }
            }
        }
        if let Some(keyless) = trust.keyless() {
            if let Some(evidence) = keyless.evidence(layer) {
                signers.extend(tally.keyless(keyless, evidence));
            }
        }
        for signer in signers {
            match serde_json::from_slice::<Payload>(layer.payload) {
                Ok(payload)
                    if payload.critical.kind == COSIGN_TYPE
                        && payload.critical.image.digest == pinned_text =>
                {
                    return LayersJudged(Ok(Verdict::Verified {
                        signer: signer.into(),
                    }));
                }
                Ok(payload) => tally.other_digest(&payload.critical.image.digest),
                Err(_) => tally.other_digest("not a cosign payload"),
            }
        }
    }
    LayersJudged(Err(tally))
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
pub(crate) mod tests {
    use std::sync::Arc;

    thread_local! {
        /// Layers [`judge_layers`] judged on this thread: what proves a layer is judged once.
        pub(crate) static LAYERS_JUDGED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    use super::*;
    use crate::signatures::key::tests::{key_pair, sign};
    use crate::signatures::keyless::signed_layer;
    use crate::signatures::keyless::test_authority::TestSigstore;
    use crate::signatures::keyless::{Identity, Keyless, Matcher};
    use crate::signatures::{PublicKey, TrustedRoot};

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
        let layer = SignatureLayer::of_key(&payload, &signature);
        let verdict = judge(
            &[layer],
            &Trust::of_keys(vec![key.clone()]),
            &digest(pinned),
        );
        (key, verdict)
    }

    #[test]
    fn signed_by_a_trusted_key_for_the_pinned_digest_is_verified() {
        let (key, verdict) = verdict_of(false, 'a', 'a');
        assert_eq!(
            verdict,
            Verdict::Verified {
                signer: format!("key {}", key.fingerprint()).into()
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

    /// Under an entry that names a transparency log, a key's signature counts only with its
    /// bundle annotation: a SET of a log of the root over a `hashedrekord` entry of this
    /// payload, signature and key. Each way it can fail says why.
    #[test]
    fn a_key_signature_must_be_logged_where_the_entry_names_a_transparency_log() {
        let sigstore = TestSigstore::new();
        let root = Arc::new(TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap());
        let (signer, pem) = key_pair();
        let (other_signer, other_pem) = key_pair();
        let key = PublicKey::from_pem(&pem).unwrap();
        let payload = payload_for("registry.example/team/app", &digest('a'));
        let signature = sign(&signer, &payload);
        let logged = sigstore.log_entry(&payload, &signature, &pem, sigstore.now);
        // Logged in another log; an entry of another key; a timestamp tampered with.
        let other_log = TestSigstore::new().log_entry(&payload, &signature, &pem, sigstore.now);
        let other_signature = sign(&other_signer, &payload);
        let other_key = sigstore.log_entry(&payload, &other_signature, &other_pem, sigstore.now);
        // The same payload and signature logged with another key; another payload logged.
        let their_key = sigstore.log_entry(&payload, &signature, &other_pem, sigstore.now);
        let other_payload = sigstore.log_entry(b"other", &signature, &pem, sigstore.now);
        let tampered = logged.replace(
            &format!("\"integratedTime\":{}", sigstore.now),
            &format!("\"integratedTime\":{}", sigstore.now + 1),
        );
        let unlogged = Trust::of_keys(vec![key.clone()]);
        let logging = Trust::of_keys(vec![key.clone()]).with_key_log(root);
        assert_ne!(unlogged.fingerprint(), logging.fingerprint());
        let judged = |bundle: Option<&str>, trust: &Trust| {
            let layer = SignatureLayer {
                bundle,
                ..SignatureLayer::of_key(&payload, &signature)
            };
            judge(&[layer], trust, &digest('a'))
        };
        let verified = Verdict::Verified {
            signer: format!("key {}", key.fingerprint()).into(),
        };
        assert_eq!(judged(Some(&logged), &logging), verified);
        // Without a transparency log named, the bundle is not needed.
        assert_eq!(judged(None, &unlogged), verified);
        let why = |bundle: Option<&str>| match judged(bundle, &logging) {
            Verdict::Untrusted { why } => why,
            other => panic!("{other:?}"),
        };
        let text = why(None);
        let expected = format!("signed by key {}, but not logged", key.fingerprint());
        assert!(text.contains(&expected), "{text}");
        assert!(text.contains("no transparency log bundle"), "{text}");
        assert!(why(Some(&other_log)).contains("no log the trusted root names"));
        assert!(why(Some(&other_key)).contains("of another signature, payload or key"));
        assert!(why(Some(&their_key)).contains("of another signature, payload or key"));
        assert!(why(Some(&other_payload)).contains("of another signature, payload or key"));
        assert!(why(Some(&tampered)).contains("does not verify"));
    }

    #[test]
    fn unsigned_or_signed_by_another_key_is_not_verified() {
        let (key, _) = verdict_of(false, 'a', 'a');
        assert_eq!(
            judge(&[], &Trust::of_keys(vec![key]), &digest('a')),
            Verdict::NoSignature
        );
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
            let layer = SignatureLayer::of_key(payload, &signature);
            let verdict = judge(&[layer], &Trust::of_keys(vec![key.clone()]), &digest('a'));
            assert_eq!(verdict.reason(), "other_digest", "{verdict:?}");
            assert!(!verdict.describe().contains('\n'), "{verdict:?}");
        }
    }

    const ISSUER: &str = "https://token.actions.githubusercontent.com";
    const SUBJECT: &str = "https://github.com/acme/app/.github/workflows/release.yml@refs/tags/v1";

    /// Keyless: the verdict on one layer signed by `subject` of `ISSUER` over the payload for
    /// digest `signed`, under a trust naming `trusted` (and a key of its own), for `pinned`.
    fn keyless_verdict(subject: &str, trusted: &str, signed: char, pinned: char) -> Verdict {
        let sigstore = TestSigstore::new();
        let root = Arc::new(TrustedRoot::parse(sigstore.trusted_root().as_bytes()).unwrap());
        let identity = Identity {
            issuer: Matcher::Exact(ISSUER.to_string()),
            subject: Matcher::Exact(trusted.to_string()),
        };
        let trust = Trust::new(
            vec![PublicKey::from_pem(&key_pair().1).unwrap()],
            Some(Keyless::new(root, vec![identity])),
        );
        let payload = payload_for("registry.example/team/app", &digest(signed));
        let made = sigstore.sign(&payload, ISSUER, subject);
        let layer = signed_layer(&payload, &made);
        judge(&[layer], &trust, &digest(pinned))
    }

    #[test]
    fn keyless_by_a_trusted_identity_for_the_pinned_digest_is_verified() {
        assert_eq!(
            keyless_verdict(SUBJECT, SUBJECT, 'a', 'a'),
            Verdict::Verified {
                signer: format!("{SUBJECT} ({ISSUER})").into()
            }
        );
    }

    #[test]
    fn keyless_failures_name_the_identity_or_the_digest() {
        let other = "https://github.com/evil/app/.github/workflows/x.yml@refs/heads/main";
        let verdict = keyless_verdict(other, SUBJECT, 'a', 'a');
        assert_eq!(verdict.reason(), "other_identity");
        assert!(
            verdict.describe().contains("evil/app"),
            "{}",
            verdict.describe()
        );
        let verdict = keyless_verdict(SUBJECT, SUBJECT, 'a', 'b');
        assert_eq!(verdict.reason(), "other_digest", "{verdict:?}");
    }

    /// A certificate layer under a trust of keys only is no signature by a trusted key.
    #[test]
    fn a_keyless_signature_is_nothing_to_a_trust_of_keys() {
        let sigstore = TestSigstore::new();
        let payload = payload_for("registry.example/team/app", &digest('a'));
        let made = sigstore.sign(&payload, ISSUER, SUBJECT);
        let layer = signed_layer(&payload, &made);
        let trust = Trust::of_keys(vec![PublicKey::from_pem(&key_pair().1).unwrap()]);
        assert_eq!(judge(&[layer], &trust, &digest('a')), Verdict::OtherKey);
    }
}
