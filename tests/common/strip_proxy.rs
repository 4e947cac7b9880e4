//! A plain-HTTP proxy on 127.0.0.1 in front of a plain-HTTP test registry that drops named
//! headers from the answers to HEAD requests: a registry whose HEAD omits `Content-Length` or
//! `Docker-Content-Digest`. One request per connection (`Connection: close` both ways), so
//! it can copy bytes without parsing bodies.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct StripProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl StripProxy {
    /// Forwards to `127.0.0.1:upstream_port`, dropping `strip` (lowercase names) from HEAD answers.
    pub async fn start(upstream_port: u16, strip: &'static [&'static str]) -> StripProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let _ = relay(client, upstream_port, strip).await;
                });
            }
        });
        StripProxy { addr, task }
    }

    /// `127.0.0.1:PORT`, to use as the registry host of image references.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for StripProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, upstream_port: u16, strip: &[&str]) -> std::io::Result<()> {
    let head = read_head(&mut client).await?;
    let is_head = head.starts_with("HEAD ");
    let request = close_connection(&head);
    let mut upstream = TcpStream::connect(("127.0.0.1", upstream_port)).await?;
    upstream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    upstream.read_to_end(&mut answer).await?;
    let split = find(&answer, b"\r\n\r\n").map_or(answer.len(), |i| i + 4);
    let (headers, body) = answer.split_at(split);
    let headers = String::from_utf8_lossy(headers);
    let kept: Vec<&str> = headers
        .split("\r\n")
        .filter(|line| {
            let name = line
                .split(':')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            !(is_head && strip.contains(&name.as_str()))
        })
        .collect();
    client.write_all(kept.join("\r\n").as_bytes()).await?;
    client.write_all(body).await?;
    client.shutdown().await
}

/// The request line and headers, up to the blank line (HEAD and GET carry no body).
async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while find(&buf, b"\r\n\r\n").is_none() {
        if stream.read(&mut byte).await? == 0 {
            break;
        }
        buf.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The same request with `Connection: close` instead of any connection header.
fn close_connection(head: &str) -> String {
    let mut lines: Vec<&str> = head
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    lines.push("Connection: close");
    format!("{}\r\n\r\n", lines.join("\r\n"))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
