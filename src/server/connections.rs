//! Bounds on the clients' connections to a listener: how many may be open at once (counted
//! from the TCP accept, so TLS handshakes count too), how many of them one peer address may
//! hold (`peers`), and how long one may stay open with no byte crossing it either way. A client
//! that opens connections and sends nothing (idle TLS connections by the thousand, a slowloris)
//! takes at most its address's share: it cannot take the slots, the file descriptors or the
//! memory `/healthz` and the apiservers need. A full listener also makes room for an address
//! holding fewer than another ([`LimitedAcceptor::evicting`], `peers`), closing a connection
//! with no request under way ([`Counted`]): several flooding addresses cannot together shut
//! the apiserver out.
//!
//! The bounds on requests (header read time, 413 on an announced body over the limit, body and
//! request timeouts) are `keep_alive`'s (header read time), tower-http's (the body limit) and
//! `bounds`' (the body and request timeouts), set up with [`ConnectionLimits`]'s values.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

pub use super::peers::PEER_CONNECTIONS;
use super::peers::{PeerSlot, Peers, Requests, UnderWay};

/// The default of `--max-connections`: with [`PEER_CONNECTIONS`], one flooding address leaves
/// room for the apiserver; several are held to fair shares (`peers`).
pub const MAX_CONNECTIONS: usize = 320;
/// What one open connection holds at most beyond the bodies the body budget counts: rustls'
/// state and buffers (about 40 KiB, measured idle with benches/body-flood.py `idle`), the read
/// buffer or HTTP/2 flow-control window ([`WINDOW_BYTES`]) and a request's head
/// ([`MAX_HEAD_BYTES`]).
pub const CONNECTION_BYTES: usize = (40 << 10) + WINDOW_BYTES + MAX_HEAD_BYTES;
/// The most bytes of a request's head (HTTP/1.1 read buffer, HTTP/2 header list) read before
/// the request is refused: the apiserver's are under 2 KiB.
pub const MAX_HEAD_BYTES: usize = 16 << 10;
/// HTTP/2's flow-control windows, per stream and per connection (the protocol's initial 64 KiB,
/// not hyper's 1 MiB): body bytes a client may send before pinhook reads them.
pub const WINDOW_BYTES: usize = 65_535;
/// HTTP/2 streams one connection may have open at once.
pub const MAX_STREAMS: u32 = 32;

/// Something accepted that may know the address at its other end.
pub trait PeerAddress {
    fn peer_ip(&self) -> Option<IpAddr>;
}

impl PeerAddress for tokio::net::TcpStream {
    fn peer_ip(&self) -> Option<IpAddr> {
        self.peer_addr().ok().map(|a| a.ip())
    }
}

impl PeerAddress for tokio::io::DuplexStream {
    fn peer_ip(&self) -> Option<IpAddr> {
        None
    }
}

/// Bounds on the clients' connections and requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once; past it a new connection is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Time to receive a request's headers over HTTP/1.1 (`keep_alive`: the first request's
    /// from the connection's start, a later one's from its first byte), and the longest gap
    /// between two pieces of a body.
    pub header_read_timeout: Duration,
    /// Time a whole request may take, body and answer included (answered 408).
    pub request_timeout: Duration,
    /// A connection on which no byte crossed either way for this long is closed: also the
    /// longest wait for the next request on a kept-alive connection. Longer than
    /// `request_timeout`, so that no answer being computed is cut off, and than the apiserver's
    /// 90 s, so that the apiserver closes its idle connections first.
    pub idle_timeout: Duration,
}

/// Wraps an acceptor: takes a connection slot first (closing the connection when there is
/// none), then hands the connection, watched for idleness, to the inner acceptor.
#[derive(Clone)]
pub struct LimitedAcceptor<A> {
    inner: A,
    slots: Arc<Semaphore>,
    peers: Arc<Peers>,
    idle_timeout: Duration,
    open: Gauge,
    refused: Counter,
    /// Counts connections closed to make room; `None`: a full listener makes none.
    evicted: Option<Counter>,
}

/// How long a new connection waits for the slot of one closed to make room for it.
const ROOM_WAIT: Duration = Duration::from_secs(1);

/// A connection that holds its slot until it is dropped and fails its next read once nothing
/// has crossed it for the idle timeout.
pub struct Watched<T> {
    inner: T,
    _slot: OwnedSemaphorePermit,
    peer: PeerSlot,
    _open: OpenGuard,
    idle_timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

/// Counts a connection in the `open` gauge for as long as it lives.
struct OpenGuard(Gauge);

// === impl ConnectionLimits ===

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: MAX_CONNECTIONS,
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(70),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

// === impl LimitedAcceptor ===

impl<A> LimitedAcceptor<A> {
    /// `open` and `refused` are the connection metrics the acceptor keeps up to date.
    pub fn new(inner: A, limits: &ConnectionLimits, open: Gauge, refused: Counter) -> Self {
        LimitedAcceptor {
            inner,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            peers: Arc::default(),
            idle_timeout: limits.idle_timeout,
            open,
            refused,
            evicted: None,
        }
    }

