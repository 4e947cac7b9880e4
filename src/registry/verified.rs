//! Verified signatures (issue 46): the verdict on a digest's cosign signatures under one
//! policy entry's trust, fetched through the same address guard, identity-token exchange,
//! client, limits and credentials as the tag, and cached by (repository, digest, trust
//! fingerprint, the asking credentials' fingerprints), never by a tag: a tag that moves names a
//! new digest, which is verified anew, and one namespace's verdict is never another's.
//! A verdict of `verified` is kept [`VERIFIED_FOR`], any other [`REFUSED_FOR`] (a signature
//! pushed after its image counts within that), a failed fetch not at all. Concurrent asks for
//! one key share one fetch, and each signature is checked once: what the tag scheme's layers
//! said when the source asked whether they settle it is kept for the bundles judged after them.
//!
//! Owns: [`SignatureVerifier`] (what admission asks), [`VerifiedSignatures`] (the cache over
//! the client). Never: decides what a verdict costs an admission (the plan does).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::identity_token::IdentityTokens;
use super::{
    guard, Credential, Enough, FetchedLayer, FetchedSignatures, Fingerprint, RegistryError,
};
use crate::metrics::Metrics;
use crate::policy::PolicyHandle;
use crate::reference::{Digest, Reference};
use crate::signatures::{judge_layers, LayersJudged, SignatureLayer, Trust, Verdict};
use crate::weight::weight;

/// How long a `verified` verdict is kept.
pub const VERIFIED_FOR: Duration = Duration::from_secs(600);
/// How long any other verdict is kept.
pub const REFUSED_FOR: Duration = Duration::from_secs(30);
/// Bytes the verdicts may hold by the cache's weigher, keys included; at most 20,000 entries
/// within it.
pub const VERDICT_CACHE_BYTES: u64 = 2 << 20;
/// What the memory model counts for verifications: the resident memory they were measured to
/// add, the verdict cache full and the allocator's share of their work, +4.2 MiB after 20,000
/// cold verifications (`examples/verdict_cost.rs`, release build); with a margin.
pub const VERIFICATION_RSS_BYTES: u64 = 9 << 19;

/// What admission asks: the verdict on `digest` of `image`'s repository under `trust`.
#[async_trait]
pub trait SignatureVerifier: Send + Sync {
    async fn verify(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        trust: &Arc<Trust>,
    ) -> Result<Verdict, RegistryError>;

    /// The verdict held for what [`SignatureVerifier::verify`] would be asked, if one is: no
    /// flight, no fetch, nothing to wait for (a warm admission asks this first). `None` by
    /// default: ask `verify`.
    async fn held(
        &self,
        _image: &Reference,
        _digest: &Digest,
        _credentials: &[Credential],
        _trust: &Arc<Trust>,
    ) -> Option<Verdict> {
        None
    }
}

/// Where signature layers come from: the stack's identity-token exchange and client
/// ([`IdentityTokens`]); a stand-in in benchmarks.
#[async_trait]
pub trait SignatureSource: Send + Sync {
    async fn signatures_of(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        enough: Enough<'_>,
    ) -> Result<FetchedSignatures, RegistryError>;
}

#[async_trait]
impl SignatureSource for IdentityTokens {
    async fn signatures_of(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        enough: Enough<'_>,
    ) -> Result<FetchedSignatures, RegistryError> {
        IdentityTokens::signatures_of(self, image, digest, credentials, enough).await
    }
}

/// (repository, digest, trust fingerprint, the fingerprints of the credentials that asked): a
/// verdict one namespace's credentials got is never another's.
type Key = (String, Digest, Arc<str>, Vec<Fingerprint>);

/// The verdicts, cached, over the stack's own client.
pub struct VerifiedSignatures {
    source: Arc<dyn SignatureSource>,
    /// `None`: no address guard (`pinhook check`, whose manifests are the user's own).
    policy: Option<PolicyHandle>,
    verdicts: moka::future::Cache<Key, Verdict>,
    metrics: Arc<Metrics>,
}

