//! `WWW-Authenticate` challenges as a registry sends them with a 401
//! (`pinhook::registry::Bearer::parse`): the scheme, `realm`, `service` and `scope`, quoted or
//! not, in any order and case.
//!
//! Invariant: a parsed challenge's realm is never empty (the resolver sends credentials there).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinhook::registry::Bearer;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(bearer) = Bearer::parse(&text) {
        assert!(!bearer.realm.is_empty(), "{text:?} -> {bearer:?}");
    }
});
