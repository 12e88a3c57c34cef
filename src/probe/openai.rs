//! OpenAI-compatible streaming: `POST /v1/chat/completions` (`openai_chat`) and
//! `POST /v1/completions` (`openai_completions`), as vLLM, llama.cpp, TGI's Messages API,
//! Ollama's /v1 and hosted APIs serve them.
//!
//! Wire facts (../shared/reference/llm-protocols.md §1, §2, §4): `stream: true` with
//! `stream_options.include_usage` so the server reports its token count in a last chunk
//! (some servers, like llama-cpp-python, ignore it: we then count content events and say
//! so); the first chat chunk often carries only the role and must not stop the TTFT clock;
//! text is in `choices[].delta.content` (chat) or `choices[].text` (completions), reasoning
//! in `reasoning_content` / `reasoning`; `data: [DONE]` ends the stream; errors after the
//! stream started arrive in-band as `{"error": ...}` (vLLM), an `event: error`, or
//! llama.cpp's non-standard `error:` field.
//!
//! Two kinds in one file because they are one protocol: the same chunk, `usage`,
//! `timings`, in-band errors and `[DONE]`, one parser that differs only in where a
//! choice's text sits, one simulator chunk writer. The Responses API (`openai_responses`)
//! is OpenAI's too but streams named events: it is a kind of its own, in
//! openai_responses.rs.
//!
//! Both kinds are here: their config `Spec` and the `check` of their keys, the probe
//! (`build`, the request, `run`), the response parser, the simulator's side of the
//! protocol, and their tests; kinds.rs lists them. Imports config, outcome, payload,
//! framing, generation.rs (the streaming driver) and endpoint.rs.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::endpoint;
use super::framing::Event;
use super::generation::{
    EventFacts, Framing, Generation, GenerationSpec, JSON_IN_SSE_OUT, Protocol, normalize_finish_reason,
};
use super::structured::ResponseFormat;
use super::tools::{Call, Tool, ToolCallDelta};
use super::{BuildContext, BuildError};
use super::{Probe, RunLimits};
use crate::config::{Diagnostics, Kind, KindKeys, ProbeConfig};
use crate::outcome::{Failure, FailureReason, Observation};
use crate::payload::Prompt;
use crate::payload::images::{DataUrl, Image};

/// Which of the two APIs that stream chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Completions,
}

/// Both kinds take the keys every LLM kind takes (prompts, `max_tokens`,
/// images where [`Kind::takes_images`]); chat also tools and the answer's format.
pub type Spec = GenerationSpec;

/// openai_chat's: `tools`, `tool_call`, `response_format`.
pub(crate) use super::structured::AnswerKeys as ChatKeys;
pub(crate) use super::structured::check_answer_keys as check_chat;
/// openai_completions has no keys of its own: its prompts, `max_tokens` and images are
/// every probe's keys, checked before.
pub(crate) use crate::config::NoKeys as Keys;

pub(crate) fn check(_: &mut Diagnostics, keys: KindKeys<'_, Keys>) -> Option<Spec> {
    GenerationSpec::from_common(keys.common)
}

pub struct OpenAiProbe {
    api: Api,
    generation: Generation,
}

