//! The scenario matrix of deploy/prometheus/tests/scenarios.test.yml, end to end: promtool
//! proves when each alert fires and resolves (tests/deploy_prometheus.rs runs it); here,
//! every checkpoint of it names every alert of the rule files (what is not listed firing
//! must not fire), each scenario's firing alerts are replayed in order into a real
//! Alertmanager running the shipped deploy/alertmanager/alertmanager.yml, with its
//! PagerDuty and Slack receivers pointed at local listeners, to count incidents (distinct
//! PagerDuty dedup keys) and chat messages; the shipped route's waits added to the rules'
//! times give the page and resolve times docs/alerting.md states; and the "Who pages"
//! table of docs/alerting.md says for every shipped rule what the rule files and the route
//! do.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;
use serde_yaml::Value;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const SCENARIOS: &str = "deploy/prometheus/tests/scenarios.test.yml";
const RULE_FILES: [&str; 2] = [
    "deploy/prometheus/rules/inferprobe-recording.yml",
    "deploy/prometheus/rules/inferprobe-alerts.yml",
];
const ALERTMANAGER_YML: &str = "deploy/alertmanager/alertmanager.yml";

/// Every alerting rule of the rule files: (alertname, its `labels:`).
fn alert_rules() -> Vec<(String, BTreeMap<String, String>)> {
    let mut rules = Vec::new();
    for file in RULE_FILES {
        for group in yaml(file)["groups"].as_sequence().unwrap() {
            for rule in group["rules"].as_sequence().unwrap() {
                let Some(name) = rule["alert"].as_str() else {
                    continue;
                };
                let labels = rule["labels"]
                    .as_mapping()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.as_str().unwrap().to_owned()))
                    .collect();
                rules.push((name.to_owned(), labels));
            }
        }
    }
    rules
}

/// A promtool duration ("6h2m15s", "1d") in seconds.
fn seconds(text: &str) -> u64 {
    let (mut total, mut n) = (0, 0);
    for c in text.chars() {
        match c {
            '0'..='9' => n = n * 10 + u64::from(c.to_digit(10).unwrap()),
            'd' => (total, n) = (total + n * 86400, 0),
            'h' => (total, n) = (total + n * 3600, 0),
            'm' => (total, n) = (total + n * 60, 0),
            's' => (total, n) = (total + n, 0),
            _ => panic!("not a duration: {text}"),
        }
    }
    assert_eq!(n, 0, "a duration without its unit: {text}");
    total
}

/// One alert as promtool expects it: its alertname and labels.
type Alert = BTreeMap<String, String>;

/// A scenario: its name and, per checkpoint (seconds, in order), the set of alertnames it
/// checks and the alerts expected firing.
struct Scenario {
    name: String,
    checkpoints: Vec<(u64, BTreeSet<String>, Vec<Alert>)>,
}

fn scenarios() -> Vec<Scenario> {
    let doc = yaml(SCENARIOS);
    doc["tests"]
        .as_sequence()
        .expect("tests")
        .iter()
        .map(|test| {
            let mut by_time: BTreeMap<u64, (BTreeSet<String>, Vec<Alert>)> = BTreeMap::new();
            for case in test["alert_rule_test"].as_sequence().expect("alert_rule_test") {
                let at = seconds(case["eval_time"].as_str().unwrap());
                let name = case["alertname"].as_str().unwrap().to_owned();
                let entry = by_time.entry(at).or_default();
                entry.0.insert(name.clone());
                for alert in case["exp_alerts"].as_sequence().into_iter().flatten() {
                    let mut labels: Alert = alert["exp_labels"]
                        .as_mapping()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.as_str().unwrap().to_owned()))
                        .collect();
                    labels.insert("alertname".into(), name.clone());
                    entry.1.push(labels);
                }
            }
            Scenario {
                name: test["name"].as_str().unwrap().to_owned(),
                checkpoints: by_time
                    .into_iter()
                    .map(|(t, (names, firing))| (t, names, firing))
                    .collect(),
            }
        })
        .collect()
}

