//! A containerd `config.toml` carried in a ConfigMap (a node-configuring DaemonSet's, a
//! distribution's template): the CRI plugin's `registry` section, in every spelling containerd
//! reads, `[plugins."io.containerd.grpc.v1.cri".registry]` (config version 2, containerd 1.x
//! and 2.x) and `[plugins."io.containerd.cri.v1.images".registry]` (version 3, containerd 2.x).
//! Keys are matched as pelletier/go-toml v2 matches them (exact, else lowercased).
//!
//! * `config_path` is a list of directories, `:`-separated (Go's `filepath.SplitList`);
//!   containerd 2.2 defaults to `/etc/containerd/certs.d:/etc/docker/certs.d` (containerd issue
//!   12636). Every directory is judged: an empty or relative one is a note (containerd resolves
//!   it against its own working directory, which is not what the operator meant), and a note
//!   names every directory the nodes read `<registry>/hosts.toml` and `_default/hosts.toml` from,
//!   so the operator knows which mounts matter: the hosts.toml files themselves reach the guard
//!   as ConfigMap keys and are judged in `hosts_toml.rs` whichever directory they are mounted in
//!   (a `_default` file for every registry).
//! * The deprecated inline `mirrors."<registry>".endpoint` lists are tag mirrors: containerd
//!   gives an inline endpoint every capability (pull and resolve), so an endpoint on another host
//!   than its registry is a finding (source `*` for the `"*"` entry).
//!
//! Pure: judges the text, never reads the directories it names.

use toml::de::DeTable;

use super::go_toml::{line_of, Keys, Table};
use super::{FileRef, Judge, RISK};

/// The CRI plugin names whose `registry` table containerd reads.
pub(super) const CRI_PLUGINS: [&str; 3] = [
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.images",
    // The short name of containerd 1.2's configuration (`[plugins.cri]`), still decoded by 1.x.
    "cri",
];

/// Whether `doc` is shaped like a containerd config: a `plugins` table holding a CRI plugin's
/// `registry` table.
pub(super) fn is_containerd_config(doc: &DeTable<'_>) -> bool {
    !registries(doc).is_empty()
}

