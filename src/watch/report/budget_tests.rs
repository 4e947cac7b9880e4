//! Budget tests: reports of thousands of worst-case results, and tenant strings of a megabyte,
//! still serialise under etcd's 1.5 MiB with every result counted.

use super::budget::{MAX_REPORT_BYTES, MAX_STRING_BYTES, RULE_OMITTED, TRUNCATION_MARKER};
use super::*;
use crate::registry::testing::digest;
use crate::watch::pod::{PodImage, WorkloadRef};
use crate::watch::testing::{classified, seen, Seen};
use crate::workload::ImageField;

/// etcd's default object limit.
const ETCD_LIMIT: usize = 1536 * 1024;
const NOW: Timestamp = Timestamp {
    seconds: 1_700_000_000,
    nanos: 999_999_999,
};

/// `n` images of one namespace, each as large as a Pod lets it be: 253-byte workload names, a
/// 1024-byte image, and a lookup failure of 4 KiB (the registry's words). Every third is an
/// unpinned image (a high finding), every third a tag that could not be checked (a medium
/// finding and a pass), the rest pinned and current (two passes).
fn worst_case_images(n: usize) -> Vec<Seen> {
    (0..n)
        .map(|i| {
            let name = format!("{i:05}{}", "w".repeat(248));
            let workload = WorkloadRef {
                namespace: "shop".into(),
                kind: "Deployment".into(),
                name,
                api_version: "apps/v1".into(),
                uid: Some(format!("{i:05}{}", "u".repeat(31))),
            };
            let image = format!("registry.example/{}:{i:05}", "r".repeat(1000));
            let state = match i % 3 {
                0 => ImageState::Unpinned { current: None },
                1 => ImageState::Unresolvable {
                    reason: "x".repeat(4096),
                    pinned: Some(digest('a')),
                },
                _ => ImageState::PinnedCurrent {
                    digest: digest('a'),
                },
            };
            let site = PodImage {
                running: None,
                field: ImageField::Containers,
                name: "c".repeat(63),
                image,
            };
            seen(&format!("p{i}"), &workload, site, state)
        })
        .collect()
}

fn json_len<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_vec(value).expect("serialises").len()
}

/// Every string in `value`, anywhere.
fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                strings(v, out);
            }
        }
        _ => {}
    }
}

#[test]
fn a_namespace_of_5000_worst_case_images_fits_with_every_result_counted() {
    for n in [1000, 5000] {
        let images = worst_case_images(n);
        let report = namespace_report("shop", Mode::Enforce, &classified(&images), NOW, None);
        let bytes = json_len(&report);
        // The bytes of every result, were they all listed (strings already bounded).
        let unbounded: usize = images
            .iter()
            .flat_map(|i| {
                namespace_report("shop", Mode::Enforce, &[i.classified()], NOW, None).results
            })
            .map(|r| json_len(&r) + 1)
            .sum();
        println!(
            "{n} images: report {bytes} bytes, {} results listed; every result listed: {unbounded} bytes of results",
            report.results.len()
        );
        assert!(bytes <= MAX_REPORT_BYTES, "{n}: {bytes} bytes");
        assert!(bytes < ETCD_LIMIT, "{n}: {bytes} bytes");
        assert!(report.results.len() <= MAX_RESULTS);
        // Every result counted: one third unpinned (1 fail), one third unresolvable (pass and
        // error), one third current (2 passes).
        let third = |r: usize| (n + 2 - r) / 3;
        assert_eq!(report.summary.fail, third(0) as u64);
        assert_eq!(report.summary.error, third(1) as u64);
        assert_eq!(report.summary.pass, (third(1) + 2 * third(2)) as u64, "{n}");
        assert_eq!(report.summary.warn + report.summary.skip, 0);
        // Listed plus omitted is every result.
        let omitted: usize = report.metadata.annotations[OMITTED_ANNOTATION]
            .parse()
            .expect("a count");
        let last = report.results.last().expect("results");
        assert_eq!(last.rule, RULE_OMITTED);
        assert_eq!(last.properties["omitted"], omitted.to_string());
        assert_eq!(
            report.results.len() - 1 + omitted,
            report.summary.total() as usize
        );
        // The most severe first: every unpinned image (high) is listed before any pass.
        let listed_fails = report
            .results
            .iter()
            .filter(|r| r.result == Verdict::Fail)
            .count();
        let listed_passes = report
            .results
            .iter()
            .filter(|r| r.result == Verdict::Pass)
            .count();
        assert!(
            listed_passes == 0 || listed_fails as u64 == report.summary.fail,
            "passes listed while fails were left out"
        );
        assert!(listed_fails > 0);
    }
}

