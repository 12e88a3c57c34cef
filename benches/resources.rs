//! Resource use of the agent, for issue 15's targets:
//!
//! - **CPU per run next to blackbox exporter** at 100 and 300 runs/s: 3,000 and 9,000
//!   `http` probes of the simulator's `/health` on a 30 s interval, then
//!   prometheus-blackbox-exporter doing the same probes at the same rate, one after the
//!   other in one bench run (target: the agent ≥ 5× under blackbox exporter).
//! - **Memory** at 1, 1,000 and 10,000 `http` probes: VmRSS when `/readyz` answers, VmHWM
//!   (peak RSS) before and after one `/metrics` scrape (targets: ≤ 15 MiB idle with one
//!   probe, ≤ 50 MiB peak with 10,000 and a scrape).
//! - With `INFERPROBE_BENCH_CHAT=1`, also 1,000 and 10,000 `openai_chat` probes (the
//!   figures earlier sections of BENCHMARKS.md report).
//!
//! Everything runs as separate processes, as deployed: `inferprobe simulate` (the
//! endpoint), `inferprobe run` (the agent under test, default log level `info`: one line
//! per run, to a file) and `prometheus-blackbox-exporter`. The agent binary is
//! `INFERPROBE_BIN` when set (to measure another build with the same bench, e.g. main's
//! release build), else this tree's; the simulator is always this tree's, so the endpoint
//! is the same whichever agent is measured. Figures come from /proc of the process under
//! test: CPU is utime + stime of /proc/PID/stat (in `getconf CLK_TCK` ticks), peak RSS is
//! VmHWM of /proc/PID/status. CPU seconds are what a busy shared machine disturbs least;
//! the load average at the start and end of each window is printed beside them.
//!
//! The agent's measurement window starts when `/readyz` answers (config parsed, probes
//! built and scheduled; the start-up CPU is reported on its own) and ends before the one
//! `/metrics` scrape that counts the runs (`inferprobe_runs_total`), so the CPU per run
//! excludes scraping; the cost and size of that scrape, and VmHWM after it, are reported
//! on their own, and "with scrapes" adds one such scrape every 15 s, as a Prometheus
//! server would.
//!
//! Blackbox exporter has no schedule of its own: each probe is an HTTP request to its
//! `/probe?module=http_2xx&target=...`, which this bench sends at the agent's rate
//! (N / 30 s, evenly spaced) over a few kept-alive connections, as Prometheus would.
//!
//! Run: `cargo bench --bench resources` (about 9 minutes; `-- --quick` for a short
//! development run). `INFERPROBE_BENCH_SECONDS` sets the CPU windows (default 80 s);
//! the memory measurements use 35 s windows (every probe has run once by then).
#![forbid(unsafe_code)]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

use common::{ChildGuard, f};

const INTERVAL_S: u64 = 30;
/// A typical Prometheus scrape interval, to put the agent's scrape cost per run.
const SCRAPE_EVERY_S: u64 = 15;
const BLACKBOX: &str = "/usr/bin/prometheus-blackbox-exporter";
/// Long enough for every probe on a 30 s interval to have run once.
const MEMORY_WINDOW: Duration = Duration::from_secs(35);
/// Issue 15's CPU target: the agent's CPU per run at least this many times under
/// blackbox exporter's.
const CPU_TARGET_RATIO: f64 = 5.0;

#[derive(Clone, Copy, PartialEq)]
enum ProbeKind {
    Chat,
    Http,
}

impl ProbeKind {
    fn name(self) -> &'static str {
        match self {
            ProbeKind::Chat => "openai_chat",
            ProbeKind::Http => "http",
        }
    }
}

struct Env {
    /// The agent under test.
    agent_bin: String,
    /// The simulator: always this tree's.
    simulator_bin: &'static str,
    dir: PathBuf,
    clk: f64,
}

