//! The mirror guard's part of a plan: what [`crate::mirror_guard`] finds in an object that
//! configures registry mirrors, as findings of the object (denied in enforce, reported in
//! audit). Pure.

use crate::mirror_guard;
use crate::policy::{CompiledPolicy, Mode};

use super::outcome::{empty, Action, Finding, Plan, Reason};
use super::Object;

/// The mirror guard's answer for one object.
pub(super) struct MirrorVerdict {
    /// Each pair that may answer tag pulls and is not allowed, or why the file cannot load.
    messages: Vec<String>,
    /// Facts that change nothing on the node, said as warnings.
    notes: Vec<String>,
}

/// The mirror guard's plan. It guards every image of the cluster, so image exemptions, exempt
/// namespaces and `target: pods` do not switch it off; only mode `off` (global or the
/// namespace's label) does.
pub(super) fn mirror_plan(mode: Mode, verdict: MirrorVerdict, mut warnings: Vec<String>) -> Plan {
    // Facts that change nothing on the node (an ignored duplicate entry, a drop-in that
    // replaces another) are said in every mode but off.
    if mode != Mode::Off {
        warnings.extend(verdict.notes.iter().map(|note| format!("pinhook: {note}")));
    }
    let messages = verdict.messages;
    let action = match mode {
        Mode::Off => return empty(mode, warnings),
        Mode::Audit => Action::Violation,
        Mode::Enforce => Action::Denied,
    };
    let findings = messages
        .into_iter()
        .map(|message| Finding {
            action,
            reason: Reason::TagMirror,
            message,
        })
        .collect();
    Plan {
        findings,
        ..empty(mode, warnings)
    }
}

/// What the mirror guard objects to (`messages`) and notes, or `None` when the object
/// configures no mirrors.
pub(super) fn mirror_messages(
    policy: &CompiledPolicy,
    object: &Object<'_>,
) -> Option<MirrorVerdict> {
    match mirror_guard::review(
        &policy.policy.mirrors,
        object.group,
        object.kind,
        object.object,
    ) {
        Ok(None) => None,
        Ok(Some(review)) => Some(MirrorVerdict {
            messages: review.violations.into_iter().map(with_suggestion).collect(),
            notes: review.notes,
        }),
        Err(e) => Some(MirrorVerdict {
            messages: vec![e.to_string()],
            notes: Vec::new(),
        }),
    }
}

/// A tag mirror's message, followed by the `registries.resolveThrough` entry that replaces it
/// (issue 28): pinhook resolves the tag once, at the mirror, and the nodes pull the digest
/// through a digest-only mirror. None for a wildcard or unnamed source, which no entry can name.
fn with_suggestion(violation: mirror_guard::MirrorViolation) -> String {
    let source = violation.source.as_str();
    if source.is_empty() || source.contains('*') || violation.mirror.is_empty() {
        return violation.message;
    }
    format!(
        "{}; instead: {}",
        violation.message,
        crate::policy::Routes::suggestion(source, &violation.mirror)
    )
}
