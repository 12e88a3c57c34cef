//! `/metrics` in the text formats, streamed: the encoder runs on the blocking pool and
//! hands the answer to the connection in [`CHUNK`]-sized pieces through a channel of
//! [`QUEUED`], so a scrape holds a few hundred KiB however many series there are (the
//! whole text was 17 MB at 10,000 `http` probes). The length is not known in advance:
//! HTTP/1.1 answers go out chunked, HTTP/1.0 ones until the connection closes.
//!
//! While it writes a family the encoder holds that family's read lock, and a run that
//! adds a series (a new probe, a new failure reason) waits for it. So a slow scraper
//! must not set the pace of the encoding: the encoder waits for the connection at most
//! [`LOCKED_WAIT`] in all; past that it stops waiting and keeps the rest in memory (what
//! every scrape cost before streaming), sent once the locks are released. A scraper that
//! then takes nothing for [`SEND_WAIT`] is cut off: the answer ends with an error, so the
//! client sees a truncated body (no chunked terminator, or no `# EOF`), never a short
//! answer that looks whole. A client that goes away stops the encoding at its next chunk.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::Frame;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
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
/// How long, in all, the encoder may wait for the connection while it holds the
/// metrics' locks: the most a run adding a series can be held up by one scrape (beyond
/// the encoding's own CPU time, as before streaming).
pub(super) const LOCKED_WAIT: Duration = Duration::from_millis(250);

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
    let (body, _encoder) = stream(metrics, Format::Text(format), SEND_WAIT, LOCKED_WAIT);
    Body::new(body)
}

/// The body of a protobuf scrape, one `MetricFamily` after the other as the connection
/// takes them (a family that cannot be encoded ends the answer cut short).
pub(super) fn protobuf_body(metrics: Arc<Metrics>) -> Body {
    let (body, _encoder) = stream(metrics, Format::Protobuf, SEND_WAIT, LOCKED_WAIT);
    Body::new(body)
}

/// What a scrape is encoded in.
#[derive(Debug, Clone, Copy)]
enum Format {
    Text(TextFormat),
    Protobuf,
}

