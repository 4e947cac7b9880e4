//! The decision core without a registry, a clock or a socket: every mode × resolve × target ×
//! kind × form × exemption × failure action × reference form × registry answer, each checked
//! against a small oracle written from the policy's documentation (not from the code), plus
//! spelled-out cases for what the product does not cover (mirrors, host rules, updates).

use std::time::Duration;

use rstest::rstest;
use serde_json::{json, Value};

use super::*;
use crate::policy::{
    Exempt, FailureAction, FormSetting, MirrorPolicy, PinTarget, Policy, Registries,
};
use crate::registry::Fingerprint;
use crate::registry::ResolutionSource;

const REPOSITORY: &str = "registry.example/team/app";
const TAG: &str = "registry.example/team/app:1.0";
const NAMESPACE: &str = "shop";

const TARGETS: [PinTarget; 2] = [PinTarget::Workloads, PinTarget::Pods];
const KINDS: [Kind; 2] = [Kind::Pod, Kind::Deployment];
const FORMS: [FormSetting; 2] = [FormSetting::TagAndDigest, FormSetting::Digest];
const EXEMPTIONS: [Exemption; 3] = [Exemption::None, Exemption::Image, Exemption::Namespace];
const INPUTS: [Input; 3] = [Input::Tag, Input::TagAndDigest, Input::Digest];
const ANSWERS: [Answer; 5] = [
    Answer::Found,
    Answer::Stale,
    Answer::Moved,
    Answer::NotFound,
    Answer::Unavailable,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    Deployment,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exemption {
    None,
    Image,
    Namespace,
}

/// How the object's image is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// `registry.example/team/app:1.0`
    Tag,
    /// `registry.example/team/app:1.0@sha256:ddd…`
    TagAndDigest,
    /// `registry.example/team/app@sha256:ddd…`
    Digest,
}

/// What the registry says about `app:1.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `sha256:ddd…`, fresh.
    Found,
    /// `sha256:ddd…` from the cache, 30 s old, because the registry is down.
    Stale,
    /// `sha256:eee…`; the tag pointed at `sha256:ddd…` before.
    Moved,
    NotFound,
    Unavailable,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    mode: Mode,
    resolve: ResolveMode,
    failure: FailureAction,
    target: PinTarget,
    kind: Kind,
    form: FormSetting,
    exemption: Exemption,
    input: Input,
    answer: Answer,
}

/// One site's outcome, every field a test compares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Site {
    pointer: String,
    action: Action,
    result: String,
    reason: Option<String>,
    violation: Option<Reason>,
    digest: Option<String>,
    source: Option<ResolutionSource>,
}

/// A whole plan, every field a test compares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Summary {
    mode: Mode,
    pod_bearing: bool,
    sites: Vec<Site>,
    findings: Vec<(Action, Reason, String)>,
    warnings: Vec<String>,
}

fn hex(c: char) -> String {
    c.to_string().repeat(64)
}

fn digest(c: char) -> Digest {
    format!("sha256:{}", hex(c))
        .parse()
        .expect("a valid digest")
}

fn image(input: Input) -> String {
    match input {
        Input::Tag => TAG.to_string(),
        Input::TagAndDigest => format!("{TAG}@sha256:{}", hex('d')),
        Input::Digest => format!("{REPOSITORY}@sha256:{}", hex('d')),
    }
}

fn policy_of(case: &Case) -> CompiledPolicy {
    let exempt = match case.exemption {
        Exemption::None => Exempt::default(),
        Exemption::Image => Exempt {
            images: vec![format!("{REPOSITORY}*")],
            namespaces: Vec::new(),
        },
        Exemption::Namespace => Exempt {
            images: Vec::new(),
            namespaces: vec!["sh*".to_string()],
        },
    };
    Policy {
        // The policy's own mode is the I/O half's fallback; the core is handed the mode.
        mode: Mode::Enforce,
        resolve: case.resolve,
        target: case.target,
        form: case.form,
        on_resolution_failure: case.failure,
        exempt,
        ..Policy::default()
    }
    .compile()
    .expect("a valid policy")
}

fn containers(images: &[&str]) -> Value {
    let list: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    Value::Array(list)
}

fn pod(images: &[&str]) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": containers(images)}})
}

fn deployment(images: &[&str]) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
           "spec": {"template": {"spec": {"containers": containers(images)}}}})
}

fn object<'a>(kind: Kind, value: &'a Value, old: Option<&'a Value>) -> Object<'a> {
    let (group, kind) = match kind {
        Kind::Pod => ("", "Pod"),
        Kind::Deployment => ("apps", "Deployment"),
    };
    Object {
        group,
        kind,
        subresource: "",
        namespace: NAMESPACE,
        object: value,
        old_object: old,
        user: "",
    }
}

fn pointer(kind: Kind) -> &'static str {
    match kind {
        Kind::Pod => "/spec/containers/0/image",
        Kind::Deployment => "/spec/template/spec/containers/0/image",
    }
}

fn resolution(answer: Answer) -> Result<Resolution, RegistryError> {
    let found = |c: char, source, moved_from, age| {
        Ok(Resolution {
            digest: digest(c),
            credential: Fingerprint::anonymous(),
            source,
            moved_from,
            age,
            origin: None,
            verified: None,
        })
    };
    match answer {
        Answer::Found => found('d', ResolutionSource::Registry, None, Duration::ZERO),
        Answer::Stale => found('d', ResolutionSource::Stale, None, Duration::from_secs(30)),
        Answer::Moved => found(
            'e',
            ResolutionSource::Registry,
            Some(digest('d')),
            Duration::ZERO,
        ),
        Answer::NotFound => Err(RegistryError::NotFound {
            repository: REPOSITORY.to_string(),
            tag: "1.0".to_string(),
        }),
        Answer::Unavailable => Err(RegistryError::Timeout {
            registry: "registry.example".to_string(),
            timeout: Duration::from_secs(2),
        }),
    }
}

/// What the I/O half would hand back: `answer` for every wanted tag.
fn answers(wanted: &[&Reference], answer: Answer) -> Resolutions {
    wanted
        .iter()
        .map(|r| (r.tag_reference(), resolution(answer)))
        .collect()
}

