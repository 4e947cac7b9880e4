//! The budget of request body bytes in flight (issue 44): what every body pinhook reads holds
//! while its request is served, taken **before** a byte is read. A body whose `Content-Length`
//! announces its size takes all of it at once; one without (chunked) takes its bytes chunk by
//! chunk as they arrive. Past the budget the request is refused at once, 429, and nothing more
//! of it is read, so forty slow 7 MiB bodies from a caller with no credentials cost pinhook at
//! most the budget, never its memory limit.
//!
//! Two budgets hold at once: the whole process's ([`BODY_BUDGET`]) and each peer address's
//! ([`PEER_BUDGET`]), so that one caller (a Pod flooding the port) can take at most its share
//! and the apiserver's reviews, from another address, still fit. Bodies up to [`SMALL_BODY`]
//! (every ordinary review) count against a reserve of their own ([`SMALL_RESERVE`]) that large
//! bodies never take, at most half of it per address, and never against the address's share
//! of large bodies: every tenant's review comes from the apiserver's one address, so one
//! tenant's large reviews (waiting for their parsed share) never leave another's ordinary ones
//! without room. A share is held while the body is read and parsed, and given back before
//! the review is decided (the handlers drop it), so reviews that wait on a slow registry hold
//! nothing here: the apiserver's share, which every tenant's review shares, is only ever taken
//! by bodies in transit.
//!
//! When both are full, a body may take a little of a third: a **floor** ([`FLOOR_RESERVE`], at
//! most [`PEER_FLOOR`] an address), so that two or three flooding addresses that fill the
//! reserve and the shared budget together (each within its own shares) leave every other
//! address room for its ordinary reviews: to shut the apiserver out, the floor too must be
//! held, by sixteen more addresses (issue 44).
//!
//! Never: waits for room (a refusal is immediate: the apiserver retries, a flood gets nothing),
//! or reads a body it has not counted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request};
use axum::http::header;
use http_body_util::BodyExt;
use tracing::warn;

use crate::metrics::Metrics;

/// Body bytes in flight at once, process-wide, beyond the small-body reserve.
pub const BODY_BUDGET: usize = 16 << 20;
/// Body bytes one peer address may have in flight at once (its small bodies included).
pub const PEER_BUDGET: usize = 8 << 20;
/// Bodies up to this size count against [`SMALL_RESERVE`] first (the size that parses within
/// the small reviews' pool).
pub use super::parsed_reviews::SMALL_BODY;
/// Body bytes of small bodies in flight at once (128 reviews of 64 KiB; an ordinary Pod's is
/// under 8 KiB, so over a thousand of those).
pub const SMALL_RESERVE: usize = 8 << 20;
/// Body bytes taken when the reserve and the shared budget have no room for a body.
pub const FLOOR_RESERVE: usize = 4 << 20;
/// What one address takes of the floor: four of the largest small bodies, some thirty
/// ordinary reviews.
pub const PEER_FLOOR: usize = 256 << 10;

/// The budgets of one server.
#[derive(Debug)]
pub struct BodyBudget {
    counts: Mutex<Counts>,
    total: usize,
    per_peer: usize,
    small: usize,
    /// The floor in all, and for one address.
    floor: (usize, usize),
}

#[derive(Debug, Default)]
struct Counts {
    large: usize,
    small: usize,
    floor: usize,
    /// Per peer address: (large, small, floor) bytes held.
    peers: HashMap<Option<IpAddr>, (usize, usize, usize)>,
}

/// What one body holds of the budgets; given back when dropped.
#[derive(Debug)]
pub struct BodyShare {
    budget: Arc<BodyBudget>,
    peer: Option<IpAddr>,
    large: usize,
    small: usize,
    floor: usize,
}

/// Why a body was not read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyRefusal {
    /// The budget has no room: refused at once, 429.
    #[error(
        "pinhook is reading too many request bodies at once ({held} bytes held by this caller, \
         {budget} bytes for all); retry later"
    )]
    Busy { held: usize, budget: usize },
    /// Over the route's body limit: 413.
    #[error("request body larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// The body could not be read (a stalled or cut body): 400.
    #[error("failed to read the request body")]
    Read(#[source] axum::Error),
}

