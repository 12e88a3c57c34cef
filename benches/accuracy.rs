//! Measurement error of TTFT and total latency against the server's ground truth.
//!
//! The simulator and the probe run in this one process, so they share the monotonic
//! clock. The simulator logs the instant just before it writes the first token and the
//! final `[DONE]` to the socket; the probe records the instant the read that completed
//! the first content event (and the `[DONE]` event) returned. For each run:
//!
//! ```text
//! error_ttft  = outcome.marks.first_token - record.first_token_written
//! error_total = outcome.marks.end         - record.done_written
//! ```
//!
//! That is everything between the server's write and our timestamp: loopback TCP, the
//! kernel, tokio's wake-up, hyper's chunk decoding and our SSE framing. It excludes the
//! time before the server's write (connect, request, the scripted TTFT), which is the
//! latency being measured, not an error of the measurement.
//!
//! Pairing: every concurrent probe asks for a distinct token count (`tokens=16+k`), so a
//! record's token count names the probe; within a probe runs are sequential, so the i-th
//! record of a probe (in server id order) is the i-th run.
//!
//! Run: `cargo bench --bench accuracy` (add `-- --quick` for a short development run).
#![forbid(unsafe_code)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use inferprobe::config;
use inferprobe::outcome::Outcome;
use inferprobe::probe::{BuildContext, ReadyProbe};
use inferprobe::simulate::{self, Script, SimRecord};

use common::{Summary, f, summarize};

struct Scenario {
    name: &'static str,
    ttft: Duration,
    token_gap: Duration,
    tokens: u32,
    /// Probes running at once; each runs `runs_per_probe` times back to back.
    concurrency: u32,
    runs_per_probe: u32,
}

fn main() {
    let quick = common::quick();
    let n = if quick { 30 } else { 300 };
    let scenarios = [
        Scenario {
            name: "ttft 300ms, gap 20ms, 16 tokens, sequential",
            ttft: Duration::from_millis(300),
            token_gap: Duration::from_millis(20),
            tokens: 16,
            concurrency: 1,
            runs_per_probe: n,
        },
        Scenario {
            name: "ttft 20ms, gap 5ms, 16 tokens, sequential",
            ttft: Duration::from_millis(20),
            token_gap: Duration::from_millis(5),
            tokens: 16,
            concurrency: 1,
            runs_per_probe: n,
        },
        Scenario {
            name: "ttft 300ms, gap 20ms, 16-65 tokens, 50 concurrent",
            ttft: Duration::from_millis(300),
            token_gap: Duration::from_millis(20),
            tokens: 16,
            concurrency: 50,
            runs_per_probe: (n / 50).max(1),
        },
        Scenario {
            name: "ttft 20ms, gap 5ms, 16-65 tokens, 50 concurrent",
            ttft: Duration::from_millis(20),
            token_gap: Duration::from_millis(5),
            tokens: 16,
            concurrency: 50,
            runs_per_probe: (n / 50).max(1),
        },
    ];

    println!(
        "# accuracy: our timestamps minus the simulator's write timestamps (same process, monotonic clock)"
    );
    println!("machine: {}", common::machine());
    if quick {
        println!("QUICK MODE: {n} runs per scenario; not for the record");
    }
    // Like the daemon: tokio's multi-threaded runtime, one worker per core.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let build = BuildContext::new();
    let mut rows = Vec::new();
    for s in &scenarios {
        let row = runtime.block_on(run_scenario(s, &build));
        print_row(s, &row);
        rows.push((s, row));
    }
    println!();
    println!("## summary (µs)");
    println!(
        "| scenario | runs ok | TTFT error median | p99 | max | total error median | p99 | max | p99 < 1 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (s, r) in &rows {
        let met = r.ttft_err.p99 < 1000.0 && r.total_err.p99 < 1000.0;
        println!(
            "| {} | {}/{} | {} | {} | {} | {} | {} | {} | {} |",
            s.name,
            r.ok,
            r.runs,
            f(r.ttft_err.median, 0),
            f(r.ttft_err.p99, 0),
            f(r.ttft_err.max, 0),
            f(r.total_err.median, 0),
            f(r.total_err.p99, 0),
            f(r.total_err.max, 0),
            if met { "met" } else { "NOT met" }
        );
    }
    println!();
    println!("## reported TTFT vs scripted (ms)");
    println!(
        "| scenario | scripted | reported median | p99 | server-side (received → first token written) median | reported − scripted median |"
    );
    println!("|---|---|---|---|---|---|");
    for (s, r) in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            s.name,
            s.ttft.as_millis(),
            f(r.ttft_reported.median, 3),
            f(r.ttft_reported.p99, 3),
            f(r.ttft_server.median, 3),
            f(r.ttft_reported.median - s.ttft.as_secs_f64() * 1e3, 3),
        );
    }
}

struct Row {
    runs: usize,
    ok: usize,
    ttft_err: Summary,
    total_err: Summary,
    ttft_reported: Summary,
    ttft_server: Summary,
}

