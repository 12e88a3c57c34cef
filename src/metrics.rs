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
//! run and success, TTFT and total; the rest is at `full` detail, per probe
//! ([`ProbeIdentity::full_metrics`]) and for the agent's own schedule lag. docs/metrics.md
//! lists which series is where, and tests/series_budget.rs pins the counts.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, NativeHistogramConfig};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::outcome::{FailureReason, Outcome, ProbeIdentity};

mod exposition;
pub use exposition::{EncodeError, TextFormat};

/// A series' labels: the probe's identity (shared, not copied: with 10,000 probes each
/// copy of the label strings per series would cost megabytes) plus up to three
/// per-series labels from closed sets (prompt_bucket, image_bucket, result, reason,
/// phase, stage).
#[derive(Debug, Clone)]
struct Labels {
    probe: Arc<ProbeIdentity>,
    extra: Extra,
}

/// A series' labels beyond the probe's own: up to four (name, value), empty names unused.
type Extra = [(&'static str, &'static str); 4];

/// The exported parts of a series' labels.
type LabelKey<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a [(String, String)],
    &'a [(&'static str, &'static str); 4],
);

impl Labels {
    /// What is exported, and so what tells two series apart (the endpoint is not).
    fn key(&self) -> LabelKey<'_> {
        let p = &*self.probe;
        (&p.name, p.kind, &p.model, &p.location, &p.labels, &self.extra)
    }
}

impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Labels {}

impl std::hash::Hash for Labels {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl Labels {
    fn probe(probe: &Arc<ProbeIdentity>) -> Self {
        Labels {
            probe: probe.clone(),
            extra: [("", ""); 4],
        }
    }

