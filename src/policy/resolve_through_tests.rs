//! `registries.resolveThrough`: parsing, each refusal with the field it names, and the rewrite.

use rstest::rstest;

use super::*;
use crate::policy::{Policy, PolicyError};

fn compile(yaml: &str) -> Result<crate::policy::CompiledPolicy, PolicyError> {
    Policy::parse(yaml)
}

fn problem(yaml: &str) -> String {
    match compile(yaml) {
        Err(PolicyError::Invalid { field, problem }) => format!("{field}: {problem}"),
        Err(other) => format!("other error: {other}"),
        Ok(_) => "accepted".to_string(),
    }
}

fn one(source: &str, mirror: &str) -> String {
    format!(
        "registries:\n  resolveThrough:\n    - source: {source:?}\n      mirrors:\n        - location: {mirror:?}\n"
    )
}

fn reference(text: &str) -> Reference {
    match Reference::parse(text) {
        Ok(r) => r,
        Err(e) => panic!("test reference {text}: {e}"),
    }
}

const TWO_MIRRORS: &str = r#"
registries:
  allowPrivate: ["127.0.0.1:5001"]
  resolveThrough:
    - source: registry.example/team
      verifySource: true
      mirrors:
        - location: mirror-a.corp.example:5000/copy/team
          ca: /etc/pinhook/mirror-ca/a.pem
          credentials: /etc/pinhook/mirror-creds/config.json
        - location: 127.0.0.1:5001
          insecure: true
    - source: registry.example
      mirrors:
        - location: mirror-b.corp.example
    - source: docker.io/library
      mirrors:
        - location: hub-cache.corp.example/library
"#;

#[test]
fn a_complete_entry_parses_and_adds_its_tls_settings_to_the_hosts() -> Result<(), PolicyError> {
    let compiled = compile(TWO_MIRRORS)?;
    let entry = &compiled.policy.registries.resolve_through[0];
    assert_eq!(entry.verify_source, VerifySource::IfAnswered);
    assert_eq!(entry.mirrors.len(), 2);
    assert_eq!(
        compiled.registry_hosts["mirror-a.corp.example:5000"].ca,
        Some(PathBuf::from("/etc/pinhook/mirror-ca/a.pem"))
    );
    assert!(compiled.registry_hosts["127.0.0.1:5001"].insecure);
    assert!(!compiled
        .registry_hosts
        .contains_key("mirror-b.corp.example"));
    Ok(())
}

#[test]
fn the_first_matching_entry_rewrites_the_prefix_to_each_mirror_in_order() -> Result<(), PolicyError>
{
    let routes = compile(TWO_MIRRORS)?.routes;
    let route = routes
        .route(&reference("registry.example/team/app:1.0"))
        .ok_or("no route")
        .map_err(|e| PolicyError::Invalid {
            field: e.to_string(),
            problem: String::new(),
        })?;
    assert_eq!(route.source, "registry.example/team");
    assert_eq!(route.verify_source, VerifySource::IfAnswered);
    let at: Vec<String> = route
        .mirrors
        .iter()
        .map(|m| m.reference.to_string())
        .collect();
    assert_eq!(
        at,
        [
            "mirror-a.corp.example:5000/copy/team/app:1.0",
            "127.0.0.1:5001/app:1.0"
        ]
    );
    assert_eq!(
        route.mirrors[0].location,
        "mirror-a.corp.example:5000/copy/team"
    );
    assert_eq!(
        route.mirrors[0].credentials,
        Some(PathBuf::from("/etc/pinhook/mirror-creds/config.json"))
    );
    Ok(())
}

#[rstest]
#[case::host_only_entry(
    "registry.example/other/app:2",
    Some("mirror-b.corp.example/other/app:2")
)]
#[case::path_boundary(
    "registry.example/teamwork/app:1",
    Some("mirror-b.corp.example/teamwork/app:1")
)]
#[case::host_case_folded(
    "Registry.Example/team/app:1",
    Some("mirror-a.corp.example:5000/copy/team/app:1")
)]
#[case::docker_hub_official("nginx:1.25", Some("hub-cache.corp.example/library/nginx:1.25"))]
#[case::docker_hub_user_image("someone/app:1", None)]
#[case::other_port("registry.example:5000/team/app:1", None)]
#[case::latest_by_default(
    "registry.example/team/app",
    Some("mirror-a.corp.example:5000/copy/team/app:latest")
)]
fn which_references_are_routed(
    #[case] image: &str,
    #[case] first: Option<&str>,
) -> Result<(), PolicyError> {
    let routes = compile(TWO_MIRRORS)?.routes;
    let got = routes
        .route(&reference(image))
        .and_then(|route| route.mirrors.first().map(|m| m.reference.to_string()));
    assert_eq!(got.as_deref(), first);
    Ok(())
}

