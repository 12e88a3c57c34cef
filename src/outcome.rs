//! The shared vocabulary of a probe run: the instants a run recorded ([`Marks`]), what the
//! probe saw ([`Observation`]) and the stamped result the rest of the agent consumes
//! ([`Outcome`]). A leaf module: it imports no sibling.
//!
//! Probes record raw `Instant`s and every duration is derived here afterwards, so TTFT,
//! TPOT and total share one clock and one start (the way oha times requests).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Why a run failed: a closed set, so the `reason` label stays bounded. The names are the
/// label values; docs/measurements.md documents each one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureReason {
    /// The host name did not resolve (or resolution timed out).
    Dns,
    /// No TCP connection could be opened (refused, unreachable, timed out).
    Connect,
    /// The TLS handshake failed (bad certificate, wrong host, protocol error).
    Tls,
    /// No generated token arrived before the first-token deadline.
    TimeoutFirstToken,
    /// The response was not complete before the total deadline.
    TimeoutTotal,
    /// The server answered 4xx (other than 429).
    Http4xx,
    /// The server answered 5xx.
    Http5xx,
    /// The server said it is still loading the model (a 503 whose error says so, as
    /// llama.cpp's "Loading model"; a KServe model that is not ready): up, not serving.
    Loading,
    /// The server answered 429 Too Many Requests.
    RateLimited,
    /// The stream carried an in-band error event after a 2xx status.
    StreamError,
    /// The connection closed before the protocol's terminator.
    Truncated,
    /// The response completed but held no generated output.
    EmptyOutput,
    /// The response did not follow the protocol (garbage JSON, wrong content type,
    /// invalid UTF-8, oversized body, unexpected status class).
    InvalidResponse,
    /// The response was valid but failed one of the probe's `expect` checks.
    Assertion,
    /// A complete, fast answer that is wrong: a canary's known answer missed, a prompt's
    /// own check or the answer's JSON Schema failed.
    WrongAnswer,
    /// The model was to call a declared tool and did not, or called it badly: no call,
    /// arguments that are not JSON, an undeclared name, arguments against the schema.
    InvalidToolCall,
    /// An answer that should have been short ran to `max_tokens`, or loops on one phrase
    /// (checked only where asked: canaries, `expect.stops`).
    DegenerateOutput,
    /// The agent itself could not make the run: it was out of file descriptors
    /// (EMFILE/ENFILE) or memory. Not the endpoint's fault: kept out of the endpoint's
    /// availability and never a page about it.
    AgentError,
}

impl FailureReason {
    pub const ALL: [FailureReason; 18] = [
        FailureReason::Dns,
        FailureReason::Connect,
        FailureReason::Tls,
        FailureReason::TimeoutFirstToken,
        FailureReason::TimeoutTotal,
        FailureReason::Http4xx,
        FailureReason::Http5xx,
        FailureReason::Loading,
        FailureReason::RateLimited,
        FailureReason::StreamError,
        FailureReason::Truncated,
        FailureReason::EmptyOutput,
        FailureReason::InvalidResponse,
        FailureReason::Assertion,
        FailureReason::WrongAnswer,
        FailureReason::InvalidToolCall,
        FailureReason::DegenerateOutput,
        FailureReason::AgentError,
    ];

