//! Kubelet's credential keyring: parses docker config secrets and files, and matches their keys to
//! images exactly as kubelet does, so the webhook authenticates the way the node will.
//!
//! Owns: reading `kubernetes.io/dockerconfigjson` / `kubernetes.io/dockercfg` secrets and docker
//! `config.json` files into [`Credential`]s, and kubelet's key matching. The rules are copied from
//! kubernetes `pkg/credentialprovider` (`keyring.go`: `BasicDockerKeyring.Add` and `Lookup`,
//! `isDefaultRegistryMatch`, `ParseSchemelessURL`, `SplitURL`, `URLsMatch`; `config.go`:
//! `DockerConfigEntry.UnmarshalJSON`, `decodeDockerConfigFieldAuth`; `secrets.go`:
//! `MakeDockerKeyring`), down to the Go standard library pieces they lean on (`net/url.Parse`,
//! `net.SplitHostPort`, `path/filepath.Match`, `encoding/json` field folding), because the
//! quirks of those decide which key matches which image.
//!
//! Matching in short: a key gets `https://` unless it has a scheme, is parsed as a URL, loses a
//! leading `/v1/` or `/v2/`, and is stored as host (with port) plus path. An image matches a key
//! when the ports are equal, the hosts have as many `.`-separated labels, every label matches as a
//! glob (`*.example.com`), and the key's path is a string prefix of the image's path. Every
//! matching key is used, in reverse string order (most specific first). When none matches, a
//! Docker Hub image falls back to the key `index.docker.io` (written `https://index.docker.io/v1/`).
//!
//! Never: does I/O, logs, or puts a password or an `auth` value into an error message.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::Ipv6Addr;

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use super::credentials::Credential;
use crate::reference::Reference;

/// `type` of a Secret holding a docker `config.json` (`{"auths": {...}}`).
pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// The data key of a [`SECRET_TYPE_DOCKER_CONFIG_JSON`] secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// `type` of a Secret holding a legacy `~/.dockercfg` (`{...}`, no `auths` wrapper).
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
/// The data key of a [`SECRET_TYPE_DOCKERCFG`] secret.
pub const DOCKERCFG_KEY: &str = ".dockercfg";

/// Names a docker config file read by [`Keyring::from_docker_config_json`] in errors.
const DOCKER_CONFIG_FILE: &str = "docker config.json";
/// kubelet's `defaultRegistryHost`: the stored form of the `https://index.docker.io/v1/` key.
const DEFAULT_REGISTRY_HOST: &[u8] = b"index.docker.io";

/// Why a secret or docker config yields no keyring. Messages never contain credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// kubelet reads pull credentials only from the two docker config secret types.
    #[error(
        "secret type {secret_type:?} holds no registry credentials (kubelet only reads \
         {SECRET_TYPE_DOCKER_CONFIG_JSON} and {SECRET_TYPE_DOCKERCFG} secrets)"
    )]
    UnsupportedType { secret_type: String },
    /// The type is right but its data key is missing or empty (kubelet skips such a secret).
    #[error("secret of type {secret_type} has no {key} data, or it is empty")]
    MissingData {
        secret_type: &'static str,
        key: &'static str,
    },
    /// The document is not JSON, or a value has a type kubelet's decoder rejects.
    #[error("{document} is not a valid docker config: {problem} at line {line}, column {column}")]
    InvalidJson {
        document: &'static str,
        problem: &'static str,
        line: usize,
        column: usize,
    },
    #[error("{document}: the auth field of registry {registry:?} is not valid base64")]
    AuthNotBase64 {
        document: &'static str,
        registry: String,
    },
    #[error(
        "{document}: the auth field of registry {registry:?} does not decode to \
         username:password (no ':')"
    )]
    AuthMissingColon {
        document: &'static str,
        registry: String,
    },
    #[error(
        "{document}: the auth field of registry {registry:?} decodes to a username or password \
         that is not UTF-8"
    )]
    AuthNotUtf8 {
        document: &'static str,
        registry: String,
    },
}

/// Pull credentials with the keys they were written under, matched to images as kubelet does.
///
/// A keyring is a list of layers, each one kubelet `BasicDockerKeyring`: within a layer every key
/// is sorted with the others (most specific first) and the Docker Hub fallback applies to the
/// layer as a whole; layers are consulted in order, as kubelet's `unionDockerKeyring` does. Build
/// the pod's keyring by [`merge`](Keyring::merge)-ing every pull secret into one layer (kubelet
/// adds all of a pod's secrets to one `BasicDockerKeyring`), then [`extend`](Keyring::extend) it
/// with the node's keyring.
#[derive(Clone, Default)]
pub struct Keyring {
    layers: Vec<Layer>,
}

/// One kubelet `BasicDockerKeyring`: stored key → its credentials, in the order they were added.
/// A `BTreeMap` over bytes iterates in Go's string order, which `Lookup` walks in reverse.
#[derive(Clone, Default)]
struct Layer {
    index: BTreeMap<Vec<u8>, Slot>,
}

#[derive(Clone)]
struct Slot {
    /// The stored key parsed again as `Lookup` does (`ParseSchemelessURL`); `None` never matches.
    glob: Option<GoUrl>,
    credentials: Vec<Credential>,
}

/// The two fields of a Go `*url.URL` kubelet reads: `Host` (with port, brackets kept) and the
/// decoded `Path`. Bytes, because Go strings are bytes and percent-decoding may leave non-UTF-8.
#[derive(Clone, Debug, PartialEq, Eq)]
struct GoUrl {
    host: Vec<u8>,
    path: Vec<u8>,
}

// === impl Keyring ===

impl Keyring {
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// Reads a Secret's `type` and `data` (values already base64-decoded): a
    /// `kubernetes.io/dockerconfigjson` secret's `.dockerconfigjson` (`{"auths": {...}}`) or a
    /// `kubernetes.io/dockercfg` secret's `.dockercfg` (`{...}`). Like kubelet, only the data key
    /// that matches the type is read. A secret of another type, or without that data, is an error
    /// for the caller to report; kubelet skips it silently. The result has one layer.
    pub fn from_secret(
        secret_type: &str,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Keyring, KeyringError> {
        let (secret_type, key, format) = match secret_type {
            SECRET_TYPE_DOCKER_CONFIG_JSON => (
                SECRET_TYPE_DOCKER_CONFIG_JSON,
                DOCKER_CONFIG_JSON_KEY,
                Format::ConfigJson,
            ),
            SECRET_TYPE_DOCKERCFG => (SECRET_TYPE_DOCKERCFG, DOCKERCFG_KEY, Format::Dockercfg),
            other => {
                return Err(KeyringError::UnsupportedType {
                    secret_type: other.to_owned(),
                })
            }
        };
        match data.get(key) {
            Some(bytes) if !bytes.is_empty() => Keyring::parse(bytes, format, key),
            _ => Err(KeyringError::MissingData { secret_type, key }),
        }
    }

    /// Reads a docker `config.json` (`{"auths": {...}}`), such as `~/.docker/config.json` or a
    /// node's `/var/lib/kubelet/config.json`. Entries with no usable credential, such as the
    /// empty `{}` entries docker writes when the secret lives in a `credsStore` or `credHelpers`,
    /// are skipped. The result has one layer.
    pub fn from_docker_config_json(bytes: &[u8]) -> Result<Keyring, KeyringError> {
        Keyring::parse(bytes, Format::ConfigJson, DOCKER_CONFIG_FILE)
    }

    /// Adds one credential under `key` as written in a docker config (`quay.io/org`,
    /// `https://index.docker.io/v1/`, `*.example.com:5000`), to the last layer. A key Go's URL
    /// parser rejects is ignored, as kubelet ignores it.
    pub fn add(&mut self, key: &str, credential: Credential) {
        self.last_layer().add(key, credential);
    }

    /// Adds every entry of `other` to this keyring's last layer, as kubelet adds all of a pod's
    /// pull secrets to one `BasicDockerKeyring`: their keys are then ordered together (a
    /// `quay.io/org` key of the second secret comes before a `quay.io` key of the first) and the
    /// Docker Hub fallback applies only if no key of any of them matched.
    pub fn merge(&mut self, other: Keyring) {
        let layer = self.last_layer();
        for other_layer in other.layers {
            for (key, slot) in other_layer.index {
                match layer.index.get_mut(&key) {
                    Some(existing) => existing.credentials.extend(slot.credentials),
                    None => {
                        layer.index.insert(key, slot);
                    }
                }
            }
        }
    }

    /// Appends `other`'s layers after this keyring's, as kubelet's union of the pod's keyring
    /// (first) and the node's keyring: each is looked up on its own, results concatenated.
    pub fn extend(&mut self, other: Keyring) {
        self.layers.extend(other.layers);
    }

    /// Every credential for `reference`, in kubelet's order: layer by layer, within a layer every
    /// key that matches the image from the most specific (reverse string order) on, or, when none
    /// does and the image is on Docker Hub, the `index.docker.io` entries. A credential that
    /// appears twice is kept only at its first place.
    pub fn lookup(&self, reference: &Reference) -> Vec<Credential> {
        // kubelet looks up `named.Name()`: the normalised repository without tag or digest.
        let image = reference.repository();
        let target = parse_schemeless_url(image.as_bytes());
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for layer in &self.layers {
            for credential in layer.lookup(&image, target.as_ref()) {
                if seen.insert(credential) {
                    found.push(credential.clone());
                }
            }
        }
        found
    }

    /// True when no layer holds any credential.
    pub fn is_empty(&self) -> bool {
        self.layers.iter().all(|layer| layer.index.is_empty())
    }

    fn last_layer(&mut self) -> &mut Layer {
        if self.layers.is_empty() {
            self.layers.push(Layer::default());
        }
        let last = self.layers.len() - 1;
        &mut self.layers[last]
    }

    fn parse(
        bytes: &[u8],
        format: Format,
        document: &'static str,
    ) -> Result<Keyring, KeyringError> {
        let invalid = |err: serde_json::Error| KeyringError::InvalidJson {
            document,
            problem: match err.classify() {
                serde_json::error::Category::Syntax => "malformed JSON",
                serde_json::error::Category::Eof => "unexpected end of JSON",
                serde_json::error::Category::Data => "a value has the wrong type",
                serde_json::error::Category::Io => "unreadable input",
            },
            line: err.line(),
            column: err.column(),
        };
        let auths = match format {
            Format::ConfigJson => {
                serde_json::from_slice::<ConfigJson>(bytes)
                    .map_err(invalid)?
                    .0
            }
            Format::Dockercfg => serde_json::from_slice::<AuthMap>(bytes).map_err(invalid)?,
        };
        if let Some((registry, problem)) = auths.first_error {
            return Err(problem.into_error(document, &registry));
        }
        let mut layer = Layer::default();
        for (registry, credential) in auths.entries.unwrap_or_default() {
            if let Some(credential) = credential {
                layer.add(&registry, credential);
            }
        }
        Ok(Keyring {
            layers: vec![layer],
        })
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.layers).finish()
    }
}

