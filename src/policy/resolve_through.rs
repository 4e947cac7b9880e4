//! Resolution through named mirrors (`registries.resolveThrough`, issue 28): where a tag of a
//! source registry is resolved when the source does not answer pinhook (a disconnected cluster,
//! a pull-through cache in front of a rate-limited registry).
//!
//! Each entry names a `source` (`host[:port]` or `host[:port]/path`) and an ordered list of
//! `mirrors`. A source matches a reference's repository when it equals the repository or is a
//! prefix of it ending at a `/` (the host compared case-insensitively, the path exactly); there
//! are no wildcards, and the first matching entry wins. The matched prefix is replaced by each
//! mirror in turn ([`Routes::route`]); the pinned reference keeps the source's name, because the
//! nodes pull it by digest, through their own digest-only mirrors.
//!
//! Owns: the schema, its validation (hostile values refused with the field named: empty,
//! overlong, duplicate, wildcard, scheme, `.`/`..` segments, a mirror the policy's host rules
//! refuse) and the pure rewrite. Never does I/O: the mirror's CA and credentials are file paths
//! the registry layer reads; the resolution itself is `registry::mirrored`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use super::hosts::HostRules;
use super::HostSettings;
use crate::reference::Reference;

/// Entries a policy may list.
pub const MAX_ENTRIES: usize = 64;
/// Mirrors one entry may list.
pub const MAX_MIRRORS: usize = 8;
/// Longest `source` or mirror `location` (`RepositoryNameTotalLengthMax`).
pub const MAX_LOCATION_LEN: usize = 255;

/// One `registries.resolveThrough` entry as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveThrough {
    /// `host[:port]` or `host[:port]/path`: the registry (part) whose tags are resolved at the
    /// mirrors.
    pub source: String,
    /// Tried in order; the first that answers decides.
    pub mirrors: Vec<MirrorSettings>,
    /// Also ask the source: `true` denies when it names another digest or says the tag does
    /// not exist; `required` denies when it does not answer too.
    #[serde(default)]
    pub verify_source: VerifySource,
}

/// `verifySource`: whether a routed tag's source is asked too, and what its silence means
/// (issue 43: a mirror never outvotes its source).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VerifySource {
    /// `false`, the default: only the mirrors are asked.
    #[default]
    Off,
    /// `true`: the source is asked at the same time. Another digest, or an answer that the tag
    /// or manifest does not exist (404, 403, `MANIFEST_UNKNOWN`), denies; no answer in time
    /// (down, disconnected, 401) leaves the mirror's digest unverified.
    IfAnswered,
    /// `required`: as `true`, and no answer denies too; no last known digest stands in.
    Required,
}

/// One mirror of an entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorSettings {
    /// `host[:port]` or `host[:port]/path` replacing the matched source prefix.
    pub location: String,
    /// PEM CA bundle trusted for the mirror's host.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// A docker `config.json` (a `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`,
    /// mounted): its keys are matched against the mirror as kubelet matches them, after the
    /// Pod's own pull secrets.
    #[serde(default)]
    pub credentials: Option<PathBuf>,
    /// Reach the mirror's host over plain HTTP.
    #[serde(default)]
    pub insecure: bool,
}

/// The validated entries, in policy order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    entries: Vec<Entry>,
}

/// Where one reference is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The entry's source, canonical (`registry.example/team`).
    pub source: String,
    /// The reference rewritten to each mirror, in order.
    pub mirrors: Vec<MirrorTarget>,
    pub verify_source: VerifySource,
}

/// One mirror a reference is resolved at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorTarget {
    /// The mirror's location, canonical: the origin recorded for its answers.
    pub location: String,
    /// The reference at the mirror (`mirror.example/team/app:1.0`).
    pub reference: Reference,
    pub credentials: Option<PathBuf>,
}

/// Why an entry is refused: the field and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteError {
    pub field: String,
    pub problem: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    source: String,
    mirrors: Vec<CompiledMirror>,
    verify_source: VerifySource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct CompiledMirror {
    location: String,
    credentials: Option<PathBuf>,
}

// === impl VerifySource ===

impl VerifySource {
    /// Whether the source is asked at all.
    pub fn asks_source(self) -> bool {
        self != VerifySource::Off
    }
}

