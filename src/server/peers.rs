//! Who holds the HTTPS listener's connections, per peer address, and which one to close to
//! make room. Each connection is registered under its address ([`PeerSlot`]); one address
//! holds at most [`PEER_CONNECTIONS`]. When the listener is full, a new connection from an
//! address that holds fewer than another is given room (a max-min fair share): the address
//! holding the most gives up the connection that has been quiet the longest with no request
//! under way ([`victim`]; requests are counted by `connections::Counted`, HTTP/1.1 and HTTP/2
//! streams alike, from the end of a request's head to its answer). Several flooding addresses together could fill the listener and
//! shut the apiserver out (issue 44); now each address keeps at least its fair share, the
//! listener's connections over the addresses holding them.
//!
//! Owns: the registry of open connections and the choice of whom to close. Never: closes a
//! connection itself. It marks it and wakes it, and `connections::Watched` fails its next read.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;

use futures::task::AtomicWaker;

use tokio::time::Instant;

/// Connections one peer address may hold open at once. The apiserver's webhook client speaks
/// HTTP/1.1 only (docs/performance.md), one connection per review in flight, and every review
/// of every tenant comes from its address: this is room for a rollout's bursts, not a few.
pub const PEER_CONNECTIONS: usize = 128;

/// The open connections of a listener, by peer address.
#[derive(Debug)]
pub struct Peers {
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<IpAddr, Vec<Arc<Held>>>>,
}

/// One open connection, as the registry and the connection itself see it.
#[derive(Debug)]
pub struct Held {
    id: u64,
    /// Requests under way on the connection (HTTP/2 streams included).
    requests: AtomicUsize,
    /// When a byte last crossed it, in milliseconds since the registry's epoch.
    last_ms: AtomicU64,
    /// Chosen to make room: its next read fails.
    closing: AtomicBool,
    /// The connection's reader, woken when it is chosen (lock-free: registered on every read
    /// that waits).
    waker: AtomicWaker,
}

/// A peer's hold on one connection, given back when the connection goes.
#[derive(Debug)]
pub struct PeerSlot {
    peers: Arc<Peers>,
    ip: Option<IpAddr>,
    held: Arc<Held>,
}

// === impl Peers ===

impl Default for Peers {
    fn default() -> Self {
        Peers {
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::default(),
        }
    }
}

impl Peers {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Makes room for `newcomer`'s connection, already counted under its address: marks and
    /// wakes the connection [`victim`] chooses. False when there is none to close (the
    /// newcomer's address holds as many as any other, or theirs are all under way).
    pub fn make_room(&self, newcomer: &PeerSlot) -> bool {
        let Some(ip) = newcomer.ip else { return false };
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(held) = victim(&open, ip) else {
            return false;
        };
        held.close();
        true
    }
}

/// The connection to close to make room for `newcomer`'s latest (counted in `open`): of the
/// addresses holding more live connections than `newcomer` (so that after the close they hold
/// at least as many), the one holding the most that has a connection with no request under
/// way; of those connections, the one quiet the longest. None when no address holds more, or
/// none of theirs is quiet.
pub fn victim(open: &HashMap<IpAddr, Vec<Arc<Held>>>, newcomer: IpAddr) -> Option<&Arc<Held>> {
    let live = |held: &[Arc<Held>]| held.iter().filter(|h| !h.is_closing()).count();
    let own = open.get(&newcomer).map_or(0, |held| live(held));
    open.iter()
        .filter(|(ip, _)| **ip != newcomer)
        .map(|(_, held)| (live(held), held))
        .filter(|(count, _)| *count > own)
        .flat_map(|(count, held)| {
            held.iter()
                .filter(|h| !h.is_closing() && h.quiet())
                .map(move |h| (count, h))
        })
        .min_by_key(|(count, h)| (std::cmp::Reverse(*count), h.last_ms.load(Ordering::Acquire)))
        .map(|(_, h)| h)
}

// === impl Held ===

impl Held {
    fn new(id: u64, now_ms: u64) -> Held {
        Held {
            id,
            requests: AtomicUsize::new(0),
            last_ms: AtomicU64::new(now_ms),
            closing: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        }
    }

    /// No request under way (one whose head is still arriving is not one yet).
    fn quiet(&self) -> bool {
        self.requests.load(Ordering::Acquire) == 0
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.waker.wake();
    }
}

// === impl PeerSlot ===

impl PeerSlot {
    /// One more connection of `ip`, unless it holds [`PEER_CONNECTIONS`] already (an unknown
    /// address is not counted, and no room is made for it).
    pub fn take(peers: &Arc<Peers>, ip: Option<IpAddr>) -> Option<PeerSlot> {
        let id = peers.next_id.fetch_add(1, Ordering::Relaxed);
        let held = Arc::new(Held::new(id, peers.now_ms()));
        if let Some(ip) = ip {
            let mut open = peers.open.lock().unwrap_or_else(PoisonError::into_inner);
            let list = open.entry(ip).or_default();
            if list.len() >= PEER_CONNECTIONS {
                return None;
            }
            list.push(held.clone());
        }
        Some(PeerSlot {
            peers: peers.clone(),
            ip,
            held,
        })
    }

