//! Verified signatures (issue 46): the verdict on a digest's cosign signatures under one
//! policy entry's trust, fetched through the same address guard, identity-token exchange,
//! client, limits and credentials as the tag, and cached by (repository, digest, trust
//! fingerprint, the asking credentials' fingerprints), never by a tag: a tag that moves names a
//! new digest, which is verified anew, and one namespace's verdict is never another's.
//! A verdict of `verified` is kept [`VERIFIED_FOR`], any other [`REFUSED_FOR`] (a signature
//! pushed after its image counts within that), a failed fetch not at all. Concurrent asks for
//! one key share one fetch (its verdict or its error; should the asker leading it give up, one
//! still waiting leads it on), and each signature is checked once: what the tag scheme's layers
//! said when the source asked whether they settle it is kept for the bundles judged after them.
//! A verdict held is answered with no await: a lookup in a synchronous cache.
//!
//! A digest that every entry covering it verified can also be kept beside the digest in the
//! resolution cache ([`VerifiedDigest`], until the earliest of those verdicts' own expiries), so
//! that a warm admission of a tag finds its digest and its verification in one lookup.
//!
//! Owns: [`SignatureVerifier`] (what admission asks), [`VerifiedSignatures`] (the cache over
//! the client), [`VerifiedDigest`] (what is kept of a verification). Never: decides what a
//! verdict costs an admission (the plan does).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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

/// Each `verify` entry that verified a digest (its index) and who signed for it, in the
/// entries' order.
pub type Signers = Arc<[(usize, Arc<str>)]>;

/// A digest every `verify` entry covering its image verified, under one compiled policy: what
/// the resolution cache keeps beside the digest (for the candidate credentials that verified
/// it, until the earliest of its verdicts' expiries) and hands back with the digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedDigest {
    /// The [`CompiledPolicy::generation`](crate::policy::CompiledPolicy::generation) whose
    /// entries verified it: under any other policy it answers nothing.
    pub policy: u64,
    pub signers: Signers,
}

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

    /// Until when a `verified` verdict held for what [`SignatureVerifier::verify`] would be
    /// asked is kept (what a [`VerifiedDigest`] made of it may live): `None` when none is held.
    async fn verified_until(
        &self,
        _image: &Reference,
        _digest: &Digest,
        _credentials: &[Credential],
        _trust: &Arc<Trust>,
    ) -> Option<Instant> {
        None
    }

    /// Counts `verdicts` answered by a [`VerifiedDigest`] the resolution cache kept, as
    /// `verified` from the cache: the metric counts every verdict an admission used.
    fn count_kept(&self, _verdicts: usize) {}
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
    verdicts: moka::sync::Cache<Key, Kept>,
    /// The fetches under way, each while somebody waits on it.
    flights: Mutex<HashMap<Key, Flight>>,
    metrics: Arc<Metrics>,
}

/// A fetch under way for one key: the first asker leads it, the others wait for its answer,
/// and one of them leads it on if its leader gives up (a review answered at its deadline).
type Flight = Arc<tokio::sync::OnceCell<Result<Kept, Arc<RegistryError>>>>;

/// An asker's place in a flight: the flight leaves the map once it has its answer (later askers
/// start afresh), or when the last asker leaves it unanswered (every asker gave up).
struct Waiting<'a> {
    flights: &'a Mutex<HashMap<Key, Flight>>,
    key: &'a Key,
    /// Always `Some` until dropped, under the map's lock.
    flight: Option<Flight>,
}

/// A verdict as the cache keeps it: with when it stops being kept.
#[derive(Clone)]
struct Kept {
    verdict: Verdict,
    until: Instant,
}

struct KeepFor;

impl moka::Expiry<Key, Kept> for KeepFor {
    fn expire_after_create(&self, _: &Key, kept: &Kept, now: Instant) -> Option<Duration> {
        Some(kept.until.saturating_duration_since(now))
    }
}

// === impl Kept ===