impl OpenAiProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        Ok(OpenAiProbe {
            api: match config.kind {
                Kind::OpenAiChat => Api::Chat,
                _ => Api::Completions,
            },
            generation: Generation::build(config, spec, cx, &JSON_IN_SSE_OUT)?,
        })
    }

    fn request_body(&self, prompt: &Prompt, images: &[Arc<Image>]) -> Bytes {
        let g = &self.generation;
        let temperature = g.temperature(prompt);
        let prompt = &*prompt.text;
        let stream_options = StreamOptions { include_usage: true };
        let detail = g.images.as_ref().and_then(|i| i.detail.as_deref());
        let body = match self.api {
            Api::Chat => serde_json::to_vec(&ChatRequest {
                model: &g.model,
                messages: [Message {
                    role: "user",
                    content: if images.is_empty() {
                        ChatContent::Text(prompt)
                    } else {
                        ChatContent::Parts(
                            std::iter::once(ChatPart::Text { text: prompt })
                                .chain(images.iter().map(|i| ChatPart::ImageUrl {
                                    image_url: ImageUrl {
                                        url: DataUrl(i),
                                        detail,
                                    },
                                }))
                                .collect(),
                        )
                    },
                }],
                max_tokens: g.max_tokens,
                temperature,
                tools: g
                    .tools
                    .as_ref()
                    .map(|t| t.tools.iter().map(Tool::openai_json).collect()),
                response_format: g.response_format.as_ref().map(ResponseFormat::chat_json),
                stream: true,
                stream_options,
            }),
            Api::Completions => serde_json::to_vec(&CompletionRequest {
                model: &g.model,
                prompt,
                max_tokens: g.max_tokens,
                temperature,
                stream: true,
                stream_options,
            }),
        };
        Bytes::from(body.expect("plain structs serialize"))
    }
}

/// `[DONE]` ends the stream, and each choice's last chunk must
/// carry its `finish_reason` (a server that aborts a generation may still send `[DONE]`).
const CHAT: Protocol = Protocol {
    framing: Framing::Sse,
    terminator: "data: [DONE]",
    finish: Some("a finish_reason"),
};

impl Probe for OpenAiProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let (prompt, images) = self.generation.next_input();
        let body = self.request_body(prompt, &images);
        let chat = self.api == Api::Chat;
        let next = |call: &Call, result: &str| self.next_turn(prompt, call, result);
        self.generation
            .run(
                limits,
                body,
                (prompt, &images),
                &CHAT,
                |e| parse_event(e, chat),
                Some(&next),
            )
            .await
    }
}

impl OpenAiProbe {
    /// The conversation after a tool call: the question, the assistant's call, the
    /// tool's result (the text only: images are not sent again).
    fn next_turn(&self, prompt: &Prompt, call: &Call, result: &str) -> Bytes {
        let g = &self.generation;
        let body = serde_json::json!({
            "model": g.model,
            "messages": [
                {"role": "user", "content": &*prompt.text},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": call.id(), "type": "function", "function": {"name": call.name, "arguments": call.arguments_text()}},
                ]},
                {"role": "tool", "tool_call_id": call.id(), "content": result},
            ],
            "max_tokens": g.max_tokens,
            "temperature": g.temperature(prompt),
            "tools": g.tools.as_ref().map(|t| t.tools.iter().map(Tool::openai_json).collect::<Vec<_>>()),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        Bytes::from(body.to_string())
    }
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: [Message<'a>; 1],
    max_tokens: u32,
    /// 0 for a prompt whose answer is checked; else the server's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<serde_json::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<serde_json::Value>,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: ChatContent<'a>,
}

/// A plain string, or text and image parts for vision models.
#[derive(Serialize)]
#[serde(untagged)]
enum ChatContent<'a> {
    Text(&'a str),
    Parts(Vec<ChatPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ChatPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Serialize)]
struct ImageUrl<'a> {
    url: DataUrl<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

#[derive(Serialize)]
struct CompletionRequest<'a> {
    model: &'a str,
    prompt: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize, Clone, Copy)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Deserialize)]
struct Chunk {
    model: Option<String>,
    system_fingerprint: Option<String>,
    choices: Option<Vec<Choice>>,
    usage: Option<Usage>,
    /// llama.cpp's own figures, on its last chunk even without `include_usage`.
    timings: Option<Timings>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    /// Chat streaming.
    delta: Option<Delta>,
    /// Completions streaming.
    text: Option<String>,
    /// On the choice's last chunk.
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<serde_json::Value>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Option<Vec<ToolCallChunk>>,
    refusal: Option<String>,
}

/// A piece of a tool call: `index` says which call; the first piece of each carries its
/// `id` and name, the rest pieces of `arguments` (a JSON text).
#[derive(Deserialize)]
struct ToolCallChunk {
    index: Option<u64>,
    id: Option<String>,
    function: Option<FunctionChunk>,
}

