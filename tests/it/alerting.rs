//! Paging end to end: the real agent against the real Alertmanager (Debian's
//! `prometheus-alertmanager`, started here on a loopback port), and against fake
//! PagerDuty and webhook receivers that record every call and fail on demand.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::*;

/// An Alertmanager that routes everything nowhere: we read its API.
const BLACKHOLE: &str = "route:\n  receiver: blackhole\n  group_wait: 1s\nreceivers:\n  - name: blackhole\n";

/// A probes.yaml with one http probe against `endpoint`, every second, firing after
/// 2 failures and resolving after 2 successes, paging `receivers`.
fn config(dir: &Path, endpoint: &str, receivers: &str, routing: &str) -> PathBuf {
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        format!(
            "agent:\n  location: eu-test\n  external_url: http://probe-eu.example:9464\n\
             receivers:\n{receivers}\
             probes:\n  - name: llm-health\n    kind: http\n    url: http://{endpoint}/health\n    interval: 1s\n    timeout: 900ms\n    labels: {{team: ml}}\n\
             \x20   alert:\n      failure_threshold: 2\n      success_threshold: 2\n      runbook_url: https://runbooks.example.com/llm\n{routing}"
        ),
    )
    .unwrap();
    path
}

#[test]
fn a_failing_endpoint_appears_in_alertmanager_and_resolves_when_it_recovers() {
    let Some(am) = Alertmanager::start(BLACKHOLE) else {
        return;
    };
    let healthy = Arc::new(AtomicBool::new(true));
    let endpoint = switch_server(healthy.clone());
    let dir = temp_dir("am-e2e");
    let receivers = format!(
        "  - name: am\n    kind: alertmanager\n    url: http://{}\n    max_backoff: 1s\n",
        am.addr
    );
    let probes = config(&dir, &endpoint.to_string(), &receivers, "");
    let mut agent = Daemon::start(&probes, &[]);
    agent.wait_for_log("Probe run finished.", Duration::from_secs(10));
    assert!(am.alerts_named("InferenceEndpointDown").is_empty());

    healthy.store(false, Ordering::SeqCst);
    wait_until("the down alert in Alertmanager", Duration::from_secs(20), || {
        !am.alerts_named("InferenceEndpointDown").is_empty()
    });
    let alerts = am.alerts_named("InferenceEndpointDown");
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    let a = &alerts[0];
    assert_eq!(
        a["labels"],
        serde_json::json!({
            "alertname": "InferenceEndpointDown",
            "severity": "critical",
            "probe": "llm-health",
            "location": "eu-test",
            "kind": "http",
            "team": "ml",
        })
    );
    assert_eq!(a["status"]["state"], "active");
    let ann = &a["annotations"];
    assert!(
        ann["summary"]
            .as_str()
            .unwrap()
            .starts_with("llm-health is DOWN from eu-test: the server fails (HTTP 5xx)"),
        "{ann}"
    );
    assert_eq!(ann["reason"], "http_5xx");
    assert_eq!(ann["last_status"], "503");
    assert_eq!(ann["runbook_url"], "https://runbooks.example.com/llm");
    assert!(
        ann["last_error"]
            .as_str()
            .unwrap()
            .contains("no healthy upstream"),
        "{ann}"
    );
    assert_eq!(
        a["generatorURL"],
        "http://probe-eu.example:9464/api/v1/probes/llm-health"
    );
    // Firing alerts carry an end a few minutes ahead (re-sent while they last).
    assert!(a["endsAt"].as_str().unwrap() > a["startsAt"].as_str().unwrap());
    assert_eq!(
        metric_sum(
            &agent.metrics(),
            "inferprobe_alerts_firing",
            &["down", "critical"]
        ),
        1.0
    );

    healthy.store(true, Ordering::SeqCst);
    wait_until(
        "the alert resolved in Alertmanager",
        Duration::from_secs(20),
        || am.alerts_named("InferenceEndpointDown").is_empty(),
    );
    let delivered = |m: &str| {
        ["firing", "resolved"]
            .iter()
            .map(|e| {
                let event = format!("event=\"{e}\"");
                metric_sum(
                    m,
                    "inferprobe_notifications_total",
                    &["receiver=\"am\"", &event, "result=\"delivered\""],
                )
            })
            .sum::<f64>()
    };
    wait_until(
        "firing and resolved counted as delivered",
        Duration::from_secs(5),
        || delivered(&agent.metrics()) == 2.0,
    );
    let m = agent.metrics();
    assert_eq!(
        metric_sum(&m, "inferprobe_alerts_firing", &["down", "critical"]),
        0.0
    );
    // The API lists the resolved alert for a while.
    let (_, _, body) = http_get(&agent.addr, "/api/v1/alerts", None);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["alerts"][0]["state"], "resolved", "{v}");
}

