//! `simulate`: serve the scripted endpoint, every kind's protocol, until Ctrl-C.

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
    outln!("simulator listening on http://{}", sim.addr);
    tracing::info!(addr = %sim.addr, "Simulator started: every kind's routes (POST /v1/chat/completions, /v1/messages, /api/chat, /generate_stream, /completion, /v2/models/<model>/infer, ...); GET /v1/models, /health, /sim/log; gRPC (HTTP/2) on the same port: grpc.health.v1.Health, inference.GRPCInferenceService.");
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
