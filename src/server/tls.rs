//! The serving certificate: loaded from PEM files and reloaded when they change (a mounted
//! Secret is updated in place), or taken from each pair the self-managed Secret sends. A pair
//! rustls refuses keeps the previous one serving; existing connections are not touched.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum_server::tls_rustls::RustlsConfig;
use tracing::{info, warn};

use super::{ServerError, ServerTls};
use crate::certs::managed::Serving;

/// How often certificate files are checked for changes.
const RELOAD_POLL: Duration = Duration::from_secs(2);

/// The first certificate to serve, and the task that keeps it current.
pub(super) async fn serving(
    tls: ServerTls,
) -> Result<(RustlsConfig, tokio::task::JoinHandle<()>), ServerError> {
    match tls {
        ServerTls::Files { cert, key } => {
            let tls = RustlsConfig::from_pem_file(&cert, &key)
                .await
                .map_err(|source| ServerError::LoadTls {
                    cert: cert.clone(),
                    key: key.clone(),
                    source,
                })?;
            let reloader = tokio::spawn(watch_certificates(tls.clone(), cert, key));
            Ok((tls, reloader))
        }
        ServerTls::Watched(mut pairs) => {
            let first = pairs
                .borrow_and_update()
                .clone()
                .ok_or(ServerError::NoManagedTls)?;
            let tls = RustlsConfig::from_pem(first.cert.into_bytes(), first.key.into_bytes())
                .await
                .map_err(ServerError::LoadManagedTls)?;
            let reloader = tokio::spawn(follow_certificates(tls.clone(), pairs));
            Ok((tls, reloader))
        }
    }
}

/// Reloads the certificate when the files change (a mounted Secret is updated in place).
/// A bad new pair keeps the old one serving; existing connections are not touched.
async fn watch_certificates(tls: RustlsConfig, cert: PathBuf, key: PathBuf) {
    let mut seen = (modified(&cert).await, modified(&key).await);
    loop {
        tokio::time::sleep(RELOAD_POLL).await;
        let now = (modified(&cert).await, modified(&key).await);
        if now == seen {
            continue;
        }
        seen = now;
        match tls.reload_from_pem_file(&cert, &key).await {
            Ok(()) => info!(cert = %cert.display(), "reloaded TLS certificate"),
            Err(e) => warn!(
                cert = %cert.display(),
                error = %e,
                "new TLS certificate rejected, still serving the previous one"
            ),
        }
    }
}

/// Serves each new pair the managed Secret holds, as soon as it arrives. A pair rustls
/// refuses keeps the previous one serving; existing connections are not touched.
async fn follow_certificates(
    tls: RustlsConfig,
    mut pairs: tokio::sync::watch::Receiver<Option<Serving>>,
) {
    while pairs.changed().await.is_ok() {
        let Some(pair) = pairs.borrow_and_update().clone() else {
            continue;
        };
        match tls
            .reload_from_pem(pair.cert.into_bytes(), pair.key.into_bytes())
            .await
        {
            Ok(()) => info!("serving the TLS Secret's new certificate"),
            Err(e) => warn!(
                error = %e,
                "the TLS Secret's new certificate was rejected, still serving the previous one"
            ),
        }
    }
}

async fn modified(path: &Path) -> Option<SystemTime> {
    tokio::fs::metadata(path)
        .await
        .and_then(|m| m.modified())
        .ok()
}
