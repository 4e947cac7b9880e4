//! The watch's decisions without an apiserver or a registry: which Pods are looked up with which
//! keyring, one lookup per (tag, credentials), each image's state under each namespace's mode
//! and exemptions, which reports are written, left or deleted, and which Events go out.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::policy::Policy;
use crate::registry::testing::digest;
use crate::watch::testing::{classified, seen};

const REPO: &str = "registry.example/team/app";

fn policy(text: &str) -> CompiledPolicy {
    Policy::parse(text).unwrap_or_else(|e| panic!("valid policy: {e}"))
}

fn pod(namespace: &str, name: &str, images: &[&str], secrets: &[&str]) -> PodRecord {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    let secrets: Vec<Value> = secrets.iter().map(|s| json!({"name": s})).collect();
    let object = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{namespace}-{name}")},
        "spec": {"containers": containers, "imagePullSecrets": secrets},
        "status": {"phase": "Running"},
    });
    PodRecord::from_pod(&object).unwrap_or_else(|e| panic!("a valid pod: {e}"))
}

fn pinned(tag: &str, hex: char) -> String {
    format!("{REPO}:{tag}@{}", digest(hex))
}

fn modes(entries: &[(&str, Option<Mode>)]) -> Modes {
    entries
        .iter()
        .map(|(namespace, mode)| (namespace.to_string(), *mode))
        .collect()
}

fn resolution(hex: char, source: ResolutionSource) -> Result<Resolution, RegistryError> {
    Ok(Resolution {
        digest: digest(hex),
        credential: Fingerprint::anonymous(),
        source,
        moved_from: None,
        age: Duration::ZERO,
        origin: None,
        verified: None,
    })
}

/// Every key of `plan` answered with digest `hex`.
fn answer_all(plan: &LookupPlan<'_>, hex: char) -> HashMap<LookupKey, TagLookup> {
    plan.calls()
        .into_iter()
        .map(|lookup| (lookup.key, TagLookup::Resolved(digest(hex))))
        .collect()
}

/// Adds `request` to `plan` as the cycle does: tags the policy routes through mirrors looked up
/// at them.
fn add_routed<'a>(
    policy: &CompiledPolicy,
    plan: &mut LookupPlan<'a>,
    request: KeyringRequest<'a>,
    keyring: &Keyring,
) {
    let mut warnings = Vec::new();
    plan.add_routed(request, keyring, |reference| {
        let route = policy.routes.route(reference)?;
        Some(RoutedCall::new(
            reference,
            &route,
            keyring,
            &crate::registry::mirrored::MirrorKeyrings::new(),
            &mut warnings,
        ))
    });
}

fn state_names<'a>(images: &'a [ClassifiedImage<'_>]) -> Vec<(&'a str, &'static str)> {
    images
        .iter()
        .map(|i| (i.site.image.as_str(), i.state.as_str()))
        .collect()
}

#[test]
fn terminal_pods_do_not_run_and_namespaces_are_read_once_each() {
    let mut done = pod("a", "done", &["x:1"], &[]);
    done.terminal = true;
    let pods = [
        pod("b", "p1", &["x:1"], &[]),
        done,
        pod("a", "p2", &["x:1"], &[]),
        pod("b", "p3", &["x:1"], &[]),
    ];
    let running = running(&pods);
    assert_eq!(running.len(), 3);
    assert_eq!(namespaces(&running), vec!["b", "a"]);
}