fn summary(plan: &Plan) -> Summary {
    Summary {
        mode: plan.mode,
        pod_bearing: plan.pod_bearing,
        sites: plan
            .outcomes
            .iter()
            .map(|o| Site {
                pointer: o.site.pointer.clone(),
                action: o.action,
                result: o.result.clone(),
                reason: o.reason.clone(),
                violation: o.violation,
                digest: o.digest.as_ref().map(ToString::to_string),
                source: o.source,
            })
            .collect(),
        findings: plan
            .findings
            .iter()
            .map(|f| (f.action, f.reason, f.message.clone()))
            .collect(),
        warnings: plan.warnings.clone(),
    }
}

/// Runs `/mutate`'s core as the I/O half does: triage, resolve what is wanted, finish.
fn mutate(
    policy: &CompiledPolicy,
    mode: Mode,
    object: Object<'_>,
    answer: Answer,
) -> (Vec<String>, Plan) {
    let triaged = mutation(policy, object)
        .triage(mode)
        .expect("the object is readable");
    let wanted = triaged.wanted();
    let tags = wanted.iter().map(|r| r.tag_reference()).collect();
    let resolutions = answers(&wanted, answer);
    (tags, triaged.finish(&resolutions, Vec::new()))
}

// === the oracle ===

/// A plan that looked at no image.
fn nothing(mode: Mode) -> Summary {
    Summary {
        mode,
        pod_bearing: false,
        sites: Vec::new(),
        findings: Vec::new(),
        warnings: Vec::new(),
    }
}

fn judged(case: &Case, site: Site, warnings: Vec<String>) -> Summary {
    Summary {
        mode: case.mode,
        pod_bearing: true,
        sites: vec![site],
        findings: Vec::new(),
        warnings,
    }
}

fn site(case: &Case, action: Action, reason: &str, violation: Option<Reason>) -> Site {
    Site {
        pointer: pointer(case.kind).to_string(),
        action,
        result: image(case.input),
        reason: Some(reason.to_string()),
        violation,
        digest: None,
        source: None,
    }
}

/// A policy failure: denied in enforce, admitted and reported in audit.
fn breaks(case: &Case, reason: &str, violation: Reason) -> Site {
    let action = match case.mode {
        Mode::Audit => Action::Violation,
        _ => Action::Denied,
    };
    site(case, action, reason, Some(violation))
}

/// A failed resolution: `onResolutionFailure` decides, and audit never denies.
fn resolution_failed(case: &Case, reason: &str) -> Site {
    let action = match (case.failure, case.mode) {
        (FailureAction::Allow, _) | (_, Mode::Audit) => Action::Violation,
        (FailureAction::Deny, _) => Action::Denied,
    };
    site(case, action, reason, Some(Reason::ResolutionFailed))
}

fn failure_text(answer: Answer) -> Option<&'static str> {
    match answer {
        Answer::NotFound => Some("tag 1.0 not found in registry.example/team/app"),
        Answer::Unavailable => Some("registry registry.example did not answer within 2s"),
        _ => None,
    }
}

/// The digest the registry names, when it names one.
fn answered(answer: Answer) -> Option<char> {
    match answer {
        Answer::Found | Answer::Stale => Some('d'),
        Answer::Moved => Some('e'),
        Answer::NotFound | Answer::Unavailable => None,
    }
}

fn answer_warnings(answer: Answer) -> Vec<String> {
    match answer {
        Answer::Stale => vec![format!(
            "pinhook: registry unavailable; {TAG} pinned to digest cached 30s ago"
        )],
        Answer::Moved => vec![format!(
            "pinhook: tag {TAG} moved from sha256:dddddddddddd to sha256:eeeeeeeeeeee"
        )],
        _ => Vec::new(),
    }
}

/// What `/mutate` must do, from the documented rules; `bool`: whether the registry is asked.
fn expected_mutation(case: &Case) -> (bool, Summary) {
    if case.exemption == Exemption::Namespace {
        // No mode was read: the plan carries the default one.
        return (false, nothing(Mode::Enforce));
    }
    let template_under_pods = case.target == PinTarget::Pods && case.kind == Kind::Deployment;
    if case.mode == Mode::Off || template_under_pods || case.resolve == ResolveMode::Never {
        return (false, nothing(case.mode));
    }
    if case.exemption == Exemption::Image {
        let exempt = site(case, Action::Exempt, "exempt by policy", None);
        return (false, judged(case, exempt, Vec::new()));
    }
    let verifies = case.input == Input::TagAndDigest && case.resolve == ResolveMode::Always;
    if case.input != Input::Tag && !verifies {
        let kept = site(case, Action::Unchanged, "already pinned to a digest", None);
        return (false, judged(case, kept, Vec::new()));
    }
    let warnings = answer_warnings(case.answer);
    let outcome = match (failure_text(case.answer), answered(case.answer)) {
        (Some(text), _) => resolution_failed(case, text),
        (None, Some('d')) if verifies => site(
            case,
            Action::Unchanged,
            "already pinned; the tag still points at this digest",
            None,
        ),
        (None, Some(moved)) if verifies => breaks(
            case,
            &format!(
                "tag 1.0 now points at sha256:{}, the reference pins sha256:{}",
                hex(moved),
                hex('d')
            ),
            Reason::TagMoved,
        ),
        (None, Some(c)) => pinned(case, c),
        (None, None) => unreachable!("every answer is a digest or a failure"),
    };
    (true, judged(case, outcome, warnings))
}

/// A tag the registry resolved to `sha256:<c…>`: pinned in enforce, only reported in audit.
fn pinned(case: &Case, c: char) -> Site {
    let written = match case.form {
        FormSetting::TagAndDigest => format!("{TAG}@sha256:{}", hex(c)),
        FormSetting::Digest => format!("{REPOSITORY}@sha256:{}", hex(c)),
    };
    let source = match case.answer {
        Answer::Stale => ResolutionSource::Stale,
        _ => ResolutionSource::Registry,
    };
    let (action, result, reason) = match case.mode {
        Mode::Audit => (
            Action::Unchanged,
            TAG.to_string(),
            Some(format!("audit mode: would pin to sha256:{}", &hex(c)[..12])),
        ),
        _ => (Action::Pinned, written, None),
    };
    Site {
        pointer: pointer(case.kind).to_string(),
        action,
        result,
        reason,
        violation: None,
        digest: Some(format!("sha256:{}", hex(c))),
        source: Some(source),
    }
}

