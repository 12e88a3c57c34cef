//! The real Prometheus (Debian's package) against the real agent: the shipped scrape
//! config is valid, and a Prometheus server scraping the agent (negotiating OpenMetrics)
//! stores our series with our labels.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use inferprobe::simulate::Script;

#[test]
fn the_shipped_scrape_config_passes_promtool() {
    let Some(promtool) = require_tool(
        "promtool",
        "validates deploy/prometheus; apt-get install prometheus",
    ) else {
        return;
    };
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/prometheus.yml");
    let out = Command::new(promtool)
        .args(["check", "config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_scrapes_the_agent() {
    let Some(prometheus) = require_tool("prometheus", "scrapes the agent; apt-get install prometheus") else {
        return;
    };
    let sim = simulator(Script::default()).await;
    let dir = std::env::temp_dir().join(format!("inferprobe-prom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probes = dir.join("probes.yaml");
    std::fs::write(
        &probes,
        format!(
            "agent: {{location: scrape-test}}\nprobes:\n  - name: chat\n    kind: openai_chat\n    url: http://{}/v1/chat/completions?ttft=10ms&tokens=4\n    model: sim-model\n    interval: 1s\n",
            sim.addr
        ),
    )
    .unwrap();
    let mut agent = Daemon::start(&probes, &[]);
    agent.wait_for_log("\"probe\":\"chat\"", Duration::from_secs(10));

    let web = format!("127.0.0.1:{}", closed_port());
    let prom_config = dir.join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: inferprobe\n    static_configs:\n      - targets: [\"{}\"]\n",
            agent.addr
        ),
    )
    .unwrap();
    let mut server = Command::new(prometheus)
        .arg(format!("--config.file={}", prom_config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let query = "/api/v1/query?query=inferprobe_runs_total%7Bresult%3D%22success%22%7D";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut found = serde_json::Value::Null;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        if std::net::TcpStream::connect(&web).is_err() {
            continue;
        }
        let (status, _, body) = http_get(&web, query, None);
        if status != 200 {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if let Some(first) = v["data"]["result"].as_array().and_then(|r| r.first()) {
            found = first["metric"].clone();
            break;
        }
    }
    // Which format did Prometheus get? Its target page says.
    let (_, _, targets) = http_get(&web, "/api/v1/targets", None);
    let _ = server.kill();
    let _ = server.wait();
    drop(agent);
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(
        found["probe"], "chat",
        "no series in Prometheus; targets: {targets}"
    );
    assert_eq!(found["location"], "scrape-test");
    assert_eq!(found["kind"], "openai_chat");
    assert_eq!(found["model"], "sim-model");
    assert_eq!(found["reason"], "none");
    assert!(targets.contains("\"health\":\"up\""), "{targets}");
}
