//! One layer of a tag-scheme signature manifest, as the verdict reads it: its payload, its
//! signature and, for a keyless signature, its certificate, chain and log bundle annotations.
//!
//! Owns: the shape only. Never: reads or judges one.

/// One layer of a signature manifest: its payload (already checked against its descriptor's
/// digest and size), its signature annotation and, for a keyless signature, its certificate,
/// chain and transparency log bundle annotations.
#[derive(Debug, Clone, Copy)]
pub struct SignatureLayer<'a> {
    pub payload: &'a [u8],
    pub signature: &'a str,
    pub certificate: Option<&'a str>,
    pub chain: Option<&'a str>,
    pub bundle: Option<&'a str>,
}

impl<'a> SignatureLayer<'a> {
    /// A layer signed with a key: a payload and its signature, no certificate.
    pub fn of_key(payload: &'a [u8], signature: &'a str) -> SignatureLayer<'a> {
        SignatureLayer {
            payload,
            signature,
            certificate: None,
            chain: None,
            bundle: None,
        }
    }
}
