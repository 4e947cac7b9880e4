//! Which Event (`events.k8s.io/v1`) an image's state calls for, on its workload.
//!
//! Owns: the reasons, their type and their note. Pure: which findings are new and the
//! per-workload limit are [`super::recheck::EventMemory`]'s; emitting them is the controller's.
//!
//! | state | enforce | audit | off |
//! |---|---|---|---|
//! | tag-moved | `TagMoved` | `TagMoved` | — |
//! | unpinned | — | `Unpinned` | — |
//! | unresolvable | `ResolutionFailed` | `ResolutionFailed` | — |
//! | runs-other-digest | `RunsOtherDigest` | `RunsOtherDigest` | — |
//! | runs-stale-digest | `RunsStaleDigest` | `RunsStaleDigest` | — |
//! | digest-missing | `PinnedDigestMissing` | `PinnedDigestMissing` | — |
//! | unverified | `PinnedDigestUnverified` | `PinnedDigestUnverified` | — |
//! | pinned-current, digest-only, exempt | — | — | — |
//!
//! `Unpinned` only in audit namespaces: there pinhook admits unpinned Pods by design and the
//! Event is how it tells the workload's owner; in enforce namespaces an unpinned Pod predates
//! pinhook or was admitted while it was down, which the PolicyReport already lists as `fail`.
//! Every Event is `Warning`: each names something to act on. The note stays within the 1 KiB
//! `events.k8s.io/v1` allows.

use crate::policy::Mode;

use super::classify::{ClassifiedImage, ImageState};
use super::pod::WorkloadRef;

/// The `action` of every Event the watch emits (required by `events.k8s.io/v1`).
pub const ACTION: &str = "Watch";
/// `events.k8s.io/v1` refuses a longer `note`.
pub const MAX_NOTE_BYTES: usize = 1024;

/// An Event's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventReason {
    TagMoved,
    Unpinned,
    ResolutionFailed,
    /// The node runs another digest than the pinned one.
    RunsOtherDigest,
    /// The node runs a digest the (unpinned) tag no longer points to.
    RunsStaleDigest,
    /// The registry no longer has the pinned digest.
    PinnedDigestMissing,
    /// The pinned digest is not signed as the policy's `verify` entries require (issue 46).
    PinnedDigestUnverified,
    /// Sent by `pinhook serve` (not the watch) on an owner the loop breaker paused.
    PinningPaused,
    /// Sent by `pinhook serve` (not the watch) on an operator whose unpinned Pod `/validate`
    /// denied in enforce: what the operator's owner reads instead of a loop (issue 43).
    PodsDenied,
}

/// An Event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

/// The Event to emit: what the controller needs besides its own identity and the clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub reason: EventReason,
    pub type_: EventType,
    pub note: String,
    /// The object the Event is about (`regarding`).
    pub regarding: WorkloadRef,
}

/// The Event `image`'s state calls for in a namespace of `mode`, if any (module docs: table).
pub fn event_for(image: &ClassifiedImage<'_>, mode: Mode) -> Option<EventSpec> {
    // The image is the Pod author's text: shown escaped, never obeyed (`text::one_line`).
    let runs = format!(
        "{} runs {}",
        image.site.describe(),
        crate::text::one_line(&image.site.image)
    );
    let (reason, note) = match (&image.state, mode) {
        (_, Mode::Off) => return None,
        (ImageState::TagMoved { pinned, now }, _) => (
            EventReason::TagMoved,
            format!("{runs}: its tag now resolves to {now}, not the pinned {pinned}"),
        ),
        (ImageState::Unpinned { .. }, Mode::Audit) => (
            EventReason::Unpinned,
            format!("{runs} by tag, not pinned to a digest"),
        ),
        (ImageState::Unresolvable { reason, .. }, _) => (
            EventReason::ResolutionFailed,
            format!("{runs}: cannot be checked: {reason}"),
        ),
        (ImageState::RunsOtherDigest { pinned, running }, _) => (
            EventReason::RunsOtherDigest,
            format!(
                "{runs}: node {} runs {running}, not the pinned {pinned}",
                image.node_name()
            ),
        ),
        (ImageState::RunsStaleDigest { running, now }, _) => (
            EventReason::RunsStaleDigest,
            format!(
                "{runs}: node {} runs {running}, which its tag no longer points to (now {now})",
                image.node_name()
            ),
        ),
        (ImageState::Unverified { pinned, why }, _) => (
            EventReason::PinnedDigestUnverified,
            format!("{runs}: the pinned {pinned} is not signed as the policy requires ({why})"),
        ),
        (ImageState::DigestMissing { pinned }, _) => (
            EventReason::PinnedDigestMissing,
            format!("{runs}: the registry no longer has the pinned {pinned}; a new Pod of it cannot pull"),
        ),
        _ => return None,
    };
    Some(EventSpec {
        reason,
        type_: EventType::Warning,
        note: truncated(note, MAX_NOTE_BYTES),
        regarding: image.workload().clone(),
    })
}

