//! An in-process fake of the Kubernetes API, one for every test that talks to an apiserver:
//! the admission and dry-run tests (pull Secrets, ServiceAccounts, Namespaces, TokenReview,
//! SubjectAccessReview) and the watch's (PolicyReports, Events, any other object). Any object of
//! any resource (core or group), namespaced or cluster-scoped, is stored as JSON; `GET` of an
//! object or a list (all namespaces, or one; `labelSelector=k=v`, `fieldSelector=metadata.name=n`;
//! in pages when asked with `limit`, `continue` an offset), `POST`, `PUT`, `PATCH`
//! (server-side apply replaces the object, a merge patch merges) and `DELETE` work on it, with
//! the real API's JSON shapes (objects as `kubectl get -o json` prints them, `v1 Status` for
//! errors). TokenReviews and SubjectAccessReviews are answered, not stored. Plain HTTP on
//! 127.0.0.1:0. Every read (path) and every write (method, path) is recorded, so a test can
//! count them, and a fault can be injected for every request ([`FakeKube::set_fault`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use serde_json::{json, Value};

/// (api prefix `api/v1` or `apis/g/v`, resource, namespace or "", name) → object.
type Key = (String, String, String, String);

#[derive(Default)]
struct Store {
    objects: BTreeMap<Key, Value>,
    /// Every write: (method, path).
    writes: Vec<(String, String)>,
    /// Every GET's path.
    reads: Vec<String>,
    /// Every list (GET of a collection): path and query.
    lists: Vec<String>,
    version: u64,
    /// bearer token → username
    tokens: HashMap<String, String>,
    /// (username, verb, group, resource, namespace) allowed; namespace "" is every namespace
    /// (a cluster-wide grant, as a ClusterRoleBinding).
    grants: Vec<(String, String, String, String, String)>,
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
    url: String,
    store: Arc<Mutex<Store>>,
    task: tokio::task::JoinHandle<()>,
    fault: Arc<Mutex<Option<KubeFault>>>,
    /// Fired by [`FakeKube::stop`]: stop accepting, close idle connections.
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

// === impl FakeKube ===

impl FakeKube {
    pub async fn start() -> FakeKube {
        let store = Arc::new(Mutex::new(Store::default()));
        let fault = Arc::new(Mutex::new(None));
        let app = Router::new()
            .route(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                post(token_review),
            )
            .route(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                post(access_review),
            )
            .fallback(handle)
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

    /// Stores `object` at `path` (`api/v1/namespaces/shop/secrets/pull`, …).
    pub fn put(&self, path: &str, object: Value) {
        let (key, _) = key_of(path).expect("an object path");
        self.store
            .lock()
            .expect("store")
            .objects
            .insert(key, object);
    }

    /// The object at `path`, as stored or last written.
    pub fn get(&self, path: &str) -> Option<Value> {
        let (key, _) = key_of(path).expect("an object path");
        self.store.lock().expect("store").objects.get(&key).cloned()
    }

    /// Every object of `resource` (e.g. `events`), in key order.
    pub fn all(&self, resource: &str) -> Vec<Value> {
        let store = self.store.lock().expect("store");
        store
            .objects
            .iter()
            .filter(|(k, _)| k.1 == resource)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The paths read (GET) so far.
    pub fn reads(&self) -> Vec<String> {
        self.store.lock().expect("store").reads.clone()
    }

    /// How many GETs reached a path containing `fragment`.
    pub fn hits(&self, fragment: &str) -> usize {
        let store = self.store.lock().expect("store");
        store
            .reads
            .iter()
            .filter(|path| path.contains(fragment))
            .count()
    }

    /// The lists (GETs of a collection) so far, each `path?query`, in order.
    pub fn lists(&self) -> Vec<String> {
        self.store.lock().expect("store").lists.clone()
    }

    /// The writes so far: (method, path).
    pub fn writes(&self) -> Vec<(String, String)> {
        self.store.lock().expect("store").writes.clone()
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
        self.put(
            &format!("api/v1/namespaces/{namespace}/secrets/{name}"),
            secret,
        );
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
        self.put(
            &format!("api/v1/namespaces/{namespace}/secrets/{name}"),
            secret,
        );
    }

    pub fn add_service_account(&self, namespace: &str, name: &str, pull_secrets: &[&str]) {
        let refs: Vec<Value> = pull_secrets.iter().map(|s| json!({"name": s})).collect();
        let account = json!({
            "kind": "ServiceAccount",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-sa-{name}"), "resourceVersion": "1"},
            "imagePullSecrets": refs
        });
        self.put(
            &format!("api/v1/namespaces/{namespace}/serviceaccounts/{name}"),
            account,
        );
    }

    pub fn add_namespace(&self, name: &str, labels: Value) {
        let namespace = json!({
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {"name": name, "labels": labels, "uid": format!("uid-ns-{name}"), "resourceVersion": "1"},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}
        });
        self.put(&format!("api/v1/namespaces/{name}"), namespace);
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
        self.grant(username, "create", group, resource, namespace);
    }

    /// Lets `username` `verb` `group/resource` in `namespace` ("": in every namespace, and
    /// cluster-wide).
    pub fn grant(&self, username: &str, verb: &str, group: &str, resource: &str, namespace: &str) {
        let mut store = self.store.lock().expect("store");
        store.grants.push((
            username.into(),
            verb.into(),
            group.into(),
            resource.into(),
            namespace.into(),
        ));
    }

    /// TokenReviews received (POSTs: not counted in [`FakeKube::hits`]).
    pub fn token_reviews(&self) -> usize {
        self.store.lock().expect("store").token_reviews
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
        Some(KubeFault::Unavailable) => status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
    }
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The key of a path, and whether it names a collection (no name).
fn key_of(path: &str) -> Option<(Key, bool)> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => (format!("api/{version}"), rest),
        ["apis", group, version, rest @ ..] => (format!("apis/{group}/{version}"), rest),
        _ => return None,
    };
    let (namespace, resource, name) = match rest {
        ["namespaces", ns, resource, name] => (*ns, *resource, Some(*name)),
        ["namespaces", ns, resource] => (*ns, *resource, None),
        [resource, name] => ("", *resource, Some(*name)),
        [resource] => ("", *resource, None),
        _ => return None,
    };
    Some((
        (
            prefix,
            resource.to_string(),
            namespace.to_string(),
            name.unwrap_or_default().to_string(),
        ),
        name.is_none(),
    ))
}

/// The apiserver's `v1 Status` failure body.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    (
        code,
        Json(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code.as_u16(),
        })),
    )
        .into_response()
}

