//! The policy's `verify` list: which images must be signed, and by whom. Each entry matches
//! images by the globs of `exempt.images` (on the normalised reference, with and without its
//! digest) and names the cosign public keys and the keyless identities (OIDC issuer and subject,
//! exact or by regular expression, under a Sigstore trusted root read from a file) it trusts,
//! any one of which may sign, and where the keys' signatures must be logged (a trusted root's
//! transparency logs); every entry an image matches must hold. Keys, inline or in files
//! (a mounted Secret's or ConfigMap's key), trusted roots and patterns are read, parsed and
//! compiled at load, so one that cannot be is a load error naming its field, never an
//! admission's.
//!
//! Owns: the entries' schema, their validation, and which entries an image matches. Never:
//! fetches or judges a signature (`registry` fetches, `signatures` judges).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::{glob, hosts};
use crate::reference::Reference;
use crate::signatures::trusted_root::MAX_TRUSTED_ROOT_BYTES;
use crate::signatures::{Identity, Keyless, Matcher, PublicKey, Trust, TrustedRoot};

/// One entry of `verify`, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyEntry {
    /// Globs on the normalised reference (`registry.example/team/*`).
    pub images: Vec<String>,
    /// The cosign public keys trusted (any of them).
    #[serde(default)]
    pub keys: Vec<KeySource>,
    /// The keyless identities trusted (any of them), under a trusted root.
    #[serde(default)]
    pub keyless: Option<KeylessEntry>,
    /// Where the entry's key signatures must be logged (as `cosign verify --key` checks by
    /// default); without it, a key's signature counts unlogged (as `--insecure-ignore-tlog`).
    #[serde(default, rename = "transparencyLog")]
    pub transparency_log: Option<TransparencyLogEntry>,
}

/// The transparency logs a key's signature must be logged in: those of a Sigstore trusted root
/// (its `tlogs`), given as a file; verification makes no call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TransparencyLogEntry {
    pub trusted_root: PathBuf,
}

/// Keyless signing (`cosign sign` without a key: a Fulcio certificate logged in Rekor) as an
/// entry trusts it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeylessEntry {
    /// The Sigstore instance's `trusted_root.json` (`cosign trusted-root create`, or the public
    /// good instance's from its TUF repository), a mounted file: verification makes no call.
    pub trusted_root: PathBuf,
    /// Who may sign (any of them).
    pub identities: Vec<IdentityEntry>,
    /// Trust certificates no CT log of the root published (no SCT), as `cosign verify
    /// --insecure-ignore-sct` and policy-controller's `insecureIgnoreSCT`: for a private
    /// Sigstore without a CT log. Off by default; a root without `ctlogs` then fails to load.
    #[serde(default, rename = "insecureIgnoreSCT")]
    pub insecure_ignore_sct: bool,
}

/// One identity: the OIDC issuer and the certificate's subject (email or URI), each exact or
/// a regular expression (matching anywhere in the text, as cosign's `…-regexp` flags: anchor
/// it with `^…$`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IdentityEntry {
    #[serde(default)]
    pub issuer: Option<String>,
    #[serde(default)]
    pub issuer_reg_exp: Option<String>,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub subject_reg_exp: Option<String>,
}

/// A public key: inline, or a file (a mounted Secret's or ConfigMap's key), read when the
/// policy is loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySource {
    /// The key in PEM (`-----BEGIN PUBLIC KEY-----`), as `cosign generate-key-pair` writes it.
    #[serde(default)]
    pub pem: Option<String>,
    /// A file holding the key in PEM (`cosign.pub`).
    #[serde(default)]
    pub file: Option<PathBuf>,
}

/// The largest key file read.
const MAX_KEY_FILE_BYTES: u64 = 64 << 10;

/// A validated entry: its position in the list (what a denial names), the repositories its
/// globs cover (normalised: [`repository_glob`]) and its trust.
#[derive(Debug, Clone)]
pub struct VerifyRule {
    pub index: usize,
    pub images: Vec<String>,
    repositories: Vec<String>,
    pub trust: Arc<Trust>,
}

/// Why a `verify` entry cannot be used: the field and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyInvalid {
    pub field: String,
    pub problem: String,
}

