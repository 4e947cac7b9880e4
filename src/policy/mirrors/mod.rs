//! Mirror guard: finds registry mirrors that would answer pulls **by tag**.
//!
//! A mirror used for tag pulls becomes the authority on what a tag means: the runtime asks the
//! mirror for `manifests/<tag>` and takes whatever comes back, so the mirror (or a stale copy)
//! can serve different content under the same tag. A mirror used only for digest pulls cannot
//! substitute content, because the fetched manifest is checked against the digest. The
//! validating webhook therefore denies tag mirrors unless the policy allows the exact
//! (source, mirror) pair.
//!
//! Owns: which kinds configure mirrors, how each kind says "tag mirror", the allow-list match,
//! and the wording of each finding. Judged kinds (keyed by API group + kind, any version):
//!
//! | group / kind | tag mirrors |
//! |---|---|
//! | `config.openshift.io` `ImageTagMirrorSet` | every `spec.imageTagMirrors[i].mirrors[j]` |
//! | `config.openshift.io` `ImageContentPolicy` | the mirrors of `spec.repositoryDigestMirrors[i]` with `allowMirrorByTags: true` |
//! | `config.openshift.io` `ImageDigestMirrorSet` | none (digest-only by definition) |
//! | `operator.openshift.io` `ImageContentSourcePolicy` | none (digest-only by definition) |
//! | core `ConfigMap` with `data[<key>]` | `[[registry.mirror]]` entries of the containers-registries.conf v2 in it, see below |
//!
//! **registries.conf**, parsed with the `toml` crate and judged as containers/image
//! (`pkg/sysregistriesv2`) would load it: each `[[registry]]` has a `prefix` that defaults to
//! its `location` (trailing `/` trimmed). Each `[[registry.mirror]]` serves tag pulls when its
//! `pull-from-mirror` is `"all"`, `"tag-only"` or absent/empty (the default is `all`), unless the
//! registry sets `mirror-by-digest-only = true`. `"digest-only"` mirrors are fine. What
//! containers/image refuses to load is reported as a [`MirrorError`] rather than judged:
//! `mirror-by-digest-only = true` together with a per-mirror `pull-from-mirror`, an unknown
//! `pull-from-mirror` value, a `[[registry]]` with neither `prefix` nor `location`, and a mirror
//! without `location`. The v1 format (`[registries.search]` …) has no mirrors and is fine;
//! other settings (`blocked`, `insecure`, aliases …) are not this module's concern, and one file
//! is judged on its own (drop-ins in `registries.conf.d` that override a prefix are not merged).
//! Known gap: `binaryData[<key>]` is **not** inspected, so a base64 copy there goes unjudged.
//!
//! **Allow list**: a pair is allowed when some `allow` entry's `source` and `mirror` equal the
//! finding's source and mirror as strings, after trailing `/` are trimmed from all four. There
//! is no prefix, wildcard or case folding: allowing `registry.example/team` does not allow
//! `registry.example/team/app`.
//!
//! On UPDATE only the new object is judged (the caller passes `object`, never `oldObject`): an
//! update that keeps a tag mirror is reported again, unless its pair is allowed.
//!
//! Pure: never does I/O.

mod openshift;
mod registries_conf;
#[cfg(test)]
mod tests;

use serde::Deserialize;
use serde_json::Value;

/// ConfigMap data key judged when the policy names none.
pub const DEFAULT_CONFIG_MAP_KEY: &str = "registries.conf";

/// The risk, stated once for every finding.
const RISK: &str = "a tag mirror can serve different content for the same tag";

/// Policy input: which (source, mirror) pairs are explicitly allowed, and the ConfigMap data key
/// holding registries.conf.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MirrorPolicy {
    /// ConfigMap data key that carries a registries.conf (default "registries.conf" when None).
    #[serde(default)]
    pub config_map_key: Option<String>,
    #[serde(default)]
    pub allow: Vec<AllowedMirror>,
}

/// One (source, mirror) pair that may serve tag pulls.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedMirror {
    pub source: String,
    pub mirror: String,
}

