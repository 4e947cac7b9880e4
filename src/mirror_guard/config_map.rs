//! A ConfigMap as the files a node could receive from it: every key of `data` and of
//! `binaryData` (base64, as the API carries it) becomes a file in a ConfigMap volume, named by
//! the key or by any `items[].path`.
//!
//! Owns: which ConfigMaps and keys are read (policy `configMaps` globs on `namespace/name`,
//! `configMapKeys` globs on keys, both `["*"]` by default; `configMapKey` is always read), and
//! what each key is:
//!
//! * the `configMapKey` key (default `registries.conf`) is the main registries.conf: read
//!   strictly, so text that is not TOML is a denial, as before;
//! * any other key whose value parses as TOML and has a registries.conf top-level key of the
//!   right TOML type (matched as BurntSushi/toml matches, so `[[Registry]]` counts; a Cargo
//!   `[registry]` table does not) is a `registries.conf.d` drop-in (v2 only), merged after the
//!   main file in key order;
//! * any key whose name ends in `hosts.toml`, or whose TOML has a top-level `server` string or
//!   `host` table of tables, is a containerd hosts.toml (`hosts_toml.rs`). One key can be both;
//! * any key whose TOML has a CRI plugin's `registry` table under `plugins` is a containerd
//!   `config.toml` (`containerd_config.rs`: its `config_path` directories, its inline mirrors).
//!
//! Other keys (nginx.conf, properties, JSON, YAML) are not TOML or not shaped like either file,
//! and are skipped: no runtime reads them as mirror configuration. A `binaryData` value that is
//! not UTF-8 cannot be TOML either, except for the main key, where it is a denial.

use base64::Engine as _;
use serde_json::{Map, Value};
use toml::de::{DeTable, DeValue};

use super::go_toml::{equal_fold, lower_eq};
use super::registries_conf::{self, judge_files};
use super::{containerd_config, hosts_toml, malformed, FileRef, Judge, MirrorError};
use crate::policy::glob;

const KIND: &str = "ConfigMap";

/// Top-level keys of containers/image's `tomlConfig` (v2 fields and the v1 `registries`), with
/// the TOML type each must have for a file to be shaped like a registries.conf.
const REGISTRIES_CONF_KEYS: [(&str, Shape); 7] = [
    ("registry", Shape::Array),
    ("unqualified-search-registries", Shape::Array),
    ("credential-helpers", Shape::Array),
    ("short-name-mode", Shape::String),
    ("additional-layer-store-auth-helper", Shape::String),
    ("aliases", Shape::Table),
    ("registries", Shape::V1),
];

/// The TOML type a top-level key must have for the file to be taken for a given kind.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Array,
    String,
    Table,
    /// A table with a `search`, `insecure` or `block` table (the v1 format).
    V1,
    /// A table of tables (`[host."…"]`).
    Hosts,
}

/// containerd's `server` and `host` keys.
const HOSTS_TOML_KEYS: [(&str, Shape); 2] = [("server", Shape::String), ("host", Shape::Hosts)];

/// One selected key and its text.
struct KeyText {
    file: FileRef,
    text: String,
}