#[test]
fn test_alert_shows_the_test_alert_in_alertmanager() {
    let Some(am) = Alertmanager::start(BLACKHOLE) else {
        return;
    };
    let dir = temp_dir("am-test-alert");
    let receivers = format!(
        "  - name: am\n    kind: alertmanager\n    url: http://{}/\n",
        am.addr
    );
    let probes = config(&dir, "127.0.0.1:9", &receivers, "");
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["test-alert", "-c"])
        .arg(&probes)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("am                   accepted"), "{stdout}");
    let alerts = am.alerts_named("InferprobeTestAlert");
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    assert_eq!(alerts[0]["labels"]["location"], "eu-test");
    assert!(
        alerts[0]["annotations"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("[TEST]")
    );

    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["test-alert", "--resolve", "-c"])
        .arg(&probes)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(am.alerts_named("InferprobeTestAlert").is_empty());
}

#[test]
fn test_alert_reports_each_receiver_and_fails_when_one_refuses() {
    let pd = FakeReceiver::start(202);
    let hook = FakeReceiver::start(400);
    let dir = temp_dir("test-alert-fakes");
    let receivers = format!(
        "  - name: pager\n    kind: pagerduty\n    url: http://{}/v2/enqueue\n    routing_key: rk-test\n  - name: hook\n    kind: webhook\n    url: http://{}/hook\n",
        pd.addr, hook.addr
    );
    let probes = config(&dir, "127.0.0.1:9", &receivers, "");
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["test-alert", "-c"])
        .arg(&probes)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("pager                accepted"), "{stdout}");
    assert!(stdout.contains("hook                 REJECTED"), "{stdout}");
    assert!(stdout.contains("HTTP 400"), "{stdout}");
    let sent = pd.accepted();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["event_action"], "trigger");
    assert_eq!(sent[0]["dedup_key"], "inferprobe/test/eu-test");
    assert!(
        sent[0]["payload"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("[TEST]")
    );
    // A 400 is not retried.
    assert_eq!(hook.call_count(), 1);
    // Only the named receiver.
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["test-alert", "--receiver", "pager", "-c"])
        .arg(&probes)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!((pd.accepted().len(), hook.call_count()), (2, 1));
}

#[test]
fn test_alert_describes_a_webhook_truly_and_links_to_the_agents_address() {
    let hook = FakeReceiver::start(200);
    let dir = temp_dir("test-alert-webhook");
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        format!(
            "agent:\n  location: eu-test\n  listen: 127.0.0.1:19464\n\
             receivers:\n  - name: hook\n    kind: webhook\n    url: http://{}/hook\n\
             probes:\n  - name: llm-health\n    kind: http\n    url: http://127.0.0.1:9/health\n    interval: 1s\n",
            hook.addr
        ),
    )
    .unwrap();
    let test_alert = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
            .arg("test-alert")
            .args(extra)
            .arg("-c")
            .arg(&path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{stdout}");
        stdout
    };
    let stdout = test_alert(&[]);
    // Only Alertmanager expires an alert by itself.
    assert!(!stdout.contains("Alertmanager"), "{stdout}");
    assert!(stdout.contains("Webhooks got one message"), "{stdout}");
    let sent = hook.accepted();
    assert_eq!(
        sent[0]["alert"]["api_url"], "http://127.0.0.1:19464/api/v1/probes",
        "agent.listen, not localhost:9464: {}",
        sent[0]
    );
    // --listen wins over agent.listen.
    test_alert(&["--listen", "127.0.0.1:20464"]);
    let sent = hook.accepted();
    assert_eq!(
        sent[1]["alert"]["api_url"],
        "http://127.0.0.1:20464/api/v1/probes"
    );
}

