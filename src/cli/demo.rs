//! `demo`: the simulator and the daemon together, on a built-in config, until Ctrl-C or
//! SIGTERM; the history goes with it unless `--data-dir` keeps it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use inferprobe::config;
use inferprobe::simulate::{self, Script};
use inferprobe::{Agent, AgentSettings};

use super::bind_or_exit;
use crate::PortArgs;

/// The demo's probes: healthy, slow and flaky endpoints on the built-in simulator, and a
/// small one-slot server on a second one.
const DEMO_CONFIG: &str = include_str!("../demo.yaml");

/// The demo's small server: one slot (a request waits for the one before it), a model
/// that unloads after 8 s without a request and takes 1.5 s to load again, answers of
/// about 230 ms.
fn small_server() -> Script {
    Script {
        ttft: Duration::from_millis(40),
        token_gap: Duration::from_millis(12),
        tokens: 16,
        slots: 1,
        cold_after: Some(Duration::from_secs(8)),
        cold_load: Duration::from_millis(1500),
        ..Script::default()
    }
}

pub async fn run(
    listen: SocketAddr,
    sim_listen: SocketAddr,
    data_dir: Option<PathBuf>,
    port: PortArgs,
) -> ExitCode {
    let port = match port.settings() {
        Ok(p) => p,
        Err(code) => return code,
    };
    let scheme = if port.web.current().is_tls() {
        "https"
    } else {
        "http"
    };
    let sim_listener = match bind_or_exit(sim_listen, "").await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let sim = simulate::start(sim_listener, Script::default());
    let small_listener = match bind_or_exit(SocketAddr::new(sim.addr.ip(), 0), "").await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let small = simulate::start(small_listener, small_server());
    let text = DEMO_CONFIG
        .replace("SMALL_SERVER", &small.addr.to_string())
        .replace("SIMULATOR", &sim.addr.to_string());
    let config = match config::parse(&text, Path::new("<demo>"), &|_| None) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("error: the built-in demo config is invalid:\n{errors}");
            return ExitCode::FAILURE;
        }
    };
    // The demo runs the agent: a reader of its output that stops must not stop it.
    let _flush = inferprobe::output::start(true);
    let listener = match bind_or_exit(listen, " (try --listen 127.0.0.1:0)").await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let temporary = data_dir.is_none();
    let data_dir = data_dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("inferprobe-demo-{}", std::process::id())));
    let settings = AgentSettings {
        location: "demo".into(),
        data_dir: data_dir.clone(),
        port,
    };
    let agent = match Agent::start(&config, settings, listener) {
        Ok(a) => a,
        Err(e) => {
            inferprobe::output::STDERR.say(&format!("error: {e}"));
            return ExitCode::FAILURE;
        }
    };
    // The report reads its SLO targets from the config: without the demo's own, it
    // would say no probe has a latency target.
    let config_file = data_dir.join("demo-probes.yaml");
    if let Err(e) = std::fs::write(&config_file, &text) {
        inferprobe::output::STDERR.say(&format!("error: cannot write {}: {e}", config_file.display()));
        agent.shutdown(Duration::from_secs(5)).await;
        return ExitCode::FAILURE;
    }
    // Whoever reads our output may go away (`demo | head`): that must not stop the demo.
    let say = |text: String| inferprobe::output::STDOUT.say(&text);
    say(format!(
        "inferprobe demo: {} probes against the simulator at http://{} and a one-slot server at http://{}",
        config.probes.len(),
        sim.addr,
        small.addr
    ));
    say(format!("  status page: {scheme}://{bound}/"));
    say(format!("  metrics:     {scheme}://{bound}/metrics"));
    say(format!(
        "  results:     {scheme}://{bound}/api/v1/probes, {scheme}://{bound}/api/v1/results"
    ));
    say(format!("  alerts:      {scheme}://{bound}/api/v1/alerts"));
    say(format!(
        "  SLO report:  inferprobe report -c {} --data-dir {} --since 15m",
        config_file.display(),
        data_dir.display()
    ));
    say(format!(
        "First results arrive within 10 s.{} Press Ctrl-C to stop.",
        if temporary {
            " The history is deleted on exit (keep it with --data-dir)."
        } else {
            ""
        }
    ));
    let mut terminate = signal(SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match terminate.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
    agent.shutdown(Duration::from_secs(5)).await;
    if temporary {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    ExitCode::SUCCESS
}
