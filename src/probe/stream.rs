//! What every probe kind shares, so that each kind's file only says how its protocol
//! looks: sending with phase-aware timeouts, judging the status, reading a streamed body
//! into timed events, and the `expect` checks.
//!
//! Event timestamps are taken when the read that completed the event returns (before any
//! JSON parsing), so events completed by one read share a timestamp.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;

use super::framing::{Decoder, Event};
use super::{BuildContext, BuildError, RunLimits};
use super::{RunContext, redactor_for};
use crate::config::{Expect, ProbeConfig};
use crate::net::{BodyError, BodyStream, HttpClient, ResponseStream, TlsRoots};
use crate::outcome::{Failure, FailureReason, Observation, TokenSource};
use crate::payload::Prompt;
use crate::payload::PromptSet;
use crate::payload::images::{Image, ImageSet, bucket_of};
use crate::redact::Redactor;
use std::sync::Arc;

/// Largest single event (SSE event or NDJSON line) we accept. Real events are a few hundred bytes; a stream that
/// never ends an event is a broken server, not a reason to grow without bound.
const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// Generated text kept for `expect.contains`; the rest is counted, not stored.
const MAX_KEPT_TEXT: usize = 64 * 1024;
/// Bytes of an error body read for its message.
const MAX_ERROR_BODY: usize = 4096;
/// How long after the protocol's terminator we wait for the HTTP body to end (the last
/// chunk usually comes in the same read). Outside the measured total, which ends at the
/// terminator; bounded so a proxy that holds the body open cannot hold the run.
const BODY_END_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a probe sends and what it checks, the same for every kind: the client, the
/// request target, the headers (the user's marked sensitive), the `expect` checks, and
/// the secrets to keep out of messages.
pub(crate) struct Endpoint {
    client: HttpClient,
    path_and_query: http::uri::PathAndQuery,
    headers: http::HeaderMap,
    pub expect: Expect,
    max_response_bytes: u64,
    pub redactor: Redactor,
}

impl Endpoint {
    /// `base` headers are the protocol's own (content type, accept); the user's headers
    /// from the config override them.
    pub fn build(
        config: &ProbeConfig,
        roots: &TlsRoots,
        base: &[(http::HeaderName, &'static str)],
    ) -> Result<Self, crate::net::TlsSetupError> {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!("inferprobe/", env!("CARGO_PKG_VERSION"))),
        );
        for (name, value) in base {
            headers.insert(name.clone(), http::HeaderValue::from_static(value));
        }
        // Credentials in the URL (`https://user:pass@host/...`) are sent as Basic auth,
        // as curl and browsers do; an Authorization header in the config wins.
        if let Some(basic) = super::basic_auth_from_url(&config.url)
            && let Ok(mut v) = http::HeaderValue::from_str(&basic)
        {
            v.set_sensitive(true);
            headers.insert(http::header::AUTHORIZATION, v);
        }
        for (name, value) in &config.headers {
            if let Ok(mut v) = http::HeaderValue::from_str(value.expose()) {
                v.set_sensitive(true);
                headers.insert(name.clone(), v);
            }
        }
        Ok(Endpoint {
            client: HttpClient::new(&config.url, roots, &config.tls, config.reuse_connections)?,
            path_and_query: config
                .url
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            headers,
            expect: config.expect.clone(),
            max_response_bytes: config.max_response_bytes,
            redactor: redactor_for(config),
        })
    }

    /// Failure messages may quote what the server sent, which may echo credentials.
    pub fn redact(&self, obs: &mut Observation) {
        if let Err(f) = &mut obs.result {
            f.message = self.redactor.clean(&f.message);
        }
    }

    /// The request to send; built before a run's clock starts.
    pub fn request(&self, method: &http::Method, body: Bytes) -> http::Request<Full<Bytes>> {
        self.build_request(method, http::Uri::from(self.path_and_query.clone()), body)
    }

    /// A request to another path on the same server (e.g. a readiness check).
    pub fn request_to(&self, method: &http::Method, path: &str, body: Bytes) -> http::Request<Full<Bytes>> {
        let uri = http::Uri::try_from(path).unwrap_or_else(|_| http::Uri::from(self.path_and_query.clone()));
        self.build_request(method, uri, body)
    }

