//! Policy: what pinhook enforces, where, and how strictly — read from a YAML file.
//!
//! Owns: the policy file's schema and its validation (precise errors naming the field), modes
//! (`enforce`, `audit`, `off`) and the per-namespace override label (judged in [`scope`], with
//! exemptions, for admission and the watch alike), exemptions, registry host
//! rules, the sources whose tags are resolved at named mirrors ([`resolve_through`]), the mirror
//! guard, extra pod-bearing kinds, and the images that must be signed ([`verify`]). Pure: never
//! does I/O beyond reading the file it is handed and the key files its `verify` entries name (a
//! mirror's CA and credentials are paths the registry layer reads), never holds a client.

pub mod glob;
mod handle;
pub mod hosts;
pub mod mirror_policy;
pub mod resolve_through;
pub mod scope;
pub mod verify;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use crate::reference::{PinForm, Reference};
use crate::workload::{ImagePath, PodSpecKinds};

pub use handle::PolicyHandle;
pub use hosts::{HostRefusal, HostRules};
pub use mirror_policy::MirrorPolicy;
pub use resolve_through::{
    MirrorSettings, MirrorTarget, ResolveThrough, Route, Routes, VerifySource,
};
pub use scope::{Exemption, InvalidMode, ModeLabel, NamespaceMode};
pub use verify::{
    IdentityEntry, KeySource, KeylessEntry, TransparencyLogEntry, VerifyEntry, VerifyRule,
};

/// The namespace label that overrides `mode` per namespace (namespace labels are
/// admin-controlled).
pub const MODE_LABEL: &str = "pinhook.dev/mode";

/// Why a policy file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("failed to read policy file '{path}'")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not fit the schema. The parser's error is the message itself (on one
    /// line, without its source snippet), not a `#[source]`: a chain would print it twice.
    #[error("policy is not valid: {}", parser_message(&.0.to_string()))]
    Parse(serde_saphyr::Error),
    #[error("policy is not valid: {field}: {problem}")]
    Invalid { field: String, problem: String },
}

/// How strictly pinhook acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Pin, and deny what cannot be pinned.
    #[default]
    Enforce,
    /// Never mutate, never deny: report every violation as a warning.
    Audit,
    /// Do nothing.
    Off,
}

/// When to ask the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum ResolveMode {
    /// A reference that already has a digest is left alone.
    #[default]
    IfNotPresent,
    /// Re-resolve `tag@digest` references and act when the tag now points elsewhere.
    Always,
    /// No registry calls: validation only.
    Never,
}

/// What gets pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinTarget {
    /// Pod templates of controllers and pods: one rollout runs one digest.
    #[default]
    Workloads,
    /// Pods only: controllers' templates stay as written (no GitOps drift); pods of one owner
    /// revision get the same digest.
    Pods,
}

/// What to do when a tag cannot be resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureAction {
    #[default]
    Deny,
    /// Admit unpinned, with a warning.
    Allow,
}

/// Written form of a pinned reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum FormSetting {
    #[default]
    #[serde(rename = "tag@digest")]
    TagAndDigest,
    #[serde(rename = "digest")]
    Digest,
}

/// The policy file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub resolve: ResolveMode,
    #[serde(default)]
    pub target: PinTarget,
    #[serde(default)]
    pub form: FormSetting,
    #[serde(default)]
    pub on_resolution_failure: FailureAction,
    #[serde(default)]
    pub exempt: Exempt,
    #[serde(default)]
    pub registries: Registries,
    #[serde(default)]
    pub mirrors: MirrorPolicy,
    /// Extra pod-bearing kinds (e.g. Argo Rollouts).
    #[serde(default)]
    pub kinds: Vec<ExtraKind>,
    /// Who made a Pod, and whether pinhook may pin it (see `owners`).
    #[serde(default)]
    pub owners: Owners,
    /// Custom resources whose image fields pinhook pins (where an operator reads the image
    /// of the Pods it makes).
    #[serde(default)]
    pub custom_resources: Vec<CustomResource>,
    #[serde(default)]
    pub limits: Limits,
    /// Images that must be signed, and by whom (see [`verify`]).
    #[serde(default)]
    pub verify: Vec<VerifyEntry>,
}

