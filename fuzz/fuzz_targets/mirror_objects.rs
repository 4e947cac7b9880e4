//! An object the mirror guard judges on `/validate` (ImageTagMirrorSet, ImageDigestMirrorSet,
//! ImageContentPolicy, ImageContentSourcePolicy, ConfigMap), as JSON: judged as each of the
//! five kinds, whatever its own `kind` says, under three mirror policies (one with Windows
//! nodes, which renders mirror sets as the Windows MCO's hosts.toml).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinhook::mirror_guard::resource_of;
use serde_json::Value;

const KINDS: [(&str, &str); 5] = [
    ("config.openshift.io", "ImageTagMirrorSet"),
    ("config.openshift.io", "ImageDigestMirrorSet"),
    ("config.openshift.io", "ImageContentPolicy"),
    ("operator.openshift.io", "ImageContentSourcePolicy"),
    ("", "ConfigMap"),
];

fuzz_target!(|data: &[u8]| {
    let Ok(object) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    for (group, kind) in KINDS {
        let _ = resource_of(group, kind);
        pinhook_fuzz::judge_mirrors(group, kind, &object);
    }
});
