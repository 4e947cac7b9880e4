//! The slim record the watch keeps per Pod: who it is, which workload it belongs to, every image
//! it runs and where, and what kubelet pulls with (pull secrets, service account). Nothing else
//! of the Pod is kept, so the watch's memory grows with the number of images, not with the size
//! of Pod specs.
//!
//! Owns: reading a Pod's JSON into a [`PodRecord`], the owner → workload rule and the bounds.
//! Pure: never does I/O; image grammar is `reference`'s, image sites are `workload`'s.
//!
//! **Workload rule.** Only what the Pod's own metadata proves is mapped; the watch never guesses
//! from names alone:
//! - no controller `ownerReference` → the Pod itself;
//! - a `v1` `Node` controller (a static Pod's mirror) → the Pod itself: the node's manifest
//!   file, not the Node object, defines it;
//! - a `ReplicaSet` controller (`apps/*` or `extensions/*`) named `<d>-<h>`, where `<h>` is the
//!   Pod's own non-empty `pod-template-hash` label → Deployment `<d>` (`apps/v1`), with no uid:
//!   the Deployment controller names its ReplicaSets `<deployment>-<pod-template-hash>` and puts
//!   the same hash on their Pods (`pkg/controller/deployment/sync.go`). Argo Rollouts labels its
//!   Pods `rollouts-pod-template-hash` instead, so its ReplicaSets stay ReplicaSets. A bare
//!   ReplicaSet deliberately named and labelled that way would be attributed to a Deployment of
//!   that name; [`PodRecord::owner`] keeps the ReplicaSet for a caller that can check its own
//!   `ownerReferences`;
//! - any other controller (StatefulSet, DaemonSet, ReplicationController, Job, custom kinds) →
//!   that controller, with its uid. A Job stays a Job even when its name looks like
//!   `<cronjob>-<minutes>`: a Pod carries nothing that ties its Job to a CronJob (only the Job's
//!   own `ownerReferences` do), and anyone can name a Job that way.
//!
//! **What runs.** Each image site also keeps what the node reports it runs, from the Pod's status:
//! `containerStatuses`, `initContainerStatuses` and `ephemeralContainerStatuses` (`imageID`,
//! matched to the container by name) and, for an image volume, the `image.imageRef` of a
//! container's `volumeMounts` status entry of that name (`ImageVolumeWithDigest`, alpha in
//! 1.36). The runtimes write it in these forms ([`RunningImage::read`]):
//! - `repo@sha256:…` (containerd, CRI-O) and `docker-pullable://repo@sha256:…` (dockershim,
//!   cri-dockerd): the digest of the manifest (or index) the runtime pulled, comparable with a
//!   pinned digest. containerd reports its image record's first repo digest: an image pulled
//!   under two digests (an index and, before that, one of its platform manifests) may show the
//!   other one;
//! - `sha256:…` and `docker://sha256:…`: the image's own ID, the digest of its config blob, not
//!   of a manifest: nothing to compare it with (an image loaded locally, never pulled by name);
//! - empty: the container has not started (waiting to pull, or never ran).
//!
//! The status is the node's to write, not the Pod creator's; an entry of the wrong shape, an
//! unknown container name or an over-long `imageID` is ignored (the site's running image is
//! then unknown), never an error that would drop what the spec says.
//!
//! **Bounds.** A string longer than the API lets the field be, or a list longer than the watch
//! keeps, is an error ([`WatchError::TooLong`], [`WatchError::TooMany`]) rather than a silent
//! truncation that would misname what runs: namespaces are DNS labels (63), object names and
//! owner names DNS subdomains (253), container and volume names DNS labels (63), uids 128 (the
//! API's are 36-character UUIDs), kinds 63 and apiVersions 317 (a 253-byte group, `/`, a
//! 63-byte version). Images: the API does not bound them, but no valid reference is longer than
//! about 800 bytes (a 253-byte host and port, a 255-byte path, a 128-byte tag, a sha512
//! digest), so one over [`MAX_IMAGE_LEN`] cannot run either (kubelet: `InvalidImageName`). At
//! most [`MAX_IMAGES_PER_POD`] image sites (ephemeral containers accumulate with each
//! `kubectl debug`, never removed) and [`MAX_PULL_SECRETS`] distinct pull secrets.

use serde::Serialize;
use serde_json::Value;

use crate::owners;
use crate::reference::Digest;
use crate::workload::{self, ImageField, PodSpecKinds};

