//! A server that accepts TCP connections on 127.0.0.1 and never says a word: to pinhook it
//! is a registry that hangs (the TLS handshake never completes). It keeps every connection
//! open until the client closes it or the server is dropped, and counts how many are open.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;

/// A listener that accepts and never answers; stops when dropped.
pub struct SilentServer {
    port: u16,
    task: JoinHandle<()>,
    accepted: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
}

impl SilentServer {
    pub async fn start() -> SilentServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the silent server");
        let port = listener.local_addr().expect("its address").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let (accepted_, open_) = (accepted.clone(), open.clone());
        let task = tokio::spawn(async move {
            let mut held = tokio::task::JoinSet::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                accepted_.fetch_add(1, Ordering::SeqCst);
                open_.fetch_add(1, Ordering::SeqCst);
                let open = open_.clone();
                // Reads (and ignores) what the client sends until it closes; never writes.
                held.spawn(async move {
                    let mut buf = [0u8; 4096];
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        SilentServer {
            port,
            task,
            accepted,
            open,
        }
    }

    /// `127.0.0.1:PORT`, as an image reference names a registry.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Connections the client has not closed yet.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        // Dropping the accept loop drops the JoinSet, which aborts every held connection.
        self.task.abort();
    }
}