    /// The metric label value and the JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Dns => "dns",
            FailureReason::Connect => "connect",
            FailureReason::Tls => "tls",
            FailureReason::TimeoutFirstToken => "timeout_first_token",
            FailureReason::TimeoutTotal => "timeout_total",
            FailureReason::Http4xx => "http_4xx",
            FailureReason::Http5xx => "http_5xx",
            FailureReason::Loading => "loading",
            FailureReason::RateLimited => "rate_limited",
            FailureReason::StreamError => "stream_error",
            FailureReason::Truncated => "truncated",
            FailureReason::EmptyOutput => "empty_output",
            FailureReason::InvalidResponse => "invalid_response",
            FailureReason::Assertion => "assertion",
            FailureReason::WrongAnswer => "wrong_answer",
            FailureReason::InvalidToolCall => "invalid_tool_call",
            FailureReason::DegenerateOutput => "degenerate_output",
            FailureReason::AgentError => "agent_error",
        }
    }

    /// The reason in words, for pages read at 3 a.m.
    pub fn describe(self) -> &'static str {
        match self {
            FailureReason::Dns => "the host name does not resolve",
            FailureReason::Connect => "no connection (refused or unreachable)",
            FailureReason::Tls => "the TLS handshake fails",
            FailureReason::TimeoutFirstToken => "no first token before the deadline",
            FailureReason::TimeoutTotal => "the answer does not finish before the deadline",
            FailureReason::Http4xx => "the server rejects the request (HTTP 4xx)",
            FailureReason::Http5xx => "the server fails (HTTP 5xx)",
            FailureReason::Loading => "the server is still loading the model",
            FailureReason::RateLimited => "the server rate-limits us (HTTP 429)",
            FailureReason::StreamError => "the stream reports an error",
            FailureReason::Truncated => "the answer is cut off",
            FailureReason::EmptyOutput => "the answer is empty",
            FailureReason::InvalidResponse => "the response is malformed",
            FailureReason::Assertion => "the response fails its check",
            FailureReason::WrongAnswer => "the answer is wrong",
            FailureReason::InvalidToolCall => "the tool call is missing or malformed",
            FailureReason::DegenerateOutput => "the answer never stops or loops",
            FailureReason::AgentError => "the agent itself is out of file descriptors or memory",
        }
    }

    /// Whether a server that is warming up fails this way: still loading, or too slow
    /// for the deadlines (vLLM's first requests compile for tens of seconds). Refusals,
    /// errors and wrong answers are not warm-up.
    pub fn warming(self) -> bool {
        matches!(
            self,
            FailureReason::Loading | FailureReason::TimeoutFirstToken | FailureReason::TimeoutTotal
        )
    }

    /// Whether the run says something about the endpoint (every reason but the agent's
    /// own exhaustion).
    pub fn blames_endpoint(self) -> bool {
        self != FailureReason::AgentError
    }

    /// The reason a non-2xx status maps to. `None` for 2xx.
    pub fn for_status(status: u16) -> Option<FailureReason> {
        match status {
            200..=299 => None,
            429 => Some(FailureReason::RateLimited),
            400..=499 => Some(FailureReason::Http4xx),
            500..=599 => Some(FailureReason::Http5xx),
            _ => Some(FailureReason::InvalidResponse),
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed run: one reason for metrics and a short human message for logs and the API.
/// The message never goes into a metric label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: FailureReason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        Failure {
            reason,
            message: message.into(),
        }
    }
}

/// Monotonic instants recorded during one run. `start` is taken just before the request
/// goes to the network (a new connection included); everything else is optional because a
/// run can fail before reaching it.
#[derive(Debug, Clone, Copy)]
pub struct Marks {
    pub start: Instant,
    pub dns_done: Option<Instant>,
    pub connect_done: Option<Instant>,
    pub tls_done: Option<Instant>,
    /// Response status line and headers received.
    pub headers: Option<Instant>,
    /// The read that completed the first event carrying generated output.
    pub first_token: Option<Instant>,
    /// The read that completed the last event carrying generated output.
    pub last_token: Option<Instant>,
    /// The protocol's terminator (or, for plain HTTP, the last body byte) received.
    pub end: Option<Instant>,
}

impl Marks {
    pub fn starting_at(start: Instant) -> Self {
        Marks {
            start,
            dns_done: None,
            connect_done: None,
            tls_done: None,
            headers: None,
            first_token: None,
            last_token: None,
            end: None,
        }
    }
}

/// Where the output token count came from: the server's own usage report, or our count
/// of content-bearing events (an estimate: a chunk may carry several tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    Usage,
    Events,
    /// Counted by us from what we sent (input tokens a server did not report: about four
    /// characters a token), flagged so nobody takes it for the server's count.
    Estimated,
}