fn fake_receivers(pd: &FakeReceiver, hook: &FakeReceiver) -> String {
    format!(
        "  - name: pager\n    kind: pagerduty\n    url: http://{}/v2/enqueue\n    routing_key: rk-0123456789\n    max_backoff: 500ms\n\
         \x20 - name: hook\n    kind: webhook\n    url: http://{}/hook\n    headers: {{Authorization: Bearer hook-token}}\n    max_backoff: 500ms\n",
        pd.addr, hook.addr
    )
}

#[test]
fn a_page_raised_while_the_receiver_is_down_is_delivered_once_when_it_returns() {
    let pd = FakeReceiver::start(503);
    let hook = FakeReceiver::start(502);
    let healthy = Arc::new(AtomicBool::new(false));
    let endpoint = switch_server(healthy.clone());
    let dir = temp_dir("receiver-down");
    let probes = config(&dir, &endpoint.to_string(), &fake_receivers(&pd, &hook), "");
    let agent = Daemon::start(&probes, &[]);

    // Down receivers are retried with backoff...
    wait_until("several failed attempts", Duration::from_secs(20), || {
        pd.call_count() >= 3 && hook.call_count() >= 3
    });
    assert!(pd.accepted().is_empty());
    // The receiver counts a call when it arrives; the agent counts it once the answer
    // is back, a moment later.
    let failed = || {
        metric_sum(
            &agent.metrics(),
            "inferprobe_notifications_total",
            &["pager", "result=\"failed\""],
        )
    };
    wait_until("three failed attempts counted", Duration::from_secs(5), || {
        failed() >= 3.0
    });
    let m = agent.metrics();
    assert_eq!(
        metric_sum(&m, "inferprobe_notifications_pending", &["pager"]),
        1.0,
        "{m}"
    );
    // ... and when they come back the page goes out once.
    pd.set_status(202);
    hook.set_status(200);
    wait_until("the page delivered", Duration::from_secs(10), || {
        pd.accepted().len() == 1 && hook.accepted().len() == 1
    });
    let trigger = &pd.accepted()[0];
    assert_eq!(trigger["event_action"], "trigger");
    assert_eq!(trigger["routing_key"], "rk-0123456789");
    assert_eq!(trigger["dedup_key"], "inferprobe/llm-health/eu-test/critical");
    assert_eq!(trigger["payload"]["severity"], "critical");
    assert_eq!(trigger["payload"]["source"], "127.0.0.1");
    assert_eq!(trigger["payload"]["custom_details"]["last_status"], 503);
    let page = &hook.accepted()[0];
    assert_eq!(page["event"], "firing");
    assert_eq!(page["alert"]["probe"], "llm-health");
    assert_eq!(page["alert"]["labels"]["team"], "ml");
    let hook_call = hook.calls.lock().unwrap()[0].0.clone();
    assert_eq!(hook_call.header("authorization"), Some("Bearer hook-token"));

    healthy.store(true, Ordering::SeqCst);
    wait_until("the resolve delivered", Duration::from_secs(10), || {
        pd.accepted().len() == 2 && hook.accepted().len() == 2
    });
    assert_eq!(pd.accepted()[1]["event_action"], "resolve");
    assert_eq!(pd.accepted()[1]["dedup_key"], trigger["dedup_key"]);
    assert_eq!(hook.accepted()[1]["event"], "resolved");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!((pd.accepted().len(), hook.accepted().len()), (2, 2), "no repeats");

    // The routing key and the webhook's token went to their receivers and nowhere else.
    let mut surfaces = agent.all_logs.lock().unwrap().join("\n");
    surfaces.push_str(&agent.metrics());
    for path in [
        "/api/v1/probes",
        "/api/v1/alerts",
        "/api/v1/probes/llm-health",
        "/",
    ] {
        surfaces.push_str(&http_get(&agent.addr, path, None).2);
    }
    assert!(
        surfaces.contains("Notification delivered."),
        "the log was captured"
    );
    for secret in ["rk-0123456789", "hook-token"] {
        assert!(!surfaces.contains(secret), "{secret} leaked");
    }
}

