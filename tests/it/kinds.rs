//! Every streaming kind against the simulator speaking its protocol: the success path
//! with exact token counts and TTFT after the scripted delay, then each protocol's own
//! in-band error, a truncated stream, garbage, a wrong content type and an empty answer
//! (with the words of the OpenAI chat protocol's message where it matters).

use std::time::Duration;

use crate::support::*;
use inferprobe::outcome::{FailureReason, TokenSource};
use inferprobe::simulate::Script;

/// (kind, path on the simulator)
const KINDS: &[(&str, &str)] = &[
    ("openai_chat", "/v1/chat/completions"),
    ("openai_completions", "/v1/completions"),
    ("openai_responses", "/v1/responses"),
    ("anthropic", "/v1/messages"),
    ("ollama", "/api/chat"),
    ("ollama", "/api/generate"),
    ("tgi", "/generate_stream"),
    ("llamacpp", "/completion"),
];

fn probe(kind: &str, addr: std::net::SocketAddr, path: &str, query: &str) -> String {
    format!(
        "name: p\nkind: {kind}\nurl: http://{addr}{path}?{query}\nmodel: sim-model\ntimeout: 2s\nfirst_token_timeout: 1s\nmax_tokens: 7"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn every_kind_succeeds_with_exact_tokens_and_a_real_ttft() {
    let sim = simulator(Script::default()).await;
    for (kind, path) in KINDS {
        let o = run_probe(&probe(kind, sim.addr, path, "ttft=120ms&token_gap=5ms&tokens=50")).await;
        let obs = &o.observation;
        assert!(obs.success(), "{kind} {path}: {:?}", obs.result);
        // max_tokens: 7 reached the server in each protocol's own field.
        assert_eq!(obs.output_tokens, Some(7), "{kind} {path}");
        assert_eq!(obs.token_source, Some(TokenSource::Usage), "{kind} {path}");
        // The simulator reports a prompt of 24 tokens in each protocol's usage field.
        assert_eq!(
            (obs.input_tokens, obs.input_token_source),
            (Some(24), Some(TokenSource::Usage)),
            "{kind} {path}"
        );
        assert!(obs.ttft().unwrap() >= Duration::from_millis(120), "{kind} {path}");
        assert_eq!(obs.chunk_gaps.len(), 6, "{kind} {path}");
        // The last token is scripted at 120 ms + 6 x 5 ms after the request.
        assert!(
            obs.total().unwrap() >= Duration::from_millis(150),
            "{kind} {path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ollama_exports_server_reported_durations_apart() {
    let sim = simulator(Script::default()).await;
    let o = run_probe(&probe("ollama", sim.addr, "/api/chat", "ttft=50ms&tokens=3")).await;
    let stages: Vec<_> = o.observation.server_reported.iter().map(|(s, _)| *s).collect();
    assert_eq!(stages, ["total", "load", "prompt_eval", "eval"]);
    let json = o.to_json();
    assert!(json["server_reported_seconds"]["total"].as_f64().unwrap() > 0.04);
}

/// Runs every kind against the fault at once and checks each reason and duration; returns
/// each kind's failure message, for the checks of one protocol's own words.
async fn expect_reason(query: &'static str, reason: FailureReason) -> Messages {
    // Timed: it bounds the run in wall-clock time; see support::timed.
    let _turn = timed();
    let sim = simulator(Script::default()).await;
    let runs: Vec<_> = KINDS
        .iter()
        .map(|(kind, path)| {
            let yaml = probe(kind, sim.addr, path, query);
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let o = run_probe(&yaml).await;
                (kind, path, o, started.elapsed())
            })
        })
        .collect();
    let mut messages = Vec::new();
    for run in runs {
        let (kind, path, o, took) = run.await.unwrap();
        let f = o
            .observation
            .failure()
            .unwrap_or_else(|| panic!("{kind} {path} {query}: succeeded"));
        assert_eq!(f.reason, reason, "{kind} {path} {query}: {}", f.message);
        assert!(
            took < Duration::from_millis(2600),
            "{kind} {path} {query}: {took:?}"
        );
        messages.push((*kind, f.message.clone()));
    }
    Messages(messages)
}

/// The failure message of each kind's run, in the order of `KINDS`.
struct Messages(Vec<(&'static str, String)>);

impl Messages {
    /// The message of `kind`'s (first) run.
    fn of(&self, kind: &str) -> &str {
        &self.0.iter().find(|(k, _)| *k == kind).unwrap().1
    }

    /// The OpenAI chat protocol's message holds the server's words, `says`.
    fn chat_says(&self, says: &str) {
        let chat = self.of("openai_chat");
        assert!(chat.contains(says), "openai_chat: {chat}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_protocols_in_band_error_is_a_stream_error() {
    let m = expect_reason(
        "fault=inband-error&ttft=10ms&tokens=6",
        FailureReason::StreamError,
    )
    .await;
    // The server's own words are kept.
    m.chat_says("simulated engine failure");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stall_before_the_headers_is_a_first_token_timeout_in_every_protocol() {
    let m = expect_reason("fault=stall-headers", FailureReason::TimeoutFirstToken).await;
    m.chat_says("waiting for response headers");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stall_mid_stream_is_a_total_timeout_in_every_protocol() {
    expect_reason(
        "fault=stall-stream&ttft=50ms&tokens=10",
        FailureReason::TimeoutTotal,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_stream_is_truncated_in_every_protocol() {
    expect_reason("fault=truncate&ttft=10ms&tokens=6", FailureReason::Truncated).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_is_an_invalid_response_in_every_protocol() {
    let m = expect_reason("fault=garbage&ttft=10ms&tokens=6", FailureReason::InvalidResponse).await;
    m.chat_says("not a valid chunk");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_content_type_is_an_invalid_response_in_every_protocol() {
    let m = expect_reason(
        "fault=wrong-content-type&ttft=10ms&tokens=6",
        FailureReason::InvalidResponse,
    )
    .await;
    m.chat_says("expected content type text/event-stream, got application/json");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_with_no_output_is_empty_in_every_protocol() {
    expect_reason("fault=empty", FailureReason::EmptyOutput).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_stream_times_out_in_every_protocol() {
    expect_reason(
        "fault=endless&ttft=10ms&token_gap=10ms",
        FailureReason::TimeoutTotal,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn status_errors_in_every_protocol() {
    let m = expect_reason("fault=http-500", FailureReason::Http5xx).await;
    assert_eq!(m.of("openai_chat"), "HTTP 500: simulated internal error");
    let m = expect_reason("fault=http-429", FailureReason::RateLimited).await;
    m.chat_says("Retry-After: 1");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_stream_stops_at_the_byte_cap_in_every_protocol() {
    let sim = simulator(Script::default()).await;
    let runs: Vec<_> = KINDS
        .iter()
        .map(|(kind, path)| {
            let yaml = format!(
                "name: p\nkind: {kind}\nurl: http://{}{path}?fault=endless&ttft=1ms&token_gap=0ms\nmodel: m\ntimeout: 10s\nmax_response_bytes: 32768",
                sim.addr
            );
            tokio::spawn(async move { (kind, run_probe(&yaml).await) })
        })
        .collect();
    for run in runs {
        let (kind, o) = run.await.unwrap();
        let f = o.observation.failure().unwrap();
        assert_eq!(f.reason, FailureReason::InvalidResponse, "{kind}: {}", f.message);
        assert!(f.message.contains("32768-byte cap"), "{kind}: {}", f.message);
        // Reading stopped at the cap (plus at most one read).
        assert!(o.observation.bytes_received < 32768 + 65536, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_aborted_after_its_terminator_is_truncated_in_every_protocol() {
    expect_reason(
        "fault=abort-after-done&ttft=10ms&tokens=6",
        FailureReason::Truncated,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_finish_reason_is_visible_in_every_protocol() {
    // The simulator stops at max_tokens (7 of 50) in every protocol: each one's own word
    // for it (length, max_tokens, max_output_tokens...) reads `length`.
    let sim = simulator(Script::default()).await;
    for (kind, path) in KINDS {
        let o = run_probe(&probe(kind, sim.addr, path, "ttft=10ms&tokens=50")).await;
        assert!(
            o.observation.success(),
            "{kind} {path}: {:?}",
            o.observation.result
        );
        let want = if *kind == "openai_responses" {
            "stop"
        } else {
            "length"
        };
        assert_eq!(o.to_json()["finish_reason"], want, "{kind} {path}");
    }
}

/// One protocol's stream, served byte-exact in HTTP chunks, and what the run must say.
struct Golden {
    name: &'static str,
    kind: &'static str,
    path: &'static str,
    content_type: &'static str,
    events: &'static [&'static str],
    end: BodyEnd,
    want: Option<FailureReason>,
    message_has: &'static str,
}

const SSE: &str = "text/event-stream";
const NDJSON: &str = "application/x-ndjson";

const RESPONSES_DELTA: &str = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Red\"}\n\n";
const ANTHROPIC_DELTA: &str = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Red\"}}\n\n";
const ANTHROPIC_STOP: &str = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
const OLLAMA_TOKEN: &str =
    "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"Red\"},\"done\":false}\n";
const OLLAMA_DONE: &str = "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"eval_count\":1}\n";
const TGI_LAST: &str = "data:{\"index\":1,\"token\":{\"id\":2,\"text\":\"Red\",\"logprob\":-0.1,\"special\":false},\"generated_text\":\"Red\",\"details\":{\"finish_reason\":\"eos_token\",\"generated_tokens\":1}}\n\n";

const GOLDEN: &[Golden] = &[
    Golden {
        name: "completions: [DONE] with no finish_reason",
        kind: "openai_completions",
        path: "/v1/completions",
        content_type: SSE,
        events: &[
            "data: {\"choices\":[{\"index\":0,\"text\":\"Red\",\"finish_reason\":null}]}\n\n",
            "data: [DONE]\n\n",
        ],
        end: BodyEnd::LastChunk,
        want: Some(FailureReason::Truncated),
        message_has: "data: [DONE] came without a finish_reason",
    },
    Golden {
        name: "chat: [DONE] with an empty finish_reason (a proxy writing \"\" for null)",
        kind: "openai_chat",
        path: "/v1/chat/completions",
        content_type: SSE,
        events: &[
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Red\"},\"finish_reason\":\"\"}]}\n\n",
            "data: [DONE]\n\n",
        ],
        end: BodyEnd::LastChunk,
        want: Some(FailureReason::Truncated),
        message_has: "data: [DONE] came without a finish_reason",
    },
    Golden {
        name: "responses: incomplete, no reason given",
        kind: "openai_responses",
        path: "/v1/responses",
        content_type: SSE,
        events: &[
            RESPONSES_DELTA,
            "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\",\"usage\":{\"output_tokens\":1}}}\n\n",
        ],
        end: BodyEnd::LastChunk,
        want: Some(FailureReason::Truncated),
        message_has: "finish reason incomplete",
    },
    Golden {
        name: "responses: incomplete, content filter",
        kind: "openai_responses",
        path: "/v1/responses",
        content_type: SSE,
        events: &[
            RESPONSES_DELTA,
            "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"content_filter\"}}}\n\n",
        ],
        end: BodyEnd::LastChunk,
        want: Some(FailureReason::StreamError),
        message_has: "finish reason content_filter",
    },
    Golden {
        name: "responses: incomplete at max_output_tokens is an answer at its cap",
        kind: "openai_responses",
        path: "/v1/responses",
        content_type: SSE,
        events: &[
            RESPONSES_DELTA,
            "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"output_tokens\":1}}}\n\n",
        ],
        end: BodyEnd::LastChunk,
        want: None,
        message_has: "",
    },
    Golden {
        name: "responses: [DONE] with no terminal event",
        kind: "openai_responses",
        path: "/v1/responses",
        content_type: SSE,
        events: &[RESPONSES_DELTA, "data: [DONE]\n\n"],
        end: BodyEnd::LastChunk,
        want: Some(FailureReason::Truncated),
        message_has: "data: [DONE] came without response.completed",
    },
    Golden {
        name: "responses: completed, then the body cut",
        kind: "openai_responses",
        path: "/v1/responses",
        content_type: SSE,
        events: &[
            RESPONSES_DELTA,
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"output_tokens\":1}}}\n\n",
        ],
        end: BodyEnd::Cut,
        want: Some(FailureReason::Truncated),
        message_has: "the HTTP body broke after response.completed",
    },
    Golden {
        name: "anthropic: message_stop with no message_delta",
        kind: "anthropic",
        path: "/v1/messages",
        content_type: SSE,
        events: &[ANTHROPIC_DELTA, ANTHROPIC_STOP],
        end: BodyEnd::LastChunk,
        want: Some(FailureReason::Truncated),
        message_has: "message_stop came without a message_delta with stop_reason",
    },
    Golden {
        name: "anthropic: stop_reason, then no message_stop",
        kind: "anthropic",
        path: "/v1/messages",
        content_type: SSE,
        events: &[
            ANTHROPIC_DELTA,
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n",
        ],
        end: BodyEnd::Cut,
        want: Some(FailureReason::Truncated),
        message_has: "the connection broke before message_stop after 1 content events",
    },
    Golden {
        name: "anthropic: a refusal",
        kind: "anthropic",
        path: "/v1/messages",
        content_type: SSE,
        events: &[
            ANTHROPIC_DELTA,
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\"},\"usage\":{\"output_tokens\":1}}\n\n",
            ANTHROPIC_STOP,
        ],
        end: BodyEnd::LastChunk,
        want: Some(FailureReason::StreamError),
        message_has: "finish reason refusal",
    },
    Golden {
        name: "anthropic: complete, then the body cut",
        kind: "anthropic",
        path: "/v1/messages",
        content_type: SSE,
        events: &[
            ANTHROPIC_DELTA,
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n",
            ANTHROPIC_STOP,
        ],
        end: BodyEnd::Cut,
        want: Some(FailureReason::Truncated),
        message_has: "the HTTP body broke after message_stop",
    },
    Golden {
        name: "ollama: no done line, the body ended",
        kind: "ollama",
        path: "/api/chat",
        content_type: NDJSON,
        events: &[OLLAMA_TOKEN],
        end: BodyEnd::LastChunk,
        want: Some(FailureReason::Truncated),
        message_has: "without its terminator (the final line with \"done\": true)",
    },
    Golden {
        name: "ollama: done, then the body cut",
        kind: "ollama",
        path: "/api/chat",
        content_type: NDJSON,
        events: &[OLLAMA_TOKEN, OLLAMA_DONE],
        end: BodyEnd::Cut,
        want: Some(FailureReason::Truncated),
        message_has: "the HTTP body broke after the final line",
    },
    Golden {
        name: "tgi: the final event, then the body cut",
        kind: "tgi",
        path: "/generate_stream",
        content_type: SSE,
        events: &[TGI_LAST],
        end: BodyEnd::Cut,
        want: Some(FailureReason::Truncated),
        message_has: "the HTTP body broke after the final event with details",
    },
];

#[tokio::test(flavor = "multi_thread")]
async fn golden_cuts_in_every_protocol() {
    let mut problems = Vec::new();
    for g in GOLDEN {
        let reply = chunked_reply(g.content_type, g.events, g.end);
        let addr = answering_server(move |_| reply.clone());
        let o = run_probe(&format!(
            "name: g\nkind: {}\nurl: http://{addr}{}\nmodel: m\ntimeout: 2s\nfirst_token_timeout: 1s",
            g.kind, g.path
        ))
        .await;
        let f = o.observation.failure();
        let (got, message) = (f.map(|f| f.reason), f.map(|f| f.message.as_str()).unwrap_or(""));
        if got != g.want || !message.contains(g.message_has) {
            problems.push(format!(
                "{}: expected {:?} with {:?}, got {got:?}: {message}",
                g.name, g.want, g.message_has
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_json_answer_whose_chunked_body_never_ends_is_truncated() {
    // The simulator's abort-after-done on a non-streaming answer: the whole JSON document
    // in one chunk, then the connection closes without the last chunk.
    let sim = simulator(Script::default()).await;
    let o = run_probe(&format!(
        "name: k\nkind: kserve_v2\nurl: http://{}/v2/models/m/infer?fault=abort-after-done&ttft=5ms\ntimeout: 2s\ninput: {{name: x, datatype: FP32, shape: [1, 2], data: [0.1, 0.2]}}",
        sim.addr
    ))
    .await;
    let f = o.observation.failure().expect("a cut body is not a success");
    assert_eq!(f.reason, FailureReason::Truncated, "{}", f.message);
}
