//! Shared by pinhook's fuzz targets: a few fixed policies, stand-in registry answers derived
//! from the input (so the planning is deterministic), and the pure admission flow the server
//! runs on one object: plan the mutation, render the answer, apply the patch, then judge the
//! patched object as `/validate` would.
//!
//! Only pinhook's public API is used. The targets assert "no panic" plus a few invariants that
//! hold by construction (each is noted where it is checked).

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use pinhook::admission::plan::{self, Object, Resolutions};
use pinhook::admission::{render, review_body, target_of, AdmissionRequest, Plan};
use pinhook::policy::MirrorPolicy;
use pinhook::policy::{CompiledPolicy, Mode, Policy};
use pinhook::reference::{Digest, Reference};
use pinhook::registry::{Fingerprint, RegistryError, Resolution, ResolutionSource};
use serde_json::Value;

/// The policies every admission-shaped input is planned under: the default, and two that turn
/// on every switch the planning has (audit, `resolve: Always`, `target: pods`, digest form,
/// exemptions, an extra kind, host rules, mirror allow list, Windows nodes).
const POLICIES: [&str; 3] = [
    "",
    r#"
mode: audit
resolve: Always
target: pods
form: digest
onResolutionFailure: allow
exempt:
  images: ["registry.k8s.io/pause:*", "docker.io/library/busybox*"]
  namespaces: ["kube-*"]
registries:
  allow: ["*.corp.example", "docker.io", "quay.io"]
  deny: ["evil.corp.example"]
  allowPrivate: ["127.0.0.1:5000"]
  hosts:
    "plain.corp.example:5000":
      insecure: true
mirrors:
  configMapKey: registries.conf
  windowsNodes: true
  allow:
    - source: registry.corp.example/team
      mirror: mirror.corp.example/team
kinds:
  - group: argoproj.io
    kind: Rollout
    podSpec: /spec/template/spec
"#,
    r#"
mode: enforce
resolve: Always
exempt:
  images: ["*/pause*"]
registries:
  deny: ["bad.corp.example", "docker.io:443"]
mirrors:
  configMaps: ["kube-system/*", "*/registries"]
  configMapKeys: ["*.conf", "hosts.toml"]
kinds:
  - group: batch.example
    kind: CronThing
    podSpec: /spec/jobTemplate/spec/template/spec
    resource: cronthings
  - group: ""
    kind: Weird
    podSpec: /spec/~1odd~0/0
"#,
];

/// The compiled [`POLICIES`].
pub fn policies() -> &'static [CompiledPolicy] {
    static COMPILED: OnceLock<Vec<CompiledPolicy>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        POLICIES
            .iter()
            .map(|text| Policy::parse(text).expect("the fuzz policies are valid"))
            .collect()
    })
}

/// Mirror policies for the mirror guard targets: the default (every key of every ConfigMap),
/// one with an allow list and Windows nodes, one that narrows keys and names the main key.
pub fn mirror_policies() -> &'static [MirrorPolicy] {
    static POLICIES: OnceLock<Vec<MirrorPolicy>> = OnceLock::new();
    POLICIES.get_or_init(|| {
        let with_allow = serde_json::json!({
            "windowsNodes": true,
            "allow": [
                {"source": "registry.example/team", "mirror": "mirror.example/team"},
                {"source": "docker.io/library", "mirror": "mirror.example/library"},
                {"source": "registry.example", "mirror": "mirror.example"},
            ],
        });
        let narrow = serde_json::json!({
            "configMapKey": "main.conf",
            "configMaps": ["ns/*"],
            "configMapKeys": ["*.conf", "*hosts.toml"],
        });
        vec![
            MirrorPolicy::default(),
            serde_json::from_value(with_allow).expect("valid mirror policy"),
            serde_json::from_value(narrow).expect("valid mirror policy"),
        ]
    })
}

/// FNV-1a: a cheap, stable hash to derive choices from the input.
pub fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A mode chosen from the input, so that every mode is planned across the corpus.
pub fn mode_of(seed: u64) -> Mode {
    match seed % 3 {
        0 => Mode::Enforce,
        1 => Mode::Audit,
        _ => Mode::Off,
    }
}