#[test]
fn a_4xx_is_dropped_without_retry_and_a_5xx_retried() {
    let pd = FakeReceiver::start(400);
    let hook = FakeReceiver::start(500);
    let healthy = Arc::new(AtomicBool::new(false));
    let endpoint = switch_server(healthy.clone());
    let dir = temp_dir("4xx");
    let probes = config(&dir, &endpoint.to_string(), &fake_receivers(&pd, &hook), "");
    let agent = Daemon::start(&probes, &[]);
    wait_until("retries of the 5xx receiver", Duration::from_secs(20), || {
        hook.call_count() >= 4
    });
    assert_eq!(pd.call_count(), 1, "a 400 is not retried");
    let m = agent.metrics();
    assert_eq!(
        metric_sum(
            &m,
            "inferprobe_notifications_total",
            &["receiver=\"pager\"", "result=\"rejected\""]
        ),
        1.0
    );
    assert_eq!(
        metric_sum(&m, "inferprobe_notifications_pending", &["receiver=\"pager\""]),
        0.0
    );
    assert!(
        metric_sum(
            &m,
            "inferprobe_notifications_total",
            &["receiver=\"hook\"", "result=\"failed\""]
        ) >= 3.0
    );
    // A 429 is retried too (honouring Retry-After).
    hook.set_status(429);
    let before = hook.call_count();
    wait_until("a retry after 429", Duration::from_secs(10), || {
        hook.call_count() > before + 1
    });
}

/// Counts of what one receiver accepted, by event, and ids seen more than once.
fn tally(
    r: &FakeReceiver,
    event_of: impl Fn(&serde_json::Value) -> String,
    id_of: impl Fn(&serde_json::Value) -> String,
) -> (usize, usize, Vec<String>) {
    let accepted = r.accepted();
    let events: Vec<String> = accepted.iter().map(&event_of).collect();
    let mut ids: Vec<String> = accepted.iter().map(&id_of).collect();
    ids.sort();
    let mut dupes = ids.clone();
    dupes.dedup();
    let duplicated: Vec<String> = dupes
        .into_iter()
        .filter(|id| ids.iter().filter(|i| *i == id).count() > 1)
        .collect();
    (
        events
            .iter()
            .filter(|e| e.as_str() == "firing" || e.as_str() == "trigger")
            .count(),
        events
            .iter()
            .filter(|e| e.as_str() == "resolved" || e.as_str() == "resolve")
            .count(),
        duplicated,
    )
}

