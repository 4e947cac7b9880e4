//! ImageDigestMirrorSets and ImageTagMirrorSets as the Windows Machine Config Operator renders
//! them for containerd on Windows nodes (openshift/windows-machine-config-operator
//! `pkg/registries/registries.go`), judged only when the policy says `windowsNodes: true`.
//!
//! The rendering differs from Linux in two ways that let a mirror answer tag pulls:
//!
//! * **Sources are cut to their host.** `extractHostname` keeps the part before the first `/`,
//!   and `dropCommonSuffix` drops the path components the mirror shares with the source, so the
//!   file for `registry.example` says "use `mirror.example`" for every repository of
//!   `registry.example`: an allowed `registry.example/team → mirror.example/team` pair widens to
//!   `registry.example → mirror.example`. Findings name that widened pair, and the allow list
//!   must allow it as written.
//! * **`NeverContactSource` makes the first mirror the `server`.** `generateConfig` writes
//!   `server = "https://<first mirror>"` (mirrors sorted by host) with no capabilities list, and
//!   containerd gives a host without one every capability, `resolve` included; so that mirror
//!   answers tag pulls for the whole host even when every `[host]` entry is `["pull"]` (IDMS).
//!   ImageTagMirrorSet mirrors get `["pull", "resolve"]` whatever the policy.
//!
//! Owns: that rendering for one object (`newMirrorSet`, `mergeMirrorSets` with its quirks: a
//! source host's entries are merged, mirrors deduplicated by host with resolving preferred, the
//! policy replaced only when the first entry's is `AllowContactingSource`) and its findings.
//! A widened pair equal to the Linux pair of the same entry is not reported twice.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{malformed, trim_slash, Judge, MirrorEntry, MirrorError, RISK};

const NEVER_CONTACT_SOURCE: &str = "NeverContactSource";
const ALLOW_CONTACTING_SOURCE: &str = "AllowContactingSource";

/// One mirror of a rendered set: the host string written into hosts.toml, whether it resolves
/// tags, and where it came from (`spec.imageTagMirrors[0].mirrors[1]`, its source and mirror
/// as written).
#[derive(Debug, Clone)]
struct Mirror<'a> {
    host: String,
    resolve_tags: bool,
    at: String,
    source: &'a str,
    written: &'a str,
}

/// The hosts.toml the Windows MCO writes for one source host.
#[derive(Debug, Clone)]
struct MirrorSet<'a> {
    source: String,
    mirrors: Vec<Mirror<'a>>,
    policy: String,
}

