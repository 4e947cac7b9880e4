//! An in-process token server for registry bearer auth (the docker distribution
//! token spec, <https://distribution.github.io/distribution/spec/auth/token/>),
//! serving HTTPS on 127.0.0.1 with a certificate from a [`TestCa`].
//!
//! `GET /token?service=…&scope=repository:<name>:pull,push` (scope may repeat):
//! - valid HTTP Basic credentials: 200 and a token granting every requested
//!   `pull`/`push`/`delete`/`*` action;
//! - no `Authorization` header (anonymous): 200 and a token granting nothing,
//!   as the spec suggests, so the registry then answers 401 `insufficient_scope`;
//! - wrong or malformed credentials: 401;
//! - a `service` other than [`TOKEN_SERVICE`]: 400.
//!
//! `POST /token` with a form `grant_type=refresh_token&refresh_token=…&service=…&scope=…`
//! (the OAuth2 refresh-token grant docker clients use for identity tokens): the server's
//! [`identity_token`](TokenServer::identity_token) is exchanged as the username's credentials
//! would be; any other refresh token gets 401. These requests are logged with the username
//! `<token>`.
//!
//! Tokens are ES256 JWTs that distribution 2.8.2 accepts:
//! header `{"typ":"JWT","alg":"ES256","x5c":[<base64 DER of the signing cert>]}`,
//! claims `{"iss","sub","aud","exp","nbf","iat","jti","access"}` with `aud` a
//! single string (2.8 does not accept a list). The signing certificate is
//! self-signed and is the registry's whole `rootcertbundle`.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use axum_server::tls_rustls::RustlsConfig;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use rcgen::{CertificateParams, DnType, KeyPair, SigningKey as _};
use serde_json::{json, Value};

use super::tls::{init_crypto, TestCa, SERVER_SANS};

/// `service` in the registry's challenge and `aud` in every token.
pub const TOKEN_SERVICE: &str = "pinhook-test-registry";
/// `iss` in every token; the registry trusts only this issuer.
pub const TOKEN_ISSUER: &str = "pinhook-test-issuer";
/// Lifetime of issued tokens (`expires_in`, `exp - iat`).
pub const TOKEN_TTL_SECS: u64 = 300;
/// Actions the server grants to an authenticated user.
const GRANTABLE: [&str; 4] = ["pull", "push", "delete", "*"];

/// One entry of a token's `access` claim (or a parsed `scope`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// `repository` or `registry`.
    pub kind: String,
    pub name: String,
    pub actions: Vec<String>,
}

