//! The mirror guard's tests: recorded fixtures, each judged kind, the policy section.

use rstest::rstest;
use serde_json::json;

use super::go_toml::line_column;
use super::*;
use crate::policy::mirror_policy::AllowedMirror;

/// `request.object` of a recorded AdmissionReview.
fn object_of(review: &str) -> Value {
    let review: Value = serde_json::from_str(review).expect("fixture is JSON");
    review["request"]["object"].clone()
}

/// `request.kind` group and kind of a recorded AdmissionReview.
fn kind_of(review: &str) -> (String, String) {
    let review: Value = serde_json::from_str(review).expect("fixture is JSON");
    let kind = &review["request"]["kind"];
    (
        kind["group"].as_str().expect("group").to_string(),
        kind["kind"].as_str().expect("kind").to_string(),
    )
}

fn check_review(policy: &MirrorPolicy, review: &str) -> Option<Vec<MirrorViolation>> {
    let (group, kind) = kind_of(review);
    check(policy, &group, &kind, &object_of(review)).expect("judged")
}

fn configmap(key: &str, conf: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {key: conf}})
}

fn conf(policy: &MirrorPolicy, conf: &str) -> Result<Option<Vec<MirrorViolation>>, MirrorError> {
    check(policy, "", "ConfigMap", &configmap("registries.conf", conf))
}

fn pairs(found: &[MirrorViolation]) -> Vec<(&str, &str)> {
    found
        .iter()
        .map(|v| (v.source.as_str(), v.mirror.as_str()))
        .collect()
}

fn allow(source: &str, mirror: &str) -> MirrorPolicy {
    MirrorPolicy {
        allow: vec![AllowedMirror {
            source: source.to_string(),
            mirror: mirror.to_string(),
        }],
        ..MirrorPolicy::default()
    }
}

// --- recorded fixtures ---

#[rstest]
#[case::v1_26_validate(include_str!("../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-create-validate.json"))]
#[case::v1_26_mutate(include_str!("../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-create-mutate.json"))]
#[case::v1_20_validate(include_str!("../../tests/fixtures/admissionreview/v1.20/imagetagmirrorset-create-validate.json"))]
fn itms_create_is_a_violation(#[case] review: &str) {
    let found = check_review(&MirrorPolicy::default(), review).expect("ITMS is a mirror kind");
    assert_eq!(
        found,
        vec![MirrorViolation {
            entry: "spec.imageTagMirrors[0].mirrors[0]".into(),
            source: "registry.example/team".into(),
            mirror: "mirror.example:5000/team".into(),
            message: "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] lets mirror.example:5000/team \
                      serve tag pulls for registry.example/team: a tag mirror can serve different content \
                      for the same tag"
                .into(),
        }]
    );
}

#[rstest]
#[case::v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-update-json-patch-validate.json"))]
#[case::v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagetagmirrorset-update-json-patch-validate.json"))]
fn itms_update_is_judged_on_the_new_object(#[case] review: &str) {
    let found = check_review(&MirrorPolicy::default(), review).expect("mirror kind");
    assert_eq!(
        pairs(&found),
        vec![
            ("registry.example/team", "mirror.example:5000/team"),
            ("registry.example/team", "mirror2.example/team"),
        ]
    );
    assert_eq!(found[1].entry, "spec.imageTagMirrors[0].mirrors[1]");
    // The old object had only the first mirror; the new one is what counts.
    let review: Value = serde_json::from_str(review).expect("JSON");
    let old = check(
        &MirrorPolicy::default(),
        "config.openshift.io",
        "ImageTagMirrorSet",
        &review["request"]["oldObject"],
    )
    .expect("judged")
    .expect("mirror kind");
    assert_eq!(old.len(), 1);
}

