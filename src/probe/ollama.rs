//! `ollama`: Ollama's native API, `POST /api/chat` or `POST /api/generate` (chosen by
//! the URL's path), streamed as newline-delimited JSON.
//!
//! Wire facts (../shared/reference/llm-protocols.md §5): text in `message.content` (chat)
//! or `response` (generate); the last line has `"done": true`, `eval_count` (output
//! tokens) and the server's own durations in nanoseconds, which we export apart from our
//! measurements. A mid-stream error is a line `{"error": "..."}` with no `done` field: a
//! parser waiting for `done` would hang, so every line is checked for it first.
//!
//! The whole kind is here: its config `Spec` and the `check` of its keys, the probe
//! (`build`, the request, `run`), the response parser, and its tests; kinds.rs lists
//! it. Imports config, outcome, payload, framing and generation.rs (the streaming driver).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::framing::Event;
use super::generation::NextTurn;
use super::generation::{EventFacts, Framing, Generation, GenerationSpec, Protocol, normalize_finish_reason};
use super::tools::{self, Call, Tool, ToolCallDelta};
use super::{BuildContext, BuildError};
use super::{Probe, RunLimits};
use crate::config::{Diagnostics, KindKeys, ProbeConfig};
use crate::outcome::{Failure, FailureReason, Observation};
use crate::payload::Prompt;
use crate::payload::images::Image;

/// `ollama` takes the keys every LLM kind takes (prompts, `max_tokens`, images), and
/// tools (on /api/chat).
pub type Spec = GenerationSpec;

/// `tools` (sent as OpenAI writes them) and `tool_call`.
pub(crate) use super::tools::ToolKeys as Keys;

pub(crate) fn check(cx: &mut Diagnostics, keys: KindKeys<'_, Keys>) -> Option<Spec> {
    let generate = keys.common.url.is_some_and(|u| is_generate(u.path()));
    if generate && keys.own.tools.is_some() {
        keys.error(
            cx,
            "tools",
            "only on /api/chat: /api/generate takes a bare prompt",
        );
        return None;
    }
    tools::check_tool_keys(cx, keys)
}

/// `/api/generate` (a bare prompt) rather than `/api/chat` (messages).
fn is_generate(path: &str) -> bool {
    path.trim_end_matches('/').ends_with("/api/generate")
}

pub struct OllamaProbe {
    generation: Generation,
    /// `/api/generate` (a bare prompt) rather than `/api/chat` (messages).
    generate: bool,
}

impl OllamaProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        Ok(OllamaProbe {
            generation: Generation::build(
                config,
                spec,
                cx,
                &[(http::header::CONTENT_TYPE, "application/json")],
            )?,
            generate: is_generate(config.url.path()),
        })
    }

    fn request_body(&self, prompt: &Prompt, images: &[Arc<Image>]) -> Bytes {
        let g = &self.generation;
        // Ollama takes raw base64, without a data: prefix.
        let images: Vec<&str> = images.iter().map(|i| &*i.base64).collect();
        let options = Options {
            num_predict: g.max_tokens,
            temperature: g.temperature(prompt),
        };
        let prompt = &*prompt.text;
        let body = if self.generate {
            serde_json::to_vec(&GenerateRequest {
                model: &g.model,
                prompt,
                images,
                stream: true,
                options,
            })
        } else {
            serde_json::to_vec(&ChatRequest {
                model: &g.model,
                messages: [Message {
                    role: "user",
                    content: prompt,
                    images,
                }],
                tools: g
                    .tools
                    .as_ref()
                    .map(|t| t.tools.iter().map(Tool::openai_json).collect()),
                stream: true,
                options,
            })
        };
        Bytes::from(body.expect("plain structs serialize"))
    }
}

impl Probe for OllamaProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let (prompt, images) = self.generation.next_input();
        let body = self.request_body(prompt, &images);
        let next = |call: &Call, result: &str| self.next_turn(prompt, call, result);
        let next: Option<&NextTurn<'_>> = (!self.generate).then_some(&next);
        self.generation
            .run(limits, body, (prompt, &images), &PROTOCOL, parse_line, next)
            .await
    }
}

impl OllamaProbe {
    /// The messages after a tool call: the question, the assistant's call (arguments as
    /// an object), and the `tool` message with the result (the text only: images are not
    /// sent again).
    fn next_turn(&self, prompt: &Prompt, call: &Call, result: &str) -> Bytes {
        let g = &self.generation;
        let body = serde_json::json!({
            "model": g.model,
            "messages": [
                {"role": "user", "content": &*prompt.text},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": call.name, "arguments": call.arguments_value()}},
                ]},
                {"role": "tool", "content": result, "tool_name": call.name},
            ],
            "tools": g.tools.as_ref().map(|t| t.tools.iter().map(Tool::openai_json).collect::<Vec<_>>()),
            "stream": true,
            "options": Options {
                num_predict: g.max_tokens,
                temperature: g.temperature(prompt),
            },
        });
        Bytes::from(body.to_string())
    }
}

