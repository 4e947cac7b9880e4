//! The inventory behind `pinhook inventory`: every running image with its digests, state, and
//! the workloads and Pods that run it, to answer "where does `sha256:…` run?".
//!
//! Owns: aggregating classified images into rows, the `--digest` filter and the two renderings
//! (a kubectl-style table and JSON). Pure: works on what the caller classified.
//!
//! **Rows.** One row per distinct (image, pinned digest, state, current digest, reason, what
//! runs), so a
//! row's state is never ambiguous: the same image exempt in one namespace and unpinned in
//! another is two rows. Images are normalised (`nginx:1.25` and
//! `docker.io/library/nginx:1.25` are one image); one that does not parse is shown as written.
//! Rows are sorted by image, then digest; each row's workloads are deduplicated and sorted by
//! namespace, kind, name; `pods` counts distinct Pods.
//!
//! **Digests.** `digest` is the digest the image is pinned to; `currentDigest` what its tag
//! resolves to now. For an unpinned image the latter says what a new Pod would pull, not
//! necessarily what a running one pulled earlier: the filter matches it so that a digest an
//! unpinned tag points at is found, and the state (`unpinned`) tells the reader how far to trust
//! it. `running` is what the nodes report they run (`imageID`: the digest pulled,
//! `local-image-id` for a config digest, `unrecognized`), with the `nodes` the row's Pods are on:
//! for an unpinned image it is what a running Pod did pull.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::reference::{Digest, Reference};
use crate::text::into_one_line;

use super::classify::ClassifiedImage;
use super::pod::{RunningImage, WorkloadRef};

/// Every row, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Inventory {
    pub images: Vec<InventoryRow>,
}

/// One image in one state, and who runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryRow {
    /// The normalised reference (`docker.io/library/nginx:1.25@sha256:…`).
    pub image: String,
    /// The digest the image is pinned to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// What the image's tag resolves to now, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_digest: Option<String>,
    /// `unpinned`, `pinned-current`, `tag-moved`, `digest-only`, `unresolvable` or `exempt`.
    pub state: &'static str,
    /// Why it is unresolvable or exempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the nodes report they run (`status.containerStatuses[].imageID`): the digest
    /// pulled, or what kind of ID they report instead; absent while nothing runs yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// Distinct Pods running it.
    pub pods: usize,
    /// The nodes its Pods run on, sorted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    pub workloads: Vec<WorkloadRef>,
}

/// What makes a row distinct, in row order.
type RowKey = (
    String,
    Option<String>,
    &'static str,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// Who runs one row's image, borrowed from the classified images until the row is built.
#[derive(Default)]
struct Users<'a> {
    pods: BTreeSet<&'a str>,
    nodes: BTreeSet<&'a str>,
    workloads: BTreeSet<&'a WorkloadRef>,
}

/// Padding between table columns, and the narrowest column: kubectl's tabwriter settings
/// (`printers.GetNewTabWriter`).
const PADDING: usize = 3;
const MIN_WIDTH: usize = 6;
const NONE: &str = "<none>";

// === impl Inventory ===