#[test]
fn itms_allowed_pair_is_not_reported() {
    let review = include_str!(
        "../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-update-json-patch-validate.json"
    );
    // Trailing slashes are trimmed on both sides before the exact comparison.
    let policy = allow("registry.example/team/", "mirror2.example/team/");
    let found = check_review(&policy, review).expect("mirror kind");
    assert_eq!(
        pairs(&found),
        vec![("registry.example/team", "mirror.example:5000/team")]
    );
    // No prefix matching: allowing the parent repository allows nothing here.
    let policy = allow("registry.example", "mirror2.example");
    assert_eq!(check_review(&policy, review).expect("mirror kind").len(), 2);
}

#[rstest]
#[case::idms_create_v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagedigestmirrorset-create-validate.json"))]
#[case::idms_update_v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagedigestmirrorset-update-json-patch-validate.json"))]
#[case::idms_create_v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagedigestmirrorset-create-validate.json"))]
#[case::idms_update_v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagedigestmirrorset-update-json-patch-validate.json"))]
#[case::icsp_create_v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagecontentsourcepolicy-create-validate.json"))]
#[case::icsp_update_v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/imagecontentsourcepolicy-update-json-patch-validate.json"))]
#[case::icsp_create_v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagecontentsourcepolicy-create-validate.json"))]
#[case::icsp_update_v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/imagecontentsourcepolicy-update-json-patch-validate.json"))]
fn digest_mirror_kinds_are_mine_and_fine(#[case] review: &str) {
    assert_eq!(
        check_review(&MirrorPolicy::default(), review),
        Some(Vec::new())
    );
}

#[rstest]
#[case::v1_26(include_str!("../../tests/fixtures/admissionreview/v1.26/configmap-create-registries-conf-validate.json"))]
#[case::v1_20(include_str!("../../tests/fixtures/admissionreview/v1.20/configmap-create-registries-conf-validate.json"))]
fn configmap_fixture_reports_only_the_tag_only_mirror(#[case] review: &str) {
    // mirror[0] is pull-from-mirror = "tag-only"; mirror[1] is "digest-only".
    let found = check_review(&MirrorPolicy::default(), review).expect("carries registries.conf");
    assert_eq!(
        found,
        vec![MirrorViolation {
            entry: "data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[0]".into(),
            source: "registry.example/team".into(),
            mirror: "mirror.example:5000/team".into(),
            message: "ConfigMap data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[0] \
                      lets mirror.example:5000/team serve tag pulls: a tag mirror can serve different \
                      content for the same tag"
                .into(),
        }]
    );
}

#[test]
fn fixture_messages_are_short_sentences() {
    for review in [
        include_str!("../../tests/fixtures/admissionreview/v1.26/imagetagmirrorset-update-json-patch-validate.json"),
        include_str!("../../tests/fixtures/admissionreview/v1.26/configmap-create-registries-conf-validate.json"),
    ] {
        for v in check_review(&MirrorPolicy::default(), review).expect("mirror kind") {
            assert!(v.message.len() < 200, "{} chars: {}", v.message.len(), v.message);
            assert!(v.message.contains(&v.mirror) && v.message.contains(RISK));
            assert!(!v.message.contains('\n'));
        }
    }
}

#[test]
fn pod_fixture_is_not_mine() {
    let review =
        include_str!("../../tests/fixtures/admissionreview/v1.26/pod-create-basic-validate.json");
    assert_eq!(check_review(&MirrorPolicy::default(), review), None);
}

/// Issue 17: runtime-utils (`rdmContainsARealMirror`, `topoSortRepos`) keeps a mirror that
/// repeats the source as the source itself; it is no foreign host.
#[rstest]
#[case::source_only(json!(["registry.example/team"]), &[])]
#[case::source_repeated(json!(["registry.example/team", "registry.example/team/"]), &[])]
#[case::source_and_a_real_mirror(
    json!(["registry.example/team", "mirror.example/team"]),
    &[("registry.example/team", "mirror.example/team")]
)]
fn itms_source_among_its_mirrors_is_not_a_mirror(
    #[case] mirrors: Value,
    #[case] want: &[(&str, &str)],
) {
    let object = json!({"spec": {"imageTagMirrors": [{"source": "registry.example/team", "mirrors": mirrors}]}});
    let found = check(
        &MirrorPolicy::default(),
        "config.openshift.io",
        "ImageTagMirrorSet",
        &object,
    )
    .expect("judged")
    .expect("mirror kind");
    assert_eq!(pairs(&found), want);
}

