//! Registry helper for the end-to-end tier (`tests/e2e/run.sh`): starts a real registry
//! (Debian's docker-registry, TLS from a generated CA, no auth) on 127.0.0.1, pushes the
//! multi-arch images the scenarios use, and a second, private one (htpasswd, the same CA) with
//! `team/private:1.0` for the credential provider scenario; writes an env file, then serves commands read from
//! its stdin until stdin reaches EOF, it gets SIGTERM/SIGINT, or its parent process exits
//! (checked every second, so a `kill -9` of run.sh does not leave a registry behind). It then
//! drops the registry, whose `Drop` kills the docker-registry process and removes its tempdir.
//!
//! Usage: `e2e_registry ENV_FILE` (reuses the integration-test harness in tests/common).
//!
//! Commands, one per stdin line:
//!
//! - `repush REPO TAG OUT_FILE`: push a new multi-arch image (new content, so new digests)
//!   under `REPO:TAG`, as a CI pipeline re-pushing a tag does, then write `sha256:<index
//!   digest>` and a newline to `OUT_FILE` (atomically: complete once it exists), or
//!   `error: <why>` when the command cannot be done. `REPO` must be one of the pushed
//!   repositories (`team/roll`...).
//! - `sign REPO DIGEST OUT_FILE`: sign `DIGEST` of `REPO` (`team/...`) with the key of
//!   `SIGNING_KEY`, as `cosign sign --key` does (cosign's tag scheme), then write `ok` to
//!   `OUT_FILE`.
//! - `registry NAME up OUT_FILE`: start a further registry called `NAME` (TLS from the same CA,
//!   no auth, empty) the first time, or start it again on the same port and storage after
//!   `down`; then write `HOST=127.0.0.1:PORT` and `ACCESS_LOG=PATH` lines to `OUT_FILE`. For
//!   the scenarios that need a registry of their own to stop (a disconnected source) or a
//!   mirror (`node-mirror-pins-disconnected-source`). At most 4 names, `[a-z0-9-]`, 1-20
//!   characters.
//! - `registry NAME down OUT_FILE`: stop that registry (SIGKILL; its storage stays), then write
//!   `ok` to `OUT_FILE`.
//!
//! With `E2E_SCALE_IMAGES=N`, also `team/scale:1` .. `team/scale:N` (`DIGEST_scale_<i>`), for
//! the watch's scale scenario (`watch-at-scale`).
//!
//! The env file (written atomically: complete once it exists) holds shell-sourceable lines:
//!
//! ```text
//! REGISTRY_HOST=127.0.0.1:PORT
//! REGISTRY_CA=/tmp/pinhook-registry-XXXX/tls/ca.pem
//! REGISTRY_LOG=/tmp/pinhook-registry-XXXX/registry.log
//! REGISTRY_ACCESS_LOG=/tmp/pinhook-registry-XXXX/access.log
//! DIGEST_app_1_0=sha256:...      # index digest of team/app:1.0 (`.` and `-` in names -> `_`)
//! ...
//! SIGNING_KEY=ENV_FILE.cosign.pub # the public key team/app:1.0 is signed with (cosign's
//!                                 # tag scheme); no other image is signed
//! PRIVATE_HOST=127.0.0.1:PORT    # the htpasswd registry
//! PRIVATE_USER=...
//! PRIVATE_PASSWORD=...
//! DIGEST_private_1_0=sha256:...  # index digest of PRIVATE_HOST/team/private:1.0
//! ```

// The integration tests' harness, of which this uses a part: the tests use all of it, and
// their binary is where an unused helper is an error.
#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use common::images;
use common::registry::{RegistryAuth, TestRegistry, Transport};
use futures::StreamExt as _;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

/// `(repository, tag)` pushed as multi-arch OCI indexes; the seed is `repo:tag`, so every
/// image gets its own digests.
/// The images signed (cosign's tag scheme, the key in `SIGNING_KEY`); every other is unsigned.
const SIGNED: &[(&str, &str)] = &[("team/app", "1.0")];