use super::WatchError;

/// Most image sites (containers, initContainers, ephemeralContainers, image volumes) kept per Pod.
pub const MAX_IMAGES_PER_POD: usize = 512;
/// Most distinct `imagePullSecrets` names kept per Pod.
pub const MAX_PULL_SECRETS: usize = crate::registry::pull_secrets::MAX_PULL_SECRETS;
/// Longest image string kept: well above any valid reference.
pub const MAX_IMAGE_LEN: usize = 1024;

const MAX_NAMESPACE_LEN: usize = 63;
const MAX_NAME_LEN: usize = 253;
const MAX_UID_LEN: usize = 128;
const MAX_SITE_NAME_LEN: usize = 63;
const MAX_KIND_LEN: usize = 63;
const MAX_API_VERSION_LEN: usize = 317;

/// The service account kubelet uses when a Pod names none.
const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// A string field of the Pod: where it is, and how messages name it.
struct Field {
    pointer: &'static str,
    name: &'static str,
    max: usize,
}

const NAMESPACE: Field = Field {
    pointer: "/metadata/namespace",
    name: "metadata.namespace",
    max: MAX_NAMESPACE_LEN,
};
const NAME: Field = Field {
    pointer: "/metadata/name",
    name: "metadata.name",
    max: MAX_NAME_LEN,
};
const UID: Field = Field {
    pointer: "/metadata/uid",
    name: "metadata.uid",
    max: MAX_UID_LEN,
};
/// The label the Deployment controller puts on its ReplicaSets and their Pods (a hash of the
/// template, well under a label value's 63 bytes).
const POD_TEMPLATE_HASH: Field = Field {
    pointer: "/metadata/labels/pod-template-hash",
    name: "metadata.labels[pod-template-hash]",
    max: 63,
};
const SERVICE_ACCOUNT_NAME: Field = Field {
    pointer: "/spec/serviceAccountName",
    name: "spec.serviceAccountName",
    max: MAX_NAME_LEN,
};
/// Deprecated alias of `serviceAccountName`; the API still fills one from the other.
const SERVICE_ACCOUNT: Field = Field {
    pointer: "/spec/serviceAccount",
    name: "spec.serviceAccount",
    max: MAX_NAME_LEN,
};
const NODE_NAME: Field = Field {
    pointer: "/spec/nodeName",
    name: "spec.nodeName",
    max: MAX_NAME_LEN,
};

/// Where a node reports what each kind of site runs.
const STATUSES: [(ImageField, &str); 3] = [
    (ImageField::Containers, "containerStatuses"),
    (ImageField::InitContainers, "initContainerStatuses"),
    (
        ImageField::EphemeralContainers,
        "ephemeralContainerStatuses",
    ),
];

/// What the watch keeps of one Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRecord {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The Pod's controller `ownerReference` as written, if it has one.
    pub owner: Option<OwnerRef>,
    /// The workload the Pod belongs to (module docs: the rule).
    pub workload: WorkloadRef,
    /// Every image site, in `ImageField::ALL` order, then list order.
    pub images: Vec<PodImage>,
    /// `imagePullSecrets` names in the Pod's order, empty and repeated names dropped.
    pub pull_secrets: Vec<String>,
    /// `serviceAccountName` (or the deprecated `serviceAccount`), `default` when unset.
    pub service_account: String,
    /// `status.phase` is `Succeeded` or `Failed`: none of its containers runs any more. Kept so
    /// the caller can leave such Pods out of what "runs".
    pub terminal: bool,
    /// The API mirror of a static pod: the annotation `kubernetes.io/config.mirror` and a `v1`
    /// `Node` controller named as `spec.nodeName`, as the kubelet writes it
    /// ([`owners::is_node_mirror`]).
    pub mirror: bool,
    /// `spec.nodeName`: the node the Pod is bound to, once scheduled.
    pub node: Option<String>,
}

/// A controller `ownerReference`, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// The object a Pod's images are attributed to. Always in the Pod's namespace (owner references
/// never cross namespaces). Sorted by namespace, kind, name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    pub namespace: String,
    pub kind: String,
    pub name: String,
    pub api_version: String,
    /// Known when the workload is the Pod or its direct controller; `None` for a Deployment
    /// inferred through its ReplicaSet (the Pod does not carry the Deployment's uid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// One image and where it sits in the Pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodImage {
    pub field: ImageField,
    /// Container name (volume name for an image volume); may be empty in malformed specs.
    pub name: String,
    /// The image string as written in the Pod.
    pub image: String,
    /// What the node reports it runs for this site (module docs); `None` when it says nothing.
    pub running: Option<RunningImage>,
}