    fn build_request(
        &self,
        method: &http::Method,
        uri: http::Uri,
        body: Bytes,
    ) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::builder()
            .method(method.clone())
            .uri(uri)
            .body(Full::new(body))
            .expect("a request from valid parts");
        *request.headers_mut() = self.headers.clone();
        request
    }

    /// Sends and checks the status: `Some` with the response when the body is worth
    /// reading, `None` with `obs.result` set otherwise.
    pub async fn open(
        &self,
        request: http::Request<Full<Bytes>>,
        cx: &RunContext,
        obs: &mut Observation,
        head_deadline: tokio::time::Instant,
        head_timeout_reason: FailureReason,
    ) -> Option<ResponseStream<'_>> {
        let mut response = send(
            &self.client,
            request,
            obs,
            head_deadline,
            head_timeout_reason,
            self.max_response_bytes,
        )
        .await?;
        check_status(&mut response, &self.expect, cx, obs, &self.redactor)
            .await
            .then_some(response)
    }
}

/// What every generative (LLM) kind holds: where to send, which model, the output cap
/// and the prompts to rotate.
pub(crate) struct Generation {
    pub endpoint: Endpoint,
    pub model: String,
    pub max_tokens: u32,
    pub prompts: PromptSet,
    pub images: Option<ImageSet>,
}

