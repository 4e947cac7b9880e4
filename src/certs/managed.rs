//! Self-managed certificates through the Kubernetes API: the replica holding the Lease keeps
//! the TLS Secret as [`rotation::plan`] decides and writes its trust bundle into `caBundle`
//! of exactly the webhook configurations it was given; every replica watches the Secret and
//! hands each new serving pair to the server at once (no wait for kubelet's refresh of a
//! mounted file). The Secret and the webhook configurations are created by the chart without
//! certificate data, so pinhook owns those fields and nothing else.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use futures::TryStreamExt as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::rotation::{self, Contents, Settings, Step};
use crate::error::error_chain;
use crate::lease::LeaseLock;

/// The field manager of every write.
const MANAGER: &str = "pinhook";
/// Pause before watching again after the watch ended or failed.
const REWATCH: Duration = Duration::from_secs(1);

/// A webhook configuration whose `caBundle` pinhook keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookRef {
    Mutating(String),
    Validating(String),
}

/// Why a `--tls-webhook` value is not one.
#[derive(Debug, thiserror::Error)]
#[error("'{0}' is not mutating/NAME or validating/NAME")]
pub struct WebhookRefError(String);

/// What to manage and how.
#[derive(Debug, Clone)]
pub struct ManagedConfig {
    pub namespace: String,
    pub secret: String,
    pub lease: String,
    /// This replica's name in the Lease (the pod name).
    pub identity: String,
    pub webhooks: Vec<WebhookRef>,
    pub settings: Settings,
    /// How often the Lease holder renews it and checks the certificates.
    pub interval: Duration,
}

/// A serving certificate and its key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    pub cert: String,
    pub key: String,
}

/// The running manager: the serving pair as the Secret holds it, and the tasks keeping it.
pub struct ManagedTls {
    pub serving: watch::Receiver<Option<Serving>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

// === impl WebhookRef ===

impl FromStr for WebhookRef {
    type Err = WebhookRefError;

    fn from_str(s: &str) -> Result<WebhookRef, WebhookRefError> {
        let err = || WebhookRefError(s.to_string());
        let (kind, name) = s.trim().split_once('/').ok_or_else(err)?;
        if name.is_empty() || name.contains('/') {
            return Err(err());
        }
        match kind {
            "mutating" => Ok(WebhookRef::Mutating(name.to_string())),
            "validating" => Ok(WebhookRef::Validating(name.to_string())),
            _ => Err(err()),
        }
    }
}

impl std::fmt::Display for WebhookRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WebhookRef::Mutating(name) => write!(f, "mutating/{name}"),
            WebhookRef::Validating(name) => write!(f, "validating/{name}"),
        }
    }
}

// === impl ManagedTls ===

impl ManagedTls {
    /// Starts electing, reconciling and watching.
    pub fn start(client: kube::Client, config: ManagedConfig) -> ManagedTls {
        let (sender, serving) = watch::channel(None);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
        let watcher = tokio::spawn(watch_secret(
            secrets.clone(),
            config.secret.clone(),
            config.settings.clone(),
            sender,
        ));
        let leader = tokio::spawn(lead(client, config));
        ManagedTls {
            serving,
            tasks: vec![watcher, leader],
        }
    }

    /// Waits until the Secret holds a serving pair.
    pub async fn first(&mut self) -> Option<Serving> {
        let pair = self.serving.wait_for(Option::is_some).await.ok()?;
        pair.clone()
    }
}