// === impl Layer ===

impl Layer {
    /// kubelet `BasicDockerKeyring.Add` for one entry.
    fn add(&mut self, key: &str, credential: Credential) {
        let Some(stored) = stored_key(key) else {
            return;
        };
        self.index
            .entry(stored)
            .or_insert_with_key(|stored| Slot {
                glob: parse_schemeless_url(stored),
                credentials: Vec::new(),
            })
            .credentials
            .push(credential);
    }

    /// kubelet `BasicDockerKeyring.Lookup`.
    fn lookup<'a>(&'a self, image: &str, target: Option<&GoUrl>) -> Vec<&'a Credential> {
        let mut found: Vec<&Credential> = Vec::new();
        if let Some(target) = target {
            for slot in self.index.values().rev() {
                if slot
                    .glob
                    .as_ref()
                    .is_some_and(|glob| urls_match(glob, target))
                {
                    found.extend(&slot.credentials);
                }
            }
        }
        if found.is_empty() && is_default_registry_match(image) {
            if let Some(slot) = self.index.get(DEFAULT_REGISTRY_HOST) {
                found.extend(&slot.credentials);
            }
        }
        found
    }
}

impl fmt::Debug for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.index
                    .iter()
                    .map(|(key, slot)| (String::from_utf8_lossy(key), &slot.credentials)),
            )
            .finish()
    }
}

// === kubelet's key handling (keyring.go) ===

/// The key `Add` stores for `loc`: `https://` added unless it starts with `https://` or `http://`
/// (case-sensitively), parsed by Go's `url.Parse`, a leading `/v2/` or `/v1/` cut to `/`, then
/// host + path, or the host alone when the path is empty or `/`. `None` when Go cannot parse it.
fn stored_key(loc: &str) -> Option<Vec<u8>> {
    let parsed = if loc.starts_with("https://") || loc.starts_with("http://") {
        parse_go_url(loc.as_bytes())?
    } else {
        parse_schemeless_url(loc.as_bytes())?
    };
    let mut path = parsed.path.as_slice();
    if path.starts_with(b"/v2/") || path.starts_with(b"/v1/") {
        path = &path[3..];
    }
    let mut key = parsed.host;
    if !path.is_empty() && path != b"/" {
        key.extend_from_slice(path);
    }
    Some(key)
}

/// `ParseSchemelessURL`: `url.Parse("https://" + s)` (the scheme is then dropped; unused here).
fn parse_schemeless_url(schemeless: &[u8]) -> Option<GoUrl> {
    let mut raw = b"https://".to_vec();
    raw.extend_from_slice(schemeless);
    parse_go_url(&raw)
}

/// `URLsMatch(glob, target)`: equal ports, as many host labels, the glob's path a string prefix
/// of the target's, and every label matching as a `filepath.Match` pattern. A malformed pattern
/// is no match (kubelet's `Lookup` discards the error).
fn urls_match(glob: &GoUrl, target: &GoUrl) -> bool {
    let (glob_labels, glob_port) = split_url(&glob.host);
    let (target_labels, target_port) = split_url(&target.host);
    glob_port == target_port
        && glob_labels.len() == target_labels.len()
        && target.path.starts_with(&glob.path)
        && glob_labels
            .iter()
            .zip(&target_labels)
            .all(|(pattern, label)| go_filepath_match(pattern, label) == Ok(true))
}

/// `SplitURL`: `net.SplitHostPort` of the host, or the whole host and no port when that fails
/// (as it does for a bracketed IPv6 host without a port, whose brackets then stay), then the host
/// split on `.`.
fn split_url(host: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let (name, port) = go_split_host_port(host).unwrap_or((host, b""));
    (name.split(|&b| b == b'.').collect(), port)
}

/// `isDefaultRegistryMatch` on the repository name kubelet looks up: true without a `/`, for a
/// first component `docker.io` or `index.docker.io`, and for any first component with no `.` or
/// `:` — so `localhost/x` (or an upper-case single-label host) counts as Docker Hub too.
fn is_default_registry_match(image: &str) -> bool {
    let (first, rest) = match image.split_once('/') {
        Some((first, rest)) => (first, Some(rest)),
        None => (image, None),
    };
    if first.is_empty() {
        return false;
    }
    if rest.is_none() || first == "docker.io" || first == "index.docker.io" {
        return true;
    }
    !first.contains(['.', ':'])
}

// === Go's net/url.Parse, for "http(s)://..." input ===

#[derive(Clone, Copy, PartialEq, Eq)]
enum Escaping {
    Path,
    Host,
    Zone,
    UserPassword,
    Fragment,
}

/// Go's `url.Parse` for input starting `https://` or `http://` (all kubelet ever gives it here),
/// reduced to the `Host` and `Path` it returns; `None` where Go returns an error.
fn parse_go_url(raw: &[u8]) -> Option<GoUrl> {
    // The scheme (validated by the prefix) has no '#', '?' or control byte, so it can go first.
    let rest = raw
        .strip_prefix(b"https://")
        .or_else(|| raw.strip_prefix(b"http://"))?;
    let (url, fragment) = cut(rest, b'#');
    if url.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return None;
    }
    let (url, _query) = cut(url, b'?');
    let (authority, path) = match url.iter().position(|&b| b == b'/') {
        Some(i) => url.split_at(i),
        None => (url, &b""[..]),
    };
    let host = parse_authority(authority)?;
    let path = unescape(path, Escaping::Path)?;
    if let Some(fragment) = fragment {
        unescape(fragment, Escaping::Fragment)?;
    }
    Some(GoUrl { host, path })
}

/// `parseAuthority`: the host after the last `@`; the userinfo before it must still be valid.
fn parse_authority(authority: &[u8]) -> Option<Vec<u8>> {
    let Some(at) = authority.iter().rposition(|&b| b == b'@') else {
        return parse_host(authority);
    };
    let host = parse_host(&authority[at + 1..])?;
    let userinfo = &authority[..at];
    if !userinfo
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b))
    {
        return None;
    }
    let (username, password) = cut(userinfo, b':');
    unescape(username, Escaping::UserPassword)?;
    if let Some(password) = password {
        unescape(password, Escaping::UserPassword)?;
    }
    Some(host)
}

