//! `anthropic`: the Messages API, `POST /v1/messages` with `stream: true`.
//!
//! Wire facts (../shared/reference/llm-protocols.md §7): named SSE events; text arrives in
//! `content_block_delta` events with `delta.type == "text_delta"`; `thinking_delta` and
//! `input_json_delta` are output too; `ping` and `content_block_start` (an empty block)
//! are not; `message_delta.usage.output_tokens` is the cumulative count; `message_stop`
//! ends the stream; errors after the stream started are `event: error`. Authentication
//! is the user's `x-api-key` header; `anthropic-version` defaults to 2023-06-01 and can
//! be overridden in `headers`.
//!
//! The whole kind is here: its config `Spec` and the `check` of its keys, the probe
//! (`build`, the request, `run`), the response parser, and its tests; kinds.rs lists
//! it. Imports config, outcome, framing, generation.rs (the streaming driver) and endpoint.rs.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::endpoint;
use super::framing::Event;
use super::generation::{EventFacts, Framing, Generation, GenerationSpec, Protocol, normalize_finish_reason};
use super::tools::{Call, Tool, ToolCallDelta};
use super::{BuildContext, BuildError};
use super::{Probe, RunLimits};
use crate::config::ProbeConfig;
use crate::outcome::{Failure, FailureReason, Observation};
use crate::payload::Prompt;

/// `anthropic` takes the keys every LLM kind takes (prompts, `max_tokens`, images), and
/// tools.
pub type Spec = GenerationSpec;

/// `tools` (sent as `{name, description, input_schema}`) and `tool_call`.
pub(crate) use super::tools::ToolKeys as Keys;
pub(crate) use super::tools::check_tool_keys as check;

pub struct AnthropicProbe {
    generation: Generation,
}

/// The Messages API's request headers; its version header is part of the protocol.
static HEADERS: [(http::HeaderName, &str); 3] = [
    (http::header::CONTENT_TYPE, "application/json"),
    (http::header::ACCEPT, "text/event-stream"),
    (http::HeaderName::from_static("anthropic-version"), "2023-06-01"),
];

impl AnthropicProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        Ok(AnthropicProbe {
            generation: Generation::build(config, spec, cx, &HEADERS)?,
        })
    }
}

impl Probe for AnthropicProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let g = &self.generation;
        let (prompt, images) = g.next_input();
        let content = if images.is_empty() {
            Content::Text(&prompt.text)
        } else {
            // Images first, then the question, as Anthropic recommends.
            Content::Blocks(
                images
                    .iter()
                    .map(|i| Block::Image {
                        source: Source {
                            kind: "base64",
                            media_type: i.media_type,
                            data: &i.base64,
                        },
                    })
                    .chain(std::iter::once(Block::Text { text: &prompt.text }))
                    .collect(),
            )
        };
        let body = serde_json::to_vec(&Request {
            model: &g.model,
            max_tokens: g.max_tokens,
            messages: [Message {
                role: "user",
                content,
            }],
            temperature: g.temperature(prompt),
            tools: g
                .tools
                .as_ref()
                .map(|t| t.tools.iter().map(Tool::anthropic_json).collect()),
            stream: true,
        })
        .expect("plain structs serialize");
        let next = |call: &Call, result: &str| self.next_turn(prompt, call, result);
        g.run(
            limits,
            Bytes::from(body),
            (prompt, &images),
            &PROTOCOL,
            parse_event,
            Some(&next),
        )
        .await
    }
}

impl AnthropicProbe {
    /// The messages after a tool call: the question, the assistant's `tool_use` block,
    /// and the user's `tool_result` (the text only: images are not sent again).
    fn next_turn(&self, prompt: &Prompt, call: &Call, result: &str) -> Bytes {
        let g = &self.generation;
        let mut body = serde_json::json!({
            "model": g.model,
            "max_tokens": g.max_tokens,
            "messages": [
                {"role": "user", "content": &*prompt.text},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": call.id(), "name": call.name, "input": call.arguments_value()},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": call.id(), "content": result},
                ]},
            ],
            "stream": true,
        });
        if let Some(t) = g.temperature(prompt) {
            body["temperature"] = t.into();
        }
        if let Some(t) = &g.tools {
            body["tools"] = t.tools.iter().map(Tool::anthropic_json).collect();
        }
        Bytes::from(body.to_string())
    }
}

