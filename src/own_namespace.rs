//! pinhook's own namespace kept out of its webhooks on clusters older than 1.21 (issue 26),
//! where a namespaceSelector cannot name a namespace: the apiserver sets the
//! `kubernetes.io/metadata.name` label only from 1.21. There the chart renders every webhook
//! with `failurePolicy: Ignore` and writes the policy it was asked for into the configuration's
//! annotation [`FAILURE_POLICY_ANNOTATION`] (`pin.pinhook.dev=Fail,...`). This module labels
//! pinhook's namespace `pinhook.dev/ignore=true` (which every webhook's namespaceSelector
//! excludes) and only once the apiserver has returned the namespace with that label does it
//! set each webhook's `failurePolicy` to the annotated one.
//!
//! Why this order: a webhook with `failurePolicy: Fail` that still covers pinhook's namespace
//! refuses pinhook's own Pods and Helm's update of pinhook's Deployment whenever no pinhook
//! answers: a deadlock no one can undo but by hand. With `Ignore` until the label is in place
//! neither can happen, on the first install (Pods created before pinhook runs) or later.
//!
//! Guarantees: writes only that one label of that one namespace and `failurePolicy` of the
//! named webhooks of the named configurations; never sets `Fail` before the label is read back;
//! lowering to `Ignore` (the annotation asks for it) needs no label. Caveats: every `helm
//! upgrade` puts the rendered `Ignore` back (Helm 3's three-way merge reverts a rendered field
//! that changed live), so the check repeats every `interval`; a Helm 4 server-side apply of the
//! chart conflicts on `failurePolicy`, which pinhook then owns. See the chart README.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::{info, warn};

use crate::certs::managed::WebhookRef;
use crate::error::error_chain;

/// The annotation of a webhook configuration naming each webhook's wanted `failurePolicy`.
pub const FAILURE_POLICY_ANNOTATION: &str = "pinhook.dev/failure-policy";
/// The namespace label every webhook's namespaceSelector excludes (`NotIn ["true"]`).
pub const IGNORE_LABEL: &str = "pinhook.dev/ignore";
/// The field manager of every write.
const MANAGER: &str = "pinhook";

/// A webhook's `failurePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

/// Why an annotation's value is not `NAME=Fail|Ignore[,NAME=...]`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnnotationError {
    #[error("{FAILURE_POLICY_ANNOTATION}: '{0}' is not NAME=Fail or NAME=Ignore")]
    NotAnEntry(String),
    #[error("{FAILURE_POLICY_ANNOTATION}: webhook '{0}' is named twice")]
    Duplicate(String),
}

/// Why one pass failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to label namespace '{namespace}' {IGNORE_LABEL}=true")]
    LabelNamespaceFailed {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to read webhook configuration {configuration}")]
    ReadConfigurationFailed {
        configuration: WebhookRef,
        #[source]
        source: kube::Error,
    },
    #[error("webhook configuration {configuration} has a bad annotation")]
    BadAnnotation {
        configuration: WebhookRef,
        #[source]
        source: AnnotationError,
    },
    #[error("failed to set failurePolicy in webhook configuration {configuration}")]
    PatchConfigurationFailed {
        configuration: WebhookRef,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// pinhook's own namespace (the pod's).
    pub namespace: String,
    /// The configurations whose webhooks get their annotated failurePolicy.
    pub webhooks: Vec<WebhookRef>,
    /// Pause between passes (a pass is two or three GETs when nothing is to do).
    pub interval: Duration,
}

// === impl FailurePolicy ===

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// The annotation's value: each webhook's wanted policy. Empty text: none.
pub fn parse_annotation(text: &str) -> Result<BTreeMap<String, FailurePolicy>, AnnotationError> {
    let mut wanted = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let not_one = || AnnotationError::NotAnEntry(entry.to_string());
        let (name, policy) = entry.split_once('=').ok_or_else(not_one)?;
        let policy = match policy.trim() {
            "Fail" => FailurePolicy::Fail,
            "Ignore" => FailurePolicy::Ignore,
            _ => return Err(not_one()),
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(not_one());
        }
        if wanted.insert(name.to_string(), policy).is_some() {
            return Err(AnnotationError::Duplicate(name.to_string()));
        }
    }
    Ok(wanted)
}

