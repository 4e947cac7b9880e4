//! When self-managed certificates change, decided without the network: given what the TLS
//! Secret holds now and the time, [`plan`] says whether to keep it or what to write instead.
//!
//! The Secret (type `Opaque`, written only by the replica holding the Lease) holds:
//! - `ca.crt`: the trust bundle, what every webhook configuration's `caBundle` must carry:
//!   the signing CA, a next CA once published, and the previous signing CA until it expires,
//!   so a replica still serving a certificate of the previous CA stays trusted while it
//!   switches. Only those: any other CA found in `ca.crt` (one pinhook did not issue) is
//!   dropped at the next pass, never copied into a `caBundle`;
//! - `signer.crt`, `signer.key`: the CA that signs the serving certificate;
//! - `next.crt`, `next.key`: during a CA rotation, the CA already in the bundle that will sign
//!   next, with annotation [`PUBLISHED_AT`];
//! - `previous.crt`: the signing CA the last promotion replaced, while it has not expired;
//! - `tls.crt`, `tls.key`: the serving certificate every replica serves, and only when it is
//!   one the apiserver accepts: signed by `signer.crt`, which `ca.crt` carries, the expected
//!   names, valid now, its key matching ([`serving_pair`]).
//!
//! A CA rotates in two steps so no apiserver ever meets a certificate it cannot verify: the
//! next CA goes into the bundle first, and signs a serving certificate only once the bundle
//! has been in every webhook configuration for the grace period.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use time::OffsetDateTime;
use x509_parser::pem::Pem;

use super::{new_ca, new_leaf, CaPem, CertError};

/// Trust bundle.
pub const BUNDLE: &str = "ca.crt";
/// The CA that signs the serving certificate.
pub const SIGNER_CERT: &str = "signer.crt";
pub const SIGNER_KEY: &str = "signer.key";
/// The CA published in the bundle, to sign after the grace period.
pub const NEXT_CERT: &str = "next.crt";
pub const NEXT_KEY: &str = "next.key";
/// The signing CA the last promotion replaced (still in the bundle until it expires).
pub const PREVIOUS_CERT: &str = "previous.crt";
/// The serving certificate and its key.
pub const CERT: &str = "tls.crt";
pub const KEY: &str = "tls.key";
/// When the next CA went into the bundle (RFC 3339).
pub const PUBLISHED_AT: &str = "pinhook.dev/next-ca-published-at";
/// CAs in the bundle at most (previous, signing, next).
pub const MAX_BUNDLE: usize = 3;
/// A Secret value larger than this is not parsed (a CA bundle of three is about 2 KiB).
const MAX_VALUE: usize = 64 << 10;

/// What the certificates must be.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Names the serving certificate carries (DNS names; IP addresses as IP SANs).
    pub names: Vec<String>,
    /// The serving certificate's common name.
    pub common_name: String,
    pub ca_lifetime: Duration,
    pub cert_lifetime: Duration,
    /// How long a next CA stays in the bundle before it signs.
    pub grace: Duration,
}

/// The Secret's data and the one annotation [`plan`] reads and writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contents {
    pub data: BTreeMap<String, String>,
    pub published_at: Option<OffsetDateTime>,
}

/// What to do with the Secret.
#[derive(Debug)]
pub enum Step {
    Keep,
    Write {
        contents: Contents,
        /// Why, for the log: one short phrase per change.
        reasons: Vec<&'static str>,
    },
}

/// A certificate that parsed, with what [`plan`] needs of it.
#[derive(Debug, Clone)]
struct Parsed {
    pem: String,
    der: Vec<u8>,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    is_ca: bool,
}

/// A CA whose key matches its certificate.
#[derive(Debug, Clone)]
struct Ca {
    cert: Parsed,
    key: String,
}