#[test]
fn tags_are_looked_up_and_digest_only_pins_checked_in_judged_unexempt_namespaces_only() {
    let policy = policy(
        "exempt:\n  namespaces: [kube-system]\n  images: [\"registry.example/team/sidecar*\"]\n",
    );
    let pods = [
        pod(
            "shop",
            "p",
            &[
                &pinned("1.0", 'a'),
                &format!("{REPO}:1.0"),
                &format!("{REPO}@{}", digest('b')),
                &format!("registry.example/team/sidecar:2@{}", digest('c')),
                "NOT A REFERENCE",
            ],
            &[],
        ),
        pod("kube-system", "p", &[&pinned("1.0", 'a')], &[]),
        pod("quiet", "p", &[&pinned("1.0", 'a')], &[]),
        pod("unknown", "p", &[&pinned("1.0", 'a')], &[]),
        pod("audit", "p", &[&pinned("2.0", 'a')], &[]),
    ];
    let pods = running(&pods);
    let modes = modes(&[
        ("shop", Some(Mode::Enforce)),
        ("kube-system", Some(Mode::Enforce)),
        ("quiet", Some(Mode::Off)),
        ("unknown", None),
        ("audit", Some(Mode::Audit)),
    ]);
    let wanted = keyrings_wanted(&policy, &pods, &modes, &ParsedImages::of(&pods));
    // shop: the pinned and the unpinned tag are looked up, the digest-only pin is checked; the
    // exempt sidecar and what does not parse are left alone.
    let seen: Vec<(&str, Vec<String>, usize, usize)> = wanted
        .iter()
        .map(|r| {
            (
                r.namespace,
                r.repositories.clone(),
                r.sites.len(),
                r.digests.len(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("audit", vec![REPO.to_string()], 1, 0),
            ("shop", vec![REPO.to_string()], 2, 1)
        ]
    );
}

#[test]
fn pods_with_the_same_pull_secrets_share_a_keyring_and_a_tag_is_looked_up_once_per_credentials() {
    let policy = policy("mode: enforce");
    let image = pinned("1.0", 'a');
    let pods = [
        pod("shop", "p1", &[&image, &image], &["regcred"]),
        pod("shop", "p2", &[&image], &["regcred"]),
        pod("shop", "p3", &[&image], &["other"]),
        pod("shop", "p4", &[&image], &[]),
    ];
    let pods = running(&pods);
    let modes = modes(&[("shop", Some(Mode::Enforce))]);
    let wanted = keyrings_wanted(&policy, &pods, &modes, &ParsedImages::of(&pods));
    let groups: Vec<&[String]> = wanted.iter().map(|r| r.pull_secrets).collect();
    assert_eq!(
        groups,
        vec![
            &[][..],
            &["other".to_string()][..],
            &["regcred".to_string()][..]
        ]
    );
    let mut plan = LookupPlan::default();
    for request in wanted {
        // Only "regcred" carries a credential for the registry.
        let mut keyring = Keyring::new();
        if request.pull_secrets == ["regcred".to_string()] {
            keyring.add("registry.example", Credential::basic("u", "p"));
        }
        plan.add(request, &keyring);
    }
    assert_eq!(plan.distinct(), 2, "anonymous and regcred: one lookup each");
    let answers = answer_all(&plan, 'a');
    let lookups = plan.answer(&answers);
    for pod in &pods {
        assert_eq!(
            lookups.get(&pod.uid, &image),
            TagLookup::Resolved(digest('a')),
            "{}",
            pod.name
        );
    }
    assert_eq!(
        lookups.get("uid-shop-p1", "elsewhere:1"),
        TagLookup::NotLooked
    );
}

#[test]
fn a_stale_answer_is_not_the_tags_digest_and_failures_name_the_registry_and_kind() {
    let reference = Reference::parse(&format!("{REPO}:1.0")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tag_lookup(&reference, &resolution('a', ResolutionSource::Registry)),
        TagLookup::Resolved(digest('a'))
    );
    assert_eq!(
        tag_lookup(&reference, &resolution('a', ResolutionSource::Stale)),
        TagLookup::Failed("registry registry.example is unavailable".to_string())
    );
    let missing = Err(RegistryError::NotFound {
        repository: REPO.to_string(),
        tag: "1.0".to_string(),
    });
    assert_eq!(
        tag_lookup(&reference, &missing),
        TagLookup::Failed("registry registry.example: not found".to_string())
    );
    assert!(failure_detail(&missing).is_some_and(|d| d.contains("tag 1.0 not found")));
    assert_eq!(
        failure_detail(&resolution('a', ResolutionSource::Cache)),
        None
    );
}

#[test]
fn each_image_is_classified_under_its_namespaces_mode_and_exemptions() {
    let policy =
        policy("exempt:\n  namespaces: [kube-*]\n  images: [\"registry.example/team/sidecar*\"]\n");
    let moved = pinned("1.0", 'a');
    let current = pinned("2.0", 'b');
    let tag_only = format!("{REPO}:3.0");
    let sidecar = "registry.example/team/sidecar:1".to_string();
    let pods = [
        pod(
            "shop",
            "p",
            &[&moved, &current, &tag_only, &sidecar, "NOT A REFERENCE"],
            &[],
        ),
        pod("kube-system", "p", &[&moved], &[]),
        pod("quiet", "p", &[&moved], &[]),
        pod("unknown", "p", &[&moved], &[]),
    ];
    let pods = running(&pods);
    let modes = modes(&[
        ("shop", Some(Mode::Enforce)),
        ("kube-system", Some(Mode::Enforce)),
        ("quiet", Some(Mode::Off)),
        ("unknown", None),
    ]);
    let mut plan = LookupPlan::default();
    for request in keyrings_wanted(&policy, &pods, &modes, &ParsedImages::of(&pods)) {
        plan.add(request, &Keyring::new());
    }
    // 1.0 now points at b (it moved), 2.0 still at b.
    let answers: HashMap<LookupKey, TagLookup> = plan
        .calls()
        .into_iter()
        .map(|lookup| (lookup.key, TagLookup::Resolved(digest('b'))))
        .collect();
    let lookups = plan.answer(&answers);
    let images = classify_all(
        &policy,
        &pods,
        &modes,
        &ParsedImages::of(&pods),
        &lookups,
        &SiteChecks::default(),
        &SiteVerdicts::default(),
    );
    assert_eq!(
        state_names(&images),
        vec![
            (moved.as_str(), "tag-moved"),
            (current.as_str(), "pinned-current"),
            (tag_only.as_str(), "unpinned"),
            (sidecar.as_str(), "exempt"),
            ("NOT A REFERENCE", "unresolvable"),
            (moved.as_str(), "exempt"),
            // Mode off: not looked up, so its drift cannot be judged.
            (moved.as_str(), "unresolvable"),
        ]
    );
    let ImageState::Exempt { why } = &images[5].state else {
        panic!("exempt: {:?}", images[5].state);
    };
    assert_eq!(why, "namespace kube-system is exempt");
    let ImageState::Exempt { why } = &images[3].state else {
        panic!("exempt: {:?}", images[3].state);
    };
    assert_eq!(why, "image is exempt");
    let counted = states(&images);
    assert_eq!(counted.get("exempt"), Some(&2));
    assert_eq!(counted.get("digest-only"), None);
}

#[test]
fn reports_are_written_for_known_modes_left_for_unknown_ones_and_deleted_when_nothing_runs() {
    let image = |namespace: &str| {
        let workload = crate::watch::WorkloadRef {
            namespace: namespace.to_string(),
            api_version: "v1".to_string(),
            kind: "Pod".to_string(),
            name: "p".to_string(),
            uid: None,
        };
        let site = pod(namespace, "p", &["x:1"], &[]).images[0].clone();
        let state = ImageState::Unpinned { current: None };
        seen(&format!("uid-{namespace}"), &workload, site, state)
    };
    let fixtures = [
        image("audit"),
        image("enforce"),
        image("unknown"),
        image("audit"),
    ];
    let images = classified(&fixtures);
    let modes = modes(&[
        ("audit", Some(Mode::Audit)),
        ("enforce", Some(Mode::Enforce)),
        ("unknown", None),
        ("gone-unknown", None),
    ]);
    let targets = report_targets(&images, &modes, ["gone", "audit", "gone-unknown"]);
    let seen: Vec<(&str, Mode, usize)> = targets
        .iter()
        .map(|t| (t.namespace.as_str(), t.mode, t.images.len()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("audit", Mode::Audit, 2),
            ("enforce", Mode::Enforce, 1),
            ("gone", Mode::Enforce, 0),
        ]
    );
}

#[test]
fn an_unchanged_report_is_recognised_by_its_content_digest_alone() {
    let report = crate::watch::namespace_report(
        "shop",
        Mode::Enforce,
        &[],
        crate::watch::Timestamp::from_system_time(std::time::UNIX_EPOCH),
        None,
    );
    let content = report
        .metadata
        .annotations
        .get(crate::watch::report::CONTENT_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| panic!("a report carries its content digest"));
    assert!(report_unchanged(&report, Some(&content)));
    assert!(!report_unchanged(&report, Some("sha256:other")));
    assert!(!report_unchanged(&report, None));
}

#[test]
fn events_go_out_for_new_findings_only_within_the_per_workload_bound() {
    let moved = |image: &str, pinned: char, now: char| {
        let workload = crate::watch::WorkloadRef {
            namespace: "shop".to_string(),
            api_version: "apps/v1".to_string(),
            kind: "Deployment".to_string(),
            name: "web".to_string(),
            uid: None,
        };
        let site = pod("shop", "p", &[image], &[]).images[0].clone();
        let state = ImageState::TagMoved {
            pinned: digest(pinned),
            now: digest(now),
        };
        seen("uid", &workload, site, state)
    };
    let modes = modes(&[("shop", Some(Mode::Enforce))]);
    let fixtures = [
        moved("a:1", 'a', 'b'),
        moved("b:1", 'a', 'c'),
        moved("c:1", 'a', 'd'),
    ];
    let images = classified(&fixtures);
    let mut memory = EventMemory::default();
    let first = memory.next(&images, &modes, 2);
    assert_eq!(first.publish.len(), 2, "two per workload");
    assert_eq!(first.rate_limited.len(), 1);
    assert_eq!(first.new_moves, 3);
    let again = memory.next(&images, &modes, 2);
    assert_eq!(
        (
            again.publish.len(),
            again.rate_limited.len(),
            again.new_moves
        ),
        (0, 0, 0),
        "nothing new: no Event, no new move"
    );
    // One finding goes, then comes back: it is new again.
    let _ = memory.next(&images[1..], &modes, 2);
    let back = memory.next(&images, &modes, 2);
    assert_eq!((back.publish.len(), back.new_moves), (1, 1));
    // Mode off: no Event, but a moved tag is still counted.
    let off = modes_off();
    let mut fresh = EventMemory::default();
    let quiet = fresh.next(&images, &off, 2);
    assert_eq!((quiet.publish.len(), quiet.new_moves), (0, 3));
}

fn modes_off() -> Modes {
    modes(&[("shop", Some(Mode::Off))])
}

/// Issue 43: an operator's Pod is not patched, but checked: the watch reports its unpinned
/// image like any other (it was filed as `left-to-owner` before, which a forged ownerReference
/// could claim). Only a static pod's mirror is left to its node.
#[test]
fn unpinned_images_of_operators_are_reported_and_static_pods_are_left_to_their_node() {
    let policy = policy("owners:\n  pinPodsOf:\n  - group: argoproj.io\n    kind: Workflow\n");
    let tag_only = format!("{REPO}:1.0");
    let with_owner = |name: &str, api_version: &str, kind: &str| {
        let mut record = pod("shop", name, &[&tag_only, &pinned("1.0", 'a')], &[]);
        record.owner = Some(crate::watch::OwnerRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            name: "owner".to_string(),
            uid: "u1".to_string(),
        });
        record
    };
    let mut mirror = pod("shop", "etcd-node1", &[&tag_only], &[]);
    mirror.mirror = true;
    let pods = [
        with_owner("pg-1", "postgresql.cnpg.io/v1", "Cluster"),
        with_owner("wf-1", "argoproj.io/v1alpha1", "Workflow"),
        with_owner("web-1", "apps/v1", "ReplicaSet"),
        mirror,
    ];
    let pods = running(&pods);
    let audit = modes(&[("shop", Some(Mode::Audit))]);
    let modes = modes(&[("shop", Some(Mode::Enforce))]);
    let mut plan = LookupPlan::default();
    for request in keyrings_wanted(&policy, &pods, &modes, &ParsedImages::of(&pods)) {
        plan.add(request, &Keyring::new());
    }
    let answers = answer_all(&plan, 'a');
    let images = classify_all(
        &policy,
        &pods,
        &modes,
        &ParsedImages::of(&pods),
        &plan.answer(&answers),
        &SiteChecks::default(),
        &SiteVerdicts::default(),
    );
    // (The fixture sets each owner after the record is read, so the workload is the Pod.)
    let states: Vec<(&str, &str)> = images
        .iter()
        .map(|i| (i.workload().name.as_str(), i.state.as_str()))
        .collect();
    assert_eq!(
        states,
        vec![
            // The operator's Pod: not patched by admission, but judged.
            ("pg-1", "unpinned"),
            ("pg-1", "pinned-current"),
            // An operator listed as safe to pin, and a built-in controller: judged.
            ("wf-1", "unpinned"),
            ("wf-1", "pinned-current"),
            ("web-1", "unpinned"),
            ("web-1", "pinned-current"),
            ("etcd-node1", "left-to-owner"),
        ]
    );
    assert_eq!(images[6].state.detail(), Some("the mirror of a static pod"));
    // No Event for what admission leaves alone; in audit, one for the operator's unpinned
    // image, as for any unpinned image.
    let events = EventMemory::default().next(&images[6..], &audit, 5);
    assert!(events.publish.is_empty());
    let events = EventMemory::default().next(&images[..1], &audit, 5);
    assert_eq!(events.publish.len(), 1);
}

/// A routed tag is looked up at its mirror, keyed by the mirror's credentials: two Pods whose
/// secrets differ only for the mirror host make two lookups, never one shared answer.
#[test]
fn routed_tags_are_keyed_by_their_mirrors_credentials() {
    let policy = policy(
        "registries:\n  resolveThrough:\n    - {source: registry.example/team, mirrors: [{location: mirror.example/team}]}\n",
    );
    let image = pinned("1.0", 'a');
    let pods = [
        pod("shop", "p1", &[&image], &["mirror-cred"]),
        pod("shop", "p2", &[&image], &[]),
    ];
    let pods = running(&pods);
    let modes = modes(&[("shop", Some(Mode::Enforce))]);
    let wanted = keyrings_wanted(&policy, &pods, &modes, &ParsedImages::of(&pods));
    assert!(wanted.iter().all(|r| r
        .repositories
        .contains(&"mirror.example/team/app".to_string())));
    let mut plan = LookupPlan::default();
    for request in wanted {
        let mut keyring = Keyring::new();
        if request.pull_secrets == ["mirror-cred".to_string()] {
            keyring.add("mirror.example", Credential::basic("u", "p"));
        }
        add_routed(&policy, &mut plan, request, &keyring);
    }
    assert_eq!(plan.distinct(), 2);
    let mirrors: Vec<String> = plan
        .calls()
        .into_iter()
        .filter_map(|lookup| lookup.routed.map(|c| c.mirrors[0].reference.to_string()))
        .collect();
    assert_eq!(mirrors, ["mirror.example/team/app:1.0"; 2]);
    // The mirror that answered is each image's origin (the report's `resolvedAt`).
    let answers = answer_all(&plan, 'a');
    let origins: HashMap<LookupKey, String> = plan
        .calls()
        .into_iter()
        .map(|lookup| (lookup.key, "mirror.example/team".to_string()))
        .collect();
    let lookups = plan.answer_with_origins(&answers, &origins);
    let images = classify_all(
        &policy,
        &pods,
        &modes,
        &ParsedImages::of(&pods),
        &lookups,
        &SiteChecks::default(),
        &SiteVerdicts::default(),
    );
    assert_eq!(images.len(), 2);
    assert!(images
        .iter()
        .all(|i| i.origin.as_deref() == Some("mirror.example/team")));
}

// === pinned digests that vanished, what runs (issue 29) ===

/// A Pod whose containers report they run `running` (one `imageID` per image, "" for none).
fn pod_running(namespace: &str, name: &str, images: &[(&str, &str)]) -> PodRecord {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, (image, _))| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    let statuses: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, (_, id))| json!({"name": format!("c{i}"), "imageID": id}))
        .collect();
    let object = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{namespace}-{name}")},
        "spec": {"containers": containers, "nodeName": "node-1"},
        "status": {"phase": "Running", "containerStatuses": statuses},
    });
    PodRecord::from_pod(&object).unwrap_or_else(|e| panic!("a valid pod: {e}"))
}

