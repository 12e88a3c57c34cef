//! The streaming driver every LLM kind runs: [`Generation`] sends one prompt, reads the
//! streamed events with the kind's parser up to the protocol's terminator, times every
//! content event, and checks that the answer is complete and meets `expect`. A kind's
//! file only says how its protocol looks ([`Protocol`], a request, an event parser).
//! [`GenerationSpec`] is what every LLM kind's config keys become, and its check.
//!
//! Event timestamps are taken when the read that completed the event returns (before any
//! JSON parsing), so events completed by one read share a timestamp.
//!
//! Imports config, outcome, framing, net and payload, and the [`Endpoint`] it sends with.

use std::time::Instant;

use bytes::Bytes;

use super::answer::{Answered, check_answer, check_schema};
use super::endpoint::{Endpoint, check_output, timeout_failure};
use super::framing::{Decoder, Event};
use super::structured::ResponseFormat;
use super::tools::{Call, ToolCallDelta, ToolCalls, ToolSpec, check_tool_calls};
use super::{BuildContext, BuildError, RunContext, RunLimits};
use crate::config::{Common, Expect, Images, ProbeConfig, Prompts, Temperature};
use crate::net::{BodyError, BodyStream, ResponseStream};
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
/// How long after the protocol's terminator we wait for the HTTP body to end (the last
/// chunk usually comes in the same read). Outside the measured total, which ends at the
/// terminator; bounded so a proxy that holds the body open cannot hold the run.
const BODY_END_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What an LLM kind's own keys become: the prompts to rotate, the output cap and the
/// images to send. The `Spec` of every LLM kind (a kind with keys of its own would wrap
/// it in a struct of its own).
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationSpec {
    pub prompts: Prompts,
    pub max_tokens: u32,
    pub temperature: Temperature,
    pub images: Option<Images>,
    /// The kinds whose protocol has tools: the functions offered, and the call expected.
    pub tools: Option<ToolSpec>,
    /// OpenAI kinds: the answer's format asked for (and checked, with a schema).
    pub response_format: Option<ResponseFormat>,
}

impl GenerationSpec {
    /// An LLM kind's spec from the keys every probe has: its prompts (`None` after a
    /// problem with them, said already), `max_tokens` and images.
    pub(crate) fn from_common(common: Common<'_>) -> Option<Self> {
        Some(GenerationSpec {
            prompts: common.prompts?,
            max_tokens: common.max_tokens,
            temperature: common.temperature,
            images: common.images,
            tools: None,
            response_format: None,
        })
    }
}

/// What every generative (LLM) kind holds: where to send, which model, the output cap
/// and the prompts to rotate.
pub(crate) struct Generation {
    pub endpoint: Endpoint,
    pub model: String,
    pub max_tokens: u32,
    temperature: Temperature,
    pub prompts: PromptSet,
    pub images: Option<ImageSet>,
    pub tools: Option<ToolSpec>,
    pub response_format: Option<ResponseFormat>,
}

impl Generation {
    pub fn build(
        config: &Arc<ProbeConfig>,
        spec: &GenerationSpec,
        cx: &BuildContext,
        base_headers: super::endpoint::BaseHeaders,
    ) -> Result<Self, BuildError> {
        Ok(Generation {
            endpoint: Endpoint::build(config, &cx.roots, base_headers)?,
            model: config.model.clone().unwrap_or_default(),
            max_tokens: spec.max_tokens,
            temperature: spec.temperature,
            prompts: PromptSet::new(&spec.prompts),
            images: spec
                .images
                .as_ref()
                .map(|images| ImageSet::build(images, &cx.images))
                .transpose()?,
            tools: spec.tools.clone(),
            response_format: spec.response_format.clone(),
        })
    }

