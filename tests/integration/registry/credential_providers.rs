//! kubelet credential provider plugins, run for real: the plugin is this package's example
//! (`examples/credential_provider.rs`) speaking the v1 JSON protocol, installed in a plugin
//! directory with a `CredentialProviderConfig`, and pinhook admits pods of private images on a
//! real registry (htpasswd and token auth) that have no pull secret at all. Each plugin counts
//! its runs in a file, which is what most assertions here read.

use std::sync::Arc;
use std::time::Duration;

use crate::common::credential_programs::{PluginSetup, Provider};
use crate::common::fake_kube::FakeKube;
use crate::common::fake_kube::PullSecretFormat::DockerConfigJson;
use crate::common::images::{self, PushedIndex};
use crate::common::logs::Captured;
use crate::common::pinhook::{Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{
    fixture_with_image, image_after, message, pod_review, warned, warnings,
};
use pinhook::registry::keyring::Keyring;
use pinhook::registry::provider::{CredentialProviders, ProviderFiles, Settings};
use pinhook::registry::pull_secrets::{
    KubeSecrets, NodeOnly, PodContext, PullSecrets, SecretNames,
};
use pinhook::registry::Credential;
use serde_json::json;

const USER: &str = "puller";
const PASS: &str = "plugin-pass-7f3a";

/// Environment making the example plugin answer the registry's real credentials.
const GOOD: [(&str, &str); 2] = [("PLUGIN_USERNAME", USER), ("PLUGIN_PASSWORD", PASS)];

/// Provider `name` for the registry at `host`, cached an hour by default.
fn for_host<'a>(name: &'a str, host: &'a [&'a str], env: &'a [(&'a str, &'a str)]) -> Provider<'a> {
    Provider {
        name,
        match_images: host,
        default_cache_duration: "1h",
        env,
    }
}

/// The node keyring holding `setup`'s plugins.
fn node_keyring(setup: &PluginSetup, settings: Settings) -> Keyring {
    let files = ProviderFiles {
        config: setup.write_config(),
        bin_dir: setup.bin_dir(),
        settings,
    };
    let providers = CredentialProviders::load(&files, None).expect("the config is valid");
    let mut node = Keyring::new();
    node.push_source(Arc::new(providers));
    node
}

async fn pinhook_with(registry: &TestRegistry, node: Keyring) -> TestPinhook {
    let options = Options {
        secrets: Arc::new(NodeOnly { node }),
        ..Options::default()
    };
    TestPinhook::start_with(registry, options).await
}

async fn private_registry(auth: RegistryAuth) -> (TestRegistry, PushedIndex, PushedIndex) {
    let registry = TestRegistry::start(auth).await;
    let app = images::push_multi_arch(&registry, "team/app", "1.0", "app").await;
    let other = images::push_multi_arch(&registry, "team/other", "1.0", "other").await;
    (registry, app, other)
}

#[tokio::test]
async fn a_private_image_with_no_pull_secret_is_pinned_with_the_plugins_credential() {
    let (registry, app, _) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let host = registry.host();
    let setup = PluginSetup::new().provider(for_host("node-plugin", &[&host], &GOOD));
    let pinhook = pinhook_with(&registry, node_keyring(&setup, Settings::default())).await;

    for _ in 0..3 {
        let review = pod_review(&registry, &app.reference);
        let body = pinhook.mutate(&review).await;
        assert_eq!(body["response"]["allowed"], true, "{body}");
        assert_eq!(image_after(&review, &body), app.pinned_with_tag());
    }
    assert_eq!(
        setup.runs("node-plugin"),
        1,
        "answered from kubelet's cache after the first"
    );
}