    /// What counts this connection's requests under way.
    pub fn requests(&self) -> Requests {
        Requests(self.held.clone())
    }

    /// A byte crossed the connection at `now`.
    pub fn touch(&self, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.peers.epoch).as_millis())
            .unwrap_or(u64::MAX);
        self.held.last_ms.store(ms, Ordering::Release);
    }

    /// Chosen to make room: the connection must close.
    pub fn is_closing(&self) -> bool {
        self.held.is_closing()
    }

    /// Wakes `waker` when the connection is chosen to make room.
    pub fn wake_on_close(&self, waker: &Waker) {
        self.held.waker.register(waker);
    }
}

/// Counts a connection's requests under way ([`Requests::begin`]).
#[derive(Debug, Clone)]
pub struct Requests(Arc<Held>);

/// One request under way, until dropped.
#[derive(Debug)]
pub struct UnderWay(Arc<Held>);

impl Requests {
    pub fn begin(&self) -> UnderWay {
        self.0.requests.fetch_add(1, Ordering::AcqRel);
        UnderWay(self.0.clone())
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::AcqRel);
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
        if let Some(list) = open.get_mut(&ip) {
            list.retain(|h| h.id != self.held.id);
            if list.is_empty() {
                open.remove(&ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        [10, 0, 0, last].into()
    }

    fn slots(peers: &Arc<Peers>, from: IpAddr, n: usize) -> Vec<PeerSlot> {
        (0..n)
            .map(|_| PeerSlot::take(peers, Some(from)).unwrap())
            .collect()
    }

    #[test]
    fn one_address_holds_at_most_its_share_and_gets_it_back() {
        let peers = Arc::new(Peers::default());
        let held = slots(&peers, ip(1), PEER_CONNECTIONS);
        assert!(PeerSlot::take(&peers, Some(ip(1))).is_none());
        // Another address, and a stream without one, are not affected.
        assert!(PeerSlot::take(&peers, Some(ip(2))).is_some());
        assert!(PeerSlot::take(&peers, None).is_some());
        drop(held);
        assert!(PeerSlot::take(&peers, Some(ip(1))).is_some());
        assert!(peers.open.lock().unwrap().is_empty());
    }

    #[test]
    fn room_is_made_by_the_address_holding_most_from_its_longest_quiet_connection() {
        let peers = Arc::new(Peers::default());
        let a = slots(&peers, ip(1), 4);
        let b = slots(&peers, ip(2), 3);
        for (i, slot) in a.iter().enumerate() {
            slot.held.last_ms.store(100 - i as u64, Ordering::Release);
        }
        let newcomer = PeerSlot::take(&peers, Some(ip(3))).unwrap();
        assert!(peers.make_room(&newcomer));
        // a's quiet since 97: the longest.
        assert_eq!(
            a.iter().map(PeerSlot::is_closing).collect::<Vec<_>>(),
            [false, false, false, true]
        );
        assert!(b.iter().all(|s| !s.is_closing()));
        // a now holds 3 live, b 3, the newcomer 2 after its second: b, quiet since its start,
        // gives one up...
        let second = PeerSlot::take(&peers, Some(ip(3))).unwrap();
        assert!(peers.make_room(&second));
        assert_eq!(b.iter().filter(|s| s.is_closing()).count(), 1);
        // ...and a third (3 against 3 and 2) makes none: equal shares.
        let third = PeerSlot::take(&peers, Some(ip(3))).unwrap();
        assert!(!peers.make_room(&third));
    }

    #[test]
    fn an_address_holding_as_many_as_any_other_gets_no_room() {
        let peers = Arc::new(Peers::default());
        let _a = slots(&peers, ip(1), 4);
        let mut b = slots(&peers, ip(2), 4);
        b.push(PeerSlot::take(&peers, Some(ip(2))).unwrap());
        assert!(!peers.make_room(&b[4]));
        // Nor does a stream without an address.
        let unknown = PeerSlot::take(&peers, None).unwrap();
        assert!(!peers.make_room(&unknown));
    }

    #[test]
    fn a_connection_with_a_request_under_way_is_never_chosen() {
        let peers = Arc::new(Peers::default());
        let a = slots(&peers, ip(1), 3);
        let mut under_way: Vec<UnderWay> = a.iter().map(|s| s.requests().begin()).collect();
        let newcomer = PeerSlot::take(&peers, Some(ip(2))).unwrap();
        assert!(!peers.make_room(&newcomer));
        assert!(a.iter().all(|s| !s.is_closing()));
        // The one whose answer is done may be.
        under_way.remove(1);
        assert!(peers.make_room(&newcomer));
        assert!(a[1].is_closing());
    }

    #[test]
    fn a_closed_connection_wakes_its_reader() {
        let peers = Arc::new(Peers::default());
        let a = slots(&peers, ip(1), 2);
        let woken = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::Release);
            }
        }
        for slot in &a {
            slot.wake_on_close(&Waker::from(Arc::new(Flag(woken.clone()))));
        }
        let newcomer = PeerSlot::take(&peers, Some(ip(2))).unwrap();
        assert!(peers.make_room(&newcomer));
        assert!(woken.load(Ordering::Acquire));
    }
}
