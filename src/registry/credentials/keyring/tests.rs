//! Tests of kubelet's matching: which keys answer for which image, in which order, across
//! layers; then the Go URL code, the glob matcher and the docker config reader together on
//! arbitrary input.

use base64::Engine as _;
use rstest::rstest;

use super::go_glob::go_filepath_match;
use super::*;

/// A keyring with one credential per key, named after the key.
fn keyring(keys: &[&str]) -> Keyring {
    let mut keyring = Keyring::new();
    for key in keys {
        keyring.add(key, Credential::basic(*key, "pw"));
    }
    keyring
}

fn usernames(credentials: Vec<Credential>) -> Vec<String> {
    credentials
        .into_iter()
        .map(|credential| match credential {
            Credential::Basic { username, .. } => username,
            Credential::Anonymous => "<anonymous>".to_owned(),
            other => format!("{other:?}"),
        })
        .collect()
}

pub(super) fn lookup(keyring: &Keyring, image: &str) -> Vec<String> {
    let reference = Reference::parse(image).expect("test image parses");
    usernames(keyring.lookup(&reference))
}

pub(super) fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

pub(super) fn config_json(json: &str) -> Keyring {
    Keyring::from_docker_config_json(json.as_bytes()).expect("test config parses")
}

// --- matching keys to images (keyring.go) ---

#[rstest]
#[case::wildcard_label(&["*.example.com"], "a.example.com/team/app", &["*.example.com"])]
#[case::wildcard_not_apex(&["*.example.com"], "example.com/team/app", &[])]
#[case::wildcard_one_label_only(&["*.example.com"], "a.b.example.com/team/app", &[])]
#[case::wildcard_inner_label(&["a.*.com"], "a.b.com/x", &["a.*.com"])]
#[case::wildcard_partial_label(&["reg-*.example.com"], "reg-eu.example.com/x", &["reg-*.example.com"])]
#[case::wildcard_all_labels(&["*.*"], "quay.io/x", &["*.*"])]
// `?` starts the URL's query: the key `reg?.io` is stored as the host `reg`.
#[case::question_mark_is_a_query(&["reg?.io"], "reg1.io/x", &[])]
#[case::question_mark_cuts_the_key(&["reg.io/te?am"], "reg.io/team/x", &["reg.io/te?am"])]
#[case::class_range(&["a.[a-c].example.com"], "a.b.example.com/x", &["a.[a-c].example.com"])]
#[case::class_miss(&["a.[a-c].example.com"], "a.d.example.com/x", &[])]
#[case::class_negated(&["a.[^x].com"], "a.b.com/x", &[])]
#[case::malformed_glob(&["a.[b-.com"], "a.b.com/x", &[])]
#[case::host_exact(&["quay.io"], "quay.io/coreos/etcd", &["quay.io"])]
#[case::host_other(&["quay.io"], "gcr.io/coreos/etcd", &[])]
#[case::host_case_sensitive(&["Reg.io"], "reg.io/x", &[])]
#[case::port_missing_in_image(&["reg.io:5000"], "reg.io/x", &[])]
#[case::port_missing_in_key(&["reg.io"], "reg.io:5000/x", &[])]
#[case::port_equal(&["reg.io:5000"], "reg.io:5000/x", &["reg.io:5000"])]
#[case::port_different(&["reg.io:5000"], "reg.io:5001/x", &[])]
#[case::port_with_wildcard(&["*.example.com:5000"], "a.example.com:5000/x", &["*.example.com:5000"])]
#[case::ip_and_port(&["127.0.0.1:5000"], "127.0.0.1:5000/x", &["127.0.0.1:5000"])]
#[case::localhost_port(&["localhost:5000"], "localhost:5000/x", &["localhost:5000"])]
#[case::path_prefix(&["reg.io/team"], "reg.io/team/app", &["reg.io/team"])]
#[case::path_is_a_string_prefix(&["reg.io/foo"], "reg.io/foobar/x", &["reg.io/foo"])]
#[case::path_trailing_slash(&["reg.io/foo/"], "reg.io/foobar/x", &[])]
#[case::path_trailing_slash_match(&["reg.io/foo/"], "reg.io/foo/x", &["reg.io/foo/"])]
#[case::path_not_prefix(&["reg.io/team"], "reg.io/other/team", &[])]
#[case::path_longer_than_image(&["reg.io/team/app/extra"], "reg.io/team/app", &[])]
#[case::path_whole_repository(&["reg.io/team/app"], "reg.io/team/app:v1", &["reg.io/team/app"])]
#[case::https_scheme(&["https://reg.io"], "reg.io/x", &["https://reg.io"])]
#[case::http_scheme(&["http://reg.io"], "reg.io/x", &["http://reg.io"])]
#[case::scheme_with_port_and_path(&["https://reg.io:5000/team"], "reg.io:5000/team/app", &["https://reg.io:5000/team"])]
#[case::upper_case_scheme_is_no_scheme(&["HTTPS://reg.io"], "reg.io/x", &[])]
#[case::v1_dropped(&["https://reg.io/v1/"], "reg.io/x", &["https://reg.io/v1/"])]
#[case::v2_dropped(&["https://reg.io/v2/"], "reg.io/x", &["https://reg.io/v2/"])]
#[case::v2_dropped_keeps_path(&["reg.io/v2/team"], "reg.io/team/app", &["reg.io/v2/team"])]
#[case::v2_dropped_path_no_match(&["reg.io/v2/team"], "reg.io/other/app", &[])]
#[case::v1_without_slash_kept(&["reg.io/v1"], "reg.io/team/app", &[])]
#[case::v1_without_slash_is_a_path(&["reg.io/v1"], "reg.io/v1x/app", &["reg.io/v1"])]
#[case::userinfo_ignored(&["user@reg.io"], "reg.io/x", &["user@reg.io"])]
#[case::query_and_fragment_ignored(&["reg.io/team?x=1#y"], "reg.io/team/app", &["reg.io/team?x=1#y"])]
#[case::percent_decoded_path(&["reg.io/%74eam"], "reg.io/team/app", &["reg.io/%74eam"])]
#[case::bad_port_ignored(&["reg.io:http"], "reg.io/x", &[])]
#[case::bad_escape_ignored(&["reg.io/a%zz"], "reg.io/a/x", &[])]
#[case::space_in_host_ignored(&["reg io"], "reg.io/x", &[])]
#[case::empty_key(&[""], "reg.io/x", &[])]
#[case::ipv6_with_port(&["[::1]:5000"], "[::1]:5000/app", &["[::1]:5000"])]
#[case::ipv6_other_port(&["[::1]:5000"], "[::1]:5001/app", &[])]
#[case::ipv6_path(&["https://[::1]:5000/team"], "[::1]:5000/team/app", &["https://[::1]:5000/team"])]
#[case::ipv6_expanded_is_another_string(&["[0:0::1]:5000"], "[::1]:5000/app", &[])]
#[case::ipv6_without_port_never_matches(&["[::1]"], "[::1]/app", &[])]
#[case::ipv6_not_an_address(&["[*]:5000"], "localhost:5000/app", &[])]
#[case::class_first_label_reads_as_ipv6(&["[ab].example.com"], "a.example.com/x", &[])]
fn matching(#[case] keys: &[&str], #[case] image: &str, #[case] expected: &[&str]) {
    assert_eq!(lookup(&keyring(keys), image), expected);
}