/// One tag mirror that would be allowed to serve tag pulls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorViolation {
    /// Where it is: e.g. `spec.imageTagMirrors[0].mirrors[0]` or
    /// `data[registries.conf] [[registry]] prefix="registry.example/team" mirror[0]`
    /// (`location=` instead of `prefix=` when the prefix defaulted to the location).
    pub entry: String,
    /// The source (or registries.conf prefix) whose tag pulls the mirror answers.
    pub source: String,
    /// The mirror location.
    pub mirror: String,
    /// One sentence naming the offending entry and the risk, e.g.
    /// `ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] lets mirror.example:5000/team serve
    /// tag pulls for registry.example/team: a tag mirror can serve different content for the
    /// same tag`.
    pub message: String,
}

/// Input the guard cannot judge. The admission layer answers these as bad requests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorError {
    /// A field of the object has the wrong JSON type, or a required field is missing.
    #[error("{kind} {path}: {problem}")]
    Malformed {
        kind: &'static str,
        path: String,
        problem: String,
    },
    /// The ConfigMap's registries.conf is not valid TOML, or a setting has the wrong type.
    /// `line` and `column` are 1-based (column counts characters) when the parser knew them.
    #[error("ConfigMap data[{key}] is not a valid registries.conf{}: {message}", at(*.line, *.column))]
    Toml {
        key: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    /// containers/image refuses a registry with `mirror-by-digest-only = true` whose mirror also
    /// sets `pull-from-mirror`.
    #[error("ConfigMap data[{key}] {entry}: mirror-by-digest-only cannot be combined with pull-from-mirror (containers/image rejects this registries.conf)")]
    DigestOnlyWithPullFromMirror { key: String, entry: String },
    /// A `pull-from-mirror` value other than `all`, `digest-only` or `tag-only`.
    #[error("ConfigMap data[{key}] {entry}: unsupported pull-from-mirror value {value:?} (expected \"all\", \"digest-only\" or \"tag-only\")")]
    UnknownPullFromMirror {
        key: String,
        entry: String,
        value: String,
    },
    /// Other registries.conf content containers/image refuses to load (an unset location).
    #[error("ConfigMap data[{key}] {entry}: {problem}")]
    InvalidRegistriesConf {
        key: String,
        entry: String,
        problem: String,
    },
}

fn at(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

// === impl MirrorPolicy ===

impl MirrorPolicy {
    /// The ConfigMap data key judged as a registries.conf.
    pub fn registries_conf_key(&self) -> &str {
        self.config_map_key
            .as_deref()
            .unwrap_or(DEFAULT_CONFIG_MAP_KEY)
    }

    /// Whether the policy allows `mirror` to serve tag pulls for `source`: exact string equality
    /// after trimming trailing `/`.
    pub fn allows(&self, source: &str, mirror: &str) -> bool {
        let (source, mirror) = (trim_slash(source), trim_slash(mirror));
        self.allow
            .iter()
            .any(|a| trim_slash(&a.source) == source && trim_slash(&a.mirror) == mirror)
    }

    /// Records a finding unless the pair is allowed.
    fn judge(
        &self,
        found: &mut Vec<MirrorViolation>,
        entry: String,
        source: &str,
        mirror: &str,
        message: String,
    ) {
        if !self.allows(source, mirror) {
            found.push(MirrorViolation {
                entry,
                source: trim_slash(source).to_string(),
                mirror: trim_slash(mirror).to_string(),
                message,
            });
        }
    }
}

fn trim_slash(s: &str) -> &str {
    s.trim_end_matches('/')
}

/// Judges one object (the admission request's `object`, by group/kind). Returns Ok(None) when
/// the kind is not a mirror-configuring kind, or is a ConfigMap without the registries.conf key
/// (so the caller can tell "not mine" from "fine"), Ok(Some(vec![])) when it allows only digest
/// mirrors or allowed pairs.
pub fn check(
    policy: &MirrorPolicy,
    group: &str,
    kind: &str,
    object: &Value,
) -> Result<Option<Vec<MirrorViolation>>, MirrorError> {
    match (group, kind) {
        ("config.openshift.io", "ImageTagMirrorSet") => {
            openshift::image_tag_mirror_set(policy, object).map(Some)
        }
        ("config.openshift.io", "ImageContentPolicy") => {
            openshift::image_content_policy(policy, object).map(Some)
        }
        ("config.openshift.io", "ImageDigestMirrorSet")
        | ("operator.openshift.io", "ImageContentSourcePolicy") => Ok(Some(Vec::new())),
        ("", "ConfigMap") => registries_conf::config_map(policy, object),
        _ => Ok(None),
    }
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
