//! Image references: parsing and normalisation exactly as Docker and containerd do
//! (`distribution/reference` `ParseNormalizedNamed`), plus rendering a pinned reference.
//!
//! Owns: the grammar, Docker Hub normalisation (`docker.io`, `library/`); digests are
//! [`digest`]'s. Never does I/O.

mod digest;

use std::fmt;
use std::str::FromStr;

pub use self::digest::{Algorithm, Digest};

/// The registry Docker Hub references normalise to.
const DEFAULT_DOMAIN: &str = "docker.io";
/// The old Docker Hub host; canonicalised to [`DEFAULT_DOMAIN`].
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
/// Namespace of Docker Hub "official" images (`nginx` → `library/nginx`).
const OFFICIAL_REPO_PREFIX: &str = "library/";
/// `localhost` is always a registry host, even without `.` or `:`.
const LOCALHOST: &str = "localhost";
/// `RepositoryNameTotalLengthMax`; since v0.6.0 it applies to the path only, not the domain.
const MAX_PATH_LEN: usize = 255;
/// `tag := [\w][\w.-]{0,127}`.
const MAX_TAG_LEN: usize = 128;
/// Length of the image-ID–like strings `ParseNormalizedNamed` refuses as names.
const IDENTIFIER_LEN: usize = 64;

/// Why a string is not a valid image reference. Messages name what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("image reference is empty")]
    Empty,
    /// Kept for callers; the parser only uses the specific variants below.
    #[error("invalid reference format")]
    InvalidFormat,
    #[error("image reference has leading or trailing whitespace")]
    SurroundingWhitespace,
    #[error("image reference contains invalid character {0:?}")]
    InvalidCharacter(char),
    #[error("invalid repository name, cannot specify 64-byte hexadecimal strings")]
    HexIdentifier,
    #[error("image name is empty")]
    EmptyName,
    #[error("invalid registry host {0:?}")]
    InvalidDomain(String),
    #[error("invalid registry port in {0:?}: the port must be digits")]
    InvalidPort(String),
    #[error("IPv6 registry host must be in brackets: {0:?}")]
    Ipv6NotBracketed(String),
    #[error("repository name must be lowercase: {0:?}")]
    RepositoryNotLowercase(String),
    #[error("repository path has an empty component")]
    EmptyPathComponent,
    #[error(
        "invalid repository path component {0:?}: use lowercase letters and digits, \
         separated by '.', '_', '__' or dashes"
    )]
    InvalidPathComponent(String),
    #[error("repository name must not be more than 255 characters, got {0}")]
    NameTooLong(usize),
    #[error("tag is empty after ':'")]
    EmptyTag,
    #[error("tag must start with a letter, digit or underscore, got {0:?}")]
    TagInvalidStart(char),
    #[error(
        "tag contains invalid character {0:?}: only letters, digits, '_', '.' and '-' are allowed"
    )]
    TagInvalidCharacter(char),
    #[error("tag longer than 128 characters, got {0}")]
    TagTooLong(usize),
    #[error("digest is empty after '@'")]
    EmptyDigest,
    #[error("unsupported digest algorithm {0:?}")]
    UnsupportedDigestAlgorithm(String),
    #[error("invalid checksum digest format")]
    InvalidDigestFormat,
    #[error("invalid checksum digest length: {algorithm} needs {} hex characters, got {got}", .algorithm.hex_len())]
    InvalidDigestLength { algorithm: Algorithm, got: usize },
}

/// How a pinned reference is written back into the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PinForm {
    /// `name:tag@digest`: the tag stays for humans.
    #[default]
    TagAndDigest,
    /// `name@digest`.
    DigestOnly,
}

/// A normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// The name as written by the user, without tag or digest (`nginx`, `localhost:5000/x`).
    original_name: String,
    /// Normalised domain (`docker.io` for Docker Hub).
    domain: String,
    /// Normalised path (`library/nginx`).
    path: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

// === impl Reference ===

impl Reference {
    /// Parses with Docker's normalisation (`ParseNormalizedNamed`).
    pub fn parse(s: &str) -> Result<Reference, ReferenceError> {
        check_characters(s)?;
        if is_hex_identifier(s) {
            return Err(ReferenceError::HexIdentifier);
        }
        // No part of a name or tag may contain '@', so the first one starts the digest.
        let (name_and_tag, digest) = match s.split_once('@') {
            Some((name_and_tag, digest)) => (name_and_tag, Some(digest)),
            None => (s, None),
        };
        let (name, tag) = split_tag(name_and_tag);
        if name.is_empty() {
            return Err(ReferenceError::EmptyName);
        }

        let (domain, path) = split_docker_domain(name);
        // ParseNormalizedNamed checks case before the grammar, so `upper/Case` gets this error.
        if path.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(ReferenceError::RepositoryNotLowercase(path));
        }
        validate_domain(domain)?;
        validate_path(&path)?;
        if let Some(tag) = tag {
            validate_tag(tag)?;
        }
        let digest = digest.map(parse_digest_part).transpose()?;

