//! Rule tables for the registries.conf reading, written from containers/image
//! `pkg/sysregistriesv2/system_registries_v2.go` and its tests (`system_registries_v2_test.go`,
//! `testdata/*.conf`, `testdata/registries.conf.d/`), each asserting the exact verdict and
//! message through the public [`review`].

use rstest::rstest;
use serde_json::{json, Map, Value};

use crate::mirror_guard::{review, MirrorError, MirrorReview};
use crate::policy::mirror_policy::{AllowedMirror, MirrorPolicy};

/// A ConfigMap whose `data` holds `files` (key, text).
fn configmap(files: &[(&str, &str)]) -> Value {
    let data: Map<String, Value> = files
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    json!({"kind": "ConfigMap", "metadata": {"namespace": "ns", "name": "c"}, "data": data})
}

fn judged(policy: &MirrorPolicy, files: &[(&str, &str)]) -> Result<MirrorReview, MirrorError> {
    review(policy, "", "ConfigMap", &configmap(files))
        .map(|r| r.expect("carries a registries.conf"))
}

fn messages(review: &MirrorReview) -> Vec<&str> {
    review
        .violations
        .iter()
        .map(|v| v.message.as_str())
        .collect()
}

fn pairs(review: &MirrorReview) -> Vec<(&str, &str)> {
    review
        .violations
        .iter()
        .map(|v| (v.source.as_str(), v.mirror.as_str()))
        .collect()
}

const RISK: &str = "a tag mirror can serve different content for the same tag";
const CANNOT_LOAD: &str = "CRI-O cannot load it: containers/image sysregistriesv2";

// --- load errors: every one CRI-O raises is a denial naming the line and the rule ---

