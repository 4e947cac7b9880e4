//! The floors' server (`floor.rs`, `e2e_webhook_floor.rs`): an axum router served over
//! axum-server/rustls with pinhook's settings (ring provider, HTTP/1.1 and HTTP/2, TCP_NODELAY).

use std::net::SocketAddr;

use axum::Router;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};

/// Serves `app` on `listen` with the certificate and key at `cert` and `key` (PEM); prints
/// `listening on ADDR` once it listens.
pub async fn serve(listen: &str, cert: &str, key: &str, app: Router) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listen: SocketAddr = listen.parse()?;
    let tls = RustlsConfig::from_pem_file(cert, key).await?;
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    println!("listening on {}", listener.local_addr()?);
    // TCP_NODELAY, as pinhook sets it (without it a small answer waits for a delayed ACK).
    let acceptor = RustlsAcceptor::new(tls).acceptor(NoDelayAcceptor::new());
    axum_server::from_tcp(listener)?
        .acceptor(acceptor)
        .serve(app.into_make_service())
        .await?;
    Ok(())
}
