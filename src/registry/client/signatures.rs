//! An image's cosign signatures (issue 46), fetched through the image's own client, address
//! guard, limits and credentials, both ways cosign stores them:
//! - the tag scheme: the manifest at `sha256-<hex>.sig` ([`crate::signatures::signature_tag`])
//!   in the image's repository, and each layer's payload, at most [`MAX_SIGNATURE_LAYERS`] of at
//!   most 64 KiB;
//! - Sigstore bundles (cosign 3): the OCI 1.1 referrers of the digest
//!   (`/v2/<name>/referrers/<digest>?artifactType=…bundle…`), or, where the registry has no
//!   referrers API (404), the referrers tag fallback `sha256-<hex>`; each referrer whose
//!   artifact type is a bundle and whose predicate, where annotated, is cosign's signature, at
//!   most [`MAX_BUNDLES`]: its manifest, then its bundle layer (64 KiB at most).
//!
//! Every manifest and blob is checked against its descriptor's digest and size. Nothing found
//! (404s) is no signature, not a failure. A blob redirected to its storage on another host (a
//! CDN) is followed once, judged as a token realm is and sent no credential.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::get::{fetch, Fetched};
use super::{each_credential, unauthorized, Login, OciResolver};
use crate::reference::{Digest, Reference};
use crate::registry::http::{body, realm};
use crate::registry::{AnswerError, Credential, RedirectRefusal, RegistryError};
use crate::signatures::bundle::{BUNDLE_MEDIA_TYPE, COSIGN_SIGN_PREDICATE};
use crate::signatures::keyless::{BUNDLE_ANNOTATION, CERTIFICATE_ANNOTATION, CHAIN_ANNOTATION};
use crate::signatures::simple_signing::SIGNATURE_ANNOTATION;
use crate::signatures::SignatureLayer;

/// Signature layers read of one signature manifest; a manifest with more is refused.
pub const MAX_SIGNATURE_LAYERS: usize = 16;
/// Signature bundles read of one digest's referrers; more is refused.
pub const MAX_BUNDLES: usize = 16;
/// The annotation cosign writes on a bundle referrer naming its statement's predicate.
const PREDICATE_ANNOTATION: &str = "dev.sigstore.bundle.predicateType";

/// Whether the tag scheme's layers already settle the verdict (a trusted signature of the
/// digest among them), so the bundles need not be looked for: two GETs saved, both 404 for an
/// image signed the older way.
pub type Enough<'a> = &'a (dyn Fn(&[FetchedLayer]) -> bool + Send + Sync);

/// What was found of one digest's signatures: tag-scheme layers and bundles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchedSignatures {
    pub layers: Vec<FetchedLayer>,
    pub bundles: Vec<Vec<u8>>,
}

impl FetchedSignatures {
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty() && self.bundles.is_empty()
    }
}

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
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    #[serde(default)]
    artifact_type: Option<String>,
    digest: String,
    size: u64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// An image index: the referrers API's answer, or the referrers tag's.
#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

impl OciResolver {
    /// The signatures of `digest` in `image`'s repository, asked with each of `credentials` in
    /// kubelet's order, then anonymous, until one finds signatures: a credential the registry
    /// answers "no such signature" (a 404, which registries also give callers they hide a
    /// repository from) is passed over like one it refuses, so one namespace's credentials
    /// never decide that another's image is unsigned.
    pub async fn signatures_of(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        enough: Enough<'_>,
    ) -> Result<FetchedSignatures, RegistryError> {
        let found = each_credential(image.domain(), credentials, |credential| async move {
            match self
                .signatures_with(image, digest, credential, enough)
                .await?
            {
                found if found.is_empty() => Err(RegistryError::NotFound {
                    repository: image.repository(),
                    tag: crate::signatures::signature_tag(digest),
                }),
                found => Ok(found),
            }
        })
        .await;
        match found {
            Ok((found, _)) => Ok(found),
            Err(RegistryError::NotFound { .. }) => Ok(FetchedSignatures::default()),
            Err(error) => Err(error),
        }
    }

    /// The signatures of `digest` in `image`'s repository, asked with `credential`: empty when
    /// the repository has none; no bundles looked for when the layers are `enough`.
    pub async fn signatures_with(
        &self,
        image: &Reference,
        digest: &Digest,
        credential: &Credential,
        enough: Enough<'_>,
    ) -> Result<FetchedSignatures, RegistryError> {
        self.attempt(
            image.domain(),
            self.signatures_once(image, digest, credential, enough),
        )
        .await
    }