        Ok(Reference {
            original_name: name.to_owned(),
            domain: domain.to_owned(),
            path,
            tag: tag.map(str::to_owned),
            digest,
        })
    }

    pub fn original_name(&self) -> &str {
        &self.original_name
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// The tag to resolve: the explicit tag, or `latest` when there is none.
    pub fn effective_tag(&self) -> &str {
        self.tag.as_deref().unwrap_or("latest")
    }

    /// `domain/path`, the normalised repository (what kubelet matches credentials against).
    pub fn repository(&self) -> String {
        self.joined(None)
    }

    /// `domain/path:effective_tag`: what is resolved and cached.
    pub fn tag_reference(&self) -> String {
        self.joined(Some(self.effective_tag()))
    }

    /// The same repository addressed by `digest` alone (no tag): resolving it asks the registry
    /// whether that manifest still exists (the drift watch's check of pinned digests).
    pub fn by_digest(&self, digest: &Digest) -> Reference {
        Reference {
            original_name: self.original_name.clone(),
            domain: self.domain.clone(),
            path: self.path.clone(),
            tag: None,
            digest: Some(digest.clone()),
        }
    }

    /// What a resolution asks for at `/v2/<path>/manifests/<…>`: the effective tag, or the
    /// digest of a reference that has a digest and no tag ([`Self::by_digest`]).
    pub fn manifest(&self) -> String {
        match (&self.tag, &self.digest) {
            (None, Some(digest)) => digest.to_string(),
            _ => self.effective_tag().to_string(),
        }
    }

    /// [`Self::tag_reference`], or `domain/path@digest` for a reference with a digest and no
    /// tag: what a resolution asks for, as the caches key it. A tag never contains `@`, so the
    /// two forms never meet.
    pub fn manifest_reference(&self) -> String {
        match (&self.tag, &self.digest) {
            (None, Some(digest)) => format!("{}@{digest}", self.joined(None)),
            _ => self.tag_reference(),
        }
    }

    /// `domain/path`, then `:tag` when given, in one allocation: both run several times per
    /// image on every review (issue 13).
    fn joined(&self, tag: Option<&str>) -> String {
        let tag_len = tag.map_or(0, |t| t.len() + 1);
        let mut joined = String::with_capacity(self.domain.len() + 1 + self.path.len() + tag_len);
        joined.push_str(&self.domain);
        joined.push('/');
        joined.push_str(&self.path);
        if let Some(tag) = tag {
            joined.push(':');
            joined.push_str(tag);
        }
        joined
    }

    /// The reference as it is written back after pinning: the user's own name, the effective tag
    /// (unless `DigestOnly`) and `digest`.
    pub fn pinned(&self, digest: &Digest, form: PinForm) -> String {
        match form {
            PinForm::TagAndDigest => {
                format!("{}:{}@{digest}", self.original_name, self.effective_tag())
            }
            PinForm::DigestOnly => format!("{}@{digest}", self.original_name),
        }
    }
}

impl FromStr for Reference {
    type Err = ReferenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reference::parse(s)
    }
}

