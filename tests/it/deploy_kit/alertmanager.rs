//! deploy/alertmanager: the example passes `amtool`, routes as documented (`amtool config
//! routes test`) and inhibits as documented, in a real Alertmanager.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_yaml::Value;

use super::*;
use crate::support::*;

#[test]
fn alertmanager_config_passes_amtool_check_config() {
    let Some(amtool) = require_tool(
        "amtool",
        "checks deploy/alertmanager; apt-get install prometheus-alertmanager",
    ) else {
        return;
    };
    let (ok, out) = run(Command::new(amtool)
        .arg("check-config")
        .arg(repo(ALERTMANAGER_YML)));
    assert!(ok, "amtool check-config failed:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
    assert!(
        out.contains("2 inhibit rules") && out.contains("2 receivers"),
        "{out}"
    );
}

/// The receiver `amtool config routes test` picks for an alert with these labels.
fn route(amtool: &Path, labels: &[&str]) -> String {
    let (ok, out) = run(Command::new(amtool)
        .args(["config", "routes", "test"])
        .arg(format!("--config.file={}", repo(ALERTMANAGER_YML).display()))
        .args(labels));
    assert!(ok, "amtool config routes test {labels:?} failed:\n{out}");
    // The answer is the last line that is not one of amtool's warnings.
    out.lines()
        .rfind(|l| !l.starts_with("Warning:") && !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[test]
fn critical_alerts_page_and_warnings_go_to_chat() {
    let Some(amtool) = require_tool(
        "amtool",
        "tests the routing; apt-get install prometheus-alertmanager",
    ) else {
        return;
    };
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "severity=critical",
                "probe=x",
                "alertname=InferenceEndpointDownQuorum",
            ],
            "pager",
        ),
        (
            &[
                "severity=warning",
                "probe=x",
                "location=eu-west",
                "alertname=InferenceEndpointDownInOneLocation",
            ],
            "chat",
        ),
        // What agents post themselves, with all their labels.
        (
            &[
                "alertname=InferenceEndpointDown",
                "severity=critical",
                "probe=x",
                "location=eu-west",
                "kind=openai_chat",
                "model=llama",
            ],
            "pager",
        ),
        (
            &[
                "alertname=InferenceEndpointDegraded",
                "severity=warning",
                "probe=x",
                "location=eu-west",
                "kind=openai_chat",
                "model=llama",
            ],
            "chat",
        ),
        // The burn-rate pages go where the quorum page goes; their tickets to chat.
        (
            &[
                "alertname=InferenceAvailabilityBudgetBurnFast",
                "severity=critical",
                "slo=availability",
                "probe=x",
            ],
            "pager",
        ),
        (
            &[
                "alertname=InferenceAvailabilityBudgetBurnSlow",
                "severity=warning",
                "slo=availability",
                "probe=x",
            ],
            "chat",
        ),
        // One agent down is the platform's warning; a fleet that cannot form a quorum pages.
        (
            &[
                "alertname=InferprobeAgentDown",
                "severity=warning",
                "check=scrape_failed",
                "location=eu-west",
            ],
            "chat",
        ),
        (&["alertname=InferprobeQuorumLost", "severity=critical"], "pager"),
        // `inferprobe test-alert` proves the paging path.
        (
            &["alertname=InferprobeTestAlert", "severity=critical", "probe=x"],
            "pager",
        ),
        // Anything else is not worth a page.
        (&["alertname=Something", "severity=info"], "chat"),
    ];
    for (labels, want) in cases {
        assert_eq!(&route(&amtool, labels), want, "receiver for {labels:?}");
    }
}

#[test]
fn alertmanager_config_groups_by_alert_and_probe_and_keeps_secrets_in_files() {
    let config = yaml(ALERTMANAGER_YML);
    let group_by: Vec<&str> = at(&config, "route.group_by")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(group_by, ["alertname", "probe"]);
    // The pager groups by probe alone: PagerDuty's dedup key is the group's, so a probe's
    // quorum page and burn-rate pages are one incident.
    let pager = at(&config, "route.routes")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["receiver"] == "pager")
        .expect("a route to pager");
    let pager_group_by: Vec<&str> = pager["group_by"]
        .as_sequence()
        .expect("the pager route has its own group_by")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(pager_group_by, ["probe"]);
    let receiver = |name: &str| {
        at(&config, "receivers")
            .as_sequence()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no receiver {name}"))
            .clone()
    };
    assert!(at(&receiver("pager"), "pagerduty_configs.0.routing_key_file").is_string());
    assert!(at(&receiver("chat"), "slack_configs.0.api_url_file").is_string());
    let text = read(ALERTMANAGER_YML);
    assert!(
        !text.contains("routing_key:") && !text.contains("api_url:"),
        "secrets inline"
    );
}