impl Generation {
    pub fn build(
        config: &ProbeConfig,
        cx: &BuildContext,
        base_headers: &[(http::HeaderName, &'static str)],
    ) -> Result<Self, BuildError> {
        Ok(Generation {
            endpoint: Endpoint::build(config, &cx.roots, base_headers)?,
            model: config.model.clone().unwrap_or_default(),
            max_tokens: config.max_tokens,
            prompts: PromptSet::new(&config.prompts),
            images: config
                .images
                .as_ref()
                .map(|spec| ImageSet::build(spec, &cx.images))
                .transpose()?,
        })
    }

    /// The next run's prompt and images (none for text-only probes).
    pub fn next_input(&self) -> (&Prompt, Vec<Arc<Image>>) {
        let images = self.images.as_ref().map(ImageSet::next).unwrap_or_default();
        (self.prompts.next(), images)
    }

    /// One streamed generation, the way every LLM kind runs: send `body`, expect a 2xx
    /// stream in the protocol's content type, read its events with `parse` up to the
    /// terminator, make sure the answer and the HTTP body are complete, then apply the
    /// `expect` checks. The clock starts after the request is built.
    pub async fn run(
        &self,
        limits: &RunLimits,
        body: Bytes,
        (prompt, images): (&Prompt, &[Arc<Image>]),
        protocol: &Protocol,
        parse: impl FnMut(&Event) -> Result<EventFacts, Failure>,
    ) -> Observation {
        let request = self.endpoint.request(&http::Method::POST, body);
        let cx = &limits.start();
        let mut obs = Observation::new(cx.start);
        obs.prompt_bucket = prompt.bucket.as_str();
        obs.image_bucket = bucket_of(images);
        let Some(mut response) = self
            .endpoint
            .open(
                request,
                cx,
                &mut obs,
                cx.first_token_deadline,
                FailureReason::TimeoutFirstToken,
            )
            .await
        else {
            return obs;
        };
        if !check_content_type(&response, protocol.framing.content_type(), &mut obs) {
            return obs;
        }
        let Some(streamed) = read_events(
            &mut response.body,
            protocol,
            cx,
            &mut obs,
            &self.endpoint.redactor,
            parse,
        )
        .await
        else {
            return obs;
        };
        // The answer is complete only if its HTTP message is: read on to the end of the
        // body, outside the measured total (the end mark is already the terminator).
        let grace = cx.deadline.min(tokio::time::Instant::now() + BODY_END_GRACE);
        let body_end = response.body.finish(grace).await;
        obs.bytes_received = response.body.received();
        obs.finish_reason = streamed.finish_reason.clone();
        obs.result = check_complete(protocol, &streamed, body_end)
            .and_then(|()| {
                check_output(
                    &self.endpoint.expect,
                    &streamed.text,
                    streamed.content_events > 0,
                    obs.output_tokens,
                )
            })
            .and_then(|()| check_finish_reason(&self.endpoint.expect, streamed.finish_reason.as_deref()))
            .and_then(|()| check_model(&self.endpoint.expect, &self.model, streamed.model.as_deref()));
        self.endpoint.redact(&mut obs);
        obs
    }
}

/// What a streaming protocol is, for the driver: its framing, and the signals that say an
/// answer is complete, named as failure messages name them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Protocol {
    pub framing: Framing,
    /// The event that ends the stream, e.g. `data: [DONE]`.
    pub terminator: &'static str,
    /// A finish signal the protocol sends before its terminator (OpenAI's
    /// `finish_reason`, Anthropic's `stop_reason`), required for a complete answer.
    /// `None` where the terminator itself says the generation finished.
    pub finish: Option<&'static str>,
}

/// Finish reasons as one vocabulary across protocols, so that `expect.finish_reason`
/// (see [`crate::config::ANSWER_FINISH_REASONS`]) and the API read the same for every
/// kind: the answer ended naturally (`stop`), at the output cap (`length`), to call tools
/// (`tool_calls`), withheld (`content_filter`, `refusal`). Any other word is kept as the
/// server sent it, if it looks like one: the value is the server's and reaches the API,
/// logs and terminals, so anything longer than 32 characters or outside
/// `[A-Za-z0-9_-]` becomes `other`. An empty value is no finish reason at all (`None`):
/// a proxy writing `""` for `null` must not make a cut stream look finished.
pub(crate) fn normalize_finish_reason(raw: &str) -> Option<String> {
    let word = match raw.trim() {
        "" => return None,
        // OpenAI and Ollama; Anthropic; TGI; llama.cpp's native API.
        "stop" | "end_turn" | "stop_sequence" | "eos_token" | "eos" => "stop",
        // OpenAI, Ollama, TGI; Anthropic; the Responses API's incomplete reason.
        "length" | "max_tokens" | "max_output_tokens" => "length",
        "tool_calls" | "function_call" | "tool_use" => "tool_calls",
        other
            if other.len() <= 32
                && other
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
        {
            other
        }
        _ => "other",
    };
    Some(word.to_owned())
}

/// Whether the answer and its HTTP message are complete: the protocol's finish signal
/// came (and no content after it), the body ended cleanly after the terminator, and the
/// finish reason is one that carries an answer.
fn check_complete(
    protocol: &Protocol,
    streamed: &Streamed,
    body_end: Result<(), BodyError>,
) -> Result<(), Failure> {
    if let (Some(finish), None) = (protocol.finish, &streamed.finish_reason) {
        return Err(Failure::new(
            FailureReason::Truncated,
            format!(
                "{} came without {finish}: the answer was cut short after {} content events",
                protocol.terminator, streamed.content_events
            ),
        ));
    }
    if let Err(BodyError::Broken(e)) = body_end {
        return Err(Failure::new(
            FailureReason::Truncated,
            format!(
                "the HTTP body broke after {} instead of ending: {e}",
                protocol.terminator
            ),
        ));
    }
    // A body over its cap after the terminator (`TooLarge`) leaves the answer complete.
    let (reason, what) = match (streamed.finish_reason.as_deref(), streamed.refused) {
        // vLLM's `abort`: the server cut the generation short; a Responses `incomplete`
        // for a reason other than our own cap.
        (Some(f @ ("abort" | "incomplete")), _) => (FailureReason::Truncated, format!("finish reason {f}")),
        // An in-band report that no real answer was given.
        (Some(f @ ("content_filter" | "refusal" | "error")), _) => {
            (FailureReason::StreamError, format!("finish reason {f}"))
        }
        (_, true) => (FailureReason::StreamError, "a refusal".to_owned()),
        _ => return Ok(()),
    };
    Err(Failure::new(
        reason,
        format!("the server ended the answer with {what}: no real answer"),
    ))
}

/// `expect.finish_reason`: the answer must have ended for one of the listed reasons.
fn check_finish_reason(expect: &Expect, finish: Option<&str>) -> Result<(), Failure> {
    if expect.finish_reason.is_empty() || finish.is_some_and(|f| expect.finish_reason.iter().any(|e| e == f))
    {
        return Ok(());
    }
    Err(Failure::new(
        FailureReason::Assertion,
        format!(
            "expected finish reason {}, got {}",
            expect.finish_reason.join(" or "),
            finish.unwrap_or("none")
        ),
    ))
}

/// `expect.model`: the response must name the model we asked for.
fn check_model(expect: &Expect, asked: &str, answered: Option<&str>) -> Result<(), Failure> {
    match (expect.model, answered) {
        (false, _) => Ok(()),
        (true, Some(m)) if m == asked => Ok(()),
        (true, Some(m)) => Err(Failure::new(
            FailureReason::Assertion,
            format!("expected model {asked:?}, the response names {m:?}"),
        )),
        (true, None) => Err(Failure::new(
            FailureReason::Assertion,
            "the response names no model",
        )),
    }
}

/// What one protocol event said, as the kind's parser reads it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct EventFacts {
    /// Answer text in this event (may be empty).
    pub text: String,
    /// The event carried other generated output: reasoning text or a tool-call fragment.
    /// It counts for TTFT, as a user sees output appear.
    pub other_output: bool,
    /// Output tokens the server reported (final usage).
    pub output_tokens: Option<u64>,
    /// The protocol's terminator.
    pub done: bool,
    /// Why the generation ended, where this event says (normalized with
    /// [`normalize_finish_reason`]).
    pub finish_reason: Option<String>,
    /// The event carried a refusal (OpenAI's `refusal` part): no real answer.
    pub refusal: bool,
    /// Durations the server reported about itself, by stage.
    pub server_reported: Vec<(&'static str, std::time::Duration)>,
    /// The model the server says answered, where the protocol names it.
    pub model: Option<String>,
}

/// Sends the request, recording phases into `obs`. On failure `obs.result` is set and
/// `None` returned. `head_deadline` bounds everything up to the response headers;
/// running out of it is blamed on the phase that was in progress.
async fn send<'c>(
    client: &'c HttpClient,
    request: http::Request<Full<Bytes>>,
    obs: &mut Observation,
    head_deadline: tokio::time::Instant,
    head_timeout_reason: FailureReason,
    max_body_bytes: u64,
) -> Option<ResponseStream<'c>> {
    let sent = tokio::time::timeout_at(head_deadline, client.send(request, obs, max_body_bytes)).await;
    match sent {
        Ok(Ok(stream)) => {
            obs.http_status = Some(stream.response.status().as_u16());
            Some(stream)
        }
        Ok(Err(e)) => {
            obs.result = Err(Failure::new(e.reason(), e.to_string()));
            None
        }
        Err(_) => {
            let waited = humantime::format_duration(round_ms(
                head_deadline.duration_since(tokio::time::Instant::from_std(obs.marks.start)),
            ));
            let m = &obs.marks;
            let (reason, what) = if m.dns_done.is_none() && !obs.connection_reused {
                (FailureReason::Dns, "resolving the host")
            } else if m.connect_done.is_none() && !obs.connection_reused {
                (FailureReason::Connect, "connecting")
            } else if client.is_tls() && m.tls_done.is_none() && !obs.connection_reused {
                (FailureReason::Tls, "in the TLS handshake")
            } else {
                (head_timeout_reason, "waiting for response headers")
            };
            obs.result = Err(Failure::new(reason, format!("timed out after {waited} {what}")));
            None
        }
    }
}