impl Access {
    pub fn repository(name: &str, actions: &[&str]) -> Access {
        Access {
            kind: "repository".to_string(),
            name: name.to_string(),
            actions: actions.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// Parses `type:name:action[,action…]`; the name may contain `:` (a
    /// registry host with a port), so type is split off the front and the
    /// actions off the back.
    pub fn parse_scope(scope: &str) -> Option<Access> {
        let (kind, rest) = scope.split_once(':')?;
        let (name, actions) = rest.rsplit_once(':')?;
        if kind.is_empty() || name.is_empty() {
            return None;
        }
        Some(Access {
            kind: kind.to_string(),
            name: name.to_string(),
            actions: actions
                .split(',')
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect(),
        })
    }

    fn to_json(&self) -> Value {
        json!({ "type": self.kind, "name": self.name, "actions": self.actions })
    }
}

/// What the token server saw and answered, one per `GET /token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    /// The Basic username, `None` when no `Authorization` header was sent.
    pub username: Option<String>,
    pub service: Option<String>,
    /// Raw `scope` parameters, in order.
    pub scopes: Vec<String>,
    pub status: u16,
    /// What the issued token grants (empty for refusals and anonymous).
    pub granted: Vec<Access>,
}

/// A running token server; shut down on drop.
pub struct TokenServer {
    addr: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
    task: tokio::task::JoinHandle<()>,
    state: Arc<TokenState>,
    root_cert_path: PathBuf,
}

struct TokenState {
    username: String,
    password: String,
    signer: KeyPair,
    /// base64 (standard, padded) DER of the signing certificate, for `x5c`.
    x5c: String,
    issued: AtomicUsize,
    next_jti: AtomicU64,
    log: Mutex<Vec<TokenRequest>>,
}

impl TokenServer {
    /// Starts a token server accepting `username`/`password`, serving HTTPS
    /// with a certificate from `ca`, and writes the signing certificate's PEM
    /// (the registry's `rootcertbundle`) into `dir`.
    pub async fn start(ca: &TestCa, dir: &Path, username: &str, password: &str) -> TokenServer {
        init_crypto();
        fs::create_dir_all(dir).expect("create the token server directory");
        let (signer, cert_der, cert_pem) = signing_cert();
        let root_cert_path = dir.join("token-signer.pem");
        fs::write(&root_cert_path, cert_pem)
            .unwrap_or_else(|e| panic!("write {}: {e}", root_cert_path.display()));
        let state = Arc::new(TokenState {
            username: username.to_string(),
            password: password.to_string(),
            signer,
            x5c: STANDARD.encode(cert_der),
            issued: AtomicUsize::new(0),
            next_jti: AtomicU64::new(1),
            log: Mutex::new(Vec::new()),
        });

        let tls_cert = ca.issue(&SERVER_SANS);
        let tls = RustlsConfig::from_pem(
            tls_cert.cert_pem.into_bytes(),
            tls_cert.key_pem.into_bytes(),
        )
        .await
        .expect("token server TLS config");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the token server");
        listener
            .set_nonblocking(true)
            .expect("token server listener non-blocking");
        let addr = listener.local_addr().expect("token server address");
        let handle = axum_server::Handle::new();
        let app = Router::new()
            .route("/token", get(token_handler).post(refresh_handler))
            .with_state(state.clone());
        let server = axum_server::from_tcp_rustls(listener, tls)
            .expect("token server from listener")
            .handle(handle.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = server.serve(app.into_make_service()).await {
                eprintln!("test token server stopped: {e}");
            }
        });
        TokenServer {
            addr,
            handle,
            task,
            state,
            root_cert_path,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT/token`, the registry's `realm`.
    pub fn realm(&self) -> String {
        format!("https://{}/token", self.addr)
    }

    pub fn service(&self) -> &'static str {
        TOKEN_SERVICE
    }

    /// The identity token (OAuth2 refresh token) the server exchanges for the user's tokens.
    pub fn identity_token(&self) -> String {
        self.state.identity_token()
    }

    pub fn issuer(&self) -> &'static str {
        TOKEN_ISSUER
    }

    /// PEM of the signing certificate: the registry's `rootcertbundle`.
    pub fn root_cert_path(&self) -> &Path {
        &self.root_cert_path
    }

    /// Tokens handed out over HTTP (200 answers, anonymous ones included).
    /// Tokens from [`mint`](Self::mint) are not counted.
    pub fn tokens_issued(&self) -> usize {
        self.state.issued.load(Ordering::SeqCst)
    }

    /// Every `GET /token` so far, in order.
    pub fn requests(&self) -> Vec<TokenRequest> {
        self.state.log.lock().expect("token log lock").clone()
    }

    /// Signs a token for `subject` granting exactly `access`, without HTTP
    /// (and without counting it in [`tokens_issued`](Self::tokens_issued)).
    pub fn mint(&self, subject: &str, access: &[Access]) -> String {
        self.state.sign(subject, access)
    }

    /// `GET {realm}?service=…&scope=…` as a registry client would, with Basic
    /// credentials when given; returns the status and the JSON body (Null
    /// when the body is not JSON).
    pub async fn fetch(
        &self,
        client: &reqwest::Client,
        credentials: Option<(&str, &str)>,
        scopes: &[&str],
    ) -> (u16, Value) {
        let mut query = vec![("service", TOKEN_SERVICE)];
        query.extend(scopes.iter().map(|s| ("scope", *s)));
        let mut req = client.get(self.realm()).query(&query);
        if let Some((user, pass)) = credentials {
            req = req.basic_auth(user, Some(pass));
        }
        let resp = req.send().await.expect("token server answers");
        let status = resp.status().as_u16();
        let body = resp.bytes().await.expect("token body");
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.handle.shutdown();
        self.task.abort();
    }
}

/// The (unverified) header and claims of a JWT, for assertions.
pub fn decode_jwt(token: &str) -> Option<(Value, Value)> {
    let mut parts = token.split('.');
    let (header, claims, _sig) = (parts.next()?, parts.next()?, parts.next()?);
    let decode = |part: &str| -> Option<Value> {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
    };
    Some((decode(header)?, decode(claims)?))
}

// === the handler ===

async fn token_handler(
    State(state): State<Arc<TokenState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let (service, scopes) = parse_query(query.as_deref().unwrap_or(""));
    let mut entry = TokenRequest {
        username: None,
        service: service.clone(),
        scopes: scopes.clone(),
        status: 200,
        granted: Vec::new(),
    };
    let outcome = state.answer(&headers, service.as_deref(), &scopes, &mut entry);
    entry.status = outcome.status().as_u16();
    state.log.lock().expect("token log lock").push(entry);
    outcome
}

async fn refresh_handler(State(state): State<Arc<TokenState>>, body: String) -> Response {
    let form: Vec<(String, String)> = form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let query: String = form
        .iter()
        .filter(|(k, _)| k == "service" || k == "scope")
        .map(|(k, v)| {
            format!(
                "{k}={}",
                form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("&");
    let (service, scopes) = parse_query(&query);
    let mut entry = TokenRequest {
        username: Some("<token>".to_string()),
        service: service.clone(),
        scopes: scopes.clone(),
        status: 200,
        granted: Vec::new(),
    };
    let outcome = match (field("grant_type").as_deref(), field("refresh_token")) {
        (Some("refresh_token"), Some(token)) if token == state.identity_token() => {
            let mut headers = HeaderMap::new();
            let basic = STANDARD.encode(format!("{}:{}", state.username, state.password));
            let value = format!("Basic {basic}").parse().expect("a header value");
            headers.insert(header::AUTHORIZATION, value);
            let mut ignored = entry.clone();
            let answer = state.answer(&headers, service.as_deref(), &scopes, &mut ignored);
            entry.granted = ignored.granted;
            answer
        }
        _ => unauthorized("invalid refresh token"),
    };
    entry.status = outcome.status().as_u16();
    state.log.lock().expect("token log lock").push(entry);
    outcome
}

impl TokenState {
    fn identity_token(&self) -> String {
        format!("identity-token-of-{}", self.username)
    }

    fn answer(
        &self,
        headers: &HeaderMap,
        service: Option<&str>,
        scopes: &[String],
        entry: &mut TokenRequest,
    ) -> Response {
        if service.is_some_and(|s| s != TOKEN_SERVICE) {
            return error(StatusCode::BAD_REQUEST, "UNSUPPORTED", "unknown service");
        }
        let subject = match headers.get(header::AUTHORIZATION) {
            None => String::new(),
            Some(value) => match basic_credentials(value.to_str().unwrap_or("")) {
                Some((user, pass)) => {
                    entry.username = Some(user.clone());
                    if user != self.username || pass != self.password {
                        return unauthorized("invalid username or password");
                    }
                    user
                }
                None => return unauthorized("malformed Basic credentials"),
            },
        };
        // Anonymous requests are authenticated as nobody and granted nothing.
        let granted: Vec<Access> = if subject.is_empty() {
            Vec::new()
        } else {
            scopes
                .iter()
                .filter_map(|s| Access::parse_scope(s))
                .map(|mut a| {
                    a.actions.retain(|act| GRANTABLE.contains(&act.as_str()));
                    a
                })
                .filter(|a| !a.actions.is_empty())
                .collect()
        };
        let token = self.sign(&subject, &granted);
        entry.granted = granted;
        self.issued.fetch_add(1, Ordering::SeqCst);
        let body = json!({
            "token": token,
            "access_token": token,
            "expires_in": TOKEN_TTL_SECS,
            "issued_at": rfc3339(now_secs()),
        });
        (StatusCode::OK, Json(body)).into_response()
    }

    fn sign(&self, subject: &str, access: &[Access]) -> String {
        let now = now_secs();
        let jti = self.next_jti.fetch_add(1, Ordering::SeqCst);
        let header = json!({ "typ": "JWT", "alg": "ES256", "x5c": [self.x5c] });
        let claims = json!({
            "iss": TOKEN_ISSUER,
            "sub": subject,
            "aud": TOKEN_SERVICE,
            "exp": now + TOKEN_TTL_SECS,
            "nbf": now,
            "iat": now,
            "jti": format!("pinhook-test-{now}-{jti}"),
            "access": access.iter().map(Access::to_json).collect::<Vec<_>>(),
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let der = self
            .signer
            .sign(signing_input.as_bytes())
            .expect("ES256-sign the token");
        let raw = ecdsa_der_to_raw(&der).expect("ring's ECDSA signature is DER");
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(raw))
    }
}

fn parse_query(query: &str) -> (Option<String>, Vec<String>) {
    let url = reqwest::Url::parse(&format!("http://token.invalid/?{query}"))
        .expect("a query string makes a valid URL");
    let mut service = None;
    let mut scopes = Vec::new();
    for (key, value) in url.query_pairs() {
        match key.as_ref() {
            "service" => service = Some(value.into_owned()),
            // Some clients send several scopes space-separated in one parameter.
            "scope" => scopes.extend(value.split(' ').filter(|s| !s.is_empty()).map(String::from)),
            _ => {}
        }
    }
    (service, scopes)
}

fn basic_credentials(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (user, pass) = decoded.split_once(':')?;
    Some((user.to_string(), pass.to_string()))
}

fn unauthorized(message: &str) -> Response {
    let mut resp = error(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", message);
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Basic realm=\"pinhook-test-token\""),
    );
    resp
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({ "errors": [{ "code": code, "message": message }] });
    (status, Json(body)).into_response()
}

/// A self-signed P-256 certificate for signing tokens: (key, DER, PEM).
fn signing_cert() -> (KeyPair, Vec<u8>, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("empty SAN list is valid");
    params
        .distinguished_name
        .push(DnType::CommonName, "pinhook test token signer");
    // rcgen's default algorithm is ECDSA P-256 with SHA-256, i.e. ES256.
    let key = KeyPair::generate().expect("generate the token signing key");
    let cert = params
        .self_signed(&key)
        .expect("self-sign the token signing certificate");
    let der = cert.der().to_vec();
    let pem = cert.pem();
    (key, der, pem)
}

/// ECDSA-Sig-Value `SEQUENCE { r INTEGER, s INTEGER }` (DER, as ring/rcgen
/// produce) to the 64-byte `r || s` that JWS ES256 wants.
pub fn ecdsa_der_to_raw(der: &[u8]) -> Option<[u8; 64]> {
    fn read_len(bytes: &[u8], at: &mut usize) -> Option<usize> {
        let first = *bytes.get(*at)?;
        *at += 1;
        if first < 0x80 {
            return Some(usize::from(first));
        }
        let n = usize::from(first & 0x7f);
        let mut len = 0usize;
        for _ in 0..n {
            len = (len << 8) | usize::from(*bytes.get(*at)?);
            *at += 1;
        }
        Some(len)
    }
    fn read_int<'a>(bytes: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
        if *bytes.get(*at)? != 0x02 {
            return None;
        }
        *at += 1;
        let len = read_len(bytes, at)?;
        let int = bytes.get(*at..*at + len)?;
        *at += len;
        // Drop the sign padding (and any other leading zeros).
        let start = int.iter().position(|&b| b != 0).unwrap_or(int.len());
        Some(&int[start..])
    }
    let mut at = 0;
    if *der.first()? != 0x30 {
        return None;
    }
    at += 1;
    let seq_len = read_len(der, &mut at)?;
    if at + seq_len != der.len() {
        return None;
    }
    let r = read_int(der, &mut at)?;
    let s = read_int(der, &mut at)?;
    if r.len() > 32 || s.len() > 32 || at != der.len() {
        return None;
    }
    let mut raw = [0u8; 64];
    raw[32 - r.len()..32].copy_from_slice(r);
    raw[64 - s.len()..].copy_from_slice(s);
    Some(raw)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a unix time (UTC), as in `issued_at`.
pub fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).expect("days fit i64");
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