impl Inventory {
    /// Aggregates classified images (from any number of Pods and namespaces) into rows.
    pub fn from_images(images: &[ClassifiedImage<'_>]) -> Inventory {
        let mut rows: BTreeMap<RowKey, Users> = BTreeMap::new();
        for image in images {
            let state = &image.state;
            let key = (
                normalised(&image.site.image),
                state.pinned().map(Digest::to_string),
                state.as_str(),
                state.current().map(Digest::to_string),
                state.detail().map(str::to_string),
                image.site.running.as_ref().map(RunningImage::describe),
            );
            let users = rows.entry(key).or_default();
            users.pods.insert(image.pod_uid());
            users.nodes.extend(image.node());
            users.workloads.insert(image.workload());
        }
        let images = rows
            .into_iter()
            .map(
                |((image, digest, state, current_digest, reason, running), users)| InventoryRow {
                    image,
                    digest,
                    current_digest,
                    state,
                    reason,
                    running,
                    pods: users.pods.len(),
                    nodes: users.nodes.into_iter().map(str::to_string).collect(),
                    workloads: users.workloads.into_iter().cloned().collect(),
                },
            )
            .collect();
        Inventory { images }
    }

    /// The rows where `digest` runs: pinned to it, the tag's current digest, or what a node
    /// reports it runs.
    pub fn with_digest(&self, digest: &Digest) -> Inventory {
        let wanted = digest.to_string();
        let matches = |d: &Option<String>| d.as_deref() == Some(wanted.as_str());
        Inventory {
            images: self
                .images
                .iter()
                .filter(|row| {
                    matches(&row.digest) || matches(&row.current_digest) || matches(&row.running)
                })
                .cloned()
                .collect(),
        }
    }

    /// A fixed-width table as kubectl prints one: a header, one line per row, columns padded by
    /// three spaces, `<none>` for an empty cell, full digests (so they can be pasted into
    /// `--digest`). Workloads are `namespace/Kind/name`, comma-separated. An empty inventory is
    /// the header alone; what to say about it is the caller's.
    pub fn to_table(&self) -> String {
        let header = [
            "IMAGE",
            "STATE",
            "DIGEST",
            "CURRENT",
            "RUNNING",
            "PODS",
            "NODES",
            "WORKLOADS",
        ]
        .map(String::from);
        let mut lines = vec![header];
        for row in &self.images {
            let workloads: Vec<String> = row.workloads.iter().map(WorkloadRef::describe).collect();
            let cells = [
                row.image.clone(),
                row.state.to_string(),
                row.digest.clone().unwrap_or_else(|| NONE.to_string()),
                row.current_digest
                    .clone()
                    .unwrap_or_else(|| NONE.to_string()),
                row.running.clone().unwrap_or_else(|| NONE.to_string()),
                row.pods.to_string(),
                if row.nodes.is_empty() {
                    NONE.to_string()
                } else {
                    row.nodes.join(",")
                },
                if workloads.is_empty() {
                    NONE.to_string()
                } else {
                    workloads.join(",")
                },
            ];
            // Images and names come from the cluster's objects: one line each, nothing raw
            // reaches the terminal.
            lines.push(cells.map(into_one_line));
        }
        let columns = lines[0].len();
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                let widest = lines
                    .iter()
                    .map(|l| l[c].chars().count())
                    .max()
                    .unwrap_or(0);
                (widest + PADDING).max(MIN_WIDTH)
            })
            .collect();
        let mut out = String::new();
        for line in &lines {
            for (c, cell) in line.iter().enumerate() {
                if c + 1 == columns {
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<width$}", width = widths[c]));
                }
            }
            out.push('\n');
        }
        out
    }

    /// The inventory as pretty JSON: `{"images": [{"image", "digest"?, "currentDigest"?,
    /// "state", "reason"?, "running"?, "pods", "nodes"?, "workloads": [{"namespace", "kind", "name", "apiVersion",
    /// "uid"?}]}]}`.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }
}

/// One cycle's inventory as `/inventory` serves it: the inventory and its JSON, written once
/// for every caller. Each caller cloned the whole inventory and wrote JSON of its own, so
/// callers at once held as many copies of both (issue 44); now they share these.
#[derive(Debug)]
pub struct Snapshot {
    inventory: Inventory,
    json: std::sync::OnceLock<Option<std::sync::Arc<[u8]>>>,
}

impl Snapshot {
    pub fn new(inventory: Inventory) -> Snapshot {
        Snapshot {
            inventory,
            json: std::sync::OnceLock::new(),
        }
    }

    /// The inventory's JSON ([`Inventory::to_json`]), written by the first caller; `None` when
    /// it cannot be written.
    pub fn json(&self) -> Option<std::sync::Arc<[u8]>> {
        self.json
            .get_or_init(|| {
                let json = self.inventory.to_json().ok()?;
                Some(std::sync::Arc::from(json.into_bytes()))
            })
            .clone()
    }
}