/// `kill -9` in every state of an incident (pending failure; firing with the page
/// still queued; firing and delivered; pending resolve; resolved), each time restarting
/// on the same data directory: one page and one resolve reach each receiver, none twice.
#[test]
fn sigkill_in_every_state_neither_loses_nor_repeats_a_page() {
    let pd = FakeReceiver::start(202);
    let hook = FakeReceiver::start(200);
    let healthy = Arc::new(AtomicBool::new(true));
    let endpoint = switch_server(healthy.clone());
    let dir = temp_dir("sigkill");
    let data = dir.join("data");
    let data_arg = data.to_str().unwrap().to_owned();
    let probes = config(&dir, &endpoint.to_string(), &fake_receivers(&pd, &hook), "");
    // Three failures to fire, so that a restart in the middle of the streak shows.
    let text = std::fs::read_to_string(&probes)
        .unwrap()
        .replace("failure_threshold: 2", "failure_threshold: 3");
    std::fs::write(&probes, text).unwrap();
    let start = || Daemon::start(&probes, &["--data-dir", &data_arg]);
    // Kills the agent and returns its whole log.
    let kill = |mut d: Daemon| -> Vec<String> {
        d.signal("KILL");
        let _ = d.child.wait();
        std::thread::sleep(Duration::from_millis(200));
        d.all_logs.lock().unwrap().clone()
    };

    let mut agent = start();
    agent.wait_for_log("Probe run finished.", Duration::from_secs(10));

    // 1. Pending failure: a failed run (or two) of three, then killed.
    healthy.store(false, Ordering::SeqCst);
    agent.wait_for_log("Probe run failed.", Duration::from_secs(5));
    let before = kill(agent);
    let failed_before = before.iter().filter(|l| l.contains("Probe run failed.")).count();
    assert!(!before.iter().any(|l| l.contains("Alert firing.")), "{before:#?}");
    let mut agent = start();
    // The streak continues: the alert fires at the third failure counted over both
    // processes (the alert is logged before its run's own line).
    let lines = agent.lines_until("Alert firing.", Duration::from_secs(10));
    let failed_after = lines.iter().filter(|l| l.contains("Probe run failed.")).count();
    assert_eq!(failed_before + failed_after + 1, 3, "{before:#?}\n{lines:#?}");
    assert!(
        lines.last().unwrap().contains("3 failed runs in a row"),
        "{lines:#?}"
    );
    wait_until("the page delivered", Duration::from_secs(10), || {
        pd.accepted().len() == 1
    });

    // 2. Firing and delivered; killed.
    kill(agent);
    let agent = start();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        pd.accepted().len(),
        1,
        "no second page after a restart while firing"
    );

    // 3. A resolve raised while the receivers are down stays queued; killed.
    pd.set_status(503);
    hook.set_status(503);
    healthy.store(true, Ordering::SeqCst);
    let mut agent = agent;
    agent.wait_for_log("Alert resolved.", Duration::from_secs(10));
    agent.wait_for_log("will retry", Duration::from_secs(5));
    kill(agent);
    pd.set_status(202);
    hook.set_status(200);
    let agent = start();
    wait_until(
        "the queued resolve delivered after the restart",
        Duration::from_secs(10),
        || pd.accepted().len() == 2 && hook.accepted().len() == 2,
    );

    // 4. Resolved; killed again; a new incident pages anew with a new id.
    kill(agent);
    let mut agent = start();
    std::thread::sleep(Duration::from_secs(2));
    // 5. The alert fires again while the receivers are down, so the page is queued
    // when the agent dies.
    pd.set_status(503);
    hook.set_status(503);
    healthy.store(false, Ordering::SeqCst);
    agent.wait_for_log("Alert firing.", Duration::from_secs(10));
    agent.wait_for_log("will retry", Duration::from_secs(5));
    kill(agent);
    pd.set_status(202);
    hook.set_status(200);
    let mut agent = start();
    wait_until(
        "the queued page delivered after the restart",
        Duration::from_secs(10),
        || pd.accepted().len() == 3 && hook.accepted().len() == 3,
    );
    // 6. Pending resolve (one good run of two), killed, then resolved.
    healthy.store(true, Ordering::SeqCst);
    agent.wait_for_log("Probe run finished.", Duration::from_secs(5));
    kill(agent);
    let _agent = start();
    wait_until("the resolve", Duration::from_secs(10), || {
        pd.accepted().len() == 4 && hook.accepted().len() == 4
    });
    std::thread::sleep(Duration::from_secs(3));

    // PagerDuty events carry no id: a repeated delivery would show as the same event
    // twice in a row.
    let (pd_fired, pd_resolved, _) = tally(
        &pd,
        |b| b["event_action"].as_str().unwrap().to_owned(),
        |b| b["event_action"].as_str().unwrap().to_owned(),
    );
    let actions: Vec<String> = pd
        .accepted()
        .iter()
        .map(|b| b["event_action"].as_str().unwrap().to_owned())
        .collect();
    assert!(actions.windows(2).all(|w| w[0] != w[1]), "{actions:?}");
    let (hook_fired, hook_resolved, hook_dupes) = tally(
        &hook,
        |b| b["event"].as_str().unwrap().to_owned(),
        |b| b["id"].as_str().unwrap().to_owned(),
    );
    eprintln!(
        "pagerduty: {pd_fired} triggers, {pd_resolved} resolves, order {actions:?}; webhook: {hook_fired} firing, {hook_resolved} resolved, duplicates {hook_dupes:?}"
    );
    assert_eq!(
        (pd_fired, pd_resolved),
        (2, 2),
        "two incidents, each paged and resolved once"
    );
    assert_eq!((hook_fired, hook_resolved), (2, 2));
    assert!(hook_dupes.is_empty(), "{hook_dupes:?}");
    // PagerDuty resolves carry no timestamp; triggers of the two incidents differ.
    let triggers: Vec<_> = pd
        .accepted()
        .into_iter()
        .filter(|b| b["event_action"] == "trigger")
        .collect();
    assert_ne!(
        triggers[0]["payload"]["timestamp"],
        triggers[1]["payload"]["timestamp"]
    );
}

