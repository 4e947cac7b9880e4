//! Pull secrets: which credentials a pod would pull with, read through the Kubernetes API.
//!
//! Owns: choosing the secret names the way kubelet and the ServiceAccount admission plugin do,
//! reading and briefly caching Secrets and ServiceAccounts (and reading, uncached, the stored Pod
//! of an `EphemeralContainers` request), and joining the pod's keyring with
//! the node-level one, kubelet's order: the pod's secrets, then the node's docker config, then
//! its credential provider plugins. The node's per-image sources (plugins, docker credential
//! helpers) are asked here about the pod's images, so the keyring handed on answers lookups
//! without further I/O. A missing secret is not an error (kubelet ignores it too); it becomes a
//! warning for the user, and so does a plugin that failed. A malformed docker-config secret,
//! which kubelet refuses, is returned in [`PodKeyring::refused`] for admission to deny or
//! report.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::Api;
use serde_json::Value;
use tracing::debug;

use super::keyring::{Keyring, KeyringError};

/// Distinct pull secret names read for one pod; the rest are not read (with a warning). A
/// review may name one secret 100,000 times: each name is read once, and at most this many.
pub const MAX_PULL_SECRETS: usize = 128;

/// How long a read Secret or ServiceAccount answers before it is read again.
const OBJECT_TTL: Duration = Duration::from_secs(30);

/// Where a pod's images are pulled from the credential point of view.
#[derive(Debug, Clone, Copy)]
pub struct PodContext<'a> {
    pub namespace: &'a str,
    /// Where the pod's pull secret names come from.
    pub secrets: SecretNames<'a>,
    /// The repositories (kubelet's `repoToPull`) that will be resolved: what credential
    /// sources (plugins, helpers) are asked about. Not read from the spec: an ephemeral
    /// container being added is not in the stored pod's spec yet, and an image already pinned
    /// by digest is not resolved.
    pub images: &'a [String],
    /// When credential sources (plugins, helpers) must have answered: past it the keyring is
    /// used without them, so a slow plugin cannot cost the pod's own secrets. `None`: no bound
    /// but the sources' own.
    pub sources_deadline: Option<tokio::time::Instant>,
}

