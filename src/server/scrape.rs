//! `/metrics` in the text formats, streamed: the encoder runs on the blocking pool and
//! hands the answer to the connection in [`CHUNK`]-sized pieces through a channel of
//! [`QUEUED`], so a scrape holds a few hundred KiB however many series there are (the
//! whole text was 17 MB at 10,000 `http` probes). The length is not known in advance:
//! HTTP/1.1 answers go out chunked, HTTP/1.0 ones until the connection closes.
//!
//! While it writes a family the encoder holds that family's read lock, and a run that
//! adds a series (a new probe, a new failure reason) waits for it; so the encoder waits
//! at most [`SEND_WAIT`] for the scraper to take a chunk. A scraper that takes nothing for
//! that long is cut off: the encoding stops, its locks are released, and the answer ends
//! with an error, so the client sees a truncated body (no chunked terminator, or no
//! `# EOF`), never a short answer that looks whole. A client that goes away stops the
//! encoding at its next chunk.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use hyper::body::Frame;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::metrics::{Metrics, TextFormat};

/// The size of the pieces a scrape goes out in: large enough that the per-chunk costs
/// (a channel send, a chunk header, a write) are nothing next to the encoding.
const CHUNK: usize = 64 * 1024;
/// Chunks encoded and waiting for the connection.
const QUEUED: usize = 2;
/// How long the encoder waits for the connection to take a chunk. Prometheus reads a
/// scrape into memory as it arrives, and the kernel's socket buffers hold more besides,
/// so a scraper that reads does not leave a chunk waiting for long; one that takes
/// nothing for this long would not finish within any sensible scrape timeout, and a run
/// adding a series waits on the encoder for at most this long.
pub(super) const SEND_WAIT: Duration = Duration::from_secs(2);

/// How an encoding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Every series went out.
    Complete,
    /// The client went away (or the connection was closed under it).
    Gone,
    /// The client took nothing for the send wait.
    Stalled,
}

/// The body of a text scrape in `format`, encoded as the connection takes it.
pub(super) fn body(metrics: Arc<Metrics>, format: TextFormat) -> Body {
    let (body, _encoder) = stream(metrics, format, SEND_WAIT);
    Body::new(body)
}

/// The streamed body and the encoder feeding it; `wait`: how long a send may wait.
fn stream(metrics: Arc<Metrics>, format: TextFormat, wait: Duration) -> (Streamed, JoinHandle<Ending>) {
    let (tx, rx) = mpsc::channel(QUEUED);
    let complete = Arc::new(AtomicBool::new(false));
    let done = complete.clone();
    let handle = Handle::current();
    let encoder = tokio::task::spawn_blocking(move || {
        let mut out = Chunks {
            tx,
            handle,
            wait,
            buf: String::new(),
            ended: Ending::Complete,
        };
        let written = metrics.write_text(format, &mut out).and_then(|()| out.send());
        if written.is_ok() {
            // Before the sender drops: the body reads it when the channel closes.
            done.store(true, Ordering::Release);
        }
        match out.ended {
            Ending::Complete => {}
            Ending::Gone => tracing::debug!("A /metrics scrape ended early: the client went away."),
            Ending::Stalled => tracing::warn!(
                waited = ?wait,
                "A /metrics scrape was cut short: the scraper took no data for the send wait, and the encoder holds the metrics' locks while it waits."
            ),
        }
        out.ended
    });
    (Streamed { rx, complete }, encoder)
}

/// The encoder's writer: collects the text into chunks and sends each when full.
struct Chunks {
    tx: mpsc::Sender<Bytes>,
    handle: Handle,
    wait: Duration,
    buf: String,
    ended: Ending,
}

impl Chunks {
    /// Sends what is collected, waiting at most `wait` for room; an error ends the
    /// encoding.
    fn send(&mut self) -> fmt::Result {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        // On the blocking pool, not a runtime worker: blocking here is what it is for.
        let sent = self
            .handle
            .block_on(tokio::time::timeout(self.wait, self.tx.send(chunk)));
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => {
                self.ended = Ending::Gone;
                Err(fmt::Error)
            }
            Err(_) => {
                self.ended = Ending::Stalled;
                Err(fmt::Error)
            }
        }
    }
}

