//! Hostile registries, for the outbound tests: a registry stand-in over real TLS on 127.0.0.1
//! (a certificate from a [`TestCa`]) that answers whatever axum `Router` a test scripts and
//! records every request it gets ([`StandIn`]); a [`Canary`] listener on another port that
//! counts the connections it accepts, to prove pinhook sent nothing there; and [`huge_body`],
//! a streamed body of any size, never held in memory, that reports how much of it went out;
//! and pinhook's registry client as `pinhook serve` holds it, trusting a stand-in
//! ([`guarded_resolver`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use futures::stream;
use pinhook::policy::{Policy, PolicyHandle};
use pinhook::registry::{OciResolver, RegistryConfig};

use super::tls::{init_crypto, TestCa, SERVER_SANS};

/// A scripted registry over TLS; stops when dropped.
pub struct StandIn {
    addr: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
    task: tokio::task::JoinHandle<()>,
    log: Log,
}

/// One request a [`StandIn`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A TCP listener that counts the connections it accepts and closes each at once.
pub struct Canary {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

/// How much of a [`huge_body`] was sent, and whether the receiver stopped it early.
#[derive(Debug, Default)]
pub struct Streamed {
    sent: AtomicU64,
    finished: AtomicBool,
    dropped: AtomicBool,
}

/// Sets [`Streamed::dropped`] when the server drops the body, whoever stops it.
struct DropFlag(Arc<Streamed>);

impl StandIn {
    /// Serves `routes` over HTTPS on 127.0.0.1:0 with a certificate from `ca`.
    pub async fn start(ca: &TestCa, routes: Router) -> StandIn {
        init_crypto();
        let cert = ca.issue(&SERVER_SANS);
        let tls = RustlsConfig::from_pem(cert.cert_pem.into_bytes(), cert.key_pem.into_bytes())
            .await
            .expect("stand-in TLS config");
        Self::serve(tls, routes)
    }

    /// [`StandIn::start`] speaking HTTP/1.1 only (no `h2` in its ALPN): each request at once
    /// takes a connection of its own.
    pub async fn start_http1(ca: &TestCa, routes: Router) -> StandIn {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        init_crypto();
        let cert = ca.issue(&SERVER_SANS);
        let chain = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("stand-in certificate");
        let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("stand-in key");
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("stand-in TLS config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self::serve(RustlsConfig::from_config(Arc::new(config)), routes)
    }

    fn serve(tls: RustlsConfig, routes: Router) -> StandIn {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the stand-in");
        listener
            .set_nonblocking(true)
            .expect("stand-in listener non-blocking");
        let addr = listener.local_addr().expect("stand-in address");
        let log: Log = Arc::default();
        let app = routes.layer(middleware::from_fn_with_state(log.clone(), record));
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp_rustls(listener, tls)
            .expect("stand-in from listener")
            .handle(handle.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = server.serve(app.into_make_service()).await {
                eprintln!("stand-in registry stopped: {e}");
            }
        });
        StandIn {
            addr,
            handle,
            task,
            log,
        }
    }

    /// `127.0.0.1:PORT`, as an image reference names a registry.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// `https://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.log.lock().expect("the stand-in's log").clone()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.handle.shutdown();
        self.task.abort();
    }
}

async fn record(State(log): State<Log>, request: Request, next: Next) -> Response {
    let seen = Seen {
        method: request.method().to_string(),
        path: request.uri().path().to_string(),
        authorization: request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    };
    log.lock().expect("the stand-in's log").push(seen);
    next.run(request).await
}

impl Canary {
    pub async fn start() -> Canary {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the canary");
        let addr = listener.local_addr().expect("canary address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        Canary {
            addr,
            accepted,
            task,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Streamed {
    /// Counts `bytes` more as sent (for bodies streamed by a test of its own).
    pub fn add(&self, bytes: u64) {
        self.sent.fetch_add(bytes, Ordering::SeqCst);
    }

    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// True when every byte was produced.
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }

    /// True once the server let go of the body (sent or abandoned).
    pub fn dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::SeqCst);
    }
}

/// `total` bytes of `{`, streamed in 64 KiB chunks of one static buffer, counted in `stats`.
pub fn huge_body(total: u64, stats: Arc<Streamed>) -> Body {
    static CHUNK: [u8; 64 << 10] = [b'{'; 64 << 10];
    let flag = DropFlag(stats);
    let chunks = stream::unfold((0u64, flag), move |(sent, flag)| async move {
        if sent >= total {
            flag.0.finished.store(true, Ordering::SeqCst);
            return None;
        }
        let size = (total - sent).min(CHUNK.len() as u64) as usize;
        flag.0.sent.fetch_add(size as u64, Ordering::SeqCst);
        let chunk = axum::body::Bytes::from_static(&CHUNK[..size]);
        Some((
            Ok::<_, std::convert::Infallible>(chunk),
            (sent + size as u64, flag),
        ))
    });
    Body::from_stream(chunks)
}

/// pinhook's registry client trusting only `ca`, holding a policy that opts `allow_private`
/// (the stand-ins' loopback hosts) in.
pub fn guarded_resolver(ca: &TestCa, allow_private: Vec<String>) -> OciResolver {
    let mut policy = Policy::default();
    policy.registries.allow_private = allow_private;
    let handle = PolicyHandle::new(policy.compile().expect("policy"));
    OciResolver::new(RegistryConfig {
        ca_pems: vec![ca.ca_pem().as_bytes().to_vec()],
        only_configured_cas: true,
        request_timeout: std::time::Duration::from_secs(5),
        ..RegistryConfig::default()
    })
    .expect("resolver")
    .with_policy(handle)
}
