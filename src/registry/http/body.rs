//! Bounded reads of what registries and token realms send: a body is read chunk by chunk up to
//! its [`Limit`] and refused past it ([`RegistryError::TooLarge`]), and refused before a byte of
//! it is read when its announced `Content-Length` is already over. Nothing holds more than the
//! limit plus one chunk; dropping the answer closes the connection (or resets the HTTP/2
//! stream), so the rest is never transferred.
//!
//! The limits: 4 MiB for a manifest (the size the distribution spec lets a registry refuse to
//! accept, so no registry can rely on serving a larger one), 64 KiB for a token answer or an
//! error body, which are a few hundred bytes in practice.
//!
//! What all reads hold at once is bounded too (issue 44): each body takes its bytes from
//! [`READS`] as they arrive (its announced length at once), at most [`HOST_READ_BYTES`] for
//! one registry host and [`READ_BYTES_IN_FLIGHT`] in all, and holds them until its
//! [`Read`] is dropped. With all of that held, a body comes from a reserve
//! ([`READ_RESERVE_BYTES`], at most [`TENANT_READ_RESERVE_BYTES`] for one tenant,
//! [`crate::tenant`]): a tenant whose six slow registries fill the whole leaves every other
//! tenant room for ordinary answers. A body that finds no room is refused at once
//! ([`RegistryError::ReadsFull`]). Before, only each registry's concurrency (16 calls) bounded
//! them: a review naming images on many hosts that each serve a 4 MiB manifest could make
//! pinhook hold 64 MiB per host, and there is no bound on hosts.

use std::sync::LazyLock;

use super::outbound;
use crate::registry::RegistryError;
use crate::shares::{Shares, Taken};

/// Bytes of registries' answers held at once by all reads, the reserve apart.
pub const READ_BYTES_IN_FLIGHT: usize = 20 << 20;
/// Bytes of answers kept for tenants when [`READ_BYTES_IN_FLIGHT`] is held.
pub const READ_RESERVE_BYTES: usize = 4 << 20;
/// What one tenant's reads take of the reserve: a few dozen ordinary manifests (under 10 KiB).
pub const TENANT_READ_RESERVE_BYTES: usize = 256 << 10;
/// Bytes of one registry host's answers held at once: one manifest of the largest size, or
/// some eighty ordinary ones (under 50 KiB).
pub const HOST_READ_BYTES: usize = 4 << 20;
/// What a chunk without an announced length takes at least, so that a body sent a few bytes
/// at a time is counted in steps, not a unit per chunk.
const STEP: usize = 16 << 10;

/// The shares every read takes from.
static READS: LazyLock<Shares> = LazyLock::new(|| {
    Shares::new(HOST_READ_BYTES, READ_BYTES_IN_FLIGHT)
        .with_reserve(TENANT_READ_RESERVE_BYTES, READ_RESERVE_BYTES)
});

/// A body read whole, holding its share of [`READS`] while it lives.
#[derive(Debug)]
pub(crate) struct Read {
    bytes: Vec<u8>,
    _taken: Taken,
}

impl std::ops::Deref for Read {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// How much of one kind of body pinhook reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit {
    /// What the body is, for the error message ("a manifest").
    pub what: &'static str,
    pub bytes: u64,
}

pub(crate) const MANIFEST: Limit = Limit {
    what: "a manifest",
    bytes: 4 << 20,
};

/// A cosign signature manifest (a few layer descriptors, under 2 KiB in practice).
pub(crate) const SIGNATURE_MANIFEST: Limit = Limit {
    what: "a signature manifest",
    bytes: 64 << 10,
};

/// A cosign simple signing payload (a few hundred bytes in practice).
pub(crate) const SIGNATURE_PAYLOAD: Limit = Limit {
    what: "a signature payload",
    bytes: 64 << 10,
};

pub(crate) const TOKEN: Limit = Limit {
    what: "a token answer",
    bytes: 64 << 10,
};

pub(crate) const ERROR: Limit = Limit {
    what: "an error body",
    bytes: 64 << 10,
};