/// What `/validate` must do (it never asks a registry).
fn expected_validation(case: &Case) -> Summary {
    if case.exemption == Exemption::Namespace {
        return nothing(Mode::Enforce);
    }
    let template_under_pods = case.target == PinTarget::Pods && case.kind == Kind::Deployment;
    if case.mode == Mode::Off || template_under_pods {
        return nothing(case.mode);
    }
    let outcome = if case.exemption == Exemption::Image {
        site(case, Action::Exempt, "exempt by policy", None)
    } else if case.input != Input::Tag {
        site(case, Action::Unchanged, "already pinned to a digest", None)
    } else if case.mode == Mode::Audit && case.resolve != ResolveMode::Never {
        // `/mutate` already reported the tag in audit mode.
        site(case, Action::Unchanged, "not pinned (audit mode)", None)
    } else {
        let action = match (case.failure, case.mode) {
            (FailureAction::Allow, _) | (_, Mode::Audit) => Action::Violation,
            (FailureAction::Deny, _) => Action::Denied,
        };
        site(
            case,
            action,
            "not pinned to a digest",
            Some(Reason::Unpinned),
        )
    };
    judged(case, outcome, Vec::new())
}

/// Every target × kind × form × exemption × input × answer under one mode, resolve and failure
/// action.
fn product(mode: Mode, resolve: ResolveMode, failure: FailureAction) -> Vec<Case> {
    let mut cases = Vec::new();
    for target in TARGETS {
        for kind in KINDS {
            for form in FORMS {
                for exemption in EXEMPTIONS {
                    for input in INPUTS {
                        for answer in ANSWERS {
                            cases.push(Case {
                                mode,
                                resolve,
                                failure,
                                target,
                                kind,
                                form,
                                exemption,
                                input,
                                answer,
                            });
                        }
                    }
                }
            }
        }
    }
    cases
}

fn document(case: &Case) -> Value {
    let image = image(case.input);
    match case.kind {
        Kind::Pod => pod(&[&image]),
        Kind::Deployment => deployment(&[&image]),
    }
}

// === the product ===

/// Fails naming every case on which `judge` (which describes a disagreement) has something
/// to say.
fn all_agree(cases: &[Case], judge: impl Fn(&Case) -> Option<String>) {
    let wrong: Vec<String> = cases.iter().filter_map(judge).collect();
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

#[rstest]
fn mutation_matches_the_oracle(
    #[values(Mode::Enforce, Mode::Audit, Mode::Off)] mode: Mode,
    #[values(ResolveMode::IfNotPresent, ResolveMode::Always, ResolveMode::Never)]
    resolve: ResolveMode,
    #[values(FailureAction::Deny, FailureAction::Allow)] failure: FailureAction,
) {
    let cases = product(mode, resolve, failure);
    assert_eq!(cases.len(), 360);
    all_agree(&cases, |case| {
        let policy = policy_of(case);
        let value = document(case);
        let view = object(case.kind, &value, None);
        let reads_mode = mutation(&policy, view).reads_mode();
        let (tags, plan) = mutate(&policy, case.mode, view, case.answer);
        let (asks, expected) = expected_mutation(case);
        let expected_tags: Vec<String> = match asks {
            true => vec![TAG.to_string()],
            false => Vec::new(),
        };
        let got = summary(&plan);
        let agrees = tags == expected_tags
            && got == expected
            && reads_mode == (case.exemption != Exemption::Namespace);
        (!agrees).then(|| {
            format!(
                "{case:?}\n  reads mode {reads_mode}, wanted {tags:?}, expected {expected_tags:?}\n  got      {got:?}\n  expected {expected:?}"
            )
        })
    });
}

#[rstest]
fn validation_matches_the_oracle(
    #[values(Mode::Enforce, Mode::Audit, Mode::Off)] mode: Mode,
    #[values(ResolveMode::IfNotPresent, ResolveMode::Always, ResolveMode::Never)]
    resolve: ResolveMode,
    #[values(FailureAction::Deny, FailureAction::Allow)] failure: FailureAction,
) {
    let cases: Vec<Case> = product(mode, resolve, failure)
        .into_iter()
        // Validation never asks the registry: the answer does not vary it.
        .filter(|c| c.answer == Answer::Found)
        .collect();
    assert_eq!(cases.len(), 72);
    all_agree(&cases, |case| {
        let policy = policy_of(case);
        let value = document(case);
        let check = validation(&policy, object(case.kind, &value, None));
        let reads_mode = check.reads_mode();
        let plan = check
            .finish(case.mode, Vec::new())
            .expect("the object is readable");
        let (got, expected) = (summary(&plan), expected_validation(case));
        let agrees = got == expected && reads_mode == (case.exemption != Exemption::Namespace);
        (!agrees).then(|| {
            format!(
                "{case:?}\n  reads mode {reads_mode}\n  got      {got:?}\n  expected {expected:?}"
            )
        })
    });
}

// === spelled-out cases ===

fn plain_policy(resolve: ResolveMode) -> CompiledPolicy {
    Policy {
        resolve,
        ..Policy::default()
    }
    .compile()
    .expect("a valid policy")
}

#[rstest]
#[case::enforce(Mode::Enforce, Some(Action::Denied))]
#[case::audit(Mode::Audit, Some(Action::Violation))]
#[case::off(Mode::Off, None)]
fn an_invalid_reference_is_refused_without_the_registry(
    #[case] mode: Mode,
    #[case] action: Option<Action>,
) {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let value = pod(&["registry.example/Team/App:1.0"]);
    let (tags, plan) = mutate(
        &policy,
        mode,
        object(Kind::Pod, &value, None),
        Answer::Found,
    );
    assert!(tags.is_empty());
    let got: Vec<(Action, Option<Reason>, Option<String>)> = plan
        .outcomes
        .iter()
        .map(|o| (o.action, o.violation, o.reason.clone()))
        .collect();
    let expected: Vec<(Action, Option<Reason>, Option<String>)> = action
        .map(|action| {
            (
                action,
                Some(Reason::InvalidReference),
                Some(
                    "invalid image reference: repository name must be lowercase: \"Team/App\""
                        .to_string(),
                ),
            )
        })
        .into_iter()
        .collect();
    assert_eq!(got, expected);
}

#[rstest]
#[case::mutate_enforce(
    Mode::Enforce,
    false,
    Action::Denied,
    "registry registry.example is on the policy's deny list"
)]
#[case::mutate_audit(
    Mode::Audit,
    false,
    Action::Violation,
    "registry registry.example is on the policy's deny list"
)]
#[case::validate_enforce(
    Mode::Enforce,
    true,
    Action::Denied,
    "registry registry.example is on the policy's deny list"
)]
#[case::validate_audit(Mode::Audit, true, Action::Unchanged, "not pinned (audit mode)")]
fn a_denied_registry_is_never_asked(
    #[case] mode: Mode,
    #[case] validate: bool,
    #[case] action: Action,
    #[case] reason: &str,
) {
    let policy = Policy {
        registries: Registries {
            deny: vec!["registry.example".to_string()],
            ..Registries::default()
        },
        ..Policy::default()
    }
    .compile()
    .expect("a valid policy");
    let value = pod(&[TAG]);
    let view = object(Kind::Pod, &value, None);
    let plan = match validate {
        true => validation(&policy, view)
            .finish(mode, Vec::new())
            .expect("readable"),
        false => {
            let (tags, plan) = mutate(&policy, mode, view, Answer::Found);
            assert!(tags.is_empty(), "{tags:?}");
            plan
        }
    };
    let outcome = &plan.outcomes[0];
    assert_eq!(
        (outcome.action, outcome.reason.as_deref()),
        (action, Some(reason))
    );
    let expected_violation = (action != Action::Unchanged).then_some(Reason::RegistryDenied);
    assert_eq!(outcome.violation, expected_violation);
}