// === impl BodyBudget ===

impl Default for BodyBudget {
    fn default() -> Self {
        BodyBudget::new(BODY_BUDGET, PEER_BUDGET, SMALL_RESERVE)
            .with_floor(PEER_FLOOR, FLOOR_RESERVE)
    }
}

impl BodyBudget {
    pub fn new(total: usize, per_peer: usize, small: usize) -> BodyBudget {
        BodyBudget {
            counts: Mutex::default(),
            total,
            per_peer,
            small,
            floor: (0, 0),
        }
    }

    /// This budget with a floor of `total` bytes, `per_peer` of them for one address, taken
    /// when the reserve and the shared budget have no room.
    pub fn with_floor(mut self, per_peer: usize, total: usize) -> BodyBudget {
        self.floor = (total, per_peer);
        self
    }

    /// Reads `request`'s body, at most `limit` bytes, within the budget of its peer address
    /// (`ConnectInfo`, absent when the router is driven without a socket): refused at once
    /// when it does not fit (counted in `metrics` and logged), over the limit, or unreadable.
    pub async fn read_request(
        self: &Arc<Self>,
        request: Request,
        limit: usize,
        metrics: &Metrics,
    ) -> Result<(Bytes, BodyShare), BodyRefusal> {
        let peer = peer_of(&request);
        let announced = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let read = self.read(peer, request.into_body(), announced, limit).await;
        if let Err(refusal @ BodyRefusal::Busy { .. }) = &read {
            metrics.bodies_refused.inc();
            warn!(peer = ?peer, error = %refusal, "refused a request body over the body budget");
        }
        read
    }

    /// Reads `body` whole, at most `limit` bytes, counting it against the budgets of `peer`
    /// before each byte is kept: `announced` (its `Content-Length`) at once, the rest chunk by
    /// chunk. The share is held until the caller drops it.
    pub async fn read(
        self: &Arc<Self>,
        peer: Option<IpAddr>,
        mut body: Body,
        announced: Option<u64>,
        limit: usize,
    ) -> Result<(Bytes, BodyShare), BodyRefusal> {
        let mut share = BodyShare {
            budget: self.clone(),
            peer,
            large: 0,
            small: 0,
            floor: 0,
        };
        let expected = match announced {
            Some(len) if len > limit as u64 => return Err(BodyRefusal::TooLarge { limit }),
            Some(len) => len as usize,
            None => 0,
        };
        self.take(&mut share, expected)?;
        let mut read = Vec::with_capacity(expected);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| refusal_of(e, limit))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let total = read.len().saturating_add(data.len());
            if total > limit {
                return Err(BodyRefusal::TooLarge { limit });
            }
            self.take(&mut share, total)?;
            // (exactly: the share counts the bytes held, and a doubled capacity would hold
            // up to twice them)
            read.reserve_exact(data.len());
            read.extend_from_slice(&data);
        }
        Ok((Bytes::from(read), share))
    }

    /// Grows `share` to hold `bytes` in all, or refuses without changing it.
    fn take(&self, share: &mut BodyShare, bytes: usize) -> Result<(), BodyRefusal> {
        let held = share.large + share.small + share.floor;
        if bytes <= held {
            return Ok(());
        }
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let (peer_large, peer_small, peer_floor) =
            counts.peers.get(&share.peer).copied().unwrap_or((0, 0, 0));
        let busy = || BodyRefusal::Busy {
            held: peer_large + peer_small + peer_floor,
            budget: self.total + self.small + self.floor.0,
        };
        // A body already on the floor stays there while it fits; one that does not fit there
        // any more is refused (it never moves back).
        if share.floor > 0 {
            let more = bytes - share.floor;
            if counts.floor + more > self.floor.0 || peer_floor + more > self.floor.1 {
                return Err(busy());
            }
            counts.floor += more;
            counts
                .peers
                .insert(share.peer, (peer_large, peer_small, peer_floor + more));
            share.floor = bytes;
            return Ok(());
        }
        // A small body stays in the reserve while it fits there (the whole reserve and its
        // address's half of it); a body that grows past SMALL_BODY moves to the shared budget
        // whole. (Only a body that never left the reserve stays in it: one that moved to the
        // shared budget stays there, so the counts given back are the counts taken.)
        let peer_small_after = peer_small - share.small + bytes;
        let (large, small) = match share.large == 0
            && bytes <= SMALL_BODY
            && counts.small - share.small + bytes <= self.small
            && peer_small_after <= self.small / 2
        {
            true => (0, bytes),
            false => (bytes, 0),
        };
        let peer_large_after = peer_large - share.large + large;
        let large_more = large - share.large;
        if peer_large_after > self.per_peer
            || (large_more > 0 && counts.large + large_more > self.total)
        {
            // No room in either: a body that holds nothing else yet may stand on the floor.
            let floor_fits = share.large == 0
                && counts.floor + bytes <= self.floor.0
                && peer_floor + bytes <= self.floor.1;
            if !floor_fits {
                return Err(busy());
            }
            counts.small -= share.small;
            counts.floor += bytes;
            counts.peers.insert(
                share.peer,
                (peer_large, peer_small - share.small, peer_floor + bytes),
            );
            share.small = 0;
            share.floor = bytes;
            return Ok(());
        }
        counts.large += large_more;
        counts.small = counts.small - share.small + small;
        counts.peers.insert(
            share.peer,
            (
                peer_large_after,
                peer_small - share.small + small,
                peer_floor,
            ),
        );
        debug_assert_eq!(large + small, bytes, "a share holds what it read");
        share.large = large;
        share.small = small;
        Ok(())
    }

    /// Bytes held now: (shared budget, small reserve, peers holding any).
    pub fn held(&self) -> (usize, usize, usize) {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        (counts.large, counts.small, counts.peers.len())
    }

    /// Bytes held on the floor now.
    pub fn floor_held(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .floor
    }
}

