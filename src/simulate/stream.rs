//! One streamed answer: the request's script and fault, the status line and head, the
//! tokens on their time grid, and each fault written as a broken server writes it. What
//! the messages look like is the [`Dialect`]'s; when and how they reach the socket is here.

use std::sync::atomic::Ordering;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::dialect;
use super::http1::{self, LAST_CHUNK, Request, wait_for_peer_close, write_chunks, write_json};
use super::knowing::{self, KnownReply};
use super::{Fault, Script, Shared, SimRecord, draw_fault, script_for};
use crate::probe::dialect::{Dialect, Reply, Stop};

/// The tokens, in turn.
const WORDS: &[&str] = &[
    " The",
    " answer",
    " depends",
    " on",
    " the",
    " load",
    " of",
    " the",
    " server",
    ",",
    " but",
    " in",
    " most",
    " cases",
    " it",
    " arrives",
    " within",
    " a",
    " second",
    ".",
    " Latency",
    " is",
    " measured",
    " from",
    " the",
    " first",
    " byte",
    " to",
    " the",
    " last",
    " token",
    ".",
];

/// Streams one answer in `dialect` and logs what was done.
pub(super) async fn generate(
    socket: &mut TcpStream,
    request: &Request,
    shared: &Shared,
    dialect: &dyn Dialect,
) -> bool {
    let received = Instant::now();
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let mut script = script_for(&shared.script, &request.query);
    // A server with few slots: the request waits for one (its queue is in its TTFT).
    let _slot = match &shared.slots {
        Some(slots) => slots.acquire().await.ok(),
        None => None,
    };
    let begin = Instant::now();
    // A cold model is loaded first.
    let load = shared.begin_generation(begin);
    script.ttft += load;
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let model = body
        .get("model")
        .and_then(|m| m.as_str())
        .unwrap_or("sim-model")
        .to_owned();
    let cap = dialect::max_tokens(dialect, &body).unwrap_or(u64::MAX);
    // A question with a known answer (a canary, a tool call, a schema) gets it; else words.
    let known = knowing::reply_for(&body).filter(|k| match k {
        KnownReply::ToolCall { name, pieces } => !dialect.tool_call(&placeholder(), name, pieces).is_empty(),
        KnownReply::Text(_) => true,
    });
    let (tokens, stop) = match &known {
        Some(KnownReply::Text(words)) if words.len() as u64 <= cap => (words.len() as u32, Stop::EndOfAnswer),
        Some(KnownReply::Text(_)) => (cap as u32, Stop::Limit),
        Some(KnownReply::ToolCall { pieces, .. }) => (pieces.len() as u32, Stop::ToolCall),
        None => ((script.tokens as u64).min(cap) as u32, Stop::Limit),
    };
    let reply = Reply {
        id: format!("sim-{id}"),
        model: &model,
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs(),
        include_usage: body
            .pointer("/stream_options/include_usage")
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
        ndjson: dialect.ndjson(),
        stop,
        load,
    };

    let fault = draw_fault(&script, id);
    let mut record = SimRecord::new(id, &request.path, fault, received);
    let answer = Answer {
        tokens,
        known: known.as_ref(),
    };
    record.started = begin;
    let keep = stream_response(socket, &script, fault, dialect, &reply, answer, &mut record).await;
    shared.end_generation();
    tracing::debug!(
        id,
        path = %record.path,
        fault = ?record.fault,
        ttft_ms = record.first_token_written.map(|t| (t - received).as_secs_f64() * 1000.0),
        total_ms = record.done_written.map(|t| (t - received).as_secs_f64() * 1000.0),
        "Simulator served a request."
    );
    shared.log.push(record);
    keep
}

/// A reply's only use of the dialect before it exists: whether it writes tool calls.
fn placeholder() -> Reply<'static> {
    Reply {
        id: String::new(),
        model: "",
        created: 0,
        include_usage: false,
        ndjson: false,
        stop: Stop::ToolCall,
        load: std::time::Duration::ZERO,
    }
}

/// What one stream carries: `tokens` tokens, of the known reply if there is one.
struct Answer<'a> {
    tokens: u32,
    known: Option<&'a KnownReply>,
}

