//! The report's "Model changes": each change of a probe's served model in the period
//! (the store's `model_changes`), with the figures of the runs before it and after it,
//! as a release's latency is laid over the previous one's. Before runs from the previous
//! change (or the start of the two periods the report reads) to this one; after, from
//! this one to the next (or the end of the period). From the local store only: the
//! fleet's report (Prometheus) has no events.

use std::collections::HashMap;

use super::Table;
use crate::human::{percent, seconds};
use crate::stats::{Summary, Targets};
use crate::store::{ModelChange, RunRecord};

/// Changes read for one report at most: a release a day for a year of probes is far less.
pub(super) const MAX_CHANGES: usize = 1_000;

/// One change with the figures of its probe's runs before and after it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeFigures {
    pub change: ModelChange,
    pub before: Summary,
    pub after: Summary,
}

/// The changes of one (probe, location), in time order, with figures from its runs (in
/// start order, covering both periods).
pub(super) fn figures(changes: &[&ModelChange], runs: &[RunRecord], targets: &Targets) -> Vec<ChangeFigures> {
    let at = |t| runs.partition_point(|r| r.at < t);
    changes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let from = i.checked_sub(1).map_or(0, |p| at(changes[p].at));
            let split = at(c.at);
            let to = changes.get(i + 1).map_or(runs.len(), |n| at(n.at));
            ChangeFigures {
                change: (*c).clone(),
                before: Summary::of(&runs[from..split], targets),
                after: Summary::of(&runs[split..to], targets),
            }
        })
        .collect()
}

/// The changes by (probe, location), each list in time order.
pub(super) fn by_series(changes: &[ModelChange]) -> HashMap<(&str, &str), Vec<&ModelChange>> {
    let mut out: HashMap<(&str, &str), Vec<&ModelChange>> = HashMap::new();
    for c in changes {
        out.entry((c.probe.as_str(), c.location.as_str()))
            .or_default()
            .push(c);
    }
    out
}

pub(super) fn to_json(f: &ChangeFigures) -> serde_json::Value {
    let side = |s: &Summary| {
        serde_json::json!({
            "runs": s.runs,
            "failures": s.failures,
            "availability": s.availability,
            "ttft_seconds": {"p50": s.ttft.p50, "p95": s.ttft.p95},
            "total_seconds": {"p50": s.total.p50, "p95": s.total.p95},
        })
    };
    let mut json = f.change.to_json();
    json["figures_before"] = side(&f.before);
    json["figures_after"] = side(&f.after);
    json
}

/// The table, or `None` when the period had no change (the report then says nothing).
pub(super) fn table(all: &[ChangeFigures], clock: impl Fn(std::time::SystemTime) -> String) -> Option<Table> {
    if all.is_empty() {
        return None;
    }
    let mut t = Table::new(
        "Model changes",
        "Each change of the served model (its name, fingerprint or what the server says of it): \
         the runs before it (since the previous change) and after it (until the next), before → after. \
         A change is an event, not a failure.",
        &[
            "probe",
            "location",
            "changed at",
            "from",
            "to",
            ">runs",
            ">availability",
            ">TTFT P50",
            ">TTFT P95",
            ">total P50",
            ">total P95",
        ],
    );
    let pair = |a: Option<f64>, b: Option<f64>, f: fn(f64) -> String| {
        let show = |v: Option<f64>| v.map(f).unwrap_or_else(|| "–".into());
        format!("{} → {}", show(a), show(b))
    };
    for f in all {
        let (b, a) = (&f.before, &f.after);
        t.rows.push(vec![
            f.change.probe.clone(),
            f.change.location.clone(),
            clock(f.change.at),
            f.change
                .before
                .as_ref()
                .map(|s| s.summary.clone())
                .unwrap_or_default(),
            f.change.after.summary.clone(),
            format!("{} → {}", b.runs, a.runs),
            pair(b.availability, a.availability, percent),
            pair(b.ttft.p50, a.ttft.p50, seconds),
            pair(b.ttft.p95, a.ttft.p95, seconds),
            pair(b.total.p50, a.total.p50, seconds),
            pair(b.total.p95, a.total.p95, seconds),
        ]);
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Seen;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    #[test]
    fn the_runs_split_at_each_change() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |s: u64| t0 + Duration::from_secs(s);
        // 10 runs at 100 ms, then the swap, then 10 at 300 ms with one failure.
        let mut runs: Vec<RunRecord> = (0..10)
            .map(|i| crate::store::sample("chat", at(i), true, 100))
            .collect();
        runs.extend((10..20).map(|i| crate::store::sample("chat", at(i), i != 15, 300)));
        let seen = |d: &str| Seen {
            digest: d.into(),
            summary: d.into(),
        };
        let change = ModelChange {
            probe: "chat".into(),
            location: "eu".into(),
            at: at(10),
            before: Some(seen("tiny-llama")),
            after: seen("tiny-llama-v2"),
        };
        let f = figures(&[&change], &runs, &Targets::default());
        assert_eq!((f[0].before.runs, f[0].after.runs), (10, 10));
        assert_eq!(f[0].before.total.p50, Some(0.1));
        assert_eq!(f[0].after.total.p95, Some(0.3));
        assert_eq!(f[0].after.availability, Some(0.9));
        let t = table(&f, |_: SystemTime| "t".into()).unwrap();
        assert_eq!(
            t.rows[0][3..7],
            ["tiny-llama", "tiny-llama-v2", "10 → 10", "100% → 90.00%"]
        );
        assert!(table(&[], |_: SystemTime| String::new()).is_none());
    }
}
