//! Where images live in each pod-bearing kind, and the JSON Patch that rewrites them.
//!
//! Owns: the table of (group, kind) → PodSpec pointer, walking containers, initContainers,
//! ephemeralContainers and image volumes, and RFC 6901/6902 pointer and patch construction.
//! Pure: never parses image grammar (that is `reference`), never does I/O.

use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch, PatchOperation, ReplaceOperation};
use serde_json::Value;

mod resource;

pub use resource::{resource_sites, ImagePath};

/// The subresource through which ephemeral containers are added.
pub const EPHEMERAL_CONTAINERS_SUBRESOURCE: &str = "ephemeralcontainers";

/// The kind of the `pods/ephemeralcontainers` subresource object on 1.20 and 1.21: no PodSpec,
/// only a top-level `ephemeralContainers` list.
pub const EPHEMERAL_CONTAINERS_KIND: &str = "EphemeralContainers";

/// Why an object could not be walked, or a patch could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("{pointer} is not {expected}")]
    UnexpectedType {
        pointer: String,
        expected: &'static str,
    },
    #[error("{pointer:?} is not an RFC 6901 JSON pointer: {reason}")]
    InvalidPointer { pointer: String, reason: String },
}

/// Which list of a PodSpec an image was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageField {
    Containers,
    InitContainers,
    EphemeralContainers,
    /// `spec.volumes[*].image.reference`
    ImageVolume,
    /// A field of a custom resource the policy names (`customResources`; see [`resource`]).
    Resource,
}

/// One place in an object that holds an image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSite {
    /// RFC 6901 pointer to the image string, e.g. `/spec/template/spec/containers/0/image`.
    pub pointer: String,
    pub field: ImageField,
    /// Container (or volume) name.
    pub name: String,
    /// The image string as found (never empty: empty images are not sites).
    pub image: String,
    /// False when `old_object` has the same entry (same field and name) with the same image.
    /// Always true without an old object.
    pub is_new: bool,
}

/// The (group, kind) → PodSpec pointer table: built-in kinds plus configured extras; and the
/// custom resources whose image fields the policy names.
#[derive(Debug, Clone)]
pub struct PodSpecKinds {
    entries: Vec<KindEntry>,
    resources: Vec<ResourceEntry>,
}

#[derive(Debug, Clone)]
struct ResourceEntry {
    group: String,
    kind: String,
    paths: Vec<ImagePath>,
}

#[derive(Debug, Clone)]
struct KindEntry {
    group: String,
    kind: String,
    pointer: String,
}

/// (group, kind, PodSpec pointer) of the built-in kinds; keyed by group and kind, not version.
const BUILTIN_KINDS: &[(&str, &str, &str)] = &[
    ("", "Pod", "/spec"),
    ("", "PodTemplate", "/template/spec"),
    ("", "ReplicationController", "/spec/template/spec"),
    ("apps", "Deployment", "/spec/template/spec"),
    ("apps", "ReplicaSet", "/spec/template/spec"),
    ("apps", "StatefulSet", "/spec/template/spec"),
    ("apps", "DaemonSet", "/spec/template/spec"),
    ("batch", "Job", "/spec/template/spec"),
    ("batch", "CronJob", "/spec/jobTemplate/spec/template/spec"),
    // Kubernetes < 1.22 sends `pods/ephemeralcontainers` as `{"kind":"EphemeralContainers",
    // "ephemeralContainers":[...]}`: the list sits at the root.
    ("", EPHEMERAL_CONTAINERS_KIND, ""),
];

// === impl ImageField ===

impl ImageField {
    /// Every field, in the order `image_sites` reports them.
    pub const ALL: [ImageField; 4] = [
        ImageField::Containers,
        ImageField::InitContainers,
        ImageField::EphemeralContainers,
        ImageField::ImageVolume,
    ];

    /// The PodSpec key of the list: `containers`, `initContainers`, `ephemeralContainers`, `volumes`.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageField::Containers => "containers",
            ImageField::InitContainers => "initContainers",
            ImageField::EphemeralContainers => "ephemeralContainers",
            ImageField::ImageVolume => "volumes",
            ImageField::Resource => "resource",
        }
    }

    /// The keys from a list entry down to its image string.
    fn image_path(self) -> &'static [&'static str] {
        match self {
            ImageField::ImageVolume => &["image", "reference"],
            _ => &["image"],
        }
    }
}

impl std::fmt::Display for ImageField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl ImageSite ===

impl ImageSite {
    /// A short human-readable location, e.g. `containers[app]` or `volumes[models]`.
    pub fn describe(&self) -> String {
        format!("{}[{}]", self.field.as_str(), self.name)
    }
}

// === impl PodSpecKinds ===

impl PodSpecKinds {
    /// The built-in kinds (`docs/kubernetes-and-registry-facts.md` §3).
    pub fn builtin() -> Self {
        let empty = PodSpecKinds {
            entries: Vec::new(),
            resources: Vec::new(),
        };
        BUILTIN_KINDS
            .iter()
            .fold(empty, |kinds, (group, kind, pointer)| {
                kinds.with_extra(group, kind, pointer)
            })
    }

    /// Adds a kind (e.g. Argo Rollouts `Rollout` at `/spec/template/spec`).
    /// `pointer` is an already-escaped RFC 6901 pointer.
    pub fn with_extra(mut self, group: &str, kind: &str, pointer: &str) -> Self {
        self.entries.push(KindEntry {
            group: group.to_string(),
            kind: kind.to_string(),
            pointer: pointer.to_string(),
        });
        self
    }

