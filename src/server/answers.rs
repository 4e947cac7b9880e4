//! The answers being written (issue 44): an AdmissionReview's answer is made whole in memory
//! and held until the client has read it, and a client that does not read holds it as long as
//! its connection lives: 128 connections of one address, 32 HTTP/2 streams each, each holding
//! an answer of some 25 KiB (a Pod of 100 pinned images), are 100 MiB, outside every budget.
//! Now each answer takes its bytes from shares keyed by the peer address
//! ([`ANSWER_PEER_BYTES`]) within [`ANSWER_BYTES`] in all, and from a reserve
//! ([`ANSWER_RESERVE_BYTES`], [`ANSWER_PEER_RESERVE_BYTES`] an address) when all of that is
//! held, and holds them until the server has written it (the bytes own the share). An answer
//! that finds no room is not sent: a short 503 is (the apiserver's `failurePolicy` decides),
//! so the flooding address is the one whose reviews fail, as long as the reserve lasts.
//!
//! Owns: [`Answers`]. Never: decides an answer.

use std::net::IpAddr;

use axum::body::Bytes;

use crate::shares::{Shares, Short, Taken};

/// Answer bytes held at once by all clients, the reserve apart: the apiserver reads its
/// answers as they come, so it holds a few at a time.
pub const ANSWER_BYTES: usize = 8 << 20;
/// Answer bytes one address holds at once.
pub const ANSWER_PEER_BYTES: usize = 4 << 20;
/// Answer bytes kept for addresses when [`ANSWER_BYTES`] is held.
pub const ANSWER_RESERVE_BYTES: usize = 4 << 20;
/// What one address takes of the reserve: a few ordinary answers (a few KiB each) at once.
pub const ANSWER_PEER_RESERVE_BYTES: usize = 64 << 10;

/// The shares answers take from.
#[derive(Debug)]
pub struct Answers {
    shares: Shares,
}

impl Default for Answers {
    fn default() -> Self {
        Answers::new(ANSWER_PEER_BYTES, ANSWER_BYTES)
            .with_reserve(ANSWER_PEER_RESERVE_BYTES, ANSWER_RESERVE_BYTES)
    }
}

impl Answers {
    pub fn new(per_peer: usize, total: usize) -> Answers {
        Answers {
            shares: Shares::new(per_peer, total),
        }
    }

    pub fn with_reserve(mut self, per_peer: usize, total: usize) -> Answers {
        self.shares = self.shares.with_reserve(per_peer, total);
        self
    }

    /// `answer`, charged to `peer` (an unknown address is one shared key) until its bytes are
    /// dropped; or the bound it did not fit (and nothing held).
    pub fn charge(&self, peer: Option<IpAddr>, answer: Vec<u8>) -> Result<Bytes, Short> {
        let key = peer.map(|ip| ip.to_string()).unwrap_or_default();
        let mut taken = Taken::default();
        self.shares.take(&key, &key, answer.len(), &mut taken)?;
        Ok(charged(answer, taken))
    }
}

/// `bytes` as a body that holds `share` (of whatever budget they are charged to) until the
/// server drops them, once written, not until the handler returns.
pub fn charged(bytes: Vec<u8>, share: impl Send + 'static) -> Bytes {
    Bytes::from_owner(Charged {
        bytes,
        _share: share,
    })
}

/// Bytes and the share they are charged to.
struct Charged<S> {
    bytes: Vec<u8>,
    _share: S,
}

impl<S> AsRef<[u8]> for Charged<S> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address that does not read its answers holds at most its share, then its reviews
    /// get no answer; another address's answers still fit, from the reserve when the whole
    /// is held; dropped (written) answers give their bytes back.
    #[test]
    fn unread_answers_hold_their_address_share_and_no_more() {
        let answers = Answers::new(64 << 10, 128 << 10).with_reserve(16 << 10, 64 << 10);
        let flood: IpAddr = [10, 0, 0, 9].into();
        let other: IpAddr = [10, 0, 0, 8].into();
        let held: Vec<Bytes> = (0..4)
            .map(|_| answers.charge(Some(flood), vec![0; 16 << 10]).unwrap())
            .collect();
        assert_eq!(
            answers.charge(Some(flood), vec![0; 1]).unwrap_err(),
            Short::Key(64 << 10)
        );
        let third: IpAddr = [10, 0, 0, 7].into();
        let more: Vec<Bytes> = (0..4)
            .map(|_| answers.charge(Some(third), vec![0; 16 << 10]).unwrap())
            .collect();
        // The whole is held: another address's ordinary answer comes from the reserve.
        let answer = answers.charge(Some(other), b"{}".to_vec()).unwrap();
        assert_eq!(&answer[..], b"{}");
        drop((held, more));
        answers
            .charge(Some(flood), vec![0; 16 << 10])
            .expect("written answers gave their bytes back");
    }
}
