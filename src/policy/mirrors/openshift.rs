//! OpenShift mirror kinds: ImageTagMirrorSet and ImageContentPolicy entries as tag mirrors.

use serde_json::{Map, Value};

use super::{malformed, trim_slash, MirrorError, MirrorPolicy, MirrorViolation, RISK};

/// One `{source, mirrors}` entry of an OpenShift mirror list.
struct MirrorEntry<'a> {
    /// JSON path of the entry, e.g. `spec.imageTagMirrors[0]`.
    path: String,
    fields: &'a Map<String, Value>,
    source: &'a str,
    mirrors: Vec<&'a str>,
}

pub(super) fn image_tag_mirror_set(
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

pub(super) fn image_content_policy(
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
