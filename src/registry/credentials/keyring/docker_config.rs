//! The docker config documents kubelet reads pull credentials from: `kubernetes.io/dockerconfigjson`
//! and `kubernetes.io/dockercfg` secrets and docker `config.json` files, decoded the way kubelet's
//! Go decodes them (kubernetes `pkg/credentialprovider` `config.go`: `DockerConfigEntry.UnmarshalJSON`,
//! `decodeDockerConfigFieldAuth`; `secrets.go`: `MakeDockerKeyring`), down to `encoding/json`'s
//! field-name folding and Go's base64 decoders, so a secret yields the credentials it yields on
//! the node.
//!
//! Owns: the secret types and data keys, [`KeyringError`], and turning a document into
//! (registry key, credential) pairs; the keyring stores and matches them.
//!
//! Never: does I/O, logs, or puts a password or an `auth` value into an error message.

use std::collections::BTreeMap;
use std::fmt;

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use super::go_url::cut;
use crate::registry::credentials::Credential;

/// `type` of a Secret holding a docker `config.json` (`{"auths": {...}}`).
pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// The data key of a [`SECRET_TYPE_DOCKER_CONFIG_JSON`] secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// `type` of a Secret holding a legacy `~/.dockercfg` (`{...}`, no `auths` wrapper).
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
/// The data key of a [`SECRET_TYPE_DOCKERCFG`] secret.
pub const DOCKERCFG_KEY: &str = ".dockercfg";

/// Names a docker config file read by [`super::Keyring::from_docker_config_json`] in errors.
const DOCKER_CONFIG_FILE: &str = "docker config.json";

/// Why a secret or docker config yields no keyring. Messages never contain credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// kubelet reads pull credentials only from the two docker config secret types.
    #[error(
        "secret type {secret_type:?} holds no registry credentials (kubelet only reads \
         {SECRET_TYPE_DOCKER_CONFIG_JSON} and {SECRET_TYPE_DOCKERCFG} secrets)"
    )]
    UnsupportedType { secret_type: String },
    /// The type is right but its data key is missing or empty (kubelet skips such a secret).
    #[error("secret of type {secret_type} has no {key} data, or it is empty")]
    MissingData {
        secret_type: &'static str,
        key: &'static str,
    },
    /// The document is not JSON, or a value has a type kubelet's decoder rejects.
    #[error("{document} is not a valid docker config: {problem} at line {line}, column {column}")]
    InvalidJson {
        document: &'static str,
        problem: &'static str,
        line: usize,
        column: usize,
    },
    #[error("{document}: the auth field of registry {registry:?} is not valid base64")]
    AuthNotBase64 {
        document: &'static str,
        registry: String,
    },
    #[error(
        "{document}: the auth field of registry {registry:?} does not decode to \
         username:password (no ':')"
    )]
    AuthMissingColon {
        document: &'static str,
        registry: String,
    },
    #[error(
        "{document}: the auth field of registry {registry:?} decodes to a username or password \
         that is not UTF-8"
    )]
    AuthNotUtf8 {
        document: &'static str,
        registry: String,
    },
}

// === impl KeyringError ===

impl KeyringError {
    /// Whether kubelet refuses the pod's whole keyring over this secret, so every pull of the
    /// pod fails: `MakeDockerKeyring` (`pkg/credentialprovider/secrets`) returns the
    /// `json.Unmarshal` error of a docker config secret, auth decoding included. A secret of
    /// another type, or without its data key, it skips.
    pub fn fails_the_pull(&self) -> bool {
        !matches!(
            self,
            KeyringError::UnsupportedType { .. } | KeyringError::MissingData { .. }
        )
    }
}

/// A document's credentials as (registry key as written, credential), in key order; entries
/// without a credential are left out.
pub(super) type Credentials = Vec<(String, Credential)>;

