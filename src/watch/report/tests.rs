//! PolicyReport tests: the state → result mapping per mode, the exact JSON, stable order and
//! carried timestamps (no write for an unchanged cluster), the write plan, the bound, and the
//! mirror ClusterPolicyReport.

use rstest::rstest;
use serde_json::{json, Value};

use super::*;
use crate::policy::mirror_policy::AllowedMirror;
use crate::policy::MirrorPolicy;
use crate::registry::testing::digest;
use crate::watch::pod::{PodImage, WorkloadRef};
pub(super) use crate::watch::testing::{classified, Seen};
use crate::watch::WatchError;
use crate::workload::ImageField;

pub(super) const T1: Timestamp = Timestamp {
    seconds: 1_700_000_000,
    nanos: 0,
};
pub(super) const T2: Timestamp = Timestamp {
    seconds: 1_700_000_600,
    nanos: 5,
};

fn workload(namespace: &str, kind: &str, name: &str) -> WorkloadRef {
    WorkloadRef {
        namespace: namespace.into(),
        kind: kind.into(),
        name: name.into(),
        api_version: "apps/v1".into(),
        uid: (kind != "Deployment").then(|| format!("{name}-uid")),
    }
}

fn seen(
    pod: &str,
    workload: &WorkloadRef,
    field: ImageField,
    container: &str,
    image: &str,
    state: ImageState,
) -> Seen {
    let site = PodImage {
        running: None,
        field,
        name: container.into(),
        image: image.into(),
    };
    crate::watch::testing::seen(pod, workload, site, state)
}

pub(super) fn app(image: &str, state: ImageState) -> Seen {
    let web = workload("shop", "Deployment", "web");
    seen("p1", &web, ImageField::Containers, "app", image, state)
}

pub(super) fn moved() -> ImageState {
    ImageState::TagMoved {
        pinned: digest('a'),
        now: digest('b'),
    }
}

fn rules(report: &PolicyReport) -> Vec<(&str, &str)> {
    report
        .results
        .iter()
        .map(|r| (r.rule.as_str(), r.result.as_str()))
        .collect()
}

#[rstest]
#[case::unpinned_enforce(ImageState::Unpinned { current: Some(digest('b')) }, Mode::Enforce, &[("pinned", "fail")])]
#[case::unpinned_audit(ImageState::Unpinned { current: None }, Mode::Audit, &[("pinned", "warn")])]
#[case::current(ImageState::PinnedCurrent { digest: digest('a') }, Mode::Enforce, &[("pinned", "pass"), ("tag-current", "pass")])]
#[case::moved_enforce(moved(), Mode::Enforce, &[("pinned", "pass"), ("tag-current", "fail")])]
#[case::moved_audit(moved(), Mode::Audit, &[("pinned", "pass"), ("tag-current", "warn")])]
#[case::digest_only(ImageState::DigestOnly { digest: digest('a') }, Mode::Enforce, &[("pinned", "pass"), ("tag-current", "skip")])]
#[case::unresolvable_pinned(ImageState::Unresolvable { reason: "timeout".into(), pinned: Some(digest('a')) }, Mode::Enforce, &[("pinned", "pass"), ("tag-current", "error")])]
#[case::unresolvable_audit(ImageState::Unresolvable { reason: "timeout".into(), pinned: Some(digest('a')) }, Mode::Audit, &[("pinned", "pass"), ("tag-current", "error")])]
#[case::invalid_reference(ImageState::Unresolvable { reason: "invalid image reference".into(), pinned: None }, Mode::Enforce, &[("pinned", "error")])]
#[case::exempt(ImageState::Exempt { why: "namespace is exempt".into() }, Mode::Enforce, &[("pinned", "skip")])]
#[case::left_to_owner(ImageState::LeftToOwner { why: "the mirror of a static pod".into() }, Mode::Enforce, &[("pinned", "skip")])]
#[case::left_to_owner_audit(ImageState::LeftToOwner { why: "x".into() }, Mode::Audit, &[("pinned", "skip")])]
#[case::off(moved(), Mode::Off, &[("pinned", "skip")])]
#[case::runs_other(ImageState::RunsOtherDigest { pinned: digest('a'), running: digest('b') }, Mode::Enforce, &[("pinned", "pass"), ("runs-pinned", "fail")])]
#[case::runs_other_audit(ImageState::RunsOtherDigest { pinned: digest('a'), running: digest('b') }, Mode::Audit, &[("pinned", "pass"), ("runs-pinned", "warn")])]
#[case::runs_stale(ImageState::RunsStaleDigest { running: digest('b'), now: digest('a') }, Mode::Audit, &[("pinned", "warn"), ("runs-pinned", "warn")])]
#[case::digest_missing(ImageState::DigestMissing { pinned: digest('a') }, Mode::Enforce, &[("pinned", "pass"), ("digest-available", "fail")])]
#[case::unverified(ImageState::Unverified { pinned: digest('a'), why: "verify[0]: no signature found".into() }, Mode::Enforce, &[("pinned", "pass"), ("signed", "fail")])]
#[case::unverified_audit(ImageState::Unverified { pinned: digest('a'), why: "verify[0]: signed by another key".into() }, Mode::Audit, &[("pinned", "pass"), ("signed", "warn")])]
fn each_state_maps_to_its_results(
    #[case] state: ImageState,
    #[case] mode: Mode,
    #[case] expected: &[(&str, &str)],
) {
    let report = namespace_report(
        "shop",
        mode,
        &classified(&[app("nginx:1.25", state)]),
        T1,
        None,
    );
    assert_eq!(rules(&report), expected);
    assert!(report
        .results
        .iter()
        .all(|r| r.scored == (mode == Mode::Enforce)));
}

