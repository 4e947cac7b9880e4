//! What a kubelet credential provider plugin prints (`CredentialProviderResponse`), read as
//! pinhook reads it (`pinhook::registry::provider::parse_response`), for each apiVersion
//! kubelet knows.
//!
//! Invariant: an error never quotes the answer (a plugin's output may hold a credential): no
//! quoted alphanumeric run of 12 or more characters from the input appears in the error text,
//! unless it is the protocol's own vocabulary (the kind, the apiVersions), which the errors
//! name on their own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinhook::registry::provider::parse_response;

const VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];

/// Every word pinhook's own error messages for an answer use (`ResponseError`).
const MESSAGES: &str = "the answer is not a JSON object with apiVersion and kind; the answer's \
    apiVersion is not the configured; the answer's kind is not CredentialProviderResponse; the \
    answer does not decode as a CredentialProviderResponse; the answer's cacheDuration is not a \
    non-negative Go duration";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        for version in VERSIONS {
            let _ = parse_response(data, version);
        }
        return;
    };
    let vocabulary =
        |part: &str| VERSIONS.iter().any(|v| v.contains(part)) || MESSAGES.contains(part);
    let secrets: Vec<&str> = text
        .split('"')
        .filter(|part| part.len() >= 12 && part.chars().all(|c| c.is_ascii_alphanumeric()))
        .filter(|part| !vocabulary(part))
        .collect();
    for version in VERSIONS {
        if let Err(e) = parse_response(data, version) {
            let message = e.to_string();
            for secret in &secrets {
                assert!(
                    !message.contains(secret),
                    "the error quotes the answer: {message}"
                );
            }
        }
    }
});
