//! `pinhook check` without `--server`: the admission pipeline run here, with the user's docker
//! credentials and policy file, against the registries the manifests name.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::CheckError;
use crate::admission::dry_run::{self, Report};
use crate::admission::{Pinner, PinnerParts};
use crate::app::AppError;
use crate::cluster::NoNamespaces;
use crate::documents::Document;
use crate::metrics::Metrics;
use crate::policy::{Policy, PolicyHandle};
use crate::registry::credentials::node;
use crate::registry::pull_secrets::NodeOnly;
use crate::registry::stack::{self, Guard};
use crate::registry::{CacheConfig, RegistryConfig};

/// Runs the dry run over `documents` with the policy file (or the defaults).
pub(super) async fn check(
    policy: Option<&Path>,
    registry: &RegistryConfig,
    documents: Vec<Document>,
    namespace: &str,
    budget: Duration,
) -> Result<Report, CheckError> {
    let mut policy = match policy {
        Some(path) => Policy::load(path).map_err(AppError::from)?.policy,
        None => Policy::default(),
    };
    // The address guard protects a cluster from its pod specs; a local check contacts only
    // what the user's own manifests name: no guard, and private hosts allowed. Identity tokens
    // (`identitytoken`, a helper's `<token>` user) are exchanged first, as `pinhook resolve`
    // and `serve` do.
    policy.registries.allow_private.push("*".to_string());
    let handle = PolicyHandle::new(policy.compile().map_err(AppError::from)?);
    let metrics = Arc::new(Metrics::new());
    let stack = stack::build(
        registry,
        CacheConfig::default(),
        &handle,
        Guard::Off,
        metrics,
    )
    .map_err(AppError::from)?;
    let (cache, signatures) = (stack.cache, stack.signatures);
    let pinner = Pinner::new(PinnerParts {
        policy: handle,
        dry_run_resolver: Arc::new(cache.read_only()),
        resolver: cache,
        secrets: Arc::new(NodeOnly {
            node: node::user_keyring().map_err(AppError::from)?,
        }),
        namespaces: Arc::new(NoNamespaces),
        on_owner: None,
        loop_ledger: None,
        revision_pods: None,
        owner_ttl: Duration::from_secs(300),
        signatures: Some(signatures),
    });
    Ok(dry_run::run(&pinner, documents, namespace, budget).await)
}
