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

use serde::Deserialize;
use serde_json::{Map, Value};

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
            image_tag_mirror_set(policy, object).map(Some)
        }
        ("config.openshift.io", "ImageContentPolicy") => {
            image_content_policy(policy, object).map(Some)
        }
        ("config.openshift.io", "ImageDigestMirrorSet")
        | ("operator.openshift.io", "ImageContentSourcePolicy") => Ok(Some(Vec::new())),
        ("", "ConfigMap") => config_map(policy, object),
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

// === OpenShift kinds ===

/// One `{source, mirrors}` entry of an OpenShift mirror list.
struct MirrorEntry<'a> {
    /// JSON path of the entry, e.g. `spec.imageTagMirrors[0]`.
    path: String,
    fields: &'a Map<String, Value>,
    source: &'a str,
    mirrors: Vec<&'a str>,
}

fn image_tag_mirror_set(
    policy: &MirrorPolicy,
    object: &Value,
) -> Result<Vec<MirrorViolation>, MirrorError> {
    const KIND: &str = "ImageTagMirrorSet";
    let mut found = Vec::new();
    for entry in mirror_entries(KIND, object, "imageTagMirrors")? {
        for (j, mirror) in entry.mirrors.iter().enumerate() {
            let at = format!("{}.mirrors[{j}]", entry.path);
            let message = format!(
                "{KIND} {at} lets {} serve tag pulls for {}: {RISK}",
                trim_slash(mirror),
                trim_slash(entry.source)
            );
            policy.judge(&mut found, at, entry.source, mirror, message);
        }
    }
    Ok(found)
}

fn image_content_policy(
    policy: &MirrorPolicy,
    object: &Value,
) -> Result<Vec<MirrorViolation>, MirrorError> {
    const KIND: &str = "ImageContentPolicy";
    let mut found = Vec::new();
    for entry in mirror_entries(KIND, object, "repositoryDigestMirrors")? {
        let by_tags = match entry.fields.get("allowMirrorByTags") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(malformed(
                    KIND,
                    format!("{}.allowMirrorByTags", entry.path),
                    "must be a boolean",
                ))
            }
        };
        if !by_tags {
            continue;
        }
        for (j, mirror) in entry.mirrors.iter().enumerate() {
            let at = format!("{}.mirrors[{j}]", entry.path);
            let message = format!(
                "{KIND} {at} has allowMirrorByTags, so {} serves tag pulls for {}: {RISK}",
                trim_slash(mirror),
                trim_slash(entry.source)
            );
            policy.judge(&mut found, at, entry.source, mirror, message);
        }
    }
    Ok(found)
}

/// Reads `spec.<list>[]` as `{source, mirrors[]}` entries. An absent (or null) object, spec,
/// list or `mirrors` means no mirrors; wrong types are errors.
fn mirror_entries<'a>(
    kind: &'static str,
    object: &'a Value,
    list: &str,
) -> Result<Vec<MirrorEntry<'a>>, MirrorError> {
    let spec = match object {
        Value::Null => return Ok(Vec::new()),
        Value::Object(o) => o.get("spec"),
        _ => return Err(malformed(kind, "object".to_string(), "must be an object")),
    };
    let spec = match spec {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(spec)) => spec,
        Some(_) => return Err(malformed(kind, "spec".to_string(), "must be an object")),
    };
    let items = match spec.get(list) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(malformed(kind, format!("spec.{list}"), "must be a list")),
    };
    let mut entries = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("spec.{list}[{i}]");
        let Value::Object(fields) = item else {
            return Err(malformed(kind, path, "must be an object"));
        };
        let mirrors = match fields.get("mirrors") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(mirrors)) => {
                let mut names = Vec::with_capacity(mirrors.len());
                for (j, m) in mirrors.iter().enumerate() {
                    let Value::String(m) = m else {
                        return Err(malformed(
                            kind,
                            format!("{path}.mirrors[{j}]"),
                            "must be a string",
                        ));
                    };
                    names.push(m.as_str());
                }
                names
            }
            Some(_) => return Err(malformed(kind, format!("{path}.mirrors"), "must be a list")),
        };
        let source = match fields.get("source") {
            Some(Value::String(s)) => s.as_str(),
            None | Some(Value::Null) if mirrors.is_empty() => "",
            None | Some(Value::Null) => {
                return Err(malformed(kind, format!("{path}.source"), "is required"))
            }
            Some(_) => {
                return Err(malformed(
                    kind,
                    format!("{path}.source"),
                    "must be a string",
                ))
            }
        };
        entries.push(MirrorEntry {
            path,
            fields,
            source,
            mirrors,
        });
    }
    Ok(entries)
}