fn main() {
    let quick = common::quick();
    let window = std::env::var("INFERPROBE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(if quick { 20 } else { 80 }));
    let rates: &[usize] = if quick { &[10] } else { &[100, 300] };
    let memory_sizes: &[usize] = if quick { &[1, 300] } else { &[1, 1_000, 10_000] };
    let chat_sizes: &[usize] = match std::env::var("INFERPROBE_BENCH_CHAT") {
        Ok(v) if v != "0" && !v.is_empty() => {
            if quick {
                &[300]
            } else {
                &[1_000, 10_000]
            }
        }
        _ => &[],
    };
    let simulator_bin = env!("CARGO_BIN_EXE_inferprobe");
    let env = Env {
        agent_bin: std::env::var("INFERPROBE_BIN").unwrap_or_else(|_| simulator_bin.to_owned()),
        simulator_bin,
        dir: std::env::temp_dir().join(format!("inferprobe-bench-resources-{}", std::process::id())),
        clk: common::clk_tck(),
    };
    std::fs::create_dir_all(&env.dir).expect("temp dir");
    println!(
        "# resources: agent CPU and memory, {INTERVAL_S} s interval, {window:?} CPU windows, {MEMORY_WINDOW:?} memory windows"
    );
    println!("machine: {}", common::machine());
    println!(
        "agent: {} ({}); simulator: {simulator_bin}; CLK_TCK {}",
        env.agent_bin,
        agent_version(&env.agent_bin),
        env.clk
    );
    if quick {
        println!("QUICK MODE: not for the record");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let have_blackbox = Path::new(BLACKBOX).exists();
    if !have_blackbox {
        println!("\nSKIPPED the blackbox comparison: {BLACKBOX} is not installed");
    }
    let mut side = Vec::new();
    for &rate in rates {
        let n = rate * INTERVAL_S as usize;
        let agent = runtime.block_on(measure_agent(&env, ProbeKind::Http, n, window));
        print_agent(&agent);
        let bb = have_blackbox.then(|| runtime.block_on(measure_blackbox(&env, n, window)));
        if let Some(b) = &bb {
            print_blackbox(b);
        }
        side.push((agent, bb));
    }
    let mut memory = Vec::new();
    for &n in memory_sizes {
        let m = runtime.block_on(measure_agent(&env, ProbeKind::Http, n, MEMORY_WINDOW));
        print_agent(&m);
        memory.push(m);
    }
    let mut chat = Vec::new();
    for &n in chat_sizes {
        let m = runtime.block_on(measure_agent(&env, ProbeKind::Chat, n, window));
        print_agent(&m);
        chat.push(m);
    }

    println!();
    println!(
        "## CPU per run: agent vs blackbox exporter, http probes of the simulator's /health at the same rate"
    );
    println!();
    println!(
        "agent: {}. CPU ms per run = CPU s per 1,000 runs (utime + stime).",
        env.agent_bin
    );
    println!();
    println!(
        "| runs/s | probes | agent runs (failed) | agent CPU ms per run | same + a /metrics scrape every {SCRAPE_EVERY_S} s | blackbox probes ok (failed) | blackbox CPU ms per run | blackbox / agent | blackbox / agent with scrapes | ≥ {CPU_TARGET_RATIO:.0}× | agent VmHWM MiB | blackbox VmHWM MiB | load avg (agent; blackbox) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (a, b) in &side {
        let (b_runs, b_cpu, ratio, ratio_scraped, met, b_hwm, b_load) = match b {
            Some(b) => (
                format!("{} ({})", b.ok, b.failed),
                f(b.cpu_per_1000(), 3),
                format!("{} ×", f(b.cpu_per_1000() / a.cpu_per_1000(), 2)),
                format!("{} ×", f(b.cpu_per_1000() / a.cpu_per_1000_scraped(), 2)),
                if b.cpu_per_1000() / a.cpu_per_1000_scraped() >= CPU_TARGET_RATIO {
                    "met (with scrapes)"
                } else if b.cpu_per_1000() / a.cpu_per_1000() >= CPU_TARGET_RATIO {
                    "met without scrapes only"
                } else {
                    "NOT met"
                },
                f(mb(b.hwm_kb), 1),
                b.load.clone(),
            ),
            None => (
                "skipped".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-",
                "-".into(),
                "-".into(),
            ),
        };
        println!(
            "| {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}; {} |",
            f(a.probes as f64 / INTERVAL_S as f64, 0),
            a.probes,
            a.runs,
            a.failed,
            f(a.cpu_per_1000(), 3),
            f(a.cpu_per_1000_scraped(), 3),
            b_runs,
            b_cpu,
            ratio,
            ratio_scraped,
            met,
            f(mb(a.hwm_after_kb), 1),
            b_hwm,
            a.load,
            b_load
        );
    }
    println!();
    println!(
        "## Memory: http probes on a {INTERVAL_S} s interval, {MEMORY_WINDOW:?} after /readyz, then one /metrics scrape"
    );
    println!();
    println!(
        "| probes | runs | VmRSS at /readyz MiB | VmHWM before scrape MiB | VmHWM after one scrape MiB | /metrics bytes | scrape CPU s | target | load avg |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in &memory {
        let target = match m.probes {
            1 if mb(m.hwm_after_kb) <= 15.0 => "≤ 15 MiB: met",
            1 => "≤ 15 MiB: NOT met",
            10_000 if mb(m.hwm_after_kb) <= 50.0 => "≤ 50 MiB: met",
            10_000 => "≤ 50 MiB: NOT met",
            _ => "-",
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.probes,
            m.runs,
            f(mb(m.rss_at_ready_kb), 1),
            f(mb(m.hwm_before_kb), 1),
            f(mb(m.hwm_after_kb), 1),
            m.metrics_bytes,
            f(m.scrape_cpu_s, 2),
            target,
            m.load
        );
    }
    if !chat.is_empty() {
        println!();
        println!("## agent, openai_chat probes (simulator: ttft 300ms, token gap 20ms, 16 tokens)");
        println!();
        println!(
            "| probes | runs (expected) | failed | skipped | CPU ms per run | CPU % of one core | VmRSS at /readyz MiB | VmHWM before scrape MiB | VmHWM after 1 scrape MiB | /metrics bytes | scrape CPU s | start-up CPU s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for m in &chat {
            println!(
                "| {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.probes,
                m.runs,
                m.expected_runs(),
                m.failed,
                m.skipped,
                f(m.cpu_per_1000(), 3),
                f(m.cpu_s / m.window_s * 100.0, 1),
                f(mb(m.rss_at_ready_kb), 1),
                f(mb(m.hwm_before_kb), 1),
                f(mb(m.hwm_after_kb), 1),
                m.metrics_bytes,
                f(m.scrape_cpu_s, 2),
                f(m.startup_cpu_s, 2)
            );
        }
    }
    println!();
    println!("load average at the end: {}", common::loadavg());
    let _ = std::fs::remove_dir_all(&env.dir);
}

/// `inferprobe --version` of the agent under test, so a table says which build it is.
fn agent_version(bin: &str) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("cannot run it: {e}"))
}

