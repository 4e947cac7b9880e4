//! The stand-in signature source of the in-process examples (`verdict_cost`, `warm_path`):
//! each digest's one cosign signature layer, signed beforehand with a fresh key as
//! `cosign sign --key` signs, answered at once. Included with `#[path]`; not an example itself.

use std::collections::HashMap;

use async_trait::async_trait;
use base64::Engine as _;
use pinhook::reference::{Digest, Reference};
use pinhook::registry::{
    Credential, Enough, FetchedLayer, FetchedSignatures, RegistryError, SignatureSource,
};
use pinhook::signatures::simple_signing::payload_for;
use pinhook::signatures::{PublicKey, Trust};
use sigstore::crypto::SigningScheme;

/// Answers each digest's signature layer from memory.
pub struct SignedSource(HashMap<Digest, FetchedLayer>);

impl SignedSource {
    /// `digests` of `repository`, each signed with one fresh key; the source, the key's PEM and
    /// its trust.
    pub fn sign(
        repository: &str,
        digests: &[Digest],
    ) -> anyhow::Result<(SignedSource, String, Trust)> {
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1.create_signer()?;
        let pem = signer.to_sigstore_keypair()?.public_key_to_pem()?;
        let trust = Trust::of_keys(vec![PublicKey::from_pem(&pem)?]);
        let mut layers = HashMap::new();
        for digest in digests {
            let payload = payload_for(repository, digest);
            let signature =
                base64::engine::general_purpose::STANDARD.encode(signer.sign(&payload)?);
            layers.insert(digest.clone(), FetchedLayer::of_key(payload, signature));
        }
        Ok((SignedSource(layers), pem, trust))
    }
}

#[async_trait]
impl SignatureSource for SignedSource {
    async fn signatures_of(
        &self,
        _image: &Reference,
        digest: &Digest,
        _credentials: &[Credential],
        enough: Enough<'_>,
    ) -> Result<FetchedSignatures, RegistryError> {
        // As the registry client does: the layers shown to `enough` before bundles are looked
        // for (none here), so a cold verification pays what it pays against a registry.
        let layers: Vec<FetchedLayer> = self.0.get(digest).cloned().into_iter().collect();
        enough(&layers);
        Ok(FetchedSignatures {
            layers,
            bundles: Vec::new(),
        })
    }
}
