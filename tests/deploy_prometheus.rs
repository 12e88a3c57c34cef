//! deploy/prometheus and deploy/grafana: the scrape config and the rules pass promtool,
//! every rule has its `promtool test rules` tests passing, and the Grafana dashboard
//! uses only series and labels the real agent exports.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use inferprobe::simulate::Script;
use support::*;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn yml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    files
}

fn promtool(args: &[&str], files: &[PathBuf], cwd: &Path) {
    let Some(promtool) = require_tool("promtool", "checks deploy/prometheus; apt-get install prometheus")
    else {
        return;
    };
    let out = Command::new(promtool)
        .args(args)
        .args(files)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_scrape_config_and_its_rule_files_pass_promtool() {
    promtool(
        &["check", "config"],
        &[repo("deploy/prometheus/prometheus.yml")],
        &repo("deploy/prometheus"),
    );
}

#[test]
fn every_rule_file_passes_promtool_check_rules() {
    let rules = yml_files("deploy/prometheus/rules");
    assert!(rules.len() >= 2, "{rules:?}");
    promtool(&["check", "rules"], &rules, &repo("deploy/prometheus"));
}

#[test]
fn every_rule_has_passing_unit_tests() {
    let tests = yml_files("deploy/prometheus/tests");
    promtool(&["test", "rules"], &tests, &repo("deploy/prometheus"));
    // Every alert and recording rule is named in some test file.
    let all_tests: String = tests
        .iter()
        .map(|t| std::fs::read_to_string(t).unwrap())
        .collect();
    for rules in yml_files("deploy/prometheus/rules") {
        let text = std::fs::read_to_string(&rules).unwrap();
        for line in text.lines() {
            let line = line.trim();
            let name = line
                .strip_prefix("- alert: ")
                .or_else(|| line.strip_prefix("- record: "));
            if let Some(name) = name {
                assert!(
                    all_tests.contains(name.trim()),
                    "{name} (in {}) has no test",
                    rules.display()
                );
            }
        }
    }
}

/// Metric names and label names an expression uses.
fn references(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let metric = regex::Regex::new(r"\binferprobe_[a-z0-9_]+").unwrap();
    let grouping = regex::Regex::new(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)").unwrap();
    let matcher = regex::Regex::new(r#"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*""#).unwrap();
    let label_values = regex::Regex::new(r"label_values\([^,]*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)").unwrap();
    let metrics = metric.find_iter(expr).map(|m| m.as_str().to_owned()).collect();
    let mut labels = BTreeSet::new();
    for c in grouping.captures_iter(expr) {
        labels.extend(
            c[1].split(',')
                .map(|l| l.trim().to_owned())
                .filter(|l| !l.is_empty()),
        );
    }
    for c in matcher.captures_iter(expr) {
        labels.insert(c[1].to_owned());
    }
    for c in label_values.captures_iter(expr) {
        labels.insert(c[1].to_owned());
    }
    (metrics, labels)
}

/// Every PromQL string of the dashboard: panel targets and variable queries.
fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"]["query"].as_str() {
            exprs.push(q.to_owned());
        }
    }
    exprs
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_uses_only_series_and_labels_the_agent_exports() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo("deploy/grafana/inferprobe.json")).unwrap())
            .unwrap();
    let exprs = dashboard_exprs(&dashboard);
    assert!(exprs.len() >= 20, "{} queries", exprs.len());

    // An agent with every kind of series: streaming text and images, a failing probe
    // that pages a (fake) receiver.
    let sim = simulator(Script::default()).await;
    let hook = FakeReceiver::start(200);
    let dir = temp_dir("dashboard");
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        format!(
            "agent: {{location: dash-test}}\nreceivers:\n  - {{name: hook, kind: webhook, url: \"http://{hook}/hook\"}}\n\
             defaults: {{interval: 1s, timeout: 900ms}}\nprobes:\n\
             \x20 - {{name: chat, kind: openai_chat, url: \"http://localhost:{port}/v1/chat/completions?ttft=5ms&tokens=4\", model: m}}\n\
             \x20 - name: vision\n    kind: openai_chat\n    url: \"http://{sim}/v1/chat/completions?ttft=5ms&tokens=4\"\n    model: m\n    images: {{builtin: [scene-224.jpg]}}\n\
             \x20 - {{name: down, kind: http, url: \"http://127.0.0.1:{closed}/\", alert: {{failure_threshold: 1}}}}\n",
            hook = hook.addr,
            port = sim.addr.port(),
            sim = sim.addr,
            closed = closed_port(),
        ),
    )
    .unwrap();
    let agent = Daemon::start(&path, &[]);
    let mut scrape = String::new();
    wait_until("every kind of series", Duration::from_secs(30), || {
        scrape = agent.metrics();
        [
            "inferprobe_notifications_total",
            "inferprobe_tpot_seconds_bucket",
            "image_bucket=\"small\"",
            "phase=\"dns\"",
        ]
        .iter()
        .all(|s| scrape.contains(s))
    });
    let samples: Vec<&str> = scrape.lines().filter(|l| !l.starts_with('#')).collect();
    let samples_of = |metric: &str| -> Vec<&str> {
        samples
            .iter()
            .copied()
            .filter(|l| {
                l.strip_prefix(metric)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .collect()
    };

    let mut checked = 0;
    for expr in &exprs {
        let (metrics, labels) = references(expr);
        assert!(!metrics.is_empty(), "a query on none of our series: {expr}");
        for m in &metrics {
            assert!(!samples_of(m).is_empty(), "{m} is not exported (in: {expr})");
        }
        for label in &labels {
            let carried = metrics
                .iter()
                .any(|m| samples_of(m).iter().any(|s| s.contains(&format!("{label}=\""))));
            assert!(
                carried,
                "no series of {metrics:?} has the label {label} (in: {expr})"
            );
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} label uses checked");
}

#[test]
fn the_reference_check_sees_what_it_must() {
    let (metrics, labels) = references(
        r#"histogram_quantile(0.95, sum by (le, probe) (rate(inferprobe_ttft_seconds_bucket{location=~"$location",image_bucket!=""}[5m]))) / on (probe) inferprobe_up"#,
    );
    assert_eq!(
        metrics.into_iter().collect::<Vec<_>>(),
        ["inferprobe_ttft_seconds_bucket", "inferprobe_up"]
    );
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        ["image_bucket", "le", "location", "probe"]
    );
    let (_, labels) = references("label_values(inferprobe_up{location=~\"$location\"}, probe)");
    assert!(labels.contains("probe") && labels.contains("location"));
}