#[derive(Deserialize)]
struct FunctionChunk {
    name: Option<String>,
    /// A piece of JSON text; a gateway may send the whole arguments as an object.
    arguments: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Usage {
    completion_tokens: Option<u64>,
    /// The whole prompt, cached tokens included (`prompt_tokens_details.cached_tokens`
    /// is a part of it).
    prompt_tokens: Option<u64>,
}

/// llama-server's `timings`: `prompt_n` counts only the prompt tokens it evaluated, so
/// the prompt is `prompt_n + cache_n` (our captures: 1 + 56 = the usage's 57).
#[derive(Deserialize)]
struct Timings {
    prompt_n: Option<u64>,
    cache_n: Option<u64>,
}

impl Timings {
    fn prompt_tokens(&self) -> Option<u64> {
        Some(self.prompt_n? + self.cache_n.unwrap_or(0))
    }
}

/// Reads one SSE event of an OpenAI-compatible stream.
pub(crate) fn parse_event(event: &Event, chat: bool) -> Result<EventFacts, Failure> {
    if let Some(err) = &event.error {
        return Err(endpoint::in_band_error(err));
    }
    if event.event.as_deref() == Some("error") {
        return Err(endpoint::in_band_error(&event.data));
    }
    let data = event.data.trim();
    if let Some(facts) = done_or_empty(data) {
        return Ok(facts);
    }
    let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "stream event is not a valid chunk ({e}): {}",
                super::preview(data)
            ),
        )
    })?;
    if let Some(err) = chunk.error.filter(|e| !e.is_null()) {
        let message = endpoint::json_error_message(&serde_json::json!({ "error": err })).unwrap_or_default();
        return Err(Failure::new(
            FailureReason::StreamError,
            format!("in-band error: {message}"),
        ));
    }
    if chunk.choices.is_none() && chunk.usage.is_none() {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "stream event has neither choices nor usage: {}",
                super::preview(data)
            ),
        ));
    }
    let usage = chunk.usage.as_ref();
    let mut facts = EventFacts {
        output_tokens: usage.and_then(|u| u.completion_tokens),
        input_tokens: usage
            .and_then(|u| u.prompt_tokens)
            .or_else(|| chunk.timings.as_ref().and_then(Timings::prompt_tokens)),
        model: chunk.model,
        fingerprint: chunk.system_fingerprint,
        ..EventFacts::default()
    };
    for choice in chunk.choices.unwrap_or_default() {
        if let Some(reason) = choice.finish_reason.as_deref().and_then(normalize_finish_reason) {
            facts.finish_reason = Some(reason);
        }
        if chat {
            let Some(delta) = choice.delta else { continue };
            if let Some(text) = delta.content.as_ref().and_then(|c| c.as_str()) {
                facts.text.push_str(text);
            }
            let nonempty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
            // A refusal is output the user sees (TTFT), but not an answer.
            facts.refusal |= nonempty(&delta.refusal);
            for call in delta.tool_calls.unwrap_or_default() {
                let function = call.function.unwrap_or(FunctionChunk {
                    name: None,
                    arguments: None,
                });
                facts.tool_calls.push(ToolCallDelta {
                    // One call without an index is the first (some servers leave it out).
                    index: Some(call.index.unwrap_or(0)),
                    item: None,
                    id: call.id,
                    name: function.name,
                    arguments: match function.arguments {
                        Some(serde_json::Value::String(text)) => text,
                        Some(serde_json::Value::Null) | None => String::new(),
                        Some(other) => other.to_string(),
                    },
                    whole: false,
                });
            }
            facts.other_output |= nonempty(&delta.reasoning_content)
                || nonempty(&delta.reasoning)
                || facts.refusal
                || !facts.tool_calls.is_empty();
        } else if let Some(text) = choice.text {
            facts.text.push_str(&text);
        }
    }
    Ok(facts)
}

/// `[DONE]` (the terminator) or an event with no data (a keep-alive): nothing to parse.
fn done_or_empty(data: &str) -> Option<EventFacts> {
    match data {
        "[DONE]" => Some(EventFacts {
            done: true,
            ..EventFacts::default()
        }),
        "" => Some(EventFacts::default()),
        _ => None,
    }
}