const IMAGES: &[(&str, &str)] = &[
    ("team/app", "1.0"),
    ("team/app", "2.0"),
    ("team/db", "1.0"),
    ("team/cron", "1.0"),
    ("team/init", "1.0"),
    ("team/sidecar", "1.0"),
    ("team/agent", "1.0"),
    ("team/job", "1.0"),
    // Re-pushed by scenario `target-pods-one-digest-per-revision` (`repush`); no other scenario uses it, so its moving digest
    // cannot leak into their expectations.
    ("team/roll", "1.0"),
    // Re-pushed by the watch's scenario `watch-reports-tag-moved`, for the same reason.
    ("team/drift", "1.0"),
];

/// `E2E_SCALE_IMAGES` images pushed at once.
const SCALE_PUSH_CONCURRENCY: usize = 8;

/// The private registry's only user (htpasswd).
const PRIVATE_USER: &str = "e2e-private";
const PRIVATE_PASSWORD: &str = "e2e-private-secret";

/// How many further registries (`registry NAME up`) may run at once.
const MAX_EXTRA_REGISTRIES: usize = 4;

/// A command read from stdin.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Repush {
        repo: String,
        tag: String,
        out: PathBuf,
    },
    Sign {
        repo: String,
        digest: String,
        out: PathBuf,
    },
    Registry {
        name: String,
        up: bool,
        out: PathBuf,
    },
}

/// The further registries started by `registry NAME up`, by name.
type Extra = std::collections::BTreeMap<String, TestRegistry>;

