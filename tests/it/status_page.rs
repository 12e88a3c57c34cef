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

/// A real agent's cold probe, its warm-ups and a burst probe, on the API and the status
/// page: an Ollama-speaking simulator unloads its model after a second idle, so each run
/// of the cold probe finds it idle (a cold start) and waits for a 1.5 s load. A plain
/// probe of the same endpoint, held off before each cold run, finds the model unloaded
/// too: for a run that did not go looking for it, Ollama's `load_duration` is a restart,
/// and the endpoint's runs after it fall in its warm-up, the cold probe's included. The
/// runs' JSON carries what they met; the cold probe's page marks the cold starts and
/// shades the warm-ups, and in Chromium (where installed) both are drawn.
#[tokio::test(flavor = "multi_thread")]
async fn cold_starts_and_warmups_reach_the_api_and_the_charts() {
    use crate::support::{Daemon, temp_dir, wait_until};
    // The model unloads after half a second idle: most of `sleepy`'s runs come later
    // than that after the last request, whatever their phase, and find it gone.
    let (unloading, warm) = crate::support::unloading_and_warm().await;
    let dir = temp_dir("status-page-cold");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!(
            "agent: {{location: here}}\nprobes:\n  - name: cold\n    kind: ollama\n    url: http://{}/api/chat\n    model: m\n    interval: 5s\n    timeout: 3s\n    cold: {{idle: 1500ms}}\n  - name: sleepy\n    kind: ollama\n    url: http://{}/api/chat\n    model: m\n    interval: 2s\n  - name: burst\n    kind: ollama\n    url: http://{}/api/chat\n    model: m\n    interval: 2s\n    burst: 3\n",
            unloading.addr, unloading.addr, warm.addr
        ),
    )
    .unwrap();
    let agent = Daemon::start(&config, &[]);
    let mut runs = serde_json::Value::Null;
    // Settled cold runs, the latest in a warm-up of the plain probe's making.
    wait_until(
        "cold runs in a warm-up in the history",
        Duration::from_secs(60),
        || {
            let (_, _, body) = http_get(&agent.addr, "/api/v1/results?probe=cold&since=5m", None);
            runs = serde_json::from_str(&body).unwrap_or_default();
            runs["count"].as_u64().unwrap_or(0) >= 2
                && runs["results"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|r| r["warmup_cause"].is_string()))
        },
    );
    for run in runs["results"].as_array().unwrap() {
        assert_eq!(run["start"], "cold", "{runs:#}");
        assert!(run["idle_seconds"].as_f64().unwrap() >= 1.5, "{run:#}");
        assert!(run["waited_seconds"].as_f64().is_some(), "{run:#}");
        assert!(run["burst_spread"].is_null(), "{run:#}");
    }
    let warming = runs["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["warmup_cause"].is_string())
        .unwrap();
    assert!(
        warming["warmup_cause"]
            .as_str()
            .unwrap()
            .contains("loaded the model for this request"),
        "{warming:#}"
    );
    assert!(warming["warmup_since"].is_string(), "{warming:#}");
    wait_until("a burst run in the history", Duration::from_secs(30), || {
        let (_, _, body) = http_get(&agent.addr, "/api/v1/results?probe=burst&since=5m", None);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["results"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["burst_slowdown"].as_f64().is_some()))
    });

    for path in ["/", "/probes/cold"] {
        let (status, _, html) = http_get(&agent.addr, path, None);
        assert_eq!(status, 200, "{path}");
        assert!(html.matches("<g class=cold-run>").count() >= 2, "{path}: {html}");
        assert!(html.contains("<g class=warmup>"), "{path}: {html}");
        assert!(html.contains("the server loaded the model"), "{path}: {html}");
        assert!(html.contains("○ cold start</span>"), "{path}: {html}");
    }
    let (_, _, page) = http_get(&agent.addr, "/probes/cold", None);
    assert!(page.contains("<span class=\"tag cold\">cold</span>"), "{page}");
    let (_, _, page) = http_get(&agent.addr, "/probes/burst", None);
    assert!(page.contains("Last burst"), "{page}");

    // Drawn in a real browser: a band of some width, a cold mark of some size.
    let drawn = "(() => { const b = document.querySelector('g.warmup rect'); \
                 const c = document.querySelector('g.cold-run > :last-child'); \
                 return [b ? b.getBoundingClientRect().width : 0, c ? c.getBoundingClientRect().width : 0]; })()";
    if let Some(page) = crate::support::browser::render_with(
        &format!("http://{}/probes/cold", agent.addr),
        1280,
        900,
        false,
        drawn,
    ) {
        eprintln!(
            "the cold probe's page: {}",
            page.save_png("cold-starts").display()
        );
        assert!(page.console_errors.is_empty(), "{:#?}", page.console_errors);
        let sizes = page.evaluated.as_array().unwrap();
        assert!(sizes[0].as_f64().unwrap_or(0.0) >= 2.0, "{page:?}");
        assert!(sizes[1].as_f64().unwrap_or(0.0) >= 5.0, "{page:?}");
        assert!(page.text.contains("cold start"), "the legend: {}", page.text);
    }
}
