//! Pushes small but valid images to a [`TestRegistry`] over the OCI
//! distribution API with plain reqwest.
//!
//! Every image has one config blob and one layer: a gzip (stored blocks) of a
//! tar holding one file whose text comes from `seed`, so a different seed
//! gives different digests and re-pushing a tag with a new seed moves it.
//! All digests are sha256 over the exact bytes sent.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::registry::TestRegistry;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// An `Accept` value listing the OCI index/manifest and Docker list/v2 types.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// Which family of media types an image uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Oci,
    Docker,
}

impl Flavor {
    pub fn index_type(self) -> &'static str {
        match self {
            Flavor::Oci => OCI_INDEX,
            Flavor::Docker => DOCKER_LIST,
        }
    }

    pub fn manifest_type(self) -> &'static str {
        match self {
            Flavor::Oci => OCI_MANIFEST,
            Flavor::Docker => DOCKER_MANIFEST,
        }
    }

    fn config_type(self) -> &'static str {
        match self {
            Flavor::Oci => OCI_CONFIG,
            Flavor::Docker => DOCKER_CONFIG,
        }
    }

    fn layer_type(self) -> &'static str {
        match self {
            Flavor::Oci => OCI_LAYER,
            Flavor::Docker => DOCKER_LAYER,
        }
    }
}

/// A platform, as in an index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platform {
    pub architecture: &'static str,
    pub os: &'static str,
    pub variant: Option<&'static str>,
}

pub const LINUX_AMD64: Platform = Platform {
    architecture: "amd64",
    os: "linux",
    variant: None,
};

pub const LINUX_ARM64: Platform = Platform {
    architecture: "arm64",
    os: "linux",
    variant: Some("v8"),
};

/// One image manifest as stored in the registry.
#[derive(Debug, Clone)]
pub struct PushedManifest {
    pub media_type: &'static str,
    /// sha256 of `bytes`, i.e. what the registry calls this manifest.
    pub digest: String,
    pub bytes: Vec<u8>,
    pub config_digest: String,
    pub platform: Platform,
}

/// A single-manifest image pushed under a tag.
#[derive(Debug, Clone)]
pub struct PushedImage {
    /// `127.0.0.1:PORT/repo:tag`
    pub reference: String,
    pub manifest: PushedManifest,
}

impl PushedImage {
    pub fn manifest_digest(&self) -> &str {
        &self.manifest.digest
    }

    pub fn config_digest(&self) -> &str {
        &self.manifest.config_digest
    }
}

/// An index (OCI) or manifest list (Docker) pushed under a tag.
#[derive(Debug, Clone)]
pub struct PushedIndex {
    pub tag: String,
    /// `127.0.0.1:PORT/repo:tag`
    pub reference: String,
    pub media_type: &'static str,
    /// sha256 of `bytes`: the digest a tag lookup must resolve to.
    pub index_digest: String,
    pub bytes: Vec<u8>,
    /// The platform manifests, in index order (amd64, arm64).
    pub manifests: Vec<PushedManifest>,
}

impl PushedIndex {
    pub fn platform_digests(&self) -> Vec<&str> {
        self.manifests.iter().map(|m| m.digest.as_str()).collect()
    }

    pub fn config_digests(&self) -> Vec<&str> {
        self.manifests
            .iter()
            .map(|m| m.config_digest.as_str())
            .collect()
    }

    /// `127.0.0.1:PORT/repo@sha256:…` (the index digest)
    pub fn pinned_reference(&self) -> String {
        pinned(&self.reference, &self.tag, &self.index_digest)
    }

    /// `127.0.0.1:PORT/repo:tag@sha256:…` (the index digest): how pinhook pins the tag by
    /// default (`form: tagAndDigest`).
    pub fn pinned_with_tag(&self) -> String {
        format!("{}@{}", self.reference, self.index_digest)
    }
}

/// Pushes one OCI image manifest (linux/amd64) under `tag`.
pub async fn push_single(reg: &TestRegistry, repo: &str, tag: &str, seed: &str) -> PushedImage {
    push_image(reg, repo, tag, seed, Flavor::Oci).await
}

