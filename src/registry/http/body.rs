//! Bounded reads of what registries and token realms send: a body is read chunk by chunk up to
//! its [`Limit`] and refused past it ([`RegistryError::TooLarge`]), and refused before a byte of
//! it is read when its announced `Content-Length` is already over. Nothing holds more than the
//! limit plus one chunk; dropping the answer closes the connection (or resets the HTTP/2
//! stream), so the rest is never transferred.
//!
//! The limits: 4 MiB for a manifest (the size the distribution spec lets a registry refuse to
//! accept, so no registry can rely on serving a larger one), 64 KiB for a token answer or an
//! error body, which are a few hundred bytes in practice.

use super::outbound;
use crate::registry::RegistryError;

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
    mut response: reqwest::Response,
    limit: Limit,
    registry: &str,
) -> Result<Vec<u8>, RegistryError> {
    let too_large = || RegistryError::TooLarge {
        registry: registry.to_string(),
        what: limit.what,
        limit: limit.bytes,
    };
    let announced = response.content_length();
    if announced.is_some_and(|length| length > limit.bytes) {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(announced.unwrap_or(0) as usize);
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| outbound::failed(registry, e))?
    {
        if (body.len() + chunk.len()) as u64 > limit.bytes {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `bytes` for a message: `4 MiB`, `64 KiB`, or bytes when not a whole number of either.
pub(crate) fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
