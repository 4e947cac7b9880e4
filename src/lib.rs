//! pinhook: a Kubernetes admission webhook that pins every container image to its digest.
//!
//! Layers, from pure to I/O: [`reference`] (image grammar) and [`workload`] (where images live,
//! JSON Patch) know nothing of the network; [`registry`] resolves tags to digests behind the
//! [`registry::Resolver`] trait; [`admission`] turns AdmissionReviews into decisions over the
//! shared pipeline; [`server`] owns sockets, TLS, health and metrics.

#![forbid(unsafe_code)]

pub mod admission;
pub mod app;
pub mod certs;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod documents;
pub mod error;
pub mod metrics;
pub mod owners;
pub mod policy;
pub mod reference;
pub mod registry;
pub mod server;
pub mod workload;

/// Installs rustls' `ring` provider as the process default. Call first thing in `main` and in
/// tests; a second call is harmless.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
