//! Kubelet's credential keyring: pull credentials under the keys they were written with, matched
//! to images exactly as kubelet matches them, so the webhook authenticates the way the node will.
//!
//! Owns: the [`Keyring`] and its layers, and kubelet's key matching, copied from kubernetes
//! `pkg/credentialprovider` (`keyring.go`: `BasicDockerKeyring.Add` and `Lookup`,
//! `isDefaultRegistryMatch`, `ParseSchemelessURL`, `SplitURL`, `URLsMatch`). The pieces it leans
//! on live beside it: `docker_config` reads secrets and config files into credentials, and
//! `go_url` / `go_glob` port the Go standard library parts kubelet uses (`net/url.Parse`,
//! `net.SplitHostPort`, `path/filepath.Match`), because their quirks decide which key matches
//! which image.
//!
//! Matching in short: a key gets `https://` unless it has a scheme, is parsed as a URL, loses a
//! leading `/v1/` or `/v2/`, and is stored as host (with port) plus path. An image matches a key
//! when the ports are equal, the hosts have as many `.`-separated labels, every label matches as a
//! glob (`*.example.com`), and the key's path is a string prefix of the image's path. Every
//! matching key is used, in reverse string order (most specific first). When none matches, a
//! Docker Hub image falls back to the key `index.docker.io` (written `https://index.docker.io/v1/`).
//!
//! Some credentials exist only per image: kubelet's credential provider plugins and docker's
//! credential helpers are asked for one image at a time. They are layers too, [`sources`]:
//! [`Keyring::for_images`] asks each for the images of a pod, and a lookup then sees, for each
//! image, exactly what the source answered for that image (kubelet builds a fresh
//! `BasicDockerKeyring` from the providers' answers on every lookup).
//!
//! Never: does I/O itself (a source does its own), logs, or puts a password or an `auth` value
//! into an error message.

mod docker_config;
mod go_glob;
mod go_url;
mod sources;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use self::go_glob::go_filepath_match;
use self::go_url::{go_split_host_port, parse_go_url, GoUrl};
use super::Credential;
use crate::reference::Reference;

pub use self::docker_config::{
    KeyringError, DOCKERCFG_KEY, DOCKER_CONFIG_JSON_KEY, SECRET_TYPE_DOCKERCFG,
    SECRET_TYPE_DOCKER_CONFIG_JSON,
};
pub use self::sources::{CredentialSource, Provided};

/// What a stored key costs beyond its text and credentials: the map's node, the parsed URL's
/// fields, the credentials' vector.
const SLOT_BYTES: usize = 256;

/// kubelet's `defaultRegistryHost`: the stored form of the `https://index.docker.io/v1/` key.
const DEFAULT_REGISTRY_HOST: &[u8] = b"index.docker.io";

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

#[derive(Clone)]
enum Layer {
    Basic(Basic),
    /// Asked per image by [`Keyring::for_images`]; adds nothing to a lookup until then.
    Source(Arc<dyn CredentialSource>),
    /// What a source answered, per image (normalised repository): each looked up on its own.
    Answered(Arc<BTreeMap<String, Basic>>),
}

/// One kubelet `BasicDockerKeyring`: stored key → its credentials, in the order they were added.
/// A `BTreeMap` over bytes iterates in Go's string order, which `Lookup` walks in reverse.
#[derive(Clone, Default)]
struct Basic {
    index: BTreeMap<Vec<u8>, Slot>,
}

