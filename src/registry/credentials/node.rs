//! The node's credentials, as its kubelet has them: the docker `config.json` of
//! `--docker-config` (its helpers and identity tokens included), then kubelet's credential
//! provider plugins; and the user's own docker config for `pinhook check` and `resolve`. Read
//! here once for `serve` and the watch alike.
//!
//! Owns: [`credentials`], [`user_keyring`], [`docker_config_keyring`] and their errors.
//! Never: reads a pull Secret (that is [`super::pull_secrets`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::info;

use super::docker_helpers::read_docker_config;
use super::keyring::{Keyring, KeyringError};
use super::provider::{CredentialProviders, ProviderConfigError, ProviderFiles};
use crate::metrics::Metrics;

/// Why a docker `config.json` could not be used as a keyring.
#[derive(Debug, thiserror::Error)]
pub enum DockerConfigError {
    #[error("failed to read docker config '{path}'")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse docker config '{path}'")]
    Parse {
        path: PathBuf,
        #[source]
        source: KeyringError,
    },
}

/// Why the node's credentials could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NodeCredentialsError {
    #[error(transparent)]
    DockerConfig(#[from] DockerConfigError),
    #[error(transparent)]
    Providers(#[from] ProviderConfigError),
}

/// The node's keyring: the docker `config.json` at `docker_config` (none: empty), then the
/// credential provider plugins of `providers`, counted in `metrics`.
pub fn credentials(
    docker_config: Option<&Path>,
    providers: Option<&ProviderFiles>,
    metrics: &Arc<Metrics>,
) -> Result<Keyring, NodeCredentialsError> {
    let mut node = docker_config_keyring(docker_config)?;
    if let Some(files) = providers {
        let providers = CredentialProviders::load(files, Some(metrics.clone()))?;
        info!(providers = ?providers.names(), "running kubelet credential provider plugins");
        node.push_source(Arc::new(providers));
    }
    Ok(node)
}

/// The user's docker credentials: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`;
/// an empty keyring when neither exists. Its `credsStore` / `credHelpers` are a source the
/// caller asks per image ([`Keyring::for_images`]).
pub fn user_keyring() -> Result<Keyring, DockerConfigError> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".docker")));
    let Some(path) = dir.map(|d| d.join("config.json")).filter(|p| p.is_file()) else {
        return Ok(Keyring::new());
    };
    docker_config_keyring(Some(&path))
}

/// The keyring of a docker `config.json` (helpers and identity tokens included), or an empty
/// one without a path.
pub fn docker_config_keyring(docker_config: Option<&Path>) -> Result<Keyring, DockerConfigError> {
    let Some(path) = docker_config else {
        return Ok(Keyring::new());
    };
    let bytes = std::fs::read(path).map_err(|source| DockerConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    read_docker_config(&bytes).map_err(|source| DockerConfigError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_docker_config_that_is_not_json_is_a_parse_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, "not json").expect("write");
        let error = docker_config_keyring(Some(&path)).expect_err("refused");
        assert!(
            matches!(error, DockerConfigError::Parse { .. }),
            "{error:?}"
        );
        assert!(
            docker_config_keyring(None).is_ok(),
            "no file: an empty keyring"
        );
    }
}