impl TokenSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenSource::Usage => "usage",
            TokenSource::Events => "events",
            TokenSource::Estimated => "estimated",
        }
    }
}

/// What a probe saw during one run.
#[derive(Debug, Clone)]
pub struct Observation {
    pub marks: Marks,
    /// Whether the request went over a kept-alive connection (no DNS/connect/TLS).
    pub connection_reused: bool,
    pub http_status: Option<u16>,
    pub output_tokens: Option<u64>,
    pub token_source: Option<TokenSource>,
    /// Tokens the request carried (the prompt), as the server's usage reported them or
    /// estimated by us; `None` for kinds without a prompt.
    pub input_tokens: Option<u64>,
    pub input_token_source: Option<TokenSource>,
    /// Gaps between consecutive content-bearing events. Named chunk gaps, not token gaps:
    /// one event may carry several tokens.
    pub chunk_gaps: Vec<Duration>,
    pub bytes_received: u64,
    /// Durations the server reported about itself (Ollama's load, prompt eval, eval),
    /// kept apart from our own measurements.
    pub server_reported: Vec<(&'static str, Duration)>,
    /// `short`, `medium` or `long` for the prompt sent; `none` for probes without one.
    pub prompt_bucket: &'static str,
    /// A readiness check made before the request (its own phase, outside `marks`).
    pub ready_check: Option<Duration>,
    /// `small`, `medium`, `large` or `xlarge` for the largest image sent; `none`.
    pub image_bucket: &'static str,
    /// Why the generation ended, as the server said (`stop`, `length`, `tool_calls`,
    /// `content_filter`, `refusal`, or another value as sent); `None` where the protocol
    /// did not say or the run did not get that far.
    pub finish_reason: Option<String>,
    /// Something a successful run should still say, such as a token count that
    /// disagrees with the events received.
    pub note: Option<String>,
    /// Which model answered, as far as the server says (the response's `model` and
    /// `system_fingerprint`, and the server's identity fetched after the run).
    pub served: Served,
    /// The output tokens of the generation `marks` time, where the run had two (a tool
    /// call answered in a next turn: `output_tokens` is both turns'); TPOT divides by it.
    pub turn_tokens: Option<u64>,
    /// `Ok` for a successful run.
    pub result: Result<(), Failure>,
}

impl Observation {
    pub fn new(start: Instant) -> Self {
        Observation {
            marks: Marks::starting_at(start),
            connection_reused: false,
            http_status: None,
            output_tokens: None,
            token_source: None,
            input_tokens: None,
            input_token_source: None,
            chunk_gaps: Vec::new(),
            bytes_received: 0,
            server_reported: Vec::new(),
            prompt_bucket: "none",
            image_bucket: "none",
            ready_check: None,
            finish_reason: None,
            note: None,
            served: Served::default(),
            turn_tokens: None,
            result: Ok(()),
        }
    }

    /// A run that failed before it could measure anything but its start.
    pub fn failed(start: Instant, failure: Failure) -> Self {
        let mut o = Observation::new(start);
        o.result = Err(failure);
        o
    }

    pub fn success(&self) -> bool {
        self.result.is_ok()
    }

    pub fn failure(&self) -> Option<&Failure> {
        self.result.as_ref().err()
    }

    fn since_start(&self, at: Option<Instant>) -> Option<Duration> {
        at.map(|t| t.saturating_duration_since(self.marks.start))
    }

    pub fn dns(&self) -> Option<Duration> {
        self.marks
            .dns_done
            .map(|t| t.saturating_duration_since(self.marks.start))
    }

    pub fn connect(&self) -> Option<Duration> {
        let from = self.marks.dns_done.unwrap_or(self.marks.start);
        self.marks.connect_done.map(|t| t.saturating_duration_since(from))
    }