#[test]
fn an_update_judges_only_the_images_it_changes() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let old = pod(&[TAG, "registry.example/team/db:1.0"]);
    let new = pod(&[TAG, "registry.example/team/db:2.0"]);
    let (tags, plan) = mutate(
        &policy,
        Mode::Enforce,
        object(Kind::Pod, &new, Some(&old)),
        Answer::Found,
    );
    assert_eq!(tags, ["registry.example/team/db:2.0"]);
    let got: Vec<(Action, String)> = plan
        .outcomes
        .iter()
        .map(|o| (o.action, o.result.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (Action::Unchanged, TAG.to_string()),
            (
                Action::Pinned,
                format!("registry.example/team/db:2.0@sha256:{}", hex('d'))
            ),
        ]
    );
    assert_eq!(
        plan.outcomes[0].reason.as_deref(),
        Some("not changed by this update")
    );
}

#[test]
fn each_distinct_tag_is_wanted_once_in_site_order() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let value = pod(&[
        "registry.example/team/b:1",
        TAG,
        "registry.example/team/b:1",
        "registry.example/team/b:2",
    ]);
    let (tags, plan) = mutate(
        &policy,
        Mode::Enforce,
        object(Kind::Pod, &value, None),
        Answer::Found,
    );
    assert_eq!(
        tags,
        [
            "registry.example/team/b:1",
            TAG,
            "registry.example/team/b:2"
        ]
    );
    assert!(plan.outcomes.iter().all(|o| o.action == Action::Pinned));
    let patch = plan.patch().expect("a patch");
    assert_eq!(patch.0.len(), 4);
}

#[test]
fn a_missing_answer_is_a_failed_resolution() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let value = pod(&[TAG]);
    let triaged = mutation(&policy, object(Kind::Pod, &value, None))
        .triage(Mode::Enforce)
        .expect("readable");
    let plan = triaged.finish(&Resolutions::new(), vec!["from the label".to_string()]);
    let outcome = &plan.outcomes[0];
    assert_eq!(outcome.action, Action::Denied);
    assert_eq!(outcome.violation, Some(Reason::ResolutionFailed));
    assert_eq!(outcome.reason.as_deref(), Some("resolution did not run"));
    assert_eq!(plan.warnings, ["from the label"]);
    assert_eq!(
        plan.denial_message().as_deref(),
        Some(
            "container \"c0\" (/spec/containers/0/image) image \"registry.example/team/app:1.0\": resolution did not run"
        )
    );
}

#[test]
fn warnings_gathered_before_are_kept_when_nothing_is_judged() {
    let policy = plain_policy(ResolveMode::Never);
    let value = pod(&[TAG]);
    let plan = mutation(&policy, object(Kind::Pod, &value, None))
        .triage(Mode::Audit)
        .expect("readable")
        .finish(&Resolutions::new(), vec!["label unreadable".to_string()]);
    assert_eq!(
        summary(&plan),
        Summary {
            warnings: vec!["label unreadable".to_string()],
            ..nothing(Mode::Audit)
        }
    );
}

#[test]
fn a_kind_without_pods_is_not_pod_bearing() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let value = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}});
    let view = Object {
        kind: "Service",
        ..object(Kind::Pod, &value, None)
    };
    let (tags, plan) = mutate(&policy, Mode::Enforce, view, Answer::Found);
    assert!(tags.is_empty());
    assert_eq!(summary(&plan), nothing(Mode::Enforce));
    let checked = validation(&policy, view)
        .finish(Mode::Enforce, Vec::new())
        .expect("readable");
    assert_eq!(summary(&checked), nothing(Mode::Enforce));
}

#[test]
fn an_unreadable_object_is_an_error_not_a_denial() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let value = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "app"}});
    let view = object(Kind::Pod, &value, None);
    assert!(mutation(&policy, view).triage(Mode::Enforce).is_err());
    assert!(validation(&policy, view)
        .finish(Mode::Enforce, Vec::new())
        .is_err());
    // Unless the policy does not look at it.
    assert!(mutation(&policy, view).triage(Mode::Off).is_ok());
}

fn tag_mirror_set() -> Value {
    json!({"apiVersion": "config.openshift.io/v1", "kind": "ImageTagMirrorSet",
           "metadata": {"name": "tags"},
           "spec": {"imageTagMirrors": [{"source": "registry.example/team",
                                         "mirrors": ["mirror.example/team"]}]}})
}

