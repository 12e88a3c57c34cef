//! `tgi`: Hugging Face text-generation-inference, `POST /generate_stream` (SSE).
//!
//! Wire facts (../shared/reference/llm-protocols.md §6): one `data:` event per token with
//! `token.text` (`token.special` marks tokens such as EOS that are not part of the
//! answer); the last event has non-null `details` (with `generated_tokens`) and
//! `generated_text`, and there is no `[DONE]`; a mid-stream error is
//! `data: {"error": "...", "error_type": "..."}`.
//!
//! The whole kind is here: its config `Spec` and the `check` of its keys, the probe
//! (`build`, the request, `run`), the response parser, and its tests; kinds.rs lists
//! it. Imports config, outcome, framing and generation.rs (the streaming driver).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::framing::Event;
use super::generation::{
    EventFacts, Framing, Generation, GenerationSpec, JSON_IN_SSE_OUT, Protocol, normalize_finish_reason,
};
use super::{BuildContext, BuildError};
use super::{Probe, RunLimits};
use crate::config::{Diagnostics, KindKeys, ProbeConfig};
use crate::outcome::{Failure, FailureReason, Observation};

/// `tgi` takes the keys every LLM kind takes (prompts, `max_tokens`, images), and no
/// others.
pub type Spec = GenerationSpec;

/// An LLM kind with no keys of its own: its prompts, `max_tokens` and images are
/// every probe's keys, checked before.
pub(crate) use crate::config::NoKeys as Keys;

pub(crate) fn check(_: &mut Diagnostics, keys: KindKeys<'_, Keys>) -> Option<Spec> {
    GenerationSpec::from_common(keys.common)
}

pub struct TgiProbe {
    generation: Generation,
}

impl TgiProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        Ok(TgiProbe {
            generation: Generation::build(config, spec, cx, &JSON_IN_SSE_OUT)?,
        })
    }
}

impl Probe for TgiProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let (prompt, images) = self.generation.next_input();
        let body = serde_json::to_vec(&Request {
            inputs: &prompt.text,
            parameters: Parameters {
                max_new_tokens: self.generation.max_tokens,
                details: true,
            },
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

/// No `[DONE]`: the last event, with `details` (asked for) and `generated_text`, ends the
/// stream and says why (`details.finish_reason`).
const PROTOCOL: Protocol = Protocol {
    framing: Framing::Sse,
    terminator: "the final event with details",
    finish: None,
};

#[derive(Serialize)]
struct Request<'a> {
    inputs: &'a str,
    parameters: Parameters,
}

#[derive(Serialize)]
struct Parameters {
    max_new_tokens: u32,
    details: bool,
}

#[derive(Deserialize)]
struct StreamEvent {
    token: Option<Token>,
    generated_text: Option<String>,
    details: Option<Details>,
    error: Option<String>,
    error_type: Option<String>,
}

#[derive(Deserialize)]
struct Token {
    text: String,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize)]
struct Details {
    generated_tokens: Option<u64>,
    /// The prompt's tokens (TGI 2.x and later).
    input_length: Option<u64>,
    /// `length`, `eos_token`, `stop_sequence`.
    finish_reason: Option<String>,
}

pub(crate) fn parse_event(event: &Event) -> Result<EventFacts, Failure> {
    if event.data.trim().is_empty() {
        return Ok(EventFacts::default());
    }
    let e: StreamEvent = serde_json::from_str(&event.data).map_err(|err| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "stream event is not a TGI token ({err}): {}",
                super::preview(&event.data)
            ),
        )
    })?;
    if let Some(message) = e.error {
        let kind = e.error_type.map(|t| format!(" ({t})")).unwrap_or_default();
        return Err(Failure::new(
            FailureReason::StreamError,
            format!("in-band error{kind}: {message}"),
        ));
    }
    let Some(token) = e.token else {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            format!("stream event has no token: {}", super::preview(&event.data)),
        ));
    };
    let done = e.details.is_some() || e.generated_text.is_some();
    let (output_tokens, input_tokens, finish_reason) = match e.details {
        Some(d) => (
            d.generated_tokens,
            d.input_length,
            d.finish_reason.as_deref().and_then(normalize_finish_reason),
        ),
        None => (None, None, None),
    };
    Ok(EventFacts {
        text: if token.special { String::new() } else { token.text },
        output_tokens,
        input_tokens,
        done,
        finish_reason,
        ..EventFacts::default()
    })
}

