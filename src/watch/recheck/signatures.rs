//! A cycle's signature checks, planned (issue 46): every running image pinned to a digest that
//! a `verify` entry of the current policy covers is verified again, one call per (repository,
//! digest, the entry's trust, credential fingerprints) and cycle, with its namespace's pull
//! credentials for the image's own repository; the answers go through the watch's verdict cache
//! (the same kind as admission's: a key rotated out is a new trust, verified anew). [`SiteVerdicts`] hands each Pod image why it is not signed, when it is not:
//! a verdict other than `verified`; a fetch that failed says nothing.
//!
//! Never: I/O, a client, the clock.

use std::sync::Arc;

use super::*;
use crate::signatures::{Trust, Verdict};

/// What one signature check is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SignatureKey {
    pub repository: String,
    pub digest: Digest,
    /// [`Trust::fingerprint`].
    pub trust: Arc<str>,
    /// The fingerprints of the credentials that ask it: a namespace whose credentials fail
    /// never answers for another's.
    pub credentials: Vec<Fingerprint>,
}

/// One signature check of a cycle.
#[derive(Debug, Clone)]
pub struct SignatureCall {
    pub key: SignatureKey,
    pub reference: Reference,
    pub credentials: Vec<Credential>,
    pub trust: Arc<Trust>,
    /// Where the image's tag is resolved when the policy routes it through mirrors
    /// (`registries.resolveThrough`): its signatures are asked there too.
    pub routed: Option<RoutedCall>,
}

/// The distinct signature checks of a cycle, and which Pod images each answers (with the entry
/// that asks it).
#[derive(Debug, Default)]
pub struct SignaturePlan<'a> {
    calls: HashMap<SignatureKey, SignatureCall>,
    sites: Vec<(Site<'a>, usize, SignatureKey)>,
}

/// Why each checked Pod image is not signed, when it is not.
#[derive(Debug, Default)]
pub struct SiteVerdicts<'a>(HashMap<Site<'a>, String>);

// === impl SignaturePlan ===

impl<'a> SignaturePlan<'a> {
    /// Adds the pinned images of `request` that `policy`'s `verify` entries cover, each checked
    /// with the credentials `keyring` gives it, or at the mirrors `route` names for it (with
    /// theirs).
    pub fn add(
        &mut self,
        policy: &CompiledPolicy,
        request: &KeyringRequest<'a>,
        keyring: &Keyring,
        mut route: impl FnMut(&Reference) -> Option<RoutedCall>,
    ) {
        if policy.verify.is_empty() {
            return;
        }
        for (site, reference) in request.sites.iter().chain(&request.digests) {
            let Some(digest) = reference.digest() else {
                continue;
            };
            let rules: Vec<&crate::policy::VerifyRule> = policy.verify_rules(reference).collect();
            if rules.is_empty() {
                continue;
            }
            let credentials = keyring.lookup(reference);
            let routed = route(reference);
            let fingerprints: Vec<Fingerprint> = match &routed {
                Some(routed) => routed.fingerprints(),
                None => credentials.iter().map(Credential::fingerprint).collect(),
            };
            for rule in rules {
                let key = SignatureKey {
                    repository: reference.repository(),
                    digest: digest.clone(),
                    trust: rule.trust.shared_fingerprint(),
                    credentials: fingerprints.clone(),
                };
                self.sites.push((*site, rule.index, key.clone()));
                self.calls
                    .entry(key.clone())
                    .or_insert_with(|| SignatureCall {
                        key,
                        reference: Reference::clone(reference),
                        credentials: credentials.clone(),
                        trust: rule.trust.clone(),
                        routed: routed.clone(),
                    });
            }
        }
    }

    /// Distinct (repository, digest, trust) keys: the checks the cycle makes at most.
    pub fn distinct(&self) -> usize {
        self.calls.len()
    }

    /// The checks to make, one per key.
    pub fn calls(&self) -> Vec<SignatureCall> {
        self.calls.values().cloned().collect()
    }

    /// Each image's finding, given each key's verdict (`None`: the fetch failed, nothing is
    /// known): the first entry covering it whose verdict is not `verified`.
    pub fn answer(self, verdicts: &HashMap<SignatureKey, Option<Verdict>>) -> SiteVerdicts<'a> {
        let mut found: HashMap<Site<'a>, String> = HashMap::new();
        for (site, entry, key) in self.sites {
            let Some(Some(verdict)) = verdicts.get(&key) else {
                continue;
            };
            if matches!(verdict, Verdict::Verified { .. }) || found.contains_key(&site) {
                continue;
            }
            found.insert(site, format!("verify[{entry}]: {}", verdict.describe()));
        }
        SiteVerdicts(found)
    }
}

// === impl SiteVerdicts ===

impl SiteVerdicts<'_> {
    /// Why the pinned digest of the image `image` of the Pod `uid` is not signed, if it is not.
    pub fn get(&self, uid: &str, image: &str) -> Option<String> {
        let site = Site {
            pod_uid: uid,
            image,
        };
        self.0.get(&site).cloned()
    }
}
