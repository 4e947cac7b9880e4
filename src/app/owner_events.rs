//! The Events `pinhook serve` writes about owners of Pods: the loop breaker's `PinningPaused`
//! and the operator's `PodsDenied` (issue 43), worded here from the pipeline's
//! [`OwnerNotice`], sent through the watch's Event publisher.
//!
//! Owns: [`owner_handler`]. Never: decides when to tell (the pipeline's notices do).

use std::sync::Arc;

use tracing::warn;

use crate::admission::pipeline::{OwnerHandler, OwnerNotice};
use crate::metrics::Metrics;
use crate::text::one_line;
use crate::watch::controller::api::EventPublisher;
use crate::watch::{EventReason, EventSpec, EventType, WorkloadRef};

/// What pinhook tells about an owner of Pods: a trip of the loop breaker (the counter, a
/// warning and a `PinningPaused` Event) or an operator's denied Pods (a `PodsDenied` Event
/// naming the two fixes). With a Kubernetes API the Event goes to the owner, sent in the
/// background so the review does not wait for it. Text from the object passes through the one
/// sanitiser (`text::one_line`).
pub(super) fn owner_handler(metrics: Arc<Metrics>, client: Option<kube::Client>) -> OwnerHandler {
    let events = client.map(|client| {
        let instance = std::env::var("HOSTNAME").unwrap_or_else(|_| "pinhook".to_string());
        Arc::new(EventPublisher::new(client, &instance))
    });
    Arc::new(move |notice: OwnerNotice| {
        let (reason, note, regarding) = match notice {
            OwnerNotice::Loop(trip) => {
                metrics.owner_loops.inc();
                warn!(
                    namespace = %trip.namespace,
                    owner = %format!("{}/{}", trip.kind, trip.name),
                    image = %trip.image,
                    pods = trip.count,
                    "owner recreates its Pods; pinning them is paused"
                );
                let note = format!(
                    "created {} Pods of {} within {} s: it compares its Pods' images with its own, so pinhook leaves its Pods as written for {} s, and denies them in enforce namespaces (remove {} from owners.pinPodsOf and pin its resource with customResources)",
                    trip.count,
                    one_line(&trip.image),
                    trip.window.as_secs(),
                    trip.pause.as_secs(),
                    one_line(&trip.kind)
                );
                let regarding = WorkloadRef {
                    namespace: trip.namespace,
                    kind: trip.kind,
                    name: trip.name,
                    api_version: trip.api_version,
                    uid: Some(trip.uid),
                };
                (EventReason::PinningPaused, note, regarding)
            }
            OwnerNotice::Denied(pod) => {
                let group = pod.api_version.rsplit_once('/').map_or("", |(g, _)| g);
                let note = format!(
                    "pinhook denied a Pod it made: {} is not pinned to a digest, and pinhook leaves the Pods of {} as it writes them; pin the image where it reads it (policy customResources), or list {{group: \"{}\", kind: {}}} in owners.pinPodsOf",
                    one_line(&pod.image),
                    one_line(&pod.kind),
                    one_line(group),
                    one_line(&pod.kind)
                );
                let regarding = WorkloadRef {
                    namespace: pod.namespace,
                    kind: pod.kind,
                    name: pod.name,
                    api_version: pod.api_version,
                    uid: Some(pod.uid),
                };
                (EventReason::PodsDenied, note, regarding)
            }
        };
        let Some(events) = events.clone() else {
            return;
        };
        let spec = EventSpec {
            reason,
            type_: EventType::Warning,
            note,
            regarding,
        };
        tokio::spawn(async move {
            if let Err(e) = events.publish(&spec).await {
                warn!(error = %crate::error::error_chain(&e), reason = spec.reason.as_str(), "cannot publish an Event");
            }
        });
    })
}