/// The credentials of a Secret's `type` and `data` (values already base64-decoded), by registry
/// key: only the data key that matches the type is read, as kubelet reads it.
pub(super) fn read_secret(
    secret_type: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Credentials, KeyringError> {
    let (secret_type, key, format) = match secret_type {
        SECRET_TYPE_DOCKER_CONFIG_JSON => (
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            DOCKER_CONFIG_JSON_KEY,
            Format::ConfigJson,
        ),
        SECRET_TYPE_DOCKERCFG => (SECRET_TYPE_DOCKERCFG, DOCKERCFG_KEY, Format::Dockercfg),
        other => {
            return Err(KeyringError::UnsupportedType {
                secret_type: other.to_owned(),
            })
        }
    };
    match data.get(key) {
        Some(bytes) if !bytes.is_empty() => parse(bytes, format, key),
        _ => Err(KeyringError::MissingData { secret_type, key }),
    }
}

/// The credentials of a docker `config.json` (`{"auths": {...}}`), by registry key.
pub(super) fn read_config_json(bytes: &[u8]) -> Result<Credentials, KeyringError> {
    parse(bytes, Format::ConfigJson, DOCKER_CONFIG_FILE)
}

fn parse(
    bytes: &[u8],
    format: Format,
    document: &'static str,
) -> Result<Credentials, KeyringError> {
    let invalid = |err: serde_json::Error| KeyringError::InvalidJson {
        document,
        problem: match err.classify() {
            serde_json::error::Category::Syntax => "malformed JSON",
            serde_json::error::Category::Eof => "unexpected end of JSON",
            serde_json::error::Category::Data => "a value has the wrong type",
            serde_json::error::Category::Io => "unreadable input",
        },
        line: err.line(),
        column: err.column(),
    };
    let auths = match format {
        Format::ConfigJson => {
            serde_json::from_slice::<ConfigJson>(bytes)
                .map_err(invalid)?
                .0
        }
        Format::Dockercfg => serde_json::from_slice::<AuthMap>(bytes).map_err(invalid)?,
    };
    if let Some((registry, problem)) = auths.first_error {
        return Err(problem.into_error(document, &registry));
    }
    let credentials = auths.entries.unwrap_or_default().into_iter();
    Ok(credentials
        .filter_map(|(registry, credential)| Some((registry, credential?)))
        .collect())
}

// === the JSON kubelet reads (config.go) ===

#[derive(Clone, Copy)]
enum Format {
    /// `DockerConfigJSON`: `{"auths": {...}, "HttpHeaders": {...}}`.
    ConfigJson,
    /// `DockerConfig`: the `auths` map itself.
    Dockercfg,
}

/// kubelet's `DockerConfigJSON` (`{"auths": {...}, "HttpHeaders": {...}}`), decoded as Go's
/// `encoding/json` decodes it: field names match case-insensitively, a repeated `auths` adds to
/// the map and `null` resets it, unknown fields (`credsStore`, `credHelpers`, ...) are ignored,
/// and a known field of the wrong type fails. Only the `auths` map is kept.
struct ConfigJson(AuthMap);

/// kubelet's `DockerConfig`: registry key → its credential (`None`: the entry has none). A
/// repeated key keeps its last entry, but an `auth` that fails to decode fails the document even
/// when a later entry replaces it: Go keeps the first `UnmarshalJSON` error and returns it.
#[derive(Default)]
struct AuthMap {
    /// `None` for a JSON `null` (a nil Go map).
    entries: Option<BTreeMap<String, Option<Credential>>>,
    first_error: Option<(String, AuthProblem)>,
}

/// One entry as `DockerConfigEntry.UnmarshalJSON` leaves it.
struct Entry(Result<Option<Credential>, AuthProblem>);

/// kubelet's `dockerConfigEntryWithAuth`. `email` is read (it must be a string) and dropped.
/// `identitytoken` and `registrytoken` are ignored here, as kubelet ignores them in pull
/// secrets; a docker config file's `identitytoken` is read by
/// `docker_helpers::read_docker_config` and exchanged by `identity_token`.
#[derive(Default)]
struct RawEntry {
    username: String,
    password: String,
    auth: String,
}

impl AuthMap {
    fn absorb(&mut self, other: AuthMap) {
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        match other.entries {
            None => self.entries = None,
            Some(entries) => self
                .entries
                .get_or_insert_with(BTreeMap::new)
                .extend(entries),
        }
    }
}

impl<'de> Deserialize<'de> for ConfigJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ConfigJsonVisitor;

        impl<'de> Visitor<'de> for ConfigJsonVisitor {
            type Value = ConfigJson;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a docker config object")
            }

            fn visit_unit<E>(self) -> Result<ConfigJson, E> {
                Ok(ConfigJson(AuthMap::default()))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ConfigJson, A::Error> {
                let mut auths = AuthMap::default();
                while let Some(key) = map.next_key::<String>()? {
                    if go_json_field_is(&key, "auths") {
                        auths.absorb(map.next_value::<AuthMap>()?);
                    } else if go_json_field_is(&key, "httpheaders") {
                        // Unused, but kubelet fails on a value that is not a string map.
                        map.next_value::<Option<BTreeMap<String, Option<String>>>>()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ConfigJson(auths))
            }
        }

        deserializer.deserialize_any(ConfigJsonVisitor)
    }
}

