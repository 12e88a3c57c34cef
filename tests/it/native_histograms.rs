//! Native histograms for scrapers that negotiate Prometheus's protobuf format: the real
//! agent (`inferprobe run`) against the simulator, scraped by the real Prometheus (Debian's
//! 2.42) started with `--enable-feature=native-histograms`, which stores TTFT as one native
//! series whose `histogram_quantile` agrees with the simulator's TTFT, and on which the
//! shipped recording rules, the dashboard's TTFT and total queries and `report
//! --prometheus` still have values. Direct scrapes check
//! that the protobuf answer has exactly the text's series (labels, detail, nothing secret)
//! and that the port's web config guards it like the text.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::*;
use base64::Engine as _;
use inferprobe::simulate::Script;
use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::{MetricFamily, MetricType};

/// What Prometheus 2.42 sends with `--enable-feature=native-histograms`.
const PROMETHEUS_NATIVE_ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// A secret in a probe's URL: it must reach no exposition.
const SECRET: &str = "sekrit-native-7f3a";

/// A GET of `/metrics` with `headers` (each ending in CRLF); (status, head, body bytes).
fn scrape(addr: &str, headers: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // HTTP/1.0: the body is the rest of the stream, never chunked.
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head, raw[split + 4..].to_vec())
}

fn decode(mut body: &[u8]) -> Vec<MetricFamily> {
    let mut families = Vec::new();
    while !body.is_empty() {
        families.push(prost::Message::decode_length_delimited(&mut body).expect("delimited MetricFamily"));
    }
    families
}

/// A series' identity: its name and its sorted labels.
type Series = (String, Vec<(String, String)>);

fn le(bound: f64) -> String {
    if bound == f64::INFINITY {
        "+Inf".to_owned()
    } else {
        format!("{bound}")
    }
}

/// The series the text format would show for these families (histograms as their
/// classic `_bucket`, `_sum` and `_count`).
fn protobuf_series(families: &[MetricFamily]) -> BTreeSet<Series> {
    let mut series = BTreeSet::new();
    for family in families {
        for metric in &family.metric {
            let labels: Vec<(String, String)> = metric
                .label
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect();
            let mut add = |suffix: &str, extra: Option<(String, String)>| {
                let mut labels = labels.clone();
                labels.extend(extra);
                labels.sort();
                series.insert((format!("{}{suffix}", family.name), labels));
            };
            if family.r#type == MetricType::Histogram as i32 {
                let h = metric.histogram.as_ref().expect("a histogram's metric has one");
                for b in &h.bucket {
                    add("_bucket", Some(("le".to_owned(), le(b.upper_bound))));
                }
                add("_sum", None);
                add("_count", None);
            } else {
                add("", None);
            }
        }
    }
    series
}

/// The series of a text exposition (0.0.4), parsed as Prometheus would.
fn text_series(text: &str) -> BTreeSet<Series> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (name, rest) = line.split_at(line.find(['{', ' ']).unwrap());
            let mut labels = Vec::new();
            if let Some(body) = rest.strip_prefix('{') {
                let body = &body[..body.rfind('}').unwrap()];
                // Our label values never hold `",` (closed sets and config names).
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").unwrap();
                    let v = v.trim_end_matches('"');
                    let v = if k == "le" && v != "+Inf" {
                        le(v.parse().unwrap())
                    } else {
                        v.to_owned()
                    };
                    labels.push((k.to_owned(), v));
                }
            }
            labels.sort();
            (name.to_owned(), labels)
        })
        .collect()
}

fn probes_file(dir: &std::path::Path, sim: std::net::SocketAddr) -> std::path::PathBuf {
    let probes = dir.join("probes.yaml");
    std::fs::write(
        &probes,
        format!(
            "agent: {{location: native-test}}\ndefaults: {{interval: 1s}}\nprobes:\n  - name: chat\n    kind: openai_chat\n    url: http://{sim}/v1/chat/completions?ttft=300ms&tokens=4&api_key={SECRET}\n    model: sim-model\n    labels: {{team: ml}}\n  - name: chat-full\n    kind: openai_chat\n    url: http://{sim}/v1/chat/completions?ttft=20ms&tokens=4\n    model: sim-model\n    metrics: {{detail: full}}\n  - name: health\n    kind: http\n    url: http://{sim}/health\n"
        ),
    )
    .unwrap();
    probes
}

