//! OpenReports tests: the exact JSON of a Report, the summary counts, a round trip through the
//! apiserver's copy (an unchanged cluster: the same bytes, no write), conformance to the CRDs of
//! `manifests/components/openreports`, and the conversion's errors.

use serde_json::{json, Value};

use super::openreports::{
    from_openreports, to_openreports, OpenReport, OpenReportsError, ReportApi, ReportScope,
};
use super::tests::{app, classified, cluster, conforms, every_state, itms, moved, T1, T2};
use super::*;
use crate::policy::MirrorPolicy;
use crate::registry::testing::digest;

/// `report` as the apiserver hands it back: its own metadata added, as JSON.
fn stored_copy(report: &OpenReport) -> OpenReport {
    let mut stored = serde_json::to_value(report).expect("serialises");
    stored["metadata"]["resourceVersion"] = json!("4711");
    stored["metadata"]["uid"] = json!("report-uid");
    stored["metadata"]["creationTimestamp"] = json!("2026-11-26T10:00:00Z");
    stored["metadata"]["managedFields"] = json!([{"manager": "pinhook-watch"}]);
    serde_json::from_value(stored).expect("reads back")
}

#[test]
fn a_report_is_the_policy_reports_results_under_the_openreports_envelope() {
    let image = format!("nginx:1.25@{}", digest('a'));
    let built = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&[app(&image, moved())]),
        T1,
        None,
    );
    let report = to_openreports(&built).expect("converts");
    let value = serde_json::to_value(&report).expect("serialises");
    let policy_report = serde_json::to_value(&built).expect("serialises");
    assert_eq!(value["results"], policy_report["results"], "same results");
    assert_eq!(
        value["metadata"], policy_report["metadata"],
        "same metadata"
    );
    let mut envelope = value.clone();
    envelope.as_object_mut().expect("object").remove("results");
    envelope.as_object_mut().expect("object").remove("metadata");
    assert_eq!(
        envelope,
        json!({
            "apiVersion": "openreports.io/v1alpha1",
            "kind": "Report",
            "source": "pinhook",
            "configuration": {"limits": {"maxResults": 1000}},
            "summary": {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0},
        })
    );
    assert_eq!(
        value["results"][1],
        json!({
            "policy": "pinhook", "rule": "tag-current", "result": "fail", "scored": true,
            "message": format!("containers[app] runs {image}: its tag now resolves to {}, not \
                                the pinned {}", digest('b'), digest('a')),
            "resources": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop",
                           "name": "web"}],
            "source": "pinhook", "severity": "medium", "category": "Supply Chain Security",
            "properties": {"container": "containers[app]", "currentDigest": digest('b').to_string(),
                           "image": image, "pinnedDigest": digest('a').to_string(),
                           "state": "tag-moved"},
            "timestamp": {"seconds": 1_700_000_000, "nanos": 0},
        })
    );
}

#[test]
fn the_summary_counts_every_result_by_verdict() {
    // shop: web's app tag-moved (pinned pass, tag-current fail), its init container unpinned
    // (pinned fail), db digest-only (pinned pass, tag-current skip).
    let count = |mode| {
        let built = namespace_report("shop", mode, &classified(&cluster()), T1, None);
        to_openreports(&built).expect("converts").summary
    };
    let enforce = count(Mode::Enforce);
    assert_eq!(
        (
            enforce.pass,
            enforce.fail,
            enforce.warn,
            enforce.error,
            enforce.skip
        ),
        (2, 2, 0, 0, 1)
    );
    let audit = count(Mode::Audit);
    assert_eq!(
        (audit.pass, audit.fail, audit.warn, audit.error, audit.skip),
        (2, 0, 2, 0, 1)
    );
    let off = count(Mode::Off);
    assert_eq!(
        (off.pass, off.fail, off.warn, off.error, off.skip),
        (0, 0, 0, 0, 3)
    );
}

#[test]
fn an_unchanged_cluster_rebuilds_the_same_report_bytes_and_plans_no_write() {
    let first = namespace_report("shop", Mode::Enforce, &classified(&cluster()), T1, None);
    let written = to_openreports(&first).expect("converts");
    // The next cycle reads the stored Report back (in the built shape) and rebuilds later.
    let previous = from_openreports(stored_copy(&written)).expect("reads back");
    let second = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&cluster()),
        T2,
        Some(&previous),
    );
    let rewritten = to_openreports(&second).expect("converts");
    assert_eq!(
        serde_json::to_vec(&rewritten).expect("serialises"),
        serde_json::to_vec(&written).expect("serialises"),
        "timestamps carried over: byte-identical"
    );
    assert_eq!(plan(Some(&previous), second), ReportWrite::Unchanged);
    // Even rebuilt without the stored copy (fresh timestamps), nothing to write.
    let fresh = namespace_report("shop", Mode::Enforce, &classified(&cluster()), T2, None);
    assert_eq!(plan(Some(&previous), fresh), ReportWrite::Unchanged);
    // A change is still a change.
    let audit = namespace_report(
        "shop",
        Mode::Audit,
        &classified(&cluster()),
        T2,
        Some(&previous),
    );
    assert!(matches!(
        plan(Some(&previous), audit),
        ReportWrite::Update(_)
    ));
}

