//! `llamacpp`: llama.cpp's own server, its native `POST /completion` (SSE), which many
//! deployments call instead of the OpenAI-compatible routes (it is what llama.cpp's web
//! UI and several clients use).
//!
//! Wire facts (../shared/reference/llm-protocols.md §4.2, and our own capture in
//! tests/transcripts/llama-server-tiny-native-completion-stream.txt): one `data:` event per
//! piece of text, `{"content": "...", "stop": false, "tokens_predicted": N, ...}`; the last
//! event has `"stop": true`, `stop_type` (`eos`, `word`: a natural end; `limit`: the
//! `n_predict` cap), `tokens_predicted` and the server's `timings`; there is no `[DONE]`
//! on native routes. An error after the stream started comes in llama.cpp's non-standard
//! `error:` SSE field.
//!
//! The whole kind is here: its config `Spec` and the `check` of its keys, the probe
//! (`build`, the request, `run`), the response parser, the simulator's side of the
//! protocol, and its tests; kinds.rs lists it. Imports config, outcome, framing and
//! generation.rs (the streaming driver).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::endpoint::{in_band_error, json_error_message};
use super::framing::Event;
use super::generation::{
    EventFacts, Framing, Generation, GenerationSpec, JSON_IN_SSE_OUT, Protocol, normalize_finish_reason,
};
use super::{BuildContext, BuildError};
use super::{Probe, RunLimits};
use crate::config::{Diagnostics, KindKeys, ProbeConfig};
use crate::outcome::{Failure, FailureReason, Observation};

/// `llamacpp` takes the keys every LLM kind takes (prompts, `max_tokens`), and no others.
pub type Spec = GenerationSpec;

/// An LLM kind with no keys of its own: its prompts, `max_tokens` and images are
/// every probe's keys, checked before.
pub(crate) use crate::config::NoKeys as Keys;

pub(crate) fn check(_: &mut Diagnostics, keys: KindKeys<'_, Keys>) -> Option<Spec> {
    GenerationSpec::from_common(keys.common)
}

pub struct LlamaCppProbe {
    generation: Generation,
}

impl LlamaCppProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        Ok(LlamaCppProbe {
            generation: Generation::build(config, spec, cx, &JSON_IN_SSE_OUT)?,
        })
    }
}

impl Probe for LlamaCppProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let (prompt, images) = self.generation.next_input();
        let body = serde_json::to_vec(&Request {
            prompt: &prompt.text,
            n_predict: self.generation.max_tokens,
            temperature: self.generation.temperature(prompt),
            stream: true,
        })
        .expect("plain structs serialize");
        self.generation
            .run(
                limits,
                Bytes::from(body),
                (prompt, &images),
                &PROTOCOL,
                parse_event,
                None,
            )
            .await
    }
}

/// No `[DONE]`: the event with `"stop": true` ends the stream and says why.
const PROTOCOL: Protocol = Protocol {
    framing: Framing::Sse,
    terminator: "the final event with \"stop\": true",
    finish: None,
};

#[derive(Serialize)]
struct Request<'a> {
    prompt: &'a str,
    n_predict: u32,
    /// 0 for a prompt whose answer is checked; else the server's default (0.8).
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    stream: bool,
}

#[derive(Deserialize)]
struct StreamEvent {
    content: Option<String>,
    stop: Option<bool>,
    stop_type: Option<String>,
    tokens_predicted: Option<u64>,
    /// The prompt's tokens, cached ones included (`timings.prompt_n + cache_n`).
    tokens_evaluated: Option<u64>,
    model: Option<String>,
    timings: Option<Timings>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Timings {
    prompt_ms: Option<f64>,
    predicted_ms: Option<f64>,
}

pub(crate) fn parse_event(event: &Event) -> Result<EventFacts, Failure> {
    if let Some(raw) = &event.error {
        return Err(in_band_error(raw));
    }
    let data = event.data.trim();
    if data.is_empty() {
        return Ok(EventFacts::default());
    }
    let e: StreamEvent = serde_json::from_str(data).map_err(|err| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "stream event is not a llama.cpp completion event ({err}): {}",
                super::preview(data)
            ),
        )
    })?;
    if let Some(err) = e.error.filter(|e| !e.is_null()) {
        let message = json_error_message(&serde_json::json!({ "error": err })).unwrap_or_default();
        return Err(Failure::new(
            FailureReason::StreamError,
            format!("in-band error: {message}"),
        ));
    }
    let (Some(content), Some(done)) = (e.content, e.stop) else {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "stream event has no `content` and `stop`: {}",
                super::preview(data)
            ),
        ));
    };
    let mut facts = EventFacts {
        text: content,
        done,
        ..EventFacts::default()
    };
    if done {
        facts.output_tokens = e.tokens_predicted;
        facts.input_tokens = e.tokens_evaluated;
        facts.model = e.model;
        // `limit` is the n_predict cap; `word` a stop word: a natural end, like `eos`.
        facts.finish_reason = match e.stop_type.as_deref() {
            Some("limit") => Some("length".to_owned()),
            Some("word") => Some("stop".to_owned()),
            Some(other) => normalize_finish_reason(other),
            None => None,
        };
        if let Some(t) = e.timings {
            for (stage, ms) in [("prompt_eval", t.prompt_ms), ("eval", t.predicted_ms)] {
                // A server's number: a negative or absurd one is dropped, not a panic.
                if let Some(d) = ms.and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok()) {
                    facts.server_reported.push((stage, d));
                }
            }
        }
    }
    Ok(facts)
}