/// Stand-in registry answers for `wanted`: pinned, cached, stale, moved, the same digest as
/// already written, or one of the failures a registry gives, chosen per tag by its hash.
pub fn fake_resolutions(wanted: &[&Reference]) -> Resolutions {
    let mut resolutions = Resolutions::new();
    for reference in wanted {
        let key = reference.tag_reference();
        let h = hash(key.as_bytes());
        let digest = Digest::sha256_of(key.as_bytes());
        let registry = reference.domain().to_string();
        let answer = match h % 10 {
            0..=3 => Ok(Resolution {
                digest,
                credential: Fingerprint::anonymous(),
                source: match (h >> 8) % 3 {
                    0 => ResolutionSource::Registry,
                    1 => ResolutionSource::Cache,
                    _ => ResolutionSource::Stale,
                },
                moved_from: ((h >> 12) % 2 == 0).then(|| Digest::sha256_of(b"before")),
                age: Duration::from_secs((h >> 16) % 100_000),
                origin: None,
                verified: None,
            }),
            4 | 5 => Ok(Resolution {
                // What `resolve: Always` compares against: the digest already written.
                digest: reference.digest().cloned().unwrap_or(digest),
                credential: Fingerprint::anonymous(),
                source: ResolutionSource::Registry,
                moved_from: None,
                age: Duration::ZERO,
                origin: None,
                verified: None,
            }),
            6 => Err(RegistryError::NotFound {
                repository: reference.repository(),
                tag: reference.effective_tag().to_string(),
            }),
            7 => Err(RegistryError::Unauthorized { registry }),
            8 => Err(RegistryError::Status {
                registry,
                status: 500,
                message: "internal\nerror \u{7}".to_string(),
            }),
            // Missing answer: counts as a failed resolution.
            _ => continue,
        };
        resolutions.insert(key, answer);
    }
    resolutions
}

/// Renders a plan as the server does and checks what must hold of every answer.
pub fn render_plan(uid: &str, plan: Plan) {
    let _ = plan.denial_message();
    for outcome in &plan.outcomes {
        let _ = outcome.describe();
        let _ = outcome.describe_short();
    }
    let decision = render::decide(uid, plan);
    // render.rs shapes every warning for the apiserver: at most 120 characters, no control
    // characters (a warning with a newline is silently dropped by the apiserver).
    for warning in &decision.response.warnings {
        assert!(
            warning.chars().count() <= 120,
            "warning too long: {warning:?}"
        );
        assert!(
            !warning.chars().any(char::is_control),
            "control character in warning: {warning:?}"
        );
    }
    let body = review_body(&decision.response).expect("a response always serialises");
    serde_json::from_slice::<Value>(&body).expect("the response is JSON");
}