#[test]
fn both_reports_read_back_as_what_was_built() {
    let built = namespace_report("shop", Mode::Audit, &classified(&cluster()), T1, None);
    let back = from_openreports(stored_copy(&to_openreports(&built).expect("converts")))
        .expect("reads back");
    assert_eq!(back.kind, "PolicyReport");
    assert!(back.same_content(&built));

    let findings =
        mirror_findings(&MirrorPolicy::default(), &itms(json!(["m.example"]))).expect("read");
    let mirrors = mirror_report(Mode::Enforce, &findings, T1, None);
    let cluster_report = to_openreports(&mirrors).expect("converts");
    assert_eq!(cluster_report.kind, "ClusterReport");
    assert_eq!(cluster_report.metadata.name, "pinhook-mirrors");
    assert_eq!(cluster_report.metadata.namespace, None);
    let back = from_openreports(stored_copy(&cluster_report)).expect("reads back");
    assert_eq!(back.kind, "ClusterPolicyReport");
    assert!(back.same_content(&mirrors));
    assert_eq!(plan(Some(&back), mirrors), ReportWrite::Unchanged);
}

#[test]
fn reports_conform_to_the_openreports_crds_the_component_installs() {
    let crds: Vec<Value> = crate::documents::parse(
        include_str!("../../../manifests/components/openreports/crd.yaml"),
        None,
    )
    .into_iter()
    .map(|d| d.object.expect("CRD YAML parses"))
    .collect();
    assert_eq!(crds.len(), 2);
    let schema_of = |kind: &str| {
        let crd = crds
            .iter()
            .find(|c| c["spec"]["names"]["kind"] == kind)
            .expect("CRD present");
        assert_eq!(crd["spec"]["group"], ReportApi::OpenReports.group());
        let scope = if kind == "Report" {
            ReportScope::Namespace
        } else {
            ReportScope::Cluster
        };
        assert_eq!(
            crd["spec"]["names"]["plural"],
            ReportApi::OpenReports.plural(scope)
        );
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], ReportApi::OpenReports.version());
        version["schema"]["openAPIV3Schema"].clone()
    };

    let images = every_state();
    for mode in [Mode::Enforce, Mode::Audit, Mode::Off] {
        let built = namespace_report("shop", mode, &classified(&images), T2, None);
        let value =
            serde_json::to_value(to_openreports(&built).expect("converts")).expect("serialises");
        assert_eq!(conforms(&schema_of("Report"), &value, "Report"), Ok(()));
    }
    let findings = [
        mirror_findings(&MirrorPolicy::default(), &itms(json!(["m.example", 1]))).expect("read"),
        mirror_findings(&MirrorPolicy::default(), &itms(json!(["m.example"]))).expect("read"),
    ]
    .concat();
    let built = mirror_report(Mode::Enforce, &findings, T2, None);
    assert_eq!(built.results.len(), 2);
    let value =
        serde_json::to_value(to_openreports(&built).expect("converts")).expect("serialises");
    assert_eq!(
        conforms(&schema_of("ClusterReport"), &value, "ClusterReport"),
        Ok(())
    );
    // The checker catches a field only the wgpolicyk8s CRD has.
    let mut foreign = value;
    foreign["results"][0]["resourceSelector"] = json!({});
    foreign["scopeSelector"] = json!({});
    foreign["results"][0]["pods"] = json!(1);
    assert_eq!(
        conforms(&schema_of("ClusterReport"), &foreign, "r").map_err(|e| e.to_string()),
        Err("r.results[0].pods: not in the CRD".to_string())
    );
}

#[test]
fn reports_of_other_kinds_apis_or_scopes_do_not_convert() {
    let built = namespace_report("shop", Mode::Enforce, &classified(&cluster()), T1, None);
    let mut other = built.clone();
    other.kind = "Deployment".into();
    assert_eq!(
        to_openreports(&other),
        Err(OpenReportsError::NotPinhooksKind {
            kind: "Deployment".into()
        })
    );
    let mut unscoped = built.clone();
    unscoped.metadata.namespace = None;
    assert!(matches!(
        to_openreports(&unscoped),
        Err(OpenReportsError::Scope { .. })
    ));

    let report = to_openreports(&built).expect("converts");
    let mut wrong_api = report.clone();
    wrong_api.api_version = "wgpolicyk8s.io/v1alpha2".into();
    assert_eq!(
        from_openreports(wrong_api).map_err(|e| e.to_string()),
        Err(
            "Report \"pinhook\" is not of openreports.io/v1alpha1 (apiVersion \
             \"wgpolicyk8s.io/v1alpha2\")"
                .to_string()
        )
    );
    let mut namespaced_cluster_report = report.clone();
    namespaced_cluster_report.kind = "ClusterReport".into();
    assert!(matches!(
        from_openreports(namespaced_cluster_report),
        Err(OpenReportsError::Scope { .. })
    ));
    let mut policy_report = report;
    policy_report.kind = "PolicyReport".into();
    assert!(matches!(
        from_openreports(policy_report),
        Err(OpenReportsError::NotPinhooksKind { .. })
    ));
}

#[test]
fn each_api_names_its_group_kinds_and_plurals() {
    let names = |api: ReportApi| {
        [ReportScope::Namespace, ReportScope::Cluster].map(|scope| {
            format!(
                "{}/{} {}",
                api.api_version(),
                api.kind(scope),
                api.plural(scope)
            )
        })
    };
    assert_eq!(
        names(ReportApi::Wgpolicyk8s),
        [
            "wgpolicyk8s.io/v1alpha2/PolicyReport policyreports",
            "wgpolicyk8s.io/v1alpha2/ClusterPolicyReport clusterpolicyreports"
        ]
        .map(String::from)
    );
    assert_eq!(
        names(ReportApi::OpenReports),
        [
            "openreports.io/v1alpha1/Report reports",
            "openreports.io/v1alpha1/ClusterReport clusterreports"
        ]
        .map(String::from)
    );
    assert_eq!(ReportApi::default(), ReportApi::Wgpolicyk8s);
    assert_eq!(
        ReportScope::of_built(CLUSTER_POLICY_REPORT_KIND),
        ReportScope::Cluster
    );
    assert_eq!(
        ReportScope::of_built(POLICY_REPORT_KIND),
        ReportScope::Namespace
    );
}