/// `message_stop` ends the stream; the `message_delta` before it says why (`stop_reason`).
const PROTOCOL: Protocol = Protocol {
    framing: Framing::Sse,
    terminator: "message_stop",
    finish: Some("a message_delta with stop_reason"),
};

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    max_tokens: u32,
    messages: [Message<'a>; 1],
    /// 0 for a prompt whose answer is checked; else the server's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<serde_json::Value>>,
    stream: bool,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: Content<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(&'a str),
    Blocks(Vec<Block<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Image { source: Source<'a> },
    Text { text: &'a str },
}

/// Raw base64 in `data`, no data: URL prefix.
#[derive(Serialize)]
struct Source<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Deserialize)]
struct StreamEvent {
    #[serde(rename = "type")]
    kind: String,
    delta: Option<Delta>,
    usage: Option<Usage>,
    error: Option<serde_json::Value>,
    message: Option<StartedMessage>,
    /// content_block_start/delta: which block (a tool_use block is one call).
    index: Option<u64>,
    content_block: Option<ContentBlock>,
}

/// `content_block_start`'s block: a `tool_use` block opens a call (its input then comes
/// as `input_json_delta` pieces).
#[derive(Deserialize)]
struct ContentBlock {
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    name: Option<String>,
}

#[derive(Deserialize)]
struct StartedMessage {
    model: Option<String>,
    usage: Option<StartUsage>,
}

/// `message_start.message.usage`: `input_tokens` leaves out the prompt tokens written to
/// or read from the prompt cache, so the prompt is the sum of the three.
#[derive(Deserialize)]
struct StartUsage {
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl StartUsage {
    fn prompt_tokens(&self) -> Option<u64> {
        Some(
            self.input_tokens?
                + self.cache_creation_input_tokens.unwrap_or(0)
                + self.cache_read_input_tokens.unwrap_or(0),
        )
    }
}

#[derive(Deserialize)]
struct Delta {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    thinking: Option<String>,
    partial_json: Option<String>,
    /// `message_delta`: why the message ended (`end_turn`, `max_tokens`, `refusal`, ...).
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    output_tokens: Option<u64>,
}

pub(crate) fn parse_event(event: &Event) -> Result<EventFacts, Failure> {
    let e: StreamEvent = serde_json::from_str(&event.data).map_err(|err| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "stream event is not a Messages event ({err}): {}",
                super::preview(&event.data)
            ),
        )
    })?;
    let mut facts = EventFacts::default();
    match e.kind.as_str() {
        "error" => {
            let message = e
                .error
                .as_ref()
                .and_then(|err| endpoint::json_error_message(&serde_json::json!({ "error": err })))
                .unwrap_or_else(|| super::preview(&event.data));
            let kind = e
                .error
                .as_ref()
                .and_then(|err| err.get("type"))
                .and_then(|t| t.as_str())
                .map(|t| format!(" ({t})"))
                .unwrap_or_default();
            return Err(Failure::new(
                FailureReason::StreamError,
                format!("in-band error{kind}: {message}"),
            ));
        }
        "content_block_delta" => {
            if let Some(d) = e.delta {
                match d.kind.as_deref() {
                    Some("text_delta") => facts.text = d.text.unwrap_or_default(),
                    Some("input_json_delta") => {
                        let piece = d.partial_json.unwrap_or_default();
                        facts.other_output = !piece.is_empty();
                        facts.tool_calls.push(ToolCallDelta {
                            index: Some(e.index.unwrap_or(0)),
                            arguments: piece,
                            ..ToolCallDelta::default()
                        });
                    }
                    _ => {
                        let nonempty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
                        facts.other_output = nonempty(&d.thinking) || nonempty(&d.partial_json);
                    }
                }
            }
        }
        "message_start" => {
            if let Some(m) = e.message {
                facts.input_tokens = m.usage.as_ref().and_then(StartUsage::prompt_tokens);
                facts.model = m.model;
            }
        }
        "message_delta" => {
            facts.output_tokens = e.usage.and_then(|u| u.output_tokens);
            facts.finish_reason = e
                .delta
                .and_then(|d| d.stop_reason)
                .and_then(|r| normalize_finish_reason(&r));
        }
        "message_stop" => facts.done = true,
        "content_block_start" => {
            if let Some(block) = e.content_block.filter(|b| b.kind.as_deref() == Some("tool_use")) {
                facts.other_output = true;
                facts.tool_calls.push(ToolCallDelta {
                    index: Some(e.index.unwrap_or(0)),
                    id: block.id,
                    name: Some(block.name.unwrap_or_default()),
                    ..ToolCallDelta::default()
                });
            }
        }
        // content_block_start/stop, ping, and types added later.
        _ => {}
    }
    Ok(facts)
}

// The simulator's side of this protocol.

