//! `openai_responses`: OpenAI's Responses API, `POST /v1/responses` with `stream: true`,
//! as OpenAI serves it and llama.cpp's server translates it into a chat completion.
//!
//! Wire facts (../shared/reference/llm-protocols.md §3): named events, text in
//! `response.output_text.delta`, usage only in the terminal `response.completed` (or
//! `response.incomplete`, e.g. at `max_output_tokens`), failures as `response.failed` or
//! an `error` event, and no `[DONE]` (tolerated after the terminal event, where the
//! stream has already ended; before it, the answer was cut short).
//!
//! A file of its own, not a third API in openai.rs: the name is OpenAI's, but the request
//! (`input`, `max_output_tokens`, no `stream_options`) and the stream (named events, not
//! `choices` chunks ended by `[DONE]`) are not chat's, so its parser and its simulator
//! dialect share no code with chat and completions. What the OpenAI kinds do share is
//! machinery: the streaming driver, its SSE framing and the request headers
//! (generation.rs), the in-band error's message (endpoint.rs) and the image's data URL
//! (payload).
//!
//! The whole kind is here: its config `Spec` and the `check` of its keys, the probe
//! (`build`, the request, `run`), the response parser, the simulator's side of the
//! protocol, and its tests; kinds.rs lists it. Imports config, outcome, payload, framing,
//! generation.rs (the streaming driver) and endpoint.rs.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use super::endpoint;
use super::framing::Event;
use super::generation::{
    EventFacts, Framing, Generation, GenerationSpec, JSON_IN_SSE_OUT, Protocol, normalize_finish_reason,
};
use super::tools::{Call, Tool, ToolCallDelta};
use super::{BuildContext, BuildError};
use super::{Probe, RunLimits};
use crate::config::ProbeConfig;
use crate::outcome::{Failure, FailureReason, Observation};
use crate::payload::Prompt;
use crate::payload::images::{DataUrl, Image};

/// `openai_responses` takes the keys every LLM kind takes (prompts, `max_tokens`, images),
/// tools and the answer's format (sent as `text.format`).
pub type Spec = GenerationSpec;

/// `tools`, `tool_call`, `response_format`: the OpenAI chat kinds' answer keys.
pub(crate) use super::structured::AnswerKeys as Keys;
pub(crate) use super::structured::check_answer_keys as check;

pub struct ResponsesProbe {
    generation: Generation,
}

impl ResponsesProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        Ok(ResponsesProbe {
            generation: Generation::build(config, spec, cx, &JSON_IN_SSE_OUT)?,
        })
    }

    fn request_body(&self, prompt: &Prompt, images: &[Arc<Image>]) -> Bytes {
        let g = &self.generation;
        let temperature = g.temperature(prompt);
        let prompt = &*prompt.text;
        let detail = g.images.as_ref().and_then(|i| i.detail.as_deref());
        let body = serde_json::to_vec(&ResponsesRequest {
            model: &g.model,
            input: if images.is_empty() {
                ResponsesInput::Text(prompt)
            } else {
                ResponsesInput::Items([InputItem {
                    role: "user",
                    content: std::iter::once(InputPart::InputText { text: prompt })
                        .chain(images.iter().map(|i| InputPart::InputImage {
                            image_url: DataUrl(i),
                            detail,
                        }))
                        .collect(),
                }])
            },
            max_output_tokens: g.max_tokens,
            temperature,
            tools: g
                .tools
                .as_ref()
                .map(|t| t.tools.iter().map(responses_tool).collect()),
            text: g
                .response_format
                .as_ref()
                .map(|f| serde_json::json!({"format": f.responses_json()})),
            stream: true,
        });
        Bytes::from(body.expect("plain structs serialize"))
    }
}

/// Responses: the terminal event says both that the stream ended and why.
const RESPONSES: Protocol = Protocol {
    framing: Framing::Sse,
    terminator: "response.completed",
    finish: None,
};

impl Probe for ResponsesProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let (prompt, images) = self.generation.next_input();
        let body = self.request_body(prompt, &images);
        let next = |call: &Call, result: &str| self.next_turn(prompt, call, result);
        self.generation
            .run(
                limits,
                body,
                (prompt, &images),
                &RESPONSES,
                parse_responses_event,
                Some(&next),
            )
            .await
    }
}