    /// Adds a custom resource whose images live at `paths` (e.g. CloudNativePG `Cluster` at
    /// `/spec/imageName`).
    pub fn with_resource(mut self, group: &str, kind: &str, paths: Vec<ImagePath>) -> Self {
        self.resources.push(ResourceEntry {
            group: group.to_string(),
            kind: kind.to_string(),
            paths,
        });
        self
    }

    /// The image paths of a configured custom resource kind.
    pub fn resource_paths(&self, group: &str, kind: &str) -> Option<&[ImagePath]> {
        self.resources
            .iter()
            .find(|e| e.group == group && e.kind == kind)
            .map(|e| e.paths.as_slice())
    }

    /// True for a kind pinhook finds images in: pod-bearing, or a configured custom resource.
    pub fn bears_images(&self, group: &str, kind: &str) -> bool {
        self.pod_spec_pointer(group, kind).is_some() || self.resource_paths(group, kind).is_some()
    }

    /// The PodSpec pointer for a kind, or `None` when the kind bears no pods.
    pub fn pod_spec_pointer(&self, group: &str, kind: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.group == group && e.kind == kind)
            .map(|e| e.pointer.as_str())
    }
}

/// Every image site of a pod-bearing object; `Ok(None)` when the kind bears no pods.
///
/// `subresource` is the request's `subResource` (`""` when absent). `old_object` is the
/// request's `oldObject` (present on UPDATE). Which lists are walked:
/// - subresource `ephemeralcontainers`: only `ephemeralContainers` (the apiserver drops
///   every other change made through it);
/// - a Pod UPDATE: only `containers` and `initContainers` (pod update validation forbids
///   changing anything else, so a patch elsewhere would fail the user's request);
/// - any other UPDATE: everything but `ephemeralContainers`;
/// - otherwise (CREATE): all four.
///
/// Sites come out in `ImageField::ALL` order, then list order.
pub fn image_sites(
    kinds: &PodSpecKinds,
    group: &str,
    kind: &str,
    subresource: &str,
    object: &Value,
    old_object: Option<&Value>,
) -> Result<Option<Vec<ImageSite>>, WorkloadError> {
    let Some(spec_pointer) = kinds.pod_spec_pointer(group, kind) else {
        return match kinds.resource_paths(group, kind) {
            // A custom resource's status and other subresources hold no image it is read from.
            Some(paths) if subresource.is_empty() => {
                resource_sites(paths, object, old_object).map(Some)
            }
            Some(_) => Ok(Some(Vec::new())),
            None => Ok(None),
        };
    };
    let Some(spec) = present(lookup(object, spec_pointer)) else {
        return Ok(Some(Vec::new()));
    };
    if !spec.is_object() {
        return Err(unexpected(spec_pointer, "an object"));
    }
    let old_spec = old_object.and_then(|old| present(lookup(old, spec_pointer)));
    let is_pod = group.is_empty() && kind == "Pod";
    let mut sites = Vec::new();
    for &field in walked_fields(subresource, is_pod, old_object.is_some()) {
        for found in field_images(spec, spec_pointer, field)? {
            let is_new =
                !old_spec.is_some_and(|old| old_has(old, field, &found.name, &found.image));
            sites.push(ImageSite {
                pointer: found.pointer,
                field,
                name: found.name,
                image: found.image,
                is_new,
            });
        }
    }
    Ok(Some(sites))
}

/// Whether an UPDATE changes the pod template of a workload (anything in it: images, env,
/// labels, the `restartedAt` annotation of `kubectl rollout restart`). Such an update starts a
/// rollout anyway, so `/mutate` pins every image of the new template rather than only the images
/// the update changed; an update that leaves the template as it was (scale, labels of the
/// workload, status) changes nothing. Always false for Pods (their images are judged one by one)
/// and for kinds that bear no pods.
///
/// The template is the PodSpec's parent (`/spec/template` for `/spec/template/spec`); for a kind
/// whose PodSpec pointer does not end in `/spec`, the PodSpec itself.
pub fn template_changed(
    kinds: &PodSpecKinds,
    group: &str,
    kind: &str,
    object: &Value,
    old_object: Option<&Value>,
) -> bool {
    let Some(old) = old_object else {
        return false;
    };
    if group.is_empty() && (kind == "Pod" || kind == EPHEMERAL_CONTAINERS_KIND) {
        return false;
    }
    let Some(spec_pointer) = kinds.pod_spec_pointer(group, kind) else {
        return false;
    };
    let template = match spec_pointer.strip_suffix("/spec") {
        Some(parent) if !parent.is_empty() => parent,
        _ => spec_pointer,
    };
    lookup(object, template) != lookup(old, template)
}

/// The PodSpec of a pod-bearing object (for imagePullSecrets and serviceAccountName).
/// `None` when the kind bears no pods or the PodSpec is missing or null.
pub fn pod_spec<'a>(
    kinds: &PodSpecKinds,
    group: &str,
    kind: &str,
    object: &'a Value,
) -> Option<&'a Value> {
    let pointer = kinds.pod_spec_pointer(group, kind)?;
    present(lookup(object, pointer))
}

/// A JSON Patch of `replace` operations, one per (pointer, new image).
/// Pointers must be RFC 6901 (as in `ImageSite::pointer`).
pub fn replace_patch(edits: &[(String, String)]) -> Result<Patch, WorkloadError> {
    edits
        .iter()
        .map(|(pointer, image)| replace_op(pointer, image))
        .collect::<Result<Vec<_>, _>>()
        .map(Patch)
}

fn replace_op(pointer: &str, image: &str) -> Result<PatchOperation, WorkloadError> {
    let path = PointerBuf::parse(pointer).map_err(|err| WorkloadError::InvalidPointer {
        pointer: pointer.to_string(),
        reason: err.original().to_string(),
    })?;
    Ok(PatchOperation::Replace(ReplaceOperation {
        path,
        value: Value::String(image.to_string()),
    }))
}