// --- ImageContentPolicy ---

fn icp(entry: Value) -> Result<Option<Vec<MirrorViolation>>, MirrorError> {
    let object = json!({
        "apiVersion": "config.openshift.io/v1",
        "kind": "ImageContentPolicy",
        "metadata": {"name": "icp"},
        "spec": {"repositoryDigestMirrors": [entry]},
    });
    check(
        &MirrorPolicy::default(),
        "config.openshift.io",
        "ImageContentPolicy",
        &object,
    )
}

#[test]
fn image_content_policy_with_allow_mirror_by_tags_is_a_violation() {
    let found = icp(json!({
        "source": "registry.example/team",
        "mirrors": ["mirror.example/team", "mirror2.example/team"],
        "allowMirrorByTags": true,
    }))
    .expect("judged")
    .expect("mirror kind");
    assert_eq!(
        pairs(&found),
        vec![
            ("registry.example/team", "mirror.example/team"),
            ("registry.example/team", "mirror2.example/team"),
        ]
    );
    assert_eq!(found[0].entry, "spec.repositoryDigestMirrors[0].mirrors[0]");
    assert_eq!(
        found[0].message,
        "ImageContentPolicy spec.repositoryDigestMirrors[0].mirrors[0] has allowMirrorByTags, so \
         mirror.example/team serves tag pulls for registry.example/team: a tag mirror can serve \
         different content for the same tag"
    );
}

#[rstest]
#[case::absent(json!({"source": "registry.example/team", "mirrors": ["mirror.example/team"]}))]
#[case::false_(json!({"source": "registry.example/team", "mirrors": ["mirror.example/team"], "allowMirrorByTags": false}))]
#[case::no_mirrors(json!({"source": "registry.example/team", "allowMirrorByTags": true}))]
fn image_content_policy_without_tag_mirrors_is_fine(#[case] entry: Value) {
    assert_eq!(icp(entry), Ok(Some(Vec::new())));
}

#[test]
fn image_content_policy_wrong_type_is_an_error() {
    let err = icp(
        json!({"source": "r.example/a", "mirrors": ["m.example/a"], "allowMirrorByTags": "yes"}),
    )
    .expect_err("wrong type");
    assert_eq!(
        err.to_string(),
        "ImageContentPolicy spec.repositoryDigestMirrors[0].allowMirrorByTags: must be a boolean"
    );
}

// --- OpenShift shapes ---

#[rstest]
#[case::list_not_array(json!({"spec": {"imageTagMirrors": {}}}), "ImageTagMirrorSet spec.imageTagMirrors: must be a list")]
#[case::mirror_not_string(json!({"spec": {"imageTagMirrors": [{"source": "a.example", "mirrors": [1]}]}}), "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0]: must be a string")]
#[case::source_missing(json!({"spec": {"imageTagMirrors": [{"mirrors": ["m.example"]}]}}), "ImageTagMirrorSet spec.imageTagMirrors[0].source: is required")]
#[case::spec_not_object(json!({"spec": []}), "ImageTagMirrorSet spec: must be an object")]
fn itms_wrong_shapes_are_errors(#[case] object: Value, #[case] expected: &str) {
    let err = check(
        &MirrorPolicy::default(),
        "config.openshift.io",
        "ImageTagMirrorSet",
        &object,
    )
    .expect_err("malformed");
    assert!(matches!(err, MirrorError::Malformed { .. }));
    assert_eq!(err.to_string(), expected);
}

#[rstest]
#[case::null(Value::Null)]
#[case::no_spec(json!({"metadata": {}}))]
#[case::empty_list(json!({"spec": {"imageTagMirrors": []}}))]
#[case::entry_without_mirrors(json!({"spec": {"imageTagMirrors": [{"source": "a.example"}]}}))]
fn itms_without_mirrors_is_fine(#[case] object: Value) {
    assert_eq!(
        check(
            &MirrorPolicy::default(),
            "config.openshift.io",
            "ImageTagMirrorSet",
            &object
        ),
        Ok(Some(Vec::new()))
    );
}

