//! A built-in OpenAI-compatible streaming endpoint with scripted latency and faults, for
//! the demo, the tests, benchmarks and alerting fire drills.
//!
//! It speaks HTTP/1.1 by hand on a raw socket instead of through a server framework, so
//! that (a) faults can be exactly what a broken server does on the wire (a cut chunk, a
//! stall before the status line, a connection closed on accept) and (b) it can log the
//! monotonic instant just before each token is written to the socket: the ground truth
//! the benchmark compares our measurements with.
//!
//! Besides the streaming LLM APIs (OpenAI chat, completions and Responses, Anthropic,
//! Ollama, TGI) it answers Open Inference Protocol inferences and readiness
//! (`/v2/models/{m}/infer`, `/ready`; `?ready=false` plays a loading model) and
//! TorchServe-style image uploads (`/predictions/{m}`), with the same faults.
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
use serde_json::json;
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
    /// The whole answer, terminator included, then close without the chunked body's
    /// last chunk: the HTTP message never ends (as servers that abort a stream after
    /// `[DONE]` do).
    AbortAfterDone,
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
    fn new(id: u64, path: &str, fault: Option<Fault>, received: Instant) -> Self {
        SimRecord {
            id,
            path: path.to_owned(),
            fault,
            received,
            headers_written: None,
            first_token_written: None,
            done_written: None,
            tokens: 0,
        }
    }

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
            ("POST", path) if Dialect::for_path(path).is_some() => {
                let dialect = Dialect::for_path(path).expect("checked");
                generate(&mut socket, &request, &shared, dialect).await
            }
            ("GET", "/v1/models") => {
                let body = serde_json::json!({"object": "list", "data": [{"id": "sim-model", "object": "model", "owned_by": "inferprobe"}]});
                write_json(&mut socket, 200, "OK", &body, &[]).await
            }
            ("GET", "/health") => {
                write_json(&mut socket, 200, "OK", &serde_json::json!({"status": "ok"}), &[]).await
            }
            ("GET", "/sim/log") => write_json(&mut socket, 200, "OK", &shared.log.to_json(), &[]).await,
            ("GET", "/v2/health/ready") | ("GET", "/v2/health/live") => {
                write_json(&mut socket, 200, "OK", &json!({"ready": true, "live": true}), &[]).await
            }
            ("GET", path) if path.starts_with("/v2/models/") && path.ends_with("/ready") => {
                // `?ready=false` plays a model that is still loading.
                if script_query_flag(&request.query, "ready") == Some(false) {
                    write_json(
                        &mut socket,
                        503,
                        "Service Unavailable",
                        &json!({"error": "Model not ready"}),
                        &[],
                    )
                    .await
                } else {
                    write_json(
                        &mut socket,
                        200,
                        "OK",
                        &json!({"name": "sim-classifier", "ready": true}),
                        &[],
                    )
                    .await
                }
            }
            ("POST", path) if path.starts_with("/v2/models/") && path.ends_with("/infer") => {
                answer(&mut socket, &request, &shared, Answer::Infer).await
            }
            ("POST", path) if path.starts_with("/predictions/") => {
                answer(&mut socket, &request, &shared, Answer::Prediction).await
            }
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

/// Whether request `id` gets the script's fault (`fault_rate` of them do), and which one.
fn draw_fault(script: &Script, id: u64) -> Option<Fault> {
    let draw = (splitmix64(script.seed ^ id.wrapping_mul(0x9e37_79b9)) >> 11) as f64 / (1u64 << 53) as f64;
    script
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
        })
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

/// `name=true|false` in a query string.
fn script_query_flag(query: &str, name: &str) -> Option<bool> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
}

/// The non-streaming answers: an Open Inference Protocol inference, or a TorchServe-style
/// prediction for an uploaded image.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Infer,
    Prediction,
}

