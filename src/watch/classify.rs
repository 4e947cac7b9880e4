//! The state of one running image: is it pinned, and does its tag still point where the pin
//! says?
//!
//! Owns: [`ImageState`] and the rule that derives it. Pure: the caller resolves tags (through
//! the registry's `Resolver`) and decides exemptions (the policy's `exempt` lists); this module
//! only combines them with the parsed reference.
//!
//! The rule, first match wins:
//!
//! | input | state |
//! |---|---|
//! | the caller says it is exempt | `exempt` (with the caller's reason) |
//! | the image does not parse | `unresolvable` (the parse error; no digest) |
//! | no digest (`name` or `name:tag`) | `unpinned`, whatever the lookup says; a resolved digest is kept as `current` for the inventory |
//! | a digest and no tag (`name@digest`) | `digest-only`: no tag to check, the lookup is ignored |
//! | `tag@digest`, the tag resolves to the pinned digest | `pinned-current` |
//! | `tag@digest`, the tag resolves to another digest of the same algorithm | `tag-moved`, both digests kept |
//! | `tag@digest`, the tag resolves to a digest of another algorithm | `unresolvable`: the two cannot be compared (a sha512 pin is not a sha256 digest of other content) |
//! | `tag@digest`, the lookup failed | `unresolvable` with the caller's reason, the pinned digest kept: the pin itself is fine, only drift is unknown |
//! | `tag@digest`, no lookup | `unresolvable` ("tag not looked up"), the pinned digest kept |
//!
//! A failed lookup of an unpinned image is still `unpinned`: whether the image is pinned never
//! depends on the registry, and the failure is the caller's to log.
//!
//! **What runs, and whether the pin still exists** ([`judge_running`], issue 29). The state the
//! spec gives is then refined by what the node reports it runs ([`RunningImage`]) and by the
//! registry's answer for the pinned digest itself, first match wins:
//!
//! | spec state | and | state |
//! |---|---|---|
//! | exempt, left-to-owner, unresolvable without a pin | anything | unchanged |
//! | any pinned state | the node runs a pulled digest other than the pin (same algorithm) | `runs-other-digest`, both digests kept |
//! | `unpinned` with the tag's current digest known | the node runs a pulled digest other than it | `runs-stale-digest`, both digests kept |
//! | any pinned state | the registry answered "not found" for the pinned digest | `digest-missing` |
//! | anything else | | unchanged |
//!
//! A local image ID (`sha256:…` alone) is a config digest and never compared; neither are
//! digests of different algorithms.
//!
//! **Signed** ([`judge_signed`], issue 46): a pin with nothing else to report (`pinned-current`,
//! `digest-only`) whose digest a `verify` entry of the current policy covers and does not find
//! signed (no signature, another key, another digest) is `unverified`; every other state stays.
//! A signature fetch that fails leaves the state as it was.

use crate::reference::{Digest, Reference};

use super::pod::{PodImage, PodRecord, RunningImage, WorkloadRef};

/// What the watch concludes about one image.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageState {
    /// Tag only (or a bare name, which means `latest`). `current` is what the tag resolves to
    /// now, when the caller looked it up; it does not change the state.
    Unpinned { current: Option<Digest> },
    /// `tag@digest` and the tag still resolves to `digest`.
    PinnedCurrent { digest: Digest },
    /// `tag@digest` and the tag now resolves to `now`.
    TagMoved { pinned: Digest, now: Digest },
    /// `name@digest`: nothing to check.
    DigestOnly { digest: Digest },
    /// Drift cannot be judged: the reference does not parse (no `pinned`), or its tag could not
    /// be resolved or compared (`pinned` kept).
    Unresolvable {
        reason: String,
        pinned: Option<Digest>,
    },
    /// The caller exempts the image or its namespace.
    Exempt { why: String },
    /// Not pinned, and pinhook leaves it so: its Pod belongs to an operator that compares the
    /// Pod's image with its own resource's, or mirrors a static pod (`why` says which).
    LeftToOwner { why: String },
    /// Pinned to `pinned`, and the node reports it runs `running`.
    RunsOtherDigest { pinned: Digest, running: Digest },
    /// Not pinned; the node runs `running`, and the tag now points to `now`.
    RunsStaleDigest { running: Digest, now: Digest },
    /// Pinned to `pinned`, which the registry no longer has: a new Pod of it cannot pull.
    DigestMissing { pinned: Digest },
    /// Pinned to `pinned`, whose signatures a `verify` entry of the current policy does not
    /// find (`why`: the entry and the verdict): a key rotated out, an identity removed, a
    /// signature deleted (issue 46).
    Unverified { pinned: Digest, why: String },
}

