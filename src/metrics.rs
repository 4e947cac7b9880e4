//! Prometheus metrics, exposed on `/metrics` in the text format.
//!
//! Owns: every metric pinhook exports and their names (`pinhook_` prefix, counters end
//! `_total`, durations are `_seconds` histograms). Label values come from fixed vocabularies,
//! except the registry host (the first 64 hosts that answered a resolution, else `other`) and the operator's
//! credential provider names; never image, tag, pod or namespace names.

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub endpoint: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `other`.
    pub operation: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryLabels {
    /// Registry host: bounded by what the cluster's images name (and `policy` restricts).
    pub registry: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `hit`, `miss`, `negative_hit`, `stale`, `coalesced`, `refresh`, `refresh_skipped`,
    /// `breaker_open`, `cancelled`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ViolationLabels {
    /// `enforce` or `audit`.
    pub mode: &'static str,
    /// `invalid_reference`, `resolution_failed`, `registry_denied`, `tag_moved`, `unpinned`,
    /// `tag_mirror`, `invalid_pull_secret`, `too_many_images`.
    pub reason: &'static str,
}

/// The image states of `pinhook watch` (`watch::ImageState`), the `state` label's values.
pub const RUNNING_IMAGE_STATES: [&str; 11] = [
    "unpinned",
    "pinned-current",
    "tag-moved",
    "digest-only",
    "unresolvable",
    "exempt",
    "left-to-owner",
    "runs-other-digest",
    "runs-stale-digest",
    "digest-missing",
    "unverified",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// An image state of `pinhook watch` ([`RUNNING_IMAGE_STATES`]).
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// The provider's name in the credential provider config (set by the operator).
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeftAloneLabels {
    /// `controller`, `operator`, `static_pod`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MirrorLabels {
    /// A `registries.resolveThrough` mirror's location, as the policy names it: bounded by the
    /// policy (at most 64 entries of 8 mirrors), never taken from a pod spec.
    pub mirror: String,
    /// `not_asked`, `agreed`, `unanswered`, `disagreed` (verifySource).
    pub source_check: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignatureLabels {
    /// `verified`, `no_signature`, `other_key`, `other_digest`, `other_identity`, `untrusted`,
    /// `registry_error`.
    pub outcome: &'static str,
    /// `registry` (fetched for this ask) or `cache`.
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderErrorLabels {
    pub provider: String,
    /// `spawn`, `timeout`, `exit`, `output_too_large`, `io`, `invalid_response`, and
    /// `service_account` (no run: the Pod's ServiceAccount or its token could not be had).
    pub reason: &'static str,
}

/// All metrics of one process.
pub struct Metrics {
    registry: Registry,
    pub reviews: Family<ReviewLabels, Counter>,
    pub review_duration: Family<EndpointLabels, Histogram>,
    pub registry_requests: Family<RegistryLabels, Counter>,
    pub registry_duration: Histogram,
    pub cache_lookups: Family<CacheLabels, Counter>,
    pub tag_moved: Counter,
    pub policy_violations: Family<ViolationLabels, Counter>,
    /// Objects left exactly as their maker wrote them, by why.
    pub left_alone: Family<LeftAloneLabels, Counter>,
    /// Images whose tag was resolved at a policy-named mirror, by mirror and source check.
    pub mirror_resolutions: Family<MirrorLabels, Counter>,
    /// Trips of the loop breaker (an owner listed as safe to pin that recreated its Pods).
    pub owner_loops: Counter,
    pub credential_provider_execs: Family<ProviderLabels, Counter>,
    pub credential_provider_errors: Family<ProviderErrorLabels, Counter>,
    pub connections_open: Gauge,
    pub connections_refused: Counter,
    /// Client connections of the HTTPS listener closed, with no request under way, to make
    /// room for an address holding fewer.
    pub connections_evicted: Counter,
    /// Requests refused at once (429) because their body did not fit the body budget.
    pub bodies_refused: Counter,
    /// `pinhook watch`: running images (one per container of each Pod) by state, as the last
    /// recheck found them.
    pub running_images: Family<StateLabels, Gauge>,
    /// `pinhook watch`: running images found with a moved tag that the previous recheck had
    /// not found so.
    pub tag_moved_running: Counter,
    /// `/mutate` and `/validate` requests refused (403) because client certificates are
    /// required and the connection presented none.
    pub unauthenticated_reviews: Counter,
    /// `/v1/dry-run` requests answered 429 because the TokenReview budget was spent.
    pub dry_run_throttled: Counter,
    /// When the certificate pinhook serves now stops being valid (its `notAfter`), Unix seconds;
    /// set at each load and reload.
    pub serving_certificate_expiry: Gauge,
    /// Signature verifications of a digest under one `verify` entry's trust, by outcome and
    /// whether the registry was asked.
    pub signature_verifications: Family<SignatureLabels, Counter>,
    /// `signature_verifications{outcome="verified",source="cache"}`, once first counted: the
    /// count every warm verified admission makes, without a label lookup.
    verified_from_cache: OnceLock<Counter>,
}

// === impl Metrics ===

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("pinhook");
        let reviews = Family::<ReviewLabels, Counter>::default();
        registry.register(
            "admission_reviews",
            "Admission reviews answered, by endpoint, operation and result",
            reviews.clone(),
        );
        let review_duration =
            Family::<EndpointLabels, Histogram>::new_with_constructor(duration_histogram);
        registry.register_with_unit(
            "admission_review_duration",
            "Time to answer one admission review",
            Unit::Seconds,
            review_duration.clone(),
        );
        let registry_requests = Family::<RegistryLabels, Counter>::default();
        registry.register(
            "registry_requests",
            "Tag resolutions sent to a registry, by registry and outcome",
            registry_requests.clone(),
        );
        let registry_duration = duration_histogram();
        registry.register_with_unit(
            "registry_resolve_duration",
            "Time of one tag resolution against a registry",
            Unit::Seconds,
            registry_duration.clone(),
        );
        let cache_lookups = Family::<CacheLabels, Counter>::default();
        registry.register(
            "cache_lookups",
            "Resolution cache lookups: hit, miss, negative_hit, stale (served while the registry failed), coalesced (waited on another admission's call)",
            cache_lookups.clone(),
        );
        let tag_moved = Counter::default();
        registry.register(
            "tag_moved",
            "Refreshes that found a tag pointing at a different digest than before",
            tag_moved.clone(),
        );
        let policy_violations = Family::<ViolationLabels, Counter>::default();
        registry.register(
            "policy_violations",
            "Images that broke the policy, by mode and reason (denied in enforce, reported in audit)",
            policy_violations.clone(),
        );
        let credential_provider_execs = Family::<ProviderLabels, Counter>::default();
        registry.register(
            "credential_provider_execs",
            "Credential provider plugin executions, by provider",
            credential_provider_execs.clone(),
        );
        let credential_provider_errors = Family::<ProviderErrorLabels, Counter>::default();
        registry.register(
            "credential_provider_errors",
            "Credential provider plugin executions that gave no credentials, by provider and reason",
            credential_provider_errors.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "Client connections open on the HTTPS listener",
            connections_open.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Client connections closed at once because --max-connections were open",
            connections_refused.clone(),
        );
        let connections_evicted = Counter::default();
        registry.register(
            "connections_evicted",
            "Client connections with no request under way closed, when --max-connections were open, to make room for an address holding fewer",
            connections_evicted.clone(),
        );
        let bodies_refused = Counter::default();
        registry.register(
            "request_bodies_refused",
            "Requests refused at once (429) because their body did not fit the budget of body bytes in flight (per caller or in all)",
            bodies_refused.clone(),
        );
        let running_images = Family::<StateLabels, Gauge>::default();
        // Every state reads 0 until the watch finds one (an alert on a state is never on an
        // absent series), like the watch's counters.
        for state in RUNNING_IMAGE_STATES {
            drop(running_images.get_or_create(&StateLabels { state }));
        }
        registry.register(
            "running_images",
            "Running images (per container of each Pod) by state, as pinhook watch last found them",
            running_images.clone(),
        );
        let left_alone = Family::<LeftAloneLabels, Counter>::default();
        registry.register(
            "left_alone",
            "Pod-bearing objects admitted exactly as written because their maker compares them with its own resource (controller, operator) or they mirror a static pod",
            left_alone.clone(),
        );
        let mirror_resolutions = Family::<MirrorLabels, Counter>::default();
        registry.register(
            "mirror_resolutions",
            "Images whose tag was resolved at a mirror registries.resolveThrough names, by mirror and by what verifySource found at the source",
            mirror_resolutions.clone(),
        );
        let owner_loops = Counter::default();
        registry.register(
            "owner_loops",
            "Owners listed in owners.pinPodsOf that recreated Pods of one image past owners.loopBreaker.maxPods within its window; pinhook paused pinning their Pods",
            owner_loops.clone(),
        );
        let tag_moved_running = Counter::default();
        registry.register(
            "tag_moved_running",
            "Running images pinhook watch found with a tag that moved since it was pinned (counted when first found)",
            tag_moved_running.clone(),
        );
        let unauthenticated_reviews = Counter::default();
        registry.register(
            "unauthenticated_reviews",
            "Admission reviews refused (403) because --client-ca-file requires a client certificate and the connection presented none",
            unauthenticated_reviews.clone(),
        );
        let dry_run_throttled = Counter::default();
        registry.register(
            "dry_run_throttled",
            "Dry-run requests answered 429 without a TokenReview because the TokenReview rate limit was reached",
            dry_run_throttled.clone(),
        );
        let serving_certificate_expiry = Gauge::default();
        registry.register(
            "serving_certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires (its notAfter), Unix seconds",
            serving_certificate_expiry.clone(),
        );
        let signature_verifications = Family::<SignatureLabels, Counter>::default();
        registry.register(
            "signature_verifications",
            "Signature verifications of an admitted digest under one verify entry: outcome verified, no_signature, other_key, other_digest, other_identity, untrusted or registry_error; source registry or cache",
            signature_verifications.clone(),
        );
        Metrics {
            registry,
            signature_verifications,
            verified_from_cache: OnceLock::new(),
            serving_certificate_expiry,
            unauthenticated_reviews,
            dry_run_throttled,
            running_images,
            tag_moved_running,
            connections_open,
            connections_refused,
            connections_evicted,
            bodies_refused,
            credential_provider_execs,
            credential_provider_errors,
            policy_violations,
            left_alone,
            mirror_resolutions,
            owner_loops,
            reviews,
            review_duration,
            registry_requests,
            registry_duration,
            cache_lookups,
            tag_moved,
        }
    }

    pub fn cache(&self, result: &'static str) {
        self.cache_lookups
            .get_or_create(&CacheLabels { result })
            .inc();
    }

    /// The gauge of running images in `state`.
    pub fn running_image_gauge(&self, state: &'static str) -> Gauge {
        self.running_images
            .get_or_create(&StateLabels { state })
            .clone()
    }

    pub fn signature_verification(&self, outcome: &'static str, source: &'static str) {
        if (outcome, source) == ("verified", "cache") {
            return self.signature_verifications_kept(1);
        }
        self.signature_verifications
            .get_or_create(&SignatureLabels { outcome, source })
            .inc();
    }

    /// `verdicts` verified verdicts answered from a cache.
    pub fn signature_verifications_kept(&self, verdicts: usize) {
        let counter = self.verified_from_cache.get_or_init(|| {
            self.signature_verifications
                .get_or_create(&SignatureLabels {
                    outcome: "verified",
                    source: "cache",
                })
                .clone()
        });
        counter.inc_by(verdicts as u64);
    }

    pub fn credential_provider_exec(&self, provider: &str) {
        let provider = provider.to_string();
        self.credential_provider_execs
            .get_or_create(&ProviderLabels { provider })
            .inc();
    }

    pub fn credential_provider_error(&self, provider: &str, reason: &'static str) {
        let provider = provider.to_string();
        self.credential_provider_errors
            .get_or_create(&ProviderErrorLabels { provider, reason })
            .inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// 100 µs to ~13 s: warm admissions take well under a millisecond, cold ones seconds.
pub fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}
