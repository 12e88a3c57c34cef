//! Shared test helpers: in-process simulators and fake servers on 127.0.0.1:0, probes
//! built from YAML snippets, the real binary started as a daemon, and external tools
//! (promtool) that skip with a reason on a developer's machine but fail under CI=true.
//! The fake servers speak HTTP/1 with the simulator's wire code (`simulate::http1`).

pub mod browser;
pub mod markdown;
pub mod smtp;
pub mod tls;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use inferprobe::config;
use inferprobe::outcome::Outcome;
use inferprobe::probe::{BuildContext, ReadyProbe};
use inferprobe::simulate::http1::{self, RequestHead};
use inferprobe::simulate::{self, Script, Simulator};

/// Tests that load the machine (real agents with many probes, the fault matrix,
/// connection floods) take [`heavy`]: they run one at a time, as they did when each file
/// was a binary of its own, and apart from every test that took [`timed`]. Tests that
/// assert wall-clock bounds (a run ends within its timeout plus a margin, a process
/// starts within a millisecond) take [`timed`]: they run beside each other and beside
/// light tests, never beside a heavy one.
static TURNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A test's turn, held until dropped. Holding it across `.await` is sound: each test runs
/// on a runtime of its own on its own thread, and only test threads ever wait for it.
pub struct Turn {
    _alone: Option<std::sync::RwLockWriteGuard<'static, ()>>,
    _shared: Option<std::sync::RwLockReadGuard<'static, ()>>,
}

/// Waits until no other heavy or timed test runs, then keeps them out until dropped.
/// Poison-tolerant: a test that failed holding it does not fail the others.
pub fn heavy() -> Turn {
    Turn {
        _alone: Some(TURNS.write().unwrap_or_else(|poisoned| poisoned.into_inner())),
        _shared: None,
    }
}

/// Waits until no heavy test runs, then keeps heavy tests out until dropped.
pub fn timed() -> Turn {
    Turn {
        _alone: None,
        _shared: Some(TURNS.read().unwrap_or_else(|poisoned| poisoned.into_inner())),
    }
}

pub async fn simulator(script: Script) -> Simulator {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    simulate::start(listener, script)
}

/// Two quick Ollama-like simulators for the cold and warm-up tests: one whose model
/// unloads after half a second idle and takes 1.5 s to load again, and one that never
/// unloads, both answering in about 20 ms with 4 tokens. Returned (unloading, warm).
pub async fn unloading_and_warm() -> (Simulator, Simulator) {
    let quick = Script {
        ttft: std::time::Duration::from_millis(20),
        tokens: 4,
        ..Default::default()
    };
    let unloading = simulator(Script {
        cold_after: Some(std::time::Duration::from_millis(500)),
        cold_load: std::time::Duration::from_millis(1500),
        ..quick.clone()
    })
    .await;
    (unloading, simulator(quick).await)
}

/// Builds the single probe of a `probes:` YAML list item and runs it once.
pub async fn run_probe(probe_yaml: &str) -> Outcome {
    build_probe(probe_yaml).run_once().await
}

pub fn build_probe(probe_yaml: &str) -> ReadyProbe {
    let text = format!("probes:\n{}", indent(probe_yaml));
    let config = config::parse(&text, Path::new("test.yaml"), &|name| std::env::var(name).ok())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    ReadyProbe::build(&config.probes[0], &"test".into(), &BuildContext::new()).unwrap()
}

fn indent(yaml: &str) -> String {
    let lines: Vec<&str> = yaml.lines().filter(|l| !l.trim().is_empty()).collect();
    let min = lines
        .iter()
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{}{}\n", if i == 0 { "  - " } else { "    " }, &l[min..]))
        .collect()
}

