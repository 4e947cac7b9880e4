//! pinhook: a Kubernetes admission webhook that pins every container image to its digest.
//!
//! Layers, from pure to I/O (pure modules never touch the network, a clock or a client):
//!
//! - [`reference`]: image reference grammar and normalisation, pinned rendering (pure).
//! - [`workload`]: where images live in each pod-bearing kind, template changes, JSON Patch (pure).
//! - [`owners`]: controller ownerReferences and which children pinhook leaves to them (pure).
//! - [`policy`]: the policy file, modes, exemptions, host rules, the mirror guard, and the
//!   mode and exemption that apply to a namespace and an image (pure).
//! - [`documents`]: reading manifests (multi-document YAML, JSON, lists) for dry runs (pure).
//! - [`watch`]: the pure core of `pinhook watch`: the record kept per Pod, image states, the
//!   recheck plan, PolicyReports, Events and the inventory (pure); its I/O edge, `pinhook
//!   watch` and `pinhook inventory`, is `watch::controller`.
//! - [`error`]: the one-line error chain printer.
//! - [`weight`]: the weight of an entry in a cache bounded in bytes.
//! - [`registry`]: tag → digest behind the [`registry::Resolver`] trait: client, cache, breaker,
//!   keyring, credentials and credential plugins, pull secrets, the address guard.
//! - [`cluster`]: namespace labels and dry-run callers through the Kubernetes API.
//! - [`lease`]: leader election on a Lease, for the certificates' writer and the watch.
//! - [`policy_reload`]: re-reads the policy file when it changes.
//! - [`admission`]: AdmissionReview wire types, the pure decision core, the I/O pipeline,
//!   `/mutate`, `/validate` and the dry run.
//! - [`metrics`]: every Prometheus metric pinhook exports.
//! - [`log`]: the log: the fields of a text line as tracing writes them, cheaper; the warm
//!   review's line written straight; the JSON format's writer, escaping what JSON leaves raw
//!   (C1, DEL, U+2028); the writer thread, at the lowest scheduling priority.
//! - [`server`]: HTTPS (axum + rustls), connection bounds, routes, the dry-run endpoint, TLS
//!   reloads, health, shutdown.
//! - [`app`]: the composition root, one `build(Config)` for `pinhook serve` and the tests.
//! - [`cli`]: clap types, a `PINHOOK_*` variable for every flag, flags → each layer's settings.
//! - [`check`]: `pinhook check`, locally or against a cluster's `/v1/dry-run`.
//! - [`certs`]: `pinhook certs`, a CA and serving certificate for the webhook Service, and the
//!   self-managed certificates kept through the Kubernetes API.

#![forbid(unsafe_code)]

pub mod admission;
pub mod app;
pub mod certs;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod documents;
pub mod error;
pub mod go_duration;
pub mod kube_client;
pub mod lease;
pub mod log;
pub mod metrics;
pub mod mirror_guard;
pub mod own_namespace;
pub mod owners;
pub mod policy;
pub mod policy_reload;
pub mod reference;
pub mod registry;
pub mod server;
pub mod shares;
pub mod signatures;
pub mod tenant;
pub mod text;
pub mod watch;
pub mod weight;
pub mod workload;

/// Installs rustls' `ring` provider as the process default. Call first thing in `main` and in
/// tests; a second call is harmless.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
