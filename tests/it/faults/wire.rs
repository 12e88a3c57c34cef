//! Each kind's wire format: a healthy answer, its parts (head, preamble, tokens, end), its
//! in-band error, and the faulty bodies built from them.

use std::time::Duration;

use super::{LIMITS, MB};
use crate::support::{Received, Step};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Sse,
    Ndjson,
    /// One JSON document (kserve_v2, http): no events, TTFB and total only.
    Json,
}

#[derive(Debug, Clone, Copy)]
pub struct Wire {
    pub kind: &'static str,
    pub path: &'static str,
    pub framing: Framing,
}

pub const WIRES: [Wire; 9] = [
    Wire {
        kind: "openai_chat",
        path: "/v1/chat/completions",
        framing: Framing::Sse,
    },
    Wire {
        kind: "openai_completions",
        path: "/v1/completions",
        framing: Framing::Sse,
    },
    Wire {
        kind: "openai_responses",
        path: "/v1/responses",
        framing: Framing::Sse,
    },
    Wire {
        kind: "anthropic",
        path: "/v1/messages",
        framing: Framing::Sse,
    },
    Wire {
        kind: "ollama",
        path: "/api/chat",
        framing: Framing::Ndjson,
    },
    Wire {
        kind: "tgi",
        path: "/generate_stream",
        framing: Framing::Sse,
    },
    Wire {
        kind: "llamacpp",
        path: "/completion",
        framing: Framing::Sse,
    },
    Wire {
        kind: "kserve_v2",
        path: "/v2/models/m/infer",
        framing: Framing::Json,
    },
    Wire {
        kind: "http",
        path: "/health",
        framing: Framing::Json,
    },
];

impl Wire {
    pub fn streams(&self) -> bool {
        self.framing != Framing::Json
    }

    /// The probe's YAML against `base` (scheme and authority).
    pub fn yaml(&self, base: &str, extra: &str) -> String {
        let specific = match self.kind {
            "kserve_v2" => "input: {name: x, datatype: FP32, shape: [1, 2], data: [0.1, 0.2]}",
            // A health check: the body must say it is healthy.
            "http" => "expect: {contains: '\"status\":\"ok\"'}",
            _ => "model: m\nmax_tokens: 7",
        };
        format!(
            "name: {}\nkind: {}\nurl: {base}{}\n{LIMITS}\n{specific}\n{extra}",
            self.kind, self.kind, self.path
        )
    }

