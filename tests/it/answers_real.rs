//! Answer checks against the real llama.cpp server (issue 28), built from the llama-cpp-python
//! sdist on PyPI by scripts/real-servers/llama_server.sh: golden streams it produced
//! (tests/transcripts/llama-server-tiny-*), and the live servers .ci/run starts. Its model
//! has random weights: its answers are exactly the gibberish a broken kernel produces, so
//! every canary must fail as `wrong_answer`; the tool-calling build of it (18083) calls
//! tools and follows a `json_schema` grammar.

use std::time::Duration;

use inferprobe::outcome::{FailureReason, Outcome};

use crate::support::{BodyEnd, answering_server, build_probe, chunked_reply, run_probe, transcript_events};

/// The tools and formats of the captures' requests, as probe keys (JSON is YAML).
const WEATHER_ENUM: &str = r#"tools: [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}}, "required": ["city"]}}}]"#;
const WEATHER_FREE: &str = r#"tools: [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"#;
const CAPITAL_ENUM: &str = r#"response_format: {"type": "json_schema", "json_schema": {"name": "capital", "schema": {"type": "object", "properties": {"capital": {"type": "string", "enum": ["Paris", "London", "Berlin"]}}, "required": ["capital"], "additionalProperties": false}, "strict": true}}"#;
const CAPITAL_MAXLEN: &str = r#"response_format: {"type": "json_schema", "json_schema": {"name": "capital", "schema": {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 12}}, "required": ["capital"], "additionalProperties": false}, "strict": true}}"#;

/// Replays a capture to `kind` with the probe keys `extra`.
async fn replay(transcript: &str, kind: &str, path: &str, extra: &str) -> Outcome {
    let events = transcript_events(transcript);
    let parts: Vec<&str> = events.iter().map(String::as_str).collect();
    let reply = chunked_reply("text/event-stream", &parts, BodyEnd::LastChunk);
    let addr = answering_server(move |_| reply.clone());
    run_probe(&format!(
        "name: real\nkind: {kind}\nurl: http://{addr}{path}\nmodel: tiny-llama\ntimeout: 2s\nmax_tokens: 256\nprompts: [\"What is the weather in Paris?\"]\n{extra}\n"
    ))
    .await
}

/// A capture, the kind and route it is replayed to, the probe's keys, and the reason the
/// run must fail with (`None`: it must pass).
type Replay = (
    &'static str,
    (&'static str, &'static str),
    &'static str,
    Option<FailureReason>,
);

/// What llama-server streamed, read as a user of it needs: a call whose arguments came in
/// one-character pieces over dozens of chunks is one valid call; JSON under a schema's
/// grammar validates; the server's own error when the grammar breaks is `stream_error`; a
/// model that ignores the tools fails as `invalid_tool_call`.
#[tokio::test(flavor = "multi_thread")]
async fn real_llama_server_tool_calls_and_schemas_replayed() {
    let chat = ("openai_chat", "/v1/chat/completions");
    let cases: [Replay; 7] = [
        (
            "llama-server-tiny-chat-tools-stream.txt",
            chat,
            WEATHER_ENUM,
            None,
        ),
        (
            "llama-server-tiny-responses-tools-stream.txt",
            ("openai_responses", "/v1/responses"),
            WEATHER_ENUM,
            None,
        ),
        (
            "llama-server-tiny-chat-json-schema-stream.txt",
            chat,
            CAPITAL_ENUM,
            None,
        ),
        (
            "llama-server-tiny-chat-json-schema-maxlength-stream.txt",
            chat,
            CAPITAL_MAXLEN,
            None,
        ),
        (
            "llama-server-tiny-chat-tools-cut-stream.txt",
            chat,
            WEATHER_FREE,
            Some(FailureReason::StreamError),
        ),
        (
            "llama-server-tiny-chat-json-schema-cut-stream.txt",
            chat,
            CAPITAL_MAXLEN,
            Some(FailureReason::StreamError),
        ),
        (
            "llama-server-tiny-chat-tools-ignored-stream.txt",
            chat,
            WEATHER_ENUM,
            Some(FailureReason::InvalidToolCall),
        ),
    ];
    for (transcript, (kind, path), extra, reason) in cases {
        let o = replay(transcript, kind, path, extra).await;
        let got = o.observation.failure().map(|f| f.reason);
        assert_eq!(got, reason, "{transcript}: {:?}", o.observation.result);
    }
    // The real chunks split the arguments into many pieces: the call is still one.
    let events = transcript_events("llama-server-tiny-chat-tools-stream.txt");
    let pieces = events.iter().filter(|e| e.contains("\"arguments\"")).count();
    assert!(pieces > 5, "{pieces} argument pieces");
}

