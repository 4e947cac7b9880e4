//! `pinhook check` as a user runs it: the real binary, real manifests (kustomize- and
//! helm-style multi-document YAML, a broken document, a 500-object file), a real registry.

use std::io::Write;
use std::process::{Output, Stdio};

use crate::common::cli::{docker_config_json, pinhook_command};
use crate::common::images;
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::signing::{key_pair_pem, sign};
use serde_json::Value;

fn pinhook(registry: &TestRegistry, args: &[&str], stdin: Option<&str>) -> Output {
    pinhook_as(registry, args, stdin, &[("HOME", "/nonexistent")])
}

/// `pinhook check` with extra environment (e.g. `DOCKER_CONFIG`, `HOME`).
fn pinhook_as(
    registry: &TestRegistry,
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, &str)],
) -> Output {
    let mut command = pinhook_command("check");
    command
        .args(args)
        .arg("--registry-ca")
        .arg(registry.ca_path());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pinhook runs");
    if let Some(mut input) = child.stdin.take() {
        input
            .write_all(stdin.unwrap_or("").as_bytes())
            .expect("stdin");
    }
    child.wait_with_output().expect("pinhook finishes")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn deployment(host: &str, name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: {host}/{image}\n"
    )
}

/// Replaces what changes between runs (port, digests) so output can be compared exactly.
fn normalise(text: &str, registry: &TestRegistry) -> String {
    let mut out = text.replace(&registry.host(), "REGISTRY");
    while let Some(start) = out.find("sha256:") {
        let end = start
            + 7
            + out[start + 7..]
                .chars()
                .take_while(char::is_ascii_hexdigit)
                .count();
        out.replace_range(start..end, "DIGEST");
    }
    out
}

#[tokio::test]
async fn five_hundred_objects_with_fifty_images_resolve_each_image_once() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    for i in 0..50 {
        images::push_multi_arch(&registry, &format!("team/svc{i}"), "1.0", &format!("s{i}")).await;
    }
    let host = registry.host();
    let manifests: Vec<String> = (0..500)
        .map(|i| deployment(&host, &format!("d{i}"), &format!("team/svc{}:1.0", i % 50)))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("all.yaml");
    std::fs::write(&file, manifests.join("---\n")).expect("write");

    let started = std::time::Instant::now();
    let output = pinhook(
        &registry,
        &[file.to_str().expect("path"), "-o", "json"],
        None,
    );
    let elapsed = started.elapsed();

    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&stdout(&output)).expect("json report");
    assert_eq!(report["summary"]["objects"], 500);
    assert_eq!(report["summary"]["pinned"], 500);
    let manifest_requests = registry.count_requests("HEAD", "/manifests/1.0").await
        + registry.count_requests("GET", "/manifests/1.0").await;
    assert_eq!(manifest_requests, 50, "each distinct image resolved once");
    eprintln!("pinhook check, 500 objects / 50 images: {elapsed:?}");
}

#[tokio::test]
async fn kustomize_and_helm_style_output_with_a_broken_document() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let host = registry.host();
    // kustomize build: documents separated by bare `---`, a Service first.
    let kustomize = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: app\nspec:\n  ports:\n  - port: 80\n---\n{}",
        deployment(&host, "app", "team/app:1.0")
    );
    let output = pinhook(&registry, &["-"], Some(&kustomize));
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = normalise(&stdout(&output), &registry);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["OBJECT", "CONTAINER", "ACTION", "IMAGE", "RESULT"]
    );
    assert_eq!(
        rows[1],
        [
            "Deployment/default/app",
            "app",
            "pinned",
            "REGISTRY/team/app:1.0",
            "DIGEST"
        ]
    );
    assert_eq!(
        rows[2].join(" "),
        "2 objects: 1 pinned, 0 unchanged, 0 exempt, 0 denied, 0 violations, 0 errors"
    );
    let raw = stdout(&output);
    let lines: Vec<&str> = raw.lines().collect();
    assert_eq!(
        lines[0].find("ACTION"),
        lines[1].find("pinned"),
        "columns are aligned:\n{raw}"
    );
    assert!(
        !raw.contains('\u{1b}'),
        "no colour when stdout is not a terminal"
    );

    // helm template: `# Source:` comments, a leading `---`, a broken document, a missing tag.
    let helm = format!(
        "---\n# Source: chart/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n---\n# Source: chart/templates/broken.yaml\nkind: [oops\n---\n# Source: chart/templates/deploy.yaml\n{}",
        deployment(&host, "web", "team/app:missing")
    );
    let output = pinhook(&registry, &["-", "-o", "json"], Some(&helm));
    assert_eq!(
        output.status.code(),
        Some(2),
        "input errors win over violations"
    );
    let report: Value = serde_json::from_str(&stdout(&output)).expect("json");
    assert_eq!(report["errors"][0]["index"], "2");
    let error = report["errors"][0]["error"].as_str().expect("an error");
    assert!(error.starts_with("invalid YAML"), "{error}");
    assert_eq!(
        report["objects"].as_array().map(Vec::len),
        Some(2),
        "the others are still processed"
    );
    assert_eq!(report["objects"][1]["images"][0]["action"], "denied");
    assert_eq!(report["objects"][0]["podBearing"], false);
}