/// The address of the client that sent `request` (`ConnectInfo`; unknown when the router is
/// driven without a socket).
pub fn peer_of(request: &Request) -> Option<IpAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
}

/// A body error as a refusal: over the limit (tower-http's `Limited` body) is 413.
fn refusal_of(error: axum::Error, limit: usize) -> BodyRefusal {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return BodyRefusal::TooLarge { limit };
        }
        source = e.source();
    }
    BodyRefusal::Read(error)
}

// === impl BodyShare ===

impl Drop for BodyShare {
    fn drop(&mut self) {
        let held = self.large + self.small + self.floor;
        if held == 0 {
            return;
        }
        let mut counts = self
            .budget
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counts.large -= self.large;
        counts.small -= self.small;
        counts.floor -= self.floor;
        if let Some((large, small, floor)) = counts.peers.get_mut(&self.peer) {
            *large -= self.large;
            *small -= self.small;
            *floor -= self.floor;
            if (*large, *small, *floor) == (0, 0, 0) {
                counts.peers.remove(&self.peer);
            }
        }
    }
}

// === impl BodyRefusal ===

impl BodyRefusal {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            BodyRefusal::Busy { .. } => 429,
            BodyRefusal::TooLarge { .. } => 413,
            BodyRefusal::Read(_) => 400,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use futures::{stream, StreamExt};

    use super::*;

