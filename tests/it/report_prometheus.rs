//! `inferprobe report --prometheus`: the fleet's SLO report from the real Prometheus
//! (Debian's package) scraping two real agents in two locations, one probe healthy and
//! one failing for a while, checked against the agents' own counters and against the
//! report one agent computes from its local store.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;
use inferprobe::simulate::Script;

/// A real Prometheus server on 127.0.0.1, stopped on drop.
fn report(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .arg("report")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_report(args: &[&str]) -> serde_json::Value {
    let (code, stdout, stderr) = report(args);
    assert_eq!(code, Some(0), "{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn row<'a>(report: &'a serde_json::Value, probe: &str, location: &str) -> &'a serde_json::Value {
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == probe && p["location"] == location)
        .unwrap_or_else(|| panic!("no row for {probe} in {location}: {report:#}"))
}

fn runs_of(row: &serde_json::Value) -> f64 {
    row["runs"].as_f64().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_report_from_prometheus_matches_the_agents() {
    let Some(prometheus) = require_tool(
        "prometheus",
        "serves the fleet's metrics to `report --prometheus`; apt-get install prometheus",
    ) else {
        return;
    };
    let dir = temp_dir("report-prometheus");
    let sim = simulator(Script::default()).await;
    let healthy = Arc::new(AtomicBool::new(false));
    let flaky = switch_server(healthy.clone());

    // The same two probes in both locations, with latency targets for attainment.
    let config = |location: &str| {
        let path = dir.join(format!("probes-{location}.yaml"));
        std::fs::write(
            &path,
            format!(
                "agent: {{location: {location}}}\nprobes:\n  - name: chat\n    kind: openai_chat\n    url: http://{}/v1/chat/completions?ttft=10ms&tokens=4\n    model: sim-model\n    interval: 1s\n    slo: {{ttft_p95: 500ms, total_p95: 2s}}\n  - name: flaky\n    kind: http\n    url: http://{flaky}/health\n    interval: 1s\n    timeout: 900ms\n    slo: {{total_p95: 1s}}\n",
                sim.addr
            ),
        )
        .unwrap();
        path
    };
    let (eu_config, us_config) = (config("eu-test"), config("us-test"));

    // Prometheus first, scraping the agents' ports before they listen, so it sees their
    // counters from the first runs on (increase() cannot count what came before).
    let eu_addr = format!("127.0.0.1:{}", closed_port());
    let us_addr = format!("127.0.0.1:{}", closed_port());
    let prom_config = dir.join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: inferprobe\n    static_configs:\n      - targets: [\"{eu_addr}\", \"{us_addr}\"]\n"
        ),
    )
    .unwrap();
    let server = Prometheus::start(&prometheus, &prom_config, &[]);
    // Ready is not yet scraping: target discovery reaches the scrape loops only after a
    // few seconds. Wait for both (still closed) targets' first scrape: `up` = 0.
    wait_until(
        "Prometheus scraping both targets",
        Duration::from_secs(20),
        || {
            let (_, _, body) = http_get(&server.addr, "/api/v1/query?query=up", None);
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            v["data"]["result"].as_array().is_some_and(|r| r.len() == 2)
        },
    );
    let eu_data = temp_dir("report-prometheus-eu");
    let eu_data_arg = eu_data.to_str().unwrap();
    let eu = Daemon::start_on(&eu_addr, &eu_config, &["--data-dir", eu_data_arg]);
    let us = Daemon::start_on(&us_addr, &us_config, &[]);
    let started = Instant::now();

    // `flaky` fails (HTTP 503) for its first 8 seconds, then recovers.
    std::thread::sleep(Duration::from_secs(8));
    healthy.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(20).saturating_sub(started.elapsed()));

    let url = format!("http://{}", server.addr);
    let eu_config_arg = eu_config.to_str().unwrap();
    let agent_runs = |d: &Daemon, probe: &str| {
        metric_sum(
            &d.metrics(),
            "inferprobe_runs_total",
            &[&format!("probe=\"{probe}\"")],
        )
    };
    let before = [agent_runs(&eu, "chat"), agent_runs(&us, "chat")];
    let fleet = json_report(&[
        "--prometheus",
        &url,
        "--since",
        "2m",
        "--format",
        "json",
        "-c",
        eu_config_arg,
    ]);
    let after = [agent_runs(&eu, "chat"), agent_runs(&us, "chat")];
    let local = json_report(&[
        "--data-dir",
        eu_data_arg,
        "--since",
        "2m",
        "--format",
        "json",
        "-c",
        eu_config_arg,
    ]);
    let (code, markdown, stderr) = report(&["--prometheus", &url, "--since", "2m", "-c", eu_config_arg]);
    eprintln!(
        "fleet report: {fleet:#}\nlocal report (eu-test): {local:#}\nagents' chat runs before/after: {before:?} {after:?}"
    );

    assert_eq!(fleet["exact"], false);
    assert_eq!(fleet["source"], format!("Prometheus {url}"));
    for (i, location) in ["eu-test", "us-test"].into_iter().enumerate() {
        // The healthy probe: every run good; as many runs as the agent counted, give or
        // take the scrape interval and the first sample (increase() starts from it).
        let chat = row(&fleet, "chat", location);
        assert_eq!(chat["availability"], 1.0, "{chat:#}");
        assert_eq!(chat["failures"], 0, "{chat:#}");
        let runs = runs_of(chat);
        assert!(
            runs >= before[i] - 3.0 && runs <= after[i] + 1.0,
            "{location}: Prometheus says {runs} runs, the agent {}..{}",
            before[i],
            after[i]
        );
        for field in ["ttft_seconds", "total_seconds"] {
            let p95 = chat[field]["p95"].as_f64();
            assert!(p95.is_some_and(|v| v > 0.0 && v < 2.0), "{field}: {chat:#}");
        }
        let attained = chat["ttft_slo_attainment"].as_f64().unwrap();
        assert!((0.9..=1.0).contains(&attained), "{chat:#}");

        // The flaky probe: failures counted, availability below 1, and an incident in
        // this location that says why.
        let flaky = row(&fleet, "flaky", location);
        let availability = flaky["availability"].as_f64().unwrap();
        assert!(availability < 1.0 && availability > 0.0, "{flaky:#}");
        assert!(flaky["failures"].as_u64().unwrap() >= 3, "{flaky:#}");
        let incident = fleet["incidents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["probe"] == "flaky" && i["location"] == location)
            .unwrap_or_else(|| panic!("no incident for flaky in {location}: {fleet:#}"));
        assert!(
            incident["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["reason"] == "http_5xx"),
            "{incident:#}"
        );
        assert!(incident["failed_runs"].as_u64().unwrap() >= 3, "{incident:#}");
        assert!(!incident["ended_at"].is_null(), "it recovered: {incident:#}");
        let lasted = incident["duration_seconds"].as_f64().unwrap();
        assert!((3.0..=15.0).contains(&lasted), "{incident:#}");
    }
    assert!(
        !fleet["probes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["probe"] != "chat" && p["probe"] != "flaky")
    );

    // The same location from the agent's own store: the runs agree within a couple.
    for probe in ["chat", "flaky"] {
        let (from_prometheus, from_store) = (row(&fleet, probe, "eu-test"), row(&local, probe, "eu-test"));
        let (a, b) = (runs_of(from_prometheus), runs_of(from_store));
        assert!(
            (a - b).abs() <= 3.0,
            "{probe}: Prometheus {a} runs, the store {b}"
        );
        let (fa, fb) = (
            from_prometheus["failures"].as_f64().unwrap(),
            from_store["failures"].as_f64().unwrap(),
        );
        assert!(
            (fa - fb).abs() <= 3.0,
            "{probe}: Prometheus {fa} failures, the store {fb}"
        );
    }

    // The verdict across both locations, the coverage of agents 20 s old in a 2-minute
    // period, and the charts' buckets (a minute each) from the same runs.
    let chat_verdict = fleet["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["probe"] == "chat")
        .unwrap_or_else(|| panic!("no verdict for chat: {fleet:#}"));
    assert_eq!(chat_verdict["verdict"], "met", "{chat_verdict:#}");
    assert_eq!(
        chat_verdict["locations"],
        serde_json::json!(["eu-test", "us-test"])
    );
    let coverage = &fleet["coverage"];
    assert_eq!(coverage["partial"], true, "{coverage:#}");
    let covered = coverage["covered_seconds"].as_f64().unwrap();
    assert!((5.0..=60.0).contains(&covered), "{coverage:#}");
    assert_eq!(coverage["previous_covered_seconds"], 0.0, "{coverage:#}");
    assert_eq!(fleet["trends"]["bucket_seconds"], 60.0);
    let trend = fleet["trends"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["probe"] == "chat")
        .unwrap_or_else(|| panic!("no trend for chat: {fleet:#}"));
    let buckets = |period: &str| trend[period].as_array().unwrap().clone();
    assert_eq!(buckets("current").len(), 2, "{trend:#}");
    let bucket_runs: f64 = buckets("current").iter().map(runs_of).sum();
    let period_runs = runs_of(row(&fleet, "chat", "eu-test")) + runs_of(row(&fleet, "chat", "us-test"));
    assert!(
        (bucket_runs - period_runs).abs() <= 6.0,
        "buckets {bucket_runs} runs, the period {period_runs}: {trend:#}"
    );
    assert!(
        buckets("current")
            .iter()
            .any(|b| b["ttft_p95_seconds"].as_f64().is_some_and(|v| v > 0.0)
                && b["total_p95_seconds"].as_f64().is_some_and(|v| v > 0.0)
                && b["availability"] == 1.0),
        "{trend:#}"
    );
    assert!(buckets("previous").iter().all(|b| b["runs"] == 0), "{trend:#}");

    assert_eq!(code, Some(0), "{stderr}");
    for section in [
        "## Verdict",
        "> **Coverage:** The data covers only the last",
        "## Availability",
        "## Time to first token",
        "## Total latency",
        "## SLO attainment",
        "## Top incidents",
        "| chat | eu-test |",
        "| flaky | us-test |",
        "estimated from histogram buckets",
    ] {
        assert!(markdown.contains(section), "missing {section:?} in\n{markdown}");
    }

    // The fleet's one report, as deploy/'s timer or CronJob sends it: `--send` with
    // `--prometheus`, to a real SMTP server, none of the agents' environment needed.
    if let Some(mail) = crate::support::smtp::SmtpSink::start(crate::support::smtp::Mode::Plain, None, None) {
        let fleet_config = dir.join("fleet.yaml");
        std::fs::write(
            &fleet_config,
            format!(
                "agent:\n  listen: ${{LISTEN}}\nreceivers:\n  - name: managers\n    kind: email\n    url: smtp://127.0.0.1:{}\n    starttls: false\n    from: probes@example.com\n    to: [managers@example.com]\nreport:\n  receivers: [managers]\n  period: 2m\nprobes:\n  - name: chat\n    kind: http\n    url: ${{CHAT_URL}}\n    slo: {{availability: 99}}\n",
                mail.port
            ),
        )
        .unwrap();
        let (code, stdout, stderr) = report(&[
            "--send",
            "--prometheus",
            &url,
            "-c",
            fleet_config.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        assert!(
            stdout.contains("managers") && stdout.contains("accepted"),
            "{stdout}"
        );
        wait_until("the fleet report arrived", Duration::from_secs(5), || {
            mail.messages().len() == 1
        });
        let sent = &mail.messages()[0].envelope;
        let html = sent["html"].as_str().unwrap();
        assert!(
            html.contains("estimated from histogram buckets"),
            "the fleet's report"
        );
        assert!(
            html.contains("us-test") && html.contains("eu-test"),
            "every location"
        );
    }
    drop((eu, us, server));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_urls_and_failed_queries_keep_the_exit_codes_and_the_secrets() {
    let (code, _, stderr) = report(&["--prometheus", "ftp://me:hunter2@prom", "--since", "1h"]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let url = format!("http://me:hunter2@127.0.0.1:{}", closed_port());
    // No local store is needed (this data dir does not exist).
    let (code, _, stderr) = report(&[
        "--prometheus",
        &url,
        "--since",
        "1h",
        "--data-dir",
        "/nonexistent",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("query \"") && stderr.contains("refused"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    // A Prometheus that refuses the query: its own error is in the message.
    let refusing = answering_server(|_| {
        reply(
            400,
            "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"invalid parameter \\\"query\\\"\"}",
        )
    });
    let (code, _, stderr) = report(&["--prometheus", &format!("http://{refusing}"), "--since", "1h"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("bad_data: invalid parameter \"query\""),
        "{stderr}"
    );
}

/// Per hour and location, how many runs' TTFT were at or under 0.25 s and 0.5 s, and
/// total at or under 1 s and 2 s, of the 356 a location makes an hour: last week's, then
/// this week's. Pooled, `histogram_quantile(0.95, ...)` interpolates a TTFT P95 of
/// 0.25 + 0.25 × (676.4 − 644) / 50 = 412 ms last week and 0.25 + 0.25 × (676.4 − 86) /
/// 625 = 486.16 ms this week (18 % up), and a total P95 of 1 + (676.4 − 641) / 59 = 1.60 s
/// then 1 + (676.4 − 650) / 60 = 1.44 s (10 % down). Each location alone moved otherwise
/// (eu-west's TTFT P95 about +95 %, us-east's about +5 %).
const RUNS_AN_HOUR: u64 = 356;
const HOURLY: [(&str, [[u64; 4]; 2]); 2] = [
    ("eu-west", [[340, 350, 330, 352], [60, 356, 330, 356]]),
    ("us-east", [[304, 344, 311, 348], [26, 355, 320, 354]]),
];

/// A Prometheus on a store filled beforehand (`promtool tsdb create-blocks-from
/// openmetrics`), stopped on drop.
struct Backfilled {
    child: std::process::Child,
    addr: String,
}

impl Drop for Backfilled {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two weeks (and a day before, so every counter has a sample before the previous
/// period) of probe "chat" in both locations of [`HOURLY`], one sample an hour up to
/// `until`, as OpenMetrics with timestamps.
fn two_weeks_of_chat(until: u64) -> String {
    use std::fmt::Write as _;
    let week = 7 * 86_400;
    let since = until - week;
    let hours: Vec<u64> = (until - 2 * week - 86_400..=until).step_by(3600).collect();
    let labels =
        |location: &str| format!("probe=\"chat\",kind=\"openai_chat\",model=\"m\",location=\"{location}\"");
    let mut om = String::from("# TYPE inferprobe_runs counter\n");
    for (location, _) in HOURLY {
        for (i, t) in hours.iter().enumerate() {
            let runs = i as u64 * RUNS_AN_HOUR;
            let _ = writeln!(
                om,
                "inferprobe_runs_total{{{},result=\"success\",reason=\"none\"}} {runs} {t}",
                labels(location)
            );
        }
    }
    om.push_str("# TYPE inferprobe_up gauge\n");
    for (location, _) in HOURLY {
        for t in &hours {
            let _ = writeln!(om, "inferprobe_up{{{}}} 1 {t}", labels(location));
        }
    }
    let bounds = [
        "0.05", "0.1", "0.25", "0.5", "1.0", "2.0", "4.0", "8.0", "20.0", "+Inf",
    ];
    for (name, first) in [
        ("inferprobe_ttft_seconds", 0),
        ("inferprobe_e2e_latency_seconds", 2),
    ] {
        let _ = writeln!(om, "# TYPE {name} histogram");
        for (location, counts) in HOURLY {
            let mut cumulative = [0u64; 10];
            for (i, t) in hours.iter().enumerate() {
                if i > 0 {
                    let [low, high] = [
                        counts[usize::from(*t > since)][first],
                        counts[usize::from(*t > since)][first + 1],
                    ];
                    // TTFT's two counted bounds are 0.25 and 0.5 s, total's 1 and 2 s.
                    let at = if first == 0 { 2 } else { 4 };
                    for (b, c) in cumulative.iter_mut().enumerate() {
                        *c += match b {
                            b if b < at => 0,
                            b if b == at => low,
                            b if b == at + 1 => high,
                            _ => RUNS_AN_HOUR,
                        };
                    }
                }
                for (le, c) in bounds.iter().zip(cumulative) {
                    let _ = writeln!(om, "{name}_bucket{{{},le=\"{le}\"}} {c} {t}", labels(location));
                }
                let _ = writeln!(om, "{name}_count{{{}}} {} {t}", labels(location), cumulative[9]);
                let _ = writeln!(
                    om,
                    "{name}_sum{{{}}} {} {t}",
                    labels(location),
                    cumulative[9] as f64 * 0.4
                );
            }
        }
    }
    om.push_str("# EOF\n");
    om
}

/// The week-over-week lines of the fleet report: two weeks of the agents' histograms as
/// [`HOURLY`] has them, in a real Prometheus, give the pooled figures' words.
#[test]
fn the_fleet_report_says_how_each_probe_p95s_moved_on_last_week() {
    let why = "the fleet report over two weeks of backfilled samples; apt-get install prometheus";
    let (Some(promtool), Some(prometheus)) = (require_tool("promtool", why), require_tool("prometheus", why))
    else {
        return;
    };
    let dir = temp_dir("report-prometheus-weeks");
    let until: u64 = 1_780_000_000;
    let since = until - 7 * 86_400;
    std::fs::write(dir.join("samples.om"), two_weeks_of_chat(until)).unwrap();
    let out = Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics", "--quiet"])
        .arg(dir.join("samples.om"))
        .arg(dir.join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.join("prometheus.yml"), "scrape_configs: []\n").unwrap();
    let addr = format!("127.0.0.1:{}", closed_port());
    let server = Backfilled {
        child: Command::new(&prometheus)
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            // The samples are months old: keep them.
            .arg("--storage.tsdb.retention.time=100y")
            .arg(format!("--web.listen-address={addr}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
        addr,
    };
    wait_until("Prometheus ready", Duration::from_secs(60), || {
        std::net::TcpStream::connect(&server.addr).is_ok()
            && http_get(&server.addr, "/-/ready", None).0 == 200
    });
    let url = format!("http://{}", server.addr);
    let no_config = dir.join("none.yaml");
    let args = |format: &'static str| {
        [
            "--prometheus".to_owned(),
            url.clone(),
            "--since".into(),
            since.to_string(),
            "--until".into(),
            until.to_string(),
            "--format".into(),
            format.into(),
            "-c".into(),
            no_config.display().to_string(),
        ]
    };
    let run = |format: &'static str| {
        let args = args(format);
        let (code, stdout, stderr) = report(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, Some(0), "{stderr}");
        stdout
    };
    let md = run("markdown");
    assert!(
        md.contains(
            "- – chat: no objective (no slo: set) in 2 locations. Availability 100%.\n\
             \x20 - TTFT P95 up 18% on last week (412 ms → 486 ms)\n\
             \x20 - total P95 down 10% on last week (1.60 s → 1.44 s)\n\n"
        ),
        "{md}"
    );
    let html = run("html");
    assert!(
        html.contains(
            "<ul class=moved data-probe=\"chat\"><li class=up data-figure=ttft>TTFT P95 up 18% on last week \
             (412 ms → 486 ms)</li><li class=down data-figure=total>total P95 down 10% on last week \
             (1.60 s → 1.44 s)</li></ul>"
        ),
        "{html}"
    );
    let json: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    let changes = json["p95_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{json:#}");
    for (c, (figure, before, now, change)) in changes
        .iter()
        .zip([("ttft", 0.412, 0.48616, 0.18), ("total", 1.6, 1.44, -0.1)])
    {
        assert_eq!(c["probe"], "chat", "{c:#}");
        assert_eq!(c["figure"], figure, "{c:#}");
        for (key, want) in [
            ("previous_seconds", before),
            ("current_seconds", now),
            ("change", change),
        ] {
            assert!((c[key].as_f64().unwrap() - want).abs() < 1e-9, "{key}: {c:#}");
        }
    }
    // Neither location's own TTFT P95 moved by 18 %: the line is the pooled one's.
    for location in ["eu-west", "us-east"] {
        let r = row(&json, "chat", location);
        let own = r["ttft_seconds"]["p95"].as_f64().unwrap()
            / r["previous"]["ttft_seconds"]["p95"].as_f64().unwrap()
            - 1.0;
        assert!((own - 0.18).abs() > 0.02, "{location}: {own}");
    }
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}