#[test]
fn a_tag_moved_report_is_exactly_this_json() {
    let image = format!("nginx:1.25@{}", digest('a'));
    let report = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&[app(&image, moved())]),
        T1,
        None,
    );
    let resource = json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop",
                          "name": "web"});
    let properties = json!({
        "container": "containers[app]",
        "currentDigest": digest('b').to_string(),
        "image": image,
        "pinnedDigest": digest('a').to_string(),
        "state": "tag-moved",
    });
    let result = |rule: &str, result: &str, severity: &str, message: String| {
        json!({
            "policy": "pinhook", "rule": rule, "result": result, "scored": true,
            "message": message, "resources": [resource], "source": "pinhook",
            "severity": severity, "category": "Supply Chain Security",
            "properties": properties, "timestamp": {"seconds": 1_700_000_000, "nanos": 0},
        })
    };
    assert_eq!(
        serde_json::to_value(&report).expect("serialises"),
        json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2",
            "kind": "PolicyReport",
            "metadata": {
                "name": "pinhook",
                "namespace": "shop",
                "labels": {"app.kubernetes.io/managed-by": "pinhook"},
                "annotations": {"pinhook.dev/content-sha256":
                    "f12b1931c441dd5562e990cb8566d6c337230066facdb8570b2e85a3ed0340e1"},
            },
            "results": [
                result("pinned", "pass", "high",
                       format!("containers[app] runs {image}, pinned to {}", digest('a'))),
                result("tag-current", "fail", "medium",
                       format!("containers[app] runs {image}: its tag now resolves to {}, not \
                                the pinned {}", digest('b'), digest('a'))),
            ],
            "summary": {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0},
        })
    );
}

#[test]
fn unpinned_results_leave_out_the_tags_current_digest() {
    let report = |current| {
        namespace_report(
            "shop",
            Mode::Audit,
            &classified(&[app("nginx:latest", ImageState::Unpinned { current })]),
            T1,
            None,
        )
    };
    let before = report(Some(digest('a')));
    assert_eq!(
        before.results[0].message,
        "containers[app] runs nginx:latest by tag, not pinned to a digest"
    );
    assert!(!before.results[0].properties.contains_key("currentDigest"));
    // `latest` moving on in the registry changes nothing in the report.
    assert_eq!(before, report(Some(digest('b'))));
}

pub(super) fn cluster() -> Vec<Seen> {
    let web = workload("shop", "Deployment", "web");
    let db = workload("shop", "StatefulSet", "db");
    let other = workload("blog", "Deployment", "web");
    let pinned = format!("nginx:1.25@{}", digest('a'));
    vec![
        seen("p1", &web, ImageField::Containers, "app", &pinned, moved()),
        seen(
            "p1",
            &web,
            ImageField::InitContainers,
            "setup",
            "busybox",
            ImageState::Unpinned { current: None },
        ),
        // A second Pod of the same Deployment adds nothing.
        seen("p2", &web, ImageField::Containers, "app", &pinned, moved()),
        seen(
            "p3",
            &db,
            ImageField::Containers,
            "postgres",
            &format!("postgres@{}", digest('c')),
            ImageState::DigestOnly {
                digest: digest('c'),
            },
        ),
        seen(
            "p4",
            &other,
            ImageField::Containers,
            "app",
            "nginx",
            ImageState::Unpinned { current: None },
        ),
    ]
}