#[rstest]
#[case::pod("", "Pod")]
#[case::deployment("apps", "Deployment")]
#[case::configmap_in_other_group("example.com", "ConfigMap")]
#[case::itms_in_other_group("example.com", "ImageTagMirrorSet")]
#[case::icsp_in_config_group("config.openshift.io", "ImageContentSourcePolicy")]
fn other_kinds_are_not_mine(#[case] group: &str, #[case] kind: &str) {
    let object = json!({"spec": {"imageTagMirrors": [{"source": "a.example", "mirrors": ["m.example"]}]},
                        "data": {"registries.conf": "[[registry]]\nlocation = \"a.example\"\n[[registry.mirror]]\nlocation = \"m.example\"\n"}});
    assert_eq!(
        check(&MirrorPolicy::default(), group, kind, &object),
        Ok(None)
    );
}

// --- registries.conf ---

const ONE_MIRROR: &str = r#"
[[registry]]
prefix = "registry.example/team"
location = "registry.example/team"
{registry_extra}
[[registry.mirror]]
location = "mirror.example/team"
{mirror_extra}
"#;

fn one_mirror(registry_extra: &str, mirror_extra: &str) -> String {
    ONE_MIRROR
        .replace("{registry_extra}", registry_extra)
        .replace("{mirror_extra}", mirror_extra)
}

#[rstest]
#[case::default_is_all("", "", true)]
#[case::all("", r#"pull-from-mirror = "all""#, true)]
#[case::empty_means_unset("", r#"pull-from-mirror = """#, true)]
#[case::tag_only("", r#"pull-from-mirror = "tag-only""#, true)]
#[case::digest_only("", r#"pull-from-mirror = "digest-only""#, false)]
#[case::mirror_by_digest_only("mirror-by-digest-only = true", "", false)]
#[case::mirror_by_digest_only_false("mirror-by-digest-only = false", "", true)]
#[case::blocked_source_still_uses_mirrors("blocked = true", "insecure = true", true)]
fn registries_conf_tag_mirrors(
    #[case] registry_extra: &str,
    #[case] mirror_extra: &str,
    #[case] violation: bool,
) {
    let found = conf(
        &MirrorPolicy::default(),
        &one_mirror(registry_extra, mirror_extra),
    )
    .expect("valid")
    .expect("carries registries.conf");
    if violation {
        assert_eq!(
            pairs(&found),
            vec![("registry.example/team", "mirror.example/team")]
        );
        assert_eq!(
            found[0].entry,
            "data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[0]"
        );
    } else {
        assert_eq!(found, Vec::new());
    }
}

#[rstest]
#[case::digest_only(r#"pull-from-mirror = "digest-only""#)]
#[case::all(r#"pull-from-mirror = "all""#)]
fn registries_conf_digest_only_registry_with_pull_from_mirror_is_an_error(
    #[case] mirror_extra: &str,
) {
    let err = conf(
        &MirrorPolicy::default(),
        &one_mirror("mirror-by-digest-only = true", mirror_extra),
    )
    .expect_err("containers/image rejects this");
    // Issue 17: load errors name the line and the upstream rule, in upstream's words.
    assert_eq!(
        err,
        MirrorError::Unloadable {
            file: "data[registries.conf]".into(),
            line: 6,
            entry: "[[registry]] prefix=\"registry.example/team\" mirror[0]".into(),
            problem: "cannot set mirror usage mirror-by-digest-only for the registry \
                      (\"registry.example/team\") and pull-from-mirror for per-mirror \
                      (\"mirror.example/team\") at the same time"
                .into(),
            rule: "containers/image sysregistriesv2 postProcessRegistries",
        }
    );
    assert!(err.to_string().contains(
        "mirror-by-digest-only for the registry (\"registry.example/team\") and pull-from-mirror"
    ));
}

