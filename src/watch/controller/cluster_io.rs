//! What a recheck cycle reads from and writes to the cluster, as one trait: pinhook's stored
//! reports (their content digests, a whole report), report writes, Events, and the tag-mirror
//! objects a page at a time. [`KubeIo`] does it through the apiserver ([`super::api`]); the
//! cycle's unit tests through a fake, so the cycle is tested without a cluster.

use std::collections::HashMap;

use async_trait::async_trait;

use super::api::{self, EventPublisher, ReportWriteError};
use crate::watch::events::EventSpec;
use crate::watch::report::{PolicyReport, ReportApi, ReportWrite};

/// Where a report is written: (built kind, namespace, name).
pub type ReportPlace<'a> = (&'a str, Option<&'a str>, &'a str);
/// A kind the tag-mirror report judges: (group, version, kind, plural).
pub type ObjectKind<'a> = (&'a str, &'a str, &'a str, &'a str);

/// The cluster, as a recheck cycle uses it.
#[async_trait]
pub trait ClusterIo: Send + Sync {
    /// The content digest of each of pinhook's namespace reports, by namespace (`None`: a
    /// report without one).
    async fn report_digests(
        &self,
        shape: ReportApi,
    ) -> Result<HashMap<String, Option<String>>, kube::Error>;
    /// `namespace`'s report, whole.
    async fn namespace_report(
        &self,
        shape: ReportApi,
        namespace: &str,
    ) -> Result<Option<PolicyReport>, kube::Error>;
    /// The cluster-scoped report `name`.
    async fn cluster_report(
        &self,
        shape: ReportApi,
        name: &str,
    ) -> Result<Option<PolicyReport>, kube::Error>;
    /// Sends `write` to `place`; whether a write was sent.
    async fn write_report(
        &self,
        shape: ReportApi,
        write: ReportWrite,
        place: ReportPlace<'_>,
    ) -> Result<bool, ReportWriteError>;
    /// Creates the Event `spec` calls for, or counts it again in its series.
    async fn publish(&self, spec: &EventSpec) -> Result<(), kube::Error>;
    /// Every object of `kind`, a page at a time, to `visit`; `false` when the kind is not
    /// served.
    async fn for_each_object(
        &self,
        kind: ObjectKind<'_>,
        visit: &mut (dyn FnMut(serde_json::Value) + Send),
    ) -> Result<bool, kube::Error>;
}

/// [`ClusterIo`] through the apiserver.
pub struct KubeIo {
    client: kube::Client,
    events: EventPublisher,
}

impl KubeIo {
    /// Events are reported by `identity` (the watch's Pod).
    pub fn new(client: kube::Client, identity: &str) -> KubeIo {
        KubeIo {
            events: EventPublisher::new(client.clone(), identity),
            client,
        }
    }
}

#[async_trait]
impl ClusterIo for KubeIo {
    async fn report_digests(
        &self,
        shape: ReportApi,
    ) -> Result<HashMap<String, Option<String>>, kube::Error> {
        api::namespace_report_digests(&self.client, shape).await
    }

    async fn namespace_report(
        &self,
        shape: ReportApi,
        namespace: &str,
    ) -> Result<Option<PolicyReport>, kube::Error> {
        api::namespace_report(&self.client, shape, namespace).await
    }

    async fn cluster_report(
        &self,
        shape: ReportApi,
        name: &str,
    ) -> Result<Option<PolicyReport>, kube::Error> {
        api::cluster_report(&self.client, shape, name).await
    }

    async fn write_report(
        &self,
        shape: ReportApi,
        write: ReportWrite,
        place: ReportPlace<'_>,
    ) -> Result<bool, ReportWriteError> {
        api::write_report(&self.client, shape, write, place).await
    }

    async fn publish(&self, spec: &EventSpec) -> Result<(), kube::Error> {
        self.events.publish(spec).await
    }

    async fn for_each_object(
        &self,
        kind: ObjectKind<'_>,
        visit: &mut (dyn FnMut(serde_json::Value) + Send),
    ) -> Result<bool, kube::Error> {
        api::for_each_object(&self.client, kind, visit).await
    }
}