#[rstest]
#[case::enforce(Mode::Enforce, Some(Action::Denied))]
#[case::audit(Mode::Audit, Some(Action::Violation))]
#[case::off(Mode::Off, None)]
fn mirror_configuration_is_judged_even_in_exempt_namespaces(
    #[case] mode: Mode,
    #[case] action: Option<Action>,
) {
    let policy = Policy {
        exempt: Exempt {
            images: Vec::new(),
            namespaces: vec![NAMESPACE.to_string()],
        },
        mirrors: MirrorPolicy::default(),
        ..Policy::default()
    }
    .compile()
    .expect("a valid policy");
    let value = tag_mirror_set();
    let view = Object {
        group: "config.openshift.io",
        kind: "ImageTagMirrorSet",
        ..object(Kind::Pod, &value, None)
    };
    let check = validation(&policy, view);
    assert!(check.reads_mode(), "the guard ignores namespace exemptions");
    let plan = check.finish(mode, Vec::new()).expect("readable");
    let findings: Vec<(Action, Reason)> =
        plan.findings.iter().map(|f| (f.action, f.reason)).collect();
    assert_eq!(
        findings,
        action
            .map(|a| (a, Reason::TagMirror))
            .into_iter()
            .collect::<Vec<_>>()
    );
    assert!(plan.outcomes.is_empty());
    assert_eq!(plan.mode, mode);
    if let Some(finding) = plan.findings.first() {
        assert!(
            finding
                .message
                .starts_with("ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] lets mirror.example/team serve tag pulls for registry.example/team"),
            "{}",
            finding.message
        );
    }
    // `/mutate` does not judge mirror objects (they bear no pods).
    let (tags, mutated) = mutate(&policy, mode, view, Answer::Found);
    assert!(tags.is_empty() && mutated.outcomes.is_empty() && mutated.findings.is_empty());
}

#[rstest]
#[case::pod("", "Pod", true)]
#[case::ephemeral_containers("", "EphemeralContainers", true)]
#[case::deployment("apps", "Deployment", false)]
#[case::pod_of_another_group("example.com", "Pod", false)]
fn what_counts_as_a_pod(#[case] group: &str, #[case] kind: &str, #[case] is_pod: bool) {
    let value = json!({});
    let view = Object {
        group,
        kind,
        ..object(Kind::Pod, &value, None)
    };
    assert_eq!(view.is_pod(), is_pod);
}

#[test]
fn short_digests_keep_twelve_hex_characters() {
    assert_eq!(short(&digest('a')), "sha256:aaaaaaaaaaaa");
}

#[test]
fn a_template_change_pins_every_image_of_the_template_and_validate_judges_only_changes() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let db = "registry.example/team/db:1.0";
    let old = deployment(&[TAG, db]);
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "FOO", "value": "bar"}]);
    let (tags, plan) = mutate(
        &policy,
        Mode::Enforce,
        object(Kind::Deployment, &new, Some(&old)),
        Answer::Found,
    );
    assert_eq!(tags, [TAG, db], "a rollout happens anyway: pin all of it");
    assert!(
        plan.outcomes.iter().all(|o| o.action == Action::Pinned),
        "{plan:?}"
    );

    // /validate still judges only what the update changed (nothing): an old unpinned template
    // whose mutation was skipped (`resolve: Never`) can still be edited.
    let checked = validation(
        &plain_policy(ResolveMode::Never),
        object(Kind::Deployment, &new, Some(&old)),
    )
    .finish(Mode::Enforce, Vec::new())
    .expect("readable");
    assert_eq!(checked.denials().count(), 0, "{checked:?}");

    // The same template with another replica count: nothing to pin.
    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = json!(9);
    let (tags, plan) = mutate(
        &policy,
        Mode::Enforce,
        object(Kind::Deployment, &scaled, Some(&old)),
        Answer::Found,
    );
    assert!(tags.is_empty(), "{tags:?}");
    assert!(plan.outcomes.iter().all(|o| o.action == Action::Unchanged));
}

#[rstest]
fn a_child_left_to_its_controller_is_neither_read_nor_judged(
    #[values(Mode::Enforce, Mode::Audit)] mode: Mode,
    #[values(ResolveMode::IfNotPresent, ResolveMode::Always, ResolveMode::Never)]
    resolve: ResolveMode,
) {
    let policy = plain_policy(resolve);
    let mut replicaset = deployment(&[TAG, "::not-a-reference"]);
    replicaset["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1", "controller": true
    }]);
    let view = Object {
        kind: "ReplicaSet",
        ..object(Kind::Deployment, &replicaset, None)
    };
    let check = mutation(&policy, view);
    assert!(!check.reads_mode());
    let (tags, plan) = mutate(&policy, mode, view, Answer::Found);
    assert!(tags.is_empty(), "no registry call: {tags:?}");
    assert!(
        plan.outcomes.is_empty() && plan.denial_message().is_none(),
        "{plan:?}"
    );
    let check = validation(&policy, view);
    assert!(!check.reads_mode());
    let checked = check.finish(mode, Vec::new()).expect("readable");
    assert!(
        checked.outcomes.is_empty() && checked.denial_message().is_none(),
        "{checked:?}"
    );

    // The same object without a controller is judged: the invalid reference is refused.
    replicaset["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    let view = Object {
        kind: "ReplicaSet",
        ..object(Kind::Deployment, &replicaset, None)
    };
    let checked = validation(&policy, view)
        .finish(Mode::Enforce, Vec::new())
        .expect("readable");
    assert!(checked.denial_message().is_some(), "{checked:?}");
}

#[rstest]
fn mirror_notes_are_warnings_in_every_mode_but_off(
    #[values(Mode::Enforce, Mode::Audit, Mode::Off)] mode: Mode,
) {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    // The second [[registry]] repeats the prefix: containers/image never reads it.
    let text = "[[registry]]\nlocation = \"registry.example\"\nmirror-by-digest-only = true\n\
                [[registry.mirror]]\nlocation = \"mirror.example\"\n\n\
                [[registry]]\nlocation = \"registry.example/\"\n";
    let value = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "registries", "namespace": NAMESPACE},
        "data": {"registries.conf": text}});
    let view = Object {
        kind: "ConfigMap",
        ..object(Kind::Pod, &value, None)
    };
    let plan = validation(&policy, view)
        .finish(mode, Vec::new())
        .expect("readable");
    assert!(plan.findings.is_empty(), "{plan:?}");
    let want: Vec<String> = match mode {
        Mode::Off => Vec::new(),
        _ => vec![
            "pinhook: ConfigMap data[registries.conf] line 7: [[registry]] prefix=\"registry.example\" \
             is ignored: containers/image uses the first [[registry]] with that prefix (line 1)"
                .to_string(),
        ],
    };
    assert_eq!(plan.warnings, want);
}