    async fn signatures_once(
        &self,
        image: &Reference,
        digest: &Digest,
        credential: &Credential,
        enough: Enough<'_>,
    ) -> Result<FetchedSignatures, RegistryError> {
        let registry = image.domain();
        let session = self.session(image, credential)?;
        let base = &session.base;
        let login = session.login();
        let mut reader = Reader {
            authorization: self.first_authorization(&login),
            resolver: self,
            http: &session.http,
            image,
            login,
            logged_in: false,
        };
        let invalid = |what: String| RegistryError::InvalidResponse {
            registry: registry.to_string(),
            source: AnswerError::Signature(what),
        };
        // The tag scheme.
        let tag = crate::signatures::signature_tag(digest);
        let mut found = FetchedSignatures::default();
        match reader
            .get(&format!("{base}/manifests/{tag}"), body::SIGNATURE_MANIFEST)
            .await
        {
            Ok(manifest) => {
                let manifest: SignatureManifest = serde_json::from_slice(&manifest)
                    .map_err(|_| invalid("manifest is not an OCI image manifest".to_string()))?;
                if manifest.layers.len() > MAX_SIGNATURE_LAYERS {
                    return Err(invalid(format!(
                        "manifest has {} layers, more than pinhook reads ({MAX_SIGNATURE_LAYERS})",
                        manifest.layers.len()
                    )));
                }
                for layer in manifest.layers {
                    let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
                        continue;
                    };
                    let payload = reader.blob(base, &layer, "payload", &invalid).await?;
                    let annotation = |name: &str| layer.annotations.get(name).cloned();
                    found.layers.push(FetchedLayer {
                        payload,
                        signature: signature.clone(),
                        certificate: annotation(CERTIFICATE_ANNOTATION),
                        chain: annotation(CHAIN_ANNOTATION),
                        bundle: annotation(BUNDLE_ANNOTATION),
                    });
                }
            }
            Err(RegistryError::NotFound { .. }) => {}
            Err(error) => return Err(error),
        }

        if enough(&found.layers) {
            return Ok(found);
        }
        // Sigstore bundles: the referrers API, else the referrers tag.
        let artifact_type: String =
            form_urlencoded::byte_serialize(BUNDLE_MEDIA_TYPE.as_bytes()).collect();
        let referrers = format!("{base}/referrers/{digest}?artifactType={artifact_type}");
        let index = match reader.get(&referrers, body::SIGNATURE_MANIFEST).await {
            Ok(index) => Some(index),
            Err(RegistryError::NotFound { .. }) => {
                let fallback = format!(
                    "{base}/manifests/{}",
                    digest.to_string().replacen(':', "-", 1)
                );
                match reader.get(&fallback, body::SIGNATURE_MANIFEST).await {
                    Ok(index) => Some(index),
                    Err(RegistryError::NotFound { .. }) => None,
                    Err(error) => return Err(error),
                }
            }
            Err(error) => return Err(error),
        };
        let Some(index) = index else {
            return Ok(found);
        };
        let index: Index = serde_json::from_slice(&index)
            .map_err(|_| invalid("referrers are not an OCI image index".to_string()))?;
        let candidates: Vec<&Descriptor> = index
            .manifests
            .iter()
            .filter(|d| d.artifact_type.as_deref() == Some(BUNDLE_MEDIA_TYPE))
            .filter(|d| {
                d.annotations
                    .get(PREDICATE_ANNOTATION)
                    .is_none_or(|p| p == COSIGN_SIGN_PREDICATE)
            })
            .collect();
        if candidates.len() > MAX_BUNDLES {
            return Err(invalid(format!(
                "{} signature bundles refer to the digest, more than pinhook reads ({MAX_BUNDLES})",
                candidates.len()
            )));
        }
        for descriptor in candidates {
            let manifest_digest = parsed_digest(&descriptor.digest, &invalid)?;
            if descriptor.size > body::SIGNATURE_MANIFEST.bytes {
                return Err(invalid(format!(
                    "bundle manifest of {} bytes is larger than pinhook reads",
                    descriptor.size
                )));
            }
            let manifest = reader
                .get(
                    &format!("{base}/manifests/{manifest_digest}"),
                    body::SIGNATURE_MANIFEST,
                )
                .await?;
            if manifest.len() as u64 != descriptor.size
                || Digest::sha256_of(&manifest) != manifest_digest
            {
                return Err(invalid(format!(
                    "bundle manifest is not the one its descriptor names ({manifest_digest})"
                )));
            }
            let manifest: SignatureManifest = serde_json::from_slice(&manifest)
                .map_err(|_| invalid("bundle manifest is not an OCI image manifest".to_string()))?;
            let Some(layer) = manifest.layers.iter().find(|l| {
                l.media_type
                    .starts_with("application/vnd.dev.sigstore.bundle")
            }) else {
                continue;
            };
            found
                .bundles
                .push(reader.blob(base, layer, "bundle", &invalid).await?);
        }
        Ok(found)
    }
}