    fn with(&self, name: &'static str, value: &'static str) -> Self {
        let mut l = self.clone();
        if let Some(slot) = l.extra.iter_mut().find(|(n, _)| n.is_empty()) {
            *slot = (name, value);
        }
        l
    }
}

impl EncodeLabelSet for Labels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let p = &*self.probe;
        ("probe", p.name.as_str()).encode(encoder.encode_label())?;
        ("kind", p.kind).encode(encoder.encode_label())?;
        ("model", p.model.as_str()).encode(encoder.encode_label())?;
        ("location", p.location.as_str()).encode(encoder.encode_label())?;
        for (k, v) in &p.labels {
            (k.as_str(), v.as_str()).encode(encoder.encode_label())?;
        }
        for (k, v) in self.extra.iter().filter(|(k, _)| !k.is_empty()) {
            (*k, *v).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}
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
fn slo_native() -> NativeHistogramConfig {
    NativeHistogramConfig::with_schema(SLO_NATIVE_SCHEMA)
        .max_buckets(SLO_NATIVE_MAX_BUCKETS)
        .max_zero_threshold(0.001)
}

/// See [`slo_native`].
pub const SLO_NATIVE_SCHEMA: i8 = 3;
/// See [`slo_native`].
pub const SLO_NATIVE_MAX_BUCKETS: usize = 40;

fn slo_histogram() -> Histogram {
    Histogram::new_classic_and_native(SLO_BUCKETS, slo_native())
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn phase_histogram() -> Histogram {
    Histogram::new(PHASE_BUCKETS)
}

fn token_histogram() -> Histogram {
    Histogram::new(TOKEN_BUCKETS)
}

fn output_token_histogram() -> Histogram {
    Histogram::new(OUTPUT_TOKEN_BUCKETS)
}

type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn histogram_family(new: fn() -> Histogram) -> HistogramFamily {
    Family::new_with_constructor(new)
}

pub struct Metrics {
    registry: Registry,
    runs: Family<Labels, Counter>,
    skipped: Family<Labels, Counter>,
    up: Family<Labels, Gauge>,
    last_run: Family<Labels, FloatGauge>,
    last_success: Family<Labels, FloatGauge>,
    e2e: HistogramFamily,
    ttfb: HistogramFamily,
    ttft: HistogramFamily,
    tpot: HistogramFamily,
    chunk_gap: HistogramFamily,
    phase: HistogramFamily,
    output_tokens: HistogramFamily,
    server_reported: HistogramFamily,
    schedule_lag: Family<AgentLabels, Histogram, fn() -> Histogram>,
    /// `agent.metrics.detail: full`: the agent's schedule lag is exposed.
    agent_full: AtomicBool,
    /// Every set of per-series labels (bucket, result, phase, stage...) recorded so far,
    /// from closed sets so a few dozen at most: what [`Metrics::forget`] removes a probe's
    /// series by, as a family can only remove a label set it is given.
    extras_seen: Mutex<HashSet<Extra>>,
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

/// Labels of the agent's own series (paging): receiver names and closed sets only.
type AgentLabels = Vec<(&'static str, String)>;

impl Metrics {
    /// `location` labels the agent's own series (probe series carry it in their identity).
    pub fn new(location: &str) -> Self {
        let mut registry = Registry::with_prefix("inferprobe");
        let m = Metrics {
            runs: Family::default(),
            skipped: Family::default(),
            up: Family::default(),
            last_run: Family::default(),
            last_success: Family::default(),
            e2e: histogram_family(slo_histogram),
            ttfb: histogram_family(latency_histogram),
            ttft: histogram_family(slo_histogram),
            tpot: histogram_family(token_histogram),
            chunk_gap: histogram_family(token_histogram),
            phase: histogram_family(phase_histogram),
            output_tokens: histogram_family(output_token_histogram),
            server_reported: histogram_family(latency_histogram),
            schedule_lag: Family::new_with_constructor(token_histogram as fn() -> Histogram),
            agent_full: AtomicBool::new(false),
            extras_seen: Mutex::default(),
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
        registry.register(
            "runs",
            "Probe runs by result (success or failure) and failure reason (none on success)",
            m.runs.clone(),
        );
        registry.register(
            "skipped_runs",
            "Scheduled runs that did not start because the previous run was still going or the agent fell behind",
            m.skipped.clone(),
        );
        registry.register(
            "up",
            "Whether the probe's last run succeeded (1) or failed (0)",
            m.up.clone(),
        );
        registry.register_with_unit(
            "last_run_timestamp",
            "Unix time the probe's last run started",
            Unit::Seconds,
            m.last_run.clone(),
        );
        registry.register_with_unit(
            "last_success_timestamp",
            "Unix time the probe's last successful run started",
            Unit::Seconds,
            m.last_success.clone(),
        );
        registry.register_with_unit(
            "e2e_latency",
            "Successful runs: request start (connection included) to the response fully received (the protocol's terminator)",
            Unit::Seconds,
            m.e2e.clone(),
        );
        registry.register_with_unit(
            "ttfb",
            "Successful runs: request start to response headers received",
            Unit::Seconds,
            m.ttfb.clone(),
        );
        registry.register_with_unit(
            "ttft",
            "Successful streaming runs: request start to the first event carrying generated output",
            Unit::Seconds,
            m.ttft.clone(),
        );
        registry.register_with_unit(
            "tpot",
            "Successful streaming runs: (last token - first token) / (output tokens - 1)",
            Unit::Seconds,
            m.tpot.clone(),
        );
        registry.register_with_unit(
            "chunk_gap",
            "Gaps between consecutive content-bearing stream events (a chunk may hold several tokens; not by prompt bucket)",
            Unit::Seconds,
            m.chunk_gap.clone(),
        );
        registry.register_with_unit(
            "phase",
            "Phases of successful runs: dns, connect, tls (new connections), ready (a readiness check before the request); not by prompt bucket",
            Unit::Seconds,
            m.phase.clone(),
        );
        registry.register(
            "output_tokens",
            "Output tokens per successful streaming run (server-reported where available)",
            m.output_tokens.clone(),
        );
        registry.register_with_unit(
            "server_reported_duration",
            "Durations the server reported about itself (e.g. Ollama's load, prompt_eval, eval, total), by stage; not our measurement",
            Unit::Seconds,
            m.server_reported.clone(),
        );
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
            "Notification attempts by receiver, event (firing, reminder, resolved) and result: delivered; failed (will retry); rejected (4xx, dropped); expired (undeliverable past give_up_after)",
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

    pub fn record(&self, outcome: &Outcome) {
        let obs = &outcome.observation;
        // The agent's own exhaustion says nothing about the endpoint: neither its
        // availability, nor `up`, nor its last run may move.
        if obs
            .failure()
            .is_some_and(|f| f.reason == FailureReason::AgentError)
        {
            self.agent_errors
                .get_or_create(&vec![("probe", outcome.probe.name.clone())])
                .inc();
            return;
        }
        let full = outcome.probe.full_metrics;
        let probe = Labels::probe(&outcome.probe);
        // At full detail, runs and TTFT are split by prompt size, and by image size
        // where images are sent (`none` on every text probe would double nothing but
        // the series count).
        let run = match (full, obs.image_bucket) {
            (false, _) => probe.clone(),
            (true, "none") => probe.with("prompt_bucket", obs.prompt_bucket),
            (true, image) => probe
                .with("prompt_bucket", obs.prompt_bucket)
                .with("image_bucket", image),
        };

        let started = unix_seconds(outcome.started_at);
        self.last_run.get_or_create(&probe).set(started);
        if self.agent_full.load(Ordering::Relaxed) {
            self.schedule_lag
                .get_or_create(&Vec::new())
                .observe(outcome.schedule_lag.as_secs_f64());
        }

        let counted = match obs.failure() {
            Some(f) => run.with("result", "failure").with("reason", f.reason.as_str()),
            None => run.with("result", "success").with("reason", "none"),
        };
        self.seen(&counted);
        self.runs.get_or_create(&counted).inc();
        if obs.failure().is_some() {
            self.up.get_or_create(&probe).set(0);
            return;
        }
        self.up.get_or_create(&probe).set(1);
        self.last_success.get_or_create(&probe).set(started);

        if let Some(d) = obs.ttft() {
            self.seen(&run);
            self.ttft.get_or_create(&run).observe(d.as_secs_f64());
        }
        let per_probe = |family: &HistogramFamily, d: Option<Duration>| {
            if let Some(d) = d {
                family.get_or_create(&probe).observe(d.as_secs_f64());
            }
        };
        per_probe(&self.e2e, obs.total());
        if !full {
            return;
        }
        per_probe(&self.ttfb, obs.ttfb());
        per_probe(&self.tpot, obs.tpot());
        if !obs.chunk_gaps.is_empty() {
            let h = self.chunk_gap.get_or_create(&probe);
            for g in &obs.chunk_gaps {
                h.observe(g.as_secs_f64());
            }
        }
        let phases = [("dns", obs.dns()), ("connect", obs.connect()), ("tls", obs.tls())];
        let new_connection = phases.iter().filter(|_| !obs.connection_reused);
        for (name, d) in std::iter::once(&("ready", obs.ready_check)).chain(new_connection) {
            if let Some(d) = d {
                let labels = probe.with("phase", name);
                self.seen(&labels);
                self.phase.get_or_create(&labels).observe(d.as_secs_f64());
            }
        }
        for (stage, d) in &obs.server_reported {
            let labels = probe.with("stage", stage);
            self.seen(&labels);
            self.server_reported
                .get_or_create(&labels)
                .observe(d.as_secs_f64());
        }
        if let (Some(n), Some(_)) = (obs.output_tokens, obs.ttft()) {
            self.output_tokens.get_or_create(&probe).observe(n as f64);
        }
    }

    pub fn record_skipped(&self, probe: &Arc<ProbeIdentity>, ticks: u64) {
        self.skipped.get_or_create(&Labels::probe(probe)).inc_by(ticks);
    }

    /// After a (re)load: the probe count and the agent's detail; the series of probes
    /// that went or changed: a probe rebuilt with the same labels and detail keeps its
    /// counters and histograms (rate() runs on) but loses its gauges, so a deleted probe
    /// does not stay `up == 0` (and alerting) forever; any other loses every series, so
    /// none is left stale. New probes' skip counters start at zero, so rate() sees them
    /// before the first skip.
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
        for p in removed {
            let l = Labels::probe(p);
            let continued = added
                .iter()
                .any(|a| Labels::probe(a) == l && a.full_metrics == p.full_metrics);
            if continued {
                self.up.remove(&l);
                self.last_run.remove(&l);
                self.last_success.remove(&l);
            } else {
                self.forget(&l);
            }
        }
        for p in added {
            self.skipped.get_or_create(&Labels::probe(p)).inc_by(0);
        }
    }

    /// Notes a per-series label set, for [`Metrics::forget`].
    fn seen(&self, labels: &Labels) {
        let mut seen = self.extras_seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(labels.extra);
    }

    /// Removes every series of one probe (`labels`: the probe's own, no extra).
    fn forget(&self, labels: &Labels) {
        let seen: Vec<Extra> = {
            let seen = self.extras_seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.iter().copied().collect()
        };
        self.up.remove(labels);
        self.last_run.remove(labels);
        self.last_success.remove(labels);
        self.runs.remove(labels);
        self.skipped.remove(labels);
        let histograms = [
            &self.e2e,
            &self.ttfb,
            &self.ttft,
            &self.tpot,
            &self.chunk_gap,
            &self.phase,
            &self.output_tokens,
            &self.server_reported,
        ];
        for family in histograms {
            family.remove(labels);
        }
        for extra in seen {
            let series = Labels {
                probe: labels.probe.clone(),
                extra,
            };
            self.runs.remove(&series);
            for family in histograms {
                family.remove(&series);
            }
        }
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
mod tests {
    use super::*;
    use crate::outcome::{Failure, FailureReason, Observation};
    use prometheus_client::encoding::prometheus_protobuf;
    use std::sync::Arc;
    use std::time::Instant;

    fn outcome(fail: Option<FailureReason>) -> Outcome {
        let t0 = Instant::now();
        let mut o = Observation::new(t0);
        o.prompt_bucket = "short";
        o.marks.headers = Some(t0 + Duration::from_millis(10));
        o.marks.first_token = Some(t0 + Duration::from_millis(300));
        o.marks.last_token = Some(t0 + Duration::from_millis(400));
        o.marks.end = Some(t0 + Duration::from_millis(410));
        o.output_tokens = Some(5);
        o.chunk_gaps = vec![Duration::from_millis(25); 4];
        if let Some(r) = fail {
            o.result = Err(Failure::new(r, "x"));
        }
        Outcome {
            probe: Arc::new(ProbeIdentity {
                name: "chat".into(),
                kind: "openai_chat",
                model: "m".into(),
                location: "eu-west".into(),
                labels: vec![("team".into(), "ml".into())],
                endpoint: "http://x/".into(),
                query: String::new(),
                full_metrics: false,
            }),
            started_at: SystemTime::now(),
            schedule_lag: Duration::ZERO,
            trace: None,
            observation: o,
        }
    }

    #[test]
    fn the_agents_own_exhaustion_is_an_agent_series_not_an_endpoint_failure() {
        let m = Metrics::new("test");
        m.record(&outcome(None));
        m.record(&outcome(Some(FailureReason::AgentError)));
        m.record(&outcome(Some(FailureReason::AgentError)));
        let text = m.render_text();
        assert!(!text.contains("result=\"failure\""), "{text}");
        assert!(!text.contains("agent_error\""), "{text}");
        assert!(
            text.contains(r#"inferprobe_agent_errors_total{location="test",probe="chat"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"inferprobe_up{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml"} 1"#
            ),
            "{text}"
        );
    }

    fn full(mut o: Outcome) -> Outcome {
        o.probe = Arc::new(ProbeIdentity {
            full_metrics: true,
            ..(*o.probe).clone()
        });
        o
    }

    #[test]
    fn success_fills_histograms_and_failure_only_counts() {
        let m = Metrics::new("test");
        m.record(&full(outcome(None)));
        m.record(&full(outcome(Some(FailureReason::Http5xx))));
        let text = m.render_text();
        assert!(text.contains(r#"inferprobe_runs_total{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml",prompt_bucket="short",result="success",reason="none"} 1"#), "{text}");
        assert!(text.contains(r#"result="failure",reason="http_5xx"} 1"#));
        assert!(text.contains(r#"inferprobe_ttft_seconds_count{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml",prompt_bucket="short"} 1"#));
        assert!(text.contains(r#"inferprobe_chunk_gap_seconds_count{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml"} 4"#));
        assert!(text.contains(
            r#"inferprobe_up{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml"} 0"#
        ));
    }

    #[test]
    fn the_basic_detail_keeps_what_slos_need_and_nothing_else() {
        let m = Metrics::new("test");
        m.record(&outcome(None));
        m.record(&outcome(Some(FailureReason::Http5xx)));
        let text = m.render_text();
        let names: std::collections::BTreeSet<&str> = text
            .lines()
            .filter(|l| l.starts_with("inferprobe_") && l.contains("probe=\"chat\""))
            .filter_map(|l| l.split('{').next())
            .collect();
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            [
                "inferprobe_e2e_latency_seconds_bucket",
                "inferprobe_e2e_latency_seconds_count",
                "inferprobe_e2e_latency_seconds_sum",
                "inferprobe_last_run_timestamp_seconds",
                "inferprobe_last_success_timestamp_seconds",
                "inferprobe_runs_total",
                "inferprobe_ttft_seconds_bucket",
                "inferprobe_ttft_seconds_count",
                "inferprobe_ttft_seconds_sum",
                "inferprobe_up",
            ],
            "{text}"
        );
        // No prompt split, ten buckets, and the schedule lag only at the agent's full detail.
        assert!(text.contains(r#"inferprobe_runs_total{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml",result="success",reason="none"} 1"#), "{text}");
        assert!(!text.contains("prompt_bucket"), "{text}");
        assert_eq!(
            text.matches("inferprobe_ttft_seconds_bucket{").count(),
            10,
            "{text}"
        );
        assert!(!text.contains("schedule_lag_seconds_count"), "{text}");
        m.configured(1, true, &[], &[]);
        m.record(&outcome(None));
        assert!(
            m.render_text()
                .contains("inferprobe_schedule_lag_seconds_count{location=\"test\"} 1")
        );
        m.configured(1, false, &[], &[]);
        assert!(!m.render_text().contains("schedule_lag_seconds_count"));
    }

    #[test]
    fn a_probe_whose_detail_changes_leaves_no_stale_series() {
        let m = Metrics::new("test");
        let before = full(outcome(None));
        m.record(&before);
        m.record(&full(outcome(Some(FailureReason::Http5xx))));
        let after = outcome(None);
        let (old, new) = (vec![before.probe.clone()], vec![after.probe.clone()]);
        m.configured(1, false, &new, &old);
        let text = m.render_text();
        let of_chat = |t: &str| t.lines().filter(|l| l.contains("probe=\"chat\"")).count();
        // Only the skip counter, at zero, until the rebuilt probe runs.
        assert_eq!(of_chat(&text), 1, "{text}");
        m.record(&after);
        let text = m.render_text();
        assert!(
            !text.contains("prompt_bucket") && !text.contains("ttfb"),
            "{text}"
        );
        assert_eq!(of_chat(&text), 1 + 1 + 3 + 2 * 12, "{text}");
        // The same labels and detail: counters go on, gauges go until the next run.
        m.configured(1, false, &new, &new);
        let text = m.render_text();
        assert!(text.contains(r#"result="success",reason="none"} 1"#), "{text}");
        assert!(!text.contains("inferprobe_up{"), "{text}");
        // A removed probe leaves nothing behind.
        m.configured(0, false, &[], &new);
        assert_eq!(of_chat(&m.render_text()), 0);
    }

    #[test]
    fn series_are_told_apart_by_exported_labels_only() {
        let m = Metrics::new("test");
        let a = outcome(None);
        let mut b = outcome(None);
        // Same labels, another endpoint (not a label): one series, counted twice.
        b.probe = Arc::new(ProbeIdentity {
            endpoint: "http://elsewhere/".into(),
            query: String::new(),
            full_metrics: false,
            ..(*a.probe).clone()
        });
        m.record(&a);
        m.record(&b);
        let text = m.render_text();
        assert_eq!(text.matches("inferprobe_up{").count(), 1, "{text}");
        assert!(text.contains(r#"result="success",reason="none"} 2"#));
    }

    #[test]
    fn openmetrics_output_ends_with_eof() {
        let m = Metrics::new("test");
        m.record(&outcome(None));
        assert!(m.render_openmetrics().trim_end().ends_with("# EOF"));
    }

    #[test]
    fn every_series_has_our_prefix() {
        let m = Metrics::new("test");
        m.record(&outcome(None));
        for line in m.render_text().lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("inferprobe_"), "{line}");
        }
    }

    fn decode(mut body: &[u8]) -> Vec<prometheus_protobuf::prometheus_data_model::MetricFamily> {
        let mut families = Vec::new();
        while !body.is_empty() {
            families.push(prost::Message::decode_length_delimited(&mut body).unwrap());
        }
        families
    }

    #[test]
    fn ttft_and_total_go_out_native_in_protobuf_beside_their_classic_buckets() {
        let m = Metrics::new("test");
        m.record(&outcome(None));
        let families = decode(&m.render_protobuf().unwrap());
        for name in ["inferprobe_ttft_seconds", "inferprobe_e2e_latency_seconds"] {
            let family = families.iter().find(|f| f.name == name).expect(name);
            let h = family.metric[0].histogram.as_ref().unwrap();
            assert_eq!(h.schema, i32::from(SLO_NATIVE_SCHEMA), "{name}");
            assert_eq!(h.sample_count, 1, "{name}");
            assert_eq!(h.positive_delta, [1], "{name}");
            assert_eq!(h.bucket.len(), SLO_BUCKETS.len() + 1, "{name}");
        }
        // The text formats have the classic buckets only, as before.
        let text = m.render_text();
        assert_eq!(
            text.matches("inferprobe_ttft_seconds_bucket{").count(),
            SLO_BUCKETS.len() + 1
        );
    }

    #[test]
    fn no_latency_spread_grows_a_native_histogram_past_its_bucket_bound() {
        let h = slo_histogram();
        // A microsecond to three hours, 400 steps of 5 %: ~440 buckets at schema 3.
        for i in 0..400 {
            h.observe(1e-6 * 1.05_f64.powi(i));
        }
        let mut registry = Registry::default();
        registry.register("spread", "", h);
        let families = decode(&prometheus_protobuf::encode_to_vec(&registry).unwrap());
        let native = families[0].metric[0].histogram.as_ref().unwrap();
        let mut count = 0_i64;
        let populated = native
            .positive_delta
            .iter()
            .filter(|d| {
                count += **d;
                count > 0
            })
            .count();
        assert!(populated <= SLO_NATIVE_MAX_BUCKETS, "{populated} buckets");
        assert!(native.schema < i32::from(SLO_NATIVE_SCHEMA), "{}", native.schema);
        assert_eq!(native.sample_count, 400);
    }
}
