//! Who may ask for an admission review: with a client CA configured (`--client-ca-file`),
//! only a connection whose TLS client presented a certificate chained to that CA (the
//! apiserver, given that certificate in its admission configuration). The handshake itself
//! lets a client without a certificate in (the kubelet's probes, Prometheus and `/v1/dry-run`'s
//! token callers carry none), so the check is per request: [`PeerAcceptor`] records after the
//! handshake whether a verified certificate was presented ([`ClientCert`], a request
//! extension), and [`refuse_unverified`] answers `/mutate` and `/validate` 403 without one,
//! after reading and dropping the body (never parsed), so the answer is not lost to a reset.
//! A certificate that does not chain to the CA fails the handshake.

use std::future::Future;
use std::io;
use std::pin::Pin;
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
    Absent,
}

/// Wraps the TLS acceptor: after the handshake, every request of the connection carries its
/// [`ClientCert`].
#[derive(Clone)]
pub struct PeerAcceptor<A> {
    inner: A,
}

/// A connection's service, inserting its [`ClientCert`] into each request.
#[derive(Clone)]
pub struct WithPeer<S> {
    inner: S,
    peer: ClientCert,
}

// === impl PeerAcceptor ===

impl<A> PeerAcceptor<A> {
    pub fn new(inner: A) -> Self {
        PeerAcceptor { inner }
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
        Box::pin(async move {
            let (stream, inner) = accepted.await?;
            // rustls only keeps certificates its verifier accepted: any at all is a verified
            // client (without a verifier none is asked for).
            let peer = match stream.get_ref().1.peer_certificates() {
                Some(chain) if !chain.is_empty() => ClientCert::Verified,
                _ => ClientCert::Absent,
            };
            Ok((stream, WithPeer { inner, peer }))
        })
    }
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
    warn!(
        path = request.uri().path(),
        "refused an admission review from a client without a verified certificate"
    );
    state.metrics.unauthenticated_reviews.inc();
    // Read and drop the body, unparsed, before answering: answering first ends an HTTP/2 stream
    // with a reset, which clients such as curl report instead of the 403, and closing an
    // HTTP/1.1 connection with the body unread makes the kernel reset it. Bounded by the body
    // size limit and the body read timeout layered outside (a longer or slower body ends it).
    let mut body = request.into_body().into_data_stream();
    while let Some(Ok(_)) = body.next().await {}
    Err((
        StatusCode::FORBIDDEN,
        "admission reviews need a client certificate signed by the configured client CA\n",
    )
        .into_response())
}