    /// A full listener makes room for an address holding fewer connections than another
    /// (`peers`), counting each connection closed for it in `evicted`.
    pub fn evicting(mut self, evicted: Counter) -> Self {
        self.evicted = Some(evicted);
        self
    }
}

impl<A, I, S> Accept<I, S> for LimitedAcceptor<A>
where
    I: PeerAddress + Send + 'static,
    S: Send + 'static,
    A: Accept<I, S> + Clone + Send + Sync + 'static,
    A::Future: Send + 'static,
    A::Stream: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Watched<A::Stream>;
    type Service = Counted<A::Service>;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        // Dropping the stream closes the connection: the client sees it closed at once,
        // nothing is read from it.
        let refused = self.refused.clone();
        let refuse = move |stream: I, why: &'static str| {
            refused.inc();
            drop(stream);
            io::Error::other(why)
        };
        let Some(peer) = PeerSlot::take(&self.peers, stream.peer_ip()) else {
            let error = refuse(stream, "connection limit of this peer address reached");
            return Box::pin(std::future::ready(Err(error)));
        };
        let immediate = self.slots.clone().try_acquire_owned().ok();
        let room = match (&immediate, &self.evicted) {
            (None, Some(evicted)) if self.peers.make_room(&peer) => {
                evicted.inc();
                true
            }
            _ => false,
        };
        let (slots, inner) = (self.slots.clone(), self.inner.clone());
        let open = self.open.clone();
        let idle_timeout = self.idle_timeout;
        Box::pin(async move {
            let slot = match immediate {
                Some(slot) => slot,
                // The connection closed for this one gives its slot back once its task sees
                // the close (another newcomer may take it first).
                None if room => {
                    match tokio::time::timeout(ROOM_WAIT, slots.acquire_owned()).await {
                        Ok(Ok(slot)) => slot,
                        _ => return Err(refuse(stream, "connection limit reached")),
                    }
                }
                None => return Err(refuse(stream, "connection limit reached")),
            };
            let open = OpenGuard::new(open);
            let (stream, service) = inner.accept(stream, service).await?;
            let service = Counted {
                inner: service,
                requests: peer.requests(),
            };
            Ok((
                Watched::new(stream, slot, peer, open, idle_timeout),
                service,
            ))
        })
    }
}

// === impl OpenGuard ===

impl OpenGuard {
    fn new(gauge: Gauge) -> OpenGuard {
        gauge.inc();
        OpenGuard(gauge)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

// === impl Watched ===

impl<T> Watched<T> {
    fn new(
        inner: T,
        slot: OwnedSemaphorePermit,
        peer: PeerSlot,
        open: OpenGuard,
        idle_timeout: Duration,
    ) -> Watched<T> {
        Watched {
            inner,
            _slot: slot,
            peer,
            _open: open,
            idle_timeout,
            deadline: Box::pin(tokio::time::sleep(idle_timeout)),
        }
    }

    /// Something crossed the connection: it is not idle.
    fn touch(&mut self) {
        let now = Instant::now();
        self.deadline.as_mut().reset(now + self.idle_timeout);
        self.peer.touch(now);
    }
}

/// A connection's service: counts its requests under way (from the end of a request's head
/// to its answer; HTTP/2 streams each), so that a full listener closes only a connection
/// with none (`peers`).
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    requests: Requests,
}

impl<S, R> tower_service::Service<R> for Counted<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Counting<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        Counting {
            _under_way: self.requests.begin(),
            inner: self.inner.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer being made; the request is no longer under way once it is dropped.
    pub struct Counting<F> {
        #[pin]
        inner: F,
        _under_way: UnderWay,
    }
}

impl<F: Future> Future for Counting<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

/// The read error of a connection closed to make room for another address.
fn made_room() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "closed to make room for an address holding fewer connections",
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.peer.is_closing() {
            return Poll::Ready(Err(made_room()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                this.peer.wake_on_close(cx.waker());
                if this.peer.is_closing() {
                    return Poll::Ready(Err(made_room()));
                }
                match this.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connection idle for longer than the idle timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        written
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn watched(
        stream: tokio::io::DuplexStream,
        idle: Duration,
    ) -> (Watched<tokio::io::DuplexStream>, Arc<Semaphore>) {
        let slots = Arc::new(Semaphore::new(1));
        let slot = slots.clone().try_acquire_owned().unwrap();
        let open = OpenGuard::new(Gauge::default());
        let peer = PeerSlot::take(&Arc::new(Peers::default()), None).unwrap();
        (Watched::new(stream, slot, peer, open, idle), slots)
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_fails_its_read_at_the_idle_timeout() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let (mut conn, _) = watched(ours, Duration::from_secs(120));
        let started = Instant::now();
        let err = conn.read_u8().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(120));
    }

    #[tokio::test(start_paused = true)]
    async fn every_byte_either_way_restarts_the_idle_clock() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let (mut conn, _) = watched(ours, Duration::from_secs(10));
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(8)).await;
        conn.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_secs(8)).await;
        theirs.write_all(b"y").await.unwrap();
        assert_eq!(conn.read_u8().await.unwrap(), b'y');
        let err = conn.read_u8().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        // Idle from the read at 16 s: fails at 26 s, not at 10 s.
        assert_eq!(started.elapsed(), Duration::from_secs(26));
    }

    #[tokio::test]
    async fn the_slot_and_the_open_count_go_with_the_connection() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let gauge = Gauge::default();
        let slots = Arc::new(Semaphore::new(1));
        let slot = slots.clone().try_acquire_owned().unwrap();
        let conn = Watched::new(
            ours,
            slot,
            PeerSlot::take(&Arc::new(Peers::default()), None).unwrap(),
            OpenGuard::new(gauge.clone()),
            Duration::from_secs(1),
        );
        assert_eq!((slots.available_permits(), gauge.get()), (0, 1));
        drop(conn);
        assert_eq!((slots.available_permits(), gauge.get()), (1, 0));
    }
}
