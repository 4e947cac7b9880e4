//! The serving certificate: loaded from PEM files and reloaded when they change (a mounted
//! Secret is updated in place), or taken from each pair the self-managed Secret sends. A pair
//! rustls refuses keeps the previous one serving; existing connections are not touched. Also
//! who may present a client certificate: with a client CA (`--client-ca-file`) the handshake
//! asks for one and refuses a certificate that does not chain to that CA, while a client that
//! presents none still completes it (probes carry none); [`super::client_auth`] then refuses
//! such a connection's admission reviews. Each certificate put in service sets
//! `pinhook_serving_certificate_expiry_timestamp_seconds` to its `notAfter`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum_server::tls_rustls::RustlsConfig;
use prometheus_client::metrics::gauge::Gauge;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tracing::{info, warn};

use super::{ServerError, ServerTls};
use crate::certs::managed::Serving;

/// How often certificate files are checked for changes.
const RELOAD_POLL: Duration = Duration::from_secs(2);

/// How the handshake treats client certificates.
#[derive(Clone)]
pub(super) struct Clients(Option<Arc<dyn ClientCertVerifier>>);

// === impl Clients ===

impl Clients {
    /// No client certificate asked for.
    pub(super) fn none() -> Clients {
        Clients(None)
    }

    /// Client certificates asked for and, when presented, verified against the CA
    /// certificates in `path` (PEM, one or more); a client may still present none.
    pub(super) async fn from_ca_file(path: &Path) -> Result<Clients, ServerError> {
        let bad = |source: io::Error| ServerError::LoadClientCa {
            path: path.to_path_buf(),
            source,
        };
        let pem = tokio::fs::read(path).await.map_err(bad)?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| bad(io::Error::other(e.to_string())))?;
            roots
                .add(cert)
                .map_err(|e| bad(io::Error::other(e.to_string())))?;
        }
        if roots.is_empty() {
            return Err(bad(io::Error::other("no CA certificate in the file")));
        }
        let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
            .allow_unauthenticated()
            .build()
            .map_err(|e| bad(io::Error::other(e.to_string())))?;
        Ok(Clients(Some(verifier)))
    }

    /// The rustls configuration serving `cert` (a PEM chain) with `key`, and the first
    /// certificate's `notAfter` (Unix seconds) when it parses as X.509.
    fn config(&self, cert: &[u8], key: &[u8]) -> io::Result<(Arc<ServerConfig>, Option<i64>)> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io::Error::other(format!("failed to parse the certificate: {e}")))?;
        let not_after = chain.first().and_then(|leaf| {
            let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
            Some(parsed.validity().not_after.timestamp())
        });
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| io::Error::other(format!("failed to parse the private key: {e}")))?;
        let builder = ServerConfig::builder();
        let builder = match &self.0 {
            Some(verifier) => builder.with_client_cert_verifier(verifier.clone()),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(io::Error::other)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok((Arc::new(config), not_after))
    }

    async fn config_from_files(
        &self,
        cert: &Path,
        key: &Path,
    ) -> io::Result<(Arc<ServerConfig>, Option<i64>)> {
        let cert = tokio::fs::read(cert).await?;
        let key = tokio::fs::read(key).await?;
        self.config(&cert, &key)
    }
}

/// The certificate put in service: `expiry` says until when it is valid.
fn in_service(expiry: &Gauge, not_after: Option<i64>) {
    if let Some(not_after) = not_after {
        expiry.set(not_after);
    }
}

/// The first certificate to serve, and the task that keeps it current; `expiry` follows the
/// certificate in service.
pub(super) async fn serving(
    tls: ServerTls,
    clients: Clients,
    expiry: Gauge,
) -> Result<(RustlsConfig, tokio::task::JoinHandle<()>), ServerError> {
    match tls {
        ServerTls::Files { cert, key } => {
            let (config, not_after) =
                clients
                    .config_from_files(&cert, &key)
                    .await
                    .map_err(|source| ServerError::LoadTls {
                        cert: cert.clone(),
                        key: key.clone(),
                        source,
                    })?;
            in_service(&expiry, not_after);
            let tls = RustlsConfig::from_config(config);
            let reloader =
                tokio::spawn(reload_certificates(tls.clone(), clients, cert, key, expiry));
            Ok((tls, reloader))
        }
        ServerTls::Watched(mut pairs) => {
            let first = pairs
                .borrow_and_update()
                .clone()
                .ok_or(ServerError::NoManagedTls)?;
            let (config, not_after) = clients
                .config(first.cert.as_bytes(), first.key.as_bytes())
                .map_err(ServerError::LoadManagedTls)?;
            in_service(&expiry, not_after);
            let tls = RustlsConfig::from_config(config);
            let reloader = tokio::spawn(follow_certificates(tls.clone(), clients, pairs, expiry));
            Ok((tls, reloader))
        }
    }
}

/// Reloads the certificate when the files change (a mounted Secret is updated in place).
/// A bad new pair keeps the old one serving; existing connections are not touched.
async fn reload_certificates(
    tls: RustlsConfig,
    clients: Clients,
    cert: PathBuf,
    key: PathBuf,
    expiry: Gauge,
) {
    let mut seen = (modified(&cert).await, modified(&key).await);
    loop {
        tokio::time::sleep(RELOAD_POLL).await;
        let now = (modified(&cert).await, modified(&key).await);
        if now == seen {
            continue;
        }
        seen = now;
        match clients.config_from_files(&cert, &key).await {
            Ok((config, not_after)) => {
                tls.reload_from_config(config);
                in_service(&expiry, not_after);
                info!(cert = %cert.display(), "reloaded TLS certificate");
            }
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
    clients: Clients,
    mut pairs: tokio::sync::watch::Receiver<Option<Serving>>,
    expiry: Gauge,
) {
    while pairs.changed().await.is_ok() {
        let Some(pair) = pairs.borrow_and_update().clone() else {
            continue;
        };
        match clients.config(pair.cert.as_bytes(), pair.key.as_bytes()) {
            Ok((config, not_after)) => {
                tls.reload_from_config(config);
                in_service(&expiry, not_after);
                info!("serving the TLS Secret's new certificate");
            }
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