/// A port with nothing listening on it.
/// A new empty directory under the system's temporary directory, unique per call.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("inferprobe-test-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Serves raw bytes: for each connection, reads the request head, then writes `reply`
/// (which may be anything: garbage, a cut stream). `hold` keeps the socket open after.
pub fn raw_server(reply: &'static [u8], hold: Duration) -> SocketAddr {
    scripted_server(move |_| vec![Step::Write(reply.to_vec()), Step::Hold(hold)])
}

/// One step of a scripted reply (see [`scripted_server`]).
pub enum Step {
    /// Write these bytes at once.
    Write(Vec<u8>),
    /// Write these bytes one at a time, `gap` apart (a slow drip).
    Drip(Vec<u8>, Duration),
    /// Write `bytes` again and again, `gap` apart, until `total` bytes are out (`u64::MAX`:
    /// until the client goes away). Nothing is built in memory beyond `bytes`.
    Repeat {
        bytes: Vec<u8>,
        total: u64,
        gap: Duration,
    },
    /// Keep the connection open and silent.
    Hold(Duration),
}

/// A server that reads each request (one per connection: head and Content-Length body),
/// then plays the steps `script` returns for it and closes. A step that cannot write (the
/// client went away) ends the connection. For byte-exact faults: stalls, drips, cut
/// streams, endless bodies.
///
/// Not the simulator's server: that one plays protocols with faults drawn from a script,
/// these play whatever bytes a test chooses, on plain threads (usable from sync and async
/// tests alike). They share its wire code: the request head parser and the reply builders.
pub fn scripted_server(script: impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let script = std::sync::Arc::new(script);
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(mut s) = stream else { continue };
            let script = script.clone();
            std::thread::spawn(move || {
                let Some(received) = read_request(&mut s) else {
                    return;
                };
                for step in script(&received) {
                    let written = match step {
                        Step::Write(bytes) => s.write_all(&bytes),
                        Step::Drip(bytes, gap) => bytes.iter().try_for_each(|b| {
                            std::thread::sleep(gap);
                            s.write_all(std::slice::from_ref(b))
                        }),
                        Step::Repeat { bytes, total, gap } => {
                            let mut sent = 0u64;
                            let mut result = Ok(());
                            while sent < total && result.is_ok() {
                                let n = (total - sent).min(bytes.len() as u64) as usize;
                                result = s.write_all(&bytes[..n]);
                                sent += n as u64;
                                if !gap.is_zero() {
                                    std::thread::sleep(gap);
                                }
                            }
                            result
                        }
                        Step::Hold(d) => {
                            std::thread::sleep(d);
                            Ok(())
                        }
                    };
                    if written.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Reads one request (head, and a body of Content-Length bytes); `None` if the client
/// closed first (or sent no HTTP). The head is parsed by the simulator's wire code; the
/// loop is blocking, as these servers run on threads outside any runtime, and a body cut
/// short is kept as far as it came.
fn read_request(s: &mut TcpStream) -> Option<Received> {
    let mut buf = vec![0u8; 1 << 16];
    let mut data = Vec::new();
    let head = loop {
        if let Some(head) = RequestHead::parse(&data).ok()? {
            break head;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    };
    let length = head.content_length();
    while data.len() < head.len + length {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
    let body = data[head.len..(head.len + length).min(data.len())].to_vec();
    Some(Received {
        method: head.method,
        path: head.target,
        headers: head
            .headers
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect(),
        body,
    })
}

/// A plain HTTP/1.0-style GET; returns (status, headers, body).
pub fn http_get(addr: &str, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    http_get_raw(addr, path.as_bytes(), &accept)
}

/// A GET of `target` as raw bytes (so that bytes no client library would send reach the
/// server), with `headers` (each ending in CRLF). A reply cut short or reset is what was
/// read before it: status 0 when no head came.
pub fn http_get_raw(addr: &str, target: &[u8], headers: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut request = b"GET ".to_vec();
    request.extend_from_slice(target);
    // HTTP/1.0, so that no server answers in chunks: the body is the rest of the stream.
    request.extend_from_slice(format!(" HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n").as_bytes());
    s.write_all(&request).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_reply(&raw)
}

/// (status, head, body) of a raw HTTP reply; status 0 when no head came.
fn parse_reply(raw: &[u8]) -> (u16, String, String) {
    let raw = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

/// A GET that gives up after `limit` in all (connect, write, read): a frozen server
/// accepts (the kernel does) but never answers. (status, body); status 0 when no whole
/// answer came in time.
pub fn http_get_within(addr: &str, path: &str, limit: Duration) -> (u16, String) {
    let deadline = std::time::Instant::now() + limit;
    let Ok(mut s) = TcpStream::connect_timeout(&addr.parse().unwrap(), limit) else {
        return (0, String::new());
    };
    let _ = s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes());
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return (0, String::new());
        }
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(_) => return (0, String::new()),
        }
    }
    let (status, _, body) = parse_reply(&raw);
    (status, body)
}

/// The real binary running as a daemon; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub addr: String,
    /// Every stderr line (JSON logs), as they come.
    pub logs: mpsc::Receiver<String>,
    /// Every stderr line so far, kept (for checks over the whole log).
    pub all_logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts `inferprobe run -c CONFIG --listen 127.0.0.1:0 --log-format json` and waits
    /// for its "Agent started." line to learn the port.
    /// A fresh data directory is used unless `extra` names one.
    pub fn start(config: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_on("127.0.0.1:0", config, extra)
    }

    /// As [`Daemon::start`], with these environment variables set for the agent.
    pub fn start_with_env(
        config: &Path,
        extra: &[&str],
        env: &std::collections::HashMap<&str, &str>,
    ) -> Daemon {
        Daemon::spawn("127.0.0.1:0", config, extra, env, None)
    }

    /// As [`Daemon::start`], under `ulimit -n NOFILE` (soft and hard: the agent cannot
    /// raise it).
    pub fn start_with_nofile(nofile: u32, config: &Path, extra: &[&str]) -> Daemon {
        Daemon::spawn(
            "127.0.0.1:0",
            config,
            extra,
            &std::collections::HashMap::new(),
            Some(nofile),
        )
    }

    /// As [`Daemon::start`], on a given address: for a scraper that must know the
    /// port before the agent's first run.
    pub fn start_on(listen: &str, config: &Path, extra: &[&str]) -> Daemon {
        Daemon::spawn(listen, config, extra, &std::collections::HashMap::new(), None)
    }

    fn spawn(
        listen: &str,
        config: &Path,
        extra: &[&str],
        env: &std::collections::HashMap<&str, &str>,
        nofile: Option<u32>,
    ) -> Daemon {
        let mut cmd = match nofile {
            None => Command::new(env!("CARGO_BIN_EXE_inferprobe")),
            Some(n) => {
                let mut c = Command::new("bash");
                c.args([
                    "-c",
                    &format!("ulimit -n {n} && exec \"$0\" \"$@\""),
                    env!("CARGO_BIN_EXE_inferprobe"),
                ]);
                c
            }
        };
        cmd.envs(env);
        cmd.args(["--log-format", "json", "run", "--listen", listen, "-c"])
            .arg(config)
            .args(extra);
        if !extra.contains(&"--data-dir") {
            cmd.arg("--data-dir").arg(temp_dir("data"));
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let all_logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = all_logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let mut daemon = Daemon {
            child,
            addr: String::new(),
            logs: rx,
            all_logs,
        };
        let started = daemon.wait_for_log("Agent started.", Duration::from_secs(20));
        let v: serde_json::Value = serde_json::from_str(&started).unwrap();
        daemon.addr = v["listen"].as_str().unwrap().to_owned();
        daemon
    }

    /// Waits for a log line containing `needle`; panics after `within`.
    pub fn wait_for_log(&mut self, needle: &str, within: Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.logs.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!("no log line with {needle:?} within {within:?}"),
            }
        }
    }

    /// Every log line up to and including the first containing `needle`.
    pub fn lines_until(&mut self, needle: &str, within: Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + within;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.logs.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains(needle);
                    lines.push(line);
                    if done {
                        return lines;
                    }
                }
                Err(_) => panic!("no log line with {needle:?} within {within:?}; saw {lines:#?}"),
            }
        }
    }

    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} failed");
    }

    pub fn metrics(&self) -> String {
        http_get(&self.addr, "/metrics", None).2
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Finds an external tool. Missing on a developer's machine: prints why and returns
/// None (the caller skips). Missing under CI=true: fails, since CI must never skip.
pub fn require_tool(name: &str, why: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{name} is required under CI ({why}); .ci/run must install it");
        }
        eprintln!("SKIP: {name} not found ({why}); install it to run this test");
    }
    found
}