impl fmt::Write for Chunks {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // prometheus-client writes a few KiB at a time, so chunks stay near CHUNK.
        if self.buf.len() + s.len() > CHUNK {
            self.send()?;
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve(CHUNK);
        }
        self.buf.push_str(s);
        Ok(())
    }
}

/// The response body: the chunks as they come, then the end, or an error if the
/// encoding stopped before the end (hyper then closes the connection without ending
/// the message).
struct Streamed {
    rx: mpsc::Receiver<Bytes>,
    complete: Arc<AtomicBool>,
}

/// The scrape was cut short (see the module's doc).
#[derive(Debug, thiserror::Error)]
#[error("the /metrics answer was cut short: its encoding stopped before the end")]
struct Truncated;

impl hyper::body::Body for Streamed {
    type Data = Bytes;
    type Error = Truncated;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Truncated>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(chunk)) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            Poll::Ready(None) if self.complete.load(Ordering::Acquire) => Poll::Ready(None),
            Poll::Ready(None) => Poll::Ready(Some(Err(Truncated))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::time::Instant;

    /// Agent series with long labels: ~1 MB of text, many chunks.
    fn big() -> Arc<Metrics> {
        let m = Arc::new(Metrics::new("test"));
        for i in 0..8000 {
            m.notification(
                &format!("receiver-{i:05}-{}", "x".repeat(40)),
                "firing",
                "delivered",
            );
        }
        m
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_streamed_answer_is_the_one_piece_rendering_byte_for_byte() {
        let m = big();
        for (format, whole) in [
            (TextFormat::Prometheus, m.render_text()),
            (TextFormat::OpenMetrics, m.render_openmetrics()),
        ] {
            assert!(whole.len() > 8 * CHUNK, "{}", whole.len());
            let (body, encoder) = stream(m.clone(), format, SEND_WAIT);
            let mut body = Box::pin(body);
            let mut streamed = Vec::new();
            let mut chunks = 0;
            while let Some(frame) = body.frame().await {
                let data = frame.unwrap().into_data().unwrap();
                assert!(data.len() <= CHUNK, "{}", data.len());
                streamed.extend_from_slice(&data);
                chunks += 1;
            }
            assert_eq!(encoder.await.unwrap(), Ending::Complete);
            assert!(chunks > 8, "{chunks}");
            assert!(streamed == whole.as_bytes(), "{format:?} differs");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_scraper_is_cut_off_and_releases_the_locks() {
        let m = big();
        let wait = Duration::from_millis(300);
        let (body, encoder) = stream(m.clone(), TextFormat::Prometheus, wait);
        // Nobody reads: the encoder fills the channel and waits inside the family.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let writer = {
            let m = m.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                m.notification("a-new-receiver", "firing", "delivered");
                started.elapsed()
            })
        };
        assert_eq!(encoder.await.unwrap(), Ending::Stalled);
        let waited = writer.await.unwrap();
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        // What was encoded goes out, then an error: never a short answer that looks whole.
        let mut body = Box::pin(body);
        let mut data = 0;
        let end = loop {
            match body.frame().await {
                Some(Ok(frame)) => data += frame.into_data().unwrap().len(),
                Some(Err(e)) => break e.to_string(),
                None => panic!("a truncated answer ended as a whole one"),
            }
        };
        assert!(end.contains("cut short"), "{end}");
        assert!(data > 0 && data <= QUEUED * CHUNK, "{data}");
        assert!(
            m.render_text().contains("a-new-receiver"),
            "the writer's series is in"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_goes_away_stops_the_encoding_at_once() {
        let m = big();
        let (body, encoder) = stream(m, TextFormat::OpenMetrics, Duration::from_secs(60));
        drop(body);
        let started = Instant::now();
        assert_eq!(encoder.await.unwrap(), Ending::Gone);
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
