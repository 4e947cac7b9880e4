//! kubelet's `CredentialProviderConfig` (`kubelet.config.k8s.io/v1`), read and validated as
//! kubelet reads it (kubernetes `pkg/credentialprovider/plugin/config.go`:
//! `readCredentialProviderConfig`, `decode`, `validateCredentialProviderConfig`), so the file a
//! node's kubelet runs with is the file pinhook runs with.
//!
//! Owns: the file format (a file, or a directory of `*.json`/`*.yaml`/`*.yml` files merged in
//! name order, as kubelet 1.34 allows), its validation, a provider's `tokenAttributes` (KEP-4412,
//! kubelet 1.34's shape: `cacheType` required) checked as kubelet checks them, and Go duration
//! strings. Never: runs a plugin or asks for a token.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::go_duration::{parse as parse_go_duration, GoDuration};
use crate::registry::keyring::is_valid_image_pattern;

/// The config API versions kubelet decodes (all three share this shape).
const CONFIG_API_VERSIONS: &[&str] = &[
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];
/// The plugin protocol versions kubelet speaks (`apiVersions` in plugin.go).
pub(super) const PROTOCOL_API_VERSIONS: &[&str] = &[
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];

/// Why the credential provider config cannot be used; pinhook refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ProviderConfigError {
    #[error("failed to read credential provider config '{path}'")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("credential provider config directory '{path}' holds no .json, .yaml or .yml file")]
    EmptyDirectory { path: PathBuf },
    #[error("failed to parse credential provider config '{path}'")]
    Parse {
        path: PathBuf,
        // Boxed: the YAML error is large, and this error travels up to `AppError`.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    #[error("credential provider config '{path}': {problem}")]
    Invalid { path: PathBuf, problem: String },
    #[error("credential provider binary directory '{path}' does not exist")]
    MissingBinDir { path: PathBuf },
    #[error("credential provider {provider:?}: no executable '{path}'")]
    MissingBinary { provider: String, path: PathBuf },
}

/// One provider as configured, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    pub name: String,
    pub match_images: Vec<String>,
    pub default_cache_duration: Duration,
    /// The protocol version requests are sent in, and answers must carry.
    pub api_version: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `bin_dir/name`.
    pub path: PathBuf,
    /// `tokenAttributes`: the plugin is handed a token of the Pod's ServiceAccount.
    pub token: Option<TokenAttributes>,
}

/// A provider's `tokenAttributes` (kubelet `ServiceAccountTokenAttributes`, config v1 only),
/// validated as kubelet 1.34 validates them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenAttributes {
    /// The one audience the token is requested for.
    pub audience: String,
    pub cache_type: TokenCacheType,
    /// When true, a Pod with no ServiceAccount gets no run of this plugin; when false, such a
    /// Pod's images are asked about with no token.
    pub require_service_account: bool,
    /// Annotations of the ServiceAccount handed to the plugin; one missing: the plugin is not
    /// run for that Pod (kubelet logs it and pulls without it).
    pub required_annotation_keys: Vec<String>,
    /// Handed to the plugin when the ServiceAccount has them.
    pub optional_annotation_keys: Vec<String>,
}