#[tokio::test]
async fn yaml_output_is_the_pinned_manifests_and_violations_exit_1() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let host = registry.host();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("nested")).expect("mkdir");
    std::fs::write(
        dir.path().join("nested/app.yml"),
        deployment(&host, "app", "team/app:1.0"),
    )
    .expect("write");
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").expect("write");

    let output = pinhook(
        &registry,
        &[dir.path().to_str().expect("path"), "-o", "yaml"],
        None,
    );
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    assert!(text.starts_with("---\n"), "{text}");
    assert!(
        text.contains(&format!("image: {}", pushed.pinned_with_tag())),
        "{text}"
    );

    std::fs::write(dir.path().join("bad.json"), format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p"}},"spec":{{"containers":[{{"name":"c","image":"{host}/team/app:nope"}}]}}}}"#)).expect("write");
    let output = pinhook(&registry, &[dir.path().to_str().expect("path")], None);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let table = normalise(&stdout(&output), &registry);
    let denied = table
        .lines()
        .find(|l| l.starts_with("Pod/default/p"))
        .unwrap_or_else(|| panic!("no row for Pod/default/p:\n{table}"));
    let cells: Vec<&str> = denied.split_whitespace().collect();
    assert_eq!(
        &cells[..4],
        ["Pod/default/p", "c", "denied", "REGISTRY/team/app:nope"],
        "{table}"
    );
    assert!(denied.contains("tag nope not found"), "{table}");

    let output = pinhook(&registry, &["/nonexistent/file.yaml"], None);
    assert_eq!(output.status.code(), Some(2));
    let output = pinhook(&registry, &[], None);
    assert_eq!(output.status.code(), Some(2), "usage error");
}

/// `resolve: Never` makes no registry call; the dry run still says what `/validate` would do
/// with each unpinned tag (deny it in enforce), as admission as a whole would.
#[tokio::test]
async fn resolve_never_reports_the_unpinned_tags_validation_denies() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let host = registry.host();
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "mode: enforce\nresolve: Never\n").expect("write");
    let manifest = deployment(&host, "app", "team/app:1.0");
    let output = pinhook(
        &registry,
        &[
            "-",
            "--policy",
            policy.to_str().expect("path"),
            "-o",
            "json",
        ],
        Some(&manifest),
    );
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).expect("json");
    let image = &report["objects"][0]["images"][0];
    assert_eq!(image["action"], "denied", "{report}");
    assert_eq!(image["path"], "/spec/template/spec/containers/0/image");
    assert_eq!(image["reason"], "not pinned to a digest");
    let manifest_requests = registry.count_requests("HEAD", "/manifests/").await
        + registry.count_requests("GET", "/manifests/").await;
    assert_eq!(manifest_requests, 0, "no registry call at all");
}