/// What the registry said of a pinned digest this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DigestCheck {
    /// Not asked (its tag resolved to it this cycle, or no check was possible), or no answer.
    #[default]
    Unknown,
    /// The registry has it.
    Present,
    /// The registry answered "not found".
    Missing,
}

/// The outcome of re-resolving an image's tag, as the caller obtained it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagLookup {
    /// Not asked: the image is exempt or digest-only, resolution is off, or not done yet.
    NotLooked,
    Resolved(Digest),
    /// Why the tag could not be resolved. It appears in reports, so it should be stable from one
    /// cycle to the next (e.g. `RegistryError::kind()` and the registry host, not a message
    /// carrying a retry delay): a changing reason is a changed report and an apiserver write.
    Failed(String),
}

/// One image of one Pod, classified: what reports, events and the inventory are built from.
/// Borrows its Pod and site from the records it was classified from: only the state (and the
/// mirror, if any) is its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifiedImage<'a> {
    /// The Pod: its uid counts Pods per image, its workload and node are what reports name.
    pub pod: &'a PodRecord,
    /// The image site, one of the Pod's.
    pub site: &'a PodImage,
    pub state: ImageState,
    /// The mirror the drift watch resolved the tag at (`registries.resolveThrough`), if any.
    pub origin: Option<String>,
}

/// Classifies a parsed reference (module docs: the rule). `exempt` is the caller's reason when
/// the image or its namespace is exempt.
pub fn classify(reference: &Reference, exempt: Option<&str>, lookup: TagLookup) -> ImageState {
    if let Some(why) = exempt {
        return ImageState::Exempt {
            why: why.to_string(),
        };
    }
    let Some(pinned) = reference.digest() else {
        let current = match lookup {
            TagLookup::Resolved(digest) => Some(digest),
            TagLookup::NotLooked | TagLookup::Failed(_) => None,
        };
        return ImageState::Unpinned { current };
    };
    let Some(tag) = reference.tag() else {
        return ImageState::DigestOnly {
            digest: pinned.clone(),
        };
    };
    let unresolvable = |reason: String| ImageState::Unresolvable {
        reason,
        pinned: Some(pinned.clone()),
    };
    match lookup {
        TagLookup::Resolved(now) if now == *pinned => ImageState::PinnedCurrent { digest: now },
        TagLookup::Resolved(now) if now.algorithm() == pinned.algorithm() => ImageState::TagMoved {
            pinned: pinned.clone(),
            now,
        },
        TagLookup::Resolved(now) => unresolvable(format!(
            "tag {tag} resolves to {now}, which cannot be compared with a {} pin",
            pinned.algorithm()
        )),
        TagLookup::Failed(reason) => unresolvable(reason),
        TagLookup::NotLooked => unresolvable(format!("tag {tag} not looked up")),
    }
}

/// [`classify`] for an image string as a Pod holds it: one that does not parse is
/// `unresolvable` with the parse error (unless exempt).
pub fn classify_image(image: &str, exempt: Option<&str>, lookup: TagLookup) -> ImageState {
    match Reference::parse(image) {
        Ok(reference) => classify(&reference, exempt, lookup),
        Err(error) => match exempt {
            Some(why) => ImageState::Exempt {
                why: why.to_string(),
            },
            None => ImageState::Unresolvable {
                reason: format!("invalid image reference: {error}"),
                pinned: None,
            },
        },
    }
}