/// What an answer given with a token is cached under (`cacheType`), beside its `cacheKeyType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenCacheType {
    /// Per token: the answer holds for the token it was given (and its ServiceAccount).
    Token,
    /// Per ServiceAccount (namespace, name, UID and the annotations handed over).
    ServiceAccount,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ConfigFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProvider {
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<RawEnv>,
    token_attributes: Option<RawTokenAttributes>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTokenAttributes {
    #[serde(default)]
    service_account_token_audience: String,
    #[serde(default)]
    cache_type: String,
    require_service_account: Option<bool>,
    #[serde(default)]
    required_service_account_annotation_keys: Vec<String>,
    #[serde(default)]
    optional_service_account_annotation_keys: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    name: String,
    value: String,
}

/// Reads `config` (a file or a directory) and checks every provider's binary in `bin_dir`.
pub fn load(config: &Path, bin_dir: &Path) -> Result<Vec<ProviderSpec>, ProviderConfigError> {
    if !bin_dir.is_dir() {
        return Err(ProviderConfigError::MissingBinDir {
            path: bin_dir.to_path_buf(),
        });
    }
    let mut specs = Vec::new();
    let mut seen = HashSet::new();
    for file in config_files(config)? {
        let text = std::fs::read_to_string(&file).map_err(|source| ProviderConfigError::Read {
            path: file.clone(),
            source,
        })?;
        for spec in parse(&file, &text, bin_dir)? {
            if !seen.insert(spec.name.clone()) {
                return Err(invalid(
                    &file,
                    format!("duplicate provider name {:?}", spec.name),
                ));
            }
            specs.push(spec);
        }
    }
    for spec in &specs {
        if !is_executable(&spec.path) {
            return Err(ProviderConfigError::MissingBinary {
                provider: spec.name.clone(),
                path: spec.path.clone(),
            });
        }
    }
    Ok(specs)
}

/// The providers of one config document, validated as kubelet validates them.
pub(super) fn parse(
    path: &Path,
    text: &str,
    bin_dir: &Path,
) -> Result<Vec<ProviderSpec>, ProviderConfigError> {
    let file: ConfigFile =
        serde_saphyr::from_str(text).map_err(|source| ProviderConfigError::Parse {
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
    if file.kind != "CredentialProviderConfig" {
        return Err(invalid(
            path,
            format!("kind {:?} is not CredentialProviderConfig", file.kind),
        ));
    }
    if !CONFIG_API_VERSIONS.contains(&file.api_version.as_str()) {
        return Err(invalid(
            path,
            format!(
                "apiVersion {:?} is not one of {CONFIG_API_VERSIONS:?}",
                file.api_version
            ),
        ));
    }
    if file.providers.is_empty() {
        return Err(invalid(
            path,
            "at least 1 item in providers is required".into(),
        ));
    }
    // Only kubelet.config.k8s.io/v1 has the field: kubelet's strict decoder refuses it in the
    // older versions.
    if file.api_version != CONFIG_API_VERSIONS[0] {
        if let Some(raw) = file.providers.iter().find(|p| p.token_attributes.is_some()) {
            return Err(invalid(
                path,
                format!(
                    "provider {:?}: tokenAttributes is only in apiVersion {}",
                    raw.name, CONFIG_API_VERSIONS[0]
                ),
            ));
        }
    }
    file.providers
        .into_iter()
        .map(|raw| validate(path, raw, bin_dir))
        .collect()
}

fn validate(
    path: &Path,
    raw: RawProvider,
    bin_dir: &Path,
) -> Result<ProviderSpec, ProviderConfigError> {
    let name = raw.name;
    let problem = |what: String| invalid(path, format!("provider {name:?}: {what}"));
    if name.is_empty() || name.contains(['/', ' ']) || name == "." || name == ".." {
        return Err(problem(
            "name must be non-empty, not '.' or '..', without '/' or spaces".into(),
        ));
    }
    if !PROTOCOL_API_VERSIONS.contains(&raw.api_version.as_str()) {
        return Err(problem(format!(
            "apiVersion {:?} is not one of {PROTOCOL_API_VERSIONS:?}",
            raw.api_version
        )));
    }
    if raw.match_images.is_empty() {
        return Err(problem("at least 1 item in matchImages is required".into()));
    }
    if let Some(bad) = raw.match_images.iter().find(|p| !is_valid_image_pattern(p)) {
        return Err(problem(format!("match image {bad:?} is invalid")));
    }
    let default_cache_duration = match raw.default_cache_duration.as_deref() {
        None => return Err(problem("defaultCacheDuration is required".into())),
        Some(text) => match parse_go_duration(text) {
            Some(GoDuration::NonNegative(duration)) => duration,
            Some(GoDuration::Negative) => {
                return Err(problem("defaultCacheDuration must be at least 0".into()))
            }
            // (past about 292 years Go's parser refuses it, and so kubelet)
            Some(GoDuration::PastGoLimit(_)) | None => {
                return Err(problem(format!(
                    "defaultCacheDuration {text:?} is not a duration"
                )))
            }
        },
    };
    let token = match raw.token_attributes {
        None => None,
        Some(attributes) => Some(
            token_attributes(attributes, &raw.api_version)
                .map_err(|what| problem(format!("tokenAttributes.{what}")))?,
        ),
    };
    Ok(ProviderSpec {
        path: bin_dir.join(&name),
        name,
        match_images: raw.match_images,
        default_cache_duration,
        api_version: raw.api_version,
        args: raw.args,
        env: raw.env.into_iter().map(|e| (e.name, e.value)).collect(),
        token,
    })
}

/// kubelet's `validateCredentialProviderConfig` for `tokenAttributes` (1.34, gate on); the
/// error names the field under `tokenAttributes`.
fn token_attributes(
    raw: RawTokenAttributes,
    protocol_version: &str,
) -> Result<TokenAttributes, String> {
    if raw.service_account_token_audience.is_empty() {
        return Err("serviceAccountTokenAudience: Required value".into());
    }
    let Some(require_service_account) = raw.require_service_account else {
        return Err("requireServiceAccount: Required value".into());
    };
    if protocol_version != PROTOCOL_API_VERSIONS[0] {
        return Err(format!(
            ": tokenAttributes is only supported for {} API version",
            PROTOCOL_API_VERSIONS[0]
        ));
    }
    let required = raw.required_service_account_annotation_keys;
    let optional = raw.optional_service_account_annotation_keys;
    if !require_service_account && !required.is_empty() {
        return Err(
            "requiredServiceAccountAnnotationKeys: requireServiceAccount cannot be false \
                    when requiredServiceAccountAnnotationKeys is set"
                .into(),
        );
    }
    for (field, keys) in [
        ("requiredServiceAccountAnnotationKeys", &required),
        ("optionalServiceAccountAnnotationKeys", &optional),
    ] {
        let mut seen = HashSet::new();
        for key in keys {
            if !is_qualified_name(&key.to_lowercase()) {
                return Err(format!("{field}: {key:?} is not a qualified name"));
            }
            if !seen.insert(key) {
                return Err(format!("{field}: duplicate value {key:?}"));
            }
        }
    }
    if let Some(both) = required.iter().find(|k| optional.contains(k)) {
        return Err(format!(
            ": annotation keys cannot be both required and optional ({both:?})"
        ));
    }
    let cache_type = match raw.cache_type.as_str() {
        "Token" => TokenCacheType::Token,
        "ServiceAccount" => TokenCacheType::ServiceAccount,
        "" => {
            return Err("cacheType: cacheType is required to be set when tokenAttributes is \
                        specified. Supported values are: ServiceAccount, Token"
                .into())
        }
        other => {
            return Err(format!(
                "cacheType: Unsupported value {other:?}: supported values: \"ServiceAccount\", \"Token\""
            ))
        }
    };
    Ok(TokenAttributes {
        audience: raw.service_account_token_audience,
        cache_type,
        require_service_account,
        required_annotation_keys: required,
        optional_annotation_keys: optional,
    })
}

/// apimachinery's `IsQualifiedName`: an optional DNS-1123 subdomain prefix and `/`, then a name
/// of at most 63 characters, alphanumeric at both ends, `-`, `_` and `.` inside.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    let name_ok = (1..=63).contains(&name.len())
        && name.bytes().next().is_some_and(alnum)
        && name.bytes().last().is_some_and(alnum)
        && name
            .bytes()
            .all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'));
    let prefix_ok = prefix.is_none_or(|prefix| {
        let lower = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        (1..=253).contains(&prefix.len())
            && prefix.split('.').all(|label| {
                (1..=63).contains(&label.len())
                    && label.bytes().next().is_some_and(lower)
                    && label.bytes().last().is_some_and(lower)
                    && label.bytes().all(|c| lower(c) || c == b'-')
            })
    });
    name_ok && prefix_ok
}

/// The file, or the directory's config files in name order.
fn config_files(config: &Path) -> Result<Vec<PathBuf>, ProviderConfigError> {
    let read_error = |source| ProviderConfigError::Read {
        path: config.to_path_buf(),
        source,
    };
    let metadata = std::fs::metadata(config).map_err(read_error)?;
    if !metadata.is_dir() {
        return Ok(vec![config.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(config).map_err(read_error)? {
        let path = entry.map_err(read_error)?.path();
        let wanted = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml" | "yml")
        );
        if wanted && !path.is_dir() {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ProviderConfigError::EmptyDirectory {
            path: config.to_path_buf(),
        });
    }
    Ok(files)
}

fn invalid(path: &Path, problem: String) -> ProviderConfigError {
    ProviderConfigError::Invalid {
        path: path.to_path_buf(),
        problem,
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    const BIN: &str = "/usr/libexec/kubernetes/kubelet-plugins";

    fn parsed(text: &str) -> Result<Vec<ProviderSpec>, ProviderConfigError> {
        parse(Path::new("config.yaml"), text, Path::new(BIN))
    }

    #[test]
    fn the_eks_config_reads_as_kubelet_reads_it() {
        let text = r#"
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    matchImages:
      - "*.dkr.ecr.*.amazonaws.com"
      - "*.dkr.ecr.*.amazonaws.com.cn"
    defaultCacheDuration: "12h"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: [get-credentials]
    env:
      - name: AWS_PROFILE
        value: node
"#;
        let specs = parsed(text).expect("valid");
        assert_eq!(
            specs,
            vec![ProviderSpec {
                name: "ecr-credential-provider".into(),
                match_images: vec![
                    "*.dkr.ecr.*.amazonaws.com".into(),
                    "*.dkr.ecr.*.amazonaws.com.cn".into()
                ],
                default_cache_duration: Duration::from_secs(12 * 3600),
                api_version: "credentialprovider.kubelet.k8s.io/v1".into(),
                args: vec!["get-credentials".into()],
                env: vec![("AWS_PROFILE".into(), "node".into())],
                path: Path::new(BIN).join("ecr-credential-provider"),
                token: None,
            }]
        );
    }

    #[test]
    fn token_attributes_read_as_kubelet_1_34_reads_them() {
        let text = r#"{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig",
          "providers":[{"name":"acr","matchImages":["*.azurecr.io"],"defaultCacheDuration":"1m",
          "apiVersion":"credentialprovider.kubelet.k8s.io/v1",
          "tokenAttributes":{"serviceAccountTokenAudience":"api://AzureADTokenExchange",
          "requireServiceAccount":true,"cacheType":"ServiceAccount",
          "requiredServiceAccountAnnotationKeys":["azure.workload.identity/client-id"],
          "optionalServiceAccountAnnotationKeys":["azure.workload.identity/tenant-id"]}}]}"#;
        let specs = parsed(text).expect("valid");
        assert_eq!(
            specs[0].token,
            Some(TokenAttributes {
                audience: "api://AzureADTokenExchange".into(),
                cache_type: TokenCacheType::ServiceAccount,
                require_service_account: true,
                required_annotation_keys: vec!["azure.workload.identity/client-id".into()],
                optional_annotation_keys: vec!["azure.workload.identity/tenant-id".into()],
            })
        );
    }

    #[rstest]
    #[case::no_audience(
        r#"{"requireServiceAccount":true,"cacheType":"Token"}"#,
        "serviceAccountTokenAudience: Required"
    )]
    #[case::no_require(
        r#"{"serviceAccountTokenAudience":"a","cacheType":"Token"}"#,
        "requireServiceAccount: Required"
    )]
    #[case::no_cache_type(
        r#"{"serviceAccountTokenAudience":"a","requireServiceAccount":true}"#,
        "cacheType is required"
    )]
    #[case::bad_cache_type(
        r#"{"serviceAccountTokenAudience":"a","requireServiceAccount":true,"cacheType":"Pod"}"#,
        "Unsupported value \"Pod\""
    )]
    #[case::required_without_account(r#"{"serviceAccountTokenAudience":"a","requireServiceAccount":false,"cacheType":"Token","requiredServiceAccountAnnotationKeys":["k"]}"#, "requireServiceAccount cannot be false")]
    #[case::bad_key(r#"{"serviceAccountTokenAudience":"a","requireServiceAccount":true,"cacheType":"Token","optionalServiceAccountAnnotationKeys":["-bad"]}"#, "not a qualified name")]
    #[case::bad_prefix(r#"{"serviceAccountTokenAudience":"a","requireServiceAccount":true,"cacheType":"Token","optionalServiceAccountAnnotationKeys":["Ex_ample.com/k"]}"#, "not a qualified name")]
    #[case::duplicate(r#"{"serviceAccountTokenAudience":"a","requireServiceAccount":true,"cacheType":"Token","requiredServiceAccountAnnotationKeys":["k","k"]}"#, "duplicate value")]
    #[case::both(r#"{"serviceAccountTokenAudience":"a","requireServiceAccount":true,"cacheType":"Token","requiredServiceAccountAnnotationKeys":["k"],"optionalServiceAccountAnnotationKeys":["k"]}"#, "both required and optional")]
    #[case::unknown_field(r#"{"serviceAccountTokenAudience":"a","requireServiceAccount":true,"cacheType":"Token","audiences":["b"]}"#, "failed to parse")]
    fn invalid_token_attributes_are_refused_with_the_field(
        #[case] attributes: &str,
        #[case] says: &str,
    ) {
        let text = format!(
            r#"{{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig",
              "providers":[{{"name":"p","matchImages":["x"],"defaultCacheDuration":"1m",
              "apiVersion":"credentialprovider.kubelet.k8s.io/v1","tokenAttributes":{attributes}}}]}}"#
        );
        let error = parsed(&text).expect_err("invalid");
        assert!(error.to_string().contains(says), "{error}");
    }

    #[test]
    fn token_attributes_need_the_v1_config_and_the_v1_protocol() {
        let attributes = r#""tokenAttributes":{"serviceAccountTokenAudience":"a","requireServiceAccount":true,"cacheType":"Token"}"#;
        let old_config = format!(
            r#"{{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"CredentialProviderConfig",
              "providers":[{{"name":"p","matchImages":["x"],"defaultCacheDuration":"1m",
              "apiVersion":"credentialprovider.kubelet.k8s.io/v1",{attributes}}}]}}"#
        );
        let error = parsed(&old_config).expect_err("v1beta1 config");
        assert!(
            error
                .to_string()
                .contains("only in apiVersion kubelet.config.k8s.io/v1"),
            "{error}"
        );
        let old_protocol = format!(
            r#"{{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig",
              "providers":[{{"name":"p","matchImages":["x"],"defaultCacheDuration":"1m",
              "apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1",{attributes}}}]}}"#
        );
        let error = parsed(&old_protocol).expect_err("v1beta1 protocol");
        assert!(
            error
                .to_string()
                .contains("only supported for credentialprovider.kubelet.k8s.io/v1"),
            "{error}"
        );
    }

    #[rstest]
    #[case("k", true)]
    #[case("azure.workload.identity/client-id", true)]
    #[case("eks.amazonaws.com/role-arn", true)]
    #[case("a_b.c-d", true)]
    #[case("", false)]
    #[case("/k", false)]
    #[case("a/b/c", false)]
    #[case("-k", false)]
    #[case("k_", false)]
    #[case("ex_ample.com/k", false)]
    #[case("-example.com/k", false)]
    fn annotation_keys_are_qualified_names(#[case] key: &str, #[case] valid: bool) {
        assert_eq!(is_qualified_name(key), valid, "{key}");
        let long = "a".repeat(64);
        assert!(!is_qualified_name(&long));
        assert!(is_qualified_name(&long[..63]));
    }

    #[rstest]
    #[case::no_providers("providers: []", "at least 1 item in providers")]
    #[case::slash_in_name("providers: [{name: a/b, matchImages: [x], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}]", "name")]
    #[case::dot_name("providers: [{name: '..', matchImages: [x], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}]", "name")]
    #[case::no_match_images("providers: [{name: a, defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}]", "matchImages")]
    #[case::bad_match_image("providers: [{name: a, matchImages: ['%zz'], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}]", "match image")]
    #[case::no_cache_duration("providers: [{name: a, matchImages: [x], apiVersion: credentialprovider.kubelet.k8s.io/v1}]", "defaultCacheDuration is required")]
    #[case::negative_cache_duration("providers: [{name: a, matchImages: [x], defaultCacheDuration: -1s, apiVersion: credentialprovider.kubelet.k8s.io/v1}]", "at least 0")]
    #[case::bad_api_version(
        "providers: [{name: a, matchImages: [x], defaultCacheDuration: 1m, apiVersion: v2}]",
        "apiVersion"
    )]
    fn invalid_providers_are_refused_with_the_field(#[case] providers: &str, #[case] says: &str) {
        let text = format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n{providers}\n"
        );
        let error = parsed(&text).expect_err("invalid");
        assert!(error.to_string().contains(says), "{error}");
    }

    #[test]
    fn unknown_fields_and_wrong_kinds_are_errors_as_in_kubelets_strict_decoder() {
        let unknown = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{name: a, matchImages: [x], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1, cacheKeyType: Image}]\n";
        assert!(matches!(
            parsed(unknown),
            Err(ProviderConfigError::Parse { .. })
        ));
        let kind =
            "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\nproviders: []\n";
        assert!(parsed(kind).expect_err("kind").to_string().contains("kind"));
    }

    #[test]
    fn a_directory_is_read_in_name_order_and_binaries_must_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let conf = dir.path().join("conf.d");
        std::fs::create_dir(&conf).expect("conf");
        let provider = |name: &str| {
            format!("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{{name: {name}, matchImages: [x], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}}]\n")
        };
        std::fs::write(conf.join("20-b.yaml"), provider("b")).expect("write");
        std::fs::write(conf.join("10-a.json"), provider("a")).expect("write");
        std::fs::write(conf.join("README"), "ignored").expect("write");
        let missing = load(&conf, &bin).expect_err("no binaries yet");
        assert!(
            matches!(missing, ProviderConfigError::MissingBinary { ref provider, .. } if provider == "a")
        );
        for name in ["a", "b"] {
            std::fs::write(bin.join(name), "#!/bin/sh\n").expect("write");
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        let names: Vec<String> = load(&conf, &bin)
            .expect("loads")
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        std::fs::write(conf.join("30-a-again.yml"), provider("a")).expect("write");
        assert!(load(&conf, &bin)
            .expect_err("duplicate")
            .to_string()
            .contains("duplicate"));
        assert!(matches!(
            load(&conf, &dir.path().join("nope")),
            Err(ProviderConfigError::MissingBinDir { .. })
        ));
    }
}
