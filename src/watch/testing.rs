//! Test fixtures: one-site Pods and the states their image is in, owned, for the tests of what is
//! built from classified images (reports, Events, the inventory, the recheck plan), which borrow
//! them.

use super::classify::{ClassifiedImage, ImageState};
use super::pod::{PodImage, PodRecord, WorkloadRef};
use crate::workload::ImageField;

/// One Pod with one image site, and the state that image is classified in.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub pod: PodRecord,
    pub state: ImageState,
    pub origin: Option<String>,
}

/// The Pod `uid` of `workload` (in the workload's namespace), running `site` in `state`.
pub(crate) fn seen(uid: &str, workload: &WorkloadRef, site: PodImage, state: ImageState) -> Seen {
    Seen {
        pod: PodRecord {
            namespace: workload.namespace.clone(),
            name: uid.to_string(),
            uid: uid.to_string(),
            owner: None,
            workload: workload.clone(),
            images: vec![site],
            pull_secrets: Vec::new(),
            service_account: "default".to_string(),
            terminal: false,
            mirror: false,
            node: None,
        },
        state,
        origin: None,
    }
}

/// Deployment `name` in `namespace` (no uid: the owner chain is not followed).
pub(crate) fn deployment(namespace: &str, name: &str) -> WorkloadRef {
    WorkloadRef {
        namespace: namespace.into(),
        kind: "Deployment".into(),
        name: name.into(),
        api_version: "apps/v1".into(),
        uid: None,
    }
}

/// Container `app` running `image`, not started.
pub(crate) fn container(image: &str) -> PodImage {
    PodImage {
        running: None,
        field: ImageField::Containers,
        name: "app".into(),
        image: image.into(),
    }
}

/// Every fixture's image, classified.
pub(crate) fn classified(seen: &[Seen]) -> Vec<ClassifiedImage<'_>> {
    seen.iter().map(Seen::classified).collect()
}

// === impl Seen ===

impl Seen {
    /// The Pod's one image, classified in the fixture's state.
    pub fn classified(&self) -> ClassifiedImage<'_> {
        ClassifiedImage {
            pod: &self.pod,
            site: &self.pod.images[0],
            state: self.state.clone(),
            origin: self.origin.clone(),
        }
    }

    /// The same, its Pod on `node`.
    pub fn on(mut self, node: &str) -> Seen {
        self.pod.node = Some(node.to_string());
        self
    }
}
