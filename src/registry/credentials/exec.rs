//! Running a credential program (a kubelet credential provider plugin, a docker credential
//! helper) the one way pinhook runs them: request on stdin, answer on stdout, bounded in time
//! and in output size, killed when the bound is hit or the caller goes away: the program runs
//! as the leader of a process group of its own, and the whole group is killed, so whatever it
//! started goes with it (before issue 44 only the direct child was killed, and a plugin's own
//! children outlived it).
//!
//! Memory: `pinhook` runs each program through itself ([`launch_through`], [`launch`]): the
//! launcher caps its own data memory ([`PROGRAM_DATA_BYTES`], `RLIMIT_DATA`: the heap and every
//! private writable mapping) and then becomes the program (`exec`), so the program and each
//! process it starts hold at most that, in pinhook's container, whatever an image name makes
//! it do. Without a launcher (the library's own tests) a program runs directly, uncapped.
//!
//! Owns: spawning, feeding, reading and reaping the child, and [`ExecError`], which names the
//! program and how it failed but never carries what it printed: a credential program's output
//! is a secret, and its stderr may quote it. A run given a [`RunPermit`] holds it until its
//! process is reaped, also when the run is dropped (the child is killed and reaped by a task
//! of its own), so a slot is never free while its process lives.
//!
//! Never: logs, interprets the answer, or leaves a child running.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::limits::RunPermit;

/// The most data memory (`RLIMIT_DATA`) a credential program's process takes, and each process
/// it starts: kubelet's credential providers (Go) run in some 20-50 MiB.
pub const PROGRAM_DATA_BYTES: u64 = 128 << 20;
/// The first argument that makes the `pinhook` binary the launcher of a credential program
/// (`pinhook __run-credential-program <bytes> <program> <args>…`).
pub const LAUNCH: &str = "__run-credential-program";
/// What a launcher exits with when it could not start the program.
pub const LAUNCH_FAILED: u8 = 127;

/// The binary every credential program is run through; unset, programs run directly.
static LAUNCHER: OnceLock<PathBuf> = OnceLock::new();

/// Runs every credential program from now on through `binary`, the running `pinhook` (which
/// knows [`LAUNCH`]), capped at [`PROGRAM_DATA_BYTES`]. The first call wins.
pub fn launch_through(binary: PathBuf) {
    let _ = LAUNCHER.set(binary);
}

/// The launcher's side: `args` are what follows [`LAUNCH`]: the cap in bytes, then the
/// program and its arguments. Caps the data memory of this process (and so of what it
/// starts) and becomes the program; returns only what stopped it, and the caller exits with
/// [`LAUNCH_FAILED`].
pub fn launch(args: &[OsString]) -> std::io::Error {
    let [cap, program, rest @ ..] = args else {
        return std::io::Error::other(format!("usage: pinhook {LAUNCH} <bytes> <program> [args]"));
    };
    let Some(cap) = cap.to_str().and_then(|cap| cap.parse::<u64>().ok()) else {
        return std::io::Error::other("the cap is not a number of bytes");
    };
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{setrlimit, Resource, Rlimit};
        let limit = Rlimit {
            current: Some(cap),
            maximum: Some(cap),
        };
        if let Err(e) = setrlimit(Resource::Data, limit) {
            return e.into();
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cap;
    use std::os::unix::process::CommandExt as _;
    std::process::Command::new(program).args(rest).exec()
}

/// What to run and within which bounds.
#[derive(Debug, Clone)]
pub(crate) struct Program<'a> {
    pub path: &'a Path,
    pub args: &'a [String],
    /// Set on top of pinhook's own environment (a later entry wins, as Go's `exec` does).
    pub env: &'a [(String, String)],
    pub timeout: Duration,
    /// Bytes of stdout (and of stderr, separately) read before the program is judged broken.
    pub max_output: usize,
}

