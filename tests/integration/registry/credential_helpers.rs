//! Docker credential helpers and identity tokens for `pinhook check` and `pinhook resolve`, as a
//! developer's machine or a CI runner has them: the real binary, a `config.json` with
//! `credsStore` / `credHelpers` / `identitytoken`, this package's example helper installed as
//! `docker-credential-pinhooktest` on `PATH`, and a real registry (htpasswd, or token auth whose
//! token service answers the OAuth2 refresh-token grant).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::cli::pinhook_command;
use crate::common::credential_programs::{helper_dir, runs};
use crate::common::images::{self, PushedIndex};
use crate::common::pinhook::{Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{image_after, pod_review};
use pinhook::policy::Policy;
use serde_json::json;
use tempfile::TempDir;

const USER: &str = "dev";
const PASS: &str = "helper-secret-51c2";
const HELPER: &str = "pinhooktest";

/// A user's docker directory holding `config`, the helper on `PATH`, and its run counter.
struct Desk {
    docker: TempDir,
    helpers: TempDir,
}

impl Desk {
    fn new(config: serde_json::Value) -> Desk {
        let docker = tempfile::tempdir().expect("tempdir");
        std::fs::write(docker.path().join("config.json"), config.to_string()).expect("write");
        Desk {
            docker,
            helpers: helper_dir(HELPER),
        }
    }

    fn count_file(&self) -> std::path::PathBuf {
        self.docker.path().join("helper.runs")
    }

    fn runs(&self) -> usize {
        runs(&self.count_file())
    }

    /// `pinhook <subcommand>` as this user, the helper answering with `helper_env`.
    fn command(
        &self,
        subcommand: &str,
        registry: &TestRegistry,
        helper_env: &[(&str, &str)],
    ) -> Command {
        let mut command = pinhook_command(subcommand);
        let path = format!(
            "{}:{}",
            self.helpers.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        command
            .env("DOCKER_CONFIG", self.docker.path())
            .env("PATH", path)
            .env("HELPER_COUNT_FILE", self.count_file())
            .env("PINHOOK_REGISTRY_CA", registry.ca_path());
        for (key, value) in helper_env {
            command.env(key, value);
        }
        command
    }

    /// `pinhook check - -o yaml` as this user, `manifest` on stdin.
    fn check_stdin(
        &self,
        registry: &TestRegistry,
        helper_env: &[(&str, &str)],
        manifest: &str,
    ) -> Output {
        let mut child = self
            .command("check", registry, helper_env)
            .args(["-", "-o", "yaml"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pinhook runs");
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), manifest.as_bytes())
            .expect("stdin");
        child.wait_with_output().expect("pinhook finishes")
    }

    fn resolve(&self, registry: &TestRegistry, image: &str, helper_env: &[(&str, &str)]) -> Output {
        let mut command = self.command("resolve", registry, helper_env);
        command.arg(image).output().expect("pinhook runs")
    }
}

/// A user whose `config.json` holds the token server's identity token for `registry`.
fn identity_token_desk(registry: &TestRegistry) -> Desk {
    let identity = registry
        .token_server()
        .expect("token auth")
        .identity_token();
    Desk::new(json!({"auths": {registry.host(): {"identitytoken": identity}}}))
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

async fn private(auth: RegistryAuth) -> (TestRegistry, PushedIndex) {
    let registry = TestRegistry::start(auth).await;
    let pushed = images::push_multi_arch(&registry, "team/app", "1.0", "helper").await;
    (registry, pushed)
}

fn answering(registry: &TestRegistry) -> Vec<(&'static str, String)> {
    vec![
        ("HELPER_SERVER", registry.host()),
        ("HELPER_USERNAME", USER.to_string()),
        ("HELPER_SECRET", PASS.to_string()),
    ]
}

fn pairs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[tokio::test]
async fn check_asks_the_creds_store_once_per_registry() {
    let (registry, pushed) = private(RegistryAuth::htpasswd(USER, PASS)).await;
    let other = images::push_multi_arch(&registry, "team/other", "1.0", "other").await;
    let desk = Desk::new(json!({"auths": {}, "credsStore": HELPER}));
    let host = registry.host();
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: two\nspec:\n  containers:\n  - name: a\n    image: {}\n  - name: b\n    image: {}\n",
        pushed.reference, other.reference
    );
    let env = answering(&registry);
    let output = desk.check_stdin(&registry, &pairs(&env), &manifest);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(&pushed.pinned_with_tag()), "{stdout}");
    assert!(stdout.contains(&other.pinned_with_tag()), "{stdout}");
    assert_eq!(desk.runs(), 1, "one run for {host}, both images");
}

#[tokio::test]
async fn resolve_asks_the_cred_helper_of_the_images_host_only() {
    let (registry, pushed) = private(RegistryAuth::htpasswd(USER, PASS)).await;
    let env = answering(&registry);
    let desk = Desk::new(json!({"credHelpers": {registry.host(): HELPER}}));
    let output = desk.resolve(&registry, &pushed.reference, &pairs(&env));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{}\n", pushed.pinned_with_tag())
    );
    assert_eq!(desk.runs(), 1);

    let elsewhere = Desk::new(json!({"credHelpers": {"gcr.io": HELPER}}));
    let output = elsewhere.resolve(&registry, &pushed.reference, &pairs(&env));
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(text(&output).contains("unauthorized"), "{}", text(&output));
    assert_eq!(elsewhere.runs(), 0, "no helper for this host, none run");
}

