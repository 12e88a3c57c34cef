//! The real binary against the simulator: `run` as a daemon (metrics, API, reload,
//! drain), `once` as a smoke gate, and `demo`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use inferprobe::simulate::Script;

fn temp_config(name: &str, text: &str) -> PathBuf {
    let path = temp_dir(name).join("probes.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn config_for(addr: std::net::SocketAddr, extra_probe: &str) -> String {
    format!(
        r#"
agent:
  location: test-region
defaults:
  interval: 1s
  timeout: 900ms
probes:
  - name: chat
    kind: openai_chat
    url: http://{addr}/v1/chat/completions?ttft=20ms&token_gap=2ms&tokens=6
    model: sim-model
    headers:
      Authorization: "Bearer sk-daemon-secret-marker"
    labels:
      team: ml
  - name: broken
    kind: openai_chat
    url: http://{addr}/v1/chat/completions?fault=http-500
    model: sim-model
{extra_probe}"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_serves_metrics_that_promtool_accepts_and_an_api_without_secrets() {
    let sim = simulator(Script::default()).await;
    let path = temp_config("metrics", &config_for(sim.addr, ""));
    let mut d = Daemon::start(&path, &[]);
    d.wait_for_log("\"probe\":\"chat\"", Duration::from_secs(10));
    d.wait_for_log("\"probe\":\"broken\"", Duration::from_secs(10));

    let text = d.metrics();
    assert!(
        metric_sum(
            &text,
            "inferprobe_runs_total",
            &["probe=\"chat\"", "result=\"success\""]
        ) >= 1.0,
        "{text}"
    );
    assert!(
        metric_sum(
            &text,
            "inferprobe_runs_total",
            &["probe=\"broken\"", "reason=\"http_5xx\""]
        ) >= 1.0
    );
    assert_eq!(metric_sum(&text, "inferprobe_up", &["probe=\"broken\""]), 0.0);
    assert!(
        metric_sum(
            &text,
            "inferprobe_ttft_seconds_count",
            &["probe=\"chat\"", "location=\"test-region\"", "team=\"ml\""]
        ) >= 1.0
    );
    // A failed run stays out of the latency histograms.
    assert_eq!(
        metric_sum(&text, "inferprobe_ttft_seconds_count", &["probe=\"broken\""]),
        0.0
    );
    assert!(!text.contains("sk-daemon-secret-marker"));
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("inferprobe_"), "{line}");
    }

    // OpenMetrics when asked for it.
    let (_, head, om) = http_get(
        &d.addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0"),
    );
    assert!(head.to_lowercase().contains("application/openmetrics-text"));
    assert!(om.trim_end().ends_with("# EOF"));

    // Over HTTP/1.1 the text goes out in chunks, as it is encoded, and the message ends
    // properly: the same connection answers the next request.
    let (head, streamed, next) = metrics_then_healthz_over_http11(&d.addr);
    assert!(
        head.to_lowercase().contains("transfer-encoding: chunked"),
        "{head}"
    );
    assert!(!head.to_lowercase().contains("content-length"), "{head}");
    assert!(streamed.trim_end().ends_with("# EOF"), "{streamed}");
    assert!(streamed.contains("inferprobe_up{"), "{streamed}");
    assert!(
        next.starts_with("HTTP/1.1 200") && next.ends_with("ok\n"),
        "{next}"
    );

    if let Some(promtool) = require_tool("promtool", "lints /metrics; apt-get install prometheus") {
        let mut child = Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let (status, _, body) = http_get(&d.addr, "/api/v1/probes", None);
    assert_eq!(status, 200);
    assert!(!body.contains("sk-daemon-secret-marker"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["location"], "test-region");
    let chat = v["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == "chat")
        .unwrap();
    assert_eq!(chat["last_run"]["success"], true);
    assert!(chat["last_run"]["ttft_seconds"].as_f64().unwrap() >= 0.02);
    let broken = v["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == "broken")
        .unwrap();
    assert_eq!(broken["last_run"]["reason"], "http_5xx");

    assert_eq!(http_get(&d.addr, "/healthz", None).0, 200);
    assert_eq!(http_get(&d.addr, "/readyz", None).0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_with_a_broken_file_keeps_the_running_config_and_a_good_one_applies() {
    let sim = simulator(Script::default()).await;
    let path = temp_config("reload", &config_for(sim.addr, ""));
    let mut d = Daemon::start(&path, &[]);
    d.wait_for_log("\"probe\":\"chat\"", Duration::from_secs(10));

    std::fs::write(&path, "probes:\n  - name: x\n    kind: nope\n").unwrap();
    d.signal("HUP");
    let line = d.wait_for_log(
        "Reload failed; keeping the running configuration.",
        Duration::from_secs(10),
    );
    // The unknown kind and the missing `url`: every problem of the file in one pass.
    assert!(line.contains("\"problems\":2"), "{line}");
    assert_eq!(
        metric_sum(&d.metrics(), "inferprobe_config_last_reload_successful", &[]),
        0.0
    );
    // Still probing with the old config.
    d.wait_for_log("\"probe\":\"chat\"", Duration::from_secs(5));

    let added =
        "  - name: added\n    kind: http\n    url: http://".to_owned() + &sim.addr.to_string() + "/health\n";
    std::fs::write(&path, config_for(sim.addr, &added)).unwrap();
    d.signal("HUP");
    let line = d.wait_for_log("Configuration reloaded.", Duration::from_secs(10));
    assert!(
        line.contains("\"added\":1") && line.contains("\"unchanged\":2"),
        "{line}"
    );
    d.wait_for_log("\"probe\":\"added\"", Duration::from_secs(10));
    let text = d.metrics();
    assert_eq!(
        metric_sum(&text, "inferprobe_config_last_reload_successful", &[]),
        1.0
    );
    assert_eq!(metric_sum(&text, "inferprobe_probes", &[]), 3.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_waits_for_the_run_in_flight_and_exits_0() {
    let sim = simulator(Script::default()).await;
    let text = format!(
        "agent: {{location: t}}\nprobes:\n  - name: slow\n    kind: openai_chat\n    url: http://{}/v1/chat/completions?ttft=1500ms&tokens=2\n    model: m\n    interval: 2s\n    timeout: 1900ms\n",
        sim.addr
    );
    let path = temp_config("drain", &text);
    let mut d = Daemon::start(&path, &[]);
    // Runs start every 2 s and take 1.5 s: 0.8 s after one finishes, the next one is
    // 0.3 s into its wait for the first token.
    d.wait_for_log("Probe run finished.", Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(800)).await;
    d.signal("TERM");
    d.wait_for_log("Shutting down", Duration::from_secs(5));
    let finished = d.wait_for_log("Probe run finished.", Duration::from_secs(5));
    assert!(finished.contains("\"probe\":\"slow\""));
    d.wait_for_log("All runs finished; bye.", Duration::from_secs(5));
    let status = d.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn once_prints_json_lines_and_fails_when_a_probe_fails() {
    let sim = simulator(Script::default()).await;
    let path = temp_config("once", &config_for(sim.addr, ""));
    let bin = env!("CARGO_BIN_EXE_inferprobe");

    let out = Command::new(bin)
        .args(["once", "--format", "json", "--probe", "chat", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    for key in [
        "probe",
        "location",
        "success",
        "reason",
        "http_status",
        "ttfb_seconds",
        "ttft_seconds",
        "total_seconds",
        "output_tokens",
    ] {
        assert!(line.get(key).is_some(), "missing {key} in {line}");
    }
    assert_eq!(line["probe"], "chat");
    assert_eq!(line["location"], "test-region");
    assert_eq!(line["output_tokens"], 6);

    let all = Command::new(bin)
        .args(["once", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(all.status.code(), Some(1));
    let table = String::from_utf8_lossy(&all.stdout);
    assert!(table.starts_with("PROBE"), "{table}");
    assert!(
        table.contains("broken: http_5xx: HTTP 500: simulated internal error"),
        "{table}"
    );

    let unknown = Command::new(bin)
        .args(["once", "--probe", "nope", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(64));
}

#[tokio::test(flavor = "multi_thread")]
async fn once_with_a_missing_env_var_is_a_config_error() {
    let text = "probes:\n  - name: k\n    kind: openai_chat\n    url: http://127.0.0.1:1/v1/chat/completions\n    model: m\n    headers:\n      Authorization: \"Bearer ${INFERPROBE_TEST_MISSING_VAR}\"\n";
    let path = temp_config("env", text);
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["once", "-c"])
        .arg(&path)
        .env_remove("INFERPROBE_TEST_MISSING_VAR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":7:22: probe \"k\": probes[0].headers.Authorization: environment variable INFERPROBE_TEST_MISSING_VAR is not set"), "{err}");
}

#[test]
fn the_demo_shows_live_results_without_any_model_server() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["--log-format", "json", "demo", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let metrics_line = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.trim_start().starts_with("metrics:"))
        .expect("demo prints its metrics URL");
    let report_line = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.trim_start().starts_with("SLO report:"))
        .expect("demo prints its report command");
    let addr = metrics_line
        .split("http://")
        .nth(1)
        .unwrap()
        .trim_end_matches("/metrics")
        .to_owned();
    // Every demo probe of the simulator runs within its 10 s interval; the small server's
    // take turns and hold off 10 s before each of its cold probe's runs (every 30 s, the
    // first 10 s after the start at the earliest), so they may miss a tick or two.
    let reported = |small: bool| {
        let (_, _, body) = http_get(&addr, "/api/v1/probes", None);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["probe"].as_str().unwrap().starts_with("small-") == small)
            .filter(|p| !p["last_run"].is_null())
            .count()
    };
    for (small, count, within) in [(false, 10, 25), (true, 4, 45)] {
        let deadline = std::time::Instant::now() + Duration::from_secs(within);
        while reported(small) < count && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(250));
        }
        assert_eq!(
            reported(small),
            count,
            "not every demo probe (small server: {small}) reported within {within} s"
        );
    }
    // The always-failing probe's down alert fires after its second run (10 s apart).
    let mut alerts = serde_json::Value::Null;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        alerts = serde_json::from_str(&http_get(&addr, "/api/v1/alerts", None).2).unwrap();
        if alerts["alerts"].as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // The printed report command, run as printed, knows the demo's latency targets.
    let args: Vec<&str> = report_line.split_whitespace().skip(3).collect();
    let report = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(&args)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let report_text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{report_line}: {report_text}");
    assert!(
        !report_text.contains("No probe has a latency target"),
        "{report_line}:\n{report_text}"
    );
    let _ = child.kill();
    let _ = child.wait();
    let first = &alerts["alerts"][0];
    assert_eq!(
        (
            first["probe"].as_str(),
            first["alertname"].as_str(),
            first["state"].as_str()
        ),
        (Some("chat-down"), Some("InferenceEndpointDown"), Some("firing")),
        "{alerts}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn once_succeeds_for_every_kind_with_images_against_the_simulator() {
    let sim = simulator(Script::default()).await;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/every-kind.yaml"
    ))
    .unwrap()
    .replace("SIMULATOR", &sim.addr.to_string());
    let path = temp_config("every-kind", &text);
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["once", "--format", "json", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 11);
    for l in &lines {
        assert_eq!(l["success"], true, "{l}");
        let streaming =
            !["kserve-pixels", "kserve-bytes", "upload", "health"].contains(&l["probe"].as_str().unwrap());
        assert_eq!(l["ttft_seconds"].is_f64(), streaming, "{l}");
    }
    let bucket = |name: &str| lines.iter().find(|l| l["probe"] == name).unwrap()["image_bucket"].clone();
    assert_eq!(bucket("chat-vision"), "medium");
    assert_eq!(bucket("kserve-pixels"), "small");
    assert_eq!(bucket("completions"), "none");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_removed_while_its_run_is_in_flight_leaves_no_series_behind() {
    let sim = simulator(Script::default()).await;
    let both = format!(
        "agent: {{location: t}}\ndefaults: {{interval: 2s, timeout: 1900ms}}\nprobes:\n  - name: slow\n    kind: openai_chat\n    url: http://{0}/v1/chat/completions?ttft=1200ms&tokens=2\n    model: m\n  - name: fast\n    kind: http\n    url: http://{0}/health\n",
        sim.addr
    );
    let path = temp_config("remove-in-flight", &both);
    let mut d = Daemon::start(&path, &[]);
    d.wait_for_log("\"probe\":\"slow\"", Duration::from_secs(10));
    // The next slow run starts 2 s after the last one began, i.e. about 0.8 s from now;
    // remove the probe while it is in flight.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let only_fast = both.split("  - name: slow").next().unwrap().to_owned()
        + &both
            .split("  - name: fast")
            .nth(1)
            .map(|rest| format!("  - name: fast{rest}"))
            .unwrap();
    std::fs::write(&path, only_fast).unwrap();
    d.signal("HUP");
    d.wait_for_log("Configuration reloaded.", Duration::from_secs(5));
    // Let the run in flight finish and be reported.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let text = d.metrics();
    assert_eq!(metric_sum(&text, "inferprobe_up", &["probe=\"slow\""]), 0.0);
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("inferprobe_up{probe=\"slow\"")),
        "{text}"
    );
    let (_, _, api) = http_get(&d.addr, "/api/v1/probes", None);
    assert!(!api.contains("\"slow\""), "{api}");
}

/// The help text of every option of `inferprobe <cmd> --help`, as clap prints it
/// (on the option's line, or on the next line in the wide layout).
fn option_helps(cmd: &str) -> Vec<(String, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args([cmd, "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut helps = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !(line.starts_with("  -") || line.starts_with("      --")) {
            continue;
        }
        let t = line.trim_start();
        let (flag, rest) = match t.find("  ") {
            Some(at) => (&t[..at], t[at..].trim()),
            None => (t, lines.get(i + 1).map_or("", |l| l.trim())),
        };
        helps.push((flag.to_owned(), rest.to_owned()));
    }
    helps
}

#[test]
fn every_option_of_every_subcommand_says_what_it_does() {
    for cmd in ["run", "test-alert", "check", "once", "simulate", "report", "demo"] {
        let helps = option_helps(cmd);
        assert!(helps.len() > 3, "{cmd}: {helps:?}");
        for (flag, help) in helps {
            assert!(
                !help.is_empty() && !help.starts_with('['),
                "`inferprobe {cmd} --help`: {flag} has no help text ({help:?})"
            );
        }
    }
    // simulate's help is laid out as the others' and speaks of every kind.
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["simulate", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("OpenAI-compatible"), "{text}");
    assert!(text.contains("every kind"), "{text}");
    assert!(!text.contains("see a summary with '-h'"), "long layout:\n{text}");
    assert!(text.contains("  http-500  "), "faults listed:\n{text}");
}

#[test]
fn log_colour_only_on_a_terminal_and_never_with_no_color() {
    let Some(script) = require_tool("script", "gives the agent a terminal (util-linux)") else {
        return;
    };
    let logs = |no_color: Option<&str>| {
        let cmd = format!(
            "timeout -s INT 2 {} simulate --listen 127.0.0.1:0",
            env!("CARGO_BIN_EXE_inferprobe")
        );
        let mut c = Command::new(&script);
        c.args(["-qec", &cmd, "/dev/null"]).env_remove("NO_COLOR");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    let terminal = logs(None);
    assert!(terminal.contains("Simulator started"), "{terminal}");
    assert!(
        terminal.contains("\u{1b}["),
        "a terminal gets colour: {terminal:?}"
    );
    let no_color = logs(Some("1"));
    assert!(no_color.contains("Simulator started"), "{no_color}");
    assert!(!no_color.contains("\u{1b}["), "NO_COLOR: {no_color:?}");
    // Not a terminal: plain text.
    let piped = Command::new("timeout")
        .args([
            "-s",
            "INT",
            "2",
            env!("CARGO_BIN_EXE_inferprobe"),
            "simulate",
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(stderr.contains("Simulator started"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// `GET /metrics` (OpenMetrics) then `GET /healthz` on one kept-alive HTTP/1.1 connection:
/// the first answer's head and de-chunked body, and the second answer whole.
fn metrics_then_healthz_over_http11(addr: &str) -> (String, String, String) {
    use std::io::{BufRead, BufReader, Read};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).unwrap();
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).unwrap();
        assert_eq!(&chunk[size..], b"\r\n");
        if size == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..size]);
    }
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut next = String::new();
    reader.read_to_string(&mut next).unwrap();
    (head, String::from_utf8(body).unwrap(), next)
}
