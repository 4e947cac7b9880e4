//! One registries.conf file (a main file or a `registries.conf.d` drop-in) read exactly as
//! containers/image loads it (`pkg/sysregistriesv2/system_registries_v2.go`, `loadConfigFile`
//! and `postProcessRegistries`): the only reading pinhook has, so what it judges is what CRI-O
//! and podman will use.
//!
//! **Keys** are matched as BurntSushi/toml matches them (exact, else Go `strings.EqualFold`,
//! see `go_toml.rs`): `[[Registry]]`, `Prefix` and `Mirror-By-Digest-Only` are the registry
//! table, its prefix and its digest-only switch to CRI-O, so they are to pinhook. Matching
//! rather than refusing folded keys is deliberate: a digest-only setting is honoured however it
//! is spelled (refusing would deny valid configurations), and the one case where CRI-O's
//! reading is not fixed, two keys of a table that fold to the same field, is refused.
//!
//! **Load errors** are a [`MirrorError`] naming the line and the upstream function, in the
//! order containers/image checks them: TOML syntax and value types (BurntSushi/toml); v1
//! `[registries.*]` in a drop-in ("registry must be in v2 format but is in v1"), v1 mixed with
//! any v2 field ("mixing sysregistry v1/v2 is not supported"), and any v1 main file at all:
//! containers/image v5.40 removed the v1 format (container-libs#1029) and CRI-O built on it
//! fails to start on one (kubevirtci#1845); then per `[[registry]]` in file
//! order: a location or prefix with an `http://`/`https://` scheme (`parseLocation`), both
//! unset, a non-wildcard prefix without location, `pull-from-mirror` on the registry itself, a
//! mirror with a scheme or without location, `mirror-by-digest-only` with a per-mirror
//! `pull-from-mirror`, an unknown `pull-from-mirror`; two registries of one location with
//! conflicting `insecure` or `blocked`; an `unqualified-search-registries` entry with a scheme or
//! not a `host[:port]`; an unknown `short-name-mode`; a wildcard prefix with `/`, `@` or `:`;
//! invalid short-name aliases (`short_names.rs`).
//!
//! **Normalisation** as upstream: trailing `/` trimmed from every location, prefix and mirror;
//! an unset prefix is the location. The first `[[registry]]` of a prefix wins and later ones are
//! kept aside as ignored (containers/image drops them after validating them). A prefix that
//! trims to nothing matches no image.

mod judge;
mod short_names;
#[cfg(test)]
mod tests;

use toml::de::DeTable;

use super::go_toml::{line_column, line_of, DecodeError, Table};
use super::{FileRef, MirrorError};
use crate::reference::is_valid_domain;

pub(super) use judge::judge_files;

const RULE_PARSE_LOCATION: &str = "containers/image sysregistriesv2 parseLocation";
const RULE_POST_PROCESS: &str = "containers/image sysregistriesv2 postProcessRegistries";
const RULE_LOAD: &str = "containers/image sysregistriesv2 loadConfigFile";
const RULE_V1_REMOVED: &str =
    "containers/image sysregistriesv2 v5.40+ (v1 removed; CRI-O fails to start)";
const RULE_SHORT_NAME_MODE: &str = "containers/image sysregistriesv2 parseShortNameMode";

/// The `pull-from-mirror` values containers/image knows.
const PULL_FROM_MIRROR: [&str; 3] = ["all", "digest-only", "tag-only"];

/// A loaded file: what CRI-O uses from it.
#[derive(Debug, Clone)]
pub(super) struct ConfFile {
    pub(super) file: FileRef,
    /// The first `[[registry]]` of each prefix, in file order.
    pub(super) registries: Vec<Registry>,
    /// Later `[[registry]]` entries of a prefix already seen: never used.
    pub(super) ignored: Vec<Ignored>,
}

/// A validated `[[registry]]`.
#[derive(Debug, Clone)]
pub(super) struct Registry {
    pub(super) line: usize,
    pub(super) prefix: String,
    /// Whether `prefix` was written (else it defaulted to `location`): how messages name it.
    pub(super) prefix_written: bool,
    pub(super) location: String,
    pub(super) mirror_by_digest_only: bool,
    pub(super) mirrors: Vec<Mirror>,
}