/// The `done: true` line ends the stream and says why (`done_reason`, where sent).
const PROTOCOL: Protocol = Protocol {
    framing: Framing::Ndjson,
    terminator: "the final line with \"done\": true",
    finish: None,
};

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: [Message<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<serde_json::Value>>,
    stream: bool,
    options: Options,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    images: Vec<&'a str>,
}

#[derive(Serialize)]
struct GenerateRequest<'a> {
    model: &'a str,
    prompt: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    images: Vec<&'a str>,
    stream: bool,
    options: Options,
}

#[derive(Serialize, Clone, Copy)]
struct Options {
    num_predict: u32,
    /// 0 for a prompt whose answer is checked; else the model's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

#[derive(Deserialize)]
struct Line {
    model: Option<String>,
    error: Option<serde_json::Value>,
    done: Option<bool>,
    /// On the final line: `stop`, `length`, `load`, `unload`.
    done_reason: Option<String>,
    /// /api/generate
    response: Option<String>,
    /// /api/chat
    message: Option<LineMessage>,
    /// Reasoning models (generate).
    thinking: Option<String>,
    eval_count: Option<u64>,
    total_duration: Option<u64>,
    load_duration: Option<u64>,
    /// The prompt's tokens; Ollama leaves it out when the whole prompt came from its cache.
    prompt_eval_count: Option<u64>,
    prompt_eval_duration: Option<u64>,
    eval_duration: Option<u64>,
}

#[derive(Deserialize)]
struct LineMessage {
    content: Option<String>,
    thinking: Option<String>,
    tool_calls: Option<Vec<ToolCallLine>>,
}

/// One call, whole: Ollama sends each call's arguments as a JSON object in one line.
#[derive(Deserialize)]
struct ToolCallLine {
    id: Option<String>,
    function: Option<FunctionLine>,
}

#[derive(Deserialize)]
struct FunctionLine {
    name: Option<String>,
    /// An object (Ollama), or JSON text (what an OpenAI-minded proxy might write).
    arguments: Option<serde_json::Value>,
    /// Newer releases number the calls.
    index: Option<u64>,
}

/// Reads one NDJSON line of an Ollama stream.
pub(crate) fn parse_line(event: &Event) -> Result<EventFacts, Failure> {
    let line: Line = serde_json::from_str(&event.data).map_err(|e| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "stream line is not an Ollama object ({e}): {}",
                super::preview(&event.data)
            ),
        )
    })?;
    if let Some(err) = line.error.filter(|e| !e.is_null()) {
        let message = err.as_str().map(str::to_owned).unwrap_or_else(|| err.to_string());
        return Err(Failure::new(
            FailureReason::StreamError,
            format!("in-band error: {message}"),
        ));
    }
    let Some(done) = line.done else {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            format!("stream line has no `done` field: {}", super::preview(&event.data)),
        ));
    };
    let nonempty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    let mut facts = EventFacts {
        done,
        model: line.model,
        ..EventFacts::default()
    };
    if let Some(text) = &line.response {
        facts.text.push_str(text);
    }
    facts.other_output |= nonempty(&line.thinking);
    if let Some(m) = &line.message {
        if let Some(text) = &m.content {
            facts.text.push_str(text);
        }
        for call in m.tool_calls.iter().flatten() {
            let function = call.function.as_ref();
            let arguments = match function.and_then(|f| f.arguments.as_ref()) {
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            facts.tool_calls.push(ToolCallDelta {
                index: function.and_then(|f| f.index),
                item: None,
                id: call.id.clone(),
                name: Some(function.and_then(|f| f.name.clone()).unwrap_or_default()),
                arguments,
                whole: true,
            });
        }
        facts.other_output |= nonempty(&m.thinking) || !facts.tool_calls.is_empty();
    }
    if done {
        facts.output_tokens = line.eval_count;
        facts.input_tokens = line.prompt_eval_count;
        facts.finish_reason = line.done_reason.as_deref().and_then(normalize_finish_reason);
        for (stage, ns) in [
            ("total", line.total_duration),
            ("load", line.load_duration),
            ("prompt_eval", line.prompt_eval_duration),
            ("eval", line.eval_duration),
        ] {
            if let Some(ns) = ns {
                facts.server_reported.push((stage, Duration::from_nanos(ns)));
            }
        }
    }
    Ok(facts)
}

// The simulator's side of this protocol.

/// What `inferprobe simulate` writes on `/api/chat` and `/api/generate`: the JSON lines the
/// parser above reads, the last one with the durations Ollama reports about itself.
pub(crate) mod simulator {
    use std::time::Duration;

    use serde_json::json;

    use crate::probe::dialect::{Dialect, Reply, Stop};

    /// `POST /api/chat`.
    pub struct Chat;
    /// `POST /api/generate`.
    pub struct Generate;

    impl Dialect for Chat {
        fn route(&self) -> &'static str {
            "/api/chat"
        }

        fn ndjson(&self) -> bool {
            true
        }

