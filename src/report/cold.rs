//! The report's cold starts and restarts, apart from the main rows. A cold probe's runs
//! that found the endpoint idle (a model to load, a replica to start) count in
//! availability, but their latency is kept out of the latency rows, which are the warm
//! runs' (stats::Summary): here they have figures of their own, beside the same probe's
//! warm ones, and are held to the probe's latency objectives on their own P95. A
//! restart's warm-up (the runs after a loading answer, connections accepted again, a new
//! model identity) is counted, with when and why, from the local store; from Prometheus
//! the count alone (`inferprobe_endpoint_restarts_total`).

use std::time::SystemTime;

use super::verdict::Miss;
use super::{Row, Table};
use crate::human::seconds;
use crate::stats::{Summary, Targets};
use crate::store::RunRecord;

/// Warm-ups listed per probe and location at most (all are counted): a server that
/// restarts every few minutes all week would otherwise fill the report.
const LISTED_WARMUPS: usize = 20;
/// Warm-up starts a table cell names before it says how many more.
const WARMUPS_IN_A_CELL: usize = 3;

/// What a probe's runs in one location met at their endpoint in the period, apart
/// from its main rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Starts {
    /// The period's cold runs alone, every figure over them; `None` without one.
    pub cold: Option<Summary>,
    /// Restarts of the endpoint the runs showed in the period: each warm-up counted once,
    /// at its first run (as `inferprobe_endpoint_restarts_total` counts them).
    pub restarts: u64,
    /// Those warm-ups, oldest first, at most [`LISTED_WARMUPS`] (the latest); the local
    /// store only.
    pub warmups: Vec<WarmupFigures>,
}

/// One warm-up after a restart, with its runs in the period.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupFigures {
    pub since: SystemTime,
    /// What showed the restart, as the agent wrote it (server words redacted there).
    pub cause: String,
    pub runs: u64,
    pub failures: u64,
}

impl Starts {
    /// From one series' runs in start order, of both periods; `during` is this period's
    /// part of them (its end).
    pub(super) fn of(runs: &[RunRecord], during: usize, targets: &Targets) -> Starts {
        let split = runs.len() - during;
        let mut starts = Starts {
            cold: Summary::of_cold(&runs[split..], targets),
            ..Starts::default()
        };
        // A warm-up's runs share its start, and a later restart starts later: a new start
        // is a new warm-up. One whose first run was before the period is not counted.
        let mut last: Option<SystemTime> = None;
        for (i, r) in runs.iter().enumerate() {
            let Some(w) = &r.warmup else { continue };
            let new = last != Some(w.since);
            last = Some(w.since);
            if i < split {
                continue;
            }
            if new {
                starts.restarts += 1;
                starts.warmups.push(WarmupFigures {
                    since: w.since,
                    cause: w.cause.clone(),
                    runs: 0,
                    failures: 0,
                });
            }
            // Runs of a warm-up begun before the period have no entry of their own.
            if let Some(f) = starts.warmups.last_mut().filter(|f| f.since == w.since) {
                f.runs += 1;
                f.failures += u64::from(!r.success());
            }
        }
        let extra = starts.warmups.len().saturating_sub(LISTED_WARMUPS);
        starts.warmups.drain(..extra);
        starts
    }

    pub fn is_empty(&self) -> bool {
        self.cold.is_none() && self.restarts == 0
    }
}

/// The latency objectives the row's cold runs missed, each on their own P95.
pub(super) fn misses(row: &Row) -> Vec<Miss> {
    let Some(c) = &row.starts.cold else {
        return Vec::new();
    };
    [
        ("ttft_p95", row.targets.ttft, c.ttft.p95),
        ("total_p95", row.targets.total, c.total.p95),
    ]
    .into_iter()
    .filter_map(|(objective, target, p95)| {
        let target = target?.as_secs_f64();
        let p95 = p95.filter(|p| *p > target)?;
        Some(Miss {
            location: row.location.clone(),
            objective,
            actual: Some(p95),
            target,
            cold: true,
        })
    })
    .collect()
}

/// `cold`, `restarts` and `warmups` on a probe's JSON object.
pub(super) fn add_json(o: &mut serde_json::Value, r: &Row) {
    o["cold"] = r
        .starts
        .cold
        .as_ref()
        .map_or(serde_json::Value::Null, super::summary_json);
    o["restarts"] = r.starts.restarts.into();
    o["warmups"] = r
        .starts
        .warmups
        .iter()
        .map(|w| {
            serde_json::json!({
                "since": humantime::format_rfc3339_seconds(w.since).to_string(),
                "cause": w.cause,
                "runs": w.runs,
                "failures": w.failures,
            })
        })
        .collect();
}