#[test]
fn results_are_per_workload_in_a_fixed_order_whatever_order_pods_come_in() {
    let images = cluster();
    let report = namespace_report("shop", Mode::Enforce, &classified(&images), T1, None);
    let order: Vec<_> = report
        .results
        .iter()
        .map(|r| {
            (
                r.resources[0].kind.as_str(),
                r.properties["container"].as_str(),
                r.rule.as_str(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("Deployment", "containers[app]", "pinned"),
            ("Deployment", "containers[app]", "tag-current"),
            ("Deployment", "initContainers[setup]", "pinned"),
            ("StatefulSet", "containers[postgres]", "pinned"),
            ("StatefulSet", "containers[postgres]", "tag-current"),
        ]
    );
    assert_eq!(
        report.resources_uids(),
        [None, None, None, Some("db-uid"), Some("db-uid")]
    );
    assert_eq!(
        report.summary,
        Summary {
            pass: 2,
            fail: 2,
            warn: 0,
            error: 0,
            skip: 1
        }
    );
    let bytes = serde_json::to_vec(&report).expect("serialises");
    let mut reversed = images.clone();
    reversed.reverse();
    let again = namespace_report("shop", Mode::Enforce, &classified(&reversed), T1, None);
    assert_eq!(serde_json::to_vec(&again).expect("serialises"), bytes);
}

#[test]
fn images_of_other_namespaces_are_not_in_the_report() {
    let report = namespace_report("blog", Mode::Enforce, &classified(&cluster()), T1, None);
    assert_eq!(rules(&report), [("pinned", "fail")]);
    assert_eq!(report.metadata.namespace.as_deref(), Some("blog"));
    let empty = namespace_report("empty", Mode::Enforce, &classified(&cluster()), T1, None);
    assert!(empty.results.is_empty());
}

#[test]
fn an_unchanged_cluster_rebuilds_a_byte_identical_report_and_writes_nothing() {
    let first = namespace_report("shop", Mode::Enforce, &classified(&cluster()), T1, None);
    let second = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&cluster()),
        T2,
        Some(&first),
    );
    assert_eq!(
        serde_json::to_vec(&second).expect("serialises"),
        serde_json::to_vec(&first).expect("serialises")
    );
    assert_eq!(plan(Some(&first), second), ReportWrite::Unchanged);
}

#[test]
fn a_changed_result_alone_gets_the_new_timestamp_and_the_report_is_updated() {
    let first = namespace_report("shop", Mode::Enforce, &classified(&cluster()), T1, None);
    let mut images = cluster();
    for image in images.iter_mut().filter(|i| i.pod.images[0].name == "app") {
        image.state = ImageState::PinnedCurrent {
            digest: digest('a'),
        };
    }
    let second = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&images),
        T2,
        Some(&first),
    );
    let stamps: Vec<_> = second
        .results
        .iter()
        .map(|r| (r.rule.as_str(), r.result.as_str(), r.timestamp))
        .collect();
    assert_eq!(
        stamps,
        [
            // Its properties changed (state, currentDigest): a new finding.
            ("pinned", "pass", T2),
            ("tag-current", "pass", T2),
            ("pinned", "fail", T1),
            ("pinned", "pass", T1),
            ("tag-current", "skip", T1),
        ]
    );
    assert!(matches!(plan(Some(&first), second), ReportWrite::Update(_)));
}

#[test]
fn the_plan_creates_updates_deletes_or_leaves_alone() {
    let full = namespace_report("shop", Mode::Enforce, &classified(&cluster()), T1, None);
    let empty = namespace_report("shop", Mode::Enforce, &[], T1, None);
    assert_eq!(plan(None, full.clone()), ReportWrite::Create(full.clone()));
    assert_eq!(plan(Some(&full), empty.clone()), ReportWrite::Delete);
    assert_eq!(plan(None, empty), ReportWrite::Unchanged);
    // A caller that lost the stored copy rebuilds with fresh timestamps: still no write.
    let fresh = namespace_report("shop", Mode::Enforce, &classified(&cluster()), T2, None);
    assert_ne!(fresh, full);
    assert_eq!(plan(Some(&full), fresh), ReportWrite::Unchanged);
    // A mode change is a change.
    let audit = namespace_report(
        "shop",
        Mode::Audit,
        &classified(&cluster()),
        T2,
        Some(&full),
    );
    assert!(matches!(plan(Some(&full), audit), ReportWrite::Update(_)));
}