/// A validated `[[registry.mirror]]`.
#[derive(Debug, Clone)]
pub(super) struct Mirror {
    pub(super) location: String,
    /// `""` (unset), `all`, `digest-only` or `tag-only`.
    pub(super) pull_from_mirror: String,
}

/// A `[[registry]]` containers/image ignores because an earlier one has its prefix.
#[derive(Debug, Clone)]
pub(super) struct Ignored {
    pub(super) line: usize,
    pub(super) prefix: String,
    pub(super) first_line: usize,
}

/// A `[[registry]]` as decoded, before `postProcessRegistries`. Strings are Go's: unset is "".
#[derive(Debug, Clone, Default)]
struct RawRegistry {
    offset: usize,
    /// 0-based position, for `[[registry]] #n` when nothing else names it.
    ordinal: usize,
    prefix: String,
    /// A non-empty prefix was written (else it defaults to the location).
    prefix_written: bool,
    location: String,
    insecure: bool,
    blocked: bool,
    mirror_by_digest_only: bool,
    pull_from_mirror: String,
    mirrors: Vec<RawMirror>,
}

#[derive(Debug, Clone, Default)]
struct RawMirror {
    offset: usize,
    location: String,
    pull_from_mirror: String,
}

/// The decoded document (`tomlConfig`: V2RegistriesConf plus the v1 `[registries]` table).
#[derive(Debug, Default)]
struct RawConf {
    registries: Vec<RawRegistry>,
    /// Offsets of the v2 fields that are set (`hasSetField`), first one first.
    v2_set: Vec<usize>,
    unqualified_search: Vec<(String, usize)>,
    short_name_mode: Option<(String, usize)>,
    aliases: Vec<(String, String, usize)>,
    /// The `[registries]` key's offset when any v1 list is set.
    v1: Option<usize>,
    v1_search: Vec<(String, usize)>,
    v1_block: Vec<(String, usize)>,
    v1_insecure: Vec<(String, usize)>,
}

/// Loads one file as containers/image would; `drop_in` enforces the v2 format.
pub(super) fn load(
    file: &FileRef,
    text: &str,
    doc: &DeTable<'_>,
    drop_in: bool,
) -> Result<ConfFile, MirrorError> {
    let raw = decode(&Table::new(doc, "")).map_err(|e| decode_error(file, text, e))?;
    let fail = |offset: usize, entry: String, problem: String, rule: &'static str| {
        MirrorError::Unloadable {
            file: file.to_string(),
            line: line_of(text, offset),
            entry,
            problem,
            rule,
        }
    };
    let (mut registries, unqualified) =
        match raw.v1 {
            Some(offset) if drop_in => {
                return Err(fail(
                    offset,
                    String::new(),
                    "registry must be in v2 format but is in v1 ([registries.*] in a drop-in)"
                        .to_string(),
                    RULE_LOAD,
                ))
            }
            Some(offset) if !raw.v2_set.is_empty() => return Err(fail(
                raw.v2_set.first().map_or(offset, |&v2| offset.max(v2)),
                String::new(),
                "mixing sysregistry v1/v2 is not supported ([registries.*] next to v2 settings)"
                    .to_string(),
                RULE_LOAD,
            )),
            // containers/image v5.40 removed the v1 format (container-libs#1029): CRI-O built on
            // it refuses to start on such a main file (kubevirtci#1845), so every node that
            // receives it stops running Pods. Older releases converted it (`ConvertToV2`).
            Some(offset) => {
                return Err(fail(
                    offset,
                    String::new(),
                    "v1 format ([registries.*]); write v2 ([[registry]], \
                 unqualified-search-registries)"
                        .to_string(),
                    RULE_V1_REMOVED,
                ))
            }
            None => (raw.registries.clone(), raw.unqualified_search.clone()),
        };
    post_process(&mut registries, &unqualified).map_err(|(o, e, p, r)| fail(o, e, p, r))?;
    if let Some((mode, offset)) = &raw.short_name_mode {
        if !matches!(mode.as_str(), "disabled" | "enforcing" | "permissive") {
            let problem = format!("invalid short-name mode: {mode:?}");
            return Err(fail(*offset, String::new(), problem, RULE_SHORT_NAME_MODE));
        }
    }
    let (kept, ignored) = first_of_each_prefix(registries, text);
    for reg in &kept {
        if reg.prefix.starts_with("*.") && reg.prefix.contains(['/', '@', ':']) {
            let problem = format!(
                "Wildcarded prefix should be in the format: *.example.com. Current prefix {:?} \
                 is incorrectly formatted",
                reg.prefix
            );
            return Err(fail(reg.offset, name(reg), problem, RULE_LOAD));
        }
    }
    short_names::validate(&raw.aliases)
        .map_err(|(offset, problem)| fail(offset, String::new(), problem, short_names::RULE))?;
    Ok(ConfFile {
        file: file.clone(),
        registries: kept.iter().map(|r| validated(r, text)).collect(),
        ignored,
    })
}