    pub fn tls(&self) -> Option<Duration> {
        let from = self.marks.connect_done?;
        self.marks.tls_done.map(|t| t.saturating_duration_since(from))
    }

    pub fn ttfb(&self) -> Option<Duration> {
        self.since_start(self.marks.headers)
    }

    pub fn ttft(&self) -> Option<Duration> {
        self.since_start(self.marks.first_token)
    }

    pub fn total(&self) -> Option<Duration> {
        self.since_start(self.marks.end)
    }

    /// Decode time per output token: (last token - first token) / (N - 1), defined for
    /// N >= 2 only. Robust to events that carry several tokens.
    pub fn tpot(&self) -> Option<Duration> {
        let n = self.turn_tokens.or(self.output_tokens)?;
        if n < 2 {
            return None;
        }
        let span = self
            .marks
            .last_token?
            .saturating_duration_since(self.marks.first_token?);
        Some(span.div_f64((n - 1) as f64))
    }
}

/// Which model answered a run: what the response named, and the identity of what the
/// server serves (probe/identity.rs). Values are the server's, cleaned (printable,
/// capped) where they are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    /// The response's `model` (the first event that named one).
    pub model: Option<String>,
    /// The response's `system_fingerprint`: the backend's configuration on OpenAI, the
    /// build (`b1-0c1e570`) on llama.cpp, version and image on TGI.
    pub fingerprint: Option<String>,
    /// The identity of what answered; `None` when the server said nothing of it.
    pub identity: Option<Arc<ModelIdentity>>,
    /// When the server's process started, as it says (probe/identity/start.rs): a new
    /// value is a restart. `None` when it does not say.
    pub server_start: Option<String>,
}

/// The identity of what serves a probe: the served model, its fingerprint and what the
/// server says of itself where asked (llama.cpp's `/props`, TGI's `/info`, ...), reduced
/// to a small stable digest and a summary for people. A change of it is an event
/// (the history's `model_changes`), never a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelIdentity {
    /// 16 hex digits over every field: equal digests, same identity.
    pub digest: String,
    /// For people: `tiny-llama (llama.cpp b1-0c1e570, 586 kB, template 3f2a9c01)`.
    pub summary: String,
    /// The label values of the info series (at most 64 printable characters; empty
    /// when unknown).
    pub served_model: String,
    pub fingerprint: String,
}

/// The low-cardinality identity of a probe, shared by all its outcomes: exactly the
/// metric labels (plus the prompt bucket, which varies per run).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProbeIdentity {
    /// Shared: the maps that hold per-probe state (latest, alerting, history, the
    /// fan-out's current probes) key by it without a copy each (issue 15).
    pub name: Arc<str>,
    pub kind: &'static str,
    pub model: String,
    /// Shared by all the agent's probes (and their run records).
    pub location: Arc<str>,
    /// The user's static labels, validated at config time, sorted by key.
    pub labels: Vec<(String, String)>,
    /// The endpoint without credentials or query string, safe to show.
    pub endpoint: String,
    /// The URL's query as shown (`?a=b&key=<redacted>`), empty without one: probes
    /// that differ only there must not look alike. Not in alerts or the API, which
    /// show `endpoint` alone.
    pub query: String,
    /// Whether the probe exposes every series (`metrics: {detail: full}`) or only those
    /// availability and latency SLOs need (the default). Not a label.
    pub full_metrics: bool,
}

/// The W3C Trace Context a run's request carried (`traceparent`): a fresh trace per run,
/// so the server's trace of that request can be found from the run's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// Our span: the client side of the request; the server's span is its child.
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl TraceContext {
    /// The `traceparent` header value: version 00, trace id, parent (our span) id, flags.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            hex(&self.span_id),
            u8::from(self.sampled)
        )
    }

    /// 32 lowercase hex digits, as trace back ends and exemplars show it.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// What a run met at its endpoint, as this agent saw it (probe/lane.rs): how long it
