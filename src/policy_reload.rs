//! Re-reads the policy file when it changes (a mounted ConfigMap is updated in place), for
//! `pinhook serve` and `pinhook watch` alike. A new file takes effect only whole: it is parsed
//! and compiled as [`Policy::load`] does, then its side settings (the registry hosts' CA files)
//! are applied, and only then does the [`PolicyHandle`] switch. An invalid new file is logged
//! with its precise error and the previous policy stays in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::error::error_chain;
use crate::policy::{CompiledPolicy, Policy, PolicyError, PolicyHandle};
use crate::registry::HostCaError;

/// How often the policy file is read for changes.
const POLL: Duration = Duration::from_secs(2);

/// Why a changed policy file did not take effect.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("cannot apply the policy's registry hosts")]
    Apply(#[source] HostCaError),
    #[error("applying the policy failed")]
    ApplyPanicked(#[source] tokio::task::JoinError),
}

/// Reads `path` for changes for ever, replacing `handle`'s policy with each valid new version. `apply`
/// runs the policy's side settings (registry hosts) before it takes effect.
pub async fn reload_on_change<F>(path: PathBuf, handle: PolicyHandle, apply: F)
where
    F: Fn(&CompiledPolicy) -> Result<(), HostCaError> + Send + Sync + 'static,
{
    let apply = Arc::new(apply);
    let mut seen = tokio::fs::read(&path).await.ok();
    loop {
        tokio::time::sleep(POLL).await;
        let now = tokio::fs::read(&path).await;
        if now.as_ref().ok() == seen.as_ref() {
            continue;
        }
        seen = now.as_ref().ok().cloned();
        match reload(&path, now, apply.clone()).await {
            Ok(compiled) => {
                info!(path = %path.display(), mode = %compiled.policy.mode, "reloaded policy");
                handle.replace(compiled);
            }
            Err(e) => warn!(
                path = %path.display(),
                error = %error_chain(&e),
                "new policy rejected, the previous policy stays in force"
            ),
        }
    }
}

/// The new policy in `read`, compiled and applied.
async fn reload<F>(
    path: &Path,
    read: std::io::Result<Vec<u8>>,
    apply: Arc<F>,
) -> Result<CompiledPolicy, ReloadError>
where
    F: Fn(&CompiledPolicy) -> Result<(), HostCaError> + Send + Sync + 'static,
{
    let compiled = compile_policy(path, read)?;
    // `apply` reads the CA files the policy names: on the blocking pool.
    tokio::task::spawn_blocking(move || apply(&compiled).map(|()| compiled))
        .await
        .map_err(ReloadError::ApplyPanicked)?
        .map_err(ReloadError::Apply)
}

/// The policy in a file's bytes, with the errors `Policy::load` gives (parsing a small file can
/// stay on the async worker).
fn compile_policy(
    path: &Path,
    read: std::io::Result<Vec<u8>>,
) -> Result<CompiledPolicy, PolicyError> {
    let failed = |source| PolicyError::Read {
        path: path.to_path_buf(),
        source,
    };
    let bytes = read.map_err(failed)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| failed(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    Policy::parse(&text)
}

/// Where the policy comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicySource {
    /// A YAML file, re-read when it changes.
    File(PathBuf),
    /// A policy fixed for the life of the process (the defaults with a `form`, or a test's).
    Fixed(Box<Policy>),
}

// === impl PolicySource ===

impl PolicySource {
    /// The policy in force at start-up.
    pub(crate) fn load(&self) -> Result<CompiledPolicy, PolicyError> {
        match self {
            PolicySource::File(path) => {
                let compiled = Policy::load(path)?;
                info!(path = %path.display(), mode = %compiled.policy.mode, "loaded policy");
                Ok(compiled)
            }
            PolicySource::Fixed(policy) => {
                info!(mode = %policy.mode, "no --policy given: fixed policy settings");
                policy.clone().compile()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::policy::Mode;

    #[test]
    fn a_policy_file_is_judged_as_policy_load_judges_it() {
        let path = Path::new("/etc/pinhook/policy.yaml");
        let compiled = compile_policy(path, Ok(b"mode: audit".to_vec())).expect("valid");
        assert_eq!(compiled.policy.mode, Mode::Audit);
        let missing = compile_policy(path, Err(io::Error::from(io::ErrorKind::NotFound)))
            .expect_err("no file");
        assert_eq!(
            error_chain(&missing),
            "failed to read policy file '/etc/pinhook/policy.yaml': entity not found"
        );
        let binary = compile_policy(path, Ok(vec![0xff])).expect_err("not text");
        assert!(matches!(binary, PolicyError::Read { .. }), "{binary:?}");
        let invalid = compile_policy(path, Ok(b"mode: strict".to_vec())).expect_err("bad mode");
        assert!(
            error_chain(&invalid)
                .starts_with("policy is not valid: line 1 column 7: unknown variant `strict`"),
            "{invalid}"
        );
    }

    #[tokio::test]
    async fn a_policy_whose_hosts_cannot_be_applied_is_refused_naming_the_file() {
        let path = Path::new("/etc/pinhook/policy.yaml");
        let refuse = Arc::new(|_: &CompiledPolicy| {
            Err(HostCaError {
                host: "registry.example".to_string(),
                path: PathBuf::from("/missing/ca.crt"),
                source: io::Error::from(io::ErrorKind::NotFound),
            })
        });
        let error = reload(path, Ok(b"mode: audit".to_vec()), refuse)
            .await
            .expect_err("refused");
        assert_eq!(
            error_chain(&error),
            "cannot apply the policy's registry hosts: registries.hosts[\"registry.example\"].ca: \
             cannot read '/missing/ca.crt': entity not found"
        );
        let accept = Arc::new(|_: &CompiledPolicy| Ok(()));
        let compiled = reload(path, Ok(b"mode: off".to_vec()), accept)
            .await
            .expect("applied");
        assert_eq!(compiled.policy.mode, Mode::Off);
    }
}