/// One JSON answer after `ttft` (the processing time), with the same faults as streams
/// where they make sense: status codes, stalls, a closed connection, a body cut short,
/// garbage, a wrong content type.
async fn answer(socket: &mut TcpStream, request: &Request, shared: &Shared, kind: Answer) -> bool {
    let received = Instant::now();
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let script = script_for(&shared.script, &request.query);
    let fault = draw_fault(&script, id);
    let mut record = SimRecord::new(id, &request.path, fault, received);
    let body = match kind {
        Answer::Infer => {
            let req: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let Some(input) = req.pointer("/inputs/0") else {
                shared.log.push(record);
                return write_json(socket, 400, "Bad Request", &json!({"error": "no inputs"}), &[]).await;
            };
            // A deterministic "prediction" from the input, so probes can expect a label.
            let label = (input.to_string().len() % 10) as i64;
            let proba: Vec<f64> = (0..10).map(|i| if i == label { 0.91 } else { 0.01 }).collect();
            json!({"model_name": request.path.split('/').nth(3).unwrap_or("sim"), "model_version": "1", "id": req.get("id"),
            "outputs": [
                {"name": "predict", "shape": [1, 1], "datatype": "INT64", "data": [label]},
                {"name": "predict_proba", "shape": [1, 10], "datatype": "FP64", "data": proba}
            ]})
        }
        Answer::Prediction => {
            if request.body.is_empty() {
                shared.log.push(record);
                return write_json(
                    socket,
                    400,
                    "Bad Request",
                    &json!({"error": "no image in the request"}),
                    &[],
                )
                .await;
            }
            let parts = request
                .body
                .windows(20)
                .filter(|w| w.starts_with(b"Content-Disposition"))
                .count();
            json!({"class": "street", "probability": 0.87, "bytes": request.body.len(), "parts": parts})
        }
    };
    let keep = match fault {
        Some(Fault::Close) => false,
        Some(Fault::StallHeaders | Fault::StallStream) => {
            wait_for_peer_close(socket).await;
            false
        }
        _ => {
            tokio::time::sleep_until(received + script.ttft).await;
            record.headers_written = Some(Instant::now());
            match fault {
                Some(Fault::Http500) => {
                    write_json(
                        socket,
                        500,
                        "Internal Server Error",
                        &json!({"error": "simulated internal error"}),
                        &[],
                    )
                    .await
                }
                Some(Fault::Http429) => {
                    write_json(
                        socket,
                        429,
                        "Too Many Requests",
                        &json!({"error": "simulated rate limit"}),
                        &[("Retry-After", "1")],
                    )
                    .await
                }
                Some(Fault::Truncate) => {
                    let text = body.to_string();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        text.len() + 100
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&text.as_bytes()[..text.len() / 2]).await;
                    false
                }
                Some(Fault::AbortAfterDone) => {
                    let text = body.to_string();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{text}\r\n",
                        text.len()
                    );
                    record.done_written = Some(Instant::now());
                    let _ = socket.write_all(head.as_bytes()).await;
                    false
                }
                Some(Fault::Garbage | Fault::InbandError) => {
                    let text = "Traceback (most recent call last):\n  File \"model.py\", line 1\nValueError: simulated";
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
                        text.len()
                    );
                    socket.write_all(head.as_bytes()).await.is_ok()
                }
                Some(Fault::Empty) => {
                    let text = if matches!(kind, Answer::Infer) {
                        "{\"outputs\":[]}"
                    } else {
                        ""
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
                        text.len()
                    );
                    socket.write_all(head.as_bytes()).await.is_ok()
                }
                _ => {
                    record.done_written = Some(Instant::now());
                    write_json(socket, 200, "OK", &body, &[]).await
                }
            }
        }
    };
    shared.log.push(record);
    keep
}

/// The streaming protocols the simulator speaks, by route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    OpenAiChat,
    OpenAiCompletions,
    OpenAiResponses,
    Anthropic,
    OllamaChat,
    OllamaGenerate,
    Tgi,
}