/// The live servers, when they answer (always under CI, which starts them).
fn live(addr: &str) -> bool {
    let reachable = addr
        .parse()
        .ok()
        .is_some_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok());
    if !reachable {
        let why = format!(
            "no llama-server at {addr}: start them with scripts/real-servers/llama_server.sh (and TOOLS=1 PORT=18083 ... start for the tool-calling one)"
        );
        let required = std::env::var("CI").is_ok_and(|v| v == "true")
            || std::env::var("INFERPROBE_REQUIRE_LLAMA_SERVER").is_ok();
        assert!(!required, "{why}");
        eprintln!("skipped: {why}");
    }
    reachable
}

/// Every canary against the random-weight model fails as `wrong_answer`, on both OpenAI
/// kinds llama-server serves; figures of a canary run (tokens, time) are printed for the
/// notes.
#[tokio::test(flavor = "multi_thread")]
async fn real_llama_server_gibberish_fails_every_canary_as_wrong_answer() {
    let plain = std::env::var("LLAMA_SERVER").unwrap_or_else(|_| "127.0.0.1:18080".into());
    if !live(&plain) {
        return;
    }
    for (kind, path) in [
        ("openai_chat", "/v1/chat/completions"),
        ("openai_responses", "/v1/responses"),
    ] {
        let probe = build_probe(&format!(
            "name: canary\nkind: {kind}\nurl: http://{plain}{path}\nmodel: tiny-llama\ntimeout: 20s\nprompts: {{builtin: [canary]}}\n"
        ));
        for _ in 0..5 {
            let o = probe.run_once().await;
            let obs = &o.observation;
            let f = obs
                .failure()
                .unwrap_or_else(|| panic!("{kind}: a canary passed on gibberish"));
            assert_eq!(f.reason, FailureReason::WrongAnswer, "{kind}: {}", f.message);
            eprintln!(
                "{kind}: {} input, {} output tokens, total {:?}: {}",
                obs.input_tokens.unwrap_or(0),
                obs.output_tokens.unwrap_or(0),
                obs.total(),
                f.message
            );
        }
    }
}

/// The tool-calling build: a `json_schema` answer validates; a tools run is classified (a
/// valid call, or which way the call is invalid); its next turn gets an answer read.
#[tokio::test(flavor = "multi_thread")]
async fn real_llama_server_schema_validates_and_tool_runs_are_classified() {
    let tools = std::env::var("LLAMA_SERVER_TOOLS").unwrap_or_else(|_| "127.0.0.1:18083".into());
    if !live(&tools) {
        return;
    }
    let o = run_probe(&format!(
        "name: schema\nkind: openai_chat\nurl: http://{tools}/v1/chat/completions\nmodel: tiny-llama\ntimeout: 20s\nmax_tokens: 256\nprompts: [\"What is the capital of France? Answer in JSON.\"]\n{CAPITAL_ENUM}\n"
    ))
    .await;
    assert!(o.observation.success(), "json_schema: {:?}", o.observation.result);
    for (kind, path) in [
        ("openai_chat", "/v1/chat/completions"),
        ("openai_responses", "/v1/responses"),
    ] {
        let probe = build_probe(&format!(
            "name: tools\nkind: {kind}\nurl: http://{tools}{path}\nmodel: tiny-llama\ntimeout: 20s\nmax_tokens: 256\nprompts: [\"What is the weather in Paris?\"]\n{WEATHER_ENUM}\n"
        ));
        for _ in 0..3 {
            let o = probe.run_once().await;
            let reason = o.observation.failure().map(|f| (f.reason, f.message.clone()));
            assert!(
                matches!(reason, None | Some((FailureReason::InvalidToolCall, _))),
                "{kind}: a tools run is a valid call or an invalid_tool_call: {reason:?}"
            );
            eprintln!("{kind} tools: {reason:?}");
        }
    }
}
