//! A keyless signature layer as a hostile registry could serve it (issue 46): the input's first
//! byte chooses which of a valid layer's parts (payload, signature, certificate, chain, bundle)
//! are replaced, and the rest, split on 0xFF bytes, replaces them in that order; with bit 6 set,
//! the rest is a cosign 3 Sigstore bundle instead (a valid one when empty). The layer is
//! judged under a trust of one key and one keyless identity of the tests' own Sigstore
//! (`tests/common/sigstore_authority.rs`): never a panic, never `verified` for a layer whose
//! parts were replaced (only the untouched valid layer verifies), and every verdict on one line.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use pinhook::reference::Digest;
use pinhook::signatures::simple_signing::payload_for;
use pinhook::signatures::{
    judge, judge_all, Identity, Keyless, Matcher, SignatureLayer, Trust, TrustedRoot, Verdict,
};

// A part of it: the fixture needs no second CA.
#[allow(dead_code)]
#[path = "../../tests/common/sigstore_authority.rs"]
mod sigstore_authority;

const ISSUER: &str = "https://issuer.example";
const SUBJECT: &str = "https://ci.example/release@refs/tags/v1";

struct Fixture {
    trust: Trust,
    digest: Digest,
    payload: Vec<u8>,
    made: sigstore_authority::KeylessSignature,
    bundle: String,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let sigstore = sigstore_authority::TestSigstore::new();
        let root = TrustedRoot::parse(sigstore.trusted_root().as_bytes()).expect("test root");
        let identity = Identity {
            issuer: Matcher::Exact(ISSUER.to_string()),
            subject: Matcher::pattern("^https://ci\\.example/").expect("pattern"),
        };
        let trust = Trust::new(Vec::new(), Some(Keyless::new(Arc::new(root), vec![identity])));
        let digest = Digest::sha256_of(b"fuzz");
        let payload = payload_for("registry.example/team/app", &digest);
        let made = sigstore.sign(&payload, ISSUER, SUBJECT);
        let statement = sigstore_authority::statement("registry.example/team/app", &digest.to_string());
        let bundle = sigstore.keyless_bundle(&statement, ISSUER, SUBJECT);
        Fixture {
            bundle,
            trust,
            digest,
            payload,
            made,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let fixture = fixture();
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    if choice & 64 != 0 {
        let bundle = if rest.is_empty() { fixture.bundle.as_bytes() } else { rest };
        let verdict = judge_all(&[], &[bundle], &fixture.trust, &fixture.digest);
        assert!(!verdict.describe().contains('\n'), "{verdict:?}");
        // Only the fixture's own signature verifies: no other can be made without its key.
        if let Verdict::Verified { .. } = verdict {
            assert_eq!(signatures(bundle), signatures(fixture.bundle.as_bytes()), "{verdict:?}");
        }
        return;
    }
    let mut parts = rest.split(|&b| b == 0xFF);
    let mut next = |replace: bool, valid: &[u8]| -> Vec<u8> {
        match (replace, parts.next()) {
            (true, Some(part)) => part.to_vec(),
            _ => valid.to_vec(),
        }
    };
    let made = &fixture.made;
    let payload = next(choice & 1 != 0, &fixture.payload);
    let signature = next(choice & 2 != 0, made.signature.as_bytes());
    let certificate = next(choice & 4 != 0, made.certificate.as_bytes());
    let chain = next(choice & 8 != 0, made.chain.as_bytes());
    let bundle = next(choice & 16 != 0, made.bundle.as_bytes());
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let (signature, certificate, chain, bundle) =
        (text(&signature), text(&certificate), text(&chain), text(&bundle));
    let layer = SignatureLayer {
        payload: &payload,
        signature: &signature,
        certificate: Some(&certificate),
        chain: (choice & 32 == 0).then_some(chain.as_str()),
        bundle: Some(&bundle),
    };
    let verdict = judge(&[layer], &fixture.trust, &fixture.digest);
    assert!(!verdict.describe().contains('\n'), "{verdict:?}");
    let untouched = payload == fixture.payload
        && signature == made.signature
        && certificate == made.certificate
        && bundle == made.bundle;
    if let Verdict::Verified { .. } = verdict {
        assert!(untouched, "a layer whose parts were replaced verified: {verdict:?}");
    }
});

/// The decoded signatures of a bundle's DSSE envelope.
fn signatures(bundle: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let value: serde_json::Value = serde_json::from_slice(bundle).unwrap_or_default();
    value["dsseEnvelope"]["signatures"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|s| s["sig"].as_str())
                .filter_map(|s| base64::engine::general_purpose::STANDARD.decode(s.trim()).ok())
                .collect()
        })
        .unwrap_or_default()
}
