//! The log's writer thread, as `pinhook serve` (and `examples/warm_path`) set it up: every
//! line, tracing's and [`crate::log::line`]'s, is queued to one thread (tracing-appender's
//! `NonBlocking`), which writes it through a 64 KiB buffer, flushed whenever the queue is empty;
//! a request's worker only queues its line (a write per line cost about a sixth of warm
//! throughput, issue 13). Lines are never dropped: a full queue (128k lines) makes the logging
//! thread wait, as a direct write would.
//!
//! The thread runs at the lowest scheduling priority (nice 19, set by the thread itself on its
//! first write, [`Background`]): on busy cores it waits for the request workers instead of
//! taking a core from a review in flight (what that changes under load, and that the thread
//! still keeps up: issue 30, `docs/performance.md`). A nice value is a thread's own on Linux,
//! and raising it needs no privilege; where it cannot be set the thread keeps its priority and
//! nothing else changes.

use std::io::{self, Write};

use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};

/// The writer thread's nice value: the lowest priority.
pub const WRITER_NICE: i32 = 19;

/// The writer thread's name (`/proc/<pid>/task/<tid>/comm`).
pub const THREAD_NAME: &str = "pinhook-log";

/// Starts the writer thread over `out` (stderr, for `pinhook serve`). The guard writes out
/// what is still queued when dropped, at the end of `main`.
pub fn spawn<W: Write + Send + 'static>(out: W) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .lossy(false)
        .thread_name(THREAD_NAME)
        .finish(Background::new(io::BufWriter::with_capacity(
            64 * 1024,
            out,
        )))
}

/// A writer that lowers the priority of the thread that first writes to it (the writer
/// thread: tracing-appender moves its writer there and writes nowhere else).
pub struct Background<W> {
    inner: W,
    lowered: bool,
}

impl<W> Background<W> {
    pub fn new(inner: W) -> Self {
        Background {
            inner,
            lowered: false,
        }
    }
}

impl<W: Write> Write for Background<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.lowered {
            self.lowered = true;
            lower_this_thread();
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Sets the calling thread's nice value to [`WRITER_NICE`] (on Linux, `setpriority` with no
/// id sets the calling thread's, not the process's).
fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        // A failure leaves the thread at its priority: logging goes on the same.
        let _ = rustix::process::setpriority_process(None, WRITER_NICE);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::mpsc;

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    fn nice_of_this_thread() -> i32 {
        rustix::process::getpriority_process(None).unwrap()
    }

    /// The nice value of this process's thread named `name`, from `/proc` (field 19 of
    /// `stat`, after the command name's closing parenthesis).
    fn nice_of_thread_named(name: &str) -> Option<i32> {
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let path = task.ok()?.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if comm.trim_end() == name {
                let stat = std::fs::read_to_string(path.join("stat")).ok()?;
                let after = stat.rsplit_once(')')?.1;
                return after.split_whitespace().nth(16)?.parse().ok();
            }
        }
        None
    }

    #[test]
    fn the_thread_that_writes_is_lowered_and_no_other() {
        let before = nice_of_this_thread();
        let (sent, got) = mpsc::channel();
        let writer = std::thread::spawn(move || {
            let mut out = Background::new(Vec::new());
            let unwritten = nice_of_this_thread();
            out.write_all(b"a line\n").unwrap();
            out.write_all(b"another\n").unwrap();
            sent.send((unwritten, nice_of_this_thread(), out.inner))
                .unwrap();
        });
        writer.join().unwrap();
        let (unwritten, written, lines) = got.recv().unwrap();
        assert_eq!(unwritten, before, "nothing changes before the first write");
        assert_eq!(written, WRITER_NICE);
        assert_eq!(lines, b"a line\nanother\n");
        assert_eq!(
            nice_of_this_thread(),
            before,
            "the caller's thread keeps its own"
        );
    }

    #[test]
    fn the_log_writer_thread_runs_at_the_lowest_priority() {
        let (sink, _guard) = spawn(io::sink());
        sink.make_writer().write_all(b"a line\n").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while nice_of_thread_named(THREAD_NAME) != Some(WRITER_NICE) {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                nice_of_thread_named(THREAD_NAME)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