impl ResponsesProbe {
    /// The input after a tool call: the question, the `function_call` item, and its
    /// `function_call_output` (the text only: images are not sent again).
    fn next_turn(&self, prompt: &Prompt, call: &Call, result: &str) -> Bytes {
        let g = &self.generation;
        let mut body = serde_json::json!({
            "model": g.model,
            "input": [
                {"role": "user", "content": &*prompt.text},
                {"type": "function_call", "call_id": call.id(), "name": call.name, "arguments": call.arguments_text()},
                {"type": "function_call_output", "call_id": call.id(), "output": result},
            ],
            "max_output_tokens": g.max_tokens,
            "stream": true,
        });
        if let Some(t) = g.temperature(prompt) {
            body["temperature"] = t.into();
        }
        if let Some(t) = &g.tools {
            body["tools"] = t.tools.iter().map(responses_tool).collect();
        }
        Bytes::from(body.to_string())
    }
}

/// A function as the Responses API takes it: flat, with `type: function` beside it.
fn responses_tool(tool: &Tool) -> serde_json::Value {
    let mut f = tool.function_json();
    f["type"] = "function".into();
    f
}

#[derive(Serialize)]
struct ResponsesRequest<'a> {
    model: &'a str,
    input: ResponsesInput<'a>,
    max_output_tokens: u32,
    /// 0 for a prompt whose answer is checked; else the server's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<serde_json::Value>>,
    /// `{format: ...}`: the answer's format.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<serde_json::Value>,
    stream: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ResponsesInput<'a> {
    Text(&'a str),
    Items([InputItem<'a>; 1]),
}

#[derive(Serialize)]
struct InputItem<'a> {
    role: &'a str,
    content: Vec<InputPart<'a>>,
}

/// In the Responses API `image_url` is a plain string, not an object.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InputPart<'a> {
    InputText {
        text: &'a str,
    },
    InputImage {
        image_url: DataUrl<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<&'a str>,
    },
}