/// Deadlines are set a few microseconds before a run's start instant; show whole ms.
fn round_ms(d: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis((d.as_secs_f64() * 1000.0).round() as u64)
}

/// Fails the run unless the status is accepted: listed in `expect.status`, or any 2xx
/// when the list is empty. For a rejected status the error body's message (secrets
/// removed) goes into the failure message.
async fn check_status(
    stream: &mut ResponseStream<'_>,
    expect: &Expect,
    cx: &RunContext,
    obs: &mut Observation,
    redactor: &Redactor,
) -> bool {
    let status = stream.response.status().as_u16();
    let accepted = if expect.status.is_empty() {
        (200..300).contains(&status)
    } else {
        expect.status.contains(&status)
    };
    if accepted {
        return true;
    }
    let reason = FailureReason::for_status(status).unwrap_or(FailureReason::Assertion);
    let mut message = if reason == FailureReason::Assertion {
        format!("expected status {:?}, got {status}", expect.status)
    } else {
        format!("HTTP {status}")
    };
    if let Some(after) = stream
        .response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
    {
        message.push_str(&format!(" (Retry-After: {after})"));
    }
    // The message is a nicety: never let a slow error body hold the run long.
    let wait = cx
        .deadline
        .min(tokio::time::Instant::now() + std::time::Duration::from_secs(1));
    let body = read_prefix(&mut stream.body, MAX_ERROR_BODY, wait).await;
    // Redacted before `error_detail` cuts it (and after, for what JSON decoding
    // reveals); a body cut by the read cap may end in a secret's start.
    let text = String::from_utf8_lossy(&body);
    let text = if body.len() >= MAX_ERROR_BODY {
        redactor.clean_cut(&text)
    } else {
        redactor.clean(&text)
    };
    if let Some(detail) = error_detail(text.as_bytes()) {
        message.push_str(": ");
        message.push_str(&redactor.clean(&detail));
    }
    obs.result = Err(Failure::new(reason, message));
    false
}

/// Reads up to `limit` bytes of a body, giving up quietly at the deadline or an error.
async fn read_prefix(body: &mut BodyStream<'_>, limit: usize, deadline: tokio::time::Instant) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < limit {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Ok(Some(chunk))) => out.extend_from_slice(&chunk[..chunk.len().min(limit - out.len())]),
            _ => break,
        }
    }
    out
}

/// The human part of an error body: `error.message`, `error`, `message` or `detail` of a
/// JSON body, else the start of the text. One line, at most 200 characters.
pub(crate) fn error_detail(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let from_json = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| json_error_message(&v));
    let detail = from_json.unwrap_or_else(|| text.to_owned());
    Some(one_line(&detail, 200))
}