impl Dialect {
    fn for_path(path: &str) -> Option<Dialect> {
        Some(match path {
            "/v1/chat/completions" => Dialect::OpenAiChat,
            "/v1/completions" => Dialect::OpenAiCompletions,
            "/v1/responses" => Dialect::OpenAiResponses,
            "/v1/messages" => Dialect::Anthropic,
            "/api/chat" => Dialect::OllamaChat,
            "/api/generate" => Dialect::OllamaGenerate,
            "/generate_stream" => Dialect::Tgi,
            _ => return None,
        })
    }

    fn ndjson(self) -> bool {
        matches!(self, Dialect::OllamaChat | Dialect::OllamaGenerate)
    }

    /// The output cap, wherever this protocol puts it.
    fn max_tokens(self, body: &serde_json::Value) -> Option<u64> {
        let pointer = match self {
            Dialect::OpenAiChat | Dialect::OpenAiCompletions | Dialect::Anthropic => "/max_tokens",
            Dialect::OpenAiResponses => "/max_output_tokens",
            Dialect::OllamaChat | Dialect::OllamaGenerate => "/options/num_predict",
            Dialect::Tgi => "/parameters/max_new_tokens",
        };
        body.pointer(pointer)
            .or_else(|| body.get("max_completion_tokens"))
            .and_then(|v| v.as_u64())
    }
}

/// Builds one request's messages, already framed (`data: ...\n\n` or a JSON line).
struct Writer<'a> {
    dialect: Dialect,
    id: String,
    model: &'a str,
    created: u64,
    include_usage: bool,
}