    /// 0 where the answer is checked (a canary, a prompt's own `expect`, a tool call, a
    /// schema): a check must not depend on sampling. `None` keeps the server's default.
    pub fn temperature(&self, prompt: &Prompt) -> Option<f32> {
        match self.temperature {
            Temperature::Fixed(t) => Some(t),
            Temperature::Server => None,
            Temperature::ForChecks => {
                let checked =
                    prompt.deterministic() || self.tools.is_some() || self.response_format.is_some();
                checked.then_some(0.0)
            }
        }
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
    ///
    /// With `next_turn` (a kind with tools) and a `tool_result` configured, a valid tool
    /// call is answered: `next_turn` writes the conversation with the call and its result,
    /// and the answer to that is the one the answer checks judge (see [`Generation::answer_the_call`]).
    pub async fn run(
        &self,
        limits: &RunLimits,
        body: Bytes,
        (prompt, images): (&Prompt, &[Arc<Image>]),
        protocol: &Protocol,
        mut parse: impl FnMut(&Event) -> Result<EventFacts, Failure>,
        next_turn: Option<&NextTurn<'_>>,
    ) -> Observation {
        let cx = &limits.start();
        let mut obs = Observation::new(cx.start);
        obs.prompt_bucket = prompt.bucket.as_str();
        obs.image_bucket = bucket_of(images);
        let Some((streamed, body_end)) = self
            .exchange(body, cx, &mut obs, protocol, &prompt.text, &mut parse)
            .await
        else {
            return obs;
        };
        obs.finish_reason = streamed.finish_reason.clone();
        let expect = self.endpoint.expect();
        let answer_next = next_turn.zip(self.tools.as_ref().and_then(|t| t.result.as_deref()));
        // With a next turn, `expect` judges the final answer; the call only has to be there
        // (and be valid).
        let call_only = Expect {
            non_empty: expect.non_empty,
            min_output_tokens: expect.min_output_tokens,
            ..Expect::default()
        };
        // Without one, the call is the answer: the text checks have nothing to judge.
        let call_is_answer = self.tools.is_some();
        let (first_expect, first_text) = match call_is_answer {
            true => (&call_only, ""),
            false => (expect, streamed.text.as_str()),
        };
        obs.result = check_complete(protocol, &streamed, body_end)
            .and_then(|()| {
                check_output(
                    first_expect,
                    first_text,
                    streamed.content_events > 0,
                    obs.output_tokens,
                    FailureReason::WrongAnswer,
                )
            })
            .and_then(|()| check_finish_reason(first_expect, streamed.finish_reason.as_deref()))
            .and_then(|()| check_model(expect, &self.model, streamed.model.as_deref()))
            .and_then(|()| match &self.tools {
                Some(tools) => check_tool_calls(tools, &streamed.tool_calls, &streamed.text),
                None => Ok(()),
            });
        match answer_next {
            Some((write, result)) if obs.result.is_ok() => {
                let call = self.called(&streamed);
                let body = write(call, result);
                self.answer_the_call(body, cx, &mut obs, (prompt, protocol), &mut parse)
                    .await;
            }
            Some(_) => {}
            None if call_is_answer => {}
            None => {
                obs.result = obs
                    .result
                    .and_then(|()| self.check_answer(prompt, &streamed, obs.output_tokens))
            }
        }
        self.endpoint.redact(&mut obs);
        obs
    }

    /// The answer checks of a final answer: the answer's format, the prompt's own check
    /// and the probe's answer keys.
    fn check_answer(
        &self,
        prompt: &Prompt,
        streamed: &Streamed,
        output_tokens: Option<u64>,
    ) -> Result<(), Failure> {
        if let Some(schema) = self.response_format.as_ref().and_then(ResponseFormat::schema) {
            check_schema(schema, &streamed.text).map_err(|what| {
                Failure::new(
                    FailureReason::WrongAnswer,
                    format!("{what}, with the schema asked for in response_format"),
                )
            })?;
        }
        let answered = Answered {
            text: &streamed.text,
            finish_reason: streamed.finish_reason.as_deref(),
            max_tokens: self.max_tokens,
            output_tokens,
        };
        check_answer(prompt, self.endpoint.expect(), answered)
    }

    /// The call the next turn answers: the expected tool's, else the first.
    fn called<'a>(&self, streamed: &'a Streamed) -> &'a Call {
        let expected = self.tools.as_ref().and_then(|t| t.expected.as_deref());
        let mut calls = streamed.tool_calls.calls();
        let first = calls.next().expect("checked: a call was made");
        std::iter::once(first)
            .chain(calls)
            .find(|c| Some(c.name.as_str()) == expected)
            .unwrap_or(first)
    }

    /// The next turn: the tool's result sent back, its answer read and judged. Where a
    /// broken chat template shows: a 400, an empty or senseless answer after a call. The
    /// run's phases, TTFT and gaps stay the first turn's; its end is the final answer's, so
    /// `total` is the whole exchange as an agent's user waits for it; tokens are both
    /// turns' (what the run costs), and TPOT keeps the first turn's count.
    async fn answer_the_call(
        &self,
        body: Bytes,
        cx: &RunContext,
        obs: &mut Observation,
        (prompt, protocol): (&Prompt, &Protocol),
        parse: &mut impl FnMut(&Event) -> Result<EventFacts, Failure>,
    ) {
        let start = Instant::now();
        let mut turn = Observation::new(start);
        let turn_cx = RunContext {
            start,
            deadline: cx.deadline,
            first_token_deadline: cx.deadline,
            trace: cx.trace,
        };
        let first_tokens = obs.output_tokens;
        let exchanged = self
            .exchange(body, &turn_cx, &mut turn, protocol, "", parse)
            .await;
        obs.bytes_received += turn.bytes_received;
        obs.turn_tokens = first_tokens;
        obs.output_tokens = sum(obs.output_tokens, turn.output_tokens);
        obs.input_tokens = sum(obs.input_tokens, turn.input_tokens);
        obs.marks.end = turn.marks.end;
        let next = |f: Failure| {
            Failure::new(
                f.reason,
                format!("the next turn (the tool's result sent back): {}", f.message),
            )
        };
        let Some((streamed, body_end)) = exchanged else {
            obs.marks.end = None;
            obs.result = turn.result.map_err(next);
            return;
        };
        obs.finish_reason = streamed.finish_reason.clone();
        let (ttft, total) = (turn.ttft(), turn.total());
        let took = |d: Option<std::time::Duration>| d.map_or("-".to_owned(), |d| format!("{:.0?}", d));
        let note = format!(
            "the next turn answered with its first token after {} and in full after {}",
            took(ttft),
            took(total)
        );
        obs.note = Some(match obs.note.take() {
            Some(n) => format!("{n}; {note}"),
            None => note,
        });
        obs.result = check_complete(protocol, &streamed, body_end)
            .and_then(|()| {
                if streamed.text.trim().is_empty() && !streamed.tool_calls.is_empty() {
                    return Err(Failure::new(
                        FailureReason::InvalidToolCall,
                        "it called a tool again instead of answering",
                    ));
                }
                check_output(
                    self.endpoint.expect(),
                    &streamed.text,
                    !streamed.text.trim().is_empty(),
                    turn.output_tokens,
                    FailureReason::WrongAnswer,
                )
            })
            .and_then(|()| check_finish_reason(self.endpoint.expect(), streamed.finish_reason.as_deref()))
            .and_then(|()| self.check_answer(prompt, &streamed, turn.output_tokens))
            .map_err(next);
    }

    /// Sends `body` and reads the stream to its end: the response head and content type,
    /// the events, and the end of the HTTP body (outside the measured total).
    async fn exchange(
        &self,
        body: Bytes,
        cx: &RunContext,
        obs: &mut Observation,
        protocol: &Protocol,
        prompt_text: &str,
        parse: &mut impl FnMut(&Event) -> Result<EventFacts, Failure>,
    ) -> Option<(Streamed, Result<(), BodyError>)> {
        let request = self.endpoint.request(&http::Method::POST, body);
        let mut response = self
            .endpoint
            .open(
                request,
                cx,
                obs,
                cx.first_token_deadline,
                FailureReason::TimeoutFirstToken,
            )
            .await?;
        if !check_content_type(&response, protocol.framing.content_type(), obs) {
            return None;
        }
        // The server took the prompt: it counts from here, even if the stream breaks. Our
        // estimate until the server's own count arrives (read_events replaces it).
        (obs.input_tokens, obs.input_token_source) = (
            Some(estimate_input_tokens(prompt_text)),
            Some(TokenSource::Estimated),
        );
        let streamed = read_events(
            &mut response.body,
            protocol,
            cx,
            obs,
            self.endpoint.redactor(),
            &mut *parse,
        )
        .await?;
        // The answer is complete only if its HTTP message is: read on to the end of the
        // body, outside the measured total (the end mark is already the terminator).
        let grace = cx.deadline.min(tokio::time::Instant::now() + BODY_END_GRACE);
        let body_end = response.body.finish(grace).await;
        obs.bytes_received = response.body.received();
        Some((streamed, body_end))
    }
}

