//! The policy's `mirrors:` section, which the mirror guard ([`crate::mirror_guard`]) judges
//! node mirror configuration by: the (source, mirror) pairs that may serve tag pulls, which
//! ConfigMaps and keys are read, and whether Windows nodes' renderings are judged too.

use serde::Deserialize;

/// ConfigMap key of the main registries.conf when the policy names none.
pub const DEFAULT_CONFIG_MAP_KEY: &str = "registries.conf";

/// The policy's `mirrors:` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MirrorPolicy {
    /// ConfigMap key that carries the main registries.conf (default "registries.conf" when
    /// None). It is always read; every other registries.conf-shaped key is a drop-in.
    pub config_map_key: Option<String>,
    /// Globs on `namespace/name` of the ConfigMaps the guard reads (default `["*"]`).
    pub config_maps: Vec<String>,
    /// Globs on the `data`/`binaryData` keys the guard reads (default `["*"]`).
    pub config_map_keys: Vec<String>,
    /// The cluster has, or may get, Windows nodes: also judge ImageDigestMirrorSets and
    /// ImageTagMirrorSets as the Windows Machine Config Operator renders them.
    pub windows_nodes: bool,
    /// (source, mirror) pairs that may serve tag pulls.
    pub allow: Vec<AllowedMirror>,
}

/// One (source, mirror) pair that may serve tag pulls.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedMirror {
    pub source: String,
    pub mirror: String,
}

// === impl MirrorPolicy ===

impl Default for MirrorPolicy {
    fn default() -> Self {
        MirrorPolicy {
            config_map_key: None,
            config_maps: vec!["*".to_string()],
            config_map_keys: vec!["*".to_string()],
            windows_nodes: false,
            allow: Vec::new(),
        }
    }
}

impl MirrorPolicy {
    /// The ConfigMap key judged as the main registries.conf.
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
}

/// `s` without trailing `/`: how the allow list compares sources and mirrors.
pub fn trim_slash(s: &str) -> &str {
    s.trim_end_matches('/')
}
