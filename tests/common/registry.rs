//! A real OCI registry (Debian's `docker-registry`, distribution 2.8.2) for
//! integration tests, serving TLS on 127.0.0.1 with an optional htpasswd.
//!
//! What 2.8.2 prints, and what this module relies on:
//! - stderr (logrus text): one line per event. With `http.addr` port 0 the
//!   bound address appears as
//!   `time="…" level=info msg="listening on 127.0.0.1:41234, tls" …`.
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
    Htpasswd { username: String, password: String },
}

impl RegistryAuth {
    pub fn htpasswd(username: &str, password: &str) -> RegistryAuth {
        RegistryAuth::Htpasswd {
            username: username.to_string(),
            password: password.to_string(),
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
    ca: Arc<TestCa>,
    auth: RegistryAuth,
    port: u16,
    config_path: PathBuf,
    access_log: PathBuf,
    app_log: PathBuf,
    child: Mutex<Option<Child>>,
    client: reqwest::Client,
}

impl TestRegistry {
    /// Starts a registry with its own fresh [`TestCa`].
    pub async fn start(auth: RegistryAuth) -> TestRegistry {
        let dir = new_tempdir();
        let ca = Arc::new(TestCa::generate(&dir.path().join("tls")));
        Self::start_in(dir, ca, auth).await
    }

    /// Starts a registry whose server certificate comes from `ca`, so one CA
    /// can cover several servers in a test. The CA's own server certificate
    /// (`server.pem`/`server-key.pem`) is used.
    pub async fn start_with_ca(auth: RegistryAuth, ca: Arc<TestCa>) -> TestRegistry {
        Self::start_in(new_tempdir(), ca, auth).await
    }

    async fn start_in(dir: TempDir, ca: Arc<TestCa>, auth: RegistryAuth) -> TestRegistry {
        init_crypto();
        let client = ca.reqwest_client();
        let mut reg = TestRegistry {
            config_path: dir.path().join("config.yml"),
            access_log: dir.path().join("access.log"),
            app_log: dir.path().join("registry.log"),
            dir,
            ca,
            auth,
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

    /// `https://127.0.0.1:PORT{path}`; `path` starts with `/`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{}", self.host(), path)
    }

    /// `127.0.0.1:PORT/{repo}:{tag}`, as a pod spec would name it.
    pub fn image_ref(&self, repo: &str, tag: &str) -> String {
        format!("{}/{}:{}", self.host(), repo, tag)
    }

    pub fn ca(&self) -> &Arc<TestCa> {
        &self.ca
    }

    pub fn ca_pem(&self) -> &str {
        self.ca.ca_pem()
    }

    pub fn ca_path(&self) -> &Path {
        self.ca.ca_path()
    }

    pub fn auth(&self) -> &RegistryAuth {
        &self.auth
    }

    /// `(username, password)` when the registry uses htpasswd.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        match &self.auth {
            RegistryAuth::None => None,
            RegistryAuth::Htpasswd { username, password } => Some((username, password)),
        }
    }

    /// A client trusting only the registry's CA (no credentials attached).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A request to an absolute `url`, with basic auth when configured.
    pub fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self.client.request(method, url);
        match self.credentials() {
            Some((user, pass)) => req.basic_auth(user, Some(pass)),
            None => req,
        }
    }

    /// Storage root of the filesystem driver.
    pub fn storage_dir(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The access log (the registry's stdout).
    pub fn access_log_path(&self) -> &Path {
        &self.access_log
    }

    /// The application log (the registry's stderr).
    pub fn log_path(&self) -> &Path {
        &self.app_log
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

    /// [`stop`](Self::stop) then [`start_again`](Self::start_again).
    pub async fn restart(&self) {
        self.stop();
        self.start_again().await;
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
        let auth = match self.auth {
            RegistryAuth::None => String::new(),
            RegistryAuth::Htpasswd { .. } => format!(
                "auth:\n  htpasswd:\n    realm: pinhook-test\n    path: \"{}\"\n",
                self.htpasswd_path().display()
            ),
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
  tls:
    certificate: \"{cert}\"
    key: \"{key}\"
{auth}",
            storage = self.storage_dir().display(),
            port = self.port,
            cert = self.ca.server_cert_path().display(),
            key = self.ca.server_key_path().display(),
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
