//! One probe's series, held together in one compact struct made when the probe is
//! configured and dropped when it goes: recording a run locks that struct (no other
//! probe's) and updates numbers in place, without hashing or cloning a label set. The
//! probe's labels are its `Arc<ProbeIdentity>`, shared by every series.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::outcome::{FailureReason, ModelIdentity, Outcome, ProbeIdentity};

use super::histogram::{Classic, NativeConfig, SloHistogram};
use super::{
    LATENCY_BUCKETS, OUTPUT_TOKEN_BUCKETS, PHASE_BUCKETS, SLO_BUCKETS, SLO_NATIVE_MAX_BUCKETS,
    SLO_NATIVE_SCHEMA, TOKEN_BUCKETS, unix_seconds,
};

/// A series' labels beyond the probe's own, as exposed: up to five (name, value), empty
/// names unused.
pub(super) type Extra = [(&'static str, &'static str); 5];

pub(super) const NO_EXTRA: Extra = [("", ""); 5];

/// What a run's series are split by: the prompt and image size at `full` detail only,
/// and `start="cold"` for a cold probe's cold runs (warm runs carry no `start` label, so
/// a probe that never runs cold has no series more, and `start=""` selects warm runs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Buckets {
    prompt: Option<&'static str>,
    image: Option<&'static str>,
    cold: bool,
}

impl Buckets {
    pub fn labels(self) -> Extra {
        let mut e = NO_EXTRA;
        let mut at = 0;
        let start = self.cold.then_some("cold");
        for (name, value) in [
            ("prompt_bucket", self.prompt),
            ("image_bucket", self.image),
            ("start", start),
        ] {
            if let Some(value) = value {
                e[at] = (name, value);
                at += 1;
            }
        }
        e
    }
}

/// The labels of one `runs_total` series, held compact: a probe keeps one per result and
/// reason it has seen, and the four label pairs they expand to took 144 bytes with the
/// count (1.4 MB at 10,000 probes, heaptrack), where this takes 48.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RunKey {
    buckets: Buckets,
    /// `None` for a success.
    reason: Option<FailureReason>,
}

impl RunKey {
    pub fn labels(self) -> Extra {
        let mut e = self.buckets.labels();
        let at = e.iter().take_while(|(name, _)| !name.is_empty()).count();
        let (result, reason) = match self.reason {
            Some(r) => ("failure", r.as_str()),
            None => ("success", "none"),
        };
        e[at] = ("result", result);
        e[at + 1] = ("reason", reason);
        e
    }
}

/// TTFT's and total's native histograms (see `slo_native` in metrics.rs).
const SLO_NATIVE: NativeConfig = NativeConfig {
    schema: SLO_NATIVE_SCHEMA,
    max_buckets: SLO_NATIVE_MAX_BUCKETS,
    max_zero_threshold: 0.001,
};

/// Every series of one probe.
#[derive(Debug)]
pub(super) struct ProbeSeries {
    pub identity: Arc<ProbeIdentity>,
    state: Mutex<State>,
}

/// What the series hold; a series that has not occurred yet is `None` or absent.
#[derive(Debug, Default)]
pub(super) struct State {
    /// `runs_total` by (prompt bucket, image bucket at `full`;) result and reason.
    pub runs: Vec<(RunKey, u64)>,
    pub skipped: Option<u64>,
    /// Ticks held off for another probe's cold run.
    pub held: Option<u64>,
    pub up: Option<i64>,
    pub last_run: Option<f64>,
    pub last_success: Option<f64>,
    pub e2e: Option<Box<SloHistogram>>,
    /// Total time of cold runs (`start="cold"`), apart from the warm ones'.
    pub e2e_cold: Option<Box<SloHistogram>>,
    /// Restarts of the endpoint seen (each warm-up's start counted once), and the start
    /// of the last one.
    pub restarts: Option<u64>,
    pub last_restart: Option<std::time::SystemTime>,
    /// A burst probe's last burst: spread, slowest over fastest, burst over alone.
    pub burst: Option<Box<[Option<f64>; 3]>>,
    /// One at `basic`; at `full` one per prompt (and image) bucket.
    pub ttft: Vec<(Buckets, SloHistogram)>,
    /// Input and output tokens, from the first run that reported either.
    pub tokens: Option<[u64; 2]>,
    /// The model serving the probe: one info series, replaced (never added to) when it
    /// changes, so a probe keeps one however often its model is swapped.
    pub model: Option<Arc<ModelIdentity>>,
    pub full: Option<Box<Full>>,
}