/// The streamed body and the encoder feeding it; `wait`: how long a send may wait once
/// the locks are released; `locked_wait`: how long the encoder may wait in all while it
/// holds them.
fn stream(
    metrics: Arc<Metrics>,
    format: Format,
    wait: Duration,
    locked_wait: Duration,
) -> (Streamed, JoinHandle<Ending>) {
    let (tx, rx) = mpsc::channel(QUEUED);
    let complete = Arc::new(AtomicBool::new(false));
    let done = complete.clone();
    let handle = Handle::current();
    let encoder = tokio::task::spawn_blocking(move || {
        let mut out = Chunks {
            tx,
            handle,
            wait,
            locked_wait,
            overflow: None,
            buf: Vec::new(),
            ended: Ending::Complete,
        };
        let encoded = match format {
            Format::Text(format) => metrics.write_text(format, &mut out),
            Format::Protobuf => metrics
                .write_protobuf(&mut |piece| out.write_bytes(&piece))
                .map_err(|e| {
                    if out.ended == Ending::Complete {
                        tracing::error!(error = %e, "Cannot answer a protobuf scrape.");
                    }
                    fmt::Error
                }),
        };
        let written = encoded.and_then(|()| out.send()).and_then(|()| out.drain());
        if written.is_ok() {
            // Before the sender drops: the body reads it when the channel closes.
            done.store(true, Ordering::Release);
        }
        match out.ended {
            Ending::Complete => {}
            Ending::Gone => tracing::debug!("A /metrics scrape ended early: the client went away."),
            Ending::Stalled => tracing::warn!(
                waited = ?wait,
                "A /metrics scrape was cut short: the scraper took no data for the send wait."
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
    /// What is left of [`LOCKED_WAIT`].
    locked_wait: Duration,
    /// The rest of the answer, once the locked wait is spent.
    overflow: Option<VecDeque<Bytes>>,
    buf: Vec<u8>,
    ended: Ending,
}

impl Chunks {
    /// Hands what is collected to the connection, waiting for room only while the
    /// locked wait lasts, else keeps it for [`Chunks::drain`]; an error ends the encoding.
    fn send(&mut self) -> fmt::Result {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        if let Some(overflow) = &mut self.overflow {
            overflow.push_back(chunk);
            return Ok(());
        }
        let chunk = match self.tx.try_send(chunk) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(_)) => return self.end(Ending::Gone),
            Err(TrySendError::Full(chunk)) => chunk,
        };
        let started = Instant::now();
        // On the blocking pool, not a runtime worker: blocking here is what it is for.
        let room = self
            .handle
            .block_on(tokio::time::timeout(self.locked_wait, self.tx.reserve()));
        self.locked_wait = self.locked_wait.saturating_sub(started.elapsed());
        match room {
            Ok(Ok(permit)) => {
                permit.send(chunk);
                Ok(())
            }
            Ok(Err(_)) => {
                // Not `end`: the permit's borrow of `tx` lasts the match.
                self.ended = Ending::Gone;
                Err(fmt::Error)
            }
            Err(_) => {
                self.overflow = Some(VecDeque::from([chunk]));
                Ok(())
            }
        }
    }

    /// After the encoding (its locks released): sends what was kept, waiting at most
    /// `wait` for each piece.
    fn drain(&mut self) -> fmt::Result {
        while let Some(chunk) = self.overflow.as_mut().and_then(VecDeque::pop_front) {
            let sent = self
                .handle
                .block_on(tokio::time::timeout(self.wait, self.tx.send(chunk)));
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return self.end(Ending::Gone),
                Err(_) => return self.end(Ending::Stalled),
            }
        }
        Ok(())
    }

    fn end(&mut self, how: Ending) -> fmt::Result {
        self.ended = how;
        Err(fmt::Error)
    }
}

impl Chunks {
    /// Appends `bytes`, sending each chunk as it fills: the text encoders write a few
    /// KiB at a time, the protobuf one a family at a time (cut into chunks here).
    fn write_bytes(&mut self, mut bytes: &[u8]) -> fmt::Result {
        while !bytes.is_empty() {
            if !self.buf.is_empty() && self.buf.len() + bytes.len() > CHUNK {
                self.send()?;
            }
            if self.buf.capacity() == 0 {
                self.buf.reserve(CHUNK);
            }
            let take = bytes.len().min(CHUNK - self.buf.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        Ok(())
    }
}

impl fmt::Write for Chunks {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.write_bytes(s.as_bytes())
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
            let (body, encoder) = stream(m.clone(), Format::Text(format), SEND_WAIT, LOCKED_WAIT);
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
        let (body, encoder) = stream(m.clone(), Format::Text(TextFormat::Prometheus), wait, LOCKED_WAIT);
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
    async fn a_slow_scraper_holds_the_locks_for_the_locked_wait_not_the_send_wait() {
        let m = big();
        // A send wait of a minute: only the locked wait can let the writer through soon.
        let (body, encoder) = stream(
            m.clone(),
            Format::Text(TextFormat::Prometheus),
            Duration::from_secs(60),
            LOCKED_WAIT,
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let writer = {
            let m = m.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                m.notification("a-new-receiver", "firing", "delivered");
                started.elapsed()
            })
        };
        let waited = writer.await.unwrap();
        assert!(waited < Duration::from_secs(20), "{waited:?}");
        // The scraper then reads it all, the new series included or not, and whole.
        let mut body = Box::pin(body);
        let mut streamed = Vec::new();
        while let Some(frame) = body.frame().await {
            streamed.extend_from_slice(&frame.unwrap().into_data().unwrap());
        }
        assert_eq!(encoder.await.unwrap(), Ending::Complete);
        let text = String::from_utf8(streamed).unwrap();
        assert!(text.len() > 8 * CHUNK && text.ends_with('\n'), "{}", text.len());
        assert!(text.contains("receiver-07999-"), "the last series went out");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_goes_away_stops_the_encoding_at_once() {
        let m = big();
        let (body, encoder) = stream(
            m,
            Format::Text(TextFormat::OpenMetrics),
            Duration::from_secs(60),
            LOCKED_WAIT,
        );
        drop(body);
        let started = Instant::now();
        assert_eq!(encoder.await.unwrap(), Ending::Gone);
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