/// Bounds on the work one object may ask of pinhook.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// Distinct image references one object may ask pinhook to resolve. An object naming more
    /// is refused (reported in audit) without any registry call.
    pub max_images_per_object: usize,
}

/// A custom resource kind and the fields its operator reads images from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomResource {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    /// The API resource (plural) for the webhook rules and authorisation checks; default:
    /// lowercase kind + `s`.
    #[serde(default)]
    pub resource: Option<String>,
    /// JSON pointers to image strings, `*` for every item of a list
    /// (`/spec/imageName`, `/spec/containers/*/image`).
    pub images: Vec<String>,
}

/// Pods made by controllers other than the built-in Pod controllers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Owners {
    /// Controller kinds whose Pods are safe to pin: operators that never compare a Pod's image
    /// with their own resource's (Argo Workflows, Tekton). Any other controller's Pods are left
    /// as it wrote them.
    #[serde(default)]
    pub pin_pods_of: Vec<OwnerKind>,
    /// The safety net for an operator wrongly listed in `pinPodsOf` (see
    /// `admission::loops`).
    #[serde(default)]
    pub loop_breaker: LoopBreakerSettings,
}

/// When pinhook stops pinning the Pods of an owner that keeps recreating them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoopBreakerSettings {
    /// Pods of one image one owner may create within the window before pinhook stops pinning
    /// its Pods (0 turns the breaker off).
    pub max_pods: u32,
    pub window_seconds: u64,
    /// How long pinhook then leaves the owner's Pods as written.
    pub pause_seconds: u64,
}

impl Default for LoopBreakerSettings {
    fn default() -> Self {
        LoopBreakerSettings {
            max_pods: 10,
            window_seconds: 60,
            pause_seconds: 600,
        }
    }
}

/// A controller kind, by API group (empty for the core group) and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerKind {
    #[serde(default)]
    pub group: String,
    pub kind: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exempt {
    /// Globs on the normalised reference (`docker.io/library/nginx:1.25`).
    #[serde(default)]
    pub images: Vec<String>,
    /// Globs on namespace names.
    #[serde(default)]
    pub namespaces: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registries {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    /// Hosts pinhook may contact although they are loopback, link-local or metadata addresses.
    #[serde(default)]
    pub allow_private: Vec<String>,
    /// Per-host TLS settings.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostSettings>,
    /// Also refuse private networks (RFC 1918, 100.64.0.0/10, fc00::/7) unless `allowPrivate`
    /// names the host. Off by default: in-cluster and VPC registries live there.
    #[serde(default)]
    pub deny_private_networks: bool,
    /// Sources whose tags are resolved at named mirrors, in order (see [`resolve_through`]).
    #[serde(default)]
    pub resolve_through: Vec<ResolveThrough>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSettings {
    /// PEM CA bundle trusted for this host.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Reach this host over plain HTTP.
    #[serde(default)]
    pub insecure: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtraKind {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    /// RFC 6901 pointer to the PodSpec, e.g. `/spec/template/spec`.
    pub pod_spec: String,
    /// The API resource (plural) for authorisation checks; default: lowercase kind + `s`.
    #[serde(default)]
    pub resource: Option<String>,
}

/// A validated policy with what every request needs precomputed.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    pub policy: Policy,
    pub kinds: PodSpecKinds,
    pub hosts: HostRules,
    /// `registries.resolveThrough`, validated.
    pub routes: Routes,
    /// Per-host TLS: `registries.hosts` plus each `resolveThrough` mirror's `ca` / `insecure`.
    pub registry_hosts: BTreeMap<String, HostSettings>,
    /// `verify`, validated, keys parsed.
    pub verify: Vec<VerifyRule>,
    /// This compilation, distinct from every other in the process (a clone is the same
    /// compilation): what a verification kept beside a cached digest names, so that it answers
    /// only under the entries, routes and trust it was made under.
    generation: u64,
}

/// The last [`CompiledPolicy::generation`] handed out.
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed) + 1
}