/// Local mode resolves with the user's docker credentials: `$DOCKER_CONFIG/config.json`,
/// else `~/.docker/config.json`; without them a private image is refused.
#[tokio::test]
async fn local_mode_uses_the_users_docker_credentials() {
    let registry = TestRegistry::start(RegistryAuth::htpasswd("ci", "hunter2")).await;
    let pushed = images::push_multi_arch(&registry, "team/private", "1.0", "p").await;
    let host = registry.host();
    let manifest = deployment(&host, "app", "team/private:1.0");
    let config = docker_config_json(&host, "ci", "hunter2");
    let docker_config = tempfile::tempdir().expect("tempdir");
    std::fs::write(docker_config.path().join("config.json"), &config).expect("write");
    let home = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(home.path().join(".docker")).expect("mkdir");
    std::fs::write(home.path().join(".docker/config.json"), &config).expect("write");

    let pinned = pushed.pinned_with_tag();
    let dir = docker_config.path().to_str().expect("path");
    let home_dir = home.path().to_str().expect("path");
    for env in [[("DOCKER_CONFIG", dir)], [("HOME", home_dir)]] {
        let output = pinhook_as(&registry, &["-", "-o", "yaml"], Some(&manifest), &env);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{env:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout(&output).contains(&pinned),
            "{env:?}: {}",
            stdout(&output)
        );
    }
    let output = pinhook(&registry, &["-"], Some(&manifest));
    assert_eq!(output.status.code(), Some(1), "no credentials: refused");
    assert!(
        stdout(&output).contains("unauthorized"),
        "{}",
        stdout(&output)
    );
}

/// Exact output of the three formats, with the registry address and digests normalised.
/// `UPDATE_SNAPSHOTS=1 cargo test --test integration check_cli` rewrites tests/snapshots/.
#[tokio::test]
async fn output_snapshots() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    images::push_multi_arch(&registry, "team/init", "1.0", "init").await;
    let host = registry.host();
    let manifests = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: app\nspec:\n  ports:\n  - port: 80\n---\n{}---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: team\nspec:\n  initContainers:\n  - name: init\n    image: {host}/team/init:1.0\n  containers:\n  - name: c\n    image: {host}/team/app:missing\n  - name: pinned\n    image: {host}/team/app@sha256:{}\n",
        deployment(&host, "app", "team/app:1.0"),
        "0".repeat(64)
    );
    for (format, file) in [
        ("table", "check.table.txt"),
        ("json", "check.json"),
        ("yaml", "check.yaml"),
    ] {
        let output = pinhook(&registry, &["-", "-o", format], Some(&manifests));
        assert_eq!(output.status.code(), Some(1), "{format}: a missing tag");
        if format == "yaml" {
            let stderr = normalise(&String::from_utf8_lossy(&output.stderr), &registry);
            assert_eq!(
                stderr,
                "pinhook: Pod/team/p container c: denied: tag missing not found in REGISTRY/team/app\n",
                "what kept an image from being pinned is on stderr"
            );
        }
        let actual = normalise(&stdout(&output), &registry);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/snapshots")
            .join(file);
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
            std::fs::write(&path, &actual).expect("write snapshot");
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", path.display()));
        assert_eq!(
            actual,
            expected,
            "{format} output differs from {}",
            path.display()
        );
    }
}

#[tokio::test]
async fn require_digest_passes_only_when_every_image_resolved() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let host = registry.host();
    let dir = tempfile::tempdir().expect("tempdir");
    let app = dir.path().join("app.yaml");
    std::fs::write(&app, deployment(&host, "app", "team/app:1.0")).expect("write");
    let app = app.to_str().expect("path");
    let policy = |mode: &str| {
        let path = dir.path().join(format!("{mode}.yaml"));
        std::fs::write(
            &path,
            format!("mode: {mode}\nregistries:\n  allowPrivate: [\"{host}\"]\n"),
        )
        .expect("write");
        path.to_str().expect("path").to_string()
    };
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    // Enforce pins it; audit would (the digest is known): both pass.
    for mode in ["enforce", "audit"] {
        let output = pinhook(
            &registry,
            &[app, "--require-digest", "--policy", &policy(mode)],
            None,
        );
        assert_eq!(output.status.code(), Some(0), "{mode}: {}", stderr(&output));
    }
    // Off resolves nothing: a check that proves nothing fails.
    let output = pinhook(
        &registry,
        &[app, "--require-digest", "--policy", &policy("off")],
        None,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("--require-digest: no image was checked"),
        "{}",
        stderr(&output)
    );
    // No image at all: without the flag all good, with it a failure saying so.
    let empty = dir.path().join("cm.yaml");
    std::fs::write(
        &empty,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    )
    .expect("write");
    let empty = empty.to_str().expect("path");
    assert_eq!(pinhook(&registry, &[empty], None).status.code(), Some(0));
    let output = pinhook(&registry, &[empty, "--require-digest"], None);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("no image was checked"),
        "{}",
        stderr(&output)
    );
}