/// The file's parse error, named by position.
pub(super) fn syntax_error(file: &FileRef, text: &str, e: &toml::de::Error) -> MirrorError {
    let (line, column) = match e.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            (Some(line), Some(column))
        }
        None => (None, None),
    };
    MirrorError::Toml {
        field: file.field,
        key: file.key.clone(),
        line,
        column,
        message: e.message().trim_end().to_string(),
    }
}

fn decode_error(file: &FileRef, text: &str, e: DecodeError) -> MirrorError {
    let (line, column) = line_column(text, e.offset);
    MirrorError::Toml {
        field: file.field,
        key: file.key.clone(),
        line: Some(line),
        column: Some(column),
        message: e.message,
    }
}

/// BurntSushi/toml's decoding of `tomlConfig`: field types, `hasSetField` of both formats.
fn decode(top: &Table<'_, '_>) -> Result<RawConf, DecodeError> {
    let mut raw = RawConf::default();
    if let Some(tables) = top.tables("registry")? {
        raw.v2_set.push(key_offset(top, "registry"));
        for (ordinal, (table, offset)) in tables.into_iter().enumerate() {
            raw.registries
                .push(decode_registry(&table, offset, ordinal)?);
        }
    }
    if let Some(list) = top.strings("unqualified-search-registries")? {
        raw.v2_set
            .push(key_offset(top, "unqualified-search-registries"));
        raw.unqualified_search = owned(list);
    }
    if top.strings("credential-helpers")?.is_some() {
        raw.v2_set.push(key_offset(top, "credential-helpers"));
    }
    if let Some((mode, offset)) = top.string("short-name-mode")? {
        if !mode.is_empty() {
            raw.v2_set.push(offset);
            raw.short_name_mode = Some((mode.to_string(), offset));
        }
    }
    if let Some((helper, offset)) = top.string("additional-layer-store-auth-helper")? {
        if !helper.is_empty() {
            raw.v2_set.push(offset);
        }
    }
    if let Some(aliases) = top.string_map("aliases")? {
        raw.v2_set.push(key_offset(top, "aliases"));
        raw.aliases = aliases
            .into_iter()
            .map(|(k, v, o)| (k.to_string(), v.to_string(), o))
            .collect();
    }
    raw.v2_set.sort_unstable();
    if let Some((v1, offset)) = top.table("registries")? {
        let mut set = false;
        for (list, field) in [
            (&mut raw.v1_search, "search"),
            (&mut raw.v1_insecure, "insecure"),
            (&mut raw.v1_block, "block"),
        ] {
            if let Some((table, _)) = v1.table(field)? {
                if let Some(entries) = table.strings("registries")? {
                    set = true;
                    *list = owned(entries);
                }
            }
        }
        if set {
            raw.v1 = Some(offset);
        }
    }
    Ok(raw)
}

