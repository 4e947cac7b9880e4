//! kubelet's credential key matching on arbitrary keys and images: the first line of the input
//! is a docker config key (`*.example.com:5000/team`, `https://index.docker.io/v1/`), every
//! further line an image. The key is added to a keyring beside a few fixed ones and each image
//! that parses is looked up, which runs pinhook's ports of Go's `url.Parse` and
//! `filepath.Match` on both.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinhook::reference::Reference;
use pinhook::registry::keyring::Keyring;
use pinhook::registry::Credential;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let key = lines.next().unwrap_or_default();
    let mut keyring = Keyring::new();
    keyring.add("https://index.docker.io/v1/", Credential::basic("hub", "p"));
    keyring.add("*.example.com", Credential::basic("wild", "p"));
    keyring.add(key, Credential::basic("fuzz", "p"));
    keyring.add(key, Credential::identity_token("t"));
    let mut other = Keyring::new();
    other.add(
        key.trim_start_matches("https://"),
        Credential::basic("other", "p"),
    );
    keyring.merge(other);
    for image in lines.take(8) {
        if let Ok(reference) = Reference::parse(image) {
            let _ = keyring.lookup(&reference);
        }
    }
    if let Ok(reference) = Reference::parse(key) {
        let _ = keyring.lookup(&reference);
    }
});