/// Firing alerts are re-sent while they last (here every second, so `endsAt` is 4 s
/// ahead): the alert stays in Alertmanager long past its first `endsAt`, and an alert
/// that fires again soon after resolving is not undone by a re-send of the old resolve.
#[test]
fn alertmanager_keeps_a_re_sent_alert_and_a_re_fired_one() {
    let Some(am) = Alertmanager::start(BLACKHOLE) else {
        return;
    };
    let healthy = Arc::new(AtomicBool::new(false));
    let endpoint = switch_server(healthy.clone());
    let dir = temp_dir("am-resend");
    let receivers = format!(
        "  - name: am\n    kind: alertmanager\n    url: http://{}\n    resend_interval: 1s\n    max_backoff: 1s\n",
        am.addr
    );
    let probes = config(&dir, &endpoint.to_string(), &receivers, "");
    let agent = Daemon::start(&probes, &[]);
    let active = || am.alerts_named("InferenceEndpointDown").len();
    wait_until("the alert in Alertmanager", Duration::from_secs(20), || {
        active() == 1
    });
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(active(), 1, "re-sends keep it alive past its first endsAt");
    healthy.store(true, Ordering::SeqCst);
    wait_until("resolved", Duration::from_secs(20), || active() == 0);
    healthy.store(false, Ordering::SeqCst);
    wait_until("firing again", Duration::from_secs(20), || active() == 1);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        active(),
        1,
        "the old resolve, re-sent, must not undo the new alert"
    );
    let m = agent.metrics();
    assert!(
        metric_sum(
            &m,
            "inferprobe_notifications_total",
            &["receiver=\"am\"", "event=\"resend\"", "result=\"delivered\""]
        ) >= 5.0,
        "{m}"
    );
}

/// The same instant in Shanghai as a page's words give it: `2026-12-05 03:08:32 +08:00
/// (Asia/Shanghai)` for `2026-12-04T19:08:32Z`.
fn in_shanghai(rfc3339: &str) -> String {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339).unwrap_or_else(|e| panic!("{rfc3339}: {e}"));
    let local = t.with_timezone(&chrono::FixedOffset::east_opt(8 * 3600).unwrap());
    format!("{} (Asia/Shanghai)", local.format("%Y-%m-%d %H:%M:%S %:z"))
}