fn malformed(kind: &'static str, path: String, problem: &str) -> MirrorError {
    MirrorError::Malformed {
        kind,
        path,
        problem: problem.to_string(),
    }
}

// === ConfigMap carrying a containers-registries.conf ===

/// The parts of containers-registries.conf v2 that decide mirror use. Other settings are
/// ignored (not denied), as containers/image's own decoder does for this subset.
#[derive(Debug, Default, Deserialize)]
struct RegistriesConf {
    #[serde(default)]
    registry: Vec<RegistryTable>,
}

/// `[[registry]]`. Empty strings mean "unset", as with containers/image's Go decoder.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RegistryTable {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    location: String,
    #[serde(default)]
    mirror_by_digest_only: bool,
    #[serde(default)]
    mirror: Vec<MirrorTable>,
}

/// `[[registry.mirror]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct MirrorTable {
    #[serde(default)]
    location: String,
    #[serde(default)]
    pull_from_mirror: String,
}

fn config_map(
    policy: &MirrorPolicy,
    object: &Value,
) -> Result<Option<Vec<MirrorViolation>>, MirrorError> {
    const KIND: &str = "ConfigMap";
    let key = policy.registries_conf_key();
    let data = match object {
        Value::Null => return Ok(None),
        Value::Object(o) => o.get("data"),
        _ => return Err(malformed(KIND, "object".to_string(), "must be an object")),
    };
    let data = match data {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(data)) => data,
        Some(_) => return Err(malformed(KIND, "data".to_string(), "must be an object")),
    };
    let text = match data.get(key) {
        None => return Ok(None),
        Some(Value::String(text)) => text,
        Some(_) => return Err(malformed(KIND, format!("data[{key}]"), "must be a string")),
    };
    registries_conf(policy, key, text).map(Some)
}

/// Judges one registries.conf text found under ConfigMap data key `key`.
fn registries_conf(
    policy: &MirrorPolicy,
    key: &str,
    text: &str,
) -> Result<Vec<MirrorViolation>, MirrorError> {
    let conf: RegistriesConf = toml::from_str(text).map_err(|e| {
        let (line, column) = match e.span() {
            Some(span) => {
                let (line, column) = line_column(text, span.start);
                (Some(line), Some(column))
            }
            None => (None, None),
        };
        MirrorError::Toml {
            key: key.to_string(),
            line,
            column,
            message: e.message().trim_end().to_string(),
        }
    })?;
    let mut found = Vec::new();
    for (ri, registry) in conf.registry.iter().enumerate() {
        let location = trim_slash(&registry.location);
        let (label, prefix) = match trim_slash(&registry.prefix) {
            "" if location.is_empty() => {
                return Err(MirrorError::InvalidRegistriesConf {
                    key: key.to_string(),
                    entry: format!("[[registry]] #{ri}"),
                    problem: "both prefix and location are unset".to_string(),
                })
            }
            "" => ("location", location),
            prefix => ("prefix", prefix),
        };
        for (mi, mirror) in registry.mirror.iter().enumerate() {
            let entry = format!("data[{key}] [[registry]] {label}={prefix:?} mirror[{mi}]");
            let location = trim_slash(&mirror.location);
            if location.is_empty() {
                return Err(MirrorError::InvalidRegistriesConf {
                    key: key.to_string(),
                    entry: entry_without_key(&entry, key),
                    problem: "mirror location is unset".to_string(),
                });
            }
            if registry.mirror_by_digest_only && !mirror.pull_from_mirror.is_empty() {
                return Err(MirrorError::DigestOnlyWithPullFromMirror {
                    key: key.to_string(),
                    entry: entry_without_key(&entry, key),
                });
            }
            let serves_tags = match mirror.pull_from_mirror.as_str() {
                "" | "all" | "tag-only" => !registry.mirror_by_digest_only,
                "digest-only" => false,
                other => {
                    return Err(MirrorError::UnknownPullFromMirror {
                        key: key.to_string(),
                        entry: entry_without_key(&entry, key),
                        value: other.to_string(),
                    })
                }
            };
            if serves_tags {
                let message = format!("ConfigMap {entry} lets {location} serve tag pulls: {RISK}");
                policy.judge(&mut found, entry, prefix, location, message);
            }
        }
    }
    Ok(found)
}

