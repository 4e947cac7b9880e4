//! Tags resolved at a `registries.resolveThrough` mirror: the origin on the outcome, the audit
//! warning, and a disagreement with the source refused whatever `onResolutionFailure` says.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::policy::Policy;
use crate::registry::testing::digest;
use crate::registry::{Fingerprint, Origin, ResolutionSource, SourceCheck};

const IMAGE: &str = "registry.example/team/app:1.0";

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "app", "image": IMAGE}]}})
}

fn plan(policy: &str, mode: Mode, answer: fn() -> Result<Resolution, RegistryError>) -> Plan {
    let policy = match Policy::parse(policy) {
        Ok(policy) => policy,
        Err(e) => panic!("test policy: {e}"),
    };
    let pod = pod();
    let object = Object {
        group: "",
        kind: "Pod",
        subresource: "",
        namespace: "shop",
        object: &pod,
        old_object: None,
        user: "",
    };
    let triaged = match mutation(&policy, object).triage(mode) {
        Ok(triaged) => triaged,
        Err(e) => panic!("triage: {e}"),
    };
    let resolutions: Resolutions = triaged
        .wanted()
        .iter()
        .map(|r| (r.tag_reference(), answer()))
        .collect();
    triaged.finish(&resolutions, Vec::new())
}

fn at_mirror(check: SourceCheck) -> Result<Resolution, RegistryError> {
    Ok(Resolution {
        digest: digest('a'),
        credential: Fingerprint::anonymous(),
        source: ResolutionSource::Registry,
        moved_from: None,
        age: Duration::ZERO,
        origin: Some(Origin {
            mirror: "mirror.example/team".to_string(),
            source_check: check,
        }),
        verified: None,
    })
}

fn disagreement() -> Result<Resolution, RegistryError> {
    Err(RegistryError::MirrorDisagrees {
        image: IMAGE.to_string(),
        mirror: "mirror.example/team".to_string(),
        mirror_digest: digest('a').to_string(),
        source_digest: digest('f').to_string(),
    })
}

#[test]
fn a_pin_through_a_mirror_keeps_the_source_name_and_records_the_origin() {
    let plan = plan("", Mode::Enforce, || at_mirror(SourceCheck::Agreed));
    let outcome = &plan.outcomes[0];
    assert_eq!(outcome.action, Action::Pinned);
    assert_eq!(outcome.result, format!("{IMAGE}@{}", digest('a')));
    assert_eq!(
        outcome.origin.as_ref().map(|o| o.mirror.as_str()),
        Some("mirror.example/team")
    );
    // Enforce says it in the audit annotations, not in a warning to every `kubectl apply`.
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
}

#[test]
fn audit_warns_where_the_digest_it_would_pin_came_from() {
    let plan = plan("", Mode::Audit, || at_mirror(SourceCheck::Unanswered));
    assert_eq!(
        plan.warnings,
        [format!(
            "pinhook audit: {IMAGE} resolved at mirror mirror.example/team (source unanswered)"
        )]
    );
}

#[test]
fn a_disagreement_is_refused_even_when_failures_are_allowed() {
    for policy in ["", "onResolutionFailure: allow"] {
        let plan = plan(policy, Mode::Enforce, disagreement);
        let outcome = &plan.outcomes[0];
        assert_eq!(outcome.action, Action::Denied, "{policy}");
        assert_eq!(outcome.violation, Some(Reason::MirrorDisagrees));
        assert_eq!(
            outcome.origin.as_ref().map(|o| o.source_check),
            Some(SourceCheck::Disagreed)
        );
        let message = plan.denial_message().unwrap_or_default();
        assert!(
            message.contains(&digest('a').to_string())
                && message.contains(&digest('f').to_string()),
            "{message}"
        );
    }
}

#[test]
fn a_shared_disagreement_is_still_a_disagreement() {
    let shared = || disagreement().map_err(|e| RegistryError::Shared(std::sync::Arc::new(e)));
    let plan = plan("", Mode::Enforce, shared);
    assert_eq!(plan.outcomes[0].violation, Some(Reason::MirrorDisagrees));
}

#[test]
fn a_tag_mirror_denial_suggests_the_resolve_through_entry_that_replaces_it() {
    let policy = match Policy::parse("") {
        Ok(policy) => policy,
        Err(e) => panic!("test policy: {e}"),
    };
    let itms = json!({"apiVersion": "config.openshift.io/v1", "kind": "ImageTagMirrorSet",
        "metadata": {"name": "m"},
        "spec": {"imageTagMirrors": [{"source": "registry.example/team", "mirrors": ["mirror.example/team"]}]}});
    let object = Object {
        group: "config.openshift.io",
        kind: "ImageTagMirrorSet",
        subresource: "",
        namespace: "",
        object: &itms,
        old_object: None,
        user: "",
    };
    let plan = match validation(&policy, object).finish(Mode::Enforce, Vec::new()) {
        Ok(plan) => plan,
        Err(e) => panic!("validation: {e}"),
    };
    let message = plan.denial_message().unwrap_or_default();
    assert!(
        message.ends_with(
            "; instead: registries.resolveThrough: [{source: registry.example/team, mirrors: \
             [{location: mirror.example/team}]}] with a digest-only mirror on the nodes"
        ),
        "{message}"
    );
}
