//! Issue 10, item 1: every request pinhook sends to a registry or token realm (HEAD, GET
//! fallback, token) goes through its one HTTP client, whose redirects never leave the origin
//! and never downgrade to clear text, and whose realms are never clear text for a TLS
//! registry. A hostile registry over real TLS redirects each request to a canary listener on
//! another port, which both policies allow: the canary must accept nothing, and the refusal
//! must name the registry.

use crate::common::stand_in::{guarded_resolver, Canary, StandIn};
use crate::common::tls::TestCa;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, head};
use axum::Router;
use pinhook::reference::{Digest, Reference};
use pinhook::registry::{Credential, OciResolver, RedirectRefusal, RegistryError, Resolver};

const MANIFEST_PATH: &str = "/v2/team/app/manifests/1.0";
const MANIFEST: &str =
    r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;

/// A hostile registry, the canary it points at, and pinhook's client trusting the registry
/// and allowing both hosts (the policy's guard is not what stops the redirect).
struct World {
    _dir: tempfile::TempDir,
    registry: StandIn,
    canary: Canary,
    resolver: OciResolver,
}

async fn world(routes: impl FnOnce(&str) -> Router) -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::generate(dir.path());
    let canary = Canary::start().await;
    let registry = StandIn::start(&ca, routes(&canary.host())).await;
    let resolver = guarded_resolver(&ca, vec![registry.host(), canary.host()]);
    World {
        _dir: dir,
        registry,
        canary,
        resolver,
    }
}

impl World {
    fn image(&self) -> Reference {
        Reference::parse(&format!("{}/team/app:1.0", self.registry.host())).expect("reference")
    }

    async fn resolve(&self) -> Result<Digest, RegistryError> {
        let credentials = [Credential::basic("robot", "s3cret")];
        let resolved = self.resolver.resolve(&self.image(), &credentials).await;
        resolved.map(|r| r.digest)
    }
}

fn redirect(status: StatusCode, location: String) -> Response {
    (status, [(header::LOCATION, location)]).into_response()
}

fn challenge(realm: String) -> Response {
    let value = format!(r#"Bearer realm="{realm}",service="stand-in""#);
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, value)],
    )
        .into_response()
}

/// The refusal names the registry and both origins, on one line, and is a refusal.
fn assert_redirect_refused(error: &RegistryError, registry: &str, canary: &str) {
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "registry {registry} redirected from https://{registry}"
        )),
        "{text}"
    );
    assert!(text.contains(canary), "{text}");
    assert!(!text.contains('\n'), "{text}");
    assert_eq!(error.kind(), "refused");
}

/// The issue's probe: HEAD answers 307 and GET 302 to another listener. Before, oci-client's
/// GET followed the redirect and pinhook pinned the other listener's reply.
#[tokio::test]
async fn a_head_and_get_redirected_to_another_port_send_nothing_there() {
    let world = world(|canary| {
        let to_canary = format!("https://{canary}{MANIFEST_PATH}");
        let again = to_canary.clone();
        Router::new().route(
            MANIFEST_PATH,
            head(move || async move { redirect(StatusCode::TEMPORARY_REDIRECT, to_canary) })
                .get(move || async move { redirect(StatusCode::FOUND, again) }),
        )
    })
    .await;

    let error = world.resolve().await.expect_err("refused");

    assert!(
        matches!(
            &error,
            RegistryError::Redirected { registry, refusal: RedirectRefusal::OtherOrigin { .. } }
                if *registry == world.registry.host()
        ),
        "{error:?}"
    );
    assert_redirect_refused(&error, &world.registry.host(), &world.canary.host());
    assert_eq!(world.canary.accepted(), 0, "the canary saw a connection");
    let methods: Vec<String> = world
        .registry
        .requests()
        .into_iter()
        .map(|seen| seen.method)
        .collect();
    assert_eq!(
        methods,
        ["HEAD", "GET"],
        "the HEAD's redirect falls back to the GET"
    );
}