#[rstest]
#[case::prefix_with_uri_scheme(
    "[[registry]]\nprefix = \"https://registry.example\"\nlocation = \"registry.example\"\n",
    "line 1, [[registry]] prefix=\"https://registry.example\": invalid location \
     'https://registry.example': URI schemes are not supported (CANNOT_LOAD parseLocation)"
)]
#[case::location_with_uri_scheme(
    "\n[[registry]]\nlocation = \"http://registry.example/\"\n",
    "line 2, [[registry]] location=\"http://registry.example\": invalid location \
     'http://registry.example/': URI schemes are not supported (CANNOT_LOAD parseLocation)"
)]
#[case::https_mirror_location(
    "[[registry]]\nlocation = \"registry.example\"\n[[registry.mirror]]\nlocation = \"https://mirror.example\"\npull-from-mirror = \"digest-only\"\n",
    "line 3, [[registry]] location=\"registry.example\" mirror[0]: invalid location \
     'https://mirror.example': URI schemes are not supported (CANNOT_LOAD parseLocation)"
)]
#[case::wildcard_prefix_with_path(
    "[[registry]]\nprefix = \"*.example.com/team\"\nlocation = \"mirror.example\"\n",
    "line 1, [[registry]] prefix=\"*.example.com/team\": Wildcarded prefix should be in the \
     format: *.example.com. Current prefix \"*.example.com/team\" is incorrectly formatted \
     (CANNOT_LOAD loadConfigFile)"
)]
#[case::wildcard_prefix_with_port(
    "[[registry]]\nprefix = \"*.example.com:5000\"\n",
    "line 1, [[registry]] prefix=\"*.example.com:5000\": Wildcarded prefix should be in the \
     format: *.example.com. Current prefix \"*.example.com:5000\" is incorrectly formatted \
     (CANNOT_LOAD loadConfigFile)"
)]
#[case::non_wildcard_prefix_without_location(
    "[[registry]]\nprefix = \"registry.example/team\"\nblocked = true\n",
    "line 1, [[registry]] prefix=\"registry.example/team\": invalid condition: location is unset \
     and prefix is not in the format: *.example.com (CANNOT_LOAD postProcessRegistries)"
)]
#[case::missing_registry_location(
    "[[registry]]\nblocked = true\n[[registry.mirror]]\nlocation = \"mirror.example\"\n",
    "line 1, [[registry]] #0: invalid condition: both location and prefix are unset \
     (CANNOT_LOAD postProcessRegistries)"
)]
#[case::invalid_config_level_mirror(
    "[[registry]]\nprefix = \"registry-a.com/foo\"\nlocation = \"registry-a.com/bar\"\npull-from-mirror = \"digest-only\"\n\n[[registry.mirror]]\nlocation = \"mirror-1.registry-a.com\"\n",
    "line 1, [[registry]] prefix=\"registry-a.com/foo\": pull-from-mirror must not be set for a \
     non-mirror registry \"registry-a.com/foo\" (CANNOT_LOAD postProcessRegistries)"
)]
#[case::invalid_conflict_mirror(
    "[[registry]]\nprefix = \"registry-a.com/foo\"\nlocation = \"registry-a.com/bar\"\nmirror-by-digest-only = true\n\n[[registry.mirror]]\npull-from-mirror = \"digest-only\"\nlocation = \"mirror-1.registry-a.com\"\n",
    "line 6, [[registry]] prefix=\"registry-a.com/foo\" mirror[0]: cannot set mirror usage \
     mirror-by-digest-only for the registry (\"registry-a.com/foo\") and pull-from-mirror for \
     per-mirror (\"mirror-1.registry-a.com\") at the same time (CANNOT_LOAD postProcessRegistries)"
)]
#[case::insecure_conflicts(
    "[[registry]]\nlocation = \"registry.com\"\n\n[[registry]]\nprefix = \"registry.com/foo\"\nlocation = \"registry.com\"\ninsecure = true\n",
    "line 4, [[registry]] prefix=\"registry.com/foo\": registry 'registry.com' is defined \
     multiple times with conflicting 'insecure' setting (CANNOT_LOAD postProcessRegistries)"
)]
#[case::blocked_conflicts(
    "[[registry]]\nlocation = \"registry.com\"\nblocked = true\n\n[[registry]]\nprefix = \"registry.com/foo\"\nlocation = \"registry.com\"\n",
    "line 5, [[registry]] prefix=\"registry.com/foo\": registry 'registry.com' is defined \
     multiple times with conflicting 'blocked' setting (CANNOT_LOAD postProcessRegistries)"
)]
#[case::mixing_v1_v2_empty(
    "unqualified-search-registries = []\n\n[registries.search]\nregistries = []\n\n[registries.block]\nregistries = []\n",
    "line 3: mixing sysregistry v1/v2 is not supported ([registries.*] next to v2 settings) \
     (CANNOT_LOAD loadConfigFile)"
)]
#[case::mixing_v1_v2(
    "[[registry]]\nlocation = \"registry.example\"\n\n[registries.insecure]\nregistries = [\"registry.example\"]\n",
    "line 4: mixing sysregistry v1/v2 is not supported ([registries.*] next to v2 settings) \
     (CANNOT_LOAD loadConfigFile)"
)]
#[case::v1_main_file(
    "[registries.block]\nregistries = [\"https://registry.example\"]\n",
    "line 1: v1 format ([registries.*]); write v2 ([[registry]], \
     unqualified-search-registries) (CANNOT_LOAD v5.40+ (v1 removed; CRI-O fails to \
     start))"
)]
#[case::search_entry_with_path(
    "unqualified-search-registries = [\"registry.example\", \"registry.example/team\"]\n",
    "line 1: Invalid unqualified-search-registries entry \"registry.example/team\" \
     (CANNOT_LOAD postProcessRegistries)"
)]
#[case::search_entry_with_uri_scheme(
    "unqualified-search-registries = [\n  \"https://registry.example\",\n]\n",
    "line 2: invalid location 'https://registry.example': URI schemes are not supported \
     (CANNOT_LOAD parseLocation)"
)]
#[case::v1_search_only(
    "[registries.search]\nregistries = [\"registry.example/team\"]\n",
    "line 1: v1 format ([registries.*]); write v2 ([[registry]], \
     unqualified-search-registries) (CANNOT_LOAD v5.40+ (v1 removed; CRI-O fails to \
     start))"
)]
#[case::invalid_short_name_mode(
    "short-name-mode=\"invalid\"\n",
    "line 1: invalid short-name mode: \"invalid\" (CANNOT_LOAD parseShortNameMode)"
)]
#[case::invalid_aliases(
    "[aliases]\nimage1=\"quay.io/repo/image:1\"\nimage2=\"image:1\"\n",
    "line 2: invalid alias \"quay.io/repo/image:1\": must not contain tag (CANNOT_LOAD \
     newShortNameAliasCache)"
)]
#[case::alias_name_with_registry(
    "[aliases]\n\"registry.example/app\" = \"registry.example/team/app\"\n",
    "line 2: invalid short name \"registry.example/app\": must not contain registry (CANNOT_LOAD \
     newShortNameAliasCache)"
)]
fn files_crio_cannot_load_are_denied(#[case] text: &str, #[case] want: &str) {
    let want = format!(
        "ConfigMap data[registries.conf] {}",
        want.replace("CANNOT_LOAD", CANNOT_LOAD)
    );
    assert_eq!(
        judged(&MirrorPolicy::default(), &[("registries.conf", text)])
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(want)
    );
}

