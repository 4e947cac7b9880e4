//! A generic in-process fake of the Kubernetes API for the watch's tests: any object of any
//! resource (core or group), namespaced or cluster-scoped, stored as JSON; `GET` of an object or
//! a list (all namespaces, or one; `labelSelector=k=v`), `POST`, `PUT`, `PATCH` (server-side
//! apply replaces the object, a merge patch merges), `DELETE`. Errors are `v1 Status`. Every
//! write (method, path) and every read (path) is recorded, so a test can count them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Value};

/// (api prefix `api/v1` or `apis/g/v`, resource, namespace or "", name) → object.
type Key = (String, String, String, String);

#[derive(Default)]
struct Store {
    objects: BTreeMap<Key, Value>,
    writes: Vec<(String, String)>,
    /// Every GET's path.
    reads: Vec<String>,
    version: u64,
}

pub struct FakeApi {
    pub url: String,
    store: Arc<Mutex<Store>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeApi {
    pub async fn start() -> FakeApi {
        let store = Arc::new(Mutex::new(Store::default()));
        let app = Router::new().fallback(handle).with_state(store.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        FakeApi { url, store, task }
    }

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

    /// The writes so far: (method, path).
    pub fn writes(&self) -> Vec<(String, String)> {
        self.store.lock().expect("store").writes.clone()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
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
            let selector: Option<(String, String)> = form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "labelSelector")
                .and_then(|(_, v)| {
                    v.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                });
            let items: Vec<Value> = store
                .objects
                .iter()
                .filter(|(k, _)| k.0 == key.0 && k.1 == key.1 && (key.2.is_empty() || k.2 == key.2))
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
            Json(json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": version}, "items": items}))
                .into_response()
        }
        (Method::GET, false) => match store.objects.get(&key) {
            Some(object) => Json(object.clone()).into_response(),
            None => status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("{} not found", key.3),
            ),
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
                    return status(StatusCode::NOT_FOUND, "NotFound", "not found");
                };
                let mut existing = existing.clone();
                merge(&mut existing, &patch);
                existing
            } else {
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
            None => status(StatusCode::NOT_FOUND, "NotFound", "not found"),
        },
        _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "method"),
    }
}