/// `entry` without its leading `data[<key>] `, for errors that already name the key.
fn entry_without_key(entry: &str, key: &str) -> String {
    let lead = format!("data[{key}] ");
    entry.strip_prefix(&lead).unwrap_or(entry).to_string()
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::json;

    use super::*;

    /// `request.object` of a recorded AdmissionReview.
    fn object_of(review: &str) -> Value {
        let review: Value = serde_json::from_str(review).expect("fixture is JSON");
        review["request"]["object"].clone()
    }

    /// `request.kind` group and kind of a recorded AdmissionReview.
    fn kind_of(review: &str) -> (String, String) {
        let review: Value = serde_json::from_str(review).expect("fixture is JSON");
        let kind = &review["request"]["kind"];
        (
            kind["group"].as_str().expect("group").to_string(),
            kind["kind"].as_str().expect("kind").to_string(),
        )
    }

    fn check_review(policy: &MirrorPolicy, review: &str) -> Option<Vec<MirrorViolation>> {
        let (group, kind) = kind_of(review);
        check(policy, &group, &kind, &object_of(review)).expect("judged")
    }

    fn configmap(key: &str, conf: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {key: conf}})
    }

    fn conf(
        policy: &MirrorPolicy,
        conf: &str,
    ) -> Result<Option<Vec<MirrorViolation>>, MirrorError> {
        check(policy, "", "ConfigMap", &configmap("registries.conf", conf))
    }

    fn pairs(found: &[MirrorViolation]) -> Vec<(&str, &str)> {
        found
            .iter()
            .map(|v| (v.source.as_str(), v.mirror.as_str()))
            .collect()
    }

    fn allow(source: &str, mirror: &str) -> MirrorPolicy {
        MirrorPolicy {
            config_map_key: None,
            allow: vec![AllowedMirror {
                source: source.to_string(),
                mirror: mirror.to_string(),
            }],
        }
    }

    // --- recorded fixtures ---

    #[rstest]
    #[case::v1_26_validate(include_str!("../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-create-validate.json"))]
    #[case::v1_26_mutate(include_str!("../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-create-mutate.json"))]
    #[case::v1_20_validate(include_str!("../../tests/fixtures/admissionreview/v1.20/imagetagmirrorset-create-validate.json"))]
    fn itms_create_is_a_violation(#[case] review: &str) {
        let found = check_review(&MirrorPolicy::default(), review).expect("ITMS is a mirror kind");
        assert_eq!(
            found,
            vec![MirrorViolation {
                entry: "spec.imageTagMirrors[0].mirrors[0]".into(),
                source: "registry.example/team".into(),
                mirror: "mirror.example:5000/team".into(),
                message: "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] lets mirror.example:5000/team \
                          serve tag pulls for registry.example/team: a tag mirror can serve different content \
                          for the same tag"
                    .into(),
            }]
        );
    }

    #[rstest]
    #[case::v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-update-json-patch-validate.json"))]
    #[case::v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagetagmirrorset-update-json-patch-validate.json"))]
    fn itms_update_is_judged_on_the_new_object(#[case] review: &str) {
        let found = check_review(&MirrorPolicy::default(), review).expect("mirror kind");
        assert_eq!(
            pairs(&found),
            vec![
                ("registry.example/team", "mirror.example:5000/team"),
                ("registry.example/team", "mirror2.example/team"),
            ]
        );
        assert_eq!(found[1].entry, "spec.imageTagMirrors[0].mirrors[1]");
        // The old object had only the first mirror; the new one is what counts.
        let review: Value = serde_json::from_str(review).expect("JSON");
        let old = check(
            &MirrorPolicy::default(),
            "config.openshift.io",
            "ImageTagMirrorSet",
            &review["request"]["oldObject"],
        )
        .expect("judged")
        .expect("mirror kind");
        assert_eq!(old.len(), 1);
    }

    #[test]
    fn itms_allowed_pair_is_not_reported() {
        let review = include_str!(
            "../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-update-json-patch-validate.json"
        );
        // Trailing slashes are trimmed on both sides before the exact comparison.
        let policy = allow("registry.example/team/", "mirror2.example/team/");
        let found = check_review(&policy, review).expect("mirror kind");
        assert_eq!(
            pairs(&found),
            vec![("registry.example/team", "mirror.example:5000/team")]
        );
        // No prefix matching: allowing the parent repository allows nothing here.
        let policy = allow("registry.example", "mirror2.example");
        assert_eq!(check_review(&policy, review).expect("mirror kind").len(), 2);
    }

    #[rstest]
    #[case::idms_create_v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagedigestmirrorset-create-validate.json"))]
    #[case::idms_update_v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagedigestmirrorset-update-json-patch-validate.json"))]
    #[case::idms_create_v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagedigestmirrorset-create-validate.json"))]
    #[case::idms_update_v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagedigestmirrorset-update-json-patch-validate.json"))]
    #[case::icsp_create_v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagecontentsourcepolicy-create-validate.json"))]
    #[case::icsp_update_v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagecontentsourcepolicy-update-json-patch-validate.json"))]
    #[case::icsp_create_v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagecontentsourcepolicy-create-validate.json"))]
    #[case::icsp_update_v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagecontentsourcepolicy-update-json-patch-validate.json"))]
    fn digest_mirror_kinds_are_mine_and_fine(#[case] review: &str) {
        assert_eq!(
            check_review(&MirrorPolicy::default(), review),
            Some(Vec::new())
        );
    }

    #[rstest]
    #[case::v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/configmap-create-registries-conf-validate.json"))]
    #[case::v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/configmap-create-registries-conf-validate.json"))]
    fn configmap_fixture_reports_only_the_tag_only_mirror(#[case] review: &str) {
        // mirror[0] is pull-from-mirror = "tag-only"; mirror[1] is "digest-only".
        let found =
            check_review(&MirrorPolicy::default(), review).expect("carries registries.conf");
        assert_eq!(
            found,
            vec![MirrorViolation {
                entry: "data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[0]".into(),
                source: "registry.example/team".into(),
                mirror: "mirror.example:5000/team".into(),
                message: "ConfigMap data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[0] \
                          lets mirror.example:5000/team serve tag pulls: a tag mirror can serve different \
                          content for the same tag"
                    .into(),
            }]
        );
    }

    #[test]
    fn fixture_messages_are_short_sentences() {
        for review in [
            include_str!("../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-update-json-patch-validate.json"),
            include_str!("../../tests/fixtures/admissionreview/v1.26/configmap-create-registries-conf-validate.json"),
        ] {
            for v in check_review(&MirrorPolicy::default(), review).expect("mirror kind") {
                assert!(v.message.len() < 200, "{} chars: {}", v.message.len(), v.message);
                assert!(v.message.contains(&v.mirror) && v.message.contains(RISK));
                assert!(!v.message.contains('\n'));
            }
        }
    }

    #[test]
    fn pod_fixture_is_not_mine() {
        let review = include_str!(
            "../../tests/fixtures/admissionreview/v1.26/pod-create-basic-validate.json"
        );
        assert_eq!(check_review(&MirrorPolicy::default(), review), None);
    }

    // --- ImageContentPolicy ---

    fn icp(entry: Value) -> Result<Option<Vec<MirrorViolation>>, MirrorError> {
        let object = json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "ImageContentPolicy",
            "metadata": {"name": "icp"},
            "spec": {"repositoryDigestMirrors": [entry]},
        });
        check(
            &MirrorPolicy::default(),
            "config.openshift.io",
            "ImageContentPolicy",
            &object,
        )
    }

    #[test]
    fn image_content_policy_with_allow_mirror_by_tags_is_a_violation() {
        let found = icp(json!({
            "source": "registry.example/team",
            "mirrors": ["mirror.example/team", "mirror2.example/team"],
            "allowMirrorByTags": true,
        }))
        .expect("judged")
        .expect("mirror kind");
        assert_eq!(
            pairs(&found),
            vec![
                ("registry.example/team", "mirror.example/team"),
                ("registry.example/team", "mirror2.example/team"),
            ]
        );
        assert_eq!(found[0].entry, "spec.repositoryDigestMirrors[0].mirrors[0]");
        assert_eq!(
            found[0].message,
            "ImageContentPolicy spec.repositoryDigestMirrors[0].mirrors[0] has allowMirrorByTags, so \
             mirror.example/team serves tag pulls for registry.example/team: a tag mirror can serve \
             different content for the same tag"
        );
    }

    #[rstest]
    #[case::absent(json!({"source": "registry.example/team", "mirrors": ["mirror.example/team"]}))]
    #[case::false_(json!({"source": "registry.example/team", "mirrors": ["mirror.example/team"], "allowMirrorByTags": false}))]
    #[case::no_mirrors(json!({"source": "registry.example/team", "allowMirrorByTags": true}))]
    fn image_content_policy_without_tag_mirrors_is_fine(#[case] entry: Value) {
        assert_eq!(icp(entry), Ok(Some(Vec::new())));
    }

    #[test]
    fn image_content_policy_wrong_type_is_an_error() {
        let err = icp(json!({"source": "r.example/a", "mirrors": ["m.example/a"], "allowMirrorByTags": "yes"}))
            .expect_err("wrong type");
        assert_eq!(
            err.to_string(),
            "ImageContentPolicy spec.repositoryDigestMirrors[0].allowMirrorByTags: must be a boolean"
        );
    }

    // --- OpenShift shapes ---

    #[rstest]
    #[case::list_not_array(json!({"spec": {"imageTagMirrors": {}}}), "ImageTagMirrorSet spec.imageTagMirrors: must be a list")]
    #[case::mirror_not_string(json!({"spec": {"imageTagMirrors": [{"source": "a.example", "mirrors": [1]}]}}), "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0]: must be a string")]
    #[case::source_missing(json!({"spec": {"imageTagMirrors": [{"mirrors": ["m.example"]}]}}), "ImageTagMirrorSet spec.imageTagMirrors[0].source: is required")]
    #[case::spec_not_object(json!({"spec": []}), "ImageTagMirrorSet spec: must be an object")]
    fn itms_wrong_shapes_are_errors(#[case] object: Value, #[case] expected: &str) {
        let err = check(
            &MirrorPolicy::default(),
            "config.openshift.io",
            "ImageTagMirrorSet",
            &object,
        )
        .expect_err("malformed");
        assert!(matches!(err, MirrorError::Malformed { .. }));
        assert_eq!(err.to_string(), expected);
    }

    #[rstest]
    #[case::null(Value::Null)]
    #[case::no_spec(json!({"metadata": {}}))]
    #[case::empty_list(json!({"spec": {"imageTagMirrors": []}}))]
    #[case::entry_without_mirrors(json!({"spec": {"imageTagMirrors": [{"source": "a.example"}]}}))]
    fn itms_without_mirrors_is_fine(#[case] object: Value) {
        assert_eq!(
            check(
                &MirrorPolicy::default(),
                "config.openshift.io",
                "ImageTagMirrorSet",
                &object
            ),
            Ok(Some(Vec::new()))
        );
    }

    #[rstest]
    #[case::pod("", "Pod")]
    #[case::deployment("apps", "Deployment")]
    #[case::configmap_in_other_group("example.com", "ConfigMap")]
    #[case::itms_in_other_group("example.com", "ImageTagMirrorSet")]
    #[case::icsp_in_config_group("config.openshift.io", "ImageContentSourcePolicy")]
    fn other_kinds_are_not_mine(#[case] group: &str, #[case] kind: &str) {
        let object = json!({"spec": {"imageTagMirrors": [{"source": "a.example", "mirrors": ["m.example"]}]},
                            "data": {"registries.conf": "[[registry]]\nlocation = \"a.example\"\n[[registry.mirror]]\nlocation = \"m.example\"\n"}});
        assert_eq!(
            check(&MirrorPolicy::default(), group, kind, &object),
            Ok(None)
        );
    }

    // --- registries.conf ---

    const ONE_MIRROR: &str = r#"