#[rstest]
#[case::two_keys_for_prefix(
    "[[registry]]\nprefix = \"registry.example\"\nPrefix = \"evil.example\"\nlocation = \"registry.example\"\n",
    3,
    "keys \"prefix\" and \"Prefix\" of registry[0] both set prefix"
)]
#[case::two_registry_arrays(
    "[[registry]]\nlocation = \"registry.example\"\n[[Registry]]\nlocation = \"evil.example\"\n",
    3,
    "keys \"registry\" and \"Registry\" of the top level both set registry"
)]
#[case::folded_wrong_type(
    "[[registry]]\nlocation = \"registry.example\"\nBLOCKED = \"yes\"\n",
    3,
    "registry[0].BLOCKED must be a boolean, not a string"
)]
fn keys_burntsushi_would_read_randomly_or_refuse_are_denied(
    #[case] text: &str,
    #[case] line: usize,
    #[case] starts: &str,
) {
    let err = judged(&MirrorPolicy::default(), &[("registries.conf", text)])
        .expect_err("refused")
        .to_string();
    let prefix = format!(
        "ConfigMap data[registries.conf] is not a valid registries.conf at line {line}, column "
    );
    assert!(err.starts_with(&prefix), "{err}");
    assert!(err.contains(starts), "{err}");
}

#[test]
fn v1_format_in_a_drop_in_is_denied() {
    let err = judged(
        &MirrorPolicy::default(),
        &[
            (
                "registries.conf",
                "[[registry]]\nlocation = \"registry.example\"\n",
            ),
            (
                "50-legacy.conf",
                "[registries.insecure]\nregistries = [\"registry.example\"]\n",
            ),
        ],
    )
    .expect_err("v1 drop-in");
    assert_eq!(
        err.to_string(),
        format!(
            "ConfigMap data[50-legacy.conf] line 1: registry must be in v2 format but is in v1 \
             ([registries.*] in a drop-in) ({CANNOT_LOAD} loadConfigFile)"
        )
    );
}

// --- what answers tag pulls ---

