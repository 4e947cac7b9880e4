//! The plugin cache and single-flight, with `/bin/sh` scripts as plugins: which key an answer is
//! kept under, how long, and that an image no `matchImages` entry covers never runs anything.
//! The real protocol against a real registry is in `tests/integration/registry/credential_providers.rs`.

use std::path::Path;

use super::*;

const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

/// A provider whose binary is a shell script answering `body` and appending a line to `count`.
fn provider(dir: &Path, name: &str, body: &str, default_cache: Duration) -> ProviderSpec {
    let count = dir.join(format!("{name}.count"));
    let script = format!(
        "cat >/dev/null; echo x >> '{}'; cat <<'EOF'\n{body}\nEOF\n",
        count.display()
    );
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}")).expect("write plugin");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    ProviderSpec {
        name: name.to_string(),
        match_images: vec!["*.example".to_string(), "*.example/*".to_string()],
        default_cache_duration: default_cache,
        api_version: V1.to_string(),
        args: Vec::new(),
        env: Vec::new(),
        path,
    }
}

fn execs(dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{name}.count")))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

fn answer(key_type: &str, duration: Option<&str>) -> String {
    let duration = duration
        .map(|d| format!(",\"cacheDuration\":\"{d}\""))
        .unwrap_or_default();
    format!(
        "{{\"apiVersion\":\"{V1}\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"{key_type}\"{duration},\"auth\":{{\"*.example\":{{\"username\":\"u\",\"password\":\"p\"}}}}}}"
    )
}

async fn ask(providers: &CredentialProviders, image: &str) -> Provided {
    providers.provide(image).await
}

#[tokio::test]
async fn answers_are_cached_under_their_key_type_and_unmatched_images_run_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hour = Duration::from_secs(3600);
    let specs = vec![
        provider(dir.path(), "image", &answer("Image", None), hour),
        provider(
            dir.path(),
            "registry",
            &answer("Registry", Some("1h")),
            Duration::ZERO,
        ),
        provider(
            dir.path(),
            "global",
            &answer("Global", Some("1h")),
            Duration::ZERO,
        ),
        provider(dir.path(), "uncached", &answer("Image", Some("0s")), hour),
    ];
    let providers = CredentialProviders::new(specs, Settings::default(), None);
    for image in [
        "a.example/one",
        "a.example/one",
        "a.example/two",
        "b.example/three",
    ] {
        let provided = ask(&providers, image).await;
        assert_eq!(
            provided.entries.len(),
            4,
            "{image}: {:?}",
            provided.warnings
        );
    }
    assert_eq!(execs(dir.path(), "image"), 3, "one per image");
    assert_eq!(execs(dir.path(), "registry"), 2, "one per registry");
    assert_eq!(execs(dir.path(), "global"), 1, "one for all");
    assert_eq!(
        execs(dir.path(), "uncached"),
        4,
        "cacheDuration 0s: every time"
    );

    let unmatched = ask(&providers, "docker.io/library/nginx").await;
    assert!(unmatched.entries.is_empty() && unmatched.warnings.is_empty());
    assert_eq!(execs(dir.path(), "uncached"), 4, "no match, no exec");
}

#[tokio::test]
async fn a_broken_plugin_is_a_warning_and_a_metric_naming_it_never_its_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = vec![provider(
        dir.path(),
        "broken",
        "s3cret-garbage",
        Duration::from_secs(60),
    )];
    let metrics = Arc::new(Metrics::new());
    let providers = CredentialProviders::new(specs, Settings::default(), Some(metrics.clone()));
    let provided = ask(&providers, "a.example/one").await;
    assert!(provided.entries.is_empty());
    let exposed = metrics.encode().expect("metrics encode");
    for line in [
        "pinhook_credential_provider_execs_total{provider=\"broken\"} 1",
        "pinhook_credential_provider_errors_total{provider=\"broken\",reason=\"invalid_response\"} 1",
    ] {
        assert!(exposed.contains(line), "{line} in {exposed}");
    }
    let [warning] = provided.warnings.as_slice() else {
        panic!("{:?}", provided.warnings)
    };
    assert!(warning.contains("credential provider broken"), "{warning}");
    assert!(!warning.contains("s3cret"), "{warning}");
}

#[test]
fn the_registry_is_everything_before_the_first_slash() {
    assert_eq!(registry_of("a.example:5000/team/app"), "a.example:5000");
    assert_eq!(registry_of("localhost"), "localhost");
}