#[tokio::test]
async fn the_plugin_wins_over_anonymous_on_a_token_auth_registry() {
    let (registry, app, _) = private_registry(RegistryAuth::token(USER, PASS)).await;
    let host = registry.host();
    let setup = PluginSetup::new().provider(for_host("token-plugin", &[&host], &GOOD));
    // The token server listens on loopback too, so the policy must allow it like the registry.
    let realm = registry
        .token_server()
        .expect("token auth")
        .addr()
        .to_string();
    let options = |node: Keyring| {
        let mut policy = pinhook::policy::Policy::default();
        policy.registries.allow_private.push(realm.clone());
        Options {
            policy,
            secrets: Arc::new(NodeOnly { node }),
            ..Options::default()
        }
    };
    let without = TestPinhook::start_with(&registry, options(Keyring::new())).await;
    let body = without.mutate(&pod_review(&registry, &app.reference)).await;
    assert_eq!(
        body["response"]["allowed"], false,
        "anonymous alone: {body}"
    );
    assert!(message(&body).contains("unauthorized"), "{body}");

    let node = node_keyring(&setup, Settings::default());
    let pinhook = TestPinhook::start_with(&registry, options(node)).await;
    let review = pod_review(&registry, &app.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), app.pinned_with_tag());
    let granted = registry
        .token_server()
        .expect("token auth")
        .requests()
        .iter()
        .any(|r| r.username.as_deref() == Some(USER) && !r.granted.is_empty());
    assert!(
        granted,
        "the token was asked for with the plugin's credential"
    );
}

#[tokio::test]
async fn cache_key_types_and_durations_decide_when_a_plugin_runs_again() {
    let (registry, app, other) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let host = registry.host();
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        GOOD.iter().chain(extra).copied().collect()
    };
    let image_1h = with(&[]);
    let registry_1h = with(&[
        ("PLUGIN_CACHE_KEY_TYPE", "Registry"),
        ("PLUGIN_CACHE_DURATION", "1h"),
    ]);
    let global_1h = with(&[
        ("PLUGIN_CACHE_KEY_TYPE", "Global"),
        ("PLUGIN_CACHE_DURATION", "1h"),
    ]);
    let image_1s = with(&[("PLUGIN_CACHE_DURATION", "1s")]);
    let setup = [
        ("image", &image_1h, "1h"),
        ("registry", &registry_1h, "0s"),
        ("global", &global_1h, "0s"),
        ("short", &image_1s, "1h"),
        ("uncached", &image_1h, "0s"),
    ]
    .into_iter()
    .fold(PluginSetup::new(), |setup, (name, env, default)| {
        setup.provider(Provider {
            name,
            match_images: &[&host],
            default_cache_duration: default,
            env,
        })
    });
    let pinhook = pinhook_with(&registry, node_keyring(&setup, Settings::default())).await;
    let admit = |image: String| {
        let pinhook = &pinhook;
        let registry = &registry;
        async move {
            let body = pinhook.mutate(&pod_review(registry, &image)).await;
            assert_eq!(body["response"]["allowed"], true, "{body}");
        }
    };

    admit(app.reference.clone()).await;
    admit(app.reference.clone()).await;
    admit(other.reference.clone()).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    admit(app.reference.clone()).await;

    let runs: Vec<(&str, usize)> = ["image", "registry", "global", "short", "uncached"]
        .into_iter()
        .map(|name| (name, setup.runs(name)))
        .collect();
    assert_eq!(
        runs,
        [
            ("image", 2),    // one per image, for an hour (defaultCacheDuration)
            ("registry", 1), // one for the registry, for its cacheDuration of an hour
            ("global", 1),   // one for every image
            ("short", 3),    // per image, and again once its 1s cacheDuration is over
            ("uncached", 4), // defaultCacheDuration 0s and no cacheDuration: never cached
        ]
    );
}

#[tokio::test]
async fn a_plugin_whose_match_images_do_not_match_never_runs() {
    let (registry, app, _) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let setup = PluginSetup::new().provider(Provider {
        name: "elsewhere",
        match_images: &[
            "*.dkr.ecr.*.amazonaws.com",
            "registry.invalid/team",
            "127.0.0.1",
        ],
        default_cache_duration: "1h",
        env: &GOOD,
    });
    let pinhook = pinhook_with(&registry, node_keyring(&setup, Settings::default())).await;
    let body = pinhook.mutate(&pod_review(&registry, &app.reference)).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(message(&body).contains("unauthorized"), "{body}");
    assert_eq!(setup.runs("elsewhere"), 0);
    assert!(
        warnings(&body)
            .iter()
            .all(|w| !w.contains("credential provider")),
        "{body}"
    );
}

