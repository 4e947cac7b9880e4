//! The bounds that keep every report a writable object (issue 25): etcd refuses an object over
//! 1.5 MiB, and a report that cannot be written is a report that silently stops changing.
//!
//! Owns: the bound on each string of a result ([`MAX_STRING_BYTES`], cut on a char boundary
//! with [`TRUNCATION_MARKER`]), the byte budget of a report's results ([`MAX_REPORT_BYTES`]
//! for the whole serialised object, an envelope for metadata and summary reserved), which
//! results are kept when they do not all fit (the most severe first, then report order), and
//! the one result that says how many were left out. Pure: sizes are those of the JSON the
//! report serialises to, measured here, never asked of the apiserver.
//!
//! Every string of a result is bounded, not only those known to come from tenants (workload
//! names, image references, lookup failures, mirror entries and hosts from ConfigMaps): the
//! few that are pinhook's own are far below the bound.

use std::borrow::Cow;

use super::wire::{ReportResult, Summary, Verdict};
use super::{CATEGORY, MAX_RESULTS, POLICY, SOURCE};

/// Most bytes of a report serialised as JSON (the apiserver adds metadata of its own; etcd's
/// limit is 1.5 MiB, so a third of it is left for that).
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;
/// Most bytes of any one string in a result (message, property, resource field).
pub const MAX_STRING_BYTES: usize = 1024;
/// What ends a string cut to [`MAX_STRING_BYTES`].
pub const TRUNCATION_MARKER: &str = "…[truncated]";
/// Rule of the result that counts results left out.
pub const RULE_OMITTED: &str = "omitted-results";
/// Bytes reserved for everything but the results: apiVersion, kind, metadata (a namespace is
/// at most 63 bytes; labels and annotations are pinhook's), the summary, the omitted-results
/// result and the JSON around them.
const ENVELOPE_BYTES: usize = 8 * 1024;
/// A result is measured with its timestamp zeroed; a real one is at most this much longer.
const TIMESTAMP_SLACK: usize = 48;

/// `text` cut to at most `max` bytes, on a char boundary, ending in [`TRUNCATION_MARKER`];
/// `text` itself when it fits.
pub fn truncate(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max.saturating_sub(TRUNCATION_MARKER.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 {
        // No room for the marker: a bare cut.
        let mut end = max.min(text.len());
        while end > 0 && !text.is_char_boundary(end) {
            end -= 1;
        }
        return Cow::Owned(text[..end].to_string());
    }
    Cow::Owned(format!("{}{TRUNCATION_MARKER}", &text[..end]))
}

/// `text` escaped as one line (a Pod's image or a registry's words with a line break, a
/// terminal code or a bidirectional control are shown, never obeyed: `text::one_line`),
/// then cut to [`MAX_STRING_BYTES`].
fn bounded(text: &mut String) {
    if let std::borrow::Cow::Owned(escaped) = crate::text::one_line(text) {
        *text = escaped;
    }
    if text.len() > MAX_STRING_BYTES {
        *text = truncate(text, MAX_STRING_BYTES).into_owned();
    }
}

/// `result` with every string escaped as one line and at most [`MAX_STRING_BYTES`] (property
/// keys are pinhook's).
pub(super) fn bound_strings(mut result: ReportResult) -> ReportResult {
    for text in [
        &mut result.policy,
        &mut result.rule,
        &mut result.message,
        &mut result.source,
        &mut result.category,
    ] {
        bounded(text);
    }
    for resource in &mut result.resources {
        bounded(&mut resource.api_version);
        bounded(&mut resource.kind);
        bounded(&mut resource.name);
        for text in [&mut resource.namespace, &mut resource.uid]
            .into_iter()
            .flatten()
        {
            bounded(text);
        }
    }
    for value in result.properties.values_mut() {
        bounded(value);
    }
    result
}

/// Bytes `result` adds to a report's `results` array (its JSON and a comma), whatever its
/// timestamp.
fn result_bytes(result: &ReportResult) -> usize {
    // Serialising these plain structs (string maps are BTreeMaps) cannot fail.
    serde_json::to_vec(&result.without_timestamp()).map_or(usize::MAX / 2, |json| json.len())
        + TIMESTAMP_SLACK
        + 1
}

/// Which results to list: all of them when they fit in [`MAX_RESULTS`] and the byte budget;
/// otherwise at most `MAX_RESULTS - 1` within the budget, taken most severe first (high
/// findings, other findings, then passes and skips, each in report order) until the first that
/// does not fit, listed in report order; the rest are counted in the returned [`Summary`].
pub(super) fn fit(results: Vec<ReportResult>) -> (Vec<ReportResult>, Summary) {
    fit_within(results, MAX_RESULTS, MAX_REPORT_BYTES - ENVELOPE_BYTES)
}

fn fit_within(
    results: Vec<ReportResult>,
    max_results: usize,
    max_bytes: usize,
) -> (Vec<ReportResult>, Summary) {
    let sizes: Vec<usize> = results.iter().map(result_bytes).collect();
    let total = sizes.iter().fold(0usize, |sum, s| sum.saturating_add(*s));
    if results.len() <= max_results && total <= max_bytes {
        return (results, Summary::default());
    }
    let mut keep = vec![false; results.len()];
    let mut room_count = max_results.saturating_sub(1);
    let mut room_bytes = max_bytes;
    'classes: for class in 0..3 {
        for (i, result) in results.iter().enumerate() {
            if priority(result) != class {
                continue;
            }
            if room_count == 0 || sizes[i] > room_bytes {
                break 'classes;
            }
            keep[i] = true;
            room_count -= 1;
            room_bytes -= sizes[i];
        }
    }
    let mut omitted = Summary::default();
    let kept = results
        .into_iter()
        .zip(keep)
        .filter_map(|(result, keep)| {
            if !keep {
                omitted.count(result.result);
            }
            keep.then_some(result)
        })
        .collect();
    (kept, omitted)
}