#[test]
fn a_report_read_back_from_the_apiserver_has_the_same_content() {
    let desired = namespace_report("shop", Mode::Enforce, &classified(&cluster()), T1, None);
    let mut stored = serde_json::to_value(&desired).expect("serialises");
    stored["metadata"]["resourceVersion"] = json!("4711");
    stored["metadata"]["uid"] = json!("report-uid");
    stored["metadata"]["creationTimestamp"] = json!("2023-11-14T22:13:20Z");
    stored["metadata"]["managedFields"] = json!([{"manager": "pinhook"}]);
    stored["metadata"]["labels"]["team"] = json!("shop");
    let stored: PolicyReport = serde_json::from_value(stored).expect("reads back");
    assert!(stored.same_content(&desired));
    assert_eq!(plan(Some(&stored), desired), ReportWrite::Unchanged);
}

#[test]
fn a_report_over_the_bound_keeps_findings_first_and_says_how_many_it_dropped() {
    let web = workload("shop", "Deployment", "web");
    let mut images = Vec::new();
    // 600 pinned-current images (1200 passing results) after 300 unpinned ones (300 fails).
    for i in 0..900 {
        let (image, state) = if i < 300 {
            ("nginx".to_string(), ImageState::Unpinned { current: None })
        } else {
            (
                format!("nginx:1.25@{}", digest('a')),
                ImageState::PinnedCurrent {
                    digest: digest('a'),
                },
            )
        };
        let name = format!("c{i:03}");
        images.push(seen(
            "p",
            &web,
            ImageField::Containers,
            &name,
            &image,
            state,
        ));
    }
    let report = namespace_report("shop", Mode::Enforce, &classified(&images), T1, None);
    // MAX_RESULTS - 1 results and the one that counts the rest.
    assert_eq!(report.results.len(), MAX_RESULTS);
    assert_eq!(
        report
            .metadata
            .annotations
            .get(OMITTED_ANNOTATION)
            .map(String::as_str),
        Some("501")
    );
    // The summary counts every result, listed or not.
    assert_eq!(report.summary.fail, 300);
    assert_eq!(report.summary.pass, 1200);
    let listed_passes = report
        .results
        .iter()
        .filter(|r| r.result == Verdict::Pass)
        .count();
    assert_eq!(listed_passes, 699);
    // Order is kept: the first 699 passes, sorted by container name, follow the fails.
    let names: Vec<&str> = report.results[..MAX_RESULTS - 1]
        .iter()
        .map(|r| r.properties["container"].as_str())
        .collect();
    assert_eq!(names[299], "containers[c299]");
    assert_eq!(names[300], "containers[c300]");
    assert_eq!(names[998], "containers[c649]");
    let last = &report.results[MAX_RESULTS - 1];
    assert_eq!(last.rule, budget::RULE_OMITTED);
    assert_eq!(last.result, Verdict::Skip);
    assert_eq!(last.properties["omitted"], "501");
    assert!(
        last.message
            .starts_with("501 more results not listed (fail 0, warn 0, error 0, pass 501, skip 0)"),
        "{}",
        last.message
    );
}

#[test]
fn timestamps_from_the_callers_clock_keep_nanos_non_negative() {
    use std::time::{Duration, UNIX_EPOCH};
    let after = UNIX_EPOCH + Duration::new(1_700_000_000, 250);
    assert_eq!(
        Timestamp::from_system_time(after),
        Timestamp::new(1_700_000_000, 250)
    );
    let before = UNIX_EPOCH - Duration::new(2, 250);
    assert_eq!(
        Timestamp::from_system_time(before),
        Timestamp::new(-3, 999_999_750)
    );
    let whole = UNIX_EPOCH - Duration::from_secs(2);
    assert_eq!(Timestamp::from_system_time(whole), Timestamp::new(-2, 0));
}

// --- mirrors ---

