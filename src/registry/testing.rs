//! Test doubles for the registry layer: a scripted registry stand-in that counts its calls,
//! how many overlap and how many ran to their answer. For unit tests of the cache and the pipeline (integration tests use
//! a real registry).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::{Credential, Fingerprint, RegistryError, Resolution, ResolutionSource, Resolver};
use crate::reference::{Digest, Reference};

/// A registry stand-in: answers from a script (then repeats the last answer), counts
/// calls, and tracks how many run at once.
pub(crate) struct Scripted {
    answers: Mutex<VecDeque<Answer>>,
    last: Mutex<Answer>,
    calls: AtomicUsize,
    running: AtomicUsize,
    finished: AtomicUsize,
    pub most_at_once: AtomicUsize,
    delay: Duration,
}

#[derive(Clone)]
pub(crate) enum Answer {
    Digest(char),
    Unreachable,
    NotFound,
    /// HTTP 500 with this text as the registry's error message.
    Failing(&'static str),
}

impl Scripted {
    pub fn new(script: &[Answer]) -> Arc<Scripted> {
        Self::slow(script, Duration::ZERO)
    }

    pub fn slow(script: &[Answer], delay: Duration) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers: Mutex::new(script.iter().cloned().collect()),
            last: Mutex::new(script.last().cloned().unwrap_or(Answer::NotFound)),
            calls: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            most_at_once: AtomicUsize::new(0),
            delay,
        })
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Calls under way (a cancelled call stops counting when it is dropped).
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Calls that ran to their answer.
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }
}

/// Counts a call as running until it is dropped, answered or not.
struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Resolver for Scripted {
    async fn resolve(
        &self,
        reference: &Reference,
        credentials: &[Credential],
    ) -> Result<Resolution, RegistryError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        let running = Running(&self.running);
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        drop(running);
        self.finished.fetch_add(1, Ordering::SeqCst);
        let answer = lock(&self.answers)
            .pop_front()
            .unwrap_or_else(|| lock(&self.last).clone());
        let registry = reference.domain().to_string();
        match answer {
            // The first candidate is the one that worked.
            Answer::Digest(c) => Ok(Resolution {
                digest: digest(c),
                credential: credentials
                    .first()
                    .map_or_else(Fingerprint::anonymous, Credential::fingerprint),
                source: ResolutionSource::Registry,
                moved_from: None,
                age: Duration::ZERO,
                origin: None,
                verified: None,
            }),
            Answer::Unreachable => Err(RegistryError::Status {
                registry,
                status: 503,
                message: "down".to_string(),
            }),
            Answer::Failing(message) => Err(RegistryError::Status {
                registry,
                status: 500,
                message: message.to_string(),
            }),
            Answer::NotFound => Err(RegistryError::NotFound {
                repository: reference.repository().to_string(),
                tag: reference.manifest(),
            }),
        }
    }
}

pub(crate) fn digest(c: char) -> Digest {
    let text = format!("sha256:{}", c.to_string().repeat(64));
    match text.parse() {
        Ok(digest) => digest,
        Err(e) => panic!("test digest {text}: {e}"),
    }
}

pub(crate) fn reference(text: &str) -> Reference {
    match Reference::parse(text) {
        Ok(reference) => reference,
        Err(e) => panic!("test reference {text}: {e}"),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