/// Why a credential program gave no answer. Never holds its output.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("failed to start {program}")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} did not finish within {timeout:?}")]
    Timeout { program: PathBuf, timeout: Duration },
    #[error("{program} printed more than {limit} bytes")]
    OutputTooLarge { program: PathBuf, limit: usize },
    #[error("{program} exited with {status}")]
    Exit {
        program: PathBuf,
        status: ExitStatus,
        /// Its stdout, for the caller to recognise a documented answer ("credentials not
        /// found"); never to be logged or shown (its `Debug` prints only its length).
        stdout: Output,
    },
    #[error("failed to talk to {program}")]
    Io {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A program's output: readable by the code that asked for it, never printed (it may hold a
/// credential), not even by `{:?}`.
#[derive(Clone, PartialEq, Eq)]
pub struct Output(pub Vec<u8>);

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes, not shown>", self.0.len())
    }
}

// === impl ExecError ===

impl ExecError {
    /// A fixed-vocabulary label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            ExecError::Spawn { .. } => "spawn",
            ExecError::Timeout { .. } => "timeout",
            ExecError::OutputTooLarge { .. } => "output_too_large",
            ExecError::Exit { .. } => "exit",
            ExecError::Io { .. } => "io",
        }
    }
}

/// A started child and the slot it holds; dropped while the child runs, it kills the child
/// and gives the slot back once the child is reaped.
struct Running {
    child: Option<Child>,
    slot: Option<RunPermit>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        // The group first, while its leader is alive (unreaped, so its id names this group
        // and no other), then the leader itself should the group kill fail.
        kill_group(&child);
        let _ = child.start_kill();
        let slot = self.slot.take();
        // Without a runtime (shutting down), `kill_on_drop` and tokio's orphan reaping remain.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = child.wait().await;
                drop(slot);
            });
        }
    }
}

/// Sends SIGKILL to the process group `child` leads (Linux; elsewhere nothing).
fn kill_group(child: &Child) {
    #[cfg(target_os = "linux")]
    if let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = child;
}