/// The kit's Alertmanager config with its receivers replaced by empty ones of the same
/// names (nothing is sent anywhere), in Debian's Alertmanager on a loopback port.
fn alertmanager_with_kit_config() -> Option<Alertmanager> {
    let mut config = yaml(ALERTMANAGER_YML);
    let names: Vec<Value> = at(&config, "receivers")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            let mut m = serde_yaml::Mapping::new();
            m.insert("name".into(), r["name"].clone());
            Value::Mapping(m)
        })
        .collect();
    config["receivers"] = Value::Sequence(names);
    Alertmanager::start(&serde_yaml::to_string(&config).unwrap())
}

/// Requests the shared helper does not make: posting alerts and reading one exactly.
trait KitRequests {
    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String);
    fn post(&self, labels: &[BTreeMap<&str, &str>]);
    fn inhibited(&self) -> BTreeMap<String, bool>;
}

impl KitRequests for Alertmanager {
    /// One HTTP/1.0 exchange (so the answer is never chunked): (status, body).
    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, body.to_owned())
    }

    fn post(&self, labels: &[BTreeMap<&str, &str>]) {
        let alerts: Vec<_> = labels.iter().map(|l| serde_json::json!({"labels": l})).collect();
        let (status, body) = self.request("POST", "/api/v2/alerts", &serde_json::to_string(&alerts).unwrap());
        assert_eq!(status, 200, "{body}");
    }

    /// alertname/probe/location of each active alert, and whether it is inhibited.
    fn inhibited(&self) -> BTreeMap<String, bool> {
        self.alerts()
            .iter()
            .map(|a| {
                let l = &a["labels"];
                let key = format!(
                    "{}/{}/{}",
                    l["alertname"].as_str().unwrap_or(""),
                    l["probe"].as_str().unwrap_or("-"),
                    l["location"].as_str().unwrap_or("-")
                );
                let by = a["status"]["inhibitedBy"].as_array().map_or(0, Vec::len);
                (key, by > 0)
            })
            .collect()
    }
}

fn labels(pairs: &[(&'static str, &'static str)]) -> BTreeMap<&'static str, &'static str> {
    pairs.iter().copied().collect()
}

#[test]
fn quorum_and_dead_agent_alerts_inhibit_what_they_explain_and_nothing_else() {
    let Some(am) = alertmanager_with_kit_config() else {
        return;
    };
    let agent = |name, probe, location, severity| {
        labels(&[
            ("alertname", name),
            ("severity", severity),
            ("probe", probe),
            ("location", location),
            ("kind", "openai_chat"),
            ("model", "llama"),
        ])
    };
    am.post(&[
        // chat is down from several locations: one page, for the quorum.
        labels(&[
            ("alertname", "InferenceEndpointDownQuorum"),
            ("severity", "critical"),
            ("probe", "chat"),
        ]),
        labels(&[
            ("alertname", "InferenceEndpointDownInOneLocation"),
            ("severity", "warning"),
            ("probe", "chat"),
            ("location", "eu-west"),
        ]),
        agent("InferenceEndpointDown", "chat", "us-east", "critical"),
        agent("InferenceEndpointDegraded", "chat", "ap-south", "warning"),
        // Another probe down from one place only: still notified.
        agent("InferenceEndpointDown", "embed", "us-east", "critical"),
        // The agent in ap-south is down: its location's alerts are not about endpoints ...
        labels(&[
            ("alertname", "InferprobeAgentDown"),
            ("severity", "warning"),
            ("check", "scrape_failed"),
            ("location", "ap-south"),
        ]),
        agent("InferenceEndpointDegraded", "embed", "ap-south", "warning"),
        // ... but a quorum alert is never silenced by one dead agent.
        labels(&[
            ("alertname", "InferenceEndpointDownQuorum"),
            ("severity", "critical"),
            ("probe", "rerank"),
        ]),
        // A dead-agent alert that names no location (a target that never reported its
        // build_info) silences nothing, not even the other alerts without a location.
        labels(&[("alertname", "InferprobeAgentDown"), ("severity", "warning")]),
        labels(&[
            ("alertname", "InferenceAvailabilityBudgetBurnFast"),
            ("severity", "critical"),
            ("probe", "embed"),
        ]),
    ]);
    let want: BTreeMap<String, bool> = [
        ("InferenceEndpointDownQuorum/chat/-", false),
        ("InferenceEndpointDownInOneLocation/chat/eu-west", true),
        ("InferenceEndpointDown/chat/us-east", true),
        ("InferenceEndpointDegraded/chat/ap-south", true),
        ("InferenceEndpointDown/embed/us-east", false),
        ("InferprobeAgentDown/-/ap-south", false),
        ("InferenceEndpointDegraded/embed/ap-south", true),
        ("InferenceEndpointDownQuorum/rerank/-", false),
        ("InferprobeAgentDown/-/-", false),
        ("InferenceAvailabilityBudgetBurnFast/embed/-", false),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    // Inhibition follows the alerts Alertmanager has taken in; poll until it settles.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let seen = am.inhibited();
        if seen == want {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "inhibited by alert:\n{seen:#?}\nwant:\n{want:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