#[tokio::test]
async fn failing_slow_or_garbled_plugins_are_warnings_and_a_good_one_still_pins() {
    let (registry, app, _) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let host = registry.host();
    let broken = [
        ("fails", "fail"),
        ("garbles", "garbage"),
        ("wrong-version", "wrong-version"),
        ("floods", "huge"),
    ];
    let mut setup = PluginSetup::new();
    let envs: Vec<[(&str, &str); 3]> = broken
        .iter()
        .map(|(_, mode)| [GOOD[0], GOOD[1], ("PLUGIN_MODE", *mode)])
        .collect();
    for ((name, _), env) in broken.iter().zip(&envs) {
        setup = setup.provider(for_host(name, &[&host], env));
    }
    let slow_env = [GOOD[0], GOOD[1], ("PLUGIN_SLEEP_MS", "3000")];
    setup = setup.provider(for_host("hangs", &[&host], &slow_env));
    setup = setup.provider(for_host("works", &[&host], &GOOD));
    let settings = Settings {
        exec_timeout: Duration::from_millis(500),
        failure_ttl: Duration::from_millis(1500),
        ..Settings::default()
    };
    let pinhook = pinhook_with(&registry, node_keyring(&setup, settings)).await;

    let review = pod_review(&registry, &app.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), app.pinned_with_tag());
    for name in ["fails", "garbles", "wrong-version", "floods", "hangs"] {
        assert!(
            warned(&body, &format!("credential provider {name} ")),
            "{name}: {body}"
        );
    }
    assert!(warned(&body, "did not finish within 500ms"), "{body}");
    assert!(
        !body.to_string().contains(PASS),
        "no plugin output in the review: {body}"
    );
    // A failure stands for its namespace's images of its registry for `failure_ttl` (issue 44;
    // kubelet caches answers only): the next admission hears it without a run...
    let again = pinhook.mutate(&review).await;
    assert_eq!(again["response"]["allowed"], true, "{again}");
    assert!(
        warned(&again, "failed for this registry within 1.5s: exited with"),
        "{again}"
    );
    assert_eq!(setup.runs("fails"), 1);
    // ...and once it has passed, runs it again.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    pinhook.mutate(&review).await;
    assert_eq!(setup.runs("fails"), 2);
    assert_eq!(setup.runs("works"), 1);
}

#[tokio::test]
async fn two_hundred_concurrent_admissions_run_the_plugin_once() {
    let (registry, app, _) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let host = registry.host();
    let env = [GOOD[0], GOOD[1], ("PLUGIN_SLEEP_MS", "500")];
    let setup = PluginSetup::new().provider(for_host("slow", &[&host], &env));
    let pinhook = pinhook_with(&registry, node_keyring(&setup, Settings::default())).await;
    let review = pod_review(&registry, &app.reference);
    let answers = futures::future::join_all((0..200).map(|_| pinhook.mutate(&review))).await;
    for body in &answers {
        assert_eq!(body["response"]["allowed"], true, "{body}");
    }
    let runs = setup.runs("slow");
    println!("200 concurrent admissions: credential provider ran {runs} time(s)");
    assert_eq!(runs, 1);
}