/// Judges a ConfigMap object. Ok(false) when it is not the guard's: not selected, or no key
/// is a registries.conf or a hosts.toml.
pub(super) fn config_map(object: &Value, judge: &mut Judge<'_>) -> Result<bool, MirrorError> {
    let object = match object {
        Value::Null => return Ok(false),
        Value::Object(o) => o,
        _ => return Err(malformed(KIND, "object".to_string(), "must be an object")),
    };
    let policy = judge.policy;
    if !policy
        .config_maps
        .iter()
        .any(|p| glob::matches(p, &namespaced_name(object)))
    {
        return Ok(false);
    }
    let main_key = policy.registries_conf_key();
    let selected =
        |key: &str| key == main_key || policy.config_map_keys.iter().any(|p| glob::matches(p, key));
    let mut keys = texts(object, "data", &selected, main_key)?;
    keys.extend(texts(object, "binaryData", &selected, main_key)?);
    keys.sort_by(|a, b| {
        a.file
            .key
            .cmp(&b.file.key)
            .then(a.file.field.cmp(b.file.field))
    });

    let mut mine = false;
    let mut confs = Vec::new();
    // The main file first: CRI-O loads it before the drop-ins.
    for key in keys.iter().filter(|k| k.file.key == main_key) {
        let doc = DeTable::parse(&key.text)
            .map_err(|e| registries_conf::syntax_error(&key.file, &key.text, &e))?;
        confs.push(registries_conf::load(
            &key.file,
            &key.text,
            doc.get_ref(),
            false,
        )?);
        mine = true;
    }
    for key in keys.iter().filter(|k| k.file.key != main_key) {
        let Ok(doc) = DeTable::parse(&key.text) else {
            continue;
        };
        let doc = doc.get_ref();
        if has_key(doc, &REGISTRIES_CONF_KEYS, equal_fold) {
            confs.push(registries_conf::load(&key.file, &key.text, doc, true)?);
            mine = true;
        }
        if key.file.key.ends_with("hosts.toml") || has_key(doc, &HOSTS_TOML_KEYS, lower_eq) {
            hosts_toml::judge_hosts_toml(&key.file, &key.text, doc, judge);
            mine = true;
        }
        if containerd_config::is_containerd_config(doc) {
            containerd_config::judge_containerd_config(&key.file, &key.text, doc, judge);
            mine = true;
        }
    }
    judge_files(&confs, judge);
    Ok(mine)
}

/// `namespace/name` from the metadata (missing parts are empty).
fn namespaced_name(object: &Map<String, Value>) -> String {
    let meta = object.get("metadata");
    let part = |field: &str| {
        meta.and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    format!("{}/{}", part("namespace"), part("name"))
}

/// The selected keys of `data` (strings) or `binaryData` (base64).
fn texts(
    object: &Map<String, Value>,
    field: &'static str,
    selected: &dyn Fn(&str) -> bool,
    main_key: &str,
) -> Result<Vec<KeyText>, MirrorError> {
    let map = match object.get(field) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(malformed(KIND, field.to_string(), "must be an object")),
    };
    let mut out = Vec::new();
    for (key, value) in map.iter().filter(|(k, _)| selected(k)) {
        let file = FileRef {
            field,
            key: key.clone(),
        };
        let Value::String(value) = value else {
            return Err(malformed(KIND, file.to_string(), "must be a string"));
        };
        let text = if field == "data" {
            value.clone()
        } else {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(value)
                .map_err(|_| malformed(KIND, file.to_string(), "must be base64"))?;
            match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) if key == main_key => {
                    return Err(MirrorError::Toml {
                        field,
                        key: key.clone(),
                        line: None,
                        column: None,
                        message: "the file is not UTF-8".to_string(),
                    })
                }
                Err(_) => continue,
            }
        };
        out.push(KeyText { file, text });
    }
    Ok(out)
}

/// Whether some top-level key of `doc` is one of `known` by `matches`, with its shape. The
/// shape keeps other programs' TOML (a Cargo `[registry]` table, a `[server]` section) out.
fn has_key(doc: &DeTable<'_>, known: &[(&str, Shape)], matches: fn(&str, &str) -> bool) -> bool {
    doc.iter().any(|(k, v)| {
        known
            .iter()
            .any(|(f, shape)| matches(k.get_ref(), f) && shape.fits(v.get_ref()))
    })
}

// === impl Shape ===

impl Shape {
    fn fits(self, value: &DeValue<'_>) -> bool {
        match (self, value) {
            (Shape::Array, DeValue::Array(_))
            | (Shape::String, DeValue::String(_))
            | (Shape::Table, DeValue::Table(_)) => true,
            (Shape::V1, DeValue::Table(t)) => t.iter().any(|(k, v)| {
                v.get_ref().is_table()
                    && ["search", "insecure", "block"]
                        .iter()
                        .any(|f| equal_fold(k.get_ref(), f))
            }),
            (Shape::Hosts, DeValue::Table(t)) => t.iter().all(|(_, v)| v.get_ref().is_table()),
            _ => false,
        }
    }
}
