//! `inferprobe report` on a store holding cold starts and restarts, with figures this test
//! computes on its own: a cold probe's main latency rows, attainment and charts hold its
//! warm runs only, its cold runs have rows of their own held to the same objectives,
//! availability counts both; warm-ups are counted at their first run, with when and why.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use inferprobe::config::HistoryConfig;
use inferprobe::outcome::Warmup;
use inferprobe::store::{AlertStore, HistoryWriter, RunRecord};

const UNTIL: u64 = 1_900_000_000;
const DAY: u64 = 86_400;

fn at(s: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(s)
}

/// A run of `probe` in eu-west: TTFT `ttft_ms`, total 200 ms more; `None` a failed run
/// (HTTP 503, nothing timed).
fn run(probe: &str, t: u64, ttft_ms: Option<u64>) -> RunRecord {
    let ttft = ttft_ms.map(Duration::from_millis);
    RunRecord {
        at: at(t),
        probe: probe.into(),
        location: "eu-west".into(),
        reason: ttft.is_none().then(|| "http_5xx".to_owned()),
        message: ttft.is_none().then(|| "HTTP 503".to_owned()),
        status: Some(if ttft.is_some() { 200 } else { 503 }),
        ttfb: ttft,
        ttft,
        tpot: None,
        total: ttft.map(|d| d + Duration::from_millis(200)),
        output_tokens: Some(8),
        output_token_source: Some("usage"),
        input_tokens: Some(20),
        input_token_source: Some("usage"),
        prompt_bucket: "short".into(),
        image_bucket: "none".into(),
        trace_id: None,
        idle: Some(Duration::from_secs(60)),
        waited: Some(Duration::ZERO),
        cold: false,
        warmup: None,
        burst_spread: None,
        burst_slowdown: None,
    }
}

fn nearest_rank(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((q * v.len() as f64).ceil() as usize).max(1) - 1]
}

fn close(a: &serde_json::Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 2e-6)
}

struct Written {
    /// chat-cold this period: warm and cold TTFTs (s) of successful runs, and runs.
    warm_ttft: Vec<f64>,
    cold_ttft: Vec<f64>,
    warm_runs: u64,
    cold_runs: u64,
    cold_failures: u64,
}

/// Two days (this period and the one before) of two probes:
/// - `chat-cold`, every 10 minutes: cold runs (an unloaded model, 20-47 s to the first
///   token, one in 25 failing) and, one in five, a warm run (the endpoint was not idle
///   long enough; 300-340 ms);
/// - `chat`, every minute, warm; two restarts this period (the second's cause quotes the
///   server, markup included) and one in the previous period whose warm-up runs on
///   past the period's start (not counted in this one).
fn write_store(data: &Path) -> Written {
    let store = AlertStore::open(data).unwrap();
    let writer = HistoryWriter::start(
        store.path(),
        HistoryConfig {
            retention: Duration::from_secs(400 * DAY),
            max_disk_bytes: 1 << 30,
        },
    )
    .unwrap();
    let since = UNTIL - DAY;
    let mut w = Written {
        warm_ttft: Vec::new(),
        cold_ttft: Vec::new(),
        warm_runs: 0,
        cold_runs: 0,
        cold_failures: 0,
    };
    for (i, t) in (UNTIL - 2 * DAY..UNTIL).step_by(600).enumerate() {
        let i = i as u64;
        let cold = !i.is_multiple_of(5);
        let r = if cold {
            let ttft = (i % 25 != 3).then_some(20_000 + (i * 7_919) % 27_000);
            let mut r = run("chat-cold", t, ttft);
            r.cold = true;
            r.idle = Some(Duration::from_secs(420));
            r
        } else {
            run("chat-cold", t, Some(300 + i % 41))
        };
        if t >= since {
            let ttft = r.ttft.map(|d| d.as_secs_f64());
            match (r.cold, ttft) {
                (true, Some(v)) => w.cold_ttft.push(v),
                (false, Some(v)) => w.warm_ttft.push(v),
                _ => {}
            }
            if r.cold {
                w.cold_runs += 1;
                w.cold_failures += u64::from(ttft.is_none());
            } else {
                w.warm_runs += 1;
            }
        }
        writer.record(r);
    }
    // (restart, cause, first run, runs in its warm-up)
    let restarts = [
        (
            since - 120,
            "the server answered that it is loading the model",
            since - 60,
            4,
        ),
        (since + 3_600, "connections are accepted again", since + 3_610, 5),
        (
            since + 7_200,
            "the served model changed to <b>tiny-llama-v2</b>",
            since + 7_230,
            3,
        ),
    ];
    for t in (UNTIL - 2 * DAY..UNTIL).step_by(60) {
        let mut r = run("chat", t, Some(250 + t % 50));
        if let Some((since, cause, _, _)) = restarts
            .iter()
            .find(|(_, _, first, n)| t >= *first && t < first + 60 * n)
        {
            r.warmup = Some(Warmup {
                since: at(*since),
                cause: (*cause).into(),
            });
        }
        writer.record(r);
    }
    writer.close();
    w
}

