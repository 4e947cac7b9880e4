//! Short-name aliases (`[aliases]`) as containers/image validates them when it loads a file
//! (`pkg/sysregistriesv2/shortnames.go`, `newShortNameAliasCache`): an invalid alias stops the
//! whole registries.conf from loading.
//!
//! Owns: `validateShortName` for the left side (a repository without tag or digest whose first
//! component is no registry host: no `.`, no `:`, not `localhost`) and `parseShortNameValue`
//! for the right side (empty, which resets an alias, or a fully qualified repository without
//! tag or digest). The grammar is the reference grammar of `crate::reference`; the one place it
//! differs from Go's `reference.Parse` is a first component that has a `.` but is no valid host
//! (`a_b.c/x`), which Go reads as a path and pinhook refuses.

use crate::reference::{is_valid_domain, is_valid_path, Reference, ReferenceError};

pub(super) const RULE: &str = "containers/image sysregistriesv2 newShortNameAliasCache";

/// Why an alias is invalid, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum AliasError {
    #[error("cannot parse short name: {0:?}")]
    CannotParse(String),
    #[error("invalid short name {0:?}: must not contain digest")]
    ShortNameDigest(String),
    #[error("invalid short name {0:?}: must not contain tag")]
    ShortNameTag(String),
    #[error("invalid short name {0:?}: must not contain registry")]
    ShortNameRegistry(String),
    /// Upstream prints the parser's message after the alias; so does this (no source chain).
    #[error("error parsing alias {alias:?}: {error}")]
    ParseAlias {
        alias: String,
        error: ReferenceError,
    },
    #[error("invalid alias {0:?}: must not contain digest")]
    AliasDigest(String),
    #[error("invalid alias {0:?}: must not contain tag")]
    AliasTag(String),
    #[error("invalid alias {0:?}: must contain registry and repository")]
    AliasUnqualified(String),
}

/// The first invalid alias, in document order: its offset and upstream's message.
pub(super) fn validate(aliases: &[(String, String, usize)]) -> Result<(), (usize, String)> {
    for (name, value, offset) in aliases {
        validate_short_name(name).map_err(|e| (*offset, e.to_string()))?;
        if !value.is_empty() {
            parse_short_name_value(value).map_err(|e| (*offset, e.to_string()))?;
        }
    }
    Ok(())
}

/// `validateShortName`.
fn validate_short_name(name: &str) -> Result<(), AliasError> {
    let cannot_parse = || AliasError::CannotParse(name.to_string());
    let (rest, digest) = match name.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (name, None),
    };
    let (repository, tag) = split_tag(rest);
    if let Some(digest) = digest {
        digest
            .parse::<crate::reference::Digest>()
            .map_err(|_| cannot_parse())?;
        return Err(AliasError::ShortNameDigest(name.to_string()));
    }
    if tag.is_some() {
        return Err(AliasError::ShortNameTag(name.to_string()));
    }
    // `reference.Parse` takes the first component as the domain when it is a valid host.
    let (domain, path) = match repository.split_once('/') {
        Some((first, path)) if is_valid_domain(first) => (first, path),
        _ => ("", repository),
    };
    if !is_valid_path(path) {
        return Err(cannot_parse());
    }
    if domain.contains(['.', ':']) || domain == "localhost" {
        return Err(AliasError::ShortNameRegistry(name.to_string()));
    }
    Ok(())
}

/// `parseShortNameValue`.
fn parse_short_name_value(alias: &str) -> Result<(), AliasError> {
    let parsed = Reference::parse(alias).map_err(|error| AliasError::ParseAlias {
        alias: alias.to_string(),
        error,
    })?;
    if parsed.digest().is_some() {
        return Err(AliasError::AliasDigest(alias.to_string()));
    }
    if parsed.tag().is_some() {
        return Err(AliasError::AliasTag(alias.to_string()));
    }
    let qualified = alias
        .split_once('/')
        .is_some_and(|(first, _)| first.contains(['.', ':']) || first == "localhost");
    if !qualified {
        return Err(AliasError::AliasUnqualified(alias.to_string()));
    }
    Ok(())
}

