//! Registry helper for the end-to-end tier (`tests/e2e/run.sh`): starts a real registry
//! (Debian's docker-registry, TLS from a generated CA, no auth) on 127.0.0.1, pushes the
//! multi-arch images the scenarios use, writes an env file, then stays up until its stdin
//! reaches EOF, it gets SIGTERM/SIGINT, or its parent process exits (checked every second,
//! so a `kill -9` of run.sh does not leave a registry behind). It then drops the registry,
//! whose `Drop` kills the docker-registry process and removes its tempdir.
//!
//! Usage: `e2e_registry ENV_FILE` (reuses the integration-test harness in tests/common).
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
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use common::images;
use common::registry::{RegistryAuth, TestRegistry};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

/// `(repository, tag)` pushed as multi-arch OCI indexes; the seed is `repo:tag`, so every
/// image gets its own digests.
const IMAGES: &[(&str, &str)] = &[
    ("team/app", "1.0"),
    ("team/app", "2.0"),
    ("team/db", "1.0"),
    ("team/cron", "1.0"),
    ("team/init", "1.0"),
    ("team/sidecar", "1.0"),
];

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
        registry.log_path().display(),
        registry.access_log_path().display(),
    );
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
        eprintln!(
            "e2e_registry: pushed {} -> {}",
            pushed.reference, pushed.index_digest
        );
    }
    write_atomically(&env_path, &env)?;
    eprintln!("e2e_registry: wrote {}", env_path.display());

    // A plain thread reads stdin: tokio's stdin would leave a blocking read that keeps the
    // runtime from shutting down after a signal.
    let (eof_tx, mut eof_rx) = mpsc::channel::<()>(1);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut stdin = std::io::stdin().lock();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        let _ = eof_tx.blocking_send(());
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

    tokio::select! {
        _ = eof_rx.recv() => eprintln!("e2e_registry: stdin closed, stopping"),
        _ = orphaned => eprintln!("e2e_registry: parent process {parent} exited, stopping"),
        _ = sigterm.recv() => eprintln!("e2e_registry: SIGTERM, stopping"),
        _ = sigint.recv() => eprintln!("e2e_registry: SIGINT, stopping"),
    }
    if !registry.is_running() {
        eprintln!(
            "e2e_registry: the registry had exited on its own:\n{}",
            registry.log_tail(20)
        );
    }
    drop(registry);
    let _ = std::fs::remove_file(&env_path);
    eprintln!("e2e_registry: registry stopped");
    // Exit right away: the stdin thread may still be blocked in read().
    std::process::exit(0)
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