fn report(config: &Path, data: &Path, format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["report", "-c"])
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .args([
            "--since",
            &(UNTIL - DAY).to_string(),
            "--until",
            &UNTIL.to_string(),
        ])
        .args(["--format", format])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn cold_starts_are_apart_from_the_warm_rows_and_restarts_are_counted() {
    let dir = crate::support::temp_dir("report-cold");
    let data = dir.join("data");
    let w = write_store(&data);
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        "probes:\n\
         - {name: chat, kind: openai_chat, url: 'http://127.0.0.1:9/v1/chat/completions', model: m,\n\
            slo: {ttft_p95: 500ms}}\n\
         - {name: chat-cold, kind: openai_chat, url: 'http://127.0.0.1:9/v1/chat/completions', model: m,\n\
            interval: 10m, cold: {idle: 6m}, slo: {ttft_p95: 40s, availability: 90}}\n",
    )
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(&report(&config, &data, "json")).unwrap();
    let row = |probe: &str| {
        json["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["probe"] == probe)
            .unwrap_or_else(|| panic!("no {probe}: {json:#}"))
            .clone()
    };
    let cold = row("chat-cold");
    // Availability and the budget count every run, cold ones included.
    assert_eq!(cold["runs"], w.warm_runs + w.cold_runs, "{cold:#}");
    assert_eq!(cold["failures"], w.cold_failures);
    // The main latency figures are the warm runs': no cold start reaches them.
    for (name, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)] {
        let want = nearest_rank(&w.warm_ttft, q);
        assert!(close(&cold["ttft_seconds"][name], want), "{name}: {cold:#}");
        let want = nearest_rank(&w.cold_ttft, q);
        assert!(
            close(&cold["cold"]["ttft_seconds"][name], want),
            "cold {name}: {cold:#}"
        );
    }
    // Attainment of the 40 s target: every warm run meets it.
    assert_eq!(cold["ttft_slo_attainment"], 1.0, "{cold:#}");
    assert_eq!(cold["cold"]["runs"], w.cold_runs);
    assert_eq!(cold["cold"]["failures"], w.cold_failures);
    let met = w.cold_ttft.iter().filter(|v| **v <= 40.0).count() as f64;
    assert!(close(
        &cold["cold"]["ttft_slo_attainment"],
        met / w.cold_runs as f64
    ));
    assert_eq!(cold["restarts"], 0);
    // The cold starts' P95 (over 40 s) misses the objective the warm runs meet.
    let cold_p95 = nearest_rank(&w.cold_ttft, 0.95);
    assert!(
        cold_p95 > 40.0,
        "the data must make the cold runs miss: {cold_p95}"
    );
    let verdict = json["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["probe"] == "chat-cold")
        .unwrap();
    assert_eq!(verdict["verdict"], "not_met", "{verdict:#}");
    assert_eq!(verdict["missed"].as_array().unwrap().len(), 1, "{verdict:#}");
    assert_eq!(verdict["missed"][0]["start"], "cold");
    assert_eq!(verdict["missed"][0]["objective"], "ttft_p95");
    assert!(
        verdict["line"]
            .as_str()
            .unwrap()
            .contains("P95 TTFT of cold starts"),
        "{verdict:#}"
    );
    // The chart's points are warm too: no day's P95 is a cold start's.
    let trend = json["trends"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["probe"] == "chat-cold")
        .unwrap();
    for p in trend["current"].as_array().unwrap() {
        if let Some(v) = p["ttft_p95_seconds"].as_f64() {
            assert!(v < 1.0, "{p}");
        }
    }

    let chat = row("chat");
    assert!(chat["cold"].is_null(), "{chat:#}");
    // Two restarts begun this period; the one before it is not counted again.
    assert_eq!(chat["restarts"], 2, "{chat:#}");
    let warmups = chat["warmups"].as_array().unwrap();
    assert_eq!(warmups.len(), 2);
    assert_eq!(
        (&warmups[0]["since"], &warmups[0]["runs"], &warmups[1]["cause"]),
        (
            &serde_json::json!(humantime::format_rfc3339_seconds(at(UNTIL - DAY + 3_600)).to_string()),
            &serde_json::json!(5),
            &serde_json::json!("the served model changed to <b>tiny-llama-v2</b>")
        )
    );

    let md = report(&config, &data, "markdown");
    for needle in [
        "## Cold starts",
        "## Restarts",
        "Warm runs only: cold starts are apart, under Cold starts.",
        "P95 TTFT of cold starts",
    ] {
        assert!(md.contains(needle), "{needle} missing:\n{md}");
    }
    let cold_line = format!("| chat-cold | eu-west | {} | {} |", w.cold_runs, w.cold_failures);
    assert!(md.contains(&cold_line), "{cold_line} missing:\n{md}");
    assert!(
        md.contains("| chat | eu-west | 2 | 2030-03-16 18:46:40, 2030-03-16 19:46:40 | 8 | 0 | the served model changed to \\<b\\>tiny-llama-v2\\</b\\> |"),
        "{md}"
    );
    let html = report(&config, &data, "html");
    assert!(html.contains("<h2>Cold starts</h2>") && html.contains("<h2>Restarts</h2>"));
    assert!(
        html.contains("the served model changed to &lt;b&gt;tiny-llama-v2&lt;/b&gt;"),
        "{html}"
    );
    assert!(!html.contains("<b>tiny-llama"), "the cause is escaped");
    eprintln!("{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_report(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .arg("report")
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn probe_row<'a>(report: &'a serde_json::Value, probe: &str) -> &'a serde_json::Value {
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == probe)
        .unwrap_or_else(|| panic!("no row for {probe}: {report:#}"))
}

