//! A built-in OpenAI-compatible streaming endpoint with scripted latency and faults, for
//! the demo, the tests, benchmarks and alerting fire drills.
//!
//! It speaks HTTP/1.1 by hand on a raw socket instead of through a server framework, so
//! that (a) faults can be exactly what a broken server does on the wire (a cut chunk, a
//! stall before the status line, a connection closed on accept) and (b) it can log the
//! monotonic instant just before each token is written to the socket: the ground truth
//! the benchmark compares our measurements with.
//!
//! Every option can be overridden per request in the query string, so one simulator can
//! serve a healthy and a faulty probe at once:
//! `http://127.0.0.1:8000/v1/chat/completions?ttft=800ms&fault=truncate&fault_rate=0.5`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::ValueEnum;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Scripted behaviour. Defaults look like a small model on a good GPU.
#[derive(Debug, Clone, clap::Args)]
pub struct Script {
    /// Time from the request to the first token.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    pub ttft: Duration,
    /// Time from the request to the response headers (servers differ: some send headers
    /// at once, some with the first token). Capped at `ttft`.
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    pub header_delay: Duration,
    /// Time between tokens.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub token_gap: Duration,
    /// Tokens to generate (capped by the request's max_tokens).
    #[arg(long, default_value_t = 32)]
    pub tokens: u32,
    /// A fault to inject.
    #[arg(long, value_enum)]
    pub fault: Option<Fault>,
    /// Share of requests that get the fault, 0 to 1.
    #[arg(long, default_value_t = 1.0)]
    pub fault_rate: f64,
    /// Seed for the fault draw, for repeatable fire drills.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            ttft: Duration::from_millis(300),
            header_delay: Duration::ZERO,
            token_gap: Duration::from_millis(20),
            tokens: 32,
            fault: None,
            fault_rate: 1.0,
            seed: 1,
        }
    }
}

/// What can go wrong, as a real server shows it on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// Accept, read the request, never answer.
    StallHeaders,
    /// Send headers and half the tokens, then go silent.
    StallStream,
    /// 500 with a JSON error body.
    #[value(name = "http-500")]
    Http500,
    /// 429 with Retry-After.
    #[value(name = "http-429")]
    Http429,
    /// Cut the connection mid-stream, inside a chunk.
    Truncate,
    /// A vLLM-style `data: {"error": ...}` event mid-stream, then [DONE].
    InbandError,
    /// A data event that is not JSON.
    Garbage,
    /// Tokens forever, never [DONE].
    Endless,
    /// The role chunk, then [DONE] with no content.
    Empty,
    /// 200 with Content-Type application/json instead of an event stream.
    WrongContentType,
    /// Close the connection right after reading the request.
    Close,
    /// One of http-500, http-429, truncate, inband-error, garbage, empty, at random.
    Mixed,
}

/// What the simulator did for one request, with its own monotonic timestamps taken just
/// before each write to the socket.
#[derive(Debug, Clone)]
pub struct SimRecord {
    pub id: u64,
    pub path: String,
    pub fault: Option<Fault>,
    /// The request was fully read.
    pub received: Instant,
    pub headers_written: Option<Instant>,
    pub first_token_written: Option<Instant>,
    pub done_written: Option<Instant>,
    pub tokens: u32,
}

impl SimRecord {
    fn ms(&self, t: Option<Instant>) -> Option<f64> {
        t.map(|t| (t - self.received).as_secs_f64() * 1000.0)
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "path": self.path,
            "fault": self.fault.and_then(|f| f.to_possible_value()).map(|v| v.get_name().to_owned()),
            "headers_ms": self.ms(self.headers_written),
            "ttft_ms": self.ms(self.first_token_written),
            "total_ms": self.ms(self.done_written),
            "tokens": self.tokens,
        })
    }
}

/// The last requests served, newest last.
#[derive(Debug, Default)]
pub struct SimLog {
    records: Mutex<VecDeque<SimRecord>>,
}

const LOG_CAPACITY: usize = 100_000;

impl SimLog {
    fn push(&self, r: SimRecord) {
        let mut records = self.records.lock().expect("sim log");
        if records.len() == LOG_CAPACITY {
            records.pop_front();
        }
        records.push_back(r);
    }

    pub fn records(&self) -> Vec<SimRecord> {
        self.records.lock().expect("sim log").iter().cloned().collect()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Array(self.records().iter().map(SimRecord::to_json).collect())
    }
}

/// A running simulator.
pub struct Simulator {
    pub addr: SocketAddr,
    pub log: Arc<SimLog>,
}

/// Serves `script` on `listener` until the process ends.
pub fn start(listener: TcpListener, script: Script) -> Simulator {
    let addr = listener.local_addr().expect("bound listener");
    let log = Arc::new(SimLog::default());
    let shared = Arc::new(Shared {
        script,
        log: log.clone(),
        next_id: AtomicU64::new(0),
    });
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let _ = socket.set_nodelay(true);
            tokio::spawn(serve_connection(socket, shared.clone()));
        }
    });
    Simulator { addr, log }
}

