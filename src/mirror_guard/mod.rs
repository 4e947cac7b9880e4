//! Mirror guard: finds configuration that lets a host other than the source answer pulls
//! **by tag**.
//!
//! A mirror used for tag pulls becomes the authority on what a tag means: the runtime asks the
//! mirror for `manifests/<tag>` and takes whatever comes back, so the mirror (or a stale copy)
//! can serve different content under the same tag. A mirror used only for digest pulls cannot
//! substitute content, because the fetched manifest is checked against the digest. The
//! validating webhook therefore denies every (source, host) pair that can answer tag pulls,
//! unless the policy allows exactly that pair, and reads each object the way the node's runtime
//! will (issue 17).
//!
//! Owns: which kinds configure mirrors, reading node mirror configuration as its consumers do
//! (CRI-O's registries.conf, containerd's hosts.toml and config, the Machine Config Operator's
//! renderings), and the wording of findings and notes. It judges by the policy's `mirrors:`
//! section ([`MirrorPolicy`], which lives in [`crate::policy::mirror_policy`]: the policy knows
//! nothing of node configuration). Judged kinds (keyed by API group + kind, any version):
//!
//! | group / kind | what answers tag pulls | file |
//! |---|---|---|
//! | `config.openshift.io` `ImageTagMirrorSet` | every `mirrors[j]` that is not the entry's own `source` (runtime-utils drops those); with `windowsNodes`, also the host-widened pair | `openshift.rs`, `windows.rs` |
//! | `config.openshift.io` `ImageContentPolicy` | the mirrors of an entry with `allowMirrorByTags: true` | `openshift.rs` |
//! | `config.openshift.io` `ImageDigestMirrorSet` | nothing on Linux (digest-only); with `windowsNodes`, the hosts.toml `server` a `NeverContactSource` entry renders | `windows.rs` |
//! | `operator.openshift.io` `ImageContentSourcePolicy` | nothing (digest-only; the Windows MCO ignores it) | |
//! | core `ConfigMap` | tag mirrors and prefix rewrites of every registries.conf / drop-in it carries, and resolving hosts of every containerd hosts.toml | `config_map.rs`, `registries_conf/`, `hosts_toml.rs` |
//!
//! **Policy** (`mirrors:` in the policy file, [`MirrorPolicy`]): `allow` lists (source, mirror)
//! pairs; `configMapKey` names the key holding the main registries.conf (default
//! `registries.conf`); `configMaps` (globs on `namespace/name`) and `configMapKeys` (globs on
//! key names) choose what of a ConfigMap is read, both defaulting to `["*"]`: every key of every
//! ConfigMap, in `data` and `binaryData`, whose content is a registries.conf or a hosts.toml is
//! judged, because a ConfigMap volume projects every key as a file and `items[].path` can give
//! any key any file name, so the key's name proves nothing. `windowsNodes` (default false) says
//! the cluster has, or may get, Windows nodes: this module is pure and cannot list nodes, so the
//! operator states it; with it, ImageDigestMirrorSets and ImageTagMirrorSets are also judged as
//! the Windows Machine Config Operator renders them (`windows.rs`).
//!
//! **Allow list**: a pair is allowed when some `allow` entry's `source` and `mirror` equal the
//! finding's source and mirror as strings, after trailing `/` are trimmed from all four. There
//! is no prefix, wildcard or case folding: allowing `registry.example/team` does not allow
//! `registry.example/team/app`. Host-widened Windows pairs are judged as written
//! (`registry.example` → `mirror.example`), so they need their own entry.
//!
//! **Findings and notes**: a finding ([`MirrorViolation`]) is denied in enforce mode. A note is
//! something the operator should know that does not change what the node does (a
//! `[[registry]]` containers/image ignores, an entry a drop-in replaces); [`review`] returns
//! both, [`check`] only the findings. Input the node cannot load at all is a [`MirrorError`]:
//! the caller denies it too, because every node that receives it stops pulling.
//!
//! On UPDATE only the new object is judged (the caller passes `object`, never `oldObject`): an
//! update that keeps a tag mirror is reported again, unless its pair is allowed. Each object is
//! judged alone; the runtimes merge every object of a kind (runtime-utils merges mirror sets by
//! source, the Windows MCO by source host), which can only add mirrors to what one object says,
//! so a denied object stays denied, but an allowed Windows `server` pair can be displaced by a
//! mirror another object adds for the same host (that object is judged when it is written).
//!
//! Pure: never does I/O.

mod config_map;
mod containerd_config;
mod go_toml;
mod hosts_toml;
mod openshift;
mod registries_conf;
#[cfg(test)]
mod tests;
mod windows;

use std::fmt;

use serde_json::{Map, Value};

use crate::policy::mirror_policy::trim_slash;
use crate::policy::mirror_policy::MirrorPolicy;

/// The risk, stated once for every finding.
const RISK: &str = "a tag mirror can serve different content for the same tag";

/// One `{source, mirrors}` entry of an OpenShift mirror list (read by `openshift`, judged for
/// Windows nodes by `windows`).
pub(super) struct MirrorEntry<'a> {
    /// JSON path of the entry, e.g. `spec.imageTagMirrors[0]`.
    pub(super) path: String,
    pub(super) fields: &'a Map<String, Value>,
    pub(super) source: &'a str,
    pub(super) mirrors: Vec<&'a str>,
}

/// One host that would be allowed to answer tag pulls for a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorViolation {
    /// Where it is: e.g. `spec.imageTagMirrors[0].mirrors[0]` or
    /// `data[registries.conf] [[registry]] prefix="registry.example/team" mirror[0]`
    /// (`location=` instead of `prefix=` when the prefix defaulted to the location).
    pub entry: String,
    /// The source (or registries.conf prefix, or hosts.toml namespace) whose tag pulls the
    /// mirror answers.
    pub source: String,
    /// The mirror location.
    pub mirror: String,
    /// One sentence naming the offending entry and the risk, e.g.
    /// `ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] lets mirror.example:5000/team serve
    /// tag pulls for registry.example/team: a tag mirror can serve different content for the
    /// same tag`.
    pub message: String,
}