/// The whole body of `response`, or [`RegistryError::TooLarge`] as soon as it is known to be
/// over `limit`.
pub(crate) async fn read(
    response: reqwest::Response,
    limit: Limit,
    registry: &str,
) -> Result<Read, RegistryError> {
    read_within(&READS, response, limit, registry).await
}

/// [`read`], taking from `shares`, as the running task's tenant.
async fn read_within(
    shares: &Shares,
    mut response: reqwest::Response,
    limit: Limit,
    registry: &str,
) -> Result<Read, RegistryError> {
    let tenant = crate::tenant::current();
    let too_large = || RegistryError::TooLarge {
        registry: registry.to_string(),
        what: limit.what,
        limit: limit.bytes,
    };
    let announced = response.content_length();
    if announced.is_some_and(|length| length > limit.bytes) {
        return Err(too_large());
    }
    let full = |short| RegistryError::ReadsFull {
        registry: registry.to_string(),
        short,
    };
    let mut taken = Taken::default();
    let expected = announced.unwrap_or(0) as usize;
    if expected > 0 {
        shares
            .take(registry, &tenant, expected, &mut taken)
            .map_err(full)?;
    }
    let mut body = Vec::with_capacity(expected);
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| outbound::failed(registry, e))?
    {
        if (body.len() + chunk.len()) as u64 > limit.bytes {
            return Err(too_large());
        }
        let past = (body.len() + chunk.len()).saturating_sub(taken.bytes());
        if past > 0 {
            shares
                .take(registry, &tenant, past.max(STEP), &mut taken)
                .map_err(full)?;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Read {
        bytes: body,
        _taken: taken,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::error::size;

    fn answer(bytes: usize) -> reqwest::Response {
        reqwest::Response::from(
            axum::http::Response::builder()
                .header("content-length", bytes.to_string())
                .body("x".repeat(bytes))
                .unwrap(),
        )
    }

    /// Issue 44: a tenant's six slow registries, each holding its 4 MiB, filled the 24 MiB, and
    /// every other tenant's next answer was refused (`reads_full`), so its images went
    /// unpinned. With the reserve, another tenant's ordinary answer is read; the tenant that
    /// filled the whole gets its own small part of the reserve only.
    #[tokio::test]
    async fn with_the_reads_held_another_tenants_answer_is_read_from_the_reserve() {
        let shares = Shares::new(HOST_READ_BYTES, READ_BYTES_IN_FLIGHT)
            .with_reserve(TENANT_READ_RESERVE_BYTES, READ_RESERVE_BYTES);
        let mut held = Taken::default();
        for host in 0..5 {
            shares
                .take(
                    &format!("slow-{host}"),
                    "team-a",
                    HOST_READ_BYTES,
                    &mut held,
                )
                .unwrap();
        }
        let read = |tenant: &'static str, bytes: usize| {
            crate::tenant::scope(
                tenant,
                read_within(&shares, answer(bytes), MANIFEST, "other.example"),
            )
        };
        let error = read("team-a", 300 << 10).await.unwrap_err();
        assert_eq!(error.kind(), "reads_full");
        let body = read("team-b", 8 << 10).await.expect("from the reserve");
        assert_eq!(body.len(), 8 << 10);
        read("team-a", 8 << 10)
            .await
            .expect("team-a's own part of it");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(MANIFEST.bytes), "4 MiB");
        assert_eq!(size(TOKEN.bytes), "64 KiB");
        assert_eq!(size(1000), "1000 bytes");
    }

    #[test]
    fn the_refusal_names_the_registry_and_the_limit_on_one_line() {
        let error = RegistryError::TooLarge {
            registry: "reg.example".into(),
            what: MANIFEST.what,
            limit: MANIFEST.bytes,
        };
        assert_eq!(
            error.to_string(),
            "registry reg.example sent a manifest larger than 4 MiB, pinhook's limit"
        );
        assert_eq!(error.kind(), "too_large");
    }
}