pub(super) fn itms(mirrors: Value) -> Value {
    json!({
        "apiVersion": "config.openshift.io/v1",
        "kind": "ImageTagMirrorSet",
        "metadata": {"name": "tag-mirrors", "uid": "itms-uid"},
        "spec": {"imageTagMirrors": [{"source": "registry.example/team", "mirrors": mirrors}]}
    })
}

#[test]
fn mirror_findings_are_the_guards_violations_on_the_object() {
    let object = itms(json!(["mirror.example/team", "mirror2.example/team"]));
    let findings = mirror_findings(&MirrorPolicy::default(), &object).expect("readable");
    let pairs: Vec<_> = findings
        .iter()
        .map(|f| (f.verdict, f.mirror.as_deref(), f.entry.as_deref()))
        .collect();
    assert_eq!(
        pairs,
        [
            (
                Verdict::Fail,
                Some("mirror.example/team"),
                Some("spec.imageTagMirrors[0].mirrors[0]")
            ),
            (
                Verdict::Fail,
                Some("mirror2.example/team"),
                Some("spec.imageTagMirrors[0].mirrors[1]")
            ),
        ]
    );
    assert_eq!(
        findings[0].object,
        ObjectRef {
            api_version: "config.openshift.io/v1".into(),
            kind: "ImageTagMirrorSet".into(),
            namespace: None,
            name: "tag-mirrors".into(),
            uid: Some("itms-uid".into()),
        }
    );
    // An allowed pair is no finding.
    let policy = MirrorPolicy {
        allow: vec![AllowedMirror {
            source: "registry.example/team".into(),
            mirror: "mirror.example/team".into(),
        }],
        ..MirrorPolicy::default()
    };
    assert_eq!(mirror_findings(&policy, &object).map(|f| f.len()), Ok(1));
}

#[test]
fn objects_the_guard_does_not_judge_or_finds_clean_have_no_findings() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let plain = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "settings", "namespace": "shop"},
                       "data": {"color": "blue"}});
    for object in [pod, plain, itms(json!([]))] {
        assert_eq!(
            mirror_findings(&MirrorPolicy::default(), &object),
            Ok(Vec::new())
        );
    }
}

#[test]
fn an_object_no_node_can_load_is_an_error_finding() {
    let object = itms(json!([1]));
    let findings = mirror_findings(&MirrorPolicy::default(), &object).expect("readable");
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].verdict, Verdict::Error);
    assert_eq!(
        findings[0].message,
        "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0]: must be a string"
    );
}

#[rstest]
#[case::no_kind(json!({"apiVersion": "v1", "metadata": {"name": "x"}}), WatchError::Missing { field: "kind" })]
#[case::no_name(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}), WatchError::Missing { field: "metadata.name" })]
#[case::name_not_a_string(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 1}}),
    WatchError::Invalid { field: "metadata.name".into(), expected: "a string" })]
fn an_object_without_identity_is_an_error(#[case] object: Value, #[case] expected: WatchError) {
    assert_eq!(
        mirror_findings(&MirrorPolicy::default(), &object),
        Err(expected)
    );
}

#[test]
fn the_mirror_report_is_a_cluster_report_of_failures() {
    let object = itms(json!(["mirror.example/team"]));
    let findings = mirror_findings(&MirrorPolicy::default(), &object).expect("readable");
    let report = mirror_report(Mode::Enforce, &findings, T1, None);
    let value = serde_json::to_value(&report).expect("serialises");
    assert_eq!(value["kind"], "ClusterPolicyReport");
    assert_eq!(
        value["metadata"],
        json!({"name": "pinhook-mirrors", "labels": {"app.kubernetes.io/managed-by": "pinhook"},
               "annotations": {"pinhook.dev/content-sha256":
                   "8b25be2934750e3f2204fccf3445594de7558cf92b1f2ac803d52b005bad676b"}})
    );
    assert_eq!(
        value["results"][0],
        json!({
            "policy": "pinhook", "rule": "mirror-by-digest-only", "result": "fail",
            "scored": true, "message": findings[0].message,
            "resources": [{"apiVersion": "config.openshift.io/v1", "kind": "ImageTagMirrorSet",
                           "name": "tag-mirrors", "uid": "itms-uid"}],
            "source": "pinhook", "severity": "high", "category": "Supply Chain Security",
            "properties": {"entry": "spec.imageTagMirrors[0].mirrors[0]",
                           "mirror": "mirror.example/team", "source": "registry.example/team"},
            "timestamp": {"seconds": 1_700_000_000, "nanos": 0},
        })
    );
    assert_eq!(report.summary.fail, 1);
    let audit = mirror_report(Mode::Audit, &findings, T2, Some(&report));
    assert_eq!(rules(&audit), [("mirror-by-digest-only", "warn")]);
    let again = mirror_report(Mode::Enforce, &findings, T2, Some(&report));
    assert_eq!(plan(Some(&report), again), ReportWrite::Unchanged);
    let gone = mirror_report(Mode::Enforce, &[], T2, Some(&report));
    assert_eq!(plan(Some(&report), gone), ReportWrite::Delete);
}

