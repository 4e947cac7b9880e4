//! containerd `hosts.toml` files carried in a ConfigMap, read as containerd's
//! `core/remotes/docker/config/hosts.go` reads them (pelletier/go-toml v2 keys: exact, else
//! lowercased).
//!
//! A hosts.toml lives at `<config_path>/<namespace>/hosts.toml`, where the directory names the
//! registry it configures (`registry.example_5000_` for `registry.example:5000`, `_default` for
//! any registry without its own). Every `[host."…"]` entry is tried before the `server`, and an
//! entry answers tag pulls when its capabilities include `resolve` or when it has no (or an
//! empty) capabilities list, which containerd reads as pull, resolve and push
//! (`parseHostConfig`). Such an entry on a host other than the namespace's registry is a
//! finding (source: the namespace, mirror: the entry's URL without its scheme). With no
//! `server`, the namespace's registry itself is the last host, so nothing is found there.
//!
//! A ConfigMap key is not a path, so the namespace comes from the key name: the key minus a
//! trailing `hosts.toml` and one separator (`registry.example.hosts.toml`,
//! `registry.example_5000_hosts.toml`), or the whole key when it does not end in `hosts.toml`.
//! A bare `hosts.toml` or `_default` names no registry: every resolving entry is then a finding
//! for source `*`, because the file may be mounted for any registry.
//!
//! Where go-toml would take one of two keys (`server` and `Server`; the later one wins), every
//! candidate is judged, and folded `[Host."…"]` tables are judged although containerd only lists
//! hosts under an exact `host`: reporting too much here is the safe side. A file containerd
//! cannot decode (a wrong type, an unknown capability) makes containerd fall back to the
//! namespace's registry with no mirrors, so it yields a note, not a finding.

use toml::de::{DeTable, DeValue};

use super::go_toml::{line_of, lower_eq, type_name, Keys, Table};
use super::{FileRef, Judge, RISK};

/// The top-level and per-host keys of `hostFileConfig` that have a fixed type.
const BOOL_KEYS: [&str; 2] = ["skip_verify", "override_path"];

/// Judges one hosts.toml; `text` is the file, `doc` its parse.
pub(super) fn judge_hosts_toml(
    file: &FileRef,
    text: &str,
    doc: &DeTable<'_>,
    judge: &mut Judge<'_>,
) {
    let top = Table::new(doc, "");
    let namespace = namespace_of(&file.key);
    if let Err(problem) = decodable(&top) {
        judge.note(format!(
            "ConfigMap {file} is a containerd hosts.toml containerd cannot decode ({problem}); \
             containerd ignores it and pulls from the registry itself"
        ));
        return;
    }
    for (key, value) in top.entries(Keys::GoToml, "server") {
        let Some(url) = value.get_ref().as_str() else {
            continue;
        };
        let label = format!("{} = {url:?}", key.get_ref());
        endpoint(
            file,
            text,
            &namespace,
            &label,
            url,
            &top,
            key.span().start,
            judge,
        );
    }
    for (key, value) in top.entries(Keys::GoToml, "host") {
        let Some(hosts) = value.get_ref().as_table() else {
            continue;
        };
        for (url_key, config) in hosts.iter() {
            let Some(config) = config.get_ref().as_table() else {
                continue;
            };
            let url = url_key.get_ref().as_ref();
            let label = format!("[{}.{url:?}]", key.get_ref());
            let config = Table::new(config, label.clone());
            let offset = url_key.span().start;
            endpoint(file, text, &namespace, &label, url, &config, offset, judge);
        }
    }
}

/// Judges one endpoint (`server` or a `[host]` entry) whose settings are `config`.
#[allow(clippy::too_many_arguments)] // each is a distinct fact about the endpoint's place
fn endpoint(
    file: &FileRef,
    text: &str,
    namespace: &Option<String>,
    label: &str,
    url: &str,
    config: &Table<'_, '_>,
    offset: usize,
    judge: &mut Judge<'_>,
) {
    let (host, location) = url_host(url);
    if host.is_empty() || !is_foreign(namespace, host) {
        return;
    }
    let Some(why) = resolves(config) else {
        return;
    };
    let (source, for_whom) = match namespace {
        Some(ns) => (ns.as_str(), ns.clone()),
        None => (
            "*",
            "the registry the file is mounted for (name it in the key, e.g. \
             registry.example.hosts.toml)"
                .to_string(),
        ),
    };
    let line = line_of(text, offset);
    let message = format!(
        "ConfigMap {file} line {line} {label} can resolve tags for {for_whom} ({why}): {RISK}"
    );
    judge.tag_source(format!("{file} {label}"), source, location, message);
}

