//! An AdmissionReview body as the apiserver (or anyone who reaches the webhook port) sends it:
//! `parse_review`, then the pure planning of `/mutate` and `/validate` under every fuzz policy
//! and a mode taken from the input, the rendered AdmissionResponse, and the patch applied.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinhook::admission::{budget_from_timeout, parse_review};

fuzz_target!(|data: &[u8]| {
    match parse_review(data) {
        Ok(request) => {
            let _ = request.is_dry_run();
            pinhook_fuzz::admit_request(&request, pinhook_fuzz::hash(data));
            let _ = budget_from_timeout(Some(&request.uid));
        }
        Err(e) => {
            let _ = pinhook::error::error_chain(&e);
        }
    }
});