#[test]
fn registries_conf_unknown_pull_from_mirror_is_an_error() {
    let err = conf(
        &MirrorPolicy::default(),
        &one_mirror("", r#"pull-from-mirror = "tags""#),
    )
    .expect_err("unknown value");
    assert_eq!(
        err.to_string(),
        "ConfigMap data[registries.conf] line 6, [[registry]] prefix=\"registry.example/team\" mirror[0]: \
         unsupported pull-from-mirror value \"tags\" for mirror \"mirror.example/team\" (expected \"all\", \
         \"digest-only\" or \"tag-only\") (CRI-O cannot load it: containers/image sysregistriesv2 \
         postProcessRegistries)"
    );
}

#[test]
fn registries_conf_invalid_toml_names_the_position() {
    let err = conf(
        &MirrorPolicy::default(),
        "[[registry]]\nprefix = \"a.example\"\nlocation = = \"b\"\n",
    )
    .expect_err("not TOML");
    let MirrorError::Toml {
        key, line, column, ..
    } = &err
    else {
        panic!("expected a TOML error, got {err:?}");
    };
    assert_eq!(
        (key.as_str(), *line, *column),
        ("registries.conf", Some(3), Some(12))
    );
    let text = err.to_string();
    assert!(
        text.starts_with(
            "ConfigMap data[registries.conf] is not a valid registries.conf at line 3, column 12: "
        ),
        "{text}"
    );
    assert!(!text.contains('\n'), "{text}");
}

#[test]
fn registries_conf_wrong_type_names_the_position() {
    let err = conf(
        &MirrorPolicy::default(),
        &one_mirror("mirror-by-digest-only = \"yes\"", ""),
    )
    .expect_err("wrong type");
    let MirrorError::Toml { line, message, .. } = &err else {
        panic!("expected a TOML error, got {err:?}");
    };
    assert_eq!(*line, Some(5));
    assert!(message.contains("bool"), "{message}");
    // A single [registry] table where an array of tables is expected.
    let err = conf(
        &MirrorPolicy::default(),
        "[registry]\nlocation = \"a.example\"\n",
    )
    .expect_err("wrong type");
    assert!(matches!(err, MirrorError::Toml { .. }), "{err:?}");
}

#[test]
fn registries_conf_prefix_defaults_to_location() {
    let text = "[[registry]]\nlocation = \"registry.example/team/\"\n[[registry.mirror]]\nlocation = \"mirror.example/team/\"\n";
    let found = conf(&MirrorPolicy::default(), text)
        .expect("valid")
        .expect("mine");
    assert_eq!(
        pairs(&found),
        vec![("registry.example/team", "mirror.example/team")]
    );
    assert_eq!(
        found[0].entry,
        "data[registries.conf] [[registry]] location=\"registry.example/team\" mirror[0]"
    );
    // An explicit prefix wins over the location.
    let text =
        "[[registry]]\nprefix = \"docker.io/library\"\nlocation = \"registry.example/dockerhub\"\n\
                [[registry.mirror]]\nlocation = \"mirror.example/dockerhub\"\n";
    let found = conf(&MirrorPolicy::default(), text)
        .expect("valid")
        .expect("mine");
    // Issue 17: the location is a redirect of every pull of the prefix, judged as a tag mirror.
    assert_eq!(
        pairs(&found),
        vec![
            ("docker.io/library", "registry.example/dockerhub"),
            ("docker.io/library", "mirror.example/dockerhub")
        ]
    );
}

#[test]
fn registries_conf_allowed_pair_is_not_reported() {
    let policy = allow("registry.example/team", "mirror.example/team");
    assert_eq!(conf(&policy, &one_mirror("", "")), Ok(Some(Vec::new())));
    // Only that pair: a second mirror for the same source is still reported.
    let text = format!(
        "{}\n[[registry.mirror]]\nlocation = \"other.example/team\"\n",
        one_mirror("", "")
    );
    let found = conf(&policy, &text).expect("valid").expect("mine");
    assert_eq!(
        pairs(&found),
        vec![("registry.example/team", "other.example/team")]
    );
    assert_eq!(
        found[0].entry,
        "data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[1]"
    );
}

#[test]
fn registries_conf_custom_key() {
    let policy = MirrorPolicy {
        config_map_key: Some("crio-registries".into()),
        ..MirrorPolicy::default()
    };
    let object = configmap("crio-registries", &one_mirror("", ""));
    let found = check(&policy, "", "ConfigMap", &object)
        .expect("valid")
        .expect("mine");
    assert_eq!(
        found[0].entry,
        "data[crio-registries] [[registry]] prefix=\"registry.example/team\" mirror[0]"
    );
    // Issue 17: with a custom key, a registries.conf under another key is a drop-in a node can
    // receive, and is judged as one.
    let object = configmap("registries.conf", &one_mirror("", ""));
    let found = check(&policy, "", "ConfigMap", &object)
        .expect("valid")
        .expect("mine");
    assert_eq!(
        found[0].entry,
        "data[registries.conf] [[registry]] prefix=\"registry.example/team\" mirror[0]"
    );
}

/// containers/image v5.40 removed the v1 format: CRI-O built on it fails to start on one
/// (kubevirtci#1845), so a v1 main file is denied, naming its first `[registries.*]` line.
#[test]
fn a_v1_main_file_is_denied() {
    let text = "[registries.search]\nregistries = [\"docker.io\"]\n\n[registries.insecure]\nregistries = []\n";
    let error = conf(&MirrorPolicy::default(), text).expect_err("v1");
    assert_eq!(
        error.to_string(),
        "ConfigMap data[registries.conf] line 1: v1 format ([registries.*]); write v2 \
         ([[registry]], unqualified-search-registries) (CRI-O cannot load it: containers/image \
         sysregistriesv2 v5.40+ (v1 removed; CRI-O fails to start))"
    );
}

#[rstest]
#[case::no_registries(
    "unqualified-search-registries = [\"registry.example\"]\nshort-name-mode = \"enforcing\"\n"
)]
#[case::empty("")]
#[case::registry_without_mirrors("[[registry]]\nlocation = \"registry.example\"\nblocked = true\n")]
#[case::wildcard_digest_only("[[registry]]\nprefix = \"*.example.com\"\n[[registry.mirror]]\nlocation = \"m.example/x\"\npull-from-mirror = \"digest-only\"\n")]
fn registries_conf_without_tag_mirrors_is_fine(#[case] text: &str) {
    assert_eq!(conf(&MirrorPolicy::default(), text), Ok(Some(Vec::new())));
}