/// Judges the registry sections of one containerd config.
pub(super) fn judge_containerd_config(
    file: &FileRef,
    text: &str,
    doc: &DeTable<'_>,
    judge: &mut Judge<'_>,
) {
    for (plugin, registry) in registries(doc) {
        let section = format!("[plugins.{plugin:?}.registry]");
        for (key, value) in registry.entries(Keys::GoToml, "config_path") {
            let Some(paths) = value.get_ref().as_str() else {
                continue;
            };
            let line = line_of(text, key.span().start);
            let directories: Vec<&str> = paths.split(':').collect();
            for directory in &directories {
                if directory.is_empty() || !directory.starts_with('/') {
                    judge.note(format!(
                        "ConfigMap {file} line {line} {section} config_path lists {directory:?}, \
                         not an absolute directory: containerd reads it relative to its own \
                         working directory"
                    ));
                }
            }
            // Directories first: a warning is cut at 120 characters.
            judge.note(format!(
                "ConfigMap {file} line {line}: config_path dirs {} (each read for \
                 <registry>/hosts.toml and _default/hosts.toml; mount only hosts.toml pinhook \
                 judges)",
                directories
                    .iter()
                    .filter(|d| !d.is_empty())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for (_, value) in registry.entries(Keys::GoToml, "mirrors") {
            let Some(mirrors) = value.get_ref().as_table() else {
                continue;
            };
            // In document order, so findings read as the file does.
            let mut mirrors: Vec<_> = mirrors.iter().collect();
            mirrors.sort_by_key(|(host_key, _)| host_key.span().start);
            for (host_key, config) in mirrors {
                let Some(config) = config.get_ref().as_table() else {
                    continue;
                };
                let host = host_key.get_ref().as_ref();
                let config = Table::new(config, host);
                for (endpoint_key, endpoints) in config.entries(Keys::GoToml, "endpoint") {
                    let Some(endpoints) = endpoints.get_ref().as_array() else {
                        continue;
                    };
                    let line = line_of(text, endpoint_key.span().start);
                    for (i, url) in endpoints.iter().enumerate() {
                        let Some(url) = url.get_ref().as_str() else {
                            continue;
                        };
                        inline_endpoint(file, &section, host, i, url, line, judge);
                    }
                }
            }
        }
    }
}

/// One inline mirror endpoint of registry `host`.
fn inline_endpoint(
    file: &FileRef,
    section: &str,
    host: &str,
    index: usize,
    url: &str,
    line: usize,
    judge: &mut Judge<'_>,
) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let location = rest.trim_end_matches('/');
    let own = authority == host
        || (host == "docker.io" && matches!(authority, "registry-1.docker.io" | "docker.io"));
    if authority.is_empty() || own {
        return;
    }
    let source = if host == "*" { "*" } else { host };
    let label = format!("{section} mirrors.{host:?}.endpoint[{index}]");
    let message = format!(
        "ConfigMap {file} line {line} {label} lets {location} serve tag pulls for {source} \
         (inline mirrors have every capability, resolve included): {RISK}"
    );
    judge.tag_source(format!("{file} {label}"), source, location, message);
}

/// Each CRI plugin's `registry` table: (plugin name, table).
fn registries<'t, 'i>(doc: &'t DeTable<'i>) -> Vec<(String, Table<'t, 'i>)> {
    let top = Table::new(doc, "");
    let mut found = Vec::new();
    for (_, plugins) in top.entries(Keys::GoToml, "plugins") {
        let Some(plugins) = plugins.get_ref().as_table() else {
            continue;
        };
        for (name, plugin) in plugins.iter() {
            let name = name.get_ref().as_ref();
            if !CRI_PLUGINS.contains(&name) {
                continue;
            }
            let Some(plugin) = plugin.get_ref().as_table() else {
                continue;
            };
            let plugin = Table::new(plugin, name);
            for (_, registry) in plugin.entries(Keys::GoToml, "registry") {
                if let Some(registry) = registry.get_ref().as_table() {
                    found.push((name.to_string(), Table::new(registry, "registry")));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::mirror_guard::review;
    use crate::policy::mirror_policy::MirrorPolicy;

    fn configmap(key: &str, text: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"namespace": "kube-system", "name": "containerd"},
               "data": {key: text}})
    }

    const TWO_DIRECTORIES: &str = r#"version = 3
[plugins."io.containerd.cri.v1.images".registry]
  config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"
"#;

    #[test]
    fn every_config_path_directory_is_named_and_nothing_is_denied() {
        let found = review(
            &MirrorPolicy::default(),
            "",
            "ConfigMap",
            &configmap("config.toml", TWO_DIRECTORIES),
        )
        .expect("valid")
        .expect("mine");
        assert!(found.violations.is_empty(), "{:?}", found.violations);
        assert_eq!(
            found.notes,
            [
                "ConfigMap data[config.toml] line 3: config_path dirs /etc/containerd/certs.d, \
              /etc/docker/certs.d (each read for <registry>/hosts.toml and _default/hosts.toml; \
              mount only hosts.toml pinhook judges)"
            ]
        );
    }

    #[test]
    fn a_relative_or_empty_directory_is_a_note() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"certs.d::/etc/docker/certs.d\"\n";
        let found = review(
            &MirrorPolicy::default(),
            "",
            "ConfigMap",
            &configmap("config.toml", text),
        )
        .expect("valid")
        .expect("mine");
        assert_eq!(found.notes.len(), 3, "{:?}", found.notes);
        assert!(found.notes[0].contains("lists \"certs.d\", not an absolute directory"));
        assert!(found.notes[1].contains("lists \"\", not an absolute directory"));
    }

    #[test]
    fn inline_mirrors_on_another_host_are_tag_mirrors() {
        let text = r#"version = 2
[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://registry-1.docker.io", "https://hub-cache.example:5000/v2"]
[plugins."io.containerd.grpc.v1.cri".registry.mirrors."*"]
  endpoint = ["http://everything.example"]
"#;
        let found = review(
            &MirrorPolicy::default(),
            "",
            "ConfigMap",
            &configmap("config.toml", text),
        )
        .expect("valid")
        .expect("mine");
        let pairs: Vec<(&str, &str)> = found
            .violations
            .iter()
            .map(|v| (v.source.as_str(), v.mirror.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("docker.io", "hub-cache.example:5000/v2"),
                ("*", "everything.example")
            ]
        );
        assert!(found.violations[0].message.starts_with(
            "ConfigMap data[config.toml] line 3 [plugins.\"io.containerd.grpc.v1.cri\".registry] \
             mirrors.\"docker.io\".endpoint[1] lets hub-cache.example:5000/v2 serve tag pulls for \
             docker.io"
        ), "{}", found.violations[0].message);
    }

    #[test]
    fn other_toml_with_plugins_is_not_a_containerd_config() {
        let text = "[plugins.other]\nregistry = { x = 1 }\n";
        let found = review(
            &MirrorPolicy::default(),
            "",
            "ConfigMap",
            &configmap("config.toml", text),
        )
        .expect("valid");
        assert!(found.is_none(), "{found:?}");
    }
}