// Multi-threaded: the token server runs in this process while the test waits on pinhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_exchanges_a_helpers_identity_token_at_the_token_service() {
    let (registry, pushed) = private(RegistryAuth::token(USER, PASS)).await;
    let tokens = registry.token_server().expect("token auth");
    let identity = tokens.identity_token();
    let env = [
        ("HELPER_SERVER", registry.host()),
        ("HELPER_USERNAME", "<token>".to_string()),
        ("HELPER_SECRET", identity.clone()),
    ];
    let desk = Desk::new(json!({"credsStore": HELPER}));
    let output = desk.resolve(&registry, &pushed.reference, &pairs(&env));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(
        text(&output).contains(&pushed.pinned_with_tag()),
        "{}",
        text(&output)
    );
    let exchanged = tokens.requests().iter().any(|r| {
        r.username.as_deref() == Some("<token>") && r.status == 200 && !r.granted.is_empty()
    });
    assert!(exchanged, "refresh-token grant: {:?}", tokens.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_exchanges_an_identitytoken_from_config_json() {
    let (registry, pushed) = private(RegistryAuth::token(USER, PASS)).await;
    let desk = identity_token_desk(&registry);
    let output = desk.resolve(&registry, &pushed.reference, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));

    let wrong = Desk::new(json!({"auths": {registry.host(): {"identitytoken": "revoked"}}}));
    let output = wrong.resolve(&registry, &pushed.reference, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(text(&output).contains("unauthorized"), "{}", text(&output));
}

/// `pinhook check` (local) exchanges an identity token too; before, it treated it as no
/// credential and the private image was refused. (Multi-threaded: the in-process token
/// server must answer while this thread waits for pinhook.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_exchanges_an_identitytoken_from_config_json() {
    let (registry, pushed) = private(RegistryAuth::token(USER, PASS)).await;
    let desk = identity_token_desk(&registry);
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: one\nspec:\n  containers:\n  - name: a\n    image: {}\n",
        pushed.reference
    );
    let output = desk.check_stdin(&registry, &[], &manifest);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(&pushed.pinned_with_tag()), "{stdout}");
}

