//! How long an HTTP/1.1 connection is kept, and who ends it. The apiserver's webhook client
//! speaks HTTP/1.1 and keeps idle connections for 90 s (client-go's `IdleConnTimeout`); a
//! server that closes one first races the apiserver's next review, which fails (`EOF`,
//! `connection reset`: a written POST is not retried) and, with `failurePolicy: Fail`, fails
//! the user's write with it. So pinhook leaves closing to the client wherever it can, with the
//! bounds Go's `net/http` keeps (`ReadHeaderTimeout`, `IdleTimeout`):
//!
//! - **A connection's first request** must have its headers within the header read timeout of
//!   the connection's start (10 s): a client that sends nothing, or trickles TLS records or
//!   header bytes, is cut there.
//! - **Between two requests** a kept-alive connection waits for its next request's first byte
//!   for the idle timeout (120 s, longer than the apiserver's 90 s), counted from the end of
//!   the answer in decrypted bytes; that byte starts the header read timeout again. hyper's own
//!   `header_read_timeout` is off: it starts as soon as a connection waits, so it closed
//!   kept-alive connections idle for 10 s. [`KeepAliveAcceptor`] wraps each connection in a
//!   [`Clocked`] stream, which keeps these deadlines, and its service in a [`KeptService`],
//!   which stops them while a request is being answered (from the end of its headers to its
//!   answer). A partial head read ahead while the previous request was answered waits at most
//!   the idle timeout.
//! - **While the server drains** (after SIGTERM, before it stops accepting), each answer says
//!   `Connection: close`: the client closes that connection after reading it and dials the
//!   Service again for its next review, which leads to live replicas. At the end of the drain
//!   hyper closes what is left, the connections no review used during the drain.
//!
//! A connection is HTTP/2 when its first bytes are the HTTP/2 preface (what hyper serves, ALPN
//! or not): its requests are frames between which the client may send others (window updates,
//! pings), and it has no `Connection` header, so it keeps hyper's and h2's own bounds and its
//! GOAWAY at shutdown, and no clock.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::http::header::CONNECTION;
use axum::http::{HeaderValue, Request, Response};
use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;

/// No request under way: waiting for a request's first byte.
const IDLE: u8 = 0;
/// A request's first bytes arrived, its headers are not parsed yet.
const HEAD: u8 = 1;
/// A request reached the service and its answer is not ready: no deadline.
const BUSY: u8 = 2;
/// The connection speaks HTTP/2: no deadline, no `Connection` header.
const HTTP2: u8 = 3;

/// What an HTTP/2 connection's first bytes are (RFC 9113, 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Bounds of a kept HTTP/1.1 connection.
#[derive(Debug, Clone, Copy)]
pub struct KeepAliveLimits {
    /// From a connection's start, or a later request's first byte, to the end of its headers.
    pub header_read_timeout: Duration,
    /// From the end of an answer to the next request's first byte.
    pub idle_timeout: Duration,
}

/// Wraps an acceptor of TLS connections: each gets the deadlines of [`KeepAliveLimits`] and,
/// while the server drains, `Connection: close` on its answers (HTTP/1.1 only).
#[derive(Clone)]
pub struct KeepAliveAcceptor<A> {
    inner: A,
    limits: KeepAliveLimits,
    /// False once the server drains.
    ready: Arc<AtomicBool>,
}

impl<A> KeepAliveAcceptor<A> {
    /// `ready`: the server's readiness, false while it drains.
    pub fn new(inner: A, limits: KeepAliveLimits, ready: Arc<AtomicBool>) -> Self {
        KeepAliveAcceptor {
            inner,
            limits,
            ready,
        }
    }
}

impl<A, I, S, T> Accept<I, S> for KeepAliveAcceptor<A>
where
    A: Accept<I, S, Stream = TlsStream<T>>,
    A::Future: Send + 'static,
{
    type Stream = Clocked<TlsStream<T>>;
    type Service = KeptService<A::Service>;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let (limits, ready) = (self.limits, self.ready.clone());
        Box::pin(async move {
            let (stream, inner) = accepted.await?;
            let phase = Arc::new(AtomicU8::new(IDLE));
            let service = KeptService {
                inner,
                phase: phase.clone(),
                ready,
            };
            Ok((Clocked::new(stream, phase, limits), service))
        })
    }
}

/// Which deadline is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Armed {
    /// The connection's first request: its headers within the header read timeout of the start.
    First,
    /// A later request's headers, from its first byte.
    Head,
    /// The wait for the next request's first byte.
    Idle,
}

/// A connection held to the deadlines of [`KeepAliveLimits`].
pub struct Clocked<T> {
    inner: T,
    phase: Arc<AtomicU8>,
    limits: KeepAliveLimits,
    deadline: Pin<Box<Sleep>>,
    armed: Armed,
    /// How many of the preface's bytes the connection's first bytes matched; `None` once they
    /// did not (HTTP/1.1).
    preface: Option<usize>,
}