    pub fn content_type(&self) -> &'static str {
        match self.framing {
            Framing::Sse => "text/event-stream",
            Framing::Ndjson => "application/x-ndjson",
            Framing::Json => "application/json",
        }
    }

    /// A 200 head. Streams are close-delimited; a JSON body of `len` bytes says so.
    pub fn head(&self, len: Option<usize>) -> String {
        let length = len
            .map(|n| format!("Content-Length: {n}\r\n"))
            .unwrap_or_default();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\n{length}Connection: close\r\n\r\n",
            self.content_type()
        )
    }

    pub fn frame(&self, event: Option<&str>, data: &str) -> String {
        match (self.framing, event) {
            (Framing::Ndjson, _) => format!("{data}\n"),
            (_, Some(name)) => format!("event: {name}\ndata: {data}\n\n"),
            (_, None) => format!("data: {data}\n\n"),
        }
    }

    /// What a healthy stream sends before any content (nothing that counts as a token).
    pub fn preamble(&self) -> String {
        match self.kind {
            "openai_chat" => self.frame(
                None,
                r#"{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            ),
            "openai_responses" => self.frame(
                Some("response.created"),
                r#"{"type":"response.created","response":{"id":"r","status":"in_progress"}}"#,
            ),
            "anthropic" => self.frame(
                Some("message_start"),
                r#"{"type":"message_start","message":{"id":"m1","model":"m","usage":{"input_tokens":5,"output_tokens":1}}}"#,
            ) + &self.frame(Some("ping"), r#"{"type":"ping"}"#),
            _ => String::new(),
        }
    }

    /// One content event carrying `text` (a JSON string body, already escaped).
    pub fn token(&self, text: &str) -> String {
        match self.kind {
            "openai_chat" => self.frame(
                None,
                &format!(r#"{{"model":"m","choices":[{{"index":0,"delta":{{"content":"{text}"}}}}]}}"#),
            ),
            "openai_completions" => self.frame(
                None,
                &format!(r#"{{"model":"m","choices":[{{"index":0,"text":"{text}"}}]}}"#),
            ),
            "openai_responses" => self.frame(
                Some("response.output_text.delta"),
                &format!(r#"{{"type":"response.output_text.delta","delta":"{text}"}}"#),
            ),
            "anthropic" => self.frame(
                Some("content_block_delta"),
                &format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{text}"}}}}"#),
            ),
            "ollama" => self.frame(
                None,
                &format!(r#"{{"model":"m","message":{{"role":"assistant","content":"{text}"}},"done":false}}"#),
            ),
            "tgi" => self.frame(
                None,
                &format!(r#"{{"index":1,"token":{{"id":1,"text":"{text}","logprob":-0.5,"special":false}},"generated_text":null,"details":null}}"#),
            ),
            "llamacpp" => self.frame(
                None,
                &format!(r#"{{"index":0,"content":"{text}","tokens":[1],"stop":false,"tokens_predicted":1}}"#),
            ),
            other => unreachable!("{other} does not stream"),
        }
    }

    /// The protocol's finish signal and terminator.
    pub fn end(&self) -> String {
        match self.kind {
            "openai_chat" => {
                self.frame(
                    None,
                    r#"{"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                ) + "data: [DONE]\n\n"
            }
            "openai_completions" => {
                self.frame(
                    None,
                    r#"{"model":"m","choices":[{"index":0,"text":"","finish_reason":"stop"}]}"#,
                ) + "data: [DONE]\n\n"
            }
            "openai_responses" => self.frame(
                Some("response.completed"),
                r#"{"type":"response.completed","response":{"status":"completed","usage":{"output_tokens":3}}}"#,
            ),
            "anthropic" => {
                self.frame(
                    Some("message_delta"),
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
                ) + &self.frame(Some("message_stop"), r#"{"type":"message_stop"}"#)
            }
            "ollama" => self.frame(None, r#"{"model":"m","done":true,"eval_count":3}"#),
            "tgi" => self.frame(
                None,
                r#"{"index":2,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":"Hi there","details":{"finish_reason":"eos_token","generated_tokens":3}}"#,
            ),
            "llamacpp" => self.frame(
                None,
                r#"{"index":0,"content":"","tokens":[],"stop":true,"model":"m","tokens_predicted":3,"stop_type":"eos"}"#,
            ),
            other => unreachable!("{other} does not stream"),
        }
    }

    /// A healthy body: a whole stream, or the JSON document.
    pub fn body(&self) -> String {
        match self.kind {
            "kserve_v2" => {
                r#"{"model_name":"m","model_version":"1","outputs":[{"name":"predict","shape":[1,1],"datatype":"INT64","data":[3]}]}"#.to_owned()
            }
            "http" => r#"{"status":"ok"}"#.to_owned(),
            _ => self.preamble() + &self.token("Hi") + &self.token(" there") + &self.end(),
        }
    }

    /// The whole healthy response.
    pub fn healthy(&self) -> Vec<u8> {
        let body = self.body();
        let len = (!self.streams()).then_some(body.len());
        (self.head(len) + &body).into_bytes()
    }

    /// The protocol's own in-band error, as its servers send it (llm-protocols.md);
    /// `None` for the kinds whose protocol has none.
    pub fn in_band_error(&self) -> Option<String> {
        let message = "engine failure mid-stream";
        Some(match self.kind {
            // vLLM and llama.cpp keep 200 and send an error object as a data event.
            "openai_chat" | "openai_completions" => {
                self.frame(
                    None,
                    &format!(r#"{{"error":{{"object":"error","message":"{message}","type":"InternalServerError","code":500}}}}"#),
                ) + "data: [DONE]\n\n"
            }
            "openai_responses" => self.frame(
                Some("response.failed"),
                &format!(r#"{{"type":"response.failed","response":{{"status":"failed","error":{{"code":"server_error","message":"{message}"}}}}}}"#),
            ),
            "anthropic" => self.frame(
                Some("error"),
                &format!(r#"{{"type":"error","error":{{"type":"overloaded_error","message":"{message}"}}}}"#),
            ),
            "ollama" => self.frame(None, &format!(r#"{{"error":"{message}"}}"#)),
            "tgi" => self.frame(None, &format!(r#"{{"error":"{message}","error_type":"generation"}}"#)),
            // llama.cpp's own `error:` field, not `data:`.
            "llamacpp" => format!(
                "error: {{\"code\":500,\"message\":\"{message}\",\"type\":\"server_error\"}}\n\n"
            ),
            _ => return None,
        })
    }
}

/// A healthy response up to its first token (streams) or half its body (JSON).
pub fn partial(w: &Wire) -> Vec<u8> {
    if w.streams() {
        (w.head(None) + &w.preamble() + &w.token("Hi")).into_bytes()
    } else {
        let body = w.body();
        (w.head(Some(body.len())) + &body[..body.len() / 2]).into_bytes()
    }
}

pub fn endless(w: &Wire) -> impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static {
    let (start, again) = if w.streams() {
        (
            (w.head(None) + &w.preamble()).into_bytes(),
            w.token("more").into_bytes(),
        )
    } else {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n";
        (head.as_bytes().to_vec(), b"1\r\n \r\n".to_vec())
    };
    move |_| {
        vec![
            Step::Write(start.clone()),
            Step::Repeat {
                bytes: again.clone(),
                total: u64::MAX,
                gap: Duration::from_millis(2),
            },
        ]
    }
}

pub fn line_100mb(w: &Wire) -> impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static {
    let total = 100 * MB;
    let start = match w.framing {
        Framing::Sse => w.head(None) + "data: ",
        Framing::Ndjson => w.head(None),
        Framing::Json => w.head(Some(total as usize)),
    };
    move |_| {
        vec![
            Step::Write(start.clone().into_bytes()),
            Step::Repeat {
                bytes: vec![b'a'; 64 * 1024],
                total,
                gap: Duration::ZERO,
            },
        ]
    }
}

pub fn oversized(w: &Wire) -> impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static {
    let total = 20 * MB;
    let (start, again) = match w.kind {
        "kserve_v2" => {
            let open = r#"{"outputs":[{"name":"p","shape":[1,-1],"datatype":"INT64","data":["#;
            (
                w.head(Some(open.len() + total as usize)) + open,
                b"0,".repeat(1024),
            )
        }
        "http" => {
            let open = r#"{"status":"ok","pad":""#;
            (w.head(Some(open.len() + total as usize)) + open, vec![b'a'; 4096])
        }
        // Events of 4 KB: few enough that parsing keeps up in a debug build.
        _ => (
            w.head(None) + &w.preamble(),
            w.token(&"word ".repeat(800)).into_bytes(),
        ),
    };
    move |_| {
        vec![
            Step::Write(start.clone().into_bytes()),
            Step::Repeat {
                bytes: again.clone(),
                total,
                gap: Duration::ZERO,
            },
        ]
    }
}