impl Drop for ManagedTls {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Every replica: the Secret's serving pair, sent on each change when it is one the
/// apiserver will accept ([`rotation::serving_pair`]); anything else is not served.
async fn watch_secret(
    secrets: Api<Secret>,
    name: String,
    settings: Settings,
    sender: watch::Sender<Option<Serving>>,
) {
    let publish = |secret: &Secret| {
        let now = OffsetDateTime::now_utc();
        let pair = rotation::serving_pair(&contents_of(secret).data, &settings, now)
            .map(|(cert, key)| Serving { cert, key });
        if pair.is_some() {
            sender.send_if_modified(|current| {
                let changed = *current != pair;
                if changed {
                    current.clone_from(&pair);
                }
                changed
            });
        }
    };
    loop {
        let version = match secrets.get_opt(&name).await {
            Ok(Some(secret)) => {
                publish(&secret);
                secret.metadata.resource_version.unwrap_or_default()
            }
            Ok(None) => {
                warn!(secret = %name, "TLS Secret not found; the chart creates it");
                tokio::time::sleep(REWATCH * 5).await;
                continue;
            }
            Err(e) => {
                warn!(secret = %name, error = %e, "cannot read the TLS Secret");
                tokio::time::sleep(REWATCH * 5).await;
                continue;
            }
        };
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        match secrets.watch(&params, &version).await {
            Ok(stream) => {
                let mut stream = std::pin::pin!(stream);
                loop {
                    match stream.try_next().await {
                        Ok(Some(WatchEvent::Added(secret) | WatchEvent::Modified(secret))) => {
                            publish(&secret)
                        }
                        Ok(Some(WatchEvent::Bookmark(_) | WatchEvent::Deleted(_))) => {}
                        Ok(Some(WatchEvent::Error(status))) => {
                            debug!(code = status.code, "TLS Secret watch ended; watching again");
                            break;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            warn!(secret = %name, error = %e, "TLS Secret watch failed");
                            break;
                        }
                    }
                }
            }
            Err(e) => warn!(secret = %name, error = %e, "cannot watch the TLS Secret"),
        }
        tokio::time::sleep(REWATCH).await;
    }
}

/// The Lease holder: keeps the Secret and the webhook configurations.
async fn lead(client: kube::Client, config: ManagedConfig) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let lock = LeaseLock::new(leases, &config.lease, &config.identity, config.interval * 3);
    let mut leading = false;
    loop {
        match lock.try_acquire_or_renew().await {
            Ok(now_leading) => {
                if now_leading != leading {
                    info!(lease = %config.lease, identity = %config.identity, leading = now_leading, "TLS Lease");
                    leading = now_leading;
                }
                if leading {
                    if let Err(e) = reconcile(&client, &config).await {
                        warn!(error = %error_chain(&e), "cannot keep the TLS Secret and caBundle");
                    }
                }
            }
            Err(e) => {
                warn!(lease = %config.lease, error = %e, "cannot take or renew the TLS Lease")
            }
        }
        tokio::time::sleep(config.interval).await;
    }
}

/// Why one reconciliation did not finish.
#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error("Kubernetes API")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Certs(#[from] super::CertError),
    #[error("TLS Secret {0} not found; the chart creates it")]
    NoSecret(String),
}

async fn reconcile(client: &kube::Client, config: &ManagedConfig) -> Result<(), ReconcileError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let secret = secrets
        .get_opt(&config.secret)
        .await?
        .ok_or_else(|| ReconcileError::NoSecret(config.secret.clone()))?;
    let current = contents_of(&secret);
    let bundle = current
        .data
        .get(rotation::BUNDLE)
        .cloned()
        .unwrap_or_default();
    let carried = read_bundles(client, &config.webhooks).await?;
    let in_sync = !bundle.is_empty() && all_carry(&carried, &bundle);
    let now = OffsetDateTime::now_utc();
    let bundle = match rotation::plan(&current, now, &config.settings, in_sync)? {
        Step::Keep => bundle,
        Step::Write { contents, reasons } => {
            let patch = secret_patch(&current, &contents, secret.metadata.resource_version);
            secrets
                .patch(&config.secret, &params(), &Patch::Merge(&patch))
                .await?;
            info!(secret = %config.secret, reasons = %reasons.join("; "), "TLS Secret written");
            contents
                .data
                .get(rotation::BUNDLE)
                .cloned()
                .unwrap_or_default()
        }
    };
    sync_webhooks(client, &carried, &bundle).await?;
    Ok(())
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// A merge patch from `current` to `wanted`, conditional on `version` (a concurrent write
/// makes it 409).
fn secret_patch(current: &Contents, wanted: &Contents, version: Option<String>) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut data = serde_json::Map::new();
    for (key, value) in &wanted.data {
        data.insert(key.clone(), Value::String(engine.encode(value)));
    }
    for key in current.data.keys() {
        if !wanted.data.contains_key(key) {
            data.insert(key.clone(), Value::Null);
        }
    }
    let published = wanted
        .published_at
        .and_then(|at| at.format(&Rfc3339).ok())
        .map_or(Value::Null, Value::String);
    json!({
        "metadata": {
            "resourceVersion": version,
            "annotations": { rotation::PUBLISHED_AT: published },
        },
        "data": data,
    })
}

/// The Secret's data (values that are not UTF-8 are left out: no PEM is) and annotation.
fn contents_of(secret: &Secret) -> Contents {
    let data: BTreeMap<String, String> = secret
        .data
        .iter()
        .flatten()
        .filter_map(|(k, v)| String::from_utf8(v.0.clone()).ok().map(|v| (k.clone(), v)))
        .collect();
    let published_at = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(rotation::PUBLISHED_AT))
        .and_then(|v| OffsetDateTime::parse(v, &Rfc3339).ok());
    Contents { data, published_at }
}

