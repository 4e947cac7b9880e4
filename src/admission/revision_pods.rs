//! The digests the stored Pods of one owner revision carry: where every replica finds the
//! digest a revision's first Pods got (issue 43). Each replica used to remember it in its own
//! memory, so with the chart's two replicas, a tag that moved between two creations gave Pods
//! of one ReplicaSet revision two digests, one per replica. The cluster holds the answer: the
//! revision's Pods already stored, which every replica reads alike ([`RevisionPods`]), and the
//! oldest of them decides ([`sibling_digest`]), so replicas that raced on the first Pods agree
//! from the next one on.
//!
//! Read only for a Pod made by a controller that labels its revisions (`pod-template-hash`,
//! `controller-revision-hash`, a Job's `controller-uid`), at most once per review and only
//! while this replica holds no digest the cluster told it for that revision, never for a dry
//! run, from the apiserver's watch cache (`resourceVersion=0`), at most [`MAX_SIBLINGS`] Pods
//! kept, within the review's budget.
//! What a sibling says is a digest its own review pinned or its author wrote: someone who may
//! create Pods in the namespace could choose it, as they can write any digest in a Pod; it is
//! never read across namespaces.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::reference::{Digest, Reference};

/// Pods of one revision read at most.
pub const MAX_SIBLINGS: u32 = 100;

/// Which stored Pods are one Pod's revision siblings: same namespace, this label and value,
/// this controller uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision<'a> {
    pub namespace: &'a str,
    pub label: &'static str,
    pub value: &'a str,
    pub owner_uid: &'a str,
}

/// One stored sibling: when it was made (RFC 3339, which sorts as time), its name, its images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sibling {
    pub created: String,
    pub name: String,
    pub images: Vec<String>,
}

/// The stored Pods of a revision.
#[async_trait]
pub trait RevisionPods: Send + Sync {
    /// The revision's stored Pods; `Ok(None)` when there is no cluster to ask.
    async fn siblings(&self, revision: &Revision<'_>) -> Result<Option<Vec<Sibling>>, kube::Error>;
}

/// No cluster: nothing to ask (each replica's memory answers, as before).
pub struct NoRevisionPods;

/// The apiserver's watch cache.
pub struct KubeRevisionPods {
    client: kube::Client,
}

// === impl NoRevisionPods ===

#[async_trait]
impl RevisionPods for NoRevisionPods {
    async fn siblings(
        &self,
        _revision: &Revision<'_>,
    ) -> Result<Option<Vec<Sibling>>, kube::Error> {
        Ok(None)
    }
}

// === impl KubeRevisionPods ===

impl KubeRevisionPods {
    pub fn new(client: kube::Client) -> KubeRevisionPods {
        KubeRevisionPods { client }
    }
}

#[async_trait]
impl RevisionPods for KubeRevisionPods {
    async fn siblings(&self, revision: &Revision<'_>) -> Result<Option<Vec<Sibling>>, kube::Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), revision.namespace);
        // No `limit`: with one, the list is not served from the watch cache (kube-core drops
        // `resourceVersion=0` then) but from etcd. The label selects one revision; at most
        // MAX_SIBLINGS of its Pods are kept.
        let params = ListParams::default()
            .labels(&format!("{}={}", revision.label, revision.value))
            .match_any();
        let pods = api.list(&params).await?;
        Ok(Some(
            pods.items
                .into_iter()
                .filter(|pod| {
                    pod.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.controller == Some(true) && o.uid == revision.owner_uid)
                })
                .map(|pod| {
                    let images = pod
                        .spec
                        .map(|spec| {
                            spec.init_containers
                                .into_iter()
                                .flatten()
                                .chain(spec.containers)
                                .filter_map(|c| c.image)
                                .collect()
                        })
                        .unwrap_or_default();
                    Sibling {
                        created: pod
                            .metadata
                            .creation_timestamp
                            .map(|t| t.0.to_string())
                            .unwrap_or_default(),
                        name: pod.metadata.name.unwrap_or_default(),
                        images,
                    }
                })
                .take(MAX_SIBLINGS as usize)
                .collect(),
        ))
    }
}

/// The digest the oldest sibling (then the first by name) pinned `reference`'s tag to, if any
/// sibling names that tag with a digest.
pub fn sibling_digest(siblings: &[Sibling], reference: &Reference) -> Option<Digest> {
    let wanted = reference.tag_reference();
    let mut ordered: Vec<&Sibling> = siblings.iter().collect();
    ordered.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
    ordered.iter().find_map(|sibling| {
        sibling.images.iter().find_map(|image| {
            let pinned = Reference::parse(image).ok()?;
            let digest = pinned.digest()?.clone();
            (pinned.tag().is_some() && pinned.tag_reference() == wanted).then_some(digest)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::testing::digest;

    fn sibling(created: &str, name: &str, images: &[String]) -> Sibling {
        Sibling {
            created: created.to_string(),
            name: name.to_string(),
            images: images.to_vec(),
        }
    }

    #[test]
    fn the_oldest_sibling_decides_then_the_first_by_name() {
        let tag = "registry.example/team/app:1.0";
        let reference = Reference::parse(tag).expect("parses");
        let pinned = |c| format!("{tag}@{}", digest(c));
        let siblings = [
            sibling("2026-11-29T10:00:05Z", "web-a", &[pinned('b')]),
            sibling("2026-11-29T10:00:01Z", "web-z", &[pinned('a')]),
            sibling(
                "2026-11-29T10:00:01Z",
                "web-y",
                &["sidecar:1".to_string(), pinned('c')],
            ),
        ];
        assert_eq!(sibling_digest(&siblings, &reference), Some(digest('c')));
        // Another tag, or a tag written without a digest, says nothing.
        let other = Reference::parse("registry.example/team/app:2.0").expect("parses");
        assert_eq!(sibling_digest(&siblings, &other), None);
        let unpinned = [sibling("2026-11-29T10:00:00Z", "web-0", &[tag.to_string()])];
        assert_eq!(sibling_digest(&unpinned, &reference), None);
        // A digest-only image names no tag: it does not answer for one.
        let digest_only = [sibling(
            "2026-11-29T10:00:00Z",
            "web-0",
            &[format!("registry.example/team/app@{}", digest('d'))],
        )];
        assert_eq!(sibling_digest(&digest_only, &reference), None);
    }
}