// === impl Limits ===

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_images_per_object: 100,
        }
    }
}

// === impl Policy ===

impl Policy {
    /// Reads and validates a policy file.
    pub fn load(path: &Path) -> Result<CompiledPolicy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Policy::parse(&text)
    }

    /// Parses and validates policy YAML.
    pub fn parse(text: &str) -> Result<CompiledPolicy, PolicyError> {
        let policy: Policy = if text.trim().is_empty() {
            Policy::default()
        } else {
            serde_saphyr::from_str(text).map_err(PolicyError::Parse)?
        };
        policy.compile()
    }

    /// Validates and precomputes.
    pub fn compile(self) -> Result<CompiledPolicy, PolicyError> {
        let mut kinds = PodSpecKinds::builtin();
        for (i, extra) in self.kinds.iter().enumerate() {
            if extra.kind.is_empty() {
                return Err(invalid(format!("kinds[{i}].kind"), "must not be empty"));
            }
            if !extra.pod_spec.starts_with('/') {
                return Err(invalid(
                    format!("kinds[{i}].podSpec"),
                    format!(
                        "{:?} is not a JSON pointer (it must start with '/')",
                        extra.pod_spec
                    ),
                ));
            }
            kinds = kinds.with_extra(&extra.group, &extra.kind, &extra.pod_spec);
        }
        for (i, custom) in self.custom_resources.iter().enumerate() {
            if custom.kind.is_empty() {
                return Err(invalid(
                    format!("customResources[{i}].kind"),
                    "must not be empty",
                ));
            }
            if kinds
                .pod_spec_pointer(&custom.group, &custom.kind)
                .is_some()
            {
                return Err(invalid(
                    format!("customResources[{i}]"),
                    "is a pod-bearing kind already (use kinds for a kind with a pod template)",
                ));
            }
            if custom.images.is_empty() {
                return Err(invalid(
                    format!("customResources[{i}].images"),
                    "must name at least one image field",
                ));
            }
            let mut paths = Vec::new();
            for (j, text) in custom.images.iter().enumerate() {
                let path = ImagePath::parse(text).map_err(|e| {
                    invalid(format!("customResources[{i}].images[{j}]"), e.to_string())
                })?;
                paths.push(path);
            }
            kinds = kinds.with_resource(&custom.group, &custom.kind, paths);
        }
        for (host, settings) in &self.registries.hosts {
            if host.is_empty() || host.contains('/') {
                return Err(invalid(
                    format!("registries.hosts[{host:?}]"),
                    "must be host[:port]",
                ));
            }
            if let Some(ca) = &settings.ca {
                if ca.as_os_str().is_empty() {
                    return Err(invalid(
                        format!("registries.hosts[{host:?}].ca"),
                        "must be a file path",
                    ));
                }
            }
        }
        for (i, allowed) in self.mirrors.allow.iter().enumerate() {
            if allowed.source.is_empty() || allowed.mirror.is_empty() {
                return Err(invalid(
                    format!("mirrors.allow[{i}]"),
                    "needs both source and mirror",
                ));
            }
        }
        for (i, owner) in self.owners.pin_pods_of.iter().enumerate() {
            if owner.kind.is_empty() {
                return Err(invalid(
                    format!("owners.pinPodsOf[{i}].kind"),
                    "must not be empty",
                ));
            }
        }
        let breaker = &self.owners.loop_breaker;
        for (field, value) in [
            ("windowSeconds", breaker.window_seconds),
            ("pauseSeconds", breaker.pause_seconds),
        ] {
            if !(1..=86_400).contains(&value) {
                return Err(invalid(
                    format!("owners.loopBreaker.{field}"),
                    "must be from 1 to 86400 seconds",
                ));
            }
        }
        if self.limits.max_images_per_object == 0 {
            return Err(invalid(
                "limits.maxImagesPerObject".to_string(),
                "must be at least 1",
            ));
        }
        let hosts = HostRules {
            allow: self.registries.allow.clone(),
            deny: self.registries.deny.clone(),
            allow_private: self.registries.allow_private.clone(),
            deny_private_networks: self.registries.deny_private_networks,
        };
        let mut registry_hosts = self.registries.hosts.clone();
        let routes = Routes::compile(
            &self.registries.resolve_through,
            &hosts,
            &mut registry_hosts,
        )
        .map_err(|e| invalid(e.field, e.problem))?;
        let verify = verify::compile(&self.verify).map_err(|e| invalid(e.field, e.problem))?;
        if !verify.is_empty() && self.resolve == ResolveMode::Never {
            return Err(invalid(
                "verify".to_string(),
                "needs registry calls to fetch signatures, and resolve: Never makes none",
            ));
        }
        Ok(CompiledPolicy {
            policy: self,
            kinds,
            hosts,
            routes,
            registry_hosts,
            verify,
            generation: next_generation(),
        })
    }
}