#[rstest]
#[case::folded_registry_table(
    "[[Registry]]\nlocation = \"registry.example/team\"\n[[Registry.mirror]]\nlocation = \"mirror.example/team\"\n",
    &["ConfigMap data[registries.conf] [[registry]] location=\"registry.example/team\" mirror[0] \
       lets mirror.example/team serve tag pulls: RISK"]
)]
#[case::folded_mirror_table(
    "[[registry]]\nlocation = \"registry.example/team\"\n[[registry.MIRROR]]\nLocation = \"mirror.example/team\"\n",
    &["ConfigMap data[registries.conf] [[registry]] location=\"registry.example/team\" mirror[0] \
       lets mirror.example/team serve tag pulls: RISK"]
)]
#[case::folded_prefix_moves_the_pair(
    "[[registry]]\nPrefix = \"docker.io/library\"\nlocation = \"docker.io/library\"\n[[registry.mirror]]\nlocation = \"mirror.example/library\"\n",
    &["ConfigMap data[registries.conf] [[registry]] prefix=\"docker.io/library\" mirror[0] lets \
       mirror.example/library serve tag pulls: RISK"]
)]
#[case::long_s_key(
    "[[\"regi\u{17f}try\"]]\nlocation = \"registry.example\"\n[[\"regi\u{17f}try\".mirror]]\nlocation = \"mirror.example\"\n",
    &["ConfigMap data[registries.conf] [[registry]] location=\"registry.example\" mirror[0] lets \
       mirror.example serve tag pulls: RISK"]
)]
#[case::prefix_rewrite(
    "[[registry]]\nprefix = \"docker.io/library\"\nlocation = \"evil.example/x\"\n",
    &["ConfigMap data[registries.conf] [[registry]] prefix=\"docker.io/library\" redirects tag \
       pulls to its location evil.example/x: RISK"]
)]
#[case::wildcard_rewrite(
    "[[registry]]\nprefix = \"*.example.com\"\nlocation = \"mirror.example\"\n",
    &["ConfigMap data[registries.conf] [[registry]] prefix=\"*.example.com\" redirects tag pulls \
       to its location mirror.example: RISK"]
)]
#[case::rewrite_and_mirror_at_the_location_is_one_finding(
    "[[registry]]\nprefix = \"registry.example/a\"\nlocation = \"registry.example/b\"\n[[registry.mirror]]\nlocation = \"registry.example/b\"\n",
    &["ConfigMap data[registries.conf] [[registry]] prefix=\"registry.example/a\" redirects tag \
       pulls to its location registry.example/b: RISK"]
)]
#[case::tag_only(
    "[[registry]]\nlocation = \"registry.example\"\n[[registry.mirror]]\nlocation = \"mirror.example\"\npull-from-mirror = \"tag-only\"\n",
    &["ConfigMap data[registries.conf] [[registry]] location=\"registry.example\" mirror[0] lets \
       mirror.example serve tag pulls: RISK"]
)]
#[case::first_of_a_prefix_wins(
    "[[registry]]\nlocation = \"registry.example\"\n[[registry.mirror]]\nlocation = \"mirror.example\"\n\n[[registry]]\nlocation = \"registry.example\"\nmirror-by-digest-only = true\n",
    &["ConfigMap data[registries.conf] [[registry]] location=\"registry.example\" mirror[0] lets \
       mirror.example serve tag pulls: RISK"]
)]
fn tag_sources_are_findings(#[case] text: &str, #[case] want: &[&str]) {
    let review = judged(&MirrorPolicy::default(), &[("registries.conf", text)]).expect("loads");
    let want: Vec<String> = want.iter().map(|m| m.replace("RISK", RISK)).collect();
    assert_eq!(messages(&review), want);
}

#[rstest]
#[case::digest_only_switch_in_any_case(
    "[[registry]]\nlocation = \"registry.example\"\nMirror-By-Digest-Only = true\n[[registry.mirror]]\nlocation = \"mirror.example\"\n"
)]
#[case::pull_from_mirror_in_any_case(
    "[[registry]]\nlocation = \"registry.example\"\n[[registry.mirror]]\nlocation = \"mirror.example\"\nPULL-FROM-MIRROR = \"digest-only\"\n"
)]
#[case::mirror_at_the_source(
    "[[registry]]\nlocation = \"registry.example/team\"\n[[registry.mirror]]\nlocation = \"registry.example/team/\"\n"
)]
#[case::wildcard_without_location("[[registry]]\nprefix = \"*.internal.registry.com\"\n")]
#[case::openshift_idms_rendering(
    "[[registry]]\nlocation = \"docker.io/library/nginx\"\nblocked = true\n[[registry.mirror]]\nlocation = \"mirror.example:5000/library/nginx\"\npull-from-mirror = \"digest-only\"\n"
)]
#[case::openshift_icsp_rendering_of_older_runtime_utils(
    "[[registry]]\nlocation = \"registry.example/team/app\"\nmirror-by-digest-only = true\n[[registry.mirror]]\nlocation = \"mirror.example:5000/team/app\"\n"
)]
#[case::unknown_keys_are_skipped(
    "[[registry]]\nlocation = \"registry.example\"\nunqualified-search = true\n"
)]
fn digest_only_configurations_are_allowed(#[case] text: &str) {
    let review = judged(&MirrorPolicy::default(), &[("registries.conf", text)]).expect("loads");
    assert_eq!(review.violations, Vec::new());
}

