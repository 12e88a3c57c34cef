//! What recording a run and one scrape cost in the metrics, at 10,000 probes: the time
//! per `Metrics::record` (an `http` probe's successful run at the default detail, and an
//! `openai_chat` one with tokens and a trace id), the resident memory the probes' series
//! hold once every probe has run, and the time of one text, OpenMetrics and protobuf
//! encoding and one remote_write sample walk.
//!
//! Run: `cargo bench --bench metrics`.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use inferprobe::metrics::{Metrics, TextFormat};
use inferprobe::outcome::{Observation, Outcome, ProbeIdentity, TraceContext};

const PROBES: usize = 10_000;

fn identity(i: usize, kind: &'static str) -> Arc<ProbeIdentity> {
    Arc::new(ProbeIdentity {
        name: format!("p{i}").into(),
        kind,
        model: if kind == "http" { String::new() } else { "m".into() },
        location: "bench".into(),
        labels: Vec::new(),
        endpoint: format!("http://127.0.0.1:9/{i}"),
        query: String::new(),
        full_metrics: false,
    })
}

fn outcome(probe: &Arc<ProbeIdentity>, llm: bool, n: u64) -> Outcome {
    let t0 = Instant::now();
    let mut o = Observation::new(t0);
    o.marks.headers = Some(t0 + Duration::from_millis(20 + n % 50));
    if llm {
        o.marks.first_token = Some(t0 + Duration::from_millis(300 + n % 400));
        o.output_tokens = Some(64);
        o.input_tokens = Some(20);
    }
    o.marks.end = Some(t0 + Duration::from_millis(500 + n % 900));
    Outcome {
        probe: probe.clone(),
        started_at: SystemTime::now(),
        schedule_lag: Duration::ZERO,
        trace: llm.then(|| TraceContext {
            trace_id: (n as u128).to_be_bytes(),
            span_id: [1; 8],
            sampled: true,
        }),
        observation: o,
        conditions: Default::default(),
        burst: None,
    }
}

/// Resident set size in MiB (Linux), 0 elsewhere.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() {
    for (kind, llm) in [("http", false), ("openai_chat", true)] {
        let probes: Vec<_> = (0..PROBES).map(|i| identity(i, kind)).collect();
        // Outcomes are built before the clock starts: only `record` is timed.
        let outcomes: Vec<_> = probes
            .iter()
            .enumerate()
            .map(|(i, p)| outcome(p, llm, i as u64))
            .collect();
        let rss_before = rss_mib();
        let metrics = Metrics::new("bench");
        metrics.configured(PROBES, false, &probes, &[]);
        for o in &outcomes {
            metrics.record(o);
        }
        let held = rss_mib() - rss_before;
        let rounds = 50;
        let start = Instant::now();
        for _ in 0..rounds {
            for o in &outcomes {
                metrics.record(o);
            }
        }
        let per_record = start.elapsed().as_nanos() as f64 / (rounds * PROBES) as f64;
        let time = |f: &dyn Fn() -> usize| {
            let start = Instant::now();
            let size = f();
            (start.elapsed().as_secs_f64() * 1000.0, size)
        };
        let (text_ms, text_bytes) = time(&|| {
            let mut n = 0;
            let mut sink = Counting(&mut n);
            metrics.write_text(TextFormat::Prometheus, &mut sink).unwrap();
            n
        });
        let (om_ms, om_bytes) = time(&|| metrics.render_openmetrics().len());
        let (pb_ms, pb_bytes) = time(&|| {
            let mut n = 0;
            metrics
                .write_protobuf(&mut |piece| {
                    n += piece.len();
                    Ok(())
                })
                .unwrap();
            n
        });
        let (rw_ms, samples) = time(&|| {
            let mut n = 0;
            metrics.each_sample(&mut |_, _| n += 1).unwrap();
            n
        });
        println!(
            "{PROBES} {kind} probes: record {per_record:.0} ns per run; series held {held:.1} MiB RSS; \
             text {text_bytes} B in {text_ms:.0} ms; OpenMetrics {om_bytes} B in {om_ms:.0} ms; \
             protobuf {pb_bytes} B in {pb_ms:.0} ms; remote_write walk {samples} samples in {rw_ms:.0} ms"
        );
    }
}

/// A writer that only counts what it is given.
struct Counting<'a>(&'a mut usize);

impl std::fmt::Write for Counting<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        *self.0 += s.len();
        Ok(())
    }
}