/// Sum of a metric's samples whose line contains every one of `parts`.
pub fn metric_sum(text: &str, name: &str, parts: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            l.starts_with(name) && (l[name.len()..].starts_with('{') || l[name.len()..].starts_with(' '))
        })
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One request as a fake server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON: {e}"))
    }
}

/// A server that records every request (head and Content-Length body) and answers each
/// with `reply`. For checking exactly what a probe sends.
pub fn recording_server(
    reply: &'static [u8],
) -> (SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<Received>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let addr = answering_server(move |r| {
        log.lock().unwrap().push(r.clone());
        reply.to_vec()
    });
    (addr, seen)
}

/// A server that answers each request (one per connection) with what `respond` returns
/// for it. Replies should say `Connection: close`.
pub fn answering_server(respond: impl Fn(&Received) -> Vec<u8> + Send + Sync + 'static) -> SocketAddr {
    scripted_server(move |r| vec![Step::Write(respond(r))])
}

/// An HTTP/1.1 reply with a body, closing the connection.
pub fn reply(status: u16, body: &str) -> Vec<u8> {
    http1::json_response(status, "X", body, &[("Connection", "close")]).into_bytes()
}

/// How a [`chunked_reply`] ends its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// With the chunked encoding's last chunk (`0\r\n\r\n`): a complete message.
    LastChunk,
    /// Without it, the connection then closed: the message never ends.
    Cut,
}

