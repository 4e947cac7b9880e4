//! Which mode and which exemption apply to one namespace and one image: the one answer that
//! admission (`admission::plan` and its I/O half, `admission::pipeline`) and the drift watch
//! (`watch::recheck` and its I/O half, `watch::controller::cycle`) share, so that a namespace
//! audited by one is never enforced by the other, and an image one exempts the other does too.
//!
//! The namespace's `pinhook.dev/mode` label is read by the caller (an API call); what it read,
//! or why it could not, comes in as a [`ModeLabel`]. Each caller decides what to do with a mode
//! that is only the policy's stand-in ([`NamespaceMode::known`] false): admission must answer
//! and uses it with a warning; the watch leaves that namespace's report as it is.

use super::{CompiledPolicy, Mode, MODE_LABEL};
use crate::reference::Reference;

/// What the caller learnt of a namespace's mode label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeLabel {
    /// Read now: its value, or `None` when the namespace has no such label.
    Read(Option<String>),
    /// Not readable now (`failure` says why), but read before: its value then.
    LastRead {
        label: Option<String>,
        failure: String,
    },
    /// Never read: `failure` says why.
    Unknown { failure: String },
}

/// The mode that applies in a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceMode {
    pub mode: Mode,
    /// False when `mode` is the policy's, standing in for a label that could not be read or
    /// is not a mode.
    pub known: bool,
    /// What the user should hear about how the mode was found, if anything.
    pub warning: Option<String>,
}

/// Why an image is never resolved, pinned or denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exemption {
    /// `exempt.namespaces` matches the namespace.
    Namespace,
    /// `exempt.images` matches the image.
    Image,
}

/// A mode label whose value is not a mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{MODE_LABEL}={value:?} is not enforce, audit or off")]
pub struct InvalidMode {
    pub value: String,
}

// === impl CompiledPolicy ===

impl CompiledPolicy {
    /// The mode for `namespace`, given what its label read as: the label's, else the policy's.
    /// A label read before stands in for one that cannot be read now: an API hiccup must not
    /// move an enforcing namespace to the policy's mode (audit, as shipped).
    pub fn namespace_mode(&self, namespace: &str, label: ModeLabel) -> NamespaceMode {
        let fallback = self.policy.mode;
        let (value, warning) = match label {
            ModeLabel::Read(value) => (value, None),
            ModeLabel::LastRead { label, failure } => (
                label,
                Some(format!("pinhook: {failure}; using its labels as last read")),
            ),
            ModeLabel::Unknown { failure } => {
                return NamespaceMode {
                    mode: fallback,
                    known: false,
                    warning: Some(format!("pinhook: {failure}; using the policy's mode")),
                }
            }
        };
        match self.mode_for(value.as_deref()) {
            Ok(mode) => NamespaceMode {
                mode,
                known: true,
                warning,
            },
            Err(invalid) => NamespaceMode {
                mode: fallback,
                known: false,
                warning: Some(format!(
                    "pinhook: namespace {namespace}: {invalid}; using {fallback}"
                )),
            },
        }
    }

    /// The mode a label value selects: the label's, else (no label) the policy's.
    pub fn mode_for(&self, label: Option<&str>) -> Result<Mode, InvalidMode> {
        match label {
            None => Ok(self.policy.mode),
            Some(value) => value.parse(),
        }
    }

    /// Why `image` in `namespace` is exempt, if it is. The namespace is asked first; `image`
    /// is `None` when the question is about the namespace alone (or the image does not parse:
    /// an invalid reference is never exempt by image).
    pub fn exemption(&self, namespace: &str, image: Option<&Reference>) -> Option<Exemption> {
        if self.is_exempt_namespace(namespace) {
            return Some(Exemption::Namespace);
        }
        image
            .filter(|reference| self.is_exempt_image(reference))
            .map(|_| Exemption::Image)
    }
}

// === impl Exemption ===

impl Exemption {
    /// Why, in a report or an inventory: `namespace team is exempt`, `image is exempt`.
    pub fn describe(self, namespace: &str) -> String {
        match self {
            Exemption::Namespace => format!("namespace {namespace} is exempt"),
            Exemption::Image => "image is exempt".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn policy(text: &str) -> CompiledPolicy {
        Policy::parse(text).unwrap_or_else(|e| panic!("valid policy: {e}"))
    }

    #[test]
    fn the_label_read_now_decides() {
        let policy = policy("mode: audit");
        let read = policy.namespace_mode("team", ModeLabel::Read(Some("enforce".into())));
        assert_eq!(
            read,
            NamespaceMode {
                mode: Mode::Enforce,
                known: true,
                warning: None
            }
        );
        let none = policy.namespace_mode("team", ModeLabel::Read(None));
        assert_eq!(
            (none.mode, none.known, none.warning),
            (Mode::Audit, true, None)
        );
    }

    #[test]
    fn a_label_read_before_stands_in_for_one_that_cannot_be_read_now() {
        let policy = policy("mode: audit");
        let label = ModeLabel::LastRead {
            label: Some("enforce".into()),
            failure: "cannot read namespace team: timed out".into(),
        };
        let mode = policy.namespace_mode("team", label);
        assert_eq!((mode.mode, mode.known), (Mode::Enforce, true));
        assert_eq!(
            mode.warning.as_deref(),
            Some("pinhook: cannot read namespace team: timed out; using its labels as last read")
        );
    }

    #[test]
    fn a_label_never_read_or_not_a_mode_gives_the_policys_mode_as_a_stand_in() {
        let policy = policy("mode: audit");
        let unknown = policy.namespace_mode(
            "team",
            ModeLabel::Unknown {
                failure: "no API".into(),
            },
        );
        assert_eq!((unknown.mode, unknown.known), (Mode::Audit, false));
        assert_eq!(
            unknown.warning.as_deref(),
            Some("pinhook: no API; using the policy's mode")
        );
        let invalid = policy.namespace_mode("team", ModeLabel::Read(Some("loud".into())));
        assert_eq!((invalid.mode, invalid.known), (Mode::Audit, false));
        assert_eq!(
            invalid.warning.as_deref(),
            Some("pinhook: namespace team: pinhook.dev/mode=\"loud\" is not enforce, audit or off; using audit")
        );
        let stale_invalid = policy.namespace_mode(
            "team",
            ModeLabel::LastRead {
                label: Some("loud".into()),
                failure: "x".into(),
            },
        );
        assert!(!stale_invalid.known);
    }

    #[test]
    fn the_namespace_is_asked_before_the_image() -> Result<(), Box<dyn std::error::Error>> {
        let policy =
            policy("exempt:\n  namespaces: [kube-*]\n  images: [\"registry.k8s.io/pause*\"]\n");
        let pause = Reference::parse("registry.k8s.io/pause:3.9")?;
        let app = Reference::parse("registry.example/app:1")?;
        assert_eq!(
            policy.exemption("kube-system", Some(&app)),
            Some(Exemption::Namespace)
        );
        assert_eq!(
            policy.exemption("kube-system", None),
            Some(Exemption::Namespace)
        );
        assert_eq!(
            policy.exemption("team", Some(&pause)),
            Some(Exemption::Image)
        );
        assert_eq!(policy.exemption("team", Some(&app)), None);
        assert_eq!(policy.exemption("team", None), None);
        assert_eq!(
            Exemption::Namespace.describe("kube-system"),
            "namespace kube-system is exempt"
        );
        assert_eq!(Exemption::Image.describe("team"), "image is exempt");
        Ok(())
    }
}