/// Plans every keyring of `pods` with `keyring` (anonymous when empty).
fn plan_for<'a>(policy: &CompiledPolicy, pods: &[&'a PodRecord], modes: &Modes) -> LookupPlan<'a> {
    let mut plan = LookupPlan::default();
    for request in keyrings_wanted(policy, pods, modes, &ParsedImages::of(pods)) {
        plan.add(request, &Keyring::new());
    }
    plan
}

#[test]
fn pinned_digests_are_checked_once_each_unless_their_tag_just_resolved_to_them() {
    let policy = policy("mode: enforce");
    let current = pinned("1.0", 'a'); // the tag still points here: no check
    let moved = pinned("2.0", 'b'); // the tag moved: its pin is checked
    let digest_only = format!("{REPO}@{}", digest('c')); // no tag: always checked
    let pods = [
        pod("shop", "p1", &[&current, &moved, &digest_only], &[]),
        pod("shop", "p2", &[&moved, &digest_only], &[]),
        pod("other", "p3", &[&digest_only], &[]),
    ];
    let pods = running(&pods);
    let modes = modes(&[("shop", Some(Mode::Enforce)), ("other", Some(Mode::Audit))]);
    let mut plan = plan_for(&policy, &pods, &modes);
    let answers: HashMap<LookupKey, TagLookup> = plan
        .calls()
        .into_iter()
        .map(|Lookup { key, reference, .. }| {
            let now = if reference.tag() == Some("1.0") {
                'a'
            } else {
                'd'
            };
            (key, TagLookup::Resolved(digest(now)))
        })
        .collect();
    let probes = plan.probes(&answers);
    let mut asked: Vec<String> = probes
        .calls()
        .into_iter()
        .map(|probe| probe.key.manifest)
        .collect();
    asked.sort();
    assert_eq!(
        asked,
        [
            format!("{REPO}@{}", digest('b')),
            format!("{REPO}@{}", digest('c'))
        ],
        "one check per (digest, credentials), whichever Pods and namespaces use it"
    );
    // Each check asks for the manifest by digest, with no tag.
    for Probe {
        reference: probe, ..
    } in probes.calls()
    {
        assert_eq!(probe.tag(), None);
        assert!(probe.manifest().starts_with("sha256:"));
    }
    let checks: HashMap<ProbeKey, DigestCheck> = probes
        .calls()
        .into_iter()
        .map(
            |Probe {
                 key,
                 reference: probe,
                 ..
             }| {
                let missing = probe.digest() == Some(&digest('c'));
                (
                    key,
                    if missing {
                        DigestCheck::Missing
                    } else {
                        DigestCheck::Present
                    },
                )
            },
        )
        .collect();
    let checks = probes.answer(&checks);
    let lookups = plan.answer(&answers);
    let images = classify_all(
        &policy,
        &pods,
        &modes,
        &ParsedImages::of(&pods),
        &lookups,
        &checks,
        &SiteVerdicts::default(),
    );
    let states = state_names(&images);
    assert_eq!(
        states,
        [
            (current.as_str(), "pinned-current"),
            (moved.as_str(), "tag-moved"),
            (digest_only.as_str(), "digest-missing"),
            (moved.as_str(), "tag-moved"),
            (digest_only.as_str(), "digest-missing"),
            (digest_only.as_str(), "digest-missing"),
        ]
    );
}

