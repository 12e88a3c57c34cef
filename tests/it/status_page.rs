//! The status page of `inferprobe demo`, rendered in a real headless Chromium: it loads
//! without a console error, shows every probe with its state within a minute, is
//! readable on a phone (no sideways scrolling), and links to a per-probe page. The
//! screenshots are kept in target/artifacts/ for people to look at.

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::browser::render;
use crate::support::http_get;

/// The demo's probes (src/demo.yaml).
const DEMO_PROBES: [&str; 14] = [
    "chat-healthy",
    "chat-slow",
    "chat-down",
    "chat-flaky",
    "completions-healthy",
    "claude-like",
    "ollama-generate",
    "digits",
    "health",
    "vision-chat",
    "small-chat",
    "small-completions",
    "small-burst",
    "small-cold",
];

struct Demo {
    child: std::process::Child,
    addr: String,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn start_demo() -> Demo {
    let mut child = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["--log-format", "json", "demo", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines().map_while(Result::ok);
    let line = lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("status page:"))
        .expect("the demo prints its status page URL");
    // Keep reading: a closed pipe would fail the demo's next line.
    std::thread::spawn(move || lines.for_each(drop));
    let addr = line
        .split("http://")
        .nth(1)
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    Demo { child, addr }
}

#[test]
fn the_demo_status_page_renders_in_chromium_with_every_probe_and_no_errors() {
    if crate::support::require_tool("chromium", "renders the status page in a real browser").is_none() {
        return;
    }
    let started = Instant::now();
    let demo = start_demo();
    // Useful within a minute: every probe has run and the failing one's page is out.
    crate::support::wait_until(
        "every demo probe ran and chat-down is paged",
        Duration::from_secs(50),
        || {
            let (_, _, probes) = http_get(&demo.addr, "/api/v1/probes", None);
            let (_, _, alerts) = http_get(&demo.addr, "/api/v1/alerts", None);
            let v: serde_json::Value = serde_json::from_str(&probes).unwrap();
            let ran = v["probes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| !p["last_run"].is_null());
            ran && alerts.contains("\"probe\":\"chat-down\"")
        },
    );
    let url = format!("http://{}/", demo.addr);
    let desktop = render(&url, 1280, 1000, false).expect("chromium is there");
    let shot = desktop.save_png("status-page-desktop");
    eprintln!(
        "status page after {:.0} s: {} bytes of text, screenshot {}",
        started.elapsed().as_secs_f64(),
        desktop.text.len(),
        shot.display()
    );
    assert!(
        desktop.console_errors.is_empty(),
        "console errors: {:#?}",
        desktop.console_errors
    );
    assert!(desktop.title.contains("inferprobe"), "{}", desktop.title);
    for probe in DEMO_PROBES {
        assert!(
            desktop.text.contains(probe),
            "{probe} is not on the page:\n{}",
            desktop.text
        );
    }
    let text = &desktop.text;
    assert!(text.contains("DOWN"), "{text}");
    assert!(text.contains("UP"), "{text}");
    assert!(
        text.contains("Cold data"),
        "a fresh agent says its data is cold:\n{text}"
    );
    for window in ["1 h", "24 h", "7 d", "availability", "P95 total", "P95 TTFT"] {
        assert!(text.contains(window), "{window} missing:\n{text}");
    }
    assert!(text.contains("Last failure"), "{text}");
    // The failing probe comes first and says why.
    let down_at = text.find("chat-down").unwrap();
    let healthy_at = text.find("chat-healthy").unwrap();
    assert!(down_at < healthy_at, "problems first");
    assert!(text.contains("http_5xx"), "{text}");
    // A minute of data is not a week: "No failure in the 40 s covered".
    assert!(!text.contains("No failure in 7 days"), "{text}");
    assert!(text.contains(" covered."), "{text}");
    // A sub-millisecond figure is shown as such, never "0 ms".
    for (i, _) in text.match_indices("0 ms") {
        let before = text[..i].chars().last().unwrap_or(' ');
        assert!(
            before.is_ascii_digit() || before == '.',
            "a bare \"0 ms\": {}",
            &text[i.saturating_sub(40)..i + 4]
        );
    }

    // A phone: no sideways scrolling on the overview or a probe's page.
    let phone = render(&url, 390, 844, true).expect("chromium");
    phone.save_png("status-page-phone");
    assert!(phone.console_errors.is_empty(), "{:#?}", phone.console_errors);
    assert!(
        phone.scroll_width <= phone.viewport_width,
        "the overview scrolls sideways on a phone: {} > {}",
        phone.scroll_width,
        phone.viewport_width
    );
    let probe_url = format!("http://{}/probes/chat-down", demo.addr);
    let page = render(&probe_url, 390, 844, true).expect("chromium");
    page.save_png("status-page-probe-phone");
    assert!(page.console_errors.is_empty(), "{:#?}", page.console_errors);
    assert!(
        page.scroll_width <= page.viewport_width,
        "{} > {}",
        page.scroll_width,
        page.viewport_width
    );
    assert!(page.text.contains("Recent runs"), "{}", page.text);
    // The page's link for people is the probe's page, not its JSON.
    assert!(
        page.text
            .contains(&format!("Details: http://{}/probes/chat-down", demo.addr)),
        "{}",
        page.text
    );
    assert!(
        page.text.contains("HTTP 500: simulated internal error"),
        "{}",
        page.text
    );
    // An unknown probe is a 404, not an empty page.
    let (status, _, _) = http_get(&demo.addr, "/probes/nope", None);
    assert_eq!(status, 404);
}