fn decode_registry(
    table: &Table<'_, '_>,
    offset: usize,
    ordinal: usize,
) -> Result<RawRegistry, DecodeError> {
    let mut mirrors = Vec::new();
    for (mirror, offset) in table.tables("mirror")?.unwrap_or_default() {
        mirrors.push(RawMirror {
            offset,
            location: string(&mirror, "location")?,
            pull_from_mirror: string(&mirror, "pull-from-mirror")?,
        });
        // Decoded for its type only: insecure does not decide tag pulls.
        mirror.bool("insecure")?;
    }
    let prefix = string(table, "prefix")?;
    Ok(RawRegistry {
        offset,
        ordinal,
        prefix_written: !prefix.trim_end_matches('/').is_empty(),
        prefix,
        location: string(table, "location")?,
        insecure: table.bool("insecure")?.unwrap_or(false),
        blocked: table.bool("blocked")?.unwrap_or(false),
        mirror_by_digest_only: table.bool("mirror-by-digest-only")?.unwrap_or(false),
        pull_from_mirror: string(table, "pull-from-mirror")?,
        mirrors,
    })
}

fn string(table: &Table<'_, '_>, field: &str) -> Result<String, DecodeError> {
    Ok(table
        .string(field)?
        .map(|(s, _)| s.to_string())
        .unwrap_or_default())
}

fn owned(list: Vec<(&str, usize)>) -> Vec<(String, usize)> {
    list.into_iter().map(|(s, o)| (s.to_string(), o)).collect()
}

fn key_offset(table: &Table<'_, '_>, field: &str) -> usize {
    table
        .entries(super::go_toml::Keys::BurntSushi, field)
        .first()
        .map_or(0, |(k, _)| k.span().start)
}