#[test]
fn digests_routed_through_mirrors_and_of_off_namespaces_are_not_checked() {
    let policy = policy(
        "registries:\n  resolveThrough:\n    - {source: registry.example/team, mirrors: [{location: mirror.example/team}]}\n",
    );
    let digest_only = format!("{REPO}@{}", digest('c'));
    let moved = pinned("2.0", 'b');
    let pods = [
        pod("shop", "p1", &[&digest_only, &moved], &[]),
        pod("quiet", "p2", &[&digest_only], &[]),
    ];
    let pods = running(&pods);
    let modes = modes(&[("shop", Some(Mode::Enforce)), ("quiet", Some(Mode::Off))]);
    let mut plan = LookupPlan::default();
    for request in keyrings_wanted(&policy, &pods, &modes, &ParsedImages::of(&pods)) {
        let keyring = Keyring::new();
        add_routed(&policy, &mut plan, request, &keyring);
    }
    let answers = answer_all(&plan, 'd');
    assert_eq!(plan.probes(&answers).distinct(), 0);
}

#[test]
fn a_missing_answer_is_only_ever_not_found_and_a_stale_one_says_nothing() {
    let expected = digest('a');
    assert_eq!(
        digest_check(&resolution('a', ResolutionSource::Registry), &expected),
        DigestCheck::Present
    );
    assert_eq!(
        digest_check(&resolution('a', ResolutionSource::Stale), &expected),
        DigestCheck::Unknown
    );
    assert_eq!(
        digest_check(&resolution('b', ResolutionSource::Registry), &expected),
        DigestCheck::Unknown,
        "a registry that names another digest for a digest did not say it is gone"
    );
    let not_found = Err(RegistryError::NotFound {
        repository: REPO.to_string(),
        tag: expected.to_string(),
    });
    assert_eq!(digest_check(&not_found, &expected), DigestCheck::Missing);
    let shared = Err(RegistryError::Shared(std::sync::Arc::new(
        RegistryError::NotFound {
            repository: REPO.to_string(),
            tag: expected.to_string(),
        },
    )));
    assert_eq!(digest_check(&shared, &expected), DigestCheck::Missing);
    for error in [
        RegistryError::Unauthorized {
            registry: "registry.example".into(),
        },
        RegistryError::RateLimited {
            registry: "registry.example".into(),
        },
    ] {
        assert_eq!(digest_check(&Err(error), &expected), DigestCheck::Unknown);
    }
}