[[registry]]
prefix = "registry.example/team"
location = "registry.example/team"
{registry_extra}
[[registry.mirror]]
location = "mirror.example/team"
{mirror_extra}
"#;

    fn one_mirror(registry_extra: &str, mirror_extra: &str) -> String {
        ONE_MIRROR
            .replace("{registry_extra}", registry_extra)
            .replace("{mirror_extra}", mirror_extra)
    }

    #[rstest]
    #[case::default_is_all("", "", true)]
    #[case::all("", r#"pull-from-mirror = "all""#, true)]
    #[case::empty_means_unset("", r#"pull-from-mirror = """#, true)]
    #[case::tag_only("", r#"pull-from-mirror = "tag-only""#, true)]
    #[case::digest_only("", r#"pull-from-mirror = "digest-only""#, false)]
    #[case::mirror_by_digest_only("mirror-by-digest-only = true", "", false)]
    #[case::mirror_by_digest_only_false("mirror-by-digest-only = false", "", true)]
    #[case::blocked_source_still_uses_mirrors("blocked = true", "insecure = true", true)]
    fn registries_conf_tag_mirrors(
        #[case] registry_extra: &str,
        #[case] mirror_extra: &str,
        #[case] violation: bool,
    ) {
        let found = conf(
            &MirrorPolicy::default(),
            &one_mirror(registry_extra, mirror_extra),
        )
        .expect("valid")
        .expect("carries registries.conf");
        if violation {
            assert_eq!(
                pairs(&found),
                vec![("registry.example/team", "mirror.example/team")]
            );
            assert_eq!(
                found[0].entry,
                "data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[0]"
            );
        } else {
            assert_eq!(found, Vec::new());
        }
    }

    #[rstest]
    #[case::digest_only(r#"pull-from-mirror = "digest-only""#)]
    #[case::all(r#"pull-from-mirror = "all""#)]
    fn registries_conf_digest_only_registry_with_pull_from_mirror_is_an_error(
        #[case] mirror_extra: &str,
    ) {
        let err = conf(
            &MirrorPolicy::default(),
            &one_mirror("mirror-by-digest-only = true", mirror_extra),
        )
        .expect_err("containers/image rejects this");
        assert_eq!(
            err,
            MirrorError::DigestOnlyWithPullFromMirror {
                key: "registries.conf".into(),
                entry: "[[registry]] prefix=\"registry.example/team\" mirror[0]".into(),
            }
        );
        assert!(err
            .to_string()
            .contains("mirror-by-digest-only cannot be combined with pull-from-mirror"));
    }

    #[test]
    fn registries_conf_unknown_pull_from_mirror_is_an_error() {
        let err = conf(
            &MirrorPolicy::default(),
            &one_mirror("", r#"pull-from-mirror = "tags""#),
        )
        .expect_err("unknown value");
        assert_eq!(
            err.to_string(),
            "ConfigMap data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[0]: \
             unsupported pull-from-mirror value \"tags\" (expected \"all\", \"digest-only\" or \"tag-only\")"
        );
    }

    #[test]
    fn registries_conf_invalid_toml_names_the_position() {
        let err = conf(
            &MirrorPolicy::default(),
            "[[registry]]\nprefix = \"a.example\"\nlocation = = \"b\"\n",
        )
        .expect_err("not TOML");
        let MirrorError::Toml {
            key, line, column, ..
        } = &err
        else {
            panic!("expected a TOML error, got {err:?}");
        };
        assert_eq!(
            (key.as_str(), *line, *column),
            ("registries.conf", Some(3), Some(12))
        );
        let text = err.to_string();
        assert!(
            text.starts_with("ConfigMap data[registries.conf] is not a valid registries.conf at line 3, column 12: "),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn registries_conf_wrong_type_names_the_position() {
        let err = conf(
            &MirrorPolicy::default(),
            &one_mirror("mirror-by-digest-only = \"yes\"", ""),
        )
        .expect_err("wrong type");
        let MirrorError::Toml { line, message, .. } = &err else {
            panic!("expected a TOML error, got {err:?}");
        };
        assert_eq!(*line, Some(5));
        assert!(message.contains("bool"), "{message}");
        // A single [registry] table where an array of tables is expected.
        let err = conf(
            &MirrorPolicy::default(),
            "[registry]\nlocation = \"a.example\"\n",
        )
        .expect_err("wrong type");
        assert!(matches!(err, MirrorError::Toml { .. }), "{err:?}");
    }

    #[test]
    fn registries_conf_prefix_defaults_to_location() {
        let text = "[[registry]]\nlocation = \"registry.example/team/\"\n[[registry.mirror]]\nlocation = \"mirror.example/team/\"\n";
        let found = conf(&MirrorPolicy::default(), text)
            .expect("valid")
            .expect("mine");
        assert_eq!(
            pairs(&found),
            vec![("registry.example/team", "mirror.example/team")]
        );
        assert_eq!(
            found[0].entry,
            "data[registries.conf] [[registry]] location=\"registry.example/team\" mirror[0]"
        );
        // An explicit prefix wins over the location.
        let text = "[[registry]]\nprefix = \"docker.io/library\"\nlocation = \"registry.example/dockerhub\"\n\
                    [[registry.mirror]]\nlocation = \"mirror.example/dockerhub\"\n";
        let found = conf(&MirrorPolicy::default(), text)
            .expect("valid")
            .expect("mine");
        assert_eq!(
            pairs(&found),
            vec![("docker.io/library", "mirror.example/dockerhub")]
        );
    }

    #[test]
    fn registries_conf_allowed_pair_is_not_reported() {
        let policy = allow("registry.example/team", "mirror.example/team");
        assert_eq!(conf(&policy, &one_mirror("", "")), Ok(Some(Vec::new())));
        // Only that pair: a second mirror for the same source is still reported.
        let text = format!(
            "{}\n[[registry.mirror]]\nlocation = \"other.example/team\"\n",
            one_mirror("", "")
        );
        let found = conf(&policy, &text).expect("valid").expect("mine");
        assert_eq!(
            pairs(&found),
            vec![("registry.example/team", "other.example/team")]
        );
        assert_eq!(
            found[0].entry,
            "data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[1]"
        );
    }

    #[test]
    fn registries_conf_custom_key() {
        let policy = MirrorPolicy {
            config_map_key: Some("crio-registries".into()),
            allow: Vec::new(),
        };
        let object = configmap("crio-registries", &one_mirror("", ""));
        let found = check(&policy, "", "ConfigMap", &object)
            .expect("valid")
            .expect("mine");
        assert_eq!(
            found[0].entry,
            "data[crio-registries] [[registry]] prefix=\"registry.example/team\" mirror[0]"
        );
        // With a custom key, the default key is an ordinary ConfigMap entry.
        let object = configmap("registries.conf", &one_mirror("", ""));
        assert_eq!(check(&policy, "", "ConfigMap", &object), Ok(None));
    }

    #[rstest]
    #[case::v1_format("[registries.search]\nregistries = [\"docker.io\"]\n\n[registries.insecure]\nregistries = []\n")]
    #[case::no_registries(
        "unqualified-search-registries = [\"registry.example\"]\nshort-name-mode = \"enforcing\"\n"
    )]
    #[case::empty("")]
    #[case::registry_without_mirrors(
        "[[registry]]\nlocation = \"registry.example\"\nblocked = true\n"
    )]
    #[case::wildcard_digest_only("[[registry]]\nprefix = \"*.example.com\"\n[[registry.mirror]]\nlocation = \"m.example/x\"\npull-from-mirror = \"digest-only\"\n")]
    fn registries_conf_without_tag_mirrors_is_fine(#[case] text: &str) {
        assert_eq!(conf(&MirrorPolicy::default(), text), Ok(Some(Vec::new())));
    }

    #[rstest]
    #[case::no_prefix_no_location(
        "[[registry]]\ninsecure = true\n",
        "[[registry]] #0: both prefix and location are unset"
    )]
    #[case::mirror_without_location(
        "[[registry]]\nlocation = \"a.example\"\n[[registry.mirror]]\ninsecure = true\n",
        "[[registry]] location=\"a.example\" mirror[0]: mirror location is unset"
    )]
    fn registries_conf_that_containers_image_rejects(#[case] text: &str, #[case] expected: &str) {
        let err = conf(&MirrorPolicy::default(), text).expect_err("rejected");
        assert_eq!(
            err.to_string(),
            format!("ConfigMap data[registries.conf] {expected}")
        );
    }

    #[rstest]
    #[case::no_data(json!({"kind": "ConfigMap", "metadata": {"name": "c"}}))]
    #[case::other_keys(json!({"kind": "ConfigMap", "data": {"app.properties": "a=b"}}))]
    #[case::binary_data_is_not_inspected(json!({"kind": "ConfigMap", "binaryData": {"registries.conf": "W1tyZWdpc3RyeV1dCg=="}}))]
    fn configmap_without_the_key_is_not_mine(#[case] object: Value) {
        assert_eq!(
            check(&MirrorPolicy::default(), "", "ConfigMap", &object),
            Ok(None)
        );
    }

    #[test]
    fn configmap_value_of_wrong_type_is_an_error() {
        let object = json!({"kind": "ConfigMap", "data": {"registries.conf": 5}});
        assert_eq!(
            check(&MirrorPolicy::default(), "", "ConfigMap", &object)
                .expect_err("wrong type")
                .to_string(),
            "ConfigMap data[registries.conf]: must be a string"
        );
    }

    // --- policy ---

    #[test]
    fn policy_deserializes_camel_case_and_refuses_unknown_fields() {
        let policy: MirrorPolicy = serde_json::from_value(json!({
            "configMapKey": "crio",
            "allow": [{"source": "a.example/x", "mirror": "m.example/x"}],
        }))
        .expect("valid");
        assert_eq!(policy.registries_conf_key(), "crio");
        assert!(policy.allows("a.example/x/", "m.example/x"));
        assert!(!policy.allows("a.example/x/y", "m.example/x/y"));
        assert_eq!(
            MirrorPolicy::default().registries_conf_key(),
            "registries.conf"
        );
        assert!(serde_json::from_value::<MirrorPolicy>(json!({"config_map_key": "x"})).is_err());
        assert!(serde_json::from_value::<MirrorPolicy>(
            json!({"allow": [{"source": "a", "mirror": "b", "x": 1}]})
        )
        .is_err());
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("ab\ncdé f", 7), (2, 4));
        assert_eq!(line_column("", 3), (1, 1));
        assert_eq!(line_column("é", 1), (1, 1));
    }
}