#[rstest]
#[case::enforce_denies(Mode::Enforce, Some(Action::Denied))]
#[case::audit_reports(Mode::Audit, Some(Action::Violation))]
#[case::off_says_nothing(Mode::Off, None)]
fn a_pull_secret_kubelet_refuses_is_judged_by_mode(
    #[case] mode: Mode,
    #[case] action: Option<Action>,
) {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let value = pod(&[TAG]);
    let (_, plan) = mutate(
        &policy,
        mode,
        object(Kind::Pod, &value, None),
        Answer::Found,
    );
    let line =
        "imagePullSecret shop/broken is malformed, so kubelet refuses every pull of this pod";
    let plan = plan.with_refused_pull_secrets(vec![line.to_string()]);
    let found: Vec<(Action, Reason, &str)> = plan
        .findings
        .iter()
        .map(|f| (f.action, f.reason, f.message.as_str()))
        .collect();
    let want: Vec<(Action, Reason, &str)> = action
        .map(|a| (a, Reason::InvalidPullSecret, line))
        .into_iter()
        .collect();
    assert_eq!(found, want);
    let denied = plan.denial_message();
    assert_eq!(denied.is_some(), mode == Mode::Enforce, "{denied:?}");
}

fn capped_policy(limit: usize) -> CompiledPolicy {
    Policy {
        limits: crate::policy::Limits {
            max_images_per_object: limit,
        },
        ..Policy::default()
    }
    .compile()
    .expect("a valid policy")
}

/// Four distinct tags (five sites) and one digest-pinned image, under a limit of 3.
fn four_distinct_tags() -> Value {
    pod(&[
        "registry.example/team/a:1",
        "registry.example/team/b:1",
        "registry.example/team/a:1",
        "registry.example/team/c:1",
        "registry.example/team/d:1",
        &format!("{REPOSITORY}@sha256:{}", hex('d')),
    ])
}

#[rstest]
#[case::enforce(Mode::Enforce, Action::Denied)]
#[case::audit(Mode::Audit, Action::Violation)]
fn more_distinct_images_than_the_limit_are_refused_without_the_registry(
    #[case] mode: Mode,
    #[case] action: Action,
) {
    let policy = capped_policy(3);
    let value = four_distinct_tags();
    let triaged = mutation(&policy, object(Kind::Pod, &value, None))
        .triage(mode)
        .expect("readable");
    assert!(triaged.wanted().is_empty(), "nothing may be resolved");
    let plan = triaged.finish(&Resolutions::new(), Vec::new());
    let text = "the object names 4 distinct images to resolve, more than the policy's limit of 3 \
                (limits.maxImagesPerObject); none was resolved";
    let got: Vec<(Action, Option<Reason>, Option<&str>)> = plan
        .outcomes
        .iter()
        .map(|o| (o.action, o.violation, o.reason.as_deref()))
        .collect();
    let refused = (action, Some(Reason::TooManyImages), Some(text));
    assert_eq!(
        got,
        [
            refused,
            refused,
            refused,
            refused,
            refused,
            (Action::Unchanged, None, Some("already pinned to a digest")),
        ]
    );
    assert_eq!(Reason::TooManyImages.as_str(), "too_many_images");
}

#[test]
fn exactly_the_limit_is_resolved() {
    let policy = capped_policy(4);
    let value = four_distinct_tags();
    let (tags, plan) = mutate(
        &policy,
        Mode::Enforce,
        object(Kind::Pod, &value, None),
        Answer::Found,
    );
    assert_eq!(tags.len(), 4);
    assert_eq!(plan.denial_message(), None);
}

#[test]
fn a_limit_of_zero_is_refused_by_the_policy() {
    let error = Policy::parse("limits:\n  maxImagesPerObject: 0\n")
        .expect_err("zero would refuse every object");
    assert_eq!(
        error.to_string(),
        "policy is not valid: limits.maxImagesPerObject: must be at least 1"
    );
}

#[test]
fn a_denial_names_ten_images_then_counts_the_rest() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let images: Vec<String> = (0..25)
        .map(|i| format!("registry.example/team/app{i}:1"))
        .collect();
    let images: Vec<&str> = images.iter().map(String::as_str).collect();
    let value = pod(&images);
    let (_, plan) = mutate(
        &policy,
        Mode::Enforce,
        object(Kind::Pod, &value, None),
        Answer::NotFound,
    );
    let message = plan.denial_message().expect("denied");
    assert_eq!(message.matches("; ").count(), LISTED_IN_MESSAGE);
    assert!(message.ends_with("; and 15 more"), "{message}");
    assert!(message.contains("app9:1"), "{message}");
    assert!(!message.contains("app10:1"), "{message}");
}

// --- who made the Pod (issue 24) ---

/// A Pod whose controller is `kind` of `api_version`, naming `TAG`.
fn pod_owned_by(api_version: &str, kind: &str) -> Value {
    let mut value = pod(&[TAG]);
    value["metadata"]["ownerReferences"] = json!([{
        "apiVersion": api_version, "kind": kind, "name": "pg", "uid": "u1", "controller": true
    }]);
    value
}

/// What mutate and validate do with `value` (a Pod) in enforce under `policy`: the tags
/// wanted, whether the mutation pinned, the validation's denials, and why it was left alone.
fn judged_pod(
    policy: &CompiledPolicy,
    value: &Value,
) -> (usize, bool, usize, Option<LeftAlone>, Option<LeftAlone>) {
    let (tags, plan) = mutate(
        policy,
        Mode::Enforce,
        object(Kind::Pod, value, None),
        Answer::Found,
    );
    let pinned = plan.outcomes.iter().any(|o| o.action == Action::Pinned);
    let checked = validation(policy, object(Kind::Pod, value, None))
        .finish(Mode::Enforce, Vec::new())
        .expect("readable");
    (
        tags.len(),
        pinned,
        checked.denials().count(),
        plan.left_alone,
        checked.left_alone,
    )
}