/// What writes a kind's next turn: the conversation with the model's call and the tool's
/// result (the JSON text configured as `tool_result`).
pub(crate) type NextTurn<'a> = dyn Fn(&Call, &str) -> Bytes + Sync + 'a;

fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
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

/// The request headers of a kind that posts JSON and reads its answer as server-sent
/// events (OpenAI's three, TGI, llama.cpp): one list, the `accept` matching what the
/// driver checks the response's content type against.
pub(crate) static JSON_IN_SSE_OUT: [(http::HeaderName, &str); 2] = [
    (http::header::CONTENT_TYPE, "application/json"),
    (http::header::ACCEPT, "text/event-stream"),
];

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
    /// Input (prompt) tokens the server reported: the whole prompt, cached part included.
    pub input_tokens: Option<u64>,
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
    /// Pieces of tool calls (each also makes `other_output`).
    pub tool_calls: Vec<ToolCallDelta>,
    /// The response's `system_fingerprint` (OpenAI's chunks; llama.cpp's build).
    pub fingerprint: Option<String>,
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
    /// The tool calls, put together.
    pub tool_calls: ToolCalls,
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
            if let Some(n) = facts.input_tokens {
                (obs.input_tokens, obs.input_token_source) = (Some(n), Some(TokenSource::Usage));
            }
            if facts.finish_reason.is_some() {
                out.finish_reason = facts.finish_reason;
            }
            out.refused |= facts.refusal;
            for delta in facts.tool_calls {
                out.tool_calls.push(delta);
            }
            obs.server_reported.extend(facts.server_reported);
            if out.model.is_none() {
                out.model = facts.model;
                obs.served.model = out.model.as_deref().map(super::identity::clean);
            }
            if obs.served.fingerprint.is_none() {
                obs.served.fingerprint = facts.fingerprint.as_deref().map(super::identity::clean);
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

/// Input tokens estimated from the prompt we sent, for servers that do not report them:
/// about four characters a token ([`crate::payload::estimate_tokens`]), images not
/// counted. An estimate, flagged as [`TokenSource::Estimated`] wherever it is shown.
pub(crate) fn estimate_input_tokens(prompt: &str) -> u64 {
    crate::payload::estimate_tokens(prompt) as u64
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

#[cfg(test)]
mod tests;