/// GETs in one session: with the authorization so far, and once more after a login the
/// registry asks for.
struct Reader<'a> {
    resolver: &'a OciResolver,
    http: &'a reqwest::Client,
    image: &'a Reference,
    login: Login<'a>,
    authorization: Option<String>,
    logged_in: bool,
}

impl Reader<'_> {
    async fn get(&mut self, url: &str, limit: body::Limit) -> Result<body::Read, RegistryError> {
        loop {
            match fetch(
                self.http,
                url,
                self.authorization.as_deref(),
                self.image,
                limit,
            )
            .await
            {
                Fetched::Bytes(bytes) => return Ok(bytes),
                Fetched::Challenge(Some(challenge)) if !self.logged_in => {
                    self.authorization = Some(self.resolver.log_in(&self.login, &challenge).await?);
                    self.logged_in = true;
                }
                Fetched::Challenge(_) => return Err(unauthorized(self.image.domain())),
                Fetched::Failed(error) => return Err(error),
            }
        }
    }

    /// A blob the registry redirected to its storage on another host (S3, GCS, a CDN: how
    /// Docker Hub, GHCR, ECR and Quay serve blobs): followed once, if the host passes the rules
    /// a token realm passes (never an internal address; a private network only for a registry
    /// on one), over HTTPS, with no credential sent (the blob's digest is what vouches for it).
    async fn get_from_storage(
        &self,
        from: String,
        to: String,
        location: &str,
        limit: body::Limit,
    ) -> Result<body::Read, RegistryError> {
        let registry = self.image.domain();
        let refused = |why: String| RegistryError::Redirected {
            registry: registry.to_string(),
            refusal: RedirectRefusal::HostRefused {
                from: from.clone(),
                to: to.clone(),
                why,
            },
        };
        let url = reqwest::Url::parse(location).map_err(|_| refused("not a URL".to_string()))?;
        if url.scheme() != "https" {
            return Err(refused("not HTTPS".to_string()));
        }
        let host = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_string(),
            (None, _) => return Err(refused("no host".to_string())),
        };
        if let Some(policy) = &self.resolver.policy {
            realm::check_named(policy, &host, registry)
                .await
                .map_err(|named| refused(named.to_string()))?;
        }
        let http = self.resolver.realm_http_for(&host)?;
        match fetch(&http, location, None, self.image, limit).await {
            Fetched::Bytes(bytes) => Ok(bytes),
            Fetched::Challenge(_) => Err(unauthorized(registry)),
            Fetched::Failed(error) => Err(error),
        }
    }

    /// The blob `descriptor` names (at most 64 KiB), checked against its digest and size;
    /// `what` names it in errors. A redirect to its storage host is followed
    /// ([`Self::get_from_storage`]).
    async fn blob(
        &mut self,
        base: &str,
        descriptor: &Descriptor,
        what: &str,
        invalid: &impl Fn(String) -> RegistryError,
    ) -> Result<Vec<u8>, RegistryError> {
        let digest = parsed_digest(&descriptor.digest, invalid)?;
        if descriptor.size > body::SIGNATURE_PAYLOAD.bytes {
            return Err(invalid(format!(
                "{what} of {} bytes is larger than pinhook reads",
                descriptor.size
            )));
        }
        let limit = body::SIGNATURE_PAYLOAD;
        let bytes = match self.get(&format!("{base}/blobs/{digest}"), limit).await {
            Err(RegistryError::Redirected {
                refusal: RedirectRefusal::OtherOrigin { from, to, location },
                ..
            }) => self.get_from_storage(from, to, &location.0, limit).await?,
            other => other?,
        };
        if bytes.len() as u64 != descriptor.size || Digest::sha256_of(&bytes) != digest {
            return Err(invalid(format!(
                "{what} is not the blob its descriptor names ({digest})"
            )));
        }
        Ok(bytes.to_vec())
    }
}

fn parsed_digest(
    text: &str,
    invalid: &impl Fn(String) -> RegistryError,
) -> Result<Digest, RegistryError> {
    text.parse()
        .map_err(|_| invalid("a descriptor's digest is not a digest".to_string()))
}