/// The apiserver's 404 for an object: `secrets "regcred" not found`, with its details.
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

/// A JSON merge patch (RFC 7386) of `patch` onto `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Every request but the two reviews: the object store.
async fn handle(State(store): State<Arc<Mutex<Store>>>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body: Bytes = match axum::body::to_bytes(request.into_body(), 1 << 20).await {
        Ok(body) => body,
        Err(_) => return status(StatusCode::BAD_REQUEST, "BadRequest", "body"),
    };
    let Some((key, collection)) = key_of(&path) else {
        return status(StatusCode::NOT_FOUND, "NotFound", "no such path");
    };
    let mut store = store.lock().expect("store");
    if method == Method::GET {
        store.reads.push(path.clone());
    } else {
        store.writes.push((method.to_string(), path.clone()));
    }
    store.version += 1;
    let version = store.version.to_string();
    match (method, collection) {
        (Method::GET, true) => {
            store.lists.push(format!("{path}?{query}"));
            let param = |name: &str| {
                form_urlencoded::parse(query.as_bytes())
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.into_owned())
            };
            let selector: Option<(String, String)> = param("labelSelector").and_then(|v| {
                v.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            });
            let name_field: Option<String> = param("fieldSelector")
                .and_then(|v| v.strip_prefix("metadata.name=").map(str::to_string));
            let items: Vec<Value> = store
                .objects
                .iter()
                .filter(|(k, _)| k.0 == key.0 && k.1 == key.1 && (key.2.is_empty() || k.2 == key.2))
                .filter(|(k, _)| name_field.as_ref().is_none_or(|name| &k.3 == name))
                .map(|(_, v)| v.clone())
                .filter(|v| match &selector {
                    None => true,
                    Some((label, value)) => {
                        v.pointer(&format!("/metadata/labels/{}", label.replace('/', "~1")))
                            .and_then(Value::as_str)
                            == Some(value.as_str())
                    }
                })
                .collect();
            // Pages when asked for a `limit`, as the apiserver does: `continue` is where the next
            // page starts (here an offset), absent on the last page.
            let start: usize = param("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
            let limit: Option<usize> = param("limit")
                .and_then(|l| l.parse().ok())
                .filter(|l| *l > 0);
            let end = limit.map_or(items.len(), |l| start.saturating_add(l).min(items.len()));
            let page: Vec<Value> = items
                .get(start..end)
                .map(<[Value]>::to_vec)
                .unwrap_or_default();
            let mut metadata = json!({"resourceVersion": version});
            if end < items.len() {
                metadata["continue"] = json!(end.to_string());
            }
            Json(json!({"apiVersion": "v1", "kind": "List", "metadata": metadata, "items": page}))
                .into_response()
        }
        (Method::GET, false) => match store.objects.get(&key) {
            Some(object) => Json(object.clone()).into_response(),
            None => not_found(&key.1, &key.3),
        },
        (Method::POST, true) => {
            let Ok(mut object) = serde_json::from_slice::<Value>(&body) else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
            };
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let key = (key.0, key.1, key.2, name);
            if store.objects.contains_key(&key) {
                return status(StatusCode::CONFLICT, "AlreadyExists", "exists");
            }
            object["metadata"]["resourceVersion"] = json!(version);
            store.objects.insert(key, object.clone());
            (StatusCode::CREATED, Json(object)).into_response()
        }
        (Method::PUT, false) | (Method::PATCH, false) => {
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
            };
            let object = if content_type.starts_with("application/merge-patch+json") {
                let Some(existing) = store.objects.get(&key) else {
                    return not_found(&key.1, &key.3);
                };
                let mut existing = existing.clone();
                merge(&mut existing, &patch);
                existing
            } else {
                // A replace that carries a resourceVersion other than the stored one lost a
                // race: 409, as the apiserver answers.
                let sent = patch
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str);
                let stored = store
                    .objects
                    .get(&key)
                    .and_then(|o| o.pointer("/metadata/resourceVersion"))
                    .and_then(Value::as_str);
                if let (Some(sent), Some(stored)) = (sent, stored) {
                    if sent != stored {
                        return status(
                            StatusCode::CONFLICT,
                            "Conflict",
                            "the object has been modified",
                        );
                    }
                }
                patch
            };
            let mut object = object;
            object["metadata"]["resourceVersion"] = json!(version);
            if !key.2.is_empty() {
                object["metadata"]["namespace"] = json!(key.2);
            }
            store.objects.insert(key, object.clone());
            Json(object).into_response()
        }
        (Method::DELETE, false) => match store.objects.remove(&key) {
            Some(_) => Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}))
                .into_response(),
            None => not_found(&key.1, &key.3),
        },
        _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "method"),
    }
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

/// `POST subjectaccessreviews`: allowed when a grant matches the user and resource attributes.
async fn access_review(
    State(store): State<Arc<Mutex<Store>>>,
    Json(mut review): Json<Value>,
) -> Response {
    let spec = &review["spec"];
    let attributes = &spec["resourceAttributes"];
    let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let (user, verb, group, resource, namespace) = (
        field(&spec["user"]),
        field(&attributes["verb"]),
        field(&attributes["group"]),
        field(&attributes["resource"]),
        field(&attributes["namespace"]),
    );
    let mut store = store.lock().expect("store");
    // A namespaced grant allows in its namespace only; a grant for "" allows everywhere.
    let allowed = store.grants.iter().any(|(u, v, g, r, ns)| {
        (u, v, g, r) == (&user, &verb, &group, &resource) && (ns.is_empty() || *ns == namespace)
    });
    store.access_reviews.push(spec.clone());
    review["status"] = json!({"allowed": allowed});
    (StatusCode::CREATED, Json(review)).into_response()
}