/// Pushes linux/amd64 and linux/arm64 OCI manifests and an OCI index of them
/// under `tag`.
pub async fn push_multi_arch(reg: &TestRegistry, repo: &str, tag: &str, seed: &str) -> PushedIndex {
    push_index(reg, repo, tag, seed, Flavor::Oci).await
}

/// Like [`push_multi_arch`] with Docker media types (manifest list v2).
pub async fn push_docker_list(
    reg: &TestRegistry,
    repo: &str,
    tag: &str,
    seed: &str,
) -> PushedIndex {
    push_index(reg, repo, tag, seed, Flavor::Docker).await
}

/// Pushes one image manifest of `flavor` (linux/amd64) under `tag`.
pub async fn push_image(
    reg: &TestRegistry,
    repo: &str,
    tag: &str,
    seed: &str,
    flavor: Flavor,
) -> PushedImage {
    let manifest = push_platform_manifest(reg, repo, seed, flavor, LINUX_AMD64).await;
    put_manifest(reg, repo, tag, manifest.media_type, &manifest.bytes).await;
    PushedImage {
        reference: reg.image_ref(repo, tag),
        manifest,
    }
}

/// Pushes amd64 and arm64 manifests by digest, then an index of `flavor`
/// referencing them under `tag`.
pub async fn push_index(
    reg: &TestRegistry,
    repo: &str,
    tag: &str,
    seed: &str,
    flavor: Flavor,
) -> PushedIndex {
    let mut manifests = Vec::new();
    for platform in [LINUX_AMD64, LINUX_ARM64] {
        let m = push_platform_manifest(reg, repo, seed, flavor, platform).await;
        put_manifest(reg, repo, &m.digest, m.media_type, &m.bytes).await;
        manifests.push(m);
    }
    let bytes = index_json(flavor, &manifests);
    let index_digest = put_manifest(reg, repo, tag, flavor.index_type(), &bytes).await;
    PushedIndex {
        tag: tag.to_string(),
        reference: reg.image_ref(repo, tag),
        media_type: flavor.index_type(),
        index_digest,
        bytes,
        manifests,
    }
}

/// Uploads the layer and config blobs and builds (does not PUT) the manifest.
async fn push_platform_manifest(
    reg: &TestRegistry,
    repo: &str,
    seed: &str,
    flavor: Flavor,
    platform: Platform,
) -> PushedManifest {
    let text = format!("seed={seed} arch={}\n", platform.architecture);
    let tar = tar_one_file("pinhook-seed.txt", text.as_bytes());
    let layer = gzip_stored(&tar);
    let layer_digest = push_blob(reg, repo, &layer).await;
    let config = config_json(platform, seed, &sha256_digest(&tar));
    let config_digest = push_blob(reg, repo, &config).await;
    let bytes = to_bytes(&json!({
        "schemaVersion": 2,
        "mediaType": flavor.manifest_type(),
        "config": descriptor(flavor.config_type(), &config_digest, config.len()),
        "layers": [descriptor(flavor.layer_type(), &layer_digest, layer.len())],
    }));
    PushedManifest {
        media_type: flavor.manifest_type(),
        digest: sha256_digest(&bytes),
        bytes,
        config_digest,
        platform,
    }
}

fn config_json(platform: Platform, seed: &str, diff_id: &str) -> Vec<u8> {
    let mut config = json!({
        "architecture": platform.architecture,
        "os": platform.os,
        "created": "2024-01-01T00:00:00Z",
        "config": { "Labels": { "org.pinhook.test.seed": seed } },
        "rootfs": { "type": "layers", "diff_ids": [diff_id] },
    });
    if let Some(variant) = platform.variant {
        config["variant"] = json!(variant);
    }
    to_bytes(&config)
}

fn index_json(flavor: Flavor, manifests: &[PushedManifest]) -> Vec<u8> {
    let entries: Vec<Value> = manifests
        .iter()
        .map(|m| {
            let mut d = descriptor(m.media_type, &m.digest, m.bytes.len());
            d["platform"] = platform_json(m.platform);
            d
        })
        .collect();
    to_bytes(&json!({
        "schemaVersion": 2,
        "mediaType": flavor.index_type(),
        "manifests": entries,
    }))
}

fn platform_json(p: Platform) -> Value {
    let mut v = json!({ "architecture": p.architecture, "os": p.os });
    if let Some(variant) = p.variant {
        v["variant"] = json!(variant);
    }
    v
}