/// The `full` detail's series.
#[derive(Debug, Default)]
pub(super) struct Full {
    pub ttfb: Option<Classic>,
    pub tpot: Option<Classic>,
    pub chunk_gap: Option<Classic>,
    pub output_tokens: Option<Classic>,
    pub phase: Vec<(&'static str, Classic)>,
    pub server_reported: Vec<(&'static str, Classic)>,
}

fn observe(slot: &mut Option<Classic>, bounds: &'static [f64], d: Option<Duration>) {
    if let Some(d) = d {
        slot.get_or_insert_with(|| Classic::new(bounds))
            .observe(d.as_secs_f64());
    }
}

fn keyed<K: PartialEq, V>(list: &mut Vec<(K, V)>, key: K, new: impl FnOnce() -> V) -> &mut V {
    let i = match list.iter().position(|(k, _)| *k == key) {
        Some(i) => i,
        None => {
            // Most lists hold one or two entries for a probe's life: a plain push would
            // reserve four.
            list.reserve_exact(1);
            list.push((key, new()));
            list.len() - 1
        }
    };
    &mut list[i].1
}

impl ProbeSeries {
    pub fn new(identity: Arc<ProbeIdentity>) -> Self {
        ProbeSeries {
            identity,
            state: Mutex::default(),
        }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A rebuilt probe keeps its counters and histograms (rate() runs on) but not its
    /// gauges, so a probe that no longer runs does not stay `up == 0`.
    pub fn forget_gauges(&self) {
        let mut s = self.state();
        s.up = None;
        s.last_run = None;
        s.last_success = None;
        s.burst = None;
    }

    pub fn model(&self, identity: &Arc<ModelIdentity>) {
        let mut s = self.state();
        if s.model.as_ref().is_none_or(|m| m.digest != identity.digest) {
            s.model = Some(identity.clone());
        }
    }

    pub fn skipped(&self, ticks: u64) {
        *self.state().skipped.get_or_insert(0) += ticks;
    }

    pub fn held(&self) {
        *self.state().held.get_or_insert(0) += 1;
    }

    /// One finished run (never the agent's own errors: the caller counts those apart).
    pub fn record(&self, outcome: &Outcome) {
        let obs = &outcome.observation;
        let full = self.identity.full_metrics;
        // At full detail, runs and TTFT are split by prompt size, and by image size
        // where images are sent (`none` on every text probe would double nothing but
        // the series count).
        let cold = outcome.conditions.cold;
        let buckets = match (full, obs.image_bucket) {
            (false, _) => Buckets {
                cold,
                ..Buckets::default()
            },
            (true, "none") => Buckets {
                prompt: Some(obs.prompt_bucket),
                image: None,
                cold,
            },
            (true, image) => Buckets {
                prompt: Some(obs.prompt_bucket),
                image: Some(image),
                cold,
            },
        };
        let failure = obs.failure();
        let run = RunKey {
            buckets,
            reason: failure.map(|f| f.reason),
        };

        let started = unix_seconds(outcome.started_at);
        let trace = outcome.trace.as_ref().map(|t| (t.trace_id, outcome.started_at));
        let mut s = self.state();
        // Tokens cost whether the run succeeded or not.
        if obs.input_tokens.is_some() || obs.output_tokens.is_some() {
            let tokens = s.tokens.get_or_insert([0, 0]);
            tokens[0] += obs.input_tokens.unwrap_or(0);
            tokens[1] += obs.output_tokens.unwrap_or(0);
        }
        s.last_run = Some(started);
        *keyed(&mut s.runs, run, || 0) += 1;
        if let Some(w) = &outcome.conditions.warmup
            && s.last_restart != Some(w.since)
        {
            s.last_restart = Some(w.since);
            *s.restarts.get_or_insert(0) += 1;
        }
        if let Some(b) = outcome.burst.as_deref()
            && let Some(spread) = b.spread()
        {
            s.burst = Some(Box::new([Some(spread), b.max_over_min(), b.slowdown()]));
        }
        if failure.is_some() {
            s.up = Some(0);
            return;
        }
        s.up = Some(1);
        s.last_success = Some(started);
        if let Some(d) = obs.ttft() {
            keyed(&mut s.ttft, buckets, || {
                SloHistogram::new(&SLO_BUCKETS, SLO_NATIVE)
            })
            .observe(d.as_secs_f64(), trace);
        }
        if let Some(d) = obs.total() {
            let e2e = if cold { &mut s.e2e_cold } else { &mut s.e2e };
            e2e.get_or_insert_with(|| Box::new(SloHistogram::new(&SLO_BUCKETS, SLO_NATIVE)))
                .observe(d.as_secs_f64(), trace);
        }
        if !full {
            return;
        }
        let f = s.full.get_or_insert_with(Box::default);
        observe(&mut f.ttfb, &LATENCY_BUCKETS, obs.ttfb());
        observe(&mut f.tpot, &TOKEN_BUCKETS, obs.tpot());
        if !obs.chunk_gaps.is_empty() {
            let h = f.chunk_gap.get_or_insert_with(|| Classic::new(&TOKEN_BUCKETS));
            for g in &obs.chunk_gaps {
                h.observe(g.as_secs_f64());
            }
        }
        let phases = [("dns", obs.dns()), ("connect", obs.connect()), ("tls", obs.tls())];
        let new_connection = phases.iter().filter(|_| !obs.connection_reused);
        for (name, d) in std::iter::once(&("ready", obs.ready_check)).chain(new_connection) {
            if let Some(d) = d {
                keyed(&mut f.phase, *name, || Classic::new(&PHASE_BUCKETS)).observe(d.as_secs_f64());
            }
        }
        for (stage, d) in &obs.server_reported {
            keyed(&mut f.server_reported, *stage, || Classic::new(&LATENCY_BUCKETS)).observe(d.as_secs_f64());
        }
        if let (Some(n), Some(_)) = (obs.output_tokens, obs.ttft()) {
            f.output_tokens
                .get_or_insert_with(|| Classic::new(&OUTPUT_TOKEN_BUCKETS))
                .observe(n as f64);
        }
    }
}

/// Whether two probes have the same series: the same exported labels and detail.
pub(super) fn same_series(a: &ProbeIdentity, b: &ProbeIdentity) -> bool {
    (&a.name, a.kind, &a.model, &a.location, &a.labels, a.full_metrics)
        == (&b.name, b.kind, &b.model, &b.location, &b.labels, b.full_metrics)
}