/// `name[:tag]`: the tag colon is the first `:` after the last `/`.
fn split_tag(name: &str) -> (&str, Option<&str>) {
    let start = name.rfind('/').map_or(0, |i| i + 1);
    match name[start..].find(':') {
        Some(i) => (&name[..start + i], Some(&name[start + i + 1..])),
        None => (name, None),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    const DIGEST: &str = "sha256:b87dd5f837112a9e1e9882963a6406387597698268c0ad371b187151a5dfe6bf";

    /// The inputs of containers/image `shortnames_test.go` `TestValidateShortName`, with the
    /// message each gets.
    #[rstest]
    #[case::namespaced("library/fedora", None)]
    #[case::short("fedora", None)]
    #[case::digits("1234567489", None)]
    #[case::host_without_dot_is_a_namespace("quay/foo", None)]
    #[case::registry_and_tag("docker.io/library/fedora:latest", Some("must not contain tag"))]
    #[case::digest("docker.io/library/fedora@DIGEST", Some("must not contain digest"))]
    #[case::tag("fedora:latest", Some("must not contain tag"))]
    #[case::namespace_and_tag("library/fedora:latest", Some("must not contain tag"))]
    #[case::registry("docker.io/library/fedora", Some("must not contain registry"))]
    #[case::localhost_port("localhost:5000/fedora", Some("must not contain registry"))]
    #[case::garbage("$$4455%%", Some("cannot parse"))]
    #[case::transport("docker://foo", Some("cannot parse"))]
    #[case::archive_transport("docker-archive://foo", Some("cannot parse"))]
    #[case::empty("", Some("cannot parse"))]
    #[case::uppercase_path("library/Fedora", Some("cannot parse"))]
    fn short_names(#[case] name: &str, #[case] problem: Option<&str>) {
        let name = name.replace("DIGEST", DIGEST);
        let want = problem.map(|p| match p {
            "cannot parse" => format!("cannot parse short name: {name:?}"),
            p => format!("invalid short name {name:?}: {p}"),
        });
        assert_eq!(
            validate_short_name(&name).err().map(|e| e.to_string()),
            want
        );
    }

    /// The inputs of containers/image `shortnames_test.go` `TestParseShortNameValue`.
    #[rstest]
    #[case::qualified("docker.io/library/fedora", None)]
    #[case::localhost("localhost/fedora", None)]
    #[case::localhost_port("localhost:5000/fedora", None)]
    #[case::localhost_port_namespace("localhost:5000/namespace/fedora", None)]
    #[case::tag("docker.io/library/fedora:latest", Some("must not contain tag"))]
    #[case::digest("docker.io/library/fedora@DIGEST", Some("must not contain digest"))]
    #[case::short("fedora", Some("must contain registry and repository"))]
    #[case::short_and_tag("fedora:latest", Some("must not contain tag"))]
    #[case::no_registry("library/fedora", Some("must contain registry and repository"))]
    #[case::no_registry_and_tag("library/fedora:latest", Some("must not contain tag"))]
    #[case::garbage("$$4455%%", Some("parse"))]
    #[case::transport("docker://foo", Some("parse"))]
    #[case::archive_transport("docker-archive://foo", Some("parse"))]
    #[case::empty("", Some("parse"))]
    fn alias_values(#[case] value: &str, #[case] problem: Option<&str>) {
        let value = value.replace("DIGEST", DIGEST);
        match (
            parse_short_name_value(&value).map_err(|e| e.to_string()),
            problem,
        ) {
            (Ok(()), None) => {}
            (Err(e), Some("parse")) => {
                assert!(
                    e.starts_with(&format!("error parsing alias {value:?}: ")),
                    "{e}"
                )
            }
            (Err(e), Some(p)) => assert_eq!(e, format!("invalid alias {value:?}: {p}")),
            (got, want) => panic!("{value:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn an_empty_value_resets_and_the_first_bad_alias_is_named() {
        let aliases = vec![
            ("busybox".to_string(), String::new(), 10),
            ("alpine".to_string(), "library/alpine".to_string(), 20),
            ("x.example/y".to_string(), "a.example/y".to_string(), 30),
        ];
        assert_eq!(
            validate(&aliases),
            Err((
                20,
                "invalid alias \"library/alpine\": must contain registry and repository".into()
            ))
        );
    }
}