impl Writer<'_> {
    fn frame(&self, event: Option<&str>, data: &serde_json::Value) -> String {
        if self.dialect.ndjson() {
            return format!("{data}\n");
        }
        match event {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        }
    }

    fn openai_chunk(&self, text: Option<&str>, finish: Option<&str>) -> String {
        let choice = match self.dialect {
            Dialect::OpenAiChat => {
                let delta = match (text, finish) {
                    (Some(t), _) => json!({"content": t}),
                    (None, None) => json!({"role": "assistant", "content": ""}),
                    (None, Some(_)) => json!({}),
                };
                json!({"index": 0, "delta": delta, "finish_reason": finish})
            }
            _ => json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}),
        };
        self.frame(
            None,
            &json!({"id": self.id, "object": self.openai_object(), "created": self.created, "model": self.model, "choices": [choice]}),
        )
    }

    fn openai_object(&self) -> &'static str {
        if self.dialect == Dialect::OpenAiChat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        }
    }

    /// What comes before any token: a role chunk (sent at once, before any token exists,
    /// as old vLLM did, so a prober that stops the TTFT clock on it reports ~0), or the
    /// protocol's opening events.
    fn preamble(&self) -> Vec<String> {
        match self.dialect {
            Dialect::OpenAiChat => vec![self.openai_chunk(None, None)],
            Dialect::OpenAiResponses => vec![self.frame(
                Some("response.created"),
                &json!({"type": "response.created", "sequence_number": 0, "response": {"id": self.id, "status": "in_progress"}}),
            )],
            Dialect::Anthropic => vec![
                self.frame(
                    Some("message_start"),
                    &json!({"type": "message_start", "message": {"id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model, "stop_reason": null, "usage": {"input_tokens": 24, "output_tokens": 1}}}),
                ),
                self.frame(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                self.frame(Some("ping"), &json!({"type": "ping"})),
            ],
            _ => vec![],
        }
    }

    /// Token `i` of `n` (TGI marks the last one with its details).
    fn token(&self, i: u32, n: u32, word: &str) -> String {
        match self.dialect {
            Dialect::OpenAiChat | Dialect::OpenAiCompletions => self.openai_chunk(Some(word), None),
            Dialect::OpenAiResponses => self.frame(
                Some("response.output_text.delta"),
                &json!({"type": "response.output_text.delta", "sequence_number": i + 1, "item_id": "msg_sim", "output_index": 0, "content_index": 0, "delta": word}),
            ),
            Dialect::Anthropic => self.frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}),
            ),
            Dialect::OllamaChat => self.frame(
                None,
                &json!({"model": self.model, "created_at": "2026-01-01T00:00:00Z", "message": {"role": "assistant", "content": word}, "done": false}),
            ),
            Dialect::OllamaGenerate => self.frame(
                None,
                &json!({"model": self.model, "created_at": "2026-01-01T00:00:00Z", "response": word, "done": false}),
            ),
            Dialect::Tgi => {
                let last = i + 1 == n;
                let details = last.then(|| json!({"finish_reason": "length", "generated_tokens": n, "input_length": 24, "seed": null}));
                let text = last.then_some("(the whole answer)");
                self.frame(
                    None,
                    &json!({"index": i + 1, "token": {"id": 1000 + i, "text": word, "logprob": -0.5, "special": false}, "generated_text": text, "details": details}),
                )
            }
        }
    }

    /// Everything after the last token, terminator included. `elapsed` feeds the
    /// durations Ollama reports about itself.
    fn finish(&self, n: u32, elapsed: Duration) -> Vec<String> {
        match self.dialect {
            Dialect::OpenAiChat | Dialect::OpenAiCompletions => {
                let mut out = vec![self.openai_chunk(None, Some("length"))];
                if self.include_usage {
                    out.push(self.frame(
                        None,
                        &json!({"id": self.id, "object": self.openai_object(), "created": self.created, "model": self.model, "choices": [],
                            "usage": {"prompt_tokens": 24, "completion_tokens": n, "total_tokens": 24 + n}}),
                    ));
                }
                out.push("data: [DONE]\n\n".to_owned());
                out
            }
            Dialect::OpenAiResponses => vec![self.frame(
                Some("response.completed"),
                &json!({"type": "response.completed", "sequence_number": n + 1, "response": {"id": self.id, "status": "completed",
                    "usage": {"input_tokens": 24, "output_tokens": n, "total_tokens": 24 + n}}}),
            )],
            Dialect::Anthropic => vec![
                self.frame(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": 0})),
                self.frame(
                    Some("message_delta"),
                    &json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null}, "usage": {"output_tokens": n}}),
                ),
                self.frame(Some("message_stop"), &json!({"type": "message_stop"})),
            ],
            Dialect::OllamaChat | Dialect::OllamaGenerate => {
                let ns = elapsed.as_nanos() as u64;
                let mut done = json!({"model": self.model, "created_at": "2026-01-01T00:00:01Z", "done": true, "done_reason": "length",
                    "total_duration": ns, "load_duration": 1_000_000, "prompt_eval_count": 24, "prompt_eval_duration": ns / 4,
                    "eval_count": n, "eval_duration": ns / 2});
                if self.dialect == Dialect::OllamaChat {
                    done["message"] = json!({"role": "assistant", "content": ""});
                } else {
                    done["response"] = json!("");
                }
                vec![self.frame(None, &done)]
            }
            // The last token event carried the details; the body just ends.
            Dialect::Tgi => vec![],
        }
    }

    /// An error after the stream started, in this protocol's own shape.
    fn in_band_error(&self) -> Vec<String> {
        let message = "simulated engine failure mid-stream";
        match self.dialect {
            Dialect::OpenAiChat | Dialect::OpenAiCompletions => vec![
                self.frame(None, &json!({"error": {"object": "error", "message": message, "type": "InternalServerError", "code": 500}})),
                "data: [DONE]\n\n".to_owned(),
            ],
            Dialect::OpenAiResponses => vec![self.frame(
                Some("response.failed"),
                &json!({"type": "response.failed", "response": {"id": self.id, "status": "failed", "error": {"code": "server_error", "message": message}}}),
            )],
            Dialect::Anthropic => vec![self.frame(
                Some("error"),
                &json!({"type": "error", "error": {"type": "overloaded_error", "message": message}}),
            )],
            Dialect::OllamaChat | Dialect::OllamaGenerate => vec![self.frame(None, &json!({"error": message}))],
            Dialect::Tgi => vec![self.frame(None, &json!({"error": message, "error_type": "generation"}))],
        }
    }

    /// A message that is not valid JSON, in this protocol's framing.
    fn garbage(&self) -> String {
        if self.dialect.ndjson() {
            "{\"message\": garbage\n".to_owned()
        } else {
            "data: {\"choices\": [{\"delta\": garbage\n\n".to_owned()
        }
    }

    /// The end of a stream that generated nothing.
    fn empty_end(&self) -> Vec<String> {
        match self.dialect {
            // TGI always sends a last token: here only the special end-of-sequence one.
            Dialect::Tgi => vec![self.frame(
                None,
                &json!({"index": 1, "token": {"id": 2, "text": "</s>", "logprob": -0.1, "special": true}, "generated_text": "",
                    "details": {"finish_reason": "eos_token", "generated_tokens": 1, "input_length": 24, "seed": null}}),
            )],
            _ => self.finish(0, Duration::ZERO),
        }
    }
}