/// The 1-minute load average.
fn load1() -> String {
    common::loadavg().split(' ').next().unwrap_or("?").to_owned()
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// Starts `inferprobe simulate` on a free port and waits for /health.
async fn start_simulator(env: &Env, tag: &str) -> (ChildGuard, SocketAddr) {
    let port = common::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let log = env.dir.join(format!("simulator-{tag}.log"));
    let mut cmd = Command::new(env.simulator_bin);
    cmd.args([
        "simulate",
        "--listen",
        &addr.to_string(),
        "--ttft",
        "300ms",
        "--token-gap",
        "20ms",
        "--tokens",
        "16",
        "--log-level",
        "warn",
    ]);
    let mut sim = ChildGuard::spawn("simulator", cmd, &log);
    common::wait_http_ok(addr, "/health", Duration::from_secs(10)).await;
    sim.assert_alive(&log);
    (sim, addr)
}

struct AgentRun {
    kind: ProbeKind,
    probes: usize,
    window_s: f64,
    runs: u64,
    failed: u64,
    skipped: u64,
    cpu_s: f64,
    startup_cpu_s: f64,
    startup_s: f64,
    /// Config parsed, probes built and scheduled, no run finished yet.
    rss_at_ready_kb: u64,
    rss_max_sampled_kb: u64,
    hwm_before_kb: u64,
    hwm_after_kb: u64,
    metrics_bytes: usize,
    scrape_s: f64,
    scrape_cpu_s: f64,
    /// The 1-minute load average at the window's start and end, "start → end".
    load: String,
}

impl AgentRun {
    fn cpu_per_1000(&self) -> f64 {
        self.cpu_s / self.runs as f64 * 1000.0
    }

    /// As if Prometheus scraped the agent every [`SCRAPE_EVERY_S`] seconds during the
    /// window (blackbox exporter's figure includes its scrapes: each probe is one).
    fn cpu_per_1000_scraped(&self) -> f64 {
        let scrapes = self.window_s / SCRAPE_EVERY_S as f64;
        (self.cpu_s + scrapes * self.scrape_cpu_s) / self.runs as f64 * 1000.0
    }

    fn expected_runs(&self) -> u64 {
        (self.probes as f64 * self.window_s / INTERVAL_S as f64).round() as u64
    }
}

fn print_agent(m: &AgentRun) {
    println!();
    println!("## agent, {} x {}", m.probes, m.kind.name());
    println!(
        "start-up: {} s to /readyz, {} CPU s",
        f(m.startup_s, 2),
        f(m.startup_cpu_s, 2)
    );
    println!(
        "window {} s (load {}): runs {} (about {} expected), failed {}, skipped ticks {}",
        f(m.window_s, 1),
        m.load,
        m.runs,
        m.expected_runs(),
        m.failed,
        m.skipped
    );
    println!(
        "CPU {} s = {} s per 1,000 runs ({}% of one core)",
        f(m.cpu_s, 2),
        f(m.cpu_per_1000(), 3),
        f(m.cpu_s / m.window_s * 100.0, 1)
    );
    println!(
        "memory: VmRSS at /readyz {} MiB, max sampled {} MiB, VmHWM before scrape {} MiB, after one /metrics scrape {} MiB",
        f(mb(m.rss_at_ready_kb), 1),
        f(mb(m.rss_max_sampled_kb), 1),
        f(mb(m.hwm_before_kb), 1),
        f(mb(m.hwm_after_kb), 1)
    );
    println!(
        "one /metrics scrape: {} bytes in {} s, {} CPU s",
        m.metrics_bytes,
        f(m.scrape_s, 3),
        f(m.scrape_cpu_s, 3)
    );
}

async fn measure_agent(env: &Env, kind: ProbeKind, n: usize, window: Duration) -> AgentRun {
    let tag = format!("{}-{n}", kind.name());
    let (mut sim, sim_addr) = start_simulator(env, &tag).await;
    // Thousands of probes of one simulator, at once as thousands of endpoints would be.
    let mut yaml = String::from("defaults: {overlap: true}\nprobes:\n");
    for i in 0..n {
        match kind {
            ProbeKind::Chat => yaml.push_str(&format!(
                "  - {{name: chat-{i}, kind: openai_chat, url: \"http://{sim_addr}/v1/chat/completions\", model: sim-model, interval: {INTERVAL_S}s, timeout: 10s}}\n"
            )),
            ProbeKind::Http => yaml.push_str(&format!(
                "  - {{name: health-{i}, kind: http, url: \"http://{sim_addr}/health\", interval: {INTERVAL_S}s, timeout: 10s}}\n"
            )),
        }
    }
    let config_path = env.dir.join(format!("probes-{tag}.yaml"));
    std::fs::write(&config_path, yaml).expect("write config");

    let port = common::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let log = env.dir.join(format!("agent-{tag}.log"));
    let mut cmd = Command::new(&env.agent_bin);
    cmd.arg("run")
        .arg("-c")
        .arg(&config_path)
        .args(["--listen", &addr.to_string(), "--location", "bench"])
        .arg("--data-dir")
        .arg(env.dir.join(format!("data-{tag}")));
    let started = Instant::now();
    let mut agent = ChildGuard::spawn("agent", cmd, &log);
    let pid = agent.pid();
    common::wait_http_ok(addr, "/readyz", Duration::from_secs(60)).await;
    let startup_s = started.elapsed().as_secs_f64();
    let cpu0 = common::cpu_ticks(pid);
    let rss_at_ready = common::status_kb(pid, "VmRSS");
    let load0 = load1();
    let t0 = Instant::now();

    let mut rss_max = 0;
    while t0.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(1).min(window.saturating_sub(t0.elapsed()))).await;
        agent.assert_alive(&log);
        rss_max = rss_max.max(common::status_kb(pid, "VmRSS"));
    }
    let cpu1 = common::cpu_ticks(pid);
    let window_s = t0.elapsed().as_secs_f64();
    let load = format!("{load0} → {}", load1());
    let hwm_before = common::status_kb(pid, "VmHWM");

    let scrape_start = Instant::now();
    let (status, text) = common::http_get(addr, "/metrics").await.expect("scrape /metrics");
    let scrape_s = scrape_start.elapsed().as_secs_f64();
    assert_eq!(status, 200, "/metrics status");
    let cpu2 = common::cpu_ticks(pid);
    let hwm_after = common::status_kb(pid, "VmHWM");
    agent.assert_alive(&log);
    sim.assert_alive(&env.dir.join(format!("simulator-{tag}.log")));

    let runs = common::sum_metric(&text, "inferprobe_runs_total", "") as u64;
    let ok = common::sum_metric(&text, "inferprobe_runs_total", "result=\"success\"") as u64;
    let skipped = common::sum_metric(&text, "inferprobe_skipped_runs_total", "") as u64;
    AgentRun {
        kind,
        probes: n,
        window_s,
        runs,
        failed: runs - ok,
        skipped,
        cpu_s: (cpu1 - cpu0) as f64 / env.clk,
        startup_cpu_s: cpu0 as f64 / env.clk,
        startup_s,
        rss_at_ready_kb: rss_at_ready,
        rss_max_sampled_kb: rss_max,
        hwm_before_kb: hwm_before,
        hwm_after_kb: hwm_after,
        metrics_bytes: text.len(),
        scrape_s,
        scrape_cpu_s: (cpu2 - cpu1) as f64 / env.clk,
        load,
    }
}

