//! The policy file (`--policy`, reloaded when its ConfigMap changes): `Policy::parse` (YAML via
//! serde-saphyr, then validation), and, for a policy that loads, every question the server asks
//! of it: exemptions, modes, host rules, the mirror allow list, `registries.resolveThrough`
//! routes (each mirror reference written must parse again), and the planning of a few fixed
//! objects plus one object of every extra kind it declares, built at its `podSpec` pointer.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use pinhook::admission::plan::Object;
use pinhook::policy::{Mode, Policy};
use pinhook::reference::Reference;
use serde_json::{json, Value};

const IMAGES: [&str; 4] = [
    "nginx:1.27",
    "registry.k8s.io/pause:3.9",
    "BAD.corp.example:443/x:1",
    "quay.io/org/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
];
const HOSTS: [&str; 6] = [
    "docker.io",
    "bad.corp.example:443",
    "127.0.0.1:5000",
    "[::1]",
    "metadata.google.internal",
    "10.0.0.1",
];

fn pod_spec() -> Value {
    json!({"containers": [{"name": "app", "image": "nginx:1.27"},
                          {"name": "side", "image": "registry.k8s.io/pause:3.9"}]})
}

/// An object with `value` at the JSON pointer `pointer` (objects created on the way).
fn object_at(group: &str, kind: &str, pointer: &str, value: Value) -> Value {
    let api_version = match group {
        "" => "v1".to_string(),
        group => format!("{group}/v1"),
    };
    let mut object = json!({"apiVersion": api_version, "kind": kind,
                            "metadata": {"name": "x", "namespace": "default"}});
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut slot = &mut object;
    for token in tokens.iter().take(16) {
        if !slot.is_object() {
            return object;
        }
        slot = slot
            .as_object_mut()
            .expect("checked")
            .entry(token.clone())
            .or_insert_with(|| json!({}));
    }
    *slot = value;
    object
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let compiled = match Policy::parse(text) {
        Ok(compiled) => compiled,
        Err(e) => {
            let _ = pinhook::error::error_chain(&e);
            return;
        }
    };
    let _ = compiled.form();
    for namespace in ["default", "kube-system", ""] {
        let _ = compiled.is_exempt_namespace(namespace);
    }
    for label in [None, Some("audit"), Some("enforce"), Some("Off"), Some("")] {
        let _ = compiled.mode_for(label);
    }
    for image in IMAGES {
        let reference = Reference::parse(image).expect("fixed images parse");
        let _ = compiled.is_exempt_image(&reference);
        // registries.resolveThrough: every mirror reference a route writes must parse again.
        if let Some(route) = compiled.routes.route(&reference) {
            for mirror in &route.mirrors {
                let text = mirror.reference.to_string();
                Reference::parse(&text).expect("a routed reference parses");
                let _ = pinhook::policy::Routes::suggestion(&route.source, &mirror.location);
            }
        }
    }
    let loopback: IpAddr = "127.0.0.1".parse().expect("literal");
    for host in HOSTS {
        let _ = compiled.hosts.check_host(host);
        let _ = compiled.hosts.check_address(host, loopback);
        let _ = compiled.hosts.check_resolved(host, loopback);
        let _ = compiled.hosts.internal_only().check_host(host);
    }
    let mirrors = &compiled.policy.mirrors;
    let _ = mirrors.registries_conf_key();
    let _ = mirrors.allows("registry.corp.example/team/", "mirror.corp.example/team");

    let mut objects = vec![
        (
            "",
            "Pod".to_string(),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "namespace": "default"}, "spec": pod_spec()}),
        ),
        (
            "",
            "ConfigMap".to_string(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "registries", "namespace": "kube-system"},
                   "data": {"registries.conf":
                            "[[registry]]\nlocation = \"registry.corp.example/team\"\n[[registry.mirror]]\nlocation = \"mirror.corp.example/team\"\n"}}),
        ),
    ];
    for extra in compiled.policy.kinds.iter().take(8) {
        let _ = compiled.kinds.pod_spec_pointer(&extra.group, &extra.kind);
        let object = object_at(&extra.group, &extra.kind, &extra.pod_spec, pod_spec());
        objects.push((extra.group.as_str(), extra.kind.clone(), object));
    }
    for (i, (group, kind, object)) in objects.iter().enumerate() {
        let view = Object {
            group,
            kind,
            subresource: "",
            namespace: "default",
            object,
            old_object: None,
            user: "",
        };
        let mode = match i % 2 {
            0 => compiled.policy.mode,
            _ => Mode::Enforce,
        };
        pinhook_fuzz::admit(&compiled, "fuzz", view, mode);
    }
});
