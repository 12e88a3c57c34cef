//! `agent.tracing.otlp_endpoint`: each traced run exported as one OTLP client span over
//! OTLP/HTTP (protobuf), so the run sits in the same trace back end as the server's spans
//! of its requests, as their parent.
//!
//! The span is built from the run itself, not by an SDK tracer: its trace and span ids
//! are the ones the run's `traceparent` carried, its start is the run's wall-clock start,
//! and its end and events (dns, connect, tls, first byte, first token, end) are that start
//! plus the run's monotonic marks. Only opentelemetry-otlp's exporter is used, sending
//! with our control-plane reqwest (opentelemetry-http's `HttpClient` trait), so there is
//! no second HTTP stack and no OpenSSL.
//!
//! Exporting never delays or fails a run: the fan-out offers each outcome to a bounded
//! queue ([`Spans::offer`] never waits; a full queue drops and counts), and one task
//! ([`Export::run`]) sends what is queued in batches; the agent holds that task as it
//! holds the pusher and the delivery loops (`agent::task::Running`). An unreachable
//! collector is counted and logged at most once a minute.
//!
//! May import: config, human, net, outcome, redact.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::TracingConfig;
use crate::net::TlsRoots;
use crate::outcome::Outcome;
use crate::redact::SharedRedactor;

/// Spans queued for export at most (about 1 KB each): minutes of runs at any sane rate.
const QUEUE: usize = 4096;
/// Spans per export request at most.
const BATCH: usize = 512;
/// Per export request.
const TIMEOUT: Duration = Duration::from_secs(10);
/// A collector's answer is read this far at most.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Export failures are logged at most this often (each line says how many there were).
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error(transparent)]
    Client(#[from] crate::net::TlsSetupError),
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
}

/// What became of the spans offered, since the agent started.
#[derive(Debug, Default)]
pub struct ExportStats {
    pub exported: AtomicU64,
    /// Sent but refused, or not sent: the collector was away or answered an error.
    pub failed: AtomicU64,
    /// Not queued: the queue was full.
    pub dropped: AtomicU64,
}

/// The agent's span export as the fan-out sees it: off, or the queue of the one running
/// [`Export`]; pointed at a new queue on reload when `agent.tracing` changes.
#[derive(Debug, Default)]
pub struct Spans {
    queue: Mutex<Option<mpsc::Sender<SpanData>>>,
    pub stats: Arc<ExportStats>,
}

/// An exporter built for a config, not yet started (see [`Spans::connect`]).
pub struct Exporter {
    config: TracingConfig,
    inner: opentelemetry_otlp::SpanExporter,
    redactor: SharedRedactor,
}

/// An exporter with the queue it sends from, ready to run as a task ([`Export::run`]).
pub struct Export {
    exporter: Exporter,
    queue: mpsc::Receiver<SpanData>,
    stats: Arc<ExportStats>,
}

