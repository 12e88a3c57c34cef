//! Hostile input to the agent's own parsers, through the real binary: query strings and
//! path segments sent to its port, config files that are not what they seem, a
//! `--prometheus` URL read differently by different parsers, and a second agent on a
//! data directory whose lock file was deleted. Each case once panicked a handler, hung
//! or ate memory, or was silently read as something else (RELIABILITY.md, "Hostile
//! traffic: input parsers and config").

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Daemon, closed_port, http_get, require_tool, temp_dir};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_inferprobe")
}

/// An agent with one probe of a closed port (its runs fail; nothing here needs them).
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("probes.yaml");
    std::fs::write(
        &path,
        format!(
            "agent:\n  location: test\nprobes:\n  - name: web\n    kind: http\n    url: http://127.0.0.1:{}/health\n    interval: 1h\n",
            closed_port()
        ),
    )
    .unwrap();
    path
}

/// Runs the binary to its end, failing the test (not hanging it) if it takes more than
/// a minute: a FIFO or an endless file once made `check` wait forever.
fn run_to_end(args: &[&str]) -> Output {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("inferprobe {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A raw request line, so that bytes no client library would send reach the agent.
fn raw_get(addr: &str, target: &[u8]) -> (u16, String) {
    let (status, _, body) = crate::support::http_get_raw(addr, target, "");
    (status, body)
}

#[test]
fn hostile_queries_and_paths_get_400_naming_the_parameter_and_never_panic_a_handler() {
    let dir = temp_dir("hostile-api");
    let mut agent = Daemon::start(&config(&dir), &[]);
    let long = format!("/api/v1/results?probe={}", "a".repeat(10_000));
    let cases: Vec<(&[u8], &str)> = vec![
        // Each of the first three gave an empty reply and a panic in the log.
        (b"/api/v1/results?since=1e308", "since=\"1e308\" is out of range"),
        (b"/api/v1/results?until=99999999999999999999", "until="),
        (b"/api/v1/results?since=100y", "since=\"100y\" is out of range"),
        (b"/api/v1/results?since=-1", "Unix seconds are 0 or more"),
        (
            b"/api/v1/results?since=0000-01-01T00:00:00%2B00:00",
            "out of range",
        ),
        (b"/api/v1/results?limit=18446744073709551616", "limit="),
        (b"/api/v1/results?cursor=1e308.1", "cursor="),
        (b"/api/v1/results?since=%00", "since="),
        (
            b"/api/v1/results?since=%zz",
            "since: the value has a `%` not followed by two hex digits",
        ),
        (b"/api/v1/results?probe=%FF", "probe: the value is not UTF-8"),
        (b"/api/v1/results?probe=\xff\xfe", "probe"),
        (b"/api/v1/results?since=1h&since=2h", "since is given twice"),
        (b"/api/v1/results?probe=a%0Ab", "is not a probe name"),
        (long.as_bytes(), "at most 4096"),
        (b"/api/v1/probes/a%20b", "is not a probe name"),
        (b"/probes/%3Cscript%3E", "is not a probe name"),
        (b"/probes/a%00b", "is not a probe name"),
    ];
    for (target, says) in &cases {
        let (status, body) = raw_get(&agent.addr, target);
        let shown = String::from_utf8_lossy(&target[..target.len().min(80)]).into_owned();
        // `\xff` in a request line is refused by the HTTP layer itself, before any handler.
        assert_eq!(status, 400, "{shown}: {body}");
        if !target.contains(&0xff) {
            assert!(body.contains(says), "{shown}: {body}");
            assert!(body.len() < 600, "{shown}: a {} byte answer", body.len());
        }
    }
    // A 1 MB request line is refused by the HTTP layer (431) before any handler.
    let huge = format!("/api/v1/results?probe={}", "a".repeat(1 << 20));
    assert_eq!(raw_get(&agent.addr, huge.as_bytes()).0, 431);
    // The agent is still there, and nothing panicked.
    assert_eq!(http_get(&agent.addr, "/healthz", None).0, 200);
    let (status, _, body) = http_get(&agent.addr, "/api/v1/results?since=1h&probe=web", None);
    assert_eq!(status, 200, "{body}");
    agent.signal("TERM");
    let _ = agent.child.wait();
    let logs = agent.all_logs.lock().unwrap().join("\n");
    assert!(!logs.contains("panicked"), "{logs}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn deleting_the_lock_file_does_not_let_a_second_agent_share_the_data_directory() {
    let dir = temp_dir("hostile-lock");
    let data = dir.join("data");
    let config = config(&dir);
    let data_arg = data.to_str().unwrap();
    let _first = Daemon::start(&config, &["--data-dir", data_arg]);
    std::fs::remove_file(data.join("inferprobe.lock")).unwrap();
    let second = run_to_end(&[
        "run",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data_arg,
        "-c",
        config.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second agent ran: {stderr}");
    assert!(
        stderr.contains(&format!(
            "the data directory {} is in use by another inferprobe",
            data.display()
        )),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_refuses_a_fifo_and_devices_as_files_without_hanging_or_reading_them() {
    let dir = temp_dir("hostile-files");
    let Some(mkfifo) = require_tool("mkfifo", "to make a FIFO for a prompt file") else {
        return;
    };
    let fifo = dir.join("prompts.txt");
    assert!(Command::new(mkfifo).arg(&fifo).status().unwrap().success());
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        "probes:\n  - name: chat\n    kind: openai_chat\n    url: http://127.0.0.1:8000/v1/chat/completions\n    model: m\n    prompts:\n      file: prompts.txt\n",
    )
    .unwrap();
    // On the old code: open(2) waited for a writer, forever.
    let out = run_to_end(&["check", "-c", config.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(64), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{}:7:13: probe \"chat\": probes[0].prompts.file: `prompts.txt` is a FIFO, not a regular file",
            config.display()
        )),
        "{stdout}"
    );
    // The config file itself: a device is refused (a pipe, as from `<(...)`, is read).
    let out = run_to_end(&["check", "-c", "/dev/zero"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(64), "{stdout}");
    assert!(
        stdout.contains("/dev/zero:0:0: cannot read the file: is a character device"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_answers_a_400_kb_nested_flow_with_a_positioned_error() {
    let dir = temp_dir("hostile-nesting");
    for (name, text) in [
        ("seq.yaml", format!("probes: {}", "[".repeat(400_000))),
        ("map.yaml", format!("probes: {}", "{a: ".repeat(100_000))),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, &text).unwrap();
        // On the old code this ran for minutes (over a minute in a debug build).
        let out = run_to_end(&["check", "-c", path.to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(64), "{stdout}");
        let column = if name == "seq.yaml" { 9 + 64 } else { 9 + 4 * 64 };
        assert!(
            stdout.contains(&format!(
                "{}:1:{column}: `[` and `{{` nested more than 64 levels deep",
                path.display()
            )),
            "{stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_refuses_a_prometheus_url_that_parsers_read_differently() {
    for (url, says) in [
        // WHATWG parsing alone reads host `prom.example` into both.
        ("http:///prom.example:9090", "has no host"),
        ("http:prom.example:9090", "must start with http:// or https://"),
        ("http://prom.example:9090\\@evil.example", "backslash"),
        ("http://prom.example:99999", "has port 99999, out of range"),
    ] {
        let out = run_to_end(&["report", "-c", "/nonexistent/probes.yaml", "--prometheus", url]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{url}: {stderr}");
        assert!(
            stderr.contains("error: --prometheus: bad Prometheus URL"),
            "{url}: {stderr}"
        );
        assert!(stderr.contains(says), "{url}: {stderr}");
    }
}

#[test]
fn report_refuses_times_it_could_not_print() {
    let dir = temp_dir("hostile-report-times");
    for (since, says) in [
        // Before 1970: the old report panicked printing it (exit 101).
        (
            "100y",
            "--since \"100y\" is out of range: times run from 1970-01-01 to 9999-12-31",
        ),
        ("1e308", "--since \"1e308\" is out of range"),
        ("-1", "--since \"-1\" is not a time: Unix seconds are 0 or more"),
    ] {
        let data = dir.join("data");
        let out = run_to_end(&[
            "report",
            "-c",
            "/nonexistent/probes.yaml",
            "--data-dir",
            data.to_str().unwrap(),
            &format!("--since={since}"),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{since}: {stderr}");
        assert!(stderr.contains(says), "{since}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
