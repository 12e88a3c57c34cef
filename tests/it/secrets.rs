//! No secret leaves the agent by any path but the request it belongs to. Every kind of
//! secret the config can hold gets a unique marker — probe API keys and bearer tokens
//! (in headers, in the URL's userinfo and query, through `${ENV}`), receiver routing
//! keys, webhook tokens and headers, remote_write bearer tokens and passwords — and
//! servers that misbehave by echoing what they received back into their error bodies.
//! Then every surface is collected: logs at debug level, `/metrics`, every `/api/v1/*`
//! answer, the status page and a probe's page, `check`, `once`, `report` in all three
//! formats and `test-alert`; no marker may appear in any of them.
//!
//! Servers also echo what they heard changed, as real ones do: upper or lower case,
//! base64 (of the token, of `Bearer <token>`, of `user:<token>`, URL-safe too), a
//! masked tail (`sk-...abcd`, `****abcd`), cut by themselves (`MARK4env...`), or placed
//! across the 200-character cut of an error message. A `${VAR}` named as a secret
//! (`SECRET_HOST`, `SECRET_PATH_TOKEN`) is one in a URL's host or path too. No marker
//! may appear in any case, no base64 of one, no masked tail and no six-character start
//! of one.
//!
//! Where a probe connects is not a secret: an endpoint from `${VAR}` (a base URL, or a
//! whole URL with userinfo and `?api_key=`) shows its host, port and path on the status
//! page, in the API, in `once` and in the logs, its credentials in none of them.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

const MARKERS: [&str; 14] = [
    "MARK1probeheaderkey",
    "MARK2urlpassword",
    "MARK3urlquerytoken",
    "MARK4envbearer",
    "MARK5routingkey",
    "MARK6webhooktoken",
    "MARK7webhookheader",
    "MARK8rwbearer",
    "MARK9rwpassword",
    "MARKApathtoken",
    "markbsecrethost",
    "MARKCenvurluser",
    "MARKDenvurlpass",
    "MARKEenvurlapikey",
];

/// How the echoing servers change what they heard, by request path (`/form/<name>`).
const FORMS: [&str; 8] = [
    "upper",
    "lower",
    "b64",
    "b64url",
    "basic",
    "masked",
    "servercut",
    "straddle",
];

type Heard = std::sync::Arc<std::sync::Mutex<String>>;

/// Answers every request with `status` and a body that echoes the request back:
/// the worst a server can do with our secrets. Keeps what it heard in `heard`.
fn echoing_server(status: u16, heard: Heard) -> std::net::SocketAddr {
    answering_server(move |r| {
        let mut echo = format!("{} {}\n", r.method, r.path);
        for (k, v) in &r.headers {
            echo += &format!("{k}: {v}\n");
        }
        echo += &String::from_utf8_lossy(&r.body);
        heard.lock().unwrap().push_str(&echo);
        let auth = r.header("authorization").unwrap_or_default();
        match r.path.strip_prefix("/form/") {
            Some(form) => reply(status, &derived_echo(form, auth)),
            None => reply(status, &echo),
        }
    })
}

/// The `Authorization` value a server heard, echoed changed in the way `form` names.
fn derived_echo(form: &str, auth: &str) -> String {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let token = auth.rsplit(' ').next().unwrap_or_default();
    let tail = &token[token.len().saturating_sub(4)..];
    match form {
        "upper" => format!("invalid credentials {}", auth.to_uppercase()),
        "lower" => format!("invalid credentials {}", auth.to_lowercase()),
        "b64" => format!("{{\"error\":\"bad header {}\"}}", STANDARD.encode(auth)),
        "b64url" => format!("bad header {}", URL_SAFE_NO_PAD.encode(auth)),
        "basic" => format!("bad basic Basic {}", STANDARD.encode(format!("user:{token}"))),
        "masked" => format!(
            "{{\"error\":{{\"message\":\"Incorrect API key provided: {}...{tail}. Also tried ****{tail}.\"}}}}",
            &token[..3]
        ),
        "servercut" => format!("{{\"detail\":\"Invalid key: {}...\"}}", &token[..10]),
        // The token starts 9 characters before the 200th, where messages are cut.
        "straddle" => format!("{} {token} is not valid", "x".repeat(190)),
        other => panic!("no form {other}"),
    }
}

