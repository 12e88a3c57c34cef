//! What the agent remembers: in memory, the latest outcome of each probe and its run
//! counts, for the JSON API ([`Latest`]); on disk, alert state and the notification
//! outbox ([`AlertStore`], alert_state.rs), and the run history ([`HistoryWriter`],
//! [`HistoryReader`], history.rs). Consumes `&Outcome`; never sees probes.
//!
//! May import: outcome, config (the history's limits), human, stats, unix_time.

mod alert_state;
mod history;
mod model_changes;
pub use alert_state::{AlertStore, Pending, StoreError};
#[cfg(test)]
pub(crate) use history::sample;
pub use history::{
    Cursor, HistoryReader, HistoryStats, HistoryWriter, ResultsPage, RunQuery, RunRecord, disk_bytes,
};
pub use model_changes::{ModelChange, Seen};

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use crate::outcome::Outcome;

/// The store's file in the data directory (the agent writes it, `report` reads it).
pub const DB_FILE: &str = "inferprobe.db";

#[derive(Debug, Default, Clone)]
struct ProbeState {
    /// Behind a pointer: an `Outcome` is several hundred bytes, and a probe that has not
    /// run yet (every probe at start-up, 10,000 of them at fleet scale) should cost one.
    /// Shared, so a reader copies the map in a few milliseconds under the lock and
    /// writes its JSON after releasing it: the fan-out, which records every run here,
    /// never waits for an API answer to be built.
    last: Option<Arc<Outcome>>,
    last_success_at: Option<SystemTime>,
    runs: u64,
    failures: u64,
}

/// The latest outcome per probe, by probe name.
#[derive(Debug, Default)]
pub struct Latest {
    probes: RwLock<BTreeMap<Arc<str>, ProbeState>>,
}

impl Latest {
    pub fn record(&self, outcome: &Outcome) {
        let mut probes = self.probes.write().expect("store lock");
        // Only configured probes (see `configure`).
        let Some(state) = probes.get_mut(&outcome.probe.name) else {
            return;
        };
        state.runs += 1;
        if outcome.observation.success() {
            state.last_success_at = Some(outcome.started_at);
        } else {
            state.failures += 1;
        }
        match state.last.as_mut().and_then(Arc::get_mut) {
            // Reused unless a reader still holds it: no allocation per run.
            Some(last) => *last = outcome.clone(),
            None => state.last = Some(Arc::new(outcome.clone())),
        }
    }

    /// Keeps only these probes (after a reload), adding empty entries for new ones so
    /// the API lists a probe before its first run.
    pub fn configure<'a>(&self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        let mut probes = self.probes.write().expect("store lock");
        // A set: a list's `contains` made this quadratic, 10^8 comparisons at 10,000 probes.
        let keep: HashSet<&Arc<str>> = names.into_iter().collect();
        probes.retain(|name, _| keep.contains(name));
        for name in keep {
            probes.entry(name.clone()).or_default();
        }
    }

    /// Each configured probe's name and latest outcome, in name order.
    pub fn outcomes(&self) -> Vec<(Arc<str>, Option<Arc<Outcome>>)> {
        let probes = self.probes.read().expect("store lock");
        probes
            .iter()
            .map(|(name, s)| (name.clone(), s.last.clone()))
            .collect()
    }

    /// `/api/v1/probes`: one object per probe, in name order. Built from a copy, so
    /// the lock is held for the copy only (see `ProbeState::last`); at 10,000 probes
    /// the JSON takes tens of milliseconds, on the caller's thread.
    pub fn to_json(&self) -> serde_json::Value {
        let probes: Vec<(Arc<str>, ProbeState)> = self
            .probes
            .read()
            .expect("store lock")
            .iter()
            .map(|(name, s)| (name.clone(), s.clone()))
            .collect();
        let list: Vec<_> = probes.iter().map(|(name, s)| s.to_json(name)).collect();
        serde_json::json!({ "probes": list })
    }

    /// `/api/v1/probes/{name}`.
    pub fn probe_json(&self, name: &str) -> Option<serde_json::Value> {
        let probes = self.probes.read().expect("store lock");
        probes.get(name).map(|s| s.to_json(name))
    }
}

impl ProbeState {
    fn to_json(&self, name: &str) -> serde_json::Value {
        serde_json::json!({
            "probe": name,
            "runs": self.runs,
            "failures": self.failures,
            "last_success_at": self.last_success_at.map(|t| humantime::format_rfc3339_millis(t).to_string()),
            "last_run": self.last.as_deref().map(Outcome::to_json),
        })
    }
}