/// The whole pure admission flow on one object under one policy and mode: `/mutate`'s plan,
/// its rendered answer and patch, then `/validate`'s judgement of the object as patched.
pub fn admit(policy: &CompiledPolicy, uid: &str, object: Object<'_>, mode: Mode) {
    let mutation = plan::mutation(policy, object);
    let _ = mutation.reads_mode();
    let mut patched = None;
    match mutation.triage(mode) {
        Ok(triaged) => {
            let wanted = triaged.wanted();
            let resolutions = fake_resolutions(&wanted);
            let plan = triaged
                .finish(&resolutions, vec!["pinhook: fuzz warning".to_string()])
                .with_refused_pull_secrets(vec!["pull secret \"x\" is not JSON".to_string()]);
            if let Ok(patch) = plan.patch() {
                let mut value = object.object.clone();
                // Every patch pinhook answers with was computed from this very object, so it
                // must apply to it: the apiserver rejects the request otherwise.
                if let Err(e) = json_patch::patch(&mut value, &patch) {
                    panic!("pinhook's own patch does not apply: {e}: {patch:?}");
                }
                patched = Some(value);
            }
            render_plan(uid, plan);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    let judged = patched.as_ref().unwrap_or(object.object);
    let validation = plan::validation(
        policy,
        Object {
            object: judged,
            ..object
        },
    );
    let _ = validation.reads_mode();
    match validation.finish(mode, Vec::new()) {
        Ok(plan) => render_plan(uid, plan),
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// An AdmissionRequest through [`admit`], under every fuzz policy.
pub fn admit_request(request: &AdmissionRequest, seed: u64) {
    // The object as `target_of` hands it to the pure core (built here from the request's public
    // fields, so the harness does not depend on the pipeline's `Target` layout).
    if target_of(request).is_none() {
        return;
    }
    let Some(value) = request.object.as_ref() else {
        return;
    };
    let object = Object {
        group: &request.kind.group,
        kind: &request.kind.kind,
        subresource: &request.sub_resource,
        namespace: &request.namespace,
        object: value,
        old_object: request.old_object.as_ref(),
        user: request.username(),
    };
    let _ = object.is_pod();
    for (i, policy) in policies().iter().enumerate() {
        let _ = object.left_alone(policy);
        let _ = object.listed_operator(policy);
        let _ = object.secret_names(policy, "fuzz");
        let _ = object.pod_images();
        let _ = object.owner_revision();
        let label = request
            .object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/labels/pinhook.dev~1mode"))
            .and_then(Value::as_str);
        // The namespace's label when the object carries one (pinhook reads it from the
        // namespace; here the object stands in), else a mode chosen from the input.
        let mode = match label.map(|l| policy.mode_for(Some(l))) {
            Some(Ok(mode)) => mode,
            Some(Err(e)) => {
                let _ = e;
                policy.policy.mode
            }
            None => mode_of(seed.wrapping_add(i as u64)),
        };
        admit(policy, &request.uid, object, mode);
    }
}

/// A ConfigMap object whose `data` (or, for a key ending in `.b64`, `binaryData`, base64) holds
/// `files`, as the API server hands it to the mirror guard.
pub fn config_map(namespace: &str, name: &str, files: &[(String, String)]) -> Value {
    use base64::Engine as _;
    let mut data = serde_json::Map::new();
    let mut binary = serde_json::Map::new();
    for (key, text) in files {
        match key.strip_suffix(".b64") {
            Some(key) => {
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                binary.insert(key.to_string(), Value::String(encoded));
            }
            None => {
                data.insert(key.clone(), Value::String(text.clone()));
            }
        }
    }
    let mut object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"namespace": namespace, "name": name},
        "data": data,
    });
    if !binary.is_empty() {
        object["binaryData"] = Value::Object(binary);
    }
    object
}

/// Splits a text input into files: the text before the first `#=== <key>` line is the file
/// `first_key`, each `#=== <key>` line starts the file `<key>`. Lets one input carry a main
/// registries.conf and its drop-ins (or hosts.toml files) the way one ConfigMap carries them.
pub fn split_files(text: &str, first_key: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = vec![(first_key.to_string(), String::new())];
    for line in text.split_inclusive('\n') {
        if let Some(key) = line.strip_prefix("#=== ") {
            files.push((key.trim().to_string(), String::new()));
            continue;
        }
        if let Some((_, text)) = files.last_mut() {
            text.push_str(line);
        }
    }
    // Later keys replace earlier ones with the same name, as in a JSON map.
    let map: BTreeMap<String, String> = files.into_iter().collect();
    map.into_iter().collect()
}

/// Judges a ConfigMap under every mirror policy and renders each finding, note and error.
pub fn judge_config_map(object: &Value) {
    judge_mirrors("", "ConfigMap", object);
}

/// Judges `object` as `group`/`kind` under every mirror policy and renders each finding, note
/// and error.
pub fn judge_mirrors(group: &str, kind: &str, object: &Value) {
    for policy in mirror_policies() {
        match pinhook::mirror_guard::review(policy, group, kind, object) {
            Ok(Some(review)) => {
                for v in &review.violations {
                    let _ = format!("{} {} {} {}", v.entry, v.source, v.mirror, v.message);
                }
                let _ = review.notes.join("; ");
            }
            Ok(None) => {}
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}