/// What a node reports a container (or image volume) runs: the forms of `imageID`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RunningImage {
    /// The digest of the manifest or index the runtime pulled (`repo@sha256:…`).
    Pulled(Digest),
    /// A local image ID (`sha256:…`, the config digest): not a manifest digest.
    ImageId,
    /// A form pinhook does not read.
    Unrecognized,
}

// === impl PodRecord ===

impl PodRecord {
    /// Reads a Pod (as the API serves it, e.g. from a watch event) into what the watch keeps.
    /// Any field of the wrong type, a missing namespace, name or uid, or anything over the
    /// bounds is an error.
    pub fn from_pod(pod: &Value) -> Result<PodRecord, WatchError> {
        if !pod.is_object() {
            return Err(invalid("pod", "a JSON object"));
        }
        let namespace = required(pod, &NAMESPACE)?;
        let name = required(pod, &NAME)?;
        let uid = required(pod, &UID)?;
        let owner = owner_of(pod)?;
        let hash = optional(pod, &POD_TEMPLATE_HASH)?;
        let workload = workload_of(&namespace, &name, &uid, owner.as_ref(), hash);
        let mut images = images_of(pod)?;
        running_of(pod, &mut images);
        let pull_secrets = pull_secrets_of(pod)?;
        let service_account = match optional(pod, &SERVICE_ACCOUNT_NAME)? {
            Some(sa) => sa,
            None => optional(pod, &SERVICE_ACCOUNT)?.unwrap_or(DEFAULT_SERVICE_ACCOUNT),
        }
        .to_string();
        let phase = pod.pointer("/status/phase").and_then(Value::as_str);
        Ok(PodRecord {
            namespace,
            name,
            uid,
            owner,
            workload,
            images,
            pull_secrets,
            service_account,
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
            mirror: owners::is_node_mirror(pod),
            node: optional(pod, &NODE_NAME)?.map(str::to_string),
        })
    }
}

// === impl RunningImage ===

impl RunningImage {
    /// Reads an `imageID` (or an image volume's `imageRef`) in the runtimes' forms (module
    /// docs); `None` for an empty one (nothing runs yet).
    pub fn read(image_id: &str) -> Option<RunningImage> {
        if image_id.is_empty() {
            return None;
        }
        if image_id.len() > MAX_IMAGE_LEN {
            return Some(RunningImage::Unrecognized);
        }
        let id = image_id
            .strip_prefix("docker-pullable://")
            .unwrap_or(image_id);
        if let Some((repository, digest)) = id.rsplit_once('@') {
            return Some(match digest.parse::<Digest>() {
                Ok(digest) if !repository.is_empty() && !repository.contains("://") => {
                    RunningImage::Pulled(digest)
                }
                _ => RunningImage::Unrecognized,
            });
        }
        let id = id.strip_prefix("docker://").unwrap_or(id);
        Some(match id.parse::<Digest>() {
            Ok(_) => RunningImage::ImageId,
            Err(_) => RunningImage::Unrecognized,
        })
    }

    /// The pulled digest, when the form has one.
    pub fn digest(&self) -> Option<&Digest> {
        match self {
            RunningImage::Pulled(digest) => Some(digest),
            RunningImage::ImageId | RunningImage::Unrecognized => None,
        }
    }

    /// How the inventory shows it: the digest, `local-image-id` (a config digest, nothing to
    /// compare) or `unrecognized`.
    pub fn describe(&self) -> String {
        match self {
            RunningImage::Pulled(digest) => digest.to_string(),
            RunningImage::ImageId => "local-image-id".to_string(),
            RunningImage::Unrecognized => "unrecognized".to_string(),
        }
    }
}

// === impl WorkloadRef ===