#[test]
fn unpinned_tags_are_looked_up_and_compared_with_what_runs() {
    let policy = policy("mode: audit");
    let tag = format!("{REPO}:1.0");
    let pods = [
        pod_running(
            "shop",
            "fresh",
            &[(&tag, &format!("{REPO}@{}", digest('a')))],
        ),
        pod_running(
            "shop",
            "stale",
            &[(&tag, &format!("{REPO}@{}", digest('b')))],
        ),
        pod_running(
            "shop",
            "local",
            &[(&tag, &format!("sha256:{}", "e".repeat(64)))],
        ),
        pod_running("shop", "waiting", &[(&tag, "")]),
    ];
    let pods = running(&pods);
    let modes = modes(&[("shop", Some(Mode::Audit))]);
    let mut plan = plan_for(&policy, &pods, &modes);
    assert_eq!(
        plan.distinct(),
        1,
        "one lookup of the tag for all four Pods"
    );
    let answers = answer_all(&plan, 'a');
    assert_eq!(
        plan.probes(&answers).distinct(),
        0,
        "nothing pinned: no check"
    );
    let lookups = plan.answer(&answers);
    let images = classify_all(
        &policy,
        &pods,
        &modes,
        &ParsedImages::of(&pods),
        &lookups,
        &SiteChecks::default(),
        &SiteVerdicts::default(),
    );
    let states: Vec<(&str, &str)> = images
        .iter()
        .map(|i| (i.pod_uid(), i.state.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("uid-shop-fresh", "unpinned"),
            ("uid-shop-stale", "runs-stale-digest"),
            ("uid-shop-local", "unpinned"),
            ("uid-shop-waiting", "unpinned"),
        ]
    );
    let stale = &images[1];
    assert_eq!(
        stale.state,
        ImageState::RunsStaleDigest {
            running: digest('b'),
            now: digest('a')
        }
    );
    assert_eq!(stale.node(), Some("node-1"));
}

