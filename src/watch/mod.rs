//! Drift watch, the pure core (issue 14): what `pinhook watch` keeps of each running Pod, how it
//! classifies each image, and what it writes about them: PolicyReports, Events and the inventory.
//!
//! Owns, in pipeline order:
//! - [`pod`]: the slim [`PodRecord`] kept per Pod (namespace, owner and workload, image sites,
//!   pull secrets, service account), bounded, read from the Pod's JSON;
//! - [`classify`](mod@classify): the [`ImageState`] of one image, from its parsed reference, the caller's
//!   exemption and the outcome of re-resolving its tag;
//! - [`report`]: the `wgpolicyk8s.io/v1alpha2` PolicyReport of a namespace and the
//!   ClusterPolicyReport of tag-mirror objects, built so that an unchanged cluster yields an
//!   unchanged report, and the write (create, update, delete, nothing) that brings the cluster's
//!   copy to it; [`report::openreports`] writes the same reports as `openreports.io/v1alpha1`
//!   Report and ClusterReport instead (`--report-api openreports`);
//! - [`recheck`]: one recheck's decisions: which keyrings and lookups it needs, each image's
//!   state under its namespace's mode and exemptions, which reports and Events to write;
//! - [`events`]: which Event, if any, an image's state calls for;
//! - [`inventory`]: running images aggregated by digest with the workloads that run them, as a
//!   table or JSON;
//! - [`access`]: who may read the inventory over HTTP: the bearer token, what the cluster's
//!   reviews mean for the caller, and the budget of reviews;
//! - [`WatchError`]: why a Pod (or a mirror-configuring object) cannot be read.
//!
//! The I/O edge, `pinhook watch` and `pinhook inventory` themselves, is [`controller`]: it
//! feeds this core Pods, namespace modes and tag resolutions and writes what it returns.
//!
//! Invariants: everything here but [`controller`] is a plain function over data. It never does I/O, never holds a
//! Kubernetes or registry client and never reads a clock: tag resolutions, namespace modes,
//! exemptions and the current time are the caller's arguments. Hostile input is an error, never
//! a panic, and what is kept per Pod is bounded ([`pod`] documents the bounds).

pub mod access;
pub mod classify;
pub mod controller;
mod error;
pub mod events;
pub mod inventory;
pub mod pod;
pub mod recheck;
pub mod report;
#[cfg(test)]
pub(crate) mod testing;

pub use error::{Result, WatchError};

pub use classify::{
    classify, classify_image, classify_pod, ClassifiedImage, ImageState, TagLookup,
};
pub use events::{event_for, EventReason, EventSpec, EventType};
pub use inventory::{Inventory, InventoryRow};
pub use pod::{OwnerRef, PodImage, PodRecord, WorkloadRef};
pub use report::{
    mirror_findings, mirror_report, namespace_report, plan, MirrorFinding, PolicyReport,
    ReportWrite, Timestamp, Verdict,
};