impl Spans {
    /// Builds the exporter for `config`; nothing changes until [`Spans::connect`].
    pub fn build(
        config: &TracingConfig,
        roots: &TlsRoots,
        redactor: SharedRedactor,
        location: &str,
    ) -> Result<Exporter, OtlpError> {
        let client = crate::net::control_plane_client(roots, None, TIMEOUT)?;
        let headers: HashMap<String, String> = config
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.expose().to_owned()))
            .collect();
        let mut inner = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Client(client))
            .with_endpoint(config.otlp_endpoint.expose())
            .with_timeout(TIMEOUT)
            .with_headers(headers)
            .build()
            .map_err(|e| OtlpError::Exporter(e.to_string()))?;
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name("inferprobe")
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .with_attribute(KeyValue::new("inferprobe.location", location.to_owned()))
            .build();
        inner.set_resource(&resource);
        Ok(Exporter {
            config: config.clone(),
            inner,
            redactor,
        })
    }

    /// Points the offers at a fresh queue for `exporter`, returned with it to be run, or
    /// at none (export off). The queue it replaces closes: its export sends what it holds,
    /// then ends.
    pub fn connect(&self, exporter: Option<Exporter>) -> Option<Export> {
        let (queue, export) = match exporter {
            Some(exporter) => {
                let (tx, rx) = mpsc::channel(QUEUE);
                let export = Export {
                    exporter,
                    queue: rx,
                    stats: self.stats.clone(),
                };
                (Some(tx), Some(export))
            }
            None => (None, None),
        };
        *self.lock() = queue;
        export
    }

    /// Queues the run's span, if the run was traced and export is on. Never waits.
    pub fn offer(&self, outcome: &Outcome) {
        let guard = self.lock();
        let (Some(queue), Some(_)) = (guard.as_ref(), outcome.trace) else {
            return;
        };
        let Some(span) = span_of(outcome, SystemTime::now()) else {
            return;
        };
        if queue.try_send(span).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<mpsc::Sender<SpanData>>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Export {
    /// At shutdown, after the last outcomes went through the fan-out and
    /// [`Spans::connect`]`(None)` closed the queue: gives `task`, the running export's, at
    /// most `within` to send what is queued.
    pub async fn drain(task: JoinHandle<()>, within: Duration) {
        if tokio::time::timeout(within, task).await.is_err() {
            tracing::warn!("Run spans still queued for the OTLP collector at shutdown are lost.");
        }
    }

    /// Sends what is queued, a batch at a time, until the queue closes: its sender is
    /// gone ([`Spans::connect`] replaced it) or `cancel` fired. Either way what was
    /// queued still goes out first, and a batch being sent is never cut short.
    pub async fn run(self, cancel: CancellationToken) {
        let Export {
            exporter,
            queue: mut rx,
            stats,
        } = self;
        let mut last_log: Option<Instant> = None;
        let mut failed_since_log = 0u64;
        loop {
            let next = tokio::select! {
                biased;
                span = rx.recv() => span,
                () = cancel.cancelled() => {
                    // Closed: nothing more is taken, what is queued is still received.
                    rx.close();
                    rx.recv().await
                }
            };
            let Some(first) = next else {
                break;
            };
            let mut batch = vec![first];
            while batch.len() < BATCH
                && let Ok(span) = rx.try_recv()
            {
                batch.push(span);
            }
            let n = batch.len() as u64;
            let result =
                tokio::time::timeout(TIMEOUT + Duration::from_secs(1), exporter.inner.export(batch)).await;
            let error = match result {
                Ok(Ok(())) => {
                    stats.exported.fetch_add(n, Ordering::Relaxed);
                    continue;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {}s", TIMEOUT.as_secs() + 1),
            };
            stats.failed.fetch_add(n, Ordering::Relaxed);
            failed_since_log += n;
            if last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                last_log = Some(Instant::now());
                // The endpoint may carry credentials: the error text names the host only.
                let error = exporter
                    .redactor
                    .current()
                    .clean(&error.replace(exporter.config.otlp_endpoint.expose(), &exporter.config.host));
                tracing::warn!(
                    collector = %exporter.config.host,
                    spans = failed_since_log,
                    error = %crate::human::printable(&error),
                    "Cannot export run spans to the OTLP collector; these spans are lost (said at most once a minute)."
                );
                failed_since_log = 0;
            }
        }
    }
}

/// The run as one client span; `None` when it was not traced. `now` ends a run that has
/// no end mark (it failed before its response ended): the fan-out has just received it.
pub fn span_of(outcome: &Outcome, now: SystemTime) -> Option<SpanData> {
    let trace = outcome.trace?;
    let o = &outcome.observation;
    let p = &outcome.probe;
    let start = outcome.started_at;
    let at = |mark: Option<Instant>| mark.map(|m| start + m.saturating_duration_since(o.marks.start));
    let end = at(o.marks.end).unwrap_or(now.max(start));
    let flags = if trace.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let mut attributes = vec![
        KeyValue::new("inferprobe.probe", p.name.clone()),
        KeyValue::new("inferprobe.kind", p.kind),
        KeyValue::new("inferprobe.model", p.model.clone()),
        KeyValue::new("inferprobe.location", p.location.clone()),
        KeyValue::new(
            "inferprobe.result",
            if o.success() { "success" } else { "failure" },
        ),
        // The endpoint as shown everywhere else: no credentials, no query.
        KeyValue::new("url.full", p.endpoint.clone()),
    ];
    if let Some(f) = o.failure() {
        attributes.push(KeyValue::new("inferprobe.reason", f.reason.as_str()));
    }
    if let Some(status) = o.http_status {
        attributes.push(KeyValue::new("http.response.status_code", i64::from(status)));
    }
    if let Some(tokens) = o.output_tokens {
        attributes.push(KeyValue::new(
            "gen_ai.usage.output_tokens",
            i64::try_from(tokens).unwrap_or(i64::MAX),
        ));
    }
    let events = [
        ("dns", o.marks.dns_done),
        ("connect", o.marks.connect_done),
        ("tls", o.marks.tls_done),
        ("first_byte", o.marks.headers),
        ("first_token", o.marks.first_token),
        ("end", o.marks.end),
    ]
    .into_iter()
    .filter_map(|(name, mark)| Some(opentelemetry::trace::Event::new(name, at(mark)?, Vec::new(), 0)))
    .collect();
    // SpanEvents is non-exhaustive: made by Default, its public fields then set.
    let mut span_events = SpanEvents::default();
    span_events.events = events;
    let status = match o.failure() {
        // Messages were redacted where they entered the outcome.
        Some(f) => Status::error(format!("{}: {}", f.reason.as_str(), f.message)),
        None => Status::Ok,
    };
    Some(SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(trace.trace_id),
            SpanId::from_bytes(trace.span_id),
            flags,
            false,
            TraceState::default(),
        ),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Client,
        name: format!("inferprobe {}", p.kind).into(),
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: span_events,
        links: SpanLinks::default(),
        status,
        instrumentation_scope: InstrumentationScope::builder("inferprobe")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    })
}