// The simulator's side of this protocol.

/// What `inferprobe simulate` writes for these routes: the messages the parser above
/// reads. A chat stream opens with a role chunk, sent at once before any token exists (as
/// old vLLM did), so a prober that stops the TTFT clock on it reports ~0.
pub(crate) mod simulator {
    use std::time::Duration;

    use serde_json::json;

    use crate::probe::dialect::{Dialect, Reply};

    /// `POST /v1/chat/completions`.
    pub struct Chat;
    /// `POST /v1/completions`.
    pub struct Completions;

    impl Dialect for Chat {
        fn route(&self) -> &'static str {
            "/v1/chat/completions"
        }

        fn max_tokens_at(&self) -> &'static str {
            "/max_tokens"
        }

        fn preamble(&self, reply: &Reply) -> Vec<String> {
            vec![chunk(reply, true, None, None)]
        }

        fn token(&self, reply: &Reply, _i: u32, _n: u32, word: &str) -> String {
            chunk(reply, true, Some(word), None)
        }

        fn finish(&self, reply: &Reply, n: u32, _elapsed: Duration) -> Vec<String> {
            finish(reply, true, n)
        }

        /// The call's id and name first, then the arguments in pieces, all at index 0.
        fn tool_call(&self, reply: &Reply, name: &str, pieces: &[String]) -> Vec<String> {
            let call = |call: serde_json::Value| {
                let choice = json!({"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null});
                reply.frame(
                    None,
                    &json!({"id": reply.id, "object": object(true), "created": reply.created, "model": reply.model, "choices": [choice]}),
                )
            };
            std::iter::once(call(json!({"index": 0, "id": "call_sim", "type": "function", "function": {"name": name, "arguments": ""}})))
                .chain(pieces.iter().map(|p| call(json!({"index": 0, "function": {"arguments": p}}))))
                .collect()
        }

        fn in_band_error(&self, reply: &Reply) -> Vec<String> {
            in_band_error(reply)
        }
    }

    impl Dialect for Completions {
        fn route(&self) -> &'static str {
            "/v1/completions"
        }

        fn max_tokens_at(&self) -> &'static str {
            "/max_tokens"
        }

        fn token(&self, reply: &Reply, _i: u32, _n: u32, word: &str) -> String {
            chunk(reply, false, Some(word), None)
        }

        fn finish(&self, reply: &Reply, n: u32, _elapsed: Duration) -> Vec<String> {
            finish(reply, false, n)
        }

        fn in_band_error(&self, reply: &Reply) -> Vec<String> {
            in_band_error(reply)
        }
    }

    /// A chat chunk (`chat`) or a completions chunk: a token, the role chunk (no text, no
    /// finish reason) or the last chunk (a finish reason).
    fn chunk(reply: &Reply, chat: bool, text: Option<&str>, finish: Option<&str>) -> String {
        let choice = if chat {
            let delta = match (text, finish) {
                (Some(t), _) => json!({"content": t}),
                (None, None) => json!({"role": "assistant", "content": ""}),
                (None, Some(_)) => json!({}),
            };
            json!({"index": 0, "delta": delta, "finish_reason": finish})
        } else {
            json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
        };
        reply.frame(
            None,
            &json!({"id": reply.id, "object": object(chat), "created": reply.created, "model": reply.model, "choices": [choice]}),
        )
    }

    fn object(chat: bool) -> &'static str {
        if chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        }
    }

    fn finish(reply: &Reply, chat: bool, n: u32) -> Vec<String> {
        let mut out = vec![chunk(reply, chat, None, Some(reply.stop.openai()))];
        if reply.include_usage {
            out.push(reply.frame(
                None,
                &json!({"id": reply.id, "object": object(chat), "created": reply.created, "model": reply.model, "choices": [],
                    "usage": {"prompt_tokens": 24, "completion_tokens": n, "total_tokens": 24 + n}}),
            ));
        }
        out.push("data: [DONE]\n\n".to_owned());
        out
    }

    /// vLLM's shape: an `error` object in a data event, then `[DONE]`.
    fn in_band_error(reply: &Reply) -> Vec<String> {
        let message = "simulated engine failure mid-stream";
        vec![
            reply.frame(None, &json!({"error": {"object": "error", "message": message, "type": "InternalServerError", "code": 500}})),
            "data: [DONE]\n\n".to_owned(),
        ]
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

    /// Replays a transcript through the parser: (content events, usage tokens, done).
    fn replay(transcript: &str, chat: bool) -> Result<(u64, Option<u64>, bool, String), Failure> {
        let mut content = 0;
        let mut tokens = None;
        let mut text = String::new();
        for e in events_of(transcript) {
            let f = parse_event(&e, chat)?;
            if !f.text.is_empty() || f.other_output {
                content += 1;
            }
            text.push_str(&f.text);
            tokens = f.output_tokens.or(tokens);
            if f.done {
                return Ok((content, tokens, true, text));
            }
        }
        Ok((content, tokens, false, text))
    }

    /// The prompt's tokens as the stream reports them: the last count given.
    fn input_tokens_of(transcript: &str, chat: bool) -> Option<u64> {
        events_of(transcript)
            .iter()
            .filter_map(|e| parse_event(e, chat).unwrap().input_tokens)
            .next_back()
    }

    #[test]
    fn golden_input_tokens_from_usage_or_llama_server_timings() {
        // With include_usage: `usage.prompt_tokens` (57, 56 of them cached).
        assert_eq!(
            input_tokens_of("llama-server-tiny-chat-stream-include-usage.txt", true),
            Some(57)
        );
        // Without it llama-server still sends `timings`: prompt_n 57 + cache_n 0.
        assert_eq!(
            input_tokens_of("llama-server-tiny-chat-stream.txt", true),
            Some(57)
        );
        assert_eq!(
            input_tokens_of("llama-server-tiny-completions-stream.txt", false),
            Some(15)
        );
        assert_eq!(
            input_tokens_of("llama-server-tiny-vision-chat-image-stream.txt", true),
            Some(75)
        );
        // llama-cpp-python reports neither: the driver estimates from the prompt.
        assert_eq!(
            input_tokens_of("llama-py-tiny-chat-stream-include-usage.txt", true),
            None
        );
    }

    #[test]
    fn golden_llama_server_chat_stream_without_usage() {
        let (content, tokens, done, text) = replay("llama-server-tiny-chat-stream.txt", true).unwrap();
        // 16 tokens, one per event; the role chunk (content null) and the finish chunk do
        // not count.
        assert_eq!((content, tokens, done), (16, None, true));
        assert!(text.starts_with(" is("));
    }

    #[test]
    fn golden_llama_server_chat_stream_with_usage() {
        let (content, tokens, done, _) =
            replay("llama-server-tiny-chat-stream-include-usage.txt", true).unwrap();
        assert!(done);
        assert_eq!(tokens, Some(16));
        assert!(content > 0);
    }

    #[test]
    fn golden_llama_server_completions_stream() {
        let (content, _, done, text) = replay("llama-server-tiny-completions-stream.txt", false).unwrap();
        assert!(done);
        assert!(content > 0);
        assert!(text.starts_with("F lat"));
    }

    #[test]
    fn golden_llama_py_ignores_include_usage() {
        let (content, tokens, done, _) = replay("llama-py-tiny-chat-stream-include-usage.txt", true).unwrap();
        assert!(done);
        assert_eq!(tokens, None, "llama-cpp-python sends no usage chunk");
        assert!(content > 0);
    }

    #[test]
    fn golden_llama_py_interrupted_stream_has_no_content() {
        // Role event, then [DONE] with no content: the run must fail as empty output.
        let (content, _, done, _) = replay("llama-py-medium-chat-stream-interrupted.txt", true).unwrap();
        assert_eq!((content, done), (0, true));
    }

    /// The finish reason a transcript's stream ends with, as the driver keeps it.
    fn finish_of(transcript: &str, chat: bool) -> Option<String> {
        events_of(transcript)
            .iter()
            .filter_map(|e| parse_event(e, chat).unwrap().finish_reason)
            .next_back()
    }

    #[test]
    fn golden_real_servers_send_a_finish_reason_before_done() {
        // llama.cpp: on a chunk with an empty delta (chat) or empty text (completions),
        // before the separate usage chunk; llama-cpp-python the same, with no usage.
        for (transcript, chat) in [
            ("llama-server-tiny-chat-stream.txt", true),
            ("llama-server-tiny-chat-stream-include-usage.txt", true),
            ("llama-server-tiny-completions-stream.txt", false),
            ("llama-py-tiny-chat-stream-include-usage.txt", true),
            ("llama-py-tiny-completions-stream.txt", false),
        ] {
            assert_eq!(
                finish_of(transcript, chat).as_deref(),
                Some("length"),
                "{transcript}"
            );
        }
        // The stream a concurrent request aborted: [DONE] with no finish_reason at all.
        assert_eq!(
            finish_of("llama-py-medium-chat-stream-interrupted.txt", true),
            None
        );
    }

    #[test]
    fn a_refusal_is_output_but_marked() {
        let e = Event {
            data: r#"{"choices":[{"index":0,"delta":{"refusal":"I can't help with that."}}]}"#.into(),
            ..Event::default()
        };
        let f = parse_event(&e, true).unwrap();
        assert!(f.refusal && f.other_output);
        let e = Event {
            data: r#"{"choices":[{"index":0,"delta":{},"finish_reason":"content_filter"}]}"#.into(),
            ..Event::default()
        };
        assert_eq!(
            parse_event(&e, true).unwrap().finish_reason.as_deref(),
            Some("content_filter")
        );
    }

    #[test]
    fn role_only_chunk_is_not_output() {
        let e = Event {
            data: r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#.into(),
            ..Event::default()
        };
        let f = parse_event(&e, true).unwrap();
        assert!(f.text.is_empty() && !f.other_output);
    }

    #[test]
    fn reasoning_counts_as_output() {
        let e = Event {
            data: r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Let me think"}}]}"#.into(),
            ..Event::default()
        };
        assert!(parse_event(&e, true).unwrap().other_output);
    }

    #[test]
    fn usage_chunk_with_empty_or_null_choices() {
        for data in [
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":8,"total_tokens":13}}"#,
            r#"{"choices":null,"usage":{"completion_tokens":8}}"#,
            r#"{"usage":{"completion_tokens":8}}"#,
        ] {
            let e = Event {
                data: data.into(),
                ..Event::default()
            };
            assert_eq!(parse_event(&e, true).unwrap().output_tokens, Some(8), "{data}");
        }
    }

    #[test]
    fn in_band_errors_in_every_shape() {
        let vllm = Event {
            data: r#"{"error":{"object":"error","message":"engine dead","type":"InternalServerError","code":500}}"#.into(),
            ..Event::default()
        };
        let named = Event {
            event: Some("error".into()),
            data: r#"{"message":"overloaded"}"#.into(),
            error: None,
        };
        let llama = Event {
            error: Some(r#"{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}"#.into()),
            ..Event::default()
        };
        for (e, msg) in [
            (vllm, "engine dead"),
            (named, "overloaded"),
            (llama, "exceeds the available context"),
        ] {
            let f = parse_event(&e, true).unwrap_err();
            assert_eq!(f.reason, FailureReason::StreamError);
            assert!(f.message.contains(msg), "{}", f.message);
        }
    }

    #[test]
    fn garbage_is_an_invalid_response() {
        for data in ["{not json", "42", r#"{"foo":1}"#, r#"{"choices":"nope"}"#] {
            let e = Event {
                data: data.into(),
                ..Event::default()
            };
            assert_eq!(
                parse_event(&e, true).unwrap_err().reason,
                FailureReason::InvalidResponse,
                "{data}"
            );
        }
    }
}