/// A pin with nothing else to report (`pinned-current`, `digest-only`) whose digest the current
/// policy's `verify` entries do not find signed (`unverified`: the entry and the verdict, from
/// the recheck's signature checks) becomes `unverified`; every other state, found before, stays
/// (a moved tag or a failed lookup is already a finding, and keeps its results and Events).
pub fn judge_signed(state: ImageState, unverified: Option<String>) -> ImageState {
    match (&state, unverified) {
        (
            ImageState::PinnedCurrent { digest: pinned }
            | ImageState::DigestOnly { digest: pinned },
            Some(why),
        ) => ImageState::Unverified {
            pinned: pinned.clone(),
            why,
        },
        _ => state,
    }
}

/// Refines `state` (what the spec says) with what the node runs and the registry's answer for
/// the pinned digest (module docs: the table).
pub fn judge_running(
    state: ImageState,
    running: Option<&RunningImage>,
    check: DigestCheck,
) -> ImageState {
    if matches!(
        state,
        ImageState::Exempt { .. }
            | ImageState::LeftToOwner { .. }
            | ImageState::Unresolvable { pinned: None, .. }
    ) {
        return state;
    }
    let comparable = |a: &Digest, b: &Digest| a != b && a.algorithm() == b.algorithm();
    let running = running.and_then(RunningImage::digest);
    if let (Some(pinned), Some(running)) = (state.pinned(), running) {
        if comparable(running, pinned) {
            return ImageState::RunsOtherDigest {
                pinned: pinned.clone(),
                running: running.clone(),
            };
        }
    }
    if let (
        ImageState::Unpinned {
            current: Some(now), ..
        },
        Some(running),
    ) = (&state, running)
    {
        if comparable(running, now) {
            return ImageState::RunsStaleDigest {
                running: running.clone(),
                now: now.clone(),
            };
        }
    }
    if let (DigestCheck::Missing, Some(pinned)) = (check, state.pinned()) {
        return ImageState::DigestMissing {
            pinned: pinned.clone(),
        };
    }
    state
}

/// Every image of `pod` with the state `state_of` gives it, in the Pod's site order.
pub fn classify_pod<'a>(
    pod: &'a PodRecord,
    mut state_of: impl FnMut(&PodImage) -> ImageState,
) -> Vec<ClassifiedImage<'a>> {
    pod.images
        .iter()
        .map(|site| ClassifiedImage {
            pod,
            site,
            state: state_of(site),
            origin: None,
        })
        .collect()
}

// === impl ClassifiedImage ===

impl<'a> ClassifiedImage<'a> {
    /// The Pod's uid, to count Pods per image.
    pub fn pod_uid(&self) -> &'a str {
        &self.pod.uid
    }

    /// The workload the Pod belongs to.
    pub fn workload(&self) -> &'a WorkloadRef {
        &self.pod.workload
    }

    /// The node the Pod runs on, once scheduled.
    pub fn node(&self) -> Option<&'a str> {
        self.pod.node.as_deref()
    }

    /// The node its Pod runs on, as reports and Events name it.
    pub fn node_name(&self) -> &'a str {
        self.node().unwrap_or("(not scheduled)")
    }
}

// === impl ImageState ===

impl ImageState {
    /// Every state's name, in the order of the table in the module docs: the vocabulary of the
    /// `state` label of `pinhook_running_images`, which the metrics own.
    pub const NAMES: [&'static str; 11] = crate::metrics::RUNNING_IMAGE_STATES;

    /// The state's name in reports, events and the inventory.
    pub fn as_str(&self) -> &'static str {
        match self {
            ImageState::Unpinned { .. } => "unpinned",
            ImageState::PinnedCurrent { .. } => "pinned-current",
            ImageState::TagMoved { .. } => "tag-moved",
            ImageState::DigestOnly { .. } => "digest-only",
            ImageState::Unresolvable { .. } => "unresolvable",
            ImageState::Exempt { .. } => "exempt",
            ImageState::LeftToOwner { .. } => "left-to-owner",
            ImageState::RunsOtherDigest { .. } => "runs-other-digest",
            ImageState::RunsStaleDigest { .. } => "runs-stale-digest",
            ImageState::DigestMissing { .. } => "digest-missing",
            ImageState::Unverified { .. } => "unverified",
        }
    }

