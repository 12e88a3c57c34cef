//! The series budget, counted from a real exposition: the agent (`inferprobe run`) runs
//! one probe of every kind against the simulator, and one scrape of `/metrics` gives the
//! series of each probe and of the agent itself. The default detail is pinned so that it
//! cannot creep back up (issue 15: at most 30 series for an LLM probe); `full` is pinned
//! too, so its growth is a decision and docs/metrics.md stays true. A reload that changes
//! the detail leaves no stale series.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::*;
use inferprobe::probe::kinds::Kind;
use inferprobe::simulate::Script;

/// One probe of a kind, named after it, as the simulator answers it. Every kind of
/// `Kind::ALL` must have one (checked below), so a new kind gets a budget.
fn probe_of(kind: Kind, sim: std::net::SocketAddr) -> String {
    let stream = "ttft=20ms&token_gap=2ms";
    let llm = |path: &str| format!("url: \"http://{sim}{path}?{stream}\"\n    model: sim-model");
    let keys = match kind {
        Kind::OpenAiChat => llm("/v1/chat/completions"),
        Kind::OpenAiCompletions => llm("/v1/completions"),
        Kind::OpenAiResponses => llm("/v1/responses"),
        Kind::Ollama => llm("/api/chat"),
        Kind::Tgi => llm("/generate_stream"),
        Kind::LlamaCpp => llm("/completion"),
        Kind::Anthropic => llm("/v1/messages"),
        Kind::KserveV2 => format!(
            "url: \"http://{sim}/v2/models/digits/infer?ttft=5ms\"\n    ready_check: true\n    input: {{name: input-0, datatype: FP32, shape: [1, 4], data: [0.1, 0.5, 0.2, 0.9]}}"
        ),
        Kind::KserveV2Grpc => format!(
            "url: \"http://{sim}\"\n    model: digits\n    headers: {{x-sim: ttft=5ms}}\n    ready_check: true\n    input: {{name: input-0, datatype: FP32, shape: [1, 4], data: [0.1, 0.5, 0.2, 0.9]}}"
        ),
        Kind::GrpcHealth => format!("url: \"http://{sim}\"\n    headers: {{x-sim: ttft=5ms}}"),
        Kind::Http => format!("url: \"http://{sim}/health\""),
    };
    format!(
        "  - name: {name}\n    kind: {name}\n    {keys}\n",
        name = kind.as_str()
    )
}

fn config(sim: std::net::SocketAddr, detail: &str) -> String {
    let probes: String = Kind::ALL.iter().map(|k| probe_of(*k, sim)).collect();
    format!(
        "agent: {{location: budget, metrics: {{detail: {detail}}}}}\ndefaults: {{interval: 1s, timeout: 900ms}}\nprobes:\n{probes}"
    )
}

