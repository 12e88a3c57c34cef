//! The line a manager reads first: per probe, across its locations, whether its SLO was
//! met, and how much of its error budget is left. Computed from the report's rows, so
//! every output (Markdown, HTML, JSON) says the same.
//!
//! A probe meets its SLO when every location meets every objective it has: availability
//! at or over `slo.availability`, P95 TTFT and P95 total at or under `slo.ttft_p95` and
//! `slo.total_p95`. The error budget is the failures the availability objective allows
//! over all of the probe's runs (`(1 - objective) x runs`); what is left is the share of
//! it not used, below zero when overspent.

use std::time::Duration;

use super::Row;
use crate::human::{percent, seconds};

/// Met, not met, or nothing to judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Met,
    NotMet,
    /// Runs, but no objective in `slo:` (or no config).
    NoObjective,
    /// No runs in this period.
    NoData,
}

impl Outcome {
    /// The JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Met => "met",
            Outcome::NotMet => "not_met",
            Outcome::NoObjective => "no_objective",
            Outcome::NoData => "no_data",
        }
    }

    /// As the report says it, in capitals where it matters: the word carries the
    /// verdict where colour does not show.
    pub fn words(self) -> &'static str {
        match self {
            Outcome::Met => "SLO met",
            Outcome::NotMet => "SLO NOT MET",
            Outcome::NoObjective => "no objective",
            Outcome::NoData => "no data",
        }
    }
}

/// One objective one location missed.
#[derive(Debug, Clone, PartialEq)]
pub struct Miss {
    pub location: String,
    /// `availability`, `ttft_p95` or `total_p95`: the `slo:` key.
    pub objective: &'static str,
    /// What was measured (a fraction or seconds); `None` when nothing could be
    /// (no successful run to take a latency from).
    pub actual: Option<f64>,
    pub target: f64,
    /// A latency objective the cold runs missed, on their own P95 (cold.rs).
    pub cold: bool,
}

impl Miss {
    fn words(&self) -> String {
        let (what, shown, target) = match self.objective {
            "availability" => ("availability", self.actual.map(percent), percent(self.target)),
            "ttft_p95" => ("P95 TTFT", self.actual.map(seconds), seconds(self.target)),
            _ => ("P95 total", self.actual.map(seconds), seconds(self.target)),
        };
        let what = if self.cold {
            super::cold::cold_words(self.objective)
        } else {
            what
        };
        let shown = shown.unwrap_or_else(|| "not measured (no successful run)".into());
        format!("{what} {shown} against {target} in {}", self.location)
    }
}

/// A probe's verdict over all its locations.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub probe: String,
    pub outcome: Outcome,
    /// Locations with runs in this period.
    pub locations: Vec<String>,
    pub runs: u64,
    pub failures: u64,
    /// The strictest availability objective of the probe's rows.
    pub objective: Option<f64>,
    /// The share of the error budget not used (1.0 untouched, 0 used up, below 0
    /// overspent); `None` without an availability objective under 100 %.
    pub budget_left: Option<f64>,
    pub missed: Vec<Miss>,
}

impl Verdict {
    pub fn availability(&self) -> Option<f64> {
        (self.runs > 0).then(|| (self.runs - self.failures) as f64 / self.runs as f64)
    }

    /// `chat: SLO NOT MET in 1 of 2 locations: availability 97.10% against 99.50% in
    /// us-east. Availability 98.55% (objective 99.50%), error budget left: none (2.9×
    /// spent).`
    pub fn line(&self) -> String {
        format!("{}: {}{}", self.probe, self.outcome.words(), self.details())
    }

    /// The line after the probe and its verdict's words: where it was missed, the
    /// availability and the budget left.
    pub fn details(&self) -> String {
        let n = self.locations.len();
        let mut out = String::new();
        match self.outcome {
            Outcome::NoData => return " (no runs in this period).".into(),
            Outcome::NotMet => {
                let failed: std::collections::BTreeSet<&str> =
                    self.missed.iter().map(|m| m.location.as_str()).collect();
                let misses: Vec<String> = self.missed.iter().map(Miss::words).collect();
                out += &format!(" in {} of {}: {}.", failed.len(), locations(n), misses.join("; "));
            }
            Outcome::Met => out += &format!(" in {n} of {}.", locations(n)),
            Outcome::NoObjective => out += &format!(" (no slo: set) in {}.", locations(n)),
        }
        if let Some(a) = self.availability() {
            out += &format!(" Availability {}", percent(a));
            if let Some(o) = self.objective {
                out += &format!(" (objective {})", percent(o));
            }
        }
        if let Some(left) = self.budget_left {
            out += &format!(", error budget left: {}", budget_words(left));
        } else if self.objective.is_some_and(|o| o >= 1.0) {
            out += ", no error budget (the objective is 100%)";
        }
        out.push('.');
        out
    }
}

/// `1 location`, `2 locations`.
fn locations(n: usize) -> String {
    format!("{n} location{}", if n == 1 { "" } else { "s" })
}

/// `86%`, or `none (2.9x spent)` when overspent.
pub fn budget_words(left: f64) -> String {
    if left >= 0.0 {
        percent(left)
    } else {
        format!("none ({:.1}× spent)", 1.0 - left)
    }
}

/// The share of the error budget left: failures the objective allows over `runs`
/// against those that happened. `None` without runs or for a 100 % objective (no budget).
pub fn budget_left(runs: u64, failures: u64, objective: Option<f64>) -> Option<f64> {
    let allowed = (1.0 - objective?) * runs as f64;
    (runs > 0 && allowed > 0.0).then(|| 1.0 - failures as f64 / allowed)
}

