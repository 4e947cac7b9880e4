//! Capturing what pinhook logs, for tests that judge its log lines (bounded output, no secret).

use std::cell::RefCell;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tracing::dispatcher::{self, DefaultGuard, Dispatch};

thread_local! {
    /// A runtime thread's capture, set as it starts and dropped as it stops.
    static THREAD_CAPTURE: RefCell<Option<DefaultGuard>> = const { RefCell::new(None) };
}

/// Keeps a second registered dispatcher alive for the life of the test binary. While exactly
/// one `Dispatch` is registered, tracing-core works out a call site's interest from the
/// *registering thread's* default (tokio-rs/tracing#3611): a sibling test reaching a call site
/// first on a thread without a subscriber caches `Interest::never()` for it process-wide, and
/// the capture never sees that line (seen with `credential provider failed` once the plugin's
/// run moved into a task of its own). With two registered, every registration asks all of them.
fn pin_second_dispatch() {
    static PINNED: std::sync::OnceLock<Dispatch> = std::sync::OnceLock::new();
    PINNED.get_or_init(|| Dispatch::new(tracing::subscriber::NoSubscriber::default()));
}

/// Every log line of one test: what the threads of the runtime [`Captured::run`] built for it
/// logged.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Runs `test` on a runtime from `runtime` (with every driver enabled, as `#[tokio::test]`
    /// builds it) each of whose threads, the test's own, the workers and the blocking pool,
    /// logs at `level` into a new capture, which `test` is given, in the text format `pinhook
    /// serve` writes without colours (`log::line::text_format`).
    ///
    /// Scoped to those threads, not process-wide: the tests of a binary run in parallel in one
    /// process, and a global subscriber would capture the other tests' lines too (and could be
    /// installed only once). Tracing caches each call site's interest process-wide, but
    /// creating the capture's dispatcher rebuilds that cache for every call site.
    pub fn run<F, Fut>(level: tracing::Level, runtime: &mut tokio::runtime::Builder, test: F)
    where
        F: FnOnce(Captured) -> Fut,
        Fut: Future<Output = ()>,
    {
        pin_second_dispatch();
        let captured = Captured::default();
        let writer = captured.clone();
        // The text format as `pinhook serve` sets it up (its field formatter and escaping).
        let filter = tracing_subscriber::EnvFilter::new(level.as_str().to_ascii_lowercase());
        let dispatch = Dispatch::new(pinhook::log::line::text_format(filter, false, move || {
            writer.clone()
        }));
        let threads = dispatch.clone();
        let runtime = runtime
            .enable_all()
            .on_thread_start(move || {
                let guard = dispatcher::set_default(&threads);
                THREAD_CAPTURE.with(|slot| *slot.borrow_mut() = Some(guard));
            })
            .on_thread_stop(|| {
                THREAD_CAPTURE.with(|slot| slot.borrow_mut().take());
            })
            .build()
            .expect("the test's runtime");
        dispatcher::with_default(&dispatch, || runtime.block_on(test(captured)));
    }

    /// Bytes logged so far.
    pub fn len(&self) -> usize {
        self.0.lock().expect("log lock").len()
    }

    /// What was logged after the first `from` bytes.
    pub fn text_from(&self, from: usize) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log lock")[from..]).into_owned()
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        self.text_from(0)
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
