//! The weekly SLO report (`inferprobe report`): per probe and location, availability,
//! TTFT and total latency percentiles and SLO attainment over a period, each compared
//! with the period of the same length before it, and the longest incidents.
//!
//! The figures come from one of two sources, computed the same way: this agent's
//! store ([`Report::from_history`], exact: every run) or Prometheus for the whole fleet
//! ([`prometheus`], from the exported counters and histograms). Rendering to Markdown,
//! HTML and JSON works on the built [`Report`] only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use crate::config::Cost;
use crate::human::{clock, html_escape, percent, printable, seconds, span};
use crate::stats::{Incident, Quantiles, Summary, Targets, incidents};
use crate::store::{HistoryReader, RunQuery, RunRecord, StoreError};

pub mod prometheus;
mod tokens;
pub use tokens::{TokenTotals, costs_by_probe};

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
}

impl Report {
    pub fn previous_since(&self) -> SystemTime {
        let len = self.until.duration_since(self.since).unwrap_or_default();
        self.since.checked_sub(len).unwrap_or(SystemTime::UNIX_EPOCH)
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
        history.for_each_series(&query, |runs| {
            let split = runs.partition_point(|r| r.at < since);
            let (before, during) = runs.split_at(split);
            let first = &runs[0];
            let t = targets(&first.probe);
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
            });
        })?;
        Ok(Report {
            since,
            until,
            source,
            exact: true,
            rows,
            incidents: top(all_incidents),
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
        let quantiles = |q: &Quantiles| serde_json::json!({ "p50": q.p50, "p95": q.p95, "p99": q.p99 });
        let summary = |s: &Summary| {
            serde_json::json!({
                "runs": s.runs,
                "failures": s.failures,
                "availability": s.availability,
                "ttft_seconds": quantiles(&s.ttft),
                "total_seconds": quantiles(&s.total),
                "ttft_slo_attainment": s.ttft_attainment,
                "total_slo_attainment": s.total_attainment,
            })
        };
        let probes: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut o = summary(&r.current);
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
                o["previous"] = summary(&r.previous);
                tokens::add_json(&mut o, r);
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
        serde_json::json!({
            "since": humantime::format_rfc3339_seconds(self.since).to_string(),
            "until": humantime::format_rfc3339_seconds(self.until).to_string(),
            "previous_since": humantime::format_rfc3339_seconds(self.previous_since()).to_string(),
            "source": self.source,
            "exact": self.exact,
            "probes": probes,
            "incidents": incidents,
        })
    }

    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# {}\n", self.title());
        let _ = writeln!(out, "{}\n", self.subtitle());
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

    pub fn to_html(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "<!doctype html><html lang=en><head><meta charset=utf-8>\
             <meta name=viewport content=\"width=device-width,initial-scale=1\">\
             <title>{}</title><style>\
             body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24}}\
             table{{border-collapse:collapse;margin:8px 0 20px;font-variant-numeric:tabular-nums}}\
             th,td{{border:1px solid #d8dde3;padding:4px 8px;text-align:right}}\
             th{{background:#f6f8fa}} td.t,th.t{{text-align:left}} .note{{color:#5b6470}}\
             </style></head><body><h1>{}</h1><p class=note>{}</p>",
            html_escape(&self.title()),
            html_escape(&self.title()),
            html_escape(&self.subtitle())
        );
        for t in self.tables() {
            let _ = write!(out, "<h2>{}</h2>", html_escape(&t.title));
            if !t.note.is_empty() {
                let _ = write!(out, "<p class=note>{}</p>", html_escape(&t.note));
            }
            if t.rows.is_empty() {
                let _ = write!(out, "<p>{}</p>", html_escape(&t.empty));
                continue;
            }
            out.push_str("<table><thead><tr>");
            for (h, numeric) in t.headers.iter().zip(&t.numeric) {
                let class = if *numeric { "" } else { " class=t" };
                let _ = write!(out, "<th{class}>{}</th>", html_escape(h));
            }
            out.push_str("</tr></thead><tbody>");
            for row in &t.rows {
                out.push_str("<tr>");
                for (c, numeric) in row.iter().zip(&t.numeric) {
                    let class = if *numeric { "" } else { " class=t" };
                    let _ = write!(out, "<td{class}>{}</td>", html_escape(c));
                }
                out.push_str("</tr>");
            }
            out.push_str("</tbody></table>");
        }
        out.push_str("</body></html>\n");
        out
    }

    fn title(&self) -> String {
        let len = self.until.duration_since(self.since).unwrap_or_default();
        format!(
            "SLO report, {} to {} UTC ({})",
            clock(self.since),
            clock(self.until),
            span(len)
        )
    }

    fn subtitle(&self) -> String {
        format!(
            "Source: {}. Compared with the previous period of the same length (from {} UTC). {}",
            self.source,
            clock(self.previous_since()),
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
            "Share of runs that got a complete, valid answer (a 429 counts as a failure). Change in percentage points.",
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
        availability.empty = "No runs in this period.".into();
        ttft.empty = "No successful run measured a first token.".into();
        total.empty = "No successful runs.".into();
        attainment.empty = "No probe has a latency target (slo.ttft_p95 or slo.total_p95).".into();
        let mut worst = Table::new(
            "Top incidents",
            "The longest failing streaks: from the first failed run to the next good one.",
            &[
                ">#",
                "probe",
                "location",
                "started (UTC)",
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
                clock(i.started),
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
        vec![
            availability,
            ttft,
            total,
            attainment,
            tokens::table(&self.rows),
            worst,
        ]
    }
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
                .map(|p| {
                    let t = Targets {
                        ttft: p.slo.ttft_p95,
                        total: p.slo.total_p95,
                        availability: p.slo.availability(),
                    };
                    (p.name.to_string(), t)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn report() -> Report {
        let s = |runs, failures, p95: f64| Summary {
            runs,
            failures,
            availability: Some((runs - failures) as f64 / runs as f64),
            ttft: Quantiles {
                p50: Some(p95 / 3.0),
                p95: Some(p95 / 2.0),
                p99: Some(p95 / 1.5),
            },
            total: Quantiles {
                p50: Some(p95 / 2.0),
                p95: Some(p95),
                p99: Some(p95 * 1.2),
            },
            ttft_attainment: Some(0.97),
            total_attainment: Some(0.9),
        };
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        Report {
            since: t0,
            until: t0 + Duration::from_secs(7 * 86_400),
            source: "test".into(),
            exact: true,
            rows: vec![Row {
                probe: "chat|api".into(),
                location: "eu".into(),
                targets: Targets {
                    ttft: Some(Duration::from_millis(500)),
                    total: None,
                    availability: Some(0.999),
                },
                current: s(20_160, 40, 2.0),
                previous: s(20_160, 10, 1.6),
                tokens: [
                    TokenTotals {
                        input: 1_000_000,
                        input_estimated: 200_000,
                        output: 500_000,
                    },
                    TokenTotals {
                        input: 800_000,
                        input_estimated: 0,
                        output: 400_000,
                    },
                ],
                cost: Some(Cost {
                    input_per_million: 0.15,
                    output_per_million: 0.60,
                    currency: "USD".into(),
                }),
            }],
            incidents: vec![Incident {
                probe: "chat|api".into(),
                location: "eu".into(),
                started: t0 + Duration::from_secs(3600),
                ended: Some(t0 + Duration::from_secs(3600 + 1200)),
                duration: Duration::from_secs(1200),
                failed_runs: 40,
                reasons: vec![("http_5xx".into(), 38), ("timeout_total".into(), 2)],
            }],
        }
    }

    #[test]
    fn markdown_has_every_section_and_escapes_pipes() {
        let md = report().to_markdown();
        for needle in [
            "# SLO report, 2027-01-15 08:00:00 to 2027-01-22 08:00:00 UTC (7 d)",
            "## Availability",
            "| chat\\|api | eu | 20160 | 40 | 99.80% | 99.95% | -0.15 pp | 99.90% | NO |",
            "## Time to first token",
            "| chat\\|api | eu | 667 ms | 1.00 s | 1.33 s | 800 ms | +25% |",
            "## SLO attainment",
            "| chat\\|api | eu | 500 ms | 97.00% | 97.00% | – | 90.00% | 90.00% |",
            "## Tokens and cost",
            // 1 M input at 0.15 and 0.5 M output at 0.60 per million; before, 0.8 M and
            // 0.4 M. The estimated part of the input is said.
            "| chat\\|api | eu | \\~1000000 (200000 estimated) | 500000 | 0.4500 USD | 0.3600 USD | +25% |",
            "## Top incidents",
            "| 1 | chat\\|api | eu | 2027-01-15 09:00:00 | 20 min | 40 | http_5xx ×38, timeout_total ×2 |",
        ] {
            assert!(md.contains(needle), "missing {needle:?} in\n{md}");
        }
        // Every table row has as many cells as its header.
        for block in md.split("\n\n").filter(|b| b.starts_with('|')) {
            let widths: Vec<usize> = block
                .lines()
                .map(|l| l.replace("\\|", "").matches('|').count())
                .collect();
            assert!(widths.windows(2).all(|w| w[0] == w[1]), "{block}");
        }
    }

    #[test]
    fn json_carries_the_documented_fields() {
        let j = report().to_json();
        let p = &j["probes"][0];
        assert_eq!(p["probe"], "chat|api");
        assert_eq!(p["location"], "eu");
        assert_eq!(p["runs"], 20_160);
        assert_eq!(p["total_seconds"]["p95"], 2.0);
        assert_eq!(p["ttft_seconds"]["p99"].as_f64().unwrap(), 2.0 / 1.5);
        assert_eq!(p["availability_met"], false);
        assert_eq!(p["previous"]["failures"], 10);
        assert_eq!(j["incidents"][0]["duration_seconds"], 1200.0);
        assert_eq!(p["tokens"]["input"], 1_000_000);
        assert_eq!(p["tokens"]["input_estimated"], 200_000);
        assert_eq!(p["previous"]["tokens"]["output"], 400_000);
        assert!((p["cost"]["amount"].as_f64().unwrap() - 0.45).abs() < 1e-12);
        assert_eq!(p["cost"]["currency"], "USD");
        assert!((p["previous"]["cost"].as_f64().unwrap() - 0.36).abs() < 1e-12);
    }

    /// Names from label values are text in both documents, never markup.
    #[test]
    fn hostile_names_stay_text_in_markdown_and_html() {
        let mut r = report();
        let hostile = "x](https://evil.example) ![t](https://evil.example/p.png) <img src=x onerror=alert(1)> *b* _i_ `c` ~~s~~ &amp; \\| a\nb\r| c |";
        r.rows[0].probe = hostile.into();
        r.incidents[0].location = hostile.into();
        let md = r.to_markdown();
        for raw in [
            "x](", " ![", " <img", " *b*", " _i_", " `c`", "~~s", " &amp;", "\nb", "\r",
        ] {
            assert!(!md.contains(raw), "{raw:?} in\n{md}");
        }
        assert!(md.contains("x\\](https://evil.example) \\!\\[t\\]"), "{md}");
        // Still one row per line, as many cells as the header.
        for block in md.split("\n\n").filter(|b| b.starts_with('|')) {
            let widths: Vec<usize> = block
                .lines()
                .map(|l| l.replace("\\\\", "").replace("\\|", "").matches('|').count())
                .collect();
            assert!(widths.windows(2).all(|w| w[0] == w[1]), "{block}");
        }
        let html = r.to_html();
        assert!(!html.contains("<img") && html.contains("&lt;img src=x"), "{html}");
    }

    #[test]
    fn html_is_escaped() {
        let mut r = report();
        r.rows[0].probe = "<b>".into();
        let html = r.to_html();
        assert!(html.contains("&lt;b&gt;") && !html.contains("<td class=t><b>"));
    }
}