/// `text` cut to at most `max` bytes on a character boundary, ending in `…` when cut.
pub(crate) fn truncated(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let ellipsis = '…';
    let mut end = max - ellipsis.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push(ellipsis);
    text
}

// === impl EventReason ===

impl EventReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::TagMoved => "TagMoved",
            EventReason::Unpinned => "Unpinned",
            EventReason::ResolutionFailed => "ResolutionFailed",
            EventReason::RunsOtherDigest => "RunsOtherDigest",
            EventReason::RunsStaleDigest => "RunsStaleDigest",
            EventReason::PinnedDigestMissing => "PinnedDigestMissing",
            EventReason::PinnedDigestUnverified => "PinnedDigestUnverified",
            EventReason::PinningPaused => "PinningPaused",
            EventReason::PodsDenied => "PodsDenied",
        }
    }
}

// === impl EventType ===

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::registry::testing::digest;
    use crate::watch::testing::{container, deployment, seen, Seen};

    fn image(image: &str, state: ImageState) -> Seen {
        seen(
            "pod-uid",
            &deployment("shop", "web"),
            container(image),
            state,
        )
    }

    fn moved() -> ImageState {
        ImageState::TagMoved {
            pinned: digest('a'),
            now: digest('b'),
        }
    }

    fn unresolvable() -> ImageState {
        ImageState::Unresolvable {
            reason: "registry docker.io: timeout".into(),
            pinned: Some(digest('a')),
        }
    }

    #[rstest]
    #[case::moved_enforce(moved(), Mode::Enforce, Some(EventReason::TagMoved))]
    #[case::moved_audit(moved(), Mode::Audit, Some(EventReason::TagMoved))]
    #[case::moved_off(moved(), Mode::Off, None)]
    #[case::unpinned_audit(ImageState::Unpinned { current: None }, Mode::Audit, Some(EventReason::Unpinned))]
    #[case::unpinned_enforce(ImageState::Unpinned { current: None }, Mode::Enforce, None)]
    #[case::unresolvable_enforce(
        unresolvable(),
        Mode::Enforce,
        Some(EventReason::ResolutionFailed)
    )]
    #[case::unresolvable_audit(unresolvable(), Mode::Audit, Some(EventReason::ResolutionFailed))]
    #[case::current(ImageState::PinnedCurrent { digest: digest('a') }, Mode::Audit, None)]
    #[case::digest_only(ImageState::DigestOnly { digest: digest('a') }, Mode::Audit, None)]
    #[case::exempt(ImageState::Exempt { why: "x".into() }, Mode::Audit, None)]
    #[case::runs_other(ImageState::RunsOtherDigest { pinned: digest('a'), running: digest('b') }, Mode::Enforce, Some(EventReason::RunsOtherDigest))]
    #[case::runs_stale(ImageState::RunsStaleDigest { running: digest('b'), now: digest('a') }, Mode::Audit, Some(EventReason::RunsStaleDigest))]
    #[case::missing(ImageState::DigestMissing { pinned: digest('a') }, Mode::Enforce, Some(EventReason::PinnedDigestMissing))]
    #[case::unverified(ImageState::Unverified { pinned: digest('a'), why: "verify[0]: no signature found".into() }, Mode::Audit, Some(EventReason::PinnedDigestUnverified))]
    #[case::unverified_off(ImageState::Unverified { pinned: digest('a'), why: "x".into() }, Mode::Off, None)]
    #[case::missing_off(ImageState::DigestMissing { pinned: digest('a') }, Mode::Off, None)]
    fn which_states_raise_an_event(
        #[case] state: ImageState,
        #[case] mode: Mode,
        #[case] expected: Option<EventReason>,
    ) {
        let event = event_for(&image("nginx:1.25", state).classified(), mode);
        assert_eq!(event.as_ref().map(|e| e.reason), expected);
        if let Some(event) = event {
            assert_eq!(event.type_, EventType::Warning);
            assert_eq!(event.regarding.describe(), "shop/Deployment/web");
        }
    }

    #[test]
    fn notes_name_the_container_image_and_digests() {
        let pinned = format!("nginx:1.25@{}", digest('a'));
        let event = event_for(&image(&pinned, moved()).classified(), Mode::Enforce);
        assert_eq!(
            event.map(|e| (e.reason.as_str(), e.type_.as_str(), e.note)),
            Some((
                "TagMoved",
                "Warning",
                format!(
                    "containers[app] runs {pinned}: its tag now resolves to {}, not the pinned {}",
                    digest('b'),
                    digest('a')
                )
            ))
        );
        let event = event_for(&image(&pinned, unresolvable()).classified(), Mode::Enforce);
        assert_eq!(
            event.map(|e| e.note),
            Some(format!(
                "containers[app] runs {pinned}: cannot be checked: registry docker.io: timeout"
            ))
        );
    }

    #[test]
    fn a_note_of_what_runs_names_the_node_and_both_digests() {
        let stale = image(
            "nginx:1.25",
            ImageState::RunsStaleDigest {
                running: digest('b'),
                now: digest('a'),
            },
        )
        .on("node-3");
        assert_eq!(
            event_for(&stale.classified(), Mode::Audit).map(|e| (e.reason.as_str(), e.note)),
            Some((
                "RunsStaleDigest",
                format!(
                    "containers[app] runs nginx:1.25: node node-3 runs {}, which its tag no longer points to (now {})",
                    digest('b'),
                    digest('a')
                )
            ))
        );
    }

    /// Issue 44: a Pod's image holding terminal codes, a line break, bidirectional or tag
    /// characters reaches the Event's note escaped (kubectl describe prints it).
    #[test]
    fn outside_text_reaches_the_note_escaped() {
        let hostile = "registry.example/app:1.0\x1b[2J\nforged\u{202e}txt\u{e0041}";
        let event = event_for(
            &image(hostile, ImageState::Unpinned { current: None }).classified(),
            Mode::Audit,
        );
        let note = event.map(|e| e.note).unwrap_or_default();
        assert!(
            !note
                .chars()
                .any(|c| c.is_control() || crate::text::hides_text(c)),
            "{note:?}"
        );
        assert!(
            note.contains(r"app:1.0\u{1b}[2J\nforged\u{202e}txt\u{e0041} by tag"),
            "{note}"
        );
    }

    #[test]
    fn a_long_note_is_cut_within_the_api_limit_on_a_character_boundary() {
        let long = format!("registry.example/{}é:1", "a".repeat(1100));
        let event = event_for(
            &image(&long, ImageState::Unpinned { current: None }).classified(),
            Mode::Audit,
        );
        let note = event.map(|e| e.note).unwrap_or_default();
        assert!(note.len() <= MAX_NOTE_BYTES, "{}", note.len());
        assert!(note.ends_with('…'));
        assert_eq!(truncated("é".repeat(10), 6), "é…");
        assert_eq!(truncated("short".into(), 6), "short");
    }
}