impl<'de> Deserialize<'de> for AuthMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AuthMapVisitor;

        impl<'de> Visitor<'de> for AuthMapVisitor {
            type Value = AuthMap;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of registry credentials")
            }

            fn visit_unit<E>(self) -> Result<AuthMap, E> {
                Ok(AuthMap::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AuthMap, A::Error> {
                let mut entries = BTreeMap::new();
                let mut first_error = None;
                while let Some((registry, Entry(entry))) = map.next_entry::<String, Entry>()? {
                    match entry {
                        Ok(credential) => {
                            entries.insert(registry, credential);
                        }
                        Err(problem) => {
                            if first_error.is_none() {
                                first_error = Some((registry.clone(), problem));
                            }
                            entries.insert(registry, None);
                        }
                    }
                }
                Ok(AuthMap {
                    entries: Some(entries),
                    first_error,
                })
            }
        }

        deserializer.deserialize_any(AuthMapVisitor)
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = Entry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a registry credential object")
            }

            /// Go hands `null` to `UnmarshalJSON`, which leaves every field empty.
            fn visit_unit<E>(self) -> Result<Entry, E> {
                Ok(Entry(Ok(None)))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                let mut entry = RawEntry::default();
                while let Some(key) = map.next_key::<String>()? {
                    let field = if go_json_field_is(&key, "username") {
                        &mut entry.username
                    } else if go_json_field_is(&key, "password") {
                        &mut entry.password
                    } else if go_json_field_is(&key, "auth") {
                        &mut entry.auth
                    } else if go_json_field_is(&key, "email") {
                        map.next_value::<Option<String>>()?;
                        continue;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    // A `null` leaves a Go string as it was.
                    if let Some(value) = map.next_value::<Option<String>>()? {
                        *field = value;
                    }
                }
                Ok(Entry(entry.credential()))
            }
        }

        deserializer.deserialize_any(EntryVisitor)
    }
}

/// Whether `encoding/json` decodes the object key `key` into the field tagged `field` (lower-case
/// ASCII): equal after folding case, where Go folds `a`-`z` to upper case and a non-ASCII rune to
/// the smallest rune of its case-fold set — so the Kelvin sign is `K` and the long s `ſ` is `S`.
fn go_json_field_is(key: &str, field: &str) -> bool {
    let mut key = key.chars();
    for expected in field.bytes() {
        let folded = match key.next() {
            Some(c) if c.is_ascii() => c.to_ascii_uppercase(),
            Some('\u{212A}') => 'K',
            Some('\u{17F}') => 'S',
            _ => return false,
        };
        if folded != char::from(expected.to_ascii_uppercase()) {
            return false;
        }
    }
    key.next().is_none()
}

