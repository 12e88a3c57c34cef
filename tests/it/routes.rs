//! `routes:` end to end: the real agent pages each probe alert to the receivers its
//! severity is routed to (the seed's tiers: pager, chat, a daily digest), and `check`
//! shows those tiers.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::*;

/// (event, alertname, severity) of every page a receiver accepted, in order.
fn pages(receiver: &FakeReceiver) -> Vec<(String, String, String)> {
    receiver
        .accepted()
        .iter()
        .map(|n| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&n["event"]),
                text(&n["alert"]["alertname"]),
                text(&n["alert"]["severity"]),
            )
        })
        .collect()
}

fn page(event: &str, alertname: &str, severity: &str) -> (String, String, String) {
    (event.into(), alertname.into(), severity.into())
}

#[test]
fn the_critical_page_reaches_only_the_pager_the_warning_only_the_chat_and_info_the_digest() {
    let _turn = timed();
    let pager = FakeReceiver::start(202);
    let chat = FakeReceiver::start(202);
    let digest = FakeReceiver::start(202);
    // Slow (300 ms over a 100 ms target) until told to fail, then HTTP 503.
    let failing = Arc::new(AtomicBool::new(false));
    let fails = failing.clone();
    let endpoint = scripted_server(move |_| {
        if fails.load(Ordering::SeqCst) {
            vec![Step::Write(reply(503, "{\"error\":\"overloaded\"}"))]
        } else {
            vec![
                Step::Hold(Duration::from_millis(300)),
                Step::Write(reply(200, "{\"status\":\"ok\"}")),
            ]
        }
    });
    // Slow for good: a trend, whose degraded alert is `info`.
    let slow = scripted_server(|_| {
        vec![
            Step::Hold(Duration::from_millis(300)),
            Step::Write(reply(200, "{\"status\":\"ok\"}")),
        ]
    });
    let dir = temp_dir("routes-e2e");
    let probes = dir.join("probes.yaml");
    std::fs::write(
        &probes,
        format!(
            "agent: {{location: eu-test}}
receivers:
  - {{name: pager, kind: webhook, url: \"http://{pager}/\", max_backoff: 1s}}
  - {{name: chat, kind: webhook, url: \"http://{chat}/\", max_backoff: 1s}}
  - name: daily-digest
    kind: webhook
    url: http://{digest}/
    max_backoff: 1s
    digest: {{schedule: \"*/2 * * * * *\"}}
routes:
  - match: {{severity: critical}}
    receivers: [pager]
  - match: {{severity: warning}}
    receivers: [chat]
  - match: {{severity: info}}
    receivers: [daily-digest]
defaults:
  interval: 1s
  timeout: 900ms
  alert: {{failure_threshold: 2, success_threshold: 2}}
  slo: {{total_p95: 100ms, window: 5}}
probes:
  - {{name: llm, kind: http, url: \"http://{endpoint}/health\"}}
  - name: trend
    kind: http
    url: http://{slow}/health
    alert: {{severity: warning, slo_severity: info}}
",
            pager = pager.addr,
            chat = chat.addr,
            digest = digest.addr,
        ),
    )
    .unwrap();
    let _agent = Daemon::start(&probes, &[]);

    wait_until("the degraded page in chat", Duration::from_secs(30), || {
        chat.accepted_count() >= 1
    });
    failing.store(true, Ordering::SeqCst);
    wait_until("the down page at the pager", Duration::from_secs(30), || {
        pager.accepted_count() >= 1
    });
    // The degraded alert yields to the down one; its resolve goes where its page went.
    wait_until(
        "the degraded alert resolved in chat",
        Duration::from_secs(10),
        || chat.accepted_count() >= 2,
    );
    let digests_naming_trend = || {
        digest
            .accepted()
            .iter()
            .filter(|d| {
                d["event"] == "document"
                    && d["document"]["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("trend is DEGRADED"))
            })
            .count()
    };
    wait_until("the trend in the digest", Duration::from_secs(30), || {
        digests_naming_trend() >= 1
    });
    // A few more runs: nothing else may reach the pager or the chat.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        pages(&pager),
        [page("firing", "InferenceEndpointDown", "critical")]
    );
    assert_eq!(
        pages(&chat),
        [
            page("firing", "InferenceEndpointDegraded", "warning"),
            page("resolved", "InferenceEndpointDegraded", "warning"),
        ]
    );
    // The digest receiver gets documents only, and none of them names the other probe.
    let documents = digest.accepted();
    assert!(
        documents.iter().all(|d| d["event"] == "document"
            && !d["document"]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("llm is")),
        "{documents:#?}"
    );
}

#[test]
fn check_shows_who_each_alert_pages_and_what_pages_nobody() {
    let dir = temp_dir("routes-check");
    let probes = dir.join("probes.yaml");
    std::fs::write(
        &probes,
        "receivers:
  - {name: pager, kind: pagerduty, routing_key: k}
  - {name: team-chat, kind: slack, url: \"http://chat.example/hook\"}
  - {name: daily-digest, kind: webhook, url: \"http://digest.example/\"}
routes:
  - match: {severity: critical}
    receivers: [pager, team-chat]
  - match: {severity: warning}
    receivers: [team-chat]
  - match: {severity: info, labels: {tier: batch}}
    receivers: [daily-digest]
probes:
  - {name: chat, kind: http, url: \"http://h/chat\"}
  - {name: embed, kind: http, url: \"http://h/embed\"}
  - {name: nightly, kind: http, url: \"http://h/nightly\", labels: {tier: batch}, alert: {severity: warning, slo_severity: info}}
  - {name: odd, kind: http, url: \"http://h/odd\", alert: {severity: error}}
",
    )
    .unwrap();
    let out = check(&probes);
    let path = probes.display();
    assert_eq!(
        out,
        format!(
            "warning: {path}:16:6: probe \"odd\": probes[3]: its down alert (error) matches no route and the probe lists no `alert.receivers`: it pages nobody; add a route for it, or a last route without `match`
{path}: ok, 4 probes, 1 warning(s)
Pages, by severity and receivers:
  critical -> pager, team-chat: the down alert of chat, embed
  error -> nobody: the down alert of odd
  warning -> team-chat: the degraded alert of chat, embed, odd
  warning -> team-chat: the down alert of nightly
  info -> daily-digest: the degraded alert of nightly
"
        )
    );
}

fn check(probes: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["check", "-c"])
        .arg(probes)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}