#[test]
fn a_source_naming_a_whole_repository_matches_that_repository_only() -> Result<(), PolicyError> {
    let routes = compile(&one("registry.example/team/app", "mirror.example/app"))?.routes;
    let route = routes.route(&reference("registry.example/team/app:1"));
    assert_eq!(
        route.map(|r| r.mirrors[0].reference.to_string()).as_deref(),
        Some("mirror.example/app:1")
    );
    assert!(routes
        .route(&reference("registry.example/team/app2:1"))
        .is_none());
    assert!(routes
        .route(&reference("registry.example/team/app/sub:1"))
        .is_some());
    Ok(())
}

#[rstest]
#[case::empty_source("", "mirror.example", "resolveThrough[0].source: must not be empty")]
#[case::empty_mirror("registry.example", "", "mirrors[0].location: must not be empty")]
#[case::wildcard_source("*.registry.example", "mirror.example", "has a wildcard")]
#[case::wildcard_mirror("registry.example", "mirror.example/*", "has a wildcard")]
#[case::scheme("https://registry.example", "mirror.example", "has a URL scheme")]
#[case::traversal(
    "registry.example/team/../other",
    "mirror.example",
    "'..' path segment"
)]
#[case::dot_segment("registry.example", "mirror.example/./x", "'.' or '..' path segment")]
#[case::trailing_slash("registry.example/team/", "mirror.example", "trailing '/'")]
#[case::double_slash("registry.example//team", "mirror.example", "empty, '.' or '..'")]
#[case::no_host("team/app", "mirror.example", "must start with a registry host")]
#[case::tag(
    "registry.example/app:1.0",
    "mirror.example",
    "is not host[:port][/path]"
)]
#[case::digest("registry.example", "mirror.example@sha256:00", "contains '@'")]
#[case::uppercase_path("registry.example/Team", "mirror.example", "is not host[:port][/path]")]
#[case::whitespace("registry.example/a b", "mirror.example", "contains ' '")]
#[case::newline("registry.example", "mirror.example\nx", "contains '\\n'")]
#[case::mirror_is_source(
    "registry.example/team",
    "REGISTRY.example/team",
    "is the source itself"
)]
#[case::metadata_mirror("registry.example", "169.254.169.254", "cloud metadata address")]
#[case::loopback_mirror("registry.example", "localhost:5000", "loopback address")]
fn hostile_values_are_refused_naming_the_field(
    #[case] source: &str,
    #[case] mirror: &str,
    #[case] expected: &str,
) {
    let got = problem(&one(source, mirror));
    assert!(got.contains(expected), "{got}");
}

#[test]
fn an_overlong_location_is_refused() {
    let long = format!("registry.example/{}", "a".repeat(250));
    let got = problem(&one(&long, "mirror.example"));
    assert!(got.contains("at most 255"), "{got}");
}

#[test]
fn duplicate_sources_and_mirrors_are_refused() {
    let got = problem(
        "registries:\n  resolveThrough:\n    - {source: registry.example, mirrors: [{location: m.example}]}\n    - {source: Registry.Example, mirrors: [{location: n.example}]}\n",
    );
    assert!(
        got.contains("resolveThrough[1].source") && got.contains("earlier entry"),
        "{got}"
    );
    let got = problem(
        "registries:\n  resolveThrough:\n    - {source: registry.example, mirrors: [{location: m.example}, {location: m.example}]}\n",
    );
    assert!(
        got.contains("mirrors[1].location") && got.contains("listed twice"),
        "{got}"
    );
}

