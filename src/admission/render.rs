//! Turning a [`Plan`] into an AdmissionResponse: deny, patch, warnings, audit annotations.
//!
//! Warnings follow the apiserver's rules (`docs/kubernetes-and-registry-facts.md` §1): at most
//! 120 characters each, no control characters (a warning with a newline is silently dropped),
//! no duplicates, and pinhook's share of the request's 4096-rune budget kept well below it.
//! Warnings and audit annotations, like a denial's message (`review.rs`), carry no character
//! that [`hides_text`](crate::text::hides_text) raw: kubectl prints them to a terminal,
//! where a bidirectional control from a registry's error would reorder what the user reads;
//! they are written escaped (`\u{202e}`).

use std::collections::BTreeMap;

use super::decision::{Decision, ReviewResult};
use super::failure::Failure;
use super::plan::{Action, Plan};
use super::review::AdmissionResponse;
use crate::policy::Mode;
use crate::text::one_line;

const WARNING_MAX_CHARS: usize = 120;
/// pinhook's share of the apiserver's 4096-rune warning budget (other webhooks need room too).
const WARNING_BUDGET: usize = 2048;
/// Audit annotation values are not limited by the apiserver, but audit logs are read by humans.
const ANNOTATION_MAX_CHARS: usize = 1024;
/// Audit annotations per review: `violation-1` … `violation-20`, then `violations-omitted`.
const ANNOTATIONS_MAX: usize = 20;

/// The response for a planned object.
pub fn decide(uid: &str, plan: Plan) -> Decision {
    let warnings = shape_warnings(all_warnings(&plan));
    let annotations = audit_annotations(&plan);
    if let Some(message) = plan.denial_message() {
        let mut response = AdmissionResponse::deny(uid, 403, message).with_warnings(warnings);
        response.audit_annotations = annotations;
        return Decision {
            response,
            result: ReviewResult::Denied,
            plan: Some(plan),
        };
    }
    let patch = match plan.patch() {
        Ok(patch) => patch,
        Err(e) => return Failure::Patch(e).decision(uid),
    };
    let mut response = match AdmissionResponse::allow(uid).with_patch(&patch) {
        Ok(response) => response.with_warnings(warnings),
        Err(e) => return Failure::EncodePatch(e).decision(uid),
    };
    response.audit_annotations = annotations;
    let has_violations = plan.violations().next().is_some()
        || plan.findings.iter().any(|f| f.action == Action::Violation);
    let result = if !patch.0.is_empty() {
        ReviewResult::Pinned
    } else if has_violations {
        ReviewResult::Violation
    } else {
        ReviewResult::Skipped
    };
    Decision {
        response,
        result,
        plan: Some(plan),
    }
}

fn all_warnings(plan: &Plan) -> Vec<String> {
    let prefix = match plan.mode {
        Mode::Audit => "pinhook audit: would deny",
        _ => "pinhook: admitted",
    };
    let mut warnings = plan.warnings.clone();
    warnings.extend(
        plan.outcomes
            .iter()
            .filter(|o| o.action == Action::Violation)
            .map(|o| format!("{prefix} {}", o.describe_short())),
    );
    warnings.extend(
        plan.findings
            .iter()
            .filter(|f| f.action == Action::Violation)
            .map(|f| format!("{prefix}: {}", f.message)),
    );
    warnings
}

/// Makes warnings survive the apiserver: printable, ≤120 characters, unique, within budget.
pub fn shape_warnings(warnings: Vec<String>) -> Vec<String> {
    let mut shaped: Vec<String> = Vec::new();
    let mut used = 0;
    let mut omitted = 0;
    for warning in warnings {
        let clean: String = warning
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let clean = one_line(clean.trim());
        let clean = truncate_chars(&clean, WARNING_MAX_CHARS);
        let size = clean.chars().count();
        if clean.is_empty() || shaped.contains(&clean) {
            continue;
        }
        if used + size > WARNING_BUDGET {
            omitted += 1;
            continue;
        }
        used += size;
        shaped.push(clean);
    }
    if omitted > 0 {
        shaped.push(format!(
            "pinhook: and {omitted} more warnings (see pinhook's log)"
        ));
    }
    shaped
}

