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
//! Bounds: each distinct registry host of a review may ask for a run, so at most
//! [`super::limits::DEFAULT_PER_PROGRAM`] runs of one helper and
//! [`super::limits::DEFAULT_TOTAL`] of all a config's helpers
//! run at once ([`RunLimits`]); a run waits for a slot at most `HELPER_QUEUE_WAIT` (5 s), then
//! answers "busy". A run belongs to the admissions asking (one per helper and server, shared):
//! when the last of them stops waiting, it is dropped and its process killed. Answers are
//! cached in at most `HELPER_CACHE_BYTES` (4 MiB, a quarter of it failures). A helper that
//! fails (exits, answers garbage, or is still running when the admission stops waiting) is
//! remembered for `HELPER_FAILURE_TTL` (10 s) for that tenant's images of that server, which
//! hear the failure again without a run (issue 44, as credential provider plugins); "busy",
//! pinhook's own bound, is not remembered.
//!
//! Never: logs a helper's output or a token.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use tracing::{debug, warn};

use super::exec::{self, ExecError, Program};
use super::keyring::{CredentialSource, Keyring, KeyringError, Provided};
use super::limits::{RunLimits, RunPermit};
use super::Credential;

/// How long a helper may run (a keychain prompt would wait forever).
const HELPER_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes a helper may print.
const HELPER_MAX_OUTPUT: usize = 64 * 1024;
/// How long a helper's answer is reused (kubelet caches its docker config provider this long).
const HELPER_TTL: Duration = Duration::from_secs(5 * 60);
/// How long a run waits for a slot before the helper is reported busy.
const HELPER_QUEUE_WAIT: Duration = Duration::from_secs(5);
/// Bytes of cached helper answers, weighed as their keys and credential plus
/// [`ENTRY_OVERHEAD`].
pub const HELPER_CACHE_BYTES: u64 = 4 * 1024 * 1024;
/// How long a failed run stands for the same tenant's images of the same server.
const HELPER_FAILURE_TTL: Duration = Duration::from_secs(10);
/// What a cached answer costs beyond its strings, in bytes.
const ENTRY_OVERHEAD: usize = 256;
/// The server address the docker CLI asks helpers about for Docker Hub (`registry.IndexServer`).
const DOCKER_HUB_SERVER: &str = "https://index.docker.io/v1/";
/// The username a helper answers with when the secret is an identity token.
const TOKEN_USERNAME: &str = "<token>";

/// Runs a config file's `credsStore` / `credHelpers` for each image's registry.
pub struct DockerHelpers {
    creds_store: Option<String>,
    cred_helpers: BTreeMap<String, String>,
    answers: moka::future::Cache<(String, String), Arc<Option<Credential>>>,
    /// (tenant, helper, server) → how the last run failed, for [`HELPER_FAILURE_TTL`].
    failures: moka::sync::Cache<(String, String, String), Arc<str>>,
    limits: RunLimits,
    /// Where the helpers are; `None`: found on `PATH`, as the docker CLI finds them.
    dir: Option<PathBuf>,
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
    #[error("not run: {per_helper} runs of docker-credential-{helper} or {total} of all helpers were under way for {waited:?}")]
    Busy {
        helper: String,
        per_helper: usize,
        total: usize,
        waited: Duration,
    },
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
                .max_capacity(HELPER_CACHE_BYTES / 4 * 3)
                .weigher(|key: &(String, String), answer: &Arc<Option<Credential>>| {
                    let bytes = ENTRY_OVERHEAD
                        + key.0.len()
                        + key.1.len()
                        + answer
                            .as_ref()
                            .as_ref()
                            .map_or(0, Credential::approximate_bytes);
                    u32::try_from(bytes).unwrap_or(u32::MAX)
                })
                .time_to_live(HELPER_TTL)
                .build(),
            failures: moka::sync::Cache::builder()
                .max_capacity(HELPER_CACHE_BYTES / 4)
                .weigher(|key: &(String, String, String), error: &Arc<str>| {
                    let bytes =
                        ENTRY_OVERHEAD + key.0.len() + key.1.len() + key.2.len() + error.len();
                    u32::try_from(bytes).unwrap_or(u32::MAX)
                })
                .time_to_live(HELPER_FAILURE_TTL)
                .build(),
            limits: RunLimits::default(),
            dir: None,
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
        let tenant = crate::tenant::current();
        let failed = (tenant.clone(), helper.to_string(), server.clone());
        // A cached answer first: a failure remembered for this tenant (its admission gave up
        // while another's run went on and succeeded) never hides one.
        if let Some(answer) = self.answers.get(&key).await {
            return Provided {
                entries: answer.iter().map(|c| (server.clone(), c.clone())).collect(),
                warnings: Vec::new(),
            };
        }
        if let Some(error) = self.failures.get(&failed) {
            return no_credentials(
                helper,
                &server,
                &format!("failed for this registry within {HELPER_FAILURE_TTL:?}: {error}"),
            );
        }
        // Set once this admission's run has a slot: dropped after that (the admission stopped
        // waiting), the run counts as failed.
        let running = std::sync::atomic::AtomicBool::new(false);
        let mut stall = Stall {
            failures: &self.failures,
            key: Some(failed.clone()),
            running: &running,
        };
        // moka runs this in one of the asking admissions and hands it to another when that one
        // goes: dropped with the last, killing the helper.
        let run = async {
            let slot =
                tokio::time::timeout(HELPER_QUEUE_WAIT, self.limits.acquire(helper, &tenant));
            let Ok(Some(slot)) = slot.await else {
                return Err(HelperError::Busy {
                    helper: helper.to_string(),
                    per_helper: self.limits.per_program(),
                    total: self.limits.total(),
                    waited: HELPER_QUEUE_WAIT,
                });
            };
            running.store(true, std::sync::atomic::Ordering::SeqCst);
            ask(self.dir.as_deref(), helper, &server, slot)
                .await
                .map(Arc::new)
        };
        let asked = self.answers.try_get_with(key, run).await;
        stall.key = None;
        match asked {
            Ok(answer) => {
                self.failures.invalidate(&failed);
                Provided {
                    entries: answer.iter().map(|c| (server.clone(), c.clone())).collect(),
                    warnings: Vec::new(),
                }
            }
            Err(e) => {
                warn!(helper, server, error = %e, "docker credential helper failed");
                if !matches!(*e, HelperError::Busy { .. }) {
                    self.failures.insert(failed, Arc::from(e.to_string()));
                }
                no_credentials(helper, &server, &e.to_string())
            }
        }
    }
}