impl WorkloadRef {
    /// `namespace/Kind/name`, for tables and logs.
    pub fn describe(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

// === impl PodImage ===

impl PodImage {
    /// `containers[app]`, `initContainers[setup]`, `volumes[models]`: the same wording as
    /// admission's [`workload::ImageSite::describe`].
    pub fn describe(&self) -> String {
        format!("{}[{}]", self.field.as_str(), self.name)
    }

    /// Position of the field in `ImageField::ALL`, for sorting sites the way Pods list them.
    pub fn field_rank(&self) -> usize {
        ImageField::ALL
            .iter()
            .position(|f| *f == self.field)
            .unwrap_or(ImageField::ALL.len())
    }
}

// === reading helpers ===

fn workload_of(
    namespace: &str,
    pod_name: &str,
    pod_uid: &str,
    owner: Option<&OwnerRef>,
    pod_template_hash: Option<&str>,
) -> WorkloadRef {
    let the_pod = || WorkloadRef {
        namespace: namespace.to_string(),
        kind: "Pod".to_string(),
        name: pod_name.to_string(),
        api_version: "v1".to_string(),
        uid: Some(pod_uid.to_string()),
    };
    let Some(owner) = owner else {
        return the_pod();
    };
    if owner.kind == "Node" && owner.api_version == "v1" {
        return the_pod();
    }
    if let Some(deployment) = deployment_of(owner, pod_template_hash) {
        return WorkloadRef {
            namespace: namespace.to_string(),
            kind: "Deployment".to_string(),
            name: deployment.to_string(),
            api_version: "apps/v1".to_string(),
            uid: None,
        };
    }
    WorkloadRef {
        namespace: namespace.to_string(),
        kind: owner.kind.clone(),
        name: owner.name.clone(),
        api_version: owner.api_version.clone(),
        uid: Some(owner.uid.clone()),
    }
}

/// The Deployment name when the owner is a ReplicaSet named `<deployment>-<hash>` and `hash` is
/// the Pod's own `pod-template-hash` label.
fn deployment_of<'a>(owner: &'a OwnerRef, hash: Option<&str>) -> Option<&'a str> {
    let apps =
        owner.api_version.starts_with("apps/") || owner.api_version.starts_with("extensions/");
    if owner.kind != "ReplicaSet" || !apps {
        return None;
    }
    let hash = hash.filter(|h| !h.is_empty())?;
    let deployment = owner.name.strip_suffix(hash)?.strip_suffix('-')?;
    (!deployment.is_empty()).then_some(deployment)
}

fn owner_of(pod: &Value) -> Result<Option<OwnerRef>, WatchError> {
    match present(pod.pointer("/metadata/ownerReferences")) {
        None => return Ok(None),
        Some(Value::Array(_)) => {}
        Some(_) => return Err(invalid("metadata.ownerReferences", "an array")),
    }
    let Some(owner) = owners::controller_of(pod) else {
        return Ok(None);
    };
    let field = |key: &str, value: &str, max: usize| -> Result<String, WatchError> {
        let field = format!("metadata.ownerReferences[controller].{key}");
        if value.is_empty() {
            return Err(WatchError::Invalid {
                field,
                expected: "a non-empty string",
            });
        }
        bounded(field, value, max).map(str::to_string)
    };
    Ok(Some(OwnerRef {
        api_version: field("apiVersion", owner.api_version, MAX_API_VERSION_LEN)?,
        kind: field("kind", owner.kind, MAX_KIND_LEN)?,
        name: field("name", owner.name, MAX_NAME_LEN)?,
        uid: field("uid", owner.uid, MAX_UID_LEN)?,
    }))
}

fn images_of(pod: &Value) -> Result<Vec<PodImage>, WatchError> {
    // A Pod with no spec has no images; `image_sites` reports that as an empty list.
    let sites = workload::image_sites(&PodSpecKinds::builtin(), "", "Pod", "", pod, None)
        .map_err(WatchError::Spec)?
        .unwrap_or_default();
    if sites.len() > MAX_IMAGES_PER_POD {
        return Err(WatchError::TooMany {
            field: "images",
            count: sites.len(),
            max: MAX_IMAGES_PER_POD,
        });
    }
    sites
        .into_iter()
        .map(|site| {
            let path = dotted(&site.pointer);
            let entry = path.strip_suffix(".image").unwrap_or(&path);
            let entry = entry.strip_suffix(".image.reference").unwrap_or(entry);
            bounded(format!("{entry}.name"), &site.name, MAX_SITE_NAME_LEN)?;
            bounded(path, &site.image, MAX_IMAGE_LEN)?;
            Ok(PodImage {
                field: site.field,
                name: site.name,
                image: site.image,
                running: None,
            })
        })
        .collect()
}

