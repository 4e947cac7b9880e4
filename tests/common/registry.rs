//! A real OCI registry (Debian's `docker-registry`, distribution 2.8.2) for
//! integration tests on 127.0.0.1: TLS from a [`TestCa`] (or plain HTTP with
//! [`TestRegistry::start_plain`]), no auth, htpasswd, or bearer tokens from an
//! in-process [`TokenServer`] ([`RegistryAuth::Token`]).
//!
//! What 2.8.2 prints, and what this module relies on:
//! - stderr (logrus text): one line per event. With `http.addr` port 0 the
//!   bound address appears as
//!   `time="…" level=info msg="listening on 127.0.0.1:41234, tls" …`
//!   (without `, tls` over plain HTTP).
//! - stdout: the access log, Apache combined format, one line per request,
//!   written after the handler returns:
//!   `127.0.0.1 - - [21/Nov/2026:13:56:39 +0000] "HEAD /v2/foo/bar/manifests/latest HTTP/2.0" 404 96 "" "curl/7.88.1"`.
//!   The user field stays `-` even for authenticated requests.
//!
//! stdout and stderr go straight into files in the registry's tempdir
//! (`access.log`, `registry.log`), appended across restarts.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::tls::{init_crypto, TestCa};
use super::token::{Access, TokenServer};

/// Binary used unless `PINHOOK_TEST_REGISTRY_BIN` names another.
pub const DEFAULT_REGISTRY_BIN: &str = "/usr/bin/docker-registry";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);
/// The registry checks the bcrypt hash on every request: keep it cheap.
const BCRYPT_COST: u32 = 4;
const LISTEN_MARKER: &str = "listening on ";
/// Set to keep every registry's tempdir after the test.
pub const KEEP_DIR_ENV: &str = "PINHOOK_KEEP_REGISTRY_DIR";

/// How clients must authenticate to a [`TestRegistry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryAuth {
    None,
    Htpasswd {
        username: String,
        password: String,
    },
    /// Bearer tokens (`auth: token:`) from an in-process [`TokenServer`] that
    /// takes these credentials as HTTP Basic and refuses any other.
    Token {
        username: String,
        password: String,
    },
}

impl RegistryAuth {
    pub fn htpasswd(username: &str, password: &str) -> RegistryAuth {
        RegistryAuth::Htpasswd {
            username: username.to_string(),
            password: password.to_string(),
        }
    }

    pub fn token(username: &str, password: &str) -> RegistryAuth {
        RegistryAuth::Token {
            username: username.to_string(),
            password: password.to_string(),
        }
    }
}

/// How a [`TestRegistry`] is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// TLS with the server certificate of the registry's [`TestCa`].
    #[default]
    Https,
    /// Plain HTTP (no `tls:` section), like an "insecure registry".
    PlainHttp,
}

impl Transport {
    pub fn scheme(self) -> &'static str {
        match self {
            Transport::Https => "https",
            Transport::PlainHttp => "http",
        }
    }
}

/// One line of the registry's access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogEntry {
    pub method: String,
    /// Request URI as logged: path plus query, e.g. `/v2/app/manifests/v1`.
    pub uri: String,
    pub status: u16,
}

/// A running `docker-registry serve` process; killed on drop.
pub struct TestRegistry {
    dir: TempDir,
    /// The CA that issued the registry's certificate; another server can share it
    /// ([`TestRegistry::start_with`]).
    pub ca: Arc<TestCa>,
    auth: RegistryAuth,
    transport: Transport,
    /// Present with [`RegistryAuth::Token`]; outlives registry restarts.
    token_server: Option<TokenServer>,
    port: u16,
    config_path: PathBuf,
    /// The access log (the registry's stdout).
    pub access_log: PathBuf,
    /// The application log (the registry's stderr).
    pub app_log: PathBuf,
    child: Mutex<Option<Child>>,
    client: reqwest::Client,
}

impl TestRegistry {
    /// Starts a registry with its own fresh [`TestCa`].
    pub async fn start(auth: RegistryAuth) -> TestRegistry {
        Self::start_with(auth, Transport::Https, None).await
    }