/// An image found in one list entry.
struct FoundImage {
    pointer: String,
    name: String,
    image: String,
}

fn walked_fields(subresource: &str, is_pod: bool, is_update: bool) -> &'static [ImageField] {
    if subresource == EPHEMERAL_CONTAINERS_SUBRESOURCE {
        &[ImageField::EphemeralContainers]
    } else if is_update && is_pod {
        &[ImageField::Containers, ImageField::InitContainers]
    } else if is_update {
        &[
            ImageField::Containers,
            ImageField::InitContainers,
            ImageField::ImageVolume,
        ]
    } else {
        &ImageField::ALL
    }
}

/// The non-empty images of one PodSpec list.
fn field_images(
    spec: &Value,
    spec_pointer: &str,
    field: ImageField,
) -> Result<Vec<FoundImage>, WorkloadError> {
    let Some(list) = present(spec.get(field.as_str())) else {
        return Ok(Vec::new());
    };
    let list_pointer = child(spec_pointer, field.as_str());
    let entries = list
        .as_array()
        .ok_or_else(|| unexpected(&list_pointer, "an array"))?;
    let mut found = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let entry_pointer = child(&list_pointer, &index.to_string());
        if let Some(image) = entry_image(entry, &entry_pointer, field)? {
            found.push(image);
        }
    }
    Ok(found)
}

fn entry_image(
    entry: &Value,
    entry_pointer: &str,
    field: ImageField,
) -> Result<Option<FoundImage>, WorkloadError> {
    let mut pointer = entry_pointer.to_string();
    let mut value = entry;
    for key in field.image_path() {
        let map = value
            .as_object()
            .ok_or_else(|| unexpected(&pointer, "an object"))?;
        pointer = child(&pointer, key);
        match present(map.get(*key)) {
            Some(next) => value = next,
            None => return Ok(None),
        }
    }
    let image = value
        .as_str()
        .ok_or_else(|| unexpected(&pointer, "a string"))?;
    if image.is_empty() {
        return Ok(None);
    }
    Ok(Some(FoundImage {
        name: entry_name(entry, entry_pointer)?,
        pointer,
        image: image.to_string(),
    }))
}

fn entry_name(entry: &Value, entry_pointer: &str) -> Result<String, WorkloadError> {
    match present(entry.get("name")) {
        None => Ok(String::new()),
        Some(name) => name
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| unexpected(&child(entry_pointer, "name"), "a string")),
    }
}

/// Whether the old PodSpec has an entry in `field` with this name and image.
/// Lenient: the old object is what the apiserver stored, a malformed one just matches nothing.
fn old_has(old_spec: &Value, field: ImageField, name: &str, image: &str) -> bool {
    old_spec
        .get(field.as_str())
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|entry| old_name(entry) == name && old_image(entry, field) == Some(image))
}

fn old_name(entry: &Value) -> &str {
    entry
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn old_image(entry: &Value, field: ImageField) -> Option<&str> {
    field
        .image_path()
        .iter()
        .try_fold(entry, |value, key| value.get(*key))
        .and_then(Value::as_str)
}

/// `None` for an absent or null value: Kubernetes treats both as unset.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

/// `parent` (an escaped pointer) extended by one unescaped token.
fn child(parent: &str, token: &str) -> String {
    let mut pointer = String::with_capacity(parent.len() + 1 + token.len());
    pointer.push_str(parent);
    pointer.push('/');
    match token.contains(['~', '/']) {
        true => pointer.push_str(&escape_token(token)),
        false => pointer.push_str(token),
    }
    pointer
}

/// The value at an RFC 6901 pointer, as [`Value::pointer`] finds it, without allocating for
/// tokens that need no unescaping (`Value::pointer` copies every token twice; this runs on
/// every review, issue 13).
pub fn lookup<'a>(value: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(value);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(value, |target, token| {
        let unescaped;
        let token = match token.contains('~') {
            true => {
                unescaped = token.replace("~1", "/").replace("~0", "~");
                unescaped.as_str()
            }
            false => token,
        };
        step(target, token)
    })
}

/// One step of a pointer: an object's member, or a list's item by index (`token` unescaped).
fn step<'a>(value: &'a Value, token: &str) -> Option<&'a Value> {
    match value {
        Value::Object(map) => map.get(token),
        Value::Array(list) => array_index(token).and_then(|i| list.get(i)),
        _ => None,
    }
}

