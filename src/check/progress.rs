//! The spinner `pinhook check` shows on a terminal while a run takes more than a second.

use std::io::IsTerminal;
use std::time::Duration;

/// A spinner on stderr when it is a terminal and the run takes more than a second.
pub(super) struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
}

// === impl Progress ===

impl Progress {
    pub(super) fn start(objects: usize) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { task: None };
        }
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let frames = ['|', '/', '-', '\\'];
            for i in 0.. {
                eprint!("\r{} checking {objects} objects…", frames[i % frames.len()]);
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        });
        Progress { task: Some(task) }
    }

    /// Stops the spinner and clears its line.
    pub(super) async fn stop(self) {
        if let Some(task) = self.task {
            task.abort();
            let _ = task.await;
            eprint!("\r\x1b[2K");
        }
    }
}
