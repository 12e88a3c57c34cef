//! Each probe kind against the simulator and small fakes on 127.0.0.1: the success path,
//! TTFT and total against scripted delays, the faults particular to one protocol or one
//! server (a slow first token after the role chunk, a close after the request, llama.cpp's
//! `error:` field), connection reuse, and completion: a success is a complete answer in a
//! complete HTTP message, replayed from real servers' captures. The faults every kind
//! shares are in `kinds` (through the simulator) and `faults` (byte-exact), each checked
//! for every kind.

use std::time::Duration;

use crate::support::*;
use inferprobe::outcome::{FailureReason, TokenSource};
use inferprobe::simulate::Script;

fn chat(addr: std::net::SocketAddr, query: &str, extra: &str) -> String {
    format!(
        "name: chat\nkind: openai_chat\nurl: http://{addr}/v1/chat/completions?{query}\nmodel: sim-model\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_success_counts_tokens_and_ignores_the_early_role_chunk() {
    // Timed: it bounds the run in wall-clock time; see support::timed.
    let _turn = timed();
    let sim = simulator(Script::default()).await;
    let o = run_probe(&chat(
        sim.addr,
        "ttft=300ms&token_gap=10ms&tokens=12",
        "timeout: 5s",
    ))
    .await;
    let obs = &o.observation;
    assert!(obs.success(), "{:?}", obs.result);
    assert_eq!(obs.http_status, Some(200));
    assert_eq!(obs.output_tokens, Some(12));
    assert_eq!(obs.token_source, Some(TokenSource::Usage));
    // The simulator sends the role chunk with the headers, 300 ms before any token: a
    // TTFT that stopped on it would be ~0.
    let ttft = obs.ttft().unwrap();
    assert!(ttft >= Duration::from_millis(300), "{ttft:?}");
    assert!(obs.ttfb().unwrap() < Duration::from_millis(200));
    // Total covers 11 more gaps of 10 ms and the terminator.
    assert!(obs.total().unwrap() >= Duration::from_millis(410));
    assert_eq!(obs.chunk_gaps.len(), 11);
    assert!(obs.tpot().unwrap() >= Duration::from_millis(9));
    assert!(!obs.connection_reused);
    assert!(obs.dns().is_some() && obs.connect().is_some() && obs.tls().is_none());
    assert_ne!(obs.prompt_bucket, "none");
}

#[tokio::test(flavor = "multi_thread")]
async fn ttft_and_total_agree_with_the_servers_own_timestamps() {
    let sim = simulator(Script::default()).await;
    let o = run_probe(&chat(
        sim.addr,
        "ttft=300ms&token_gap=20ms&tokens=8",
        "timeout: 5s",
    ))
    .await;
    let obs = &o.observation;
    assert!(obs.success(), "{:?}", obs.result);
    let record = sim.log.records().pop().unwrap();
    // Causality: we cannot see a byte before the server wrote it.
    let first = obs.marks.first_token.unwrap();
    let end = obs.marks.end.unwrap();
    assert!(first >= record.first_token_written.unwrap().into_std());
    assert!(end >= record.done_written.unwrap().into_std());
    // And our request started before the server received it.
    assert!(obs.marks.start <= record.received.into_std());
}

#[tokio::test(flavor = "multi_thread")]
async fn completions_success() {
    let sim = simulator(Script::default()).await;
    let o = run_probe(&format!(
        "name: comp\nkind: openai_completions\nurl: http://{}/v1/completions?ttft=50ms&tokens=5\nmodel: m\nprompts: {{inline: [\"Once upon a time\"]}}",
        sim.addr
    ))
    .await;
    assert!(o.observation.success(), "{:?}", o.observation.result);
    assert_eq!(o.observation.output_tokens, Some(5));
    assert_eq!(o.observation.prompt_bucket, "short");
}

#[tokio::test(flavor = "multi_thread")]
async fn http_probe_checks_status_and_body() {
    let sim = simulator(Script::default()).await;
    let ok = run_probe(&format!(
        "name: h\nkind: http\nurl: http://{}/health\nexpect: {{contains: ok}}",
        sim.addr
    ))
    .await;
    assert!(ok.observation.success(), "{:?}", ok.observation.result);
    assert!(ok.observation.total().is_some() && ok.observation.ttft().is_none());

    let wrong = run_probe(&format!(
        "name: h\nkind: http\nurl: http://{}/health\nexpect: {{contains: nope}}",
        sim.addr
    ))
    .await;
    assert_eq!(
        wrong.observation.failure().unwrap().reason,
        FailureReason::Assertion
    );

    let missing = run_probe(&format!(
        "name: h\nkind: http\nurl: http://{}/nothing-here",
        sim.addr
    ))
    .await;
    let f = missing.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Http4xx);
    assert!(f.message.contains("no route"), "{}", f.message);

    let allowed = run_probe(&format!(
        "name: h\nkind: http\nurl: http://{}/nothing-here\nexpect: {{status: 404}}",
        sim.addr
    ))
    .await;
    assert!(allowed.observation.success());
}