/// Decides what the Secret must hold at `now`. `webhooks_in_sync` says every webhook
/// configuration carries the current bundle (a next CA is promoted only then).
pub fn plan(
    current: &Contents,
    now: OffsetDateTime,
    settings: &Settings,
    webhooks_in_sync: bool,
) -> Result<Step, CertError> {
    let mut reasons = Vec::new();
    let bundle = valid_bundle(current.data.get(BUNDLE), now);
    let mut previous = current
        .data
        .get(PREVIOUS_CERT)
        .and_then(|pem| parse_one(pem))
        .filter(|c| c.is_ca && valid_at(c, now));
    let (mut signer, mut next, mut published_at) = match ca(current, SIGNER_CERT, SIGNER_KEY, now) {
        Some(signer) => {
            let next = ca(current, NEXT_CERT, NEXT_KEY, now);
            let published_at = next.as_ref().and(current.published_at);
            (signer, next, published_at)
        }
        None => match ca(current, NEXT_CERT, NEXT_KEY, now)
            .filter(|next| current.published_at.is_some() && bundle_has(&bundle, &next.cert))
        {
            // Already in every bundle: it signs now rather than a CA nobody trusts yet.
            Some(next) => {
                reasons.push("signing CA unusable: the published next CA signs");
                previous = None;
                (next, None, None)
            }
            None => {
                reasons.push("no usable signing CA: new CA");
                previous = None;
                (fresh_ca(now, settings)?, None, None)
            }
        },
    };
    if next.is_some() && published_at.is_none() {
        reasons.push("next CA without publication time: dropped");
        next = None;
    }
    // A publication time in the future (beyond clock skew), or so far ahead that adding the
    // grace overflows, is not one this writer made: drop it rather than wait for it.
    let impossible =
        |at: OffsetDateTime| at.checked_add(grace(settings)).is_none() || at > now + BACKDATE;
    if published_at.is_some_and(impossible) {
        reasons.push("next CA with an impossible publication time: dropped");
        next = None;
        published_at = None;
    }
    let ca_due = remaining(&signer.cert, now) < settings.ca_lifetime / 3
        || longer_than(&signer.cert, settings.ca_lifetime);
    if next.is_none() && ca_due {
        reasons.push("CA near expiry or longer-lived than configured: next CA published");
        next = Some(fresh_ca(now, settings)?);
        published_at = Some(now);
    }
    if let (Some(candidate), Some(at)) = (&next, published_at) {
        let due = at.checked_add(grace(settings)).unwrap_or(at);
        if now >= due && webhooks_in_sync && bundle_has(&bundle, &candidate.cert) {
            reasons.push("next CA now signs");
            previous = Some(signer.cert.clone());
            signer = candidate.clone();
            next = None;
            published_at = None;
        }
    }
    let bundle_pem = compose_bundle(&signer, next.as_ref(), previous.as_ref());
    let leaf = leaf(current, &signer, now, settings);
    let (cert, key) = match leaf {
        Some(pair) => pair,
        None => {
            reasons.push("serving certificate missing, wrong or near expiry: reissued");
            let not_after = (now + settings.cert_lifetime).min(signer.cert.not_after);
            new_leaf(
                &CaPem {
                    cert: signer.cert.pem.clone(),
                    key: signer.key.clone(),
                },
                &settings.names,
                &settings.common_name,
                now - BACKDATE,
                not_after,
            )?
        }
    };
    let mut data = BTreeMap::new();
    data.insert(BUNDLE.to_string(), bundle_pem);
    data.insert(SIGNER_CERT.to_string(), signer.cert.pem.clone());
    data.insert(SIGNER_KEY.to_string(), signer.key.clone());
    if let Some(next) = &next {
        data.insert(NEXT_CERT.to_string(), next.cert.pem.clone());
        data.insert(NEXT_KEY.to_string(), next.key.clone());
    }
    if let Some(previous) = &previous {
        data.insert(PREVIOUS_CERT.to_string(), previous.pem.clone());
    }
    data.insert(CERT.to_string(), cert);
    data.insert(KEY.to_string(), key);
    let wanted = Contents { data, published_at };
    if wanted == *current {
        return Ok(Step::Keep);
    }
    if reasons.is_empty() {
        reasons.push("trust bundle or keys out of date");
    }
    Ok(Step::Write {
        contents: wanted,
        reasons,
    })
}

/// The serving pair in `contents` if the apiserver will accept it at `now`: a certificate (not
/// a CA) signed by the stored signing CA, which the stored bundle carries, with exactly the
/// expected names, valid now, and its key. A replica serves nothing else, whoever wrote it.
pub fn serving_pair(
    contents: &BTreeMap<String, String>,
    settings: &Settings,
    now: OffsetDateTime,
) -> Option<(String, String)> {
    let cert = contents.get(CERT)?;
    let key = contents.get(KEY)?;
    let parsed = parse_one(cert)?;
    let signer = parse_one(contents.get(SIGNER_CERT)?)?;
    let bundle = valid_bundle(contents.get(BUNDLE), now);
    let accepted = !parsed.is_ca
        && valid_at(&parsed, now)
        && signer.is_ca
        && bundle_has(&bundle, &signer)
        && signed_by(&parsed, &signer)
        && names_of(&parsed) == expected_names(&settings.names)
        && key_matches(&parsed, key);
    accepted.then(|| (cert.clone(), key.clone()))
}

fn grace(settings: &Settings) -> time::Duration {
    time::Duration::try_from(settings.grace).unwrap_or(time::Duration::MAX)
}

/// Back-dating of new certificates, for clock skew between nodes.
const BACKDATE: time::Duration = time::Duration::minutes(5);

fn fresh_ca(now: OffsetDateTime, settings: &Settings) -> Result<Ca, CertError> {
    let CaPem { cert, key } = new_ca(now - BACKDATE, now + settings.ca_lifetime)?;
    let parsed = parse_one(&cert).ok_or(CertError::Unparsable)?;
    Ok(Ca { cert: parsed, key })
}

fn remaining(cert: &Parsed, now: OffsetDateTime) -> Duration {
    let left = cert.not_after - now;
    Duration::try_from(left).unwrap_or(Duration::ZERO)
}

/// The CA stored under `cert`/`key` if it parses, is a CA, is valid at `now` and its key
/// matches.
fn ca(contents: &Contents, cert: &str, key: &str, now: OffsetDateTime) -> Option<Ca> {
    let parsed = parse_one(contents.data.get(cert)?)?;
    let key = contents.data.get(key)?;
    let usable = parsed.is_ca && valid_at(&parsed, now) && key_matches(&parsed, key);
    usable.then(|| Ca {
        cert: parsed,
        key: key.clone(),
    })
}

