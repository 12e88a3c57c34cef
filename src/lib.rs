//! inferprobe: a black-box prober for AI inference endpoints.
//!
//! The data flow, one module per step:
//!
//! ```text
//! probes.yaml ─► config ─► schedule ─► probe/<kind> ─► Outcome ─┬─► metrics ─► server (/metrics)
//!                                                               └─► store   ─► server (/api/v1/probes)
//! ```
//!
//! This file is the only one that wires siblings together: [`Agent`] owns the outcome
//! channel, one scheduler task per probe, the fan-out loop and the HTTP server, applies
//! reloads, and drains runs in flight on shutdown.
#![forbid(unsafe_code)]

pub mod alert;
pub mod config;
pub mod metrics;
pub mod net;
pub mod outcome;
pub mod payload;
pub mod probe;
pub mod schedule;
pub mod server;
pub mod simulate;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ProbeConfig};
use crate::metrics::Metrics;
use crate::net::TlsRoots;
use crate::outcome::{Outcome, ProbeIdentity};
use crate::probe::ReadyProbe;
use crate::probe::{BuildContext, BuildError};
use crate::schedule::Report;
use crate::store::Latest;

/// Builds every probe of a config, or says which one cannot be built.
pub fn build_probes(
    config: &Config,
    location: &str,
    cx: &BuildContext,
) -> Result<Vec<ReadyProbe>, (String, BuildError)> {
    config
        .probes
        .iter()
        .map(|p| ReadyProbe::build(p, location, cx).map_err(|e| (p.name.clone(), e)))
        .collect()
}

struct RunningProbe {
    config: ProbeConfig,
    identity: Arc<ProbeIdentity>,
    cancel: CancellationToken,
    /// Set while a run is in flight.
    busy: Arc<AtomicBool>,
}

/// The identity of each configured probe, by name. An outcome whose identity is not the
/// current one (its probe was removed or changed while the run was in flight) is
/// logged but not recorded, so it cannot bring back a deleted probe's series.
type Current = Arc<std::sync::RwLock<HashMap<String, Arc<ProbeIdentity>>>>;

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
    pub unchanged: usize,
}

/// The running daemon.
pub struct Agent {
    pub metrics: Arc<Metrics>,
    pub latest: Arc<Latest>,
    location: String,
    build: BuildContext,
    reports: mpsc::Sender<Report>,
    running: HashMap<String, RunningProbe>,
    current: Current,
    /// Runs in flight, so shutdown can wait for them.
    runs: TaskTracker,
    fanout: JoinHandle<()>,
    server: JoinHandle<std::io::Result<()>>,
    server_shutdown: CancellationToken,
}

impl Agent {
    /// Starts serving on `listener` and scheduling `config`'s probes.
    pub fn start(
        config: &Config,
        location: String,
        listener: TcpListener,
    ) -> Result<Agent, (String, BuildError)> {
        let metrics = Arc::new(Metrics::new());
        let latest = Arc::new(Latest::default());
        let ready = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel(4096);
        let current = Current::default();
        let fanout = tokio::spawn(fan_out(rx, metrics.clone(), latest.clone(), current.clone()));
        let server_shutdown = CancellationToken::new();
        let server = tokio::spawn(server::serve(
            listener,
            server::ServerState {
                metrics: metrics.clone(),
                latest: latest.clone(),
                ready: ready.clone(),
                location: location.clone(),
            },
            server_shutdown.clone(),
        ));
        let mut agent = Agent {
            metrics,
            latest,
            location,
            build: BuildContext::new(),
            reports: tx,
            running: HashMap::new(),
            current,
            runs: TaskTracker::new(),
            fanout,
            server,
            server_shutdown,
        };
        if let Err(e) = agent.apply(config) {
            agent.server_shutdown.cancel();
            return Err(e);
        }
        agent.metrics.reloaded(true);
        ready.store(true, Ordering::Release);
        Ok(agent)
    }