// === impl RawEntry ===

/// Go's `base64.StdEncoding`: padding required where due; like Go's non-strict decoding, the
/// unused low bits of the last character may be set.
const BASE64_PADDED: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);
/// Go's `base64.RawStdEncoding`: no padding at all.
const BASE64_UNPADDED: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

impl RawEntry {
    /// `DockerConfigEntry.UnmarshalJSON`: a non-empty `auth` wins over `username`/`password`.
    /// `None` when the entry carries no credential at all (kubelet keeps it as an empty one,
    /// which a pull treats as anonymous; leaving it out lets the next key answer instead).
    fn credential(self) -> Result<Option<Credential>, AuthProblem> {
        let (username, password) = if self.auth.is_empty() {
            (self.username, self.password)
        } else {
            decode_auth(&self.auth)?
        };
        if username.is_empty() && password.is_empty() {
            return Ok(None);
        }
        Ok(Some(Credential::basic(username, password)))
    }
}

enum AuthProblem {
    NotBase64,
    MissingColon,
    NotUtf8,
}

impl AuthProblem {
    fn into_error(self, document: &'static str, registry: &str) -> KeyringError {
        let registry = registry.to_owned();
        match self {
            AuthProblem::NotBase64 => KeyringError::AuthNotBase64 { document, registry },
            AuthProblem::MissingColon => KeyringError::AuthMissingColon { document, registry },
            AuthProblem::NotUtf8 => KeyringError::AuthNotUtf8 { document, registry },
        }
    }
}

