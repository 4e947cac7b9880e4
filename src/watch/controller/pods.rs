//! The running Pods as the watch keeps them: a kube-runtime watcher over every Pod in the
//! cluster, each one reduced at once to its [`PodRecord`] (the Pod object itself is dropped),
//! found by uid.
//!
//! A re-list (start, or a watch that expired) fills a fresh list that replaces the old one only
//! when the list is complete, so a cycle never sees half a cluster. The store is `ready` from
//! the first complete list on. A Pod that cannot be read into a record is left out and logged.
//!
//! **One copy.** The records are one shared list ([`PodStore::snapshot`] hands a cycle the list
//! itself, not a copy of it): a cycle over a cluster whose Pods did not change while it ran
//! copies no record. The first change while a cycle holds the list copies it once (copy on
//! write); the cycle keeps the list as it was when it started.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt as _;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::watch::{PodRecord, WatchError};

/// The Pods' records, shared between the watcher task and the cycles.
#[derive(Clone)]
pub struct PodStore {
    records: Arc<RwLock<Records>>,
    ready: watch::Sender<bool>,
}

/// Every record once, and where each uid's is.
#[derive(Default)]
struct Records {
    /// Shared with the cycles that run on it; copied when changed while one does.
    list: Arc<Vec<PodRecord>>,
    /// Each record's position in `list`.
    index: HashMap<String, usize>,
}

// === impl PodStore ===

impl Default for PodStore {
    fn default() -> Self {
        PodStore {
            records: Arc::default(),
            ready: watch::Sender::new(false),
        }
    }
}

impl PodStore {
    /// Every Pod's record, in no particular order: the store's own list, shared (no record is
    /// copied; a change made while the caller holds it goes to a copy).
    pub fn snapshot(&self) -> Arc<Vec<PodRecord>> {
        self.read().list.clone()
    }

    pub fn len(&self) -> usize {
        self.read().list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records. A poisoned lock only means a thread panicked mid-update of a plain list:
    /// reading it as empty instead would make the next recheck delete every report.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Records> {
        self.records
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Records> {
        self.records
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a complete list has been read.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until a complete list has been read.
    pub async fn wait_ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Replaces every record (what a complete list does); marks the store ready. A uid listed
    /// twice keeps its last record.
    pub fn replace(&self, records: impl IntoIterator<Item = PodRecord>) {
        let mut fresh = Records::default();
        let list = Arc::make_mut(&mut fresh.list);
        for record in records {
            match fresh.index.get(&record.uid) {
                Some(&at) => list[at] = record,
                None => {
                    fresh.index.insert(record.uid.clone(), list.len());
                    list.push(record);
                }
            }
        }
        list.shrink_to_fit();
        *self.write() = fresh;
        self.ready.send_replace(true);
    }

    /// Adds or replaces the record of `record.uid`.
    pub fn apply(&self, record: PodRecord) {
        let mut records = self.write();
        let Records { list, index } = &mut *records;
        let list = Arc::make_mut(list);
        match index.get(&record.uid) {
            Some(&at) => list[at] = record,
            None => {
                index.insert(record.uid.clone(), list.len());
                list.push(record);
            }
        }
    }

    /// Removes the record of `uid`, if there is one.
    pub fn remove(&self, uid: &str) {
        let mut records = self.write();
        let Records { list, index } = &mut *records;
        let Some(at) = index.remove(uid) else {
            return;
        };
        let list = Arc::make_mut(list);
        list.swap_remove(at);
        // The last record moved into the gap.
        if let Some(slot) = list.get(at).and_then(|moved| index.get_mut(&moved.uid)) {
            *slot = at;
        }
    }

    /// Keeps the store in step with the cluster's Pods until the task is dropped; the watcher
    /// retries with backoff on its own.
    pub async fn run(self, client: kube::Client) {
        let api: Api<Pod> = Api::all(client);
        // Listed in pages, as every cluster-wide list of the watch is.
        let config = watcher::Config::default().page_size(super::api::PAGE_SIZE);
        let stream = watcher::watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        let mut listing: Vec<PodRecord> = Vec::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Init) => listing.clear(),
                Ok(Event::InitApply(pod)) => listing.extend(record_of(&pod)),
                Ok(Event::InitDone) => {
                    info!(pods = listing.len(), "pod list complete");
                    self.replace(std::mem::take(&mut listing));
                }
                Ok(Event::Apply(pod)) => {
                    if let Some(record) = record_of(&pod) {
                        self.apply(record);
                    }
                }
                Ok(Event::Delete(pod)) => {
                    if let Some(uid) = pod.metadata.uid.as_deref() {
                        self.remove(uid);
                    }
                }
                Err(error) => warn!(error = %error, "pod watch failed; retrying"),
            }
        }
    }
}