/// Why an endpoint answers tag pulls, or None when its capabilities leave `resolve` out.
/// Every capabilities list the decoder might take is considered.
fn resolves(config: &Table<'_, '_>) -> Option<&'static str> {
    let lists = config.entries(Keys::GoToml, "capabilities");
    if lists.is_empty() {
        return Some("no capabilities list: containerd grants pull, resolve and push");
    }
    for (_, list) in lists {
        let Some(items) = list.get_ref().as_array() else {
            continue;
        };
        if items.is_empty() {
            return Some("an empty capabilities list: containerd grants pull, resolve and push");
        }
        if items
            .iter()
            .any(|c| c.get_ref().as_str().is_some_and(|c| lower_eq(c, "resolve")))
        {
            return Some("capabilities include resolve");
        }
    }
    None
}

/// Why containerd cannot decode a hosts.toml (`parseHostsFile`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Undecodable {
    #[error("{key} must be {expected}, not {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("host {0:?} must be a table")]
    HostNotTable(String),
    #[error("{0} must be a list of strings")]
    NotStringList(String),
    #[error("unknown capability {0}")]
    UnknownCapability(String),
}

/// Whether containerd can decode the file (`parseHostsFile`): field types and capability names.
fn decodable(top: &Table<'_, '_>) -> Result<(), Undecodable> {
    for (key, value) in top.entries(Keys::GoToml, "server") {
        check_type(key.get_ref(), value.get_ref(), "a string", DeValue::is_str)?;
    }
    host_settings(top)?;
    for (key, value) in top.entries(Keys::GoToml, "host") {
        let Some(hosts) = value.get_ref().as_table() else {
            return Err(Undecodable::WrongType {
                key: key.get_ref().to_string(),
                expected: "a table",
                found: type_name(value.get_ref()),
            });
        };
        for (url, config) in hosts.iter() {
            let Some(config) = config.get_ref().as_table() else {
                return Err(Undecodable::HostNotTable(url.get_ref().to_string()));
            };
            host_settings(&Table::new(config, ""))?;
        }
    }
    Ok(())
}

/// The typed settings of one host entry (or of the top level).
fn host_settings(config: &Table<'_, '_>) -> Result<(), Undecodable> {
    for (key, value) in config.entries(Keys::GoToml, "capabilities") {
        let Some(items) = value.get_ref().as_array() else {
            return Err(Undecodable::NotStringList(key.get_ref().to_string()));
        };
        for item in items.iter() {
            match item.get_ref().as_str() {
                Some(c) if ["pull", "resolve", "push"].iter().any(|k| lower_eq(c, k)) => {}
                Some(c) => return Err(Undecodable::UnknownCapability(c.to_string())),
                None => return Err(Undecodable::NotStringList(key.get_ref().to_string())),
            }
        }
    }
    for field in BOOL_KEYS {
        for (key, value) in config.entries(Keys::GoToml, field) {
            check_type(
                key.get_ref(),
                value.get_ref(),
                "a boolean",
                DeValue::is_bool,
            )?;
        }
    }
    for (key, value) in config.entries(Keys::GoToml, "dial_timeout") {
        check_type(key.get_ref(), value.get_ref(), "a string", DeValue::is_str)?;
    }
    for (key, value) in config.entries(Keys::GoToml, "header") {
        check_type(key.get_ref(), value.get_ref(), "a table", DeValue::is_table)?;
    }
    for field in ["ca", "client"] {
        for (key, value) in config.entries(Keys::GoToml, field) {
            check_type(key.get_ref(), value.get_ref(), "a string or a list", |v| {
                v.is_str() || v.is_array()
            })?;
        }
    }
    Ok(())
}

fn check_type<'i>(
    key: &str,
    value: &DeValue<'i>,
    expected: &'static str,
    ok: impl Fn(&DeValue<'i>) -> bool,
) -> Result<(), Undecodable> {
    if ok(value) {
        Ok(())
    } else {
        Err(Undecodable::WrongType {
            key: key.to_string(),
            expected,
            found: type_name(value),
        })
    }
}