#[test]
fn a_pinned_pod_that_runs_another_digest_is_reported_with_both() {
    let policy = policy("mode: enforce");
    let image = pinned("1.0", 'a');
    let pods = [pod_running(
        "shop",
        "p",
        &[(&image, &format!("{REPO}@{}", digest('b')))],
    )];
    let pods = running(&pods);
    let modes = modes(&[("shop", Some(Mode::Enforce))]);
    let mut plan = plan_for(&policy, &pods, &modes);
    let answers = answer_all(&plan, 'a');
    let _ = plan.probes(&answers);
    let lookups = plan.answer(&answers);
    let images = classify_all(
        &policy,
        &pods,
        &modes,
        &ParsedImages::of(&pods),
        &lookups,
        &SiteChecks::default(),
        &SiteVerdicts::default(),
    );
    assert_eq!(
        images[0].state,
        ImageState::RunsOtherDigest {
            pinned: digest('a'),
            running: digest('b')
        }
    );
}

/// Issue 46: every pinned digest a `verify` entry covers is checked once per (repository,
/// digest, trust) a cycle, whatever number of Pods run it; a verdict other than `verified`
/// makes its images `unverified`, a failed fetch (`None`) leaves them as they were.
#[test]
fn pinned_digests_a_verify_entry_covers_are_checked_once_and_judged() {
    let pem = serde_json::to_string(&crate::signatures::key::tests::key_pair().1).unwrap();
    let policy = policy(&format!(
        "verify:\n- images: [\"{REPO}:*\", \"{REPO}@*\"]\n  keys:\n  - pem: {pem}\n"
    ));
    let signed = pinned("1.0", 'a');
    let unsigned = format!("{REPO}@{}", digest('b'));
    let unknown = pinned("3.0", 'c');
    let tag_only = format!("{REPO}:4.0");
    let other = format!("registry.example/other/app@{}", digest('d'));
    // A Pod that says it is a static pod's mirror (fields its author writes) is judged too.
    let mut mirror = pod("shop", "m", &[&unsigned], &[]);
    mirror.mirror = true;
    mirror.owner = Some(crate::watch::pod::OwnerRef {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "node-1".into(),
        uid: "n1".into(),
    });
    let pods = [
        pod(
            "shop",
            "p",
            &[&signed, &unsigned, &unknown, &tag_only, &other],
            &[],
        ),
        pod("shop", "q", &[&signed], &[]),
        mirror,
    ];
    let pods = running(&pods);
    let modes = modes(&[("shop", Some(Mode::Enforce))]);
    let parsed = ParsedImages::of(&pods);
    let mut plan = LookupPlan::default();
    let mut signatures = SignaturePlan::default();
    for request in keyrings_wanted(&policy, &pods, &modes, &parsed) {
        signatures.add(&policy, &request, &Keyring::new(), |_| None);
        plan.add(request, &Keyring::new());
    }
    assert_eq!(
        signatures.distinct(),
        3,
        "a, b and c; the tag and the other repository are not covered"
    );
    let verdicts: HashMap<SignatureKey, Option<crate::signatures::Verdict>> = signatures
        .calls()
        .into_iter()
        .map(|call| {
            let verdict = match call.key.digest.hex().chars().next() {
                Some('a') => Some(crate::signatures::Verdict::Verified { signer: "k".into() }),
                Some('b') => Some(crate::signatures::Verdict::NoSignature),
                _ => None,
            };
            (call.key, verdict)
        })
        .collect();
    let answers: HashMap<LookupKey, TagLookup> = plan
        .calls()
        .into_iter()
        .map(|lookup| {
            let now = lookup
                .reference
                .digest()
                .cloned()
                .unwrap_or_else(|| digest('e'));
            (lookup.key, TagLookup::Resolved(now))
        })
        .collect();
    let lookups = plan.answer(&answers);
    let images = classify_all(
        &policy,
        &pods,
        &modes,
        &parsed,
        &lookups,
        &SiteChecks::default(),
        &signatures.answer(&verdicts),
    );
    assert_eq!(
        state_names(&images),
        vec![
            (signed.as_str(), "pinned-current"),
            (unsigned.as_str(), "unverified"),
            (unknown.as_str(), "pinned-current"),
            (tag_only.as_str(), "unpinned"),
            (other.as_str(), "digest-only"),
            (signed.as_str(), "pinned-current"),
            (unsigned.as_str(), "unverified"),
        ]
    );
    let ImageState::Unverified { why, .. } = &images[1].state else {
        panic!("{:?}", images[1].state);
    };
    assert_eq!(why, "verify[0]: no signature found");
}