#[tokio::test]
async fn a_get_redirected_from_https_to_http_is_refused_as_a_downgrade() {
    let world = world(|canary| {
        let to_canary = format!("http://{canary}{MANIFEST_PATH}");
        Router::new().route(
            MANIFEST_PATH,
            head(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .get(move || async move { redirect(StatusCode::FOUND, to_canary) }),
        )
    })
    .await;

    let error = world.resolve().await.expect_err("refused");

    assert!(
        matches!(
            &error,
            RegistryError::Redirected {
                refusal: RedirectRefusal::Downgrade { .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert_redirect_refused(&error, &world.registry.host(), &world.canary.host());
    assert!(error.to_string().contains("never follows https to http"));
    assert_eq!(world.canary.accepted(), 0, "the canary saw a connection");
}

/// The realm is on the registry's own host (so it passes the guard and gets the Basic
/// credentials, as docker sends them), and redirects the token request to the canary: the
/// credentials it carries go nowhere else.
#[tokio::test]
async fn a_token_request_redirected_elsewhere_carries_the_credentials_nowhere() {
    let registry_host = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let realm_host = registry_host.clone();
    let world = world(move |canary| {
        let to_canary = format!("https://{canary}/token");
        Router::new()
            .route(
                MANIFEST_PATH,
                head(move || async move {
                    let host = realm_host.get().cloned().unwrap_or_default();
                    challenge(format!("https://{host}/token"))
                }),
            )
            .route(
                "/token",
                get(move || async move { redirect(StatusCode::TEMPORARY_REDIRECT, to_canary) }),
            )
    })
    .await;
    registry_host
        .set(world.registry.host())
        .expect("set the realm's host once");

    let error = world.resolve().await.expect_err("refused");

    assert!(
        matches!(&error, RegistryError::Redirected { .. }),
        "{error:?}"
    );
    assert_redirect_refused(&error, &world.registry.host(), &world.canary.host());
    assert_eq!(world.canary.accepted(), 0, "the canary saw a connection");
    let token = world
        .registry
        .requests()
        .into_iter()
        .find(|seen| seen.path == "/token")
        .expect("the realm was asked");
    assert!(
        token
            .authorization
            .is_some_and(|value| value.starts_with("Basic ")),
        "the realm got the registry's credentials"
    );
}

/// An `http://` realm for an HTTPS registry would carry the Basic credentials in clear text.
#[tokio::test]
async fn a_clear_text_realm_for_a_tls_registry_is_refused_without_a_request() {
    let world = world(|canary| {
        let realm = format!("http://{canary}/token");
        Router::new().route(MANIFEST_PATH, head(move || async move { challenge(realm) }))
    })
    .await;

    let error = world.resolve().await.expect_err("refused");

    let text = error.to_string();
    assert!(
        matches!(&error, RegistryError::RealmRefused(_)),
        "{error:?}"
    );
    assert_eq!(
        text,
        format!(
            "registry {} named a clear-text token realm http://{}/token; pinhook sends \
             credentials over plain HTTP only to hosts marked insecure",
            world.registry.host(),
            world.canary.host()
        )
    );
    assert_eq!(world.canary.accepted(), 0, "the canary saw a connection");
}

/// Within the origin a redirect is followed, credentials and all: the host is the one the
/// guard judged and the credentials are meant for.
#[tokio::test]
async fn a_redirect_within_the_registry_is_followed() {
    let world = world(|_| {
        Router::new()
            .route(
                MANIFEST_PATH,
                head(|| async { StatusCode::METHOD_NOT_ALLOWED })
                    .get(|| async { redirect(StatusCode::TEMPORARY_REDIRECT, "/v2/moved".into()) }),
            )
            .route("/v2/moved", get(|| async { MANIFEST }))
    })
    .await;

    let digest = world.resolve().await.expect("resolves");

    assert_eq!(digest, Digest::sha256_of(MANIFEST.as_bytes()));
    let moved = world
        .registry
        .requests()
        .into_iter()
        .find(|seen| seen.path == "/v2/moved")
        .expect("the redirect was followed");
    assert!(moved.authorization.is_some(), "{moved:?}");
    assert_eq!(world.canary.accepted(), 0);
}