fn print_row(s: &Scenario, r: &Row) {
    println!();
    println!("## {}", s.name);
    println!("runs: {} ({} successful and paired)", r.runs, r.ok);
    for (label, x) in [("error_ttft", &r.ttft_err), ("error_total", &r.total_err)] {
        println!(
            "{label:<12} µs: count {} min {} median {} p99 {} max {}",
            x.count,
            f(x.min, 0),
            f(x.median, 0),
            f(x.p99, 0),
            f(x.max, 0)
        );
    }
    println!(
        "reported TTFT ms: median {} p99 {} (scripted {} ms; server-side median {} ms)",
        f(r.ttft_reported.median, 3),
        f(r.ttft_reported.p99, 3),
        s.ttft.as_millis(),
        f(r.ttft_server.median, 3)
    );
}

async fn run_scenario(s: &Scenario, build: &BuildContext) -> Row {
    let script = Script {
        ttft: s.ttft,
        token_gap: s.token_gap,
        tokens: s.tokens,
        ..Script::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let sim = simulate::start(listener, script);

    // One probe per concurrent slot, told apart by their token count; `overlap` so that
    // they run at once although they share the simulator.
    let mut yaml = String::from("defaults: {overlap: true}\nprobes:\n");
    for k in 0..s.concurrency {
        let tokens = s.tokens + k;
        yaml.push_str(&format!(
            "  - {{name: p{k}, kind: openai_chat, url: \"http://{addr}/v1/chat/completions?ttft={ttft}ms&token_gap={gap}ms&tokens={tokens}\", model: sim-model, interval: 30s, timeout: 10s, max_tokens: 1000}}\n",
            addr = sim.addr,
            ttft = s.ttft.as_millis(),
            gap = s.token_gap.as_millis(),
        ));
    }
    let config = config::parse(&yaml, Path::new("<accuracy>"), &|_| None).expect("valid config");
    let probes: Vec<Arc<ReadyProbe>> = config
        .probes
        .iter()
        .map(|p| Arc::new(ReadyProbe::build(p, &"bench".into(), build).expect("probe builds")))
        .collect();

    // Warm-up: one run per probe, not counted (first connections, lazy allocations).
    for p in &probes {
        let _ = p.run_once().await;
    }
    // Server ids count requests in arrival order: the warm-up took the first ones.
    let skip = probes.len() as u64;

    let tasks: Vec<_> = probes
        .iter()
        .map(|p| {
            let p = p.clone();
            let runs = s.runs_per_probe;
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(runs as usize);
                for _ in 0..runs {
                    out.push(p.run_once().await);
                }
                out
            })
        })
        .collect();
    let mut outcomes: Vec<Vec<Outcome>> = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("probe task"));
    }
    // The simulator logs a request after its last write; give it a moment.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut by_tokens: BTreeMap<u32, Vec<SimRecord>> = BTreeMap::new();
    for r in sim.log.records().into_iter().filter(|r| r.id >= skip) {
        by_tokens.entry(r.tokens).or_default().push(r);
    }
    for v in by_tokens.values_mut() {
        v.sort_by_key(|r| r.id);
    }

    let (mut ttft_err, mut total_err, mut ttft_reported, mut ttft_server) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut runs = 0;
    let mut ok = 0;
    for (k, list) in outcomes.iter().enumerate() {
        let tokens = s.tokens + k as u32;
        let records = by_tokens.get(&tokens).map(Vec::as_slice).unwrap_or(&[]);
        assert_eq!(
            records.len(),
            list.len(),
            "probe p{k}: {} runs but {} server records",
            list.len(),
            records.len()
        );
        for (o, r) in list.iter().zip(records) {
            runs += 1;
            let obs = &o.observation;
            if let Some(fail) = obs.failure() {
                println!("  run failed: {}: {}", fail.reason, fail.message);
                continue;
            }
            assert_eq!(obs.output_tokens, Some(u64::from(tokens)), "pairing check");
            let (Some(ft), Some(end), Some(sft), Some(sdone)) = (
                obs.marks.first_token,
                obs.marks.end,
                r.first_token_written,
                r.done_written,
            ) else {
                continue;
            };
            ok += 1;
            ttft_err.push(signed_us(ft, sft.into_std()));
            total_err.push(signed_us(end, sdone.into_std()));
            ttft_reported.push(obs.ttft().expect("ttft").as_secs_f64() * 1e3);
            ttft_server.push((sft - r.received).as_secs_f64() * 1e3);
        }
    }
    Row {
        runs,
        ok,
        ttft_err: summarize(&ttft_err),
        total_err: summarize(&total_err),
        ttft_reported: summarize(&ttft_reported),
        ttft_server: summarize(&ttft_server),
    }
}

/// `ours - theirs` in microseconds, negative if ours is earlier (which would be a bug).
fn signed_us(ours: std::time::Instant, theirs: std::time::Instant) -> f64 {
    match ours.checked_duration_since(theirs) {
        Some(d) => d.as_secs_f64() * 1e6,
        None => -((theirs - ours).as_secs_f64() * 1e6),
    }
}