/// Fills each site's running image from the Pod's status (module docs). Lenient: the status is
/// the node's, and a malformed entry only leaves its site's running image unknown.
fn running_of(pod: &Value, images: &mut [PodImage]) {
    let Some(status) = pod.get("status").filter(|s| s.is_object()) else {
        return;
    };
    let mut set = |field: ImageField, name: &str, image_id: Option<&str>| {
        let Some(image_id) = image_id else { return };
        if let Some(site) = images
            .iter_mut()
            .find(|site| site.field == field && site.name == name)
        {
            site.running = RunningImage::read(image_id);
        }
    };
    for (field, list) in STATUSES {
        let entries = status.get(list).and_then(Value::as_array);
        for entry in entries.into_iter().flatten().take(MAX_IMAGES_PER_POD) {
            let name = entry
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            set(field, name, entry.get("imageID").and_then(Value::as_str));
        }
    }
    // Image volumes (1.36, `ImageVolumeWithDigest`): each container's mount of the volume
    // reports the same image; the first one that says something wins.
    if !images
        .iter()
        .any(|site| site.field == ImageField::ImageVolume)
    {
        return;
    }
    let mounts = status
        .get("containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_IMAGES_PER_POD)
        .filter_map(|entry| entry.get("volumeMounts").and_then(Value::as_array))
        .flatten()
        .take(MAX_IMAGES_PER_POD);
    for mount in mounts {
        let name = mount
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let image_ref = mount.pointer("/image/imageRef").and_then(Value::as_str);
        if let Some(site) = images
            .iter_mut()
            .find(|s| s.field == ImageField::ImageVolume && s.name == name && s.running.is_none())
        {
            site.running = image_ref.and_then(RunningImage::read);
        }
    }
}

fn pull_secrets_of(pod: &Value) -> Result<Vec<String>, WatchError> {
    let Some(list) = present(pod.pointer("/spec/imagePullSecrets")) else {
        return Ok(Vec::new());
    };
    let entries = list
        .as_array()
        .ok_or_else(|| invalid("spec.imagePullSecrets", "an array"))?;
    let mut names: Vec<String> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if !entry.is_object() {
            return Err(invalid(format!("spec.imagePullSecrets[{i}]"), "an object"));
        }
        let field = format!("spec.imagePullSecrets[{i}].name");
        let name = match present(entry.get("name")) {
            None => continue,
            Some(name) => name
                .as_str()
                .ok_or_else(|| invalid(field.clone(), "a string"))?,
        };
        // kubelet skips entries without a name; a repeated name adds nothing.
        if name.is_empty() || names.iter().any(|n| n == name) {
            continue;
        }
        if names.len() == MAX_PULL_SECRETS {
            return Err(WatchError::TooMany {
                field: "spec.imagePullSecrets",
                count: entries.len(),
                max: MAX_PULL_SECRETS,
            });
        }
        names.push(bounded(field, name, MAX_NAME_LEN)?.to_string());
    }
    Ok(names)
}

/// A string field that must be present and non-empty.
fn required(pod: &Value, field: &Field) -> Result<String, WatchError> {
    optional(pod, field)?
        .map(str::to_string)
        .ok_or(WatchError::Missing { field: field.name })
}

/// A string field that may be absent, null or empty (all `None`), bounded.
fn optional<'a>(pod: &'a Value, field: &Field) -> Result<Option<&'a str>, WatchError> {
    let Some(value) = present(pod.pointer(field.pointer)) else {
        return Ok(None);
    };
    let text = value
        .as_str()
        .ok_or_else(|| invalid(field.name, "a string"))?;
    if text.is_empty() {
        return Ok(None);
    }
    bounded(field.name.to_string(), text, field.max).map(Some)
}

fn bounded(field: String, text: &str, max: usize) -> Result<&str, WatchError> {
    if text.len() > max {
        return Err(WatchError::TooLong {
            field,
            len: text.len(),
            max,
        });
    }
    Ok(text)
}

/// `/spec/containers/0/image` → `spec.containers[0].image`, for messages.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for token in pointer.split('/').filter(|t| !t.is_empty()) {
        if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{token}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&token.replace("~1", "/").replace("~0", "~"));
        }
    }
    out
}

/// `None` for an absent or null value: Kubernetes treats both as unset.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

fn invalid(field: impl Into<String>, expected: &'static str) -> WatchError {
    WatchError::Invalid {
        field: field.into(),
        expected,
    }
}

#[cfg(test)]
mod tests;