#[derive(Clone)]
struct Slot {
    /// The stored key parsed again as `Lookup` does (`ParseSchemelessURL`); `None` never matches.
    glob: Option<GoUrl>,
    credentials: Vec<Credential>,
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
        docker_config::read_secret(secret_type, data).map(Keyring::from_credentials)
    }

    /// Reads a docker `config.json` (`{"auths": {...}}`), such as `~/.docker/config.json` or a
    /// node's `/var/lib/kubelet/config.json`. Entries with no usable credential, such as the
    /// empty `{}` entries docker writes when the secret lives in a `credsStore` or `credHelpers`,
    /// are skipped. The result has one layer.
    pub fn from_docker_config_json(bytes: &[u8]) -> Result<Keyring, KeyringError> {
        docker_config::read_config_json(bytes).map(Keyring::from_credentials)
    }

    /// Adds one credential under `key` as written in a docker config (`quay.io/org`,
    /// `https://index.docker.io/v1/`, `*.example.com:5000`), to the last layer (a new one when
    /// the last is a source). A key Go's URL parser rejects is ignored, as kubelet ignores it.
    pub fn add(&mut self, key: &str, credential: Credential) {
        self.last_layer().add(key, credential);
    }

    /// Adds every entry of `other` to this keyring's last layer, as kubelet adds all of a pod's
    /// pull secrets to one `BasicDockerKeyring`: their keys are then ordered together (a
    /// `quay.io/org` key of the second secret comes before a `quay.io` key of the first) and the
    /// Docker Hub fallback applies only if no key of any of them matched.
    /// Sources in `other` stay layers of their own, after the merged entries.
    pub fn merge(&mut self, other: Keyring) {
        let mut rest = Vec::new();
        for other_layer in other.layers {
            let Layer::Basic(basic) = other_layer else {
                rest.push(other_layer);
                continue;
            };
            let layer = self.last_layer();
            for (key, slot) in basic.index {
                match layer.index.get_mut(&key) {
                    Some(existing) => existing.credentials.extend(slot.credentials),
                    None => {
                        layer.index.insert(key, slot);
                    }
                }
            }
        }
        self.layers.extend(rest);
    }

    /// Appends a layer whose credentials `source` gives per image (see [`Keyring::for_images`]).
    pub fn push_source(&mut self, source: Arc<dyn CredentialSource>) {
        self.layers.push(Layer::Source(source));
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
        if self.layers.is_empty() {
            return Vec::new();
        }
        // kubelet looks up `named.Name()`: the normalised repository without tag or digest.
        let image = reference.repository();
        let target = parse_schemeless_url(image.as_bytes());
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for layer in &self.layers {
            let basic = match layer {
                Layer::Basic(basic) => basic,
                Layer::Answered(per_image) => match per_image.get(&image) {
                    Some(basic) => basic,
                    None => continue,
                },
                Layer::Source(_) => continue,
            };
            for credential in basic.lookup(&image, target.as_ref()) {
                if seen.insert(credential) {
                    found.push(credential.clone());
                }
            }
        }
        found
    }

    /// True when no layer holds any credential (a source not yet asked counts as some).
    /// Roughly the bytes this keyring's stored credentials hold (what its sources answered
    /// apart): each key twice (as stored and parsed) plus [`SLOT_BYTES`], and its credentials.
    pub fn approximate_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|layer| match layer {
                Layer::Basic(basic) => basic
                    .index
                    .iter()
                    .map(|(key, slot)| {
                        let held: usize = slot
                            .credentials
                            .iter()
                            .map(Credential::approximate_bytes)
                            .sum();
                        2 * key.len() + SLOT_BYTES + held
                    })
                    .sum(),
                Layer::Source(_) | Layer::Answered(_) => 0,
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.iter().all(|layer| match layer {
            Layer::Basic(basic) => basic.index.is_empty(),
            Layer::Answered(per_image) => per_image.values().all(|b| b.index.is_empty()),
            Layer::Source(_) => false,
        })
    }

    fn last_layer(&mut self) -> &mut Basic {
        if !matches!(self.layers.last(), Some(Layer::Basic(_))) {
            self.layers.push(Layer::Basic(Basic::default()));
        }
        match self.layers.last_mut() {
            Some(Layer::Basic(basic)) => basic,
            // Unreachable: a basic layer was pushed just above when the last was not one.
            _ => unreachable!("the last layer is basic"),
        }
    }

    /// One layer holding a document's credentials, added in the order given.
    fn from_credentials(credentials: docker_config::Credentials) -> Keyring {
        Keyring {
            layers: vec![Layer::Basic(Basic::from_entries(credentials))],
        }
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.layers).finish()
    }
}

impl fmt::Debug for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::Basic(basic) => basic.fmt(f),
            Layer::Source(source) => write!(f, "Source({})", source.name()),
            Layer::Answered(per_image) => f.debug_map().entries(per_image.iter()).finish(),
        }
    }
}

// === impl Basic ===

impl Basic {
    /// A layer holding `entries` (key as written, credential), added in the order given.
    fn from_entries(entries: impl IntoIterator<Item = (String, Credential)>) -> Basic {
        let mut basic = Basic::default();
        for (key, credential) in entries {
            basic.add(&key, credential);
        }
        basic
    }

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

impl fmt::Debug for Basic {
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

/// kubelet's `URLsMatchStr(pattern, image)`, which decides whether a credential provider's
/// `matchImages` entry covers an image: both parsed as schemeless URLs, then [`urls_match`].
/// False when either does not parse.
pub(crate) fn image_matches(pattern: &str, image: &str) -> bool {
    match (
        parse_schemeless_url(pattern.as_bytes()),
        parse_schemeless_url(image.as_bytes()),
    ) {
        (Some(glob), Some(target)) => urls_match(&glob, &target),
        _ => false,
    }
}

/// Whether kubelet's config validation accepts `pattern` as a `matchImages` entry
/// (`ParseSchemelessURL` succeeds).
pub(crate) fn is_valid_image_pattern(pattern: &str) -> bool {
    parse_schemeless_url(pattern.as_bytes()).is_some()
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

/// Whether the image is on Docker Hub, so that the `index.docker.io` entries apply: its
/// normalised repository's first component is `docker.io` (or `index.docker.io`). kubelet's
/// `isDefaultRegistryMatch` also says yes for any first component without `.` or `:`
/// (`localhost/x`, an upper-case single-label host such as `EVIL/x`), which hands Docker Hub's
/// credentials to that host; pinhook never does (issue 44).
fn is_default_registry_match(image: &str) -> bool {
    let first = image.split_once('/').map_or(image, |(first, _)| first);
    first == "docker.io" || first == "index.docker.io"
}
