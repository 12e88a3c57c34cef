//! What goes out on a schedule, through a real SMTP server (aiosmtpd): a receiver's
//! daily digest and the weekly report, each tested with a schedule of a few seconds; and
//! `report --send` as a timer or CronJob runs it, with none of the agent's environment.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::smtp::{Mode, SmtpSink};
use crate::support::*;

/// Waits for `sink` to hold a message whose subject starts with `prefix` and ends with
/// `suffix`.
fn wait_for_mail(sink: &SmtpSink, prefix: &str, suffix: &str, within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let got = sink.messages();
        if let Some(m) = got.iter().find(|m| {
            m.envelope["subject"]
                .as_str()
                .is_some_and(|s| s.starts_with(prefix) && s.ends_with(suffix))
        }) {
            return m.envelope.clone();
        }
        let subjects: Vec<String> = got.iter().map(|m| m.envelope["subject"].to_string()).collect();
        assert!(
            Instant::now() < deadline,
            "no message `{prefix}...` within {within:?}; got {subjects:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A robot's markdown summary of a report that has the probe in it (one sent before
/// the first run reached the history has none).
fn summarises_the_probe(r: &Received) -> bool {
    let body = r.json();
    body["msgtype"] == "markdown"
        && body["markdown"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("chat-health"))
}

#[test]
fn a_digest_and_the_weekly_report_arrive_by_smtp_on_their_schedules() {
    let _turn = heavy();
    let Some(mail) = SmtpSink::start(Mode::Plain, None, None) else {
        return;
    };
    // A WeCom robot, as the platform answers.
    let (robot, posts) = recording_server(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\nConnection: close\r\n\r\n{\"errcode\":0,\"errmsg\":\"ok\"}");
    let dir = temp_dir("scheduled");
    let path = dir.join("probes.yaml");
    let refused = closed_port();
    std::fs::write(
        &path,
        format!(
            "agent:\n  location: cn-east\n  timezone: Asia/Shanghai\n\
             receivers:\n\
             \x20 - name: daily\n    kind: email\n    url: smtp://127.0.0.1:{port}\n    starttls: false\n    from: probes@example.com\n    to: [oncall@example.com]\n    digest: {{schedule: \"*/4 * * * * *\"}}\n\
             \x20 - name: managers\n    kind: email\n    url: smtp://127.0.0.1:{port}\n    starttls: false\n    from: probes@example.com\n    to: [managers@example.com]\n\
             \x20 - name: team-chat\n    kind: wecom\n    url: http://{robot}/cgi-bin/webhook/send?key=K\n\
             report:\n  receivers: [managers, team-chat]\n  period: 1h\n  schedule: \"*/6 * * * * *\"\n  link: https://status.example.com/report.html\n\
             probes:\n  - name: chat-health\n    kind: http\n    url: http://127.0.0.1:{refused}/health\n    interval: 1s\n    timeout: 500ms\n    alert:\n      failure_threshold: 2\n      receivers: [daily]\n    slo: {{availability: 99.5}}\n",
            port = mail.port,
        ),
    )
    .unwrap();
    let _agent = Daemon::start(&path, &["--data-dir", dir.to_str().unwrap()]);

    // The digest: the page waits for it, then one message says what fired and what is
    // still open, with the time in the agent's zone.
    let digest = wait_for_mail(
        &mail,
        "inferprobe daily digest: 1 fired",
        "",
        Duration::from_secs(40),
    );
    assert_eq!(digest["to"], serde_json::json!(["oncall@example.com"]));
    let text = digest["text"].as_str().unwrap();
    assert!(
        text.contains("Fired:") && text.contains("chat-health is DOWN"),
        "{text}"
    );
    assert!(text.contains("+08:00"), "times in Asia/Shanghai: {text}");
    let html = digest["html"].as_str().unwrap();
    assert!(
        html.contains("/api/v1/probes/chat-health"),
        "a link to the probe: {html}"
    );
    // Nothing of it was sent as a page on its own.
    assert!(
        mail.messages().iter().all(|m| !m.envelope["subject"]
            .as_str()
            .unwrap_or_default()
            .starts_with("[inferprobe]")),
        "a digest receiver gets no pages one by one"
    );

    // The report: the HTML to the managers, its verdict in the subject and the text.
    // (One sent before the first run reached the history says `0 of 0 probes`.)
    let report = wait_for_mail(
        &mail,
        "inferprobe SLO report",
        "0 of 1 probes met their SLO",
        Duration::from_secs(40),
    );
    assert_eq!(report["to"], serde_json::json!(["managers@example.com"]));
    let html = report["html"].as_str().unwrap();
    assert!(
        html.contains("<svg") && html.contains("SLO NOT MET"),
        "the HTML report"
    );
    assert!(html.contains("Asia/Shanghai"), "its times in the agent's zone");
    let text = report["text"].as_str().unwrap();
    assert!(text.contains("❌ chat-health: SLO NOT MET"), "{text}");
    assert!(text.contains("https://status.example.com/report.html"), "{text}");
    // The robot: the short summary as markdown, the link to the full report.
    wait_until("the robot has the summary", Duration::from_secs(10), || {
        posts.lock().unwrap().iter().any(summarises_the_probe)
    });
    let summary = posts
        .lock()
        .unwrap()
        .iter()
        .find(|r| summarises_the_probe(r))
        .unwrap()
        .json();
    let content = summary["markdown"]["content"].as_str().unwrap();
    assert!(content.starts_with("### inferprobe SLO report"), "{content}");
    assert!(content.contains("❌ chat-health: SLO NOT MET"), "{content}");
    assert!(
        content.contains("[The full report](https://status.example.com/report.html)"),
        "{content}"
    );
    assert!(!content.contains("<svg"), "no HTML to a robot");
}

#[test]
fn report_send_needs_only_the_receivers_it_sends_to() {
    let Some(mail) = SmtpSink::start(Mode::Plain, None, None) else {
        return;
    };
    let dir = temp_dir("report-send");
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        format!(
            "agent:\n  listen: ${{LISTEN}}\n  location: ${{REGION}}\n\
             receivers:\n\
             \x20 - name: pager\n    kind: pagerduty\n    routing_key: ${{PAGERDUTY_KEY}}\n\
             \x20 - name: managers\n    kind: email\n    url: smtp://127.0.0.1:{}\n    starttls: false\n    from: probes@example.com\n    to: [\"${{REPORT_TO:-managers@example.com}}\"]\n\
             report:\n  receivers: [managers]\n  timezone: Asia/Shanghai\n\
             probes:\n  - name: chat\n    kind: openai_chat\n    url: ${{ENDPOINT}}/v1/chat/completions\n    model: m\n    slo: {{ttft_p95: 2s}}\n",
            mail.port
        ),
    )
    .unwrap();
    // An empty store, as a new agent's.
    std::fs::create_dir_all(dir.join("data")).unwrap();
    inferprobe::store::AlertStore::open(&dir.join("data")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["report", "--send", "--data-dir"])
        .arg(dir.join("data"))
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("managers") && stdout.contains("accepted"),
        "{stdout}"
    );
    wait_until("the report arrived", Duration::from_secs(5), || {
        mail.messages().len() == 1
    });
    let m = &mail.messages()[0].envelope;
    assert_eq!(m["to"], serde_json::json!(["managers@example.com"]));
    assert!(
        m["subject"]
            .as_str()
            .unwrap()
            .starts_with("inferprobe SLO report")
    );
    // In report.timezone, as the agent's own scheduled report is.
    assert!(m["html"].as_str().unwrap().contains("Asia/Shanghai"), "{m}");
}