#[test]
fn counts_are_bounded() {
    let got =
        problem("registries:\n  resolveThrough:\n    - {source: registry.example, mirrors: []}\n");
    assert!(got.contains("must list 1 to 8 mirrors"), "{got}");
    let mirrors: Vec<String> = (0..9)
        .map(|i| format!("{{location: m{i}.example}}"))
        .collect();
    let got = problem(&format!(
        "registries:\n  resolveThrough:\n    - {{source: registry.example, mirrors: [{}]}}\n",
        mirrors.join(", ")
    ));
    assert!(got.contains("must list 1 to 8 mirrors"), "{got}");
    let entries: String = (0..65)
        .map(|i| format!("    - {{source: r{i}.example, mirrors: [{{location: m.example}}]}}\n"))
        .collect();
    let got = problem(&format!("registries:\n  resolveThrough:\n{entries}"));
    assert!(got.contains("at most 64"), "{got}");
}

#[test]
fn a_mirror_the_host_rules_refuse_is_refused() {
    let got = problem(
        "registries:\n  deny: [\"*.evil.example\"]\n  resolveThrough:\n    - {source: registry.example, mirrors: [{location: m.evil.example}]}\n",
    );
    assert!(got.contains("deny list"), "{got}");
    let got = problem(
        "registries:\n  allow: [registry.example]\n  resolveThrough:\n    - {source: registry.example, mirrors: [{location: m.example}]}\n",
    );
    assert!(got.contains("not on the policy's allow list"), "{got}");
}

#[rstest]
#[case::relative("ca: certs/ca.pem", "must be an absolute path")]
#[case::traversal("credentials: /etc/pinhook/../shadow", "must not contain")]
#[case::empty("ca: \"\"", "must be a file path")]
fn file_paths_are_absolute_and_plain(#[case] line: &str, #[case] expected: &str) {
    let got = problem(&format!(
        "registries:\n  resolveThrough:\n    - source: registry.example\n      mirrors:\n        - location: m.example\n          {line}\n"
    ));
    assert!(got.contains(expected), "{got}");
}

#[test]
fn a_mirror_host_with_other_tls_settings_is_refused() {
    let got = problem(
        "registries:\n  hosts:\n    m.example:\n      insecure: true\n  resolveThrough:\n    - source: registry.example\n      mirrors:\n        - {location: m.example/a, ca: /etc/ca.pem}\n",
    );
    assert!(got.contains("ca/insecure differ"), "{got}");
}

#[test]
fn unknown_fields_are_refused() {
    let got = problem(
        "registries:\n  resolveThrough:\n    - {source: registry.example, mirror: m.example, mirrors: [{location: m.example}]}\n",
    );
    assert!(got.contains("unknown field"), "{got}");
}

#[test]
fn the_suggestion_is_one_line_of_policy() {
    assert_eq!(
        Routes::suggestion("registry.example/team/", "mirror.example/team"),
        "registries.resolveThrough: [{source: registry.example/team, mirrors: [{location: mirror.example/team}]}] with a digest-only mirror on the nodes"
    );
}

/// `verifySource` takes `true`, `false` or `required` (issue 43); anything else is refused at
/// load, naming what it takes.
#[rstest]
#[case::absent("", Some(VerifySource::Off))]
#[case::off("      verifySource: false\n", Some(VerifySource::Off))]
#[case::if_answered("      verifySource: true\n", Some(VerifySource::IfAnswered))]
#[case::required("      verifySource: required\n", Some(VerifySource::Required))]
#[case::quoted_required("      verifySource: \"required\"\n", Some(VerifySource::Required))]
#[case::another_word("      verifySource: always\n", None)]
#[case::a_number("      verifySource: 1\n", None)]
fn verify_source_is_true_false_or_required(
    #[case] line: &str,
    #[case] expected: Option<VerifySource>,
) {
    let yaml = format!(
        "registries:\n  resolveThrough:\n    - source: registry.example/team\n{line}      mirrors:\n        - location: mirror.example/team\n"
    );
    match (compile(&yaml), expected) {
        (Ok(compiled), Some(expected)) => {
            assert_eq!(
                compiled.policy.registries.resolve_through[0].verify_source,
                expected
            );
            let route = compiled
                .routes
                .route(&reference("registry.example/team/app:1.0"));
            assert_eq!(route.map(|r| r.verify_source), Some(expected));
        }
        (Err(error), None) => {
            let text = error.to_string();
            assert!(text.contains(r#"true, false or "required""#), "{text}");
        }
        (got, expected) => panic!("{line:?}: {:?}, expected {expected:?}", got.map(|_| ())),
    }
}