    /// Starts a registry serving plain HTTP (an "insecure registry"): `url()`
    /// gives `http://` URLs. It still has a [`TestCa`], which the token
    /// server (always HTTPS) uses with [`RegistryAuth::Token`].
    pub async fn start_plain(auth: RegistryAuth) -> TestRegistry {
        Self::start_with(auth, Transport::PlainHttp, None).await
    }

    /// The general form: `ca` defaults to a fresh [`TestCa`]; given, its own server
    /// certificate (`server.pem`/`server-key.pem`) is used, so one CA can cover several
    /// servers.
    pub async fn start_with(
        auth: RegistryAuth,
        transport: Transport,
        ca: Option<Arc<TestCa>>,
    ) -> TestRegistry {
        let dir = new_tempdir();
        let ca = ca.unwrap_or_else(|| Arc::new(TestCa::generate(&dir.path().join("tls"))));
        Self::start_in(dir, ca, auth, transport).await
    }

    async fn start_in(
        dir: TempDir,
        ca: Arc<TestCa>,
        auth: RegistryAuth,
        transport: Transport,
    ) -> TestRegistry {
        init_crypto();
        let client = ca.reqwest_client();
        let token_server = match &auth {
            RegistryAuth::Token { username, password } => {
                Some(TokenServer::start(&ca, &dir.path().join("token"), username, password).await)
            }
            _ => None,
        };
        let mut reg = TestRegistry {
            config_path: dir.path().join("config.yml"),
            access_log: dir.path().join("access.log"),
            app_log: dir.path().join("registry.log"),
            dir,
            ca,
            auth,
            transport,
            token_server,
            port: 0,
            child: Mutex::new(None),
            client,
        };
        reg.write_htpasswd();
        reg.write_config();
        reg.port = reg.launch_once().await.unwrap_or_else(|why| reg.fail(&why));
        // Pin the port so restarts come back on the same address.
        reg.write_config();
        reg.wait_ready().await;
        reg
    }

    /// `127.0.0.1:PORT`
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `https://127.0.0.1:PORT{path}` (`http://` with
    /// [`Transport::PlainHttp`]); `path` starts with `/`.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{}", self.transport.scheme(), self.host(), path)
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// `127.0.0.1:PORT/{repo}:{tag}`, as a pod spec would name it.
    pub fn image_ref(&self, repo: &str, tag: &str) -> String {
        format!("{}/{}:{}", self.host(), repo, tag)
    }

    pub fn ca_pem(&self) -> &str {
        self.ca.ca_pem()
    }

    pub fn ca_path(&self) -> &Path {
        self.ca.ca_path()
    }

    /// `(username, password)` when the registry uses htpasswd, or the Basic
    /// credentials the token server accepts with [`RegistryAuth::Token`].
    pub fn credentials(&self) -> Option<(&str, &str)> {
        match &self.auth {
            RegistryAuth::None => None,
            RegistryAuth::Htpasswd { username, password }
            | RegistryAuth::Token { username, password } => Some((username, password)),
        }
    }

    /// The token server, with [`RegistryAuth::Token`].
    pub fn token_server(&self) -> Option<&TokenServer> {
        self.token_server.as_ref()
    }

    /// Tokens the token server has handed out over HTTP (0 without one).
    /// The harness's own requests use minted tokens and do not count.
    pub fn tokens_issued(&self) -> usize {
        self.token_server
            .as_ref()
            .map_or(0, TokenServer::tokens_issued)
    }

    /// A client trusting only the registry's CA (no credentials attached).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A request to an absolute `url`, with basic auth when configured.
    ///
    /// With [`RegistryAuth::Token`] it carries `Authorization: Bearer` with a
    /// token minted in-process (not over HTTP, so
    /// [`tokens_issued`](Self::tokens_issued) only counts what the code under
    /// test fetched) granting `pull,push,delete` on the repository named in
    /// `url`'s path (`/v2/<name>/{blobs,manifests,tags}/…`), or the catalog
    /// for `/v2/_catalog`, or nothing for `/v2/`.
    pub fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self.client.request(method, url);
        if let Some(tokens) = &self.token_server {
            let (user, _) = self.credentials().expect("token auth has credentials");
            return req.bearer_auth(tokens.mint(user, &harness_access(url)));
        }
        match self.credentials() {
            Some((user, pass)) => req.basic_auth(user, Some(pass)),
            None => req,
        }
    }

