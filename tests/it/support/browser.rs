//! A page rendered by a real headless Chromium (Debian's `chromium`), driven over the Chrome
//! DevTools Protocol: console errors, visible text, layout width, title and a PNG
//! screenshot. For tests of the HTML status page.
//!
//! Each `render` starts its own browser with a fresh profile and kills it (and removes the
//! profile) on the way out, also when the test panics.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use tungstenite::WebSocket;
use tungstenite::protocol::WebSocketConfig;

/// How long the browser may take to start, and a page to fire its load event.
const START_TIMEOUT: Duration = Duration::from_secs(20);
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);
/// After the load event: how long to wait at most for the network to go quiet (scripts
/// that fetch data after load), and then for late events (a favicon's 404) to arrive.
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
const SETTLE: Duration = Duration::from_millis(300);

/// What a page looked like once loaded.
#[derive(Clone)]
pub struct Rendered {
    /// Console errors and assertions, uncaught exceptions, and browser-side errors such as
    /// failed resource loads ("Failed to load resource: ... 404"), each with where from.
    pub console_errors: Vec<String>,
    /// `document.body.innerText`.
    pub text: String,
    /// `document.documentElement.scrollWidth`: wider than `viewport_width` means the page
    /// scrolls sideways.
    pub scroll_width: i64,
    /// `window.innerWidth`.
    pub viewport_width: i64,
    /// The whole page (beyond the viewport), as PNG.
    pub png: Vec<u8>,
    pub title: String,
    /// What the caller's expression (see [`render_with`]) returned, by value; null
    /// without one.
    pub evaluated: Value,
}

impl std::fmt::Debug for Rendered {
    /// Everything but the PNG's bytes (its size instead).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendered")
            .field("title", &self.title)
            .field("console_errors", &self.console_errors)
            .field("scroll_width", &self.scroll_width)
            .field("viewport_width", &self.viewport_width)
            .field("text", &self.text)
            .field("evaluated", &self.evaluated)
            .field("png_bytes", &self.png.len())
            .finish()
    }
}

impl Rendered {
    /// Writes the screenshot to `target/artifacts/NAME.png` and returns the path.
    pub fn save_png(&self, name: &str) -> PathBuf {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/artifacts");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, &self.png).unwrap();
        path
    }
}

/// Loads `url` in headless Chromium with a `width` x `height` viewport (`mobile`: as a
/// phone would, honouring `<meta name=viewport>`). None when chromium is not installed on a
/// developer's machine (the caller skips); panics under CI=true, on a navigation error, or
/// when the page does not load within 20 s.
pub fn render(url: &str, width: u32, height: u32, mobile: bool) -> Option<Rendered> {
    render_with(url, width, height, mobile, "null")
}

