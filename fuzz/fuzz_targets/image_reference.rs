//! An image reference as written in a pod spec (`containers[].image`): `Reference::parse`,
//! `Digest` parsing, the pinned rendering, the policy's exemption globs and host rules.
//!
//! Invariants checked (each holds by the reference grammar and the host rules' documented
//! normalisation):
//! - a reference that parses re-parses from its `Display` (the normalised form) to the same
//!   domain, path, tag and digest, and prints the same again;
//! - the pinned form of a parsed reference parses, with the same repository, the effective tag
//!   and the pinning digest;
//! - the deny list does not depend on the host's case or on an explicit `:443` (issue 10).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinhook::policy::hosts::{host_without_port, normalize_host, same_host, HostRefusal};
use pinhook::reference::{Digest, PinForm, Reference};

fn same(a: &Reference, b: &Reference) -> bool {
    a.domain() == b.domain()
        && a.path() == b.path()
        && a.tag() == b.tag()
        && a.digest() == b.digest()
}

fn denied(rules: &pinhook::policy::HostRules, host: &str) -> bool {
    matches!(rules.check_host(host), Err(HostRefusal::Denied { .. }))
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = text.parse::<Digest>();
    let _ = normalize_host(&text);
    let _ = host_without_port(&text);
    let Ok(reference) = Reference::parse(&text) else {
        return;
    };
    let shown = reference.to_string();
    let again = Reference::parse(&shown)
        .unwrap_or_else(|e| panic!("{text:?} parsed, its display {shown:?} does not: {e}"));
    assert!(
        same(&reference, &again),
        "{text:?} -> {shown:?} -> {again:?}"
    );
    assert_eq!(again.to_string(), shown);

    let digest = Digest::sha256_of(data);
    for form in [PinForm::TagAndDigest, PinForm::DigestOnly] {
        let pinned = reference.pinned(&digest, form);
        let parsed = Reference::parse(&pinned)
            .unwrap_or_else(|e| panic!("{text:?} pinned as {pinned:?} does not parse: {e}"));
        assert_eq!(parsed.repository(), reference.repository(), "{pinned:?}");
        assert_eq!(parsed.digest(), Some(&digest), "{pinned:?}");
        if form == PinForm::TagAndDigest {
            assert_eq!(parsed.tag(), Some(reference.effective_tag()), "{pinned:?}");
        }
    }
    let _ = Reference::parse(&reference.tag_reference());

    let domain = reference.domain();
    assert!(same_host(domain, &normalize_host(domain)), "{domain:?}");
    for policy in pinhook_fuzz::policies() {
        let _ = policy.is_exempt_image(&reference);
        let _ = policy.hosts.check_host(domain);
        let _ = policy.hosts.internal_only().check_host(domain);
        let rules = &policy.hosts;
        let upper = domain.to_ascii_uppercase();
        assert_eq!(
            denied(rules, domain),
            denied(rules, &upper),
            "{domain:?} vs {upper:?}"
        );
        if !domain.ends_with(']') && !domain.contains(':') {
            let with_port = format!("{domain}:443");
            assert_eq!(
                denied(rules, domain),
                denied(rules, &with_port),
                "{domain:?}:443"
            );
        }
    }
});