/// An error of `postProcessRegistries`: offset, entry name, problem, rule.
type PostProcessError = (usize, String, String, &'static str);

/// A location with a URI scheme, in `parseLocation`'s words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid location '{0}': URI schemes are not supported")]
struct SchemeInLocation(String);

/// `parseLocation`: trailing `/` trimmed; a URI scheme is refused.
fn parse_location(input: &str) -> Result<String, SchemeInLocation> {
    let trimmed = input.trim_end_matches('/');
    if trimmed.starts_with("http://") || trimmed.starts_with("https://") {
        return Err(SchemeInLocation(input.to_string()));
    }
    Ok(trimmed.to_string())
}

/// `postProcessRegistries` minus the de-duplication (done by [`first_of_each_prefix`]).
fn post_process(
    registries: &mut [RawRegistry],
    unqualified: &[(String, usize)],
) -> Result<(), PostProcessError> {
    let located = |reg: &RawRegistry, e: SchemeInLocation| {
        (reg.offset, name(reg), e.to_string(), RULE_PARSE_LOCATION)
    };
    for reg in registries.iter_mut() {
        reg.location = parse_location(&reg.location).map_err(|e| located(reg, e))?;
        if reg.prefix.is_empty() {
            if reg.location.is_empty() {
                let problem = "invalid condition: both location and prefix are unset";
                return Err(post_error(reg, problem.to_string()));
            }
            reg.prefix = reg.location.clone();
        } else {
            reg.prefix = parse_location(&reg.prefix).map_err(|e| located(reg, e))?;
            if !reg.prefix.starts_with("*.") && reg.location.is_empty() {
                let problem = "invalid condition: location is unset and prefix is not in the \
                               format: *.example.com";
                return Err(post_error(reg, problem.to_string()));
            }
        }
        if !reg.pull_from_mirror.is_empty() {
            let problem = format!(
                "pull-from-mirror must not be set for a non-mirror registry {:?}",
                reg.prefix
            );
            return Err(post_error(reg, problem));
        }
        let mirror_by_digest_only = reg.mirror_by_digest_only;
        let prefix = reg.prefix.clone();
        let registry_name = name(reg);
        for (j, mir) in reg.mirrors.iter_mut().enumerate() {
            let at = format!("{registry_name} mirror[{j}]");
            let fail = |problem: String, rule| (mir.offset, at.clone(), problem, rule);
            mir.location = parse_location(&mir.location)
                .map_err(|e| fail(e.to_string(), RULE_PARSE_LOCATION))?;
            if mir.location.is_empty() {
                let problem = "invalid condition: mirror location is unset".to_string();
                return Err(fail(problem, RULE_POST_PROCESS));
            }
            if mirror_by_digest_only && !mir.pull_from_mirror.is_empty() {
                let problem = format!(
                    "cannot set mirror usage mirror-by-digest-only for the registry ({prefix:?}) \
                     and pull-from-mirror for per-mirror ({:?}) at the same time",
                    mir.location
                );
                return Err(fail(problem, RULE_POST_PROCESS));
            }
            let value = mir.pull_from_mirror.as_str();
            if !value.is_empty() && !PULL_FROM_MIRROR.contains(&value) {
                let problem = format!(
                    "unsupported pull-from-mirror value {value:?} for mirror {:?} (expected \
                     \"all\", \"digest-only\" or \"tag-only\")",
                    mir.location
                );
                return Err(fail(problem, RULE_POST_PROCESS));
            }
        }
    }
    // One location (or, without one, one prefix) must agree on insecure and blocked.
    let key = |r: &RawRegistry| {
        if r.location.is_empty() {
            r.prefix.clone()
        } else {
            r.location.clone()
        }
    };
    for reg in registries.iter() {
        for other in registries.iter().filter(|o| key(o) == key(reg)) {
            for (setting, differs) in [
                ("insecure", reg.insecure != other.insecure),
                ("blocked", reg.blocked != other.blocked),
            ] {
                if differs {
                    let problem = format!(
                        "registry '{}' is defined multiple times with conflicting '{setting}' \
                         setting",
                        reg.location
                    );
                    let later = if other.offset > reg.offset {
                        other
                    } else {
                        reg
                    };
                    return Err(post_error(later, problem));
                }
            }
        }
    }
    for (entry, offset) in unqualified {
        let fail = |problem, rule| (*offset, String::new(), problem, rule);
        let registry =
            parse_location(entry).map_err(|e| fail(e.to_string(), RULE_PARSE_LOCATION))?;
        if !is_valid_domain(&registry) {
            let problem = format!("Invalid unqualified-search-registries entry {registry:?}");
            return Err(fail(problem, RULE_POST_PROCESS));
        }
    }
    Ok(())
}

fn post_error(reg: &RawRegistry, problem: String) -> PostProcessError {
    (reg.offset, name(reg), problem, RULE_POST_PROCESS)
}

/// How a registry is named in messages: `[[registry]] prefix="…"`, `[[registry]]
/// location="…"` when the prefix defaulted, `[[registry]] #n` when neither is known yet.
fn name(reg: &RawRegistry) -> String {
    let prefix = reg.prefix.trim_end_matches('/');
    let location = reg.location.trim_end_matches('/');
    if reg.prefix_written {
        format!("[[registry]] prefix={prefix:?}")
    } else if !location.is_empty() {
        format!("[[registry]] location={location:?}")
    } else {
        format!("[[registry]] #{}", reg.ordinal)
    }
}

/// The first registry of each prefix, and the ignored later ones.
fn first_of_each_prefix(
    registries: Vec<RawRegistry>,
    text: &str,
) -> (Vec<RawRegistry>, Vec<Ignored>) {
    let mut kept: Vec<RawRegistry> = Vec::new();
    let mut ignored = Vec::new();
    for reg in registries {
        match kept.iter().find(|k| k.prefix == reg.prefix) {
            Some(first) => ignored.push(Ignored {
                line: line_of(text, reg.offset),
                prefix: reg.prefix.clone(),
                first_line: line_of(text, first.offset),
            }),
            None => kept.push(reg),
        }
    }
    (kept, ignored)
}

fn validated(reg: &RawRegistry, text: &str) -> Registry {
    Registry {
        line: line_of(text, reg.offset),
        prefix_written: reg.prefix_written,
        prefix: reg.prefix.clone(),
        location: reg.location.clone(),
        mirror_by_digest_only: reg.mirror_by_digest_only,
        mirrors: reg
            .mirrors
            .iter()
            .map(|m| Mirror {
                location: m.location.clone(),
                pull_from_mirror: m.pull_from_mirror.clone(),
            })
            .collect(),
    }
}