/// The message of an in-band or body error object, in the shapes servers use:
/// `{"error":{"message":..}}`, `{"error":"..."}`, `{"message":..}`, `{"detail":..}`.
pub(crate) fn json_error_message(v: &serde_json::Value) -> Option<String> {
    let err = v.get("error").unwrap_or(v);
    for key in ["message", "detail"] {
        if let Some(m) = err.get(key).and_then(|m| m.as_str()) {
            return Some(m.to_owned());
        }
    }
    match err {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        other if v.get("error").is_some() => Some(other.to_string()),
        _ => None,
    }
}

fn one_line(s: &str, max_chars: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::human::shorten(&flat, max_chars)
}

/// Checks the content type of a streamed response before reading it.
fn check_content_type(stream: &ResponseStream<'_>, expected: &str, obs: &mut Observation) -> bool {
    let got = stream
        .response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if got.trim().to_ascii_lowercase().starts_with(expected) {
        return true;
    }
    let got = if got.is_empty() { "none" } else { got };
    obs.result = Err(Failure::new(
        FailureReason::InvalidResponse,
        format!("expected content type {expected}, got {got}"),
    ));
    false
}

/// Reads a whole (non-streamed) body to its end within the deadline and the byte cap,
/// keeping its first `keep` bytes. Marks the end; the caller sets `obs.result`.
pub(crate) async fn read_body(
    body: &mut BodyStream<'_>,
    keep: usize,
    cx: &RunContext,
    obs: &mut Observation,
) -> Result<Vec<u8>, Failure> {
    let mut kept = Vec::new();
    let result = loop {
        match tokio::time::timeout_at(cx.deadline, body.next()).await {
            Err(_) => {
                break Err(timeout_failure(
                    FailureReason::TimeoutTotal,
                    "body not complete",
                    obs.marks.start,
                    cx.deadline,
                ));
            }
            Ok(Err(e @ BodyError::TooLarge { .. })) => {
                break Err(Failure::new(FailureReason::InvalidResponse, e.to_string()));
            }
            Ok(Err(e @ BodyError::Broken(_))) => {
                break Err(Failure::new(FailureReason::Truncated, e.to_string()));
            }
            Ok(Ok(None)) => {
                obs.marks.end = Some(Instant::now());
                break Ok(kept);
            }
            Ok(Ok(Some(chunk))) => {
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
        }
    };
    obs.bytes_received = body.received();
    result
}

/// What a streamed response produced.
#[derive(Debug, Default)]
pub(crate) struct Streamed {
    /// Answer text, up to [`MAX_KEPT_TEXT`] bytes.
    pub text: String,
    pub content_events: u64,
    /// The first model name the stream gave.
    pub model: Option<String>,
    /// The finish reason of the last event that said why generation ended, unless
    /// content came after it.
    pub finish_reason: Option<String>,
    /// An event carried a refusal.
    pub refused: bool,
    text_capped: bool,
}

/// How a streamed body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Sse,
    Ndjson,
}

impl Framing {
    /// The content type a server must declare for this framing.
    fn content_type(self) -> &'static str {
        match self {
            Framing::Sse => "text/event-stream",
            Framing::Ndjson => "application/x-ndjson",
        }
    }
}