#[tokio::main]
async fn main() -> Result<()> {
    let env_path = match std::env::args_os().nth(1) {
        Some(path) => PathBuf::from(path),
        None => bail!("usage: e2e_registry ENV_FILE"),
    };
    common::tls::init_crypto();

    // Install the signal handlers before anything slow, so an early SIGTERM still
    // reaches the Drop of the registry.
    let mut sigterm = signal(SignalKind::terminate()).context("install the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("install the SIGINT handler")?;

    let registry = TestRegistry::start(RegistryAuth::None).await;
    eprintln!("e2e_registry: registry on {}", registry.host());

    let mut env = format!(
        "REGISTRY_HOST={}\nREGISTRY_CA={}\nREGISTRY_LOG={}\nREGISTRY_ACCESS_LOG={}\n",
        registry.host(),
        registry.ca_path().display(),
        registry.app_log.display(),
        registry.access_log.display(),
    );
    // The images of SIGNED are signed, as `cosign sign --key` does, with a key made here; its
    // public half is written beside the env file (`SIGNING_KEY`).
    let (signer, pem) = common::signing::key_pair_pem();
    let key_path = env_path.with_extension("cosign.pub");
    std::fs::write(&key_path, &pem).context("write the signing key")?;
    env.push_str(&format!("SIGNING_KEY={}\n", key_path.display()));
    for (repo, tag) in IMAGES {
        let seed = format!("{repo}:{tag}");
        let pushed = tokio::select! {
            pushed = images::push_multi_arch(&registry, repo, tag, &seed) => pushed,
            _ = sigterm.recv() => { eprintln!("e2e_registry: SIGTERM while pushing"); return Ok(()); }
            _ = sigint.recv() => { eprintln!("e2e_registry: SIGINT while pushing"); return Ok(()); }
        };
        let name = repo.rsplit('/').next().unwrap_or(repo);
        env.push_str(&format!(
            "DIGEST_{}_{}={}\n",
            var_part(name),
            var_part(tag),
            pushed.index_digest
        ));
        if SIGNED.contains(&(*repo, *tag)) {
            common::signing::sign(&registry, repo, &pushed.index_digest, &signer).await;
        }
        eprintln!(
            "e2e_registry: pushed {} -> {}",
            pushed.reference, pushed.index_digest
        );
    }
    // E2E_SCALE_IMAGES=N (the watch's scale scenario `watch-at-scale`): N more images, team/scale:1..N.
    let scale: usize = std::env::var("E2E_SCALE_IMAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // Pushed SCALE_PUSH_CONCURRENCY at a time (2,000 images one by one take minutes), listed in
    // order.
    let pushes = futures::stream::iter(1..=scale)
        .map(|i| {
            let registry = &registry;
            async move {
                let (tag, seed) = (i.to_string(), format!("scale:{i}"));
                let pushed = images::push_multi_arch(registry, "team/scale", &tag, &seed).await;
                (i, pushed.index_digest)
            }
        })
        .buffered(SCALE_PUSH_CONCURRENCY)
        .collect::<Vec<_>>();
    let pushed = tokio::select! {
        pushed = pushes => pushed,
        _ = sigterm.recv() => { eprintln!("e2e_registry: SIGTERM while pushing"); return Ok(()); }
        _ = sigint.recv() => { eprintln!("e2e_registry: SIGINT while pushing"); return Ok(()); }
    };
    for (i, digest) in pushed {
        env.push_str(&format!("DIGEST_scale_{i}={digest}\n"));
    }
    if scale > 0 {
        eprintln!("e2e_registry: pushed team/scale:1..{scale}");
    }
    let private = TestRegistry::start_with(
        RegistryAuth::htpasswd(PRIVATE_USER, PRIVATE_PASSWORD),
        Transport::Https,
        Some(registry.ca.clone()),
    )
    .await;
    let pushed = tokio::select! {
        pushed = images::push_multi_arch(&private, "team/private", "1.0", "private") => pushed,
        _ = sigterm.recv() => { eprintln!("e2e_registry: SIGTERM while pushing"); return Ok(()); }
        _ = sigint.recv() => { eprintln!("e2e_registry: SIGINT while pushing"); return Ok(()); }
    };
    eprintln!(
        "e2e_registry: private registry on {}, pushed {} -> {}",
        private.host(),
        pushed.reference,
        pushed.index_digest
    );
    env.push_str(&format!(
        "PRIVATE_HOST={}\nPRIVATE_USER={PRIVATE_USER}\nPRIVATE_PASSWORD={PRIVATE_PASSWORD}\n\
         DIGEST_private_1_0={}\n",
        private.host(),
        pushed.index_digest
    ));
    write_atomically(&env_path, &env)?;
    eprintln!("e2e_registry: wrote {}", env_path.display());

    // A plain thread reads stdin: tokio's stdin would leave a blocking read that keeps the
    // runtime from shutting down after a signal. It sends each command line, then `None` at EOF.
    let (line_tx, mut line_rx) = mpsc::channel::<Option<String>>(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line_tx.blocking_send(Some(line)).is_err() {
                return;
            }
        }
        let _ = line_tx.blocking_send(None);
    });

    let parent = std::os::unix::process::parent_id();
    let orphaned = async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            if std::os::unix::process::parent_id() != parent {
                return;
            }
        }
    };
    tokio::pin!(orphaned);

    let mut pushes = 0u32;
    let mut extra = Extra::new();
    loop {
        tokio::select! {
            line = line_rx.recv() => match line {
                Some(Some(line)) => {
                    pushes += 1;
                    run_command(&registry, &signer, &mut extra, &line, pushes).await;
                }
                _ => { eprintln!("e2e_registry: stdin closed, stopping"); break; }
            },
            _ = &mut orphaned => { eprintln!("e2e_registry: parent process {parent} exited, stopping"); break; }
            _ = sigterm.recv() => { eprintln!("e2e_registry: SIGTERM, stopping"); break; }
            _ = sigint.recv() => { eprintln!("e2e_registry: SIGINT, stopping"); break; }
        }
    }
    if !registry.is_running() {
        eprintln!(
            "e2e_registry: the registry had exited on its own:\n{}",
            registry.log_tail(20)
        );
    }
    drop(extra);
    drop(private);
    drop(registry);
    let _ = std::fs::remove_file(&env_path);
    eprintln!("e2e_registry: registries stopped");
    // Exit right away: the stdin thread may still be blocked in read().
    std::process::exit(0)
}