async fn stream_response(
    socket: &mut TcpStream,
    script: &Script,
    fault: Option<Fault>,
    dialect: &dyn Dialect,
    reply: &Reply<'_>,
    answer: Answer<'_>,
    record: &mut SimRecord,
) -> bool {
    let tokens = answer.tokens;
    // The script's times run from when the request got a slot.
    let received = record.started;
    match fault {
        Some(Fault::Close) => return false,
        Some(Fault::StallHeaders) => {
            wait_for_peer_close(socket).await;
            return false;
        }
        _ => {}
    }
    tokio::time::sleep_until(received + script.header_delay.min(script.ttft)).await;
    let status_fault = match fault {
        Some(Fault::Http500) => Some((
            500,
            "Internal Server Error",
            "simulated internal error",
            "internal_error",
        )),
        Some(Fault::Http429) => Some((
            429,
            "Too Many Requests",
            "simulated rate limit",
            "rate_limit_exceeded",
        )),
        Some(Fault::Loading) => Some((503, "Service Unavailable", "Loading model", "unavailable_error")),
        _ => None,
    };
    if let Some((status, text, message, kind)) = status_fault {
        let body = json!({"error": {"message": message, "type": kind, "code": status}});
        record.headers_written = Some(Instant::now());
        let extra: &[(&str, &str)] = if status == 429 {
            &[("Retry-After", "1")]
        } else {
            &[]
        };
        return write_json(socket, status, text, &body, extra).await;
    }
    let content_type = match (fault, dialect.ndjson()) {
        (Some(Fault::WrongContentType), _) => "application/json",
        (_, true) => "application/x-ndjson",
        (_, false) => "text/event-stream",
    };
    let head = http1::chunked_head(content_type, &[("Cache-Control", "no-cache")]);
    record.headers_written = Some(Instant::now());
    if socket.write_all(head.as_bytes()).await.is_err()
        || write_chunks(socket, &dialect.preamble(reply)).await.is_err()
    {
        return false;
    }
    if fault == Some(Fault::Empty) {
        record.done_written = Some(Instant::now());
        return write_chunks(socket, &dialect.empty_end(reply)).await.is_ok()
            && socket.write_all(LAST_CHUNK.as_bytes()).await.is_ok();
    }
    if let Some(KnownReply::ToolCall { name, pieces }) = answer.known {
        // A tool call as the server streams it, on the same time grid as tokens.
        tokio::time::sleep_until(received + script.ttft).await;
        let at = Instant::now();
        if write_chunks(socket, &dialect.tool_call(reply, name, pieces))
            .await
            .is_err()
        {
            return false;
        }
        record.first_token_written = Some(at);
        record.tokens = tokens;
        let mut tail = String::new();
        for m in dialect.finish(reply, tokens, received.elapsed()) {
            http1::push_chunk(&mut tail, &m);
        }
        tail.push_str(LAST_CHUNK);
        record.done_written = Some(Instant::now());
        return socket.write_all(tail.as_bytes()).await.is_ok();
    }
    let fault_at = tokens / 2;
    let mut i: u32 = 0;
    loop {
        if fault != Some(Fault::Endless) && i >= tokens {
            break;
        }
        // Each token has its own time on the grid, so delays do not accumulate.
        tokio::time::sleep_until(received + script.ttft + script.token_gap * i).await;
        if i == fault_at {
            match fault {
                Some(Fault::Truncate) => {
                    // Half a message inside a chunk that never completes.
                    let _ = socket
                        .write_all(b"40\r\ndata: {\"choices\":[{\"delta\":{\"cont")
                        .await;
                    return false;
                }
                Some(Fault::StallStream) => {
                    wait_for_peer_close(socket).await;
                    return false;
                }
                Some(Fault::InbandError) => {
                    let _ = write_chunks(socket, &dialect.in_band_error(reply)).await;
                    let _ = socket.write_all(LAST_CHUNK.as_bytes()).await;
                    return true;
                }
                Some(Fault::Garbage) => {
                    let _ = write_chunks(socket, &[dialect.garbage()]).await;
                    let _ = write_chunks(socket, &dialect.finish(reply, i, received.elapsed())).await;
                    let _ = socket.write_all(LAST_CHUNK.as_bytes()).await;
                    return true;
                }
                _ => {}
            }
        }
        let word = match answer.known {
            Some(KnownReply::Text(words)) if !words.is_empty() => words[i as usize % words.len()].as_str(),
            _ => WORDS[i as usize % WORDS.len()],
        };
        let n = if fault == Some(Fault::Endless) {
            u32::MAX
        } else {
            tokens
        };
        let chunk = dialect.token(reply, i, n, word);
        // The ground truth: just before the write, after the chunk is built.
        let at = Instant::now();
        if write_chunks(socket, &[chunk]).await.is_err() {
            return false;
        }
        if i == 0 {
            record.first_token_written = Some(at);
        }
        record.tokens = i + 1;
        i += 1;
    }
    // The terminator and the end of the body leave in one write, timed just before it.
    let mut tail = String::new();
    for m in dialect.finish(reply, tokens, received.elapsed()) {
        http1::push_chunk(&mut tail, &m);
    }
    let abort = fault == Some(Fault::AbortAfterDone);
    if !abort {
        tail.push_str(LAST_CHUNK);
    }
    record.done_written = Some(Instant::now());
    socket.write_all(tail.as_bytes()).await.is_ok() && !abort
}