    /// The digest the image is pinned to, if any.
    pub fn pinned(&self) -> Option<&Digest> {
        match self {
            ImageState::PinnedCurrent { digest } | ImageState::DigestOnly { digest } => {
                Some(digest)
            }
            ImageState::TagMoved { pinned, .. }
            | ImageState::RunsOtherDigest { pinned, .. }
            | ImageState::DigestMissing { pinned }
            | ImageState::Unverified { pinned, .. } => Some(pinned),
            ImageState::Unresolvable { pinned, .. } => pinned.as_ref(),
            ImageState::Unpinned { .. }
            | ImageState::Exempt { .. }
            | ImageState::LeftToOwner { .. }
            | ImageState::RunsStaleDigest { .. } => None,
        }
    }

    /// The digest the image's tag resolves to now, when known.
    pub fn current(&self) -> Option<&Digest> {
        match self {
            ImageState::Unpinned { current } => current.as_ref(),
            ImageState::PinnedCurrent { digest } => Some(digest),
            ImageState::TagMoved { now, .. } | ImageState::RunsStaleDigest { now, .. } => Some(now),
            ImageState::DigestOnly { .. }
            | ImageState::Unresolvable { .. }
            | ImageState::Exempt { .. }
            | ImageState::LeftToOwner { .. }
            | ImageState::RunsOtherDigest { .. }
            | ImageState::DigestMissing { .. }
            | ImageState::Unverified { .. } => None,
        }
    }

    /// The digest the node runs, when it differs from what the state compares it with.
    pub fn running(&self) -> Option<&Digest> {
        match self {
            ImageState::RunsOtherDigest { running, .. }
            | ImageState::RunsStaleDigest { running, .. } => Some(running),
            _ => None,
        }
    }

    /// Why the image is unresolvable or exempt.
    pub fn detail(&self) -> Option<&str> {
        match self {
            ImageState::Unresolvable { reason, .. } => Some(reason),
            ImageState::Exempt { why }
            | ImageState::LeftToOwner { why }
            | ImageState::Unverified { why, .. } => Some(why),
            _ => None,
        }
    }
}