/// `testdata/pull-sources-mirror-reference.conf`: the tag sources `TestPullSourcesFromReference`
/// expects per registry, plus each prefix's redirect to its `/bar` location.
#[test]
fn pull_sources_mirror_reference_conf() {
    let mut text = String::new();
    let mirrors: [(&str, bool, [&str; 2]); 6] = [
        ("a", false, ["", ""]),
        ("b", false, ["digest-only", "digest-only"]),
        ("c", false, ["", "digest-only"]),
        ("d", true, ["", ""]),
        ("e", false, ["tag-only", "tag-only"]),
        ("f", false, ["", "tag-only"]),
    ];
    for (r, by_digest, pulls) in mirrors {
        text += &format!(
            "[[registry]]\nprefix = \"registry-{r}.com/foo\"\nlocation = \"registry-{r}.com/bar\"\n"
        );
        if by_digest {
            text += "mirror-by-digest-only = true\n";
        }
        for (i, pull) in pulls.iter().enumerate() {
            text += &format!(
                "[[registry.mirror]]\nlocation = \"mirror-{}.registry-{r}.com\"\n",
                i + 1
            );
            if !pull.is_empty() {
                text += &format!("pull-from-mirror = \"{pull}\"\n");
            }
        }
    }
    let review = judged(&MirrorPolicy::default(), &[("registries.conf", &text)]).expect("loads");
    assert_eq!(
        pairs(&review),
        vec![
            ("registry-a.com/foo", "registry-a.com/bar"),
            ("registry-a.com/foo", "mirror-1.registry-a.com"),
            ("registry-a.com/foo", "mirror-2.registry-a.com"),
            ("registry-b.com/foo", "registry-b.com/bar"),
            ("registry-c.com/foo", "registry-c.com/bar"),
            ("registry-c.com/foo", "mirror-1.registry-c.com"),
            ("registry-d.com/foo", "registry-d.com/bar"),
            ("registry-e.com/foo", "registry-e.com/bar"),
            ("registry-e.com/foo", "mirror-1.registry-e.com"),
            ("registry-e.com/foo", "mirror-2.registry-e.com"),
            ("registry-f.com/foo", "registry-f.com/bar"),
            ("registry-f.com/foo", "mirror-1.registry-f.com"),
            ("registry-f.com/foo", "mirror-2.registry-f.com"),
        ]
    );
}

#[test]
fn an_allowed_redirect_passes() {
    let policy = MirrorPolicy {
        allow: vec![AllowedMirror {
            source: "docker.io/library".into(),
            mirror: "registry.example/dockerhub".into(),
        }],
        ..MirrorPolicy::default()
    };
    let text =
        "[[registry]]\nprefix = \"docker.io/library\"\nlocation = \"registry.example/dockerhub\"\n";
    assert_eq!(
        judged(&policy, &[("registries.conf", text)]).expect("loads"),
        MirrorReview::default()
    );
}

// --- notes: what containers/image ignores or a drop-in replaces ---

#[test]
fn an_ignored_duplicate_is_a_note_not_a_finding() {
    let text = "[[registry]]\nlocation = \"registry.example\"\nmirror-by-digest-only = true\n[[registry.mirror]]\nlocation = \"mirror.example\"\n\n[[registry]]\nlocation = \"registry.example/\"\n[[registry.mirror]]\nlocation = \"evil.example\"\n";
    let review = judged(&MirrorPolicy::default(), &[("registries.conf", text)]).expect("loads");
    assert_eq!(review.violations, Vec::new());
    assert_eq!(
        review.notes,
        vec![
            "ConfigMap data[registries.conf] line 7: [[registry]] prefix=\"registry.example\" is \
             ignored: containers/image uses the first [[registry]] with that prefix (line 1)"
        ]
    );
}

#[rstest]
#[case::drop_in_adds_a_tag_mirror(
    &[
        ("registries.conf", "[[registry]]\nlocation = \"registry.example\"\n"),
        ("99-mirrors.conf", "[[registry]]\nlocation = \"quay.io\"\n[[registry.mirror]]\nlocation = \"mirror.example\"\n"),
    ],
    &["ConfigMap data[99-mirrors.conf] [[registry]] location=\"quay.io\" mirror[0] lets \
       mirror.example serve tag pulls: RISK"],
    &[]
)]
#[case::drop_in_cannot_hide_a_tag_mirror(
    &[
        ("registries.conf", "[[registry]]\nlocation = \"quay.io\"\n[[registry.mirror]]\nlocation = \"mirror.example\"\n"),
        ("99-mirrors.conf", "[[registry]]\nlocation = \"quay.io\"\nmirror-by-digest-only = true\n[[registry.mirror]]\nlocation = \"mirror.example\"\n"),
    ],
    &["ConfigMap data[registries.conf] [[registry]] location=\"quay.io\" mirror[0] lets \
       mirror.example serve tag pulls: RISK"],
    &["ConfigMap data[registries.conf] line 1: [[registry]] prefix=\"quay.io\" is replaced by \
       data[99-mirrors.conf] line 1 where both are projected (CRI-O merges drop-ins by prefix); \
       it is judged on its own all the same"]
)]
#[case::drop_in_without_main_file(
    &[("crio-mirrors", "[[Registry]]\nprefix = \"docker.io\"\nlocation = \"evil.example\"\n")],
    &["ConfigMap data[crio-mirrors] [[registry]] prefix=\"docker.io\" redirects tag pulls to its \
       location evil.example: RISK"],
    &[]
)]
fn drop_ins_are_judged_each_on_its_own(
    #[case] files: &[(&str, &str)],
    #[case] want: &[&str],
    #[case] notes: &[&str],
) {
    let review = judged(&MirrorPolicy::default(), files).expect("loads");
    let want: Vec<String> = want.iter().map(|m| m.replace("RISK", RISK)).collect();
    assert_eq!(messages(&review), want);
    assert_eq!(review.notes, notes);
}