/// Issue 43: "left to its operator" withholds the patch, never the check. `/mutate` leaves an
/// operator's Pod as written (no registry call, no patch); `/validate` denies its unpinned image
/// in enforce, naming the operator and the two fixes, and admits it once the image is pinned.
#[test]
fn an_operators_pod_is_not_patched_but_checked() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let value = pod_owned_by("postgresql.cnpg.io/v1", "Cluster");
    let (tags, pinned, denied, mutated, validated) = judged_pod(&policy, &value);
    assert_eq!(
        (tags, pinned, denied),
        (0, false, 1),
        "no registry call, no patch; denied by /validate"
    );
    let expected = LeftAlone {
        reason: LeftAloneReason::Operator,
        message: "Pod left to its controller Cluster pg (postgresql.cnpg.io/v1)".to_string(),
    };
    assert_eq!(mutated, Some(expected));
    assert_eq!(validated, None, "checked, not left alone");
    let checked = validation(&policy, object(Kind::Pod, &value, None))
        .finish(Mode::Enforce, Vec::new())
        .expect("readable");
    let message = checked.denial_message().expect("denied");
    for part in [
        TAG,
        "not pinned to a digest",
        "Cluster pg (postgresql.cnpg.io/v1)",
        "customResources",
        r#"list {group: "postgresql.cnpg.io", kind: Cluster} in owners.pinPodsOf"#,
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    // In audit it is admitted, and reported (here, since /mutate said nothing).
    let audited = validation(&policy, object(Kind::Pod, &value, None))
        .finish(Mode::Audit, Vec::new())
        .expect("readable");
    assert_eq!(audited.denials().count(), 0);
    assert_eq!(
        audited
            .violations()
            .map(|o| o.violation)
            .collect::<Vec<_>>(),
        [Some(Reason::Unpinned)]
    );
    // Once the operator's resource is pinned (customResources), its Pods carry the digest and
    // pass.
    let mut pinned_pod = value.clone();
    pinned_pod["spec"]["containers"][0]["image"] = json!(format!("{TAG}@{}", digest('d')));
    let (tags, _, denied, _, _) = judged_pod(&policy, &pinned_pod);
    assert_eq!((tags, denied), (0, 0));
}

/// `onResolutionFailure: allow` admits a tag pinhook tried and failed to resolve; an operator's
/// Pod was never tried, so it is denied all the same.
#[test]
fn an_operators_unpinned_pod_is_denied_even_when_failures_are_allowed() {
    let policy = Policy::parse("mode: enforce\nonResolutionFailure: allow\n").expect("valid");
    let value = pod_owned_by("v1", "ConfigMap");
    let checked = validation(&policy, object(Kind::Pod, &value, None))
        .finish(Mode::Enforce, Vec::new())
        .expect("readable");
    assert_eq!(checked.denials().count(), 1);
}

/// Issue 43: one line of metadata must not switch enforce off. A bare Pod naming as its
/// controller any kind pinhook does not know (a ConfigMap its author owns, a Node, a made-up
/// kind, a built-in kind in another group) is denied unpinned exactly like the same Pod without
/// the owner.
#[rstest]
#[case::a_configmap("v1", "ConfigMap")]
#[case::a_node("v1", "Node")]
#[case::a_made_up_kind("example.dev/v1", "Anything")]
#[case::replicaset_in_another_group("example.dev/v1", "ReplicaSet")]
#[case::deployment("apps/v1", "Deployment")]
fn a_forged_owner_does_not_switch_enforce_off(#[case] api_version: &str, #[case] kind: &str) {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let forged = pod_owned_by(api_version, kind);
    let checked = validation(&policy, object(Kind::Pod, &forged, None))
        .finish(Mode::Enforce, Vec::new())
        .expect("readable");
    let bare = validation(&policy, object(Kind::Pod, &pod(&[TAG]), None))
        .finish(Mode::Enforce, Vec::new())
        .expect("readable");
    assert_eq!(checked.denials().count(), 1, "{kind}");
    assert_eq!(bare.denials().count(), 1);
    assert!(
        checked.left_alone.is_none(),
        "{kind}: {:?}",
        checked.left_alone
    );
}

#[test]
fn an_operator_listed_as_safe_has_its_pods_pinned_and_checked() {
    let policy =
        Policy::parse("owners:\n  pinPodsOf:\n  - group: argoproj.io\n    kind: Workflow\n")
            .expect("valid");
    let value = pod_owned_by("argoproj.io/v1alpha1", "Workflow");
    let (tags, pinned, _, mutated, _) = judged_pod(&policy, &value);
    assert_eq!((tags, pinned, mutated), (1, true, None));
    // Validation judges the unpinned Pod it is handed (as after a failed mutation): denied.
    let (_, _, denied, _, validated) = judged_pod(&policy, &value);
    assert_eq!((denied, validated), (1, None));
    // Another group's Workflow is not the one listed.
    let other = pod_owned_by("example.dev/v1", "Workflow");
    let (tags, pinned, _, mutated, _) = judged_pod(&policy, &other);
    assert_eq!((tags, pinned), (0, false));
    assert_eq!(mutated.map(|l| l.reason), Some(LeftAloneReason::Operator));
}

#[test]
fn built_in_pod_controllers_pods_are_judged() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    for (api_version, kind) in [
        ("apps/v1", "ReplicaSet"),
        ("v1", "ReplicationController"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "DaemonSet"),
        ("batch/v1", "Job"),
    ] {
        let (tags, pinned, _, mutated, _) = judged_pod(&policy, &pod_owned_by(api_version, kind));
        assert_eq!((tags, pinned, mutated), (1, true, None), "{kind}");
    }
}

/// A mirror pod sent by the node it names is never patched nor denied; the same Pod sent by
/// anyone else (the annotation is its author's to write) is judged like any other (issue 43).
#[test]
fn a_mirror_pod_from_its_node_is_never_patched_or_denied_in_any_mode() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let mut value = pod_owned_by("v1", "Node");
    value["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "5e3d1c"});
    value["spec"]["nodeName"] = json!("node1");
    let from = |user| Object {
        user,
        ..object(Kind::Pod, &value, None)
    };
    for mode in [Mode::Enforce, Mode::Audit] {
        let (tags, plan) = mutate(&policy, mode, from("system:node:node1"), Answer::Found);
        assert!(tags.is_empty());
        assert!(plan.outcomes.is_empty() && plan.findings.is_empty());
        assert_eq!(
            plan.left_alone.map(|l| l.reason),
            Some(LeftAloneReason::StaticPod)
        );
        let checked = validation(&policy, from("system:node:node1"))
            .finish(mode, Vec::new())
            .expect("readable");
        assert_eq!(checked.denials().count(), 0);
        assert_eq!(
            checked.left_alone.map(|l| l.reason),
            Some(LeftAloneReason::StaticPod)
        );
    }
    for user in ["", "alice", "system:node:node2"] {
        let checked = validation(&policy, from(user))
            .finish(Mode::Enforce, Vec::new())
            .expect("readable");
        assert_eq!(checked.denials().count(), 1, "sent by {user:?}");
        assert!(checked.left_alone.is_none());
    }
    // Without a Node owner, a tenant's "mirror pod" is a bare Pod: pinned by /mutate.
    let mut bare = value.clone();
    bare["metadata"]["ownerReferences"] = json!([]);
    let view = Object {
        user: "alice",
        ..object(Kind::Pod, &bare, None)
    };
    let (tags, plan) = mutate(&policy, Mode::Enforce, view, Answer::Found);
    assert_eq!(tags.len(), 1);
    assert!(plan.outcomes.iter().all(|o| o.action == Action::Pinned));
}

