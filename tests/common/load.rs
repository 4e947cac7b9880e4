//! A small, bounded load generator for fault tests: `clients` concurrent tasks in this process
//! post AdmissionReviews over real HTTPS to one or more pinhook replicas (round-robin), for a
//! fixed time and at most `max_requests`, and record per request what came back and how long
//! it took. A request whose connection fails is retried once on the next replica, as the
//! apiserver does behind a Service (it retries a webhook call on a refused or reset
//! connection, and a new connection may land on another endpoint).
//!
//! Every loop has a hard stop: the load ends at `duration` (or `max_requests`), and each
//! request, retry included, is cut off after `request_timeout`. Judging the answers is left to
//! the test; [`Record`] keeps the review sent so the patch can be applied to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::Value;

/// The load tests share two cores with whatever else runs: one at a time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One pinhook to send to.
#[derive(Clone)]
pub struct Replica {
    pub client: reqwest::Client,
    /// `https://127.0.0.1:PORT`
    pub base: String,
}

/// What a request's image is to the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Resolved before the fault: must be pinned to `expected` whatever happens.
    Cached,
    /// Never resolved before this request.
    Uncached,
}

/// One request to send: a review and what its image should be pinned to.
#[derive(Clone)]
pub struct Shot {
    pub kind: Kind,
    pub review: Arc<Value>,
    /// The image as pinhook should pin it (`host/repo:tag@sha256:…`).
    pub expected: String,
}

/// What came back for one request.
#[derive(Debug)]
pub enum Answer {
    /// An HTTP answer: its status and body (parsed when it is JSON, else `Value::String`).
    Http { status: u16, body: Value },
    /// No HTTP answer, even after the retry: why.
    Transport(String),
}

/// One request sent and its answer.
pub struct Record {
    pub kind: Kind,
    pub review: Arc<Value>,
    pub expected: String,
    /// When the (first) request was sent, since the load started.
    pub sent_at: Duration,
    /// Until the answer that counts (the retry's, if there was one).
    pub latency: Duration,
    pub answer: Answer,
    /// The first replica's connection failed and the request was sent again to the next one.
    pub retried: bool,
}

/// The shape of the load.
#[derive(Debug, Clone)]
pub struct Load {
    pub clients: usize,
    pub duration: Duration,
    pub max_requests: usize,
    /// Each client waits this long after an answer before its next request.
    pub pause: Duration,
    /// Path and query posted to, e.g. `/mutate?timeout=2s`.
    pub path: String,
    /// Hard bound on one request (and again on its retry).
    pub request_timeout: Duration,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            clients: 8,
            duration: Duration::from_secs(4),
            max_requests: 4_000,
            pause: Duration::from_millis(5),
            path: "/mutate?timeout=2s".to_string(),
            request_timeout: Duration::from_secs(5),
        }
    }
}

impl Load {
    /// Runs the load against `replicas` from `started` on. `next(i)` gives the `i`-th request
    /// (numbered across all clients); `None` skips that number.
    pub async fn run<F>(&self, replicas: &[Replica], started: Instant, next: F) -> Vec<Record>
    where
        F: Fn(usize) -> Option<Shot> + Sync,
    {
        assert!(!replicas.is_empty(), "the load needs a replica");
        let counter = AtomicUsize::new(0);
        let clients = (0..self.clients).map(|_| self.client(replicas, started, &counter, &next));
        join_all(clients).await.into_iter().flatten().collect()
    }

    async fn client<F>(
        &self,
        replicas: &[Replica],
        started: Instant,
        counter: &AtomicUsize,
        next: &F,
    ) -> Vec<Record>
    where
        F: Fn(usize) -> Option<Shot> + Sync,
    {
        let mut records = Vec::new();
        while started.elapsed() < self.duration {
            let i = counter.fetch_add(1, Ordering::SeqCst);
            if i >= self.max_requests {
                break;
            }
            let Some(shot) = next(i) else { continue };
            let body = serde_json::to_vec(shot.review.as_ref()).expect("review is JSON");
            let sent_at = started.elapsed();
            let sent = Instant::now();
            let first = &replicas[i % replicas.len()];
            let mut answer = self.post(first, &body).await;
            let mut retried = false;
            if answer.is_err() && replicas.len() > 1 {
                retried = true;
                answer = self.post(&replicas[(i + 1) % replicas.len()], &body).await;
            }
            let answer = answer.unwrap_or_else(Answer::Transport);
            records.push(Record {
                kind: shot.kind,
                review: shot.review,
                expected: shot.expected,
                sent_at,
                latency: sent.elapsed(),
                answer,
                retried,
            });
            tokio::time::sleep(self.pause).await;
        }
        records
    }

    /// One POST; `Err(why)` when the connection failed (worth retrying elsewhere), else the
    /// HTTP answer or a timeout (not retried: the apiserver's deadline is spent).
    async fn post(&self, replica: &Replica, body: &[u8]) -> Result<Answer, String> {
        let request = replica
            .client
            .post(format!("{}{}", replica.base, self.path))
            .header("content-type", "application/json")
            .timeout(self.request_timeout)
            .body(body.to_vec());
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) if e.is_timeout() => {
                return Ok(Answer::Transport(format!("timed out: {e}")));
            }
            Err(e) => return Err(error_chain(&e)),
        };
        let status = response.status().as_u16();
        match response.text().await {
            Ok(text) => {
                let body =
                    serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
                Ok(Answer::Http { status, body })
            }
            Err(e) if e.is_timeout() => Ok(Answer::Transport(format!("body timed out: {e}"))),
            Err(e) => Err(error_chain(&e)),
        }
    }
}

/// An error and its sources on one line.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(current) = cause {
        text.push_str(": ");
        text.push_str(&current.to_string());
        cause = current.source();
    }
    text
}

/// The `q`-th quantile (0..=1) of `samples`, nearest rank; zero for none.
pub fn quantile(samples: &[Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
