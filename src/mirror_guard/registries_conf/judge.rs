//! Which hosts a set of loaded registries.conf files lets answer tag pulls, and how CRI-O
//! merges them (`updateWithConfigurationFrom`).
//!
//! Per effective `[[registry]]` (containers/image `PullSourcesFromReference`):
//!
//! * `location` other than `prefix` rewrites every pull of the prefix, tags included, to the
//!   location: judged as a tag mirror from the prefix to the location. A wildcard prefix with no
//!   location rewrites nothing.
//! * A mirror serves tag pulls unless the registry sets `mirror-by-digest-only` or the mirror's
//!   `pull-from-mirror` is `digest-only` (`all`, `tag-only` and unset serve tags). A mirror at
//!   the prefix itself is the source, and a mirror at the registry's own location is the
//!   redirect already judged: neither is a second finding. `blocked` does not matter: it blocks
//!   the source endpoint, and mirrors are still used.
//!
//! **Merging.** CRI-O reads the main file, then every drop-in in name order, each replacing
//! whole `[[registry]]` entries by prefix. A pod can project any subset of a ConfigMap's keys,
//! so every file is judged as it stands: an entry a later drop-in replaces is reported as a note
//! and still judged (it is live wherever the later file is not projected, and a drop-in must not
//! be able to hide it). A `[[registry]]` containers/image ignores within its file (an earlier one
//! has its prefix) is never used by any reading of that file: a note only.

use super::{ConfFile, Registry};
use crate::mirror_guard::{Judge, RISK};

/// Judges `files` in CRI-O's order: the main file first, then the drop-ins by name.
pub(in crate::mirror_guard) fn judge_files(files: &[ConfFile], judge: &mut Judge<'_>) {
    for (i, file) in files.iter().enumerate() {
        for ignored in &file.ignored {
            judge.note(format!(
                "ConfigMap {} line {}: [[registry]] prefix={:?} is ignored: containers/image \
                 uses the first [[registry]] with that prefix (line {})",
                file.file, ignored.line, ignored.prefix, ignored.first_line
            ));
        }
        for registry in &file.registries {
            if let Some((later, by)) = replacement(&files[i + 1..], &registry.prefix) {
                judge.note(format!(
                    "ConfigMap {} line {}: [[registry]] prefix={:?} is replaced by {} line {} \
                     where both are projected (CRI-O merges drop-ins by prefix); it is judged \
                     on its own all the same",
                    file.file, registry.line, registry.prefix, later.file, by.line
                ));
            }
            judge_registry(file, registry, judge);
        }
    }
}

/// The last later file that has an entry for `prefix`: the one CRI-O keeps.
fn replacement<'f>(later: &'f [ConfFile], prefix: &str) -> Option<(&'f ConfFile, &'f Registry)> {
    later.iter().rev().find_map(|file| {
        file.registries
            .iter()
            .find(|r| r.prefix == prefix)
            .map(|r| (file, r))
    })
}

fn judge_registry(file: &ConfFile, registry: &Registry, judge: &mut Judge<'_>) {
    if registry.prefix.is_empty() {
        // A prefix that trims to "" matches no reference (`refMatchingPrefix`).
        judge.note(format!(
            "ConfigMap {} line {}: [[registry]] has a prefix that matches no image",
            file.file, registry.line
        ));
        return;
    }
    let (label, named) = if registry.prefix_written {
        ("prefix", &registry.prefix)
    } else {
        ("location", &registry.location)
    };
    let name = format!("{} [[registry]] {label}={named:?}", file.file);
    let redirects = !registry.location.is_empty() && registry.location != registry.prefix;
    if redirects {
        let message = format!(
            "ConfigMap {name} redirects tag pulls to its location {}: {RISK}",
            registry.location
        );
        judge.tag_source(name.clone(), &registry.prefix, &registry.location, message);
    }
    for (j, mirror) in registry.mirrors.iter().enumerate() {
        let serves_tags = !registry.mirror_by_digest_only
            && matches!(mirror.pull_from_mirror.as_str(), "" | "all" | "tag-only");
        if !serves_tags
            || mirror.location == registry.prefix
            || mirror.location == registry.location
        {
            continue;
        }
        let entry = format!("{name} mirror[{j}]");
        let message = format!(
            "ConfigMap {entry} lets {} serve tag pulls: {RISK}",
            mirror.location
        );
        judge.tag_source(entry, &registry.prefix, &mirror.location, message);
    }
}
