//! Manifests as `pinhook check` and `POST /v1/dry-run` read them (`documents::parse`:
//! multi-document YAML, a JSON object or array, a `v1/List`), then each object planned as the
//! dry run plans it: its identity (`dry_run::Identity`), the mutation under every fuzz policy,
//! the patch applied, the patched object validated.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinhook::admission::dry_run::{action_name, Identity};
use pinhook::admission::plan::Object;
use pinhook::admission::Action;
use pinhook::documents::{array_position, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let seed = pinhook_fuzz::hash(data);
    let _ = action_name(Action::Pinned);
    for document in parse(text, Some("fuzz.yaml")).iter().take(16) {
        let _ = array_position(&document.index);
        let Ok(object) = &document.object else {
            continue;
        };
        let Ok(identity) = Identity::of(object, "default") else {
            continue;
        };
        for (i, policy) in pinhook_fuzz::policies().iter().enumerate() {
            let _ = identity.access(policy);
            let _ = identity.resource(policy);
            let view = Object {
                group: &identity.group,
                kind: &identity.kind,
                subresource: "",
                namespace: &identity.namespace,
                object,
                old_object: None,
                user: "",
            };
            let mode = pinhook_fuzz::mode_of(seed.wrapping_add(i as u64));
            pinhook_fuzz::admit(policy, "check", view, mode);
        }
    }
});