/// waited for the agent's other runs of the endpoint, how long the endpoint had been
/// idle before it, whether it was a cold run, and whether it fell in the endpoint's
/// warm-up after a restart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conditions {
    /// Time from the tick to the request: waiting for the agent's other runs of the same
    /// endpoint to end (they take turns), and a cold run's wait for the idle window.
    pub waited: Duration,
    /// Time since this agent's last request to the endpoint ended (any probe's, the
    /// identity asks included), or since the agent started when there was none; zero
    /// when another request of the agent's was in flight.
    pub idle: Duration,
    /// A cold probe's run that found the endpoint idle for the probe's whole `cold.idle`.
    pub cold: bool,
    /// The endpoint restarted (or changed its model) within the probe's `warmup`
    /// before this run: the run is part of its warm-up.
    pub warmup: Option<Warmup>,
}

/// A restart of an endpoint, as its answers showed it: when, and what showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warmup {
    pub since: SystemTime,
    /// What showed it, for people: `the server answered that it is loading the model`.
    pub cause: String,
}

/// A burst run's requests (`burst: N`): one sent alone first, then N identical ones sent
/// together. The figure compared is the time to first token where every request has
/// one, else the total time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Burst {
    /// The request sent alone just before the burst; `None` when it failed.
    pub alone: Option<Timing>,
    /// The burst's requests in the order they were sent; `None` for one that failed.
    pub requests: Vec<Option<Timing>>,
}

/// One request's time to first token (LLM kinds) and total time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub ttft: Option<Duration>,
    pub total: Duration,
}

impl Timing {
    pub fn of(o: &Observation) -> Option<Timing> {
        o.success().then_some(())?;
        Some(Timing {
            ttft: o.ttft(),
            total: o.total()?,
        })
    }
}

impl Burst {
    /// The compared figure of each request, seconds; `None` unless every request of the
    /// burst succeeded (a spread over the survivors would hide the worst).
    pub fn figures(&self) -> Option<Vec<f64>> {
        let all: Vec<Timing> = self.requests.iter().copied().collect::<Option<_>>()?;
        let by_ttft = all.iter().all(|t| t.ttft.is_some());
        Some(
            all.iter()
                .map(|t| {
                    if by_ttft {
                        t.ttft.unwrap_or(t.total)
                    } else {
                        t.total
                    }
                })
                .map(|d| d.as_secs_f64())
                .collect(),
        )
        .filter(|v: &Vec<f64>| !v.is_empty())
    }

    /// Whether the figure compared is the time to first token (else the total time).
    pub fn by_ttft(&self) -> bool {
        self.requests.iter().all(|t| t.is_some_and(|t| t.ttft.is_some()))
    }

    /// Standard deviation over mean of the burst's figures (the population's: this burst
    /// is all there is): 0 when all came alike; up to about 0.75 when four requests
    /// were served one after another (0.64 when the first token takes a quarter of a
    /// request's time).
    pub fn spread(&self) -> Option<f64> {
        let v = self.figures()?;
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        if mean <= 0.0 {
            return None;
        }
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        Some(var.sqrt() / mean)
    }

    /// The slowest figure over the fastest.
    pub fn max_over_min(&self) -> Option<f64> {
        let v = self.figures()?;
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        (min > 0.0).then(|| max / min)
    }

    /// The burst's mean figure over the lone request's: how much slower N users at once
    /// are served than one.
    pub fn slowdown(&self) -> Option<f64> {
        let v = self.figures()?;
        let alone = self.alone?;
        let alone = if self.by_ttft() { alone.ttft? } else { alone.total }.as_secs_f64();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        (alone > 0.0).then(|| mean / alone)
    }
}