#[rstest]
#[case::path_before_host(&["quay.io", "quay.io/coreos"], "quay.io/coreos/etcd", &["quay.io/coreos", "quay.io"])]
#[case::longer_path_first(&["reg.io", "reg.io/a", "reg.io/ab"], "reg.io/abc/x", &["reg.io/ab", "reg.io/a", "reg.io"])]
#[case::exact_host_before_wildcard(&["*.example.com", "a.example.com"], "a.example.com/x", &["a.example.com", "*.example.com"])]
#[case::reverse_string_order_not_specificity(&["*.example.com/team", "a.example.com"], "a.example.com/team/x", &["a.example.com", "*.example.com/team"])]
#[case::same_stored_key_keeps_insertion_order(&["reg.io", "https://reg.io/v2/", "http://reg.io/"], "reg.io/x", &["reg.io", "https://reg.io/v2/", "http://reg.io/"])]
fn most_specific_first(#[case] keys: &[&str], #[case] image: &str, #[case] expected: &[&str]) {
    assert_eq!(lookup(&keyring(keys), image), expected);
}

#[rstest]
#[case::official_image("nginx", true)]
#[case::official_image_tagged("nginx:1.25", true)]
#[case::docker_io_library("docker.io/library/nginx", true)]
#[case::organisation("myorg/app", true)]
#[case::index_docker_io("index.docker.io/myorg/app", true)]
#[case::other_registry("quay.io/x", false)]
#[case::registry_with_port("reg.io:5000/x", false)]
#[case::localhost_with_port("localhost:5000/x", false)]
// kubelet's isDefaultRegistryMatch calls a first component without '.' or ':' "Docker Hub",
// and so hands Docker Hub's credentials to a single-label host (`EVIL/x:1`, which a cluster's
// DNS search path may turn into a tenant's Service). pinhook never does (issue 44): only an
// image that is on Docker Hub gets them.
#[case::localhost_is_not_docker_hub("localhost/app", false)]
#[case::upper_case_single_label_host_is_not_docker_hub("Registry/app", false)]
#[case::evil("EVIL/x:1", false)]
fn docker_hub_fallback(#[case] image: &str, #[case] falls_back: bool) {
    let keyring = keyring(&["https://index.docker.io/v1/"]);
    let expected: &[&str] = if falls_back {
        &["https://index.docker.io/v1/"]
    } else {
        &[]
    };
    assert_eq!(lookup(&keyring, image), expected);
}