/// As [`render`], and once the page has settled, `expression` (JavaScript, run by the
/// DevTools protocol, not by the page) evaluated in it: how a test reads the DOM and
/// computed styles of a page that has no script of its own.
pub fn render_with(url: &str, width: u32, height: u32, mobile: bool, expression: &str) -> Option<Rendered> {
    let bin = super::require_tool(
        "chromium",
        "renders the HTML status page in a real browser; apt-get install chromium",
    )?;
    let browser = Browser::start(&bin);
    let mut page = browser.new_page();

    page.call("Page.enable", json!({}));
    page.call("Page.setLifecycleEventsEnabled", json!({"enabled": true}));
    page.call("Runtime.enable", json!({}));
    page.call("Log.enable", json!({}));
    page.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
    );
    if mobile {
        page.call("Emulation.setTouchEmulationEnabled", json!({"enabled": true}));
    }

    let nav = page.call("Page.navigate", json!({"url": url}));
    if let Some(error) = nav["errorText"].as_str().filter(|e| !e.is_empty()) {
        panic!("chromium could not open {url}: {error}");
    }
    let loader = nav["loaderId"].as_str().unwrap_or_default().to_owned();
    let deadline = Instant::now() + LOAD_TIMEOUT;
    if !page.wait_for(deadline, |e| e["method"] == "Page.loadEventFired") {
        panic!(
            "{url} did not fire its load event within {LOAD_TIMEOUT:?} in chromium; errors so far: {:#?}",
            page.console_errors
        );
    }
    // Scripts that fetch after load: wait for half a second without network requests.
    let deadline = Instant::now() + IDLE_TIMEOUT;
    page.wait_for(deadline, |e| {
        e["method"] == "Page.lifecycleEvent"
            && e["params"]["name"] == "networkIdle"
            && (loader.is_empty() || e["params"]["loaderId"] == loader.as_str())
    });
    page.wait_for(Instant::now() + SETTLE, |_| false);

    let facts = page.call(
        "Runtime.evaluate",
        json!({
            "expression": "({text: document.body ? document.body.innerText : '', \
                scrollWidth: document.documentElement.scrollWidth, \
                innerWidth: window.innerWidth, title: document.title})",
            "returnByValue": true,
        }),
    );
    let facts = &facts["result"]["value"];
    let evaluated = page.call(
        "Runtime.evaluate",
        json!({"expression": expression, "returnByValue": true}),
    );
    if let Some(e) = evaluated.get("exceptionDetails") {
        panic!("the test's expression threw in {url}: {e}");
    }
    let evaluated = evaluated["result"]["value"].clone();
    let shot = page.call(
        "Page.captureScreenshot",
        json!({"format": "png", "captureBeyondViewport": true}),
    );
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().expect("screenshot data"))
        .expect("screenshot is base64");

    Some(Rendered {
        console_errors: std::mem::take(&mut page.console_errors),
        text: facts["text"].as_str().unwrap_or_default().to_owned(),
        scroll_width: facts["scrollWidth"].as_i64().unwrap_or(0),
        viewport_width: facts["innerWidth"].as_i64().unwrap_or(0),
        png,
        title: facts["title"].as_str().unwrap_or_default().to_owned(),
        evaluated,
    })
}

