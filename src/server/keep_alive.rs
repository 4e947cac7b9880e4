//! How long an HTTP/1.1 connection is kept, and who ends it. The apiserver's webhook client
//! speaks HTTP/1.1 and keeps idle connections for 90 s (client-go's `IdleConnTimeout`); a
//! server that closes one first races the apiserver's next review, which fails (`EOF`,
//! `connection reset`: a written POST is not retried) and, with `failurePolicy: Fail`, fails
//! the user's write with it. So pinhook leaves closing to the client wherever it can:
//!
//! - **The header read timeout counts from a request's first byte.** hyper's own
//!   (`header_read_timeout`) starts as soon as a connection waits for a request, so it also
//!   closed kept-alive connections merely idle between two requests; pinhook turns it off and
//!   keeps its own: [`KeepAliveAcceptor`] wraps each HTTP/1.1 connection in a [`Clocked`]
//!   stream, which starts the clock at the first byte that arrives while no request is being
//!   answered, and in a [`KeptService`], which stops it once the request's headers are parsed
//!   (the request reaches the service) and lets the next byte start it again once the answer is
//!   ready. Headers that take longer fail the connection's read, and hyper closes it. A
//!   connection waiting for its next request is bounded by the idle timeout instead
//!   (`connections`, 120 s), longer than the apiserver's, so the apiserver closes first.
//! - **While the server drains** (after SIGTERM, before it stops accepting), each answer says
//!   `Connection: close`: the client closes that connection after reading it and dials the
//!   Service again for its next review, which leads to live replicas. At the end of the drain
//!   hyper closes what is left, the connections no review used during the drain.
//!
//! HTTP/2, negotiated by ALPN, carries requests as frames between which the client may send
//! others (window updates, pings), and has no `Connection` header: it keeps hyper's and h2's
//! own bounds and its GOAWAY at shutdown.

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

/// No request on the connection: the next byte starts the clock.
const IDLE: u8 = 0;
/// A request's first bytes arrived, its headers are not parsed yet: the clock runs.
const HEAD: u8 = 1;
/// A request reached the service and its answer is not ready: no clock.
const BUSY: u8 = 2;

/// Wraps an acceptor of TLS connections: each HTTP/1.1 one gets the header clock and, while
/// the server drains, `Connection: close` on its answers.
#[derive(Clone)]
pub struct KeepAliveAcceptor<A> {
    inner: A,
    timeout: Duration,
    /// False once the server drains.
    ready: Arc<AtomicBool>,
}

impl<A> KeepAliveAcceptor<A> {
    /// `timeout`: the time from a request's first byte to the end of its headers; `ready`:
    /// the server's readiness, false while it drains.
    pub fn new(inner: A, timeout: Duration, ready: Arc<AtomicBool>) -> Self {
        KeepAliveAcceptor {
            inner,
            timeout,
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
        let (timeout, ready) = (self.timeout, self.ready.clone());
        Box::pin(async move {
            let (stream, inner) = accepted.await?;
            let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
            let phase = Arc::new(AtomicU8::new(IDLE));
            let clock = (!http2).then_some(timeout);
            let service = KeptService {
                inner,
                phase: phase.clone(),
                ready: (!http2).then_some(ready),
            };
            Ok((Clocked::new(stream, phase, clock), service))
        })
    }
}

/// A connection whose request headers must arrive within the clock's time.
pub struct Clocked<T> {
    inner: T,
    phase: Arc<AtomicU8>,
    /// The header read timeout; `None` for HTTP/2 (no clock).
    timeout: Option<Duration>,
    /// Made at the first request, reset at each one after.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> Clocked<T> {
    fn new(inner: T, phase: Arc<AtomicU8>, timeout: Option<Duration>) -> Self {
        Clocked {
            inner,
            phase,
            timeout,
            deadline: None,
        }
    }

