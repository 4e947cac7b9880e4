//! Who holds the HTTPS listener's connections, per peer address, and which one to close to
//! make room. Each connection is registered under its address ([`PeerSlot`]); one address
//! holds at most [`PEER_CONNECTIONS`]. When the listener is full, a new connection from an
//! address that holds fewer than another is given room (a max-min fair share): the address
//! holding the most gives up the connection that has been quiet the longest with no request
//! under way ([`victim`]). Several flooding addresses together could fill the listener and
//! shut the apiserver out (issue 44); now each address keeps at least its fair share, the
//! listener's connections over the addresses holding them.
//!
//! Owns: the registry of open connections and the choice of whom to close. Never: closes a
//! connection itself. It marks it and wakes it, and `connections::Watched` fails its next read.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use super::keep_alive;

/// Connections one peer address may hold open at once. The apiserver's webhook client speaks
/// HTTP/1.1 only (docs/performance.md), one connection per review in flight, and every review
/// of every tenant comes from its address: this is room for a rollout's bursts, not a few.
pub const PEER_CONNECTIONS: usize = 128;
/// An HTTP/2 connection (whose streams this does not see) counts as having no request under
/// way once nothing crossed it for this long. The apiserver's webhook client speaks HTTP/1.1.
pub const HTTP2_QUIET: Duration = Duration::from_secs(1);

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
    /// keep_alive's phase of the connection: whether a request is under way.
    phase: Arc<AtomicU8>,
    /// When a byte last crossed it, in milliseconds since the registry's epoch.
    last_ms: AtomicU64,
    /// Chosen to make room: its next read fails.
    closing: AtomicBool,
    waker: Mutex<Option<Waker>>,
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
        let now = self.now_ms();
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(held) = victim(&open, ip, now) else {
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
pub fn victim(
    open: &HashMap<IpAddr, Vec<Arc<Held>>>,
    newcomer: IpAddr,
    now_ms: u64,
) -> Option<&Arc<Held>> {
    let live = |held: &[Arc<Held>]| held.iter().filter(|h| !h.is_closing()).count();
    let own = open.get(&newcomer).map_or(0, |held| live(held));
    open.iter()
        .filter(|(ip, _)| **ip != newcomer)
        .map(|(_, held)| (live(held), held))
        .filter(|(count, _)| *count > own)
        .flat_map(|(count, held)| {
            held.iter()
                .filter(move |h| !h.is_closing() && h.quiet(now_ms))
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
            phase: Arc::new(AtomicU8::new(keep_alive::IDLE)),
            last_ms: AtomicU64::new(now_ms),
            closing: AtomicBool::new(false),
            waker: Mutex::new(None),
        }
    }

    /// No request under way: HTTP/1.1 waiting for one (or for its head), HTTP/2 with nothing
    /// crossing it for [`HTTP2_QUIET`].
    fn quiet(&self, now_ms: u64) -> bool {
        match keep_alive::no_request_under_way(&self.phase) {
            Some(quiet) => quiet,
            None => {
                let last = self.last_ms.load(Ordering::Acquire);
                now_ms.saturating_sub(last) >= HTTP2_QUIET.as_millis() as u64
            }
        }
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
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

    /// The phase keep_alive keeps for this connection.
    pub fn phase(&self) -> Arc<AtomicU8> {
        self.held.phase.clone()
    }

    /// A byte crossed the connection.
    pub fn touch(&self) {
        self.held
            .last_ms
            .store(self.peers.now_ms(), Ordering::Release);
    }

    /// Chosen to make room: the connection must close.
    pub fn is_closing(&self) -> bool {
        self.held.is_closing()
    }

    /// Wakes `waker` when the connection is chosen to make room.
    pub fn wake_on_close(&self, waker: &Waker) {
        let mut slot = self
            .held
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match slot.as_ref() {
            Some(old) if old.will_wake(waker) => {}
            _ => *slot = Some(waker.clone()),
        }
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
        // HTTP/1.1 answering: busy. HTTP/2 with a byte just now: not quiet yet.
        a[0].held.phase.store(keep_alive::BUSY, Ordering::Release);
        a[1].held.phase.store(keep_alive::HTTP2, Ordering::Release);
        a[1].touch();
        a[2].held.phase.store(keep_alive::BUSY, Ordering::Release);
        let newcomer = PeerSlot::take(&peers, Some(ip(2))).unwrap();
        assert!(!peers.make_room(&newcomer));
        assert!(a.iter().all(|s| !s.is_closing()));
        // The HTTP/2 one, once quiet for HTTP2_QUIET, may be.
        a[1].held.last_ms.store(0, Ordering::Release);
        let later = peers.now_ms() + HTTP2_QUIET.as_millis() as u64;
        let open = peers.open.lock().unwrap();
        let chosen = victim(&open, ip(2), later).expect("quiet HTTP/2");
        assert_eq!(chosen.id, a[1].held.id);
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
