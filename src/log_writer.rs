//! The log writer behind `tracing`: formatted lines are appended to one shared buffer, and a
//! thread of its own writes that buffer out whole, then pauses so the next batch can gather.
//!
//! Why not `tracing-appender`'s non-blocking writer: it sends every line through a channel
//! whose receiver parks whenever the queue is empty, so at any rate below saturation each line
//! woke the writer thread (a futex wake and a context switch per review: half the CPU of
//! logging a review, issue 13). Here a line costs one uncontended lock and a copy, and the
//! writer is woken at most once per batch, when the first line arrives while it waits.
//!
//! Lines are never dropped while the writer runs: when the buffer holds `capacity` bytes the
//! logging thread waits until the writer takes it, as a direct write to a blocked stderr would.
//! [`FlushGuard`] writes what is left when it is dropped (the end of `main`).

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// What `tracing` writes to: cheap to share, one per process.
#[derive(Clone)]
pub struct BatchedWriter {
    shared: Arc<Shared>,
}

/// Stops the writer thread once it has written everything buffered.
pub struct FlushGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// The writer waits here for a first line.
    filled: Condvar,
    /// Logging threads wait here for room.
    drained: Condvar,
    capacity: usize,
}

#[derive(Default)]
struct State {
    buffer: Vec<u8>,
    /// The writer thread waits on `filled`: the next line must wake it.
    idle: bool,
    closed: bool,
}

/// Starts the writer thread writing to `out`: batches of up to `capacity` bytes (a single
/// longer line goes alone), one write and flush each, at most one batch per `pause`.
pub fn batched<W>(
    out: W,
    capacity: usize,
    pause: Duration,
) -> io::Result<(BatchedWriter, FlushGuard)>
where
    W: Write + Send + 'static,
{
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        filled: Condvar::new(),
        drained: Condvar::new(),
        capacity,
    });
    let writer = shared.clone();
    let thread = std::thread::Builder::new()
        .name("pinhook-log".to_string())
        .spawn(move || write_batches(&writer, out, pause))?;
    Ok((
        BatchedWriter {
            shared: shared.clone(),
        },
        FlushGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

/// The writer thread: take the buffer, write it, pause; until closed and empty.
fn write_batches<W: Write>(shared: &Shared, mut out: W, pause: Duration) {
    let mut batch = Vec::new();
    loop {
        let closed = {
            let mut state = shared.lock();
            while state.buffer.is_empty() && !state.closed {
                state.idle = true;
                state = shared
                    .filled
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            state.idle = false;
            if state.buffer.is_empty() {
                return;
            }
            std::mem::swap(&mut state.buffer, &mut batch);
            state.closed
        };
        shared.drained.notify_all();
        // Nowhere to report a failed write of the log itself; the next batch tries again.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
        batch.clear();
        if !closed {
            std::thread::sleep(pause);
        }
    }
}

// === impl Shared ===

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A logging thread that panicked mid-append leaves at worst a partial line.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn append(&self, line: &[u8]) {
        let mut state = self.lock();
        while !state.buffer.is_empty()
            && state.buffer.len() + line.len() > self.capacity
            && !state.closed
        {
            state = self
                .drained
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.buffer.extend_from_slice(line);
        let wake = std::mem::take(&mut state.idle);
        drop(state);
        if wake {
            self.filled.notify_one();
        }
    }
}

// === impl BatchedWriter ===

impl Write for &BatchedWriter {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.shared.append(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchedWriter {
    type Writer = &'a BatchedWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

// === impl FlushGuard ===

impl Drop for FlushGuard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.filled.notify_one();
        self.shared.drained.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// A sink that records what it got, one entry per write, and can be slow.
    #[derive(Clone, Default)]
    struct Recording {
        writes: Arc<Mutex<Vec<Vec<u8>>>>,
        delay: Duration,
    }

    impl Write for Recording {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            std::thread::sleep(self.delay);
            self.writes.lock().unwrap().push(bytes.to_vec());
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn line(i: usize) -> Vec<u8> {
        format!("line {i:05}\n").into_bytes()
    }

    /// Every line arrives, whole and in order, from several threads at once, and the guard
    /// writes what is still buffered when it is dropped.
    #[test]
    fn every_line_arrives_in_order_and_the_guard_flushes_the_rest() {
        let sink = Recording::default();
        let (writer, guard) = batched(sink.clone(), 4096, Duration::from_millis(5)).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..1_000 {
                        (&writer).write_all(&line(t * 1_000 + i)).unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(guard);
        let written: Vec<u8> = sink.writes.lock().unwrap().concat();
        let text = String::from_utf8(written).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4_000);
        for t in 0..4 {
            let own: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| {
                    (t * 1_000..(t + 1) * 1_000).contains(&l[5..].parse::<usize>().unwrap())
                })
                .collect();
            let expected: Vec<String> = (t * 1_000..(t + 1) * 1_000)
                .map(|i| format!("line {i:05}"))
                .collect();
            assert_eq!(own, expected, "thread {t}'s lines out of order or missing");
        }
    }

    /// Lines logged faster than the pause go out in few writes (batches), and no batch is
    /// larger than the capacity.
    #[test]
    fn lines_are_batched_within_the_capacity() {
        let sink = Recording::default();
        let (writer, guard) = batched(sink.clone(), 1_100, Duration::from_millis(20)).unwrap();
        for i in 0..1_000 {
            (&writer).write_all(&line(i)).unwrap();
        }
        drop(guard);
        let writes = sink.writes.lock().unwrap();
        let total: usize = writes.iter().map(Vec::len).sum();
        assert_eq!(total, 11_000);
        assert!(
            writes.iter().all(|w| w.len() <= 1_100),
            "a batch over capacity"
        );
        // 11,000 bytes in batches of at most 100 lines: at least 10 writes, far fewer than 1,000.
        assert!(
            writes.len() >= 10 && writes.len() <= 40,
            "{} writes",
            writes.len()
        );
    }

    /// A blocked output holds the loggers back (the buffer stays bounded) and loses nothing.
    #[test]
    fn a_slow_output_applies_backpressure_without_losing_lines() {
        let sink = Recording {
            delay: Duration::from_millis(30),
            ..Recording::default()
        };
        let (writer, guard) = batched(sink.clone(), 220, Duration::from_millis(1)).unwrap();
        let started = Instant::now();
        for i in 0..100 {
            (&writer).write_all(&line(i)).unwrap();
        }
        // 100 lines of 11 bytes, at most 20 buffered: the logger could not finish before the
        // writer had taken four batches, each after the previous 30 ms write.
        assert!(started.elapsed() >= Duration::from_millis(90));
        drop(guard);
        let writes = sink.writes.lock().unwrap();
        assert!(
            writes.iter().all(|w| w.len() <= 220),
            "the buffer outgrew its capacity"
        );
        assert_eq!(writes.iter().map(Vec::len).sum::<usize>(), 1_100);
    }

    /// A line longer than the capacity is written alone rather than waiting forever.
    #[test]
    fn a_line_over_the_capacity_goes_alone() {
        let sink = Recording::default();
        let (writer, guard) = batched(sink.clone(), 8, Duration::from_millis(1)).unwrap();
        (&writer).write_all(b"short\n").unwrap();
        (&writer).write_all(&[b'x'; 100]).unwrap();
        (&writer).write_all(b"after\n").unwrap();
        drop(guard);
        let written: Vec<u8> = sink.writes.lock().unwrap().concat();
        assert_eq!(written.len(), 112);
        assert!(written.starts_with(b"short\n") && written.ends_with(b"after\n"));
    }
}
