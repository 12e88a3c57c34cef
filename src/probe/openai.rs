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

use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::framing::SseEvent;
use super::stream::{self, Endpoint, EventFacts};
use super::{Probe, RunContext};
use crate::config::{Kind, ProbeConfig};
use crate::net::{BuildError, TlsRoots};
use crate::outcome::{Failure, FailureReason, Observation};
use crate::payload::PromptSet;

pub struct OpenAiProbe {
    chat: bool,
    endpoint: Endpoint,
    model: String,
    max_tokens: u32,
    prompts: PromptSet,
}

impl OpenAiProbe {
    pub fn build(config: &ProbeConfig, roots: &TlsRoots) -> Result<Self, BuildError> {
        let endpoint = Endpoint::build(
            config,
            roots,
            &[
                (http::header::CONTENT_TYPE, "application/json"),
                (http::header::ACCEPT, "text/event-stream"),
            ],
        )?;
        Ok(OpenAiProbe {
            chat: config.kind == Kind::OpenAiChat,
            endpoint,
            model: config.model.clone().unwrap_or_default(),
            max_tokens: config.max_tokens,
            prompts: PromptSet::new(&config.prompts),
        })
    }
}

impl Probe for OpenAiProbe {
    async fn run(&self, cx: &RunContext) -> Observation {
        // Everything before the clock starts: pick the prompt, build the request.
        let prompt = self.prompts.next();
        let request = self
            .endpoint
            .request(&http::Method::POST, self.request_body(&prompt.text));

        let mut obs = Observation::new(Instant::now());
        obs.prompt_bucket = prompt.bucket.as_str();
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
        if !stream::check_content_type(&response, "text/event-stream", &mut obs) {
            return obs;
        }
        let chat = self.chat;
        let Some(streamed) =
            stream::read_sse(&mut response.body, cx, &mut obs, &self.endpoint.redactor, |e| {
                parse_event(e, chat)
            })
            .await
        else {
            return obs;
        };
        response.body.finish(cx.deadline).await;
        obs.result = stream::check_output(
            &self.endpoint.expect,
            &streamed.text,
            streamed.content_events > 0,
            obs.output_tokens,
        );
        obs
    }
}

impl OpenAiProbe {
    fn request_body(&self, prompt: &str) -> Bytes {
        let stream_options = StreamOptions { include_usage: true };
        let body = if self.chat {
            serde_json::to_vec(&ChatRequest {
                model: &self.model,
                messages: [Message {
                    role: "user",
                    content: prompt,
                }],
                max_tokens: self.max_tokens,
                stream: true,
                stream_options,
            })
        } else {
            serde_json::to_vec(&CompletionRequest {
                model: &self.model,
                prompt,
                max_tokens: self.max_tokens,
                stream: true,
                stream_options,
            })
        };
        Bytes::from(body.expect("plain structs serialize"))
    }
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: [Message<'a>; 1],
    max_tokens: u32,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
}

#[derive(Serialize)]
struct CompletionRequest<'a> {
    model: &'a str,
    prompt: &'a str,
    max_tokens: u32,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize, Clone, Copy)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Deserialize)]
struct Chunk {
    choices: Option<Vec<Choice>>,
    usage: Option<Usage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    /// Chat streaming.
    delta: Option<Delta>,
    /// Completions streaming.
    text: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<serde_json::Value>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Option<Vec<serde_json::Value>>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    completion_tokens: Option<u64>,
}

/// Reads one SSE event of an OpenAI-compatible stream.
pub(crate) fn parse_event(event: &SseEvent, chat: bool) -> Result<EventFacts, Failure> {
    if let Some(err) = &event.error {
        return Err(stream_error(err));
    }
    if event.event.as_deref() == Some("error") {
        return Err(stream_error(&event.data));
    }
    let data = event.data.trim();
    if data == "[DONE]" {
        return Ok(EventFacts {
            done: true,
            ..EventFacts::default()
        });
    }
    if data.is_empty() {
        return Ok(EventFacts::default());
    }
    let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!("stream event is not a valid chunk ({e}): {}", preview(data)),
        )
    })?;
    if let Some(err) = chunk.error.filter(|e| !e.is_null()) {
        let message = stream::json_error_message(&serde_json::json!({ "error": err })).unwrap_or_default();
        return Err(Failure::new(
            FailureReason::StreamError,
            format!("in-band error: {message}"),
        ));
    }
    if chunk.choices.is_none() && chunk.usage.is_none() {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            format!("stream event has neither choices nor usage: {}", preview(data)),
        ));
    }
    let mut facts = EventFacts {
        output_tokens: chunk.usage.and_then(|u| u.completion_tokens),
        ..EventFacts::default()
    };
    for choice in chunk.choices.unwrap_or_default() {
        if chat {
            let Some(delta) = choice.delta else { continue };
            if let Some(text) = delta.content.as_ref().and_then(|c| c.as_str()) {
                facts.text.push_str(text);
            }
            let nonempty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
            facts.other_output |= nonempty(&delta.reasoning_content)
                || nonempty(&delta.reasoning)
                || nonempty(&delta.refusal)
                || delta.tool_calls.is_some_and(|t| !t.is_empty());
        } else if let Some(text) = choice.text {
            facts.text.push_str(&text);
        }
    }
    Ok(facts)
}

fn stream_error(raw: &str) -> Failure {
    let message = serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| stream::json_error_message(&v))
        .unwrap_or_else(|| preview(raw));
    Failure::new(FailureReason::StreamError, format!("in-band error: {message}"))
}

fn preview(s: &str) -> String {
    let mut p: String = s.chars().take(80).collect();
    if p.len() < s.len() {
        p.push_str("...");
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::framing::SseDecoder;

    fn events_of(transcript: &str) -> Vec<SseEvent> {
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

    #[test]
    fn role_only_chunk_is_not_output() {
        let e = SseEvent {
            data: r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#.into(),
            ..SseEvent::default()
        };
        let f = parse_event(&e, true).unwrap();
        assert!(f.text.is_empty() && !f.other_output);
    }

    #[test]
    fn reasoning_counts_as_output() {
        let e = SseEvent {
            data: r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Let me think"}}]}"#.into(),
            ..SseEvent::default()
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
            let e = SseEvent {
                data: data.into(),
                ..SseEvent::default()
            };
            assert_eq!(parse_event(&e, true).unwrap().output_tokens, Some(8), "{data}");
        }
    }

    #[test]
    fn in_band_errors_in_every_shape() {
        let vllm = SseEvent {
            data: r#"{"error":{"object":"error","message":"engine dead","type":"InternalServerError","code":500}}"#.into(),
            ..SseEvent::default()
        };
        let named = SseEvent {
            event: Some("error".into()),
            data: r#"{"message":"overloaded"}"#.into(),
            error: None,
        };
        let llama = SseEvent {
            error: Some(r#"{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}"#.into()),
            ..SseEvent::default()
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
            let e = SseEvent {
                data: data.into(),
                ..SseEvent::default()
            };
            assert_eq!(
                parse_event(&e, true).unwrap_err().reason,
                FailureReason::InvalidResponse,
                "{data}"
            );
        }
    }
}
