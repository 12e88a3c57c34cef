//! `inferprobe report` against a store filled with synthetic runs whose figures this test
//! computes on its own: run counts, availability, P50/P95/P99 of TTFT and total, SLO
//! attainment, the previous period and the longest incidents must all agree.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use inferprobe::config::HistoryConfig;
use inferprobe::store::{AlertStore, HistoryWriter, RunRecord};

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One synthetic run: latencies from a skewed distribution, failures in streaks.
fn synthetic(
    probe: &str,
    location: &str,
    at: SystemTime,
    ok: Option<&str>,
    rng: &mut Rng,
    slow: f64,
) -> RunRecord {
    let ttft = Duration::from_secs_f64(slow * (0.1 + 0.4 * rng.next().powi(3)));
    let total = ttft + Duration::from_secs_f64(slow * (0.5 + 1.5 * rng.next().powi(4)));
    RunRecord {
        at,
        probe: probe.into(),
        location: location.into(),
        reason: ok.map(str::to_owned),
        message: ok.map(|r| format!("synthetic {r}")),
        status: Some(if ok.is_none() { 200 } else { 503 }),
        ttfb: Some(ttft / 2),
        ttft: ok.is_none().then_some(ttft),
        tpot: None,
        total: Some(if ok.is_none() {
            total
        } else {
            Duration::from_millis(40)
        }),
        output_tokens: Some(20),
        output_token_source: Some("usage"),
        input_tokens: Some(100),
        // The vision probe's server reports no input count: ours, estimated.
        input_token_source: Some(if probe == "vision" { "estimated" } else { "usage" }),
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

/// A run's failure: `http_5xx` in an outage, else `timeout_total` at random at `rate`.
fn failure_at(in_outage: bool, rate: f64, rng: &mut Rng) -> Option<&'static str> {
    if in_outage {
        Some("http_5xx")
    } else if rng.next() < rate {
        Some("timeout_total")
    } else {
        None
    }
}

/// Nearest rank, written out here rather than taken from the crate: the k-th smallest
/// value with k = ceil(q n).
fn nearest_rank(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let k = (q * v.len() as f64).ceil() as usize;
    v[k.max(1) - 1]
}

#[derive(Default)]
struct Expected {
    runs: u64,
    input_tokens: u64,
    output_tokens: u64,
    failures: u64,
    ttft: Vec<f64>,
    total: Vec<f64>,
}

fn close(a: f64, b: f64) -> bool {
    // Stored at microsecond resolution.
    (a - b).abs() < 2e-6
}

#[test]
fn report_figures_match_an_independent_computation() {
    let dir = crate::support::temp_dir("report");
    let data = dir.join("data");
    let until = UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    let week = Duration::from_secs(7 * 86_400);
    let since = until - week;
    let step = Duration::from_secs(60);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // (current, previous) expectations per (probe, location).
    let mut expected: BTreeMap<(String, String), (Expected, Expected)> = BTreeMap::new();
    let mut longest_outage = (String::new(), Duration::ZERO);
    {
        let store = AlertStore::open(&data).unwrap();
        let writer = HistoryWriter::start(
            store.path(),
            HistoryConfig {
                retention: Duration::from_secs(400 * 86_400),
                max_disk_bytes: 1 << 30,
            },
        )
        .unwrap();
        for (probe, slow) in [("chat", 1.0), ("vision", 2.5)] {
            for location in ["eu-west", "us-east"] {
                let key = (probe.to_owned(), location.to_owned());
                let entry = expected.entry(key).or_default();
                // Two weeks, one run a minute; an outage of a given length per series
                // in the current week, and random failures in both.
                let outage_start = since + Duration::from_secs(86_400 + 3600 * (slow as u64));
                let outage_len = Duration::from_secs(if location == "eu-west" { 47 * 60 } else { 12 * 60 });
                let mut t = since - week;
                while t < until {
                    let in_outage = t >= outage_start && t < outage_start + outage_len;
                    let failure = failure_at(in_outage, 0.004, &mut rng);
                    let r = synthetic(probe, location, t, failure, &mut rng, slow);
                    let e = if t >= since { &mut entry.0 } else { &mut entry.1 };
                    e.runs += 1;
                    e.input_tokens += r.input_tokens.unwrap();
                    e.output_tokens += r.output_tokens.unwrap();
                    if failure.is_some() {
                        e.failures += 1;
                    } else {
                        e.ttft.push(r.ttft.unwrap().as_secs_f64());
                        e.total.push(r.total.unwrap().as_secs_f64());
                    }
                    while !writer.record(r.clone()) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    t += step;
                }
                if outage_len > longest_outage.1 {
                    longest_outage = (format!("{probe}/{location}"), outage_len);
                }
            }
        }
        writer.close();
    }
    // Targets for attainment and the availability objective.
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        "probes:\n\
         - {name: chat, kind: openai_chat, url: 'http://127.0.0.1:9/v1/chat/completions', model: m,\n\
            slo: {ttft_p95: 300ms, total_p95: 1500ms, availability: 99.5},\n\
            cost: {input_per_million: 0.15, output_per_million: 0.60}}\n\
         - {name: vision, kind: openai_chat, url: 'http://127.0.0.1:9/v1/chat/completions', model: m,\n\
            slo: {total_p95: 3s}, cost: {input_per_million: 2.5, output_per_million: 10, currency: EUR}}\n",
    )
    .unwrap();
    let report = |format: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
            .args(["report", "-c"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--since",
                "1899395200",
                "--until",
                "1900000000",
                "--format",
                format,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    let probes = json["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 4);
    for p in probes {
        let key = (
            p["probe"].as_str().unwrap().to_owned(),
            p["location"].as_str().unwrap().to_owned(),
        );
        let (now, before) = &expected[&key];
        assert_eq!(p["runs"], now.runs, "{key:?}");
        assert_eq!(p["failures"], now.failures, "{key:?}");
        let availability = (now.runs - now.failures) as f64 / now.runs as f64;
        assert!(
            close(p["availability"].as_f64().unwrap(), availability),
            "{key:?}"
        );
        for (field, values) in [("ttft_seconds", &now.ttft), ("total_seconds", &now.total)] {
            for (name, q) in [("p50", 0.50), ("p95", 0.95), ("p99", 0.99)] {
                let got = p[field][name].as_f64().unwrap();
                let want = nearest_rank(values, q);
                assert!(
                    close(got, want),
                    "{key:?} {field}.{name}: report {got}, test {want}"
                );
            }
        }
        assert_eq!(p["previous"]["runs"], before.runs);
        // Tokens and their cost at the probe's prices, computed here from what was
        // written.
        let (price_in, price_out, currency) = if key.0 == "chat" {
            (0.15, 0.60, "USD")
        } else {
            (2.5, 10.0, "EUR")
        };
        assert_eq!(p["tokens"]["input"], now.input_tokens, "{key:?}");
        assert_eq!(p["tokens"]["output"], now.output_tokens, "{key:?}");
        let estimated = if key.0 == "vision" { now.input_tokens } else { 0 };
        assert_eq!(p["tokens"]["input_estimated"], estimated, "{key:?}");
        let cost =
            |e: &Expected| (e.input_tokens as f64 * price_in + e.output_tokens as f64 * price_out) / 1e6;
        assert!(close(p["cost"]["amount"].as_f64().unwrap(), cost(now)), "{key:?}");
        assert_eq!(p["cost"]["currency"], currency);
        assert!(
            close(p["previous"]["cost"].as_f64().unwrap(), cost(before)),
            "{key:?}"
        );
        let prev_p95 = nearest_rank(&before.total, 0.95);
        assert!(close(
            p["previous"]["total_seconds"]["p95"].as_f64().unwrap(),
            prev_p95
        ));
        // Attainment: share of all runs that succeeded at or under the target.
        let share = |values: &[f64], target: f64| {
            values.iter().filter(|v| **v <= target + 1e-9).count() as f64 / now.runs as f64
        };
        let (ttft_target, total_target) = if key.0 == "chat" {
            (Some(0.3), 1.5)
        } else {
            (None, 3.0)
        };
        let got = p["total_slo_attainment"].as_f64().unwrap();
        assert!((got - share(&now.total, total_target)).abs() < 1e-9, "{key:?}");
        match ttft_target {
            Some(t) => {
                let got = p["ttft_slo_attainment"].as_f64().unwrap();
                assert!((got - share(&now.ttft, t)).abs() < 1e-9, "{key:?}");
            }
            None => assert!(p["ttft_slo_attainment"].is_null()),
        }
        if key.0 == "chat" {
            assert_eq!(p["availability_met"], availability >= 0.995);
        }
    }
    // The longest incident is the 47-minute outage (a failing streak from its first
    // failed run to the first good one after it).
    let top = &json["incidents"][0];
    let longest = top["duration_seconds"].as_f64().unwrap();
    assert_eq!(
        format!(
            "{}/{}",
            top["probe"].as_str().unwrap(),
            top["location"].as_str().unwrap()
        ),
        longest_outage.0
    );
    assert!(
        (longest - longest_outage.1.as_secs_f64()).abs() <= 60.0 * 3.0,
        "longest incident {longest} s, outage {:?} (random failures may extend it by a run or two)",
        longest_outage.1
    );
    assert_eq!(top["reasons"][0]["reason"], "http_5xx");
    assert!(json["incidents"].as_array().unwrap().len() <= 10);

    let md = report("markdown");
    for section in [
        "## Availability",
        "## Time to first token",
        "## Total latency",
        "## SLO attainment",
        "## Tokens and cost",
        "## Top incidents",
    ] {
        assert!(md.contains(section), "{section} missing:\n{md}");
    }
    // The cost line of each series, from the figures computed above.
    for ((probe, location), (now, before)) in &expected {
        let (price_in, price_out, currency) = if probe == "chat" {
            (0.15, 0.60, "USD")
        } else {
            (2.5, 10.0, "EUR")
        };
        let cost =
            |e: &Expected| (e.input_tokens as f64 * price_in + e.output_tokens as f64 * price_out) / 1e6;
        let money = |v: f64| {
            if v >= 1.0 {
                format!("{v:.2} {currency}")
            } else {
                format!("{v:.4} {currency}")
            }
        };
        let input = if probe == "vision" {
            format!("\\~{} ({} estimated)", now.input_tokens, now.input_tokens)
        } else {
            now.input_tokens.to_string()
        };
        let line = format!(
            "| {probe} | {} | {input} | {} | {} | {} |",
            location.replace('_', "\\_"),
            now.output_tokens,
            money(cost(now)),
            money(cost(before)),
        );
        assert!(md.contains(&line), "{line} missing:\n{md}");
    }
    let html = report("html");
    assert!(html.starts_with("<!doctype html>") && html.contains("<table>"));
    print_sample(&md, &dir);
}

/// The Markdown report, for people reading the test output.
fn print_sample(md: &str, dir: &Path) {
    eprintln!("{md}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn report_explains_a_missing_store_and_bad_periods() {
    let dir = crate::support::temp_dir("report-errors");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_inferprobe"))
            .current_dir(&dir)
            .arg("report")
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--data-dir", "nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no store at"));
    let out = run(&["--since", "last tuesday"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--since"));
    let out = run(&["--since", "1h", "--until", "2h"]);
    assert_eq!(out.status.code(), Some(64));
    let out = run(&["--timezone", "Asia/Shangai"]);
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--timezone: `Asia/Shangai` is not an IANA time zone name"),
        "{stderr}"
    );
}

/// In the DOM of the HTML report, once Chromium has laid it out: each verdict line with
/// its class, words and computed colours; each chart with its points per period; the
/// met column's cells; the coverage note.
const REPORT_FACTS: &str = r#"(() => {
  const style = (e) => e ? getComputedStyle(e) : null;
  return {
    verdicts: [...document.querySelectorAll('p.verdict')].map(p => ({
      probe: p.dataset.probe, class: p.className, text: p.innerText,
      background: style(p).backgroundColor, mark: style(p.querySelector('.mark')).color,
    })),
    charts: [...document.querySelectorAll('svg.chart')].map(s => ({
      probe: s.closest('section.trend').dataset.probe, chart: s.dataset.chart,
      current: s.querySelectorAll('circle.current').length,
      previous: s.querySelectorAll('circle.previous').length,
      misses: s.querySelectorAll('circle.miss').length,
      lines: s.querySelectorAll('path.current, path.previous').length,
      width: s.getBoundingClientRect().width, height: s.getBoundingClientRect().height,
    })),
    met: [...document.querySelectorAll('td.met, td.not_met')].map(td => ({
      class: td.className, text: td.innerText, color: style(td).color, background: style(td).backgroundColor,
    })),
    coverage: document.querySelector('.coverage') ? document.querySelector('.coverage').innerText : null,
  };
})()"#;

/// The HTML report of a store with twelve days of history (two probes in two locations,
/// one meeting its SLO and one missing it), in Asia/Shanghai time, rendered in headless
/// Chromium: the verdicts lead, worded and coloured; each probe's three charts have
/// points for both periods; the previous period's short history is said. The
/// screenshot is kept as target/artifacts/report-html.png.
#[test]
fn the_html_report_renders_in_chromium_with_verdicts_charts_and_colours() {
    if crate::support::require_tool("chromium", "renders the HTML report in a real browser").is_none() {
        return;
    }
    let dir = crate::support::temp_dir("report-browser");
    let data = dir.join("data");
    let now = SystemTime::now();
    let until = UNIX_EPOCH + Duration::from_secs(now.duration_since(UNIX_EPOCH).unwrap().as_secs());
    let week = Duration::from_secs(7 * 86_400);
    let since = until - week;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    {
        let store = AlertStore::open(&data).unwrap();
        let writer = HistoryWriter::start(store.path(), HistoryConfig::default()).unwrap();
        for (probe, slow) in [("chat", 1.0), ("vision", 2.5)] {
            for location in ["cn-east", "eu-west"] {
                // vision in cn-east is down for three hours on the period's third day.
                let outage = since + Duration::from_secs(2 * 86_400 + 5 * 3600);
                let mut t = until - Duration::from_secs(12 * 86_400);
                while t < until {
                    let down = probe == "vision"
                        && location == "cn-east"
                        && t >= outage
                        && t < outage + Duration::from_secs(3 * 3600);
                    let failure = failure_at(down, 0.002, &mut rng);
                    // Last week a little slower than this one.
                    let pace = if t < since { slow * 1.15 } else { slow };
                    let r = synthetic(probe, location, t, failure, &mut rng, pace);
                    while !writer.record(r.clone()) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    t += Duration::from_secs(300);
                }
            }
        }
        writer.close();
    }
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        "agent:\n  timezone: Asia/Shanghai\n\
         probes:\n\
         - {name: chat, kind: openai_chat, url: 'http://127.0.0.1:9/v1/chat/completions', model: m,\n\
            slo: {ttft_p95: 800ms, total_p95: 3s, availability: 99.5}}\n\
         - {name: vision, kind: openai_chat, url: 'http://127.0.0.1:9/v1/chat/completions', model: m,\n\
            slo: {total_p95: 3s, availability: 99.5}}\n",
    )
    .unwrap();
    let report = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
            .args(["report", "-c"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .args(["--since", &unix(since), "--until", &unix(until)])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let html_file = dir.join("report.html");
    report(&["--format", "html", "-o", html_file.to_str().unwrap()]);
    // The flag wins over agent.timezone.
    let json: serde_json::Value =
        serde_json::from_str(&report(&["--format", "json", "--timezone", "UTC"])).unwrap();
    assert_eq!(json["time_zone"], "UTC");
    let verdict = |probe: &str| {
        json["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["probe"] == probe)
            .unwrap()
            .clone()
    };
    assert_eq!(verdict("chat")["verdict"], "met", "{json:#}");
    assert_eq!(verdict("vision")["verdict"], "not_met", "{json:#}");

    let page = crate::support::browser::render_with(
        &format!("file://{}", html_file.display()),
        1280,
        900,
        false,
        REPORT_FACTS,
    )
    .expect("chromium is there");
    let shot = page.save_png("report-html");
    eprintln!("the HTML report in Chromium: {}", shot.display());
    assert!(page.console_errors.is_empty(), "{:#?}", page.console_errors);
    let facts = &page.evaluated;
    let text = &page.text;
    // Times in Shanghai, named.
    assert!(text.contains("Asia/Shanghai (UTC+08:00)"), "{text}");
    // The verdicts come first, one per probe, in words and in colour.
    let verdicts = facts["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2, "{facts:#}");
    assert!(
        text.find("SLO NOT MET").unwrap() < text.find("Trends").unwrap(),
        "{text}"
    );
    for v in verdicts {
        let (class, words, background, mark) = if v["probe"] == "chat" {
            (
                "verdict met",
                "✓ SLO met",
                "rgb(218, 251, 225)",
                "rgb(17, 99, 41)",
            )
        } else {
            (
                "verdict not_met",
                "✗ SLO NOT MET",
                "rgb(255, 235, 233)",
                "rgb(164, 14, 38)",
            )
        };
        assert_eq!(v["class"], class, "{v:#}");
        assert!(v["text"].as_str().unwrap().starts_with(words), "{v:#}");
        assert!(v["text"].as_str().unwrap().contains("error budget left"), "{v:#}");
        assert_eq!(v["background"], background, "{v:#}");
        assert_eq!(v["mark"], mark, "{v:#}");
    }
    assert!(
        verdicts[1]["text"].as_str().unwrap().contains("availability")
            && verdicts[1]["text"].as_str().unwrap().contains("in cn-east"),
        "{:#}",
        verdicts[1]
    );
    // Three charts a probe, drawn at a readable size, with this period's seven days and
    // the previous period's five (its history began five days before it ended).
    let charts = facts["charts"].as_array().unwrap();
    assert_eq!(charts.len(), 6, "{facts:#}");
    for c in charts {
        assert_eq!(c["current"], 7, "{c:#}");
        assert_eq!(c["previous"], 5, "{c:#}");
        assert_eq!(c["lines"], 2, "{c:#}");
        assert!(
            c["width"].as_f64().unwrap() >= 250.0 && c["height"].as_f64().unwrap() >= 100.0,
            "{c:#}"
        );
    }
    let outage = charts
        .iter()
        .find(|c| c["probe"] == "vision" && c["chart"] == "availability")
        .unwrap();
    assert!(
        outage["misses"].as_u64().unwrap() >= 1,
        "the outage's day misses the objective: {outage:#}"
    );
    // The met column: green and red cells, each with its word.
    let met = facts["met"].as_array().unwrap();
    assert!(
        met.iter()
            .any(|m| m["class"] == "met" && m["text"] == "yes" && m["color"] == "rgb(17, 99, 41)"),
        "{met:#?}"
    );
    assert!(
        met.iter()
            .any(|m| m["class"] == "not_met" && m["text"] == "NO" && m["color"] == "rgb(164, 14, 38)"),
        "{met:#?}"
    );
    let coverage = facts["coverage"].as_str().unwrap_or_default();
    assert!(
        coverage.contains("previous period's data covers only its last 5 d"),
        "{facts:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn unix(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs().to_string()
}

/// `report` runs where the agent's environment is not (a laptop, a CronJob): with
/// nothing set but PATH, a file whose agent, endpoints, headers and receivers all come
/// from `${VAR}` gives its report, with the targets and prices the file sets. `check`
/// and `run` still need every variable; so does `report` one that it reads itself.
#[test]
fn report_reads_only_what_it_needs_from_the_environment() {
    let dir = crate::support::temp_dir("report-env");
    let until = UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    {
        let store = AlertStore::open(&dir.join("data")).unwrap();
        let writer = HistoryWriter::start(store.path(), HistoryConfig::default()).unwrap();
        let mut rng = Rng(7);
        for i in 1..=60 {
            let at = until - Duration::from_secs(60 * i);
            let run = synthetic(
                "eu-chat",
                "eu-west",
                at,
                (i % 10 == 0).then_some("http_5xx"),
                &mut rng,
                1.0,
            );
            while !writer.record(run.clone()) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        writer.close();
    }
    let config = dir.join("probes.yaml");
    let file = r#"agent:
  listen: ${LISTEN}
  location: ${REGION}
  data_dir: ${DATA_DIR:-data}
  external_url: ${EXTERNAL_URL}
  remote_write: {url: "${REMOTE_WRITE_URL}", bearer_token: "${REMOTE_WRITE_TOKEN}"}
receivers:
  - {name: chat, kind: slack, url: "${SLACK_WEBHOOK_URL}"}
  - {name: pager, kind: pagerduty, routing_key: "${PAGERDUTY_ROUTING_KEY}"}
defaults:
  headers: {X-Api-Key: "${GATEWAY_KEY}"}
  slo: {availability: 99.5}
probes:
  - name: eu-chat
    kind: openai_chat
    url: ${EU_ENDPOINT}/v1/chat/completions
    model: ${MODEL}
    headers: {Authorization: "Bearer ${OPENAI_API_KEY}"}
    slo: {ttft_p95: 300ms}
    cost: {input_per_million: 0.15, output_per_million: 0.6}
    alert: {receivers: [chat, pager]}
"#;
    std::fs::write(&config, file).unwrap();
    let bin = env!("CARGO_BIN_EXE_inferprobe");
    let bare = |args: &[&str]| {
        Command::new(bin)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args(args)
            .arg("-c")
            .arg(&config)
            .output()
            .unwrap()
    };
    let out = bare(&[
        "report",
        "--since",
        "1899990000",
        "--until",
        "1900000000",
        "--format",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status.code());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let chat = &json["probes"][0];
    assert_eq!(chat["probe"], "eu-chat", "{json}");
    assert_eq!(chat["runs"], 60, "{json}");
    assert_eq!(chat["failures"], 6, "{json}");
    // The file's targets and prices, over `defaults:`: the file was read.
    assert_eq!(chat["objectives"]["availability"], 0.995, "{json}");
    assert_eq!(chat["objectives"]["ttft_seconds"], 0.3, "{json}");
    assert_eq!(chat["cost"]["input_per_million"], 0.15, "{json}");

    // `check` (and so `run`) still needs all of them, each named where it is used.
    let out = bare(&["check"]);
    assert_eq!(out.status.code(), Some(64));
    let said = String::from_utf8_lossy(&out.stdout);
    for (line, variable) in [
        (2, "LISTEN"),
        (3, "REGION"),
        (5, "EXTERNAL_URL"),
        (8, "SLACK_WEBHOOK_URL"),
        (11, "GATEWAY_KEY"),
        (16, "EU_ENDPOINT"),
        (18, "OPENAI_API_KEY"),
    ] {
        let want = format!(":{line}:");
        assert!(
            said.lines()
                .any(|l| l.contains(&want)
                    && l.ends_with(&format!("environment variable {variable} is not set"))),
            "check does not name {variable} at line {line}:\n{said}"
        );
    }

    // A variable the report reads is as needed as ever: positioned, exit 64.
    std::fs::write(
        &config,
        file.replace("slo: {ttft_p95: 300ms}", "slo: {ttft_p95: \"${TTFT_TARGET}\"}"),
    )
    .unwrap();
    let out = bare(&["report", "--since", "1899990000", "--until", "1900000000"]);
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        format!(
            "{}:19:21: probe \"eu-chat\": probes[0].slo.ttft_p95: environment variable TTFT_TARGET is not set",
            config.display()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A good run of `probe` in `location` at `at` with these latencies, in microseconds (the
/// store's resolution, so the report reads back exactly what was written).
fn timed_run(probe: &str, location: &str, at: SystemTime, ttft_us: Option<u64>, total_us: u64) -> RunRecord {
    RunRecord {
        at,
        probe: probe.into(),
        location: location.into(),
        reason: None,
        message: None,
        status: Some(200),
        ttfb: None,
        ttft: ttft_us.map(Duration::from_micros),
        tpot: None,
        total: Some(Duration::from_micros(total_us)),
        output_tokens: None,
        output_token_source: None,
        input_tokens: None,
        input_token_source: None,
        prompt_bucket: "short".into(),
        image_bucket: "none".into(),
        trace_id: None,
        idle: Some(Duration::from_secs(600)),
        waited: Some(Duration::ZERO),
        cold: false,
        warmup: None,
        burst_spread: None,
        burst_slowdown: None,
    }
}

/// Under each verdict, how the probe's P95s moved on last week across its locations. Two
/// weeks of a run every 10 minutes in two locations, constructed so that last week's
/// pooled TTFT P95 (nearest rank 1916 of 2016) is one us-east run of exactly 412 ms, and
/// this week's every TTFT is last week's × 1.18: 486.16 ms, 18 % up. Each location alone
/// has another P95 (eu-west's about 295 ms, us-east's about 601 ms), as has their mean,
/// so only the pooled figure gives these words. Total is TTFT and 800 ms last week, TTFT
/// and 740 ms this week: 1.212 s → 1.226 s, within the band of "unchanged". "embed" (no
/// TTFT) answered in 500 ms, now 450 ms; "fresh" has no last week: no line.
#[test]
fn each_verdict_says_how_the_probe_p95s_moved_on_last_week() {
    let dir = crate::support::temp_dir("report-p95-change");
    let data = dir.join("data");
    let until = UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    let week = Duration::from_secs(7 * 86_400);
    let since = until - week;
    let step = Duration::from_secs(600);
    let runs_a_week = week.as_secs() / step.as_secs();
    // Last week's TTFT of run `i` of the week, in µs.
    let last_week_ttft = |location: &str, i: u64| match location {
        "eu-west" => 200_000 + 99 * i,
        _ if i < 907 => 300_000 + 100 * i,
        _ if i == 907 => 412_000,
        _ => 600_000 + i,
    };
    let mut pooled: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    {
        let store = AlertStore::open(&data).unwrap();
        let writer = HistoryWriter::start(store.path(), HistoryConfig::default()).unwrap();
        let write = |r: RunRecord| {
            while !writer.record(r.clone()) {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        for location in ["eu-west", "us-east"] {
            for i in 0..runs_a_week {
                let before = since - week + step * i as u32;
                let ttft = last_week_ttft(location, i);
                write(timed_run("chat", location, before, Some(ttft), ttft + 800_000));
                let now_ttft = ttft * 118 / 100;
                write(timed_run(
                    "chat",
                    location,
                    before + week,
                    Some(now_ttft),
                    now_ttft + 740_000,
                ));
                pooled[1].push(ttft as f64 / 1e6);
                pooled[0].push(now_ttft as f64 / 1e6);
                write(timed_run("embed", location, before, None, 500_000));
                write(timed_run("embed", location, before + week, None, 450_000));
                write(timed_run(
                    "fresh",
                    location,
                    before + week,
                    Some(300_000),
                    900_000,
                ));
            }
        }
        writer.close();
    }
    // The construction itself, independently of the report.
    assert_eq!(nearest_rank(&pooled[1], 0.95), 0.412);
    assert_eq!(nearest_rank(&pooled[0], 0.95), 0.48616);

    let report = |format: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
            .current_dir(&dir)
            .args(["report", "--data-dir"])
            .arg(&data)
            .args([
                "--since",
                &unix(since),
                "--until",
                &unix(until),
                "--format",
                format,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let md = report("markdown");
    for (probe, lines) in [
        (
            "chat",
            "\n  - TTFT P95 up 18% on last week (412 ms → 486 ms)\n  - total P95 unchanged from last week (1.21 s → 1.23 s)\n- ",
        ),
        (
            "embed",
            "\n  - total P95 down 10% on last week (500 ms → 450 ms)\n- ",
        ),
        // The last verdict: the list ends right after it.
        ("fresh", "\n\n"),
    ] {
        let verdict = format!("- – {probe}: no objective (no slo: set) in 2 locations. Availability 100%.");
        assert!(md.contains(&format!("{verdict}{lines}")), "{probe}:\n{md}");
    }
    let html = report("html");
    assert!(
        html.contains(
            "<ul class=moved data-probe=\"chat\"><li class=up data-figure=ttft>TTFT P95 up 18% on last week \
             (412 ms → 486 ms)</li><li class=unchanged data-figure=total>total P95 unchanged from last week \
             (1.21 s → 1.23 s)</li></ul>"
        ),
        "{html}"
    );
    let json: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    let changes = json["p95_changes"].as_array().unwrap();
    let said: Vec<(&str, &str, &str)> = changes
        .iter()
        .map(|c| {
            (
                c["probe"].as_str().unwrap(),
                c["figure"].as_str().unwrap(),
                c["direction"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        said,
        [
            ("chat", "ttft", "up"),
            ("chat", "total", "unchanged"),
            ("embed", "total", "down")
        ],
        "{json:#}"
    );
    assert_eq!(changes[0]["previous_seconds"], 0.412);
    assert_eq!(changes[0]["current_seconds"], 0.48616);
    assert!(
        (changes[0]["change"].as_f64().unwrap() - 0.18).abs() < 1e-9,
        "{json:#}"
    );
    assert!(
        (changes[2]["change"].as_f64().unwrap() + 0.1).abs() < 1e-9,
        "{json:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