impl Kept {
    fn new(verdict: Verdict) -> Kept {
        let keep_for = match verdict {
            Verdict::Verified { .. } => VERIFIED_FOR,
            _ => REFUSED_FOR,
        };
        Kept {
            verdict,
            until: Instant::now() + keep_for,
        }
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
            verdicts: moka::sync::Cache::builder()
                .max_capacity(VERDICT_CACHE_BYTES)
                .expire_after(KeepFor)
                .weigher(|key: &Key, kept: &Kept| {
                    let verdict = match &kept.verdict {
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
            flights: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Verdicts held now (after pending evictions), for measurements.
    pub fn entries(&self) -> u64 {
        self.verdicts.run_pending_tasks();
        self.verdicts.entry_count()
    }

    /// Fetches under way now, for tests.
    #[cfg(test)]
    fn flights(&self) -> usize {
        lock(&self.flights).len()
    }

    /// The flight for `key` (the one under way, or a new one) and this asker's place in it,
    /// which must outlive the flight returned.
    fn join<'a>(&'a self, key: &'a Key) -> (Waiting<'a>, Flight) {
        let flight = lock(&self.flights).entry(key.clone()).or_default().clone();
        let waiting = Waiting {
            flights: &self.flights,
            key,
            flight: Some(flight.clone()),
        };
        (waiting, flight)
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
        if let Some(kept) = self.verdicts.get(&key) {
            self.metrics
                .signature_verification(kept.verdict.reason(), "cache");
            return Ok(kept.verdict);
        }
        // (`flight` is dropped before `waiting`, here or when this ask is given up)
        let (waiting, flight) = self.join(&key);
        let mut fetched = false;
        let answer = flight
            .get_or_init(|| async {
                // (a flight that ended since the lookup above has left its verdict)
                if let Some(kept) = self.verdicts.get(&key) {
                    return Ok(kept);
                }
                fetched = true;
                let answer = self
                    .fetch_and_judge(image, digest, credentials, trust)
                    .await
                    .map(Kept::new)
                    .map_err(Arc::new);
                if let Ok(kept) = &answer {
                    self.verdicts.insert(key.clone(), kept.clone());
                }
                // Answered: who asks from now on starts afresh (a verdict is held, an error
                // is not).
                waiting.answered();
                answer
            })
            .await
            .clone()
            .map(|kept| kept.verdict)
            .map_err(RegistryError::Shared);
        drop(flight);
        drop(waiting);
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
        let kept = self.verdicts.get(&key(image, digest, credentials, trust))?;
        self.metrics
            .signature_verification(kept.verdict.reason(), "cache");
        Some(kept.verdict)
    }

    async fn verified_until(
        &self,
        image: &Reference,
        digest: &Digest,
        credentials: &[Credential],
        trust: &Arc<Trust>,
    ) -> Option<Instant> {
        let kept = self.verdicts.get(&key(image, digest, credentials, trust))?;
        matches!(kept.verdict, Verdict::Verified { .. }).then_some(kept.until)
    }

    fn count_kept(&self, verdicts: usize) {
        self.metrics.signature_verifications_kept(verdicts);
    }
}

// === impl Waiting ===

impl Waiting<'_> {
    /// Takes the flight out of the map, if it is still there.
    fn answered(&self) {
        let mut flights = lock(self.flights);
        let ours = |f: &Flight| self.flight.as_ref().is_some_and(|o| Arc::ptr_eq(f, o));
        if flights.get(self.key).is_some_and(ours) {
            flights.remove(self.key);
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut flights = lock(self.flights);
        // This asker's hold goes under the lock that askers join under, so the count read
        // after it is exact: one is the map's own, and nobody waits any more.
        let Some(flight) = self.flight.take() else {
            return;
        };
        let ours = flights
            .get(self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &flight));
        drop(flight);
        if ours
            && flights
                .get(self.key)
                .is_some_and(|f| Arc::strong_count(f) == 1)
        {
            flights.remove(self.key);
        }
    }
}

/// A poisoned lock only means another thread panicked mid-update of a plain map.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// A source that takes `delay`, counts its calls and fails the first `failing` of them
    /// (a registry that does not answer); the others find one layer signed by `signer`.
    struct Slow {
        delay: std::time::Duration,
        failing: usize,
        calls: std::sync::atomic::AtomicUsize,
        layer: FetchedLayer,
    }

    #[async_trait]
    impl SignatureSource for Slow {
        async fn signatures_of(
            &self,
            _: &Reference,
            _: &Digest,
            _: &[Credential],
            _: Enough<'_>,
        ) -> Result<FetchedSignatures, RegistryError> {
            let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            if call < self.failing {
                return Err(RegistryError::Timeout {
                    registry: "registry.example".to_string(),
                    timeout: self.delay,
                });
            }
            Ok(FetchedSignatures {
                layers: vec![self.layer.clone()],
                bundles: Vec::new(),
            })
        }
    }

    /// What a test verifier is asked about.
    type Asked = (Reference, Digest, Arc<Trust>);

    /// A verifier over [`Slow`], what it is asked about, and the source's call count.
    fn slow(failing: usize) -> (Arc<VerifiedSignatures>, Arc<Slow>, Asked) {
        let image: Reference = "registry.example/team/app:1.0".parse().unwrap();
        let digest: Digest = format!("sha256:{}", "a".repeat(64)).parse().unwrap();
        let payload = payload_for("registry.example/team/app", &digest);
        let (signer, pem) = key_pair();
        let trust = Arc::new(Trust::of_keys(vec![PublicKey::from_pem(&pem).unwrap()]));
        let source = Arc::new(Slow {
            delay: std::time::Duration::from_millis(200),
            failing,
            calls: std::sync::atomic::AtomicUsize::new(0),
            layer: FetchedLayer::of_key(payload.clone(), sign(&signer, &payload)),
        });
        let verifier = Arc::new(VerifiedSignatures::new(
            source.clone(),
            None,
            Arc::new(Metrics::new()),
        ));
        (verifier, source, (image, digest, trust))
    }

    fn calls(source: &Slow) -> usize {
        source.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Concurrent asks for one key share one fetch; the verdict is then held, and no flight is
    /// left behind.
    #[tokio::test]
    async fn concurrent_asks_share_one_fetch() {
        let (verifier, source, (image, digest, trust)) = slow(0);
        let asks = (0..5).map(|_| verifier.verify(&image, &digest, &[], &trust));
        for answer in futures::future::join_all(asks).await {
            assert!(matches!(answer, Ok(Verdict::Verified { .. })), "{answer:?}");
        }
        assert_eq!(calls(&source), 1);
        assert_eq!(verifier.flights(), 0);
        let held = verifier.held(&image, &digest, &[], &trust).await;
        assert!(matches!(held, Some(Verdict::Verified { .. })), "{held:?}");
        assert_eq!(calls(&source), 1);
    }

    /// Many askers on many threads, leaving their flights at the same moment: none is left
    /// behind (a flight left would answer its key's next ask with its old answer).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_flight_is_left_behind_by_askers_on_many_threads() {
        let (verifier, _, (image, digest, trust)) = slow(0);
        for round in 0..20 {
            let (verifier, image, digest, trust) = (
                verifier.clone(),
                image.clone(),
                digest.clone(),
                trust.clone(),
            );
            let asks = (0..16).map(|_| {
                let (verifier, image, digest, trust) = (
                    verifier.clone(),
                    image.clone(),
                    digest.clone(),
                    trust.clone(),
                );
                tokio::spawn(async move {
                    // each round a digest of its own: every ask goes through a flight
                    let digest: Digest = format!("sha256:{round:064x}").parse().unwrap_or(digest);
                    verifier.verify(&image, &digest, &[], &trust).await
                })
            });
            for answer in futures::future::join_all(asks).await {
                assert!(answer.is_ok());
            }
            assert_eq!(verifier.flights(), 0, "round {round}");
        }
    }

    /// A failed fetch is shared by the asks waiting on it and never held: the next ask fetches
    /// again.
    #[tokio::test]
    async fn a_failed_fetch_is_shared_and_not_held() {
        let (verifier, source, (image, digest, trust)) = slow(1);
        let asks = (0..3).map(|_| verifier.verify(&image, &digest, &[], &trust));
        for answer in futures::future::join_all(asks).await {
            assert!(
                matches!(&answer, Err(e) if e.kind() == "timeout"),
                "{answer:?}"
            );
        }
        assert_eq!(calls(&source), 1);
        assert!(verifier.held(&image, &digest, &[], &trust).await.is_none());
        let answer = verifier.verify(&image, &digest, &[], &trust).await;
        assert!(matches!(answer, Ok(Verdict::Verified { .. })), "{answer:?}");
        assert_eq!(calls(&source), 2);
        assert_eq!(verifier.flights(), 0);
    }

    /// An asker that gives up (its review answered at its deadline) leaves the fetch to the
    /// one still waiting, which leads it on; once nobody waits, no flight is left.
    #[tokio::test]
    async fn the_fetch_goes_on_for_who_still_waits() {
        let (verifier, source, (image, digest, trust)) = slow(0);
        let impatient = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            verifier.verify(&image, &digest, &[], &trust),
        );
        let patient = verifier.verify(&image, &digest, &[], &trust);
        let (gave_up, answer) = tokio::join!(impatient, patient);
        assert!(gave_up.is_err());
        assert!(matches!(answer, Ok(Verdict::Verified { .. })), "{answer:?}");
        assert_eq!(calls(&source), 2, "the first fetch went with its leader");
        assert_eq!(verifier.flights(), 0);

        let (verifier, _, (image, digest, trust)) = slow(0);
        let gave_up = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            verifier.verify(&image, &digest, &[], &trust),
        )
        .await;
        assert!(gave_up.is_err());
        assert_eq!(verifier.flights(), 0, "nobody waits: no flight");
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