/// `parseHostConfig`'s host: `https://` is added unless the text starts with `http`, then the
/// URL's authority (user info dropped). Returns the host and the URL without its scheme
/// (trailing `/` trimmed), which is what findings name.
fn url_host(url: &str) -> (&str, &str) {
    let rest = if url.starts_with("http") {
        match url.split_once("://") {
            Some((_, rest)) => rest,
            // `url.Parse("httpfoo")` has no authority: the host is empty.
            None => return ("", url),
        }
    } else {
        url
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (host, rest.trim_end_matches('/'))
}

/// Whether `host` is another registry than the namespace's. containerd's own default for
/// `docker.io` is `registry-1.docker.io`, which is Docker Hub itself.
fn is_foreign(namespace: &Option<String>, host: &str) -> bool {
    match namespace.as_deref() {
        None => true,
        Some("docker.io") => host != "docker.io" && host != "registry-1.docker.io",
        Some(ns) => host != ns,
    }
}

/// The registry a ConfigMap key's hosts.toml is for, in containerd's directory spelling decoded
/// (`registry.example_5000_` → `registry.example:5000`); None when the key names none.
fn namespace_of(key: &str) -> Option<String> {
    let dir = key.strip_suffix("hosts.toml").unwrap_or(key);
    let dir = if port_directory(dir).is_some() {
        dir
    } else {
        dir.strip_suffix(['.', '_', '-']).unwrap_or(dir)
    };
    if dir.is_empty() || dir == "_default" {
        return None;
    }
    Some(match port_directory(dir) {
        Some((host, port)) => format!("{host}:{port}"),
        None => dir.to_string(),
    })
}

/// `hostDirectory` reversed: `host_port_` → (host, port).
fn port_directory(dir: &str) -> Option<(&str, &str)> {
    let (host, port) = dir.strip_suffix('_')?.rsplit_once('_')?;
    (!host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        .then_some((host, port))
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::{json, Value};

    use crate::mirror_guard::{check, review};
    use crate::policy::mirror_policy::{AllowedMirror, MirrorPolicy};

    fn configmap(key: &str, text: &str) -> Value {
        json!({"kind": "ConfigMap", "metadata": {"namespace": "ns", "name": "c"}, "data": {key: text}})
    }

    #[rstest]
    #[case::bare(
        "hosts.toml",
        "server = \"https://mirror.example\"\n",
        "ConfigMap data[hosts.toml] line 1 server = \"https://mirror.example\" can resolve tags for \
         the registry the file is mounted for (name it in the key, e.g. \
         registry.example.hosts.toml) (no capabilities list: containerd grants pull, resolve and \
         push): a tag mirror can serve different content for the same tag",
        ("*", "mirror.example")
    )]
    #[case::named_by_key(
        "registry.example.hosts.toml",
        "server = \"https://registry.example\"\n\n[host.\"https://mirror.example:5000/team\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
        "ConfigMap data[registry.example.hosts.toml] line 3 [host.\"https://mirror.example:5000/team\"] \
         can resolve tags for registry.example (capabilities include resolve): a tag mirror can \
         serve different content for the same tag",
        ("registry.example", "mirror.example:5000/team")
    )]
    #[case::port_directory(
        "registry.example_5000_hosts.toml",
        "[host.\"mirror.example\"]\n",
        "ConfigMap data[registry.example_5000_hosts.toml] line 1 [host.\"mirror.example\"] can \
         resolve tags for registry.example:5000 (no capabilities list: containerd grants pull, \
         resolve and push): a tag mirror can serve different content for the same tag",
        ("registry.example:5000", "mirror.example")
    )]
    #[case::empty_list_is_every_capability(
        "docker.io_hosts.toml",
        "[host.\"https://mirror.example\"]\ncapabilities = []\n",
        "ConfigMap data[docker.io_hosts.toml] line 1 [host.\"https://mirror.example\"] can resolve \
         tags for docker.io (an empty capabilities list: containerd grants pull, resolve and push): \
         a tag mirror can serve different content for the same tag",
        ("docker.io", "mirror.example")
    )]
    #[case::capability_case_is_ignored(
        "quay.io.hosts.toml",
        "[host.\"https://mirror.example\"]\ncapabilities = [\"Pull\", \"RESOLVE\"]\n",
        "ConfigMap data[quay.io.hosts.toml] line 1 [host.\"https://mirror.example\"] can resolve \
         tags for quay.io (capabilities include resolve): a tag mirror can serve different content \
         for the same tag",
        ("quay.io", "mirror.example")
    )]
    #[case::folded_server_key(
        "quay.io.hosts.toml",
        "Server = \"mirror.example\"\n",
        "ConfigMap data[quay.io.hosts.toml] line 1 Server = \"mirror.example\" can resolve tags for \
         quay.io (no capabilities list: containerd grants pull, resolve and push): a tag mirror \
         can serve different content for the same tag",
        ("quay.io", "mirror.example")
    )]
    #[case::windows_mco_rendering_of_never_contact_source(
        "registry.example.hosts.toml",
        "server = \"https://mirror.example\"\r\n\r\n[host.\"https://mirror.example\"]\r\n  capabilities = [\"pull\"]\r\n",
        "ConfigMap data[registry.example.hosts.toml] line 1 server = \"https://mirror.example\" can \
         resolve tags for registry.example (no capabilities list: containerd grants pull, resolve \
         and push): a tag mirror can serve different content for the same tag",
        ("registry.example", "mirror.example")
    )]
    fn resolving_hosts_are_findings(
        #[case] key: &str,
        #[case] text: &str,
        #[case] message: &str,
        #[case] pair: (&str, &str),
    ) {
        let found = check(
            &MirrorPolicy::default(),
            "",
            "ConfigMap",
            &configmap(key, text),
        )
        .expect("judged")
        .expect("a hosts.toml is mine");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].message, message);
        assert_eq!((found[0].source.as_str(), found[0].mirror.as_str()), pair);
        // Allowing exactly that pair clears it.
        let policy = MirrorPolicy {
            allow: vec![AllowedMirror {
                source: pair.0.into(),
                mirror: pair.1.into(),
            }],
            ..MirrorPolicy::default()
        };
        assert_eq!(
            check(&policy, "", "ConfigMap", &configmap(key, text)),
            Ok(Some(Vec::new()))
        );
    }

    #[rstest]
    #[case::no_server("docker.io.hosts.toml", "capabilities = [\"pull\", \"resolve\"]\n")]
    #[case::server_is_the_namespace(
        "registry.example.hosts.toml",
        "server = \"https://registry.example\"\n"
    )]
    #[case::docker_hub_default(
        "docker.io.hosts.toml",
        "server = \"https://registry-1.docker.io\"\n"
    )]
    #[case::pull_only_mirror(
        "registry.example.hosts.toml",
        "server = \"https://registry.example\"\n[host.\"https://mirror.example\"]\ncapabilities = [\"pull\"]\n"
    )]
    #[case::windows_mco_rendering_of_allow_contacting_source(
        "registry.example.hosts.toml",
        "server = \"https://registry.example\"\r\n\r\n[host.\"https://mirror.example\"]\r\n  capabilities = [\"pull\"]\r\n"
    )]
    #[case::url_without_authority(
        "registry.example.hosts.toml",
        "server = \"httpmirror.example\"\n"
    )]
    fn digest_only_hosts_are_fine(#[case] key: &str, #[case] text: &str) {
        assert_eq!(
            check(
                &MirrorPolicy::default(),
                "",
                "ConfigMap",
                &configmap(key, text)
            ),
            Ok(Some(Vec::new()))
        );
    }

    #[rstest]
    #[case::unknown_capability(
        "[host.\"https://mirror.example\"]\ncapabilities = [\"pull\", \"tags\"]\n",
        "unknown capability tags"
    )]
    #[case::server_not_a_string("server = 5\n", "server must be a string, not integer")]
    #[case::skip_verify_not_a_bool(
        "server = \"https://mirror.example\"\nskip_verify = \"yes\"\n",
        "skip_verify must be a boolean, not string"
    )]
    fn files_containerd_cannot_decode_are_notes(#[case] text: &str, #[case] problem: &str) {
        let review = review(
            &MirrorPolicy::default(),
            "",
            "ConfigMap",
            &configmap("quay.io.hosts.toml", text),
        )
        .expect("judged")
        .expect("mine");
        assert_eq!(review.violations, Vec::new());
        assert_eq!(
            review.notes,
            vec![format!(
                "ConfigMap data[quay.io.hosts.toml] is a containerd hosts.toml containerd cannot \
                 decode ({problem}); containerd ignores it and pulls from the registry itself"
            )]
        );
    }

    #[rstest]
    #[case("hosts.toml", None)]
    #[case("_default_hosts.toml", None)]
    #[case("docker.io", Some("docker.io"))]
    #[case("docker.io-hosts.toml", Some("docker.io"))]
    #[case("localhost_5000_hosts.toml", Some("localhost:5000"))]
    #[case("localhost_5000_", Some("localhost:5000"))]
    fn the_key_names_the_namespace(#[case] key: &str, #[case] want: Option<&str>) {
        assert_eq!(super::namespace_of(key).as_deref(), want);
    }

    #[rstest]
    #[case("https://mirror.example:5000/v2/", ("mirror.example:5000", "mirror.example:5000/v2"))]
    #[case("mirror.example", ("mirror.example", "mirror.example"))]
    #[case("http://user@mirror.example/x", ("mirror.example", "user@mirror.example/x"))]
    #[case("httpmirror.example", ("", "httpmirror.example"))]
    fn url_host_is_containerds(#[case] url: &str, #[case] want: (&str, &str)) {
        assert_eq!(super::url_host(url), want);
    }
}
