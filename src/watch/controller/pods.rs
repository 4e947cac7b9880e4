//! The running Pods as the watch keeps them: a kube-runtime watcher over every Pod in the
//! cluster, each one reduced at once to its [`PodRecord`] (the Pod object itself is dropped),
//! keyed by uid.
//!
//! A re-list (start, or a watch that expired) fills a fresh map that replaces the old one only
//! when the list is complete, so a cycle never sees half a cluster. The store is `ready` from
//! the first complete list on. A Pod that cannot be read into a record is left out and logged.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt as _;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::watch::PodRecord;

/// The Pods' records, shared between the watcher task and the cycles.
#[derive(Clone)]
pub struct PodStore {
    pods: Arc<RwLock<HashMap<String, PodRecord>>>,
    ready: watch::Sender<bool>,
}

// === impl PodStore ===

impl Default for PodStore {
    fn default() -> Self {
        PodStore {
            pods: Arc::default(),
            ready: watch::Sender::new(false),
        }
    }
}

impl PodStore {
    /// Every Pod's record, in no particular order.
    pub fn snapshot(&self) -> Vec<PodRecord> {
        self.read().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records. A poisoned lock only means a thread panicked mid-update of a plain map:
    /// reading it as empty instead would make the next recheck delete every report.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, PodRecord>> {
        self.pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, PodRecord>> {
        self.pods
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

    /// Replaces every record (what a complete list does); marks the store ready.
    pub fn replace(&self, records: impl IntoIterator<Item = PodRecord>) {
        let fresh: HashMap<String, PodRecord> =
            records.into_iter().map(|r| (r.uid.clone(), r)).collect();
        *self.write() = fresh;
        self.ready.send_replace(true);
    }

    pub fn apply(&self, record: PodRecord) {
        self.write().insert(record.uid.clone(), record);
    }

    pub fn remove(&self, uid: &str) {
        self.write().remove(uid);
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
    match PodRecord::from_pod(&value) {
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