impl fmt::Display for Reference {
    /// The fully normalised form: `domain/path[:tag][@digest]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.domain, self.path)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

// === parsing helpers ===

/// Rejects empty input and anything outside printable ASCII up front: every part of the
/// grammar is ASCII, and doing it once lets the rest work on bytes safely.
fn check_characters(s: &str) -> Result<(), ReferenceError> {
    if s.is_empty() {
        return Err(ReferenceError::Empty);
    }
    if s.trim() != s {
        return Err(ReferenceError::SurroundingWhitespace);
    }
    match s.chars().find(|c| !c.is_ascii_graphic()) {
        Some(c) => Err(ReferenceError::InvalidCharacter(c)),
        None => Ok(()),
    }
}

/// A bare 64-character lowercase hex string looks like an image ID, so Docker refuses it
/// as a name (`anchoredIdentifierRegexp`).
fn is_hex_identifier(s: &str) -> bool {
    s.len() == IDENTIFIER_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Splits `name[:tag]`. The tag colon is the first ':' after the last '/': a domain may hold
/// colons (port, IPv6) but path components never do. With no '/' at all, `host:port` is
/// read as `name:tag`, as Docker does (`localhost:5000` is `library/localhost:5000`).
fn split_tag(name_and_tag: &str) -> (&str, Option<&str>) {
    let last_component = match name_and_tag.rsplit_once('/') {
        Some((_, last)) => last,
        None => name_and_tag,
    };
    let Some((_, tag)) = last_component.split_once(':') else {
        return (name_and_tag, None);
    };
    // `tag` is a suffix of `name_and_tag` preceded by ':', so both strips succeed.
    match name_and_tag
        .strip_suffix(tag)
        .and_then(|rest| rest.strip_suffix(':'))
    {
        Some(name) => (name, Some(tag)),
        None => (name_and_tag, None),
    }
}

/// `splitDockerDomain` (v0.6.0): decides whether the first component is a registry host and
/// applies the Docker Hub rewrites. Returns the domain and the normalised path.
fn split_docker_domain(name: &str) -> (&str, String) {
    let Some((first, rest)) = name.split_once('/') else {
        // A single component is always a Docker Hub official image, even `localhost` or
        // `example.com` (an acknowledged FIXME upstream).
        return (DEFAULT_DOMAIN, format!("{OFFICIAL_REPO_PREFIX}{name}"));
    };
    let (domain, path) = if first == LEGACY_DEFAULT_DOMAIN {
        (DEFAULT_DOMAIN, rest)
    } else if first == LOCALHOST
        || first.contains(['.', ':'])
        // Docker Hub namespaces are lowercase, so an uppercase component must be a host.
        || first.bytes().any(|b| b.is_ascii_uppercase())
    {
        (first, rest)
    } else {
        (DEFAULT_DOMAIN, name)
    };
    if domain == DEFAULT_DOMAIN && !path.contains('/') {
        (domain, format!("{OFFICIAL_REPO_PREFIX}{path}"))
    } else {
        (domain, path.to_owned())
    }
}

/// Whether `domain` is a registry host by the reference grammar (`host[:port]`, a bracketed
/// IPv6 literal allowed): containers/image checks `unqualified-search-registries` entries and
/// short-name aliases against it.
pub(crate) fn is_valid_domain(domain: &str) -> bool {
    validate_domain(domain).is_ok()
}

/// Whether `path` is a repository path by the reference grammar (lowercase components joined
/// by `/`, at most 255 characters).
pub(crate) fn is_valid_path(path: &str) -> bool {
    validate_path(path).is_ok()
}

/// `domain := host [":" port]`, host a DNS-like name or a bracketed IPv6 literal.
///
/// One deliberate difference from Go: a first component such as `my_reg.io` (has a '.', so it
/// is split off as the domain, but is no valid host) is rejected here. Go's `Parse` instead
/// re-reads the whole name as a path and returns an empty domain, which no runtime can pull.
fn validate_domain(domain: &str) -> Result<(), ReferenceError> {
    let port = if let Some(bracketed) = domain.strip_prefix('[') {
        validate_ipv6_host(domain, bracketed)?
    } else {
        if looks_like_bare_ipv6(domain) {
            return Err(ReferenceError::Ipv6NotBracketed(domain.to_owned()));
        }
        let (host, port) = match domain.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (domain, None),
        };
        if !is_domain_name(host) {
            return Err(ReferenceError::InvalidDomain(domain.to_owned()));
        }
        port
    };
    match port {
        Some(port) if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) => {
            Err(ReferenceError::InvalidPort(domain.to_owned()))
        }
        _ => Ok(()),
    }
}

/// Checks `[hex-and-colons]` (given without the opening bracket) and returns the port text
/// after `]:`, if any.
fn validate_ipv6_host<'a>(
    domain: &str,
    bracketed: &'a str,
) -> Result<Option<&'a str>, ReferenceError> {
    let invalid = || ReferenceError::InvalidDomain(domain.to_owned());
    let (address, after) = bracketed.split_once(']').ok_or_else(invalid)?;
    // The grammar deliberately excludes zone identifiers and IPv4-mapped forms.
    if address.is_empty() || !address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
        return Err(invalid());
    }
    if after.is_empty() {
        return Ok(None);
    }
    after.strip_prefix(':').map(Some).ok_or_else(invalid)
}

/// Two or more colons and nothing but hex digits, dots and colons: an unbracketed IPv6
/// address (`::1`), which only gets a clearer error than "invalid registry host".
fn looks_like_bare_ipv6(domain: &str) -> bool {
    domain.bytes().filter(|&b| b == b':').count() >= 2
        && domain
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
}