#[tokio::test]
async fn a_pod_pull_secret_is_tried_before_the_plugin() {
    let (registry, app, _) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let host = registry.host();
    // The plugin's credential is wrong: were it tried first, the registry would answer 401.
    let env = [("PLUGIN_USERNAME", USER), ("PLUGIN_PASSWORD", "stale")];
    let setup = PluginSetup::new().provider(for_host("stale-plugin", &[&host], &env));
    let kube = FakeKube::start().await;
    kube.add_pull_secret(DockerConfigJson, "default", "regcred", &host, (USER, PASS));
    let secrets = KubeSecrets::new(kube.client(), node_keyring(&setup, Settings::default()));

    let mut review = fixture_with_image(
        "v1.26/pod-create-pullsecrets-mutate.json",
        &registry,
        &app.reference,
    );
    review["request"]["namespace"] = json!("default");
    let object = &review["request"]["object"];
    let pod = PodContext {
        namespace: "default",
        secrets: SecretNames::Spec {
            spec: &object["spec"],
            is_pod: true,
            custom: false,
        },
        images: &[pinhook::reference::Reference::parse(&app.reference)
            .expect("parses")
            .repository()],
        sources_deadline: None,
        service_account: None,
    };
    let keyring = secrets.keyring_for(&pod).await.keyring;
    let reference = pinhook::reference::Reference::parse(&app.reference).expect("parses");
    assert_eq!(
        keyring.lookup(&reference),
        vec![
            Credential::basic(USER, PASS),
            Credential::basic(USER, "stale")
        ],
        "kubelet's order: the pod's secrets, then the node's plugins"
    );

    let options = Options {
        secrets: Arc::new(secrets),
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(&registry, options).await;
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    registry.settle_access_log().await;
    let refused = registry
        .requests()
        .into_iter()
        .filter(|e| e.uri.contains("/manifests/") && e.status == 401)
        .count();
    assert_eq!(refused, 0, "the pod's secret answered first");
}

#[test]
fn no_credential_reaches_any_log_at_trace_level() {
    let mut runtime = tokio::runtime::Builder::new_current_thread();
    Captured::run(tracing::Level::TRACE, &mut runtime, no_credential_at_trace);
}

async fn no_credential_at_trace(captured: Captured) {
    let (registry, app, _) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let host = registry.host();
    let failing = [GOOD[0], GOOD[1], ("PLUGIN_MODE", "fail")];
    let setup = PluginSetup::new()
        .provider(for_host("answers", &[&host], &GOOD))
        .provider(for_host("fails", &[&host], &failing));
    let pinhook = pinhook_with(&registry, node_keyring(&setup, Settings::default())).await;
    let review = pod_review(&registry, &app.reference);
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");

    let logs = captured.text();
    assert!(
        logs.contains("credential provider failed"),
        "the failure is logged: {logs}"
    );
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{USER}:{PASS}"),
    );
    for secret in [PASS, basic.as_str()] {
        assert!(!logs.contains(secret), "{secret} leaked into the logs");
    }
}

/// A plugin slower than the review's budget costs its own answer, not the pod's secret: with a
/// 2 s deadline and a plugin that sleeps 3 s (inside its 5 s wait), the pod's pull secret
/// still pins the image. Before, the whole keyring was given up at the deadline ("reading
/// pull secrets timed out") and the private image was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plugin_does_not_cost_the_pods_own_secret() {
    let (registry, app, _) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let host = registry.host();
    let env = [GOOD[0], GOOD[1], ("PLUGIN_SLEEP_MS", "3000")];
    let setup = PluginSetup::new().provider(for_host("slow-plugin", &[&host], &env));
    let kube = FakeKube::start().await;
    kube.add_pull_secret(DockerConfigJson, "default", "regcred", &host, (USER, PASS));
    let secrets = KubeSecrets::new(kube.client(), node_keyring(&setup, Settings::default()));
    let options = Options {
        secrets: Arc::new(secrets),
        ..Options::default()
    };
    let pinhook = TestPinhook::start_with(&registry, options).await;
    let mut review = fixture_with_image(
        "v1.26/pod-create-pullsecrets-mutate.json",
        &registry,
        &app.reference,
    );
    review["request"]["namespace"] = json!("default");
    let started = std::time::Instant::now();
    let body = pinhook.review("/mutate?timeout=2s", &review).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert_eq!(image_after(&review, &body), app.pinned_with_tag());
    assert!(
        warned(
            &body,
            "credential plugins and helpers did not answer in time"
        ),
        "{body}"
    );
    assert!(!warned(&body, "reading pull secrets timed out"), "{body}");
}

/// `kubectl debug` on a 1.20 apiserver sends an EphemeralContainers object with no PodSpec:
/// the plugin is asked about the debug container's image all the same (it was asked about the
/// images of no spec, so a private debug image was refused).
#[tokio::test]
async fn an_ephemeral_debug_container_gets_the_plugins_credential() {
    let (registry, _, _) = private_registry(RegistryAuth::htpasswd(USER, PASS)).await;
    let debug = images::push_multi_arch(&registry, "team/debug", "1.0", "debug").await;
    let host = registry.host();
    let setup = PluginSetup::new().provider(for_host("node-plugin", &[&host], &GOOD));
    let pinhook = pinhook_with(&registry, node_keyring(&setup, Settings::default())).await;
    let review = crate::common::pinhook::review_fixture(
        "v1.20/ephemeralcontainers-update-raw-put-mutate.json",
        &registry,
    );
    let body = pinhook.mutate(&review).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let patched = crate::common::pinhook::apply_response(&review, &body);
    assert_eq!(
        patched["ephemeralContainers"][0]["image"],
        debug.pinned_with_tag(),
        "{body}"
    );
    assert_eq!(setup.runs("node-plugin"), 1);
}
