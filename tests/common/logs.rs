//! Capturing what pinhook logs, for tests that judge its log lines (bounded output, no secret).

use std::sync::{Arc, Mutex};

/// Every log line of the process, once [`Captured::install`] made it the global subscriber.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Makes a new capture the process-wide subscriber at `level`, plain text (no colours).
    /// Global, not scoped to a thread: tracing caches each call site's interest process-wide,
    /// and a thread-local subscriber can miss events another test's thread registered first.
    /// Once per test binary.
    pub fn install(level: tracing::Level) -> Captured {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        captured
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