/// Runs one stdin command; the `n`th command re-pushes with seed `REPO:TAG#n`, so every
/// re-push has content (and digests) of its own.
async fn run_command(
    registry: &TestRegistry,
    signer: &sigstore::crypto::SigStoreSigner,
    extra: &mut Extra,
    line: &str,
    n: u32,
) {
    let command = match parse_command(line) {
        Ok(command) => command,
        Err(why) => {
            eprintln!("e2e_registry: {why}");
            // The last word is meant to be the answer file; tell the waiting script there.
            if let Some(out) = line.split_whitespace().last().filter(|w| w.contains('/')) {
                let _ = write_atomically(std::path::Path::new(out), &format!("error: {why}\n"));
            }
            return;
        }
    };
    match command {
        Command::Repush { repo, tag, out } => {
            let answer = if IMAGES.iter().any(|(r, _)| *r == repo) {
                let seed = format!("{repo}:{tag}#{n}");
                let pushed = images::push_multi_arch(registry, &repo, &tag, &seed).await;
                eprintln!(
                    "e2e_registry: re-pushed {} -> {}",
                    pushed.reference, pushed.index_digest
                );
                format!("{}\n", pushed.index_digest)
            } else {
                eprintln!("e2e_registry: repush: unknown repository {repo}");
                format!("error: unknown repository {repo}\n")
            };
            if let Err(e) = write_atomically(&out, &answer) {
                eprintln!("e2e_registry: repush: {e:#}");
            }
        }
        Command::Sign { repo, digest, out } => {
            common::signing::sign(registry, &repo, &digest, signer).await;
            eprintln!("e2e_registry: signed {repo}@{digest}");
            if let Err(e) = write_atomically(&out, "ok\n") {
                eprintln!("e2e_registry: sign: {e:#}");
            }
        }
        Command::Registry { name, up, out } => {
            let answer = extra_registry(registry, extra, &name, up).await;
            if let Err(e) = write_atomically(&out, &answer) {
                eprintln!("e2e_registry: registry {name}: {e:#}");
            }
        }
    }
}

/// `registry NAME up|down`: the answer for the command's file.
async fn extra_registry(
    registry: &TestRegistry,
    extra: &mut Extra,
    name: &str,
    up: bool,
) -> String {
    if !up {
        return match extra.get(name) {
            Some(reg) => {
                reg.stop();
                eprintln!("e2e_registry: registry {name} ({}) stopped", reg.host());
                "ok\n".to_string()
            }
            None => format!("error: no registry {name}\n"),
        };
    }
    match extra.get(name) {
        Some(reg) => reg.start_again().await,
        None if extra.len() >= MAX_EXTRA_REGISTRIES => {
            return format!("error: already {MAX_EXTRA_REGISTRIES} further registries\n")
        }
        None => {
            let reg = TestRegistry::start_with(
                RegistryAuth::None,
                Transport::Https,
                Some(registry.ca.clone()),
            )
            .await;
            extra.insert(name.to_string(), reg);
        }
    }
    match extra.get(name) {
        Some(reg) => {
            eprintln!("e2e_registry: registry {name} on {}", reg.host());
            format!(
                "HOST={}\nACCESS_LOG={}\n",
                reg.host(),
                reg.access_log.display()
            )
        }
        None => format!("error: no registry {name}\n"),
    }
}

fn parse_command(line: &str) -> Result<Command, String> {
    match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["repush", repo, tag, out] => Ok(Command::Repush {
            repo: repo.to_string(),
            tag: tag.to_string(),
            out: PathBuf::from(out),
        }),
        ["sign", repo, digest, out] => {
            if !repo.starts_with("team/") || !digest.starts_with("sha256:") {
                return Err(format!("sign {repo} {digest}: team/REPO and sha256:HEX"));
            }
            Ok(Command::Sign {
                repo: repo.to_string(),
                digest: digest.to_string(),
                out: PathBuf::from(out),
            })
        }
        ["registry", name, state @ ("up" | "down"), out] => {
            let valid = (1..=20).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !valid {
                return Err(format!(
                    "registry name {name:?}: [a-z0-9-], 1-20 characters"
                ));
            }
            Ok(Command::Registry {
                name: name.to_string(),
                up: *state == "up",
                out: PathBuf::from(out),
            })
        }
        _ => Err(format!(
            "unknown command {line:?} (known: repush REPO TAG OUT_FILE, sign REPO DIGEST OUT_FILE, \
             registry NAME up|down OUT_FILE)"
        )),
    }
}

/// `1.0` -> `1_0`, `my-app` -> `my_app`: usable in a shell variable name.
fn var_part(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn write_atomically(path: &std::path::Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file =
        std::fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}