/// Where a pod's pull secret names come from (the admission plan or the watch's says which).
#[derive(Debug, Clone, Copy)]
pub enum SecretNames<'a> {
    /// A PodSpec's `imagePullSecrets`. A bare Pod's are final (the ServiceAccount admission
    /// plugin already filled them); a workload template with none gets its ServiceAccount's,
    /// as that plugin will give its Pods (pinhook does the plugin's work itself).
    Spec { spec: &'a Value, is_pod: bool },
    /// The stored Pod's, read by its name: the 1.20 `EphemeralContainers` object carries no spec.
    StoredPod(&'a str),
    /// These names, as a running Pod holds them.
    Listed(&'a [String]),
    /// None: the node's credentials only.
    None,
}

/// The keyring for one pod and what the user should hear about it.
#[derive(Debug, Clone, Default)]
pub struct PodKeyring {
    pub keyring: Keyring,
    pub warnings: Vec<String>,
    /// Pull secrets kubelet will refuse, failing every pull of the pod (a docker config that
    /// does not decode): one line each. The admission layer denies (enforce) or reports them.
    pub refused: Vec<String>,
}

/// Source of pull credentials.
#[async_trait]
pub trait PullSecrets: Send + Sync {
    async fn keyring_for(&self, pod: &PodContext<'_>) -> PodKeyring;
}

/// Node-level credentials only (no Kubernetes API configured, or `pinhook check` locally).
#[derive(Debug, Clone, Default)]
pub struct NodeOnly {
    pub node: Keyring,
}

/// Pod secrets read through the Kubernetes API, then the node-level keyring.
pub struct KubeSecrets {
    client: kube::Client,
    node: Keyring,
    secrets: moka::future::Cache<(String, String), Arc<Option<Secret>>>,
    accounts: moka::future::Cache<(String, String), Arc<Option<ServiceAccount>>>,
}

// === impl NodeOnly ===

#[async_trait]
impl PullSecrets for NodeOnly {
    async fn keyring_for(&self, pod: &PodContext<'_>) -> PodKeyring {
        let (keyring, warnings) =
            ask_sources(self.node.clone(), pod.images, pod.sources_deadline).await;
        PodKeyring {
            keyring,
            warnings,
            ..PodKeyring::default()
        }
    }
}

// === impl KubeSecrets ===

impl KubeSecrets {
    pub fn new(client: kube::Client, node: Keyring) -> KubeSecrets {
        KubeSecrets {
            client,
            node,
            secrets: object_cache(),
            accounts: object_cache(),
        }
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Option<Secret>>, kube::Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let key = (namespace.to_string(), name.to_string());
        self.secrets
            .try_get_with(key, async move { api.get_opt(name).await.map(Arc::new) })
            .await
            .map_err(unshare)
    }

    async fn service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Option<ServiceAccount>>, kube::Error> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let key = (namespace.to_string(), name.to_string());
        self.accounts
            .try_get_with(key, async move { api.get_opt(name).await.map(Arc::new) })
            .await
            .map_err(unshare)
    }

    /// The pod's spec for objects that carry none (the 1.20 `EphemeralContainers` shape).
    async fn pod_spec_of(&self, namespace: &str, name: &str) -> Option<Value> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = api.get_opt(name).await.ok()??;
        serde_json::to_value(pod.spec?).ok()
    }

    /// Secret names per kubelet: the spec's own, else (templates only) the service account's.
    async fn secret_names(&self, pod: &PodContext<'_>, warnings: &mut Vec<String>) -> Vec<String> {
        let (spec, is_pod) = match pod.secrets {
            SecretNames::Spec { spec, is_pod } => (spec, is_pod),
            SecretNames::Listed(names) => return names.to_vec(),
            SecretNames::None => return Vec::new(),
            SecretNames::StoredPod(name) => match self.pod_spec_of(pod.namespace, name).await {
                Some(spec) => return names_in(spec.get("imagePullSecrets")),
                None => return Vec::new(),
            },
        };
        let own = names_in(spec.get("imagePullSecrets"));
        if !own.is_empty() || is_pod {
            return own;
        }
        let account = spec
            .get("serviceAccountName")
            .or_else(|| spec.get("serviceAccount"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        if !is_object_name(account) {
            warnings.push(format!(
                "pinhook: serviceAccountName {account:?} is not a valid object name; not read"
            ));
            return Vec::new();
        }
        match self.service_account(pod.namespace, account).await {
            Ok(sa) => match sa.as_ref() {
                Some(sa) => sa
                    .image_pull_secrets
                    .iter()
                    .flatten()
                    .map(|r| r.name.clone())
                    .filter(|n| !n.is_empty())
                    .collect(),
                None => {
                    warnings.push(format!(
                        "pinhook: serviceaccount {}/{account} not found; resolved without its imagePullSecrets",
                        pod.namespace
                    ));
                    Vec::new()
                }
            },
            Err(e) => {
                warnings.push(format!(
                    "pinhook: cannot read serviceaccount {}/{account}: {}",
                    pod.namespace,
                    short_error(&e)
                ));
                Vec::new()
            }
        }
    }
}

#[async_trait]
impl PullSecrets for KubeSecrets {
    async fn keyring_for(&self, pod: &PodContext<'_>) -> PodKeyring {
        let mut warnings = Vec::new();
        let mut refused = Vec::new();
        let mut keyring = Keyring::new();
        let names = self.secret_names(pod, &mut warnings).await;
        for name in distinct_capped(names, &mut warnings) {
            // The name comes from the object under review (not validated yet when a
            // mutating webhook sees it) and goes into an API path: only valid names.
            if !is_object_name(&name) {
                warnings.push(format!(
                    "pinhook: imagePullSecret name {name:?} is not a valid object name; not read"
                ));
                continue;
            }
            match self.secret(pod.namespace, &name).await {
                Ok(secret) => match secret.as_ref() {
                    Some(secret) => match read_secret(secret).inspect_err(|e| {
                        debug!(namespace = pod.namespace, name, error = %e, "unusable pull secret")
                    }) {
                        // kubelet puts all of a pod's secrets into one keyring, sorted
                        // together.
                        Ok(parsed) => keyring.merge(parsed),
                        Err(e) if e.fails_the_pull() => refused.push(format!(
                            "imagePullSecret {}/{name} is malformed, so kubelet refuses \
                             every pull of this pod: {e}",
                            pod.namespace
                        )),
                        Err(e) => warnings.push(format!(
                            "pinhook: imagePullSecret {}/{name} unusable: {e}",
                            pod.namespace
                        )),
                    },
                    None => warnings.push(format!(
                        "pinhook: imagePullSecret {}/{name} not found",
                        pod.namespace
                    )),
                },
                Err(e) => warnings.push(format!(
                    "pinhook: cannot read imagePullSecret {}/{name}: {}",
                    pod.namespace,
                    short_error(&e)
                )),
            }
        }
        keyring.extend(self.node.clone());
        let (keyring, said) = ask_sources(keyring, pod.images, pod.sources_deadline).await;
        warnings.extend(said);
        PodKeyring {
            keyring,
            warnings,
            refused,
        }
    }
}

/// `keyring` with its per-image sources asked about `images`; past `deadline`,
/// `keyring` as it is (its pull secrets and static credentials) with a warning.
async fn ask_sources(
    keyring: Keyring,
    images: &[String],
    deadline: Option<tokio::time::Instant>,
) -> (Keyring, Vec<String>) {
    if !keyring.has_sources() {
        return (keyring, Vec::new());
    }
    let asked = keyring.for_images(images);
    let Some(deadline) = deadline else {
        return asked.await;
    };
    match tokio::time::timeout_at(deadline, asked).await {
        Ok(answered) => answered,
        Err(_) => (
            keyring,
            vec![
                "pinhook: credential plugins and helpers did not answer in time; resolved \
                 without them"
                    .to_string(),
            ],
        ),
    }
}

/// The credentials of one Secret, read as kubelet reads it.
fn read_secret(secret: &Secret) -> Result<Keyring, KeyringError> {
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    let secret_type = secret.type_.as_deref().unwrap_or("Opaque");
    Keyring::from_secret(secret_type, &data)
}

fn object_cache<V: Clone + Send + Sync + 'static>() -> moka::future::Cache<(String, String), V> {
    moka::future::Cache::builder()
        .max_capacity(10_000)
        .time_to_live(OBJECT_TTL)
        .build()
}

/// A DNS-1123 subdomain, what the apiserver accepts as a Secret or ServiceAccount name: at
/// most 253 characters of `a-z`, `0-9`, `-` and `.`, starting and ending alphanumeric.
fn is_object_name(name: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let bytes = name.as_bytes();
    (1..=253).contains(&bytes.len())
        && bytes.first().copied().is_some_and(alnum)
        && bytes.last().copied().is_some_and(alnum)
        && bytes.iter().all(|&c| alnum(c) || c == b'-' || c == b'.')
}

fn names_in(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name").and_then(Value::as_str))
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// `names` without repeats (kubelet reads a repeated secret once too), at most
/// [`MAX_PULL_SECRETS`] of them, in order; a warning says how many more were not read.
fn distinct_capped(names: Vec<String>, warnings: &mut Vec<String>) -> Vec<String> {
    let total = names.len();
    let mut seen = std::collections::HashSet::new();
    let mut kept = Vec::new();
    let mut dropped = 0usize;
    for name in names {
        if seen.contains(&name) {
            continue;
        }
        if kept.len() == MAX_PULL_SECRETS {
            dropped += 1;
            seen.insert(name);
            continue;
        }
        seen.insert(name.clone());
        kept.push(name);
    }
    if dropped > 0 {
        warnings.push(format!(
            "pinhook: {total} imagePullSecrets name {} distinct secrets; only the first \
             {MAX_PULL_SECRETS} were read",
            kept.len() + dropped
        ));
    }
    kept
}

/// moka shares one error among all waiters; kube's error is not Clone, so keep its text.
fn unshare(error: Arc<kube::Error>) -> kube::Error {
    match Arc::try_unwrap(error) {
        Ok(error) => error,
        Err(shared) => kube::Error::Service(shared.to_string().into()),
    }
}

/// The API's own message for API errors, else the error's text; warnings stay short.
fn short_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{distinct_capped, is_object_name, MAX_PULL_SECRETS};

    #[test]
    fn pull_secret_names_are_read_once_each_and_at_most_the_cap() {
        let mut warnings = Vec::new();
        let repeated = vec!["regcred".to_string(); 100_000];
        assert_eq!(distinct_capped(repeated, &mut warnings), ["regcred"]);
        assert!(warnings.is_empty());
        let many: Vec<String> = (0..300)
            .map(|i| format!("s{i}"))
            .chain(["s0".into()])
            .collect();
        let kept = distinct_capped(many, &mut warnings);
        assert_eq!(kept.len(), MAX_PULL_SECRETS);
        assert_eq!(kept[0], "s0");
        assert_eq!(
            warnings,
            ["pinhook: 301 imagePullSecrets name 300 distinct secrets; only the first 128 were read"]
        );
    }

    #[rstest::rstest]
    #[case("regcred", true)]
    #[case("reg-cred.v2", true)]
    #[case("0abc", true)]
    #[case("", false)]
    #[case("../../configmaps/x", false)]
    #[case("a/b", false)]
    #[case("RegCred", false)]
    #[case("-regcred", false)]
    #[case("regcred.", false)]
    #[case("reg%2Fcred", false)]
    #[case("reg cred", false)]
    fn only_valid_object_names_go_into_api_paths(#[case] name: &str, #[case] valid: bool) {
        assert_eq!(is_object_name(name), valid);
        assert!(!is_object_name(&"a".repeat(254)));
        assert!(is_object_name(&"a".repeat(253)));
    }
}