/// Validates every entry.
pub fn compile(entries: &[VerifyEntry]) -> Result<Vec<VerifyRule>, VerifyInvalid> {
    let invalid = |field: String, problem: String| VerifyInvalid { field, problem };
    let mut rules = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        if entry.images.is_empty() {
            return Err(invalid(
                format!("verify[{i}].images"),
                "must name at least one image glob".to_string(),
            ));
        }
        if let Some(j) = entry.images.iter().position(|g| g.trim().is_empty()) {
            return Err(invalid(
                format!("verify[{i}].images[{j}]"),
                "must not be empty".to_string(),
            ));
        }
        if entry.keys.is_empty() && entry.keyless.is_none() {
            return Err(invalid(
                format!("verify[{i}].keys"),
                "must name at least one public key, unless the entry names keyless identities"
                    .to_string(),
            ));
        }
        let mut keys = Vec::with_capacity(entry.keys.len());
        for (j, key) in entry.keys.iter().enumerate() {
            let (field, pem) = match (&key.pem, &key.file) {
                (Some(pem), None) => (format!("verify[{i}].keys[{j}].pem"), pem.clone()),
                (None, Some(file)) => {
                    let field = format!("verify[{i}].keys[{j}].file");
                    let pem = read_file(file, MAX_KEY_FILE_BYTES, "a public key")
                        .map_err(|problem| invalid(field.clone(), problem))?;
                    let pem = String::from_utf8(pem)
                        .map_err(|_| invalid(field.clone(), "is not text".to_string()))?;
                    (field, pem)
                }
                _ => {
                    return Err(invalid(
                        format!("verify[{i}].keys[{j}]"),
                        "needs one of pem and file".to_string(),
                    ))
                }
            };
            let key = PublicKey::from_pem(&pem).map_err(|e| invalid(field, e.to_string()))?;
            keys.push(key);
        }
        let keyless = entry
            .keyless
            .as_ref()
            .map(|keyless| compile_keyless(keyless, &format!("verify[{i}].keyless")))
            .transpose()?;
        let mut trust = Trust::new(keys, keyless);
        if let Some(log) = &entry.transparency_log {
            let field = format!("verify[{i}].transparencyLog");
            if entry.keys.is_empty() {
                return Err(invalid(
                    field,
                    "applies to the entry's keys, and it names none (keyless signatures are \
                     always checked against their log)"
                        .to_string(),
                ));
            }
            let root = read_root(&log.trusted_root, &format!("{field}.trustedRoot"))?;
            trust = trust.with_key_log(Arc::new(root));
        }
        rules.push(VerifyRule {
            index: i,
            images: entry.images.clone(),
            repositories: entry.images.iter().map(|g| repository_glob(g)).collect(),
            trust: Arc::new(trust),
        });
    }
    Ok(rules)
}

/// The repository part of an image glob, its host normalised as [`hosts::normalize_host`]
/// does: `REGISTRY.example:443/team/app:1.*` covers `registry.example/team/app`.
fn repository_glob(glob: &str) -> String {
    let without_digest = glob.split('@').next().unwrap_or(glob);
    let name_start = without_digest.rfind('/').map_or(0, |i| i + 1);
    let repository = match without_digest[name_start..].find(':') {
        Some(colon) if name_start > 0 => &without_digest[..name_start + colon],
        _ => without_digest,
    };
    match repository.split_once('/') {
        Some((host, path)) => format!("{}/{path}", hosts::normalize_host(host)),
        None => repository.to_string(),
    }
}

/// An entry's keyless trust: its root read and parsed, its identities compiled.
fn compile_keyless(entry: &KeylessEntry, field: &str) -> Result<Keyless, VerifyInvalid> {
    let invalid = |field: String, problem: String| VerifyInvalid { field, problem };
    let root_field = format!("{field}.trustedRoot");
    let root = read_root(&entry.trusted_root, &root_field)?;
    if !entry.insecure_ignore_sct && !root.has_ct_logs() {
        return Err(invalid(
            root_field,
            format!(
                "{}: names no certificate transparency log (ctlogs), so no certificate's SCT \
                 can be checked; set {field}.insecureIgnoreSCT: true to trust certificates \
                 without one",
                entry.trusted_root.display()
            ),
        ));
    }
    if entry.identities.is_empty() {
        return Err(invalid(
            format!("{field}.identities"),
            "must name at least one identity (issuer and subject)".to_string(),
        ));
    }
    let mut identities = Vec::with_capacity(entry.identities.len());
    for (j, identity) in entry.identities.iter().enumerate() {
        let at = format!("{field}.identities[{j}]");
        let matcher =
            |exact: &Option<String>, pattern: &Option<String>, name: &str| match (exact, pattern) {
                (Some(exact), None) if !exact.is_empty() => Ok(Matcher::Exact(exact.clone())),
                (None, Some(pattern)) if !pattern.is_empty() => {
                    Matcher::pattern(pattern).map_err(|e| invalid(format!("{at}.{name}RegExp"), e))
                }
                _ => Err(invalid(
                    at.clone(),
                    format!("needs one of {name} and {name}RegExp, not empty"),
                )),
            };
        identities.push(Identity {
            issuer: matcher(&identity.issuer, &identity.issuer_reg_exp, "issuer")?,
            subject: matcher(&identity.subject, &identity.subject_reg_exp, "subject")?,
        });
    }
    Ok(if entry.insecure_ignore_sct {
        Keyless::ignoring_sct(Arc::new(root), identities)
    } else {
        Keyless::new(Arc::new(root), identities)
    })
}

