//! The run history's writer: how many runs a second it commits, how much disk a run
//! takes, and how long the status page's and report's queries take over a week of runs.
//!
//! Writes 1,000,000 realistic run records (1,000 probes, one location, 70 % with a
//! TTFT, 2 % failures with a message) through `HistoryWriter` as the agent does, as fast
//! as the queue takes them, then reads them back.
//!
//! Run: `cargo bench --bench history` (add `-- --quick` for 200,000 runs).
#![forbid(unsafe_code)]

use std::time::{Duration, Instant, SystemTime};

use inferprobe::config::HistoryConfig;
use inferprobe::store::{AlertStore, HistoryReader, HistoryWriter, RunQuery, RunRecord, disk_bytes};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runs: u64 = if quick { 200_000 } else { 1_000_000 };
    let probes = 1_000u64;
    let dir = std::env::temp_dir().join(format!("inferprobe-bench-history-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = AlertStore::open(&dir).unwrap();
    let writer = HistoryWriter::start(
        store.path(),
        HistoryConfig {
            retention: Duration::from_secs(400 * 86_400),
            max_disk_bytes: 64 << 30,
        },
    )
    .unwrap();
    let now = SystemTime::now();
    // Spread over a week, as 1,000 probes at ~600 s would be.
    let span = Duration::from_secs(7 * 86_400);
    let start = Instant::now();
    let mut waits = 0u64;
    for i in 0..runs {
        let probe = format!("probe-{:04}", i % probes);
        let at = now - span + span.mul_f64(i as f64 / runs as f64);
        let failed = i % 50 == 7;
        let ms = |v: u64| Some(Duration::from_micros(v * 1000 + i % 997));
        let record = RunRecord {
            at,
            probe: probe.into(),
            location: "eu-west-1".into(),
            reason: failed.then(|| "http_5xx".to_owned()),
            message: failed
                .then(|| "HTTP 503: upstream connect error or disconnect/reset before headers".to_owned()),
            status: Some(if failed { 503 } else { 200 }),
            ttfb: ms(40),
            ttft: (i % 10 < 7 && !failed).then(|| Duration::from_micros(250_000 + i % 100_000)),
            tpot: (i % 10 < 7 && !failed).then(|| Duration::from_micros(20_000 + i % 5_000)),
            total: ms(900 + i % 700),
            output_tokens: (!failed).then_some(64),
            output_token_source: (!failed).then_some("usage"),
            input_tokens: (!failed).then_some(120),
            input_token_source: (!failed).then_some("usage"),
            prompt_bucket: "short".into(),
            image_bucket: "none".into(),
            trace_id: None,
            // A warm run after a probe interval's idle time, as most are.
            idle: Some(Duration::from_secs(30)),
            waited: Some(Duration::ZERO),
            cold: false,
            warmup: None,
            burst_spread: None,
            burst_slowdown: None,
        };
        while !writer.record(record.clone()) {
            waits += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    writer.flush();
    let elapsed = start.elapsed();
    let bytes = disk_bytes(store.path());
    let db = std::fs::metadata(store.path()).unwrap().len();
    println!(
        "history writer: {runs} runs committed in {:.2} s: {:.0} runs/s (queue full {waits} times)",
        elapsed.as_secs_f64(),
        runs as f64 / elapsed.as_secs_f64()
    );
    println!(
        "disk: database {:.1} MB, with WAL {:.1} MB: {:.0} bytes per run",
        db as f64 / 1e6,
        bytes as f64 / 1e6,
        db as f64 / runs as f64
    );
    writer.close();

    let reader = HistoryReader::open(store.path()).unwrap();
    let week = RunQuery {
        probe: None,
        location: None,
        since: now - span,
        until: now,
    };
    let t = Instant::now();
    let mut seen = 0usize;
    reader.for_each_series(&week, |r| seen += r.len()).unwrap();
    println!(
        "read a week of all probes (the report): {seen} runs in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let one = RunQuery {
        probe: Some("probe-0042".into()),
        ..week.clone()
    };
    let t = Instant::now();
    let mut n = 0usize;
    reader.for_each_series(&one, |r| n += r.len()).unwrap();
    println!(
        "read a week of one probe (its status card): {n} runs in {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let page = reader.results(&week, None, 1000).unwrap();
    println!(
        "one /api/v1/results page of {}: {:.1} ms",
        page.runs.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    paced();
}

/// CPU of this process (user + system), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// At an agent's real pace (10,000 probes every 30 s: 333 runs/s) the queue is nearly
/// empty, so batches are as large as the commit window makes them: the CPU per run then.
fn paced() {
    let dir = std::env::temp_dir().join(format!("inferprobe-bench-paced-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = AlertStore::open(&dir).unwrap();
    let writer = HistoryWriter::start(store.path(), HistoryConfig::default()).unwrap();
    let runs = 3_000u64;
    let gap = Duration::from_micros(3_000);
    let records: Vec<RunRecord> = (0..runs)
        .map(|i| RunRecord {
            at: SystemTime::now(),
            probe: format!("probe-{:04}", i % 1000).into(),
            location: "eu-west-1".into(),
            reason: None,
            message: None,
            status: Some(200),
            ttfb: Some(Duration::from_millis(3)),
            ttft: None,
            tpot: None,
            total: Some(Duration::from_millis(4)),
            output_tokens: None,
            output_token_source: None,
            input_tokens: None,
            input_token_source: None,
            prompt_bucket: "none".into(),
            image_bucket: "none".into(),
            trace_id: None,
            idle: Some(Duration::from_secs(30)),
            waited: Some(Duration::ZERO),
            cold: false,
            warmup: None,
            burst_spread: None,
            burst_slowdown: None,
        })
        .collect();
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    for (i, r) in records.into_iter().enumerate() {
        writer.record(r);
        if let Some(wait) = (gap * (i as u32 + 1)).checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    writer.flush();
    let used = cpu_seconds() - cpu0;
    println!(
        "paced: {runs} runs at 333 runs/s: {used:.2} CPU s for the process (writer and pacing loop) = {:.0} us per run",
        used / runs as f64 * 1e6
    );
    writer.close();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
