//! Writes to the streams the agent does not own: its stderr (the log) and stdout.
//!
//! Whoever reads them (a supervisor, a container's log driver, `inferprobe run | tool`)
//! may stop reading. A write(2) to a full pipe then blocks, and on the runtime's one
//! worker thread that would stop every run, the port and paging with it: the endpoint's
//! outage would go unseen while the agent merely looks unreachable. So, once
//! [`Sink::start`] is called (by the daemon), a line is appended to a bounded queue and
//! written by a thread of the sink's own; when the queue is full, the line is dropped and
//! counted ([`lines_dropped`], exposed as `inferprobe_log_lines_dropped_total`), never
//! waited for. Once the output takes lines again, one line says how many were lost.
//!
//! Informational lines may wait up to [`WINDOW`] and go out together (a write per run
//! was ~3 % of the agent's CPU at 100 runs/s, BENCHMARKS.md); a warning or an error
//! wakes the writer at once. One queue per stream keeps the order. Without `start`
//! (every other subcommand) a line is written at once by the caller, as a command-line
//! tool's output should be.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long an informational line may wait for the lines after it.
pub const WINDOW: Duration = Duration::from_millis(200);
/// What one stream's queue holds at most: ~10 s of a busy agent's log (100 runs/s of
/// ~200-byte lines), a few hundred bytes for one probe, then lines are dropped.
const CAPACITY: usize = 256 << 10;

/// A stream the agent writes to but does not own.
pub struct Sink {
    queue: Mutex<Queue>,
    /// The writer waits on it for lines; [`Sink::drain`] waits on it for the writer.
    changed: Condvar,
    dropped: AtomicU64,
    /// Writes to the stream; a plain function, so the writer thread never allocates
    /// (and gets no malloc arena of its own).
    stream: fn(&[u8]) -> std::io::Result<()>,
    name: &'static str,
}

struct Queue {
    /// Lines waiting, whole, in order.
    bytes: Vec<u8>,
    /// The writer thread runs; lines go through `bytes`.
    started: bool,
    /// Informational lines wait for [`WINDOW`]; off for the end of the daemon.
    batching: bool,
    /// A line that must not wait is in `bytes`.
    urgent: bool,
    /// When the first line now in `bytes` came.
    since: Option<Instant>,
    /// The writer holds a batch it has not finished writing.
    writing: bool,
    /// Dropped lines already told of.
    told: u64,
}

pub static STDERR: Sink = Sink::new("stderr", |b| {
    let mut s = std::io::stderr().lock();
    s.write_all(b).and_then(|()| s.flush())
});
pub static STDOUT: Sink = Sink::new("stdout", |b| {
    let mut s = std::io::stdout().lock();
    s.write_all(b).and_then(|()| s.flush())
});

/// Lines dropped on every stream since the process started, because its reader did not
/// take them.
pub fn lines_dropped() -> u64 {
    STDERR.dropped.load(Ordering::Relaxed) + STDOUT.dropped.load(Ordering::Relaxed)
}

/// Starts both sinks ([`Sink::start`]); when the guard is dropped, what waits is written,
/// waiting a few seconds at most: an exit must not hang on a reader that stopped.
pub fn start(batching: bool) -> Started {
    STDERR.start(batching);
    STDOUT.start(batching);
    Started(())
}

/// See [`start`].
pub struct Started(());

impl Drop for Started {
    fn drop(&mut self) {
        const EXIT_WAIT: Duration = Duration::from_secs(2);
        STDERR.drain(EXIT_WAIT);
        STDOUT.drain(EXIT_WAIT);
    }
}