impl PolicyReport {
    fn resources_uids(&self) -> Vec<Option<&str>> {
        self.results
            .iter()
            .map(|r| r.resources[0].uid.as_deref())
            .collect()
    }
}

// --- the CRD ---

/// Checks `value` against a CRD's structural schema: every field known (the apiserver would
/// prune an unknown one silently and every read-back would differ), types, enums, required.
/// Where a value does not fit a CRD's schema, and how.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {problem}")]
pub(super) struct SchemaMismatch {
    at: String,
    problem: String,
}

fn mismatch(at: &str, problem: String) -> SchemaMismatch {
    SchemaMismatch {
        at: at.to_string(),
        problem,
    }
}

pub(super) fn conforms(schema: &Value, value: &Value, at: &str) -> Result<(), SchemaMismatch> {
    let kind = schema["type"].as_str().unwrap_or_default();
    let fits = match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        other => return Err(mismatch(at, format!("schema type {other:?}"))),
    };
    if !fits {
        return Err(mismatch(at, format!("{value} is not {kind}")));
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            return Err(mismatch(at, format!("{value} is not one of {allowed:?}")));
        }
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            conforms(&schema["items"], item, &format!("{at}[{i}]"))?;
        }
    }
    if let Some(fields) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap_or_default();
            if !fields.contains_key(name) {
                return Err(mismatch(at, format!("{name} is required")));
            }
        }
        for (name, field) in fields {
            let path = format!("{at}.{name}");
            match (&schema["properties"][name], &schema["additionalProperties"]) {
                (Value::Null, Value::Null) if at.ends_with("metadata") => {}
                (Value::Null, Value::Null) => return Err(mismatch(&path, "not in the CRD".into())),
                (Value::Null, values) => conforms(values, field, &path)?,
                (known, _) => conforms(known, field, &path)?,
            }
        }
    }
    Ok(())
}

#[test]
fn reports_conform_to_the_crds_the_manifests_install() {
    let crds: Vec<Value> = crate::documents::parse(
        include_str!("../../../manifests/components/policy-reports/crd.yaml"),
        None,
    )
    .into_iter()
    .map(|d| d.object.expect("CRD YAML parses"))
    .collect();
    let schema_of = |kind: &str| {
        let crd = crds
            .iter()
            .find(|c| c["spec"]["names"]["kind"] == kind)
            .expect("CRD present");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha2");
        assert_eq!(crd["spec"]["group"], "wgpolicyk8s.io");
        version["schema"]["openAPIV3Schema"].clone()
    };

    let images = every_state();
    for mode in [Mode::Enforce, Mode::Audit, Mode::Off] {
        let report = namespace_report("shop", mode, &classified(&images), T2, None);
        let value = serde_json::to_value(&report).expect("serialises");
        assert_eq!(
            conforms(&schema_of("PolicyReport"), &value, "PolicyReport"),
            Ok(())
        );
    }
    let findings =
        mirror_findings(&MirrorPolicy::default(), &itms(json!(["m.example", 1]))).expect("read");
    let findings = [
        findings,
        mirror_findings(&MirrorPolicy::default(), &itms(json!(["m.example"]))).expect("read"),
    ]
    .concat();
    let report = mirror_report(Mode::Enforce, &findings, T2, None);
    assert_eq!(report.results.len(), 2);
    let value = serde_json::to_value(&report).expect("serialises");
    assert_eq!(
        conforms(
            &schema_of("ClusterPolicyReport"),
            &value,
            "ClusterPolicyReport"
        ),
        Ok(())
    );
    // The checker does catch a field the CRD lacks.
    let mut extra = value;
    extra["results"][0]["pods"] = json!(3);
    assert_eq!(
        conforms(&schema_of("ClusterPolicyReport"), &extra, "r").map_err(|e| e.to_string()),
        Err("r.results[0].pods: not in the CRD".to_string())
    );
}

