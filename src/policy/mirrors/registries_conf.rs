//! A ConfigMap carrying a containers-registries.conf, read as containers/image would.

use serde::Deserialize;
use serde_json::Value;

use super::{malformed, trim_slash, MirrorError, MirrorPolicy, MirrorViolation, RISK};

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

pub(super) fn config_map(
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
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
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