struct BlackboxRun {
    probes: usize,
    window_s: f64,
    ok: u64,
    failed: u64,
    late: u64,
    cpu_s: f64,
    hwm_kb: u64,
    load: String,
}

impl BlackboxRun {
    fn cpu_per_1000(&self) -> f64 {
        self.cpu_s / self.ok as f64 * 1000.0
    }
}

fn print_blackbox(b: &BlackboxRun) {
    println!();
    println!(
        "## blackbox exporter, {} http probes' worth of /probe requests",
        b.probes
    );
    println!(
        "window {} s (load {}): probes ok {}, failed {}, sent more than 100 ms late {}",
        f(b.window_s, 1),
        b.load,
        b.ok,
        b.failed,
        b.late
    );
    println!(
        "CPU {} s = {} s per 1,000 runs; VmHWM {} MiB",
        f(b.cpu_s, 2),
        f(b.cpu_per_1000(), 3),
        f(mb(b.hwm_kb), 1)
    );
}

/// Parallel kept-alive connections the driver uses, like a Prometheus server's.
const DRIVER_CONNECTIONS: usize = 16;

async fn measure_blackbox(env: &Env, n: usize, window: Duration) -> BlackboxRun {
    let tag = format!("blackbox-{n}");
    let (mut sim, sim_addr) = start_simulator(env, &tag).await;
    let config = env.dir.join("blackbox.yml");
    std::fs::write(
        &config,
        "modules:\n  http_2xx:\n    prober: http\n    timeout: 10s\n    http:\n      preferred_ip_protocol: ip4\n",
    )
    .expect("write blackbox config");
    let port = common::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let log = env.dir.join(format!("{tag}.log"));
    let mut cmd = Command::new(BLACKBOX);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--web.listen-address={addr}"));
    let mut bb = ChildGuard::spawn("blackbox exporter", cmd, &log);
    let pid = bb.pid();
    common::wait_http_ok(addr, "/-/healthy", Duration::from_secs(10)).await;

    let path = format!("/probe?module=http_2xx&target=http%3A%2F%2F{sim_addr}%2Fhealth");
    let period = Duration::from_secs(INTERVAL_S).div_f64(n as f64);
    let total = (window.as_secs_f64() / period.as_secs_f64()).round() as u64;
    let cpu0 = common::cpu_ticks(pid);
    let load0 = load1();
    let t0 = tokio::time::Instant::now() + Duration::from_millis(50);
    let workers: Vec<_> = (0..DRIVER_CONNECTIONS)
        .map(|w| {
            let path = path.clone();
            tokio::spawn(drive(addr, path, t0, period, w as u64, total))
        })
        .collect();
    let (mut ok, mut failed, mut late) = (0, 0, 0);
    for w in workers {
        let (o, fl, l) = w.await.expect("driver");
        ok += o;
        failed += fl;
        late += l;
    }
    let cpu1 = common::cpu_ticks(pid);
    let window_s = t0.elapsed().as_secs_f64();
    let load = format!("{load0} → {}", load1());
    bb.assert_alive(&log);
    sim.assert_alive(&env.dir.join(format!("simulator-{tag}.log")));
    BlackboxRun {
        probes: n,
        window_s,
        ok,
        failed,
        late,
        cpu_s: (cpu1 - cpu0) as f64 / env.clk,
        hwm_kb: common::status_kb(pid, "VmHWM"),
        load,
    }
}