/// The writes one configuration needs: each webhook whose live `failurePolicy` (`None`: unset,
/// which the apiserver defaults to Fail) differs from the wanted one, except that `Fail` is
/// never written while the namespace is not labelled. Webhooks the annotation does not name
/// are left alone; names it has that the configuration lacks are skipped.
pub fn changes(
    wanted: &BTreeMap<String, FailurePolicy>,
    live: &[(String, Option<String>)],
    labelled: bool,
) -> Vec<(String, FailurePolicy)> {
    live.iter()
        .filter_map(|(name, current)| {
            let want = *wanted.get(name)?;
            let current = current.as_deref().unwrap_or("Fail");
            if current == want.as_str() || (want == FailurePolicy::Fail && !labelled) {
                return None;
            }
            Some((name.clone(), want))
        })
        .collect()
}

/// Keeps the namespace labelled and the webhooks at their annotated policy, every
/// `config.interval`, until aborted. Each failure is logged and retried on the next pass.
pub fn start(client: kube::Client, config: Config) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        info!(
            namespace = %config.namespace,
            webhooks = %config.webhooks.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            "keeping the own namespace labelled {IGNORE_LABEL}=true before raising failurePolicy"
        );
        loop {
            if let Err(e) = reconcile(&client, &config).await {
                warn!(error = %error_chain(&e), "cannot keep the own namespace out of the webhooks");
            }
            tokio::time::sleep(config.interval).await;
        }
    })
}

/// One pass: the label, then each configuration's failurePolicy.
pub async fn reconcile(client: &kube::Client, config: &Config) -> Result<()> {
    let labelled = label_namespace(client, &config.namespace).await?;
    for webhook in &config.webhooks {
        reconcile_configuration(client, webhook, labelled).await?;
    }
    Ok(())
}

/// Labels the namespace unless it already is; true when the apiserver's copy carries it.
async fn label_namespace(client: &kube::Client, namespace: &str) -> Result<bool> {
    let failed = |source| Error::LabelNamespaceFailed {
        namespace: namespace.to_string(),
        source,
    };
    let api: Api<Namespace> = Api::all(client.clone());
    let current = api.get(namespace).await.map_err(failed)?;
    if has_ignore_label(&current) {
        return Ok(true);
    }
    let patch = json!({ "metadata": { "labels": { IGNORE_LABEL: "true" } } });
    let patched = api
        .patch(namespace, &params(), &Patch::Merge(&patch))
        .await
        .map_err(failed)?;
    let labelled = has_ignore_label(&patched);
    if labelled {
        info!(namespace, "labelled the own namespace {IGNORE_LABEL}=true");
    }
    Ok(labelled)
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.to_string()),
        ..PatchParams::default()
    }
}

fn has_ignore_label(namespace: &Namespace) -> bool {
    namespace
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(IGNORE_LABEL))
        .is_some_and(|v| v == "true")
}