/// The stored serving pair if it is still right: signed by `signer`, the expected names,
/// its key, valid now and not near expiry.
fn leaf(
    contents: &Contents,
    signer: &Ca,
    now: OffsetDateTime,
    settings: &Settings,
) -> Option<(String, String)> {
    let pem = contents.data.get(CERT)?;
    let key = contents.data.get(KEY)?;
    let parsed = parse_one(pem)?;
    // Capped at the signer's expiry, a certificate cannot be renewed into a longer one until
    // the CA rotates: reissuing it would only rewrite the Secret every interval.
    let capped = parsed.not_after >= signer.cert.not_after;
    let fresh = (remaining(&parsed, now) >= settings.cert_lifetime / 3 || capped)
        && !longer_than(&parsed, settings.cert_lifetime);
    let right = valid_at(&parsed, now)
        && fresh
        && key_matches(&parsed, key)
        && signed_by(&parsed, &signer.cert)
        && names_of(&parsed) == expected_names(&settings.names);
    right.then(|| (pem.clone(), key.clone()))
}

/// Whether `cert` lasts longer than `lifetime` (plus back-dating and a minute's slack): the
/// lifetime was shortened since it was issued, and a shorter one takes effect at once.
fn longer_than(cert: &Parsed, lifetime: Duration) -> bool {
    let span = cert.not_after - cert.not_before;
    span > BACKDATE + time::Duration::minutes(1) + lifetime
}

fn valid_at(cert: &Parsed, now: OffsetDateTime) -> bool {
    cert.not_before <= now && now < cert.not_after
}

/// The bundle's certificates that parse, are CAs and have not expired.
fn valid_bundle(pem: Option<&String>, now: OffsetDateTime) -> Vec<Parsed> {
    let Some(pem) = pem.filter(|p| p.len() <= MAX_VALUE) else {
        return Vec::new();
    };
    Pem::iter_from_buffer(pem.as_bytes())
        .take(16)
        .filter_map(Result::ok)
        .filter_map(|block| parsed_from_der(block.contents))
        .filter(|c| c.is_ca && now < c.not_after)
        .collect()
}

fn bundle_has(bundle: &[Parsed], cert: &Parsed) -> bool {
    bundle.iter().any(|c| c.der == cert.der)
}

/// The signing CA, the next one and the previous one (the CAs pinhook issued and still
/// needs), oldest first.
fn compose_bundle(signer: &Ca, next: Option<&Ca>, previous: Option<&Parsed>) -> String {
    let mut keep: Vec<&Parsed> = vec![&signer.cert];
    keep.extend(next.map(|n| &n.cert));
    keep.extend(previous.filter(|p| keep.iter().all(|k| k.der != p.der)));
    keep.sort_by_key(|c| (c.not_before, c.der.clone()));
    keep.iter()
        .map(|c| c.pem.as_str())
        .collect::<Vec<_>>()
        .concat()
}

fn parse_one(pem: &str) -> Option<Parsed> {
    if pem.len() > MAX_VALUE {
        return None;
    }
    let block = Pem::iter_from_buffer(pem.as_bytes()).next()?.ok()?;
    parsed_from_der(block.contents)
}

fn parsed_from_der(der: Vec<u8>) -> Option<Parsed> {
    let (rest, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let not_before =
        OffsetDateTime::from_unix_timestamp(cert.validity().not_before.timestamp()).ok()?;
    let not_after =
        OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp()).ok()?;
    let is_ca = cert.is_ca();
    let pem = to_pem(&der);
    Some(Parsed {
        pem,
        der,
        not_before,
        not_after,
        is_ca,
    })
}

fn to_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn key_matches(cert: &Parsed, key_pem: &str) -> bool {
    if key_pem.len() > MAX_VALUE {
        return false;
    }
    let Ok(key) = rcgen::KeyPair::from_pem(key_pem) else {
        return false;
    };
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(&cert.der) else {
        return false;
    };
    use rcgen::PublicKeyData as _;
    parsed.public_key().raw == key.subject_public_key_info().as_slice()
}

fn signed_by(cert: &Parsed, ca: &Parsed) -> bool {
    let (Ok((_, leaf)), Ok((_, ca))) = (
        x509_parser::parse_x509_certificate(&cert.der),
        x509_parser::parse_x509_certificate(&ca.der),
    ) else {
        return false;
    };
    leaf.issuer() == ca.subject() && leaf.verify_signature(Some(ca.public_key())).is_ok()
}

fn names_of(cert: &Parsed) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(&cert.der) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    let mut names: Vec<String> = san
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_string()),
            GeneralName::IPAddress(bytes) => ip_of(bytes).map(|ip| ip.to_string()),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn ip_of(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

fn expected_names(names: &[String]) -> Vec<String> {
    let mut names: Vec<String> = names
        .iter()
        .map(|n| match n.parse::<IpAddr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => n.clone(),
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests;
