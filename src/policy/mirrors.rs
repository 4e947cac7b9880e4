//! Placeholder replaced by the mirror guard (being written).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MirrorPolicy {
    #[serde(default)]
    pub config_map_key: Option<String>,
    #[serde(default)]
    pub allow: Vec<AllowedMirror>,
}
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedMirror {
    pub source: String,
    pub mirror: String,
}