#[rstest]
#[case::no_prefix_no_location(
    "[[registry]]\ninsecure = true\n",
    "line 1, [[registry]] #0: invalid condition: both location and prefix are unset (CRI-O cannot \
     load it: containers/image sysregistriesv2 postProcessRegistries)"
)]
#[case::mirror_without_location(
    "[[registry]]\nlocation = \"a.example\"\n[[registry.mirror]]\ninsecure = true\n",
    "line 3, [[registry]] location=\"a.example\" mirror[0]: invalid condition: mirror location is \
     unset (CRI-O cannot load it: containers/image sysregistriesv2 postProcessRegistries)"
)]
fn registries_conf_that_containers_image_rejects(#[case] text: &str, #[case] expected: &str) {
    let err = conf(&MirrorPolicy::default(), text).expect_err("rejected");
    assert_eq!(
        err.to_string(),
        format!("ConfigMap data[registries.conf] {expected}")
    );
}

#[rstest]
#[case::no_data(json!({"kind": "ConfigMap", "metadata": {"name": "c"}}))]
#[case::other_keys(json!({"kind": "ConfigMap", "data": {"app.properties": "a=b"}}))]
fn configmap_without_the_key_is_not_mine(#[case] object: Value) {
    assert_eq!(
        check(&MirrorPolicy::default(), "", "ConfigMap", &object),
        Ok(None)
    );
}