/// `parseHost`: `host[:port]`, the host a name or a bracketed IPv6 literal with optional zone.
fn parse_host(host: &[u8]) -> Option<Vec<u8>> {
    if host.first() == Some(&b'[') {
        let close = host.iter().rposition(|&b| b == b']')?;
        if !valid_optional_port(&host[close + 1..]) {
            return None;
        }
        let zone = find(&host[..close], b"%25");
        // Since the CVE-2025-47912 fix (Go 1.24.8, 1.25.2) only an IPv6 address may be bracketed.
        let address = &host[1..zone.unwrap_or(close).max(1)];
        std::str::from_utf8(address)
            .ok()?
            .parse::<Ipv6Addr>()
            .ok()?;
        if let Some(zone) = zone {
            let mut decoded = unescape(&host[..zone], Escaping::Host)?;
            decoded.extend(unescape(&host[zone..close], Escaping::Zone)?);
            decoded.extend(unescape(&host[close..], Escaping::Host)?);
            return Some(decoded);
        }
    } else if let Some(colon) = host.iter().rposition(|&b| b == b':') {
        if !valid_optional_port(&host[colon..]) {
            return None;
        }
    }
    unescape(host, Escaping::Host)
}

/// `validOptionalPort`: empty, or `:` followed by digits only (possibly none).
fn valid_optional_port(port: &[u8]) -> bool {
    match port.split_first() {
        None => true,
        Some((&b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

/// Go's `unescape`: checks every `%XX` (and, in a host, every byte), then decodes.
fn unescape(s: &[u8], mode: Escaping) -> Option<Vec<u8>> {
    let host_like = matches!(mode, Escaping::Host | Escaping::Zone);
    let mut decoded = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b == b'%' {
            let (hi, lo) = match (s.get(i + 1), s.get(i + 2)) {
                (Some(&hi), Some(&lo)) => (unhex(hi)?, unhex(lo)?),
                _ => return None,
            };
            let is_25 = &s[i..i + 3] == b"%25";
            // In a host only non-ASCII bytes (and `%25`) may be escaped.
            if mode == Escaping::Host && hi < 8 && !is_25 {
                return None;
            }
            let value = (hi << 4) | lo;
            if mode == Escaping::Zone && !is_25 && value != b' ' && should_escape_in_host(value) {
                return None;
            }
            decoded.push(value);
            i += 3;
        } else {
            if host_like && b != b'+' && b < 0x80 && should_escape_in_host(b) {
                return None;
            }
            decoded.push(b);
            i += 1;
        }
    }
    Some(decoded)
}

/// Go's `shouldEscape(c, encodeHost)`: true for an ASCII byte a host may not hold as it is.
fn should_escape_in_host(c: u8) -> bool {
    !(c.is_ascii_alphanumeric() || b"!$&'()*+,;=:[]<>\"-_.~".contains(&c))
}

fn unhex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `strings.Cut` on one byte.
fn cut(s: &[u8], separator: u8) -> (&[u8], Option<&[u8]>) {
    match s.iter().position(|&b| b == separator) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// === Go's net.SplitHostPort ===

/// `net.SplitHostPort`: `None` where Go returns an error (no port, misplaced brackets, a colon
/// in an unbracketed host). Brackets around the host are removed.
fn go_split_host_port(hostport: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = hostport.iter().rposition(|&b| b == b':')?;
    let (host, open_from, close_from) = if hostport.first() == Some(&b'[') {
        let end = hostport.iter().position(|&b| b == b']')?;
        if end + 1 != colon {
            // Either nothing follows `]`, or something other than the last colon does.
            return None;
        }
        (&hostport[1..end], 1, end + 1)
    } else {
        let host = &hostport[..colon];
        if host.contains(&b':') {
            return None;
        }
        (host, 0, 0)
    };
    if hostport[open_from..].contains(&b'[') || hostport[close_from..].contains(&b']') {
        return None;
    }
    Some((host, &hostport[colon + 1..]))
}

// === Go's path/filepath.Match (Unix) ===

/// `filepath.Match` was handed a malformed pattern.
#[derive(Debug, PartialEq, Eq)]
struct BadPattern;

const SEPARATOR: u8 = b'/';
const RUNE_ERROR: u32 = 0xFFFD;

/// Go's `filepath.Match(pattern, name)` on Unix: `*` (any run of non-`/` bytes), `?` (one
/// character), `[...]` / `[^...]` classes with ranges, `\` escapes. Works on bytes, decoding
/// UTF-8 where Go decodes runes; like Go, reports a malformed pattern only when it gets that far.
fn go_filepath_match(mut pattern: &[u8], mut name: &[u8]) -> Result<bool, BadPattern> {
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing * matches the rest of the name unless it has a separator.
            return Ok(!name.contains(&SEPARATOR));
        }
        // Look for a match at the current position.
        match match_chunk(chunk, name) {
            // The last chunk must use up the name; otherwise a star may still do it.
            Ok(Some(t)) if t.is_empty() || !pattern.is_empty() => {
                name = t;
                continue;
            }
            Err(err) => return Err(err),
            _ => {}
        }
        if star {
            // Look for a match skipping i+1 bytes; the star cannot skip a separator.
            let mut i = 0;
            while i < name.len() && name[i] != SEPARATOR {
                match match_chunk(chunk, &name[i + 1..]) {
                    Ok(Some(t)) => {
                        if pattern.is_empty() && !t.is_empty() {
                            i += 1;
                            continue;
                        }
                        name = t;
                        continue 'pattern;
                    }
                    Err(err) => return Err(err),
                    Ok(None) => {}
                }
                i += 1;
            }
        }
        // Before reporting no match, check the rest of the pattern is well formed.
        while !pattern.is_empty() {
            let (_, chunk, rest) = scan_chunk(pattern);
            pattern = rest;
            match_chunk(chunk, b"")?;
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// `scanChunk`: leading stars, then everything up to the next star outside a class.
fn scan_chunk(mut pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let mut star = false;
    while let Some((&b'*', rest)) = pattern.split_first() {
        pattern = rest;
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            // An error check for a trailing backslash happens in match_chunk.
            b'\\' if i + 1 < pattern.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &pattern[..i], &pattern[i..])
}

/// `matchChunk`: the rest of `s` after matching `chunk` at its start, `None` for no match. Goes
/// on checking the chunk's syntax after a mismatch, as Go does.
fn match_chunk<'a>(mut chunk: &[u8], mut s: &'a [u8]) -> Result<Option<&'a [u8]>, BadPattern> {
    let mut failed = false;
    while let Some(&c) = chunk.first() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match c {
            b'[' => {
                let mut r = 0;
                if !failed {
                    let (rune, n) = decode_rune(s);
                    r = rune;
                    s = &s[n..];
                }
                chunk = &chunk[1..];
                let mut negated = false;
                if let Some((&b'^', rest)) = chunk.split_first() {
                    negated = true;
                    chunk = rest;
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if ranges > 0 {
                        if let Some((&b']', rest)) = chunk.split_first() {
                            chunk = rest;
                            break;
                        }
                    }
                    let (lo, rest) = get_esc(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if let Some((&b'-', rest)) = chunk.split_first() {
                        let (h, rest) = get_esc(rest)?;
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            b'?' => {
                if !failed {
                    if s.first() == Some(&SEPARATOR) {
                        failed = true;
                    }
                    let (_, n) = decode_rune(s);
                    s = &s[n..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                if c == b'\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return Err(BadPattern);
                    }
                }
                if !failed {
                    if chunk.first() != s.first() {
                        failed = true;
                    }
                    s = &s[1..];
                }
                chunk = &chunk[1..];
            }
        }
    }
    Ok(if failed { None } else { Some(s) })
}

/// `getEsc`: one possibly escaped character of a class, and what follows it (which must not be
/// empty: a class needs its `]`).
fn get_esc(chunk: &[u8]) -> Result<(u32, &[u8]), BadPattern> {
    let mut chunk = match chunk.first() {
        None | Some(b'-') | Some(b']') => return Err(BadPattern),
        Some(_) => chunk,
    };
    if chunk[0] == b'\\' {
        chunk = &chunk[1..];
        if chunk.is_empty() {
            return Err(BadPattern);
        }
    }
    let (r, n) = decode_rune(chunk);
    let rest = &chunk[n..];
    if (r == RUNE_ERROR && n == 1) || rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((r, rest))
}

/// Go's `utf8.DecodeRune`: the first character and its length; `(RuneError, 1)` for a byte that
/// starts no valid UTF-8 sequence, `(RuneError, 0)` for empty input.
fn decode_rune(s: &[u8]) -> (u32, usize) {
    if s.is_empty() {
        return (RUNE_ERROR, 0);
    }
    for len in 1..=s.len().min(4) {
        if let Ok(text) = std::str::from_utf8(&s[..len]) {
            if let Some(c) = text.chars().next() {
                return (u32::from(c), len);
            }
        }
    }
    (RUNE_ERROR, 1)
}

// === the JSON kubelet reads (config.go) ===

#[derive(Clone, Copy)]
enum Format {
    /// `DockerConfigJSON`: `{"auths": {...}, "HttpHeaders": {...}}`.
    ConfigJson,
    /// `DockerConfig`: the `auths` map itself.
    Dockercfg,
}

/// kubelet's `DockerConfigJSON` (`{"auths": {...}, "HttpHeaders": {...}}`), decoded as Go's
/// `encoding/json` decodes it: field names match case-insensitively, a repeated `auths` adds to
/// the map and `null` resets it, unknown fields (`credsStore`, `credHelpers`, ...) are ignored,
/// and a known field of the wrong type fails. Only the `auths` map is kept.
struct ConfigJson(AuthMap);

/// kubelet's `DockerConfig`: registry key → its credential (`None`: the entry has none). A
/// repeated key keeps its last entry, but an `auth` that fails to decode fails the document even
/// when a later entry replaces it: Go keeps the first `UnmarshalJSON` error and returns it.
#[derive(Default)]
struct AuthMap {
    /// `None` for a JSON `null` (a nil Go map).
    entries: Option<BTreeMap<String, Option<Credential>>>,
    first_error: Option<(String, AuthProblem)>,
}

/// One entry as `DockerConfigEntry.UnmarshalJSON` leaves it.
struct Entry(Result<Option<Credential>, AuthProblem>);

/// kubelet's `dockerConfigEntryWithAuth`. `email` is read (it must be a string) and dropped.
/// `identitytoken` and `registrytoken` are ignored: kubelet does not read them from pull secrets
/// either, and this resolver does not support identity tokens yet.
#[derive(Default)]
struct RawEntry {
    username: String,
    password: String,
    auth: String,
}

impl AuthMap {
    fn absorb(&mut self, other: AuthMap) {
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        match other.entries {
            None => self.entries = None,
            Some(entries) => self
                .entries
                .get_or_insert_with(BTreeMap::new)
                .extend(entries),
        }
    }
}

impl<'de> Deserialize<'de> for ConfigJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ConfigJsonVisitor;

        impl<'de> Visitor<'de> for ConfigJsonVisitor {
            type Value = ConfigJson;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a docker config object")
            }

            fn visit_unit<E>(self) -> Result<ConfigJson, E> {
                Ok(ConfigJson(AuthMap::default()))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ConfigJson, A::Error> {
                let mut auths = AuthMap::default();
                while let Some(key) = map.next_key::<String>()? {
                    if go_json_field_is(&key, "auths") {
                        auths.absorb(map.next_value::<AuthMap>()?);
                    } else if go_json_field_is(&key, "httpheaders") {
                        // Unused, but kubelet fails on a value that is not a string map.
                        map.next_value::<Option<BTreeMap<String, Option<String>>>>()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ConfigJson(auths))
            }
        }

        deserializer.deserialize_any(ConfigJsonVisitor)
    }
}

impl<'de> Deserialize<'de> for AuthMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AuthMapVisitor;

        impl<'de> Visitor<'de> for AuthMapVisitor {
            type Value = AuthMap;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of registry credentials")
            }

            fn visit_unit<E>(self) -> Result<AuthMap, E> {
                Ok(AuthMap::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AuthMap, A::Error> {
                let mut entries = BTreeMap::new();
                let mut first_error = None;
                while let Some((registry, Entry(entry))) = map.next_entry::<String, Entry>()? {
                    match entry {
                        Ok(credential) => {
                            entries.insert(registry, credential);
                        }
                        Err(problem) => {
                            if first_error.is_none() {
                                first_error = Some((registry.clone(), problem));
                            }
                            entries.insert(registry, None);
                        }
                    }
                }
                Ok(AuthMap {
                    entries: Some(entries),
                    first_error,
                })
            }
        }

        deserializer.deserialize_any(AuthMapVisitor)
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = Entry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a registry credential object")
            }

            /// Go hands `null` to `UnmarshalJSON`, which leaves every field empty.
            fn visit_unit<E>(self) -> Result<Entry, E> {
                Ok(Entry(Ok(None)))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                let mut entry = RawEntry::default();
                while let Some(key) = map.next_key::<String>()? {
                    let field = if go_json_field_is(&key, "username") {
                        &mut entry.username
                    } else if go_json_field_is(&key, "password") {
                        &mut entry.password
                    } else if go_json_field_is(&key, "auth") {
                        &mut entry.auth
                    } else if go_json_field_is(&key, "email") {
                        map.next_value::<Option<String>>()?;
                        continue;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    // A `null` leaves a Go string as it was.
                    if let Some(value) = map.next_value::<Option<String>>()? {
                        *field = value;
                    }
                }
                Ok(Entry(entry.credential()))
            }
        }

        deserializer.deserialize_any(EntryVisitor)
    }
}

/// Whether `encoding/json` decodes the object key `key` into the field tagged `field` (lower-case
/// ASCII): equal after folding case, where Go folds `a`-`z` to upper case and a non-ASCII rune to
/// the smallest rune of its case-fold set — so the Kelvin sign is `K` and the long s `ſ` is `S`.
fn go_json_field_is(key: &str, field: &str) -> bool {
    let mut key = key.chars();
    for expected in field.bytes() {
        let folded = match key.next() {
            Some(c) if c.is_ascii() => c.to_ascii_uppercase(),
            Some('\u{212A}') => 'K',
            Some('\u{17F}') => 'S',
            _ => return false,
        };
        if folded != char::from(expected.to_ascii_uppercase()) {
            return false;
        }
    }
    key.next().is_none()
}

// === impl RawEntry ===

/// Go's `base64.StdEncoding`: padding required where due; like Go's non-strict decoding, the
/// unused low bits of the last character may be set.
const BASE64_PADDED: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);
/// Go's `base64.RawStdEncoding`: no padding at all.
const BASE64_UNPADDED: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

impl RawEntry {
    /// `DockerConfigEntry.UnmarshalJSON`: a non-empty `auth` wins over `username`/`password`.
    /// `None` when the entry carries no credential at all (kubelet keeps it as an empty one,
    /// which a pull treats as anonymous; leaving it out lets the next key answer instead).
    fn credential(self) -> Result<Option<Credential>, AuthProblem> {
        let (username, password) = if self.auth.is_empty() {
            (self.username, self.password)
        } else {
            decode_auth(&self.auth)?
        };
        if username.is_empty() && password.is_empty() {
            return Ok(None);
        }
        Ok(Some(Credential::basic(username, password)))
    }
}

enum AuthProblem {
    NotBase64,
    MissingColon,
    NotUtf8,
}

impl AuthProblem {
    fn into_error(self, document: &'static str, registry: &str) -> KeyringError {
        let registry = registry.to_owned();
        match self {
            AuthProblem::NotBase64 => KeyringError::AuthNotBase64 { document, registry },
            AuthProblem::MissingColon => KeyringError::AuthMissingColon { document, registry },
            AuthProblem::NotUtf8 => KeyringError::AuthNotUtf8 { document, registry },
        }
    }
}

/// `decodeDockerConfigFieldAuth`: padded base64 when the trimmed value ends in `=`, unpadded
/// otherwise (Go's decoders skip `\r` and `\n` anywhere), split on the first `:`.
fn decode_auth(field: &str) -> Result<(String, String), AuthProblem> {
    let cleaned: Vec<u8> = field
        .bytes()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect();
    let engine = if field.trim().ends_with('=') {
        &BASE64_PADDED
    } else {
        &BASE64_UNPADDED
    };
    let decoded = engine.decode(cleaned).map_err(|_| AuthProblem::NotBase64)?;
    let (username, password) = match cut(&decoded, b':') {
        (username, Some(password)) => (username, password),
        (_, None) => return Err(AuthProblem::MissingColon),
    };
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(|_| AuthProblem::NotUtf8);
    Ok((text(username)?, text(password)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// A keyring with one credential per key, named after the key.
    fn keyring(keys: &[&str]) -> Keyring {
        let mut keyring = Keyring::new();
        for key in keys {
            keyring.add(key, Credential::basic(*key, "pw"));
        }
        keyring
    }

    fn usernames(credentials: Vec<Credential>) -> Vec<String> {
        credentials
            .into_iter()
            .map(|credential| match credential {
                Credential::Basic { username, .. } => username,
                Credential::Anonymous => "<anonymous>".to_owned(),
            })
            .collect()
    }

    fn lookup(keyring: &Keyring, image: &str) -> Vec<String> {
        let reference = Reference::parse(image).expect("test image parses");
        usernames(keyring.lookup(&reference))
    }

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn b64_unpadded(text: &str) -> String {
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(text)
    }

    fn data(key: &str, json: &str) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([(key.to_owned(), json.as_bytes().to_vec())])
    }

    fn config_json(json: &str) -> Keyring {
        Keyring::from_docker_config_json(json.as_bytes()).expect("test config parses")
    }

    // --- matching keys to images (keyring.go) ---

    #[rstest]
    #[case::wildcard_label(&["*.example.com"], "a.example.com/team/app", &["*.example.com"])]
    #[case::wildcard_not_apex(&["*.example.com"], "example.com/team/app", &[])]
    #[case::wildcard_one_label_only(&["*.example.com"], "a.b.example.com/team/app", &[])]
    #[case::wildcard_inner_label(&["a.*.com"], "a.b.com/x", &["a.*.com"])]
    #[case::wildcard_partial_label(&["reg-*.example.com"], "reg-eu.example.com/x", &["reg-*.example.com"])]
    #[case::wildcard_all_labels(&["*.*"], "quay.io/x", &["*.*"])]
    // `?` starts the URL's query: the key `reg?.io` is stored as the host `reg`.
    #[case::question_mark_is_a_query(&["reg?.io"], "reg1.io/x", &[])]
    #[case::question_mark_cuts_the_key(&["reg.io/te?am"], "reg.io/team/x", &["reg.io/te?am"])]
    #[case::class_range(&["a.[a-c].example.com"], "a.b.example.com/x", &["a.[a-c].example.com"])]
    #[case::class_miss(&["a.[a-c].example.com"], "a.d.example.com/x", &[])]
    #[case::class_negated(&["a.[^x].com"], "a.b.com/x", &[])]
    #[case::malformed_glob(&["a.[b-.com"], "a.b.com/x", &[])]
    #[case::host_exact(&["quay.io"], "quay.io/coreos/etcd", &["quay.io"])]
    #[case::host_other(&["quay.io"], "gcr.io/coreos/etcd", &[])]
    #[case::host_case_sensitive(&["Reg.io"], "reg.io/x", &[])]
    #[case::port_missing_in_image(&["reg.io:5000"], "reg.io/x", &[])]
    #[case::port_missing_in_key(&["reg.io"], "reg.io:5000/x", &[])]
    #[case::port_equal(&["reg.io:5000"], "reg.io:5000/x", &["reg.io:5000"])]
    #[case::port_different(&["reg.io:5000"], "reg.io:5001/x", &[])]
    #[case::port_with_wildcard(&["*.example.com:5000"], "a.example.com:5000/x", &["*.example.com:5000"])]
    #[case::ip_and_port(&["127.0.0.1:5000"], "127.0.0.1:5000/x", &["127.0.0.1:5000"])]
    #[case::localhost_port(&["localhost:5000"], "localhost:5000/x", &["localhost:5000"])]
    #[case::path_prefix(&["reg.io/team"], "reg.io/team/app", &["reg.io/team"])]
    #[case::path_is_a_string_prefix(&["reg.io/foo"], "reg.io/foobar/x", &["reg.io/foo"])]
    #[case::path_trailing_slash(&["reg.io/foo/"], "reg.io/foobar/x", &[])]
    #[case::path_trailing_slash_match(&["reg.io/foo/"], "reg.io/foo/x", &["reg.io/foo/"])]
    #[case::path_not_prefix(&["reg.io/team"], "reg.io/other/team", &[])]
    #[case::path_longer_than_image(&["reg.io/team/app/extra"], "reg.io/team/app", &[])]
    #[case::path_whole_repository(&["reg.io/team/app"], "reg.io/team/app:v1", &["reg.io/team/app"])]
    #[case::https_scheme(&["https://reg.io"], "reg.io/x", &["https://reg.io"])]
    #[case::http_scheme(&["http://reg.io"], "reg.io/x", &["http://reg.io"])]
    #[case::scheme_with_port_and_path(&["https://reg.io:5000/team"], "reg.io:5000/team/app", &["https://reg.io:5000/team"])]
    #[case::upper_case_scheme_is_no_scheme(&["HTTPS://reg.io"], "reg.io/x", &[])]
    #[case::v1_dropped(&["https://reg.io/v1/"], "reg.io/x", &["https://reg.io/v1/"])]
    #[case::v2_dropped(&["https://reg.io/v2/"], "reg.io/x", &["https://reg.io/v2/"])]
    #[case::v2_dropped_keeps_path(&["reg.io/v2/team"], "reg.io/team/app", &["reg.io/v2/team"])]
    #[case::v2_dropped_path_no_match(&["reg.io/v2/team"], "reg.io/other/app", &[])]
    #[case::v1_without_slash_kept(&["reg.io/v1"], "reg.io/team/app", &[])]
    #[case::v1_without_slash_is_a_path(&["reg.io/v1"], "reg.io/v1x/app", &["reg.io/v1"])]
    #[case::userinfo_ignored(&["user@reg.io"], "reg.io/x", &["user@reg.io"])]
    #[case::query_and_fragment_ignored(&["reg.io/team?x=1#y"], "reg.io/team/app", &["reg.io/team?x=1#y"])]
    #[case::percent_decoded_path(&["reg.io/%74eam"], "reg.io/team/app", &["reg.io/%74eam"])]
    #[case::bad_port_ignored(&["reg.io:http"], "reg.io/x", &[])]
    #[case::bad_escape_ignored(&["reg.io/a%zz"], "reg.io/a/x", &[])]
    #[case::space_in_host_ignored(&["reg io"], "reg.io/x", &[])]
    #[case::empty_key(&[""], "reg.io/x", &[])]
    #[case::ipv6_with_port(&["[::1]:5000"], "[::1]:5000/app", &["[::1]:5000"])]
    #[case::ipv6_other_port(&["[::1]:5000"], "[::1]:5001/app", &[])]
    #[case::ipv6_path(&["https://[::1]:5000/team"], "[::1]:5000/team/app", &["https://[::1]:5000/team"])]
    #[case::ipv6_expanded_is_another_string(&["[0:0::1]:5000"], "[::1]:5000/app", &[])]
    #[case::ipv6_without_port_never_matches(&["[::1]"], "[::1]/app", &[])]
    #[case::ipv6_not_an_address(&["[*]:5000"], "localhost:5000/app", &[])]
    #[case::class_first_label_reads_as_ipv6(&["[ab].example.com"], "a.example.com/x", &[])]
    fn matching(#[case] keys: &[&str], #[case] image: &str, #[case] expected: &[&str]) {
        assert_eq!(lookup(&keyring(keys), image), expected);
    }

    #[rstest]
    #[case::path_before_host(&["quay.io", "quay.io/coreos"], "quay.io/coreos/etcd", &["quay.io/coreos", "quay.io"])]
    #[case::longer_path_first(&["reg.io", "reg.io/a", "reg.io/ab"], "reg.io/abc/x", &["reg.io/ab", "reg.io/a", "reg.io"])]
    #[case::exact_host_before_wildcard(&["*.example.com", "a.example.com"], "a.example.com/x", &["a.example.com", "*.example.com"])]
    #[case::reverse_string_order_not_specificity(&["*.example.com/team", "a.example.com"], "a.example.com/team/x", &["a.example.com", "*.example.com/team"])]
    #[case::same_stored_key_keeps_insertion_order(&["reg.io", "https://reg.io/v2/", "http://reg.io/"], "reg.io/x", &["reg.io", "https://reg.io/v2/", "http://reg.io/"])]
    fn most_specific_first(#[case] keys: &[&str], #[case] image: &str, #[case] expected: &[&str]) {
        assert_eq!(lookup(&keyring(keys), image), expected);
    }

    #[rstest]
    #[case::official_image("nginx", true)]
    #[case::official_image_tagged("nginx:1.25", true)]
    #[case::docker_io_library("docker.io/library/nginx", true)]
    #[case::organisation("myorg/app", true)]
    #[case::index_docker_io("index.docker.io/myorg/app", true)]
    #[case::other_registry("quay.io/x", false)]
    #[case::registry_with_port("reg.io:5000/x", false)]
    #[case::localhost_with_port("localhost:5000/x", false)]
    // kubelet's isDefaultRegistryMatch: a first component without '.' or ':' is "Docker Hub".
    #[case::localhost_counts_as_docker_hub("localhost/app", true)]
    #[case::upper_case_host_counts_as_docker_hub("Registry/app", true)]
    fn docker_hub_fallback(#[case] image: &str, #[case] falls_back: bool) {
        let keyring = keyring(&["https://index.docker.io/v1/"]);
        let expected: &[&str] = if falls_back {
            &["https://index.docker.io/v1/"]
        } else {
            &[]
        };
        assert_eq!(lookup(&keyring, image), expected);
    }

    #[rstest]
    #[case::v1_url("https://index.docker.io/v1/")]
    #[case::v2_url("https://index.docker.io/v2/")]
    #[case::bare_host("index.docker.io")]
    #[case::http("http://index.docker.io/")]
    fn docker_hub_fallback_key_spellings(#[case] key: &str) {
        assert_eq!(lookup(&keyring(&[key]), "nginx"), [key]);
    }

    #[test]
    fn docker_hub_fallback_needs_the_exact_index_host() {
        let keyring = keyring(&["index.docker.io:443", "https://index.docker.io/v1/library"]);
        assert!(lookup(&keyring, "nginx").is_empty());
    }

    #[test]
    fn docker_io_keys_match_directly_and_suppress_the_fallback() {
        let keyring = keyring(&["https://index.docker.io/v1/", "docker.io"]);
        assert_eq!(lookup(&keyring, "nginx"), ["docker.io"]);
        assert_eq!(lookup(&keyring, "docker.io/myorg/app"), ["docker.io"]);
    }

    #[test]
    fn docker_io_path_key_matches_only_its_namespace() {
        let keyring = keyring(&["docker.io/myorg", "https://index.docker.io/v1/"]);
        assert_eq!(lookup(&keyring, "myorg/app"), ["docker.io/myorg"]);
        assert_eq!(lookup(&keyring, "nginx"), ["https://index.docker.io/v1/"]);
    }

    #[test]
    fn digest_and_tag_do_not_take_part() {
        let keyring = keyring(&["reg.io/team/app"]);
        let digest = format!("reg.io/team/app@sha256:{}", "a".repeat(64));
        assert_eq!(lookup(&keyring, &digest), ["reg.io/team/app"]);
        assert_eq!(lookup(&keyring, "reg.io/team/app:v1"), ["reg.io/team/app"]);
    }

    // --- layers: merge (one pod keyring) and extend (pod, then node) ---

    #[test]
    fn merged_secrets_are_ordered_together() {
        let mut pod = keyring(&["quay.io"]);
        pod.merge(keyring(&["quay.io/org"]));
        assert_eq!(lookup(&pod, "quay.io/org/app"), ["quay.io/org", "quay.io"]);
    }

    #[test]
    fn merged_secrets_share_the_docker_hub_fallback() {
        let mut pod = keyring(&["https://index.docker.io/v1/"]);
        pod.merge(keyring(&["docker.io"]));
        assert_eq!(lookup(&pod, "nginx"), ["docker.io"]);
    }

    #[test]
    fn merged_same_key_keeps_both_credentials_in_order() {
        let mut pod = Keyring::new();
        pod.add("reg.io", Credential::basic("first", "pw"));
        let mut second = Keyring::new();
        second.add("https://reg.io/v1/", Credential::basic("second", "pw"));
        pod.merge(second);
        assert_eq!(lookup(&pod, "reg.io/x"), ["first", "second"]);
    }

    #[test]
    fn extend_looks_up_each_keyring_on_its_own_pod_first() {
        let mut keyring = keyring(&["quay.io"]);
        keyring.extend(self::keyring(&["quay.io/org"]));
        assert_eq!(
            lookup(&keyring, "quay.io/org/app"),
            ["quay.io", "quay.io/org"]
        );
    }

    #[test]
    fn extend_applies_the_docker_hub_fallback_per_keyring() {
        let mut pod = Keyring::new();
        pod.add("docker.io", Credential::basic("pod", "pw"));
        let mut node = Keyring::new();
        node.add(
            "https://index.docker.io/v1/",
            Credential::basic("node", "pw"),
        );
        pod.extend(node);
        assert_eq!(lookup(&pod, "nginx"), ["pod", "node"]);
    }

    #[test]
    fn duplicate_credentials_are_kept_once_at_their_first_place() {
        let mut pod = Keyring::new();
        pod.add("reg.io/team", Credential::basic("a", "1"));
        pod.add("reg.io", Credential::basic("b", "2"));
        pod.add("reg.io", Credential::basic("a", "1"));
        let mut node = Keyring::new();
        node.add("reg.io", Credential::basic("b", "2"));
        node.add("reg.io", Credential::basic("c", "3"));
        pod.extend(node);
        assert_eq!(lookup(&pod, "reg.io/team/app"), ["a", "b", "c"]);
    }

    #[test]
    fn same_user_with_another_password_is_another_credential() {
        let mut keyring = Keyring::new();
        keyring.add("reg.io", Credential::basic("u", "old"));
        keyring.add("reg.io", Credential::basic("u", "new"));
        let reference = Reference::parse("reg.io/x").expect("parses");
        assert_eq!(
            keyring.lookup(&reference),
            [Credential::basic("u", "old"), Credential::basic("u", "new")]
        );
    }

    #[test]
    fn emptiness() {
        assert!(Keyring::new().is_empty());
        assert!(
            keyring(&["reg io"]).is_empty(),
            "an unparsable key adds nothing"
        );
        assert!(!keyring(&["reg.io"]).is_empty());
        let mut extended = Keyring::new();
        extended.extend(Keyring::new());
        extended.extend(keyring(&["reg.io"]));
        assert!(!extended.is_empty());
    }

    // --- secrets and config files (config.go, secrets.go) ---

    #[test]
    fn dockerconfigjson_secret() {
        let json = format!(
            r#"{{"auths":{{"reg.io":{{"auth":"{}"}}}}}}"#,
            b64("user:pass")
        );
        let keyring = Keyring::from_secret(
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            &data(DOCKER_CONFIG_JSON_KEY, &json),
        )
        .expect("parses");
        let reference = Reference::parse("reg.io/app").expect("parses");
        assert_eq!(
            keyring.lookup(&reference),
            [Credential::basic("user", "pass")]
        );
    }

    #[test]
    fn dockercfg_secret_has_no_auths_wrapper() {
        let json =
            r#"{"https://index.docker.io/v1/":{"username":"u","password":"p","email":"e@x"}}"#;
        let keyring = Keyring::from_secret(SECRET_TYPE_DOCKERCFG, &data(DOCKERCFG_KEY, json))
            .expect("parses");
        let reference = Reference::parse("nginx").expect("parses");
        assert_eq!(keyring.lookup(&reference), [Credential::basic("u", "p")]);
    }

    #[test]
    fn dockercfg_content_in_a_dockerconfigjson_secret_has_no_auths() {
        let json = r#"{"reg.io":{"username":"u","password":"p"}}"#;
        let keyring = Keyring::from_secret(
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            &data(DOCKER_CONFIG_JSON_KEY, json),
        )
        .expect("parses");
        assert!(keyring.is_empty());
    }

    #[rstest]
    #[case::dockerconfigjson_type_with_dockercfg_key(SECRET_TYPE_DOCKER_CONFIG_JSON, DOCKERCFG_KEY)]
    #[case::dockercfg_type_with_dockerconfigjson_key(SECRET_TYPE_DOCKERCFG, DOCKER_CONFIG_JSON_KEY)]
    #[case::other_key(SECRET_TYPE_DOCKER_CONFIG_JSON, "config.json")]
    fn type_and_data_key_must_agree(#[case] secret_type: &str, #[case] key: &str) {
        let json = r#"{"auths":{"reg.io":{"username":"u","password":"p"}}}"#;
        let err = Keyring::from_secret(secret_type, &data(key, json)).expect_err("mismatch");
        assert!(matches!(err, KeyringError::MissingData { .. }), "{err:?}");
        assert!(err.to_string().contains(secret_type), "{err}");
    }

    #[test]
    fn empty_data_is_missing_data() {
        let err = Keyring::from_secret(SECRET_TYPE_DOCKERCFG, &data(DOCKERCFG_KEY, ""))
            .expect_err("empty");
        assert_eq!(
            err,
            KeyringError::MissingData {
                secret_type: SECRET_TYPE_DOCKERCFG,
                key: DOCKERCFG_KEY
            }
        );
    }

    #[rstest]
    #[case::opaque("Opaque")]
    #[case::service_account_token("kubernetes.io/service-account-token")]
    #[case::basic_auth("kubernetes.io/basic-auth")]
    #[case::empty("")]
    #[case::case_differs("kubernetes.io/DockerConfigJson")]
    fn other_secret_types_are_unsupported(#[case] secret_type: &str) {
        let json = r#"{"auths":{"reg.io":{"username":"u","password":"p"}}}"#;
        let err = Keyring::from_secret(secret_type, &data(DOCKER_CONFIG_JSON_KEY, json))
            .expect_err("unsupported");
        assert_eq!(
            err,
            KeyringError::UnsupportedType {
                secret_type: secret_type.to_owned()
            }
        );
    }

    #[rstest]
    #[case::auth_wins_over_username_password(
        &format!(r#"{{"auth":"{}","username":"x","password":"y"}}"#, b64("user:pass")), Some(("user", "pass")))]
    #[case::username_password(r#"{"username":"user","password":"pass"}"#, Some(("user", "pass")))]
    #[case::split_on_first_colon(&format!(r#"{{"auth":"{}"}}"#, b64("user:pa:ss")), Some(("user", "pa:ss")))]
    #[case::unpadded(&format!(r#"{{"auth":"{}"}}"#, b64_unpadded("user:pas")), Some(("user", "pas")))]
    #[case::padded(&format!(r#"{{"auth":"{}"}}"#, b64("user:pas")), Some(("user", "pas")))]
    #[case::newlines_skipped(r#"{"auth":"dXNl\r\ncjpwYXNz\n"}"#, Some(("user", "pass")))]
    #[case::empty_password_in_auth(&format!(r#"{{"auth":"{}"}}"#, b64("user:")), Some(("user", "")))]
    #[case::username_only(r#"{"username":"user"}"#, Some(("user", "")))]
    #[case::empty_auth_uses_username(r#"{"auth":"","username":"user","password":"pass"}"#, Some(("user", "pass")))]
    #[case::null_fields(r#"{"auth":null,"username":"user","password":"pass","email":null}"#, Some(("user", "pass")))]
    #[case::field_names_fold_case(r#"{"Username":"user","PASSWORD":"pass"}"#, Some(("user", "pass")))]
    #[case::long_s_folds_to_s(r#"{"uſername":"user","paſsword":"pass"}"#, Some(("user", "pass")))]
    #[case::empty_entry(r#"{}"#, None)]
    #[case::null_entry(r#"null"#, None)]
    #[case::email_only(r#"{"email":"a@b.c"}"#, None)]
    #[case::identity_token_not_supported(r#"{"identitytoken":"token"}"#, None)]
    #[case::registry_token_not_supported(r#"{"registrytoken":"token"}"#, None)]
    #[case::auth_of_colon_only(&format!(r#"{{"auth":"{}"}}"#, b64(":")), None)]
    fn entry_parsing(#[case] entry: &str, #[case] expected: Option<(&str, &str)>) {
        let keyring = config_json(&format!(r#"{{"auths":{{"reg.io":{entry}}}}}"#));
        let reference = Reference::parse("reg.io/app").expect("parses");
        let expected: Vec<Credential> = expected
            .map(|(username, password)| Credential::basic(username, password))
            .into_iter()
            .collect();
        assert_eq!(keyring.lookup(&reference), expected);
    }

    #[rstest]
    #[case::not_base64(r#"{"auth":"not base64!"}"#, "AuthNotBase64")]
    #[case::wrong_padding(r#"{"auth":"dXNlcjpwYXM=="}"#, "AuthNotBase64")]
    #[case::padding_inside(r#"{"auth":"dXM=lcjpwYXM"}"#, "AuthNotBase64")]
    #[case::no_colon(&format!(r#"{{"auth":"{}"}}"#, b64("userpass")), "AuthMissingColon")]
    #[case::not_utf8(r#"{"auth":"/zov"}"#, "AuthNotUtf8")]
    fn bad_auth_fails_the_document_naming_the_registry(#[case] entry: &str, #[case] variant: &str) {
        let json = format!(r#"{{"auths":{{"secret.example.com":{entry}}}}}"#);
        let err = Keyring::from_docker_config_json(json.as_bytes()).expect_err("bad auth");
        assert!(format!("{err:?}").starts_with(variant), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("\"secret.example.com\""), "{message}");
        assert!(message.contains(DOCKER_CONFIG_FILE), "{message}");
        assert!(
            !message.contains("dXNl") && !message.contains("/zov"),
            "{message}"
        );
    }

    #[test]
    fn bad_auth_fails_even_when_a_repeated_key_replaces_it() {
        let json = r#"{"auths":{"reg.io":{"auth":"!!"},"reg.io":{"username":"u","password":"p"}}}"#;
        let err = Keyring::from_docker_config_json(json.as_bytes()).expect_err("bad auth");
        assert!(matches!(err, KeyringError::AuthNotBase64 { .. }), "{err:?}");
    }

    #[test]
    fn bad_auth_in_a_secret_names_its_data_key() {
        let json = r#"{"reg.io":{"auth":"!!"}}"#;
        let err = Keyring::from_secret(SECRET_TYPE_DOCKERCFG, &data(DOCKERCFG_KEY, json))
            .expect_err("bad auth");
        assert_eq!(
            err.to_string(),
            ".dockercfg: the auth field of registry \"reg.io\" is not valid base64"
        );
    }

    #[test]
    fn repeated_keys_keep_the_last_entry() {
        let keyring = config_json(
            r#"{"auths":{"reg.io":{"username":"first","password":"p"},"reg.io":{"username":"last","password":"p"}}}"#,
        );
        assert_eq!(lookup(&keyring, "reg.io/x"), ["last"]);
    }

    #[test]
    fn repeated_auths_add_up_and_null_resets() {
        let keyring = config_json(
            r#"{"auths":{"a.io":{"username":"a","password":"p"}},"AUTHS":{"b.io":{"username":"b","password":"p"}}}"#,
        );
        assert_eq!(lookup(&keyring, "a.io/x"), ["a"]);
        assert_eq!(lookup(&keyring, "b.io/x"), ["b"]);
        let keyring =
            config_json(r#"{"auths":{"a.io":{"username":"a","password":"p"}},"auths":null}"#);
        assert!(keyring.is_empty());
    }

    #[test]
    fn creds_store_only_config_has_no_credentials() {
        let keyring = config_json(
            r#"{
                "auths": {"https://index.docker.io/v1/": {}, "ghcr.io": {}},
                "credsStore": "desktop",
                "credHelpers": {"123456789.dkr.ecr.us-east-1.amazonaws.com": "ecr-login"},
                "HttpHeaders": {"User-Agent": "Docker-Client/24"},
                "psFormat": "table"
            }"#,
        );
        assert!(keyring.is_empty());
    }

    #[test]
    fn config_json_with_helpers_keeps_the_inline_entries() {
        let keyring = config_json(&format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{}},"quay.io":{{"auth":"{}"}}}},"credsStore":"osxkeychain"}}"#,
            b64("robot:token")
        ));
        assert_eq!(lookup(&keyring, "quay.io/org/app"), ["robot"]);
        assert!(lookup(&keyring, "nginx").is_empty());
    }

    #[rstest]
    #[case::null("null")]
    #[case::empty_object("{}")]
    #[case::null_auths(r#"{"auths":null}"#)]
    #[case::empty_auths(r#"{"auths":{}}"#)]
    fn empty_documents_give_an_empty_keyring(#[case] json: &str) {
        assert!(config_json(json).is_empty());
    }

    #[rstest]
    #[case::not_json("not json", "malformed JSON")]
    #[case::truncated(r#"{"auths":{"reg.io":{"username":"u""#, "unexpected end of JSON")]
    #[case::trailing_data(r#"{"auths":{}} {}"#, "malformed JSON")]
    #[case::empty_document("", "unexpected end of JSON")]
    #[case::top_level_array("[]", "a value has the wrong type")]
    #[case::auths_array(r#"{"auths":[]}"#, "a value has the wrong type")]
    #[case::entry_string(
        r#"{"auths":{"reg.io":"c2VjcmV0OnBhc3N3b3Jk"}}"#,
        "a value has the wrong type"
    )]
    #[case::password_number(
        r#"{"auths":{"reg.io":{"username":"u","password":123456}}}"#,
        "a value has the wrong type"
    )]
    #[case::email_object(r#"{"auths":{"reg.io":{"email":{}}}}"#, "a value has the wrong type")]
    #[case::http_headers_not_strings(
        r#"{"auths":{},"HttpHeaders":{"X":1}}"#,
        "a value has the wrong type"
    )]
    fn malformed_documents(#[case] json: &str, #[case] problem: &str) {
        let err = Keyring::from_docker_config_json(json.as_bytes()).expect_err("malformed");
        let message = err.to_string();
        assert!(matches!(err, KeyringError::InvalidJson { .. }), "{err:?}");
        assert!(message.contains(problem), "{message}");
        assert!(
            !message.contains("c2VjcmV0") && !message.contains("123456"),
            "{message}"
        );
    }

    #[test]
    fn malformed_secret_names_its_data_key() {
        let err = Keyring::from_secret(
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            &data(DOCKER_CONFIG_JSON_KEY, "{"),
        )
        .expect_err("malformed");
        assert!(
            err.to_string()
                .starts_with(".dockerconfigjson is not a valid docker config"),
            "{err}"
        );
    }

    #[test]
    fn unused_fields_of_any_shape_are_ignored() {
        let keyring = config_json(
            r#"{"auths":{"reg.io":{"username":"u","password":"p","x":[1,{"y":null}],"serveraddress":"reg.io"}},"other":[true]}"#,
        );
        assert_eq!(lookup(&keyring, "reg.io/x"), ["u"]);
    }

    #[test]
    fn debug_output_hides_passwords() {
        let keyring = config_json(&format!(
            r#"{{"auths":{{"reg.io":{{"auth":"{}"}}}}}}"#,
            b64("user:hunter2")
        ));
        let debug = format!("{keyring:?}");
        assert!(
            debug.contains("reg.io") && debug.contains("user"),
            "{debug}"
        );
        assert!(!debug.contains("hunter2"), "{debug}");
    }

    // --- the Go pieces, against cases from Go's own tests ---

    #[rstest]
    #[case("abc", "abc", Ok(true))]
    #[case("*", "abc", Ok(true))]
    #[case("*c", "abc", Ok(true))]
    #[case("a*", "a", Ok(true))]
    #[case("a*", "abc", Ok(true))]
    #[case("a*", "ab/c", Ok(false))]
    #[case("a*/b", "abc/b", Ok(true))]
    #[case("a*/b", "a/c/b", Ok(false))]
    #[case("a*b*c*d*e*/f", "axbxcxdxe/f", Ok(true))]
    #[case("a*b*c*d*e*/f", "axbxcxdxexxx/f", Ok(true))]
    #[case("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Ok(false))]
    #[case("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Ok(false))]
    #[case("a*b?c*x", "abxbbxdbxebxczzx", Ok(true))]
    #[case("a*b?c*x", "abxbbxdbxebxczzy", Ok(false))]
    #[case("ab[c]", "abc", Ok(true))]
    #[case("ab[b-d]", "abc", Ok(true))]
    #[case("ab[e-g]", "abc", Ok(false))]
    #[case("ab[^c]", "abc", Ok(false))]
    #[case("ab[^b-d]", "abc", Ok(false))]
    #[case("ab[^e-g]", "abc", Ok(true))]
    #[case("a\\*b", "a*b", Ok(true))]
    #[case("a\\*b", "ab", Ok(false))]
    #[case("a?b", "a☺b", Ok(true))]
    #[case("a[^a]b", "a☺b", Ok(true))]
    #[case("a???b", "a☺b", Ok(false))]
    #[case("a[^a][^a][^a]b", "a☺b", Ok(false))]
    #[case("[a-ζ]*", "α", Ok(true))]
    #[case("*[a-ζ]", "A", Ok(false))]
    #[case("a?b", "a/b", Ok(false))]
    #[case("a*b", "a/b", Ok(false))]
    #[case("[\\]a]", "]", Ok(true))]
    #[case("[\\-]", "-", Ok(true))]
    #[case("[x\\-]", "x", Ok(true))]
    #[case("[x\\-]", "-", Ok(true))]
    #[case("[x\\-]", "z", Ok(false))]
    #[case("[\\-x]", "x", Ok(true))]
    #[case("[\\-x]", "-", Ok(true))]
    #[case("[\\-x]", "a", Ok(false))]
    #[case("[]a]", "]", Err(BadPattern))]
    #[case("[-]", "-", Err(BadPattern))]
    #[case("[x-]", "x", Err(BadPattern))]
    #[case("[x-]", "-", Err(BadPattern))]
    #[case("[x-]", "z", Err(BadPattern))]
    #[case("[-x]", "x", Err(BadPattern))]
    #[case("[-x]", "-", Err(BadPattern))]
    #[case("[-x]", "a", Err(BadPattern))]
    #[case("\\", "a", Err(BadPattern))]
    #[case("[a-b-c]", "a", Err(BadPattern))]
    #[case("[", "a", Err(BadPattern))]
    #[case("[^", "a", Err(BadPattern))]
    #[case("[^bc", "a", Err(BadPattern))]
    #[case("a[", "a", Err(BadPattern))]
    #[case("a[", "ab", Err(BadPattern))]
    #[case("a[", "x", Err(BadPattern))]
    #[case("a/b[", "x", Err(BadPattern))]
    #[case("*x", "xxx", Ok(true))]
    fn filepath_match(
        #[case] pattern: &str,
        #[case] name: &str,
        #[case] expected: Result<bool, BadPattern>,
    ) {
        assert_eq!(
            go_filepath_match(pattern.as_bytes(), name.as_bytes()),
            expected
        );
    }

    #[rstest]
    #[case::host_and_path("reg.io/team", Some("reg.io/team"))]
    #[case::host_only("reg.io", Some("reg.io"))]
    #[case::root_path("reg.io/", Some("reg.io"))]
    #[case::v1_root("https://index.docker.io/v1/", Some("index.docker.io"))]
    #[case::v2_path("reg.io/v2/team/", Some("reg.io/team/"))]
    #[case::v1_no_slash("reg.io/v1", Some("reg.io/v1"))]
    #[case::port("http://reg.io:5000/", Some("reg.io:5000"))]
    #[case::empty_port("reg.io:", Some("reg.io:"))]
    #[case::ipv6("[::1]:5000/x", Some("[::1]:5000/x"))]
    #[case::ipv6_zone("[fe80::1%25en0]:5000", Some("[fe80::1%en0]:5000"))]
    #[case::userinfo("user:pw@reg.io/x", Some("reg.io/x"))]
    #[case::non_ascii_escape_in_host("r%C3%A9g.io", Some("rég.io"))]
    #[case::ascii_escape_in_host("%72eg.io", None)]
    #[case::bad_port("reg.io:x", None)]
    #[case::missing_bracket("[::1:5000", None)]
    #[case::not_ipv6_in_brackets("[reg.io]:5000", None)]
    #[case::control_character("reg.io/\tx", None)]
    #[case::bad_fragment_escape("reg.io#%zz", None)]
    #[case::bad_userinfo("us er@reg.io", None)]
    #[case::caret_in_host("a.[^b].io", None)]
    fn stored_keys(#[case] key: &str, #[case] expected: Option<&str>) {
        let expected = expected.map(|stored| stored.as_bytes().to_vec());
        assert_eq!(stored_key(key), expected);
    }

    #[rstest]
    #[case("reg.io:5000", Some(("reg.io", "5000")))]
    #[case("reg.io:", Some(("reg.io", "")))]
    #[case("[::1]:5000", Some(("::1", "5000")))]
    #[case("reg.io", None)]
    #[case("[::1]", None)]
    #[case("a:b:c", None)]
    #[case("[::1]x:5000", None)]
    #[case("a.[b]:5000", None)]
    fn split_host_port(#[case] hostport: &str, #[case] expected: Option<(&str, &str)>) {
        let expected = expected.map(|(host, port)| (host.as_bytes(), port.as_bytes()));
        assert_eq!(go_split_host_port(hostport.as_bytes()), expected);
    }

    /// No input makes the parser, the URL code or the glob matcher panic.
    #[test]
    fn arbitrary_input_does_not_panic() {
        let pieces = [
            "a", ".", "*", "?", "[", "]", "^", "-", "\\", ":", "/", "%", "%2", "%25", "%ff", "@",
            "#", "?", "é", "☺", " ", "[::1]", ":5000", "/v1/", "/v2/", "https://", "\u{0}", "5",
        ];
        let images = [
            "nginx",
            "reg.io/x",
            "[::1]:5000/a",
            "localhost/a",
            "a.b.c:1/d/e",
            "Foo/bar",
        ];
        let references: Vec<Reference> = images
            .iter()
            .map(|image| Reference::parse(image).expect("parses"))
            .collect();
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut keyring = Keyring::new();
        for _ in 0..3000 {
            let len = next(8);
            let key: String = (0..len).map(|_| pieces[next(pieces.len())]).collect();
            keyring.add(&key, Credential::basic(key.clone(), ""));
            let name: String = (0..next(5)).map(|_| pieces[next(pieces.len())]).collect();
            let _ = go_filepath_match(key.as_bytes(), name.as_bytes());
            let _ = Keyring::from_docker_config_json(key.as_bytes());
            let json = format!(
                r#"{{"auths":{{"{}":{{"auth":"{}"}}}}}}"#,
                key.escape_default(),
                name.escape_default()
            );
            let _ = Keyring::from_docker_config_json(json.as_bytes());
        }
        for reference in &references {
            let _ = keyring.lookup(reference);
        }
    }
}
