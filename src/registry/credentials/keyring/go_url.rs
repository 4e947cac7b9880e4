//! Go's `net/url.Parse` (for `http(s)://` input) and `net.SplitHostPort`, reduced to what kubelet
//! reads from them: a keyring key or an image name becomes a host (with port, brackets kept) and
//! a decoded path, and a host splits into name and port. Where Go returns an error these return
//! `None`, because kubelet then ignores the key.
//!
//! Pure: no I/O; works on bytes, since Go strings are bytes and percent-decoding may leave
//! non-UTF-8.

use std::net::Ipv6Addr;

/// The two fields of a Go `*url.URL` kubelet reads: `Host` (with port, brackets kept) and the
/// decoded `Path`. Bytes, because Go strings are bytes and percent-decoding may leave non-UTF-8.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct GoUrl {
    pub(super) host: Vec<u8>,
    pub(super) path: Vec<u8>,
}

// === Go's net/url.Parse, for "http(s)://..." input ===

#[derive(Clone, Copy, PartialEq, Eq)]
enum Escaping {
    Path,
    Host,
    Zone,
    UserPassword,
    Fragment,
}

/// Go's `url.Parse` for input starting `https://` or `http://` (all kubelet ever gives it here),
/// reduced to the `Host` and `Path` it returns; `None` where Go returns an error.
pub(super) fn parse_go_url(raw: &[u8]) -> Option<GoUrl> {
    // The scheme (validated by the prefix) has no '#', '?' or control byte, so it can go first.
    let rest = raw
        .strip_prefix(b"https://")
        .or_else(|| raw.strip_prefix(b"http://"))?;
    let (url, fragment) = cut(rest, b'#');
    if url.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return None;
    }
    let (url, _query) = cut(url, b'?');
    let (authority, path) = match url.iter().position(|&b| b == b'/') {
        Some(i) => url.split_at(i),
        None => (url, &b""[..]),
    };
    let host = parse_authority(authority)?;
    let path = unescape(path, Escaping::Path)?;
    if let Some(fragment) = fragment {
        unescape(fragment, Escaping::Fragment)?;
    }
    Some(GoUrl { host, path })
}

/// `parseAuthority`: the host after the last `@`; the userinfo before it must still be valid.
fn parse_authority(authority: &[u8]) -> Option<Vec<u8>> {
    let Some(at) = authority.iter().rposition(|&b| b == b'@') else {
        return parse_host(authority);
    };
    let host = parse_host(&authority[at + 1..])?;
    let userinfo = &authority[..at];
    if !userinfo
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b))
    {
        return None;
    }
    let (username, password) = cut(userinfo, b':');
    unescape(username, Escaping::UserPassword)?;
    if let Some(password) = password {
        unescape(password, Escaping::UserPassword)?;
    }
    Some(host)
}

/// `parseHost`: `host[:port]`, the host a name or a bracketed IPv6 literal with optional zone.
fn parse_host(host: &[u8]) -> Option<Vec<u8>> {
    if host.first() == Some(&b'[') {
        let close = host.iter().rposition(|&b| b == b']')?;
        if !valid_optional_port(&host[close + 1..]) {
            return None;
        }
        let zone = find(&host[..close], b"%25");
        // Since the CVE-2025-47912 fix (Go 1.24.8, 1.25.2) only an IPv6 address may be bracketed.
        let address = &host[1..zone.unwrap_or(close).max(1)];
        std::str::from_utf8(address)
            .ok()?
            .parse::<Ipv6Addr>()
            .ok()?;
        if let Some(zone) = zone {
            let mut decoded = unescape(&host[..zone], Escaping::Host)?;
            decoded.extend(unescape(&host[zone..close], Escaping::Zone)?);
            decoded.extend(unescape(&host[close..], Escaping::Host)?);
            return Some(decoded);
        }
    } else if let Some(colon) = host.iter().rposition(|&b| b == b':') {
        if !valid_optional_port(&host[colon..]) {
            return None;
        }
    }
    unescape(host, Escaping::Host)
}

/// `validOptionalPort`: empty, or `:` followed by digits only (possibly none).
fn valid_optional_port(port: &[u8]) -> bool {
    match port.split_first() {
        None => true,
        Some((&b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

/// Go's `unescape`: checks every `%XX` (and, in a host, every byte), then decodes.
fn unescape(s: &[u8], mode: Escaping) -> Option<Vec<u8>> {
    let host_like = matches!(mode, Escaping::Host | Escaping::Zone);
    let mut decoded = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b == b'%' {
            let (hi, lo) = match (s.get(i + 1), s.get(i + 2)) {
                (Some(&hi), Some(&lo)) => (unhex(hi)?, unhex(lo)?),
                _ => return None,
            };
            let is_25 = &s[i..i + 3] == b"%25";
            // In a host only non-ASCII bytes (and `%25`) may be escaped.
            if mode == Escaping::Host && hi < 8 && !is_25 {
                return None;
            }
            let value = (hi << 4) | lo;
            if mode == Escaping::Zone && !is_25 && value != b' ' && should_escape_in_host(value) {
                return None;
            }
            decoded.push(value);
            i += 3;
        } else {
            if host_like && b != b'+' && b < 0x80 && should_escape_in_host(b) {
                return None;
            }
            decoded.push(b);
            i += 1;
        }
    }
    Some(decoded)
}

/// Go's `shouldEscape(c, encodeHost)`: true for an ASCII byte a host may not hold as it is.
fn should_escape_in_host(c: u8) -> bool {
    !(c.is_ascii_alphanumeric() || b"!$&'()*+,;=:[]<>\"-_.~".contains(&c))
}

fn unhex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `strings.Cut` on one byte.
pub(super) fn cut(s: &[u8], separator: u8) -> (&[u8], Option<&[u8]>) {
    match s.iter().position(|&b| b == separator) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// === Go's net.SplitHostPort ===

/// `net.SplitHostPort`: `None` where Go returns an error (no port, misplaced brackets, a colon
/// in an unbracketed host). Brackets around the host are removed.
pub(super) fn go_split_host_port(hostport: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = hostport.iter().rposition(|&b| b == b':')?;
    let (host, open_from, close_from) = if hostport.first() == Some(&b'[') {
        let end = hostport.iter().position(|&b| b == b']')?;
        if end + 1 != colon {
            // Either nothing follows `]`, or something other than the last colon does.
            return None;
        }
        (&hostport[1..end], 1, end + 1)
    } else {
        let host = &hostport[..colon];
        if host.contains(&b':') {
            return None;
        }
        (host, 0, 0)
    };
    if hostport[open_from..].contains(&b'[') || hostport[close_from..].contains(&b']') {
        return None;
    }
    Some((host, &hostport[colon + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("reg.io:5000", Some(("reg.io", "5000")))]
    #[case("reg.io:", Some(("reg.io", "")))]
    #[case("[::1]:5000", Some(("::1", "5000")))]
    #[case("reg.io", None)]
    #[case("[::1]", None)]
    #[case("a:b:c", None)]
    #[case("[::1]x:5000", None)]
    #[case("a.[b]:5000", None)]
    fn split_host_port(#[case] hostport: &str, #[case] expected: Option<(&str, &str)>) {
        let expected = expected.map(|(host, port)| (host.as_bytes(), port.as_bytes()));
        assert_eq!(go_split_host_port(hostport.as_bytes()), expected);
    }
}
