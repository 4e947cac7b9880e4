//! A cycle's registry requests, planned: [`LookupPlan`] gathers every Pod image's tag lookup
//! into one call per (tag, credential fingerprints), routed through mirrors where the policy
//! says so, and [`ProbePlan`] every pinned digest's check into one per (digest, credential
//! fingerprints), skipping the pins a tag lookup just vouched for; [`SiteLookups`] and
//! [`SiteChecks`] hand each Pod image its key's answer. The rules are the parent module's.
//!
//! Never: I/O, a client, the clock.

use super::*;

/// One registry request of a cycle: a tag, looked up with its credentials (or through the
/// mirrors of its route).
#[derive(Debug, Clone)]
pub struct Lookup {
    pub key: LookupKey,
    pub reference: Reference,
    pub credentials: Vec<Credential>,
    /// The call through mirrors, when the policy routes the tag (`registries.resolveThrough`).
    pub routed: Option<RoutedCall>,
}

/// One digest check of a cycle: a reference by digest and its credentials.
#[derive(Debug, Clone)]
pub struct Probe {
    pub key: ProbeKey,
    pub reference: Reference,
    pub credentials: Vec<Credential>,
}

/// A looked-up Pod image: the index of its lookup, and the digest it is pinned to.
#[derive(Debug)]
struct LookedUp<'a> {
    site: Site<'a>,
    call: usize,
    pinned: Option<Digest>,
}

/// The distinct lookups of a cycle, and which Pod images each one answers.
#[derive(Debug, Default)]
pub struct LookupPlan<'a> {
    /// Each distinct key's index in `calls`.
    keys: HashMap<LookupKey, usize>,
    calls: Vec<Lookup>,
    sites: Vec<LookedUp<'a>>,
    /// The digest checks known before any answer: those of digest-only images.
    probes: ProbePlan<'a>,
}

/// The distinct digest checks of a cycle, and which Pod images each one answers.
#[derive(Debug, Default)]
pub struct ProbePlan<'a> {
    calls: HashMap<ProbeKey, Probe>,
    sites: Vec<(Site<'a>, ProbeKey)>,
}

/// Each checked Pod image's answer.
#[derive(Debug, Default)]
pub struct SiteChecks<'a>(HashMap<Site<'a>, DigestCheck>);

/// Each looked-up Pod image's answer: each distinct key's answer (and the mirror its tag was
/// resolved at, when routed) once, and each image's index into them.
#[derive(Debug, Default)]
pub struct SiteLookups<'a> {
    answers: Vec<(Option<TagLookup>, Option<String>)>,
    sites: HashMap<Site<'a>, usize>,
}

// === impl LookupPlan ===

impl<'a> LookupPlan<'a> {
    /// Adds the images of `request`, each looked up with the credentials `keyring` gives it.
    pub fn add(&mut self, request: KeyringRequest<'a>, keyring: &Keyring) {
        self.add_routed(request, keyring, |_| None);
    }

    /// [`Self::add`], with the tags the policy routes through mirrors (`registries.resolveThrough`)
    /// looked up at those mirrors, as admission resolves them: `route` gives such a tag's call
    /// (the I/O half builds it: it reads the mirrors' credentials files). A routed lookup is keyed
    /// by the credentials of its mirrors, so two namespaces whose secrets differ only for a mirror
    /// never share an answer.
    pub fn add_routed(
        &mut self,
        request: KeyringRequest<'a>,
        keyring: &Keyring,
        mut route: impl FnMut(&Reference) -> Option<RoutedCall>,
    ) {
        for (site, reference) in request.digests {
            // Routed digests are pulled through the mirrors, and not checked (module docs).
            if route(&reference).is_some() {
                continue;
            }
            if let Some(digest) = reference.digest().cloned() {
                self.probes
                    .add(site, &reference, &digest, keyring.lookup(&reference));
            }
        }
        for (site, reference) in request.sites {
            let routed = route(&reference);
            let (credentials, fingerprints) = match &routed {
                Some(call) => (call.source_credentials.clone(), call.fingerprints()),
                None => {
                    let credentials = keyring.lookup(&reference);
                    let fingerprints = credentials.iter().map(Credential::fingerprint).collect();
                    (credentials, fingerprints)
                }
            };
            let key = LookupKey {
                tag: reference.tag_reference(),
                credentials: fingerprints,
            };
            let call = match self.keys.get(&key) {
                Some(call) => *call,
                None => {
                    let call = self.calls.len();
                    self.keys.insert(key.clone(), call);
                    self.calls.push(Lookup {
                        key,
                        reference: Reference::clone(&reference),
                        credentials,
                        routed,
                    });
                    call
                }
            };
            self.sites.push(LookedUp {
                site,
                call,
                pinned: reference.digest().cloned(),
            });
        }
    }