/// Judges the entries of one ImageDigestMirrorSet (`resolve_tags` false) or
/// ImageTagMirrorSet (true) as Windows nodes would use them.
pub(super) fn judge_mirror_sets(
    kind: &'static str,
    entries: &[MirrorEntry<'_>],
    resolve_tags: bool,
    judge: &mut Judge<'_>,
) -> Result<(), MirrorError> {
    for set in merged_sets(kind, entries, resolve_tags)? {
        for (i, mirror) in set.mirrors.iter().enumerate() {
            let server = i == 0 && set.policy == NEVER_CONTACT_SOURCE;
            if !(mirror.resolve_tags || server) || host_of(&mirror.host) == set.source {
                continue;
            }
            // Same pair as the entry's own Linux tag mirror, already judged as such.
            if mirror.resolve_tags
                && trim_slash(mirror.source) == set.source
                && trim_slash(mirror.written) == mirror.host
            {
                continue;
            }
            let how = if mirror.resolve_tags {
                format!(
                    "lets {} serve tag pulls for every repository of",
                    mirror.host
                )
            } else {
                format!(
                    "has {NEVER_CONTACT_SOURCE}, which makes {} the hosts.toml server, answering \
                     tag pulls for every repository of",
                    mirror.host
                )
            };
            let message = format!(
                "{kind} {} on Windows nodes {how} {} (the Windows MCO widens {} -> {} to {} -> {}): \
                 {RISK}",
                mirror.at,
                set.source,
                trim_slash(mirror.source),
                trim_slash(mirror.written),
                set.source,
                mirror.host,
            );
            judge.tag_source(mirror.at.clone(), &set.source, &mirror.host, message);
        }
    }
    Ok(())
}

/// `getMirrorSets` + `mergeMirrorSets` for one object.
fn merged_sets<'a>(
    kind: &'static str,
    entries: &[MirrorEntry<'a>],
    resolve_tags: bool,
) -> Result<Vec<MirrorSet<'a>>, MirrorError> {
    let mut sets: BTreeMap<String, MirrorSet<'a>> = BTreeMap::new();
    for entry in entries {
        let policy = match entry.fields.get("mirrorSourcePolicy") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(p)) => p.clone(),
            Some(_) => {
                return Err(malformed(
                    kind,
                    format!("{}.mirrorSourcePolicy", entry.path),
                    "must be a string",
                ))
            }
        };
        let source = extract_hostname(entry.source).to_string();
        let mirrors: Vec<Mirror<'a>> = entry
            .mirrors
            .iter()
            .enumerate()
            .map(|(j, m)| Mirror {
                host: mirror_host(entry.source, m),
                resolve_tags,
                at: format!("{}.mirrors[{j}]", entry.path),
                source: entry.source,
                written: m,
            })
            .collect();
        match sets.get_mut(&source) {
            Some(existing) => {
                merge_mirrors(&mut existing.mirrors, mirrors);
                // The first entry's policy wins unless it is AllowContactingSource (an unset
                // policy is kept too): `mergeMirrorSets`.
                if existing.policy == ALLOW_CONTACTING_SOURCE {
                    existing.policy = policy;
                }
            }
            None => {
                sets.insert(
                    source.clone(),
                    MirrorSet {
                        source,
                        mirrors,
                        policy,
                    },
                );
            }
        }
    }
    let mut sets: Vec<MirrorSet<'a>> = sets.into_values().collect();
    for set in &mut sets {
        // `sortMirrorSets`: the first mirror after this sort becomes the server.
        set.mirrors.sort_by(|a, b| a.host.cmp(&b.host));
    }
    Ok(sets)
}

/// `mergeMirrors`: one mirror per host, a resolving one preferred.
fn merge_mirrors<'a>(existing: &mut Vec<Mirror<'a>>, new: Vec<Mirror<'a>>) {
    for m in new {
        match existing.iter_mut().find(|e| e.host == m.host) {
            Some(e) if !e.resolve_tags && m.resolve_tags => *e = m,
            Some(_) => {}
            None => existing.push(m),
        }
    }
}

/// `newMirror`: the host string written for `mirror` of `source`.
fn mirror_host(source: &str, mirror: &str) -> String {
    if source == mirror {
        extract_hostname(mirror).to_string()
    } else {
        drop_common_suffix(source, mirror)
    }
}

