//! The agent's own Prometheus metrics, all under `inferprobe_`, apart from any in-service
//! metrics. Consumes `&Outcome`; never sees probes or the scheduler.
//!
//! Labels come from a closed set: probe, kind, model, location, the user's static labels,
//! plus result/reason on the run counter (and, at `full` detail, prompt_bucket and
//! image_bucket on runs and TTFT). Failed runs count toward availability
//! (`inferprobe_runs_total{result="failure"}`) and stay out of the latency histograms, so
//! a fast error never improves a percentile.
//!
//! Every series costs the user storage, so by default (`metrics.detail: basic`) a probe
//! exposes only what availability and latency SLOs need: runs, skipped runs, up, the last
//! run and success, TTFT and total, and tokens by direction; the rest is at `full` detail,
//! per probe ([`ProbeIdentity::full_metrics`]) and for the agent's own schedule lag.
//! docs/metrics.md lists which series is where, and tests/it/series_budget.rs pins the counts.
//!
//! A probe's series live in one compact struct (metrics/probe.rs) made when the probe is
//! configured and dropped when it goes, found per run by the address of the probe's
//! identity; the agent's own series are prometheus-client's registry. metrics/families.rs
//! writes the probes' series family by family, metrics/exposition.rs puts the formats
//! together, metrics/histogram.rs holds the histograms (native ones included).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::outcome::{FailureReason, ModelIdentity, Outcome, ProbeIdentity};

mod exposition;
mod families;
mod histogram;
mod probe;
pub use exposition::{EncodeError, TextFormat};
use probe::ProbeSeries;

type FloatGauge = Gauge<f64, AtomicU64>;

/// TTFT and total, the SLO histograms every probe has: nine bounds (ten buckets with
/// +Inf), 50 ms to 20 s, doubling where LLM targets are set (0.5, 1, 2, 4, 8 s). `2` must
/// stay a bound: the shipped recording rules measure the 2 s TTFT target with it.
pub const SLO_BUCKETS: [f64; 9] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0];
/// Finer latency buckets for the `full` detail's TTFB and server-reported durations,
/// 5 ms to 120 s.
pub const LATENCY_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 2.0, 4.0, 8.0, 30.0, 120.0,
];
/// Connection phases (DNS, connect, TLS, readiness): 0.5 ms to 10 s.
pub const PHASE_BUCKETS: [f64; 9] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0, 10.0];
/// Per-token and per-chunk buckets, 1 ms to 2.5 s (a decode step is typically 5-100 ms).
pub const TOKEN_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5,
];
const OUTPUT_TOKEN_BUCKETS: [f64; 12] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];

/// TTFT and total also keep a native histogram, sent only to scrapers that negotiate the
/// protobuf format (the text formats carry the classic buckets alone).
///
/// Schema 3: each bucket is 2^(1/8) ≈ 1.09 times the one below, so a quantile is known
/// to within about ±4.5 %: finer than any LLM latency target needs (they differ by 25 % or
/// more: 1.5 s vs 2 s TTFT), where the ten classic buckets leave a factor of two between
/// 1, 2, 4 and 8 s. At most 40 buckets: at schema 3 they span a factor of 32 (300 ms to
/// 10 s), which a probe's TTFT rarely leaves; a wider spread (a cold start of minutes)
/// halves the resolution instead of adding buckets, once per doubling of the span, so a
/// histogram never holds more than ~40 × 16 bytes. Durations under 1 ms may be merged into
/// the zero bucket first: no LLM answer is that fast, so that resolution is worth nothing.
/// See [`slo_native`].
pub const SLO_NATIVE_SCHEMA: i8 = 3;
/// See [`slo_native`].
pub const SLO_NATIVE_MAX_BUCKETS: usize = 40;

fn token_histogram() -> Histogram {
    Histogram::new(TOKEN_BUCKETS)
}

/// The probes' series, found by the address of the probe's `Arc<ProbeIdentity>` (the
/// one its runs carry): a pointer, not a label set, is hashed per run.
#[derive(Default)]
struct Probes {
    by_identity: HashMap<usize, Arc<ProbeSeries>>,
    /// In exposition order (configuration order).
    list: Vec<Arc<ProbeSeries>>,
    /// Identities of probes rebuilt with the same series at the last reload: a run of
    /// the old build that finishes after the reload still counts, until the next one.
    /// Held so their addresses cannot be reused meanwhile.
    retired: Vec<Arc<ProbeIdentity>>,
}

fn address(p: &Arc<ProbeIdentity>) -> usize {
    Arc::as_ptr(p) as usize
}