fn descriptor(media_type: &str, digest: &str, size: usize) -> Value {
    json!({ "mediaType": media_type, "digest": digest, "size": size })
}

/// `POST /v2/<repo>/blobs/uploads/`, then a monolithic `PUT <location>&digest=`.
pub async fn push_blob(reg: &TestRegistry, repo: &str, bytes: &[u8]) -> String {
    let digest = sha256_digest(bytes);
    let start = reg.url(&format!("/v2/{repo}/blobs/uploads/"));
    let resp = send(reg, reg.request(Method::POST, &start), "start blob upload").await;
    let location = expect_status(reg, resp, StatusCode::ACCEPTED, "start blob upload")
        .await
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .expect("blob upload response has a Location header");
    let put_url = upload_url(reg, &location, &digest);
    let req = reg
        .request(Method::PUT, &put_url)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(bytes.to_vec());
    let resp = send(reg, req, "finish blob upload").await;
    expect_status(reg, resp, StatusCode::CREATED, "finish blob upload").await;
    digest
}

/// Absolute upload URL with `digest` appended to whatever query it has
/// (2.8 returns an absolute Location with a `_state=` query).
fn upload_url(reg: &TestRegistry, location: &str, digest: &str) -> String {
    let base = if location.starts_with("http://") || location.starts_with("https://") {
        location.to_string()
    } else {
        reg.url(location)
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}digest={digest}")
}

/// `PUT /v2/<repo>/manifests/<reference>`; returns the digest of `bytes`
/// after checking the registry reports the same one.
pub async fn put_manifest(
    reg: &TestRegistry,
    repo: &str,
    reference: &str,
    media_type: &str,
    bytes: &[u8],
) -> String {
    let digest = sha256_digest(bytes);
    let url = reg.url(&format!("/v2/{repo}/manifests/{reference}"));
    let req = reg
        .request(Method::PUT, &url)
        .header(reqwest::header::CONTENT_TYPE, media_type)
        .body(bytes.to_vec());
    let what = format!("PUT manifest {repo}:{reference}");
    let resp = send(reg, req, &what).await;
    let resp = expect_status(reg, resp, StatusCode::CREATED, &what).await;
    let reported = resp
        .headers()
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok());
    assert_eq!(reported, Some(digest.as_str()), "{what}: registry digest");
    digest
}

async fn send(reg: &TestRegistry, req: reqwest::RequestBuilder, what: &str) -> reqwest::Response {
    match req.send().await {
        Ok(resp) => resp,
        Err(e) => panic!("{what}: {e:?}\n{}", reg.log_tail(20)),
    }
}

async fn expect_status(
    reg: &TestRegistry,
    resp: reqwest::Response,
    want: StatusCode,
    what: &str,
) -> reqwest::Response {
    if resp.status() == want {
        return resp;
    }
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    panic!(
        "{what}: expected {want}, got {status}: {body}\n{}",
        reg.log_tail(20)
    )
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn pinned(reference: &str, tag: &str, digest: &str) -> String {
    let name = reference
        .strip_suffix(&format!(":{tag}"))
        .unwrap_or(reference);
    format!("{name}@{digest}")
}

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("serialize JSON")
}

/// A ustar archive holding one regular file.
fn tar_one_file(name: &str, contents: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    header[100..108].copy_from_slice(b"0000644\0");
    header[108..116].copy_from_slice(b"0000000\0");
    header[116..124].copy_from_slice(b"0000000\0");
    header[124..136].copy_from_slice(format!("{:011o}\0", contents.len()).as_bytes());
    header[136..148].copy_from_slice(b"00000000000\0");
    header[148..156].copy_from_slice(b"        ");
    header[156] = b'0';
    header[257..265].copy_from_slice(b"ustar\x0000");
    let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut tar = header.to_vec();
    tar.extend_from_slice(contents);
    tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
    tar
}

/// A valid gzip stream using only stored (uncompressed) deflate blocks.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let chunks: Vec<&[u8]> = data.chunks(0xffff).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        out.push(u8::from(i + 1 == chunks.len()));
        let len = u16::try_from(chunk.len()).expect("chunk fits a stored block");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    // ISIZE is the input length modulo 2^32: truncation is the format.
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}