#[tokio::test]
async fn a_failing_or_garbled_helper_is_reported_and_its_secret_never_shown() {
    let (registry, pushed) = private(RegistryAuth::htpasswd(USER, PASS)).await;
    for mode in ["fail", "garbage"] {
        let mut env = answering(&registry);
        env.push(("HELPER_MODE", mode.to_string()));
        let desk = Desk::new(json!({"credsStore": HELPER}));
        let mut command = desk.command("resolve", &registry, &pairs(&env));
        let output = command
            .env("PINHOOK_LOG", "trace")
            .arg(&pushed.reference)
            .output()
            .expect("pinhook runs");
        let all = text(&output);
        assert_eq!(output.status.code(), Some(1), "{mode}: {all}");
        assert!(all.contains("docker credential helper"), "{mode}: {all}");
        assert!(!all.contains(PASS), "{mode}: the secret leaked: {all}");
    }
}

/// Issue 44: a credential program runs in pinhook's container, so its memory is pinhook's: a
/// helper that took 256 MiB for an image name took it. Now the `pinhook` binary runs each one
/// through itself, its data memory capped at `PROGRAM_DATA_BYTES` (128 MiB): past it the
/// helper's allocation fails, it dies, and the failure is reported like any other, while a
/// helper within the cap answers as before.
#[tokio::test]
async fn a_helper_that_takes_more_memory_than_its_cap_dies_and_is_reported() {
    let (registry, pushed) = private(RegistryAuth::htpasswd(USER, PASS)).await;
    let run = |mib: &str| {
        let mut env = answering(&registry);
        env.push(("HELPER_MODE", "hog".to_string()));
        env.push(("HELPER_HOG_MIB", mib.to_string()));
        let desk = Desk::new(json!({"credsStore": HELPER}));
        let output = desk
            .command("resolve", &registry, &pairs(&env))
            .env("PINHOOK_LOG", "warn")
            .arg(&pushed.reference)
            .output()
            .expect("pinhook runs");
        (desk.runs(), output)
    };
    let (runs, output) = run("32");
    let all = text(&output);
    assert_eq!((runs, output.status.code()), (1, Some(0)), "{all}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&pushed.pinned_with_tag()),
        "{all}"
    );
    let (runs, output) = run("256");
    let all = text(&output);
    assert_eq!(runs, 1, "{all}");
    // Without the login the private image is not resolved; the helper's death is said.
    assert_eq!(output.status.code(), Some(1), "{all}");
    assert!(all.contains("docker credential helper"), "{all}");
    assert!(all.contains("signal"), "{all}");
    assert!(!all.contains(PASS), "the secret leaked: {all}");
}

#[test]
fn the_helper_example_speaks_dockers_protocol() {
    let dir = helper_dir(HELPER);
    let helper = Path::new(dir.path()).join(format!("docker-credential-{HELPER}"));
    let mut child = Command::new(helper)
        .arg("get")
        .env("HELPER_USERNAME", "u")
        .env("HELPER_SECRET", "s")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("runs");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), b"registry.example")
        .expect("stdin");
    let output = child.wait_with_output().expect("finishes");
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(
        answer,
        json!({"ServerURL": "registry.example", "Username": "u", "Secret": "s"})
    );
}

/// `serve --docker-config` with an `identitytoken`: pinhook exchanges the node-level docker
/// config's identity token the same way (its realm passes the address guard), and pins the
/// private image with no pull secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exchanges_an_identitytoken_from_its_docker_config() {
    let (registry, pushed) = private(RegistryAuth::token(USER, PASS)).await;
    let tokens = registry.token_server().expect("token auth");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.json");
    let docker = json!({"auths": {registry.host(): {"identitytoken": tokens.identity_token()}}});
    std::fs::write(&config, docker.to_string()).expect("write config.json");
    let mut policy = Policy::default();
    // The token server listens on loopback too.
    policy
        .registries
        .allow_private
        .push(tokens.addr().to_string());
    let options = Options {
        policy,
        docker_config: Some(config),
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(&registry, options).await;
    let review = pod_review(&registry, &pushed.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), pushed.pinned_with_tag());
}