// The simulator's side of this protocol.

/// What `inferprobe simulate` writes on `/generate_stream`: the events the parser above
/// reads.
pub(crate) mod simulator {
    use std::time::Duration;

    use serde_json::json;

    use crate::probe::dialect::{Dialect, Reply, Stop};

    /// `POST /generate_stream`.
    pub struct GenerateStream;

    impl Dialect for GenerateStream {
        fn route(&self) -> &'static str {
            "/generate_stream"
        }

        fn max_tokens_at(&self) -> &'static str {
            "/parameters/max_new_tokens"
        }

        /// The last token carries the details.
        fn token(&self, reply: &Reply, i: u32, n: u32, word: &str) -> String {
            let last = i + 1 == n;
            let reason = if reply.stop == Stop::Limit {
                "length"
            } else {
                "eos_token"
            };
            let details = last.then(
                || json!({"finish_reason": reason, "generated_tokens": n, "input_length": 24, "seed": null}),
            );
            let text = last.then_some("(the whole answer)");
            reply.frame(
                None,
                &json!({"index": i + 1, "token": {"id": 1000 + i, "text": word, "logprob": -0.5, "special": false}, "generated_text": text, "details": details}),
            )
        }

        /// The last token event carried the details; the body just ends.
        fn finish(&self, _reply: &Reply, _n: u32, _elapsed: Duration) -> Vec<String> {
            vec![]
        }

        fn in_band_error(&self, reply: &Reply) -> Vec<String> {
            let message = "simulated engine failure mid-stream";
            vec![reply.frame(None, &json!({"error": message, "error_type": "generation"}))]
        }

        /// TGI always sends a last token: here only the special end-of-sequence one.
        fn empty_end(&self, reply: &Reply) -> Vec<String> {
            vec![reply.frame(
                None,
                &json!({"index": 1, "token": {"id": 2, "text": "</s>", "logprob": -0.1, "special": true}, "generated_text": "",
                    "details": {"finish_reason": "eos_token", "generated_tokens": 1, "input_length": 24, "seed": null}}),
            )]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(s: &str) -> Result<EventFacts, Failure> {
        parse_event(&Event {
            data: s.to_owned(),
            ..Event::default()
        })
    }

    #[test]
    fn tokens_special_tokens_and_the_final_event() {
        let f = event(r#"{"index":1,"token":{"id":3681,"text":" Red","logprob":-0.3,"special":false},"generated_text":null,"details":null}"#).unwrap();
        assert_eq!((f.text.as_str(), f.done), (" Red", false));
        let f = event(r#"{"index":2,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":" Red","details":{"finish_reason":"eos_token","generated_tokens":2,"input_length":12,"seed":null}}"#).unwrap();
        assert!(f.text.is_empty() && f.done);
        assert_eq!(f.output_tokens, Some(2));
        assert_eq!(f.input_tokens, Some(12));
        assert_eq!(f.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn in_band_error() {
        let f = event(r#"{"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"}"#).unwrap_err();
        assert_eq!(f.reason, FailureReason::StreamError);
        assert!(f.message.contains("(generation)") && f.message.contains("CUDA out of memory"));
    }

    #[test]
    fn shapes_that_are_not_tgi() {
        for s in ["{", r#"{"choices":[]}"#] {
            assert_eq!(
                event(s).unwrap_err().reason,
                FailureReason::InvalidResponse,
                "{s}"
            );
        }
    }
}