/// Said under the latency tables when any row has cold runs: their figures are the warm
/// runs'.
pub(super) fn mark_warm_only<'a>(rows: &[Row], tables: impl IntoIterator<Item = &'a mut Table>) {
    if rows.iter().any(|r| r.starts.cold.is_some()) {
        for t in tables {
            t.note += " Warm runs only: cold starts are apart, under Cold starts.";
        }
    }
}

/// "Cold starts" and "Restarts", each only when the period had one.
pub(super) fn tables(rows: &[Row], clock: impl Fn(SystemTime) -> String) -> Vec<Table> {
    let mut out = Vec::new();
    let mut cold = Table::new(
        "Cold starts",
        "Runs of cold probes (`cold:`) that found the endpoint idle for their idle time: the first \
         request after a model is unloaded or a replica scaled to zero. They count in availability \
         above, not in its latency rows; here every figure is over them alone, cold / warm (the same \
         probe's warm runs). A latency objective holds for them too, on their own P95.",
        &[
            "probe",
            "location",
            ">cold runs",
            ">failed",
            ">TTFT P50 cold / warm",
            ">TTFT P95 cold / warm",
            ">total P50 cold / warm",
            ">total P95 cold / warm",
        ],
    );
    let show = |v: Option<f64>| v.map(seconds).unwrap_or_else(|| "–".into());
    let pair = |c: Option<f64>, w: Option<f64>| format!("{} / {}", show(c), show(w));
    for r in rows {
        let Some(c) = &r.starts.cold else { continue };
        let w = &r.current;
        cold.rows.push(vec![
            r.probe.clone(),
            r.location.clone(),
            c.runs.to_string(),
            c.failures.to_string(),
            pair(c.ttft.p50, w.ttft.p50),
            pair(c.ttft.p95, w.ttft.p95),
            pair(c.total.p50, w.total.p50),
            pair(c.total.p95, w.total.p95),
        ]);
    }
    let mut restarts = Table::new(
        "Restarts",
        "Restarts of each probe's endpoint as its runs showed them (a loading answer, connections \
         accepted again after refusals, a new model identity, the server loading the model): each \
         begins a warm-up (the probe's `warmup`, 5 min by default) whose runs are counted here. \
         From Prometheus the count only.",
        &[
            "probe",
            "location",
            ">restarts",
            "warm-ups from",
            ">runs in warm-ups",
            ">failed",
            "last cause",
        ],
    );
    for r in rows.iter().filter(|r| r.starts.restarts > 0) {
        let s = &r.starts;
        let mut from: Vec<String> = s.warmups.iter().map(|w| clock(w.since)).collect();
        let unlisted = s.restarts.saturating_sub(from.len() as u64);
        if from.len() > WARMUPS_IN_A_CELL {
            from.drain(..from.len() - WARMUPS_IN_A_CELL);
        }
        let earlier = unlisted + (s.warmups.len() - from.len()) as u64;
        let mut when = from.join(", ");
        if earlier > 0 && !when.is_empty() {
            when = format!("{earlier} more, then {when}");
        }
        let (runs, failures) = s
            .warmups
            .iter()
            .fold((0, 0), |(n, f), w| (n + w.runs, f + w.failures));
        let counted = !s.warmups.is_empty();
        restarts.rows.push(vec![
            r.probe.clone(),
            r.location.clone(),
            s.restarts.to_string(),
            if when.is_empty() { "–".into() } else { when },
            if counted { runs.to_string() } else { "–".into() },
            if counted {
                failures.to_string()
            } else {
                "–".into()
            },
            s.warmups.last().map_or_else(|| "–".into(), |w| w.cause.clone()),
        ]);
    }
    out.extend([cold, restarts].into_iter().filter(|t| !t.rows.is_empty()));
    out
}

