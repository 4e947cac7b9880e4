//! Pull credentials as pinhook reads them: a docker `config.json` (`--docker-config`, a node's
//! `/var/lib/kubelet/config.json`), and the data of `kubernetes.io/dockerconfigjson` and
//! `kubernetes.io/dockercfg` pull secrets (already base64-decoded, as the API client hands them
//! over). Each keyring that loads is then looked up for a few images, which runs kubelet's key
//! matching (Go URL parsing and `filepath.Match` globs) on the keys the input wrote.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use pinhook::reference::Reference;
use pinhook::registry::docker_helpers::read_docker_config;
use pinhook::registry::keyring::{
    Keyring, KeyringError, DOCKERCFG_KEY, DOCKER_CONFIG_JSON_KEY, SECRET_TYPE_DOCKERCFG,
    SECRET_TYPE_DOCKER_CONFIG_JSON,
};

const IMAGES: [&str; 5] = [
    "nginx",
    "quay.io/org/app:1",
    "registry.example:5000/team/app",
    "sub.registry.example/x/y/z",
    "[::1]:5000/app",
];

fn exercise(result: Result<Keyring, KeyringError>, all: &mut Keyring) {
    match result {
        Ok(keyring) => {
            let _ = keyring.is_empty();
            for image in IMAGES {
                let reference = Reference::parse(image).expect("fixed images parse");
                for credential in keyring.lookup(&reference) {
                    let _ = credential.fingerprint();
                }
            }
            all.merge(keyring);
        }
        Err(e) => {
            let _ = e.fails_the_pull();
            let _ = pinhook::error::error_chain(&e);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut all = Keyring::new();
    exercise(Keyring::from_docker_config_json(data), &mut all);
    exercise(read_docker_config(data), &mut all);
    for (secret_type, key) in [
        (SECRET_TYPE_DOCKER_CONFIG_JSON, DOCKER_CONFIG_JSON_KEY),
        (SECRET_TYPE_DOCKERCFG, DOCKERCFG_KEY),
    ] {
        let data = BTreeMap::from([(key.to_string(), data.to_vec())]);
        exercise(Keyring::from_secret(secret_type, &data), &mut all);
    }
    let reference = Reference::parse("docker.io/library/nginx").expect("fixed image parses");
    let _ = all.lookup(&reference);
});