/// One fault: the scripted query, the reason we must report, and a bound on how long the
/// run may take (the probe's timeouts are 1 s to the first token, 2 s in total).
async fn assert_fault(query: &str, reason: FailureReason) -> String {
    // Timed: it bounds the run in wall-clock time; see support::timed.
    let _turn = timed();
    let sim = simulator(Script::default()).await;
    let started = std::time::Instant::now();
    let o = run_probe(&chat(sim.addr, query, "timeout: 2s\nfirst_token_timeout: 1s")).await;
    let took = started.elapsed();
    let f = o
        .observation
        .failure()
        .unwrap_or_else(|| panic!("{query}: run succeeded"));
    assert_eq!(f.reason, reason, "{query}: {}", f.message);
    assert!(took < Duration::from_millis(2600), "{query}: took {took:?}");
    f.message.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_first_token_is_a_first_token_timeout() {
    let m = assert_fault("ttft=1500ms", FailureReason::TimeoutFirstToken).await;
    assert!(m.contains("no token within 1s"), "{m}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_fast_body_stops_at_the_byte_cap() {
    let sim = simulator(Script::default()).await;
    let o = run_probe(&chat(
        sim.addr,
        "fault=endless&ttft=1ms&token_gap=0ms",
        "timeout: 10s\nmax_response_bytes: 65536",
    ))
    .await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::InvalidResponse);
    assert!(f.message.contains("65536-byte cap"), "{}", f.message);
    assert!(o.observation.bytes_received <= 65536 + 16384);
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_closed_after_the_request_is_truncated() {
    let m = assert_fault("fault=close", FailureReason::Truncated).await;
    assert!(!m.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn llama_cpp_error_field_mid_stream_is_a_stream_error() {
    // The exact bytes a llama.cpp server sends when the context overflows mid-request.
    let addr = raw_server(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n\
          data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
          error: {\"code\":400,\"message\":\"the request exceeds the available context size\",\"type\":\"exceed_context_size_error\"}\n\n\
          data: [DONE]\n\n",
        Duration::ZERO,
    );
    let o = run_probe(&chat(addr, "", "timeout: 2s")).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::StreamError);
    assert!(f.message.contains("exceeds the available context size"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_without_done_that_closes_is_truncated() {
    // llama-cpp-python answers a corrupt image with 200 and an empty stream, no [DONE].
    let addr = raw_server(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\nConnection: close\r\n\r\n\
          data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        Duration::ZERO,
    );
    let o = run_probe(&chat(addr, "", "timeout: 2s")).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Truncated);
    assert!(
        f.message
            .contains("without its terminator (data: [DONE]) after 1 content events"),
        "{}",
        f.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_502_html_page_is_http_5xx_with_a_short_message() {
    let addr = raw_server(
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: 52\r\nConnection: close\r\n\r\n<html><body><h1>502 Bad Gateway</h1></body></html>\n",
        Duration::ZERO,
    );
    let o = run_probe(&chat(addr, "", "timeout: 2s")).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Http5xx);
    assert!(f.message.starts_with("HTTP 502: <html>"), "{}", f.message);
}

#[tokio::test(flavor = "multi_thread")]
async fn error_bodies_never_echo_configured_secrets() {
    // A server that echoes the key back in its error, as some proxies do.
    let addr = raw_server(
        b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n\
          {\"error\":{\"message\":\"Incorrect API key provided: sk-test-marker-7f3a9\"}}",
        Duration::ZERO,
    );
    // SAFETY of the test: the variable is unique to this test.
    let yaml = chat(
        addr,
        "",
        "timeout: 2s\nheaders:\n  Authorization: \"Bearer sk-test-marker-7f3a9\"",
    );
    let o = run_probe(&yaml).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Http4xx);
    assert!(!f.message.contains("sk-test-marker"), "{}", f.message);
    assert!(f.message.contains("<redacted>"));
    assert!(!o.to_json().to_string().contains("sk-test-marker"));
}

#[tokio::test(flavor = "multi_thread")]
async fn reused_connections_skip_connect_on_the_second_run() {
    let sim = simulator(Script::default()).await;
    let probe = build_probe(&chat(sim.addr, "ttft=5ms&tokens=3", "reuse_connections: true"));
    let first = probe.run_once().await.observation;
    let second = probe.run_once().await.observation;
    assert!(
        first.success() && second.success(),
        "{:?} {:?}",
        first.result,
        second.result
    );
    assert!(!first.connection_reused && first.connect().is_some());
    assert!(second.connection_reused && second.connect().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn fresh_connections_by_default() {
    let sim = simulator(Script::default()).await;
    let probe = build_probe(&chat(sim.addr, "ttft=5ms&tokens=3", ""));
    for _ in 0..2 {
        let o = probe.run_once().await.observation;
        assert!(o.success() && !o.connection_reused && o.connect().is_some());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stall_on_a_reused_connection_is_blamed_on_the_server_not_dns() {
    use std::io::{Read, Write};
    // One connection: a complete answer to the first request, silence after the second.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let mut buf = [0u8; 65536];
        let mut requests = 0;
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                return;
            }
            if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                requests += 1;
                if requests == 1 {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    s.write_all(head.as_bytes()).unwrap();
                    s.write_all(body.as_bytes()).unwrap();
                }
            }
        }
    });
    let probe = build_probe(&chat(
        addr,
        "",
        "reuse_connections: true\ntimeout: 2s\nfirst_token_timeout: 1s",
    ));
    let first = probe.run_once().await.observation;
    assert!(first.success(), "{:?}", first.result);
    let second = probe.run_once().await.observation;
    assert!(second.connection_reused);
    let f = second.failure().unwrap();
    assert_eq!(f.reason, FailureReason::TimeoutFirstToken, "{}", f.message);
}

// ---------------------------------------------------------------------------------------
// Completion: a success is a complete answer in a complete HTTP message.

/// Serves `parts` as one chunked event stream ending as `end` says, and runs `kind` on it.
async fn stream_run(kind: &str, parts: &[&str], end: BodyEnd, extra: &str) -> inferprobe::outcome::Outcome {
    let reply = chunked_reply("text/event-stream", parts, end);
    let addr = answering_server(move |_| reply.clone());
    let path = if kind == "openai_completions" {
        "/v1/completions"
    } else {
        "/v1/chat/completions"
    };
    run_probe(&format!(
        "name: c\nkind: {kind}\nurl: http://{addr}{path}\nmodel: tiny-llama\ntimeout: 2s\n{extra}"
    ))
    .await
}

fn reason_of(o: &inferprobe::outcome::Outcome) -> (Option<FailureReason>, String) {
    let f = o.observation.failure();
    (
        f.map(|f| f.reason),
        f.map(|f| f.message.clone()).unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn real_llama_streams_succeed_with_their_finish_reason() {
    for (transcript, kind) in [
        ("llama-server-tiny-chat-stream.txt", "openai_chat"),
        ("llama-server-tiny-chat-stream-include-usage.txt", "openai_chat"),
        ("llama-server-tiny-vision-chat-image-stream.txt", "openai_chat"),
        ("llama-server-tiny-completions-stream.txt", "openai_completions"),
        ("llama-py-tiny-chat-stream-include-usage.txt", "openai_chat"),
        ("llama-py-tiny-completions-stream.txt", "openai_completions"),
    ] {
        let events = transcript_events(transcript);
        let parts: Vec<&str> = events.iter().map(String::as_str).collect();
        let o = stream_run(kind, &parts, BodyEnd::LastChunk, "").await;
        let obs = &o.observation;
        assert!(obs.success(), "{transcript}: {:?}", obs.result);
        // `length` (max_tokens reached) is a success, and says so.
        assert_eq!(obs.finish_reason.as_deref(), Some("length"), "{transcript}");
        assert_eq!(o.to_json()["finish_reason"], "length", "{transcript}");
        // The total ends at [DONE], not at the end of the body.
        assert!(obs.total().unwrap() >= obs.ttft().unwrap());
    }
}

/// Input tokens through the whole driver: the real server's count where its stream gives
/// one (usage, or llama-server's timings), else our estimate from the prompt, flagged.
#[tokio::test(flavor = "multi_thread")]
async fn real_servers_input_tokens_or_our_flagged_estimate() {
    // "Hello, how are you?": 19 characters, 5 tokens at about four characters a token.
    let prompt = "prompts: [\"Hello, how are you?\"]";
    for (transcript, kind, want) in [
        (
            "llama-server-tiny-chat-stream.txt",
            "openai_chat",
            (57, TokenSource::Usage),
        ),
        (
            "llama-server-tiny-chat-stream-include-usage.txt",
            "openai_chat",
            (57, TokenSource::Usage),
        ),
        (
            "llama-server-tiny-vision-chat-image-stream.txt",
            "openai_chat",
            (75, TokenSource::Usage),
        ),
        (
            "llama-server-tiny-completions-stream.txt",
            "openai_completions",
            (15, TokenSource::Usage),
        ),
        (
            "llama-py-tiny-chat-stream-include-usage.txt",
            "openai_chat",
            (5, TokenSource::Estimated),
        ),
        (
            "llama-py-tiny-completions-stream.txt",
            "openai_completions",
            (5, TokenSource::Estimated),
        ),
    ] {
        let events = transcript_events(transcript);
        let parts: Vec<&str> = events.iter().map(String::as_str).collect();
        let o = stream_run(kind, &parts, BodyEnd::LastChunk, prompt).await;
        let obs = &o.observation;
        assert!(obs.success(), "{transcript}: {:?}", obs.result);
        assert_eq!(
            (obs.input_tokens, obs.input_token_source),
            (Some(want.0), Some(want.1)),
            "{transcript}"
        );
    }
    // A request the server refused (HTTP 500) took no prompt: no input tokens. One cut
    // mid-stream did (the server read the prompt): our estimate, flagged.
    let sim = simulator(Script::default()).await;
    let refused = run_probe(&chat(sim.addr, "fault=http-500", prompt))
        .await
        .observation;
    assert_eq!(refused.failure().unwrap().reason, FailureReason::Http5xx);
    assert_eq!((refused.input_tokens, refused.input_token_source), (None, None));
    let cut = run_probe(&chat(sim.addr, "fault=truncate", prompt))
        .await
        .observation;
    assert_eq!(cut.failure().unwrap().reason, FailureReason::Truncated);
    assert_eq!(
        (cut.input_tokens, cut.input_token_source),
        (Some(5), Some(TokenSource::Estimated))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_a_concurrent_request_aborted_is_truncated() {
    // llama-cpp-python under two concurrent requests: the role event, [DONE] with no
    // finish_reason and no content, then the connection closed without the last chunk.
    let events = transcript_events("llama-py-medium-chat-stream-interrupted.txt");
    let parts: Vec<&str> = events.iter().map(String::as_str).collect();
    let o = stream_run("openai_chat", &parts, BodyEnd::Cut, "").await;
    let (reason, message) = reason_of(&o);
    assert_eq!(reason, Some(FailureReason::Truncated), "{message}");
    assert!(
        message.contains("data: [DONE] came without a finish_reason"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn done_without_a_finish_reason_is_truncated_even_when_the_body_ends() {
    // Every token and [DONE], a properly ended body, but no choice ever finished: a
    // server that gave up on the generation and still closed the stream politely.
    let parts = [
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
        "data: [DONE]\n\n",
    ];
    let (reason, message) = reason_of(&stream_run("openai_chat", &parts, BodyEnd::LastChunk, "").await);
    assert_eq!(reason, Some(FailureReason::Truncated), "{message}");
    assert_eq!(
        message,
        "data: [DONE] came without a finish_reason: the answer was cut short after 1 content events"
    );
    // Content after a finish_reason means that finish was not the last word.
    let late = [
        "data: {\"choices\":[{\"index\":0,\"text\":\"A\",\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"text\":\" late\",\"finish_reason\":null}]}\n\n",
        "data: [DONE]\n\n",
    ];
    let (reason, _) = reason_of(&stream_run("openai_completions", &late, BodyEnd::LastChunk, "").await);
    assert_eq!(reason, Some(FailureReason::Truncated));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_cut_after_done_is_truncated() {
    // A complete real stream, finish_reason and [DONE] included, then the connection
    // closes without the chunked body's last chunk.
    let events = transcript_events("llama-server-tiny-chat-stream-include-usage.txt");
    let parts: Vec<&str> = events.iter().map(String::as_str).collect();
    let o = stream_run("openai_chat", &parts, BodyEnd::Cut, "").await;
    let (reason, message) = reason_of(&o);
    assert_eq!(reason, Some(FailureReason::Truncated), "{message}");
    assert!(
        message.starts_with("the HTTP body broke after data: [DONE] instead of ending"),
        "{message}"
    );
    // What it measured stays: the total ran to [DONE].
    assert!(o.observation.total().is_some() && o.observation.ttft().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_content_length_not_reached_after_done_is_truncated() {
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len() + 20
    );
    let addr = answering_server(move |_| reply.clone().into_bytes());
    let o = run_probe(&chat(addr, "", "timeout: 2s")).await;
    let (reason, message) = reason_of(&o);
    assert_eq!(reason, Some(FailureReason::Truncated), "{message}");
    assert!(message.contains("after data: [DONE]"), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn finish_reasons_without_an_answer_fail_with_the_reason() {
    let finish = |r: &str| {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{r}\"}}]}}\n\n")
    };
    let content = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
    let refusal =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"I can't help with that.\"}}]}\n\n";
    for (first, finish_reason, want, says) in [
        (
            content,
            "content_filter",
            FailureReason::StreamError,
            "finish reason content_filter",
        ),
        (
            content,
            "error",
            FailureReason::StreamError,
            "finish reason error",
        ),
        (content, "abort", FailureReason::Truncated, "finish reason abort"),
        (refusal, "stop", FailureReason::StreamError, "a refusal"),
    ] {
        let end = finish(finish_reason);
        let parts = [first, end.as_str(), "data: [DONE]\n\n"];
        let o = stream_run("openai_chat", &parts, BodyEnd::LastChunk, "").await;
        let (reason, message) = reason_of(&o);
        assert_eq!(reason, Some(want), "{finish_reason}: {message}");
        assert!(message.contains(says), "{message}");
        assert_eq!(o.to_json()["finish_reason"], finish_reason);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn expect_finish_reason_demands_one() {
    let events = transcript_events("llama-server-tiny-chat-stream.txt");
    let parts: Vec<&str> = events.iter().map(String::as_str).collect();
    let o = stream_run(
        "openai_chat",
        &parts,
        BodyEnd::LastChunk,
        "expect: {finish_reason: [stop]}",
    )
    .await;
    let (reason, message) = reason_of(&o);
    assert_eq!(reason, Some(FailureReason::Assertion), "{message}");
    assert_eq!(message, "expected finish reason stop, got length");
    let o = stream_run(
        "openai_chat",
        &parts,
        BodyEnd::LastChunk,
        "expect: {finish_reason: [stop, length]}",
    )
    .await;
    assert!(o.observation.success(), "{:?}", o.observation.result);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_gap_between_usage_and_events_is_said() {
    // Two content events, but the usage says 40 tokens: a proxy coalescing chunks, or a
    // wrong count. The run succeeds (tokens from usage) and its message says so.
    let parts = [
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi there\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" friend\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"completion_tokens\":40}}\n\n",
        "data: [DONE]\n\n",
    ];
    let o = stream_run("openai_chat", &parts, BodyEnd::LastChunk, "").await;
    assert!(o.observation.success(), "{:?}", o.observation.result);
    let json = o.to_json();
    assert_eq!(json["token_source"], "usage");
    assert_eq!(json["output_tokens"], 40);
    assert_eq!(
        json["message"],
        "usage reports 40 output tokens but 2 content events arrived; the usage count is used"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_held_open_after_done_is_let_go_without_failing() {
    // Timed: it bounds the run in wall-clock time; see support::timed.
    let _turn = timed();
    // A proxy that forwards [DONE] but holds the chunked body open: not a cut (nothing
    // broke), so the run succeeds once the grace is over; the total still ends at [DONE].
    let events = transcript_events("llama-server-tiny-chat-stream.txt");
    let parts: Vec<&str> = events.iter().map(String::as_str).collect();
    let open = chunked_reply("text/event-stream", &parts, BodyEnd::Cut);
    let addr = scripted_server(move |_| vec![Step::Write(open.clone()), Step::Hold(Duration::from_secs(8))]);
    let started = std::time::Instant::now();
    let o = run_probe(&chat(addr, "", "timeout: 5s")).await;
    assert!(o.observation.success(), "{:?}", o.observation.result);
    assert!(o.observation.total().unwrap() < Duration::from_secs(1));
    // Let go after the grace (1 s), long before the server's hold or the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}