    /// Distinct (tag, credentials) keys: the registry requests the cycle makes at most.
    pub fn distinct(&self) -> usize {
        self.calls.len()
    }

    /// The digest checks the cycle makes, given the tag answers: every digest-only image's, and
    /// every `tag@digest` image's whose tag did not resolve to its pin, unless routed through
    /// mirrors (module docs). Keeps the plan: call it before [`Self::answer`].
    pub fn probes(&mut self, answers: &HashMap<LookupKey, TagLookup>) -> ProbePlan<'a> {
        let mut probes = std::mem::take(&mut self.probes);
        for looked_up in &self.sites {
            let Some(pinned) = &looked_up.pinned else {
                continue;
            };
            let Some(lookup) = self.calls.get(looked_up.call) else {
                continue;
            };
            if lookup.routed.is_some() {
                continue;
            }
            if matches!(answers.get(&lookup.key), Some(TagLookup::Resolved(now)) if now == pinned) {
                continue;
            }
            let credentials = lookup.credentials.clone();
            probes.add(looked_up.site, &lookup.reference, pinned, credentials);
        }
        probes
    }

    /// The lookups to make, one per key; a routed one carries its call.
    pub fn calls(&self) -> Vec<Lookup> {
        self.calls.clone()
    }

    /// Each image's answer, given each key's; an image whose key has no answer is not looked up.
    pub fn answer(self, answers: &HashMap<LookupKey, TagLookup>) -> SiteLookups<'a> {
        self.answer_with_origins(answers, &HashMap::new())
    }

    /// [`Self::answer`], with the mirror each routed key was resolved at
    /// (`registries.resolveThrough`), which the report shows as `resolvedAt`.
    pub fn answer_with_origins(
        self,
        answers: &HashMap<LookupKey, TagLookup>,
        origins: &HashMap<LookupKey, String>,
    ) -> SiteLookups<'a> {
        let answers: Vec<_> = self
            .calls
            .iter()
            .map(|lookup| {
                let key = &lookup.key;
                (answers.get(key).cloned(), origins.get(key).cloned())
            })
            .collect();
        let sites = self
            .sites
            .into_iter()
            .filter(|s| matches!(answers.get(s.call), Some((Some(_), _) | (_, Some(_)))))
            .map(|s| (s.site, s.call))
            .collect();
        SiteLookups { answers, sites }
    }
}

// === impl ProbePlan ===

impl<'a> ProbePlan<'a> {
    fn add(
        &mut self,
        site: Site<'a>,
        reference: &Reference,
        digest: &Digest,
        credentials: Vec<Credential>,
    ) {
        let probe = reference.by_digest(digest);
        let key = ProbeKey {
            manifest: probe.manifest_reference(),
            credentials: credentials.iter().map(Credential::fingerprint).collect(),
        };
        self.sites.push((site, key.clone()));
        self.calls.entry(key.clone()).or_insert(Probe {
            key,
            reference: probe,
            credentials,
        });
    }

    /// Distinct (digest, credentials) keys: the checks the cycle makes at most.
    pub fn distinct(&self) -> usize {
        self.calls.len()
    }

    /// The checks to make, one per key: a reference by digest and its credentials.
    pub fn calls(&self) -> Vec<Probe> {
        self.calls.values().cloned().collect()
    }

    /// Each image's answer, given each key's.
    pub fn answer(self, answers: &HashMap<ProbeKey, DigestCheck>) -> SiteChecks<'a> {
        SiteChecks(
            self.sites
                .into_iter()
                .filter_map(|(site, key)| answers.get(&key).map(|check| (site, *check)))
                .collect(),
        )
    }
}

// === impl SiteChecks ===

impl SiteChecks<'_> {
    /// The answer for the pinned digest of the image `image` of the Pod `uid`.
    pub fn get(&self, uid: &str, image: &str) -> DigestCheck {
        let site = Site {
            pod_uid: uid,
            image,
        };
        self.0.get(&site).copied().unwrap_or_default()
    }
}

// === impl SiteLookups ===

impl SiteLookups<'_> {
    /// The answer for the image `image` of the Pod `uid`.
    pub fn get(&self, uid: &str, image: &str) -> TagLookup {
        self.answer_of(uid, image)
            .and_then(|(lookup, _)| lookup.clone())
            .unwrap_or(TagLookup::NotLooked)
    }

    /// The mirror the image's tag was resolved at, when the policy routes it through mirrors.
    pub fn origin(&self, uid: &str, image: &str) -> Option<String> {
        self.answer_of(uid, image)
            .and_then(|(_, origin)| origin.clone())
    }

    fn answer_of(&self, uid: &str, image: &str) -> Option<&(Option<TagLookup>, Option<String>)> {
        let site = Site {
            pod_uid: uid,
            image,
        };
        let call = self.sites.get(&site)?;
        self.answers.get(*call)
    }
}