#[test]
fn every_checkpoint_of_the_matrix_names_every_alert_and_starts_after_six_good_hours() {
    let all: BTreeSet<String> = alert_rules().into_iter().map(|(n, _)| n).collect();
    assert!(all.len() >= 9, "{all:?}");
    let scenarios = scenarios();
    assert!(scenarios.len() >= 8, "{} scenarios", scenarios.len());
    let mut problems = Vec::new();
    for s in &scenarios {
        for (at, names, _) in &s.checkpoints {
            if names != &all {
                problems.push(format!(
                    "{}: the checkpoint at {at}s does not list {:?}",
                    s.name,
                    all.difference(names).collect::<Vec<_>>()
                ));
            }
        }
        // Six hours of good history: nothing fires before the trouble starts at 6h.
        let first = s.checkpoints.first().expect("checkpoints");
        if first.0 < 5 * 3600
            || s.checkpoints
                .iter()
                .any(|(t, _, f)| *t < 6 * 3600 && !f.is_empty())
        {
            problems.push(format!(
                "{}: no quiet checkpoint after 5h, or an alert before 6h",
                s.name
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What a scenario must do at the receivers: PagerDuty incidents, and the alertnames chat
/// is told about. The scenario is found by the start of its name.
const EXPECTED: &[(&str, usize, &[&str])] = &[
    (
        "one region down for 60 minutes",
        0,
        &["InferenceEndpointDownInOneLocation"],
    ),
    (
        "both regions down for 20 minutes",
        1,
        &["InferenceAvailabilityBudgetBurnSlow"],
    ),
    ("one region failing every other run", 0, &[]),
    ("one agent of three stopped", 0, &["InferprobeAgentDown"]),
    ("one agent of two stopped", 0, &["InferprobeAgentDown"]),
    ("two agents of three stopped", 1, &["InferprobeAgentDown"]),
    ("every agent stopped", 1, &["InferprobeAgentDown"]),
    ("a TTFT regression in one region only", 0, &[]),
    (
        "a TTFT regression in every region",
        1,
        &["InferenceTTFTBudgetBurnSlow"],
    ),
];

/// Seconds of a duration in Alertmanager's notation ("30s", "1m", "4h").
fn am_seconds(v: &Value) -> u64 {
    seconds(v.as_str().expect("a duration"))
}

/// The shipped config with the receivers' endpoints on local listeners and every wait
/// divided by 30 (at least 1 s; repeats an hour apart, so none comes within a test).
fn scaled_config(dir: &Path, pager: &str, chat: &str) -> String {
    let mut config = yaml(ALERTMANAGER_YML);
    std::fs::write(dir.join("routing-key"), "0123456789abcdef0123456789abcdef").unwrap();
    std::fs::write(dir.join("slack-url"), format!("http://{chat}/slack")).unwrap();
    for receiver in config["receivers"].as_sequence_mut().unwrap() {
        if let Some(pd) = receiver.get_mut("pagerduty_configs") {
            let pd = &mut pd[0];
            pd["routing_key_file"] = dir.join("routing-key").display().to_string().into();
            pd["url"] = format!("http://{pager}/v2/enqueue").into();
        }
        if let Some(slack) = receiver.get_mut("slack_configs") {
            slack[0]["api_url_file"] = dir.join("slack-url").display().to_string().into();
        }
    }
    fn scale(route: &mut Value) {
        for key in ["group_wait", "group_interval"] {
            if let Some(v) = route.get_mut(key) {
                *v = format!("{}s", (am_seconds(v) / 30).max(1)).into();
            }
        }
        if let Some(v) = route.get_mut("repeat_interval") {
            *v = "1h".into();
        }
        if let Some(routes) = route.get_mut("routes") {
            for r in routes.as_sequence_mut().unwrap() {
                scale(r);
            }
        }
    }
    scale(&mut config["route"]);
    serde_yaml::to_string(&config).unwrap()
}

/// POST /api/v2/alerts, as Prometheus sends them: firing ones end an hour ahead, resolved
/// ones now.
fn post(addr: &str, firing: &[Alert], resolved: &[Alert]) {
    let now = std::time::SystemTime::now();
    let iso = |t: std::time::SystemTime| {
        let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        time_rfc3339(secs)
    };
    let mut alerts = Vec::new();
    for a in firing {
        alerts.push(serde_json::json!({"labels": a, "endsAt": iso(now + Duration::from_secs(3600))}));
    }
    for a in resolved {
        alerts.push(serde_json::json!({"labels": a, "endsAt": iso(now)}));
    }
    let body = serde_json::to_string(&alerts).unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /api/v2/alerts HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
}

/// Unix seconds as RFC 3339 UTC (civil-from-days, Howard Hinnant's algorithm).
fn time_rfc3339(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// What the receivers got from one scenario's replay.
#[derive(Debug)]
struct Outcome {
    /// PagerDuty events in order: (dedup_key, event_action, the alertnames firing).
    pager: Vec<(String, String, String)>,
    /// Slack messages: their titles.
    chat: Vec<String>,
}

fn replay(scenario: &Scenario) -> Option<Outcome> {
    let pager = FakeReceiver::start(202);
    let chat = FakeReceiver::start(200);
    let dir = temp_dir("alert-scenarios");
    let config = scaled_config(&dir, &pager.addr.to_string(), &chat.addr.to_string());
    let am = Alertmanager::start(&config)?;
    let mut before: Vec<Alert> = Vec::new();
    for (_, _, firing) in &scenario.checkpoints {
        let resolved: Vec<Alert> = before.iter().filter(|a| !firing.contains(a)).cloned().collect();
        post(&am.addr, firing, &resolved);
        before = firing.clone();
        // Longer than the scaled group_wait and the pager's group_interval (1 s, 2 s).
        std::thread::sleep(Duration::from_millis(2500));
    }
    // Every group's last flush (chat's group_interval is 10 s scaled).
    std::thread::sleep(Duration::from_secs(12));
    drop(am);
    let _ = std::fs::remove_dir_all(&dir);
    let pager_events = pager
        .accepted()
        .into_iter()
        .map(|e| {
            (
                e["dedup_key"].as_str().unwrap_or_default().to_owned(),
                e["event_action"].as_str().unwrap_or_default().to_owned(),
                e["payload"]["custom_details"]["firing"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    let chat_titles = chat
        .accepted()
        .into_iter()
        .flat_map(|m| {
            m["attachments"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|a| a["title"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    Some(Outcome {
        pager: pager_events,
        chat: chat_titles,
    })
}

#[test]
fn each_scenario_pages_and_tells_chat_as_the_matrix_says_through_the_shipped_route() {
    if require_tool(
        "prometheus-alertmanager",
        "replays the scenarios; apt-get install prometheus-alertmanager",
    )
    .is_none()
    {
        return;
    }
    let scenarios = scenarios();
    for (prefix, _, _) in EXPECTED {
        assert!(
            scenarios.iter().any(|s| s.name.starts_with(prefix)),
            "no scenario named {prefix:?}..."
        );
    }
    let outcomes: Vec<(String, Option<Outcome>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = scenarios
            .iter()
            .map(|s| (s.name.clone(), scope.spawn(|| replay(s))))
            .collect();
        handles.into_iter().map(|(n, h)| (n, h.join().unwrap())).collect()
    });
    let mut problems = Vec::new();
    for (name, outcome) in outcomes {
        let Some(outcome) = outcome else { return };
        let Some((_, incidents, told)) = EXPECTED.iter().find(|(p, _, _)| name.starts_with(p)) else {
            problems.push(format!("{name}: not in EXPECTED"));
            continue;
        };
        let keys: BTreeSet<&str> = outcome
            .pager
            .iter()
            .filter(|(_, action, _)| action == "trigger")
            .map(|(k, _, _)| k.as_str())
            .collect();
        if keys.len() != *incidents {
            problems.push(format!(
                "{name}: {} PagerDuty incidents, want {incidents}: {:#?}",
                keys.len(),
                outcome.pager
            ));
        }
        // Each incident ends resolved, and nothing triggers it again after its resolve.
        for key in &keys {
            let events: Vec<&str> = outcome
                .pager
                .iter()
                .filter(|(k, _, _)| k == key)
                .map(|(_, a, _)| a.as_str())
                .collect();
            let first_resolve = events.iter().position(|a| *a == "resolve");
            if first_resolve.is_none_or(|i| i + 1 != events.len()) {
                problems.push(format!("{name}: incident {key}: events {events:?}"));
            }
        }
        let told_now: BTreeSet<String> = outcome
            .chat
            .iter()
            .filter(|t| t.starts_with("[FIRING"))
            .filter_map(|t| t.split_whitespace().nth(1).map(str::to_owned))
            .collect();
        let want: BTreeSet<String> = told.iter().map(|s| (*s).to_owned()).collect();
        if told_now != want {
            problems.push(format!(
                "{name}: chat told of {told_now:?}, want {want:?}: {:#?}",
                outcome.chat
            ));
        }
        eprintln!(
            "{name}: {} incident(s), pager events {:?}; chat {:?}",
            keys.len(),
            outcome
                .pager
                .iter()
                .map(|(_, a, f)| format!("{a}: {}", f.trim()))
                .collect::<Vec<_>>(),
            outcome.chat
        );
    }
    // The outage's one incident carries both of its pages.
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The rows of the Markdown table that follows `marker` in docs/alerting.md, as cells.
fn doc_table(marker: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(repo("docs/alerting.md")).unwrap();
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("docs/alerting.md has no {marker:?}"));
    text[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The receiver the shipped route gives an alert of this severity: the first child route
/// whose matchers it meets, else the root's.
fn receiver_for(severity: &str) -> String {
    let config = yaml(ALERTMANAGER_YML);
    let route = &config["route"];
    for child in route["routes"].as_sequence().unwrap() {
        let matchers: Vec<&str> = child["matchers"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        if matchers == [format!("severity=\"{severity}\"").as_str()] {
            return child["receiver"].as_str().unwrap().to_owned();
        }
        assert!(
            matchers.iter().all(|m| m.starts_with("severity=")),
            "a route on more than severity: {matchers:?}; teach this test"
        );
    }
    route["receiver"].as_str().unwrap().to_owned()
}

#[test]
fn the_who_pages_table_says_what_the_rules_and_the_route_do() {
    let rows = doc_table("<!-- who-pages table");
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (alert, labels) in alert_rules() {
        let severity = labels["severity"].clone();
        let Some(row) = rows.iter().find(|r| r[0] == format!("`{alert}`")) else {
            problems.push(format!("no row for {alert}"));
            continue;
        };
        seen.insert(alert.clone());
        let receiver = receiver_for(&severity);
        if row[1] != severity {
            problems.push(format!("{alert}: the table says {}, the rule {severity}", row[1]));
        }
        if row[2] != receiver {
            problems.push(format!(
                "{alert}: the table says {}, the route {receiver}",
                row[2]
            ));
        }
        // Only what reaches the pager wakes anyone; what goes to chat is told there.
        let woken = row[3] != "no one";
        if woken != (receiver == "pager") {
            problems.push(format!("{alert}: woken {:?} but routed to {receiver}", row[3]));
        }
        if row[5].is_empty() {
            problems.push(format!("{alert}: no resolve time"));
        }
    }
    // A row for an alert the rules do not have is about the agents' own alerts, said so.
    for row in &rows {
        let name = row[0].trim_matches('`').split('`').next().unwrap_or_default();
        if !seen.contains(name) && !row[0].contains("(from an agent)") && !row[0].contains("test-alert") {
            problems.push(format!("a row for {name}, which no rule or agent sends"));
        }
    }
    // The scenario table's counts are the replay's.
    let scenario_rows = doc_table("<!-- scenario table");
    for (prefix, incidents, told) in EXPECTED {
        let Some(row) = scenario_rows.iter().find(|r| r[0].starts_with(prefix)) else {
            problems.push(format!("the scenario table has no row {prefix:?}"));
            continue;
        };
        if row[2] != incidents.to_string() {
            problems.push(format!(
                "{prefix}: the table says {} incidents, the replay {incidents}",
                row[2]
            ));
        }
        let listed: BTreeSet<&str> = row[3]
            .split(", ")
            .map(|c| c.trim_matches('`'))
            .filter(|c| *c != "nothing")
            .collect();
        let want: BTreeSet<&str> = told.iter().copied().collect();
        if listed != want {
            problems.push(format!(
                "{prefix}: the table tells chat of {listed:?}, the replay {want:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The promise for an outage of two regions (6h to 6h20m in the matrix): paged
/// within 5 minutes, the incident resolved within 10 minutes of recovery. The rules' times
/// are the matrix's checkpoints (15 s apart around each transition); the route adds its
/// pager `group_wait` before the first notification and at most a `group_interval` before
/// the resolve.
#[test]
fn an_outage_of_two_regions_pages_within_5_minutes_and_clears_within_10_of_recovery() {
    let config = yaml(ALERTMANAGER_YML);
    let pager = config["route"]["routes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["receiver"] == "pager")
        .unwrap()
        .clone();
    let inherit = |key: &str| am_seconds(pager.get(key).unwrap_or(&config["route"][key]));
    let (group_wait, group_interval) = (inherit("group_wait"), inherit("group_interval"));
    let outage = scenarios()
        .into_iter()
        .find(|s| s.name.starts_with("both regions down for 20 minutes"))
        .expect("the two-region outage scenario");
    let (start, recovery) = (6 * 3600, 6 * 3600 + 20 * 60);
    let critical = |firing: &[Alert]| firing.iter().any(|a| a["severity"] == "critical");
    let paged = outage
        .checkpoints
        .iter()
        .find(|(_, _, f)| critical(f))
        .expect("a page")
        .0;
    let last = outage
        .checkpoints
        .iter()
        .rposition(|(_, _, f)| critical(f))
        .unwrap();
    let cleared = outage.checkpoints[last + 1].0;
    assert!(
        outage.checkpoints[last + 1..]
            .iter()
            .all(|(_, _, f)| !critical(f)),
        "a page after the outage cleared"
    );
    let to_page = paged + group_wait - start;
    let to_resolve = cleared + group_interval - recovery;
    eprintln!("paged {to_page} s after the outage began; resolved within {to_resolve} s of recovery");
    assert!(to_page <= 300, "paged {to_page} s after the outage began");
    assert!(to_resolve <= 600, "resolved {to_resolve} s after recovery");
}
