//! Endpoints and receivers that answer to attack whoever reads the agent's output:
//! terminal control sequences, fake output lines, bidirectional overrides, Slack
//! mentions and disguised links, HTML. Whatever they send is data: `once`, `test-alert`,
//! text and JSON logs, the status page and Slack show it and never obey it. JSON log
//! lines have each key once.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

/// An error body written to attack a terminal, a log reader and a chat channel.
const HOSTILE: &str = "boom \u{1b}[2J\u{1b}[31mRED\u{1b}]0;owned\u{7} tail\r\nFAKE ok 200 all good\n\u{202e}txet\u{2066}x\u{2069}\u{8}\u{7f}\u{85}\u{9b}1m <!channel> <https://evil.example|Runbook> <script>alert(1)</script>";

/// What no terminal or log line may carry raw.
const CONTROLS: [char; 12] = [
    '\u{1b}', '\u{7}', '\u{8}', '\u{7f}', '\u{85}', '\u{9b}', '\r', '\u{202e}', '\u{2066}', '\u{2069}',
    '\u{2028}', '\u{0}',
];

fn hostile_server(status: u16) -> std::net::SocketAddr {
    answering_server(move |_| reply(status, HOSTILE))
}

fn assert_inert(surface: &str, text: &str) {
    for c in CONTROLS {
        assert!(!text.contains(c), "{surface}: raw {c:?} in\n{text:?}");
    }
    for line in text.lines() {
        assert!(
            !line.trim_start().starts_with("FAKE"),
            "{surface}: a server's words made a line of their own:\n{text}"
        );
    }
}

fn run(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(args)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn once_and_test_alert_show_a_hostile_body_without_obeying_it() {
    let endpoint = hostile_server(500);
    let receiver = hostile_server(400);
    let dir = temp_dir("hostile-cli");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!(
            "receivers:\n  - name: hook\n    kind: webhook\n    url: http://{receiver}/hook\n\
             probes:\n  - name: evil\n    kind: http\n    url: http://{endpoint}/health\n"
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();

    let (table, stderr) = run(&["once", "-c", c]);
    assert!(
        table.contains("boom"),
        "the body's words are shown: {table}\n{stderr}"
    );
    assert!(
        table.contains("\\u{1b}[2J"),
        "escapes are shown, not obeyed: {table}"
    );
    assert_inert("once (table)", &format!("{table}{stderr}"));

    let (json, _) = run(&["once", "-c", c, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_inert("once (json message)", v["message"].as_str().unwrap());

    let (answer, stderr) = run(&["test-alert", "-c", c, "--location", "x"]);
    assert!(answer.contains("REJECTED") && answer.contains("boom"), "{answer}");
    assert_inert("test-alert", &format!("{answer}{stderr}"));
}

/// The daemon with text logs: every log line is one line, with nothing a terminal acts
/// on, whether the words came from a probe's endpoint or from a receiver's answer
/// (remote_write's, logged as it answered). Slack gets the endpoint's words escaped.
#[test]
fn text_logs_and_slack_carry_hostile_words_as_data() {
    let endpoint = hostile_server(500);
    let rw = hostile_server(400);
    let slack = FakeReceiver::start(200);
    let dir = temp_dir("hostile-text-log");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!(
            "agent:\n  location: here\n  remote_write:\n    url: http://{rw}/api/v1/write\n    interval: 1s\n\
             receivers:\n  - name: chat\n    kind: slack\n    url: http://{}/services/T0/B0/x\n    max_backoff: 1s\n\
             defaults:\n  interval: 1s\n  timeout: 900ms\n  alert: {{failure_threshold: 1, success_threshold: 1}}\n\
             probes:\n  - name: evil\n    kind: http\n    url: http://{endpoint}/health\n",
            slack.addr
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["--log-level", "debug", "run", "--listen", "127.0.0.1:0", "-c"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let keep = lines.clone();
    std::thread::spawn(move || {
        // Split on `\n` only: a raw `\r` must stay visible to the check.
        for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
            keep.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&line).into_owned());
        }
    });
    wait_until(
        "a failed run, a remote_write rejection and a Slack page",
        Duration::from_secs(20),
        || {
            let l = lines.lock().unwrap();
            l.iter().any(|l| l.contains("Probe run failed."))
                && l.iter().any(|l| l.contains("remote_write rejected"))
                && slack.accepted_count() >= 1
        },
    );
    let _ = child.kill();
    let _ = child.wait();
    let log = lines.lock().unwrap().join("\n");
    assert_inert("text log", &log);
    let failed = log.lines().find(|l| l.contains("Probe run failed.")).unwrap();
    assert!(failed.contains("boom") && failed.contains("error="), "{failed}");
    assert!(!failed.contains(" message="), "one message per line: {failed}");

    let page = &slack.accepted()[0];
    let text = page["text"].as_str().unwrap();
    assert!(text.contains("boom"), "the page quotes the error: {text}");
    for markup in ["<!channel>", "<https://", "<script>"] {
        assert!(!text.contains(markup), "{markup} reached Slack as markup: {text}");
    }
    assert!(text.contains("&lt;!channel&gt;"), "{text}");
}

/// JSON logs: every line is an object with each key once (the run's error is `error`,
/// tracing's `message` stays the event's own); the status page and the API show the
/// hostile body as text.
#[test]
fn json_logs_have_unique_keys_and_pages_show_hostile_words_as_text() {
    let endpoint = hostile_server(500);
    let dir = temp_dir("hostile-json-log");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!(
            "agent:\n  location: here\n\
             defaults:\n  interval: 1s\n  timeout: 900ms\n\
             probes:\n  - name: evil\n    kind: http\n    url: http://{endpoint}/health\n"
        ),
    )
    .unwrap();
    let mut d = Daemon::start(&config, &[]);
    d.wait_for_log("Probe run failed.", Duration::from_secs(15));
    wait_until(
        "the failed run is in the history",
        Duration::from_secs(10),
        || {
            http_get(&d.addr, "/api/v1/results?since=1h", None)
                .2
                .contains("boom")
        },
    );
    let logs = d.all_logs.lock().unwrap().clone();
    let mut failed = 0;
    for line in &logs {
        let keys = object_keys(line).unwrap_or_else(|| panic!("not a JSON object: {line}"));
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len(), "a key twice in {line}");
        if line.contains("Probe run failed.") {
            failed += 1;
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["message"], "Probe run failed.");
            assert!(v["error"].as_str().unwrap().contains("boom"), "{line}");
        }
    }
    assert!(failed >= 1);

    for path in [
        "/",
        "/probes/evil",
        "/api/v1/probes/evil",
        "/api/v1/results?since=1h",
    ] {
        let (status, head, body) = http_get(&d.addr, path, None);
        assert_eq!(status, 200, "{path}");
        assert!(body.contains("boom"), "{path} shows the error: {body}");
        assert_inert(path, &body);
        if path.starts_with("/api/") {
            // JSON strings: data whatever they hold, and served as JSON.
            assert!(head.to_ascii_lowercase().contains("application/json"), "{head}");
            continue;
        }
        for markup in ["<script>", "<https://evil", "<!channel>"] {
            assert!(!body.contains(markup), "{markup} raw in {path}");
        }
    }
}

/// The keys of a JSON object in order, repeats kept (a map type would keep only one).
fn object_keys(line: &str) -> Option<Vec<String>> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(k) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                keys.push(k);
            }
            Ok(keys)
        }
    }
    serde_json::Deserializer::from_str(line)
        .deserialize_map(Keys)
        .ok()
}
