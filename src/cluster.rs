//! What pinhook reads from the Kubernetes API besides pull secrets: namespace labels (the
//! per-namespace `pinhook.dev/mode` override), cached briefly.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

/// How long a namespace's labels answer before they are read again.
const NAMESPACE_TTL: Duration = Duration::from_secs(30);

/// Source of namespace labels.
#[async_trait]
pub trait NamespaceLabels: Send + Sync {
    /// The value of `label` on `namespace`; `Err` with a short reason when it cannot be read.
    async fn label(&self, namespace: &str, label: &str) -> Result<Option<String>, String>;
}

/// No Kubernetes API: no namespace has labels.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoNamespaces;

/// Namespace labels read through the API (`namespaces` get).
pub struct KubeNamespaces {
    client: kube::Client,
    cache: moka::future::Cache<String, Arc<Option<Namespace>>>,
}

#[async_trait]
impl NamespaceLabels for NoNamespaces {
    async fn label(&self, _namespace: &str, _label: &str) -> Result<Option<String>, String> {
        Ok(None)
    }
}

// === impl KubeNamespaces ===

impl KubeNamespaces {
    pub fn new(client: kube::Client) -> KubeNamespaces {
        KubeNamespaces {
            client,
            cache: moka::future::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(NAMESPACE_TTL)
                .build(),
        }
    }
}

#[async_trait]
impl NamespaceLabels for KubeNamespaces {
    async fn label(&self, namespace: &str, label: &str) -> Result<Option<String>, String> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let name = namespace.to_string();
        let found = self
            .cache
            .try_get_with(name.clone(), async move {
                api.get_opt(&name).await.map(Arc::new)
            })
            .await
            .map_err(|e| match e.as_ref() {
                kube::Error::Api(status) => status.message.clone(),
                other => other.to_string(),
            })?;
        Ok(found
            .as_ref()
            .as_ref()
            .and_then(|ns| ns.metadata.labels.as_ref())
            .and_then(|labels| labels.get(label))
            .cloned())
    }
}