#[test]
fn an_empty_owner_kind_is_refused() {
    let error =
        Policy::parse("owners:\n  pinPodsOf:\n  - group: x\n    kind: ''\n").expect_err("invalid");
    assert_eq!(
        error.to_string(),
        "policy is not valid: owners.pinPodsOf[0].kind: must not be empty"
    );
}

// --- custom resources pinned where their operator reads the image (issue 24) ---

fn cnpg_policy() -> CompiledPolicy {
    Policy::parse(
        "customResources:\n- group: postgresql.cnpg.io\n  kind: Cluster\n  images: [/spec/imageName]\n",
    )
    .expect("valid")
}

fn cluster(image: &str) -> Value {
    json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
           "metadata": {"name": "pg", "namespace": NAMESPACE},
           "spec": {"instances": 3, "imageName": image}})
}

fn cluster_view<'a>(value: &'a Value, old: Option<&'a Value>) -> Object<'a> {
    Object {
        group: "postgresql.cnpg.io",
        kind: "Cluster",
        subresource: "",
        namespace: NAMESPACE,
        object: value,
        old_object: old,
        user: "",
    }
}

#[test]
fn a_configured_custom_resource_is_pinned_at_its_image_field() {
    let policy = cnpg_policy();
    let value = cluster(TAG);
    let (tags, plan) = mutate(
        &policy,
        Mode::Enforce,
        cluster_view(&value, None),
        Answer::Found,
    );
    assert_eq!(tags, [TAG.to_string()]);
    let outcome = &plan.outcomes[0];
    assert_eq!(outcome.action, Action::Pinned);
    assert_eq!(outcome.site.pointer, "/spec/imageName");
    assert_eq!(outcome.result, format!("{TAG}@{}", digest('d')));
    let patch = serde_json::to_value(plan.patch().expect("patch")).expect("json");
    assert_eq!(
        patch,
        json!([{"op": "replace", "path": "/spec/imageName", "value": format!("{TAG}@{}", digest('d'))}])
    );
    // /validate denies it unpinned in enforce, naming the field.
    let checked = validation(&policy, cluster_view(&value, None))
        .finish(Mode::Enforce, Vec::new())
        .expect("readable");
    assert_eq!(
        checked.denial_message().as_deref(),
        Some("field \"/spec/imageName\" (/spec/imageName) image \"registry.example/team/app:1.0\": not pinned to a digest")
    );
    // Audit reports and changes nothing.
    let (_, audited) = mutate(
        &policy,
        Mode::Audit,
        cluster_view(&value, None),
        Answer::Found,
    );
    assert!(audited
        .outcomes
        .iter()
        .all(|o| o.action == Action::Unchanged));
}

#[test]
fn an_update_of_a_custom_resource_judges_only_a_changed_image() {
    let policy = cnpg_policy();
    let old = cluster(TAG);
    let mut scaled = cluster(TAG);
    scaled["spec"]["instances"] = json!(5);
    let (tags, plan) = mutate(
        &policy,
        Mode::Enforce,
        cluster_view(&scaled, Some(&old)),
        Answer::Found,
    );
    assert!(
        tags.is_empty(),
        "the image did not change: no registry call"
    );
    assert_eq!(plan.outcomes[0].action, Action::Unchanged);
    let upgraded = cluster("registry.example/team/app:2.0");
    let (tags, _) = mutate(
        &policy,
        Mode::Enforce,
        cluster_view(&upgraded, Some(&old)),
        Answer::Found,
    );
    assert_eq!(tags, ["registry.example/team/app:2.0".to_string()]);
}

#[test]
fn an_unconfigured_custom_resource_passes_through_unread() {
    let policy = plain_policy(ResolveMode::IfNotPresent);
    let value = cluster(TAG);
    let (tags, plan) = mutate(
        &policy,
        Mode::Enforce,
        cluster_view(&value, None),
        Answer::Found,
    );
    assert!(tags.is_empty());
    assert!(!plan.pod_bearing);
}

#[test]
fn a_custom_resources_pull_secrets_are_its_specs() {
    let policy = cnpg_policy();
    let mut value = cluster(TAG);
    value["spec"]["imagePullSecrets"] = json!([{"name": "regcred"}]);
    match cluster_view(&value, None).secret_names(&policy, "pg") {
        crate::registry::pull_secrets::SecretNames::Spec {
            spec,
            is_pod,
            custom,
        } => {
            assert!(custom, "a custom resource's spec");
            assert_eq!(spec["imagePullSecrets"][0]["name"], "regcred");
            assert!(
                !is_pod,
                "read as a template: the ServiceAccount's when it names none"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[rstest]
#[case::no_images(
    "customResources:\n- kind: Cluster\n  images: []\n",
    "customResources[0].images: must name at least one image field"
)]
#[case::not_a_pointer("customResources:\n- kind: Cluster\n  images: [spec.imageName]\n", "customResources[0].images[0]: \"spec.imageName\" is not an RFC 6901 JSON pointer: it must start with '/'")]
#[case::no_kind(
    "customResources:\n- kind: ''\n  images: [/spec/image]\n",
    "customResources[0].kind: must not be empty"
)]
#[case::pod_bearing(
    "customResources:\n- group: apps\n  kind: Deployment\n  images: [/spec/image]\n",
    "customResources[0]: is a pod-bearing kind already (use kinds for a kind with a pod template)"
)]
fn invalid_custom_resources_are_refused(#[case] text: &str, #[case] message: &str) {
    let error = Policy::parse(text).expect_err("invalid");
    assert_eq!(error.to_string(), format!("policy is not valid: {message}"));
}