/// What the guard found in one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorReview {
    /// Pairs that can answer tag pulls and are not allowed: denied in enforce mode.
    pub violations: Vec<MirrorViolation>,
    /// Facts about the object that change nothing on the node, for a warning.
    pub notes: Vec<String>,
}

/// Input the guard cannot judge, or that no node can load. The admission layer denies these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorError {
    /// A field of the object has the wrong JSON type, or a required field is missing.
    #[error("{kind} {path}: {problem}")]
    Malformed {
        kind: &'static str,
        path: String,
        problem: String,
    },
    /// A ConfigMap's registries.conf is not valid TOML, or a setting has a type
    /// containers/image's decoder (BurntSushi/toml) refuses. `line` and `column` are 1-based
    /// (column counts characters) when known. `field` is `data` or `binaryData`.
    #[error("ConfigMap {field}[{key}] is not a valid registries.conf{}: {message}", at(*.line, *.column))]
    Toml {
        field: &'static str,
        key: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    /// A registries.conf that decodes but that containers/image refuses to load, naming the
    /// line, the entry (may be empty), the problem in upstream's words, and the upstream rule.
    #[error(
        "ConfigMap {file} line {line}{}: {problem} (CRI-O cannot load it: {rule})",
        entry_part(entry)
    )]
    Unloadable {
        file: String,
        line: usize,
        entry: String,
        problem: String,
        rule: &'static str,
    },
}

/// Where a file of a ConfigMap comes from: `data[registries.conf]`, `binaryData[x.conf]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileRef {
    field: &'static str,
    key: String,
}

/// Collects findings and notes for one object, dropping allowed pairs.
struct Judge<'p> {
    policy: &'p MirrorPolicy,
    review: MirrorReview,
}

fn at(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

fn entry_part(entry: &str) -> String {
    if entry.is_empty() {
        String::new()
    } else {
        format!(", {entry}")
    }
}

// === impl FileRef ===

impl fmt::Display for FileRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.field, self.key)
    }
}

// === impl Judge ===

impl<'p> Judge<'p> {
    fn new(policy: &'p MirrorPolicy) -> Self {
        Judge {
            policy,
            review: MirrorReview::default(),
        }
    }

    /// Records that `mirror` can answer tag pulls for `source`, unless the pair is allowed or
    /// already recorded for the same entry.
    fn tag_source(&mut self, entry: String, source: &str, mirror: &str, message: String) {
        if self.policy.allows(source, mirror) {
            return;
        }
        let violation = MirrorViolation {
            entry,
            source: trim_slash(source).to_string(),
            mirror: trim_slash(mirror).to_string(),
            message,
        };
        if !self.review.violations.contains(&violation) {
            self.review.violations.push(violation);
        }
    }

    fn note(&mut self, note: String) {
        if !self.review.notes.contains(&note) {
            self.review.notes.push(note);
        }
    }
}

/// Judges one object (the admission request's `object`, by group/kind). Returns Ok(None) when
/// the kind is not a mirror-configuring kind, or is a ConfigMap the policy does not select or
/// that carries no registries.conf or hosts.toml (so the caller can tell "not mine" from
/// "fine"), Ok(Some(review)) otherwise; a review without violations allows the object.
pub fn review(
    policy: &MirrorPolicy,
    group: &str,
    kind: &str,
    object: &Value,
) -> Result<Option<MirrorReview>, MirrorError> {
    let mut judge = Judge::new(policy);
    let mine = match (group, kind) {
        ("config.openshift.io", "ImageTagMirrorSet") => {
            openshift::image_tag_mirror_set(object, &mut judge)?;
            true
        }
        ("config.openshift.io", "ImageContentPolicy") => {
            openshift::image_content_policy(object, &mut judge)?;
            true
        }
        ("config.openshift.io", "ImageDigestMirrorSet") => {
            openshift::image_digest_mirror_set(object, &mut judge)?;
            true
        }
        ("operator.openshift.io", "ImageContentSourcePolicy") => true,
        ("", "ConfigMap") => config_map::config_map(object, &mut judge)?,
        _ => false,
    };
    Ok(mine.then_some(judge.review))
}

/// [`review`] without the notes: the findings the caller denies.
pub fn check(
    policy: &MirrorPolicy,
    group: &str,
    kind: &str,
    object: &Value,
) -> Result<Option<Vec<MirrorViolation>>, MirrorError> {
    review(policy, group, kind, object).map(|r| r.map(|r| r.violations))
}

/// The resource (plural) of each kind the guard judges, and whether it is cluster-scoped.
pub fn resource_of(group: &str, kind: &str) -> Option<(&'static str, bool)> {
    match (group, kind) {
        ("config.openshift.io", "ImageTagMirrorSet") => Some(("imagetagmirrorsets", true)),
        ("config.openshift.io", "ImageDigestMirrorSet") => Some(("imagedigestmirrorsets", true)),
        ("config.openshift.io", "ImageContentPolicy") => Some(("imagecontentpolicies", true)),
        ("operator.openshift.io", "ImageContentSourcePolicy") => {
            Some(("imagecontentsourcepolicies", true))
        }
        ("", "ConfigMap") => Some(("configmaps", false)),
        _ => None,
    }
}

fn malformed(kind: &'static str, path: String, problem: &str) -> MirrorError {
    MirrorError::Malformed {
        kind,
        path,
        problem: problem.to_string(),
    }
}