#[tokio::test(flavor = "multi_thread")]
async fn a_protobuf_scrape_has_the_text_series_and_native_ttft_and_total() {
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("native-series");
    let mut agent = Daemon::start(&probes_file(&dir, sim.addr), &[]);
    for probe in ["chat", "chat-full", "health"] {
        agent.wait_for_log(&format!("\"probe\":\"{probe}\""), Duration::from_secs(15));
    }
    // Every probe has succeeded once, so no series appears between the two scrapes.
    wait_until("a success of each probe", Duration::from_secs(15), || {
        let text = agent.metrics();
        ["chat", "chat-full", "health"].iter().all(|p| {
            metric_sum(
                &text,
                "inferprobe_runs_total",
                &[&format!("probe=\"{p}\""), "result=\"success\""],
            ) >= 1.0
        })
    });

    let (status, head, body) = scrape(&agent.addr, &format!("Accept: {PROMETHEUS_NATIVE_ACCEPT}\r\n"));
    let (_, _, text) = scrape(&agent.addr, "Accept: text/plain;version=0.0.4\r\n");
    let text = String::from_utf8(text).unwrap();
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase().contains(
            "content-type: application/vnd.google.protobuf; proto=io.prometheus.client.metricfamily; encoding=delimited"
        ),
        "{head}"
    );
    let families = decode(&body);

    // The same series, labels and detail as the text: chat-full's TTFB is there, chat's
    // is not, and nothing is added or lost.
    let (from_protobuf, from_text) = (protobuf_series(&families), text_series(&text));
    let only_protobuf: Vec<_> = from_protobuf.difference(&from_text).collect();
    let only_text: Vec<_> = from_text.difference(&from_protobuf).collect();
    assert!(
        only_protobuf.is_empty() && only_text.is_empty(),
        "only in protobuf: {only_protobuf:?}\nonly in text: {only_text:?}"
    );
    assert!(
        text.contains("inferprobe_ttfb_seconds_count{probe=\"chat-full\""),
        "{text}"
    );
    assert!(
        !text.contains("inferprobe_ttfb_seconds_count{probe=\"chat\""),
        "{text}"
    );
    // The text keeps its classic buckets only (no native fields to carry).
    assert_eq!(
        text.matches("inferprobe_ttft_seconds_bucket{probe=\"chat\"")
            .count(),
        inferprobe::metrics::SLO_BUCKETS.len() + 1
    );
    assert!(!String::from_utf8_lossy(&body).contains(SECRET));
    assert!(!text.contains(SECRET));

    // TTFT and total: native (schema, populated buckets) beside the classic buckets, for
    // every probe that has them; no other histogram is native.
    for family in families
        .iter()
        .filter(|f| f.r#type == MetricType::Histogram as i32)
    {
        let native =
            ["inferprobe_ttft_seconds", "inferprobe_e2e_latency_seconds"].contains(&family.name.as_str());
        for metric in &family.metric {
            let h = metric.histogram.as_ref().unwrap();
            let has_native = !h.positive_span.is_empty() || h.zero_threshold > 0.0;
            assert_eq!(has_native, native, "{}", family.name);
            if native {
                assert_eq!(h.schema, i32::from(inferprobe::metrics::SLO_NATIVE_SCHEMA));
                let populated: i64 = h
                    .positive_delta
                    .iter()
                    .scan(0, |c, d| {
                        *c += d;
                        Some(*c)
                    })
                    .sum();
                assert_eq!(populated as u64 + h.zero_count, h.sample_count, "{}", family.name);
            }
        }
    }
    assert!(
        families
            .iter()
            .any(|f| f.name == "inferprobe_ttft_seconds" && f.metric.len() >= 2)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_port_s_basic_auth_guards_the_protobuf_scrape_too() {
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("native-auth");
    let hash = bcrypt::hash("scrape pass", 4).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let mut agent = Daemon::start(
        &probes_file(&dir, sim.addr),
        &["--web.config.file", web.to_str().unwrap()],
    );
    agent.wait_for_log("\"probe\":\"chat\"", Duration::from_secs(15));
    let accept = format!("Accept: {PROMETHEUS_NATIVE_ACCEPT}\r\n");
    let (status, head, body) = scrape(&agent.addr, &accept);
    assert_eq!(status, 401, "{head}");
    assert!(!head.contains("protobuf"), "{head}");
    assert!(
        !body.windows(11).any(|w| w == b"inferprobe_"),
        "a refused scrape got series"
    );
    let credentials = base64::engine::general_purpose::STANDARD.encode("prometheus:scrape pass");
    let (status, head, body) = scrape(
        &agent.addr,
        &format!("{accept}Authorization: Basic {credentials}\r\n"),
    );
    assert_eq!(status, 200, "{head}");
    assert!(decode(&body).iter().any(|f| f.name == "inferprobe_up"));
    std::fs::remove_dir_all(&dir).ok();
}

/// An instant query's first sample, if any.
fn query(prometheus: &str, q: &str) -> Option<f64> {
    query_all(prometheus, q).ok()?.first().map(|(_, v)| *v)
}

/// An instant query's float samples: (labels, value) each; Err with Prometheus's answer
/// when it refuses the query.
fn query_all(prometheus: &str, q: &str) -> Result<Vec<(serde_json::Value, f64)>, String> {
    let encoded: String = q
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, _, body) = http_get(prometheus, &format!("/api/v1/query?query={encoded}"), None);
    if status != 200 {
        return Err(format!("HTTP {status}: {body}"));
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    Ok(v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let value = s["value"][1].as_str()?.parse().ok()?;
            Some((s["metric"].clone(), value))
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_with_native_histograms_takes_ttft_as_one_native_series() {
    let Some(bin) = prometheus_bin() else { return };
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("native-prom");
    let mut agent = Daemon::start(&probes_file(&dir, sim.addr), &[]);
    agent.wait_for_log("\"probe\":\"chat\"", Duration::from_secs(15));
    let prometheus = native_prometheus(&bin, &dir, &agent.addr, &[]);
    let p = prometheus.addr.as_str();

    let count = "histogram_count(inferprobe_ttft_seconds{probe=\"chat\"})";
    wait_until(
        "five TTFT observations in Prometheus",
        Duration::from_secs(40),
        || query(p, count).is_some_and(|n| n >= 5.0),
    );
    let median = query(
        p,
        "histogram_quantile(0.5, inferprobe_ttft_seconds{probe=\"chat\"})",
    )
    .expect("a median over the native series");
    let mean = query(
        p,
        "histogram_sum(inferprobe_ttft_seconds{probe=\"chat\"}) / histogram_count(inferprobe_ttft_seconds{probe=\"chat\"})",
    )
    .expect("a mean");
    let n = query(p, count).unwrap();
    let classic = query(p, "count({__name__=\"inferprobe_ttft_seconds_bucket\"})");
    let stored = query(
        p,
        "count({probe=\"chat\", __name__=~\"inferprobe_(ttft|e2e_latency)_seconds.*\"})",
    );
    let agent_count = metric_sum(
        &agent.metrics(),
        "inferprobe_ttft_seconds_count",
        &["probe=\"chat\""],
    );
    drop(prometheus);
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("Prometheus: TTFT median {median} s, mean {mean} s over {n} runs");

    // The simulator answers after 300 ms, the probe adds a few ms on loopback.
    assert!((0.3..0.4).contains(&mean), "mean TTFT {mean}");
    // Native buckets are 9 % wide: the median lies within one of the mean. The classic
    // buckets (0.25, 0.5] would put it at 0.375 by interpolation, 20 % off.
    assert!(
        (median - mean).abs() <= 0.09 * mean,
        "median {median}, mean {mean}"
    );
    assert!(
        n >= 5.0 && n <= agent_count,
        "Prometheus counted {n}, the agent {agent_count}"
    );
    // One native series each: Prometheus stored no classic bucket, sum or count series.
    assert_eq!(classic, None, "classic _bucket series were stored");
    assert_eq!(stored, Some(2.0), "TTFT and total are not one series each");
}

fn prometheus_bin() -> Option<std::path::PathBuf> {
    require_tool(
        "prometheus",
        "scrapes native histograms; apt-get install prometheus",
    )
}

/// Prometheus with native histograms enabled, scraping `agent` and evaluating
/// `rule_files` every second.
fn native_prometheus(
    bin: &std::path::Path,
    dir: &std::path::Path,
    agent: &str,
    rule_files: &[std::path::PathBuf],
) -> Prometheus {
    let rules: String = rule_files
        .iter()
        .map(|f| format!("  - {}\n", f.display()))
        .collect();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files:\n{rules}scrape_configs:\n  - job_name: inferprobe\n    static_configs:\n      - targets: [\"{agent}\"]\n"
        ),
    )
    .unwrap();
    Prometheus::start(bin, &config, &["--enable-feature=native-histograms"])
}

fn deploy(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(rel)
}

/// The shipped recording rules and dashboard read TTFT and total in either form: against
/// a Prometheus 2.42 with native histograms enabled (which stores them native only) the
/// recorded quantiles (the trend rules' too) and TTFT-over-target ratios have values, and
/// so has every dashboard query over the two histograms.
#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_rules_and_dashboard_read_native_ttft_and_total() {
    let Some(bin) = prometheus_bin() else { return };
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("native-rules");
    let probes = dir.join("probes.yaml");
    let url = format!("http://{}/v1/chat/completions", sim.addr);
    // chat is under the 2 s TTFT target, slow above it; vision (at full detail) fills the
    // dashboard's TTFT by prompt and image size panels.
    std::fs::write(
        &probes,
        format!(
            "agent: {{location: native-rules}}\ndefaults: {{interval: 1s}}\nprobes:\n\
             \x20 - name: chat\n    kind: openai_chat\n    url: {url}?ttft=300ms&tokens=4\n    model: sim-model\n    slo: {{ttft_p95: 1s}}\n\
             \x20 - name: slow\n    kind: openai_chat\n    url: {url}?ttft=2200ms&tokens=2\n    model: sim-model\n    interval: 4s\n    timeout: 4s\n    first_token_timeout: 3s\n    slo: {{ttft_p95: 2s}}\n\
             \x20 - name: vision\n    kind: openai_chat\n    url: {url}?ttft=20ms&tokens=2\n    model: sim-vlm\n    metrics: {{detail: full}}\n    images:\n      builtin: [scene-224.jpg]\n"
        ),
    )
    .unwrap();
    let agent = Daemon::start(&probes, &[]);
    let rule_files = ["inferprobe-recording.yml", "inferprobe-alerts.yml"]
        .map(|file| deploy(&format!("prometheus/rules/{file}")));
    let prometheus = native_prometheus(&bin, &dir, &agent.addr, &rule_files);
    let p = prometheus.addr.as_str();

    // Until every probe has a few runs in Prometheus and the rules have seen them.
    let runs = |probe: &str| {
        query(
            p,
            &format!("histogram_count(inferprobe_ttft_seconds{{probe=\"{probe}\"}})"),
        )
        .unwrap_or(0.0)
    };
    let recorded = |q: &str| query_all(p, q).unwrap_or_default();
    // The per-location rule is the one that reads the histograms; the quorum ratio needs
    // two locations, and this Prometheus sees one.
    let ratio =
        |probe: &str| format!("probe_location:inferprobe_ttft_over_target:ratio_rate5m{{probe=\"{probe}\"}}");
    wait_until(
        "three runs of each probe and the recording rules' results",
        Duration::from_secs(60),
        || {
            ["chat", "slow", "vision"].iter().all(|probe| runs(probe) >= 3.0)
                && recorded(&ratio("slow")).iter().any(|(_, v)| v.is_finite())
                && recorded(&ratio("chat")).iter().any(|(_, v)| v.is_finite())
        },
    );
    // Prometheus stored the native form only: the classic side of every rule is empty.
    assert_eq!(
        query(
            p,
            "count({__name__=~\"inferprobe_(ttft|e2e_latency)_seconds_(bucket|count|sum)\"})"
        ),
        None,
        "classic series were stored"
    );

    // The trend rules' hourly quantiles and their daily level, for TTFT and total, P95
    // and P99 (their group runs once a minute: wait for its first evaluation).
    let trend = |name: &str| format!("probe_location:inferprobe_latency_seconds:{name}{{probe=\"chat\"}}");
    wait_until(
        "the trend rules' first evaluation",
        Duration::from_secs(90),
        || recorded(&trend("quantile_rate1h_median1d")).len() == 4,
    );
    for name in ["quantile_rate1h", "quantile_rate1h_median1d"] {
        let samples = recorded(&trend(name));
        assert_eq!(samples.len(), 4, "{name}: {samples:?}");
        for (labels, v) in samples {
            assert!((0.28..1.0).contains(&v), "{name} {labels} = {v}");
        }
    }

    let mut problems = Vec::new();
    let mut value_of = |q: &str| -> Option<f64> {
        match query_all(p, q) {
            Ok(samples) if samples.iter().all(|(_, v)| v.is_finite()) && !samples.is_empty() => {
                Some(samples[0].1)
            }
            other => {
                problems.push(format!("{q}: {other:?}"));
                None
            }
        }
    };
    // Every quantile the rules record, for chat: TTFT about 300 ms, total a bit more.
    for metric in ["ttft", "e2e_latency"] {
        for q in ["p50", "p95", "p99"] {
            let rule = format!(
                "probe_location:inferprobe_{metric}_seconds:{q}_rate10m{{probe=\"chat\", location=\"native-rules\"}}"
            );
            if let Some(v) = value_of(&rule) {
                assert!((0.28..1.0).contains(&v), "{rule} = {v}");
            }
        }
    }
    // TTFT over the 2 s target: never for chat, always for slow.
    let (chat, slow) = (value_of(&ratio("chat")), value_of(&ratio("slow")));
    assert!(chat.is_some_and(|r| r.abs() < 1e-9), "chat over target: {chat:?}");
    assert!(
        slow.is_some_and(|r| (r - 1.0).abs() < 1e-9),
        "slow over target: {slow:?}"
    );

    // The dashboard's queries over TTFT and total, with every probe and location.
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana/inferprobe.json")).unwrap()).unwrap();
    let mut exprs = Vec::new();
    let mut stack = vec![&dash["panels"]];
    while let Some(panels) = stack.pop() {
        for panel in panels.as_array().into_iter().flatten() {
            stack.push(&panel["panels"]);
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or_default();
                if expr.contains("inferprobe_ttft_seconds") || expr.contains("inferprobe_e2e_latency_seconds")
                {
                    exprs.push(expr.replace("$probe", ".*").replace("$location", ".*"));
                }
            }
        }
    }
    assert!(exprs.len() >= 5, "{exprs:?}");
    for expr in &exprs {
        assert!(!expr.contains('$'), "a Grafana variable left in {expr}");
        value_of(expr);
    }

    // `report --prometheus` reads the native histograms too: percentiles, and attainment
    // of each probe's TTFT target (chat's 1 s always met, slow's 2 s never).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args([
            "report",
            "--prometheus",
            &format!("http://{p}"),
            "--since",
            "2m",
            "--format",
            "json",
            "-c",
        ])
        .arg(&probes)
        .output()
        .unwrap();
    drop(prometheus);
    drop(agent);
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        problems.is_empty(),
        "no value over native histograms:\n{}",
        problems.join("\n")
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |probe: &str| {
        report["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["probe"] == probe)
            .unwrap_or_else(|| panic!("no row for {probe}: {report:#}"))
            .clone()
    };
    let (chat, slow) = (row("chat"), row("slow"));
    for field in ["ttft_seconds", "total_seconds"] {
        for q in ["p50", "p95", "p99"] {
            let v = chat[field][q].as_f64();
            assert!(
                v.is_some_and(|v| (0.28..1.0).contains(&v)),
                "chat {field} {q}: {chat:#}"
            );
        }
    }
    let p95 = slow["ttft_seconds"]["p95"].as_f64();
    assert!(p95.is_some_and(|v| (2.0..3.0).contains(&v)), "{slow:#}");
    let attained = chat["ttft_slo_attainment"].as_f64();
    assert!(attained.is_some_and(|a| a > 0.99), "{chat:#}");
    assert_eq!(slow["ttft_slo_attainment"].as_f64(), Some(0.0), "{slow:#}");
}