struct KeepFor;

impl moka::Expiry<Key, Verdict> for KeepFor {
    fn expire_after_create(&self, _: &Key, verdict: &Verdict, _: Instant) -> Option<Duration> {
        Some(match verdict {
            Verdict::Verified { .. } => VERIFIED_FOR,
            _ => REFUSED_FOR,
        })
    }
}

// === impl VerifiedSignatures ===

impl VerifiedSignatures {
    pub fn new(
        source: Arc<dyn SignatureSource>,
        policy: Option<PolicyHandle>,
        metrics: Arc<Metrics>,
    ) -> VerifiedSignatures {
        VerifiedSignatures {
            source,
            policy,
            verdicts: moka::future::Cache::builder()
                .max_capacity(VERDICT_CACHE_BYTES)
                .expire_after(KeepFor)
                .weigher(|key: &Key, verdict: &Verdict| {
                    let verdict = match verdict {
                        Verdict::Verified { signer } => signer.len(),
                        Verdict::OtherDigest { signed } => signed.len(),
                        Verdict::OtherIdentity { signer } => signer.len(),
                        Verdict::Untrusted { why } => why.len(),
                        _ => 0,
                    };
                    // 640: moka's own and the strings' headers; an entry measured 767 bytes
                    // of RSS in all (`examples/verdict_cost.rs 3000`, nothing evicted).
                    weight(
                        key.0.len() + key.2.len() + key.3.len() * 32 + verdict + 640,
                        VERDICT_CACHE_BYTES,
                        20_000,
                    )
                })
                .build(),
            metrics,
        }
    }

    /// Verdicts held now (after pending evictions), for measurements.
    pub async fn entries(&self) -> u64 {
        self.verdicts.run_pending_tasks().await;
        self.verdicts.entry_count()
    }

    async fn fetch_and_judge(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        trust: &Trust,
    ) -> Result<Verdict, RegistryError> {
        if let Some(policy) = &self.policy {
            guard::admit(policy, image.domain()).await?;
        }
        // A trusted signature among the tag scheme's layers settles it: no bundles looked for.
        // What the layers said is kept with them, so that the bundles are judged after them
        // without checking the layers' signatures a second time.
        let judged: Mutex<Option<(Vec<FetchedLayer>, LayersJudged)>> = Mutex::new(None);
        let judge = |layers: &[FetchedLayer]| {
            let view: Vec<SignatureLayer<'_>> = layers.iter().map(FetchedLayer::as_layer).collect();
            judge_layers(&view, trust, digest)
        };
        let enough = |layers: &[FetchedLayer]| {
            let outcome = judge(layers);
            let verified = outcome.verified();
            *judged.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((layers.to_vec(), outcome));
            verified
        };
        let found = self
            .source
            .signatures_of(image, digest, credentials, &enough)
            .await?;
        let bundles: Vec<&[u8]> = found.bundles.iter().map(Vec::as_slice).collect();
        // (the layers judged are the ones found, unless the source asked about others first)
        let outcome = match judged.into_inner().unwrap_or_else(PoisonError::into_inner) {
            Some((seen, outcome)) if seen == found.layers => outcome,
            _ => judge(&found.layers),
        };
        Ok(outcome.with_bundles(&bundles, trust, digest))
    }
}

#[async_trait]
impl SignatureVerifier for VerifiedSignatures {
    async fn verify(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        trust: &Arc<Trust>,
    ) -> Result<Verdict, RegistryError> {
        let key = key(image, digest, credentials, trust);
        // A verdict held answers at once: no flight, no cryptography.
        if let Some(verdict) = self.verdicts.get(&key).await {
            self.metrics
                .signature_verification(verdict.reason(), "cache");
            return Ok(verdict);
        }
        let mut fetched = false;
        let answer = self
            .verdicts
            .try_get_with(key, async {
                fetched = true;
                self.fetch_and_judge(image, digest, credentials, trust)
                    .await
            })
            .await
            .map_err(RegistryError::Shared);
        let outcome = match &answer {
            Ok(verdict) => verdict.reason(),
            Err(_) => "registry_error",
        };
        self.metrics
            .signature_verification(outcome, if fetched { "registry" } else { "cache" });
        answer
    }

