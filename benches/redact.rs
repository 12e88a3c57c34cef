//! What redaction costs. Every failed run's message, every receiver's answer and every
//! shown endpoint goes through the one config-wide `Redactor`, which grows with the
//! config: each probe's own bearer token adds its forms (as written, encoded, base64 in
//! three alignments and two alphabets, hex). Measured for 10, 1,000 and 10,000 probes
//! with distinct tokens: building it (and the memory it holds, from the resident set),
//! and cleaning a 200-character failure message without a secret, one that echoes a
//! token in base64, and a 4 KB body.
//!
//! Run: `cargo bench --bench redact`.
#![forbid(unsafe_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use inferprobe::config;
use inferprobe::redact::Redactor;

fn config_with(n: usize) -> config::Config {
    let mut text = String::from("agent:\n  location: bench\nprobes:\n");
    for i in 0..n {
        text += &format!(
            "  - name: p{i}\n    kind: http\n    url: https://llm-{i}.example.com/v1/health?key=qk{i:08}x\n    headers: {{Authorization: \"Bearer sk-bench-{i:010}-tok\"}}\n"
        );
    }
    config::parse(&text, Path::new("bench.yaml"), &|_| None).expect("valid bench config")
}

/// Mean time per call of `f` over at least `min` of wall time.
fn per_call(min: Duration, mut f: impl FnMut()) -> Duration {
    let mut calls = 0u32;
    let start = Instant::now();
    while start.elapsed() < min || calls < 10 {
        f();
        calls += 1;
    }
    start.elapsed() / calls
}

/// Resident set size in MiB (Linux), 0 elsewhere.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |pages| pages * 4096.0 / 1048576.0)
}

fn main() {
    use base64::Engine as _;
    let plain = "HTTP 500: upstream inference server returned an error while processing the request: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)";
    let body: String = plain.repeat(4096 / plain.len() + 1)[..4096].to_owned();
    println!(
        "| probes (distinct tokens) | build | memory | clean 200 chars, no secret | clean, base64 echo | clean 4 KB body |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for n in [10usize, 1_000, 10_000] {
        let config = config_with(n);
        let before = rss_mib();
        let started = Instant::now();
        let r = Redactor::for_config(&config);
        r.clean("warm the index");
        let build = started.elapsed();
        let memory = rss_mib() - before;
        let echoed = format!(
            "HTTP 401: bad header {}",
            base64::engine::general_purpose::STANDARD.encode(format!("Bearer sk-bench-{:010}-tok", n / 2))
        );
        assert!(
            r.clean(&echoed).contains("<redacted>"),
            "the bench redacts what it claims"
        );
        let min = Duration::from_millis(500);
        let a = per_call(min, || {
            std::hint::black_box(r.clean(std::hint::black_box(plain)));
        });
        let b = per_call(min, || {
            std::hint::black_box(r.clean(std::hint::black_box(&echoed)));
        });
        let c = per_call(min, || {
            std::hint::black_box(r.clean(std::hint::black_box(&body)));
        });
        println!("| {n} | {build:.1?} | {memory:.1} MiB | {a:.1?} | {b:.1?} | {c:.1?} |");
    }
}