/// 0: a high-severity finding, 1: any other finding, 2: a pass or skip.
fn priority(result: &ReportResult) -> u8 {
    match (result.result.is_finding(), result.severity) {
        (true, Some(super::Severity::High)) => 0,
        (true, _) => 1,
        (false, _) => 2,
    }
}

/// The result that stands for the `omitted` ones: a `skip` of rule [`RULE_OMITTED`], not
/// counted in the summary (which counts every result, listed or not).
pub(super) fn omitted_result(omitted: &Summary, scored: bool) -> ReportResult {
    let total = omitted.total();
    let message = format!(
        "{total} more results not listed (fail {}, warn {}, error {}, pass {}, skip {}); the \
         summary counts every result",
        omitted.fail, omitted.warn, omitted.error, omitted.pass, omitted.skip
    );
    ReportResult {
        policy: POLICY.to_string(),
        rule: RULE_OMITTED.to_string(),
        result: Verdict::Skip,
        scored,
        message,
        resources: Vec::new(),
        source: SOURCE.to_string(),
        severity: None,
        category: CATEGORY.to_string(),
        properties: [("omitted".to_string(), total.to_string())].into(),
        timestamp: Default::default(),
    }
}

// === impl Summary ===

impl Summary {
    /// Counts one more result of `verdict`.
    pub(super) fn count(&mut self, verdict: Verdict) {
        *match verdict {
            Verdict::Pass => &mut self.pass,
            Verdict::Fail => &mut self.fail,
            Verdict::Warn => &mut self.warn,
            Verdict::Error => &mut self.error,
            Verdict::Skip => &mut self.skip,
        } += 1;
    }

    pub fn total(&self) -> u64 {
        self.pass + self.fail + self.warn + self.error + self.skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_cuts_on_a_char_boundary_and_marks_the_cut() {
        assert_eq!(truncate("short", 1024), "short");
        let long = "é".repeat(2000); // 4000 bytes, 2-byte chars
        let cut = truncate(&long, MAX_STRING_BYTES);
        assert!(cut.len() <= MAX_STRING_BYTES, "{}", cut.len());
        assert!(cut.ends_with(TRUNCATION_MARKER));
        assert!(cut.len() > MAX_STRING_BYTES - TRUNCATION_MARKER.len() - 2);
        // A bound smaller than the marker still bounds.
        assert_eq!(truncate("ééé", 3), "é");
    }
}