/// `decodeDockerConfigFieldAuth`: padded base64 when the trimmed value ends in `=`, unpadded
/// otherwise (Go's decoders skip `\r` and `\n` anywhere), split on the first `:`.
fn decode_auth(field: &str) -> Result<(String, String), AuthProblem> {
    let cleaned: Vec<u8> = field
        .bytes()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect();
    let engine = if field.trim().ends_with('=') {
        &BASE64_PADDED
    } else {
        &BASE64_UNPADDED
    };
    let decoded = engine.decode(cleaned).map_err(|_| AuthProblem::NotBase64)?;
    let (username, password) = match cut(&decoded, b':') {
        (username, Some(password)) => (username, password),
        (_, None) => return Err(AuthProblem::MissingColon),
    };
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(|_| AuthProblem::NotUtf8);
    Ok((text(username)?, text(password)?))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{b64, config_json, lookup};
    use super::*;
    use crate::reference::Reference;
    use crate::registry::keyring::Keyring;
    use rstest::rstest;

    fn b64_unpadded(text: &str) -> String {
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(text)
    }

    fn data(key: &str, json: &str) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([(key.to_owned(), json.as_bytes().to_vec())])
    }

    #[test]
    fn dockerconfigjson_secret() {
        let json = format!(
            r#"{{"auths":{{"reg.io":{{"auth":"{}"}}}}}}"#,
            b64("user:pass")
        );
        let keyring = Keyring::from_secret(
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            &data(DOCKER_CONFIG_JSON_KEY, &json),
        )
        .expect("parses");
        let reference = Reference::parse("reg.io/app").expect("parses");
        assert_eq!(
            keyring.lookup(&reference),
            [Credential::basic("user", "pass")]
        );
    }

    #[test]
    fn dockercfg_secret_has_no_auths_wrapper() {
        let json =
            r#"{"https://index.docker.io/v1/":{"username":"u","password":"p","email":"e@x"}}"#;
        let keyring = Keyring::from_secret(SECRET_TYPE_DOCKERCFG, &data(DOCKERCFG_KEY, json))
            .expect("parses");
        let reference = Reference::parse("nginx").expect("parses");
        assert_eq!(keyring.lookup(&reference), [Credential::basic("u", "p")]);
    }

    #[test]
    fn dockercfg_content_in_a_dockerconfigjson_secret_has_no_auths() {
        let json = r#"{"reg.io":{"username":"u","password":"p"}}"#;
        let keyring = Keyring::from_secret(
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            &data(DOCKER_CONFIG_JSON_KEY, json),
        )
        .expect("parses");
        assert!(keyring.is_empty());
    }

    #[rstest]
    #[case::dockerconfigjson_type_with_dockercfg_key(SECRET_TYPE_DOCKER_CONFIG_JSON, DOCKERCFG_KEY)]
    #[case::dockercfg_type_with_dockerconfigjson_key(SECRET_TYPE_DOCKERCFG, DOCKER_CONFIG_JSON_KEY)]
    #[case::other_key(SECRET_TYPE_DOCKER_CONFIG_JSON, "config.json")]
    fn type_and_data_key_must_agree(#[case] secret_type: &str, #[case] key: &str) {
        let json = r#"{"auths":{"reg.io":{"username":"u","password":"p"}}}"#;
        let err = Keyring::from_secret(secret_type, &data(key, json)).expect_err("mismatch");
        assert!(matches!(err, KeyringError::MissingData { .. }), "{err:?}");
        assert!(err.to_string().contains(secret_type), "{err}");
    }

    #[test]
    fn empty_data_is_missing_data() {
        let err = Keyring::from_secret(SECRET_TYPE_DOCKERCFG, &data(DOCKERCFG_KEY, ""))
            .expect_err("empty");
        assert_eq!(
            err,
            KeyringError::MissingData {
                secret_type: SECRET_TYPE_DOCKERCFG,
                key: DOCKERCFG_KEY
            }
        );
    }

    #[rstest]
    #[case::opaque("Opaque")]
    #[case::service_account_token("kubernetes.io/service-account-token")]
    #[case::basic_auth("kubernetes.io/basic-auth")]
    #[case::empty("")]
    #[case::case_differs("kubernetes.io/DockerConfigJson")]
    fn other_secret_types_are_unsupported(#[case] secret_type: &str) {
        let json = r#"{"auths":{"reg.io":{"username":"u","password":"p"}}}"#;
        let err = Keyring::from_secret(secret_type, &data(DOCKER_CONFIG_JSON_KEY, json))
            .expect_err("unsupported");
        assert_eq!(
            err,
            KeyringError::UnsupportedType {
                secret_type: secret_type.to_owned()
            }
        );
    }

    #[rstest]
    #[case::auth_wins_over_username_password(
        &format!(r#"{{"auth":"{}","username":"x","password":"y"}}"#, b64("user:pass")), Some(("user", "pass")))]
    #[case::username_password(r#"{"username":"user","password":"pass"}"#, Some(("user", "pass")))]
    #[case::split_on_first_colon(&format!(r#"{{"auth":"{}"}}"#, b64("user:pa:ss")), Some(("user", "pa:ss")))]
    #[case::unpadded(&format!(r#"{{"auth":"{}"}}"#, b64_unpadded("user:pas")), Some(("user", "pas")))]
    #[case::padded(&format!(r#"{{"auth":"{}"}}"#, b64("user:pas")), Some(("user", "pas")))]
    #[case::newlines_skipped(r#"{"auth":"dXNl\r\ncjpwYXNz\n"}"#, Some(("user", "pass")))]
    #[case::empty_password_in_auth(&format!(r#"{{"auth":"{}"}}"#, b64("user:")), Some(("user", "")))]
    #[case::username_only(r#"{"username":"user"}"#, Some(("user", "")))]
    #[case::empty_auth_uses_username(r#"{"auth":"","username":"user","password":"pass"}"#, Some(("user", "pass")))]
    #[case::null_fields(r#"{"auth":null,"username":"user","password":"pass","email":null}"#, Some(("user", "pass")))]
    #[case::field_names_fold_case(r#"{"Username":"user","PASSWORD":"pass"}"#, Some(("user", "pass")))]
    #[case::long_s_folds_to_s(r#"{"uſername":"user","paſsword":"pass"}"#, Some(("user", "pass")))]
    #[case::empty_entry(r#"{}"#, None)]
    #[case::null_entry(r#"null"#, None)]
    #[case::email_only(r#"{"email":"a@b.c"}"#, None)]
    #[case::identity_token_not_supported(r#"{"identitytoken":"token"}"#, None)]
    #[case::registry_token_not_supported(r#"{"registrytoken":"token"}"#, None)]
    #[case::auth_of_colon_only(&format!(r#"{{"auth":"{}"}}"#, b64(":")), None)]
    fn entry_parsing(#[case] entry: &str, #[case] expected: Option<(&str, &str)>) {
        let keyring = config_json(&format!(r#"{{"auths":{{"reg.io":{entry}}}}}"#));
        let reference = Reference::parse("reg.io/app").expect("parses");
        let expected: Vec<Credential> = expected
            .map(|(username, password)| Credential::basic(username, password))
            .into_iter()
            .collect();
        assert_eq!(keyring.lookup(&reference), expected);
    }

    #[rstest]
    #[case::not_base64(r#"{"auth":"not base64!"}"#, "AuthNotBase64")]
    #[case::wrong_padding(r#"{"auth":"dXNlcjpwYXM=="}"#, "AuthNotBase64")]
    #[case::padding_inside(r#"{"auth":"dXM=lcjpwYXM"}"#, "AuthNotBase64")]
    #[case::no_colon(&format!(r#"{{"auth":"{}"}}"#, b64("userpass")), "AuthMissingColon")]
    #[case::not_utf8(r#"{"auth":"/zov"}"#, "AuthNotUtf8")]
    fn bad_auth_fails_the_document_naming_the_registry(#[case] entry: &str, #[case] variant: &str) {
        let json = format!(r#"{{"auths":{{"secret.example.com":{entry}}}}}"#);
        let err = Keyring::from_docker_config_json(json.as_bytes()).expect_err("bad auth");
        assert!(format!("{err:?}").starts_with(variant), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("\"secret.example.com\""), "{message}");
        assert!(message.contains(DOCKER_CONFIG_FILE), "{message}");
        assert!(
            !message.contains("dXNl") && !message.contains("/zov"),
            "{message}"
        );
    }

    #[test]
    fn bad_auth_fails_even_when_a_repeated_key_replaces_it() {
        let json = r#"{"auths":{"reg.io":{"auth":"!!"},"reg.io":{"username":"u","password":"p"}}}"#;
        let err = Keyring::from_docker_config_json(json.as_bytes()).expect_err("bad auth");
        assert!(matches!(err, KeyringError::AuthNotBase64 { .. }), "{err:?}");
    }

    #[test]
    fn bad_auth_in_a_secret_names_its_data_key() {
        let json = r#"{"reg.io":{"auth":"!!"}}"#;
        let err = Keyring::from_secret(SECRET_TYPE_DOCKERCFG, &data(DOCKERCFG_KEY, json))
            .expect_err("bad auth");
        assert_eq!(
            err.to_string(),
            ".dockercfg: the auth field of registry \"reg.io\" is not valid base64"
        );
    }

    #[test]
    fn repeated_keys_keep_the_last_entry() {
        let keyring = config_json(
            r#"{"auths":{"reg.io":{"username":"first","password":"p"},"reg.io":{"username":"last","password":"p"}}}"#,
        );
        assert_eq!(lookup(&keyring, "reg.io/x"), ["last"]);
    }

    #[test]
    fn repeated_auths_add_up_and_null_resets() {
        let keyring = config_json(
            r#"{"auths":{"a.io":{"username":"a","password":"p"}},"AUTHS":{"b.io":{"username":"b","password":"p"}}}"#,
        );
        assert_eq!(lookup(&keyring, "a.io/x"), ["a"]);
        assert_eq!(lookup(&keyring, "b.io/x"), ["b"]);
        let keyring =
            config_json(r#"{"auths":{"a.io":{"username":"a","password":"p"}},"auths":null}"#);
        assert!(keyring.is_empty());
    }

    #[test]
    fn creds_store_only_config_has_no_credentials() {
        let keyring = config_json(
            r#"{
                "auths": {"https://index.docker.io/v1/": {}, "ghcr.io": {}},
                "credsStore": "desktop",
                "credHelpers": {"123456789.dkr.ecr.us-east-1.amazonaws.com": "ecr-login"},
                "HttpHeaders": {"User-Agent": "Docker-Client/24"},
                "psFormat": "table"
            }"#,
        );
        assert!(keyring.is_empty());
    }

    #[test]
    fn config_json_with_helpers_keeps_the_inline_entries() {
        let keyring = config_json(&format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{}},"quay.io":{{"auth":"{}"}}}},"credsStore":"osxkeychain"}}"#,
            b64("robot:token")
        ));
        assert_eq!(lookup(&keyring, "quay.io/org/app"), ["robot"]);
        assert!(lookup(&keyring, "nginx").is_empty());
    }

    #[rstest]
    #[case::null("null")]
    #[case::empty_object("{}")]
    #[case::null_auths(r#"{"auths":null}"#)]
    #[case::empty_auths(r#"{"auths":{}}"#)]
    fn empty_documents_give_an_empty_keyring(#[case] json: &str) {
        assert!(config_json(json).is_empty());
    }

    #[rstest]
    #[case::not_json("not json", "malformed JSON")]
    #[case::truncated(r#"{"auths":{"reg.io":{"username":"u""#, "unexpected end of JSON")]
    #[case::trailing_data(r#"{"auths":{}} {}"#, "malformed JSON")]
    #[case::empty_document("", "unexpected end of JSON")]
    #[case::top_level_array("[]", "a value has the wrong type")]
    #[case::auths_array(r#"{"auths":[]}"#, "a value has the wrong type")]
    #[case::entry_string(
        r#"{"auths":{"reg.io":"c2VjcmV0OnBhc3N3b3Jk"}}"#,
        "a value has the wrong type"
    )]
    #[case::password_number(
        r#"{"auths":{"reg.io":{"username":"u","password":123456}}}"#,
        "a value has the wrong type"
    )]
    #[case::email_object(r#"{"auths":{"reg.io":{"email":{}}}}"#, "a value has the wrong type")]
    #[case::http_headers_not_strings(
        r#"{"auths":{},"HttpHeaders":{"X":1}}"#,
        "a value has the wrong type"
    )]
    fn malformed_documents(#[case] json: &str, #[case] problem: &str) {
        let err = Keyring::from_docker_config_json(json.as_bytes()).expect_err("malformed");
        let message = err.to_string();
        assert!(matches!(err, KeyringError::InvalidJson { .. }), "{err:?}");
        assert!(message.contains(problem), "{message}");
        assert!(
            !message.contains("c2VjcmV0") && !message.contains("123456"),
            "{message}"
        );
    }

    #[test]
    fn malformed_secret_names_its_data_key() {
        let err = Keyring::from_secret(
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            &data(DOCKER_CONFIG_JSON_KEY, "{"),
        )
        .expect_err("malformed");
        assert!(
            err.to_string()
                .starts_with(".dockerconfigjson is not a valid docker config"),
            "{err}"
        );
    }

    #[test]
    fn unused_fields_of_any_shape_are_ignored() {
        let keyring = config_json(
            r#"{"auths":{"reg.io":{"username":"u","password":"p","x":[1,{"y":null}],"serveraddress":"reg.io"}},"other":[true]}"#,
        );
        assert_eq!(lookup(&keyring, "reg.io/x"), ["u"]);
    }
}
