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
//! TorchServe-style image uploads (`/predictions/{m}`), with the same faults. A
//! connection that opens with HTTP/2's preface gets the gRPC services instead
//! (`grpc`: health and the Open Inference Protocol), with `--grpc-fault`.
//!
//! Every option can be overridden per request in the query string, so one simulator can
//! serve a healthy and a faulty probe at once:
//! `http://127.0.0.1:8000/v1/chat/completions?ttft=800ms&fault=truncate&fault_rate=0.5`.
//!
//! Here: the script and faults, the log, [`start`] and the routing. `http1` is the wire
//! code (shared with the tests' fake servers); `dialect` finds the [`Dialect`] each
//! streaming kind implements in its own file (src/probe/<kind>.rs) by route;
//! `stream` a streamed answer with its timing and faults; `answers` the non-streaming
//! ones. May import: the list of kinds, for their dialects (in `dialect` only); the prober never
//! imports the simulator (the `Dialect` trait is the probe's, probe/dialect.rs).

mod answers;
mod dialect;
mod grpc;
pub mod http1;
mod knowing;
mod stream;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use clap::ValueEnum;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

pub use crate::probe::dialect::{Dialect, Reply};
use answers::Answer;
pub use grpc::GrpcFault;
use http1::{read_request, write_json};

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
    /// A fault for gRPC calls (the simulator speaks gRPC on the same port, HTTP/2).
    #[arg(long, value_enum)]
    pub grpc_fault: Option<GrpcFault>,
    /// Share of requests that get the fault, 0 to 1.
    #[arg(long, default_value_t = 1.0)]
    pub fault_rate: f64,
    /// Seed for the fault draw, for repeatable fire drills.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Requests generated at once; more wait for a free slot, as on a server started
    /// with that many slots (llama.cpp's `--parallel`). 0: no limit.
    #[arg(long, default_value_t = 0)]
    pub slots: u32,
    /// After this long without a request the model counts as unloaded (Ollama unloads
    /// after 5 minutes idle): the next request first waits `--cold-load` (and Ollama's
    /// `load_duration` says so). The first request after the start is cold too.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub cold_after: Option<Duration>,
    /// How long loading the model takes when it is cold.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub cold_load: Duration,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            ttft: Duration::from_millis(300),
            header_delay: Duration::ZERO,
            token_gap: Duration::from_millis(20),
            tokens: 32,
            fault: None,
            grpc_fault: None,
            fault_rate: 1.0,
            seed: 1,
            slots: 0,
            cold_after: None,
            cold_load: Duration::from_secs(2),
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
    /// 503 `Loading model`, as llama.cpp answers while it loads the model.
    Loading,
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
    /// The fault a gRPC call got.
    pub grpc_fault: Option<GrpcFault>,
    /// The request was fully read.
    pub received: Instant,
    /// Its generation started: a slot was free (`--slots`), at once otherwise.
    pub started: Instant,
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
            grpc_fault: None,
            received,
            started: received,
            headers_written: None,
            first_token_written: None,
            done_written: None,
            tokens: 0,
        }
    }

    fn ms(&self, t: Option<Instant>) -> Option<f64> {
        t.map(|t| (t - self.received).as_secs_f64() * 1000.0)
    }

    /// From the request to its first token, ms: a wait for a slot and a model load
    /// included, as a client sees it.
    pub fn ttft_ms(&self) -> Option<f64> {
        self.ms(self.first_token_written)
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "path": self.path,
            "fault": self.fault.and_then(|f| f.to_possible_value()).map(|v| v.get_name().to_owned()),
            "grpc_fault": self.grpc_fault.and_then(|f| f.to_possible_value()).map(|v| v.get_name().to_owned()),
            "slot_wait_ms": self.ms(Some(self.started)),
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
    let slots = (script.slots > 0).then(|| tokio::sync::Semaphore::new(script.slots as usize));
    let shared = Arc::new(Shared {
        script,
        log: log.clone(),
        next_id: AtomicU64::new(0),
        slots,
        warmth: Mutex::default(),
    });
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let _ = socket.set_nodelay(true);
            tokio::spawn(route_connection(socket, shared.clone()));
        }
    });
    Simulator { addr, log }
}