/// `violation-N` → the full description, for the audit log (keys are qualified names with no
/// `/`: the apiserver prefixes `<webhook name>/`).
fn audit_annotations(plan: &Plan) -> BTreeMap<String, String> {
    let images = plan
        .outcomes
        .iter()
        .filter(|o| matches!(o.action, Action::Violation | Action::Denied))
        .map(|o| {
            let reason = o.violation.map(|r| r.as_str()).unwrap_or("violation");
            format!("{reason}: {}", o.describe())
        });
    let findings = plan
        .findings
        .iter()
        .map(|f| format!("{}: {}", f.reason.as_str(), f.message));
    let mut all = images.chain(findings);
    let mut annotations: BTreeMap<String, String> = all
        .by_ref()
        .take(ANNOTATIONS_MAX)
        .enumerate()
        .map(|(i, value)| {
            let key = format!("violation-{}", i + 1);
            (key, annotation_value(&value))
        })
        .collect();
    let more = all.count();
    if more > 0 {
        annotations.insert(
            "violations-omitted".to_string(),
            format!("and {more} more (see pinhook's log)"),
        );
    }
    annotations.extend(origin_annotations(plan));
    annotations
}

/// `resolved-at-mirror-N` → `image at mirror (source check)` for each distinct image whose tag
/// was resolved at a `registries.resolveThrough` mirror, so the audit log says where every
/// routed digest came from (the first [`ANNOTATIONS_MAX`]).
fn origin_annotations(plan: &Plan) -> BTreeMap<String, String> {
    let mut seen = Vec::new();
    for outcome in &plan.outcomes {
        let Some(origin) = &outcome.origin else {
            continue;
        };
        let line = format!(
            "{} at {} (source {})",
            outcome.site.image,
            origin.mirror,
            origin.source_check.as_str().replace('_', " ")
        );
        if !seen.contains(&line) {
            seen.push(line);
        }
    }
    seen.into_iter()
        .take(ANNOTATIONS_MAX)
        .enumerate()
        .map(|(i, line)| {
            let key = format!("resolved-at-mirror-{}", i + 1);
            (key, annotation_value(&line))
        })
        .collect()
}

/// An audit annotation's value: `text` escaped for a person to read ([`one_line`]), then cut
/// to [`ANNOTATION_MAX_CHARS`].
fn annotation_value(text: &str) -> String {
    truncate_chars(&one_line(text), ANNOTATION_MAX_CHARS)
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max.saturating_sub(1)) {
        Some((i, _)) if text.chars().count() > max => format!("{}…", &text[..i]),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_short_printable_unique_and_bounded() {
        let long = "x".repeat(500);
        let shaped = shape_warnings(vec![
            "a\nb".to_string(),
            "a\nb".to_string(),
            long,
            String::new(),
        ]);
        assert_eq!(shaped[0], "a b");
        assert_eq!(shaped.len(), 2, "{shaped:?}");
        assert_eq!(shaped[1].chars().count(), WARNING_MAX_CHARS);
        assert!(shaped.iter().all(|w| !w.chars().any(char::is_control)));

        let many: Vec<String> = (0..100)
            .map(|i| format!("warning number {i} {}", "y".repeat(90)))
            .collect();
        let shaped = shape_warnings(many);
        let total: usize = shaped.iter().map(|w| w.chars().count()).sum();
        assert!(total <= WARNING_BUDGET + 100, "{total}");
        let kept = shaped.len() - 1;
        assert_eq!(
            shaped.last().map(String::as_str),
            Some(
                format!(
                    "pinhook: and {} more warnings (see pinhook's log)",
                    100 - kept
                )
                .as_str()
            )
        );
    }
}