/// Dot-separated labels `[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]`.
fn is_domain_name(host: &str) -> bool {
    host.split('.').all(|label| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

/// `path-component ("/" path-component)*`, at most 255 characters.
fn validate_path(path: &str) -> Result<(), ReferenceError> {
    for component in path.split('/') {
        if component.is_empty() {
            return Err(ReferenceError::EmptyPathComponent);
        }
        if !is_path_component(component) {
            return Err(ReferenceError::InvalidPathComponent(component.to_owned()));
        }
    }
    if path.len() > MAX_PATH_LEN {
        return Err(ReferenceError::NameTooLong(path.len()));
    }
    Ok(())
}

/// `[a-z0-9]+ (separator [a-z0-9]+)*` with separator `.`, `_`, `__` or `-+`.
fn is_path_component(component: &str) -> bool {
    let is_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let starts_and_ends_alnum = component.starts_with(is_alnum) && component.ends_with(is_alnum);
    // Splitting on the alphanumerics leaves exactly the separator runs (plus empty strings
    // between adjacent alphanumerics); each run must be one allowed separator.
    let separators_ok = component
        .split(is_alnum)
        .all(|run| matches!(run, "" | "." | "_" | "__") || run.bytes().all(|b| b == b'-'));
    starts_and_ends_alnum && separators_ok
}

/// `tag := [\w][\w.-]{0,127}`.
fn validate_tag(tag: &str) -> Result<(), ReferenceError> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut chars = tag.chars();
    match chars.next() {
        None => return Err(ReferenceError::EmptyTag),
        Some(first) if !is_word(first) => return Err(ReferenceError::TagInvalidStart(first)),
        Some(_) => {}
    }
    if let Some(bad) = chars.find(|&c| !is_word(c) && c != '.' && c != '-') {
        return Err(ReferenceError::TagInvalidCharacter(bad));
    }
    let len = tag.chars().count();
    if len > MAX_TAG_LEN {
        return Err(ReferenceError::TagTooLong(len));
    }
    Ok(())
}

/// The text after '@'.
fn parse_digest_part(digest: &str) -> Result<Digest, ReferenceError> {
    if digest.is_empty() {
        return Err(ReferenceError::EmptyDigest);
    }
    digest.parse()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReferenceError as E;

    /// What a test vector expects: the normalised parts, or one specific error.
    #[derive(Debug)]
    enum Want {
        Parts {
            domain: String,
            path: String,
            tag: Option<String>,
            digest: Option<String>,
        },
        Error(ReferenceError),
    }

    fn parts(domain: &str, path: &str, tag: Option<&str>, digest: Option<&str>) -> Want {
        Want::Parts {
            domain: domain.to_owned(),
            path: path.to_owned(),
            tag: tag.map(str::to_owned),
            digest: digest.map(str::to_owned),
        }
    }

    fn name(domain: &str, path: &str) -> Want {
        parts(domain, path, None, None)
    }

    fn tagged(domain: &str, path: &str, tag: &str) -> Want {
        parts(domain, path, Some(tag), None)
    }

    fn error(e: ReferenceError) -> Want {
        Want::Error(e)
    }

    fn repeat(c: char, n: usize) -> String {
        std::iter::repeat_n(c, n).collect()
    }

    fn sha256_a() -> String {
        format!("sha256:{}", repeat('a', 64))
    }

    /// The 29 rows of the spec's §4 table; rows with several inputs get one entry each.
    fn spec_vectors() -> Vec<(u32, String, Want)> {
        let sha = sha256_a();
        let t128 = repeat('t', 128);
        let a255 = repeat('a', 255);
        vec![
            (1, "nginx".into(), name("docker.io", "library/nginx")),
            (
                2,
                "docker.io/nginx".into(),
                name("docker.io", "library/nginx"),
            ),
            (
                3,
                "index.docker.io/library/nginx".into(),
                name("docker.io", "library/nginx"),
            ),
            (
                4,
                "library/nginx".into(),
                name("docker.io", "library/nginx"),
            ),
            (
                5,
                "myorg/app:v1".into(),
                tagged("docker.io", "myorg/app", "v1"),
            ),
            (6, "localhost/foo".into(), name("localhost", "foo")),
            (
                7,
                "localhost:5000/foo".into(),
                name("localhost:5000", "foo"),
            ),
            (
                8,
                "localhost:5000".into(),
                tagged("docker.io", "library/localhost", "5000"),
            ),
            (
                9,
                "foo:5000".into(),
                tagged("docker.io", "library/foo", "5000"),
            ),
            (10, "foo:5000/bar".into(), name("foo:5000", "bar")),
            (11, "UPPER/case".into(), name("UPPER", "case")),
            (
                12,
                "upper/Case".into(),
                error(E::RepositoryNotLowercase("upper/Case".into())),
            ),
            (
                13,
                "Registry.Example.com/team/app".into(),
                name("Registry.Example.com", "team/app"),
            ),
            (14, "[::1]:5000/foo".into(), name("[::1]:5000", "foo")),
            (
                15,
                "[2001:db8::1]:5000/ns/app:tag".into(),
                tagged("[2001:db8::1]:5000", "ns/app", "tag"),
            ),
            (
                16,
                "::1/foo".into(),
                error(E::Ipv6NotBracketed("::1".into())),
            ),
            (
                17,
                format!("nginx@{sha}"),
                parts("docker.io", "library/nginx", None, Some(&sha)),
            ),
            (
                18,
                format!("nginx:1.25@{sha}"),
                parts("docker.io", "library/nginx", Some("1.25"), Some(&sha)),
            ),
            (
                19,
                format!("nginx@sha256:{}", repeat('A', 64)),
                error(E::InvalidDigestFormat),
            ),
            (
                20,
                format!("nginx@sha256:{}", repeat('a', 63)),
                error(E::InvalidDigestLength {
                    algorithm: Algorithm::Sha256,
                    got: 63,
                }),
            ),
            (
                21,
                format!("nginx@md5:{}", repeat('a', 32)),
                error(E::UnsupportedDigestAlgorithm("md5".into())),
            ),
            (
                22,
                format!("nginx:{t128}"),
                tagged("docker.io", "library/nginx", &t128),
            ),
            (
                22,
                format!("nginx:{}", repeat('t', 129)),
                error(E::TagTooLong(129)),
            ),
            (23, "nginx:.bad".into(), error(E::TagInvalidStart('.'))),
            (
                23,
                "nginx:_ok".into(),
                tagged("docker.io", "library/nginx", "_ok"),
            ),
            (24, repeat('a', 64), error(E::HexIdentifier)),
            (24, "0123456789abcdef".repeat(4), error(E::HexIdentifier)),
            (
                25,
                "foo__bar/a--b/c.d_e".into(),
                name("docker.io", "foo__bar/a--b/c.d_e"),
            ),
            (
                25,
                "foo___bar".into(),
                error(E::InvalidPathComponent("foo___bar".into())),
            ),
            (
                25,
                "foo/-bar".into(),
                error(E::InvalidPathComponent("-bar".into())),
            ),
            (
                26,
                format!("example.com/{a255}"),
                name("example.com", &a255),
            ),
            (
                26,
                format!("example.com/{}", repeat('a', 256)),
                error(E::NameTooLong(256)),
            ),
            (
                27,
                "foo:5000:tag".into(),
                error(E::TagInvalidCharacter(':')),
            ),
            (
                28,
                "example.com".into(),
                name("docker.io", "library/example.com"),
            ),
            (
                29,
                "my_registry/ns/img".into(),
                name("docker.io", "my_registry/ns/img"),
            ),
        ]
    }

    fn check(row: u32, input: &str, want: &Want) {
        let got = Reference::parse(input);
        match (want, got) {
            (
                Want::Parts {
                    domain,
                    path,
                    tag,
                    digest,
                },
                Ok(r),
            ) => {
                assert_eq!(r.domain(), domain, "row {row} {input:?}: domain");
                assert_eq!(r.path(), path, "row {row} {input:?}: path");
                assert_eq!(r.tag(), tag.as_deref(), "row {row} {input:?}: tag");
                let got_digest = r.digest().map(ToString::to_string);
                assert_eq!(&got_digest, digest, "row {row} {input:?}: digest");
            }
            (Want::Error(e), Err(got)) => assert_eq!(&got, e, "row {row} {input:?}"),
            (want, got) => panic!("row {row} {input:?}: want {want:?}, got {got:?}"),
        }
    }

    #[test]
    fn spec_vectors_all_rows_present() {
        let mut rows: Vec<u32> = spec_vectors().iter().map(|(row, _, _)| *row).collect();
        rows.dedup();
        assert_eq!(rows, (1..=29).collect::<Vec<_>>());
    }

    #[test]
    fn spec_vectors_parse_as_documented() {
        for (row, input, want) in spec_vectors() {
            check(row, &input, &want);
        }
    }

    #[test]
    fn original_name_is_kept_as_written() {
        let cases = [
            ("nginx", "nginx"),
            ("nginx:1.25", "nginx"),
            ("docker.io/nginx:1", "docker.io/nginx"),
            (
                "Registry.Example.com/team/app:v2",
                "Registry.Example.com/team/app",
            ),
            ("[::1]:5000/foo", "[::1]:5000/foo"),
            ("[::1]:5000/foo:bar", "[::1]:5000/foo"),
            ("localhost:5000", "localhost"),
        ];
        for (input, want) in cases {
            let r = Reference::parse(input).expect(input);
            assert_eq!(r.original_name(), want, "{input:?}");
        }
        let with_digest = format!("localhost:5000/x:y@{}", sha256_a());
        let r = Reference::parse(&with_digest).expect("valid");
        assert_eq!(r.original_name(), "localhost:5000/x");
    }

    #[test]
    fn pinned_tag_and_digest_adds_latest() {
        let d = Digest::new_sha256(&repeat('b', 64)).expect("valid");
        let r = Reference::parse("nginx").expect("valid");
        assert_eq!(
            r.pinned(&d, PinForm::TagAndDigest),
            format!("nginx:latest@sha256:{}", repeat('b', 64))
        );
        assert_eq!(PinForm::default(), PinForm::TagAndDigest);
    }

    #[test]
    fn pinned_digest_only_drops_tag() {
        let d = Digest::new_sha256(&repeat('b', 64)).expect("valid");
        let r = Reference::parse("nginx:1.25").expect("valid");
        assert_eq!(
            r.pinned(&d, PinForm::DigestOnly),
            format!("nginx@sha256:{}", repeat('b', 64))
        );
    }

    #[test]
    fn pinned_keeps_host_and_port() {
        let d = Digest::sha256_of(b"x");
        let r = Reference::parse("localhost:5000/x:y").expect("valid");
        assert_eq!(
            r.pinned(&d, PinForm::TagAndDigest),
            format!("localhost:5000/x:y@{d}")
        );
        assert_eq!(
            r.pinned(&d, PinForm::DigestOnly),
            format!("localhost:5000/x@{d}")
        );
    }

    #[test]
    fn pinned_replaces_an_existing_digest() {
        let old = format!("app:v1@{}", sha256_a());
        let new = Digest::sha256_of(b"new");
        let r = Reference::parse(&old).expect("valid");
        assert_eq!(
            r.pinned(&new, PinForm::TagAndDigest),
            format!("app:v1@{new}")
        );
    }

    #[test]
    fn pinned_output_parses_back() {
        let d = Digest::sha256_of(b"");
        for input in [
            "nginx",
            "localhost:5000",
            "[::1]:5000/foo:bar",
            "UPPER/case:T",
        ] {
            let r = Reference::parse(input).expect(input);
            for form in [PinForm::TagAndDigest, PinForm::DigestOnly] {
                let pinned = Reference::parse(&r.pinned(&d, form)).expect("pinned parses");
                assert_eq!(pinned.repository(), r.repository(), "{input:?}");
                assert_eq!(pinned.digest(), Some(&d), "{input:?}");
            }
        }
    }

    #[test]
    fn tag_reference_uses_latest_by_default() {
        let r = Reference::parse("nginx").expect("valid");
        assert_eq!(r.tag_reference(), "docker.io/library/nginx:latest");
        assert_eq!(r.effective_tag(), "latest");
        assert_eq!(r.repository(), "docker.io/library/nginx");
        let r = Reference::parse("localhost:5000/x:y").expect("valid");
        assert_eq!(r.tag_reference(), "localhost:5000/x:y");
    }

    #[test]
    fn display_is_normalised_and_round_trips() {
        let sha = sha256_a();
        let cases = [
            ("nginx".to_owned(), "docker.io/library/nginx".to_owned()),
            (
                "myorg/app:v1".to_owned(),
                "docker.io/myorg/app:v1".to_owned(),
            ),
            (
                format!("nginx:1.25@{sha}"),
                format!("docker.io/library/nginx:1.25@{sha}"),
            ),
            ("UPPER/case".to_owned(), "UPPER/case".to_owned()),
            ("[::1]:5000/foo:x".to_owned(), "[::1]:5000/foo:x".to_owned()),
            (
                "localhost:5000".to_owned(),
                "docker.io/library/localhost:5000".to_owned(),
            ),
        ];
        for (input, want) in cases {
            let r = Reference::parse(&input).expect("valid");
            let shown = r.to_string();
            assert_eq!(shown, want, "{input:?}");
            let again: Reference = shown.parse().expect("display output parses");
            assert_eq!(again.to_string(), shown);
            assert_eq!(again.domain(), r.domain());
            assert_eq!(again.path(), r.path());
            assert_eq!(again.tag(), r.tag());
            assert_eq!(again.digest(), r.digest());
        }
    }

    #[test]
    fn digest_from_str_accepts_sha256_and_sha512() {
        let d: Digest = sha256_a().parse().expect("valid");
        assert_eq!(d.algorithm(), Algorithm::Sha256);
        assert_eq!(d.hex(), repeat('a', 64));
        assert_eq!(d.to_string(), sha256_a());
        let s512 = format!("sha512:{}", "0123456789abcdef".repeat(8));
        let d: Digest = s512.parse().expect("valid");
        assert_eq!(d.algorithm(), Algorithm::Sha512);
        assert_eq!(d.to_string(), s512);
    }

    #[test]
    fn digest_from_str_rejects_bad_digests() {
        let cases = [
            (String::new(), E::InvalidDigestFormat),
            ("sha256".to_owned(), E::InvalidDigestFormat),
            ("sha256:".to_owned(), E::InvalidDigestFormat),
            (format!(":{}", repeat('a', 64)), E::InvalidDigestFormat),
            (
                format!("sha256:{}", repeat('A', 64)),
                E::InvalidDigestFormat,
            ),
            (
                format!("sha256:{}", repeat('g', 64)),
                E::InvalidDigestFormat,
            ),
            (
                format!("SHA256:{}", repeat('a', 64)),
                E::InvalidDigestFormat,
            ),
            (
                format!("md5:{}", repeat('a', 32)),
                E::UnsupportedDigestAlgorithm("md5".into()),
            ),
            (
                format!("sha384:{}", repeat('a', 64)),
                E::InvalidDigestLength {
                    algorithm: Algorithm::Sha384,
                    got: 64,
                },
            ),
            (
                format!("sha384:{}", repeat('A', 96)),
                E::InvalidDigestFormat,
            ),
            (
                format!("sha3-384:{}", repeat('a', 96)),
                E::UnsupportedDigestAlgorithm("sha3-384".into()),
            ),
            (
                format!("sha256:{}", repeat('a', 65)),
                E::InvalidDigestLength {
                    algorithm: Algorithm::Sha256,
                    got: 65,
                },
            ),
            (
                format!("sha512:{}", repeat('a', 64)),
                E::InvalidDigestLength {
                    algorithm: Algorithm::Sha512,
                    got: 64,
                },
            ),
            (
                format!("sha256:{}é", repeat('a', 63)),
                E::InvalidDigestFormat,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(input.parse::<Digest>(), Err(want), "{input:?}");
        }
    }

    /// go-digest v1.0.0 (`algorithm.go`) registers sha384 next to sha256 and sha512, with
    /// `^[a-f0-9]{96}$`; kubelet and containerd vendor that version, so such pins pull.
    #[rstest::rstest]
    #[case::digest_alone(format!("sha384:{}", "0123456789abcdef".repeat(6)), None)]
    #[case::in_a_reference(
        format!("registry.example/team/app@sha384:{}", "0123456789abcdef".repeat(6)),
        Some("registry.example/team/app")
    )]
    #[case::tag_and_digest(
        format!("nginx:1.25@sha384:{}", "0123456789abcdef".repeat(6)),
        Some("docker.io/library/nginx")
    )]
    fn sha384_is_accepted_as_go_digest_v1_0_0_does(
        #[case] input: String,
        #[case] repository: Option<&str>,
    ) {
        let hex = "0123456789abcdef".repeat(6);
        let digest = match repository {
            None => input.parse::<Digest>().expect("valid sha384 digest"),
            Some(repository) => {
                let r = Reference::parse(&input).expect("valid reference");
                assert_eq!(r.repository(), repository);
                r.digest().cloned().expect("has a digest")
            }
        };
        assert_eq!(digest.algorithm(), Algorithm::Sha384);
        assert_eq!(digest.hex(), hex);
        assert_eq!(digest.to_string(), format!("sha384:{hex}"));
        assert_eq!(Algorithm::Sha384.hex_len(), 96);
    }

    #[test]
    fn digest_errors_read_well() {
        let err = format!("sha256:{}", repeat('a', 63)).parse::<Digest>();
        let msg = err.map(|d| d.to_string()).unwrap_or_else(|e| e.to_string());
        assert_eq!(
            msg,
            "invalid checksum digest length: sha256 needs 64 hex characters, got 63"
        );
        assert_eq!(
            E::UnsupportedDigestAlgorithm("md5".into()).to_string(),
            "unsupported digest algorithm \"md5\""
        );
    }

    #[test]
    fn sha256_of_empty_input() {
        assert_eq!(
            Digest::sha256_of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_sha256_digest_round_trips_through_its_bytes() {
        let digest = Digest::sha256_of(b"pinned");
        let bytes = digest.sha256_bytes();
        assert_eq!(bytes.map(|b| Digest::from_sha256_bytes(&b)), Some(digest));
        let ab = Digest::new_sha256(&"ab".repeat(32)).map(|d| d.sha256_bytes());
        assert_eq!(ab, Ok(Some([0xab; 32])));
        let sha512 = Digest::new(Algorithm::Sha512, &"0f".repeat(64));
        assert_eq!(sha512.map(|d| d.sha256_bytes()), Ok(None));
    }

    #[test]
    fn new_sha256_validates() {
        assert!(Digest::new_sha256(&repeat('0', 64)).is_ok());
        assert_eq!(
            Digest::new_sha256("abc"),
            Err(E::InvalidDigestLength {
                algorithm: Algorithm::Sha256,
                got: 3
            })
        );
    }

    #[test]
    fn specific_errors_for_malformed_references() {
        let cases = [
            ("", E::Empty),
            (" nginx", E::SurroundingWhitespace),
            ("nginx\n", E::SurroundingWhitespace),
            ("ng inx", E::InvalidCharacter(' ')),
            ("ngïnx", E::InvalidCharacter('ï')),
            ("@", E::EmptyName),
            (":", E::EmptyName),
            (":tag", E::EmptyName),
            ("a@", E::EmptyDigest),
            ("a:", E::EmptyTag),
            ("/a", E::EmptyPathComponent),
            ("a/", E::EmptyPathComponent),
            ("a//b", E::EmptyPathComponent),
            ("example.com/", E::EmptyPathComponent),
            ("2001:db8::1/foo", E::Ipv6NotBracketed("2001:db8::1".into())),
            ("[::1/foo", E::InvalidDomain("[::1".into())),
            ("[]/foo", E::InvalidPathComponent("[]".into())),
            ("[::1]x/foo", E::InvalidDomain("[::1]x".into())),
            (
                "[fe80::1%eth0]/foo",
                E::InvalidDomain("[fe80::1%eth0]".into()),
            ),
            ("[::1]:/foo", E::InvalidPort("[::1]:".into())),
            ("foo:/bar", E::InvalidPort("foo:".into())),
            ("foo:50a/bar", E::InvalidPort("foo:50a".into())),
            (":5000/bar", E::InvalidDomain(":5000".into())),
            ("-foo.com/bar", E::InvalidDomain("-foo.com".into())),
            ("foo..com/bar", E::InvalidDomain("foo..com".into())),
            ("my_reg.io/foo", E::InvalidDomain("my_reg.io".into())),
            ("a/B", E::RepositoryNotLowercase("a/B".into())),
            ("example.com/A", E::RepositoryNotLowercase("A".into())),
            ("NGINX", E::RepositoryNotLowercase("library/NGINX".into())),
            ("a/b.", E::InvalidPathComponent("b.".into())),
            ("a/b._c", E::InvalidPathComponent("b._c".into())),
            ("a/b!c", E::InvalidPathComponent("b!c".into())),
            ("nginx:-x", E::TagInvalidStart('-')),
            ("nginx:a+b", E::TagInvalidCharacter('+')),
            ("nginx@@", E::InvalidDigestFormat),
            ("a@b@c", E::InvalidDigestFormat),
        ];
        for (input, want) in cases {
            assert_eq!(Reference::parse(input), Err(want), "{input:?}");
        }
    }

    #[test]
    fn more_accepted_forms() {
        let cases = [
            ("index.docker.io/nginx", "docker.io", "library/nginx"),
            ("docker.io/library/nginx", "docker.io", "library/nginx"),
            ("Docker.io/nginx", "Docker.io", "nginx"),
            ("LOCALHOST/foo", "LOCALHOST", "foo"),
            ("127.0.0.1:5000/a/b/c", "127.0.0.1:5000", "a/b/c"),
            ("[::1]/foo", "[::1]", "foo"),
            ("a-b.example.com/x---y", "a-b.example.com", "x---y"),
            ("gcr.io/distroless/static", "gcr.io", "distroless/static"),
        ];
        for (input, domain, path) in cases {
            let r = Reference::parse(input).expect(input);
            assert_eq!((r.domain(), r.path()), (domain, path), "{input:?}");
        }
        // The path limit counts the `library/` prefix, as upstream does.
        let long = repeat('a', 247);
        assert!(Reference::parse(&long).is_ok());
        assert_eq!(
            Reference::parse(&format!("{long}a")),
            Err(E::NameTooLong(256))
        );
    }

    #[test]
    fn adversarial_inputs_return_errors() {
        let inputs = [
            "@".to_owned(),
            ":".to_owned(),
            "/".to_owned(),
            "[".to_owned(),
            "]".to_owned(),
            "[]".to_owned(),
            "a@".to_owned(),
            "a:".to_owned(),
            "/a".to_owned(),
            "a/".to_owned(),
            "a//b".to_owned(),
            "@sha256:".to_owned(),
            "a:@".to_owned(),
            "[::1]:5000".to_owned(),
            "日本/語".to_owned(),
            "😀".to_owned(),
            "nginx:tåg".to_owned(),
            "nginx@sha256:é".to_owned(),
            "\u{0}".to_owned(),
            repeat('a', 1 << 20),
            "a/".repeat(1 << 18),
            format!("nginx:{}", repeat('t', 1 << 20)),
            format!("nginx@sha256:{}", repeat('a', 1 << 20)),
            format!("{}/x", "a.".repeat(1 << 18)),
            format!("[{}]/x", repeat(':', 1 << 20)) + "/X",
            repeat('@', 1000),
            repeat(':', 1000),
            repeat('/', 1000),
        ];
        for input in inputs {
            let shown: String = input.chars().take(40).collect();
            assert!(Reference::parse(&input).is_err(), "{shown:?} should fail");
        }
    }

    #[test]
    fn a_reference_by_digest_asks_for_the_digest_and_never_shares_a_tag_key() {
        let digest = Digest::sha256_of(b"pinned");
        let tagged = Reference::parse(&format!("Registry.example:5000/team/app:1.0@{digest}"))
            .expect("valid");
        assert_eq!(tagged.manifest(), "1.0");
        assert_eq!(
            tagged.manifest_reference(),
            "Registry.example:5000/team/app:1.0"
        );
        let probe = tagged.by_digest(&digest);
        assert_eq!((probe.tag(), probe.digest()), (None, Some(&digest)));
        assert_eq!(probe.manifest(), digest.to_string());
        assert_eq!(
            probe.manifest_reference(),
            format!("Registry.example:5000/team/app@{digest}")
        );
        assert_eq!(probe.repository(), tagged.repository());
        // Untagged and digest-less: `latest`, as before.
        let bare = Reference::parse("nginx").expect("valid");
        assert_eq!(bare.manifest(), "latest");
        assert_eq!(bare.manifest_reference(), "docker.io/library/nginx:latest");
        assert_eq!(bare.manifest_reference(), bare.tag_reference());
    }

    /// A tiny deterministic fuzzer: strings over the grammar's interesting characters never
    /// panic, and whatever parses survives Display and pinning.
    #[test]
    fn generated_inputs_never_panic_and_round_trip() {
        const ALPHABET: &[u8] = b"aZ0-._:/@[]";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let digest = Digest::sha256_of(b"fuzz");
        for _ in 0..200_000 {
            let len = usize::try_from(next() % 12).unwrap_or(0);
            let input: String = (0..len)
                .filter_map(|_| {
                    let i = usize::try_from(next()).unwrap_or(0) % ALPHABET.len();
                    ALPHABET.get(i).map(|&b| char::from(b))
                })
                .collect();
            let Ok(r) = Reference::parse(&input) else {
                continue;
            };
            let again = Reference::parse(&r.to_string()).expect("display parses");
            assert_eq!(again.to_string(), r.to_string(), "{input:?}");
            for form in [PinForm::TagAndDigest, PinForm::DigestOnly] {
                let pinned = Reference::parse(&r.pinned(&digest, form)).expect("pinned parses");
                assert_eq!(pinned.repository(), r.repository(), "{input:?}");
            }
        }
    }
}
