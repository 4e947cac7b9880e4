//! Docker's own ways of keeping registry credentials out of `config.json`, for the docker config
//! files pinhook reads (`pinhook check` and `pinhook resolve` read the user's,
//! `pinhook serve --docker-config` the node's): `credsStore` and `credHelpers`, which name a
//! `docker-credential-<name>` program (`desktop`, `pass`, `ecr-login`, `gcloud`...), and
//! identity tokens (an `identitytoken` entry, or a helper answering the user `<token>`), which
//! are OAuth2 refresh tokens exchanged at the registry's token service before use
//! ([`super::identity_token`]).
//!
//! Owns: reading those fields, [`DockerHelpers`] (the keyring source that runs a helper the way
//! the docker CLI does: `docker-credential-<name> get`, the server address on stdin, `{"ServerURL",
//! "Username", "Secret"}` on stdout, bounded in time and output), and [`read_docker_config`],
//! which builds a config file's keyring: the helper first (docker uses it instead of `auths` for
//! the hosts it covers), then `auths` matched with kubelet's rules, identity tokens before the
//! username and password of the same entry.
//!
//! Why not the `docker_credential` crate: it runs helpers with a blocking `wait_with_output`
//! (no timeout, no output bound), its helper errors print the helper's stdout and stderr (which
//! may hold the secret), it matches `auths` keys exactly rather than with kubelet's rules, and it
//! reads one credential per server where kubelet's keyring tries every matching one.
//!
//! Never: logs a helper's output or a token.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use tracing::{debug, warn};

use super::exec::{self, ExecError, Program};
use super::keyring::{CredentialSource, Keyring, KeyringError, Provided};
use super::Credential;

/// How long a helper may run (a keychain prompt would wait forever).
const HELPER_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes a helper may print.
const HELPER_MAX_OUTPUT: usize = 64 * 1024;
/// How long a helper's answer is reused (kubelet caches its docker config provider this long).
const HELPER_TTL: Duration = Duration::from_secs(5 * 60);
/// The server address the docker CLI asks helpers about for Docker Hub (`registry.IndexServer`).
const DOCKER_HUB_SERVER: &str = "https://index.docker.io/v1/";
/// The username a helper answers with when the secret is an identity token.
const TOKEN_USERNAME: &str = "<token>";

/// Runs a config file's `credsStore` / `credHelpers` for each image's registry.
pub struct DockerHelpers {
    creds_store: Option<String>,
    cred_helpers: BTreeMap<String, String>,
    answers: moka::future::Cache<(String, String), Arc<Option<Credential>>>,
}

/// The fields of a docker `config.json` this module reads; the rest is kubelet's.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct HelperFields {
    #[serde(default)]
    creds_store: Option<String>,
    #[serde(default)]
    cred_helpers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    auths: Option<BTreeMap<String, Value>>,
}

/// A helper's answer to `get`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperAnswer {
    #[serde(default)]
    username: String,
    #[serde(default)]
    secret: String,
}

/// Why a helper gave no credential.
#[derive(Debug, thiserror::Error)]
enum HelperError {
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error(
        "docker-credential-{helper} sent an answer that is not {{\"Username\",\"Secret\"}} JSON"
    )]
    Answer { helper: String },
}

/// The keyring of a docker `config.json`: its helpers (a source), then its `auths` with
/// identity tokens first. A document kubelet's decoder refuses is an error.
pub fn read_docker_config(bytes: &[u8]) -> Result<Keyring, KeyringError> {
    let auths = Keyring::from_docker_config_json(bytes)?;
    // kubelet's decoder accepted the document, so it is JSON; fields of other shapes are
    // simply not helper settings.
    let fields: HelperFields = serde_json::from_slice(bytes).unwrap_or_default();
    let mut keyring = Keyring::new();
    if let Some(helpers) = DockerHelpers::from_fields(&fields) {
        keyring.push_source(Arc::new(helpers));
    }
    for (key, entry) in fields.auths.iter().flatten() {
        if let Some(token) = entry
            .get("identitytoken")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            keyring.add(key, Credential::identity_token(token));
        }
    }
    keyring.merge(auths);
    Ok(keyring)
}

// === impl DockerHelpers ===

impl DockerHelpers {
    fn from_fields(fields: &HelperFields) -> Option<DockerHelpers> {
        let creds_store = fields.creds_store.clone().filter(|s| !s.is_empty());
        let cred_helpers: BTreeMap<String, String> = fields
            .cred_helpers
            .iter()
            .flatten()
            .filter(|(_, helper)| !helper.is_empty())
            .map(|(host, helper)| (host.clone(), helper.clone()))
            .collect();
        if creds_store.is_none() && cred_helpers.is_empty() {
            return None;
        }
        Some(DockerHelpers {
            creds_store,
            cred_helpers,
            answers: moka::future::Cache::builder()
                .max_capacity(1_000)
                .time_to_live(HELPER_TTL)
                .build(),
        })
    }

