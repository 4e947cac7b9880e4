//! A containerd `hosts.toml` carried in a ConfigMap (issue 17 item 3): the input is split into
//! files at `#=== <key>` lines (the text before the first is `hosts.toml`; a key ending in
//! `.b64` goes into `binaryData`), and the ConfigMap is judged by the mirror guard under three
//! mirror policies. The hosts.toml reader (`mirror_guard/hosts_toml.rs`) is private; this is
//! its public entry.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let files = pinhook_fuzz::split_files(&text, "hosts.toml");
    let object = pinhook_fuzz::config_map("ns", "containerd-hosts", &files);
    pinhook_fuzz::judge_config_map(&object);
});