    /// Switches to `config`. Every new or changed probe is built first; if one cannot
    /// be built nothing changes. Unchanged probes keep running on their grid.
    pub fn apply(&mut self, config: &Config) -> Result<ReloadSummary, (String, BuildError)> {
        let mut summary = ReloadSummary::default();
        // Re-read the trust store and CA files: a reload is how rotated CAs take effect.
        self.build.roots = TlsRoots::system();
        let mut built = Vec::new();
        for p in &config.probes {
            match self.running.get(&p.name) {
                Some(r) if r.config == *p => summary.unchanged += 1,
                existing => {
                    if existing.is_some() {
                        summary.changed += 1;
                    } else {
                        summary.added += 1;
                    }
                    built.push(
                        ReadyProbe::build(p, &self.location, &self.build).map_err(|e| (p.name.clone(), e))?,
                    );
                }
            }
        }
        // Probes that stop or change: their loops end; their gauges go (a changed
        // probe's labels may differ); their runs in flight finish, and the busy flag
        // passes to the replacement so old and new runs never overlap.
        let mut retired = Vec::new();
        let mut busy_of: HashMap<String, Arc<AtomicBool>> = HashMap::new();
        let wanted: HashMap<&str, ()> = config.probes.iter().map(|p| (p.name.as_str(), ())).collect();
        self.running.retain(|name, r| {
            let keep = wanted.contains_key(name.as_str()) && !built.iter().any(|b| &b.config.name == name);
            if !keep {
                r.cancel.cancel();
                retired.push(r.identity.clone());
                busy_of.insert(name.clone(), r.busy.clone());
                if !wanted.contains_key(name.as_str()) {
                    summary.removed += 1;
                }
            }
            keep
        });
        for probe in built {
            let cancel = CancellationToken::new();
            let schedule = probe.config.schedule.clone();
            let busy = busy_of.remove(&probe.config.name).unwrap_or_default();
            let running = RunningProbe {
                config: probe.config.clone(),
                identity: probe.identity.clone(),
                cancel: cancel.clone(),
                busy: busy.clone(),
            };
            tokio::spawn(schedule::run_loop(
                Arc::new(probe),
                schedule,
                self.reports.clone(),
                cancel,
                self.runs.clone(),
                busy,
            ));
            self.running.insert(running.config.name.clone(), running);
        }
        *self.current.write().expect("current lock") = self
            .running
            .values()
            .map(|r| (r.config.name.clone(), r.identity.clone()))
            .collect();
        self.latest
            .configure(config.probes.iter().map(|p| p.name.as_str()));
        self.metrics.configured(self.running.len(), &retired);
        Ok(summary)
    }

    /// Stops scheduling, waits up to `drain` for runs in flight (their outcomes are
    /// still recorded), then stops the server. Returns whether every run finished.
    pub async fn shutdown(self, drain: Duration) -> bool {
        for r in self.running.values() {
            r.cancel.cancel();
        }
        self.runs.close();
        let drained = tokio::time::timeout(drain, self.runs.wait()).await.is_ok();
        drop(self.reports);
        // The fan-out loop ends once every sender (loops and runs) is gone.
        let _ = tokio::time::timeout(Duration::from_secs(2), self.fanout).await;
        self.server_shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.server).await;
        drained
    }
}

/// The single consumer of reports: metrics first, then the store, then the log line.
async fn fan_out(
    mut rx: mpsc::Receiver<Report>,
    metrics: Arc<Metrics>,
    latest: Arc<Latest>,
    current: Current,
) {
    while let Some(report) = rx.recv().await {
        match report {
            Report::Finished(outcome) => {
                let is_current = current
                    .read()
                    .expect("current lock")
                    .get(&outcome.probe.name)
                    .is_some_and(|id| Arc::ptr_eq(id, &outcome.probe));
                if is_current {
                    metrics.record(&outcome);
                    latest.record(&outcome);
                }
                log_outcome(&outcome);
            }
            Report::Skipped { probe, ticks } => {
                metrics.record_skipped(&probe, ticks);
                tracing::warn!(probe = %probe.name, ticks, "Skipped scheduled runs: the previous run was still going.");
            }
        }
    }
}

/// One structured line per run.
pub fn log_outcome(outcome: &Outcome) {
    let o = &outcome.observation;
    let ms = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e4).round() / 10.0);
    match o.failure() {
        None => tracing::info!(
            probe = %outcome.probe.name,
            location = %outcome.probe.location,
            result = "success",
            status = o.http_status,
            ttfb_ms = ms(o.ttfb()),
            ttft_ms = ms(o.ttft()),
            total_ms = ms(o.total()),
            output_tokens = o.output_tokens,
            "Probe run finished."
        ),
        Some(f) => tracing::warn!(
            probe = %outcome.probe.name,
            location = %outcome.probe.location,
            result = "failure",
            reason = f.reason.as_str(),
            status = o.http_status,
            ttft_ms = ms(o.ttft()),
            total_ms = ms(o.total()),
            message = %f.message,
            "Probe run failed."
        ),
    }
}