#[test]
fn with_agent_timezone_the_words_of_a_page_are_in_it_and_its_fields_stay_utc() {
    let pd = FakeReceiver::start(202);
    let hook = FakeReceiver::start(200);
    let healthy = Arc::new(AtomicBool::new(true));
    let endpoint = switch_server(healthy.clone());
    let dir = temp_dir("page-timezone");
    let probes = config(&dir, &endpoint.to_string(), &fake_receivers(&pd, &hook), "");
    let text = std::fs::read_to_string(&probes)
        .unwrap()
        .replace("agent:\n", "agent:\n  timezone: Asia/Shanghai\n");
    std::fs::write(&probes, text).unwrap();
    let agent = Daemon::start(&probes, &[]);
    wait_until("a good run", Duration::from_secs(10), || {
        metric_sum(
            &agent.metrics(),
            "inferprobe_runs_total",
            &["probe=\"llm-health\"", "result=\"success\""],
        ) >= 1.0
    });
    healthy.store(false, Ordering::SeqCst);
    wait_until("the page delivered", Duration::from_secs(15), || {
        pd.accepted().len() == 1 && hook.accepted().len() == 1
    });

    let page = &hook.accepted()[0]["alert"];
    let since = page["since"].as_str().unwrap();
    let good = page["last_good"]["at"].as_str().unwrap();
    for machine in [since, good, page["fired_at"].as_str().unwrap()] {
        assert!(machine.ends_with('Z'), "{machine}: a field, RFC 3339 in UTC");
    }
    let words = page["description"].as_str().unwrap();
    for needle in [
        format!("\nFailing since {} (", in_shanghai(since)),
        format!("\nLast good run: {}, TTFT", in_shanghai(good)),
    ] {
        assert!(words.contains(&needle), "{needle:?} not in:\n{words}");
    }
    let trigger = &pd.accepted()[0]["payload"];
    assert!(trigger["timestamp"].as_str().unwrap().ends_with('Z'), "{trigger}");
    assert_eq!(trigger["custom_details"]["failing_since"], since);
    assert_eq!(trigger["custom_details"]["description"], words);
    drop(agent);

    // test-alert's page says when it was sent, in the same zone.
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["test-alert", "--receiver", "hook", "-c"])
        .arg(&probes)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let sent = hook.accepted();
    let test = &sent.last().unwrap()["alert"];
    let words = test["description"].as_str().unwrap();
    let at = format!("\nSent at {}.", in_shanghai(test["fired_at"].as_str().unwrap()));
    assert!(words.ends_with(&at), "{at:?} not at the end of:\n{words}");
}

#[test]
fn alertmanager_gets_the_words_in_agent_timezone_and_starts_at_in_utc() {
    let Some(am) = Alertmanager::start(BLACKHOLE) else {
        return;
    };
    let dir = temp_dir("am-timezone");
    let receivers = format!(
        "  - name: am\n    kind: alertmanager\n    url: http://{}\n    max_backoff: 1s\n",
        am.addr
    );
    let endpoint = format!("127.0.0.1:{}", closed_port());
    let probes = config(&dir, &endpoint, &receivers, "");
    let text = std::fs::read_to_string(&probes)
        .unwrap()
        .replace("agent:\n", "agent:\n  timezone: Asia/Shanghai\n");
    std::fs::write(&probes, text).unwrap();
    let _agent = Daemon::start(&probes, &[]);
    wait_until("the down alert in Alertmanager", Duration::from_secs(20), || {
        !am.alerts_named("InferenceEndpointDown").is_empty()
    });
    let a = &am.alerts_named("InferenceEndpointDown")[0];
    let ann = &a["annotations"];
    let since = ann["failing_since"].as_str().unwrap();
    assert!(since.ends_with('Z'), "{ann}");
    let starts = chrono::DateTime::parse_from_rfc3339(a["startsAt"].as_str().unwrap()).unwrap();
    assert_eq!(starts, chrono::DateTime::parse_from_rfc3339(since).unwrap());
    let words = ann["description"].as_str().unwrap();
    let needle = format!("\nFailing since {} (", in_shanghai(since));
    assert!(words.contains(&needle), "{needle:?} not in:\n{words}");
}