/// Each webhook's `caBundle` in one configuration.
async fn bundles_of(
    client: &kube::Client,
    webhook: &WebhookRef,
) -> Result<Vec<(String, Option<String>)>, kube::Error> {
    let bundles = match webhook {
        WebhookRef::Mutating(name) => {
            let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
            api.get(name)
                .await?
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.client_config.ca_bundle.map(|b| b.0)))
                .collect::<Vec<_>>()
        }
        WebhookRef::Validating(name) => {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            api.get(name)
                .await?
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.client_config.ca_bundle.map(|b| b.0)))
                .collect::<Vec<_>>()
        }
    };
    Ok(bundles
        .into_iter()
        .map(|(name, bundle)| (name, bundle.and_then(|b| String::from_utf8(b).ok())))
        .collect())
}

/// Each configured configuration's webhooks with their caBundle, read once per pass; `None`
/// for a configuration that does not exist (deleted by hand: it calls nobody, so it neither
/// holds a rotation back nor gets written).
type Carried = Vec<(WebhookRef, Option<Vec<(String, Option<String>)>>)>;

async fn read_bundles(
    client: &kube::Client,
    webhooks: &[WebhookRef],
) -> Result<Carried, kube::Error> {
    let mut carried = Vec::with_capacity(webhooks.len());
    for webhook in webhooks {
        let bundles = match bundles_of(client, webhook).await {
            Ok(bundles) => Some(bundles),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                warn!(configuration = %webhook, "webhook configuration not found; its caBundle is not kept");
                None
            }
            Err(e) => return Err(e),
        };
        carried.push((webhook.clone(), bundles));
    }
    Ok(carried)
}

/// Whether every webhook of every existing configuration carries `bundle`.
fn all_carry(carried: &Carried, bundle: &str) -> bool {
    carried
        .iter()
        .filter_map(|(_, bundles)| bundles.as_ref())
        .flatten()
        .all(|(_, b)| b.as_deref() == Some(bundle))
}

/// Writes `bundle` into every webhook of the configured configurations that lacks it.
async fn sync_webhooks(
    client: &kube::Client,
    carried: &Carried,
    bundle: &str,
) -> Result<(), kube::Error> {
    if bundle.is_empty() {
        return Ok(());
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
    for (webhook, bundles) in carried {
        let stale: Vec<Value> = bundles
            .iter()
            .flatten()
            .filter(|(_, current)| current.as_deref() != Some(bundle))
            .map(|(name, _)| json!({"name": name, "clientConfig": {"caBundle": encoded}}))
            .collect();
        if stale.is_empty() {
            continue;
        }
        // A strategic merge patch: webhooks merge by name, so only the named entries'
        // caBundle changes, whatever the list's order.
        let patch = json!({ "webhooks": stale });
        let patch = Patch::Strategic(&patch);
        match webhook {
            WebhookRef::Mutating(name) => {
                let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
                api.patch(name, &params(), &patch).await?;
            }
            WebhookRef::Validating(name) => {
                let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
                api.patch(name, &params(), &patch).await?;
            }
        }
        info!(configuration = %webhook, "caBundle written");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_configuration_holds_nothing_back_and_any_stale_webhook_does() {
        let hook = |b: Option<&str>| ("w".to_string(), b.map(str::to_string));
        let m = WebhookRef::Mutating("m".into());
        let v = WebhookRef::Validating("v".into());
        let carried: Carried = vec![(m.clone(), Some(vec![hook(Some("B"))])), (v.clone(), None)];
        assert!(all_carry(&carried, "B"));
        assert!(!all_carry(&carried, "other"));
        let stale: Carried = vec![(m, Some(vec![hook(Some("B")), hook(None)])), (v, None)];
        assert!(!all_carry(&stale, "B"));
    }

    #[test]
    fn webhook_refs_parse_and_print_back() {
        for text in ["mutating/pinhook", "validating/pinhook-x"] {
            let parsed: WebhookRef = text.parse().expect("parses");
            assert_eq!(parsed.to_string(), text);
        }
        for bad in ["pinhook", "mutating/", "other/x", "mutating/a/b", ""] {
            assert!(bad.parse::<WebhookRef>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_secret_patch_sets_new_keys_removes_dropped_ones_and_is_conditional() {
        let mut current = Contents::default();
        current.data.insert("next.crt".into(), "old".into());
        current.data.insert("tls.crt".into(), "a".into());
        let mut wanted = Contents::default();
        wanted.data.insert("tls.crt".into(), "b".into());
        let patch = secret_patch(&current, &wanted, Some("42".into()));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(
            patch["data"]["tls.crt"],
            base64::engine::general_purpose::STANDARD.encode("b")
        );
        assert_eq!(patch["data"]["next.crt"], Value::Null);
        assert_eq!(
            patch["metadata"]["annotations"][rotation::PUBLISHED_AT],
            Value::Null
        );
    }
}