#[test]
fn the_content_digest_follows_what_the_report_says_not_when() {
    let image = format!("nginx:1.25@{}", digest('a'));
    let digest_of = |report: &PolicyReport| {
        report
            .metadata
            .annotations
            .get(CONTENT_ANNOTATION)
            .cloned()
            .expect("every report carries its content digest")
    };
    let first = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&[app(&image, moved())]),
        T1,
        None,
    );
    let later = Timestamp::new(T1.seconds + 600, 0);
    let again = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&[app(&image, moved())]),
        later,
        None,
    );
    assert_eq!(
        digest_of(&first),
        digest_of(&again),
        "timestamps do not count"
    );
    assert_eq!(digest_of(&first).len(), 64);
    let audit = namespace_report(
        "shop",
        Mode::Audit,
        &classified(&[app(&image, moved())]),
        T1,
        None,
    );
    assert_ne!(digest_of(&first), digest_of(&audit), "fail became warn");
    // A stored report without the digest (written before it existed) is brought up to date.
    let mut old = first.clone();
    old.metadata.annotations.remove(CONTENT_ANNOTATION);
    assert!(matches!(plan(Some(&old), again), ReportWrite::Update(_)));
}

#[test]
fn what_runs_is_named_with_both_digests_and_the_node_only_when_it_differs() {
    let web = workload("shop", "Deployment", "web");
    let image = format!("nginx:1.25@{}", digest('a'));
    let other = seen(
        "p1",
        &web,
        ImageField::Containers,
        "app",
        &image,
        ImageState::RunsOtherDigest {
            pinned: digest('a'),
            running: digest('b'),
        },
    )
    .on("node-7");
    let fine = seen(
        "p2",
        &web,
        ImageField::Containers,
        "app",
        &image,
        ImageState::PinnedCurrent {
            digest: digest('a'),
        },
    )
    .on("node-8");
    let report = namespace_report("shop", Mode::Enforce, &classified(&[other, fine]), T1, None);
    let runs: Vec<_> = report
        .results
        .iter()
        .filter(|r| r.rule == "runs-pinned")
        .collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].message,
        format!(
            "containers[app] runs {image}: node node-7 runs {}, not the pinned {}",
            digest('b'),
            digest('a')
        )
    );
    let properties = &runs[0].properties;
    assert_eq!(properties.get("node").map(String::as_str), Some("node-7"));
    assert_eq!(
        properties.get("runningDigest"),
        Some(&digest('b').to_string())
    );
    assert_eq!(
        properties.get("pinnedDigest"),
        Some(&digest('a').to_string())
    );
    // The Pod that runs its pin adds no node: moving it never rewrites the report.
    assert!(report
        .results
        .iter()
        .filter(|r| r.properties.get("state").map(String::as_str) == Some("pinned-current"))
        .all(|r| !r.properties.contains_key("node")));
}

#[test]
fn a_missing_pin_says_a_new_pod_cannot_pull() {
    let image = format!("nginx:1.25@{}", digest('a'));
    let report = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&[app(
            &image,
            ImageState::DigestMissing {
                pinned: digest('a'),
            },
        )]),
        T1,
        None,
    );
    let missing = report
        .results
        .iter()
        .find(|r| r.rule == "digest-available")
        .expect("a digest-available result");
    assert_eq!(missing.result.as_str(), "fail");
    assert_eq!(
        missing.message,
        format!(
            "containers[app] runs {image}: the registry no longer has the pinned {}; a new Pod of it cannot pull",
            digest('a')
        )
    );
}

/// The cluster's images plus one of each remaining state (what runs included): what the schema
/// tests check every result shape with.
pub(super) fn every_state() -> Vec<Seen> {
    let mut images = cluster();
    images.push(app(
        "Bad",
        ImageState::Unresolvable {
            reason: "invalid image reference".into(),
            pinned: None,
        },
    ));
    images.push(app("nginx", ImageState::Exempt { why: "x".into() }));
    let other = app(
        "redis:7",
        ImageState::RunsOtherDigest {
            pinned: digest('a'),
            running: digest('b'),
        },
    )
    .on("node-1");
    images.push(other);
    images.push(app(
        "memcached:1",
        ImageState::DigestMissing {
            pinned: digest('c'),
        },
    ));
    images
}