impl std::fmt::Display for ImageState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::registry::testing::digest;
    use crate::workload::ImageField;

    fn reference(image: &str) -> Reference {
        Reference::parse(image).expect("valid reference")
    }

    fn pinned_to(tag_and_name: &str, c: char) -> Reference {
        reference(&format!("{tag_and_name}@{}", digest(c)))
    }

    #[rstest]
    #[case::tag_only_not_looked("nginx:1.25", TagLookup::NotLooked)]
    #[case::bare_name("nginx", TagLookup::NotLooked)]
    #[case::tag_lookup_failed("nginx:1.25", TagLookup::Failed("timeout".into()))]
    fn a_reference_without_digest_is_unpinned_whatever_the_registry_says(
        #[case] image: &str,
        #[case] lookup: TagLookup,
    ) {
        assert_eq!(
            classify(&reference(image), None, lookup),
            ImageState::Unpinned { current: None }
        );
    }

    #[test]
    fn an_unpinned_image_whose_tag_resolves_is_still_unpinned_and_keeps_the_digest() {
        let state = classify(
            &reference("nginx:1.25"),
            None,
            TagLookup::Resolved(digest('a')),
        );
        assert_eq!(
            state,
            ImageState::Unpinned {
                current: Some(digest('a'))
            }
        );
        assert_eq!(state.as_str(), "unpinned");
        assert_eq!(state.current(), Some(&digest('a')));
        assert_eq!(state.pinned(), None);
    }

    #[test]
    fn a_tag_that_still_resolves_to_the_pin_is_pinned_current() {
        let state = classify(
            &pinned_to("nginx:1.25", 'a'),
            None,
            TagLookup::Resolved(digest('a')),
        );
        assert_eq!(
            state,
            ImageState::PinnedCurrent {
                digest: digest('a')
            }
        );
        assert_eq!(state.as_str(), "pinned-current");
        assert_eq!(
            (state.pinned(), state.current()),
            (Some(&digest('a')), Some(&digest('a')))
        );
    }

    #[test]
    fn a_tag_that_resolves_elsewhere_has_moved_and_both_digests_are_kept() {
        let state = classify(
            &pinned_to("nginx:1.25", 'a'),
            None,
            TagLookup::Resolved(digest('b')),
        );
        assert_eq!(
            state,
            ImageState::TagMoved {
                pinned: digest('a'),
                now: digest('b')
            }
        );
        assert_eq!(state.as_str(), "tag-moved");
        assert_eq!(
            (state.pinned(), state.current()),
            (Some(&digest('a')), Some(&digest('b')))
        );
    }

    #[rstest]
    #[case::not_looked(TagLookup::NotLooked)]
    #[case::resolved_anyway(TagLookup::Resolved(digest('b')))]
    #[case::failed(TagLookup::Failed("timeout".into()))]
    fn a_digest_without_tag_is_digest_only_and_the_lookup_is_ignored(#[case] lookup: TagLookup) {
        let state = classify(&pinned_to("nginx", 'a'), None, lookup);
        assert_eq!(
            state,
            ImageState::DigestOnly {
                digest: digest('a')
            }
        );
        assert_eq!(state.as_str(), "digest-only");
    }

    #[test]
    fn a_failed_lookup_of_a_pinned_tag_is_unresolvable_and_keeps_the_pin() {
        let state = classify(
            &pinned_to("nginx:1.25", 'a'),
            None,
            TagLookup::Failed("registry docker.io: timeout".into()),
        );
        assert_eq!(
            state,
            ImageState::Unresolvable {
                reason: "registry docker.io: timeout".into(),
                pinned: Some(digest('a'))
            }
        );
        assert_eq!(state.as_str(), "unresolvable");
        assert_eq!(state.detail(), Some("registry docker.io: timeout"));
        assert_eq!(state.pinned(), Some(&digest('a')));
        assert_eq!(state.current(), None);
    }

    #[test]
    fn a_pinned_tag_never_looked_up_is_unresolvable_not_current() {
        let state = classify(&pinned_to("nginx:1.25", 'a'), None, TagLookup::NotLooked);
        assert_eq!(state.as_str(), "unresolvable");
        assert_eq!(state.detail(), Some("tag 1.25 not looked up"));
    }

    #[test]
    fn digests_of_different_algorithms_are_not_called_a_move() {
        let sha512 = Digest::new(crate::reference::Algorithm::Sha512, &"c".repeat(128))
            .expect("valid sha512");
        let image = reference(&format!("nginx:1.25@{sha512}"));
        let state = classify(&image, None, TagLookup::Resolved(digest('a')));
        assert_eq!(state.as_str(), "unresolvable");
        assert_eq!(state.pinned(), Some(&sha512));
        let reason = state.detail().unwrap_or_default();
        assert!(
            reason.contains("cannot be compared with a sha512 pin"),
            "{reason}"
        );
    }

    #[rstest]
    #[case::unpinned("nginx:1.25")]
    #[case::pinned(&format!("nginx:1.25@{}", digest('a')))]
    #[case::digest_only(&format!("nginx@{}", digest('a')))]
    fn exemption_wins_over_everything(#[case] image: &str) {
        let state = classify(
            &reference(image),
            Some("namespace kube-system is exempt"),
            TagLookup::Resolved(digest('b')),
        );
        assert_eq!(
            state,
            ImageState::Exempt {
                why: "namespace kube-system is exempt".into()
            }
        );
        assert_eq!(state.as_str(), "exempt");
        assert_eq!(state.pinned(), None);
    }

    #[test]
    fn an_image_that_does_not_parse_is_unresolvable_unless_exempt() {
        let state = classify_image("Nginx:1.25", None, TagLookup::NotLooked);
        assert_eq!(
            state,
            ImageState::Unresolvable {
                reason:
                    "invalid image reference: repository name must be lowercase: \"library/Nginx\""
                        .into(),
                pinned: None
            }
        );
        let state = classify_image("Nginx:1.25", Some("exempt image"), TagLookup::NotLooked);
        assert_eq!(state.as_str(), "exempt");
        let state = classify_image("nginx:1.25", None, TagLookup::NotLooked);
        assert_eq!(state.as_str(), "unpinned");
    }

    #[test]
    fn a_standing_pin_not_signed_as_the_policy_requires_is_unverified() {
        let why = || Some("verify[0]: no signature found".to_string());
        let unverified = |pinned: Digest| ImageState::Unverified {
            pinned,
            why: "verify[0]: no signature found".to_string(),
        };
        for pinned in [
            ImageState::PinnedCurrent {
                digest: digest('a'),
            },
            ImageState::DigestOnly {
                digest: digest('a'),
            },
        ] {
            assert_eq!(judge_signed(pinned.clone(), why()), unverified(digest('a')));
            assert_eq!(judge_signed(pinned.clone(), None), pinned);
        }
        // Every other finding stays; an unpinned image has nothing signed.
        for state in [
            ImageState::TagMoved {
                pinned: digest('a'),
                now: digest('b'),
            },
            ImageState::Unresolvable {
                reason: "down".into(),
                pinned: Some(digest('a')),
            },
            ImageState::DigestMissing {
                pinned: digest('a'),
            },
            ImageState::RunsOtherDigest {
                pinned: digest('a'),
                running: digest('b'),
            },
            ImageState::Unpinned { current: None },
            ImageState::Exempt { why: "x".into() },
        ] {
            assert_eq!(judge_signed(state.clone(), why()), state);
        }
        let state = unverified(digest('a'));
        assert_eq!(state.as_str(), "unverified");
        assert_eq!(state.pinned(), Some(&digest('a')));
        assert!(ImageState::NAMES.contains(&"unverified"));
    }

    fn pulled(c: char) -> RunningImage {
        RunningImage::Pulled(digest(c))
    }

    #[rstest]
    #[case::pinned_runs_its_pin(
        ImageState::PinnedCurrent { digest: digest('a') }, Some(pulled('a')), DigestCheck::Unknown,
        ImageState::PinnedCurrent { digest: digest('a') })]
    #[case::pinned_runs_another(
        ImageState::PinnedCurrent { digest: digest('a') }, Some(pulled('b')), DigestCheck::Present,
        ImageState::RunsOtherDigest { pinned: digest('a'), running: digest('b') })]
    #[case::moved_tag_runs_another(
        ImageState::TagMoved { pinned: digest('a'), now: digest('c') }, Some(pulled('b')), DigestCheck::Unknown,
        ImageState::RunsOtherDigest { pinned: digest('a'), running: digest('b') })]
    #[case::digest_only_runs_another(
        ImageState::DigestOnly { digest: digest('a') }, Some(pulled('b')), DigestCheck::Missing,
        ImageState::RunsOtherDigest { pinned: digest('a'), running: digest('b') })]
    #[case::local_image_id_is_not_compared(
        ImageState::PinnedCurrent { digest: digest('a') }, Some(RunningImage::ImageId), DigestCheck::Unknown,
        ImageState::PinnedCurrent { digest: digest('a') })]
    #[case::unpinned_runs_what_the_tag_points_to(
        ImageState::Unpinned { current: Some(digest('a')) }, Some(pulled('a')), DigestCheck::Unknown,
        ImageState::Unpinned { current: Some(digest('a')) })]
    #[case::unpinned_runs_what_the_tag_no_longer_points_to(
        ImageState::Unpinned { current: Some(digest('a')) }, Some(pulled('b')), DigestCheck::Unknown,
        ImageState::RunsStaleDigest { running: digest('b'), now: digest('a') })]
    #[case::unpinned_with_the_tag_unknown(
        ImageState::Unpinned { current: None }, Some(pulled('b')), DigestCheck::Unknown,
        ImageState::Unpinned { current: None })]
    #[case::pin_missing(
        ImageState::TagMoved { pinned: digest('a'), now: digest('c') }, Some(pulled('a')), DigestCheck::Missing,
        ImageState::DigestMissing { pinned: digest('a') })]
    #[case::pin_missing_nothing_runs_yet(
        ImageState::Unresolvable { reason: "registry r: timeout".into(), pinned: Some(digest('a')) }, None, DigestCheck::Missing,
        ImageState::DigestMissing { pinned: digest('a') })]
    #[case::missing_means_nothing_without_a_pin(
        ImageState::Unpinned { current: None }, None, DigestCheck::Missing,
        ImageState::Unpinned { current: None })]
    #[case::exempt_stays_exempt(
        ImageState::Exempt { why: "w".into() }, Some(pulled('b')), DigestCheck::Missing,
        ImageState::Exempt { why: "w".into() })]
    #[case::left_to_owner_stays(
        ImageState::LeftToOwner { why: "w".into() }, Some(pulled('b')), DigestCheck::Missing,
        ImageState::LeftToOwner { why: "w".into() })]
    fn what_runs_and_whether_the_pin_exists_refine_the_state(
        #[case] state: ImageState,
        #[case] running: Option<RunningImage>,
        #[case] check: DigestCheck,
        #[case] expected: ImageState,
    ) {
        assert_eq!(judge_running(state, running.as_ref(), check), expected);
    }

    #[test]
    fn digests_of_another_algorithm_are_never_called_another_digest() {
        let sha512 = Digest::new(crate::reference::Algorithm::Sha512, &"c".repeat(128))
            .expect("valid sha512");
        let state = ImageState::PinnedCurrent {
            digest: digest('a'),
        };
        let running = RunningImage::Pulled(sha512);
        assert_eq!(
            judge_running(state.clone(), Some(&running), DigestCheck::Unknown),
            state
        );
    }

    #[test]
    fn the_new_states_name_their_digests() {
        let other = ImageState::RunsOtherDigest {
            pinned: digest('a'),
            running: digest('b'),
        };
        assert_eq!(
            (
                other.as_str(),
                other.pinned(),
                other.current(),
                other.running()
            ),
            (
                "runs-other-digest",
                Some(&digest('a')),
                None,
                Some(&digest('b'))
            )
        );
        let stale = ImageState::RunsStaleDigest {
            running: digest('b'),
            now: digest('a'),
        };
        assert_eq!(
            (
                stale.as_str(),
                stale.pinned(),
                stale.current(),
                stale.running()
            ),
            (
                "runs-stale-digest",
                None,
                Some(&digest('a')),
                Some(&digest('b'))
            )
        );
        let missing = ImageState::DigestMissing {
            pinned: digest('a'),
        };
        assert_eq!(
            (missing.as_str(), missing.pinned(), missing.running()),
            ("digest-missing", Some(&digest('a')), None)
        );
        assert!(ImageState::NAMES.contains(&"digest-missing"));
    }

    #[test]
    fn classify_pod_keeps_site_order_and_attributes_each_image() {
        let pod = PodRecord {
            node: None,
            namespace: "shop".into(),
            name: "web-1".into(),
            uid: "pod-uid".into(),
            owner: None,
            workload: WorkloadRef {
                namespace: "shop".into(),
                kind: "Pod".into(),
                name: "web-1".into(),
                api_version: "v1".into(),
                uid: Some("pod-uid".into()),
            },
            images: vec![
                PodImage {
                    running: None,
                    field: ImageField::InitContainers,
                    name: "init".into(),
                    image: "busybox".into(),
                },
                PodImage {
                    running: None,
                    field: ImageField::Containers,
                    name: "app".into(),
                    image: format!("nginx@{}", digest('a')),
                },
            ],
            pull_secrets: Vec::new(),
            service_account: "default".into(),
            terminal: false,
            mirror: false,
        };
        let classified = classify_pod(&pod, |site| {
            classify_image(&site.image, None, TagLookup::NotLooked)
        });
        let states: Vec<_> = classified
            .iter()
            .map(|c| (c.site.describe(), c.state.as_str(), c.pod_uid()))
            .collect();
        assert_eq!(
            states,
            [
                ("initContainers[init]".to_string(), "unpinned", "pod-uid"),
                ("containers[app]".to_string(), "digest-only", "pod-uid"),
            ]
        );
        assert!(classified.iter().all(|c| *c.workload() == pod.workload));
    }
}
