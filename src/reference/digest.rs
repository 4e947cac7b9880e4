//! Content digests (`algorithm:hex`) as go-digest v1.0.0 parses and validates them, with the
//! algorithms kubelet's and containerd's go-digest registers (sha256, sha384, sha512), and the
//! compact sha256 form caches keep.
//!
//! Owns: [`Algorithm`], [`Digest`]. Never does I/O.

use std::fmt;
use std::str::FromStr;

use super::ReferenceError;

/// A digest algorithm pinhook accepts: the ones go-digest v1.0.0 registers (`algorithm.go`:
/// sha256, sha384, sha512), which is the go-digest kubelet and containerd vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Sha256,
    Sha384,
    Sha512,
}

/// A validated content digest, `algorithm:hex` with lowercase hex of exact length.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Digest {
    algorithm: Algorithm,
    hex: String,
}

// === impl Algorithm ===

impl Algorithm {
    /// The name used in digests (`sha256`).
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha384 => "sha384",
            Algorithm::Sha512 => "sha512",
        }
    }

    /// How many hex characters a digest of this algorithm has: twice the hash size in bytes
    /// (go-digest `Algorithm.Validate` checks `Size()*2` before the characters).
    pub fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha384 => 96,
            Algorithm::Sha512 => 128,
        }
    }

    fn from_name(name: &str) -> Option<Algorithm> {
        match name {
            "sha256" => Some(Algorithm::Sha256),
            "sha384" => Some(Algorithm::Sha384),
            "sha512" => Some(Algorithm::Sha512),
            _ => None,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Digest ===

impl Digest {
    /// Validates `hex` for `algorithm`: exact length, lowercase hex only.
    pub fn new(algorithm: Algorithm, hex: &str) -> Result<Digest, ReferenceError> {
        // go-digest checks the length before the characters; keep its order so errors match.
        let got = hex.chars().count();
        if got != algorithm.hex_len() {
            return Err(ReferenceError::InvalidDigestLength { algorithm, got });
        }
        if !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(ReferenceError::InvalidDigestFormat);
        }
        Ok(Digest {
            algorithm,
            hex: hex.to_owned(),
        })
    }

    /// A sha256 digest from its 64 lowercase hex characters.
    pub fn new_sha256(hex: &str) -> Result<Digest, ReferenceError> {
        Digest::new(Algorithm::Sha256, hex)
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The sha256 digest of `bytes`.
    pub fn sha256_of(bytes: &[u8]) -> Digest {
        use sha2::Digest as _;
        let sum: [u8; 32] = sha2::Sha256::digest(bytes).into();
        Digest::from_sha256_bytes(&sum)
    }

    /// The sha256 digest whose hash is `bytes`.
    pub fn from_sha256_bytes(bytes: &[u8; 32]) -> Digest {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = String::with_capacity(64);
        for byte in bytes {
            hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
            hex.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
        }
        Digest {
            algorithm: Algorithm::Sha256,
            hex,
        }
    }

    /// The hash of a sha256 digest as its 32 bytes (`None` for another algorithm): the compact
    /// form [`Digest::from_sha256_bytes`] turns back.
    pub fn sha256_bytes(&self) -> Option<[u8; 32]> {
        if self.algorithm != Algorithm::Sha256 {
            return None;
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut bytes = [0u8; 32];
        let mut pairs = self.hex.as_bytes().chunks_exact(2);
        for byte in &mut bytes {
            let [high, low] = pairs.next()? else {
                return None;
            };
            *byte = nibble(*high)? << 4 | nibble(*low)?;
        }
        Some(bytes)
    }
}

impl FromStr for Digest {
    type Err = ReferenceError;

    /// Parses `algorithm:hex` as go-digest v1.0.0's `Parse` does, with sha256, sha384 and sha512
    /// registered.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, hex) = s
            .split_once(':')
            .ok_or(ReferenceError::InvalidDigestFormat)?;
        if name.is_empty() || hex.is_empty() {
            return Err(ReferenceError::InvalidDigestFormat);
        }
        match Algorithm::from_name(name) {
            Some(algorithm) => Digest::new(algorithm, hex),
            // go-digest only calls an algorithm "unsupported" when the digest is well formed.
            None if is_digest_algorithm_name(name) && is_digest_encoded(hex) => {
                Err(ReferenceError::UnsupportedDigestAlgorithm(name.to_owned()))
            }
            None => Err(ReferenceError::InvalidDigestFormat),
        }
    }
}

/// go-digest's algorithm grammar: `[a-z0-9]+([.+_-][a-z0-9]+)*`.
fn is_digest_algorithm_name(name: &str) -> bool {
    let is_part = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    name.split(['.', '+', '_', '-']).all(is_part)
}

/// go-digest's encoded grammar: `[a-zA-Z0-9=_-]+`.
fn is_digest_encoded(hex: &str) -> bool {
    !hex.is_empty()
        && hex
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b'_' | b'-'))
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.hex)
    }
}