/// The trusted root in the file `path` (the policy's `field`), read and parsed.
fn read_root(path: &Path, field: &str) -> Result<TrustedRoot, VerifyInvalid> {
    let invalid = |problem: String| VerifyInvalid {
        field: field.to_string(),
        problem,
    };
    let text = read_file(path, MAX_TRUSTED_ROOT_BYTES as u64, "a trusted root").map_err(invalid)?;
    TrustedRoot::parse(&text).map_err(|e| invalid(format!("{}: {e}", path.display())))
}

/// A file's bytes, at most `max`: `what` names what it should hold.
fn read_file(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "{} is larger than {what} ({max} bytes at most)",
            path.display()
        ));
    }
    Ok(bytes)
}

/// `host/path` of `reference` as the entries' globs are matched against it: its host
/// normalised as [`hosts::normalize_host`]. Made once per image, whatever the entries.
pub fn repository_of(reference: &Reference) -> String {
    let host = hosts::normal_host(reference.domain());
    let path = reference.path();
    let mut repository = String::with_capacity(host.len() + 1 + path.len());
    repository.push_str(&host);
    repository.push('/');
    repository.push_str(path);
    repository
}

// === impl VerifyRule ===

impl VerifyRule {
    /// Whether this entry covers the repository [`repository_of`] gives: a glob covers a
    /// repository, whatever tag or digest the image names (a tag written beside a digest is the
    /// author's to choose, so it cannot decide whether a digest is verified), its host compared
    /// as the host rules compare hosts (case, `:443`, Docker Hub's aliases).
    pub fn covers(&self, repository: &str) -> bool {
        self.repositories
            .iter()
            .any(|glob| glob::matches(glob, repository))
    }