/// What of a marker must never show: the marker in any case, its start, its masked
/// tail, its base64 (plain, as `Bearer <m>`, as `user:<m>`; standard and URL-safe).
fn leaks(text: &str) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let lower = text.to_lowercase();
    let mut found = Vec::new();
    for m in MARKERS {
        let ml = m.to_lowercase();
        if lower.contains(&ml) {
            found.push(m.to_owned());
        } else if lower.contains(&ml[..6]) {
            found.push(format!("the start {} of {m}", &m[..6]));
        }
        let tail = &ml[ml.len() - 4..];
        for mask in ["...", "…", "****"] {
            if lower.contains(&format!("{mask}{tail}")) {
                found.push(format!("the masked tail {mask}{tail} of {m}"));
            }
        }
        for plain in [m.to_owned(), format!("Bearer {m}"), format!("user:{m}")] {
            for e in [STANDARD.encode(&plain), URL_SAFE_NO_PAD.encode(&plain)] {
                // What depends on the marker alone, whatever surrounds it.
                let core = &e[e.len() - m.len() * 4 / 3 + 3..e.len() - 4];
                if text.contains(core) {
                    found.push(format!("base64 {e} of {plain:?}"));
                }
            }
        }
    }
    found
}

#[test]
fn no_secret_marker_reaches_any_surface() {
    // Failing endpoints echo our request (headers, URL and body) into their 500s and
    // 400s; the healthy one answers normally.
    let heard = Heard::default();
    let failing = echoing_server(500, heard.clone());
    let rejecting = echoing_server(400, heard.clone());
    let healthy = answering_server(|_| reply(200, "{\"status\":\"ok\"}"));
    let dir = temp_dir("secrets");
    let data = dir.join("data");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!(
            r#"agent:
  location: secret-test
  remote_write:
    url: http://{rejecting}/api/v1/write
    interval: 1s
    bearer_token: {m8}
    headers:
      X-Scope-OrgID: tenant
receivers:
  - name: pager
    kind: pagerduty
    url: http://{rejecting}/v2/enqueue
    routing_key: {m5}
    max_backoff: 1s
  - name: hook
    kind: webhook
    url: http://{failing}/hook?token={m6}
    headers:
      Authorization: Bearer {m7}
    max_backoff: 1s
  - name: hook-host
    kind: webhook
    url: http://${{SECRET_HOST}}:{port}/hook
    max_backoff: 1s
  - name: hook-b64
    kind: webhook
    url: http://{rejecting}/form/b64
    headers:
      Authorization: Bearer {m7}
    max_backoff: 1s
defaults:
  interval: 1s
  timeout: 900ms
  alert: {{failure_threshold: 1, success_threshold: 1}}
probes:
  - name: chat-echo
    kind: openai_chat
    url: http://{failing}/v1/chat/completions?api_key={m3}
    model: m
    headers:
      Authorization: "Bearer {m1}"
  - name: env-bearer
    kind: http
    url: http://{failing}/health
    headers:
      Authorization: "Bearer ${{SECRET_TEST_TOKEN}}"
  - name: healthy
    kind: http
    url: http://{healthy}/health
    headers:
      X-Api-Key: {m1}
  - name: basic-in-url
    kind: http
    url: http://probe:{m2}@{failing}/basic
  - name: env-path
    kind: http
    url: http://{failing}/v1/${{SECRET_PATH_TOKEN}}/health
  - name: env-host
    kind: http
    url: http://${{SECRET_HOST}}:{port}/health
  - name: env-base
    kind: http
    url: ${{EU_BASE}}/v1/env-base
  - name: env-url
    kind: http
    url: ${{EU_URL}}
  - name: env-down
    kind: http
    url: ${{DOWN_BASE}}/health
{forms}"#,
            m1 = MARKERS[0],
            m2 = MARKERS[1],
            m3 = MARKERS[2],
            m5 = MARKERS[4],
            m6 = MARKERS[5],
            m7 = MARKERS[6],
            m8 = MARKERS[7],
            port = failing.port(),
            forms = FORMS
                .iter()
                .map(|f| format!(
                    "  - name: form-{f}\n    kind: http\n    url: http://{failing}/form/{f}\n    headers:\n      Authorization: \"Bearer ${{SECRET_TEST_TOKEN}}\"\n"
                ))
                .collect::<String>(),
        ),
    )
    .unwrap();
    // The remote_write password is tried in a second file below (basic_auth and
    // bearer_token are exclusive).
    let mut surfaces: Vec<(String, String)> = Vec::new();
    let binary = env!("CARGO_BIN_EXE_inferprobe");
    // Endpoints from the environment: a base URL, a whole URL with its credentials,
    // and one that refuses connections.
    let eu_base = format!("http://{failing}");
    let eu_url = format!(
        "http://{}:{}@{failing}/v1/env-url?api_key={}&region=eu-west",
        MARKERS[11], MARKERS[12], MARKERS[13]
    );
    let down = format!("127.0.0.1:{}", closed_port());
    let down_base = format!("http://{down}");
    let endpoints = [
        ("EU_BASE", eu_base.as_str()),
        ("EU_URL", eu_url.as_str()),
        ("DOWN_BASE", down_base.as_str()),
    ];
    let run = |args: &[&str]| {
        let out = Command::new(binary)
            .env("SECRET_TEST_TOKEN", MARKERS[3])
            .env("SECRET_PATH_TOKEN", MARKERS[9])
            .env("SECRET_HOST", format!("{}.invalid", MARKERS[10]))
            .envs(endpoints)
            .args(args)
            .output()
            .unwrap();
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let c = config.to_str().unwrap();
    surfaces.push(("check".into(), run(&["check", "-c", c])));
    surfaces.push((
        "once --format json".into(),
        run(&["--log-level", "debug", "once", "-c", c, "--format", "json"]),
    ));
    surfaces.push(("once table".into(), run(&["once", "-c", c])));
    surfaces.push((
        "test-alert".into(),
        run(&[
            "--log-level",
            "debug",
            "test-alert",
            "-c",
            c,
            "--location",
            "secret-test",
        ]),
    ));

    // The daemon gets the `${SECRET_TEST_TOKEN}` marker the same way, per child process.
    let mut cmd_env = std::collections::HashMap::new();
    cmd_env.insert("SECRET_TEST_TOKEN", MARKERS[3]);
    cmd_env.insert("SECRET_PATH_TOKEN", MARKERS[9]);
    let host = format!("{}.invalid", MARKERS[10]);
    cmd_env.insert("SECRET_HOST", &host);
    cmd_env.extend(endpoints);
    let d = Daemon::start_with_env(
        &config,
        &["--log-level", "debug", "--data-dir", data.to_str().unwrap()],
        &cmd_env,
    );
    // Runs fail (alerts fire and are delivered, or rejected with the echo), remote_write
    // is rejected with the echo, the healthy probe succeeds.
    wait_until(
        "an alert fired and remote_write was tried",
        Duration::from_secs(20),
        || {
            let m = d.metrics();
            metric_sum(&m, "inferprobe_notifications_total", &[]) >= 2.0
                && metric_sum(&m, "inferprobe_remote_write_requests_total", &[]) >= 1.0
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    for path in [
        "/metrics",
        "/api/v1/probes",
        "/api/v1/probes/chat-echo",
        "/api/v1/probes/env-bearer",
        "/api/v1/alerts",
        "/api/v1/results?since=1h&limit=1000",
        "/",
        "/probes/chat-echo",
        "/probes/env-bearer",
        "/probes/healthy",
        "/probes/basic-in-url",
        "/api/v1/probes/basic-in-url",
        "/probes/env-path",
        "/api/v1/probes/env-path",
        "/probes/env-host",
        "/api/v1/probes/env-host",
        "/probes/form-straddle",
        "/probes/form-masked",
        "/probes/env-base",
        "/api/v1/probes/env-base",
        "/probes/env-url",
        "/api/v1/probes/env-url",
        "/probes/env-down",
        "/api/v1/probes/env-down",
    ] {
        let (status, _, body) = http_get(&d.addr, path, None);
        assert_eq!(status, 200, "{path}");
        surfaces.push((path.into(), body));
    }
    let (_, _, om) = http_get(&d.addr, "/metrics", Some("application/openmetrics-text"));
    surfaces.push(("/metrics (OpenMetrics)".into(), om));
    for format in ["markdown", "html", "json"] {
        surfaces.push((
            format!("report {format}"),
            run(&[
                "report",
                "-c",
                c,
                "--data-dir",
                data.to_str().unwrap(),
                "--since",
                "1h",
                "--format",
                format,
            ]),
        ));
    }
    d.signal("TERM");
    std::thread::sleep(Duration::from_secs(2));
    surfaces.push(("daemon log (debug)".into(), d.all_logs.lock().unwrap().join("\n")));

    // The basic_auth password of remote_write, in its own short run.
    let config2 = dir.join("rw-basic.yaml");
    std::fs::write(
        &config2,
        format!(
            "agent:\n  location: secret-test\n  remote_write:\n    url: http://{rejecting}/api/v1/write\n    interval: 1s\n    basic_auth: {{username: u, password: {}}}\nprobes:\n  - name: healthy\n    kind: http\n    url: http://{healthy}/health\n    interval: 1s\n",
            MARKERS[8]
        ),
    )
    .unwrap();
    surfaces.push((
        "check (basic auth)".into(),
        run(&["check", "-c", config2.to_str().unwrap()]),
    ));
    let d2 = Daemon::start(&config2, &["--log-level", "debug"]);
    wait_until(
        "remote_write with basic auth was tried",
        Duration::from_secs(15),
        || metric_sum(&d2.metrics(), "inferprobe_remote_write_requests_total", &[]) >= 1.0,
    );
    surfaces.push(("/metrics (basic auth)".into(), d2.metrics()));
    std::thread::sleep(Duration::from_millis(500));
    surfaces.push((
        "daemon log (basic auth)".into(),
        d2.all_logs.lock().unwrap().join("\n"),
    ));

    // Every marker really went out (so the redaction, not silence, kept it in). The
    // remote_write bodies are snappy-compressed protobuf, but their credentials travel in
    // headers; the URL password goes out as Basic auth (base64), so it is checked by
    // decoding what the server heard.
    let heard = heard.lock().unwrap().clone();
    let basic: Vec<String> = heard
        .lines()
        .filter_map(|l| {
            l.strip_prefix("authorization: Basic ")
                .or_else(|| l.strip_prefix("Authorization: Basic "))
        })
        .filter_map(|b| base64_decode(b.trim()))
        .collect();
    // The secret host never resolves: its probe fails on DNS, checked below.
    for m in MARKERS.iter().filter(|m| **m != MARKERS[10]) {
        assert!(
            heard.contains(m) || basic.iter().any(|b| b.contains(m)),
            "{m} never reached a server: the test does not exercise it"
        );
    }

    // The test must have exercised what it claims: failures with the echoing server's
    // body, pages, remote_write rejections, a successful probe.
    let all: String = surfaces
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        all.contains("<redacted>"),
        "an echoed secret was redacted somewhere"
    );
    assert!(all.contains("\"probe\":\"healthy\""), "the healthy probe ran");
    assert!(all.contains("http_5xx"), "the echoing probes failed as 5xx");
    assert!(
        all.contains("\"reason\":\"dns\""),
        "the probe of the secret host failed to resolve it"
    );
    for form in FORMS {
        assert!(
            all.contains(&format!("\"probe\":\"form-{form}\"")),
            "the {form} echo ran"
        );
    }
    // Where the endpoints from `${VAR}` are is shown wherever the probe is.
    let surface = |name: &str| {
        &surfaces
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no surface {name}"))
            .1
    };
    let shown = [
        ("/probes/env-base", format!("http://{failing}/v1/env-base")),
        (
            "/api/v1/probes/env-base",
            format!("\"endpoint\":\"http://{failing}/v1/env-base\""),
        ),
        ("/probes/env-url", format!("http://{failing}/v1/env-url")),
        (
            "/probes/env-url",
            "?api_key=&lt;redacted&gt;&amp;region=eu-west".to_owned(),
        ),
        (
            "/api/v1/probes/env-url",
            format!("\"endpoint\":\"http://{failing}/v1/env-url\""),
        ),
        ("/", format!("http://{down}/health")),
        ("/api/v1/probes/env-down", format!("cannot connect to {down}")),
        (
            "once --format json",
            format!("\"endpoint\":\"http://{failing}/v1/env-base\""),
        ),
        (
            "once table",
            format!("env-down: connect: cannot connect to {down}"),
        ),
        ("daemon log (debug)", format!("cannot connect to {down}")),
    ];
    for (name, text) in &shown {
        assert!(
            surface(name).contains(text.as_str()),
            "{name} does not show {text}"
        );
    }
    // The encoded Basic credentials are as secret as the password inside them.
    let encoded: Vec<&str> = heard
        .lines()
        .filter_map(|l| {
            l.strip_prefix("authorization: Basic ")
                .or_else(|| l.strip_prefix("Authorization: Basic "))
        })
        .map(str::trim)
        .collect();
    assert!(!encoded.is_empty());
    let mut found = Vec::new();
    for (name, text) in &surfaces {
        for m in leaks(text) {
            found.push(format!("{m} in {name}"));
        }
        // Whatever shows an endpoint shows where it is, with secret parts hidden.
        if text.contains(&format!("/v1/{}/", MARKERS[9])) {
            found.push(format!("the secret path in {name}"));
        }
        for e in &encoded {
            if text.contains(e) {
                found.push(format!("Basic credentials {e} in {name}"));
            }
        }
    }
    eprintln!(
        "secrets: {} markers, {} surfaces, {} bytes searched, {} found",
        MARKERS.len(),
        surfaces.len(),
        all.len(),
        found.len()
    );
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
}

/// Standard base64, for Basic credentials the servers heard.
fn base64_decode(s: &str) -> Option<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
    String::from_utf8(bytes).ok()
}