    /// Storage root of the filesystem driver.
    pub fn storage_dir(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// Whether the registry process is alive.
    pub fn is_running(&self) -> bool {
        let mut guard = self.child.lock().expect("registry child lock");
        match guard.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the registry process (SIGKILL) and reaps it. Idempotent.
    pub fn stop(&self) {
        let taken = self.child.lock().expect("registry child lock").take();
        if let Some(mut child) = taken {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the registry process (SIGSTOP): the kernel still accepts connections on its
    /// port, but nothing answers, as with a hung registry. [`resume`](Self::resume) thaws it.
    /// Returns once the kernel reports the process stopped (`T` in `/proc/PID/stat`): `kill`
    /// returns before a busy process has stopped, and on a loaded machine one more request
    /// could be answered after it.
    pub fn pause(&self) {
        let pid = self.signal("-STOP");
        let stat = format!("/proc/{pid}/stat");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            // `pid (comm) S ...`: the state follows the last ')'.
            let state = state.rsplit(')').next().unwrap_or_default().trim_start();
            if state.starts_with('T') {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.fail("the registry did not stop within 5 s of SIGSTOP");
    }

    /// Thaws a [`pause`](Self::pause)d registry (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) -> u32 {
        let pid = match self.child.lock().expect("registry child lock").as_ref() {
            Some(child) => child.id(),
            None => self.fail("the registry is not running"),
        };
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid} failed");
        pid
    }

    /// Starts the process again on the same port and storage and waits until
    /// it answers. Does nothing if it is already running.
    pub async fn start_again(&self) {
        if self.is_running() {
            return;
        }
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            match self.launch_once().await {
                Ok(port) if port == self.port => break,
                Ok(port) => self.fail(&format!("came back on port {port}, not {}", self.port)),
                // The old port can be briefly taken (e.g. by an outgoing
                // connection's ephemeral port): retry for a while.
                Err(why) if why.contains("address already in use") && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(why) => self.fail(&why),
            }
        }
        self.wait_ready().await;
    }

    /// Every access-log line so far, parsed (unparsable lines are skipped).
    pub fn requests(&self) -> Vec<AccessLogEntry> {
        let text = fs::read_to_string(&self.access_log).unwrap_or_default();
        text.lines().filter_map(parse_access_line).collect()
    }

    /// Counts logged requests with this exact method whose URI contains
    /// `path_contains`, as of now. Prefer [`count_requests`](Self::count_requests)
    /// right after a request: the registry writes its log line after replying.
    pub fn count_requests_now(&self, method: &str, path_contains: &str) -> usize {
        self.requests()
            .iter()
            .filter(|e| e.method == method && e.uri.contains(path_contains))
            .count()
    }

    /// Like [`count_requests_now`](Self::count_requests_now), after waiting for
    /// the access log to stop growing (quiet for 150 ms, at most 3 s).
    pub async fn count_requests(&self, method: &str, path_contains: &str) -> usize {
        self.settle_access_log().await;
        self.count_requests_now(method, path_contains)
    }

    /// `HEAD` requests for the manifest `/v2/{repo}/manifests/{reference}` so far, counted
    /// as [`count_requests`](Self::count_requests) does.
    pub async fn manifest_heads(&self, repo: &str, reference: &str) -> usize {
        let path = format!("/v2/{repo}/manifests/{reference}");
        self.count_requests("HEAD", &path).await
    }

    /// Waits until the access log has not grown for 150 ms (at most 3 s).
    pub async fn settle_access_log(&self) {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut last = file_len(&self.access_log);
        let mut quiet_since = Instant::now();
        while Instant::now() < deadline && quiet_since.elapsed() < Duration::from_millis(150) {
            tokio::time::sleep(Duration::from_millis(25)).await;
            let now = file_len(&self.access_log);
            if now != last {
                last = now;
                quiet_since = Instant::now();
            }
        }
    }

    /// The last `n` lines of both logs, for panic messages.
    pub fn log_tail(&self, n: usize) -> String {
        format!(
            "--- {} (last {n} lines) ---\n{}\n--- {} (last {n} lines) ---\n{}",
            self.app_log.display(),
            tail(&self.app_log, n),
            self.access_log.display(),
            tail(&self.access_log, n),
        )
    }

    fn fail(&self, why: &str) -> ! {
        self.stop();
        panic!(
            "test registry ({}): {why}\nconfig: {}\n{}",
            registry_bin(),
            self.config_path.display(),
            self.log_tail(40)
        )
    }

    fn write_htpasswd(&self) {
        if let Some((user, pass)) = self.credentials() {
            let hash = bcrypt::hash(pass, BCRYPT_COST).expect("bcrypt-hash the test password");
            write(&self.htpasswd_path(), &format!("{user}:{hash}\n"));
        }
    }

    fn htpasswd_path(&self) -> PathBuf {
        self.dir.path().join("htpasswd")
    }

    fn write_config(&self) {
        let auth = match (&self.auth, &self.token_server) {
            (RegistryAuth::None, _) => String::new(),
            (RegistryAuth::Htpasswd { .. }, _) => format!(
                "auth:\n  htpasswd:\n    realm: pinhook-test\n    path: \"{}\"\n",
                self.htpasswd_path().display()
            ),
            (RegistryAuth::Token { .. }, Some(tokens)) => format!(
                "auth:\n  token:\n    realm: \"{}\"\n    service: {}\n    issuer: {}\n    \
                 rootcertbundle: \"{}\"\n",
                tokens.realm(),
                tokens.service(),
                tokens.issuer(),
                tokens.root_cert_path().display()
            ),
            (RegistryAuth::Token { .. }, None) => unreachable!("token auth starts a token server"),
        };
        let tls = match self.transport {
            Transport::Https => format!(
                "  tls:\n    certificate: \"{}\"\n    key: \"{}\"\n",
                self.ca.server_cert_path().display(),
                self.ca.server_key_path().display(),
            ),
            Transport::PlainHttp => String::new(),
        };
        // Only 127.0.0.1 is bound: no debug server, no health checks.
        let config = format!(
            "version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: \"{storage}\"
  delete:
    enabled: true
  redirect:
    disable: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: \"127.0.0.1:{port}\"
  secret: pinhook-test-secret
{tls}{auth}",
            storage = self.storage_dir().display(),
            port = self.port,
            tls = tls,
            auth = auth,
        );
        write(&self.config_path, &config);
    }

    /// Spawns the process and waits for its "listening on" line; returns the
    /// port it reports, or why it did not come up.
    async fn launch_once(&self) -> Result<u16, String> {
        let offset = file_len(&self.app_log);
        let child = self.spawn()?;
        *self.child.lock().expect("registry child lock") = Some(child);
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(port) = find_listen_port(&read_from(&self.app_log, offset)) {
                return Ok(port);
            }
            if let Some(status) = self.exit_status() {
                let log = read_from(&self.app_log, offset);
                return Err(format!("exited with {status} before listening: {log}"));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no {LISTEN_MARKER:?} line after {STARTUP_TIMEOUT:?}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn spawn(&self) -> Result<Child, String> {
        let bin = registry_bin();
        let mut cmd = Command::new(&bin);
        cmd.arg("serve")
            .arg(&self.config_path)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(append(&self.access_log))
            .stderr(append(&self.app_log));
        // REGISTRY_* variables override the config file: keep them out.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("REGISTRY_") {
                cmd.env_remove(name);
            }
        }
        cmd.spawn().map_err(|e| {
            format!("cannot run {bin:?}: {e} (install it with scripts/install-test-deps.sh)")
        })
    }

    fn exit_status(&self) -> Option<std::process::ExitStatus> {
        let mut guard = self.child.lock().expect("registry child lock");
        let status = guard.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if status.is_some() {
            *guard = None;
        }
        status
    }

    /// Polls `GET /v2/` until it answers 200 or 401.
    async fn wait_ready(&self) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let url = self.url("/v2/");
        let mut last = String::from("no attempt");
        while Instant::now() < deadline {
            match self.client.get(&url).send().await {
                Ok(r) if r.status() == 200 || r.status() == 401 => return,
                Ok(r) => last = format!("status {}", r.status()),
                Err(e) => last = format!("{e:?}"),
            }
            if let Some(status) = self.exit_status() {
                self.fail(&format!("exited with {status} while waiting for GET /v2/"));
            }
            tokio::time::sleep(POLL).await;
        }
        self.fail(&format!(
            "GET {url} not ready after {STARTUP_TIMEOUT:?}: {last}"
        ))
    }
}

impl Drop for TestRegistry {
    /// Kills the process. The tempdir (config, storage, logs) is removed
    /// unless the test is panicking or `PINHOOK_KEEP_REGISTRY_DIR` is set.
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os(KEEP_DIR_ENV).is_some() {
            self.dir.disable_cleanup(true);
            eprintln!("test registry files kept in {}", self.dir.path().display());
        }
        if let Ok(mut guard) = self.child.lock() {
            if let Some(mut child) = guard.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Parses `… "METHOD URI PROTO" STATUS SIZE …` (Apache combined format).
pub fn parse_access_line(line: &str) -> Option<AccessLogEntry> {
    let (_, rest) = line.split_once('"')?;
    let (request, after) = rest.split_once('"')?;
    let mut parts = request.split_whitespace();
    let method = parts.next()?.to_string();
    let uri = parts.next()?.to_string();
    let status = after.split_whitespace().next()?.parse().ok()?;
    Some(AccessLogEntry {
        method,
        uri,
        status,
    })
}

/// What the harness's own token for a request to `url` grants.
fn harness_access(url: &str) -> Vec<Access> {
    let path = reqwest::Url::parse(url)
        .map(|u| u.path().to_string())
        .unwrap_or_else(|_| url.to_string());
    match repository_of(&path) {
        Some(name) => vec![Access::repository(&name, &["pull", "push", "delete"])],
        None if path.starts_with("/v2/_catalog") => vec![Access {
            kind: "registry".to_string(),
            name: "catalog".to_string(),
            actions: vec!["*".to_string()],
        }],
        None => Vec::new(),
    }
}

/// The repository in `/v2/<name>/(blobs|manifests|tags)/…`. A name may
/// itself contain `blobs` etc. as a component, but what follows the marker
/// (`<digest>`, `uploads/<uuid>`, `<reference>`, `list`) never contains one,
/// so the last marker wins.
pub fn repository_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v2/")?;
    let end = ["/blobs/", "/manifests/", "/tags/"]
        .iter()
        .filter_map(|m| rest.rfind(m))
        .max()?;
    Some(rest[..end].to_string()).filter(|n| !n.is_empty())
}

/// Finds the port in `msg="listening on 127.0.0.1:PORT, tls"`.
fn find_listen_port(log: &str) -> Option<u16> {
    let (_, rest) = log.split_once(LISTEN_MARKER)?;
    let addr = rest.split([',', '"', ' ', '\n']).next()?;
    addr.rsplit_once(':')?.1.parse().ok()
}

fn registry_bin() -> String {
    std::env::var("PINHOOK_TEST_REGISTRY_BIN").unwrap_or_else(|_| DEFAULT_REGISTRY_BIN.into())
}

fn new_tempdir() -> TempDir {
    tempfile::Builder::new()
        .prefix("pinhook-registry-")
        .tempdir()
        .expect("create a tempdir for the test registry")
}

fn append(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

fn write(path: &Path, contents: &str) {
    fs::write(path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn read_from(path: &Path, offset: u64) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|e| format!("<unreadable: {e}>"));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