pub struct Metrics {
    /// The agent's own series (prometheus-client's); the probes' are in `probes`.
    registry: Registry,
    probes_series: RwLock<Probes>,
    schedule_lag: Family<AgentLabels, Histogram, fn() -> Histogram>,
    /// `agent.metrics.detail: full`: the agent's schedule lag is exposed.
    agent_full: AtomicBool,
    probes: Gauge,
    reload_success: Gauge,
    reload_time: FloatGauge,
    notifications: Family<AgentLabels, Counter>,
    notifications_pending: Family<AgentLabels, Gauge>,
    alerts_firing: Family<AgentLabels, Gauge>,
    push_requests: Family<AgentLabels, Counter>,
    push_samples: Family<AgentLabels, Counter>,
    push_queue: Family<AgentLabels, Gauge>,
    push_last_success: Family<AgentLabels, FloatGauge>,
    history_dropped: Family<AgentLabels, Counter>,
    history_disk: Family<AgentLabels, Gauge>,
    agent_errors: Family<AgentLabels, Counter>,
    connections: Gauge,
    connections_rejected: Counter,
    connections_timed_out: Family<AgentLabels, Counter>,
    accept_errors: Counter,
}

/// A counter kept outside the agent, by the process (its output streams), read when
/// the series are written.
#[derive(Debug)]
struct ProcessCounter(fn() -> u64);

impl prometheus_client::metrics::TypedMetric for ProcessCounter {
    const TYPE: prometheus_client::metrics::MetricType = prometheus_client::metrics::MetricType::Counter;
}

impl prometheus_client::encoding::EncodeMetric for ProcessCounter {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> std::fmt::Result {
        encoder.encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&(self.0)(), None)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Counter
    }
}