/// What a miss of cold runs is said as: the objective's figure, of cold starts.
pub(super) fn cold_words(objective: &str) -> &'static str {
    match objective {
        "ttft_p95" => "P95 TTFT of cold starts",
        _ => "P95 total of cold starts",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Warmup;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn warming(mut r: RunRecord, since: u64, cause: &str) -> RunRecord {
        r.warmup = Some(Warmup {
            since: at(since),
            cause: cause.into(),
        });
        r
    }

    /// Warm-ups are counted at their first run: one begun before the period is not, two
    /// begun in it are, with their runs; cold runs have figures of their own.
    #[test]
    fn warmups_count_at_their_first_run_and_cold_runs_are_apart() {
        let run = |s: u64, ok: bool, ms: u64| crate::store::sample("chat", at(s), ok, ms);
        let mut runs = vec![
            run(0, true, 400),
            warming(
                run(60, false, 100),
                50,
                "the server answered that it is loading the model",
            ),
            // The period starts at 100: this warm-up began before it.
            warming(
                run(120, true, 900),
                50,
                "the server answered that it is loading the model",
            ),
            run(180, true, 400),
            warming(run(240, false, 100), 230, "connections are accepted again"),
            warming(run(300, true, 2000), 230, "connections are accepted again"),
            warming(run(360, true, 1000), 350, "the served model changed to <b>v2</b>"),
        ];
        let mut c = run(420, true, 30_000);
        c.cold = true;
        runs.push(c);
        let during = runs.len() - 2;
        let targets = Targets {
            ttft: Some(Duration::from_secs(10)),
            total: None,
            availability: None,
        };
        let s = Starts::of(&runs, during, &targets);
        assert_eq!(s.restarts, 2);
        let seen: Vec<(u64, u64)> = s.warmups.iter().map(|w| (w.runs, w.failures)).collect();
        assert_eq!(seen, [(2, 1), (1, 0)]);
        let cold = s.cold.as_ref().unwrap();
        assert_eq!((cold.runs, cold.ttft.p50), (1, Some(15.0)));
        let row = Row {
            probe: "chat".into(),
            location: "eu".into(),
            targets,
            current: Summary::of(&runs[2..], &targets),
            previous: Summary::default(),
            tokens: Default::default(),
            cost: None,
            starts: s,
        };
        // The warm rows hold no cold run: their P95 TTFT is the 1 s of the warm-up's run.
        assert_eq!(row.current.ttft.p95, Some(1.0));
        let missed = misses(&row);
        assert_eq!(missed.len(), 1);
        assert_eq!((missed[0].objective, missed[0].actual), ("ttft_p95", Some(15.0)));
        let verdict = &super::super::verdict::verdicts(std::slice::from_ref(&row))[0];
        assert!(
            verdict
                .line()
                .contains("P95 TTFT of cold starts 15.00 s against 10.00 s in eu"),
            "{}",
            verdict.line()
        );
        let t = tables(std::slice::from_ref(&row), |t| {
            format!("{}", t.duration_since(at(0)).unwrap().as_secs())
        });
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0].rows[0][2..6],
            ["1", "0", "15.00 s / 450 ms", "15.00 s / 1.00 s"]
        );
        assert_eq!(
            t[1].rows[0][2..],
            ["2", "230, 350", "3", "1", "the served model changed to <b>v2</b>"]
        );
        let mut json = serde_json::json!({});
        add_json(&mut json, &row);
        assert_eq!(json["restarts"], 2);
        assert_eq!(json["cold"]["ttft_seconds"]["p50"], 15.0);
        assert_eq!(
            json["warmups"][1]["cause"],
            "the served model changed to <b>v2</b>"
        );
        // Nothing cold, no restart: no table, and the latency notes are left as they are.
        let plain = Row {
            starts: Starts::default(),
            ..row
        };
        assert!(tables(std::slice::from_ref(&plain), |_| String::new()).is_empty());
        let mut note = Table::new("t", "Successful runs only.", &["a"]);
        mark_warm_only(std::slice::from_ref(&plain), [&mut note]);
        assert_eq!(note.note, "Successful runs only.");
    }

    /// A server that restarts all week: every restart counted, the latest listed, the
    /// cell names three and how many before them.
    #[test]
    fn many_warmups_are_counted_and_the_latest_listed() {
        let runs: Vec<RunRecord> = (0..30)
            .map(|i| warming(crate::store::sample("chat", at(i * 100), true, 400), i * 100, "x"))
            .collect();
        let s = Starts::of(&runs, runs.len(), &Targets::default());
        assert_eq!((s.restarts, s.warmups.len()), (30, LISTED_WARMUPS));
        assert_eq!(s.warmups[0].since, at(1000));
        let row = Row {
            probe: "chat".into(),
            location: "eu".into(),
            targets: Targets::default(),
            current: Summary::of(&runs, &Targets::default()),
            previous: Summary::default(),
            tokens: Default::default(),
            cost: None,
            starts: s,
        };
        let t = tables(std::slice::from_ref(&row), |t| {
            format!("{}", t.duration_since(at(0)).unwrap().as_secs())
        });
        assert_eq!(t[0].title, "Restarts");
        assert_eq!(t[0].rows[0][3], "27 more, then 2700, 2800, 2900");
    }
}
