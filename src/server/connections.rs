//! Bounds on the clients' connections to the HTTPS listener: how many may be open at once
//! (counted from the TCP accept, so TLS handshakes count too), how many of them one peer
//! address may hold ([`PEER_CONNECTIONS`]), and how long one may stay open with no byte
//! crossing it either way. A client that opens connections and sends nothing (idle TLS
//! connections by the thousand, a slowloris) takes at most its address's share: it cannot take
//! the slots, the file descriptors or the memory `/healthz` and the apiservers need.
//!
//! The bounds on requests (header read time, 413 on an announced body over the limit, body and
//! request timeouts) are `keep_alive`'s (header read time), tower-http's (the body limit) and
//! `bounds`' (the body and request timeouts), set up with [`ConnectionLimits`]'s values.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Connections one peer address may hold open at once. The apiserver's webhook client speaks
/// HTTP/1.1 only (docs/performance.md), one connection per review in flight, and every review
/// of every tenant comes from its address: this is room for a rollout's bursts, not a few.
pub const PEER_CONNECTIONS: usize = 128;
/// The default of `--max-connections`: with [`PEER_CONNECTIONS`], one flooding address leaves
/// room for the apiserver (several need a client CA or a NetworkPolicy, docs/security.md).
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
    peers: Arc<PeerCounts>,
    idle_timeout: Duration,
    open: Gauge,
    refused: Counter,
}

/// Connections open per peer address.
#[derive(Debug, Default)]
struct PeerCounts {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// A peer's count of one connection, given back when the connection goes.
struct PeerSlot {
    peers: Arc<PeerCounts>,
    ip: Option<IpAddr>,
}

/// A connection that holds its slot until it is dropped and fails its next read once nothing
/// has crossed it for the idle timeout.
pub struct Watched<T> {
    inner: T,
    _slot: OwnedSemaphorePermit,
    _peer: Option<PeerSlot>,
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
        }
    }
}

impl<A, I, S> Accept<I, S> for LimitedAcceptor<A>
where
    I: PeerAddress,
    A: Accept<I, S>,
    A::Future: Send + 'static,
    A::Stream: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Watched<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        // Dropping the stream closes the connection: the client sees it closed at once,
        // nothing is read from it.
        let refuse = |stream: I, why: &'static str| {
            self.refused.inc();
            drop(stream);
            Box::pin(std::future::ready(Err(io::Error::other(why)))) as Self::Future
        };
        let Some(peer) = PeerSlot::take(&self.peers, stream.peer_ip()) else {
            return refuse(stream, "connection limit of this peer address reached");
        };
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return refuse(stream, "connection limit reached");
        };
        let open = OpenGuard::new(self.open.clone());
        let idle_timeout = self.idle_timeout;
        let accepted = self.inner.accept(stream, service);
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            Ok((
                Watched::new(stream, slot, Some(peer), open, idle_timeout),
                service,
            ))
        })
    }
}

// === impl PeerSlot ===

impl PeerSlot {
    /// One more connection of `ip`, unless it holds [`PEER_CONNECTIONS`] already (an unknown
    /// address is not counted).
    fn take(peers: &Arc<PeerCounts>, ip: Option<IpAddr>) -> Option<PeerSlot> {
        if let Some(ip) = ip {
            let mut open = peers.open.lock().unwrap_or_else(PoisonError::into_inner);
            let count = open.entry(ip).or_default();
            if *count >= PEER_CONNECTIONS {
                return None;
            }
            *count += 1;
        }
        Some(PeerSlot {
            peers: peers.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let Some(ip) = self.ip else { return };
        let mut open = self
            .peers
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&ip);
            }
        }
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
        peer: Option<PeerSlot>,
        open: OpenGuard,
        idle_timeout: Duration,
    ) -> Watched<T> {
        Watched {
            inner,
            _slot: slot,
            _peer: peer,
            _open: open,
            idle_timeout,
            deadline: Box::pin(tokio::time::sleep(idle_timeout)),
        }
    }

    /// Something crossed the connection: it is not idle.
    fn touch(&mut self) {
        let next = Instant::now() + self.idle_timeout;
        self.deadline.as_mut().reset(next);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle for longer than the idle timeout",
                ))),
                Poll::Pending => Poll::Pending,
            },
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
        (Watched::new(stream, slot, None, open, idle), slots)
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
            None,
            OpenGuard::new(gauge.clone()),
            Duration::from_secs(1),
        );
        assert_eq!((slots.available_permits(), gauge.get()), (0, 1));
        drop(conn);
        assert_eq!((slots.available_permits(), gauge.get()), (1, 0));
    }

    #[test]
    fn one_address_holds_at_most_its_share_and_gets_it_back() {
        let peers = Arc::new(PeerCounts::default());
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let held: Vec<PeerSlot> = (0..PEER_CONNECTIONS)
            .map(|_| PeerSlot::take(&peers, Some(a)).unwrap())
            .collect();
        assert!(PeerSlot::take(&peers, Some(a)).is_none());
        // Another address, and a stream without one, are not affected.
        assert!(PeerSlot::take(&peers, Some(b)).is_some());
        assert!(PeerSlot::take(&peers, None).is_some());
        drop(held);
        assert!(PeerSlot::take(&peers, Some(a)).is_some());
        assert!(peers.open.lock().unwrap().is_empty());
    }
}