impl<'de> Deserialize<'de> for VerifySource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = VerifySource;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or \"required\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<VerifySource, E> {
                Ok(match v {
                    true => VerifySource::IfAnswered,
                    false => VerifySource::Off,
                })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<VerifySource, E> {
                match v {
                    "required" => Ok(VerifySource::Required),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// The repository name appended to a location to parse it with the reference grammar.
const PROBE: &str = "pinhook-probe";

// === impl Routes ===

impl Routes {
    /// Validates `entries` against the policy's host rules, and adds each mirror's TLS settings
    /// to `hosts` (a host with other settings there already is refused: one host, one trust).
    pub fn compile(
        entries: &[ResolveThrough],
        rules: &HostRules,
        hosts: &mut BTreeMap<String, HostSettings>,
    ) -> Result<Routes, RouteError> {
        if entries.len() > MAX_ENTRIES {
            return Err(route_error(
                "registries.resolveThrough".to_string(),
                format!("lists {} entries; at most {MAX_ENTRIES}", entries.len()),
            ));
        }
        let mut sources = BTreeSet::new();
        let mut compiled = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let field = format!("registries.resolveThrough[{i}]");
            let source = canonical(&entry.source)
                .map_err(|problem| route_error(format!("{field}.source"), problem.to_string()))?;
            if !sources.insert(source.to_ascii_lowercase()) {
                return Err(route_error(
                    format!("{field}.source"),
                    format!("{source:?} is named by an earlier entry"),
                ));
            }
            if entry.mirrors.is_empty() || entry.mirrors.len() > MAX_MIRRORS {
                return Err(route_error(
                    format!("{field}.mirrors"),
                    format!("must list 1 to {MAX_MIRRORS} mirrors"),
                ));
            }
            let mut seen = BTreeSet::new();
            let mut mirrors = Vec::with_capacity(entry.mirrors.len());
            for (j, mirror) in entry.mirrors.iter().enumerate() {
                let field = format!("{field}.mirrors[{j}]");
                let location = canonical(&mirror.location).map_err(|problem| {
                    route_error(format!("{field}.location"), problem.to_string())
                })?;
                if location.eq_ignore_ascii_case(&source) {
                    return Err(route_error(
                        format!("{field}.location"),
                        "is the source itself",
                    ));
                }
                if !seen.insert(location.to_ascii_lowercase()) {
                    return Err(route_error(
                        format!("{field}.location"),
                        format!("{location:?} is listed twice"),
                    ));
                }
                let host = host_of(&location);
                // A mirror is contacted like any registry: it must never be a way to reach a
                // host the policy refuses (the address guard checks it again per request).
                rules.check_host(host).map_err(|refusal| {
                    route_error(format!("{field}.location"), refusal.to_string())
                })?;
                for (name, path) in [("ca", &mirror.ca), ("credentials", &mirror.credentials)] {
                    if let Some(path) = path {
                        check_file_path(path).map_err(|problem| {
                            route_error(format!("{field}.{name}"), problem.to_string())
                        })?;
                    }
                }
                add_host_settings(hosts, host, mirror)
                    .map_err(|problem| route_error(field.clone(), problem.to_string()))?;
                mirrors.push(CompiledMirror {
                    location,
                    credentials: mirror.credentials.clone(),
                });
            }
            compiled.push(Entry {
                source,
                mirrors,
                verify_source: entry.verify_source,
            });
        }
        Ok(Routes { entries: compiled })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where `reference`'s tag is resolved: `None` when no entry's source matches it (it is
    /// resolved at its own registry). The first matching entry wins.
    pub fn route(&self, reference: &Reference) -> Option<Route> {
        if self.entries.is_empty() {
            return None;
        }
        let repository = reference.repository();
        let entry = self
            .entries
            .iter()
            .find(|entry| suffix_after(&entry.source, &repository).is_some())?;
        let rest = suffix_after(&entry.source, &repository)?;
        let tag = reference.effective_tag();
        let mirrors = entry
            .mirrors
            .iter()
            .filter_map(|mirror| {
                // Cannot fail for a validated location and a valid reference's path and tag;
                // a mirror that somehow does not parse is skipped rather than trusted.
                let reference =
                    Reference::parse(&format!("{}{rest}:{tag}", mirror.location)).ok()?;
                Some(MirrorTarget {
                    location: mirror.location.clone(),
                    reference,
                    credentials: mirror.credentials.clone(),
                })
            })
            .collect();
        Some(Route {
            source: entry.source.clone(),
            mirrors,
            verify_source: entry.verify_source,
        })
    }

    /// The entry that would replace a tag mirror from `source` to `mirror` (for the guard's
    /// message): the YAML of a `resolveThrough` entry, on one line.
    pub fn suggestion(source: &str, mirror: &str) -> String {
        format!(
            "registries.resolveThrough: [{{source: {}, mirrors: [{{location: {}}}]}}] with a digest-only mirror on the nodes",
            source.trim_end_matches('/'),
            mirror.trim_end_matches('/')
        )
    }
}

/// The part of `repository` after `source`, starting with `/` (or empty), when `source` is the
/// repository or a prefix of it ending at a `/`. The host is compared case-insensitively.
fn suffix_after<'a>(source: &str, repository: &'a str) -> Option<&'a str> {
    let (source_host, source_path) = split_host(source);
    let (host, path) = split_host(repository);
    if !source_host.eq_ignore_ascii_case(host) {
        return None;
    }
    let rest = path.strip_prefix(source_path)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// `(host, path)` where a non-empty path keeps its leading `/`.
fn split_host(location: &str) -> (&str, &str) {
    match location.find('/') {
        Some(i) => (&location[..i], &location[i..]),
        None => (location, ""),
    }
}

fn host_of(location: &str) -> &str {
    split_host(location).0
}

/// Why a `source` or mirror `location` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum LocationProblem {
    #[error("must not be empty")]
    Empty,
    #[error("is {0} characters long; at most {MAX_LOCATION_LEN}")]
    TooLong(usize),
    #[error("{0:?} has a URL scheme; write host[:port][/path]")]
    Scheme(String),
    #[error("{0:?} has a wildcard; sources and mirrors are matched as written, on '/' boundaries")]
    Wildcard(String),
    #[error("{0:?} contains {1:?}")]
    Character(String, char),
    #[error("{0:?} has an empty, '.' or '..' path segment (or a trailing '/')")]
    Segment(String),
    #[error("{0:?} must start with a registry host (with a '.' or a ':port', or localhost)")]
    NoHost(String),
    #[error("{0:?} is not host[:port][/path]: {1}")]
    NotAReference(String, String),
    #[error("is longer than {MAX_LOCATION_LEN} characters once normalised")]
    TooLongNormalised,
}

/// Why a CA or credentials file path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum FileProblem {
    #[error("must be a file path")]
    Empty,
    #[error("{0} must be an absolute path")]
    Relative(String),
    #[error("{0} must not contain '.' or '..'")]
    DotComponent(String),
}