/// One driver connection: sends the requests `w`, `w + K`, `w + 2K`, ... at their times.
/// Returns (probes ok, probes failed, requests sent more than 100 ms late).
async fn drive(
    addr: SocketAddr,
    path: String,
    t0: tokio::time::Instant,
    period: Duration,
    w: u64,
    total: u64,
) -> (u64, u64, u64) {
    let (mut ok, mut failed, mut late) = (0, 0, 0);
    let mut sender = None;
    let mut i = w;
    while i < total {
        let at = t0 + period.mul_f64(i as f64);
        tokio::time::sleep_until(at).await;
        if at.elapsed() > Duration::from_millis(100) {
            late += 1;
        }
        if sender.is_none() {
            sender = connect(addr).await;
        }
        let success = match sender.as_mut() {
            Some(s) => probe_once(s, addr, &path).await,
            None => None,
        };
        match success {
            Some(true) => ok += 1,
            Some(false) => failed += 1,
            None => {
                failed += 1;
                sender = None;
            }
        }
        i += DRIVER_CONNECTIONS as u64;
    }
    (ok, failed, late)
}

async fn connect(addr: SocketAddr) -> Option<http1::SendRequest<Empty<Bytes>>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await.ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Some(sender)
}

/// One `/probe` request: `Some(probe_success)`, or `None` if the connection broke.
async fn probe_once(
    sender: &mut http1::SendRequest<Empty<Bytes>>,
    addr: SocketAddr,
    path: &str,
) -> Option<bool> {
    sender.ready().await.ok()?;
    let request = http::Request::get(path)
        .header(http::header::HOST, addr.to_string())
        .body(Empty::new())
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    let status = response.status();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    let text = String::from_utf8_lossy(&body);
    Some(status.is_success() && text.lines().any(|l| l.trim() == "probe_success 1"))
}
