//! The chart's matchCondition for pin.pinhook.dev and validate.pinhook.dev
//! (`charts/pinhook/cel/call-unless-pinned-pod.cel`, rendered on Kubernetes 1.28+), evaluated
//! with a CEL interpreter, and every Pod it lets the apiserver skip sent to pinhook itself,
//! which must allow it unchanged at `/mutate` and `/validate`, with no warning: the condition
//! skips only what pinhook would pass untouched, so the apiserver's skip can never let in what
//! pinhook refuses (an invalid reference, a tag, an image in any Pod field). Checked on every
//! captured AdmissionReview the tests use, on Pods built around them, and on 20,000 random
//! references against pinhook's own reference grammar.

use serde_json::{json, Value};

use crate::common::pinhook::{captured_reviews, review_fixture, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{pod_review, seeded, warnings, BASIC_POD};
use pinhook::reference::Reference;

const CONDITION: &str = include_str!("../../../charts/pinhook/cel/call-unless-pinned-pod.cel");

/// Whether the apiserver calls pinhook for `review` (the condition holds); panics when the
/// expression errs, which the apiserver would answer with the webhook's failurePolicy.
fn calls_pinhook(program: &cel::Program, review: &Value) -> bool {
    let mut context = cel::Context::default();
    let request = &review["request"];
    context
        .add_variable("request", cel::to_value(request).expect("request as CEL"))
        .expect("request");
    context
        .add_variable(
            "object",
            cel::to_value(&request["object"]).expect("object as CEL"),
        )
        .expect("object");
    match program.execute(&context) {
        Ok(cel::Value::Bool(calls)) => calls,
        other => panic!("the condition must be a bool without error, got {other:?} for {review}"),
    }
}

fn program() -> cel::Program {
    cel::Program::compile(CONDITION.trim()).expect("the chart's condition compiles")
}

/// The condition must say whether to call, for every image: a skip only for one pinhook
/// parses as a reference with a digest.
fn skipped_is_pinned(image: &str) {
    let parsed = Reference::parse(image);
    assert!(
        matches!(&parsed, Ok(r) if r.digest().is_some()),
        "the condition skips {image:?}, which pinhook reads as {parsed:?}"
    );
}

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn pod_with(program: &cel::Program, registry: &TestRegistry, image: &str) -> (Value, bool) {
    let review = pod_review(registry, image);
    let calls = calls_pinhook(program, &review);
    (review, calls)
}

/// pinhook allows `review` as it is: no patch, no warning, at /mutate and /validate.
async fn passed_unchanged(pinhook: &TestPinhook, review: &Value) {
    for (endpoint, answer) in [
        ("/mutate", pinhook.mutate(review).await),
        ("/validate", pinhook.validate(review).await),
    ] {
        let response = &answer["response"];
        assert_eq!(
            response["allowed"],
            json!(true),
            "{endpoint} must allow what the condition skips: {answer}"
        );
        assert!(
            response["patch"].is_null(),
            "{endpoint} must not patch what the condition skips: {answer}"
        );
        assert!(
            warnings(&answer).is_empty(),
            "{endpoint} must not warn of what the condition skips: {answer}"
        );
    }
}

#[tokio::test]
async fn the_condition_skips_only_pods_pinhook_passes_unchanged() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let program = program();
    let host = registry.host();
    let skipped = [
        format!("{host}/team/app:1.0@sha256:{HEX}"),
        format!("{host}/team/app@sha256:{HEX}"),
        format!("nginx@sha256:{HEX}"),
        format!("library/nginx:1.25@sha256:{HEX}"),
        format!("docker.io/library/nginx@sha256:{HEX}"),
        format!("localhost:5000/a/b@sha256:{HEX}"),
        format!("a.b-c.example:443/x__y/z--w.v:T_1.2-3@sha256:{HEX}"),
    ];
    let called = [
        "nginx".to_string(),
        "nginx:1.25".to_string(),
        format!("{host}/team/app:1.0"),
        format!("NGINX@sha256:{HEX}"),
        format!("Registry.Example/app@sha256:{HEX}"),
        "nginx@sha256:0123".to_string(),
        format!("nginx@sha256:{}", HEX.to_uppercase()),
        format!("nginx@sha512:{HEX}{HEX}"),
        format!("nginx:@sha256:{HEX}"),
        format!("a/../b@sha256:{HEX}"),
        format!(" nginx@sha256:{HEX}"),
        format!("nginx@sha256:{HEX}\n"),
        format!("{}@sha256:{HEX}", "a".repeat(200)),
        format!("_a@sha256:{HEX}"),
        format!("a-@sha256:{HEX}"),
        format!("[::1]:5000/a@sha256:{HEX}"),
        format!("nginx:{}@sha256:{HEX}", "t".repeat(129)),
        String::new(),
    ];
    for image in &skipped {
        let (review, calls) = pod_with(&program, &registry, image);
        assert!(!calls, "a Pod of {image:?} alone should not need pinhook");
        skipped_is_pinned(image);
        passed_unchanged(&pinhook, &review).await;
    }
    for image in &called {
        let (_, calls) = pod_with(&program, &registry, image);
        assert!(calls, "a Pod of {image:?} must be sent to pinhook");
    }

    // Every Pod field that holds an image counts: one unpinned image anywhere sends it.
    let pinned = format!("{host}/team/app:1.0@sha256:{HEX}");
    let tagged = format!("{host}/team/app:1.0");
    let mut all_pinned = pod_review(&registry, &pinned);
    let spec = &mut all_pinned["request"]["object"]["spec"];
    spec["initContainers"] = json!([{"name": "init", "image": pinned}]);
    spec["ephemeralContainers"] = json!([{"name": "debug", "image": pinned}]);
    spec["volumes"] = json!([
        {"name": "data", "emptyDir": {}},
        {"name": "tools", "image": {"reference": pinned, "pullPolicy": "IfNotPresent"}}
    ]);
    assert!(!calls_pinhook(&program, &all_pinned));
    passed_unchanged(&pinhook, &all_pinned).await;
    for (field, value) in [
        ("/initContainers/0/image", json!(tagged)),
        ("/ephemeralContainers/0/image", json!(tagged)),
        ("/volumes/1/image/reference", json!(tagged)),
        ("/volumes/1/image", json!({"pullPolicy": "Always"})),
        ("/containers/0/image", Value::Null),
    ] {
        let mut review = all_pinned.clone();
        let spec = &mut review["request"]["object"]["spec"];
        match value {
            Value::Null => {
                spec["containers"][0]
                    .as_object_mut()
                    .expect("a container")
                    .remove("image");
            }
            value => *spec.pointer_mut(field).expect("the field exists") = value,
        }
        assert!(
            calls_pinhook(&program, &review),
            "{field} unpinned must send the Pod to pinhook"
        );
    }
    // No spec, no containers, another kind, another group's Pod: sent.
    let mut no_spec = all_pinned.clone();
    no_spec["request"]["object"]
        .as_object_mut()
        .expect("an object")
        .remove("spec");
    assert!(calls_pinhook(&program, &no_spec));
    let mut custom = all_pinned.clone();
    custom["request"]["kind"]["group"] = json!("example.com");
    assert!(calls_pinhook(&program, &custom));
    let mut deployment = review_fixture("v1.26/deployment-create-mutate.json", &registry);
    deployment["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!(pinned);
    assert!(calls_pinhook(&program, &deployment));
    drop(review_fixture(BASIC_POD, &registry));
}

/// Every captured AdmissionReview the tests use: the condition evaluates without error, and
/// each one it skips pinhook passes unchanged.
#[tokio::test]
async fn every_captured_review_is_judged_without_error_and_skipped_ones_pass() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let pinhook = TestPinhook::start(&registry).await;
    let program = program();
    let (mut judged, mut skipped) = (0, 0);
    for fixture in captured_reviews() {
        let review = review_fixture(&fixture, &registry);
        judged += 1;
        if !calls_pinhook(&program, &review) {
            skipped += 1;
            passed_unchanged(&pinhook, &review).await;
        }
    }
    assert!(judged > 80, "{judged} captured reviews judged");
    assert!(
        skipped >= 2,
        "the pinned Pod captures are skipped ({skipped})"
    );
}

/// 20,000 random references (an alphabet that makes near misses likely): each one the
/// condition would skip, pinhook parses as a reference with a digest.
#[test]
fn every_reference_the_condition_skips_pinhook_reads_as_pinned() {
    let program = program();
    const ALPHABET: &[u8] = b"aZ0-._:/@-_.a0b1";
    let mut next = seeded(0x9e37_79b9_7f4a_7c15);
    let mut skipped = 0;
    for _ in 0..20_000 {
        let len = 1 + next(24);
        let name: String = (0..len)
            .map(|_| ALPHABET[next(ALPHABET.len())] as char)
            .collect();
        let image = match next(3) {
            0 => format!("{name}@sha256:{HEX}"),
            1 => format!("{name}:{}@sha256:{HEX}", &name[..len.min(5)]),
            _ => format!("{name}{}", &HEX[..next(64)]),
        };
        let review = json!({
            "request": {"kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "object": {"spec": {"containers": [{"name": "c", "image": image}]}}}
        });
        if !calls_pinhook(&program, &review) {
            skipped += 1;
            skipped_is_pinned(&image);
        }
    }
    assert!(
        skipped > 100,
        "the corpus reaches skipped references ({skipped})"
    );
}
