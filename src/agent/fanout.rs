//! The fan-out: the single consumer of the scheduler's events. Each finished run goes
//! to the metrics first, then the stores (latest, history, alert state), then the log
//! line; between events it commits what paging holds back once it is due.
//!
//! May import: metrics, outcome, schedule, store, and paging (its sibling).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::paging::Paging;
use crate::metrics::Metrics;
use crate::outcome::{Outcome, ProbeIdentity};
use crate::schedule::RunEvent;
use crate::store::{HistoryWriter, Latest, RunRecord};

/// The identity of each configured probe, by name. An outcome whose identity is not the
/// current one (its probe was removed or changed while the run was in flight) is
/// logged but not recorded, so it cannot bring back a deleted probe's series.
pub(super) type Current = Arc<std::sync::RwLock<HashMap<Arc<str>, Arc<ProbeIdentity>>>>;

/// The single consumer of the scheduler's events: metrics first, then the stores (latest, history,
/// alert state), then the log line.
pub(super) async fn fan_out(
    mut rx: mpsc::Receiver<RunEvent>,
    metrics: Arc<Metrics>,
    latest: Arc<Latest>,
    paging: Arc<Paging>,
    history: Arc<HistoryWriter>,
    current: Current,
    spans: Arc<crate::otlp::Spans>,
) {
    let mut history_seen = (u64::MAX, u64::MAX);
    loop {
        let event = match rx.try_recv() {
            Ok(event) => {
                // A steady queue of events that decide nothing (skipped ticks, runs of
                // replaced probes) must not hold back what is due.
                if paging.next_due() == Some(Duration::ZERO) {
                    paging.settle(false);
                }
                event
            }
            Err(mpsc::error::TryRecvError::Empty) => {
                // Nothing queued: wait for the next event, but no longer than until
                // what paging holds back is due.
                let next = match paging.next_due() {
                    Some(due) => match tokio::time::timeout(due, rx.recv()).await {
                        Ok(next) => next,
                        Err(_) => {
                            paging.settle(false);
                            continue;
                        }
                    },
                    None => rx.recv().await,
                };
                match next {
                    Some(event) => event,
                    None => break,
                }
            }
            Err(mpsc::error::TryRecvError::Disconnected) => break,
        };
        match event {
            RunEvent::Finished(outcome) => {
                let is_current = current
                    .read()
                    .expect("current lock")
                    .get(&outcome.probe.name)
                    .is_some_and(|id| Arc::ptr_eq(id, &outcome.probe));
                let blames_endpoint = outcome
                    .observation
                    .failure()
                    .is_none_or(|f| f.reason.blames_endpoint());
                if is_current {
                    metrics.record(&outcome);
                }
                // The agent's own trouble (`agent_error`) is, like a skipped tick, counted
                // on its health series only: not an endpoint run for the history, the API
                // or paging.
                if is_current && blames_endpoint {
                    latest.record(&outcome);
                    history.record(RunRecord::from_outcome(&outcome));
                    let stats = history.stats();
                    let now = (
                        stats.dropped.load(Ordering::Relaxed),
                        stats.disk_bytes.load(Ordering::Relaxed),
                    );
                    // The figures change about once a second; the gauges follow then.
                    if now != history_seen {
                        metrics.history(now.0, now.1);
                        history_seen = now;
                    }
                    paging.observe(&outcome);
                    paging.observe_model(&outcome);
                    spans.offer(&outcome);
                }
                log_outcome(&outcome);
            }
            RunEvent::Skipped { probe, ticks } => {
                metrics.record_skipped(&probe, ticks);
                tracing::warn!(probe = %probe.name, ticks, "Skipped scheduled runs: the previous run was still going.");
            }
            RunEvent::Held { probe } => {
                metrics.record_held(&probe);
                tracing::debug!(probe = %probe.name, "Held a scheduled run: its endpoint is kept quiet for a cold probe's run.");
            }
            RunEvent::Paced { probe, change } => log_pace(&probe, &change),
        }
    }
    paging.settle(true);
}

/// The token budget's crossings: a warning when a probe's day would exceed it and its
/// interval stretches, a note when the configured interval returns.
fn log_pace(probe: &ProbeIdentity, c: &crate::schedule::budget::PaceChange) {
    let secs = |d: Duration| d.as_secs_f64();
    match c.stretched {
        Some(stretched) => tracing::warn!(
            probe = %probe.name,
            tokens_per_day = c.tokens_per_day,
            projected_per_day = c.projected_per_day,
            interval_s = secs(c.configured),
            stretched_interval_s = secs(stretched),
            "Token budget: at this rate the probe would use more tokens a day than its budget; its interval is stretched until the day fits."
        ),
        None => tracing::info!(
            probe = %probe.name,
            tokens_per_day = c.tokens_per_day,
            projected_per_day = c.projected_per_day,
            interval_s = secs(c.configured),
            "Token budget: the probe's use fits its budget again; back to its configured interval."
        ),
    }
}

/// One structured line per run.
fn log_outcome(outcome: &Outcome) {
    let o = &outcome.observation;
    let ms = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e4).round() / 10.0);
    // The run's trace id, to find the server's trace of it (absent when not traced).
    let trace_id = outcome.trace.map(|t| t.trace_id_hex());
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
            input_tokens = o.input_tokens,
            trace_id,
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
            error = %f.message,
            trace_id,
            "Probe run failed."
        ),
    }
}