/// A 200 reply of `content_type` whose body is `parts` in HTTP/1.1 chunks (one chunk per
/// part, as servers flush each event), keep-alive framing, ending as `end` says.
pub fn chunked_reply(content_type: &str, parts: &[&str], end: BodyEnd) -> Vec<u8> {
    let mut out = http1::chunked_head(content_type, &[]);
    // An empty chunk would be the last chunk.
    for p in parts.iter().filter(|p| !p.is_empty()) {
        http1::push_chunk(&mut out, p);
    }
    if end == BodyEnd::LastChunk {
        out.push_str(http1::LAST_CHUNK);
    }
    out.into_bytes()
}

/// A fake paging receiver (PagerDuty, webhook): records every request with the status
/// it answered, and answers what the test sets (202, 503, 400 ...).
pub struct FakeReceiver {
    pub addr: SocketAddr,
    pub status: std::sync::Arc<std::sync::atomic::AtomicU16>,
    pub calls: std::sync::Arc<std::sync::Mutex<Vec<(Received, u16)>>>,
}

impl FakeReceiver {
    pub fn start(status: u16) -> FakeReceiver {
        let status = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(status));
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (answer, log) = (status.clone(), calls.clone());
        let addr = answering_server(move |r| {
            let s = answer.load(std::sync::atomic::Ordering::SeqCst);
            log.lock().unwrap().push((r.clone(), s));
            reply(
                s,
                if s < 300 {
                    "{\"status\":\"success\"}"
                } else {
                    "{\"status\":\"nope\"}"
                },
            )
        });
        FakeReceiver { addr, status, calls }
    }

    pub fn set_status(&self, status: u16) {
        self.status.store(status, std::sync::atomic::Ordering::SeqCst);
    }

    /// Bodies of the requests it accepted (2xx).
    pub fn accepted(&self) -> Vec<serde_json::Value> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, s)| (200..300).contains(s))
            .map(|(r, _)| r.json())
            .collect()
    }

    pub fn accepted_count(&self) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, s)| (200..300).contains(s))
            .count()
    }

    pub fn call_count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