    const A: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    const B: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));

    /// A body that sends `chunks` and then waits for ever (a slow sender), never announced.
    fn trickle(chunks: Vec<usize>) -> Body {
        let data = chunks
            .into_iter()
            .map(|n| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; n])));
        Body::from_stream(stream::iter(data).chain(stream::pending()))
    }

    #[tokio::test]
    async fn an_announced_body_over_the_budget_is_refused_before_a_byte_is_read() {
        let budget = Arc::new(BodyBudget::new(1 << 20, 4 << 20, 256 << 10));
        // A body that would hang if read: refused from its Content-Length alone.
        let refused = budget
            .read(A, trickle(vec![]), Some(2 << 20), 7 << 20)
            .await
            .map(|_| ());
        assert!(
            matches!(refused, Err(BodyRefusal::Busy { .. })),
            "{refused:?}"
        );
        assert_eq!(budget.held(), (0, 0, 0));
        let too_large = budget
            .read(A, trickle(vec![]), Some(8 << 20), 7 << 20)
            .await
            .map(|_| ());
        assert!(matches!(too_large, Err(BodyRefusal::TooLarge { .. })));
    }

    #[tokio::test]
    async fn a_chunked_body_is_counted_as_it_arrives_and_refused_past_the_budget() {
        let budget = Arc::new(BodyBudget::new(1 << 20, 4 << 20, 256 << 10));
        let refused = budget
            .read(
                A,
                trickle(vec![512 << 10, 512 << 10, 512 << 10]),
                None,
                7 << 20,
            )
            .await
            .map(|_| ());
        assert!(
            matches!(refused, Err(BodyRefusal::Busy { .. })),
            "{refused:?}"
        );
        assert_eq!(budget.held(), (0, 0, 0), "given back");
        let whole = Body::from(vec![b'y'; 600 << 10]);
        let (bytes, share) = budget
            .read(A, whole, None, 7 << 20)
            .await
            .map_err(|e| e.to_string())
            .expect("fits");
        assert_eq!(bytes.len(), 600 << 10);
        assert_eq!(budget.held(), (600 << 10, 0, 1));
        drop(share);
        assert_eq!(budget.held(), (0, 0, 0));
    }

    /// Issue 44: one caller holding large slow bodies takes its peer share and no more; another
    /// address's large body and any ordinary review still fit, and small reviews never wait on
    /// large ones.
    #[tokio::test]
    async fn one_peer_cannot_take_another_peers_room_nor_the_small_reserve() {
        let budget = Arc::new(BodyBudget::new(4 << 20, 2 << 20, 256 << 10));
        // Slow senders: each read takes its share and waits for bytes that never come.
        let slow: Vec<_> = (0..10)
            .map(|_| {
                let budget = budget.clone();
                tokio::spawn(async move {
                    budget
                        .read(A, trickle(vec![]), Some(1 << 20), 7 << 20)
                        .await
                        .map(|_| ())
                })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let mut refused = 0;
        for task in &slow {
            if task.is_finished() {
                refused += 1;
            }
        }
        assert_eq!(refused, 8, "two 1 MiB bodies fit A's 2 MiB share");
        let (bytes, _big) = budget
            .read(B, Body::from(vec![b'z'; 1 << 20]), Some(1 << 20), 7 << 20)
            .await
            .map_err(|e| e.to_string())
            .expect("another address fits");
        assert_eq!(bytes.len(), 1 << 20);
        // B's large body does not take from B's small ones: two fit B's half of the reserve,
        // the next two go to the shared budget.
        let mut small = Vec::new();
        for _ in 0..4 {
            let (_, share) = budget
                .read(B, Body::from(vec![b's'; 60 << 10]), Some(60 << 10), 7 << 20)
                .await
                .map_err(|e| e.to_string())
                .expect("small bodies fit");
            small.push(share);
        }
        assert_eq!(budget.held().1, 2 * (60 << 10));
        assert_eq!(budget.held().0, (2 << 20) + (1 << 20) + 2 * (60 << 10));
        // A's large share is full (its two slow bodies): A's ordinary reviews still fit (every
        // tenant's reviews come from the apiserver's one address).
        let (_, _a_small) = budget
            .read(A, Body::from(vec![b'o'; 8 << 10]), Some(8 << 10), 7 << 20)
            .await
            .map_err(|e| e.to_string())
            .expect("an ordinary review of a full address fits the reserve");
        for task in slow {
            task.abort();
        }
    }

    /// A chunked body that began in the shared budget (the reserve full) stays there when the
    /// reserve frees up: what is given back is what was taken.
    #[tokio::test]
    async fn a_body_never_moves_back_to_the_reserve() {
        let budget = Arc::new(BodyBudget::new(1 << 20, 4 << 20, 64 << 10));
        // Two addresses fill the reserve, 30 KiB each (each may hold half of it).
        let (_, full) = budget
            .read(B, Body::from(vec![b'r'; 30 << 10]), Some(30 << 10), 7 << 20)
            .await
            .map_err(|e| e.to_string())
            .expect("fills half the reserve");
        let c = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)));
        let (_, full_c) = budget
            .read(c, Body::from(vec![b'r'; 30 << 10]), Some(30 << 10), 7 << 20)
            .await
            .map_err(|e| e.to_string())
            .expect("fills the other half");
        let mut share = BodyShare {
            budget: budget.clone(),
            peer: A,
            large: 0,
            small: 0,
            floor: 0,
        };
        budget
            .take(&mut share, 10 << 10)
            .expect("room in the shared budget");
        assert_eq!((share.large, share.small), (10 << 10, 0));
        drop((full, full_c));
        budget.take(&mut share, 20 << 10).expect("grows");
        assert_eq!((share.large, share.small), (20 << 10, 0));
        drop(share);
        assert_eq!(budget.held(), (0, 0, 0));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_whether_announced_or_not() {
        let budget = Arc::new(BodyBudget::default());
        let refused = budget
            .read(A, Body::from(vec![b'x'; 2048]), None, 1024)
            .await
            .map(|_| ());
        assert!(matches!(
            refused,
            Err(BodyRefusal::TooLarge { limit: 1024 })
        ));
        assert_eq!(budget.held(), (0, 0, 0));
    }

    /// Issue 44: two addresses, each within its shares, filled the small reserve and the
    /// shared budget with slow bodies, and every other address's review (the apiserver's) was
    /// refused, 429. With the floor, another address's ordinary review is read; the flooding
    /// addresses get their small part of the floor and no more.
    #[tokio::test]
    async fn two_flooding_addresses_leave_another_its_floor() {
        const C: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)));
        let budget = Arc::new(
            BodyBudget::new(1 << 20, 512 << 10, 256 << 10).with_floor(64 << 10, 256 << 10),
        );
        let hold = |peer: Option<IpAddr>, bytes: u64| {
            let budget = budget.clone();
            tokio::spawn(async move {
                budget
                    .read(peer, trickle(vec![]), Some(bytes), 7 << 20)
                    .await
                    .map(|_| ())
            })
        };
        // Each address: its half of the small reserve, then its share of the shared budget.
        let mut slow = Vec::new();
        for peer in [A, B] {
            slow.extend((0..2).map(|_| hold(peer, 64 << 10)));
            slow.push(hold(peer, 512 << 10));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(slow.iter().all(|task| !task.is_finished()), "all held");
        assert_eq!(budget.held(), (1 << 20, 256 << 10, 2));
        // C's ordinary review is read, from the floor.
        let (bytes, share) = budget
            .read(C, Body::from(vec![b'c'; 8 << 10]), Some(8 << 10), 7 << 20)
            .await
            .map_err(|e| e.to_string())
            .expect("C's review fits the floor");
        assert_eq!(bytes.len(), 8 << 10);
        assert_eq!(budget.floor_held(), 8 << 10);
        drop(share);
        assert_eq!(budget.floor_held(), 0);
        // A gets its 64 KiB of the floor and no more.
        let a_floor = hold(A, 64 << 10);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!a_floor.is_finished(), "A's part of the floor");
        let refused = budget
            .read(A, Body::from(vec![b'a'; 1 << 10]), Some(1 << 10), 7 << 20)
            .await
            .map(|_| ());
        assert!(
            matches!(refused, Err(BodyRefusal::Busy { .. })),
            "{refused:?}"
        );
        for task in slow.iter().chain([&a_floor]) {
            task.abort();
        }
    }
}