/// Runs `program` with `stdin` and returns its stdout when it exits 0. `slot`, if given, is
/// held until the process is reaped, however the run ends.
pub(crate) async fn run(
    program: &Program<'_>,
    stdin: &[u8],
    slot: Option<RunPermit>,
) -> Result<Vec<u8>, ExecError> {
    let name = program.path.to_path_buf();
    let launcher = LAUNCHER.get();
    let mut command = match launcher {
        Some(launcher) => {
            let mut command = Command::new(launcher);
            command
                .arg(LAUNCH)
                .arg(PROGRAM_DATA_BYTES.to_string())
                .arg(program.path);
            command
        }
        None => Command::new(program.path),
    };
    let child = command
        .args(program.args)
        .envs(program.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Dropping the future (timeout, caller gone) must not leave the program running, nor
        // what it started: a group of its own, killed whole (`Running`).
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(|source| ExecError::Spawn {
            program: name.clone(),
            source,
        })?;
    let mut running = Running {
        child: Some(child),
        slot,
    };
    let Some(child) = running.child.as_mut() else {
        return Err(ExecError::Io {
            program: name,
            source: std::io::Error::other("child missing"),
        });
    };
    let io = |source| ExecError::Io {
        program: name.clone(),
        source,
    };
    let (Some(mut input), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(io(std::io::Error::other("child pipes missing")));
    };
    let limit = program.max_output;
    let talk = async {
        let feed = async {
            // A program that exits without reading its stdin is not an error here; its exit
            // status and output say what happened.
            let _ = input.write_all(stdin).await;
            drop(input);
            Ok::<(), std::io::Error>(())
        };
        let (_, out, err, status) = tokio::try_join!(
            feed,
            read_bounded(stdout, limit),
            read_bounded(stderr, limit),
            child.wait()
        )?;
        Ok::<_, std::io::Error>((out, err, status))
    };
    let (out, err, status) = match tokio::time::timeout(program.timeout, talk).await {
        Err(_) => {
            return Err(ExecError::Timeout {
                program: name,
                timeout: program.timeout,
            })
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            return Err(ExecError::OutputTooLarge {
                program: name,
                limit,
            })
        }
        Ok(Err(e)) => return Err(io(e)),
        Ok(Ok(done)) => done,
    };
    // stderr is read only so the program cannot block on a full pipe; it is never shown.
    drop(err);
    if launcher.is_some() && status.code() == Some(i32::from(LAUNCH_FAILED)) {
        return Err(ExecError::Spawn {
            program: name,
            source: std::io::Error::other("not found or not executable"),
        });
    }
    if !status.success() {
        return Err(ExecError::Exit {
            program: name,
            status,
            stdout: Output(out),
        });
    }
    Ok(out)
}

/// Reads `reader` to its end, failing with `FileTooLarge` past `limit` bytes.
async fn read_bounded(reader: impl AsyncRead + Unpin, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut buffer = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut buffer).await?;
    if buffer.len() > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            "output over the limit",
        ));
    }
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(
        script: &str,
        timeout: Duration,
        max_output: usize,
    ) -> (PathBuf, Vec<String>, Duration, usize) {
        (
            PathBuf::from("/bin/sh"),
            vec!["-c".to_string(), script.to_string()],
            timeout,
            max_output,
        )
    }

    async fn run_sh(
        script: &str,
        timeout: Duration,
        max_output: usize,
    ) -> Result<Vec<u8>, ExecError> {
        let (path, args, timeout, max_output) = sh(script, timeout, max_output);
        let env = vec![("PINHOOK_TEST_VAR".to_string(), "set".to_string())];
        let program = Program {
            path: &path,
            args: &args,
            env: &env,
            timeout,
            max_output,
        };
        run(&program, b"request", None).await
    }

    #[tokio::test]
    async fn stdin_in_stdout_out_with_the_extra_environment() {
        let out = run_sh(
            "cat; echo \" $PINHOOK_TEST_VAR\"",
            Duration::from_secs(5),
            100,
        )
        .await;
        assert_eq!(out.ok(), Some(b"request set\n".to_vec()));
    }

    /// A process, dead or a zombie (killed, waiting for whoever reaps orphans).
    fn gone(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    }

    /// Issue 44: a plugin's own children outlived it (only the direct child was killed).
    /// Now the plugin's whole process group goes.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_program_killed_takes_what_it_started_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("grandchild");
        let script = format!(
            "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {}; sleep 300",
            file.display()
        );
        let killed = run_sh(&script, Duration::from_millis(300), 100).await;
        assert!(
            matches!(killed, Err(ExecError::Timeout { .. })),
            "{killed:?}"
        );
        let pid = std::fs::read_to_string(&file).unwrap().trim().to_string();
        assert!(!pid.is_empty());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !gone(&pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone(&pid), "the plugin's child {pid} outlived it");
    }

    #[tokio::test]
    async fn bounds_and_failures_never_carry_the_output_in_their_message() {
        let secs = Duration::from_secs(5);
        let slow = run_sh("sleep 5", Duration::from_millis(100), 100).await;
        assert!(matches!(slow, Err(ExecError::Timeout { .. })), "{slow:?}");
        let big = run_sh("head -c 1000 /dev/zero", secs, 100).await;
        assert!(
            matches!(big, Err(ExecError::OutputTooLarge { .. })),
            "{big:?}"
        );
        let failed = run_sh("echo hunter2; echo hunter2 >&2; exit 3", secs, 100).await;
        match failed {
            Err(e @ ExecError::Exit { .. }) => {
                assert_eq!(e.reason(), "exit");
                assert!(!e.to_string().contains("hunter2"), "{e}");
                let debug = format!("{e:?}");
                assert!(!debug.contains("hunter2"), "{debug}");
                assert!(debug.contains("<8 bytes, not shown>"), "{debug}");
            }
            other => panic!("{other:?}"),
        }
        let missing = Program {
            path: Path::new("/nonexistent/plugin"),
            args: &[],
            env: &[],
            timeout: secs,
            max_output: 100,
        };
        let spawn = run(&missing, b"", None).await;
        assert!(matches!(spawn, Err(ExecError::Spawn { .. })), "{spawn:?}");
    }
}