fn invalid(field: String, problem: impl Into<String>) -> PolicyError {
    PolicyError::Invalid {
        field,
        problem: problem.into(),
    }
}

/// The parser's message on one line, without its source snippet (`--> <input>:1:7 | …`).
fn parser_message(text: &str) -> String {
    let text = text.split(" --> ").next().unwrap_or(text);
    let text = text.split("\n -->").next().unwrap_or(text);
    let text = text.trim_start_matches("error: ");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// === impl CompiledPolicy ===

impl Default for CompiledPolicy {
    fn default() -> Self {
        CompiledPolicy {
            policy: Policy::default(),
            kinds: PodSpecKinds::builtin(),
            hosts: HostRules::default(),
            routes: Routes::default(),
            registry_hosts: BTreeMap::new(),
            verify: Vec::new(),
            generation: next_generation(),
        }
    }
}

impl CompiledPolicy {
    /// This compilation, distinct from every other in the process.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn form(&self) -> PinForm {
        match self.policy.form {
            FormSetting::TagAndDigest => PinForm::TagAndDigest,
            FormSetting::Digest => PinForm::DigestOnly,
        }
    }

    pub fn is_exempt_namespace(&self, namespace: &str) -> bool {
        self.policy
            .exempt
            .namespaces
            .iter()
            .any(|p| glob::matches(p, namespace))
    }

    /// Exempt images are matched on the normalised reference, with and without digest.
    pub fn is_exempt_image(&self, reference: &Reference) -> bool {
        if self.policy.exempt.images.is_empty() {
            return false;
        }
        let full = reference.to_string();
        let tagged = reference.tag_reference();
        self.policy
            .exempt
            .images
            .iter()
            .any(|p| glob::matches(p, &full) || glob::matches(p, &tagged))
    }
}

impl CompiledPolicy {
    /// The `verify` entries that cover `reference`: every one must hold.
    pub fn verify_rules<'a>(
        &'a self,
        reference: &Reference,
    ) -> impl Iterator<Item = &'a VerifyRule> + 'a {
        // (the repository is made once for every entry, and not at all without entries)
        let repository = match self.verify.is_empty() {
            true => String::new(),
            false => verify::repository_of(reference),
        };
        self.verify
            .iter()
            .filter(move |rule| rule.covers(&repository))
    }
}

// === impl Mode ===

impl FromStr for Mode {
    type Err = InvalidMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "enforce" => Ok(Mode::Enforce),
            "audit" => Ok(Mode::Audit),
            "off" => Ok(Mode::Off),
            other => Err(InvalidMode {
                value: other.to_string(),
            }),
        }
    }
}

impl Mode {
    /// The name a policy file and the mode label use.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Audit => "audit",
            Mode::Off => "off",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;
