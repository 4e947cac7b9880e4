//! A small in-process fake of the few Kubernetes API endpoints pinhook reads, answering with
//! the real API's JSON shapes (objects as `kubectl get -o json` prints them, `v1 Status` for
//! errors). Plain HTTP on 127.0.0.1:0; counts requests per path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde_json::{json, Value};

#[derive(Default)]
struct Store {
    /// (resource, namespace, name) → object
    objects: HashMap<(String, String, String), Value>,
    hits: HashMap<String, usize>,
    /// bearer token → username
    tokens: HashMap<String, String>,
    /// (username, group, resource, namespace) allowed to `create`
    grants: Vec<(String, String, String, String)>,
    /// TokenReviews received.
    token_reviews: usize,
    /// Every SubjectAccessReview spec received.
    access_reviews: Vec<Value>,
}

/// The two Secret types kubelet reads image pull credentials from.
#[derive(Debug, Clone, Copy)]
pub enum PullSecretFormat {
    /// `kubernetes.io/dockerconfigjson`: `{"auths": {registry: {"auth": base64(user:pass)}}}`.
    DockerConfigJson,
    /// The legacy `kubernetes.io/dockercfg`: `{registry: {"username", "password", "email"}}`.
    DockerCfg,
}

/// How the fake fails every request once told to ([`FakeKube::set_fault`]), for fault tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeFault {
    /// `503 Service Unavailable` with the apiserver's `v1 Status` body.
    Unavailable,
    /// The request is read and never answered.
    Hang,
}

/// The fake API server.
pub struct FakeKube {
    pub url: String,
    store: Arc<Mutex<Store>>,
    task: tokio::task::JoinHandle<()>,
    fault: Arc<Mutex<Option<KubeFault>>>,
    /// Fired by [`FakeKube::stop`]: stop accepting, close idle connections.
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl FakeKube {
    pub async fn start() -> FakeKube {
        let store = Arc::new(Mutex::new(Store::default()));
        let fault = Arc::new(Mutex::new(None));
        let app = Router::new()
            .route(
                "/api/v1/namespaces/{ns}/{resource}/{name}",
                get(get_namespaced),
            )
            .route("/api/v1/namespaces/{name}", get(get_namespace))
            .route(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                post(token_review),
            )
            .route(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                post(access_review),
            )
            .with_state(store.clone())
            .layer(middleware::from_fn_with_state(fault.clone(), apply_fault));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        FakeKube {
            url,
            store,
            task,
            fault,
            stop: Mutex::new(Some(stop)),
        }
    }

    /// From now on every request fails as `fault` says (`None`: answered again).
    pub fn set_fault(&self, fault: Option<KubeFault>) {
        *self.fault.lock().expect("fault") = fault;
    }

    /// Stops the fake for good, as an API server that went away: the listener is closed (new
    /// connections are refused) and kept-alive idle connections are closed. Idempotent.
    pub fn stop(&self) {
        if let Some(stop) = self.stop.lock().expect("stop").take() {
            let _ = stop.send(());
        }
    }

    /// Whether the fake has stopped accepting connections (some time after [`FakeKube::stop`]).
    pub fn is_stopped(&self) -> bool {
        self.task.is_finished()
    }

    /// A kube client pointed at the fake.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }

    fn put(&self, resource: &str, namespace: &str, name: &str, object: Value) {
        self.store
            .lock()
            .expect("store")
            .objects
            .insert((resource.into(), namespace.into(), name.into()), object);
    }

    /// A pull Secret of `format` holding one registry's username and password.
    pub fn add_pull_secret(
        &self,
        format: PullSecretFormat,
        namespace: &str,
        name: &str,
        registry: &str,
        (user, pass): (&str, &str),
    ) {
        let (secret_type, key, config) = match format {
            PullSecretFormat::DockerConfigJson => (
                "kubernetes.io/dockerconfigjson",
                ".dockerconfigjson",
                json!({"auths": {registry: {"auth": b64(&format!("{user}:{pass}"))}}}),
            ),
            PullSecretFormat::DockerCfg => (
                "kubernetes.io/dockercfg",
                ".dockercfg",
                json!({registry: {"username": user, "password": pass, "email": "ci@example.com"}}),
            ),
        };
        let secret = json!({
            "kind": "Secret",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{namespace}-{name}"), "resourceVersion": "1"},
            "data": {key: b64(&config.to_string())},
            "type": secret_type
        });
        self.put("secrets", namespace, name, secret);
    }

    /// A Secret of `secret_type` whose data key `key` holds `content` as written (to serve
    /// malformed pull secrets).
    pub fn add_raw_secret(
        &self,
        namespace: &str,
        name: &str,
        secret_type: &str,
        key: &str,
        content: &str,
    ) {
        let secret = json!({
            "kind": "Secret",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{namespace}-{name}"), "resourceVersion": "1"},
            "data": {key: b64(content)},
            "type": secret_type
        });
        self.put("secrets", namespace, name, secret);
    }

    pub fn add_service_account(&self, namespace: &str, name: &str, pull_secrets: &[&str]) {
        let refs: Vec<Value> = pull_secrets.iter().map(|s| json!({"name": s})).collect();
        let account = json!({
            "kind": "ServiceAccount",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-sa-{name}"), "resourceVersion": "1"},
            "imagePullSecrets": refs
        });
        self.put("serviceaccounts", namespace, name, account);
    }

    pub fn add_pod(&self, namespace: &str, pod: Value) {
        let name = pod["metadata"]["name"]
            .as_str()
            .expect("pod name")
            .to_string();
        self.put("pods", namespace, &name, pod);
    }

    pub fn add_namespace(&self, name: &str, labels: Value) {
        let namespace = json!({
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {"name": name, "labels": labels, "uid": format!("uid-ns-{name}"), "resourceVersion": "1"},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}
        });
        self.put("namespaces", "", name, namespace);
    }