/// An endpoint that is healthy (200) or down (503) as the test says.
pub fn switch_server(healthy: std::sync::Arc<std::sync::atomic::AtomicBool>) -> SocketAddr {
    answering_server(move |_| {
        if healthy.load(std::sync::atomic::Ordering::SeqCst) {
            reply(200, "{\"status\":\"ok\"}")
        } else {
            reply(503, "{\"error\":\"no healthy upstream\"}")
        }
    })
}

/// Waits until `check` holds, polling; panics with `what` after `within`.
pub fn wait_until(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Debian's Alertmanager on a loopback port with `config` (YAML), gossip off; stopped on
/// drop. None (after printing why) when it is not installed outside CI.
pub struct Alertmanager {
    child: Child,
    pub addr: String,
}

impl Alertmanager {
    pub fn start(config: &str) -> Option<Alertmanager> {
        let bin = require_tool(
            "prometheus-alertmanager",
            "receives alerts; apt-get install prometheus-alertmanager",
        )?;
        let dir = temp_dir("alertmanager");
        let path = dir.join("alertmanager.yml");
        std::fs::write(&path, config).unwrap();
        let addr = format!("127.0.0.1:{}", closed_port());
        let child = Command::new(bin)
            .arg(format!("--config.file={}", path.display()))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let am = Alertmanager { child, addr };
        wait_until("Alertmanager ready", Duration::from_secs(20), || {
            TcpStream::connect(&am.addr).is_ok() && http_get(&am.addr, "/-/ready", None).0 == 200
        });
        Some(am)
    }

    /// Active alerts as Alertmanager's API v2 lists them.
    pub fn alerts(&self) -> Vec<serde_json::Value> {
        let (status, _, body) = http_get(&self.addr, "/api/v2/alerts", None);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    pub fn alerts_named(&self, alertname: &str) -> Vec<serde_json::Value> {
        self.alerts()
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == alertname)
            .collect()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus server (Debian's binary at `bin`) on a free 127.0.0.1 port with a
/// fresh data directory, ready when returned; killed on drop.
pub struct Prometheus {
    pub child: Child,
    pub addr: String,
}

impl Prometheus {
    pub fn start(bin: &Path, config: &Path, extra: &[&str]) -> Prometheus {
        let dir = temp_dir("prometheus-data");
        let addr = format!("127.0.0.1:{}", closed_port());
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.display()))
            .arg(format!("--web.listen-address={addr}"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let p = Prometheus { child, addr };
        wait_until("Prometheus ready", Duration::from_secs(30), || {
            TcpStream::connect(&p.addr).is_ok() && http_get(&p.addr, "/-/ready", None).0 == 200
        });
        p
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `inferprobe test-alert` on a config of `receivers` (YAML list items) and one probe:
/// its exit code and what it printed.
pub fn test_alert(receivers: &str) -> (Option<i32>, String) {
    let dir = temp_dir("test-alert");
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        format!(
            "agent:\n  location: eu-test\nreceivers:\n{receivers}probes:\n  - name: llm-health\n    kind: http\n    url: http://127.0.0.1:9/health\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["test-alert", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The response body of a real-server capture in tests/transcripts, cut into its events
/// (each keeps its blank line), as the server flushed them.
pub fn transcript_events(name: &str) -> Vec<String> {
    let path = format!("{}/tests/transcripts/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.rfind("<<<\n").unwrap() + 4;
    let end = text.find("\n### client-side").unwrap_or(text.len());
    text[start..end]
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect()
}