/// The answer of a helper that gave no credentials for `server`: a warning naming why.
fn no_credentials(helper: &str, server: &str, why: &str) -> Provided {
    Provided {
        entries: Vec::new(),
        warnings: vec![format!(
            "pinhook: docker credential helper {helper} gave no credentials for {server}: {why}"
        )],
    }
}

/// Records a run that was still going when its admission stopped waiting (dropped with
/// `key` still set and `running`).
struct Stall<'a> {
    failures: &'a moka::sync::Cache<(String, String, String), Arc<str>>,
    key: Option<(String, String, String)>,
    running: &'a std::sync::atomic::AtomicBool,
}

impl Drop for Stall<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            if self.running.load(std::sync::atomic::Ordering::SeqCst) {
                let error = "no answer before the admission stopped waiting";
                self.failures.insert(key, Arc::from(error));
            }
        }
    }
}

/// `docker-credential-<helper> get` for `server`: the credential, or `None` when the helper has
/// none for it (it says "credentials not found" and exits 1).
async fn ask(
    dir: Option<&Path>,
    helper: &str,
    server: &str,
    slot: RunPermit,
) -> Result<Option<Credential>, HelperError> {
    debug!(helper, server, "running docker credential helper");
    let program = format!("docker-credential-{helper}");
    let path = match dir {
        Some(dir) => dir.join(program),
        None => PathBuf::from(program),
    };
    let args = ["get".to_string()];
    let program = Program {
        path: &path,
        args: &args,
        env: &[],
        timeout: HELPER_TIMEOUT,
        max_output: HELPER_MAX_OUTPUT,
    };
    let stdout = match exec::run(&program, server.as_bytes(), Some(slot)).await {
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

    /// The pids a `docker-credential-slow` script recorded that are still alive.
    fn alive(pids: &std::path::Path) -> usize {
        std::fs::read_to_string(pids)
            .unwrap_or_default()
            .lines()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| !stat.contains(") Z "))
            })
            .count()
    }

    /// 30 distinct registry hosts asked at once of a helper that never answers: at most 4
    /// helper processes alive, and none once every admission stopped waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn helper_runs_are_capped_and_die_with_their_last_waiter() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        let script = format!(
            "#!/bin/sh\ncat >/dev/null; echo $$ >> '{}'; exec sleep 30\n",
            pids.display()
        );
        let path = dir.path().join("docker-credential-slow");
        std::fs::write(&path, script).expect("write helper");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut slow = helpers(r#"{"credsStore":"slow"}"#).expect("configured");
        slow.dir = Some(dir.path().to_path_buf());
        let slow = Arc::new(slow);
        let asks = (0..30).map(|i| {
            let slow = slow.clone();
            let image = format!("h{i}.example/team/app");
            async move {
                let asked = slow.provide(&image);
                tokio::time::timeout(Duration::from_millis(700), asked).await
            }
        });
        let watch = async {
            let mut peak = 0;
            for _ in 0..30 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                peak = peak.max(alive(&pids));
            }
            peak
        };
        let (_, peak) = tokio::join!(futures::future::join_all(asks), watch);
        assert!((1..=4).contains(&peak), "peak {peak} helper processes");
        let gone = std::time::Instant::now();
        while alive(&pids) > 0 {
            assert!(
                gone.elapsed() < Duration::from_secs(2),
                "helpers outlived their waiters"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A helper script in a directory of its own that appends a line to `runs` on each run,
    /// then runs `body`.
    fn helper_script(body: &str) -> (tempfile::TempDir, std::path::PathBuf, DockerHelpers) {
        let dir = tempfile::tempdir().expect("tempdir");
        let runs = dir.path().join("runs");
        let script = format!(
            "#!/bin/sh\ncat >/dev/null; echo run >> '{}'; {body}\n",
            runs.display()
        );
        let path = dir.path().join("docker-credential-flaky");
        std::fs::write(&path, script).expect("write helper");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut flaky = helpers(r#"{"credsStore":"flaky"}"#).expect("configured");
        flaky.dir = Some(dir.path().to_path_buf());
        (dir, runs, flaky)
    }

    fn count(runs: &std::path::Path) -> usize {
        std::fs::read_to_string(runs)
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// Issue 44: a helper that fails is not run again for 10 s for the same tenant's images of
    /// the same server: 20 images, one after the other, 1 run (was 20); another server or
    /// another tenant runs it again. A run still going when its admission stops waiting counts
    /// as failed too.
    #[tokio::test]
    async fn a_failing_helper_stands_for_its_tenants_images_of_its_server_only() {
        let (_dir, runs, failing) = helper_script("echo 'keychain locked' >&2; exit 3");
        for i in 0..20 {
            let image = format!("a.example/team/app-{i}");
            let provided = crate::tenant::scope("team-a", failing.provide(&image)).await;
            assert!(provided.entries.is_empty());
            let warning = provided.warnings.join(" ");
            assert!(
                warning.contains("flaky gave no credentials for a.example"),
                "{warning}"
            );
            if i > 0 {
                assert!(
                    warning.contains("failed for this registry within 10s"),
                    "{warning}"
                );
            }
        }
        assert_eq!(count(&runs), 1, "one run for 20 images of one server");
        crate::tenant::scope("team-a", failing.provide("b.example/team/app")).await;
        assert_eq!(count(&runs), 2, "another server runs it");
        crate::tenant::scope("team-b", failing.provide("a.example/team/app")).await;
        assert_eq!(count(&runs), 3, "another tenant runs it");

        let (_dir, runs, stalling) = helper_script("exec sleep 30");
        let asked = crate::tenant::scope("team-a", stalling.provide("a.example/team/app"));
        assert!(tokio::time::timeout(Duration::from_millis(300), asked)
            .await
            .is_err());
        let provided =
            crate::tenant::scope("team-a", stalling.provide("a.example/team/other")).await;
        assert_eq!(count(&runs), 1, "not run again");
        let warning = provided.warnings.join(" ");
        assert!(
            warning.contains("no answer before the admission stopped waiting"),
            "{warning}"
        );
    }

    /// A failure remembered for a tenant whose admission gave up never hides the answer
    /// another admission of the same tenant waited for: A stops waiting while the helper runs
    /// (a stall is remembered), B goes on waiting and gets the credential, and C, after both,
    /// gets it from the cache.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_remembered_stall_never_hides_a_cached_answer() {
        let (_dir, _runs, slow) =
            helper_script(r#"sleep 0.5; echo '{"Username":"u","Secret":"s"}'"#);
        let a = crate::tenant::scope("team-a", slow.provide("a.example/team/x"));
        let b = crate::tenant::scope("team-a", slow.provide("a.example/team/y"));
        let (a, b) = tokio::join!(tokio::time::timeout(Duration::from_millis(150), a), b);
        assert!(a.is_err(), "A stopped waiting");
        assert_eq!(b.entries.len(), 1, "{:?}", b.warnings);
        let c = crate::tenant::scope("team-a", slow.provide("a.example/team/z")).await;
        assert_eq!(c.entries.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
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