struct Shared {
    script: Script,
    log: Arc<SimLog>,
    next_id: AtomicU64,
}

/// Largest request head and body we read.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 16 * 1024 * 1024;

struct Request {
    method: String,
    path: String,
    query: String,
    close: bool,
    body: Vec<u8>,
}

async fn serve_connection(mut socket: TcpStream, shared: Arc<Shared>) {
    let mut buf = Vec::new();
    loop {
        let request = match read_request(&mut socket, &mut buf).await {
            Ok(Some(r)) => r,
            _ => return,
        };
        let keep = match (request.method.as_str(), request.path.as_str()) {
            ("POST", "/v1/chat/completions") => generate(&mut socket, &request, &shared, true).await,
            ("POST", "/v1/completions") => generate(&mut socket, &request, &shared, false).await,
            ("GET", "/v1/models") => {
                let body = serde_json::json!({"object": "list", "data": [{"id": "sim-model", "object": "model", "owned_by": "inferprobe"}]});
                write_json(&mut socket, 200, "OK", &body, &[]).await
            }
            ("GET", "/health") => {
                write_json(&mut socket, 200, "OK", &serde_json::json!({"status": "ok"}), &[]).await
            }
            ("GET", "/sim/log") => write_json(&mut socket, 200, "OK", &shared.log.to_json(), &[]).await,
            _ => {
                let body = serde_json::json!({"error": {"message": format!("no route for {} {}", request.method, request.path), "type": "not_found", "code": 404}});
                write_json(&mut socket, 404, "Not Found", &body, &[]).await
            }
        };
        if !keep || request.close {
            let _ = socket.shutdown().await;
            return;
        }
    }
}