async fn generate(socket: &mut TcpStream, request: &Request, shared: &Shared, dialect: Dialect) -> bool {
    let received = Instant::now();
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let script = script_for(&shared.script, &request.query);
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let model = body
        .get("model")
        .and_then(|m| m.as_str())
        .unwrap_or("sim-model")
        .to_owned();
    let tokens = (script.tokens as u64).min(dialect.max_tokens(&body).unwrap_or(u64::MAX)) as u32;
    let writer = Writer {
        dialect,
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
    };

    let fault = draw_fault(&script, id);
    let mut record = SimRecord::new(id, &request.path, fault, received);
    let keep = stream_response(socket, &script, fault, &writer, tokens, &mut record).await;
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

/// Writes messages as HTTP chunks, in one write.
async fn write_chunks(socket: &mut TcpStream, messages: &[String]) -> std::io::Result<()> {
    let mut out = String::new();
    for m in messages {
        out.push_str(&format!("{:x}\r\n{m}\r\n", m.len()));
    }
    socket.write_all(out.as_bytes()).await
}

/// The end of a chunked body.
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

async fn stream_response(
    socket: &mut TcpStream,
    script: &Script,
    fault: Option<Fault>,
    writer: &Writer<'_>,
    tokens: u32,
    record: &mut SimRecord,
) -> bool {
    let received = record.received;
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
    let content_type = match (fault, writer.dialect.ndjson()) {
        (Some(Fault::WrongContentType), _) => "application/json",
        (_, true) => "application/x-ndjson",
        (_, false) => "text/event-stream",
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    record.headers_written = Some(Instant::now());
    if socket.write_all(head.as_bytes()).await.is_err()
        || write_chunks(socket, &writer.preamble()).await.is_err()
    {
        return false;
    }
    if fault == Some(Fault::Empty) {
        record.done_written = Some(Instant::now());
        return write_chunks(socket, &writer.empty_end()).await.is_ok()
            && socket.write_all(LAST_CHUNK).await.is_ok();
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
                    let _ = write_chunks(socket, &writer.in_band_error()).await;
                    let _ = socket.write_all(LAST_CHUNK).await;
                    return true;
                }
                Some(Fault::Garbage) => {
                    let _ = write_chunks(socket, &[writer.garbage()]).await;
                    let _ = write_chunks(socket, &writer.finish(i, received.elapsed())).await;
                    let _ = socket.write_all(LAST_CHUNK).await;
                    return true;
                }
                _ => {}
            }
        }
        let word = WORDS[i as usize % WORDS.len()];
        let n = if fault == Some(Fault::Endless) {
            u32::MAX
        } else {
            tokens
        };
        let chunk = writer.token(i, n, word);
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
    for m in writer.finish(tokens, received.elapsed()) {
        tail.push_str(&format!("{:x}\r\n{m}\r\n", m.len()));
    }
    let abort = fault == Some(Fault::AbortAfterDone);
    if !abort {
        tail.push_str("0\r\n\r\n");
    }
    record.done_written = Some(Instant::now());
    socket.write_all(tail.as_bytes()).await.is_ok() && !abort
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