/// The objectives one row missed.
pub fn misses(row: &Row) -> Vec<Miss> {
    let c = &row.current;
    let mut out = Vec::new();
    if c.runs == 0 {
        return out;
    }
    let miss = |objective, actual, target| Miss {
        location: row.location.clone(),
        objective,
        actual,
        target,
        cold: false,
    };
    if let Some(t) = row.targets.availability
        && c.availability.is_some_and(|a| a < t)
    {
        out.push(miss("availability", c.availability, t));
    }
    let latency = [
        ("ttft_p95", row.targets.ttft, c.ttft.p95),
        ("total_p95", row.targets.total, c.total.p95),
    ];
    for (objective, target, p95) in latency {
        let Some(target) = target.map(|d: Duration| d.as_secs_f64()) else {
            continue;
        };
        // A kind that measures no TTFT has none to miss; no successful run at all is a
        // miss (the availability line says why).
        let measured_none = c.failures == c.runs;
        match p95 {
            Some(p) if p > target => out.push(miss(objective, Some(p), target)),
            None if measured_none => out.push(miss(objective, None, target)),
            _ => {}
        }
    }
    out.extend(super::cold::misses(row));
    out
}

/// One verdict per probe, in the rows' order (by probe name).
pub fn verdicts(rows: &[Row]) -> Vec<Verdict> {
    let mut out: Vec<Verdict> = Vec::new();
    for row in rows {
        let at = match out.iter().position(|v| v.probe == row.probe) {
            Some(i) => i,
            None => {
                out.push(Verdict {
                    probe: row.probe.clone(),
                    outcome: Outcome::NoData,
                    locations: Vec::new(),
                    runs: 0,
                    failures: 0,
                    objective: None,
                    budget_left: None,
                    missed: Vec::new(),
                });
                out.len() - 1
            }
        };
        let v = &mut out[at];
        let t = &row.targets;
        if let Some(a) = t.availability {
            v.objective = Some(v.objective.map_or(a, |o: f64| o.max(a)));
        }
        if row.current.runs == 0 {
            continue;
        }
        v.locations.push(row.location.clone());
        v.runs += row.current.runs;
        v.failures += row.current.failures;
        v.missed.extend(misses(row));
        let has_objective = t.availability.is_some() || t.ttft.is_some() || t.total.is_some();
        v.outcome = if !v.missed.is_empty() {
            Outcome::NotMet
        } else if has_objective || v.outcome == Outcome::Met {
            Outcome::Met
        } else {
            Outcome::NoObjective
        };
    }
    for v in &mut out {
        v.budget_left = budget_left(v.runs, v.failures, v.objective);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Quantiles, Summary, Targets};

    fn row(location: &str, runs: u64, failures: u64, ttft_p95: f64) -> Row {
        Row {
            probe: "chat".into(),
            location: location.into(),
            targets: Targets {
                ttft: Some(Duration::from_millis(500)),
                total: None,
                availability: Some(0.99),
            },
            current: Summary {
                runs,
                failures,
                availability: Some((runs - failures) as f64 / runs as f64),
                ttft: Quantiles {
                    p95: Some(ttft_p95),
                    ..Quantiles::default()
                },
                ..Summary::default()
            },
            previous: Summary::default(),
            tokens: Default::default(),
            cost: None,
            starts: Default::default(),
        }
    }

    #[test]
    fn one_location_missing_its_objective_fails_the_probe() {
        let met = verdicts(&[row("eu", 1000, 2, 0.3), row("us", 1000, 4, 0.4)]);
        assert_eq!(met.len(), 1);
        assert_eq!(met[0].outcome, Outcome::Met);
        // 20 failures allowed in 2000 runs, 6 used.
        assert!((met[0].budget_left.unwrap() - 0.7).abs() < 1e-12);
        assert_eq!(
            met[0].line(),
            "chat: SLO met in 2 of 2 locations. Availability 99.70% (objective 99.00%), error budget left: 70.00%."
        );
        let not = verdicts(&[row("eu", 1000, 2, 0.3), row("us", 1000, 40, 0.6)]);
        assert_eq!(not[0].outcome, Outcome::NotMet);
        assert_eq!(not[0].missed.len(), 2);
        // 42 failures of 20 allowed: 2.1 budgets spent.
        assert!((not[0].budget_left.unwrap() + 1.1).abs() < 1e-12);
        assert_eq!(
            not[0].line(),
            "chat: SLO NOT MET in 1 of 2 locations: availability 96.00% against 99.00% in us; \
             P95 TTFT 600 ms against 500 ms in us. Availability 97.90% (objective 99.00%), \
             error budget left: none (2.1× spent)."
        );
    }

    #[test]
    fn without_objectives_or_runs_nothing_is_claimed() {
        let mut r = row("eu", 10, 0, 0.3);
        r.targets = Targets::default();
        let v = verdicts(std::slice::from_ref(&r));
        assert_eq!(v[0].outcome, Outcome::NoObjective);
        assert_eq!(v[0].budget_left, None);
        r.current = Summary::default();
        assert_eq!(verdicts(&[r])[0].outcome, Outcome::NoData);
        assert_eq!(budget_left(100, 0, Some(1.0)), None);
        assert_eq!(budget_left(0, 0, Some(0.99)), None);
        assert_eq!(budget_words(0.5), "50.00%");
    }

    #[test]
    fn an_outage_misses_latency_objectives_it_could_not_measure() {
        let mut r = row("eu", 10, 10, 0.0);
        r.current.ttft.p95 = None;
        let m = misses(&r);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[1].actual, None);
    }
}
