//! The `?timeout=` the apiserver appends to every webhook call (a Go duration: `10s`, `1m0s`,
//! `500ms`), parsed into the resolution budget (`admission::budget_from_timeout`).
//!
//! Invariant (documented in `admission/mod.rs`): the budget is never below 250 ms nor above
//! the apiserver's 30 s maximum, whatever the text.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use pinhook::admission::budget_from_timeout;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let budget = budget_from_timeout(Some(&text));
    assert!(
        budget >= Duration::from_millis(250),
        "{text:?} -> {budget:?}"
    );
    assert!(budget <= Duration::from_secs(30), "{text:?} -> {budget:?}");
});