/// A running chromium with its own profile directory; killed (the whole process group)
/// and the directory removed on drop.
struct Browser {
    child: Child,
    profile: PathBuf,
    /// host:port of the DevTools endpoint.
    devtools: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Browser {
    fn start(bin: &std::path::Path) -> Browser {
        let profile = super::temp_dir("chromium");
        // Chromium puts its singleton socket in a new directory under TMPDIR, which a
        // killed browser leaves behind: keep it inside the profile, removed on drop.
        let tmp = profile.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let mut child = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-default-apps",
                "--mute-audio",
                "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .env("TMPDIR", &tmp)
            // Its own process group, so that drop ends the renderers and helpers too.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let keep = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("DevTools listening on ws://") {
                    let _ = tx.send(rest.split('/').next().unwrap_or_default().to_owned());
                }
                keep.lock().unwrap().push(line);
            }
        });
        let mut browser = Browser {
            child,
            profile,
            devtools: String::new(),
            stderr,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => browser.devtools = addr,
            Err(_) => panic!(
                "chromium printed no \"DevTools listening on\" line within {START_TIMEOUT:?}; stderr:\n{}",
                browser.stderr.lock().unwrap().join("\n")
            ),
        }
        browser
    }

    /// Opens a new tab on about:blank (`PUT /json/new`) and connects to it.
    fn new_page(&self) -> Page {
        let mut s = TcpStream::connect(&self.devtools).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "PUT /json/new?about:blank HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.devtools
        )
        .unwrap();
        // Chromium keeps the connection open despite `Connection: close`: read the head,
        // then Content-Length bytes.
        let mut data = Vec::new();
        let mut buf = [0u8; 8192];
        let raw = loop {
            let n = s
                .read(&mut buf)
                .unwrap_or_else(|e| panic!("reading PUT /json/new from chromium: {e}"));
            data.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&data).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.trim().parse::<usize>().ok());
                if n == 0 || length.is_some_and(|l| body.len() >= l) {
                    break text;
                }
            } else if n == 0 {
                break text;
            }
        };
        let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
        let target: Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("PUT /json/new answered {raw:?}: {e}"));
        let ws_url = target["webSocketDebuggerUrl"]
            .as_str()
            .unwrap_or_else(|| panic!("no webSocketDebuggerUrl in {target}"));

        let stream = TcpStream::connect(&self.devtools).unwrap();
        stream.set_nodelay(true).unwrap();
        // The handshake gets the start-up allowance: on a loaded 2-core machine Chromium
        // can take well over 100 ms to answer it, and a timed-out read mid-handshake is
        // an error, not a retry.
        stream.set_read_timeout(Some(START_TIMEOUT)).unwrap();
        // Full-page screenshots arrive as one large message.
        let config = WebSocketConfig::default()
            .max_message_size(Some(512 << 20))
            .max_frame_size(None);
        let (ws, _) = tungstenite::client::client_with_config(ws_url, stream, Some(config))
            .unwrap_or_else(|e| panic!("websocket to {ws_url}: {e}"));
        // Then short reads, so that waiting for an event can give up at its deadline.
        ws.get_ref()
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Page {
            ws,
            next_id: 0,
            console_errors: Vec::new(),
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // SIGTERM first: chromium then ends and reaps its own helpers (killed outright,
        // they linger as zombies of init for a moment). Whatever is left after 5 s, and
        // the whole group on the way, is killed.
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Helpers may still be going away and writing to the profile.
        for _ in 0..20 {
            if std::fs::remove_dir_all(&self.profile).is_ok() || !self.profile.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A DevTools connection to one tab. Events seen while waiting are scanned for errors.
struct Page {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    console_errors: Vec<String>,
}

impl Page {
    /// Sends a command and returns its result; panics on a protocol error or after 30 s.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws
            .send(tungstenite::Message::text(msg))
            .unwrap_or_else(|e| panic!("sending {method}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let Some(msg) = self.next(deadline) else {
                panic!("chromium did not answer {method} within 30 s");
            };
            if msg["id"] == id {
                if let Some(error) = msg.get("error") {
                    panic!("{method} failed: {error}");
                }
                return msg["result"].clone();
            }
        }
    }

    /// Reads events until one satisfies `done` (true) or `deadline` passes (false).
    fn wait_for(&mut self, deadline: Instant, done: impl Fn(&Value) -> bool) -> bool {
        while let Some(msg) = self.next(deadline) {
            if done(&msg) {
                return true;
            }
        }
        false
    }

    /// The next message before `deadline`, after noting any error it reports.
    fn next(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            if Instant::now() >= deadline {
                return None;
            }
            match self.ws.read() {
                Ok(tungstenite::Message::Text(text)) => {
                    let msg: Value = serde_json::from_str(text.as_str()).unwrap();
                    if let Some(error) = describe_error(&msg) {
                        self.console_errors.push(error);
                    }
                    return Some(msg);
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("DevTools connection to chromium failed: {e}"),
            }
        }
    }
}

/// An error the page reported: console.error/console.assert, an uncaught exception, or a
/// browser-side log entry at level "error" (failed loads, blocked content).
fn describe_error(msg: &Value) -> Option<String> {
    let p = &msg["params"];
    match msg["method"].as_str()? {
        "Runtime.consoleAPICalled" if p["type"] == "error" || p["type"] == "assert" => {
            let args: Vec<String> = p["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| match &a["value"] {
                    Value::String(s) => s.clone(),
                    Value::Null => a["description"].as_str().unwrap_or("undefined").to_owned(),
                    v => v.to_string(),
                })
                .collect();
            let frame = &p["stackTrace"]["callFrames"][0];
            Some(format!(
                "console.{}: {}{}",
                p["type"].as_str().unwrap_or_default(),
                args.join(" "),
                location(&frame["url"], &frame["lineNumber"])
            ))
        }
        "Runtime.exceptionThrown" => {
            let d = &p["exceptionDetails"];
            let what = d["exception"]["description"]
                .as_str()
                .or(d["text"].as_str())
                .unwrap_or("exception");
            Some(format!(
                "uncaught: {what}{}",
                location(&d["url"], &d["lineNumber"])
            ))
        }
        "Log.entryAdded" if p["entry"]["level"] == "error" => {
            let e = &p["entry"];
            Some(format!(
                "{}: {}{}",
                e["source"].as_str().unwrap_or("log"),
                e["text"].as_str().unwrap_or_default(),
                location(&e["url"], &e["lineNumber"])
            ))
        }
        _ => None,
    }
}

/// " (URL:LINE)" when the event says where; DevTools lines count from 0.
fn location(url: &Value, line: &Value) -> String {
    match (url.as_str().filter(|u| !u.is_empty()), line.as_i64()) {
        (Some(u), Some(l)) => format!(" ({u}:{})", l + 1),
        (Some(u), None) => format!(" ({u})"),
        _ => String::new(),
    }
}
