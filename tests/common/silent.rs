//! A server that accepts TCP connections on 127.0.0.1 and never says a word: to pinhook it
//! is a registry that hangs (the TLS handshake never completes). It holds every connection
//! until dropped, so none is closed and none is answered.

use tokio::task::JoinHandle;

/// A listener that accepts and never answers; stops when dropped.
pub struct SilentServer {
    port: u16,
    task: JoinHandle<()>,
}

impl SilentServer {
    pub async fn start() -> SilentServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the silent server");
        let port = listener.local_addr().expect("its address").port();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        SilentServer { port, task }
    }

    /// `127.0.0.1:PORT`, as an image reference names a registry.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