#[test]
fn the_same_oversized_namespace_rebuilds_the_same_report_and_writes_nothing() {
    let images = worst_case_images(3000);
    let first = namespace_report("shop", Mode::Enforce, &classified(&images), NOW, None);
    let later = Timestamp::new(NOW.seconds + 600, 0);
    let again = namespace_report(
        "shop",
        Mode::Enforce,
        &classified(&images),
        later,
        Some(&first),
    );
    assert_eq!(again, first);
    assert_eq!(plan(Some(&first), again), ReportWrite::Unchanged);
}

#[test]
fn strings_of_a_megabyte_are_cut_to_the_bound_in_both_reports() {
    let huge = "é".repeat(512 * 1024); // 1 MiB
    let finding = MirrorFinding {
        object: ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some(huge.clone()),
            name: huge.clone(),
            uid: Some(huge.clone()),
        },
        verdict: Verdict::Fail,
        message: huge.clone(),
        entry: Some(huge.clone()),
        source: Some(huge.clone()),
        mirror: Some(huge.clone()),
    };
    let findings = vec![finding; 3];
    let report = mirror_report(Mode::Enforce, &findings, NOW, None);
    let workload = crate::watch::testing::deployment("shop", &huge);
    let site = crate::watch::testing::container(&huge);
    let images = vec![seen(
        "p",
        &workload,
        site,
        ImageState::Exempt { why: huge.clone() },
    )];
    let namespaced = namespace_report("shop", Mode::Enforce, &classified(&images), NOW, None);
    for report in [report, namespaced] {
        let value = serde_json::to_value(&report).expect("serialises");
        let mut all = Vec::new();
        strings(&value, &mut all);
        assert!(all.iter().all(|s| s.len() <= MAX_STRING_BYTES));
        let cut = all
            .iter()
            .filter(|s| s.ends_with(TRUNCATION_MARKER))
            .count();
        assert!(cut >= 3, "{cut} strings cut");
        assert!(json_len(&report) < 64 * 1024, "{}", json_len(&report));
        assert_eq!(report.summary.total(), report.results.len() as u64);
    }
}

#[test]
fn a_config_map_with_a_megabyte_name_and_mirror_yields_bounded_findings() {
    let huge_name = "n".repeat(1024 * 1024);
    let huge_mirror = format!("m{}.example", "m".repeat(1024 * 1024));
    let conf = format!(
        "[[registry]]\nlocation = \"a.example\"\n[[registry.mirror]]\nlocation = \"{huge_mirror}\"\n"
    );
    let object = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": huge_name, "namespace": "nodes", "uid": "u"},
        "data": {"registries.conf": conf},
    });
    let findings =
        mirror_findings(&crate::policy::MirrorPolicy::default(), &object).expect("judged");
    assert!(!findings.is_empty(), "a tag mirror is a finding");
    for finding in &findings {
        let strings = [
            Some(&finding.message),
            Some(&finding.object.name),
            finding.entry.as_ref(),
            finding.source.as_ref(),
            finding.mirror.as_ref(),
        ];
        for s in strings.into_iter().flatten() {
            assert!(s.len() <= MAX_STRING_BYTES, "{} bytes", s.len());
        }
        assert!(finding.object.name.ends_with(TRUNCATION_MARKER));
    }
    let report = mirror_report(Mode::Enforce, &findings, NOW, None);
    assert!(json_len(&report) < 64 * 1024, "{}", json_len(&report));
}

/// Issue 44: a Pod's image holding terminal codes, a line break and bidirectional or tag
/// characters (from a namespace in audit or off, where admission let it in) reaches the report
/// escaped, never raw, in every mode.
#[test]
fn outside_text_reaches_the_report_escaped() {
    let hostile = "registry.example/app:1.0\x1b[2J\nforged\u{202e}txt\u{e0041}\u{3164}";
    let workload = crate::watch::testing::deployment("shop", "web");
    let images = vec![seen(
        "p",
        &workload,
        crate::watch::testing::container(hostile),
        ImageState::Unpinned { current: None },
    )];
    for mode in [Mode::Enforce, Mode::Audit, Mode::Off] {
        let report = namespace_report("shop", mode, &classified(&images), NOW, None);
        let value = serde_json::to_value(&report).expect("serialises");
        let mut all = Vec::new();
        strings(&value, &mut all);
        let shown = all.join(" ");
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() || crate::text::hides_text(c)),
            "{mode:?}: {shown:?}"
        );
        assert!(
            shown.contains(r"\u{1b}[2J\nforged\u{202e}txt\u{e0041}\u{3164}"),
            "{mode:?}: {shown}"
        );
    }
}
