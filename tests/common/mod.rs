//! Shared integration-test harness: a throw-away CA ([`tls`]), a real `docker-registry`
//! process ([`registry`]) with its token server ([`token`]) and helpers that push images to it
//! ([`images`]); a fake Kubernetes API ([`fake_kube`]); a proxy that strips response headers
//! ([`strip_proxy`]); pinhook itself over HTTPS ([`pinhook`]), the reviews sent to it
//! ([`requests`]), its registry client driven directly ([`resolving`]), its log lines
//! captured ([`logs`]), and test images signed as cosign signs them ([`signing`]), with a key
//! or keyless under a Sigstore of the tests' own ([`sigstore_authority`]).
//!
//! The harness's own checks live in `tests/integration/harness_selftest.rs`, counted apart from
//! pinhook's.
//!
//! The integration test binary (`tests/integration/main.rs`) includes this module once and uses
//! every helper in it: one that no test uses any more is a dead-code error there, and goes. The
//! demo, the end-to-end tier's registry helper and the `mutate` bench include it too, each for a
//! part.

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
pub mod signing;
pub mod sigstore_authority;
pub mod silent;
pub mod stand_in;
pub mod strip_proxy;
pub mod tls;
pub mod token;
