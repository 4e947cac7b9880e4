//! Signing test images as cosign does, offline: fresh P-256 key pairs (the `sigstore` crate's
//! signer, as `cosign sign --key` signs), simple signing payloads signed with them, and
//! signature manifests pushed to the real test registry in cosign's tag scheme
//! (`sha256-<hex>.sig`); and keyless, as `cosign sign` without a key signs, under the tests' own
//! Sigstore ([`super::sigstore_authority`]).

use base64::Engine as _;
use pinhook::reference::Digest;
use pinhook::signatures::keyless::{BUNDLE_ANNOTATION, CERTIFICATE_ANNOTATION, CHAIN_ANNOTATION};
use pinhook::signatures::simple_signing::{payload_for, SIGNATURE_ANNOTATION};
use pinhook::signatures::{signature_tag, PublicKey};
use serde_json::json;
use sigstore::crypto::{SigStoreSigner, SigningScheme};

use super::images;
use super::registry::TestRegistry;
use super::sigstore_authority::{Sct, TestSigstore};

/// The media type (and artifact type) of a cosign 3 bundle.
pub const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The predicate type of cosign's image signature statement.
pub const COSIGN_SIGN: &str = "https://sigstore.dev/cosign/sign/v1";

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A fresh key pair: the signer and its public key.
pub fn key_pair() -> (SigStoreSigner, PublicKey) {
    let (signer, pem) = key_pair_pem();
    (signer, PublicKey::from_pem(&pem).unwrap())
}

/// A fresh key pair: the signer and its public key in PEM, as a policy names it.
pub fn key_pair_pem() -> (SigStoreSigner, String) {
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

/// Pushes a signature manifest for `digest` in `repo`, one layer per (payload, signature), as
/// cosign does; `extra` layers without a signature annotation are added as they are.
pub async fn push_signatures(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    layers: &[(Vec<u8>, String)],
) {
    let layers: Vec<(Vec<u8>, serde_json::Value)> = layers
        .iter()
        .map(|(payload, signature)| (payload.clone(), json!({ SIGNATURE_ANNOTATION: signature })))
        .collect();
    push_layers(registry, repo, digest, &layers).await;
}

/// Pushes a signature manifest for `digest` in `repo`, one layer per (payload, annotations).
pub async fn push_layers(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    layers: &[(Vec<u8>, serde_json::Value)],
) {
    let config = images::push_blob(registry, repo, b"{}").await;
    let mut descriptors = Vec::new();
    for (payload, annotations) in layers {
        let blob = images::push_blob(registry, repo, payload).await;
        descriptors.push(json!({
            "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
            "digest": blob,
            "size": payload.len(),
            "annotations": annotations,
        }));
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": descriptors,
    });
    let digest: Digest = digest.parse().unwrap();
    images::put_manifest(
        registry,
        repo,
        &signature_tag(&digest),
        OCI_MANIFEST,
        manifest.to_string().as_bytes(),
    )
    .await;
}

pub fn signed(signer: &SigStoreSigner, payload: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(signer.sign(payload).unwrap())
}

/// The payload `cosign sign --key` signs for `digest` of `repo` in `registry`, and its signature
/// by `signer`.
pub fn signature_of(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    signer: &SigStoreSigner,
) -> (Vec<u8>, String) {
    let repository = format!("{}/{repo}", registry.host());
    let payload = payload_for(&repository, &digest.parse::<Digest>().unwrap());
    let signature = signed(signer, &payload);
    (payload, signature)
}

/// Signs `digest` of `repo` with `signer` and pushes the signature, as `cosign sign --key` does.
pub async fn sign(registry: &TestRegistry, repo: &str, digest: &str, signer: &SigStoreSigner) {
    let layer = signature_of(registry, repo, digest, signer);
    push_signatures(registry, repo, digest, &[layer]).await;
}

