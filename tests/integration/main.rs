//! pinhook's integration tests, one binary (issue 23: built and linked once, not once per file).
//! Each module was a test file of its own; they are grouped by what they test:
//!
//! - [`admission`]: what pinhook answers over HTTPS (`/mutate`, `/validate`, every policy
//!   knob), `pinhook check`, and the bounds that hold under load and hostile clients;
//! - [`registry`]: pinhook's registry client (resolution, auth, outbound limits), the cache in
//!   front of it, and where pull credentials come from (Secrets, helpers, kubelet plugins);
//! - [`cluster`]: pinhook beside a cluster: the watch, dry runs, controllers' objects, the
//!   server's certificate and shutdown, and the Helm chart;
//! - [`harness_selftest`]: the harness in [`common`] itself, counted apart by
//!   `scripts/test.sh`.
//!
//! `cargo test --test integration registry::cache` runs one module.

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod cluster;
mod harness_selftest;
mod registry;
