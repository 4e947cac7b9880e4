//! A registries.conf as a ConfigMap carries it to CRI-O / podman nodes (issue 17): the input is
//! split into files at `#=== <key>` lines (the text before the first is `registries.conf`, the
//! main file; every other key is judged as a `registries.conf.d` drop-in when shaped like one;
//! a key ending in `.b64` goes into `binaryData`, base64), and the ConfigMap is judged by the
//! mirror guard (`mirror_guard::review`) under three mirror policies. The registries.conf
//! reader itself (`mirror_guard/registries_conf`) is private; this is its public entry.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let files = pinhook_fuzz::split_files(&text, "registries.conf");
    let object = pinhook_fuzz::config_map("ns", "registries", &files);
    pinhook_fuzz::judge_config_map(&object);
});