/// Signs `digest` of `repo` with `signer` (whose public key is `pem`) and pushes the signature
/// with the log bundle of its entry in `sigstore`'s log, as `cosign sign --key` does with the
/// transparency log.
pub async fn sign_logged(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    (signer, pem): (&SigStoreSigner, &str),
    sigstore: &TestSigstore,
) {
    let (payload, signature) = signature_of(registry, repo, digest, signer);
    let bundle = sigstore.log_entry(&payload, &signature, pem, sigstore.now);
    let annotations = json!({
        SIGNATURE_ANNOTATION: signature,
        BUNDLE_ANNOTATION: bundle,
    });
    push_layers(registry, repo, digest, &[(payload, annotations)]).await;
}

/// Signs `digest` of `repo` keyless, as `subject` of the OIDC `issuer` under `sigstore`, and
/// pushes the signature with its certificate, chain and log bundle, as `cosign sign` does
/// without a key.
pub async fn sign_keyless(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    sigstore: &TestSigstore,
    issuer: &str,
    subject: &str,
) {
    sign_keyless_with(
        registry,
        repo,
        digest,
        sigstore,
        (issuer, subject),
        Sct::Good,
    )
    .await
}

/// [`sign_keyless`] by (issuer, subject), the certificate carrying `sct`.
pub async fn sign_keyless_with(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    sigstore: &TestSigstore,
    (issuer, subject): (&str, &str),
    sct: Sct,
) {
    let repository = format!("{}/{repo}", registry.host());
    let payload = payload_for(&repository, &digest.parse::<Digest>().unwrap());
    let made = sigstore.sign_with(&payload, issuer, subject, sct);
    let annotations = json!({
        SIGNATURE_ANNOTATION: made.signature,
        CERTIFICATE_ANNOTATION: made.certificate,
        CHAIN_ANNOTATION: made.chain,
        BUNDLE_ANNOTATION: made.bundle,
    });
    push_layers(registry, repo, digest, &[(payload, annotations)]).await;
}

/// A bundle referrer of one image: the bundle (JSON) and its statement's predicate type.
pub struct Referrer {
    pub bundle: String,
    pub predicate: &'static str,
}

/// Attaches `referrers` to `digest` in `repo` as cosign 3 does on a registry without the
/// referrers API: each bundle a blob, each an OCI manifest (artifact type the bundle's, the
/// image as its subject), pushed by digest, and the referrers tag `sha256-<hex>` an image index
/// listing them. Returns the manifests' digests.
pub async fn push_referrers(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    referrers: &[Referrer],
) -> Vec<String> {
    let empty = images::push_blob(registry, repo, b"{}").await;
    let mut descriptors = Vec::new();
    let mut digests = Vec::new();
    for referrer in referrers {
        let blob = images::push_blob(registry, repo, referrer.bundle.as_bytes()).await;
        let annotations = json!({
            "dev.sigstore.bundle.content": "dsse-envelope",
            "dev.sigstore.bundle.predicateType": referrer.predicate,
        });
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": BUNDLE,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
            "layers": [{"mediaType": BUNDLE, "digest": blob, "size": referrer.bundle.len()}],
            "subject": {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": digest, "size": 0},
            "annotations": annotations,
        })
        .to_string();
        let manifest_digest = images::sha256_digest(manifest.as_bytes());
        images::put_manifest(
            registry,
            repo,
            &manifest_digest,
            OCI_MANIFEST,
            manifest.as_bytes(),
        )
        .await;
        descriptors.push(json!({
            "mediaType": OCI_MANIFEST,
            "digest": manifest_digest,
            "size": manifest.len(),
            "artifactType": BUNDLE,
            "annotations": annotations,
        }));
        digests.push(manifest_digest);
    }
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": descriptors,
    })
    .to_string();
    images::put_manifest(
        registry,
        repo,
        &digest.replacen(':', "-", 1),
        "application/vnd.oci.image.index.v1+json",
        index.as_bytes(),
    )
    .await;
    digests
}