/// A mirror's `ca` / `insecure` that differ from what the host already has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("its ca/insecure differ from those registries.hosts or another mirror gives {host}")]
struct HostSettingsConflict {
    host: String,
}

/// A `source` or mirror `location` in canonical form (Docker Hub written `docker.io`), or why
/// it is refused.
fn canonical(location: &str) -> Result<String, LocationProblem> {
    if location.is_empty() {
        return Err(LocationProblem::Empty);
    }
    if location.len() > MAX_LOCATION_LEN {
        return Err(LocationProblem::TooLong(location.len()));
    }
    if location.contains("://") {
        return Err(LocationProblem::Scheme(location.to_string()));
    }
    if location.contains('*') {
        return Err(LocationProblem::Wildcard(location.to_string()));
    }
    if let Some(c) = location
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '@' | '?' | '#' | '\\'))
    {
        return Err(LocationProblem::Character(location.to_string(), c));
    }
    let (host, path) = split_host(location);
    if path
        .split('/')
        .skip(1)
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err(LocationProblem::Segment(location.to_string()));
    }
    if !(host.contains('.') || host.contains(':') || host == "localhost") {
        return Err(LocationProblem::NoHost(location.to_string()));
    }
    let parsed = Reference::parse(&format!("{location}/{PROBE}"))
        .map_err(|e| LocationProblem::NotAReference(location.to_string(), e.to_string()))?;
    let repository = parsed.repository();
    let canonical = repository
        .strip_suffix(&format!("/{PROBE}"))
        .unwrap_or(&repository)
        .to_string();
    if canonical.len() > MAX_LOCATION_LEN {
        return Err(LocationProblem::TooLongNormalised);
    }
    Ok(canonical)
}

/// A CA or credentials file: an absolute path without `.`/`..` components.
fn check_file_path(path: &Path) -> Result<(), FileProblem> {
    if path.as_os_str().is_empty() {
        return Err(FileProblem::Empty);
    }
    if !path.is_absolute() {
        return Err(FileProblem::Relative(path.display().to_string()));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(FileProblem::DotComponent(path.display().to_string()));
    }
    Ok(())
}

/// Adds a mirror's `ca` / `insecure` to the per-host TLS settings.
fn add_host_settings(
    hosts: &mut BTreeMap<String, HostSettings>,
    host: &str,
    mirror: &MirrorSettings,
) -> Result<(), HostSettingsConflict> {
    if mirror.ca.is_none() && !mirror.insecure {
        return Ok(());
    }
    let wanted = HostSettings {
        ca: mirror.ca.clone(),
        insecure: mirror.insecure,
    };
    match hosts.get(host) {
        Some(existing) if *existing != wanted => Err(HostSettingsConflict {
            host: host.to_string(),
        }),
        Some(_) => Ok(()),
        None => {
            hosts.insert(host.to_string(), wanted);
            Ok(())
        }
    }
}

fn route_error(field: String, problem: impl Into<String>) -> RouteError {
    RouteError {
        field,
        problem: problem.into(),
    }
}

#[cfg(test)]
#[path = "resolve_through_tests.rs"]
mod tests;