impl<T> Clocked<T> {
    fn new(inner: T, phase: Arc<AtomicU8>, limits: KeepAliveLimits) -> Self {
        Clocked {
            inner,
            phase,
            limits,
            deadline: Box::pin(tokio::time::sleep(limits.header_read_timeout)),
            armed: Armed::First,
            preface: Some(0),
        }
    }

    fn arm(&mut self, armed: Armed, after: Duration) {
        self.armed = armed;
        self.deadline.as_mut().reset(Instant::now() + after);
    }

    /// Compares the connection's first bytes with the HTTP/2 preface.
    fn sniff(&mut self, bytes: &[u8]) {
        let Some(matched) = self.preface else { return };
        let take = bytes.len().min(PREFACE.len() - matched);
        self.preface =
            (bytes[..take] == PREFACE[matched..matched + take]).then_some(matched + take);
        if self.preface == Some(PREFACE.len()) {
            self.phase.store(HTTP2, Ordering::Release);
        }
    }

    /// Bytes arrived: a request that was not under way starts now (the first request keeps
    /// the deadline counted from the connection's start).
    fn bytes_arrived(&mut self) {
        if self
            .phase
            .compare_exchange(IDLE, HEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        match self.armed {
            Armed::First => self.armed = Armed::Head,
            // Head: the previous request's deadline, if its answer came with no wait after it.
            Armed::Idle | Armed::Head => self.arm(Armed::Head, self.limits.header_read_timeout),
        }
    }

    /// Nothing to read now: is the deadline of what the connection waits for past?
    fn overdue(&mut self, cx: &mut Context<'_>) -> bool {
        match self.phase.load(Ordering::Acquire) {
            IDLE => {
                // An answer was made since the deadline was set: wait for the next request.
                if self.armed == Armed::Head {
                    self.arm(Armed::Idle, self.limits.idle_timeout);
                }
            }
            HEAD => {}
            _ => return false,
        }
        self.deadline.as_mut().poll(cx).is_ready()
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Clocked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.phase.load(Ordering::Acquire) == HTTP2 {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.sniff(&buf.filled()[before..]);
                    this.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.overdue(cx) => {
                let what = match this.armed {
                    Armed::Idle => "no request within the idle timeout",
                    Armed::First | Armed::Head => {
                        "request headers not received within the header read timeout"
                    }
                };
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)))
            }
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Clocked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A connection's service: a request that reaches it has its headers; no deadline runs until
/// its answer is ready. While the server drains, an HTTP/1.1 answer asks the client to close.
#[derive(Clone)]
pub struct KeptService<S> {
    inner: S,
    phase: Arc<AtomicU8>,
    /// The server's readiness.
    ready: Arc<AtomicBool>,
}

impl<S, B, R> tower_service::Service<Request<B>> for KeptService<S>
where
    S: tower_service::Service<Request<B>, Response = Response<R>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answering<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let http1 = self
            .phase
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p != HTTP2).then_some(BUSY)
            })
            .is_ok();
        Answering {
            inner: self.inner.call(request),
            _busy: Busy(self.phase.clone()),
            ready: http1.then(|| self.ready.clone()),
        }
    }
}

/// Sets the connection idle when the answer is ready (or the request is given up).
struct Busy(Arc<AtomicU8>);

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self
            .0
            .compare_exchange(BUSY, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }
}

pin_project_lite::pin_project! {
    /// A request's answer being made; the connection is idle again once it is dropped.
    pub struct Answering<F> {
        #[pin]
        inner: F,
        _busy: Busy,
        ready: Option<Arc<AtomicBool>>,
    }
}