/// Reads one request. `Ok(None)` when the peer closed between requests.
async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<Request>> {
    let mut chunk = [0u8; 8192];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(head_len) = req.parse(buf).map_err(std::io::Error::other)? {
            let target = req.path.unwrap_or("/").to_owned();
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let header = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .map(str::to_owned)
            };
            let length: usize = header("content-length")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if length > MAX_BODY {
                return Err(std::io::Error::other("request body too large"));
            }
            let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
            let method = req.method.unwrap_or("GET").to_owned();
            let (path, query) = (path.to_owned(), query.to_owned());
            while buf.len() < head_len + length {
                let n = socket.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(None);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[head_len..head_len + length].to_vec();
            buf.drain(..head_len + length);
            return Ok(Some(Request {
                method,
                path,
                query,
                close,
                body,
            }));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too large"));
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn write_json(
    socket: &mut TcpStream,
    status: u16,
    text: &str,
    body: &serde_json::Value,
    extra: &[(&str, &str)],
) -> bool {
    let body = body.to_string();
    let mut head = format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(&body);
    socket.write_all(head.as_bytes()).await.is_ok()
}

/// This request's script: the defaults, overridden by the query string.
fn script_for(base: &Script, query: &str) -> Script {
    let mut s = base.clone();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let dur = || humantime::parse_duration(v).ok();
        match k {
            "ttft" => s.ttft = dur().unwrap_or(s.ttft),
            "header_delay" => s.header_delay = dur().unwrap_or(s.header_delay),
            "token_gap" => s.token_gap = dur().unwrap_or(s.token_gap),
            "tokens" => s.tokens = v.parse().unwrap_or(s.tokens),
            "fault" => s.fault = Fault::from_str(v, true).ok(),
            "fault_rate" => s.fault_rate = v.parse().unwrap_or(s.fault_rate),
            _ => {}
        }
    }
    s
}

/// splitmix64: a tiny, seedable generator for the fault draw.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

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

async fn generate(socket: &mut TcpStream, request: &Request, shared: &Shared, chat: bool) -> bool {
    let received = Instant::now();
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let script = script_for(&shared.script, &request.query);
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let model = body
        .get("model")
        .and_then(|m| m.as_str())
        .unwrap_or("sim-model")
        .to_owned();
    let max_tokens = body
        .get("max_tokens")
        .or_else(|| body.get("max_completion_tokens"))
        .and_then(|m| m.as_u64())
        .unwrap_or(u64::MAX);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let tokens = (script.tokens as u64).min(max_tokens) as u32;

    let draw = (splitmix64(script.seed ^ id.wrapping_mul(0x9e37_79b9)) >> 11) as f64 / (1u64 << 53) as f64;
    let fault = script
        .fault
        .filter(|_| draw < script.fault_rate)
        .map(|f| match f {
            Fault::Mixed => {
                const MIX: [Fault; 6] = [
                    Fault::Http500,
                    Fault::Http429,
                    Fault::Truncate,
                    Fault::InbandError,
                    Fault::Garbage,
                    Fault::Empty,
                ];
                MIX[(splitmix64(id ^ script.seed.rotate_left(17)) % MIX.len() as u64) as usize]
            }
            f => f,
        });
    let mut record = SimRecord {
        id,
        path: request.path.clone(),
        fault,
        received,
        headers_written: None,
        first_token_written: None,
        done_written: None,
        tokens: 0,
    };
    let keep = stream_response(
        socket,
        &script,
        fault,
        chat,
        &model,
        tokens,
        include_usage,
        &mut record,
    )
    .await;
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

/// Writes one SSE event as one HTTP chunk.
async fn write_event(socket: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let event = format!("data: {data}\n\n");
    socket
        .write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
        .await
}

#[allow(clippy::too_many_arguments)]
async fn stream_response(
    socket: &mut TcpStream,
    script: &Script,
    fault: Option<Fault>,
    chat: bool,
    model: &str,
    tokens: u32,
    include_usage: bool,
    record: &mut SimRecord,
) -> bool {
    let received = record.received;
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let id = format!("{}-sim-{}", if chat { "chatcmpl" } else { "cmpl" }, record.id);
    let object = if chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    let chunk = |text: Option<&str>, finish: Option<&str>| -> String {
        let choice = if chat {
            let delta = match text {
                Some(t) => serde_json::json!({"content": t}),
                None if finish.is_none() => serde_json::json!({"role": "assistant", "content": ""}),
                None => serde_json::json!({}),
            };
            serde_json::json!({"index": 0, "delta": delta, "finish_reason": finish})
        } else {
            serde_json::json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
        };
        serde_json::json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]}).to_string()
    };

    match fault {
        Some(Fault::Close) => return false,
        Some(Fault::StallHeaders) => {
            wait_for_peer_close(socket).await;
            return false;
        }
        _ => {}
    }
    tokio::time::sleep_until(received + script.header_delay.min(script.ttft)).await;
    match fault {
        Some(Fault::Http500) => {
            let body = serde_json::json!({"error": {"message": "simulated internal error", "type": "internal_error", "code": 500}});
            record.headers_written = Some(Instant::now());
            return write_json(socket, 500, "Internal Server Error", &body, &[]).await;
        }
        Some(Fault::Http429) => {
            let body = serde_json::json!({"error": {"message": "simulated rate limit", "type": "rate_limit_exceeded", "code": 429}});
            record.headers_written = Some(Instant::now());
            return write_json(socket, 429, "Too Many Requests", &body, &[("Retry-After", "1")]).await;
        }
        _ => {}
    }
    let content_type = if fault == Some(Fault::WrongContentType) {
        "application/json"
    } else {
        "text/event-stream"
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    record.headers_written = Some(Instant::now());
    if socket.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    // The role chunk goes out with the headers, before any token exists (old vLLM did
    // this): a prober that stops the TTFT clock on it reports a TTFT of ~0.
    if chat && write_event(socket, &chunk(None, None)).await.is_err() {
        return false;
    }
    if fault == Some(Fault::Empty) {
        record.done_written = Some(Instant::now());
        return write_event(socket, "[DONE]").await.is_ok() && socket.write_all(b"0\r\n\r\n").await.is_ok();
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
                    // Half an event inside a chunk that never completes.
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
                    let err = serde_json::json!({"error": {"object": "error", "message": "simulated engine failure mid-stream", "type": "InternalServerError", "code": 500}});
                    let _ = write_event(socket, &err.to_string()).await;
                    let _ = write_event(socket, "[DONE]").await;
                    let _ = socket.write_all(b"0\r\n\r\n").await;
                    return true;
                }
                Some(Fault::Garbage) => {
                    let _ = write_event(socket, "{\"choices\": [{\"delta\": garbage").await;
                    let _ = write_event(socket, "[DONE]").await;
                    let _ = socket.write_all(b"0\r\n\r\n").await;
                    return true;
                }
                _ => {}
            }
        }
        let word = WORDS[i as usize % WORDS.len()];
        let at = Instant::now();
        if write_event(socket, &chunk(Some(word), None)).await.is_err() {
            return false;
        }
        if i == 0 {
            record.first_token_written = Some(at);
        }
        record.tokens = i + 1;
        i += 1;
    }
    let mut tail = String::new();
    for data in [chunk(None, Some("length"))]
        .into_iter()
        .chain(include_usage.then(|| {
            serde_json::json!({"id": id, "object": object, "created": created, "model": model, "choices": [],
                "usage": {"prompt_tokens": 24, "completion_tokens": tokens, "total_tokens": 24 + tokens}})
            .to_string()
        }))
        .chain(std::iter::once("[DONE]".to_owned()))
    {
        let event = format!("data: {data}\n\n");
        tail.push_str(&format!("{:x}\r\n{event}\r\n", event.len()));
    }
    tail.push_str("0\r\n\r\n");
    record.done_written = Some(Instant::now());
    socket.write_all(tail.as_bytes()).await.is_ok()
}

/// Holds the connection open and silent until the client gives up (bounded, so a
/// client that never closes cannot pin a task forever).
async fn wait_for_peer_close(socket: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(600), async {
        loop {
            match socket.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
}
