//! Several regions: the location every agent must have, sharding, remote_write into the
//! real Prometheus 2.42, and the shipped Prometheus rules paging only when several
//! locations agree — two real agents and real Prometheus servers, end to end.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::*;

#[test]
fn run_refuses_to_start_without_a_location() {
    let dir = temp_dir("no-location");
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        "probes:\n  - name: x\n    kind: http\n    url: http://127.0.0.1:9/\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["run", "--listen", "127.0.0.1:0", "-c"])
        .arg(&path)
        .env_remove("INFERPROBE_LOCATION")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no location: set --location, INFERPROBE_LOCATION or agent.location"),
        "{stderr}"
    );
    // A bad one is refused too.
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["run", "--listen", "127.0.0.1:0", "--location", "eu west", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn the_flag_beats_the_environment_which_beats_the_file() {
    let dir = temp_dir("precedence");
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        "agent: {location: from-file}\nprobes:\n  - name: x\n    kind: http\n    url: http://127.0.0.1:9/\n    interval: 1s\n",
    )
    .unwrap();
    let location = |flag: Option<&str>, env: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_inferprobe"));
        cmd.args([
            "--log-format",
            "json",
            "run",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(temp_dir("precedence-data"))
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(f) = flag {
            cmd.args(["--location", f]);
        }
        match env {
            Some(e) => cmd.env("INFERPROBE_LOCATION", e),
            None => cmd.env_remove("INFERPROBE_LOCATION"),
        };
        let mut child = cmd.spawn().unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let line = std::io::BufRead::lines(stderr)
            .map_while(Result::ok)
            .find(|l| l.contains("Agent started."))
            .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        serde_json::from_str::<serde_json::Value>(&line).unwrap()["location"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(location(Some("from-flag"), Some("from-env")), "from-flag");
    assert_eq!(location(None, Some("from-env")), "from-env");
    assert_eq!(location(None, None), "from-file");
}

#[test]
fn shards_split_the_probes_between_agents_without_overlap() {
    let dir = temp_dir("shards");
    let path = dir.join("probes.yaml");
    let mut text = String::from("agent: {location: eu-test}\nprobes:\n");
    for i in 0..12 {
        text.push_str(&format!(
            "  - name: probe-{i}\n    kind: http\n    url: http://127.0.0.1:{}/\n    interval: 30s\n",
            closed_port()
        ));
    }
    std::fs::write(&path, text).unwrap();
    let mut owned = Vec::new();
    for shard in ["0/3", "1/3", "2/3"] {
        let d = Daemon::start(&path, &["--shard", shard]);
        let v: serde_json::Value =
            serde_json::from_str(&http_get(&d.addr, "/api/v1/probes", None).2).unwrap();
        let names: BTreeSet<String> = v["probes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["probe"].as_str().unwrap().to_owned())
            .collect();
        let m = d.metrics();
        assert_eq!(
            metric_sum(&m, "inferprobe_probes", &["location=\"eu-test\""]),
            names.len() as f64,
            "{m}"
        );
        owned.push(names);
    }
    let all: BTreeSet<String> = owned.iter().flatten().cloned().collect();
    assert_eq!(all.len(), 12, "every probe runs somewhere: {owned:?}");
    assert_eq!(
        owned.iter().map(BTreeSet::len).sum::<usize>(),
        12,
        "and only once: {owned:?}"
    );
    assert!(owned.iter().all(|s| !s.is_empty()), "{owned:?}");
    // A shard that does not exist is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["run", "--shard", "3/3", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not below the count"));
}

/// A real Prometheus server on 127.0.0.1, stopped on drop.
impl Prometheus {
    /// An instant query's result vector.
    fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let (status, _, body) = http_get(&self.addr, &path, None);
        assert_eq!(status, 200, "{promql}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Alerts in the given state (`firing` or `pending`) by name.
    fn alerts(&self, state: &str) -> Vec<serde_json::Value> {
        let (_, _, body) = http_get(&self.addr, "/api/v1/alerts", None);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a["state"] == state)
            .collect()
    }

    fn firing(&self, alertname: &str) -> Vec<serde_json::Value> {
        self.alerts("firing")
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == alertname)
            .collect()
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// One agent's config: the same probe name in every region, each region reaching the
/// endpoint through its own (switchable) path.
fn agent_config(
    dir: &Path,
    location: &str,
    endpoint: std::net::SocketAddr,
    push_to: Option<&str>,
) -> PathBuf {
    let push = push_to
        .map(|addr| format!("  remote_write:\n    url: http://{addr}/api/v1/write\n    interval: 1s\n"))
        .unwrap_or_default();
    let path = dir.join(format!("probes-{location}.yaml"));
    std::fs::write(
        &path,
        format!(
            "agent:\n  location: {location}\n{push}probes:\n  - name: chat-api\n    kind: http\n    url: http://{endpoint}/health\n    interval: 1s\n    timeout: 900ms\n"
        ),
    )
    .unwrap();
    path
}

/// Two agents in two locations, a Prometheus scraping both with the shipped rules (their
/// `for:` durations shortened so the test takes seconds, not minutes), and a second
/// Prometheus receiving one agent's remote_write.
#[test]
fn prometheus_pages_only_when_two_locations_agree() {
    let Some(prometheus) = require_tool(
        "prometheus",
        "scrapes the agents and runs the rules; apt-get install prometheus",
    ) else {
        return;
    };
    let dir = temp_dir("regions");

    // The remote_write receiver.
    let receiver_config = dir.join("receiver.yml");
    std::fs::write(&receiver_config, "global: {}\n").unwrap();
    let receiver = Prometheus::start(
        &prometheus,
        &receiver_config,
        &["--web.enable-remote-write-receiver"],
    );

    let (eu_ok, us_ok) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(true)));
    let eu = Daemon::start(
        &agent_config(&dir, "eu-test", switch_server(eu_ok.clone()), None),
        &[],
    );
    let us = Daemon::start(
        &agent_config(
            &dir,
            "us-test",
            switch_server(us_ok.clone()),
            Some(&receiver.addr),
        ),
        &[],
    );

    // The shipped rules, with every `for:` shortened.
    let rules_dir = dir.join("rules");
    std::fs::create_dir_all(&rules_dir).unwrap();
    for entry in std::fs::read_dir(repo("deploy/prometheus/rules")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let shortened: String = text
            .lines()
            .map(|l| match l.trim_start().strip_prefix("for: ") {
                Some(_) => format!("{}for: 3s", &l[..l.len() - l.trim_start().len()]),
                None => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(rules_dir.join(path.file_name().unwrap()), shortened).unwrap();
    }
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [\"{}/*.yml\"]\nscrape_configs:\n  - job_name: inferprobe\n    static_configs:\n      - targets: [\"{}\", \"{}\"]\n",
            rules_dir.display(),
            eu.addr,
            us.addr
        ),
    )
    .unwrap();
    let central = Prometheus::start(&prometheus, &config, &[]);

    // Series from both locations arrive by scrape, and the pushing agent's by remote_write.
    wait_until("both locations scraped", Duration::from_secs(30), || {
        central
            .query("count by (location) (inferprobe_up{probe=\"chat-api\"})")
            .len()
            == 2
    });
    wait_until("the pushed series", Duration::from_secs(30), || {
        !receiver
            .query("inferprobe_up{location=\"us-test\",job=\"inferprobe\"}")
            .is_empty()
    });
    let pushed = receiver.query("inferprobe_runs_total{location=\"us-test\"}");
    assert!(!pushed.is_empty());
    assert!(
        receiver.query("inferprobe_up{location=\"eu-test\"}").is_empty(),
        "only one agent pushes"
    );
    let m = us.metrics();
    assert!(
        metric_sum(
            &m,
            "inferprobe_remote_write_requests_total",
            &["result=\"success\""]
        ) >= 1.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "inferprobe_remote_write_samples_total", &["dropped"]),
        0.0
    );

    // One location fails: a warning for that location, no page.
    eu_ok.store(false, Ordering::SeqCst);
    wait_until("the one-location warning", Duration::from_secs(40), || {
        !central.firing("InferenceEndpointDownInOneLocation").is_empty()
    });
    let warning = &central.firing("InferenceEndpointDownInOneLocation")[0];
    assert_eq!(warning["labels"]["location"], "eu-test");
    assert_eq!(warning["labels"]["severity"], "warning");
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        central.firing("InferenceEndpointDownQuorum").is_empty(),
        "one location alone must not page"
    );

    // Both fail: the quorum pages.
    us_ok.store(false, Ordering::SeqCst);
    wait_until("the quorum page", Duration::from_secs(40), || {
        !central.firing("InferenceEndpointDownQuorum").is_empty()
    });
    let page = &central.firing("InferenceEndpointDownQuorum")[0];
    assert_eq!(page["labels"]["probe"], "chat-api");
    assert_eq!(page["labels"]["severity"], "critical");
    eprintln!(
        "quorum page: {}; one-location warnings while both failed: {}",
        page["annotations"]["summary"],
        central.firing("InferenceEndpointDownInOneLocation").len()
    );

    // Both recover: the page ends.
    eu_ok.store(true, Ordering::SeqCst);
    us_ok.store(true, Ordering::SeqCst);
    wait_until("the page resolved", Duration::from_secs(40), || {
        central.firing("InferenceEndpointDownQuorum").is_empty()
    });
}

/// Decodes a remote_write body: snappy block format, then protobuf.
fn decode_push(body: &[u8]) -> inferprobe::push::WriteRequest {
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .expect("snappy block format");
    prost::Message::decode(raw.as_slice()).expect("a WriteRequest")
}

#[test]
fn remote_write_sends_the_protocol_retries_5xx_in_order_and_drops_on_4xx_or_a_full_queue() {
    let receiver = FakeReceiver::start(503);
    let dir = temp_dir("push");
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        format!(
            "agent:\n  location: eu-test\n  remote_write:\n    url: http://{}/api/v1/write\n    interval: 1s\n    max_backoff: 1s\n    queue_snapshots: 3\n    basic_auth: {{username: agent, password: s3cret-pw}}\n    headers: {{X-Scope-OrgID: team-a}}\nprobes:\n  - name: x\n    kind: http\n    url: http://127.0.0.1:{}/\n    interval: 1s\n",
            receiver.addr,
            closed_port()
        ),
    )
    .unwrap();
    let agent = Daemon::start(&path, &[]);
    // The receiver is down: snapshots queue up to the bound, then the oldest go.
    wait_until("the queue to overflow", Duration::from_secs(20), || {
        metric_sum(
            &agent.metrics(),
            "inferprobe_remote_write_samples_total",
            &["dropped_queue_full"],
        ) > 0.0
    });
    let m = agent.metrics();
    assert!(
        metric_sum(
            &m,
            "inferprobe_remote_write_requests_total",
            &["result=\"retry\""]
        ) >= 2.0,
        "{m}"
    );

    // Back: the queue drains, oldest first.
    receiver.set_status(204);
    wait_until("pushes accepted", Duration::from_secs(10), || {
        receiver.accepted_count() >= 4
    });
    let calls = receiver.calls.lock().unwrap().clone();
    let accepted: Vec<&Received> = calls.iter().filter(|(_, s)| *s == 204).map(|(r, _)| r).collect();
    let first = accepted[0];
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/api/v1/write");
    assert_eq!(first.header("content-encoding"), Some("snappy"));
    assert_eq!(first.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(first.header("x-prometheus-remote-write-version"), Some("0.1.0"));
    assert_eq!(first.header("x-scope-orgid"), Some("team-a"));
    assert_eq!(first.header("authorization"), Some("Basic YWdlbnQ6czNjcmV0LXB3"));
    let stamps: Vec<i64> = accepted
        .iter()
        .map(|r| decode_push(&r.body).timeseries[0].samples[0].timestamp)
        .collect();
    assert!(
        stamps.windows(2).all(|w| w[0] <= w[1]),
        "in time order: {stamps:?}"
    );
    let request = decode_push(&first.body);
    let up = request
        .timeseries
        .iter()
        .find(|t| {
            t.labels
                .iter()
                .any(|l| l.name == "__name__" && l.value == "inferprobe_up")
        })
        .expect("inferprobe_up is pushed");
    let labels: Vec<(&str, &str)> = up
        .labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    assert!(
        labels.contains(&("location", "eu-test")) && labels.contains(&("job", "inferprobe")),
        "{labels:?}"
    );
    let names: Vec<&str> = up.labels.iter().map(|l| l.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "labels sorted by name");

    // A 4xx is the receiver refusing the data: dropped, not retried.
    receiver.set_status(400);
    wait_until("a rejected push", Duration::from_secs(10), || {
        metric_sum(
            &agent.metrics(),
            "inferprobe_remote_write_samples_total",
            &["dropped_rejected"],
        ) > 0.0
    });
    let m = agent.metrics();
    assert!(
        metric_sum(
            &m,
            "inferprobe_remote_write_requests_total",
            &["result=\"rejected\""]
        ) >= 1.0
    );
    assert!(!m.contains("s3cret-pw") && !agent.all_logs.lock().unwrap().join("\n").contains("s3cret-pw"));
}
