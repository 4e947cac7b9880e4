//! Who may ask for an admission review: with a client CA configured (`--client-ca-file`),
//! only a connection whose TLS client presented a certificate chained to that CA (the
//! apiserver, given that certificate in its admission configuration). The handshake itself
//! lets a client without a certificate in (the kubelet's probes, Prometheus and `/v1/dry-run`'s
//! token callers carry none), so the check is per request: [`PeerAcceptor`] records after the
//! handshake whether a verified certificate was presented ([`ClientCert`], a request
//! extension), and [`refuse_unverified`] answers `/mutate` and `/validate` 403 without one,
//! after reading and dropping the body (never parsed), so the answer is not lost to a reset.
//! A certificate that does not chain to the CA fails the handshake. A CA that signs more than
//! the apiserver's certificate (a cluster's CA signs every kubelet's) would let any of those in:
//! with `--client-cert-names`, the certificate must also carry one of those names, as a DNS
//! subject alternative name or its subject's common name ([`ClientCert::Unnamed`] otherwise,
//! refused the same way). A CA of the apiserver's alone is still the advice
//! (docs/security.md).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum_server::accept::Accept;
use futures::StreamExt as _;
use tokio_rustls::server::TlsStream;
use tracing::warn;

use super::AppState;

/// Whether the connection's TLS client presented a certificate the client CA verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCert {
    Verified,
    /// Verified, but carrying none of the names `--client-cert-names` allows.
    Unnamed,
    Absent,
}

/// Wraps the TLS acceptor: after the handshake, every request of the connection carries its
/// [`ClientCert`].
#[derive(Clone)]
pub struct PeerAcceptor<A> {
    inner: A,
    /// The names a client certificate must carry one of; empty: any the CA signed.
    names: Arc<[String]>,
}

/// A connection's service, inserting its [`ClientCert`] into each request.
#[derive(Clone)]
pub struct WithPeer<S> {
    inner: S,
    peer: ClientCert,
}

// === impl PeerAcceptor ===

impl<A> PeerAcceptor<A> {
    pub fn new(inner: A, names: &[String]) -> Self {
        PeerAcceptor {
            inner,
            names: names.into(),
        }
    }
}

impl<A, I, S, T> Accept<I, S> for PeerAcceptor<A>
where
    A: Accept<I, S, Stream = TlsStream<T>>,
    A::Future: Send + 'static,
{
    type Stream = TlsStream<T>;
    type Service = WithPeer<A::Service>;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let names = self.names.clone();
        Box::pin(async move {
            let (stream, inner) = accepted.await?;
            // rustls only keeps certificates its verifier accepted: any at all is a verified
            // client (without a verifier none is asked for).
            let peer = match stream.get_ref().1.peer_certificates() {
                Some([leaf, ..]) if names.is_empty() || carries_a_name(leaf, &names) => {
                    ClientCert::Verified
                }
                Some([_, ..]) => ClientCert::Unnamed,
                _ => ClientCert::Absent,
            };
            Ok((stream, WithPeer { inner, peer }))
        })
    }
}

/// Whether the certificate `der` names one of `names`: a DNS subject alternative name, or
/// its subject's common name. A certificate that cannot be read names none.
fn carries_a_name(der: &[u8], names: &[String]) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return false;
    };
    let mut found: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                found.push((*dns).to_string());
            }
        }
    }
    found.iter().any(|f| names.iter().any(|n| n == f))
}

// === impl WithPeer ===

impl<S, B> tower_service::Service<axum::http::Request<B>> for WithPeer<S>
where
    S: tower_service::Service<axum::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: axum::http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.peer);
        self.inner.call(request)
    }
}

/// Lets an admission review through only from a verified client when client certificates
/// are required (the request back, to be read); otherwise the 403 to answer, once the body is
/// in (read and dropped: nothing parsed or resolved). Called by the review handlers before they
/// read the body, not as a middleware layer: a layer costs every review a boxed future and a
/// clone of the routes behind it.
pub(super) async fn refuse_unverified(
    state: &AppState,
    request: Request,
) -> Result<Request, Response> {
    if !state.require_client_cert
        || request.extensions().get::<ClientCert>() == Some(&ClientCert::Verified)
    {
        return Ok(request);
    }
    let unnamed = request.extensions().get::<ClientCert>() == Some(&ClientCert::Unnamed);
    warn!(
        path = request.uri().path(),
        unnamed, "refused an admission review from a client without a verified certificate"
    );
    state.metrics.unauthenticated_reviews.inc();
    // Read and drop the body, unparsed, before answering: answering first ends an HTTP/2 stream
    // with a reset, which clients such as curl report instead of the 403, and closing an
    // HTTP/1.1 connection with the body unread makes the kernel reset it. Bounded by the body
    // size limit and the body read timeout layered outside (a longer or slower body ends it).
    let mut body = request.into_body().into_data_stream();
    while let Some(Ok(_)) = body.next().await {}
    let why = if unnamed {
        "admission reviews need a client certificate signed by the configured client CA and \
         carrying one of the allowed names (--client-cert-names)\n"
    } else {
        "admission reviews need a client certificate signed by the configured client CA\n"
    };
    Err((StatusCode::FORBIDDEN, why).into_response())
}