    /// A token the fake's TokenReview accepts, for `username`.
    pub fn add_token(&self, token: &str, username: &str) {
        let mut store = self.store.lock().expect("store");
        store.tokens.insert(token.into(), username.into());
    }

    /// The SubjectAccessReview specs received so far.
    pub fn access_reviews(&self) -> Vec<Value> {
        self.store.lock().expect("store").access_reviews.clone()
    }

    /// Lets `username` create `group/resource` in `namespace`.
    pub fn grant_create(&self, username: &str, group: &str, resource: &str, namespace: &str) {
        let mut store = self.store.lock().expect("store");
        store.grants.push((
            username.into(),
            group.into(),
            resource.into(),
            namespace.into(),
        ));
    }

    /// TokenReviews received (POSTs: not counted in [`FakeKube::hits`]).
    pub fn token_reviews(&self) -> usize {
        self.store.lock().expect("store").token_reviews
    }

    /// How many GETs reached a path containing `fragment`.
    pub fn hits(&self, fragment: &str) -> usize {
        let store = self.store.lock().expect("store");
        store
            .hits
            .iter()
            .filter(|(path, _)| path.contains(fragment))
            .map(|(_, n)| n)
            .sum()
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Fails every request as the current [`KubeFault`] says, else passes it on.
async fn apply_fault(
    State(fault): State<Arc<Mutex<Option<KubeFault>>>>,
    request: Request,
    next: Next,
) -> Response {
    let current = *fault.lock().expect("fault");
    match current {
        None => next.run(request).await,
        Some(KubeFault::Hang) => std::future::pending().await,
        Some(KubeFault::Unavailable) => {
            let status = json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "the server is currently unable to handle the request",
                "reason": "ServiceUnavailable",
                "code": 503
            });
            (StatusCode::SERVICE_UNAVAILABLE, Json(status)).into_response()
        }
    }
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn get_namespaced(
    State(store): State<Arc<Mutex<Store>>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
) -> Response {
    lookup(
        &store,
        &resource,
        &ns,
        &name,
        &format!("/api/v1/namespaces/{ns}/{resource}/{name}"),
    )
}

async fn get_namespace(
    State(store): State<Arc<Mutex<Store>>>,
    Path(name): Path<String>,
) -> Response {
    lookup(
        &store,
        "namespaces",
        "",
        &name,
        &format!("/api/v1/namespaces/{name}"),
    )
}

/// `POST tokenreviews`: echoes the review with `status` filled, as the apiserver does.
async fn token_review(
    State(store): State<Arc<Mutex<Store>>>,
    Json(mut review): Json<Value>,
) -> Response {
    let token = review["spec"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let user = {
        let mut store = store.lock().expect("store");
        store.token_reviews += 1;
        store.tokens.get(&token).cloned()
    };
    review["status"] = match user {
        Some(username) => json!({
            "authenticated": true,
            "user": {
                "username": username,
                "uid": format!("uid-{username}"),
                "groups": ["system:authenticated"],
                // what a bound ServiceAccount token carries (1.21+)
                "extra": {"authentication.kubernetes.io/pod-name": ["runner-0"]}
            },
            "audiences": ["https://kubernetes.default.svc"]
        }),
        None => json!({"user": {}, "error": "invalid bearer token"}),
    };
    (StatusCode::CREATED, Json(review)).into_response()
}

/// `POST subjectaccessreviews`: allowed when a grant matches the resource attributes.
async fn access_review(
    State(store): State<Arc<Mutex<Store>>>,
    Json(mut review): Json<Value>,
) -> Response {
    let spec = &review["spec"];
    let attributes = &spec["resourceAttributes"];
    let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let wanted = (
        field(&spec["user"]),
        field(&attributes["group"]),
        field(&attributes["resource"]),
        field(&attributes["namespace"]),
    );
    let mut store = store.lock().expect("store");
    let allowed = field(&attributes["verb"]) == "create" && store.grants.contains(&wanted);
    store.access_reviews.push(spec.clone());
    review["status"] = json!({"allowed": allowed});
    (StatusCode::CREATED, Json(review)).into_response()
}

fn lookup(store: &Mutex<Store>, resource: &str, ns: &str, name: &str, path: &str) -> Response {
    let mut store = store.lock().expect("store");
    *store.hits.entry(path.to_string()).or_default() += 1;
    match store
        .objects
        .get(&(resource.into(), ns.into(), name.into()))
    {
        Some(object) => Json(object.clone()).into_response(),
        None => not_found(resource, name),
    }
}

/// The apiserver's 404 body.
fn not_found(resource: &str, name: &str) -> Response {
    let status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{resource} \"{name}\" not found"),
        "reason": "NotFound",
        "details": {"name": name, "kind": resource},
        "code": 404
    });
    (StatusCode::NOT_FOUND, Json(status)).into_response()
}
