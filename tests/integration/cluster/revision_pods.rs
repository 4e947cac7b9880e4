//! The stored Pods of an owner revision, read through the in-process fake API as pinhook reads
//! them from the apiserver (issue 43): a label-selected list in the Pod's namespace, the Pods of
//! another controller left out, the oldest Pod's digest answering for the revision.

use crate::common::fake_kube::FakeKube;
use pinhook::admission::revision_pods::{sibling_digest, KubeRevisionPods, Revision, RevisionPods};
use pinhook::reference::Reference;
use serde_json::json;

fn pod(name: &str, hash: &str, owner_uid: &str, created: &str, image: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "creationTimestamp": created,
            "labels": {"pod-template-hash": hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                "uid": owner_uid, "controller": true}]},
        "spec": {"containers": [{"name": "web", "image": image}]}})
}

#[tokio::test]
async fn a_revisions_stored_pods_are_read_by_label_and_controller() {
    let kube = FakeKube::start().await;
    let tag = "registry.example/team/app:1.0";
    let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    for (name, hash, uid, created, c) in [
        ("web-1-b", "h1", "rs-1", "2026-11-29T10:00:05Z", 'b'),
        ("web-1-a", "h1", "rs-1", "2026-11-29T10:00:01Z", 'a'),
        // another ReplicaSet whose Pods carry the same label value, and another revision
        ("web-2-c", "h1", "rs-2", "2026-11-29T09:00:00Z", 'c'),
        ("web-1-d", "h2", "rs-1", "2026-11-29T09:00:00Z", 'd'),
    ] {
        kube.put(
            &format!("/api/v1/namespaces/shop/pods/{name}"),
            pod(name, hash, uid, created, &format!("{tag}@{}", digest(c))),
        );
    }
    let pods = KubeRevisionPods::new(kube.client());
    let revision = Revision {
        namespace: "shop",
        label: "pod-template-hash",
        value: "h1",
        owner_uid: "rs-1",
    };
    let siblings = pods
        .siblings(&revision)
        .await
        .expect("listed")
        .expect("a cluster answers");
    let mut names: Vec<&str> = siblings.iter().map(|s| s.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["web-1-a", "web-1-b"]);
    let reference = Reference::parse(tag).expect("parses");
    assert_eq!(
        sibling_digest(&siblings, &reference).map(|d| d.to_string()),
        Some(digest('a')),
        "the oldest decides"
    );
    assert!(
        kube.lists()
            .iter()
            .any(|l| l.contains("labelSelector=pod-template-hash%3Dh1")),
        "{:?}",
        kube.lists()
    );
}