/// Issue 17: `binaryData` is projected as files too, so it is read (this case used to be
/// "binaryData is not inspected": `[[registry]]` alone is a file CRI-O refuses).
#[test]
fn configmap_binary_data_is_read() {
    let object =
        json!({"kind": "ConfigMap", "binaryData": {"registries.conf": "W1tyZWdpc3RyeV1dCg=="}});
    assert_eq!(
        check(&MirrorPolicy::default(), "", "ConfigMap", &object)
            .expect_err("unloadable")
            .to_string(),
        "ConfigMap binaryData[registries.conf] line 1, [[registry]] #0: invalid condition: both \
         location and prefix are unset (CRI-O cannot load it: containers/image sysregistriesv2 \
         postProcessRegistries)"
    );
}

#[test]
fn configmap_value_of_wrong_type_is_an_error() {
    let object = json!({"kind": "ConfigMap", "data": {"registries.conf": 5}});
    assert_eq!(
        check(&MirrorPolicy::default(), "", "ConfigMap", &object)
            .expect_err("wrong type")
            .to_string(),
        "ConfigMap data[registries.conf]: must be a string"
    );
}

// --- policy ---

#[test]
fn policy_deserializes_camel_case_and_refuses_unknown_fields() {
    let policy: MirrorPolicy = serde_json::from_value(json!({
        "configMapKey": "crio",
        "allow": [{"source": "a.example/x", "mirror": "m.example/x"}],
    }))
    .expect("valid");
    assert_eq!(policy.registries_conf_key(), "crio");
    assert!(policy.allows("a.example/x/", "m.example/x"));
    assert!(!policy.allows("a.example/x/y", "m.example/x/y"));
    assert_eq!(
        MirrorPolicy::default().registries_conf_key(),
        "registries.conf"
    );
    assert!(serde_json::from_value::<MirrorPolicy>(json!({"config_map_key": "x"})).is_err());
    assert!(serde_json::from_value::<MirrorPolicy>(
        json!({"allow": [{"source": "a", "mirror": "b", "x": 1}]})
    )
    .is_err());
}

#[test]
fn policy_defaults_read_every_configmap_and_key_and_assume_no_windows_nodes() {
    let parsed: MirrorPolicy = serde_json::from_value(json!({})).expect("valid");
    assert_eq!(parsed, MirrorPolicy::default());
    assert_eq!(parsed.config_maps, vec!["*"]);
    assert_eq!(parsed.config_map_keys, vec!["*"]);
    assert!(!parsed.windows_nodes);
    let parsed: MirrorPolicy = serde_json::from_value(json!({
        "configMaps": ["openshift-config/*"],
        "configMapKeys": ["*.conf", "*hosts.toml"],
        "windowsNodes": true,
    }))
    .expect("valid");
    assert_eq!(parsed.config_maps, vec!["openshift-config/*"]);
    assert_eq!(parsed.config_map_keys, vec!["*.conf", "*hosts.toml"]);
    assert!(parsed.windows_nodes);
    assert!(serde_json::from_value::<MirrorPolicy>(json!({"windows_nodes": true})).is_err());
}

#[test]
fn review_returns_notes_check_only_findings() {
    let text = "[[registry]]\nlocation = \"quay.io\"\n[[registry]]\nlocation = \"quay.io\"\n[[registry.mirror]]\nlocation = \"m.example\"\n";
    let object = configmap("registries.conf", text);
    let review = review(&MirrorPolicy::default(), "", "ConfigMap", &object)
        .expect("loads")
        .expect("mine");
    assert_eq!(review.violations, Vec::new());
    assert_eq!(review.notes.len(), 1, "{:?}", review.notes);
    assert_eq!(
        check(&MirrorPolicy::default(), "", "ConfigMap", &object),
        Ok(Some(Vec::new()))
    );
}

#[test]
fn line_column_counts_characters() {
    assert_eq!(line_column("ab\ncdé f", 7), (2, 4));
    assert_eq!(line_column("", 3), (1, 1));
    assert_eq!(line_column("é", 1), (1, 1));
}