/// Credential plugins may be handed the Pod's ServiceAccount token (KEP-4412): Pods of one
/// namespace and pull secrets but another ServiceAccount get a keyring of their own, asked for
/// that account.
#[test]
fn pods_of_another_service_account_get_a_keyring_of_their_own() {
    let policy = policy("mode: enforce");
    let image = pinned("1.0", 'a');
    let mut pods = [
        pod("shop", "p1", &[&image], &["regcred"]),
        pod("shop", "p2", &[&image], &["regcred"]),
        pod("shop", "p3", &[&image], &["regcred"]),
    ];
    pods[1].service_account = "builder".to_string();
    let pods = running(&pods);
    let modes = modes(&[("shop", Some(Mode::Enforce))]);
    let parsed = ParsedImages::of(&pods);
    let wanted = keyrings_wanted_by(&policy, &pods, &modes, &parsed, true);
    let groups: Vec<(Option<&str>, usize)> = wanted
        .iter()
        .map(|r| (r.service_account, r.sites.len()))
        .collect();
    assert_eq!(groups, vec![(Some("builder"), 1), (Some("default"), 2)]);
    // No plugin handed tokens: one keyring for the three, as before.
    let wanted = keyrings_wanted(&policy, &pods, &modes, &parsed);
    let groups: Vec<(Option<&str>, usize)> = wanted
        .iter()
        .map(|r| (r.service_account, r.sites.len()))
        .collect();
    assert_eq!(groups, vec![(None, 3)]);
}