/// `extractHostname`: the part before the first `/`.
fn extract_hostname(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

/// `dropCommonSuffix`, quirks included: it walks both paths from the end and drops one trailing
/// component of the mirror for every position where the two components are equal, without
/// stopping at the first difference.
fn drop_common_suffix(source: &str, mirror: &str) -> String {
    let source_parts: Vec<&str> = source.split('/').collect();
    let mirror_parts: Vec<&str> = mirror.split('/').collect();
    let mut kept = mirror_parts.len();
    for i in 0..source_parts.len().min(mirror_parts.len()) {
        if source_parts[source_parts.len() - 1 - i] == mirror_parts[mirror_parts.len() - 1 - i] {
            kept -= 1;
        }
    }
    mirror_parts[..kept].join("/")
}

/// The registry host of a rendered mirror string (`mirror.example/ns` → `mirror.example`).
fn host_of(rendered: &str) -> &str {
    extract_hostname(rendered)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::{json, Value};

    use super::drop_common_suffix;
    use crate::mirror_guard::check;
    use crate::policy::mirror_policy::{AllowedMirror, MirrorPolicy};

    const RISK: &str = "a tag mirror can serve different content for the same tag";

    fn windows() -> MirrorPolicy {
        MirrorPolicy {
            windows_nodes: true,
            ..MirrorPolicy::default()
        }
    }

    fn idms(entries: Value) -> Value {
        json!({"kind": "ImageDigestMirrorSet", "spec": {"imageDigestMirrors": entries}})
    }

    fn itms(entries: Value) -> Value {
        json!({"kind": "ImageTagMirrorSet", "spec": {"imageTagMirrors": entries}})
    }

    fn findings(
        policy: &MirrorPolicy,
        kind: &str,
        object: &Value,
    ) -> Vec<(String, String, String)> {
        check(policy, "config.openshift.io", kind, object)
            .expect("judged")
            .expect("mirror kind")
            .into_iter()
            .map(|v| (v.source, v.mirror, v.message))
            .collect()
    }

    /// windows-machine-config-operator `registries_test.go` `TestDropCommonSuffix`.
    #[rstest]
    #[case::exact_match("example.com/path/to/resource", "example.com/path/to/resource", "")]
    #[case::different_domain(
        "example.com/path/to/resource",
        "example.org/path/to/resource",
        "example.org"
    )]
    #[case::last_letter_equal_but_no_namespace_match(
        "example.com/path/to/resource/x",
        "example.com/path/to/resourceax",
        "example.com/path/to/resourceax"
    )]
    #[case::different_tags(
        "mcr.microsoft.com/powershell:lts-nanoserver-ltsc2022",
        "quay.io/powershell:23",
        "quay.io/powershell:23"
    )]
    #[case::different_domain_with_tag(
        "mcr.microsoft.com/powershell:lts-nanoserver-ltsc2022",
        "quay.io/powershell:lts-nanoserver-ltsc2022",
        "quay.io"
    )]
    #[case::one_leading_namespace(
        "mcr.microsoft.com/powershell:lts-nanoserver-ltsc2022",
        "quay.io/random_namespace/powershell:lts-nanoserver-ltsc2022",
        "quay.io/random_namespace"
    )]
    #[case::two_leading_namespaces(
        "mcr.microsoft.com/windows/servercore:ltsc2022",
        "quay.io/mohashai/random_namespace/windows/servercore:ltsc2022",
        "quay.io/mohashai/random_namespace"
    )]
    #[case::no_stop_at_the_first_difference("a.example/x/y", "m.example/x/z", "m.example/x")]
    fn drop_common_suffix_is_the_windows_mcos(
        #[case] source: &str,
        #[case] mirror: &str,
        #[case] want: &str,
    ) {
        assert_eq!(drop_common_suffix(source, mirror), want);
    }

    /// The captured IDMS: safe on Linux, a host-wide tag mirror on Windows.
    #[test]
    fn never_contact_source_idms_makes_the_first_mirror_the_server() {
        let review = include_str!(
            "../../tests/fixtures/admissionreview/v1.26/imagedigestmirrorset-create-validate.json"
        );
        let object =
            serde_json::from_str::<Value>(review).expect("JSON")["request"]["object"].clone();
        assert_eq!(
            findings(&MirrorPolicy::default(), "ImageDigestMirrorSet", &object),
            Vec::new()
        );
        assert_eq!(
            findings(&windows(), "ImageDigestMirrorSet", &object),
            vec![(
                "docker.io".to_string(),
                "mirror.example:5000".to_string(),
                format!(
                    "ImageDigestMirrorSet spec.imageDigestMirrors[0].mirrors[0] on Windows nodes has \
                     NeverContactSource, which makes mirror.example:5000 the hosts.toml server, \
                     answering tag pulls for every repository of docker.io (the Windows MCO widens \
                     docker.io/library/nginx -> mirror.example:5000/library/nginx to docker.io -> \
                     mirror.example:5000): {RISK}"
                ),
            )]
        );
        let allowed = MirrorPolicy {
            allow: vec![AllowedMirror {
                source: "docker.io".into(),
                mirror: "mirror.example:5000".into(),
            }],
            ..windows()
        };
        assert_eq!(
            findings(&allowed, "ImageDigestMirrorSet", &object),
            Vec::new()
        );
    }

    #[rstest]
    #[case::allow_contacting_source(json!([{"source": "r.example/ubi9/ubi", "mirrors": ["m.example/ubi9/ubi"], "mirrorSourcePolicy": "AllowContactingSource"}]), &[])]
    #[case::unset_policy(json!([{"source": "r.example/ubi9/ubi", "mirrors": ["m.example/ubi9/ubi"]}]), &[])]
    #[case::mirror_on_the_source_host(json!([{"source": "r.example/a", "mirrors": ["r.example/b/a"], "mirrorSourcePolicy": "NeverContactSource"}]), &[])]
    #[case::server_is_the_alphabetically_first_host(
        json!([{"source": "r.example/ubi9/ubi", "mirrors": ["z.example/ubi9/ubi", "b.example/ubi9/ubi"], "mirrorSourcePolicy": "NeverContactSource"}]),
        &[("r.example", "b.example", "spec.imageDigestMirrors[0].mirrors[1]")]
    )]
    #[case::entries_of_one_host_merge(
        json!([
            {"source": "r.example/a", "mirrors": ["b.example/a"], "mirrorSourcePolicy": "AllowContactingSource"},
            {"source": "r.example/b", "mirrors": ["z.example/b"], "mirrorSourcePolicy": "NeverContactSource"},
        ]),
        &[("r.example", "b.example", "spec.imageDigestMirrors[0].mirrors[0]")]
    )]
    #[case::an_unset_first_policy_is_kept(
        json!([
            {"source": "r.example/a", "mirrors": ["b.example/a"]},
            {"source": "r.example/b", "mirrors": ["z.example/b"], "mirrorSourcePolicy": "NeverContactSource"},
        ]),
        &[]
    )]
    fn idms_on_windows(#[case] entries: Value, #[case] want: &[(&str, &str, &str)]) {
        let got: Vec<(String, String, String)> =
            findings(&windows(), "ImageDigestMirrorSet", &idms(entries))
                .into_iter()
                .map(|(s, m, message)| {
                    let at = message.split(' ').nth(1).unwrap_or_default().to_string();
                    (s, m, at)
                })
                .collect();
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(s, m, at)| (s.to_string(), m.to_string(), at.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn itms_on_windows_widens_every_mirror_to_its_host() {
        let object = itms(
            json!([{"source": "registry.example/team", "mirrors": ["mirror.example:5000/team", "registry.example/team"]}]),
        );
        assert_eq!(
            findings(&windows(), "ImageTagMirrorSet", &object),
            vec![
                (
                    "registry.example/team".to_string(),
                    "mirror.example:5000/team".to_string(),
                    format!(
                        "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] lets \
                         mirror.example:5000/team serve tag pulls for registry.example/team: {RISK}"
                    ),
                ),
                (
                    "registry.example".to_string(),
                    "mirror.example:5000".to_string(),
                    format!(
                        "ImageTagMirrorSet spec.imageTagMirrors[0].mirrors[0] on Windows nodes lets \
                         mirror.example:5000 serve tag pulls for every repository of registry.example \
                         (the Windows MCO widens registry.example/team -> mirror.example:5000/team to \
                         registry.example -> mirror.example:5000): {RISK}"
                    ),
                ),
            ]
        );
        // Allowing the Linux pair does not allow the widened one.
        let linux_only = MirrorPolicy {
            allow: vec![AllowedMirror {
                source: "registry.example/team".into(),
                mirror: "mirror.example:5000/team".into(),
            }],
            ..windows()
        };
        assert_eq!(findings(&linux_only, "ImageTagMirrorSet", &object).len(), 1);
    }

    #[test]
    fn itms_of_a_whole_host_is_reported_once() {
        let object = itms(json!([{"source": "registry.example", "mirrors": ["mirror.example"]}]));
        let found = findings(&windows(), "ImageTagMirrorSet", &object);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].0.as_str(), found[0].1.as_str()),
            ("registry.example", "mirror.example")
        );
    }

    #[test]
    fn wrong_policy_type_is_an_error() {
        let object = idms(
            json!([{"source": "r.example", "mirrors": ["m.example"], "mirrorSourcePolicy": 1}]),
        );
        assert_eq!(
            check(
                &windows(),
                "config.openshift.io",
                "ImageDigestMirrorSet",
                &object
            )
            .expect_err("malformed")
            .to_string(),
            "ImageDigestMirrorSet spec.imageDigestMirrors[0].mirrorSourcePolicy: must be a string"
        );
    }
}