/// One finished run, stamped with who ran what and when. This is what metrics, the store
/// and (later) alerting consume.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub probe: Arc<ProbeIdentity>,
    /// Wall-clock time the run started, for timestamps shown to people.
    pub started_at: SystemTime,
    /// How late the run started after its scheduled tick (zero for one-off runs).
    pub schedule_lag: Duration,
    /// The trace context the run's request carried; `None` when the probe turned it off
    /// or the run never sent a request.
    pub trace: Option<TraceContext>,
    pub observation: Observation,
    /// What the run met at its endpoint: its wait, the idle time before it, cold or
    /// warm, warm-up.
    pub conditions: Conditions,
    /// A burst run's requests; `None` for a run of one request.
    pub burst: Option<Box<Burst>>,
}

impl Outcome {
    /// The outcome as shown by `inferprobe once --format json` and the JSON API: durations
    /// in seconds (null when the run did not get that far), the endpoint without secrets.
    pub fn to_json(&self) -> serde_json::Value {
        let o = &self.observation;
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        let labels: serde_json::Map<String, serde_json::Value> = self
            .probe
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
            .collect();
        serde_json::json!({
            "probe": &*self.probe.name,
            "kind": self.probe.kind,
            "model": self.probe.model,
            "location": &*self.probe.location,
            "endpoint": self.probe.endpoint,
            "labels": labels,
            "started_at": humantime::format_rfc3339_millis(self.started_at).to_string(),
            // The trace the run's requests carried (null when the probe does not trace):
            // the server's trace of this run is found by it.
            "trace_id": self.trace.map(|t| t.trace_id_hex()),
            "success": o.success(),
            "reason": o.failure().map(|f| f.reason.as_str()),
            // A failure's message, or a successful run's note.
            "message": o.failure().map(|f| f.message.as_str()).or(o.note.as_deref()),
            "http_status": o.http_status,
            "prompt_bucket": o.prompt_bucket,
            "image_bucket": o.image_bucket,
            "connection_reused": o.connection_reused,
            "dns_seconds": secs(o.dns()),
            "connect_seconds": secs(o.connect()),
            "tls_seconds": secs(o.tls()),
            "ready_check_seconds": secs(o.ready_check),
            "ttfb_seconds": secs(o.ttfb()),
            "ttft_seconds": secs(o.ttft()),
            "tpot_seconds": secs(o.tpot()),
            "total_seconds": secs(o.total()),
            "output_tokens": o.output_tokens,
            "token_source": o.token_source.map(TokenSource::as_str),
            "input_tokens": o.input_tokens,
            "input_token_source": o.input_token_source.map(TokenSource::as_str),
            "finish_reason": o.finish_reason,
            // Which model answered, as the server says (null where it did not).
            "served_model": o.served.model,
            "system_fingerprint": o.served.fingerprint,
            "model_identity": o.served.identity.as_ref().map(|m| serde_json::json!({"digest": m.digest, "summary": m.summary})),
            "chunks": o.chunk_gaps.len() + usize::from(o.marks.first_token.is_some()),
            "bytes_received": o.bytes_received,
            "server_reported_seconds": o
                .server_reported
                .iter()
                .map(|(stage, d)| ((*stage).to_owned(), serde_json::Value::from(d.as_secs_f64())))
                .collect::<serde_json::Map<_, _>>(),
            // What the run met at its endpoint (docs/measurements.md).
            "waited_seconds": self.conditions.waited.as_secs_f64(),
            "idle_seconds": self.conditions.idle.as_secs_f64(),
            "start": if self.conditions.cold { "cold" } else { "warm" },
            "warmup": self.conditions.warmup.as_ref().map(|w| serde_json::json!({
                "since": humantime::format_rfc3339_millis(w.since).to_string(),
                "cause": w.cause,
            })),
            "burst": self.burst.as_deref().map(Burst::to_json),
        })
    }
}

