//! Helpers shared by the benchmarks: percentiles, /proc readers (CPU ticks, VmHWM,
//! VmRSS), the machine description, child processes that die with the bench, and a
//! minimal HTTP/1.1 GET for scraping our own loopback servers.
//!
//! Each bench uses a subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `--quick` on the command line (`cargo bench --bench x -- --quick`) or
/// `INFERPROBE_BENCH_QUICK=1`: shorter runs for development; figures are not for the record.
pub fn quick() -> bool {
    std::env::args().any(|a| a == "--quick")
        || std::env::var("INFERPROBE_BENCH_QUICK").is_ok_and(|v| v != "0" && !v.is_empty())
}

/// A distribution summary; `p` uses the nearest-rank method on sorted samples.
#[derive(Debug, Clone)]
pub struct Summary {
    pub count: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn summarize(samples: &[f64]) -> Summary {
    let mut s: Vec<f64> = samples.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return Summary {
            count: 0,
            min: f64::NAN,
            median: f64::NAN,
            p99: f64::NAN,
            max: f64::NAN,
        };
    }
    Summary {
        count: s.len(),
        min: s[0],
        median: percentile(&s, 50.0),
        p99: percentile(&s, 99.0),
        max: s[s.len() - 1],
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `nproc`, the CPU model, kernel and the date, for the report header.
pub fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let date = command_output("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]);
    // The machine is shared: the load average at the start says how quiet it was.
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!(
        "nproc={nproc}, cpu=\"{cpu}\", kernel={}, date={date}, loadavg={}",
        kernel.trim(),
        load.join(" ")
    )
}

fn command_output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Clock ticks per second for /proc/PID/stat times, from `getconf CLK_TCK`.
pub fn clk_tck() -> f64 {
    command_output("getconf", &["CLK_TCK"]).parse().unwrap_or(100.0)
}

/// utime + stime of a process, in clock ticks (fields 14 and 15 of /proc/PID/stat,
/// counted after the parenthesised command name, which may hold spaces).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    let after_comm = &stat[stat.rfind(')').expect("comm in stat") + 2..];
    // after_comm starts at field 3 (state); utime is field 14, stime field 15.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let utime: u64 = fields[11].parse().expect("utime");
    let stime: u64 = fields[12].parse().expect("stime");
    utime + stime
}

/// A `kB` field of /proc/PID/status (VmHWM, VmRSS, ...), in kibibytes.
pub fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A free loopback port (bound then released: another process could take it in between,
/// which on this loopback-only machine does not happen in practice).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// A child process that is killed (by its own pid) when dropped.
pub struct ChildGuard {
    pub name: &'static str,
    pub child: Child,
}

impl ChildGuard {
    pub fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> ChildGuard {
        let log_file = std::fs::File::create(log).expect("create log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone log file"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        ChildGuard { name, child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Panics with the log's tail if the process has exited.
    pub fn assert_alive(&mut self, log: &Path) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: String = text
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            panic!("{} exited early ({status}):\n{tail}", self.name);
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 GET on a fresh connection (`Connection: close`), reading to EOF.
/// Returns the status and the body, de-chunked when it came chunked (the agent streams
/// `/metrics` in chunks; a chunk boundary must not split a sample line).
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match split {
        Some(i) => (&buf[..i], &buf[i + 4..]),
        None => (&buf[..], &[][..]),
    };
    let head = String::from_utf8_lossy(head);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
    let body = if chunked { dechunk(body) } else { body.to_vec() };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The data of a chunked body (chunk extensions and trailers ignored); stops at the
/// last chunk or where the body is cut short.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rest.len());
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_field = String::from_utf8_lossy(&rest[..eol]);
        let size_hex = size_field.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size_hex, 16) else {
            break;
        };
        rest = &rest[eol + 2..];
        if size == 0 || rest.len() < size {
            out.extend_from_slice(&rest[..size.min(rest.len())]);
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or(&[]);
    }
    out
}

/// The 1, 5 and 15 minute load averages of /proc/loadavg, e.g. "0.52 0.61 0.70".
pub fn loadavg() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// Polls `path` until it answers 200, or panics after `timeout`.
pub async fn wait_http_ok(addr: SocketAddr, path: &str, timeout: Duration) {
    let t0 = Instant::now();
    loop {
        if let Ok((200, _)) = http_get(addr, path).await {
            return;
        }
        assert!(
            t0.elapsed() < timeout,
            "http://{addr}{path} not ready within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sum of every sample of a metric family in Prometheus text, optionally only those
/// whose label set contains `must_contain` (e.g. `result="success"`).
pub fn sum_metric(text: &str, name: &str, must_contain: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| l.contains(must_contain))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Formats a float with `digits` decimals, or `-` for NaN.
pub fn f(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.digits$}")
    }
}