    /// Bytes arrived: if no request was under way, one starts now, and so does its clock.
    fn bytes_arrived(&mut self) {
        let Some(timeout) = self.timeout else { return };
        if self
            .phase
            .compare_exchange(IDLE, HEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let deadline = Instant::now() + timeout;
        match &mut self.deadline {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => self.deadline = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    /// Nothing to read now: has the request's time to send its headers run out?
    fn headers_overdue(&mut self, cx: &mut Context<'_>) -> bool {
        if self.phase.load(Ordering::Acquire) != HEAD {
            return false;
        }
        match &mut self.deadline {
            Some(sleep) => sleep.as_mut().poll(cx).is_ready(),
            None => false,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Clocked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.headers_overdue(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request headers not received within the header read timeout",
            ))),
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

/// A connection's service: a request that reaches it has its headers; the clock stops until
/// its answer is ready. While the server drains, the answer asks the client to close.
#[derive(Clone)]
pub struct KeptService<S> {
    inner: S,
    phase: Arc<AtomicU8>,
    /// The server's readiness; `None` for HTTP/2 (no `Connection` header there).
    ready: Option<Arc<AtomicBool>>,
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
        self.phase.store(BUSY, Ordering::Release);
        Answering {
            inner: self.inner.call(request),
            _busy: Busy(self.phase.clone()),
            ready: self.ready.clone(),
        }
    }
}

/// Sets the connection idle when the answer is ready (or the request is given up).
struct Busy(Arc<AtomicU8>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(IDLE, Ordering::Release);
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

    fn clocked(
        timeout: Option<Duration>,
    ) -> (
        Clocked<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        Arc<AtomicU8>,
    ) {
        let (server, client) = tokio::io::duplex(1024);
        let phase = Arc::new(AtomicU8::new(IDLE));
        (Clocked::new(server, phase.clone(), timeout), client, phase)
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_has_no_clock() {
        let (mut server, _client, _) = clocked(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(60), server.read(&mut buf)).await;
        assert!(read.is_err(), "an idle connection's read ended: {read:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn headers_that_do_not_end_fail_the_read_at_the_timeout() {
        let (mut server, mut client, phase) = clocked(Some(Duration::from_secs(1)));
        client
            .write_all(b"POST /mutate HTTP/1.1\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let started = Instant::now();
        assert!(server.read(&mut buf).await.unwrap() > 0);
        assert_eq!(phase.load(Ordering::Acquire), HEAD);
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_being_answered_and_the_wait_after_it_have_no_clock() {
        let (mut server, mut client, phase) = clocked(Some(Duration::from_secs(1)));
        let mut service = kept(&phase, Some(Arc::new(AtomicBool::new(true))));
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        // The headers reached the service: the clock stops while the answer is made...
        let answer = tower_service::Service::call(&mut service, Request::new(()));
        assert_eq!(phase.load(Ordering::Acquire), BUSY);
        let pending = tokio::time::timeout(Duration::from_secs(5), server.read(&mut buf)).await;
        assert!(pending.is_err(), "read ended while answering: {pending:?}");
        // ... and once it is ready the connection waits for the next request with no clock.
        let response = answer.await.unwrap();
        assert_eq!(response.headers().get(CONNECTION), None);
        assert_eq!(phase.load(Ordering::Acquire), IDLE);
        let idle = tokio::time::timeout(Duration::from_secs(60), server.read(&mut buf)).await;
        assert!(
            idle.is_err(),
            "an idle kept-alive connection's read ended: {idle:?}"
        );
        // The next request's first byte starts the clock again.
        client.write_all(b"G").await.unwrap();
        assert_eq!(server.read(&mut buf).await.unwrap(), 1);
        let started = Instant::now();
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn while_the_server_drains_each_http1_answer_says_connection_close() {
        let phase = Arc::new(AtomicU8::new(IDLE));
        let ready = Arc::new(AtomicBool::new(true));
        let mut http1 = kept(&phase, Some(ready.clone()));
        let mut http2 = kept(&phase, None);
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
        assert_eq!(
            call(&mut http2).await.unwrap().headers().get(CONNECTION),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn http2_has_no_clock() {
        let (mut server, mut client, phase) = clocked(None);
        client.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        assert_eq!(phase.load(Ordering::Acquire), IDLE);
        let read = tokio::time::timeout(Duration::from_secs(60), server.read(&mut buf)).await;
        assert!(read.is_err(), "an HTTP/2 connection's read ended: {read:?}");
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

    fn kept(phase: &Arc<AtomicU8>, ready: Option<Arc<AtomicBool>>) -> KeptService<AtOnce> {
        KeptService {
            inner: AtOnce,
            phase: phase.clone(),
            ready,
        }
    }
}
