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
//! sends what is queued in batches. An unreachable collector is counted and logged at
//! most once a minute.
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

/// The agent's span export: off, or one running exporter; replaced on reload when
/// `agent.tracing` changes.
#[derive(Debug, Default)]
pub struct Spans {
    running: Mutex<Option<Running>>,
    pub stats: Arc<ExportStats>,
}

#[derive(Debug)]
struct Running {
    config: TracingConfig,
    queue: mpsc::Sender<SpanData>,
    task: tokio::task::JoinHandle<()>,
}

/// An exporter built for a config, not yet started (see [`Spans::install`]).
pub struct Exporter {
    config: TracingConfig,
    inner: opentelemetry_otlp::SpanExporter,
    redactor: SharedRedactor,
}

impl Spans {
    /// Whether `wanted` is what runs already (nothing to build).
    pub fn runs_as(&self, wanted: Option<&TracingConfig>) -> bool {
        self.lock().as_ref().map(|r| &r.config) == wanted
    }

    /// Builds the exporter for `config`; nothing changes until [`Spans::install`].
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

    /// Starts `exporter` in place of the running one (whose queued spans still go out),
    /// or stops exporting when `wanted` is `None`. Unchanged when `wanted` runs already.
    pub fn install(&self, wanted: Option<&TracingConfig>, exporter: Option<Exporter>) {
        if self.runs_as(wanted) {
            return;
        }
        // Dropping the old sender ends its task once its queue is sent.
        *self.lock() = wanted.zip(exporter).map(|(config, exporter)| {
            let (queue, rx) = mpsc::channel(QUEUE);
            let task = tokio::spawn(export_loop(exporter, rx, self.stats.clone()));
            Running {
                config: config.clone(),
                queue,
                task,
            }
        });
    }

    /// Queues the run's span, if the run was traced and export is on. Never waits.
    pub fn offer(&self, outcome: &Outcome) {
        let guard = self.lock();
        let (Some(running), Some(_)) = (guard.as_ref(), outcome.trace) else {
            return;
        };
        let Some(span) = span_of(outcome, SystemTime::now()) else {
            return;
        };
        if running.queue.try_send(span).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Stops taking spans and sends what is queued, for at most `within` (at shutdown,
    /// after the last outcomes went through the fan-out).
    pub async fn close(&self, within: Duration) {
        let running = self.lock().take();
        if let Some(Running { queue, task, .. }) = running {
            drop(queue);
            if tokio::time::timeout(within, task).await.is_err() {
                tracing::warn!("Run spans still queued for the OTLP collector at shutdown are lost.");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Sends what is queued, a batch at a time, until the queue's sender is gone.
async fn export_loop(exporter: Exporter, mut rx: mpsc::Receiver<SpanData>, stats: Arc<ExportStats>) {
    let mut last_log: Option<Instant> = None;
    let mut failed_since_log = 0u64;
    while let Some(first) = rx.recv().await {
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