/// The fleet's report from a real Prometheus tells a real cold probe's cold starts apart
/// as the agent's own store does: an Ollama-speaking simulator that unloads its model
/// after a second idle, so each run of a cold probe waits for a 1.5 s load; a plain probe
/// of the same endpoint finds it unloaded too, which for a run not looking for it is a
/// restart (Ollama's `load_duration`); a warm probe beside them on another simulator.
#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_report_tells_cold_starts_apart_as_the_store_does() {
    use crate::support::*;
    let Some(prometheus) = require_tool(
        "prometheus",
        "serves the fleet's metrics to `report --prometheus`; apt-get install prometheus",
    ) else {
        return;
    };
    let dir = temp_dir("report-cold-prometheus");
    // The model unloads after half a second idle: most of `sleepy`'s runs come later
    // than that after the last request, whatever their phase, and find it gone (a
    // restart each, but for the rule of one warm-up in four windows).
    let (unloading, warm) = crate::support::unloading_and_warm().await;
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!(
            "agent: {{location: eu-test}}\nprobes:\n  - name: chat\n    kind: ollama\n    url: http://{}/api/chat\n    model: m\n    interval: 1s\n    slo: {{ttft_p95: 1s}}\n  - name: chat-cold\n    kind: ollama\n    url: http://{}/api/chat\n    model: m\n    interval: 5s\n    timeout: 3s\n    cold: {{idle: 1500ms}}\n    slo: {{ttft_p95: 1s}}\n  - name: sleepy\n    kind: ollama\n    url: http://{}/api/chat\n    model: m\n    interval: 2s\n    warmup: 1s\n",
            warm.addr, unloading.addr, unloading.addr
        ),
    )
    .unwrap();
    let agent_addr = format!("127.0.0.1:{}", closed_port());
    let prom_config = dir.join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!("global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: inferprobe\n    static_configs:\n      - targets: [\"{agent_addr}\"]\n"),
    )
    .unwrap();
    let server = Prometheus::start(&prometheus, &prom_config, &[]);
    wait_until(
        "Prometheus scraping the agent's port",
        Duration::from_secs(20),
        || {
            let (_, _, body) = http_get(&server.addr, "/api/v1/query?query=up", None);
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            v["data"]["result"].as_array().is_some_and(|r| r.len() == 1)
        },
    );
    let data = dir.join("data");
    let data_arg = data.to_str().unwrap();
    let agent = Daemon::start_on(&agent_addr, &config, &["--data-dir", data_arg]);
    let cold_runs = |d: &Daemon| {
        metric_sum(
            &d.metrics(),
            "inferprobe_runs_total",
            &["probe=\"chat-cold\"", "start=\"cold\""],
        )
    };
    let restarts_seen = |d: &Daemon| {
        metric_sum(
            &d.metrics(),
            "inferprobe_endpoint_restarts_total",
            &["probe=\"sleepy\""],
        )
    };
    wait_until(
        "four cold runs and three restarts",
        Duration::from_secs(90),
        || cold_runs(&agent) >= 4.0 && restarts_seen(&agent) >= 3.0,
    );
    // Two scrapes after the last cold run, so Prometheus has seen it.
    std::thread::sleep(Duration::from_secs(2));
    let url = format!("http://{}", server.addr);
    let config_arg = config.to_str().unwrap();
    let fleet = run_report(&["--prometheus", &url, "--since", "2m", "-c", config_arg]);
    let counted = cold_runs(&agent);
    let local = run_report(&["--data-dir", data_arg, "--since", "2m", "-c", config_arg]);
    eprintln!("fleet: {fleet:#}\nlocal: {local:#}\nthe agent's cold runs: {counted}");
    for (source, report) in [("Prometheus", &fleet), ("the store", &local)] {
        let cold = probe_row(report, "chat-cold");
        let n = cold["cold"]["runs"].as_f64().unwrap_or(0.0);
        assert!(
            // A run may finish between the count and the store's report.
            n >= counted - 2.0 && n <= counted + 1.0,
            "{source}: {n} cold runs, the agent counted {counted}: {cold:#}"
        );
        // Every run of the cold probe found the model unloaded: the warm rows have no
        // latency, the cold ones the load's 1.5 s and more.
        assert!(cold["ttft_seconds"]["p95"].is_null(), "{source}: {cold:#}");
        let p50 = cold["cold"]["ttft_seconds"]["p50"].as_f64().unwrap();
        assert!((1.4..3.0).contains(&p50), "{source}: {cold:#}");
        // The plain probe's loads are restarts; the cold probe's are what it looked for.
        let sleepy = probe_row(report, "sleepy");
        assert!(sleepy["restarts"].as_u64().unwrap() >= 2, "{source}: {sleepy:#}");
        assert!(sleepy["cold"].is_null(), "{source}: {sleepy:#}");
        let chat = probe_row(report, "chat");
        assert!(chat["cold"].is_null(), "{source}: {chat:#}");
        assert!(
            chat["ttft_seconds"]["p95"].as_f64().unwrap() < 1.0,
            "{source}: {chat:#}"
        );
        let verdict = report["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["probe"] == "chat-cold")
            .unwrap();
        assert_eq!(verdict["missed"][0]["start"], "cold", "{source}: {verdict:#}");
    }
    // The store counts every restart; Prometheus misses the counter's first one
    // (increase() sees no rise into a series' first sample).
    let restarts = |r: &serde_json::Value| probe_row(r, "sleepy")["restarts"].as_f64().unwrap();
    let (from_prometheus, from_store) = (restarts(&fleet), restarts(&local));
    assert!(from_store >= 3.0, "the store: {from_store}");
    assert!(
        from_prometheus <= from_store && from_prometheus >= from_store - 2.0,
        "restarts: Prometheus {from_prometheus}, the store {from_store}"
    );
    drop(agent);
}
