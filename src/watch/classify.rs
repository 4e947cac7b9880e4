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

use crate::reference::{Digest, Reference};

use super::pod::{PodImage, PodRecord, WorkloadRef};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifiedImage {
    /// The Pod's uid, to count Pods per image.
    pub pod_uid: String,
    pub workload: WorkloadRef,
    pub site: PodImage,
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

/// Every image of `pod` with the state `state_of` gives it, in the Pod's site order.
pub fn classify_pod(
    pod: &PodRecord,
    mut state_of: impl FnMut(&PodImage) -> ImageState,
) -> Vec<ClassifiedImage> {
    pod.images
        .iter()
        .map(|site| ClassifiedImage {
            pod_uid: pod.uid.clone(),
            workload: pod.workload.clone(),
            site: site.clone(),
            state: state_of(site),
            origin: None,
        })
        .collect()
}

// === impl ImageState ===

impl ImageState {
    /// Every state's name, in the order of the table in the module docs.
    pub const NAMES: [&'static str; 7] = [
        "unpinned",
        "pinned-current",
        "tag-moved",
        "digest-only",
        "unresolvable",
        "exempt",
        "left-to-owner",
    ];

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
        }
    }

    /// The digest the image is pinned to, if any.
    pub fn pinned(&self) -> Option<&Digest> {
        match self {
            ImageState::PinnedCurrent { digest } | ImageState::DigestOnly { digest } => {
                Some(digest)
            }
            ImageState::TagMoved { pinned, .. } => Some(pinned),
            ImageState::Unresolvable { pinned, .. } => pinned.as_ref(),
            ImageState::Unpinned { .. }
            | ImageState::Exempt { .. }
            | ImageState::LeftToOwner { .. } => None,
        }
    }

    /// The digest the image's tag resolves to now, when known.
    pub fn current(&self) -> Option<&Digest> {
        match self {
            ImageState::Unpinned { current } => current.as_ref(),
            ImageState::PinnedCurrent { digest } => Some(digest),
            ImageState::TagMoved { now, .. } => Some(now),
            ImageState::DigestOnly { .. }
            | ImageState::Unresolvable { .. }
            | ImageState::Exempt { .. }
            | ImageState::LeftToOwner { .. } => None,
        }
    }

    /// Why the image is unresolvable or exempt.
    pub fn detail(&self) -> Option<&str> {
        match self {
            ImageState::Unresolvable { reason, .. } => Some(reason),
            ImageState::Exempt { why } | ImageState::LeftToOwner { why } => Some(why),
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
    fn classify_pod_keeps_site_order_and_attributes_each_image() {
        let pod = PodRecord {
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
                    field: ImageField::InitContainers,
                    name: "init".into(),
                    image: "busybox".into(),
                },
                PodImage {
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
            .map(|c| (c.site.describe(), c.state.as_str(), c.pod_uid.as_str()))
            .collect();
        assert_eq!(
            states,
            [
                ("initContainers[init]".to_string(), "unpinned", "pod-uid"),
                ("containers[app]".to_string(), "digest-only", "pod-uid"),
            ]
        );
        assert!(classified.iter().all(|c| c.workload == pod.workload));
    }
}
