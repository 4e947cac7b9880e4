//! OpenShift mirror kinds: ImageTagMirrorSet, ImageContentPolicy and ImageDigestMirrorSet
//! entries (`{source, mirrors[]}`), judged as runtime-utils renders them into registries.conf
//! for Linux nodes (openshift/runtime-utils `pkg/registries/registries.go`).
//!
//! Owns: reading `spec.<list>[]` (wrong JSON types are [`MirrorError::Malformed`]) and the
//! Linux verdicts. An ImageTagMirrorSet mirror becomes `pull-from-mirror = "tag-only"`, so every
//! mirror answers tag pulls for its source, except a mirror equal to the source: that is the
//! source itself, and `rdmContainsARealMirror` drops an entry whose only mirrors repeat it. An
//! ImageContentPolicy entry with `allowMirrorByTags: true` makes its mirrors tag mirrors.
//! ImageDigestMirrorSet mirrors become `digest-only`, and `NeverContactSource` only blocks the
//! source, so Linux nodes see no tag mirror; with `windowsNodes` both set kinds also go through
//! `windows.rs`.

use serde_json::Value;

use super::{malformed, trim_slash, windows, Judge, MirrorEntry, MirrorError, RISK};

pub(super) fn image_tag_mirror_set(
    object: &Value,
    judge: &mut Judge<'_>,
) -> Result<(), MirrorError> {
    const KIND: &str = "ImageTagMirrorSet";
    let entries = mirror_entries(KIND, object, "imageTagMirrors")?;
    for entry in &entries {
        for (j, mirror) in entry.mirrors.iter().enumerate() {
            if trim_slash(mirror) == trim_slash(entry.source) {
                continue;
            }
            let at = format!("{}.mirrors[{j}]", entry.path);
            let message = format!(
                "{KIND} {at} lets {} serve tag pulls for {}: {RISK}",
                trim_slash(mirror),
                trim_slash(entry.source)
            );
            judge.tag_source(at, entry.source, mirror, message);
        }
    }
    if judge.policy.windows_nodes {
        windows::judge_mirror_sets(KIND, &entries, true, judge)?;
    }
    Ok(())
}

pub(super) fn image_digest_mirror_set(
    object: &Value,
    judge: &mut Judge<'_>,
) -> Result<(), MirrorError> {
    const KIND: &str = "ImageDigestMirrorSet";
    if judge.policy.windows_nodes {
        let entries = mirror_entries(KIND, object, "imageDigestMirrors")?;
        windows::judge_mirror_sets(KIND, &entries, false, judge)?;
    }
    Ok(())
}

pub(super) fn image_content_policy(
    object: &Value,
    judge: &mut Judge<'_>,
) -> Result<(), MirrorError> {
    const KIND: &str = "ImageContentPolicy";
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
            judge.tag_source(at, entry.source, mirror, message);
        }
    }
    Ok(())
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