/// Reads a streamed body to the protocol's terminator, timing every content-bearing event.
/// Fills marks, chunk gaps, tokens and `obs.result`; returns what was generated when the
/// stream completed.
async fn read_events(
    body: &mut BodyStream<'_>,
    protocol: &Protocol,
    cx: &RunContext,
    obs: &mut Observation,
    redactor: &Redactor,
    mut parse: impl FnMut(&Event) -> Result<EventFacts, Failure>,
) -> Option<Streamed> {
    let mut decoder = match protocol.framing {
        Framing::Sse => Decoder::sse(MAX_EVENT_BYTES),
        Framing::Ndjson => Decoder::ndjson(MAX_EVENT_BYTES),
    };
    let mut out = Streamed::default();
    let mut usage_tokens = None;
    let result = loop {
        let first = obs.marks.first_token.is_none();
        let deadline = if first {
            cx.first_token_deadline
        } else {
            cx.deadline
        };
        let read = tokio::time::timeout_at(deadline, body.next()).await;
        obs.bytes_received = body.received();
        let bytes = match read {
            Err(_) if first => {
                break Err(timeout_failure(
                    FailureReason::TimeoutFirstToken,
                    "no token",
                    obs.marks.start,
                    deadline,
                ));
            }
            Err(_) => {
                break Err(timeout_failure(
                    FailureReason::TimeoutTotal,
                    "stream not finished",
                    obs.marks.start,
                    deadline,
                ));
            }
            Ok(Err(e @ BodyError::TooLarge { .. })) => {
                break Err(Failure::new(FailureReason::InvalidResponse, e.to_string()));
            }
            Ok(Err(BodyError::Broken(e))) => {
                break Err(Failure::new(
                    FailureReason::Truncated,
                    format!(
                        "the connection broke before {} after {} content events: {e}",
                        protocol.terminator, out.content_events
                    ),
                ));
            }
            Ok(Ok(None)) => {
                break Err(Failure::new(
                    FailureReason::Truncated,
                    format!(
                        "stream ended without its terminator ({}) after {} content events",
                        protocol.terminator, out.content_events
                    ),
                ));
            }
            Ok(Ok(Some(bytes))) => bytes,
        };
        let at = Instant::now();
        let events = match decoder.push(&bytes) {
            Ok(e) => e,
            Err(e) => break Err(Failure::new(FailureReason::InvalidResponse, e.to_string())),
        };
        let mut done = false;
        for event in &events {
            let facts = match parse(event) {
                Ok(f) => f,
                Err(mut failure) => {
                    failure.message = redactor.clean(&failure.message);
                    obs.result = Err(failure);
                    return None;
                }
            };
            if !facts.text.is_empty() || facts.other_output {
                // The finish signal must be the last word on the answer: content after
                // it means it was not the end.
                out.finish_reason = None;
                record_content(obs, &mut out, at);
                // Stop keeping text at the cap (rather than skip one large piece and
                // keep later ones): `contains` must never see text with holes.
                if !out.text_capped {
                    if out.text.len() + facts.text.len() <= MAX_KEPT_TEXT {
                        out.text.push_str(&facts.text);
                    } else {
                        out.text_capped = true;
                    }
                }
            }
            if facts.output_tokens.is_some() {
                usage_tokens = facts.output_tokens;
            }
            if facts.finish_reason.is_some() {
                out.finish_reason = facts.finish_reason;
            }
            out.refused |= facts.refusal;
            obs.server_reported.extend(facts.server_reported);
            if out.model.is_none() {
                out.model = facts.model;
            }
            if facts.done {
                done = true;
                break;
            }
        }
        if done {
            obs.marks.end = Some(at);
            break Ok(());
        }
    };
    obs.bytes_received = body.received();
    if let Err(failure) = result {
        obs.result = Err(failure);
        return None;
    }
    (obs.output_tokens, obs.token_source) = match usage_tokens {
        Some(n) => (Some(n), Some(TokenSource::Usage)),
        None => (Some(out.content_events), Some(TokenSource::Events)),
    };
    obs.note = usage_tokens.and_then(|n| token_gap_note(n, out.content_events));
    Some(out)
}

/// A note when the server's token count and the content events we counted disagree by
/// much: more events than tokens means the usage under-reports; far fewer events means
/// chunks carry several tokens (a proxy coalescing them), or the count is wrong. A small
/// gap is normal (byte tokens held back until their character is complete), so only a
/// gap over 4 and over half the larger count is flagged.
pub(crate) fn token_gap_note(usage: u64, events: u64) -> Option<String> {
    let (high, low) = (usage.max(events), usage.min(events));
    (high - low > 4.max(high / 2)).then(|| {
        format!(
            "usage reports {usage} output tokens but {events} content events arrived; the usage count is used"
        )
    })
}

/// Chunk gaps kept per run: thousands of tokens is far beyond a probe's answer, and the
/// outcome is kept in memory.
const MAX_CHUNK_GAPS: usize = 10_000;

fn record_content(obs: &mut Observation, out: &mut Streamed, at: Instant) {
    match obs.marks.last_token {
        None => obs.marks.first_token = Some(at),
        Some(prev) if obs.chunk_gaps.len() < MAX_CHUNK_GAPS => {
            obs.chunk_gaps.push(at.saturating_duration_since(prev))
        }
        Some(_) => {}
    }
    obs.marks.last_token = Some(at);
    out.content_events += 1;
}

fn timeout_failure(
    reason: FailureReason,
    what: &str,
    start: Instant,
    deadline: tokio::time::Instant,
) -> Failure {
    let after = deadline.into_std().saturating_duration_since(start);
    Failure::new(
        reason,
        format!("{what} within {}", humantime::format_duration(round_ms(after))),
    )
}