struct Shared {
    script: Script,
    log: Arc<SimLog>,
    next_id: AtomicU64,
    /// `--slots`: a permit per request generating.
    slots: Option<tokio::sync::Semaphore>,
    /// `--cold-after`: whether the model is loaded.
    warmth: Mutex<Warmth>,
}

/// When the model was last used, for `--cold-after`.
#[derive(Debug, Default)]
struct Warmth {
    last_end: Option<Instant>,
    in_flight: u32,
}

impl Shared {
    /// A generation starts: the time to load the model first (zero when it is loaded).
    fn begin_generation(&self, now: Instant) -> Duration {
        let mut w = self.warmth.lock().expect("warmth");
        w.in_flight += 1;
        let Some(after) = self.script.cold_after else {
            return Duration::ZERO;
        };
        let unloaded = w.in_flight == 1
            && w.last_end
                .is_none_or(|t| now.saturating_duration_since(t) >= after);
        if unloaded {
            self.script.cold_load
        } else {
            Duration::ZERO
        }
    }

    fn end_generation(&self) {
        let mut w = self.warmth.lock().expect("warmth");
        w.in_flight = w.in_flight.saturating_sub(1);
        w.last_end = Some(Instant::now());
    }
}

/// HTTP/2 (gRPC) or HTTP/1.1, by the connection's first bytes.
async fn route_connection(socket: TcpStream, shared: Arc<Shared>) {
    let mut first = [0u8; grpc::PREFACE.len()];
    loop {
        match socket.peek(&mut first).await {
            Ok(n) if n < first.len() && first[..n] == grpc::PREFACE[..n] && n > 0 => {
                // A preface arriving in pieces: wait for the rest.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(n) if n == first.len() && first == grpc::PREFACE => {
                return grpc::serve(socket, shared).await;
            }
            _ => return serve_connection(socket, shared).await,
        }
    }
}

async fn serve_connection(mut socket: TcpStream, shared: Arc<Shared>) {
    let mut buf = Vec::new();
    loop {
        let request = match read_request(&mut socket, &mut buf).await {
            Ok(Some(r)) => r,
            _ => return,
        };
        let keep = match (request.method.as_str(), request.path.as_str()) {
            ("POST", path) if dialect::for_path(path).is_some() => {
                let dialect = dialect::for_path(path).expect("checked");
                stream::generate(&mut socket, &request, &shared, dialect).await
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
                answers::answer(&mut socket, &request, &shared, Answer::Infer).await
            }
            ("POST", path) if path.starts_with("/predictions/") => {
                answers::answer(&mut socket, &request, &shared, Answer::Prediction).await
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
            "grpc_fault" => s.grpc_fault = GrpcFault::from_str(v, true).ok(),
            "fault_rate" => s.fault_rate = v.parse().unwrap_or(s.fault_rate),
            _ => {}
        }
    }
    s
}

/// Whether request `id` is one of the `fault_rate` share that gets the script's fault.
fn drawn(script: &Script, id: u64) -> bool {
    let draw = (splitmix64(script.seed ^ id.wrapping_mul(0x9e37_79b9)) >> 11) as f64 / (1u64 << 53) as f64;
    draw < script.fault_rate
}

/// Whether request `id` gets the script's fault (`fault_rate` of them do), and which one.
fn draw_fault(script: &Script, id: u64) -> Option<Fault> {
    script.fault.filter(|_| drawn(script, id)).map(|f| match f {
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

/// `name=true|false` in a query string.
fn script_query_flag(query: &str, name: &str) -> Option<bool> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
}