// The simulator's side of this protocol.

/// What `inferprobe simulate` writes on `/completion`: the events the parser above reads,
/// in the shape of our capture of llama-server.
pub(crate) mod simulator {
    use std::time::Duration;

    use serde_json::json;

    use crate::probe::dialect::{Dialect, Reply, Stop};

    /// `POST /completion`.
    pub struct Completion;

    impl Dialect for Completion {
        fn route(&self) -> &'static str {
            "/completion"
        }

        fn max_tokens_at(&self) -> &'static str {
            "/n_predict"
        }

        fn token(&self, reply: &Reply, i: u32, _n: u32, word: &str) -> String {
            reply.frame(
                None,
                &json!({"index": 0, "content": word, "tokens": [1000 + i], "stop": false, "id_slot": -1,
                    "tokens_predicted": i + 1, "tokens_evaluated": 24}),
            )
        }

        /// The `stop: true` event: the count, why it stopped, and the server's timings.
        fn finish(&self, reply: &Reply, n: u32, elapsed: Duration) -> Vec<String> {
            let ms = elapsed.as_secs_f64() * 1000.0;
            vec![reply.frame(
                None,
                &json!({"index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": true, "model": reply.model,
                    "tokens_predicted": n, "tokens_evaluated": 24, "truncated": false, "stop_type": if reply.stop == Stop::Limit { "limit" } else { "eos" }, "stopping_word": "",
                    "timings": {"prompt_n": 24, "prompt_ms": ms / 4.0, "predicted_n": n, "predicted_ms": ms / 2.0}}),
            )]
        }

        /// llama.cpp's own `error:` field, not `data:`.
        fn in_band_error(&self, _reply: &Reply) -> Vec<String> {
            let error = json!({"code": 500, "message": "simulated engine failure mid-stream", "type": "server_error"});
            vec![format!("error: {error}\n\n")]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::framing::SseDecoder;

    fn events_of(transcript: &str) -> Vec<Event> {
        let body = crate::probe::framing::tests::transcript_body(transcript);
        SseDecoder::new(1 << 20).push(body.as_bytes()).unwrap()
    }

    fn event(data: &str) -> Result<EventFacts, Failure> {
        parse_event(&Event {
            data: data.to_owned(),
            ..Event::default()
        })
    }

    /// Our capture of llama-server's native stream: text in every event, the count and
    /// the reason (`limit`: n_predict reached) only in the last, which ends the stream.
    #[test]
    fn a_real_native_stream_reads_as_its_text_count_and_reason() {
        let events = events_of("llama-server-tiny-native-completion-stream.txt");
        let facts: Vec<EventFacts> = events.iter().map(|e| parse_event(e).unwrap()).collect();
        let (last, tokens) = facts.split_last().unwrap();
        assert!(tokens.iter().all(|f| !f.done && f.output_tokens.is_none()));
        assert!(tokens.iter().any(|f| !f.text.is_empty()));
        assert!(last.done);
        assert_eq!(last.output_tokens, Some(16));
        // 13 evaluated: 12 from the cache + 1 (timings' cache_n and prompt_n).
        assert_eq!(last.input_tokens, Some(13));
        assert_eq!(last.finish_reason.as_deref(), Some("length"));
        assert_eq!(last.model.as_deref(), Some("tiny-llama"));
        let stages: Vec<_> = last.server_reported.iter().map(|(s, _)| *s).collect();
        assert_eq!(stages, ["prompt_eval", "eval"]);
    }

    #[test]
    fn stop_types_read_as_the_common_finish_reasons() {
        for (stop_type, reason) in [
            ("eos", Some("stop")),
            ("word", Some("stop")),
            ("limit", Some("length")),
            ("none", Some("none")),
        ] {
            let f = event(&format!(
                r#"{{"content":"","stop":true,"stop_type":"{stop_type}","tokens_predicted":3}}"#
            ))
            .unwrap();
            assert_eq!(f.finish_reason.as_deref(), reason, "{stop_type}");
        }
    }

    /// An error after the stream started comes in llama.cpp's own `error:` field; a JSON
    /// `error` in a data event is one too.
    #[test]
    fn in_band_errors_in_both_places() {
        let f = parse_event(&Event {
            error: Some(r#"{"code":500,"message":"context shift failed","type":"server_error"}"#.to_owned()),
            ..Event::default()
        })
        .unwrap_err();
        assert_eq!(
            (f.reason, f.message.as_str()),
            (FailureReason::StreamError, "in-band error: context shift failed")
        );
        let f =
            event(r#"{"error":{"code":400,"message":"bad","type":"invalid_request_error"}}"#).unwrap_err();
        assert_eq!(f.reason, FailureReason::StreamError);
    }

    #[test]
    fn shapes_that_are_not_native_events() {
        for s in ["{", r#"{"choices":[]}"#, r#"{"content":"x"}"#, r#"{"stop":true}"#] {
            assert_eq!(
                event(s).unwrap_err().reason,
                FailureReason::InvalidResponse,
                "{s}"
            );
        }
    }

    /// Timings a server cannot mean (negative, infinite) are dropped, not a panic.
    #[test]
    fn absurd_timings_are_dropped() {
        let f = event(r#"{"content":"","stop":true,"stop_type":"eos","timings":{"prompt_ms":-1.0,"predicted_ms":1e300}}"#).unwrap();
        assert!(f.server_reported.is_empty());
    }
}