/// An array index token as RFC 6901 allows it: digits, no leading zero but `0` itself.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// RFC 6901 §3: `~` becomes `~0` and `/` becomes `~1`, in that order.
fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn unexpected(pointer: &str, expected: &'static str) -> WorkloadError {
    WorkloadError::UnexpectedType {
        pointer: pointer.to_string(),
        expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const POD_BASIC_120: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/pod-create-basic-mutate.json");
    const POD_BASIC_126: &str =
        include_str!("../tests/fixtures/admissionreview/v1.26/pod-create-basic-mutate.json");
    const POD_MULTI_INIT: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/pod-create-multi-init-mutate.json");
    const PODTEMPLATE: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/podtemplate-create-mutate.json");
    const RC: &str = include_str!(
        "../tests/fixtures/admissionreview/v1.20/replicationcontroller-create-mutate.json"
    );
    const DEPLOYMENT: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/deployment-create-mutate.json");
    const REPLICASET: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/replicaset-create-mutate.json");
    const STATEFULSET: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/statefulset-create-mutate.json");
    const DAEMONSET: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/daemonset-create-mutate.json");
    const JOB: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/job-create-mutate.json");
    const CRONJOB_V1BETA1: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/cronjob-create-mutate.json");
    const CRONJOB_V1: &str =
        include_str!("../tests/fixtures/admissionreview/v1.26/cronjob-create-mutate.json");
    const EPHEMERAL_126: &str = include_str!(
        "../tests/fixtures/admissionreview/v1.26/pod-update-ephemeralcontainers-kubectl-debug-mutate.json"
    );
    const EPHEMERAL_RAW_PUT_120: &str = include_str!(
        "../tests/fixtures/admissionreview/v1.20/ephemeralcontainers-update-raw-put-mutate.json"
    );
    const EPHEMERAL_DEBUG_120: &str = include_str!(
        "../tests/fixtures/admissionreview/v1.20/ephemeralcontainers-update-kubectl-debug-mutate.json"
    );
    const POD_SET_IMAGE_120: &str =
        include_str!("../tests/fixtures/admissionreview/v1.20/pod-update-set-image-mutate.json");
    const POD_SET_IMAGE_126: &str =
        include_str!("../tests/fixtures/admissionreview/v1.26/pod-update-set-image-mutate.json");
    const DEPLOYMENT_SET_IMAGE: &str = include_str!(
        "../tests/fixtures/admissionreview/v1.20/deployment-update-set-image-mutate.json"
    );
    const SCALE: &str = include_str!(
        "../tests/fixtures/admissionreview/v1.20/scale-update-deployments-kubectl-scale-mutate.json"
    );
    const CONFIGMAP: &str = include_str!(
        "../tests/fixtures/admissionreview/v1.20/configmap-create-registries-conf-mutate.json"
    );

    /// `request` of an AdmissionReview fixture.
    fn request(fixture: &str) -> Value {
        let review: Value = serde_json::from_str(fixture).unwrap();
        review["request"].clone()
    }

    /// `lookup` finds what `Value::pointer` finds, for every pointer that names something
    /// and for the ones that name nothing (escapes, array indexes, empty keys).
    #[test]
    fn lookup_agrees_with_value_pointer() {
        let value = json!({
            "spec": {"template": {"spec": {"containers": [{"image": "a"}, {"image": "b"}]}}},
            "a/b": {"c~d": 1, "": {"": 2}},
            "list": [[0, 1], {"10": "ten"}],
            "": 3,
        });
        for pointer in [
            "",
            "/",
            "//",
            "/spec",
            "/spec/template/spec/containers/1/image",
            "/spec/template/spec/containers/01/image",
            "/spec/template/spec/containers/+1",
            "/spec/template/spec/containers/2",
            "/spec/template/spec/containers/-",
            "/a~1b/c~0d",
            "/a~1b/c~01",
            "/a~1b//",
            "/a/b",
            "/list/0/1",
            "/list/1/10",
            "/list/1/10/x",
            "spec",
            "/missing/deeper",
            "/spec/template/spec/containers/0/image/x",
        ] {
            assert_eq!(
                lookup(&value, pointer),
                value.pointer(pointer),
                "{pointer:?}"
            );
        }
    }

    fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
        value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
    }

    /// `image_sites` with group, kind and subresource taken from the request.
    fn sites_of_request(kinds: &PodSpecKinds, req: &Value) -> Option<Vec<ImageSite>> {
        image_sites(
            kinds,
            str_at(req, "/kind/group"),
            str_at(req, "/kind/kind"),
            str_at(req, "/subResource"),
            &req["object"],
            req.get("oldObject").filter(|v| !v.is_null()),
        )
        .unwrap()
    }

    fn sites_of(req: &Value) -> Option<Vec<ImageSite>> {
        sites_of_request(&PodSpecKinds::builtin(), req)
    }

    fn site(pointer: &str, field: ImageField, name: &str, image: &str, is_new: bool) -> ImageSite {
        ImageSite {
            pointer: pointer.to_string(),
            field,
            name: name.to_string(),
            image: image.to_string(),
            is_new,
        }
    }

    /// Applies `replace_patch` for every site to `object` and checks that exactly the site
    /// pointers changed: a patch that fails to apply fails the user's request.
    fn assert_patch_rewrites(object: &Value, sites: &[ImageSite]) {
        let edits: Vec<(String, String)> = sites
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    s.pointer.clone(),
                    format!("pinned.example/{i}@sha256:{}", "a".repeat(64)),
                )
            })
            .collect();
        let patch = replace_patch(&edits).unwrap();
        assert_eq!(patch.0.len(), sites.len());

        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();

        let mut expected = object.clone();
        for (pointer, image) in &edits {
            let slot = expected.pointer_mut(pointer).unwrap();
            assert!(slot.is_string(), "{pointer} must already hold the image");
            *slot = Value::String(image.clone());
        }
        assert_eq!(patched, expected);
    }

    fn check_fixture(fixture: &str, want: &[ImageSite]) {
        let req = request(fixture);
        let sites = sites_of(&req).unwrap();
        assert_eq!(sites, want);
        assert_patch_rewrites(&req["object"], &sites);
    }

    // --- table ---

    #[test]
    fn builtin_table() {
        let kinds = PodSpecKinds::builtin();
        let cases = [
            ("", "Pod", "/spec"),
            ("", "PodTemplate", "/template/spec"),
            ("", "ReplicationController", "/spec/template/spec"),
            ("apps", "Deployment", "/spec/template/spec"),
            ("apps", "ReplicaSet", "/spec/template/spec"),
            ("apps", "StatefulSet", "/spec/template/spec"),
            ("apps", "DaemonSet", "/spec/template/spec"),
            ("batch", "Job", "/spec/template/spec"),
            ("batch", "CronJob", "/spec/jobTemplate/spec/template/spec"),
            ("", "EphemeralContainers", ""),
        ];
        for (group, kind, pointer) in cases {
            assert_eq!(
                kinds.pod_spec_pointer(group, kind),
                Some(pointer),
                "{group}/{kind}"
            );
        }
        assert_eq!(kinds.pod_spec_pointer("apps", "Pod"), None);
        assert_eq!(kinds.pod_spec_pointer("", "Deployment"), None);
        assert_eq!(kinds.pod_spec_pointer("autoscaling", "Scale"), None);
        assert_eq!(kinds.pod_spec_pointer("argoproj.io", "Rollout"), None);

        let kinds = kinds.with_extra("argoproj.io", "Rollout", "/spec/template/spec");
        assert_eq!(
            kinds.pod_spec_pointer("argoproj.io", "Rollout"),
            Some("/spec/template/spec")
        );
    }

    #[test]
    fn field_names_and_describe() {
        let names: Vec<&str> = ImageField::ALL.iter().map(|f| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "containers",
                "initContainers",
                "ephemeralContainers",
                "volumes"
            ]
        );
        assert_eq!(ImageField::InitContainers.to_string(), "initContainers");
        let s = site(
            "/spec/volumes/0/image/reference",
            ImageField::ImageVolume,
            "models",
            "m:1",
            true,
        );
        assert_eq!(s.describe(), "volumes[models]");
    }

    // --- every built-in kind on CREATE ---

    /// Fixtures with one image: where it lives (the ephemeral-container ones: only the debug
    /// container, `/spec/containers` is left alone on that subresource), and the patch
    /// rewrites exactly it.
    #[rstest::rstest]
    #[case::pod_120(
        POD_BASIC_120,
        "/spec/containers/0/image",
        ImageField::Containers,
        "app",
        "registry.example/team/app:1.0"
    )]
    #[case::pod_126(
        POD_BASIC_126,
        "/spec/containers/0/image",
        ImageField::Containers,
        "app",
        "registry.example/team/app:1.0"
    )]
    #[case::podtemplate(
        PODTEMPLATE,
        "/template/spec/containers/0/image",
        ImageField::Containers,
        "app",
        "registry.example/team/app:1.0"
    )]
    #[case::replicationcontroller(
        RC,
        "/spec/template/spec/containers/0/image",
        ImageField::Containers,
        "app",
        "registry.example/team/app:1.0"
    )]
    #[case::replicaset(
        REPLICASET,
        "/spec/template/spec/containers/0/image",
        ImageField::Containers,
        "app",
        "registry.example/team/app:1.0"
    )]
    #[case::statefulset(
        STATEFULSET,
        "/spec/template/spec/containers/0/image",
        ImageField::Containers,
        "db",
        "registry.example/team/db:1.0"
    )]
    #[case::daemonset(
        DAEMONSET,
        "/spec/template/spec/containers/0/image",
        ImageField::Containers,
        "agent",
        "registry.example/team/agent:1.0"
    )]
    #[case::job(
        JOB,
        "/spec/template/spec/containers/0/image",
        ImageField::Containers,
        "job",
        "registry.example/team/job:1.0"
    )]
    #[case::ephemeral_subresource_126(
        EPHEMERAL_126,
        "/spec/ephemeralContainers/0/image",
        ImageField::EphemeralContainers,
        "debugger",
        "registry.example/team/debug:1.0"
    )]
    #[case::ephemeral_containers_kind_raw_put_120(
        EPHEMERAL_RAW_PUT_120,
        "/ephemeralContainers/0/image",
        ImageField::EphemeralContainers,
        "debugger",
        "registry.example/team/debug:1.0"
    )]
    fn one_image_fixtures(
        #[case] fixture: &str,
        #[case] pointer: &str,
        #[case] field: ImageField,
        #[case] name: &str,
        #[case] image: &str,
    ) {
        check_fixture(fixture, &[site(pointer, field, name, image, true)]);
    }

    #[test]
    fn pod_multi_init_order() {
        check_fixture(
            POD_MULTI_INIT,
            &[
                site(
                    "/spec/containers/0/image",
                    ImageField::Containers,
                    "app",
                    "registry.example/team/app:1.0",
                    true,
                ),
                site(
                    "/spec/containers/1/image",
                    ImageField::Containers,
                    "sidecar",
                    "quay.io/org/sidecar:v2",
                    true,
                ),
                site(
                    "/spec/containers/2/image",
                    ImageField::Containers,
                    "metrics",
                    "docker.io/library/nginx:1.25",
                    true,
                ),
                site(
                    "/spec/initContainers/0/image",
                    ImageField::InitContainers,
                    "init-a",
                    "registry.example/team/init:1.0",
                    true,
                ),
                site(
                    "/spec/initContainers/1/image",
                    ImageField::InitContainers,
                    "init-b",
                    "busybox:1.36",
                    true,
                ),
            ],
        );
    }

    #[test]
    fn deployment() {
        check_fixture(
            DEPLOYMENT,
            &[
                site(
                    "/spec/template/spec/containers/0/image",
                    ImageField::Containers,
                    "app",
                    "registry.example/team/app:1.0",
                    true,
                ),
                site(
                    "/spec/template/spec/initContainers/0/image",
                    ImageField::InitContainers,
                    "init",
                    "registry.example/team/init:1.0",
                    true,
                ),
            ],
        );
    }

    #[test]
    fn cronjob_v1beta1_and_v1() {
        let want = [site(
            "/spec/jobTemplate/spec/template/spec/containers/0/image",
            ImageField::Containers,
            "cron",
            "registry.example/team/cron:1.0",
            true,
        )];
        assert_eq!(
            str_at(&request(CRONJOB_V1BETA1), "/kind/version"),
            "v1beta1"
        );
        assert_eq!(str_at(&request(CRONJOB_V1), "/kind/version"), "v1");
        check_fixture(CRONJOB_V1BETA1, &want);
        check_fixture(CRONJOB_V1, &want);
    }

    // --- kinds without pods ---

    #[test]
    fn scale_and_configmap_are_not_pod_bearing() {
        assert_eq!(sites_of(&request(SCALE)), None);
        assert_eq!(sites_of(&request(CONFIGMAP)), None);
    }

    // --- ephemeral containers ---

    #[test]
    fn ephemeral_fixtures_are_the_subresource_and_the_1_20_kind() {
        assert_eq!(
            str_at(&request(EPHEMERAL_126), "/subResource"),
            "ephemeralcontainers"
        );
        assert_eq!(
            str_at(&request(EPHEMERAL_RAW_PUT_120), "/kind/kind"),
            "EphemeralContainers"
        );
    }

    #[test]
    fn ephemeral_subresource_marks_existing_entries_old() {
        let mut req = request(EPHEMERAL_126);
        let existing = json!({"name": "first", "image": "registry.example/team/debug@sha256:0123"});
        req["oldObject"]["spec"]["ephemeralContainers"] = json!([existing]);
        let new = req["object"]["spec"]["ephemeralContainers"][0].clone();
        req["object"]["spec"]["ephemeralContainers"] = json!([existing, new]);
        let sites = sites_of(&req).unwrap();
        assert_eq!(
            sites,
            [
                site(
                    "/spec/ephemeralContainers/0/image",
                    ImageField::EphemeralContainers,
                    "first",
                    "registry.example/team/debug@sha256:0123",
                    false
                ),
                site(
                    "/spec/ephemeralContainers/1/image",
                    ImageField::EphemeralContainers,
                    "debugger",
                    "registry.example/team/debug:1.0",
                    true
                ),
            ]
        );
        assert_patch_rewrites(&req["object"], &sites);
    }

    #[test]
    fn ephemeral_containers_kind_empty_list_120() {
        // kubectl 1.32 debug against 1.20: a no-op update with an empty list.
        assert_eq!(sites_of(&request(EPHEMERAL_DEBUG_120)), Some(Vec::new()));
    }

    // --- updates ---

    #[test]
    fn pod_update_set_image() {
        for fixture in [POD_SET_IMAGE_120, POD_SET_IMAGE_126] {
            check_fixture(
                fixture,
                &[site(
                    "/spec/containers/0/image",
                    ImageField::Containers,
                    "app",
                    "registry.example/team/app:2.0",
                    true,
                )],
            );
        }
    }

    #[test]
    fn pod_update_matches_old_entries_by_name_not_index() {
        let mut req = request(POD_SET_IMAGE_126);
        let app = req["object"]["spec"]["containers"][0].clone();
        let old_app = req["oldObject"]["spec"]["containers"][0].clone();
        let side = json!({"name": "side", "image": "quay.io/org/sidecar:v2"});
        req["object"]["spec"]["containers"] = json!([side, app]);
        req["oldObject"]["spec"]["containers"] = json!([old_app, side]);
        let sites = sites_of(&req).unwrap();
        assert_eq!(
            sites,
            [
                site(
                    "/spec/containers/0/image",
                    ImageField::Containers,
                    "side",
                    "quay.io/org/sidecar:v2",
                    false
                ),
                site(
                    "/spec/containers/1/image",
                    ImageField::Containers,
                    "app",
                    "registry.example/team/app:2.0",
                    true
                ),
            ]
        );
        assert_patch_rewrites(&req["object"], &sites);
    }

    #[test]
    fn pod_update_skips_ephemeral_containers_and_volumes() {
        // Pod update validation rejects changes to these; patching them would fail the request.
        let mut req = request(POD_SET_IMAGE_126);
        let debug = json!([{"name": "debugger", "image": "registry.example/team/debug:1.0"}]);
        let volumes =
            json!([{"name": "models", "image": {"reference": "registry.example/models:v1"}}]);
        for key in ["object", "oldObject"] {
            req[key]["spec"]["ephemeralContainers"] = debug.clone();
            req[key]["spec"]["volumes"] = volumes.clone();
        }
        let sites = sites_of(&req).unwrap();
        assert_eq!(
            sites,
            [site(
                "/spec/containers/0/image",
                ImageField::Containers,
                "app",
                "registry.example/team/app:2.0",
                true
            )]
        );
    }

    #[test]
    fn deployment_update_set_image() {
        check_fixture(
            DEPLOYMENT_SET_IMAGE,
            &[
                site(
                    "/spec/template/spec/containers/0/image",
                    ImageField::Containers,
                    "app",
                    "registry.example/team/app:2.0",
                    true,
                ),
                site(
                    "/spec/template/spec/initContainers/0/image",
                    ImageField::InitContainers,
                    "init",
                    "registry.example/team/init:1.0",
                    false,
                ),
            ],
        );
    }

    #[test]
    fn template_changes_are_told_apart_from_other_updates() {
        let kinds = PodSpecKinds::builtin();
        let changed = |req: &Value| {
            template_changed(
                &kinds,
                str_at(req, "/kind/group"),
                str_at(req, "/kind/kind"),
                &req["object"],
                req.get("oldObject").filter(|v| !v.is_null()),
            )
        };
        // kubectl set image: the template changed.
        let set_image = request(DEPLOYMENT_SET_IMAGE);
        assert!(changed(&set_image));
        // kubectl set env, kubectl rollout restart: images untouched, the template changed.
        let mut env = set_image.clone();
        env["object"]["spec"]["template"] = env["oldObject"]["spec"]["template"].clone();
        assert!(!changed(&env), "identical templates");
        env["object"]["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "FOO", "value": "bar"}]);
        assert!(changed(&env));
        let mut restart = set_image.clone();
        restart["object"]["spec"]["template"] = restart["oldObject"]["spec"]["template"].clone();
        restart["object"]["spec"]["template"]["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/restartedAt": "2026-11-23T18:00:00Z"});
        assert!(changed(&restart));
        // Scale, the workload's own labels, status: not the template.
        let mut scale = set_image.clone();
        scale["object"]["spec"]["template"] = scale["oldObject"]["spec"]["template"].clone();
        scale["object"]["spec"]["replicas"] = json!(7);
        scale["object"]["metadata"]["labels"] = json!({"team": "x"});
        scale["object"]["status"] = json!({"replicas": 7});
        assert!(!changed(&scale));
        // CREATE has no old object; Pods are judged image by image; ConfigMaps bear no pods.
        assert!(!changed(&request(DEPLOYMENT)));
        assert!(!changed(&request(POD_SET_IMAGE_120)));
        let mut configmap = request(CONFIGMAP);
        configmap["oldObject"] = json!({"data": {}});
        assert!(!changed(&configmap));
    }

    #[test]
    fn template_of_every_builtin_workload_is_the_podspec_parent() {
        let kinds = PodSpecKinds::builtin();
        for (group, kind, template) in [
            ("", "PodTemplate", "/template"),
            ("", "ReplicationController", "/spec/template"),
            ("apps", "Deployment", "/spec/template"),
            ("apps", "ReplicaSet", "/spec/template"),
            ("apps", "StatefulSet", "/spec/template"),
            ("apps", "DaemonSet", "/spec/template"),
            ("batch", "Job", "/spec/template"),
            ("batch", "CronJob", "/spec/jobTemplate/spec/template"),
        ] {
            let mut old = json!({"metadata": {"generation": 1}});
            set_at(
                &mut old,
                template,
                json!({"metadata": {"labels": {"app": "a"}}, "spec": {}}),
            );
            let mut new = old.clone();
            new["metadata"]["generation"] = json!(2);
            assert!(
                !template_changed(&kinds, group, kind, &new, Some(&old)),
                "{kind}"
            );
            set_at(
                &mut new,
                &format!("{template}/metadata/labels/app"),
                json!("b"),
            );
            assert!(
                template_changed(&kinds, group, kind, &new, Some(&old)),
                "{kind}"
            );
        }
        // An extra kind whose PodSpec sits at /spec: the PodSpec is compared, not the object.
        let kinds = kinds.with_extra("example.dev", "Runner", "/spec");
        let old = json!({"metadata": {"generation": 1}, "spec": {"containers": []}});
        let mut new = old.clone();
        new["metadata"]["generation"] = json!(2);
        assert!(!template_changed(
            &kinds,
            "example.dev",
            "Runner",
            &new,
            Some(&old)
        ));
    }

    /// Creates the objects on the way and sets the value at an unescaped pointer.
    fn set_at(root: &mut Value, pointer: &str, value: Value) {
        let mut slot = root;
        for token in pointer.split('/').skip(1) {
            slot = &mut slot[token];
        }
        *slot = value;
    }

    #[test]
    fn deployment_update_walks_image_volumes() {
        let mut req = request(DEPLOYMENT_SET_IMAGE);
        req["oldObject"]["spec"]["template"]["spec"]["volumes"] =
            json!([{"name": "models", "image": {"reference": "registry.example/models:v1"}}]);
        req["object"]["spec"]["template"]["spec"]["volumes"] =
            json!([{"name": "models", "image": {"reference": "registry.example/models:v2"}}]);
        let sites = sites_of(&req).unwrap();
        assert_eq!(sites.len(), 3);
        assert_eq!(
            sites[2],
            site(
                "/spec/template/spec/volumes/0/image/reference",
                ImageField::ImageVolume,
                "models",
                "registry.example/models:v2",
                true
            )
        );
        assert_patch_rewrites(&req["object"], &sites);
    }

    // --- hand-written objects ---

    #[test]
    fn image_volumes() {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "spec": {
                "containers": [{"name": "app", "image": "registry.example/team/app:1.0"}],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "models", "image": {"reference": "registry.example/models:v1", "pullPolicy": "IfNotPresent"}},
                    {"name": "unset", "image": {"pullPolicy": "Always"}},
                    {"name": "empty", "image": {"reference": ""}},
                    {"name": "null", "image": null}
                ]
            }
        });
        let sites = image_sites(&PodSpecKinds::builtin(), "", "Pod", "", &pod, None)
            .unwrap()
            .unwrap();
        assert_eq!(
            sites,
            [
                site(
                    "/spec/containers/0/image",
                    ImageField::Containers,
                    "app",
                    "registry.example/team/app:1.0",
                    true
                ),
                site(
                    "/spec/volumes/1/image/reference",
                    ImageField::ImageVolume,
                    "models",
                    "registry.example/models:v1",
                    true
                ),
            ]
        );
        assert_patch_rewrites(&pod, &sites);
    }

    #[test]
    fn empty_and_absent_images_are_not_sites() {
        let pod = json!({"spec": {
            "containers": [{"name": "a", "image": ""}, {"name": "b"}, {"name": "c", "image": null}],
            "initContainers": null
        }});
        let sites = image_sites(&PodSpecKinds::builtin(), "", "Pod", "", &pod, None).unwrap();
        assert_eq!(sites, Some(Vec::new()));
    }

    #[test]
    fn pointer_escaping_in_extra_kind() {
        // Keys "pod/template" and "a~b" escape to "pod~1template" and "a~0b".
        let kinds =
            PodSpecKinds::builtin().with_extra("example.com", "Thing", "/spec/pod~1template/a~0b");
        let thing = json!({
            "kind": "Thing",
            "spec": {"pod/template": {"a~b": {
                "containers": [{"name": "we/ird~name", "image": "registry.example/team/app:1.0"}]
            }}}
        });
        let sites = image_sites(&kinds, "example.com", "Thing", "", &thing, None)
            .unwrap()
            .unwrap();
        assert_eq!(
            sites,
            [site(
                "/spec/pod~1template/a~0b/containers/0/image",
                ImageField::Containers,
                "we/ird~name",
                "registry.example/team/app:1.0",
                true
            )]
        );
        assert_patch_rewrites(&thing, &sites);
        assert_eq!(
            pod_spec(&kinds, "example.com", "Thing", &thing),
            thing.pointer("/spec/pod~1template/a~0b")
        );
    }

    #[test]
    fn escape_tokens() {
        assert_eq!(escape_token("plain"), "plain");
        assert_eq!(escape_token("a/b~c"), "a~1b~0c");
        assert_eq!(escape_token("~1"), "~01");
        assert_eq!(child("", "x"), "/x");
        assert_eq!(child("/spec", "0"), "/spec/0");
    }

    #[test]
    fn null_or_missing_replicationcontroller_template() {
        let mut req = request(RC);
        req["object"]["spec"]["template"] = Value::Null;
        assert_eq!(sites_of(&req), Some(Vec::new()));
        assert_eq!(
            pod_spec(
                &PodSpecKinds::builtin(),
                "",
                "ReplicationController",
                &req["object"]
            ),
            None
        );

        req["object"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("template");
        assert_eq!(sites_of(&req), Some(Vec::new()));
    }

    #[test]
    fn pod_spec_of_fixture() {
        let req = request(DEPLOYMENT);
        let spec = pod_spec(
            &PodSpecKinds::builtin(),
            "apps",
            "Deployment",
            &req["object"],
        )
        .unwrap();
        assert!(spec.get("containers").is_some());
        assert_eq!(
            pod_spec(&PodSpecKinds::builtin(), "", "ConfigMap", &req["object"]),
            None
        );
    }

    #[test]
    fn wrong_types_are_errors() {
        let kinds = PodSpecKinds::builtin();
        let cases = [
            (json!({"spec": []}), "/spec", "an object"),
            (
                json!({"spec": {"containers": "app"}}),
                "/spec/containers",
                "an array",
            ),
            (
                json!({"spec": {"initContainers": {"name": "x"}}}),
                "/spec/initContainers",
                "an array",
            ),
            (
                json!({"spec": {"containers": ["nginx"]}}),
                "/spec/containers/0",
                "an object",
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "image": 5}]}}),
                "/spec/containers/0/image",
                "a string",
            ),
            (
                json!({"spec": {"containers": [{"name": 7, "image": "nginx"}]}}),
                "/spec/containers/0/name",
                "a string",
            ),
            (
                json!({"spec": {"volumes": [{"name": "v", "image": "nginx"}]}}),
                "/spec/volumes/0/image",
                "an object",
            ),
            (
                json!({"spec": {"volumes": [{"name": "v", "image": {"reference": []}}]}}),
                "/spec/volumes/0/image/reference",
                "a string",
            ),
        ];
        for (object, pointer, expected) in cases {
            let err = image_sites(&kinds, "", "Pod", "", &object, None).unwrap_err();
            assert_eq!(
                err,
                WorkloadError::UnexpectedType {
                    pointer: pointer.to_string(),
                    expected
                },
                "{object}"
            );
        }
        let err = image_sites(
            &kinds,
            "",
            "Pod",
            "",
            &json!({"spec": {"containers": 1}}),
            None,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "/spec/containers is not an array");
    }

    #[test]
    fn malformed_old_object_only_makes_sites_new() {
        let object = json!({"spec": {"containers": [{"name": "a", "image": "nginx"}]}});
        let old = json!({"spec": {"containers": "garbage"}});
        let sites = image_sites(
            &PodSpecKinds::builtin(),
            "apps",
            "Deployment",
            "",
            &json!({"spec": {"template": object}}),
            Some(&json!({"spec": {"template": old}})),
        )
        .unwrap()
        .unwrap();
        assert_eq!(sites.len(), 1);
        assert!(sites[0].is_new);
    }

    // --- patch ---

    #[test]
    fn replace_patch_wire_format() {
        let patch = replace_patch(&[
            (
                "/spec/containers/0/image".to_string(),
                "nginx@sha256:abc".to_string(),
            ),
            (
                "/spec/pod~1template/a~0b/containers/1/image".to_string(),
                "x".to_string(),
            ),
        ])
        .unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx@sha256:abc"},
                {"op": "replace", "path": "/spec/pod~1template/a~0b/containers/1/image", "value": "x"}
            ])
        );
        assert_eq!(replace_patch(&[]).unwrap().0.len(), 0);
    }

    #[test]
    fn replace_patch_rejects_invalid_pointers() {
        for bad in ["spec/containers/0/image", "/spec/a~2b"] {
            let err = replace_patch(&[(bad.to_string(), "x".to_string())]).unwrap_err();
            assert!(
                matches!(&err, WorkloadError::InvalidPointer { pointer, .. } if pointer == bad),
                "{err}"
            );
        }
    }
}
