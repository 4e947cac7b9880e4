//! Prometheus metrics, exposed on `/metrics` in the text format.
//!
//! Owns: every metric pinhook exports and their names (`pinhook_` prefix, counters end
//! `_total`, durations are `_seconds` histograms). Label values come from fixed vocabularies,
//! never image, tag, pod or namespace names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub endpoint: &'static str,
    pub operation: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

/// All metrics of one process.
pub struct Metrics {
    registry: Registry,
    pub reviews: Family<ReviewLabels, Counter>,
    pub review_duration: Family<EndpointLabels, Histogram>,
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
        Metrics {
            registry,
            reviews,
            review_duration,
        }
    }

    /// The registry, for other layers to add their metrics at start-up.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
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
