//! The monitoring files in deploy/ against the real tools and the real agent: promtool
//! validates the scrape config and every rule file and runs the rules' unit tests; every
//! rule has unit tests and the labels and annotations Alertmanager routing relies on; the
//! latency trend warnings, and only they, take the shipped route's daily one; the
//! Grafana dashboard queries only series and labels the agent really exports (or
//! recording rules that exist).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use inferprobe::simulate::Script;
use serde_yaml::Value as Yaml;

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(rel)
}

/// The `*.yml` files of a deploy/ directory, sorted; at least one.
fn yml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy(dir))
        .unwrap_or_else(|e| panic!("deploy/{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .yml files in deploy/{dir}");
    files
}

fn yaml(path: &Path) -> Yaml {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn promtool() -> Option<PathBuf> {
    require_tool(
        "promtool",
        "validates deploy/prometheus; apt-get install prometheus",
    )
}

/// Runs promtool; panics with its whole output unless it exits 0.
fn run_promtool(promtool: &Path, args: &[&str], files: &[PathBuf]) {
    let out = Command::new(promtool).args(args).args(files).output().unwrap();
    assert!(
        out.status.success(),
        "promtool {} {:?} exited {}:\n{}\n{}",
        args.join(" "),
        files,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_prometheus_config_and_the_rule_files_it_loads_pass_promtool() {
    let Some(promtool) = promtool() else { return };
    // `check config` also checks every rule file the config references.
    run_promtool(
        &promtool,
        &["check", "config"],
        &[deploy("prometheus/prometheus.yml")],
    );

    // ... and the config references exactly the rule files there are, by relative path.
    let config = yaml(&deploy("prometheus/prometheus.yml"));
    let listed: BTreeSet<String> = config["rule_files"]
        .as_sequence()
        .expect("prometheus.yml has rule_files")
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect();
    let present: BTreeSet<String> = yml_files("prometheus/rules")
        .iter()
        .map(|p| format!("rules/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    assert_eq!(
        listed, present,
        "rule_files in prometheus.yml vs deploy/prometheus/rules"
    );
}

#[test]
fn every_rule_file_passes_promtool_check_rules_with_lints_fatal() {
    let Some(promtool) = promtool() else { return };
    for file in yml_files("prometheus/rules") {
        run_promtool(
            &promtool,
            &["check", "rules", "--lint=all", "--lint-fatal"],
            &[file],
        );
    }
}

#[test]
fn every_rule_unit_test_file_passes_promtool_test_rules() {
    let Some(promtool) = promtool() else { return };
    for file in yml_files("prometheus/tests") {
        run_promtool(&promtool, &["test", "rules"], &[file]);
    }
}

/// Every rule (record or alert) of the rule files, with its group and file.
fn rules() -> Vec<(String, Yaml)> {
    let mut rules = Vec::new();
    for file in yml_files("prometheus/rules") {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for group in yaml(&file)["groups"].as_sequence().expect("groups") {
            for rule in group["rules"].as_sequence().expect("rules") {
                rules.push((name.clone(), rule.clone()));
            }
        }
    }
    rules
}

#[test]
fn every_rule_has_unit_tests_and_every_alert_the_labels_routing_needs() {
    // What the unit tests exercise: expressions evaluated, alerts expected firing/quiet.
    let mut exprs = String::new();
    let mut fired: BTreeSet<String> = BTreeSet::new();
    let mut quiet: BTreeSet<String> = BTreeSet::new();
    for file in yml_files("prometheus/tests") {
        let doc = yaml(&file);
        for referenced in doc["rule_files"].as_sequence().expect("rule_files") {
            let path = file.parent().unwrap().join(referenced.as_str().unwrap());
            assert!(
                path.is_file(),
                "{}: no rule file {}",
                file.display(),
                path.display()
            );
        }
        for test in doc["tests"].as_sequence().expect("tests") {
            for case in test["promql_expr_test"].as_sequence().into_iter().flatten() {
                exprs.push_str(case["expr"].as_str().unwrap());
                exprs.push('\n');
            }
            for case in test["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = case["alertname"].as_str().unwrap().to_owned();
                match case["exp_alerts"].as_sequence() {
                    Some(alerts) if !alerts.is_empty() => fired.insert(name),
                    _ => quiet.insert(name),
                };
            }
        }
    }

    let mut problems = Vec::new();
    for (file, rule) in rules() {
        if let Some(record) = rule["record"].as_str() {
            if !record.contains(':') {
                problems.push(format!(
                    "{file}: recording rule {record} is not named level:metric:operations"
                ));
            }
            if !exprs.contains(record) {
                problems.push(format!("{file}: no promql_expr_test evaluates {record}"));
            }
            continue;
        }
        let alert = rule["alert"].as_str().expect("a rule is a record or an alert");
        if !fired.contains(alert) {
            problems.push(format!("{file}: no unit test expects {alert} to fire"));
        }
        if !quiet.contains(alert) {
            problems.push(format!("{file}: no unit test expects {alert} to stay quiet"));
        }
        let severity = rule["labels"]["severity"].as_str().unwrap_or("");
        if !["critical", "warning"].contains(&severity) {
            problems.push(format!("{file}: {alert} has severity {severity:?}"));
        }
        for key in ["summary", "description", "runbook_url"] {
            if rule["annotations"][key].as_str().is_none_or(str::is_empty) {
                problems.push(format!("{file}: {alert} has no {key} annotation"));
            }
        }
        if rule["for"].as_str().is_none() {
            problems.push(format!("{file}: {alert} has no `for:`"));
        }
        // Alertmanager routes and inhibits on `probe`: every endpoint alert keeps it,
        // aggregating by it or reading the per-probe (or per probe and location) recording
        // rules.
        let expr = rule["expr"].as_str().unwrap();
        let keeps_probe = ["by (probe", "probe:", "probe_location:"]
            .iter()
            .any(|way| expr.contains(way));
        if alert.starts_with("Inference") && !keeps_probe {
            problems.push(format!("{file}: {alert} does not keep the probe label"));
        }
    }
    // An end-to-end test shortens `for:` by text replacement: each on a line of its own.
    for file in yml_files("prometheus/rules") {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines().filter(|l| l.trim_start().starts_with("for:")) {
            let value = line.trim_start().trim_start_matches("for:").trim();
            if value.is_empty() || value.contains(' ') || !value.ends_with(['s', 'm', 'h', 'd']) {
                problems.push(format!("{}: `{line}` is not `for: <duration>`", file.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------
// The latency trend warnings as the shipped Alertmanager route takes them.

/// The alerts of the latency trend group: read once a day, never paged.
const TREND_GROUP: &str = "inferprobe-latency-trend-alerts";

/// The leaf route `amtool config routes test --tree` picks for an alert with these labels:
/// its line, with the matchers and the receiver.
fn matched_route(amtool: &Path, labels: &[String]) -> String {
    let out = Command::new(amtool)
        .args(["config", "routes", "test", "--tree"])
        .arg(format!(
            "--config.file={}",
            deploy("alertmanager/alertmanager.yml").display()
        ))
        .args(labels)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "amtool {labels:?}: {text}");
    text.lines()
        .find(|l| l.contains("receiver:"))
        .unwrap_or_else(|| panic!("no route for {labels:?}: {text}"))
        .trim()
        .to_owned()
}

#[test]
fn the_trend_warnings_reach_chat_once_a_day_and_no_other_alert_does() {
    let Some(amtool) = require_tool(
        "amtool",
        "routes the trend warnings; apt-get install prometheus-alertmanager",
    ) else {
        return;
    };
    let alerts = yaml(&deploy("prometheus/rules/inferprobe-alerts.yml"));
    let mut trends = BTreeSet::new();
    let mut others = BTreeMap::new();
    for group in alerts["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let name = rule["alert"].as_str().unwrap().to_owned();
            let severity = rule["labels"]["severity"].as_str().unwrap().to_owned();
            if group["name"] == TREND_GROUP {
                assert_eq!(severity, "warning", "{name} must never page");
                trends.insert(name);
            } else {
                others.insert(name, severity);
            }
        }
    }
    assert_eq!(trends.len(), 2, "{trends:?}");
    let labels = |name: &str, severity: &str| {
        [
            format!("alertname={name}"),
            format!("severity={severity}"),
            "probe=chat".into(),
            "location=eu-west".into(),
            "latency=ttft".into(),
            "quantile=0.95".into(),
        ]
    };
    for name in &trends {
        let route = matched_route(&amtool, &labels(name, "warning"));
        assert!(
            route.contains("alertname=~") && route.ends_with("receiver: chat"),
            "{name}: {route}"
        );
    }
    for (name, severity) in &others {
        let route = matched_route(&amtool, &labels(name, severity));
        assert!(
            !route.contains("alertname=~"),
            "{name} takes the trends' route: {route}"
        );
    }
    // The daily route itself: one message per kind of trend, at most once a day.
    let config = yaml(&deploy("alertmanager/alertmanager.yml"));
    let warning = config["route"]["routes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["matchers"][0] == "severity=\"warning\"")
        .expect("a warning route");
    let daily = &warning["routes"][0];
    assert_eq!(
        daily["group_by"],
        serde_yaml::from_str::<Yaml>("[alertname]").unwrap()
    );
    assert_eq!(daily["group_interval"], "24h");
    assert_eq!(daily["repeat_interval"], "24h");
}

// ---------------------------------------------------------------------------------
// The dashboard against a real scrape.

/// What one PromQL expression references.
#[derive(Debug, Default)]
struct Refs {
    /// Metric names with the label names of their matchers.
    selectors: Vec<(String, BTreeSet<String>)>,
    /// Label names in by/without/on/ignoring/group_left/group_right clauses.
    grouping: BTreeSet<String>,
}

const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
    "inf",
    "nan",
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
];

/// A small PromQL scanner: enough to find metric names, matcher label names and
/// grouping labels (strings, ranges and comments are skipped).
fn scan_promql(expr: &str) -> Refs {
    let s: Vec<char> = expr.chars().collect();
    let mut refs = Refs::default();
    let mut i = 0;
    let skip_ws = |mut i: usize| {
        while i < s.len() && s[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let skip_string = |mut i: usize| {
        let quote = s[i];
        i += 1;
        while i < s.len() && s[i] != quote {
            if s[i] == '\\' && quote != '`' {
                i += 1;
            }
            i += 1;
        }
        i + 1
    };
    let ident = |mut i: usize| {
        let start = i;
        while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '_' || s[i] == ':') {
            i += 1;
        }
        (s[start..i].iter().collect::<String>(), i)
    };
    while i < s.len() {
        let c = s[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(i);
        } else if c == '[' {
            while i < s.len() && s[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '#' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c.is_ascii_digit() || (c == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit)) {
            // Numbers and durations: 0.95, 1e6, 1e-3, 5m, 0x1f.
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '.' || s[i] == '_') {
                if (s[i] == 'e' || s[i] == 'E') && matches!(s.get(i + 1), Some('+' | '-')) {
                    i += 1;
                }
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let (name, end) = ident(i);
            let next = skip_ws(end);
            i = end;
            let grouping = ["by", "without", "on", "ignoring", "group_left", "group_right"];
            if grouping.contains(&name.as_str()) {
                if s.get(next) == Some(&'(') {
                    i = next + 1;
                    while i < s.len() && s[i] != ')' {
                        if s[i].is_ascii_alphabetic() || s[i] == '_' {
                            let (label, end) = ident(i);
                            refs.grouping.insert(label);
                            i = end;
                        } else {
                            i += 1;
                        }
                    }
                    i += 1;
                }
            } else if s.get(next) == Some(&'(') || KEYWORDS.contains(&name.as_str()) {
                // A function or an operator.
            } else {
                let mut labels = BTreeSet::new();
                if s.get(next) == Some(&'{') {
                    i = next + 1;
                    while i < s.len() && s[i] != '}' {
                        if s[i] == '"' || s[i] == '\'' || s[i] == '`' {
                            i = skip_string(i);
                        } else if s[i].is_ascii_alphabetic() || s[i] == '_' {
                            let (label, end) = ident(i);
                            labels.insert(label);
                            i = end;
                        } else {
                            i += 1;
                        }
                    }
                    i += 1;
                }
                refs.selectors.push((name, labels));
            }
        } else {
            assert!(
                c != '$',
                "a Grafana variable outside a string or range in {expr:?}"
            );
            i += 1;
        }
    }
    refs
}

#[test]
fn the_promql_scanner_finds_names_matchers_and_grouping() {
    let r = scan_promql(
        "histogram_quantile(0.95, sum by (probe, le) (rate(inferprobe_ttft_seconds_bucket{probe=~\"a|b}\", le!='2'}[5m:1m] offset 1h))) \
         / on (probe) group_left (model) probe:x:ratio_rate5m # inferprobe_not_this\n* 1e-3",
    );
    let names: Vec<&str> = r.selectors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["inferprobe_ttft_seconds_bucket", "probe:x:ratio_rate5m"]);
    assert_eq!(r.selectors[0].1, BTreeSet::from(["probe".into(), "le".into()]));
    assert_eq!(
        r.grouping,
        BTreeSet::from(["probe".into(), "le".into(), "model".into()])
    );
}

/// The histograms a Prometheus with native histograms enabled stores as one native series
/// under their own name (no `_bucket`/`_count`/`_sum`): the rules and dashboard read them
/// under that name too, beside the classic series.
const NATIVE: [&str; 2] = ["inferprobe_ttft_seconds", "inferprobe_e2e_latency_seconds"];

/// Sample name -> every label name seen on its samples, from a text-format scrape; the
/// native histograms also under their own name, with their `_bucket`'s labels but `le`.
fn exported(scrape: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut series = classic_series(scrape);
    for name in NATIVE {
        if let Some(labels) = series.get(&format!("{name}_bucket")) {
            let mut labels = labels.clone();
            labels.remove("le");
            series.insert(name.to_owned(), labels);
        }
    }
    series
}

/// Sample name -> every label name seen on its samples, as the text format shows them.
fn classic_series(scrape: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = series.entry(line[..end].to_owned()).or_default();
        if line[end..].starts_with('{') {
            // name="value" pairs; values may hold escaped quotes.
            let mut rest = &line[end + 1..];
            while let Some(eq) = rest.find("=\"") {
                labels.insert(rest[..eq].trim_start_matches(',').trim().to_owned());
                let value = &rest[eq + 2..];
                let mut j = 0;
                let bytes = value.as_bytes();
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                rest = &value[j + 1..];
                if rest.starts_with('}') {
                    break;
                }
            }
        }
    }
    series
}

/// Recording rule name -> the labels its series carry: its expression's grouping labels,
/// or, for a rule that does not aggregate (`avg_over_time(other:rule[1h])`), those of the
/// recorded series it reads; and the rule's own `labels:`.
fn recorded() -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, rule) in rules() {
        let Some(name) = rule["record"].as_str() else {
            continue;
        };
        let refs = scan_promql(rule["expr"].as_str().unwrap());
        let mut labels: BTreeSet<String> = if refs.grouping.is_empty() {
            // Rules are listed in evaluation order: what it reads is recorded before it.
            refs.selectors
                .iter()
                .filter_map(|(read, _)| out.get(read))
                .flatten()
                .cloned()
                .collect()
        } else {
            refs.grouping
        };
        labels.extend(
            rule["labels"]
                .as_mapping()
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| k.as_str().map(str::to_owned)),
        );
        // One name may be recorded by several rules (one per `labels:` value).
        out.entry(name.to_owned()).or_default().extend(labels);
    }
    out
}

/// Every query of the dashboard: (where, PromQL, the label a label_values() asks for,
/// the labels its legend uses).
fn dashboard_queries(dash: &serde_json::Value) -> Vec<(String, String, Option<String>, Vec<String>)> {
    fn panels(list: &serde_json::Value, out: &mut Vec<(String, String, Option<String>, Vec<String>)>) {
        for panel in list.as_array().into_iter().flatten() {
            panels(&panel["panels"], out);
            for target in panel["targets"].as_array().into_iter().flatten() {
                let legend = target["legendFormat"].as_str().unwrap_or("");
                let labels = legend
                    .split("{{")
                    .skip(1)
                    .filter_map(|p| p.split_once("}}").map(|(l, _)| l.trim().to_owned()))
                    .collect();
                let title = panel["title"].as_str().unwrap_or("?");
                let expr = target["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("panel {title:?}: a target without expr"));
                assert_eq!(
                    target["datasource"]["uid"], "${datasource}",
                    "panel {title:?}: targets must use the ${{datasource}} variable"
                );
                out.push((format!("panel {title:?}"), expr.to_owned(), None, labels));
            }
        }
    }
    let mut out = Vec::new();
    panels(&dash["panels"], &mut out);
    for var in dash["templating"]["list"].as_array().expect("templating.list") {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"]
            .as_str()
            .or(var["query"].as_str())
            .expect("a query variable's query");
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| {
                panic!(
                    "variable {}: only label_values(...) is supported: {query}",
                    var["name"]
                )
            });
        let (selector, label) = inner.rsplit_once(',').expect("label_values(selector, label)");
        out.push((
            format!("variable {}", var["name"]),
            selector.to_owned(),
            Some(label.trim().to_owned()),
            Vec::new(),
        ));
    }
    out
}

/// In a panel's title: the panel needs `metrics: {detail: full}` (its description says so).
const FULL_MARK: &str = "(full detail)";

/// Grafana's interval variables, replaced by a duration so the expression stays PromQL.
fn without_grafana_intervals(expr: &str) -> String {
    ["$__rate_interval", "$__interval", "$__range"]
        .iter()
        .fold(expr.to_owned(), |e, v| e.replace(v, "5m"))
}

/// Checks every query against what the agent exported and what the rules record.
fn dashboard_problems(
    queries: &[(String, String, Option<String>, Vec<String>)],
    series: &BTreeMap<String, BTreeSet<String>>,
    recorded: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (place, expr, values_label, legend) in queries {
        let refs = scan_promql(&without_grafana_intervals(expr));
        if refs.selectors.is_empty() {
            problems.push(format!("{place}: no series in {expr:?}"));
        }
        let mut wanted: BTreeSet<&String> = refs.grouping.iter().collect();
        wanted.extend(values_label);
        for (name, matchers) in &refs.selectors {
            let known = if name.contains(':') {
                recorded.get(name).ok_or("no recording rule records it")
            } else if name.starts_with("inferprobe_") {
                series.get(name).ok_or("the agent does not export it")
            } else {
                Err("not an inferprobe series")
            };
            let labels = match known {
                Ok(labels) => labels,
                Err(why) => {
                    problems.push(format!("{place}: {name}: {why}"));
                    continue;
                }
            };
            let used: BTreeSet<&String> = matchers.iter().chain(wanted.iter().copied()).collect();
            for label in used {
                if label != "le" && !labels.contains(label) {
                    problems.push(format!(
                        "{place}: {name} has no label {label:?} (it has {labels:?})"
                    ));
                }
            }
        }
        // A legend can only show labels the aggregation keeps.
        if !refs.grouping.is_empty() {
            for label in legend {
                if !refs.grouping.contains(label) {
                    problems.push(format!("{place}: legend uses {label:?}, not kept by the query"));
                }
            }
        }
    }
    problems
}

#[test]
fn the_dashboard_is_importable_and_queries_only_series_and_labels_the_agent_exports() {
    let path = deploy("grafana/inferprobe.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("the dashboard is JSON");
    assert!(
        dash["schemaVersion"].as_i64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    assert!(dash["uid"].is_string() && dash["title"].is_string());
    let vars = dash["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name} variable"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    assert_eq!(var("probe")["type"], "query");
    assert_eq!(var("location")["type"], "query");
    // The first row is what users look at first: availability and end-to-end P95.
    let first: Vec<String> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .take_while(|p| p["type"] != "row")
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        first.iter().any(|e| e.contains("inferprobe_runs_total")),
        "{first:?}"
    );
    assert!(
        first
            .iter()
            .any(|e| e.contains("0.95") && e.contains("inferprobe_e2e_latency_seconds_bucket"))
    );

    // Panels that need `metrics: {detail: full}` say so in their title, and are checked
    // against a full scrape; every other query must work on the default detail.
    let (full_queries, queries): (Vec<_>, Vec<_>) = dashboard_queries(&dash)
        .into_iter()
        .partition(|(place, _, _, _)| place.contains(FULL_MARK));
    let names_of = |queries: &[(String, String, Option<String>, Vec<String>)]| -> BTreeSet<String> {
        queries
            .iter()
            .flat_map(|(_, e, _, _)| scan_promql(&without_grafana_intervals(e)).selectors)
            .map(|(n, _)| n)
            .filter(|n| !n.contains(':'))
            .collect()
    };
    let names = names_of(&queries);
    let full_names = names_of(&full_queries);
    assert!(!full_queries.is_empty(), "no panel is marked {FULL_MARK:?}");
    let rule_queries: Vec<_> = rules()
        .into_iter()
        .map(|(file, rule)| {
            let name = rule["record"]
                .as_str()
                .or(rule["alert"].as_str())
                .unwrap()
                .to_owned();
            let expr = rule["expr"].as_str().unwrap().to_owned();
            (format!("{file} rule {name}"), expr, None, Vec::new())
        })
        .collect();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let sim = rt.block_on(simulator(Script::default()));
    let hook = FakeReceiver::start(200);
    let dir = temp_dir("dashboard");
    let config = dir.join("probes.yaml");
    let url = format!("http://{}", sim.addr);
    std::fs::write(
        &config,
        format!(
            "agent:\n  location: dashboard-test\n\
             receivers:\n  - name: hook\n    kind: webhook\n    url: http://{hook}/hook\n\
             probes:\n\
             \x20 - name: chat\n    kind: openai_chat\n    url: {url}/v1/chat/completions?ttft=20ms&token_gap=5ms&tokens=4\n    model: sim-model\n    interval: 1s\n\
             \x20 - name: vision\n    kind: openai_chat\n    url: {url}/v1/chat/completions?ttft=20ms&token_gap=5ms&tokens=4\n    model: sim-vlm\n    interval: 1s\n    images:\n      builtin: [scene-224.jpg]\n\
             \x20 - name: down\n    kind: openai_chat\n    url: {url}/v1/chat/completions?fault=http-500\n    model: sim-model\n    interval: 1s\n    alert: {{failure_threshold: 1}}\n\
             \x20 - name: digits\n    kind: kserve_v2\n    url: {url}/v2/models/digits/infer?ttft=5ms\n    interval: 1s\n    ready_check: true\n    input: {{name: input-0, datatype: FP32, shape: [1, 4], data: [0.1, 0.5, 0.2, 0.9]}}\n\
             \x20 - name: overrunning\n    kind: openai_chat\n    url: {url}/v1/chat/completions?ttft=2500ms&tokens=2\n    model: sim-model\n    schedule: \"* * * * * *\"\n    timeout: 5s\n    first_token_timeout: 4s\n",
            hook = hook.addr,
        ),
    )
    .unwrap();
    let mut agent = Daemon::start(&config, &[]);

    // Wait until every family the dashboard uses has samples carrying every label it
    // uses (skipped ticks, webhook deliveries and a vision run take a few seconds on a
    // loaded machine); check the last scrape anyway.
    let scrape_until = |agent: &Daemon, queries: &[_], names: &BTreeSet<String>| {
        let mut series = BTreeMap::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(45);
        while std::time::Instant::now() < deadline {
            series = exported(&agent.metrics());
            if series.contains_key("inferprobe_runs_total")
                && names.iter().all(|n| series.contains_key(n))
                && dashboard_problems(queries, &series, &recorded()).is_empty()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        series
    };
    let series = scrape_until(&agent, &queries, &names);
    assert!(
        series.contains_key("inferprobe_runs_total"),
        "the agent never reported a run"
    );
    let problems = dashboard_problems(&queries, &series, &recorded());
    assert!(
        problems.is_empty(),
        "the dashboard queries what the agent does not export at the default detail:\n{}\n\nexported: {series:#?}",
        problems.join("\n")
    );
    // A panel marked as needing `full` does need it (the mark is not left over).
    for (place, _, _, _) in &full_queries {
        let panel: Vec<_> = full_queries.iter().filter(|q| &q.0 == place).cloned().collect();
        assert!(
            !dashboard_problems(&panel, &series, &recorded()).is_empty(),
            "{place} works at the default detail: drop its {FULL_MARK:?}"
        );
    }
    let default_series = series;

    // The same agent at full detail (agent-wide), by a reload.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(
            "  location: dashboard-test\n",
            "  location: dashboard-test\n  metrics: {detail: full}\n",
        ),
    )
    .unwrap();
    agent.signal("HUP");
    agent.wait_for_log("Configuration reloaded.", Duration::from_secs(10));
    let series = scrape_until(&agent, &full_queries, &full_names);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
    let problems = dashboard_problems(&full_queries, &series, &recorded());
    assert!(
        problems.is_empty(),
        "the dashboard's full-detail panels query what the agent does not export:\n{}\n\nexported: {series:#?}",
        problems.join("\n")
    );

    // The rules need nothing only `full` has: whatever they query that the full scrape
    // has, the default one has too, with the labels they use (series that appear only
    // when something happens, such as agent errors, are missing from both alike).
    let problem_keys = |series| -> BTreeSet<String> {
        dashboard_problems(&rule_queries, series, &recorded())
            .into_iter()
            .map(|p| p.split(" (it has").next().unwrap_or_default().to_owned())
            .collect()
    };
    let only_default = &problem_keys(&default_series) - &problem_keys(&series);
    assert!(
        only_default.is_empty(),
        "rules that need metrics: {{detail: full}}:\n{}",
        only_default.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// Every rule and dashboard query that reads TTFT or total from their classic series
/// (`_bucket`, `_count`, `_sum`) reads the native series too: a Prometheus with native
/// histograms enabled stores only that one (tests/native_histograms.rs evaluates them).
#[test]
fn every_query_over_ttft_and_total_also_reads_their_native_histograms() {
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana/inferprobe.json")).unwrap()).unwrap();
    let mut queries: Vec<(String, String)> = dashboard_queries(&dash)
        .into_iter()
        .map(|(place, expr, _, _)| (place, without_grafana_intervals(&expr)))
        .collect();
    queries.extend(rules().into_iter().map(|(file, rule)| {
        let name = rule["record"].as_str().or(rule["alert"].as_str()).unwrap();
        (
            format!("{file} rule {name}"),
            rule["expr"].as_str().unwrap().to_owned(),
        )
    }));
    let mut problems = Vec::new();
    let mut read = 0;
    for (place, expr) in &queries {
        let names: BTreeSet<String> = scan_promql(expr).selectors.into_iter().map(|(n, _)| n).collect();
        for native in NATIVE {
            let classic = ["_bucket", "_count", "_sum"]
                .iter()
                .any(|suffix| names.contains(&format!("{native}{suffix}")));
            if classic {
                read += 1;
                if !names.contains(native) {
                    problems.push(format!("{place}: reads {native} only from its classic series"));
                }
            }
        }
    }
    assert!(
        read >= 10,
        "only {read} queries read TTFT or total: is the scan still right?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
