//! The weekly SLO report (`inferprobe report`): per probe and location, availability,
//! TTFT and total latency percentiles and SLO attainment over a period, each compared
//! with the period of the same length before it, and the longest incidents; on top, a
//! verdict per probe across its locations ([`verdict`]), with charts of each day against
//! the previous period's ([`trend`]).
//!
//! The figures come from one of two sources, computed the same way: this agent's
//! store ([`Report::from_history`], exact: every run) or Prometheus for the whole fleet
//! ([`prometheus`], from the exported counters and histograms). Rendering to Markdown,
//! HTML (html.rs, charts in chart.rs) and JSON works on the built [`Report`] only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use crate::config::Cost;
use crate::human::{percent, printable, seconds, span};
use crate::stats::{Incident, Quantiles, Summary, Targets, incidents};
use crate::store::{HistoryReader, RunQuery, RunRecord, StoreError};
use crate::time_zone::TimeZone;

mod changes;
mod chart;
mod cold;
mod html;
pub mod p95_change;
pub mod prometheus;
mod tokens;
pub mod trend;
pub mod verdict;
pub use changes::ChangeFigures;
pub use cold::{Starts, WarmupFigures};
pub use p95_change::{P95Change, ProbeP95};
pub use tokens::{TokenTotals, costs_by_probe};
pub use trend::{Point, Trend};
pub use verdict::Verdict;

/// Data that starts later than this share of a period after its start covers less of
/// it, and the report says so (the status page's slack for partial windows).
const COVERAGE_SLACK: f64 = 0.05;

/// The columns of both latency tables.
const LATENCY_COLUMNS: &[&str] = &[
    "probe",
    "location",
    ">P50",
    ">P95",
    ">P99",
    ">previous P95",
    ">change",
];

/// Incidents listed at most.
const TOP_INCIDENTS: usize = 10;

/// One probe in one location.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub probe: String,
    pub location: String,
    pub targets: Targets,
    pub current: Summary,
    pub previous: Summary,
    /// Tokens of the period and of the one before (the local store only).
    pub tokens: [TokenTotals; 2],
    /// The probe's token prices, where the config gives them.
    pub cost: Option<Cost>,
    /// Its cold runs and its endpoint's restarts in this period, apart from `current`,
    /// whose latency is its warm runs' (cold.rs).
    pub starts: Starts,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub since: SystemTime,
    pub until: SystemTime,
    /// Where the figures come from, in words.
    pub source: String,
    /// Exact (every run) or estimated from histogram buckets.
    pub exact: bool,
    pub rows: Vec<Row>,
    /// The longest failing streaks of the period, longest first.
    pub incidents: Vec<Incident>,
    /// The charts' bucket ([`trend::bucket_for`] the period's length).
    pub bucket: Duration,
    /// Per probe, across locations: each bucket of this period and the previous one.
    pub trends: Vec<Trend>,
    /// The earliest run (or sample) seen in the two periods: data that starts later
    /// covers less than the period.
    pub data_from: Option<SystemTime>,
    /// The zone the report's times are shown in (UTC unless [`Report::with_time_zone`]).
    pub time_zone: TimeZone,
    /// Changes of the served model in the period, with figures before and after each
    /// (local store only).
    pub model_changes: Vec<ChangeFigures>,
    /// Per probe, across locations: P95 TTFT and total over this whole period and the
    /// previous one, for the lines under the verdicts ([`Report::p95_changes`]).
    pub probe_p95s: Vec<ProbeP95>,
}