/// Sample lines per probe (by the `probe` label the per-probe series start with) and
/// of the agent (every other line).
fn count(exposition: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let owner = line
            .split_once("{probe=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map_or("agent", |(name, _)| name);
        *counts.entry(owner.to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Scrapes until every probe has at least `runs` successful runs counted and the agent's
/// history series are there, and no run failed (a failure reason would add a series, and this test counts the healthy steady state).
fn scrape_after(agent: &Daemon, runs: f64) -> String {
    let mut text = String::new();
    wait_until("every probe has run", Duration::from_secs(30), || {
        text = agent.metrics();
        // The history's two series come with the first run the fan-out records.
        text.contains("inferprobe_history_disk_bytes{")
            && Kind::ALL.iter().all(|k| {
                let name = format!("probe=\"{}\"", k.as_str());
                metric_sum(&text, "inferprobe_runs_total", &[&name, "result=\"success\""]) >= runs
            })
    });
    assert!(!text.contains("result=\"failure\""), "a run failed:\n{text}");
    text
}

fn pinned(agent: usize, per_kind: &[(Kind, usize)]) -> BTreeMap<String, usize> {
    // Every kind is pinned: a kind added to `Kind::ALL` fails here until it has its count.
    let kinds: Vec<Kind> = per_kind.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, Kind::ALL, "one count per kind, in Kind::ALL's order");
    per_kind
        .iter()
        .map(|(k, n)| (k.as_str().to_owned(), *n))
        .chain([("agent".to_owned(), agent)])
        .collect()
}

/// The default: runs (one series per result and reason seen), skipped runs, up, last
/// run, last success, TTFT and total with ten buckets each (12 series).
#[tokio::test(flavor = "multi_thread")]
async fn the_default_detail_keeps_every_probe_within_its_series_budget() {
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("budget-basic");
    let path = dir.join("probes.yaml");
    std::fs::write(&path, config(sim.addr, "basic")).unwrap();
    let agent = Daemon::start(&path, &[]);
    let counts = count(&scrape_after(&agent, 2.0));
    // Runs (success), up, two timestamps; TTFT 12, total 12; tokens by direction 2.
    // Skipped ticks appear at the first skip, like failure reasons.
    const LLM: usize = 4 + 12 + 12 + 2;
    const WHOLE_BODY: usize = 4 + 12;
    // The served model's info series (issue 28): one per probe whose server says which
    // model answered; the simulator's TGI names none and serves no /info, its KServe no
    // model metadata.
    const INFO: usize = 1;
    let expected = pinned(
        12,
        &[
            (Kind::OpenAiChat, LLM + INFO),
            (Kind::OpenAiCompletions, LLM + INFO),
            (Kind::OpenAiResponses, LLM + INFO),
            (Kind::Ollama, LLM + INFO),
            (Kind::Tgi, LLM),
            (Kind::LlamaCpp, LLM + INFO),
            (Kind::Anthropic, LLM + INFO),
            (Kind::KserveV2, WHOLE_BODY),
            (Kind::KserveV2Grpc, WHOLE_BODY),
            (Kind::GrpcHealth, WHOLE_BODY),
            (Kind::Http, WHOLE_BODY),
        ],
    );
    assert_eq!(counts, expected);
    // Issue 15's budget at steady state (each failure reason or a skipped tick seen adds
    // one), and the model info series issue 28 added.
    assert!(counts.values().all(|n| *n <= 30 + INFO), "{counts:?}");
}

/// `full`: every series, runs and TTFT split by prompt length (the built-in prompts
/// rotate through three buckets), phases (`dns` and `connect` on plain HTTP), TTFB,
/// TPOT, chunk gaps, output tokens, server-reported durations, and the agent's schedule
/// lag.
#[tokio::test(flavor = "multi_thread")]
async fn the_full_detail_is_counted_too() {
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("budget-full");
    let path = dir.join("probes.yaml");
    std::fs::write(&path, config(sim.addr, "full")).unwrap();
    let agent = Daemon::start(&path, &[]);
    // Three runs: one per prompt bucket.
    let counts = count(&scrape_after(&agent, 3.0));
    // runs 3, up, two timestamps; TTFT 3 x 12, e2e 12, TTFB 18, TPOT 16, chunk gaps 16,
    // output tokens 15, phases 2 x 12, tokens by direction 2.
    const LLM: usize = 3 + 3 + 36 + 12 + 18 + 16 + 16 + 15 + 24 + 2;
    // runs, up, two timestamps; e2e 12, TTFB 18, phases 2 x 12.
    const WHOLE_BODY: usize = 4 + 12 + 18 + 24;
    // The served model's info series, as at the default detail.
    const INFO: usize = 1;
    let expected = pinned(
        28,
        &[
            (Kind::OpenAiChat, LLM + INFO),
            (Kind::OpenAiCompletions, LLM + INFO),
            (Kind::OpenAiResponses, LLM + INFO),
            // Ollama's four server-reported stages, llama.cpp's two, 18 series each.
            (Kind::Ollama, LLM + 4 * 18 + INFO),
            (Kind::Tgi, LLM),
            (Kind::LlamaCpp, LLM + 2 * 18 + INFO),
            (Kind::Anthropic, LLM + INFO),
            // The readiness request is a phase too.
            (Kind::KserveV2, WHOLE_BODY + 12),
            // The same over gRPC: ModelReady is its phase.
            (Kind::KserveV2Grpc, WHOLE_BODY + 12),
            (Kind::GrpcHealth, WHOLE_BODY),
            (Kind::Http, WHOLE_BODY),
        ],
    );
    assert_eq!(counts, expected);
}

/// From `full` to the default by a reload: what only `full` has goes at once, with the
/// agent's schedule lag, and the counts are the default's after the next runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_to_the_default_detail_leaves_no_stale_series() {
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("budget-reload");
    let path = dir.join("probes.yaml");
    std::fs::write(&path, config(sim.addr, "full")).unwrap();
    let mut agent = Daemon::start(&path, &[]);
    let full = scrape_after(&agent, 1.0);
    assert!(full.contains("inferprobe_ttfb_seconds_count{") && full.contains("prompt_bucket="));
    std::fs::write(&path, config(sim.addr, "basic")).unwrap();
    agent.signal("HUP");
    agent.wait_for_log("Configuration reloaded.", Duration::from_secs(10));
    let basic = scrape_after(&agent, 1.0);
    for gone in [
        "prompt_bucket=",
        "inferprobe_ttfb_",
        "inferprobe_tpot_",
        "inferprobe_phase_",
        "inferprobe_chunk_gap_",
        "inferprobe_output_tokens_",
        "inferprobe_server_reported_",
        "inferprobe_schedule_lag_",
    ] {
        assert!(!basic.contains(gone), "{gone} left after the reload:\n{basic}");
    }
    let counts = count(&basic);
    assert_eq!(counts["openai_chat"], 4 + 12 + 12 + 2 + 1, "{basic}");
    assert_eq!(counts["http"], 4 + 12, "{basic}");
}

/// `metrics.detail` is checked like every enumerated value: positioned, with the fix.
#[test]
fn a_misspelt_detail_is_positioned_with_the_fix() {
    let dir = temp_dir("budget-check");
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        "agent:\n  metrics: {detail: fulll}\ndefaults:\n  metrics: {level: full}\nprobes:\n  - name: a\n    kind: http\n    url: http://127.0.0.1:1/\n    metrics:\n      detail: Basic\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .arg("check")
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    for expected in [
        "probes.yaml:2:21: agent.metrics.detail: unknown value `fulll`; did you mean `full`?",
        "probes.yaml:4:13: defaults.metrics.level: unknown key `level`; expected one of detail",
        "probes.yaml:10:15: probe \"a\": probes[0].metrics.detail: unknown value `Basic`; did you mean `basic`?",
    ] {
        assert!(text.contains(expected), "{expected}\nnot in:\n{text}");
    }
}

/// A probe's own `metrics` wins over `defaults`', which wins over the agent's; the
/// agent's also sets its own series, and nothing said is `basic`.
#[test]
fn the_detail_is_inherited_probe_over_defaults_over_agent() {
    use inferprobe::config::{self, MetricsDetail};
    let parse = |text: &str| {
        config::parse(text, std::path::Path::new("probes.yaml"), &|_| None).unwrap_or_else(|e| panic!("{e}"))
    };
    let probes = "probes:\n  - {name: a, kind: http, url: \"http://127.0.0.1:1/\"}\n  - {name: b, kind: http, url: \"http://127.0.0.1:1/\", metrics: {detail: basic}}\n";
    let details = |c: &config::Config| c.probes.iter().map(|p| p.metrics).collect::<Vec<_>>();
    let plain = parse(probes);
    assert_eq!(plain.agent.metrics, MetricsDetail::Basic);
    assert_eq!(details(&plain), [MetricsDetail::Basic, MetricsDetail::Basic]);
    let agent_wide = parse(&format!("agent: {{metrics: {{detail: full}}}}\n{probes}"));
    assert_eq!(agent_wide.agent.metrics, MetricsDetail::Full);
    assert_eq!(details(&agent_wide), [MetricsDetail::Full, MetricsDetail::Basic]);
    let by_defaults = parse(&format!(
        "agent: {{metrics: {{detail: full}}}}\ndefaults: {{metrics: {{detail: basic}}}}\n{probes}"
    ));
    assert_eq!(by_defaults.agent.metrics, MetricsDetail::Full);
    assert_eq!(
        details(&by_defaults),
        [MetricsDetail::Basic, MetricsDetail::Basic]
    );
    let defaults_full = parse(&format!("defaults: {{metrics: {{detail: full}}}}\n{probes}"));
    assert_eq!(defaults_full.agent.metrics, MetricsDetail::Basic);
    assert_eq!(
        details(&defaults_full),
        [MetricsDetail::Full, MetricsDetail::Basic]
    );
}