/// The `expect` checks on a complete response. `any_output` counts reasoning and tool
/// output too; `contains` looks at the answer text only.
pub(crate) fn check_output(
    expect: &Expect,
    text: &str,
    any_output: bool,
    tokens: Option<u64>,
) -> Result<(), Failure> {
    let assertion = |what: String| {
        Err(Failure::new(
            FailureReason::Assertion,
            format!("{what}; it starts {:?}", one_line(text, 80)),
        ))
    };
    if expect.non_empty && !any_output {
        return Err(Failure::new(
            FailureReason::EmptyOutput,
            "the response completed with no generated output",
        ));
    }
    if let Some(n) = tokens
        && n < expect.min_output_tokens
    {
        return Err(Failure::new(
            FailureReason::Assertion,
            format!(
                "expected at least {} output tokens, got {n}",
                expect.min_output_tokens
            ),
        ));
    }
    if let Some(needle) = &expect.contains
        && !text.contains(needle.as_str())
    {
        return assertion(format!("expected the output to contain {needle:?}"));
    }
    if let Some(pattern) = &expect.matches
        && !pattern.regex.is_match(text)
    {
        return assertion(format!("expected the output to match /{}/", pattern.source));
    }
    if expect.json
        && let Err(e) = serde_json::from_str::<serde_json::Value>(text.trim())
    {
        return assertion(format!("expected JSON output ({e})"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_detail_finds_the_message_in_common_shapes() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"error":{"code":400,"message":"Expected 'messages' to be an array","type":"invalid_request_error"}}"#,
                "Expected 'messages' to be an array",
            ),
            (r#"{"error":"model not found"}"#, "model not found"),
            (r#"{"detail":"Not Found"}"#, "Not Found"),
            (
                "<html><body>502 Bad Gateway</body></html>",
                "<html><body>502 Bad Gateway</body></html>",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(error_detail(body.as_bytes()).as_deref(), Some(*want));
        }
        assert_eq!(error_detail(b"  "), None);
    }

    #[test]
    fn regex_and_json_expectations() {
        let regex = regex::Regex::new("(?i)^open").unwrap();
        let expect = Expect {
            matches: Some(crate::config::Pattern {
                source: "(?i)^open".into(),
                regex,
            }),
            ..Expect::default()
        };
        assert!(check_output(&expect, "Open 24h", true, None).is_ok());
        let f = check_output(&expect, "closed", true, None).unwrap_err();
        assert_eq!(f.reason, FailureReason::Assertion);
        assert!(f.message.contains("/(?i)^open/"), "{}", f.message);

        let json = Expect {
            json: true,
            ..Expect::default()
        };
        assert!(check_output(&json, " {\"answer\": 4} ", true, None).is_ok());
        assert_eq!(
            check_output(&json, "{answer: 4", true, None).unwrap_err().reason,
            FailureReason::Assertion
        );
    }

    #[test]
    fn model_echo() {
        let expect = Expect {
            model: true,
            ..Expect::default()
        };
        assert!(check_model(&expect, "m", Some("m")).is_ok());
        assert!(
            check_model(&expect, "m", Some("other"))
                .unwrap_err()
                .message
                .contains("\"other\"")
        );
        assert!(check_model(&expect, "m", None).is_err());
        assert!(check_model(&Expect::default(), "m", None).is_ok());
    }

    #[test]
    fn error_detail_is_one_bounded_line() {
        let long = "x\n".repeat(500);
        let d = error_detail(long.as_bytes()).unwrap();
        assert!(!d.contains('\n'));
        assert!(d.chars().count() <= 203);
    }

    fn streamed(finish: Option<&str>, refused: bool) -> Streamed {
        Streamed {
            content_events: 3,
            finish_reason: finish.map(str::to_owned),
            refused,
            ..Streamed::default()
        }
    }

    const DONE_AND_FINISH: Protocol = Protocol {
        framing: Framing::Sse,
        terminator: "data: [DONE]",
        finish: Some("a finish_reason"),
    };

    const TERMINATOR_ONLY: Protocol = Protocol {
        framing: Framing::Ndjson,
        terminator: "the final line",
        finish: None,
    };

    #[test]
    fn a_terminator_without_its_finish_signal_is_truncated() {
        let f = check_complete(&DONE_AND_FINISH, &streamed(None, false), Ok(())).unwrap_err();
        assert_eq!(f.reason, FailureReason::Truncated);
        assert_eq!(
            f.message,
            "data: [DONE] came without a finish_reason: the answer was cut short after 3 content events"
        );
        // Where the terminator is the finish signal, its reason is optional (Ollama's
        // done_reason "where sent").
        assert!(check_complete(&TERMINATOR_ONLY, &streamed(None, false), Ok(())).is_ok());
        assert!(check_complete(&DONE_AND_FINISH, &streamed(Some("length"), false), Ok(())).is_ok());
    }

    #[test]
    fn a_body_that_breaks_after_the_terminator_is_truncated() {
        let cut = Err(BodyError::Broken(
            "error reading a body from connection: end of file before message length reached".into(),
        ));
        let f = check_complete(&DONE_AND_FINISH, &streamed(Some("stop"), false), cut).unwrap_err();
        assert_eq!(f.reason, FailureReason::Truncated);
        assert!(
            f.message
                .starts_with("the HTTP body broke after data: [DONE] instead of ending: error reading"),
            "{}",
            f.message
        );
        // Bytes past the cap after the terminator do not undo a complete answer.
        let big = Err(BodyError::TooLarge { limit: 10 });
        assert!(check_complete(&TERMINATOR_ONLY, &streamed(Some("stop"), false), big).is_ok());
    }

    #[test]
    fn finish_reasons_without_an_answer_fail_with_the_reason() {
        for (finish, reason) in [
            ("content_filter", FailureReason::StreamError),
            ("refusal", FailureReason::StreamError),
            ("error", FailureReason::StreamError),
            ("abort", FailureReason::Truncated),
            ("incomplete", FailureReason::Truncated),
        ] {
            let f = check_complete(&TERMINATOR_ONLY, &streamed(Some(finish), false), Ok(())).unwrap_err();
            assert_eq!(f.reason, reason, "{finish}");
            assert!(
                f.message.contains(&format!("finish reason {finish}")),
                "{}",
                f.message
            );
        }
        for finish in ["stop", "length", "tool_calls", "load"] {
            assert!(
                check_complete(&TERMINATOR_ONLY, &streamed(Some(finish), false), Ok(())).is_ok(),
                "{finish}"
            );
        }
        let f = check_complete(&DONE_AND_FINISH, &streamed(Some("stop"), true), Ok(())).unwrap_err();
        assert_eq!(f.reason, FailureReason::StreamError);
        assert!(f.message.contains("a refusal"), "{}", f.message);
    }

    #[test]
    fn every_protocols_finish_names_map_to_one_vocabulary() {
        for (raw, want) in [
            ("stop", "stop"),
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("eos_token", "stop"),
            ("length", "length"),
            ("max_tokens", "length"),
            ("max_output_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("function_call", "tool_calls"),
            ("content_filter", "content_filter"),
            ("pause_turn", "pause_turn"),
        ] {
            assert_eq!(normalize_finish_reason(raw).as_deref(), Some(want), "{raw}");
        }
        // Not a finish reason, or not one to show as sent.
        assert_eq!(normalize_finish_reason(""), None);
        assert_eq!(normalize_finish_reason("  "), None);
        for hostile in ["\u{1b}[2Jstop", "stop\r\nFAKE", &"x".repeat(33), "<b>"] {
            assert_eq!(
                normalize_finish_reason(hostile).as_deref(),
                Some("other"),
                "{hostile:?}"
            );
        }
    }

    #[test]
    fn expected_finish_reasons() {
        let expect = Expect {
            finish_reason: vec!["stop".into()],
            ..Expect::default()
        };
        assert!(check_finish_reason(&expect, Some("stop")).is_ok());
        let f = check_finish_reason(&expect, Some("length")).unwrap_err();
        assert_eq!(f.reason, FailureReason::Assertion);
        assert_eq!(f.message, "expected finish reason stop, got length");
        assert!(
            check_finish_reason(&expect, None)
                .unwrap_err()
                .message
                .ends_with("got none")
        );
        assert!(check_finish_reason(&Expect::default(), None).is_ok());
    }

    #[test]
    fn a_large_gap_between_usage_and_events_is_noted() {
        // llama.cpp's byte tokens: a few tokens with no event of their own.
        assert_eq!(token_gap_note(16, 13), None);
        assert_eq!(token_gap_note(7, 7), None);
        // A proxy coalescing chunks, or a usage count that is wrong.
        assert_eq!(
            token_gap_note(64, 8).as_deref(),
            Some("usage reports 64 output tokens but 8 content events arrived; the usage count is used")
        );
        assert!(token_gap_note(1, 16).is_some());
    }

    #[test]
    fn output_checks() {
        let expect = Expect {
            non_empty: true,
            min_output_tokens: 2,
            contains: Some("Paris".into()),
            ..Expect::default()
        };
        assert_eq!(
            check_output(&expect, "", false, Some(0)).unwrap_err().reason,
            FailureReason::EmptyOutput
        );
        assert_eq!(
            check_output(&expect, "Paris", true, Some(1)).unwrap_err().reason,
            FailureReason::Assertion
        );
        assert_eq!(
            check_output(&expect, "Lyon", true, Some(3)).unwrap_err().reason,
            FailureReason::Assertion
        );
        assert!(check_output(&expect, "It is Paris.", true, Some(3)).is_ok());
    }
}