impl Report {
    pub fn previous_since(&self) -> SystemTime {
        self.since
            .checked_sub(self.length())
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The period's length.
    pub fn length(&self) -> Duration {
        self.until.duration_since(self.since).unwrap_or_default()
    }

    /// How much of this period (`0`) and of the previous one (`1`) the data covers: from
    /// the first run seen (or the period's start, if earlier) to the period's end.
    pub fn covered(&self, period: usize) -> Duration {
        let (start, end) = match period {
            0 => (self.since, self.until),
            _ => (self.previous_since(), self.since),
        };
        match self.data_from {
            Some(first) if first < end => end.duration_since(first.max(start)).unwrap_or_default(),
            _ => Duration::ZERO,
        }
    }

    /// Whether the data covers less than the period `period`.
    pub fn is_partial(&self, period: usize) -> bool {
        self.covered(period).as_secs_f64() < self.length().as_secs_f64() * (1.0 - COVERAGE_SLACK)
    }

    /// Said under the title when the data covers less than either period: "(7 d)" over
    /// 15 minutes of runs would claim a week.
    pub fn coverage_note(&self) -> Option<String> {
        let tz = &self.time_zone;
        let mut notes = Vec::new();
        let (now, before) = (self.covered(0), self.covered(1));
        if now.is_zero() {
            notes.push("No runs in this period.".to_owned());
        } else if self.is_partial(0) {
            let from = self.data_from.unwrap_or(self.since).max(self.since);
            notes.push(format!(
                "The data covers only the last {} of this {} period (runs from {} {}): every figure is for that part.",
                span(now),
                span(self.length()),
                tz.minutes(from),
                tz.label(from)
            ));
        }
        if before.is_zero() {
            notes.push("The previous period has no data: nothing is compared.".to_owned());
        } else if self.is_partial(1) {
            notes.push(format!(
                "The previous period's data covers only its last {}.",
                span(before)
            ));
        }
        (!notes.is_empty()).then(|| notes.join(" "))
    }

    /// How many chart buckets each period has.
    pub fn buckets(&self) -> usize {
        trend::bucket_count(self.length(), self.bucket)
    }

    /// One verdict per probe across its locations.
    pub fn verdicts(&self) -> Vec<Verdict> {
        verdict::verdicts(&self.rows)
    }

    /// Per probe, how its P95 TTFT and total moved against the previous period, where
    /// both periods have one.
    pub fn p95_changes(&self) -> Vec<P95Change> {
        p95_change::changes(&self.probe_p95s, self.length())
    }

    /// Shows the report's times in `zone`.
    pub fn with_time_zone(mut self, zone: TimeZone) -> Report {
        self.time_zone = zone;
        self
    }

    /// From the local store: every run of `[since, until)` and of the period before.
    pub fn from_history(
        history: &HistoryReader,
        source: String,
        since: SystemTime,
        until: SystemTime,
        targets: impl Fn(&str) -> Targets,
    ) -> Result<Report, StoreError> {
        let len = until.duration_since(since).unwrap_or_default();
        let query = RunQuery {
            probe: None,
            location: None,
            since: since.checked_sub(len).unwrap_or(SystemTime::UNIX_EPOCH),
            until,
        };
        let mut rows = Vec::new();
        let mut all_incidents = Vec::new();
        let mut trends = trend::TrendBuilder::new(since, query.since, len);
        let mut data_from: Option<SystemTime> = None;
        let changed = history.model_changes(
            &RunQuery {
                since,
                ..query.clone()
            },
            changes::MAX_CHANGES,
        )?;
        let changed_by_series = changes::by_series(&changed);
        let mut model_changes = Vec::new();
        history.for_each_series(&query, |runs| {
            let split = runs.partition_point(|r| r.at < since);
            let (before, during) = runs.split_at(split);
            let first = &runs[0];
            data_from = Some(data_from.map_or(first.at, |d| d.min(first.at)));
            trends.add(&first.probe, during, before);
            let t = targets(&first.probe);
            if let Some(list) = changed_by_series.get(&(&*first.probe, &*first.location)) {
                model_changes.extend(changes::figures(list, &runs, &t));
            }
            // Streaks over the whole series, so one that began in the previous period
            // keeps its real start and length; those that touch this period count.
            if !during.is_empty() {
                all_incidents.extend(
                    incidents(&runs)
                        .into_iter()
                        .filter(|i| i.ended.is_none_or(|end| end > since)),
                );
            }
            rows.push(Row {
                probe: first.probe.to_string(),
                location: first.location.to_string(),
                targets: t,
                current: Summary::of(during, &t),
                previous: Summary::of(before, &t),
                tokens: [TokenTotals::of(during), TokenTotals::of(before)],
                cost: None,
                starts: Starts::of(&runs, during.len(), &t),
            });
        })?;
        let probe_p95s = trends.probe_p95s();
        Ok(Report {
            since,
            until,
            source,
            exact: true,
            rows,
            incidents: top(all_incidents),
            bucket: trends.bucket(),
            trends: trends.finish(),
            data_from,
            time_zone: TimeZone::UTC,
            model_changes: {
                model_changes.sort_by_key(|c| c.change.at);
                model_changes
            },
            probe_p95s,
        })
    }

    /// Sets each row's token prices (by probe name), for the cost lines.
    pub fn with_costs(mut self, costs: &BTreeMap<String, Cost>) -> Report {
        for row in &mut self.rows {
            row.cost = costs.get(&row.probe).cloned();
        }
        self
    }

    pub fn to_json(&self) -> serde_json::Value {
        let probes: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut o = summary_json(&r.current);
                o["probe"] = r.probe.clone().into();
                o["location"] = r.location.clone().into();
                o["objectives"] = serde_json::json!({
                    "availability": r.targets.availability,
                    "ttft_seconds": r.targets.ttft.map(|d| d.as_secs_f64()),
                    "total_seconds": r.targets.total.map(|d| d.as_secs_f64()),
                });
                o["availability_met"] = match (r.current.availability, r.targets.availability) {
                    (Some(a), Some(t)) => (a >= t).into(),
                    _ => serde_json::Value::Null,
                };
                o["previous"] = summary_json(&r.previous);
                // Every objective of the row, availability and latency alike.
                let has_objective =
                    r.targets.availability.is_some() || r.targets.ttft.is_some() || r.targets.total.is_some();
                o["slo_met"] = if has_objective && r.current.runs > 0 {
                    verdict::misses(r).is_empty().into()
                } else {
                    serde_json::Value::Null
                };
                o["error_budget_left"] =
                    verdict::budget_left(r.current.runs, r.current.failures, r.targets.availability).into();
                tokens::add_json(&mut o, r);
                cold::add_json(&mut o, r);
                o
            })
            .collect();
        let incidents: Vec<serde_json::Value> = self
            .incidents
            .iter()
            .map(|i| {
                serde_json::json!({
                    "probe": i.probe,
                    "location": i.location,
                    "started_at": humantime::format_rfc3339_seconds(i.started).to_string(),
                    "ended_at": i.ended.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
                    "duration_seconds": i.duration.as_secs_f64(),
                    "failed_runs": i.failed_runs,
                    "reasons": i.reasons.iter().map(|(r, n)| serde_json::json!({"reason": r, "runs": n})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let rfc3339 = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
        let verdicts: Vec<serde_json::Value> = self
            .verdicts()
            .iter()
            .map(|v| {
                serde_json::json!({
                    "probe": v.probe,
                    "verdict": v.outcome.as_str(),
                    "line": v.line(),
                    "locations": v.locations,
                    "runs": v.runs,
                    "failures": v.failures,
                    "availability": v.availability(),
                    "availability_objective": v.objective,
                    "error_budget_left": v.budget_left,
                    "missed": v.missed.iter().map(|m| serde_json::json!({
                        "location": m.location,
                        "objective": m.objective,
                        "actual": m.actual,
                        "target": m.target,
                        "start": if m.cold { "cold" } else { "warm" },
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let points = |period: &[Point], start: SystemTime| -> Vec<serde_json::Value> {
            period
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    serde_json::json!({
                        "start": rfc3339(start + self.bucket * i as u32),
                        "runs": p.runs,
                        "failures": p.failures,
                        "availability": p.availability(),
                        "ttft_p95_seconds": p.ttft_p95,
                        "total_p95_seconds": p.total_p95,
                    })
                })
                .collect()
        };
        let trends: Vec<serde_json::Value> = self
            .trends
            .iter()
            .map(|t| {
                serde_json::json!({
                    "probe": t.probe,
                    "current": points(&t.periods[0], self.since),
                    "previous": points(&t.periods[1], self.previous_since()),
                })
            })
            .collect();
        serde_json::json!({
            "since": rfc3339(self.since),
            "until": rfc3339(self.until),
            "previous_since": rfc3339(self.previous_since()),
            "source": self.source,
            "exact": self.exact,
            "probes": probes,
            "incidents": incidents,
            "time_zone": self.time_zone.name(),
            "verdicts": verdicts,
            "coverage": {
                "period_seconds": self.length().as_secs_f64(),
                "data_from": self.data_from.map(rfc3339),
                "covered_seconds": self.covered(0).as_secs_f64(),
                "previous_covered_seconds": self.covered(1).as_secs_f64(),
                "partial": self.is_partial(0),
                "previous_partial": self.is_partial(1),
                "note": self.coverage_note(),
            },
            "trends": {
                "bucket_seconds": self.bucket.as_secs_f64(),
                "probes": trends,
            },
            "model_changes": self.model_changes.iter().map(changes::to_json).collect::<Vec<_>>(),
            "p95_changes": self.p95_changes().iter().map(P95Change::to_json).collect::<Vec<_>>(),
        })
    }

    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# {}\n", md_cell(&self.title()));
        if let Some(note) = self.coverage_note() {
            let _ = writeln!(out, "> **Coverage:** {}\n", md_cell(&note));
        }
        let verdicts = self.verdicts();
        if !verdicts.is_empty() {
            let _ = writeln!(out, "## Verdict\n");
            let moved = self.p95_changes();
            for v in &verdicts {
                let mark = match v.outcome {
                    verdict::Outcome::Met => "✅",
                    verdict::Outcome::NotMet => "❌",
                    _ => "–",
                };
                let _ = writeln!(out, "- {mark} {}", md_cell(&v.line()));
                for c in moved.iter().filter(|c| c.probe == v.probe) {
                    let _ = writeln!(out, "  - {}", md_cell(&c.line()));
                }
            }
            out.push('\n');
        }
        let _ = writeln!(out, "{}\n", md_cell(&self.subtitle()));
        for t in self.tables() {
            let _ = writeln!(out, "## {}\n", t.title);
            if !t.note.is_empty() {
                let _ = writeln!(out, "{}\n", t.note);
            }
            if t.rows.is_empty() {
                let _ = writeln!(out, "{}\n", t.empty);
                continue;
            }
            let _ = writeln!(out, "| {} |", t.headers.join(" | "));
            out.push('|');
            for numeric in &t.numeric {
                out.push_str(if *numeric { " ---: |" } else { " --- |" });
            }
            out.push('\n');
            for row in &t.rows {
                let cells: Vec<String> = row.iter().map(|c| md_cell(c)).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
            out.push('\n');
        }
        out
    }

    fn title(&self) -> String {
        let tz = &self.time_zone;
        format!(
            "SLO report, {} to {} {} ({})",
            tz.clock(self.since),
            tz.clock(self.until),
            tz.label(self.until),
            span(self.length())
        )
    }

    fn subtitle(&self) -> String {
        format!(
            "Source: {}. Compared with the previous period of the same length (from {}). {}",
            self.source,
            self.time_zone.clock_with_offset(self.previous_since()),
            if self.exact {
                "Percentiles are exact (nearest rank over every successful run)."
            } else {
                "Percentiles and attainment are estimated from histogram buckets (linear interpolation within a bucket)."
            }
        )
    }

    /// The report's tables, rendered alike to Markdown and HTML.
    fn tables(&self) -> Vec<Table> {
        let opt = |v: Option<f64>, f: fn(f64) -> String| v.map(f).unwrap_or_else(|| "–".into());
        let mut availability = Table::new(
            "Availability",
            "Share of runs that got a complete, valid answer (a 429 counts as a failure). Change in percentage points. \
             Budget left: the share of the failures the objective allows (1 - objective, of the runs) not used.",
            &[
                "probe",
                "location",
                ">runs",
                ">failed",
                ">availability",
                ">previous",
                ">change",
                ">objective",
                "met",
                ">budget left",
            ],
        );
        let mut ttft = Table::new(
            "Time to first token",
            "Successful runs only. Change of P95 against the previous period.",
            LATENCY_COLUMNS,
        );
        let mut total = Table::new(
            "Total latency (until the answer is complete)",
            "Successful runs only. Change of P95 against the previous period.",
            LATENCY_COLUMNS,
        );
        let mut attainment = Table::new(
            "SLO attainment",
            "Share of all runs that got their answer at or under each probe's latency target (slo.ttft_p95, slo.total_p95); a failed run misses every target.",
            &[
                "probe",
                "location",
                ">TTFT target",
                ">attained",
                ">previous",
                ">total target",
                ">attained",
                ">previous",
            ],
        );
        for r in &self.rows {
            let (c, p) = (&r.current, &r.previous);
            availability.rows.push(vec![
                r.probe.clone(),
                r.location.clone(),
                c.runs.to_string(),
                c.failures.to_string(),
                opt(c.availability, percent),
                opt(p.availability, percent),
                points(c.availability, p.availability),
                opt(r.targets.availability, percent),
                match (c.availability, r.targets.availability) {
                    (Some(a), Some(t)) if a >= t => "yes".into(),
                    (Some(_), Some(_)) => "NO".into(),
                    _ => "–".into(),
                },
                verdict::budget_left(c.runs, c.failures, r.targets.availability)
                    .map(verdict::budget_words)
                    .unwrap_or_else(|| "–".into()),
            ]);
            for (table, now, before) in [(&mut ttft, &c.ttft, &p.ttft), (&mut total, &c.total, &p.total)] {
                if now.p50.is_none() && before.p50.is_none() {
                    continue;
                }
                table.rows.push(vec![
                    r.probe.clone(),
                    r.location.clone(),
                    opt(now.p50, seconds),
                    opt(now.p95, seconds),
                    opt(now.p99, seconds),
                    opt(before.p95, seconds),
                    relative(now.p95, before.p95),
                ]);
            }
            if r.targets.ttft.is_some() || r.targets.total.is_some() {
                let target =
                    |d: Option<Duration>| d.map(|d| seconds(d.as_secs_f64())).unwrap_or_else(|| "–".into());
                attainment.rows.push(vec![
                    r.probe.clone(),
                    r.location.clone(),
                    target(r.targets.ttft),
                    opt(c.ttft_attainment, percent),
                    opt(p.ttft_attainment, percent),
                    target(r.targets.total),
                    opt(c.total_attainment, percent),
                    opt(p.total_attainment, percent),
                ]);
            }
        }
        cold::mark_warm_only(&self.rows, [&mut ttft, &mut total, &mut attainment]);
        availability.empty = "No runs in this period.".into();
        ttft.empty = "No successful run measured a first token.".into();
        total.empty = "No successful runs.".into();
        attainment.empty = "No probe has a latency target (slo.ttft_p95 or slo.total_p95).".into();
        let started = format!("started ({})", self.time_zone.name());
        let mut worst = Table::new(
            "Top incidents",
            "The longest failing streaks: from the first failed run to the next good one.",
            &[
                ">#",
                "probe",
                "location",
                &started,
                ">duration",
                ">failed runs",
                "reasons",
            ],
        );
        worst.empty = "No failed runs in this period.".into();
        let ongoing = SystemTime::now()
            .duration_since(self.until)
            .is_ok_and(|late| late < Duration::from_secs(120))
            || self.until > SystemTime::now();
        for (n, i) in self.incidents.iter().enumerate() {
            let reasons: Vec<String> = i.reasons.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
            worst.rows.push(vec![
                (n + 1).to_string(),
                i.probe.clone(),
                i.location.clone(),
                self.time_zone.clock(i.started),
                format!(
                    "{}{}{}",
                    span(i.duration),
                    if i.started < self.since {
                        " (began before the period)"
                    } else {
                        ""
                    },
                    match i.ended {
                        Some(_) => "",
                        // A report up to now: still failing. Up to a past time: the
                        // streak had not ended by then.
                        None if ongoing => " (ongoing)",
                        None => " (not over at the period's end)",
                    }
                ),
                i.failed_runs.to_string(),
                reasons.join(", "),
            ]);
        }
        let mut tables = vec![
            availability,
            ttft,
            total,
            attainment,
            tokens::table(&self.rows),
            worst,
        ];
        tables.extend(changes::table(&self.model_changes, |t| {
            self.time_zone.clock_with_offset(t)
        }));
        tables.extend(cold::tables(&self.rows, |t| self.time_zone.clock(t)));
        tables
    }
}

/// A summary's figures as the JSON report gives them, for a row's periods and its cold
/// runs alike.
fn summary_json(s: &Summary) -> serde_json::Value {
    let quantiles = |q: &Quantiles| serde_json::json!({ "p50": q.p50, "p95": q.p95, "p99": q.p99 });
    serde_json::json!({
        "runs": s.runs,
        "failures": s.failures,
        "availability": s.availability,
        "ttft_seconds": quantiles(&s.ttft),
        "total_seconds": quantiles(&s.total),
        "ttft_slo_attainment": s.ttft_attainment,
        "total_slo_attainment": s.total_attainment,
    })
}

/// A table cell as Markdown shows it literally. Probe and location names come from
/// label values (any string, when the report reads Prometheus): they must not end the
/// row, add cells, or become a link, an image, inline HTML or emphasis.
fn md_cell(s: &str) -> String {
    let chars: Vec<char> = printable(s).chars().collect();
    let word = |i: Option<usize>| i.and_then(|i| chars.get(i)).is_some_and(|c| c.is_alphanumeric());
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        let escape = match c {
            '\\' | '`' | '*' | '[' | ']' | '<' | '>' | '|' | '~' | '&' | '!' => true,
            // Inside a word (`http_5xx`) an underscore cannot start emphasis.
            '_' => !(word(i.checked_sub(1)) && word(Some(i + 1))),
            _ => false,
        };
        if escape {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The longest incidents first, at most [`TOP_INCIDENTS`].
pub fn top(mut all: Vec<Incident>) -> Vec<Incident> {
    all.sort_by(|a, b| {
        b.duration
            .cmp(&a.duration)
            .then_with(|| a.started.cmp(&b.started))
    });
    all.truncate(TOP_INCIDENTS);
    all
}

/// One table of the report, as Markdown and HTML both show it.
struct Table {
    title: String,
    note: String,
    headers: Vec<String>,
    /// Per column: figures (right-aligned) or text.
    numeric: Vec<bool>,
    rows: Vec<Vec<String>>,
    empty: String,
}

impl Table {
    /// `headers` of figure columns start with `>` (right-aligned), like a Markdown `---:`.
    fn new(title: &str, note: &str, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            note: note.into(),
            headers: headers
                .iter()
                .map(|h| h.trim_start_matches('>').to_owned())
                .collect(),
            numeric: headers.iter().map(|h| h.starts_with('>')).collect(),
            rows: Vec::new(),
            empty: String::new(),
        }
    }
}

/// An availability change in percentage points: `+0.12 pp`.
fn points(now: Option<f64>, before: Option<f64>) -> String {
    match (now, before) {
        (Some(n), Some(b)) => format!("{:+.2} pp", (n - b) * 100.0),
        _ => "–".into(),
    }
}

/// A latency change relative to before: `+12%`, `-8%`.
fn relative(now: Option<f64>, before: Option<f64>) -> String {
    match (now, before) {
        (Some(n), Some(b)) if b > 0.0 => format!("{:+.0}%", (n / b - 1.0) * 100.0),
        _ => "–".into(),
    }
}

/// Groups the targets of a config by probe name, for [`Report::from_history`].
pub fn targets_by_probe(config: Option<&crate::config::ReportView>) -> BTreeMap<String, Targets> {
    config
        .map(|c| {
            c.probes
                .iter()
                .map(|p| (p.name.to_string(), targets_of(&p.slo)))
                .collect()
        })
        .unwrap_or_default()
}

/// The report's targets of one probe's `slo:`.
pub fn targets_of(slo: &crate::config::Slo) -> Targets {
    Targets {
        ttft: slo.ttft_p95,
        total: slo.total_p95,
        availability: slo.availability(),
    }
}

#[cfg(test)]
mod tests;
