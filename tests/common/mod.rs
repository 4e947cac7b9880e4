//! Shared integration-test harness: a throw-away CA ([`tls`]), a real `docker-registry`
//! process ([`registry`]) with its token server ([`token`]) and helpers that push images to it
//! ([`images`]); a fake Kubernetes API ([`fake_kube`]); a proxy that strips response headers
//! ([`strip_proxy`]); pinhook itself over HTTPS ([`pinhook`]), the reviews sent to it
//! ([`requests`]), its registry client driven directly ([`resolving`]) and its log lines
//! captured ([`logs`]).
//!
//! The harness's own checks live in `tests/integration/harness_selftest.rs`, counted apart from
//! pinhook's.

// Each `tests/*.rs` file is its own crate that includes this module with
// `mod common;` and uses only part of it; without this, every unused helper
// would warn (and fail clippy with -D warnings) in some test binary.
#![allow(dead_code)]

pub mod cli;
pub mod credential_programs;
pub mod fake_kube;
pub mod images;
pub mod load;
pub mod logs;
pub mod pinhook;
pub mod registry;
pub mod requests;
pub mod resolving;
pub mod silent;
pub mod stand_in;
pub mod strip_proxy;
pub mod tls;
pub mod token;