impl<F, R, E> Future for Answering<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut answer = ready!(this.inner.poll(cx));
        if let (Ok(response), Some(ready)) = (&mut answer, this.ready) {
            if !ready.load(Ordering::Acquire) {
                // hyper closes the connection once this answer is written (proto/h1/role.rs).
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
        }
        Poll::Ready(answer)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const LIMITS: KeepAliveLimits = KeepAliveLimits {
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(4),
    };

    fn clocked() -> (
        Clocked<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        Arc<AtomicU8>,
    ) {
        let (server, client) = tokio::io::duplex(1024);
        let phase = Arc::new(AtomicU8::new(IDLE));
        (Clocked::new(server, phase.clone(), LIMITS), client, phase)
    }

    /// Reads until the read fails; returns the error's kind and how long it took.
    async fn fails_after(
        server: &mut Clocked<tokio::io::DuplexStream>,
    ) -> (io::ErrorKind, Duration) {
        let started = Instant::now();
        let mut buf = [0u8; 64];
        loop {
            match server.read(&mut buf).await {
                Ok(_) => continue,
                Err(e) => return (e.kind(), started.elapsed()),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_nothing_is_cut_at_the_header_read_timeout() {
        let (mut server, _client, _) = clocked();
        assert_eq!(
            fails_after(&mut server).await,
            (io::ErrorKind::TimedOut, Duration::from_secs(1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn first_headers_that_do_not_end_fail_the_read_from_the_connections_start() {
        let (mut server, mut client, phase) = clocked();
        tokio::time::sleep(Duration::from_millis(600)).await;
        client
            .write_all(b"POST /mutate HTTP/1.1\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        assert_eq!(phase.load(Ordering::Acquire), HEAD);
        assert_eq!(
            fails_after(&mut server).await,
            (io::ErrorKind::TimedOut, Duration::from_millis(400))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn between_requests_the_wait_is_the_idle_timeout_then_the_header_clock_again() {
        let (mut server, mut client, phase) = clocked();
        let mut service = kept(&phase, Arc::new(AtomicBool::new(true)));
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        // The headers reached the service: no deadline while the answer is made...
        let answer = tower_service::Service::call(&mut service, Request::new(()));
        assert_eq!(phase.load(Ordering::Acquire), BUSY);
        let pending = tokio::time::timeout(Duration::from_secs(30), server.read(&mut buf)).await;
        assert!(pending.is_err(), "read ended while answering: {pending:?}");
        let response = answer.await.unwrap();
        assert_eq!(response.headers().get(CONNECTION), None);
        assert_eq!(phase.load(Ordering::Acquire), IDLE);
        // ... then the wait for the next request: past the header read timeout, within the
        // idle timeout, the next request's first byte starts the header clock.
        let quiet = tokio::time::timeout(Duration::from_secs(3), server.read(&mut buf)).await;
        assert!(
            quiet.is_err(),
            "a kept-alive connection's read ended: {quiet:?}"
        );
        client.write_all(b"G").await.unwrap();
        assert_eq!(server.read(&mut buf).await.unwrap(), 1);
        assert_eq!(
            fails_after(&mut server).await,
            (io::ErrorKind::TimedOut, Duration::from_secs(1))
        );
        // A connection left quiet after an answer is cut at the idle timeout.
        let (mut server, mut client, phase) = clocked();
        let mut service = kept(&phase, Arc::new(AtomicBool::new(true)));
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(server.read(&mut buf).await.unwrap() > 0);
        tower_service::Service::call(&mut service, Request::new(()))
            .await
            .unwrap();
        assert_eq!(
            fails_after(&mut server).await,
            (io::ErrorKind::TimedOut, Duration::from_secs(4))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn http2_by_its_preface_has_no_clock_and_no_connection_header() {
        let (mut server, mut client, phase) = clocked();
        let mut service = kept(&phase, Arc::new(AtomicBool::new(false)));
        // The preface in two pieces, as a client may write it.
        client.write_all(&PREFACE[..10]).await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(server.read(&mut buf).await.unwrap(), 10);
        client.write_all(&PREFACE[10..]).await.unwrap();
        assert_eq!(server.read(&mut buf).await.unwrap(), 14);
        assert_eq!(phase.load(Ordering::Acquire), HTTP2);
        let answer = tower_service::Service::call(&mut service, Request::new(()))
            .await
            .unwrap();
        assert_eq!(answer.headers().get(CONNECTION), None);
        assert_eq!(phase.load(Ordering::Acquire), HTTP2);
        let read = tokio::time::timeout(Duration::from_secs(60), server.read(&mut buf)).await;
        assert!(read.is_err(), "an HTTP/2 connection's read ended: {read:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn http1_that_begins_like_the_preface_keeps_its_clock() {
        let (mut server, mut client, phase) = clocked();
        client.write_all(b"PRI * HTTP/1.1\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        assert_eq!(phase.load(Ordering::Acquire), HEAD);
        assert_eq!(fails_after(&mut server).await.0, io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn while_the_server_drains_each_http1_answer_says_connection_close() {
        let phase = Arc::new(AtomicU8::new(IDLE));
        let ready = Arc::new(AtomicBool::new(true));
        let mut http1 = kept(&phase, ready.clone());
        let call = |service: &mut KeptService<AtOnce>| {
            tower_service::Service::call(service, Request::new(()))
        };
        assert_eq!(
            call(&mut http1).await.unwrap().headers().get(CONNECTION),
            None
        );
        ready.store(false, Ordering::Release);
        let closing = call(&mut http1).await.unwrap();
        assert_eq!(
            closing.headers().get(CONNECTION),
            Some(&HeaderValue::from_static("close"))
        );
    }

    /// A service that answers at once.
    #[derive(Clone)]
    struct AtOnce;

    impl tower_service::Service<Request<()>> for AtOnce {
        type Response = Response<()>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Response<()>, std::convert::Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(Ok(Response::new(())))
        }
    }

    fn kept(phase: &Arc<AtomicU8>, ready: Arc<AtomicBool>) -> KeptService<AtOnce> {
        KeptService {
            inner: AtOnce,
            phase: phase.clone(),
            ready,
        }
    }
}
