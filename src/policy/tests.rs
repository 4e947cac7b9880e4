//! Policy file tests: parsing a complete file, defaults, and each validation error with its
//! exact message.

use super::*;

const COMPLETE: &str = r#"
mode: audit
resolve: Always
target: pods
form: digest
onResolutionFailure: allow
exempt:
  images: ["registry.k8s.io/pause:*"]
  namespaces: ["kube-*"]
registries:
  allow: ["*.corp.example", "docker.io"]
  deny: ["evil.corp.example"]
  allowPrivate: ["127.0.0.1:5000"]
  hosts:
    "registry.corp.example:5000":
      ca: /etc/pinhook/ca/corp.pem
    "plain.corp.example:5000":
      insecure: true
mirrors:
  configMapKey: registries.conf
  allow:
    - source: registry.corp.example/team
      mirror: mirror.corp.example/team
kinds:
  - group: argoproj.io
    kind: Rollout
    podSpec: /spec/template/spec
"#;

#[test]
fn the_complete_example_parses() {
    let compiled = Policy::parse(COMPLETE).expect("valid");
    let policy = &compiled.policy;
    assert_eq!(policy.mode, Mode::Audit);
    assert_eq!(policy.resolve, ResolveMode::Always);
    assert_eq!(policy.target, PinTarget::Pods);
    assert_eq!(compiled.form(), PinForm::DigestOnly);
    assert_eq!(policy.on_resolution_failure, FailureAction::Allow);
    assert!(compiled.is_exempt_namespace("kube-system"));
    assert!(!compiled.is_exempt_namespace("default"));
    let pause = Reference::parse("registry.k8s.io/pause:3.9").expect("ref");
    assert!(compiled.is_exempt_image(&pause));
    assert_eq!(
        compiled.kinds.pod_spec_pointer("argoproj.io", "Rollout"),
        Some("/spec/template/spec")
    );
    assert!(policy.registries.hosts["plain.corp.example:5000"].insecure);
    assert_eq!(policy.mirrors.allow.len(), 1);
}

#[test]
fn an_empty_file_is_the_default_policy() {
    let compiled = Policy::parse("").expect("valid");
    assert_eq!(compiled.policy, Policy::default());
    assert_eq!(compiled.policy.mode, Mode::Enforce);
    assert_eq!(compiled.policy.resolve, ResolveMode::IfNotPresent);
}

#[test]
fn errors_name_the_field() {
    let cases = [
        ("mode: strict", "strict"),
        ("moed: audit", "moed"),
        ("resolve: sometimes", "sometimes"),
        (
            "kinds:\n  - kind: Rollout\n    podSpec: spec.template",
            "kinds[0].podSpec",
        ),
        ("exempt:\n  imagez: []", "imagez"),
        (
            "mirrors:\n  allow:\n    - source: a\n      mirror: \"\"",
            "mirrors.allow[0]",
        ),
        ("form: sha", "sha"),
        ("mode: [", ""),
    ];
    for (text, expected) in cases {
        let error = Policy::parse(text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.starts_with("policy is not valid"), "{text}: {error}");
        assert!(error.contains(expected), "{text}: {error}");
        assert!(!error.contains('\n'), "{text}: {error}");
    }
}

#[test]
fn namespace_label_overrides_mode() {
    let compiled = Policy::parse("mode: enforce").expect("valid");
    assert_eq!(compiled.mode_for(None), Ok(Mode::Enforce));
    assert_eq!(compiled.mode_for(Some("audit")), Ok(Mode::Audit));
    assert_eq!(compiled.mode_for(Some("off")), Ok(Mode::Off));
    assert!(compiled.mode_for(Some("loud")).is_err());
}

#[test]
fn a_parse_error_keeps_the_parser_error_and_prints_it_once() {
    let error = Policy::parse("mode: strict").err();
    assert!(matches!(error, Some(PolicyError::Parse(_))), "{error:?}");
    let error = error.map(|e| (e.to_string(), crate::error::error_chain(&e)));
    let expected = "policy is not valid: line 1 column 7: unknown variant `strict`, expected one of enforce, audit, off";
    assert_eq!(error, Some((expected.to_string(), expected.to_string())));
}

#[test]
fn deny_private_networks_reaches_the_host_rules() {
    let compiled = Policy::parse("registries:\n  denyPrivateNetworks: true\n").expect("valid");
    assert!(compiled.hosts.deny_private_networks);
    assert!(compiled.hosts.check_host("10.0.0.1").is_err());
    let default = Policy::parse("").expect("valid");
    assert_eq!(default.hosts.check_host("10.0.0.1"), Ok(()));
}

#[test]
fn the_loop_breaker_has_defaults_and_bounded_times() {
    let compiled = Policy::parse("mode: enforce").expect("valid");
    let breaker = &compiled.policy.owners.loop_breaker;
    assert_eq!(
        (
            breaker.max_pods,
            breaker.window_seconds,
            breaker.pause_seconds
        ),
        (10, 60, 600)
    );
    let off = Policy::parse("owners:\n  loopBreaker:\n    maxPods: 0\n").expect("valid");
    assert_eq!(off.policy.owners.loop_breaker.max_pods, 0);
    for (text, field) in [
        (
            "owners:\n  loopBreaker:\n    windowSeconds: 0\n",
            "windowSeconds",
        ),
        (
            "owners:\n  loopBreaker:\n    pauseSeconds: 86401\n",
            "pauseSeconds",
        ),
    ] {
        let error = Policy::parse(text).expect_err("invalid");
        assert_eq!(
            error.to_string(),
            format!(
                "policy is not valid: owners.loopBreaker.{field}: must be from 1 to 86400 seconds"
            )
        );
    }
}

#[test]
fn verify_entries_are_compiled_and_checked_at_load() {
    let pem = serde_json::to_string(&crate::signatures::key::tests::key_pair().1).unwrap();
    let text =
        format!("verify:\n- images: [\"registry.example/team/*\"]\n  keys:\n  - pem: {pem}\n");
    let compiled = Policy::parse(&text).expect("valid");
    assert_eq!(compiled.verify.len(), 1);
    let app = Reference::parse("registry.example/team/app:1.0").expect("ref");
    assert_eq!(compiled.verify_rules(&app).count(), 1);
    let other = Reference::parse("registry.example/other/app:1.0").expect("ref");
    assert_eq!(compiled.verify_rules(&other).count(), 0);

    for (text, expected) in [
        (
            format!("resolve: Never\n{text}"),
            "policy is not valid: verify: needs registry calls to fetch signatures",
        ),
        (
            "verify:\n- images: [\"a/*\"]\n  keys:\n  - pem: \"-----BEGIN PUBLIC KEY-----\\nAAAA\\n-----END PUBLIC KEY-----\\n\"\n".to_string(),
            "policy is not valid: verify[0].keys[0].pem: not a public key cosign signs with",
        ),
        (
            "verify:\n- images: [\"a/*\"]\n  keys: []\n".to_string(),
            "policy is not valid: verify[0].keys: must name at least one public key",
        ),
        (
            "verify:\n- images: [\"a/*\"]\n  keys:\n  - file: /nonexistent/k.pub\n".to_string(),
            "policy is not valid: verify[0].keys[0].file: cannot read /nonexistent/k.pub",
        ),
    ] {
        let error = Policy::parse(&text).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.starts_with(expected), "{text}: {error}");
        assert!(!error.contains('\n'), "{error}");
    }
}