/// opentelemetry-otlp's requests, sent with our control-plane client.
#[derive(Debug)]
struct Client(reqwest::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let response = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await
            .map_err(crate::net::describe_error)?;
        let status = response.status();
        let headers = response.headers().clone();
        // A success's body is a small ExportTraceServiceResponse; an error's is read
        // for its message only: capped either way.
        let mut body = Vec::new();
        let mut response = response;
        while let Ok(Some(chunk)) = response.chunk().await {
            body.extend_from_slice(&chunk);
            if body.len() >= MAX_RESPONSE_BYTES {
                body.truncate(MAX_RESPONSE_BYTES);
                break;
            }
        }
        let mut out = http::Response::new(Bytes::from(body));
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    /// An exporter to a port nothing listens on: every export fails at once, and is
    /// counted, so the counts say what the export took from its queue.
    fn exporter() -> Exporter {
        let config = TracingConfig {
            otlp_endpoint: Secret::new("http://127.0.0.1:9/v1/traces"),
            host: "127.0.0.1:9".into(),
            headers: Vec::new(),
        };
        Spans::build(&config, &TlsRoots::system(), SharedRedactor::default(), "eu").unwrap()
    }

    fn span() -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes([1; 16]),
                SpanId::from_bytes([2; 8]),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: "inferprobe test".into(),
            start_time: SystemTime::now(),
            end_time: SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Ok,
            instrumentation_scope: InstrumentationScope::builder("inferprobe").build(),
        }
    }

    fn offer(spans: &Spans, n: usize) {
        let queue = spans.lock();
        for _ in 0..n {
            queue.as_ref().unwrap().try_send(span()).unwrap();
        }
    }

    fn taken(spans: &Spans) -> u64 {
        spans.stats.exported.load(Ordering::Relaxed) + spans.stats.failed.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn a_replaced_export_sends_its_queue_and_a_cancelled_one_too() {
        let spans = Spans::default();
        let old = spans.connect(Some(exporter())).unwrap();
        offer(&spans, 3);
        // A reload: offers go to the new queue; the old export, never cancelled, still
        // sends its three, then ends because its queue closed.
        let new = spans.connect(Some(exporter())).unwrap();
        let old = tokio::spawn(old.run(CancellationToken::new()));
        tokio::time::timeout(Duration::from_secs(30), old)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(taken(&spans), 3);
        // Cancelled with two queued (its queue still connected): they go out, then it
        // ends, and the queue takes no more.
        offer(&spans, 2);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let new = tokio::spawn(new.run(cancel));
        tokio::time::timeout(Duration::from_secs(30), new)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(taken(&spans), 5);
        assert!(spans.lock().as_ref().unwrap().try_send(span()).is_err());
        // Off: nothing to offer to.
        assert!(spans.connect(None).is_none());
        assert!(spans.lock().is_none());
    }
}