/// Reads one event of a Responses API stream. The type is in the data's `type` (and
/// usually repeated in `event:`).
pub(crate) fn parse_responses_event(event: &Event) -> Result<EventFacts, Failure> {
    let data = event.data.trim();
    // The stream ends at its terminal event, so a `[DONE]` read here came without one:
    // the sentinel some servers add does not say the response completed.
    if data == "[DONE]" {
        return Err(Failure::new(
            FailureReason::Truncated,
            "data: [DONE] came without response.completed: the answer was cut short",
        ));
    }
    // An event with no data (a keep-alive): nothing to parse.
    if data.is_empty() {
        return Ok(EventFacts::default());
    }
    let v: serde_json::Value = serde_json::from_str(data).map_err(|e| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!("stream event is not JSON ({e}): {}", super::preview(data)),
        )
    })?;
    let kind = v
        .get("type")
        .and_then(|t| t.as_str())
        .or(event.event.as_deref())
        .ok_or_else(|| {
            Failure::new(
                FailureReason::InvalidResponse,
                format!("stream event has no type: {}", super::preview(data)),
            )
        })?;
    let delta = || v.get("delta").and_then(|d| d.as_str()).unwrap_or("");
    let item_id = || v.get("item_id").and_then(|d| d.as_str()).map(str::to_owned);
    let mut facts = EventFacts {
        model: v
            .pointer("/response/model")
            .and_then(|m| m.as_str())
            .map(str::to_owned),
        ..EventFacts::default()
    };
    match kind {
        "response.output_text.delta" => facts.text = delta().to_owned(),
        "response.refusal.delta" => {
            facts.refusal = !delta().is_empty();
            facts.other_output = facts.refusal;
        }
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
            facts.other_output = !delta().is_empty()
        }
        // A function call: opened by its output item (name, call id), its arguments in
        // pieces, then whole in `.done` and in the closed item.
        "response.output_item.added" | "response.output_item.done"
            if v.pointer("/item/type").and_then(|t| t.as_str()) == Some("function_call") =>
        {
            let added = kind == "response.output_item.added";
            let item = |k: &str| v.pointer(&format!("/item/{k}")).and_then(|x| x.as_str());
            let arguments = item("arguments").unwrap_or("").to_owned();
            facts.other_output = added;
            facts.tool_calls.push(ToolCallDelta {
                index: v.get("output_index").and_then(|i| i.as_u64()),
                item: item("id").map(str::to_owned),
                id: item("call_id").map(str::to_owned),
                name: added.then(|| item("name").unwrap_or("").to_owned()),
                // The closed item's arguments are the whole (an empty one says nothing).
                whole: !added && !arguments.is_empty(),
                arguments,
            });
        }
        "response.function_call_arguments.delta" => {
            facts.other_output = !delta().is_empty();
            facts.tool_calls.push(ToolCallDelta {
                index: v.get("output_index").and_then(|i| i.as_u64()),
                item: item_id(),
                arguments: delta().to_owned(),
                ..ToolCallDelta::default()
            });
        }
        "response.function_call_arguments.done" => {
            if let Some(arguments) = v.get("arguments").and_then(|a| a.as_str()) {
                facts.tool_calls.push(ToolCallDelta {
                    index: v.get("output_index").and_then(|i| i.as_u64()),
                    item: item_id(),
                    arguments: arguments.to_owned(),
                    whole: true,
                    ..ToolCallDelta::default()
                });
            }
        }
        "response.completed" | "response.incomplete" => {
            facts.done = true;
            facts.output_tokens = v
                .pointer("/response/usage/output_tokens")
                .and_then(|n| n.as_u64());
            facts.input_tokens = v.pointer("/response/usage/input_tokens").and_then(|n| n.as_u64());
            // Incomplete says why: `max_output_tokens` is our own cap (an answer, as
            // `length` is in chat), `content_filter` withheld it. Any other incomplete
            // response is not a complete answer.
            let reason = match kind {
                "response.completed" => "stop".to_owned(),
                _ => v
                    .pointer("/response/incomplete_details/reason")
                    .and_then(|r| r.as_str())
                    .and_then(normalize_finish_reason)
                    .filter(|r| r == "length" || r == "content_filter")
                    .unwrap_or_else(|| "incomplete".to_owned()),
            };
            facts.finish_reason = Some(reason);
        }
        "response.failed" => {
            let message = v
                .pointer("/response/error/message")
                .and_then(|m| m.as_str())
                .unwrap_or("the response failed");
            return Err(Failure::new(
                FailureReason::StreamError,
                format!("in-band error: {message}"),
            ));
        }
        "error" => {
            let message = endpoint::json_error_message(&v).unwrap_or_else(|| super::preview(data));
            return Err(Failure::new(
                FailureReason::StreamError,
                format!("in-band error: {message}"),
            ));
        }
        _ => {}
    }
    Ok(facts)
}

// The simulator's side of this protocol.

/// What `inferprobe simulate` writes for this route: the events the parser above reads.
pub(crate) mod simulator {
    use std::time::Duration;

    use serde_json::json;

    use crate::probe::dialect::{Dialect, Reply};

    /// `POST /v1/responses`.
    pub struct Responses;

    impl Dialect for Responses {
        fn route(&self) -> &'static str {
            "/v1/responses"
        }