    /// `verify[0]`: how a denial names the entry.
    pub fn name(&self) -> String {
        format!("verify[{}]", self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signatures::key::tests::key_pair;

    fn entry(images: &[&str], pems: &[String]) -> VerifyEntry {
        VerifyEntry {
            images: images.iter().map(|s| s.to_string()).collect(),
            keys: pems
                .iter()
                .map(|pem| KeySource {
                    pem: Some(pem.clone()),
                    file: None,
                })
                .collect(),
            keyless: None,
            transparency_log: None,
        }
    }

    #[test]
    fn each_problem_names_its_field() {
        let pem = key_pair().1;
        let cases = [
            (entry(&[], std::slice::from_ref(&pem)), "verify[0].images"),
            (
                entry(&["a/*", " "], std::slice::from_ref(&pem)),
                "verify[0].images[1]",
            ),
            (entry(&["a/*"], &[]), "verify[0].keys"),
            (
                entry(&["a/*"], &[pem.clone(), "not a key".to_string()]),
                "verify[0].keys[1].pem",
            ),
        ];
        for (bad, field) in cases {
            let e = compile(&[bad]).unwrap_err();
            assert_eq!(e.field, field, "{e:?}");
        }
    }

    #[test]
    fn a_key_file_is_read_at_load_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("cosign.pub");
        std::fs::write(&good, key_pair().1).unwrap();
        let huge = dir.path().join("huge.pub");
        std::fs::write(&huge, "A".repeat(70_000)).unwrap();
        let of = |file: &Path| VerifyEntry {
            images: vec!["a/*".to_string()],
            keys: vec![KeySource {
                pem: None,
                file: Some(file.to_path_buf()),
            }],
            keyless: None,
            transparency_log: None,
        };
        assert_eq!(compile(&[of(&good)]).unwrap()[0].trust.keys().len(), 1);
        let e = compile(&[of(&huge)]).unwrap_err();
        assert_eq!(e.field, "verify[0].keys[0].file");
        assert!(e.problem.contains("larger than a public key"), "{e:?}");
        let e = compile(&[of(&dir.path().join("missing"))]).unwrap_err();
        assert!(e.problem.starts_with("cannot read "), "{e:?}");
        let both = VerifyEntry {
            keys: vec![KeySource {
                pem: Some(key_pair().1),
                file: Some(good.clone()),
            }],
            ..of(&good)
        };
        assert_eq!(compile(&[both]).unwrap_err().field, "verify[0].keys[0]");
    }

    #[test]
    fn a_transparency_log_is_read_at_load_for_the_entrys_keys() {
        use crate::signatures::keyless::test_authority::TestSigstore;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("trusted_root.json");
        std::fs::write(&root, TestSigstore::new().trusted_root()).unwrap();
        let logged = |trusted_root: &Path| VerifyEntry {
            transparency_log: Some(TransparencyLogEntry {
                trusted_root: trusted_root.to_path_buf(),
            }),
            ..entry(&["a/*"], &[key_pair().1])
        };
        let rules = compile(&[logged(&root)]).unwrap();
        assert!(rules[0].trust.key_log().is_some());
        // Another log's root: another trust.
        let other_root = dir.path().join("other_root.json");
        std::fs::write(&other_root, TestSigstore::new().trusted_root()).unwrap();
        let pem = key_pair().1;
        let with = |path: &Path| VerifyEntry {
            transparency_log: Some(TransparencyLogEntry {
                trusted_root: path.to_path_buf(),
            }),
            ..entry(&["a/*"], std::slice::from_ref(&pem))
        };
        let fingerprint = |path: &Path| {
            compile(&[with(path)]).unwrap()[0]
                .trust
                .fingerprint()
                .to_string()
        };
        assert_ne!(fingerprint(&root), fingerprint(&other_root));
        assert_eq!(fingerprint(&root), fingerprint(&root));
        let plain = compile(&[entry(&["a/*"], &[key_pair().1])]).unwrap();
        assert!(plain[0].trust.key_log().is_none());
        let e = compile(&[logged(&dir.path().join("missing"))]).unwrap_err();
        assert_eq!(e.field, "verify[0].transparencyLog.trustedRoot");
        assert!(e.problem.starts_with("cannot read "), "{e:?}");
        // Keyless only: its log is always checked; the entry's transparencyLog has no keys.
        let no_keys = VerifyEntry {
            keys: Vec::new(),
            keyless: Some(KeylessEntry {
                trusted_root: root.clone(),
                identities: vec![IdentityEntry {
                    issuer: Some("https://i".into()),
                    subject: Some("s".into()),
                    ..Default::default()
                }],
                insecure_ignore_sct: false,
            }),
            ..logged(&root)
        };
        let e = compile(&[no_keys]).unwrap_err();
        assert_eq!(e.field, "verify[0].transparencyLog");
        assert!(e.problem.contains("names none"), "{e:?}");
        let yaml =
            "images: [a/*]\nkeys: [{file: /k.pub}]\ntransparencyLog:\n  trustedRoot: /r.json\n";
        let parsed: VerifyEntry = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(
            parsed.transparency_log.unwrap().trusted_root,
            PathBuf::from("/r.json")
        );
    }

    #[test]
    fn an_entry_covers_repositories_however_the_image_is_written() {
        let rules = compile(&[entry(
            &["registry.example/team/*", "Other.Example:443/app:1.*"],
            &[key_pair().1],
        )])
        .unwrap();
        let rule = &rules[0];
        let digest = format!("sha256:{}", "a".repeat(64));
        for (image, matched) in [
            ("registry.example/team/app:1.0".to_string(), true),
            (format!("registry.example/team/app:1.0@{digest}"), true),
            (format!("registry.example/team/app@{digest}"), true),
            // The host as the node reads it: any case, the default port.
            (format!("REGISTRY.Example/team/app@{digest}"), true),
            (format!("registry.example:443/team/app@{digest}"), true),
            // A tag is the author's to choose: the glob's tag part does not narrow it.
            (format!("other.example/app:debug@{digest}"), true),
            (format!("other.example/app@{digest}"), true),
            ("registry.example/other/app:1.0".to_string(), false),
            ("registry.example:5000/team/app:1.0".to_string(), false),
        ] {
            let reference = Reference::parse(&image).unwrap();
            assert_eq!(rule.covers(&repository_of(&reference)), matched, "{image}");
        }
        assert_eq!(rule.name(), "verify[0]");
    }

    #[test]
    fn a_keyless_entry_reads_its_root_and_compiles_its_identities_at_load() {
        use crate::signatures::keyless::test_authority::TestSigstore;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("trusted_root.json");
        std::fs::write(&root, TestSigstore::new().trusted_root()).unwrap();
        let identity = |issuer: &str, subject_reg_exp: &str| IdentityEntry {
            issuer: Some(issuer.to_string()),
            subject_reg_exp: Some(subject_reg_exp.to_string()),
            ..Default::default()
        };
        let of = |trusted_root: &Path, identities: Vec<IdentityEntry>| VerifyEntry {
            images: vec!["a/*".to_string()],
            keys: Vec::new(),
            keyless: Some(KeylessEntry {
                trusted_root: trusted_root.to_path_buf(),
                identities,
                insecure_ignore_sct: false,
            }),
            transparency_log: None,
        };
        let good = of(
            &root,
            vec![identity("https://issuer.example", "^https://ci/.*$")],
        );
        let rules = compile(std::slice::from_ref(&good)).unwrap();
        assert!(rules[0].trust.keyless().is_some());
        assert!(rules[0].trust.keys().is_empty());

        let not_root = dir.path().join("not-root.json");
        std::fs::write(&not_root, "{}").unwrap();
        let huge = dir.path().join("huge.json");
        std::fs::write(&huge, vec![b' '; MAX_TRUSTED_ROOT_BYTES + 1]).unwrap();
        // A root without CT logs: no SCT could be checked.
        let mut without_ct: serde_json::Value =
            serde_json::from_str(&TestSigstore::new().trusted_root()).unwrap();
        without_ct["ctlogs"] = serde_json::json!([]);
        let no_ct = dir.path().join("no-ct.json");
        std::fs::write(&no_ct, without_ct.to_string()).unwrap();
        let mut ignoring = of(&no_ct, good.keyless.clone().unwrap().identities);
        if let Some(keyless) = ignoring.keyless.as_mut() {
            keyless.insecure_ignore_sct = true;
        }
        compile(std::slice::from_ref(&ignoring)).unwrap();
        // The same root, SCTs ignored or not: another trust, so no verdict is shared.
        let mut good_ignoring = good.clone();
        if let Some(keyless) = good_ignoring.keyless.as_mut() {
            keyless.insecure_ignore_sct = true;
        }
        let rules_ignoring = compile(std::slice::from_ref(&good_ignoring)).unwrap();
        assert_ne!(
            rules_ignoring[0].trust.fingerprint(),
            rules[0].trust.fingerprint()
        );
        let cases = [
            (
                of(&no_ct, good.keyless.clone().unwrap().identities),
                "verify[0].keyless.trustedRoot",
                "names no certificate transparency log (ctlogs)",
            ),
            (
                of(
                    &dir.path().join("missing"),
                    good.keyless.clone().unwrap().identities,
                ),
                "verify[0].keyless.trustedRoot",
                "cannot read",
            ),
            (
                of(&not_root, good.keyless.clone().unwrap().identities),
                "verify[0].keyless.trustedRoot",
                "mediaType",
            ),
            (
                of(&huge, good.keyless.clone().unwrap().identities),
                "verify[0].keyless.trustedRoot",
                "larger than a trusted root",
            ),
            (
                of(&root, Vec::new()),
                "verify[0].keyless.identities",
                "at least one identity",
            ),
            (
                of(&root, vec![identity("https://issuer.example", "(")]),
                "verify[0].keyless.identities[0].subjectRegExp",
                "",
            ),
            (
                of(
                    &root,
                    vec![IdentityEntry {
                        issuer: Some("i".into()),
                        ..Default::default()
                    }],
                ),
                "verify[0].keyless.identities[0]",
                "subject and subjectRegExp",
            ),
            (
                of(
                    &root,
                    vec![IdentityEntry {
                        issuer: Some("i".into()),
                        issuer_reg_exp: Some("i".into()),
                        subject: Some("s".into()),
                        ..Default::default()
                    }],
                ),
                "verify[0].keyless.identities[0]",
                "issuer and issuerRegExp",
            ),
        ];
        for (entry, field, problem) in cases {
            let e = compile(&[entry]).unwrap_err();
            assert_eq!(e.field, field, "{e:?}");
            assert!(e.problem.contains(problem), "{e:?}");
        }
        let yaml = "images: [a/*]\nkeyless:\n  trustedRoot: /r.json\n  insecureIgnoreSCT: true\n  identities:\n  - issuer: https://i\n    subjectRegExp: ^x$\n";
        let entry: VerifyEntry = serde_saphyr::from_str(yaml).unwrap();
        let keyless = entry.keyless.unwrap();
        assert_eq!(
            keyless.identities[0].subject_reg_exp.as_deref(),
            Some("^x$")
        );
        assert!(keyless.insecure_ignore_sct);
    }
}
