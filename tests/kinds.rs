//! Every streaming kind against the simulator speaking its protocol: the success path
//! with exact token counts and TTFT after the scripted delay, then each protocol's own
//! in-band error, a truncated stream, garbage, a wrong content type and an empty answer.
#![forbid(unsafe_code)]

mod support;

use std::time::Duration;

use inferprobe::outcome::{FailureReason, TokenSource};
use inferprobe::simulate::Script;
use support::*;

/// (kind, path on the simulator)
const KINDS: &[(&str, &str)] = &[
    ("openai_chat", "/v1/chat/completions"),
    ("openai_completions", "/v1/completions"),
    ("openai_responses", "/v1/responses"),
    ("anthropic", "/v1/messages"),
    ("ollama", "/api/chat"),
    ("ollama", "/api/generate"),
    ("tgi", "/generate_stream"),
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

/// Runs every kind against the fault at once and checks each reason and duration.
async fn expect_reason(query: &'static str, reason: FailureReason) {
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
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_protocols_in_band_error_is_a_stream_error() {
    expect_reason(
        "fault=inband-error&ttft=10ms&tokens=6",
        FailureReason::StreamError,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_stream_is_truncated_in_every_protocol() {
    expect_reason("fault=truncate&ttft=10ms&tokens=6", FailureReason::Truncated).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_is_an_invalid_response_in_every_protocol() {
    expect_reason("fault=garbage&ttft=10ms&tokens=6", FailureReason::InvalidResponse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_content_type_is_an_invalid_response_in_every_protocol() {
    expect_reason(
        "fault=wrong-content-type&ttft=10ms&tokens=6",
        FailureReason::InvalidResponse,
    )
    .await;
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
    expect_reason("fault=http-500", FailureReason::Http5xx).await;
    expect_reason("fault=http-429", FailureReason::RateLimited).await;
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