        fn max_tokens_at(&self) -> &'static str {
            "/max_output_tokens"
        }

        fn preamble(&self, reply: &Reply) -> Vec<String> {
            vec![reply.frame(
                Some("response.created"),
                &json!({"type": "response.created", "sequence_number": 0, "response": {"id": reply.id, "status": "in_progress"}}),
            )]
        }

        fn token(&self, reply: &Reply, i: u32, _n: u32, word: &str) -> String {
            reply.frame(
                Some("response.output_text.delta"),
                &json!({"type": "response.output_text.delta", "sequence_number": i + 1, "item_id": "msg_sim", "output_index": 0, "content_index": 0, "delta": word}),
            )
        }

        /// A `function_call` output item: added, its arguments in pieces, done whole.
        fn tool_call(&self, reply: &Reply, name: &str, pieces: &[String]) -> Vec<String> {
            let whole: String = pieces.concat();
            let item = |arguments: &str, status: &str| json!({"type": "function_call", "id": "fc_sim", "call_id": "call_sim", "name": name, "arguments": arguments, "status": status});
            let event = |kind: &str, mut data: serde_json::Value| {
                data["type"] = kind.into();
                reply.frame(Some(kind), &data)
            };
            let mut out = vec![event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item("", "in_progress")}),
            )];
            out.extend(pieces.iter().map(|p| {
                event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": "fc_sim", "output_index": 0, "delta": p}),
                )
            }));
            out.push(event(
                "response.function_call_arguments.done",
                json!({"item_id": "fc_sim", "output_index": 0, "arguments": whole}),
            ));
            out.push(event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item(&whole, "completed")}),
            ));
            out
        }

        fn finish(&self, reply: &Reply, n: u32, _elapsed: Duration) -> Vec<String> {
            vec![reply.frame(
                Some("response.completed"),
                &json!({"type": "response.completed", "sequence_number": n + 1, "response": {"id": reply.id, "status": "completed",
                    "usage": {"input_tokens": 24, "output_tokens": n, "total_tokens": 24 + n}}}),
            )]
        }

        fn in_band_error(&self, reply: &Reply) -> Vec<String> {
            let message = "simulated engine failure mid-stream";
            vec![reply.frame(
                Some("response.failed"),
                &json!({"type": "response.failed", "response": {"id": reply.id, "status": "failed", "error": {"code": "server_error", "message": message}}}),
            )]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_input_tokens_from_the_terminal_usage() {
        let e = Event {
            data: r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":95,"output_tokens":1,"total_tokens":96}}}"#.into(),
            ..Event::default()
        };
        let f = parse_responses_event(&e).unwrap();
        assert_eq!((f.input_tokens, f.output_tokens), (Some(95), Some(1)));
    }

    #[test]
    fn responses_terminal_events_say_why() {
        let finish = |data: &str| {
            parse_responses_event(&Event {
                data: data.into(),
                ..Event::default()
            })
            .unwrap()
            .finish_reason
        };
        assert_eq!(
            finish(r#"{"type":"response.completed","response":{"status":"completed"}}"#).as_deref(),
            Some("stop")
        );
        // Our own max_output_tokens is an answer at its cap, as `length` is in chat.
        assert_eq!(
            finish(r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#).as_deref(),
            Some("length")
        );
        assert_eq!(
            finish(r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"content_filter"}}}"#).as_deref(),
            Some("content_filter")
        );
        for other in [
            r#"{"type":"response.incomplete","response":{"status":"incomplete"}}"#,
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"something_new"}}}"#,
        ] {
            assert_eq!(finish(other).as_deref(), Some("incomplete"), "{other}");
        }
        let done = parse_responses_event(&Event {
            data: "[DONE]".into(),
            ..Event::default()
        })
        .unwrap_err();
        assert_eq!(done.reason, FailureReason::Truncated);
        let refusal = parse_responses_event(&Event {
            data: r#"{"type":"response.refusal.delta","delta":"I can't"}"#.into(),
            ..Event::default()
        })
        .unwrap();
        assert!(refusal.refusal && refusal.other_output);
    }

    #[test]
    fn responses_stream() {
        let events = [
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress"}}"#,
            r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Red"}"#,
            r#"{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","status":"completed","usage":{"input_tokens":95,"output_tokens":1,"total_tokens":96}}}"#,
        ];
        let facts: Vec<_> = events
            .iter()
            .map(|d| {
                parse_responses_event(&Event {
                    data: (*d).into(),
                    ..Event::default()
                })
                .unwrap()
            })
            .collect();
        assert!(facts[0].text.is_empty() && !facts[0].done);
        assert_eq!(facts[1].text, "Red");
        assert!(facts[2].done);
        assert_eq!(facts[2].output_tokens, Some(1));
    }

    #[test]
    fn responses_failures() {
        let failed = r#"{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"server_error","message":"The model crashed"}}}"#;
        let error = r#"{"type":"error","code":"rate_limit_exceeded","message":"Slow down","param":null}"#;
        for (data, msg) in [(failed, "The model crashed"), (error, "Slow down")] {
            let f = parse_responses_event(&Event {
                data: data.into(),
                ..Event::default()
            })
            .unwrap_err();
            assert_eq!(f.reason, FailureReason::StreamError);
            assert!(f.message.contains(msg), "{}", f.message);
        }
    }
}
