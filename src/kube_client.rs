//! The Kubernetes client every subcommand that reads the cluster builds the same way:
//! `--kubeconfig`, else `$KUBECONFIG` or `~/.kube/config`, else the in-cluster configuration
//! (kube-rs's inference order), or none at all.
//!
//! Owns: [`KubeAccess`], [`kube_client`], [`KubeClientError`]. Never: reads an object.

use std::path::PathBuf;

use tracing::{info, warn};

/// Why the Kubernetes client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    #[error("failed to read kubeconfig '{path}'")]
    Read {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("failed to load kubeconfig '{path}'")]
    Load {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("failed to build the Kubernetes client")]
    Build(#[source] kube::Error),
}

/// How to reach the Kubernetes API.
#[derive(Clone)]
pub enum KubeAccess {
    /// Not at all: node-level credentials only, no namespace labels, no dry-run callers.
    Disabled,
    /// Through this kubeconfig file.
    Kubeconfig(PathBuf),
    /// `$KUBECONFIG` or `~/.kube/config`, then in-cluster; [`KubeAccess::Disabled`] (with a
    /// warning) when none is configured.
    Infer,
    /// Through a client built elsewhere (a test's fake API server).
    Client(kube::Client),
}

/// The client `access` names; `None` when there is none to use: pinhook still serves, with
/// node-level credentials only (and `pinhook inventory` has nothing to read).
pub async fn kube_client(access: KubeAccess) -> Result<Option<kube::Client>, KubeClientError> {
    let config = match access {
        KubeAccess::Disabled => return Ok(None),
        KubeAccess::Client(client) => return Ok(Some(client)),
        KubeAccess::Kubeconfig(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(&path).map_err(|source| {
                KubeClientError::Read {
                    path: path.clone(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|source| KubeClientError::Load { path, source })?
        }
        KubeAccess::Infer => match kube::Config::infer().await {
            Ok(config) => config,
            Err(e) => {
                warn!(
                    error = %e,
                    "no Kubernetes API configured: pods' imagePullSecrets and namespace mode labels are not used, only node-level and anonymous credentials"
                );
                return Ok(None);
            }
        },
    };
    info!(server = %config.cluster_url, "reading pull secrets and namespaces through the Kubernetes API");
    let client = kube::Client::try_from(config).map_err(KubeClientError::Build)?;
    Ok(Some(client))
}