/// Text from a manifest cannot forge rows or put terminal codes into `pinhook check`'s table or
/// its problems on stderr: an image and a container name holding a line break, ESC and C1 come
/// out escaped, one row each.
#[tokio::test]
async fn hostile_manifest_text_stays_on_its_row() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let host = registry.host();
    let dir = tempfile::tempdir().expect("tempdir");
    let image = format!("{host}/team/app:1\\nPod/default/forged  c  pinned  x\\u001b[2J\\u009b31m");
    std::fs::write(
        dir.path().join("pod.json"),
        format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p"}},"spec":{{"containers":[{{"name":"c\r\nforged","image":"{image}"}}]}}}}"#),
    )
    .expect("write");
    let path = dir.path().to_str().expect("path");
    let raw = |c: char| c != '\n' && (c.is_control() || c == '\u{2028}' || c == '\u{2029}');
    let mut table = String::new();
    for args in [vec![path], vec![path, "-o", "yaml"]] {
        let output = pinhook(&registry, &args, None);
        assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        for text in [stdout(&output), stderr] {
            assert!(!text.chars().any(raw), "{args:?}: {text:?}");
            assert!(
                !text
                    .lines()
                    .any(|line| line.starts_with("Pod/default/forged")),
                "{args:?}: {text}"
            );
        }
        if args.len() == 1 {
            table = stdout(&output);
        }
    }
    let row = table
        .lines()
        .find(|l| l.starts_with("Pod/default/p"))
        .unwrap_or_else(|| panic!("no row for Pod/default/p:\n{table}"));
    assert!(
        row.contains(r"c\r\nforged")
            && row.contains(r"team/app:1\nPod/default/forged  c  pinned  x\u{1b}[2J\u{9b}31m"),
        "{table}"
    );
}

/// `pinhook check` verifies signatures as admission does (issue 46): the same `verify` policy,
/// the same verdicts, each image's shown; an unsigned image fails the run.
#[tokio::test]
async fn check_shows_the_verification_of_every_image() {
    let registry = TestRegistry::start(RegistryAuth::htpasswd("ci", "hunter2")).await;
    let signed = images::push_multi_arch(&registry, "team/signed", "1.0", "check-s").await;
    images::push_multi_arch(&registry, "team/unsigned", "1.0", "check-u").await;
    let (signer, pem) = key_pair_pem();
    sign(&registry, "team/signed", &signed.index_digest, &signer).await;
    let host = registry.host();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("config.json"),
        docker_config_json(&host, "ci", "hunter2"),
    )
    .expect("write");
    let policy = dir.path().join("policy.yaml");
    let pem = serde_json::to_string(&pem).expect("json");
    std::fs::write(
        &policy,
        format!("verify:\n- images: [\"{host}/team/*\"]\n  keys:\n  - pem: {pem}\n"),
    )
    .expect("write");
    let manifests = format!(
        "{}---\n{}",
        deployment(&host, "signed", "team/signed:1.0"),
        deployment(&host, "unsigned", "team/unsigned:1.0")
    );
    let env = [("DOCKER_CONFIG", dir.path().to_str().expect("path"))];
    let policy = policy.to_str().expect("path");
    let output = pinhook_as(
        &registry,
        &["-", "--policy", policy, "-o", "json"],
        Some(&manifests),
        &env,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).expect("json");
    let first = &report["objects"][0]["images"][0];
    assert_eq!(first["action"], "pinned", "{report}");
    assert_eq!(first["result"], signed.pinned_with_tag());
    let signature = first["signature"].as_str().expect("signature shown");
    assert!(
        signature.starts_with("verify[0]: signed by key sha256:"),
        "{signature}"
    );
    let second = &report["objects"][1]["images"][0];
    assert_eq!(second["action"], "denied", "{report}");
    let reason = second["reason"].as_str().expect("reason");
    assert!(
        reason.starts_with("not verified: verify[0]: no signature found for sha256:"),
        "{reason}"
    );

    let output = pinhook_as(
        &registry,
        &["-", "--policy", policy],
        Some(&manifests),
        &env,
    );
    let table = stdout(&output);
    assert!(
        table.contains("(verify[0]: signed by key sha256:"),
        "{table}"
    );
    assert!(
        table.contains("not verified: verify[0]: no signature found"),
        "{table}"
    );
}
