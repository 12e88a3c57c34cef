//! `--web.config.file`: the exporter-toolkit web configuration secures the agent's port.
//! A real Prometheus scrapes it over TLS with basic auth (`up == 1`) while a job with the
//! wrong password is refused (`up == 0`); direct requests check 401s, the client
//! certificate policy and the headers; a bad file is a positioned error and exit 64.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use inferprobe::simulate::Script;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Daemon, Prometheus, http_get, require_tool, simulator, temp_dir, tls, wait_until};

/// A CA, a server certificate for 127.0.0.1 and a client certificate, written as PEM
/// files into `dir`.
struct Pki {
    ca: String,
    client_cert: String,
    client_key: String,
}

fn make_pki(dir: &Path) -> Pki {
    let ca = tls::Authority::new("inferprobe test CA");
    let server = ca.server(&["127.0.0.1", "localhost"]);
    let client = ca.client("prometheus.example");

    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), &server.pem).unwrap();
    std::fs::write(dir.join("server.key"), server.key_pem()).unwrap();
    std::fs::write(dir.join("client.pem"), &client.pem).unwrap();
    std::fs::write(dir.join("client.key"), client.key_pem()).unwrap();
    Pki {
        ca: ca.pem(),
        client_cert: client.pem.clone(),
        client_key: client.key_pem(),
    }
}

/// A GET over TLS trusting `pki`'s CA; with a client certificate if asked. Returns the
/// status and the head, or the error that ended the exchange.
/// A TLS connection to the agent, trusting the test CA.
async fn tls_connect(
    addr: &str,
    pki: &Pki,
    client_cert: bool,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pki.ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
    let config = if client_cert {
        let certs: Vec<_> = CertificateDer::pem_slice_iter(pki.client_cert.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(pki.client_key.as_bytes()).unwrap();
        builder.with_client_auth_cert(certs, key).unwrap()
    } else {
        builder.with_no_client_auth()
    };
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// One request on a kept-alive connection: the status of its answer, whose body (with a
/// Content-Length) is read whole so the next request can follow on the same connection.
async fn keep_alive_status(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    addr: &str,
    auth: &str,
) -> u16 {
    tls.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut byte))
            .await
            .expect("answer in time")
            .unwrap();
        assert_eq!(n, 1, "the agent closed the kept-alive connection: {raw:?}");
        raw.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    tls.read_exact(&mut body).await.unwrap();
    head.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn tls_get(
    addr: &str,
    path: &str,
    pki: &Pki,
    auth: Option<(&str, &str)>,
    client_cert: bool,
) -> Result<(u16, String), String> {
    let mut tls = tls_connect(addr, pki, client_cert).await?;
    let auth = auth.map(|(u, p)| basic(u, p)).unwrap_or_default();
    tls.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut raw))
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {raw:?}"))?;
    Ok((status, raw))
}