/// What `inferprobe simulate` writes on `/v1/messages`: the events the parser above reads.
pub(crate) mod simulator {
    use std::time::Duration;

    use serde_json::json;

    use crate::probe::dialect::{Dialect, Reply, Stop};

    /// `POST /v1/messages`.
    pub struct Messages;

    impl Dialect for Messages {
        fn route(&self) -> &'static str {
            "/v1/messages"
        }

        fn max_tokens_at(&self) -> &'static str {
            "/max_tokens"
        }

        fn preamble(&self, reply: &Reply) -> Vec<String> {
            vec![
                reply.frame(
                    Some("message_start"),
                    &json!({"type": "message_start", "message": {"id": reply.id, "type": "message", "role": "assistant", "content": [], "model": reply.model, "stop_reason": null, "usage": {"input_tokens": 24, "output_tokens": 1}}}),
                ),
                reply.frame(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                reply.frame(Some("ping"), &json!({"type": "ping"})),
            ]
        }

        fn token(&self, reply: &Reply, _i: u32, _n: u32, word: &str) -> String {
            reply.frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}),
            )
        }

        fn finish(&self, reply: &Reply, n: u32, _elapsed: Duration) -> Vec<String> {
            let stop_reason = match reply.stop {
                Stop::Limit => "max_tokens",
                Stop::EndOfAnswer => "end_turn",
                Stop::ToolCall => "tool_use",
            };
            // After a tool call the text block was closed before the tool's block opened.
            let text_open = reply.stop != Stop::ToolCall;
            text_open
                .then(|| reply.frame(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": 0})))
                .into_iter()
                .chain([
                    reply.frame(
                        Some("message_delta"),
                        &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": n}}),
                    ),
                    reply.frame(Some("message_stop"), &json!({"type": "message_stop"})),
                ])
                .collect()
        }

        /// The (empty) text block closes; a `tool_use` block opens at index 1, its input
        /// comes as `input_json_delta` pieces, and it closes.
        fn tool_call(&self, reply: &Reply, name: &str, pieces: &[String]) -> Vec<String> {
            let event = |kind: &str, data: serde_json::Value| reply.frame(Some(kind), &data);
            let mut out = vec![
                event(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                ),
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_sim", "name": name, "input": {}}}),
                ),
            ];
            out.extend(pieces.iter().map(|p| {
                event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": p}}),
                )
            }));
            out.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ));
            out
        }

        fn in_band_error(&self, reply: &Reply) -> Vec<String> {
            let message = "simulated engine failure mid-stream";
            vec![reply.frame(
                Some("error"),
                &json!({"type": "error", "error": {"type": "overloaded_error", "message": message}}),
            )]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::framing::SseDecoder;

    const STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"usage\":{\"input_tokens\":95,\"output_tokens\":1}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: ping\n\
data: {\"type\":\"ping\"}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Red\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

    #[test]
    fn a_whole_stream() {
        let events = SseDecoder::new(1 << 20).push(STREAM.as_bytes()).unwrap();
        let facts: Vec<_> = events.iter().map(|e| parse_event(e).unwrap()).collect();
        let content: Vec<_> = facts
            .iter()
            .filter(|f| !f.text.is_empty() || f.other_output)
            .collect();
        assert_eq!(content.len(), 1, "only the text delta is output");
        assert_eq!(content[0].text, "Red");
        assert_eq!(facts.iter().find_map(|f| f.output_tokens), Some(3));
        assert_eq!(facts.iter().find_map(|f| f.input_tokens), Some(95));
        assert_eq!(
            facts.iter().find_map(|f| f.finish_reason.clone()).as_deref(),
            Some("stop")
        );
        assert!(facts.last().unwrap().done);
    }

    #[test]
    fn stop_reasons_in_the_common_vocabulary() {
        for (stop_reason, want) in [
            ("end_turn", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "refusal"),
        ] {
            let e = Event {
                data: format!(
                    r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}","stop_sequence":null}},"usage":{{"output_tokens":3}}}}"#
                ),
                ..Event::default()
            };
            assert_eq!(parse_event(&e).unwrap().finish_reason.as_deref(), Some(want));
        }
    }

    #[test]
    fn error_event() {
        let e = Event {
            event: Some("error".into()),
            data: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
            error: None,
        };
        let f = parse_event(&e).unwrap_err();
        assert_eq!(f.reason, FailureReason::StreamError);
        assert_eq!(f.message, "in-band error (overloaded_error): Overloaded");
    }

    #[test]
    fn thinking_is_output() {
        let e = Event {
            data: r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}"#.into(),
            ..Event::default()
        };
        assert!(parse_event(&e).unwrap().other_output);
    }
}