/// Reads one configuration's annotation and webhooks and writes what [`changes`] says.
async fn reconcile_configuration(
    client: &kube::Client,
    webhook: &WebhookRef,
    labelled: bool,
) -> Result<()> {
    let read_failed = |source| Error::ReadConfigurationFailed {
        configuration: webhook.clone(),
        source,
    };
    let (annotations, live) = match webhook {
        WebhookRef::Mutating(name) => {
            let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
            let c = api.get(name).await.map_err(read_failed)?;
            let live = c
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.failure_policy))
                .collect::<Vec<_>>();
            (c.metadata.annotations, live)
        }
        WebhookRef::Validating(name) => {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            let c = api.get(name).await.map_err(read_failed)?;
            let live = c
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.failure_policy))
                .collect::<Vec<_>>();
            (c.metadata.annotations, live)
        }
    };
    let text = annotations
        .as_ref()
        .and_then(|a| a.get(FAILURE_POLICY_ANNOTATION))
        .map(String::as_str)
        .unwrap_or_default();
    let wanted = parse_annotation(text).map_err(|source| Error::BadAnnotation {
        configuration: webhook.clone(),
        source,
    })?;
    let todo = changes(&wanted, &live, labelled);
    if todo.is_empty() {
        return Ok(());
    }
    // A strategic merge patch: webhooks merge by name, so only the named entries'
    // failurePolicy changes, whatever the list's order.
    let entries: Vec<_> = todo
        .iter()
        .map(|(name, policy)| json!({"name": name, "failurePolicy": policy.as_str()}))
        .collect();
    let patch = json!({ "webhooks": entries });
    let patch = Patch::Strategic(&patch);
    let params = params();
    let patch_failed = |source| Error::PatchConfigurationFailed {
        configuration: webhook.clone(),
        source,
    };
    match webhook {
        WebhookRef::Mutating(name) => {
            let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
            api.patch(name, &params, &patch)
                .await
                .map_err(patch_failed)?;
        }
        WebhookRef::Validating(name) => {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            api.patch(name, &params, &patch)
                .await
                .map_err(patch_failed)?;
        }
    }
    for (name, policy) in &todo {
        info!(configuration = %webhook, webhook = %name, failure_policy = policy.as_str(), "failurePolicy set");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(text: &str) -> BTreeMap<String, FailurePolicy> {
        parse_annotation(text).expect("valid annotation")
    }

    fn live(entries: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        entries
            .iter()
            .map(|(n, p)| (n.to_string(), p.map(str::to_string)))
            .collect()
    }

    #[test]
    fn the_annotation_parses_each_webhook_policy() {
        let w = wanted(" validate.pinhook.dev=Fail, mirrors.pinhook.dev=Ignore ,");
        assert_eq!(w.len(), 2);
        assert_eq!(w["validate.pinhook.dev"], FailurePolicy::Fail);
        assert_eq!(w["mirrors.pinhook.dev"], FailurePolicy::Ignore);
        assert!(wanted("").is_empty());
    }

    #[test]
    fn a_bad_annotation_is_refused_with_the_entry() {
        assert_eq!(
            parse_annotation("pin.pinhook.dev=fail"),
            Err(AnnotationError::NotAnEntry("pin.pinhook.dev=fail".into()))
        );
        assert_eq!(
            parse_annotation("pin.pinhook.dev"),
            Err(AnnotationError::NotAnEntry("pin.pinhook.dev".into()))
        );
        assert_eq!(
            parse_annotation("=Fail"),
            Err(AnnotationError::NotAnEntry("=Fail".into()))
        );
        assert_eq!(
            parse_annotation("a=Fail,a=Ignore"),
            Err(AnnotationError::Duplicate("a".into()))
        );
    }

    #[test]
    fn fail_is_never_set_before_the_namespace_is_labelled() {
        let w = wanted("pin.pinhook.dev=Fail");
        let l = live(&[("pin.pinhook.dev", Some("Ignore"))]);
        assert!(changes(&w, &l, false).is_empty());
        assert_eq!(
            changes(&w, &l, true),
            vec![("pin.pinhook.dev".to_string(), FailurePolicy::Fail)]
        );
    }

    #[test]
    fn ignore_is_set_without_the_label_and_nothing_already_right_is_written() {
        let w = wanted("validate.pinhook.dev=Ignore,mirrors.pinhook.dev=Fail");
        let l = live(&[
            ("validate.pinhook.dev", Some("Fail")),
            ("mirrors.pinhook.dev", Some("Fail")),
        ]);
        assert_eq!(
            changes(&w, &l, false),
            vec![("validate.pinhook.dev".to_string(), FailurePolicy::Ignore)]
        );
        // An unset failurePolicy is the apiserver's default, Fail.
        let unset = live(&[("mirrors.pinhook.dev", None)]);
        assert!(changes(&w, &unset, true).is_empty());
    }

    #[test]
    fn webhooks_the_annotation_does_not_name_are_left_alone() {
        let w = wanted("pin.pinhook.dev=Fail,gone.pinhook.dev=Fail");
        let l = live(&[
            ("pin.pinhook.dev", Some("Ignore")),
            ("other.example.com", Some("Ignore")),
        ]);
        assert_eq!(
            changes(&w, &l, true),
            vec![("pin.pinhook.dev".to_string(), FailurePolicy::Fail)]
        );
    }
}
