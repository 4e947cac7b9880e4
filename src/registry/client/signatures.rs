//! An image's cosign signatures in the tag scheme (issue 46), fetched through the image's own
//! client, address guard, limits and credentials: the manifest at `sha256-<hex>.sig`
//! ([`crate::signatures::signature_tag`]) in the image's repository, and each layer's payload,
//! at most [`MAX_SIGNATURE_LAYERS`] of at most 64 KiB, each checked against its descriptor's
//! digest and size. No signature manifest (404) is no signature, not a failure. A blob served
//! through a redirect to another host (a CDN) is refused like any cross-host redirect.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::get::{fetch, Fetched};
use super::{each_credential, unauthorized, OciResolver};
use crate::reference::{Digest, Reference};
use crate::registry::http::body;
use crate::registry::{AnswerError, Credential, RegistryError};
use crate::signatures::keyless::{BUNDLE_ANNOTATION, CERTIFICATE_ANNOTATION, CHAIN_ANNOTATION};
use crate::signatures::simple_signing::SIGNATURE_ANNOTATION;
use crate::signatures::SignatureLayer;

/// Signature layers read of one signature manifest; a manifest with more is refused.
pub const MAX_SIGNATURE_LAYERS: usize = 16;

/// One signature layer, read: its payload (digest-checked), its signature annotation and a
/// keyless signature's certificate, chain and log bundle annotations (bounded, with the
/// manifest, by its read limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedLayer {
    pub payload: Vec<u8>,
    pub signature: String,
    pub certificate: Option<String>,
    pub chain: Option<String>,
    pub bundle: Option<String>,
}

impl FetchedLayer {
    /// A layer signed with a key: a payload and its signature, no certificate.
    pub fn of_key(payload: Vec<u8>, signature: String) -> FetchedLayer {
        FetchedLayer {
            payload,
            signature,
            certificate: None,
            chain: None,
            bundle: None,
        }
    }

    /// The layer as the verdict reads it.
    pub fn as_layer(&self) -> SignatureLayer<'_> {
        SignatureLayer {
            payload: &self.payload,
            signature: &self.signature,
            certificate: self.certificate.as_deref(),
            chain: self.chain.as_deref(),
            bundle: self.bundle.as_deref(),
        }
    }
}

#[derive(Deserialize)]
struct SignatureManifest {
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
    size: u64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl OciResolver {
    /// The signature layers of `digest` in `image`'s repository, asked with each of
    /// `credentials` in kubelet's order, then anonymous, until one finds signatures: a
    /// credential the registry answers "no such signature" (a 404, which registries also give
    /// callers they hide a repository from) is passed over like one it refuses, so one
    /// namespace's credentials never decide that another's image is unsigned.
    pub async fn signatures_of(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
    ) -> Result<Vec<FetchedLayer>, RegistryError> {
        let found = each_credential(image.domain(), credentials, |credential| async move {
            match self.signature_layers(image, digest, credential).await? {
                layers if layers.is_empty() => Err(RegistryError::NotFound {
                    repository: image.repository(),
                    tag: crate::signatures::signature_tag(digest),
                }),
                layers => Ok(layers),
            }
        })
        .await;
        match found {
            Ok((layers, _)) => Ok(layers),
            Err(RegistryError::NotFound { .. }) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// The signature layers of `digest` in `image`'s repository, asked with `credential`:
    /// empty when the repository has no signature manifest for it.
    pub async fn signature_layers(
        &self,
        image: &Reference,
        digest: &Digest,
        credential: &Credential,
    ) -> Result<Vec<FetchedLayer>, RegistryError> {
        self.attempt(
            image.domain(),
            self.signature_layers_once(image, digest, credential),
        )
        .await
    }

    async fn signature_layers_once(
        &self,
        image: &Reference,
        digest: &Digest,
        credential: &Credential,
    ) -> Result<Vec<FetchedLayer>, RegistryError> {
        let registry = image.domain();
        let session = self.session(image, credential)?;
        let (http, base) = (&session.http, &session.base);
        let login = session.login();
        let mut authorization = self.first_authorization(&login);
        let mut logged_in = false;
        let tag = crate::signatures::signature_tag(digest);
        let manifest_url = format!("{base}/manifests/{tag}");
        // One GET with the authorization so far; one more after a login the registry asks for.
        let mut get = async |url: &str, limit: body::Limit| -> Result<body::Read, RegistryError> {
            loop {
                match fetch(http, url, authorization.as_deref(), image, limit).await {
                    Fetched::Bytes(bytes) => return Ok(bytes),
                    Fetched::Challenge(Some(challenge)) if !logged_in => {
                        authorization = Some(self.log_in(&login, &challenge).await?);
                        logged_in = true;
                    }
                    Fetched::Challenge(_) => return Err(unauthorized(registry)),
                    Fetched::Failed(error) => return Err(error),
                }
            }
        };
        let manifest = match get(&manifest_url, body::SIGNATURE_MANIFEST).await {
            Ok(bytes) => bytes,
            Err(RegistryError::NotFound { .. }) => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let invalid = |what: String| RegistryError::InvalidResponse {
            registry: registry.to_string(),
            source: AnswerError::Signature(what),
        };
        let manifest: SignatureManifest = serde_json::from_slice(&manifest)
            .map_err(|_| invalid("manifest is not an OCI image manifest".to_string()))?;
        if manifest.layers.len() > MAX_SIGNATURE_LAYERS {
            return Err(invalid(format!(
                "manifest has {} layers, more than pinhook reads ({MAX_SIGNATURE_LAYERS})",
                manifest.layers.len()
            )));
        }
        let mut layers = Vec::with_capacity(manifest.layers.len());
        for layer in manifest.layers {
            let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
                continue;
            };
            let layer_digest: Digest = layer
                .digest
                .parse()
                .map_err(|_| invalid("layer's digest is not a digest".to_string()))?;
            if layer.size > body::SIGNATURE_PAYLOAD.bytes {
                return Err(invalid(format!(
                    "payload of {} bytes is larger than pinhook reads",
                    layer.size
                )));
            }
            let payload = get(
                &format!("{base}/blobs/{layer_digest}"),
                body::SIGNATURE_PAYLOAD,
            )
            .await?;
            if payload.len() as u64 != layer.size || Digest::sha256_of(&payload) != layer_digest {
                return Err(invalid(format!(
                    "payload is not the blob its descriptor names ({layer_digest})"
                )));
            }
            let annotation = |name: &str| layer.annotations.get(name).cloned();
            layers.push(FetchedLayer {
                payload: payload.to_vec(),
                signature: signature.clone(),
                certificate: annotation(CERTIFICATE_ANNOTATION),
                chain: annotation(CHAIN_ANNOTATION),
                bundle: annotation(BUNDLE_ANNOTATION),
            });
        }
        Ok(layers)
    }
}