#[rstest]
#[case::v1_url("https://index.docker.io/v1/")]
#[case::v2_url("https://index.docker.io/v2/")]
#[case::bare_host("index.docker.io")]
#[case::http("http://index.docker.io/")]
fn docker_hub_fallback_key_spellings(#[case] key: &str) {
    assert_eq!(lookup(&keyring(&[key]), "nginx"), [key]);
}

#[test]
fn docker_hub_fallback_needs_the_exact_index_host() {
    let keyring = keyring(&["index.docker.io:443", "https://index.docker.io/v1/library"]);
    assert!(lookup(&keyring, "nginx").is_empty());
}

#[test]
fn docker_io_keys_match_directly_and_suppress_the_fallback() {
    let keyring = keyring(&["https://index.docker.io/v1/", "docker.io"]);
    assert_eq!(lookup(&keyring, "nginx"), ["docker.io"]);
    assert_eq!(lookup(&keyring, "docker.io/myorg/app"), ["docker.io"]);
}

#[test]
fn docker_io_path_key_matches_only_its_namespace() {
    let keyring = keyring(&["docker.io/myorg", "https://index.docker.io/v1/"]);
    assert_eq!(lookup(&keyring, "myorg/app"), ["docker.io/myorg"]);
    assert_eq!(lookup(&keyring, "nginx"), ["https://index.docker.io/v1/"]);
}

#[test]
fn digest_and_tag_do_not_take_part() {
    let keyring = keyring(&["reg.io/team/app"]);
    let digest = format!("reg.io/team/app@sha256:{}", "a".repeat(64));
    assert_eq!(lookup(&keyring, &digest), ["reg.io/team/app"]);
    assert_eq!(lookup(&keyring, "reg.io/team/app:v1"), ["reg.io/team/app"]);
}

// --- layers: merge (one pod keyring) and extend (pod, then node) ---

#[test]
fn merged_secrets_are_ordered_together() {
    let mut pod = keyring(&["quay.io"]);
    pod.merge(keyring(&["quay.io/org"]));
    assert_eq!(lookup(&pod, "quay.io/org/app"), ["quay.io/org", "quay.io"]);
}

#[test]
fn merged_secrets_share_the_docker_hub_fallback() {
    let mut pod = keyring(&["https://index.docker.io/v1/"]);
    pod.merge(keyring(&["docker.io"]));
    assert_eq!(lookup(&pod, "nginx"), ["docker.io"]);
}

#[test]
fn merged_same_key_keeps_both_credentials_in_order() {
    let mut pod = Keyring::new();
    pod.add("reg.io", Credential::basic("first", "pw"));
    let mut second = Keyring::new();
    second.add("https://reg.io/v1/", Credential::basic("second", "pw"));
    pod.merge(second);
    assert_eq!(lookup(&pod, "reg.io/x"), ["first", "second"]);
}

#[test]
fn extend_looks_up_each_keyring_on_its_own_pod_first() {
    let mut keyring = keyring(&["quay.io"]);
    keyring.extend(self::keyring(&["quay.io/org"]));
    assert_eq!(
        lookup(&keyring, "quay.io/org/app"),
        ["quay.io", "quay.io/org"]
    );
}

#[test]
fn extend_applies_the_docker_hub_fallback_per_keyring() {
    let mut pod = Keyring::new();
    pod.add("docker.io", Credential::basic("pod", "pw"));
    let mut node = Keyring::new();
    node.add(
        "https://index.docker.io/v1/",
        Credential::basic("node", "pw"),
    );
    pod.extend(node);
    assert_eq!(lookup(&pod, "nginx"), ["pod", "node"]);
}

#[test]
fn duplicate_credentials_are_kept_once_at_their_first_place() {
    let mut pod = Keyring::new();
    pod.add("reg.io/team", Credential::basic("a", "1"));
    pod.add("reg.io", Credential::basic("b", "2"));
    pod.add("reg.io", Credential::basic("a", "1"));
    let mut node = Keyring::new();
    node.add("reg.io", Credential::basic("b", "2"));
    node.add("reg.io", Credential::basic("c", "3"));
    pod.extend(node);
    assert_eq!(lookup(&pod, "reg.io/team/app"), ["a", "b", "c"]);
}