    /// The server address to ask about and the helper for it: `credHelpers[host]`, else the
    /// `credsStore`, as the docker CLI's `getConfiguredCredentialStore`.
    fn helper_for(&self, host: &str) -> Option<(String, &str)> {
        let hub = matches!(
            host,
            "docker.io" | "index.docker.io" | "registry-1.docker.io"
        );
        let server = match hub {
            true => DOCKER_HUB_SERVER.to_string(),
            false => host.to_string(),
        };
        let keys: &[&str] = match hub {
            true => &[DOCKER_HUB_SERVER, "index.docker.io", "docker.io"],
            false => &[host],
        };
        let helper = keys
            .iter()
            .find_map(|key| self.cred_helpers.get(*key))
            .or(self.creds_store.as_ref())?;
        Some((server, helper.as_str()))
    }
}

#[async_trait]
impl CredentialSource for DockerHelpers {
    fn name(&self) -> &str {
        "docker credential helpers"
    }

    async fn provide(&self, image: &str) -> Provided {
        let host = image.split('/').next().unwrap_or(image);
        let Some((server, helper)) = self.helper_for(host) else {
            return Provided::default();
        };
        let key = (helper.to_string(), server.clone());
        let asked = self
            .answers
            .try_get_with(key, async { ask(helper, &server).await.map(Arc::new) })
            .await;
        match asked {
            Ok(answer) => Provided {
                entries: answer.iter().map(|c| (server.clone(), c.clone())).collect(),
                warnings: Vec::new(),
            },
            Err(e) => {
                warn!(helper, server, error = %e, "docker credential helper failed");
                Provided {
                    entries: Vec::new(),
                    warnings: vec![format!(
                        "pinhook: docker credential helper {helper} gave no credentials for {server}: {e}"
                    )],
                }
            }
        }
    }
}

/// `docker-credential-<helper> get` for `server`: the credential, or `None` when the helper has
/// none for it (it says "credentials not found" and exits 1).
async fn ask(helper: &str, server: &str) -> Result<Option<Credential>, HelperError> {
    debug!(helper, server, "running docker credential helper");
    let path = PathBuf::from(format!("docker-credential-{helper}"));
    let args = ["get".to_string()];
    let program = Program {
        path: &path,
        args: &args,
        env: &[],
        timeout: HELPER_TIMEOUT,
        max_output: HELPER_MAX_OUTPUT,
    };
    let stdout = match exec::run(&program, server.as_bytes()).await {
        Ok(stdout) => stdout,
        // docker-credential-helpers' `credentials.ErrCredentialsNotFound`, printed on stdout.
        Err(ExecError::Exit { stdout, .. })
            if String::from_utf8_lossy(&stdout.0).contains("credentials not found") =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    let answer: HelperAnswer =
        serde_json::from_slice(&stdout).map_err(|_| HelperError::Answer {
            helper: helper.to_string(),
        })?;
    Ok(Some(match answer.username == TOKEN_USERNAME {
        true => Credential::identity_token(answer.secret),
        false => Credential::basic(answer.username, answer.secret),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::Reference;

    fn helpers(json: &str) -> Option<DockerHelpers> {
        let fields: HelperFields = serde_json::from_str(json).expect("json");
        DockerHelpers::from_fields(&fields)
    }

    #[test]
    fn cred_helpers_win_over_the_store_and_docker_hub_is_asked_by_its_index_address() {
        let both = helpers(r#"{"credsStore":"desktop","credHelpers":{"gcr.io":"gcloud","https://index.docker.io/v1/":"hub"}}"#)
            .expect("configured");
        assert_eq!(
            both.helper_for("gcr.io"),
            Some(("gcr.io".to_string(), "gcloud"))
        );
        assert_eq!(
            both.helper_for("quay.io"),
            Some(("quay.io".to_string(), "desktop"))
        );
        assert_eq!(
            both.helper_for("docker.io"),
            Some((DOCKER_HUB_SERVER.to_string(), "hub"))
        );
        let only = helpers(r#"{"credHelpers":{"gcr.io":"gcloud"}}"#).expect("configured");
        assert_eq!(only.helper_for("quay.io"), None);
        assert!(helpers(r#"{"auths":{},"credsStore":""}"#).is_none());
    }

    #[test]
    fn identity_tokens_come_before_the_same_entrys_username_and_password() {
        let config =
            br#"{"auths":{"registry.example":{"auth":"dXNlcjo=","identitytoken":"refresh"}}}"#;
        let keyring = read_docker_config(config).expect("valid");
        let reference = Reference::parse("registry.example/team/app:1").expect("parses");
        assert_eq!(
            keyring.lookup(&reference),
            vec![
                Credential::identity_token("refresh"),
                Credential::basic("user", "")
            ]
        );
        assert!(!keyring.has_sources());
        assert!(
            read_docker_config(b"{\"auths\": 3}").is_err(),
            "kubelet refuses it"
        );
    }
}