fn record_of(pod: &Pod) -> Option<PodRecord> {
    let value = serde_json::to_value(pod).ok()?;
    match record(&value) {
        Ok(record) => Some(record),
        Err(error) => {
            debug!(
                namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod = pod.metadata.name.as_deref().unwrap_or_default(),
                error = %error,
                "pod left out of the watch"
            );
            None
        }
    }
}

/// What the store keeps of `pod` (as the API serves it): its [`PodRecord`], without spare
/// capacity. A record as read holds about 220 bytes more than its content (the buffers it was
/// built in; `examples/watch_memory`: 949 against 725 bytes a Pod in the store), kept for as
/// long as the Pod runs; its clone is allocated to size.
pub fn record(pod: &serde_json::Value) -> Result<PodRecord, WatchError> {
    let read = PodRecord::from_pod(pod)?;
    Ok(read.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_record(uid: &str, image: &str) -> PodRecord {
        let pod = json!({
            "metadata": {"namespace": "ns", "name": format!("pod-{uid}"), "uid": uid},
            "spec": {"containers": [{"name": "app", "image": image}]},
        });
        PodRecord::from_pod(&pod).unwrap()
    }

    fn images(store: &PodStore) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = store
            .snapshot()
            .iter()
            .map(|r| (r.uid.clone(), r.images[0].image.clone()))
            .collect();
        all.sort();
        all
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(u, i)| (u.to_string(), i.to_string()))
            .collect()
    }

    #[test]
    fn apply_adds_and_replaces_by_uid_and_remove_keeps_the_others_findable() {
        let store = PodStore::default();
        assert!(!store.is_ready());
        store.replace([
            pod_record("a", "a:1"),
            pod_record("b", "b:1"),
            pod_record("c", "c:1"),
        ]);
        assert!(store.is_ready());
        store.apply(pod_record("b", "b:2"));
        store.apply(pod_record("d", "d:1"));
        assert_eq!(store.len(), 4);
        // "a" goes: the last record ("d") takes its place and must still be found by its uid.
        store.remove("a");
        store.remove("nothing");
        store.apply(pod_record("d", "d:2"));
        store.remove("c");
        assert_eq!(images(&store), pairs(&[("b", "b:2"), ("d", "d:2")]));
        store.remove("d");
        store.remove("b");
        assert!(store.is_empty());
        store.apply(pod_record("e", "e:1"));
        assert_eq!(images(&store), pairs(&[("e", "e:1")]));
    }

    #[test]
    fn a_snapshot_is_the_list_itself_until_a_change_which_goes_to_a_copy() {
        let store = PodStore::default();
        store.replace([pod_record("a", "a:1"), pod_record("b", "b:1")]);
        let first = store.snapshot();
        let second = store.snapshot();
        // No copy for an unchanged store: the cycles share its list.
        assert!(Arc::ptr_eq(&first, &second));
        store.apply(pod_record("a", "a:2"));
        store.remove("b");
        // The snapshot taken before is the cluster as it was.
        let before: Vec<&str> = first.iter().map(|r| r.images[0].image.as_str()).collect();
        assert_eq!(before, ["a:1", "b:1"]);
        assert_eq!(images(&store), pairs(&[("a", "a:2")]));
        assert!(!Arc::ptr_eq(&first, &store.snapshot()));
    }

    #[test]
    fn the_kept_record_is_the_record_read() {
        let pod = json!({
            "metadata": {
                "namespace": "ns", "name": "web-5d9c-x", "uid": "u1",
                "labels": {"pod-template-hash": "5d9c"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-5d9c", "uid": "rs1", "controller": true}],
            },
            "spec": {
                "serviceAccountName": "builder",
                "imagePullSecrets": [{"name": "a"}, {"name": "b"}],
                "initContainers": [{"name": "init", "image": "init:1"}],
                "containers": [{"name": "app", "image": "app:1"}, {"name": "side", "image": "side:1"}],
            },
            "status": {"phase": "Running"},
        });
        assert_eq!(record(&pod), PodRecord::from_pod(&pod));
        assert!(record(&json!({"metadata": {"name": "no-namespace"}})).is_err());
    }

    #[test]
    fn replace_keeps_the_last_record_of_a_uid_listed_twice() {
        let store = PodStore::default();
        store.replace([
            pod_record("a", "a:1"),
            pod_record("a", "a:2"),
            pod_record("b", "b:1"),
        ]);
        assert_eq!(images(&store), pairs(&[("a", "a:2"), ("b", "b:1")]));
        store.remove("a");
        assert_eq!(images(&store), pairs(&[("b", "b:1")]));
    }
}