/// Labels of the agent's own series (paging): receiver names and closed sets only.
type AgentLabels = Vec<(&'static str, String)>;

impl Metrics {
    /// `location` labels the agent's own series (probe series carry it in their identity).
    pub fn new(location: &str) -> Self {
        let mut registry = Registry::with_prefix("inferprobe");
        let m = Metrics {
            probes_series: RwLock::default(),
            schedule_lag: Family::new_with_constructor(token_histogram as fn() -> Histogram),
            agent_full: AtomicBool::new(false),
            probes: Gauge::default(),
            reload_success: Gauge::default(),
            reload_time: FloatGauge::default(),
            notifications: Family::default(),
            notifications_pending: Family::default(),
            alerts_firing: Family::default(),
            push_requests: Family::default(),
            push_samples: Family::default(),
            push_queue: Family::default(),
            push_last_success: Family::default(),
            history_dropped: Family::default(),
            history_disk: Family::default(),
            agent_errors: Family::default(),
            connections: Gauge::default(),
            connections_rejected: Counter::default(),
            connections_timed_out: Family::default(),
            accept_errors: Counter::default(),
            registry: Registry::default(),
        };
        // The agent's own series carry its location too, so a fleet view can tell
        // agents apart and see one that stopped reporting.
        let agent = registry.sub_registry_with_label(("location".into(), location.to_owned().into()));
        agent.register_with_unit(
            "schedule_lag",
            "How late runs started after their scheduled tick",
            Unit::Seconds,
            m.schedule_lag.clone(),
        );
        agent.register("probes", "Probes in the running configuration", m.probes.clone());
        agent.register(
            "config_last_reload_successful",
            "Whether the last configuration load or reload succeeded",
            m.reload_success.clone(),
        );
        agent.register_with_unit(
            "config_last_reload_success_timestamp",
            "Unix time of the last successful configuration load",
            Unit::Seconds,
            m.reload_time.clone(),
        );
        agent.register(
            "notifications",
            "Notification attempts by receiver, event (firing, reminder, resolved, notice) and result: delivered; failed (will retry); rejected (4xx, dropped); expired (undeliverable past give_up_after)",
            m.notifications.clone(),
        );
        agent.register(
            "notifications_pending",
            "Notifications waiting in the durable outbox, by receiver",
            m.notifications_pending.clone(),
        );
        agent.register(
            "alerts_firing",
            "Alerts this agent has firing, by alert (down, degraded) and severity",
            m.alerts_firing.clone(),
        );
        agent.register(
            "remote_write_requests",
            "remote_write requests by result: success; retry (5xx, 429, network: sent again); rejected (4xx: dropped)",
            m.push_requests.clone(),
        );
        agent.register(
            "remote_write_samples",
            "Samples pushed with remote_write by result: sent; dropped_queue_full (the receiver was away longer than the queue holds); dropped_rejected (4xx)",
            m.push_samples.clone(),
        );
        agent.register(
            "remote_write_queue_snapshots",
            "Snapshots of our metrics waiting to be pushed",
            m.push_queue.clone(),
        );
        agent.register_with_unit(
            "remote_write_last_success_timestamp",
            "Unix time of the last accepted remote_write request",
            Unit::Seconds,
            m.push_last_success.clone(),
        );
        agent.register(
            "history_runs_dropped",
            "Finished runs not kept in the local history (the writer fell a full queue behind, or the disk failed)",
            m.history_dropped.clone(),
        );
        agent.register_with_unit(
            "history_disk",
            "Disk used by the local store (database and its write-ahead log)",
            Unit::Bytes,
            m.history_disk.clone(),
        );
        agent.register(
            "agent_errors",
            "Runs that failed because the agent itself was out of file descriptors or memory, by probe: not the endpoint's failures, so not in inferprobe_runs_total",
            m.agent_errors.clone(),
        );
        agent.register(
            "listener_connections",
            "Connections open on the agent's own port",
            m.connections.clone(),
        );
        agent.register(
            "listener_connections_rejected",
            "Connections to the agent's own port closed at once because max_connections were open",
            m.connections_rejected.clone(),
        );
        agent.register(
            "listener_connections_timed_out",
            "Connections to the agent's own port closed by the agent, by phase: header (no complete request in time, TLS handshake included) or idle (kept alive with no request)",
            m.connections_timed_out.clone(),
        );
        agent.register(
            "listener_accept_errors",
            "Failed accepts on the agent's own port (e.g. out of file descriptors); the listener backs off",
            m.accept_errors.clone(),
        );
        agent.register(
            "log_lines_dropped",
            "Lines the agent did not write to its stderr or stdout because the reader stopped taking them (a full pipe, a blocked log driver): the agent went on probing",
            ProcessCounter(crate::output::lines_dropped),
        );
        agent.register(
            "build",
            "Build information",
            Info::new(vec![("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned())]),
        );
        // The usual alerts, at zero until they fire.
        for labels in [("down", "critical"), ("degraded", "warning")] {
            m.alerts_firing
                .get_or_create(&vec![
                    ("alert", labels.0.to_owned()),
                    ("severity", labels.1.to_owned()),
                ])
                .set(0);
        }
        Metrics { registry, ..m }
    }

    /// One finished run. A run of a probe that is no longer configured (it finished
    /// after a reload removed its probe) is not counted: its series are gone and stay gone.
    pub fn record(&self, outcome: &Outcome) {
        let obs = &outcome.observation;
        // The agent's own exhaustion says nothing about the endpoint: neither its
        // availability, nor `up`, nor its last run may move.
        if obs
            .failure()
            .is_some_and(|f| f.reason == FailureReason::AgentError)
        {
            self.agent_errors
                .get_or_create(&vec![("probe", outcome.probe.name.to_string())])
                .inc();
            return;
        }
        if self.agent_full.load(Ordering::Relaxed) {
            self.schedule_lag
                .get_or_create(&Vec::new())
                .observe(outcome.schedule_lag.as_secs_f64());
        }
        if let Some(series) = self.series_of(&outcome.probe) {
            series.record(outcome);
        }
    }

    /// The model serving `probe` (its info series).
    pub fn model_identity(&self, probe: &Arc<ProbeIdentity>, identity: &Arc<ModelIdentity>) {
        if let Some(series) = self.series_of(probe) {
            series.model(identity);
        }
    }

    pub fn record_skipped(&self, probe: &Arc<ProbeIdentity>, ticks: u64) {
        if let Some(series) = self.series_of(probe) {
            series.skipped(ticks);
        }
    }

    /// A tick held off for another probe's cold run.
    pub fn record_held(&self, probe: &Arc<ProbeIdentity>) {
        if let Some(series) = self.series_of(probe) {
            series.held();
        }
    }

    fn series_of(&self, probe: &Arc<ProbeIdentity>) -> Option<Arc<ProbeSeries>> {
        let probes = self.probes_series.read().unwrap_or_else(|e| e.into_inner());
        probes.by_identity.get(&address(probe)).cloned()
    }

    /// The probes' series as they are now, for one encoding.
    fn probe_list(&self) -> Arc<[Arc<ProbeSeries>]> {
        let probes = self.probes_series.read().unwrap_or_else(|e| e.into_inner());
        probes.list.iter().cloned().collect()
    }

    /// After a (re)load: the probe count and the agent's detail; the series of probes
    /// that went or changed: a probe rebuilt with the same labels and detail keeps its
    /// counters and histograms (rate() runs on) but loses its gauges, so a deleted probe
    /// does not stay `up == 0` (and alerting) forever; any other loses every series at
    /// once, so none is left stale, and a run of it finishing later adds none back.
    /// New probes start with no series; each appears when it first has something to say.
    pub fn configured(
        &self,
        probes: usize,
        full_agent_series: bool,
        added: &[Arc<ProbeIdentity>],
        removed: &[Arc<ProbeIdentity>],
    ) {
        self.probes.set(probes as i64);
        self.agent_full.store(full_agent_series, Ordering::Relaxed);
        if !full_agent_series {
            self.schedule_lag.clear();
        }
        let mut guard = self.probes_series.write().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        for old in state.retired.drain(..) {
            state.by_identity.remove(&address(&old));
        }
        let gone: Vec<(Arc<ProbeIdentity>, Arc<ProbeSeries>)> = removed
            .iter()
            .filter_map(|p| Some((p.clone(), state.by_identity.remove(&address(p))?)))
            .collect();
        let mut fresh = Vec::new();
        for p in added {
            let continued = gone.iter().find(|(old, _)| probe::same_series(old, p));
            let series = match continued {
                Some((old, series)) => {
                    series.forget_gauges();
                    if !Arc::ptr_eq(old, p) {
                        state.by_identity.insert(address(old), series.clone());
                        state.retired.push(old.clone());
                    }
                    series.clone()
                }
                None => {
                    let series = Arc::new(ProbeSeries::new(p.clone()));
                    fresh.push(series.clone());
                    series
                }
            };
            state.by_identity.insert(address(p), series);
        }
        let live: HashSet<usize> = state
            .by_identity
            .values()
            .map(|s| Arc::as_ptr(s) as usize)
            .collect();
        state.list.retain(|s| live.contains(&(Arc::as_ptr(s) as usize)));
        state.list.extend(fresh);
    }

    pub fn reloaded(&self, ok: bool) {
        self.reload_success.set(i64::from(ok));
        if ok {
            self.reload_time.set(unix_seconds(SystemTime::now()));
        }
    }

    /// One delivery attempt's result.
    pub fn notification(&self, receiver: &str, event: &'static str, result: &'static str) {
        self.notifications
            .get_or_create(&vec![
                ("receiver", receiver.to_owned()),
                ("event", event.to_owned()),
                ("result", result.to_owned()),
            ])
            .inc();
    }

    pub fn notifications_pending(&self, receiver: &str, pending: u64) {
        self.notifications_pending
            .get_or_create(&vec![("receiver", receiver.to_owned())])
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// Firing alerts by (alert, severity); pairs not given drop to zero.
    pub fn alerts_firing(&self, firing: &[(&'static str, &'static str)]) {
        for alert in ["down", "degraded"] {
            for severity in ["critical", "error", "warning", "info"] {
                let n = firing.iter().filter(|f| **f == (alert, severity)).count();
                let labels = vec![("alert", alert.to_owned()), ("severity", severity.to_owned())];
                if n > 0 {
                    self.alerts_firing.get_or_create(&labels).set(n as i64);
                } else if self.alerts_firing.get(&labels).is_some() {
                    self.alerts_firing.get_or_create(&labels).set(0);
                }
            }
        }
    }

    /// The history writer's figures: runs dropped so far (a running total) and disk use.
    pub fn history(&self, dropped: u64, disk_bytes: u64) {
        let dropped_counter = self.history_dropped.get_or_create(&Vec::new());
        let seen = dropped_counter.get();
        if dropped > seen {
            dropped_counter.inc_by(dropped - seen);
        }
        self.history_disk
            .get_or_create(&Vec::new())
            .set(i64::try_from(disk_bytes).unwrap_or(i64::MAX));
    }

    /// The agent's own port: connections open now.
    pub fn listener_open(&self, open: usize) {
        self.connections.set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    pub fn listener_rejected(&self) {
        self.connections_rejected.inc();
    }

    /// `phase`: header or idle.
    pub fn listener_timed_out(&self, phase: &'static str) {
        self.connections_timed_out
            .get_or_create(&vec![("phase", phase.to_owned())])
            .inc();
    }

    pub fn listener_accept_error(&self) {
        self.accept_errors.inc();
    }

    pub fn push_request(&self, result: &'static str) {
        self.push_requests
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
    }

    pub fn push_samples(&self, result: &'static str, n: u64) {
        self.push_samples
            .get_or_create(&vec![("result", result.to_owned())])
            .inc_by(n);
    }

    pub fn push_queue(&self, snapshots: usize) {
        self.push_queue.get_or_create(&Vec::new()).set(snapshots as i64);
    }

    pub fn push_succeeded(&self, at: SystemTime) {
        self.push_last_success
            .get_or_create(&Vec::new())
            .set(unix_seconds(at));
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

#[cfg(test)]
mod tests;