fn probes_file(dir: &Path, sim: std::net::SocketAddr) -> std::path::PathBuf {
    let probes = dir.join("probes.yaml");
    std::fs::write(
        &probes,
        format!(
            "agent: {{location: secured}}\nprobes:\n  - name: chat\n    kind: openai_chat\n    url: http://{sim}/v1/chat/completions?ttft=5ms&tokens=4\n    model: sim-model\n    interval: 1s\n  - name: down\n    kind: openai_chat\n    url: http://{sim}/v1/chat/completions?fault=http-500\n    model: sim-model\n    interval: 1s\n    alert: {{failure_threshold: 2}}\n"
        ),
    )
    .unwrap();
    probes
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_and_basic_auth_let_only_the_right_scraper_in() {
    let dir = temp_dir("webcfg");
    let pki = make_pki(&dir);
    let sim = simulator(Script::default()).await;
    let probes = probes_file(&dir, sim.addr);
    // htpasswd writes $2y$ hashes: the file must take them as exporters do.
    let hash = bcrypt::hash_with_result("s3cret scrape", 4)
        .unwrap()
        .format_for_version(bcrypt::Version::TwoY);
    assert!(hash.starts_with("$2y$"));
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\nbasic_auth_users:\n  prometheus: '{hash}'\nhttp_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\n"
        ),
    )
    .unwrap();
    let mut agent = Daemon::start(&probes, &["--web.config.file", web.to_str().unwrap()]);
    agent.wait_for_log("\"probe\":\"chat\"", Duration::from_secs(10));
    let addr = agent.addr.clone();

    // Direct requests.
    let (status, head) = tls_get(&addr, "/metrics", &pki, None, false).await.unwrap();
    assert_eq!(status, 401, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("www-authenticate: basic"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("x-content-type-options: nosniff"),
        "{head}"
    );
    let (status, _) = tls_get(&addr, "/metrics", &pki, Some(("prometheus", "wrong")), false)
        .await
        .unwrap();
    assert_eq!(status, 401);
    let (status, _) = tls_get(&addr, "/metrics", &pki, Some(("nobody", "s3cret scrape")), false)
        .await
        .unwrap();
    assert_eq!(status, 401);
    let (status, raw) = tls_get(
        &addr,
        "/metrics",
        &pki,
        Some(("prometheus", "s3cret scrape")),
        false,
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{raw}");
    assert!(raw.contains("inferprobe_runs_total"));
    let lower = raw.to_ascii_lowercase();
    assert!(
        lower.contains("strict-transport-security: max-age=31536000"),
        "{raw}"
    );
    assert!(lower.contains("x-frame-options: deny"));
    // Links in pages use the scheme the port speaks.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let alerts = loop {
        let raw = tls_get(
            &addr,
            "/api/v1/alerts",
            &pki,
            Some(("prometheus", "s3cret scrape")),
            false,
        )
        .await
        .map(|(_, raw)| raw)
        .unwrap_or_default();
        if raw.contains("\"probe\":\"down\"") || std::time::Instant::now() > deadline {
            break raw;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        alerts.contains(&format!("Details: https://{addr}/probes/down")),
        "{alerts}"
    );
    // Plain HTTP on the TLS port gets no metrics.
    let plain = std::panic::catch_unwind(|| http_get(&addr, "/metrics", None));
    assert!(plain.is_err() || plain.as_ref().unwrap().0 != 200, "{plain:?}");

    // A real Prometheus: the right credentials scrape, the wrong ones are refused.
    let Some(prometheus) = require_tool(
        "prometheus",
        "scrapes the agent over TLS; apt-get install prometheus",
    ) else {
        return;
    };
    let prom_config = dir.join("prometheus.yml");
    let job = |name: &str, password: &str| {
        format!(
            "  - job_name: {name}\n    scheme: https\n    tls_config: {{ca_file: {}}}\n    basic_auth: {{username: prometheus, password: '{password}'}}\n    static_configs:\n      - targets: [\"{addr}\"]\n",
            dir.join("ca.pem").display()
        )
    };
    std::fs::write(
        &prom_config,
        format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n{}{}",
            job("good", "s3cret scrape"),
            job("bad", "guessed")
        ),
    )
    .unwrap();
    let server = Prometheus::start(&prometheus, &prom_config, &[]);
    let up = |job: &str| -> Option<String> {
        let (status, _, body) = http_get(
            &server.addr,
            &format!("/api/v1/query?query=up%7Bjob%3D%22{job}%22%7D"),
            None,
        );
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str().map(str::to_owned)
    };
    let mut seen = (None, None);
    wait_until("both jobs scraped", Duration::from_secs(30), || {
        seen = (up("good"), up("bad"));
        seen.0.is_some() && seen.1.is_some()
    });
    let (_, _, targets) = http_get(&server.addr, "/api/v1/targets", None);
    assert_eq!(seen.0.as_deref(), Some("1"), "{targets}");
    assert_eq!(seen.1.as_deref(), Some("0"), "{targets}");
    assert!(
        targets.contains("401"),
        "the bad job's error names the 401: {targets}"
    );
    let (_, _, series) = http_get(
        &server.addr,
        "/api/v1/query?query=inferprobe_runs_total%7Bjob%3D%22good%22%7D",
        None,
    );
    assert!(series.contains("\"probe\":\"chat\""), "{series}");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn require_and_verify_client_cert_turns_away_clients_without_one() {
    let dir = temp_dir("mtls");
    let pki = make_pki(&dir);
    let sim = simulator(Script::default()).await;
    let probes = probes_file(&dir, sim.addr);
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  min_version: TLS12\n",
    )
    .unwrap();
    let agent = Daemon::start(&probes, &["--web.config.file", web.to_str().unwrap()]);
    let without = tls_get(&agent.addr, "/healthz", &pki, None, false).await;
    assert!(
        without.is_err(),
        "served without a client certificate: {without:?}"
    );
    let (status, raw) = tls_get(&agent.addr, "/healthz", &pki, None, true).await.unwrap();
    assert_eq!(status, 200, "{raw}");
    // A certificate from another CA is refused too.
    let other = make_pki(&temp_dir("other-ca"));
    let stranger = Pki {
        ca: pki.ca.clone(),
        client_cert: other.client_cert,
        client_key: other.client_key,
    };
    let refused = tls_get(&agent.addr, "/healthz", &stranger, None, true).await;
    assert!(
        refused.is_err(),
        "a client certificate from another CA was accepted: {refused:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_bad_web_config_file_is_a_positioned_error_and_exit_64() {
    let dir = temp_dir("badweb");
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: RequireClientCertPlease\nbasic_auth_users:\n  alice: not-a-hash\n",
    )
    .unwrap();
    let probes = dir.join("probes.yaml");
    std::fs::write(&probes, "agent: {location: x}\nprobes: []\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["run", "--listen", "127.0.0.1:0", "-c"])
        .arg(&probes)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--web.config.file")
        .arg(&web)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    let file = web.display().to_string();
    assert!(
        stderr.contains(&format!(
            "{file}:4:21: tls_server_config.client_auth_type: unknown value"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{file}:6:10: basic_auth_users.alice: not a bcrypt hash")),
        "{stderr}"
    );
    assert!(
        stderr.contains("server.pem"),
        "the unreadable cert file is named: {stderr}"
    );
    // `check` says the same, before any restart or SIGHUP.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["check", "-c"])
        .arg(&probes)
        .arg("--web.config.file")
        .arg(&web)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(64), "{stdout}");
    assert!(
        stdout.contains(&format!("{file}:6:10: basic_auth_users.alice: not a bcrypt hash")),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("{file}: 4 problem(s)")), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_response_of_the_port_carries_the_security_headers() {
    let dir = temp_dir("headers");
    let sim = simulator(Script::default()).await;
    let probes = probes_file(&dir, sim.addr);
    let agent = Daemon::start(&probes, &[]);
    for path in ["/", "/metrics", "/api/v1/probes", "/healthz", "/no/such/page"] {
        let (status, head, _) = http_get(&agent.addr, path, None);
        assert!(status == 200 || status == 404, "{path}: {head}");
        let head = head.to_ascii_lowercase();
        for want in [
            "x-content-type-options: nosniff",
            "x-frame-options: deny",
            "content-security-policy: default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'",
            "referrer-policy: no-referrer",
        ] {
            assert!(head.contains(want), "{path}: {want:?} missing in\n{head}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_rereads_the_web_config_and_a_bad_one_keeps_the_running_one() {
    let dir = temp_dir("webreload");
    let pki = make_pki(&dir);
    let sim = simulator(Script::default()).await;
    let probes = probes_file(&dir, sim.addr);
    let web = dir.join("web.yml");
    let file_for = |user: &str| {
        let hash = bcrypt::hash("pw", 4).unwrap();
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\nbasic_auth_users:\n  {user}: '{hash}'\n"
        )
    };
    std::fs::write(&web, file_for("alice")).unwrap();
    let mut agent = Daemon::start(&probes, &["--web.config.file", web.to_str().unwrap()]);
    let addr = agent.addr.clone();
    let status = |user: &'static str| {
        let addr = addr.clone();
        let pki = &pki;
        async move {
            tls_get(&addr, "/healthz", pki, Some((user, "pw")), false)
                .await
                .unwrap()
                .0
        }
    };
    assert_eq!(status("alice").await, 200);
    assert_eq!(status("bob").await, 401);
    // A scraper that keeps its connection open across the reload.
    let mut kept = tls_connect(&addr, &pki, false).await.unwrap();
    assert_eq!(
        keep_alive_status(&mut kept, &addr, &basic("alice", "pw")).await,
        200
    );

    std::fs::write(&web, file_for("bob")).unwrap();
    agent.signal("HUP");
    agent.wait_for_log("Web config reloaded.", Duration::from_secs(10));
    assert_eq!(status("bob").await, 200);
    assert_eq!(status("alice").await, 401);
    // A revoked user is refused on a connection opened before the reload too.
    assert_eq!(
        keep_alive_status(&mut kept, &addr, &basic("alice", "pw")).await,
        401
    );
    assert_eq!(
        keep_alive_status(&mut kept, &addr, &basic("bob", "pw")).await,
        200
    );

    std::fs::write(&web, "basic_auth_users:\n  carol: plaintext\n").unwrap();
    agent.signal("HUP");
    let line = agent.wait_for_log("Web config problem", Duration::from_secs(10));
    assert!(
        line.contains("basic_auth_users.carol: not a bcrypt hash"),
        "{line}"
    );
    assert_eq!(status("bob").await, 200, "the running web config stays");
    std::fs::remove_dir_all(&dir).ok();
}