impl std::ops::Deref for Snapshot {
    type Target = Inventory;

    fn deref(&self) -> &Inventory {
        &self.inventory
    }
}

/// The fully normalised reference, or the string as written when it does not parse.
fn normalised(image: &str) -> String {
    Reference::parse(image).map_or_else(|_| image.to_string(), |r| r.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::testing::digest;
    use crate::watch::classify::{classify_image, ImageState, TagLookup};
    use crate::watch::pod::PodImage;
    use crate::watch::testing::{classified, Seen};
    use crate::workload::ImageField;

    fn workload(namespace: &str, kind: &str, name: &str) -> WorkloadRef {
        WorkloadRef {
            namespace: namespace.into(),
            kind: kind.into(),
            name: name.into(),
            api_version: "apps/v1".into(),
            uid: None,
        }
    }

    fn seen(pod: &str, workload: &WorkloadRef, image: &str, state: ImageState) -> Seen {
        let site = PodImage {
            running: None,
            field: ImageField::Containers,
            name: "app".into(),
            image: image.into(),
        };
        crate::watch::testing::seen(pod, workload, site, state)
    }

    fn fixture() -> Vec<Seen> {
        let web = workload("shop", "Deployment", "web");
        let api = workload("shop", "Deployment", "api");
        let batch = workload("jobs", "Job", "nightly");
        let pinned = format!("nginx:1.25@{}", digest('a'));
        let moved = ImageState::TagMoved {
            pinned: digest('a'),
            now: digest('b'),
        };
        vec![
            seen("p1", &web, &pinned, moved.clone()),
            seen("p2", &web, &pinned, moved.clone()),
            // Same image written in full: one row.
            seen(
                "p3",
                &api,
                &format!("docker.io/library/nginx:1.25@{}", digest('a')),
                moved,
            ),
            seen(
                "p4",
                &batch,
                "busybox:1.36",
                ImageState::Unpinned {
                    current: Some(digest('b')),
                },
            ),
            seen(
                "p5",
                &batch,
                "Bad:Ref",
                classify_image("Bad:Ref", None, TagLookup::NotLooked),
            ),
        ]
    }

    #[test]
    fn rows_aggregate_pods_and_workloads_per_image_and_state() {
        let inventory = Inventory::from_images(&classified(&fixture()));
        let summary: Vec<_> = inventory
            .images
            .iter()
            .map(|r| (r.image.as_str(), r.state, r.pods, r.workloads.len()))
            .collect();
        assert_eq!(
            summary,
            [
                ("Bad:Ref", "unresolvable", 1, 1),
                ("docker.io/library/busybox:1.36", "unpinned", 1, 1),
                (
                    &*format!("docker.io/library/nginx:1.25@{}", digest('a')),
                    "tag-moved",
                    3,
                    2
                ),
            ]
        );
        let nginx = &inventory.images[2];
        assert_eq!(nginx.digest, Some(digest('a').to_string()));
        assert_eq!(nginx.current_digest, Some(digest('b').to_string()));
        let names: Vec<_> = nginx.workloads.iter().map(WorkloadRef::describe).collect();
        assert_eq!(names, ["shop/Deployment/api", "shop/Deployment/web"]);
        assert!(inventory.images[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("invalid image reference")));
    }

    #[test]
    fn one_image_in_two_states_is_two_rows() {
        let a = workload("kube-system", "DaemonSet", "proxy");
        let b = workload("shop", "Deployment", "web");
        let images = [
            seen(
                "p1",
                &a,
                "nginx:1.25",
                ImageState::Exempt {
                    why: "namespace kube-system is exempt".into(),
                },
            ),
            seen(
                "p2",
                &b,
                "nginx:1.25",
                ImageState::Unpinned { current: None },
            ),
        ];
        let states: Vec<_> = Inventory::from_images(&classified(&images))
            .images
            .iter()
            .map(|r| r.state)
            .collect();
        assert_eq!(states, ["exempt", "unpinned"]);
    }

    #[test]
    fn the_digest_filter_matches_pinned_and_current_digests() {
        let inventory = Inventory::from_images(&classified(&fixture()));
        let images = |d: char| -> Vec<String> {
            inventory
                .with_digest(&digest(d))
                .images
                .into_iter()
                .map(|r| r.image)
                .collect()
        };
        assert_eq!(
            images('a'),
            [format!("docker.io/library/nginx:1.25@{}", digest('a'))]
        );
        // The tag now points at b: the moved nginx and the unpinned busybox.
        assert_eq!(images('b').len(), 2);
        assert!(images('c').is_empty());
    }

    #[test]
    fn the_table_is_aligned_like_kubectl() {
        let inventory = Inventory::from_images(&classified(&fixture())).with_digest(&digest('b'));
        let table = inventory.to_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        let image_width = format!("docker.io/library/nginx:1.25@{}", digest('a')).len() + PADDING;
        assert_eq!(
            lines[0],
            format!(
                "{:<image_width$}{:<12}{:<74}{:<74}{:<10}{:<7}{:<9}WORKLOADS",
                "IMAGE", "STATE", "DIGEST", "CURRENT", "RUNNING", "PODS", "NODES"
            )
        );
        assert_eq!(
            lines[1],
            format!(
                "{:<image_width$}{:<12}{:<74}{:<74}{:<10}{:<7}{:<9}jobs/Job/nightly",
                "docker.io/library/busybox:1.36",
                "unpinned",
                NONE,
                digest('b').to_string(),
                NONE,
                1,
                NONE
            )
        );
        assert!(lines[2].ends_with("   3      <none>   shop/Deployment/api,shop/Deployment/web"));
        // An image from a tenant's Pod with a line break and terminal codes stays on its row.
        let mut hostile = inventory.clone();
        hostile.images[0].image = "busybox:1\nforged   row\x1b[2J\u{9b}".to_string();
        let table = hostile.to_table();
        assert_eq!(table.lines().count(), 3, "{table}");
        assert!(
            table.lines().nth(1).is_some_and(|row| row
                .starts_with(r"busybox:1\nforged   row\u{1b}[2J\u{9b} ")
                && row.contains(" unpinned ")),
            "{table}"
        );
        let empty = Inventory::default().to_table();
        assert_eq!(
            empty,
            "IMAGE   STATE   DIGEST   CURRENT   RUNNING   PODS   NODES   WORKLOADS\n"
        );
    }

    #[test]
    fn json_names_every_field_in_camel_case() {
        let inventory = Inventory::from_images(&classified(&fixture())).with_digest(&digest('a'));
        let json: serde_json::Value =
            serde_json::from_str(&inventory.to_json().expect("serialises")).expect("JSON");
        assert_eq!(
            json,
            serde_json::json!({"images": [{
                "image": format!("docker.io/library/nginx:1.25@{}", digest('a')),
                "digest": digest('a').to_string(),
                "currentDigest": digest('b').to_string(),
                "state": "tag-moved",
                "pods": 3,
                "workloads": [
                    {"namespace": "shop", "kind": "Deployment", "name": "api", "apiVersion": "apps/v1"},
                    {"namespace": "shop", "kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}
                ]
            }]})
        );
    }

    /// Every `/inventory` caller of one cycle gets the same JSON, written once (each wrote its
    /// own from its own clone of the inventory).
    #[test]
    fn a_snapshot_writes_its_json_once_for_every_caller() {
        let snapshot = Snapshot::new(Inventory::from_images(&classified(&fixture())));
        let (first, second) = (snapshot.json().unwrap(), snapshot.json().unwrap());
        assert!(std::sync::Arc::ptr_eq(&first, &second));
        assert_eq!(&*first, snapshot.to_json().unwrap().as_bytes());
    }
}