    async fn held(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        trust: &Arc<Trust>,
    ) -> Option<Verdict> {
        let verdict = self
            .verdicts
            .get(&key(image, digest, credentials, trust))
            .await?;
        self.metrics
            .signature_verification(verdict.reason(), "cache");
        Some(verdict)
    }
}

fn key(image: &Reference, digest: &Digest, credentials: &[Credential], trust: &Trust) -> Key {
    (
        image.repository(),
        digest.clone(),
        trust.shared_fingerprint(),
        credentials.iter().map(Credential::fingerprint).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signatures::key::tests::{key_pair, sign};
    use crate::signatures::simple_signing::payload_for;
    use crate::signatures::simple_signing::tests::LAYERS_JUDGED;
    use crate::signatures::PublicKey;

    /// A source that shows `asked` to `enough`, then answers `found` with no bundles.
    struct Layers {
        asked: Vec<FetchedLayer>,
        found: Vec<FetchedLayer>,
    }

    #[async_trait]
    impl SignatureSource for Layers {
        async fn signatures_of(
            &self,
            _: &Reference,
            _: &Digest,
            _: &[Credential],
            enough: Enough<'_>,
        ) -> Result<FetchedSignatures, RegistryError> {
            enough(&self.asked);
            Ok(FetchedSignatures {
                layers: self.found.clone(),
                bundles: Vec::new(),
            })
        }
    }

    /// Each layer's signature is checked once, when `enough` asks, whether it settles the
    /// verdict or leaves it to the bundles; layers the source did not show `enough` are judged
    /// when they come.
    #[tokio::test]
    async fn each_layer_is_judged_once() {
        let image: Reference = "registry.example/team/app:1.0".parse().unwrap();
        let digest: Digest = format!("sha256:{}", "a".repeat(64)).parse().unwrap();
        let payload = payload_for("registry.example/team/app", &digest);
        let (trusted, trusted_pem) = key_pair();
        let (other, _) = key_pair();
        let trust = Arc::new(Trust::of_keys(vec![
            PublicKey::from_pem(&trusted_pem).unwrap()
        ]));
        let layer = |signer| FetchedLayer::of_key(payload.clone(), sign(signer, &payload));
        let verdict = |asked: Vec<FetchedLayer>, found: Vec<FetchedLayer>| {
            let verifier = VerifiedSignatures::new(
                Arc::new(Layers { asked, found }),
                None,
                Arc::new(Metrics::new()),
            );
            let (image, digest, trust) = (image.clone(), digest.clone(), trust.clone());
            async move {
                LAYERS_JUDGED.with(|n| n.set(0));
                let verdict = verifier.verify(&image, &digest, &[], &trust).await.unwrap();
                (verdict, LAYERS_JUDGED.with(|n| n.get()))
            }
        };
        // settled by the layers
        let signed = layer(&trusted);
        let (answer, judged) = verdict(vec![signed.clone()], vec![signed]).await;
        assert!(matches!(answer, Verdict::Verified { .. }), "{answer:?}");
        assert_eq!(judged, 1);
        // not settled: the bundles (none) are judged after the layer, which is not judged again
        let unsettled = layer(&other);
        let (answer, judged) = verdict(vec![unsettled.clone()], vec![unsettled]).await;
        assert_eq!(answer, Verdict::OtherKey);
        assert_eq!(judged, 1);
        // the source showed other layers first: the ones found are judged themselves
        let (answer, judged) = verdict(vec![layer(&other)], vec![layer(&trusted)]).await;
        assert!(matches!(answer, Verdict::Verified { .. }), "{answer:?}");
        assert_eq!(judged, 2);
    }
}