impl Sink {
    const fn new(name: &'static str, stream: fn(&[u8]) -> std::io::Result<()>) -> Sink {
        Sink {
            queue: Mutex::new(Queue {
                bytes: Vec::new(),
                started: false,
                batching: false,
                urgent: false,
                since: None,
                writing: false,
                told: 0,
            }),
            changed: Condvar::new(),
            dropped: AtomicU64::new(0),
            stream,
            name,
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on lines are queued and written by a thread of the sink's own; with
    /// `batching`, informational lines wait up to [`WINDOW`]. Call it before anything
    /// else of the daemon writes. If the thread cannot be started, lines stay written
    /// by their callers.
    pub fn start(&'static self, batching: bool) {
        let mut q = self.queue();
        q.batching = batching;
        if q.started {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("inferprobe-{}", self.name))
            // It formats one line now and then (how many were dropped): a small stack.
            .stack_size(256 << 10)
            .spawn(move || self.write_forever());
        q.started = spawned.is_ok();
    }

    /// Turns batching on or off (the daemon batches once it has started).
    pub fn set_batching(&self, batching: bool) {
        self.queue().batching = batching;
        self.changed.notify_all();
    }

    /// One whole line (or several), in order. Never blocks on the stream once started:
    /// a line that does not fit in the queue is dropped and counted.
    pub fn write(&self, line: &[u8], urgent: bool) {
        let mut q = self.queue();
        if !q.started {
            // Under the lock, so lines written by several threads do not interleave.
            let _ = (self.stream)(line);
            return;
        }
        if q.bytes.len() + line.len() > CAPACITY {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.bytes.extend_from_slice(line);
        q.since.get_or_insert_with(Instant::now);
        let wake = urgent || !q.batching || q.bytes.len() >= CAPACITY / 4;
        q.urgent |= wake;
        if wake || q.bytes.len() == line.len() {
            self.changed.notify_all();
        }
    }

    /// A message and a newline, at once: for errors written outside the log.
    pub fn say(&self, text: &str) {
        let mut line = String::with_capacity(text.len() + 1);
        line.push_str(text);
        line.push('\n');
        self.write(line.as_bytes(), true);
    }

    /// Writes what waits, without batching from now on, and waits for it to be written,
    /// at most `limit`: for the end of the daemon, whose exit must not hang on a reader
    /// that stopped. True when everything was written.
    pub fn drain(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut q = self.queue();
        q.batching = false;
        q.urgent = true;
        self.changed.notify_all();
        while q.started && (q.writing || !q.bytes.is_empty()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            q = self
                .changed
                .wait_timeout(q, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// The writer thread: takes the waiting lines out of the queue and writes them
    /// outside its lock, so a stream that blocks holds this thread alone. Two buffers
    /// swap, so it allocates only while the queue grows.
    fn write_forever(&self) {
        let mut out = Vec::new();
        loop {
            {
                let mut q = self.queue();
                loop {
                    if let Some(since) = q.since {
                        let due = since + WINDOW;
                        let now = Instant::now();
                        if q.urgent || !q.batching || now >= due {
                            break;
                        }
                        q = self
                            .changed
                            .wait_timeout(q, due - now)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    } else {
                        q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
                    }
                }
                std::mem::swap(&mut out, &mut q.bytes);
                q.since = None;
                q.urgent = false;
                q.writing = true;
            }
            let written = (self.stream)(&out).is_ok();
            if !written {
                // A closed or failing stream: those lines are lost too.
                let lines = out.iter().filter(|b| **b == b'\n').count();
                self.dropped.fetch_add(lines as u64, Ordering::Relaxed);
            }
            out.clear();
            let dropped = self.dropped.load(Ordering::Relaxed);
            let mut q = self.queue();
            q.writing = false;
            let untold = dropped - q.told;
            // Told once the stream takes lines again and the queue has room for it (a
            // stream that fails is not told of its own failures, line after line).
            if written && untold > 0 && q.bytes.len() < CAPACITY / 2 {
                q.told = dropped;
                drop(q);
                tracing::warn!(
                    stream = self.name,
                    dropped = untold,
                    "Lines were dropped: this output did not take them (a reader that stopped or a blocked log driver); the agent went on probing."
                );
            } else {
                drop(q);
            }
            self.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A stream that blocks every write until it is opened, and records what it took.
    #[derive(Clone, Default)]
    struct Gate {
        open: Arc<(Mutex<bool>, Condvar)>,
        taken: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let (open, cv) = &*self.open;
            let mut o = open.lock().unwrap();
            while !*o {
                o = cv.wait(o).unwrap();
            }
            self.taken.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    static GATE: std::sync::OnceLock<Gate> = std::sync::OnceLock::new();
    static GATED: Sink = Sink::new("gated", |b| GATE.get().expect("gate").clone().write_all(b));

    #[test]
    fn a_stream_that_blocks_never_blocks_the_writer_of_a_line_and_loses_lines_counted() {
        let gate = GATE.get_or_init(Gate::default).clone();
        GATED.start(true);
        let line = [b'x'; 1023].iter().copied().chain([b'\n']).collect::<Vec<u8>>();
        // Far more than the queue holds, while nothing is taken: every call returns.
        let started = Instant::now();
        for _ in 0..1_000 {
            GATED.write(&line, false);
        }
        let queued_and_dropped = started.elapsed();
        let dropped = GATED.dropped.load(Ordering::Relaxed);
        // The writer holds at most one batch and the queue its capacity.
        assert!(
            dropped >= 1_000 - 2 * (CAPACITY as u64 / 1024),
            "dropped {dropped}"
        );
        assert!(
            !GATED.drain(Duration::from_millis(50)),
            "nothing can be written yet"
        );
        // Open the stream: everything kept comes out whole, in order.
        {
            let (open, cv) = &*gate.open;
            *open.lock().unwrap() = true;
            cv.notify_all();
        }
        assert!(GATED.drain(Duration::from_secs(10)));
        let taken = gate.taken.lock().unwrap().clone();
        let lines: Vec<&[u8]> = taken.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
        assert!(lines.iter().all(|l| *l == &line[..1023]), "only whole lines");
        assert_eq!(lines.len() as u64, 1_000 - dropped, "every line kept was written");
        assert!(
            queued_and_dropped < Duration::from_secs(5),
            "{queued_and_dropped:?}"
        );
    }
}