impl Burst {
    pub fn to_json(&self) -> serde_json::Value {
        let timing = |t: &Option<Timing>| {
            t.map(|t| {
                serde_json::json!({
                    "ttft_seconds": t.ttft.map(|d| d.as_secs_f64()),
                    "total_seconds": t.total.as_secs_f64(),
                })
            })
        };
        serde_json::json!({
            "size": self.requests.len(),
            "by": if self.by_ttft() { "ttft" } else { "total" },
            "alone": timing(&self.alone),
            "requests": self.requests.iter().map(timing).collect::<Vec<_>>(),
            "spread": self.spread(),
            "max_over_min": self.max_over_min(),
            "slowdown": self.slowdown(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_derive_from_one_start() {
        let t0 = Instant::now();
        let mut o = Observation::new(t0);
        o.marks.dns_done = Some(t0 + Duration::from_millis(2));
        o.marks.connect_done = Some(t0 + Duration::from_millis(5));
        o.marks.headers = Some(t0 + Duration::from_millis(20));
        o.marks.first_token = Some(t0 + Duration::from_millis(300));
        o.marks.last_token = Some(t0 + Duration::from_millis(500));
        o.marks.end = Some(t0 + Duration::from_millis(510));
        o.output_tokens = Some(11);
        assert_eq!(o.dns(), Some(Duration::from_millis(2)));
        assert_eq!(o.connect(), Some(Duration::from_millis(3)));
        assert_eq!(o.tls(), None);
        assert_eq!(o.ttfb(), Some(Duration::from_millis(20)));
        assert_eq!(o.ttft(), Some(Duration::from_millis(300)));
        assert_eq!(o.total(), Some(Duration::from_millis(510)));
        assert_eq!(o.tpot(), Some(Duration::from_millis(20)));
    }

    #[test]
    fn traceparent_follows_the_w3c_layout() {
        let t = TraceContext {
            trace_id: [
                0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47,
                0x36,
            ],
            span_id: [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
            sampled: true,
        };
        assert_eq!(
            t.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(t.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    fn timing(ttft_ms: u64) -> Option<Timing> {
        Some(Timing {
            ttft: Some(Duration::from_millis(ttft_ms)),
            total: Duration::from_millis(ttft_ms + 100),
        })
    }

    #[test]
    fn a_burst_served_one_after_another_spreads_and_one_served_together_does_not() {
        // One slot: each request waits for those before it.
        let queued = Burst {
            alone: timing(50),
            requests: vec![timing(50), timing(250), timing(450), timing(650)],
        };
        let spread = queued.spread().unwrap();
        assert!((spread - 0.6389).abs() < 0.001, "{spread}");
        assert!((queued.max_over_min().unwrap() - 13.0).abs() < 1e-9);
        assert!((queued.slowdown().unwrap() - 7.0).abs() < 1e-9);
        // Four slots: all four in one batch.
        let together = Burst {
            alone: timing(50),
            requests: vec![timing(60), timing(61), timing(62), timing(60)],
        };
        assert!(together.spread().unwrap() < 0.02);
        // A failed request leaves no spread to judge.
        let failed = Burst {
            alone: timing(50),
            requests: vec![timing(60), None],
        };
        assert_eq!(failed.spread(), None);
        assert!(!failed.by_ttft());
    }

    #[test]
    fn tpot_needs_two_tokens() {
        let t0 = Instant::now();
        let mut o = Observation::new(t0);
        o.marks.first_token = Some(t0);
        o.marks.last_token = Some(t0);
        o.output_tokens = Some(1);
        assert_eq!(o.tpot(), None);
    }

    #[test]
    fn status_classes_map_to_reasons() {
        assert_eq!(FailureReason::for_status(200), None);
        assert_eq!(FailureReason::for_status(204), None);
        assert_eq!(FailureReason::for_status(429), Some(FailureReason::RateLimited));
        assert_eq!(FailureReason::for_status(404), Some(FailureReason::Http4xx));
        assert_eq!(FailureReason::for_status(503), Some(FailureReason::Http5xx));
        assert_eq!(
            FailureReason::for_status(302),
            Some(FailureReason::InvalidResponse)
        );
    }

    #[test]
    fn reason_names_are_unique_label_values() {
        let mut names: Vec<_> = FailureReason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FailureReason::ALL.len());
        assert!(names.iter().all(|n| {
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        }));
    }
}