// --- which keys and ConfigMaps are read ---

#[test]
fn binary_data_drop_ins_are_read() {
    use base64::Engine as _;
    let text = "[[registry]]\nlocation = \"quay.io\"\n[[registry.mirror]]\nlocation = \"mirror.example\"\n";
    let object = json!({
        "kind": "ConfigMap",
        "metadata": {"namespace": "ns", "name": "c"},
        "binaryData": {"mirrors.conf": base64::engine::general_purpose::STANDARD.encode(text)},
    });
    let found = review(&MirrorPolicy::default(), "", "ConfigMap", &object)
        .expect("loads")
        .expect("mine");
    assert_eq!(
        messages(&found),
        vec![format!(
            "ConfigMap binaryData[mirrors.conf] [[registry]] location=\"quay.io\" mirror[0] lets \
             mirror.example serve tag pulls: {RISK}"
        )]
    );
}

#[rstest]
#[case::not_toml(&[("nginx.conf", "server {\n  listen 80;\n}\n")])]
#[case::toml_of_another_program(&[("config.toml", "[server]\nport = 8080\n")])]
#[case::cargo_config(&[(
    "config.toml",
    "[registry]\ndefault = \"corp\"\n[registries.corp]\nindex = \"sparse+https://corp.example/index/\"\n"
)])]
#[case::yaml(&[("policy.yaml", "mirrors:\n  allow: []\n")])]
fn keys_that_are_no_registries_conf_are_skipped(#[case] files: &[(&str, &str)]) {
    let object = configmap(files);
    assert_eq!(
        review(&MirrorPolicy::default(), "", "ConfigMap", &object),
        Ok(None)
    );
}

#[rstest]
#[case::all_by_default(MirrorPolicy::default(), true)]
#[case::namespace_glob(
    MirrorPolicy { config_maps: vec!["ns/*".into()], ..MirrorPolicy::default() },
    true
)]
#[case::other_namespace(
    MirrorPolicy { config_maps: vec!["openshift-config/*".into()], ..MirrorPolicy::default() },
    false
)]
#[case::key_glob(
    MirrorPolicy { config_map_keys: vec!["*.conf".into()], ..MirrorPolicy::default() },
    true
)]
#[case::key_not_selected(
    MirrorPolicy { config_map_keys: vec!["hosts.toml".into()], ..MirrorPolicy::default() },
    false
)]
fn the_policy_chooses_configmaps_and_keys(#[case] policy: MirrorPolicy, #[case] judged: bool) {
    let text = "[[registry]]\nlocation = \"quay.io\"\n[[registry.mirror]]\nlocation = \"mirror.example\"\n";
    let found = review(
        &policy,
        "",
        "ConfigMap",
        &configmap(&[("mirrors.conf", text)]),
    )
    .expect("loads")
    .map(|r| r.violations.len());
    assert_eq!(found, judged.then_some(1));
}

#[test]
fn the_main_key_is_read_whatever_the_key_globs() {
    let policy = MirrorPolicy {
        config_map_keys: Vec::new(),
        ..MirrorPolicy::default()
    };
    let err = judged(&policy, &[("registries.conf", "not = = toml")])
        .expect_err("strict")
        .to_string();
    assert!(
        err.starts_with("ConfigMap data[registries.conf] is not a valid registries.conf at line 1"),
        "{err}"
    );
}
