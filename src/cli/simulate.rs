//! `simulate`: serve the scripted OpenAI-compatible endpoint until Ctrl-C.

use std::net::SocketAddr;
use std::process::ExitCode;

use inferprobe::simulate::{self, Script};

use super::bind_or_exit;

pub async fn run(listen: SocketAddr, script: Script) -> ExitCode {
    let listener = match bind_or_exit(listen, "").await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let sim = simulate::start(listener, script);
    println!("simulator listening on http://{}", sim.addr);
    tracing::info!(addr = %sim.addr, "Simulator started: POST /v1/chat/completions, /v1/completions; GET /v1/models, /health, /sim/log.");
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