        fn max_tokens_at(&self) -> &'static str {
            "/options/num_predict"
        }

        fn token(&self, reply: &Reply, _i: u32, _n: u32, word: &str) -> String {
            reply.frame(
                None,
                &json!({"model": reply.model, "created_at": "2026-01-01T00:00:00Z", "message": {"role": "assistant", "content": word}, "done": false}),
            )
        }

        fn finish(&self, reply: &Reply, n: u32, elapsed: Duration) -> Vec<String> {
            let mut done = done(reply, n, elapsed);
            done["message"] = json!({"role": "assistant", "content": ""});
            vec![reply.frame(None, &done)]
        }

        /// The call whole in one line, its arguments an object.
        fn tool_call(&self, reply: &Reply, name: &str, pieces: &[String]) -> Vec<String> {
            let arguments: serde_json::Value = serde_json::from_str(&pieces.concat()).unwrap_or_default();
            vec![reply.frame(
                None,
                &json!({"model": reply.model, "created_at": "2026-01-01T00:00:00Z", "message": {"role": "assistant", "content": "",
                    "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}, "done": false}),
            )]
        }

        fn in_band_error(&self, reply: &Reply) -> Vec<String> {
            in_band_error(reply)
        }
    }

    impl Dialect for Generate {
        fn route(&self) -> &'static str {
            "/api/generate"
        }

        fn ndjson(&self) -> bool {
            true
        }

        fn max_tokens_at(&self) -> &'static str {
            "/options/num_predict"
        }

        fn token(&self, reply: &Reply, _i: u32, _n: u32, word: &str) -> String {
            reply.frame(
                None,
                &json!({"model": reply.model, "created_at": "2026-01-01T00:00:00Z", "response": word, "done": false}),
            )
        }

        fn finish(&self, reply: &Reply, n: u32, elapsed: Duration) -> Vec<String> {
            let mut done = done(reply, n, elapsed);
            done["response"] = json!("");
            vec![reply.frame(None, &done)]
        }

        fn in_band_error(&self, reply: &Reply) -> Vec<String> {
            in_band_error(reply)
        }
    }

    /// The last line after `n` tokens, without its empty message or response.
    fn done(reply: &Reply, n: u32, elapsed: Duration) -> serde_json::Value {
        let ns = elapsed.as_nanos() as u64;
        // Ollama ends a tool call's answer with `stop`.
        let reason = if reply.stop == Stop::Limit {
            "length"
        } else {
            "stop"
        };
        json!({"model": reply.model, "created_at": "2026-01-01T00:00:01Z", "done": true, "done_reason": reason,
            "total_duration": ns, "load_duration": reply.load.as_nanos().max(1_000_000) as u64, "prompt_eval_count": 24, "prompt_eval_duration": ns / 4,
            "eval_count": n, "eval_duration": ns / 2})
    }

    fn in_band_error(reply: &Reply) -> Vec<String> {
        vec![reply.frame(None, &json!({"error": "simulated engine failure mid-stream"}))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Result<EventFacts, Failure> {
        parse_line(&Event {
            data: s.to_owned(),
            ..Event::default()
        })
    }

    #[test]
    fn generate_and_chat_lines() {
        let f =
            line(r#"{"model":"llava","created_at":"2025-01-01T00:00:00.1Z","response":" red","done":false}"#)
                .unwrap();
        assert_eq!((f.text.as_str(), f.done), (" red", false));
        let f = line(r#"{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}"#).unwrap();
        assert_eq!(f.text, "Hi");
    }

    #[test]
    fn the_final_line_carries_tokens_and_server_durations() {
        let f = line(r#"{"model":"llava","response":"","done":true,"done_reason":"stop","total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":26,"prompt_eval_duration":342546000,"eval_count":282,"eval_duration":4535599000}"#).unwrap();
        assert!(f.done);
        assert_eq!(f.finish_reason.as_deref(), Some("stop"));
        assert_eq!(f.output_tokens, Some(282));
        assert_eq!(f.input_tokens, Some(26));
        assert_eq!(
            f.server_reported[0],
            ("total", Duration::from_nanos(4_883_583_458))
        );
        assert_eq!(f.server_reported.len(), 4);
    }

    #[test]
    fn done_reason_is_optional_and_only_on_the_final_line() {
        let f =
            line(r#"{"model":"m","response":"","done":true,"done_reason":"length","eval_count":7}"#).unwrap();
        assert_eq!(f.finish_reason.as_deref(), Some("length"));
        // Older servers send no done_reason: the done line is the signal on its own.
        let f = line(r#"{"model":"m","response":"","done":true,"eval_count":7}"#).unwrap();
        assert!(f.done && f.finish_reason.is_none());
    }

    #[test]
    fn an_error_line_fails_even_without_done() {
        let f = line(r#"{"error":"an error was encountered while running the model"}"#).unwrap_err();
        assert_eq!(f.reason, FailureReason::StreamError);
        assert!(f.message.contains("while running the model"));
    }

    #[test]
    fn lines_that_are_not_ollama_objects_are_invalid() {
        for s in ["not json", r#"{"response":"x"}"#, "[1,2]"] {
            assert_eq!(line(s).unwrap_err().reason, FailureReason::InvalidResponse, "{s}");
        }
    }

    #[test]
    fn thinking_counts_as_output() {
        let f =
            line(r#"{"message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}"#).unwrap();
        assert!(f.other_output && f.text.is_empty());
    }
}