#[test]
fn same_user_with_another_password_is_another_credential() {
    let mut keyring = Keyring::new();
    keyring.add("reg.io", Credential::basic("u", "old"));
    keyring.add("reg.io", Credential::basic("u", "new"));
    let reference = Reference::parse("reg.io/x").expect("parses");
    assert_eq!(
        keyring.lookup(&reference),
        [Credential::basic("u", "old"), Credential::basic("u", "new")]
    );
}

#[test]
fn emptiness() {
    assert!(Keyring::new().is_empty());
    assert!(
        keyring(&["reg io"]).is_empty(),
        "an unparsable key adds nothing"
    );
    assert!(!keyring(&["reg.io"]).is_empty());
    let mut extended = Keyring::new();
    extended.extend(Keyring::new());
    extended.extend(keyring(&["reg.io"]));
    assert!(!extended.is_empty());
}

#[test]
fn debug_output_hides_passwords() {
    let keyring = config_json(&format!(
        r#"{{"auths":{{"reg.io":{{"auth":"{}"}}}}}}"#,
        b64("user:hunter2")
    ));
    let debug = format!("{keyring:?}");
    assert!(
        debug.contains("reg.io") && debug.contains("user"),
        "{debug}"
    );
    assert!(!debug.contains("hunter2"), "{debug}");
}

#[rstest]
#[case::host_and_path("reg.io/team", Some("reg.io/team"))]
#[case::host_only("reg.io", Some("reg.io"))]
#[case::root_path("reg.io/", Some("reg.io"))]
#[case::v1_root("https://index.docker.io/v1/", Some("index.docker.io"))]
#[case::v2_path("reg.io/v2/team/", Some("reg.io/team/"))]
#[case::v1_no_slash("reg.io/v1", Some("reg.io/v1"))]
#[case::port("http://reg.io:5000/", Some("reg.io:5000"))]
#[case::empty_port("reg.io:", Some("reg.io:"))]
#[case::ipv6("[::1]:5000/x", Some("[::1]:5000/x"))]
#[case::ipv6_zone("[fe80::1%25en0]:5000", Some("[fe80::1%en0]:5000"))]
#[case::userinfo("user:pw@reg.io/x", Some("reg.io/x"))]
#[case::non_ascii_escape_in_host("r%C3%A9g.io", Some("rég.io"))]
#[case::ascii_escape_in_host("%72eg.io", None)]
#[case::bad_port("reg.io:x", None)]
#[case::missing_bracket("[::1:5000", None)]
#[case::not_ipv6_in_brackets("[reg.io]:5000", None)]
#[case::control_character("reg.io/\tx", None)]
#[case::bad_fragment_escape("reg.io#%zz", None)]
#[case::bad_userinfo("us er@reg.io", None)]
#[case::caret_in_host("a.[^b].io", None)]
fn stored_keys(#[case] key: &str, #[case] expected: Option<&str>) {
    let expected = expected.map(|stored| stored.as_bytes().to_vec());
    assert_eq!(stored_key(key), expected);
}

/// No input makes the parser, the URL code or the glob matcher panic.
#[test]
fn arbitrary_input_does_not_panic() {
    let pieces = [
        "a", ".", "*", "?", "[", "]", "^", "-", "\\", ":", "/", "%", "%2", "%25", "%ff", "@", "#",
        "?", "é", "☺", " ", "[::1]", ":5000", "/v1/", "/v2/", "https://", "\u{0}", "5",
    ];
    let images = [
        "nginx",
        "reg.io/x",
        "[::1]:5000/a",
        "localhost/a",
        "a.b.c:1/d/e",
        "Foo/bar",
    ];
    let references: Vec<Reference> = images
        .iter()
        .map(|image| Reference::parse(image).expect("parses"))
        .collect();
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut keyring = Keyring::new();
    for _ in 0..3000 {
        let len = next(8);
        let key: String = (0..len).map(|_| pieces[next(pieces.len())]).collect();
        keyring.add(&key, Credential::basic(key.clone(), ""));
        let name: String = (0..next(5)).map(|_| pieces[next(pieces.len())]).collect();
        let _ = go_filepath_match(key.as_bytes(), name.as_bytes());
        let _ = Keyring::from_docker_config_json(key.as_bytes());
        let json = format!(
            r#"{{"auths":{{"{}":{{"auth":"{}"}}}}}}"#,
            key.escape_default(),
            name.escape_default()
        );
        let _ = Keyring::from_docker_config_json(json.as_bytes());
    }
    for reference in &references {
        let _ = keyring.lookup(reference);
    }
}
