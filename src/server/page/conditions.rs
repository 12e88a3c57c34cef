//! What runs met at their endpoint, on the status page: a cold probe's cold starts as
//! marks of their own on the chart (its P95 lines are the warm runs', as the windows'
//! figures and the report's rows are), each warm-up after a restart shaded from the
//! restart to the end of its last run (the page does not know the probe's `warmup`
//! length: the history says which runs fell in a warm-up, not how long it lasted), a
//! burst probe's last figures, the cold runs' P95 beside the warm one, and each run's
//! idle time and tags. Everything from the server (a warm-up's cause) is escaped.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::{AgentView, ProbeView, WINDOWS};
use crate::human::{html_escape as esc, seconds, span};
use crate::stats::{Summary, Targets};
use crate::store::RunRecord;

/// Cold starts marked on one chart at most (the latest): a cold probe runs at most every
/// few minutes, so a day holds a few hundred.
const MAX_COLD_MARKS: usize = 300;
/// Warm-ups shaded on one chart at most (the latest): a server restarting all day would
/// otherwise cover the chart.
const MAX_WARMUP_BANDS: usize = 50;
/// The narrowest band drawn, in chart units: a warm-up of one quick run is seconds wide.
const MIN_BAND: f64 = 2.0;

/// What the page shows of a probe's runs' conditions.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    /// Cold runs within the chart's span, oldest first.
    pub cold: Vec<ColdRun>,
    /// Warm-ups within the chart's span, oldest first.
    pub warmups: Vec<WarmupBand>,
    /// The latest run with a burst's figures.
    pub last_burst: Option<LastBurst>,
    /// Per window of [`WINDOWS`], the cold runs alone; empty for a probe without any.
    pub cold_windows: Vec<Option<Summary>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColdRun {
    pub at: SystemTime,
    pub ttft: Option<Duration>,
    pub total: Option<Duration>,
    /// The failure reason; `None` for a successful run.
    pub reason: Option<String>,
    pub idle: Option<Duration>,
}

impl ColdRun {
    /// What its mark's height shows: the time to first token, else the total time.
    fn figure(&self) -> Option<f64> {
        self.reason
            .is_none()
            .then(|| self.ttft.or(self.total))
            .flatten()
            .map(|d| d.as_secs_f64())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct WarmupBand {
    /// The restart.
    pub since: SystemTime,
    /// The end of its last run in the history.
    pub until: SystemTime,
    pub cause: String,
    pub runs: u32,
    pub failures: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastBurst {
    pub at: SystemTime,
    pub spread: Option<f64>,
    pub slowdown: Option<f64>,
}

impl Conditions {
    /// From a probe's runs of the last 7 days (start order); the marks and bands within
    /// the chart's `span` before `now`.
    pub fn of(runs: &[RunRecord], now: SystemTime, span: Duration) -> Conditions {
        let start = now.checked_sub(span).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut c = Conditions {
            last_burst: runs
                .iter()
                .rev()
                .find(|r| r.burst_spread.is_some() || r.burst_slowdown.is_some())
                .map(|r| LastBurst {
                    at: r.at,
                    spread: r.burst_spread,
                    slowdown: r.burst_slowdown,
                }),
            ..Conditions::default()
        };
        if runs.iter().any(|r| r.cold) {
            c.cold_windows = WINDOWS
                .iter()
                .map(|(len, _)| {
                    let since = now.checked_sub(*len).unwrap_or(SystemTime::UNIX_EPOCH);
                    let from = runs.partition_point(|r| r.at < since);
                    Summary::of_cold(&runs[from..], &Targets::default())
                })
                .collect();
        }
        // A warm-up that began before the span still shades the part of it in the span.
        let in_span = runs.partition_point(|r| r.at < start);
        for r in &runs[in_span..] {
            if r.cold {
                c.cold.push(ColdRun {
                    at: r.at,
                    ttft: r.ttft,
                    total: r.total,
                    reason: r.reason.clone(),
                    idle: r.idle,
                });
            }
            let Some(w) = &r.warmup else { continue };
            let end = r.at + r.total.unwrap_or_default();
            match c.warmups.last_mut().filter(|b| b.since == w.since) {
                Some(band) => {
                    band.until = band.until.max(end);
                    band.runs += 1;
                    band.failures += u32::from(!r.success());
                }
                None => c.warmups.push(WarmupBand {
                    since: w.since,
                    until: end,
                    cause: w.cause.clone(),
                    runs: 1,
                    failures: u32::from(!r.success()),
                }),
            }
        }
        let extra = c.cold.len().saturating_sub(MAX_COLD_MARKS);
        c.cold.drain(..extra);
        let extra = c.warmups.len().saturating_sub(MAX_WARMUP_BANDS);
        c.warmups.drain(..extra);
        c
    }

    /// The top of the chart's scale when it has no warm figure: the cold marks' highest.
    pub fn cold_max(&self) -> f64 {
        self.cold.iter().filter_map(ColdRun::figure).fold(0.0, f64::max)
    }
}

/// A chart's geometry: where a time and a value fall.
pub struct Frame {
    pub start: SystemTime,
    pub span: Duration,
    pub width: f64,
    /// The plot's height (the failure strip is below it).
    pub plot: f64,
    /// The value at the top; 0 when nothing is timed.
    pub max: f64,
}

impl Frame {
    fn x(&self, t: SystemTime) -> f64 {
        let share =
            t.duration_since(self.start).unwrap_or_default().as_secs_f64() / self.span.as_secs_f64().max(1.0);
        share.clamp(0.0, 1.0) * self.width
    }

    /// As the P95 lines place a value; `None` over the top (the lines' scale is the warm
    /// runs': a cold start of tens of seconds would flatten them).
    fn y(&self, v: f64) -> Option<f64> {
        (v <= self.max).then(|| self.plot - (v / self.max) * (self.plot - 4.0))
    }

    /// Whether a cold start is over the top of the scale.
    fn above(&self, c: &Conditions) -> bool {
        c.cold.iter().filter_map(ColdRun::figure).any(|v| v > self.max)
    }
}

/// The warm-up bands, drawn under the lines: the restart's words (the server's, escaped)
/// as the tooltip.
pub fn svg_warmups(c: &Conditions, f: &Frame, agent: &AgentView) -> String {
    let mut svg = String::new();
    for b in &c.warmups {
        let (x0, x1) = (f.x(b.since), f.x(b.until));
        let width = (x1 - x0).max(MIN_BAND);
        let x = x0.min(f.width - width);
        let words = format!(
            "warm-up after a restart at {}: {} ({} run{}, {} failed)",
            agent.time_zone.clock_with_offset(b.since),
            b.cause,
            b.runs,
            if b.runs == 1 { "" } else { "s" },
            b.failures
        );
        let _ = write!(
            svg,
            "<g class=warmup><title>{}</title><rect x=\"{x:.1}\" y=0 width=\"{width:.1}\" height=\"{:.1}\" \
             fill=\"var(--warn)\" fill-opacity=\"0.18\" /></g>",
            esc(&words),
            f.plot
        );
    }
    svg
}

/// A hollow circle per cold start, over the lines: at its TTFT (or total), a triangle
/// on the top edge for one over the scale, a failed one on the failure strip in red.
pub fn svg_cold(c: &Conditions, f: &Frame, agent: &AgentView) -> String {
    let mut svg = String::new();
    for r in &c.cold {
        let x = f.x(r.at).clamp(4.0, f.width - 4.0);
        let (y, color, what) = match (r.figure(), &r.reason) {
            (Some(v), _) if f.max > 0.0 => (
                f.y(v),
                "var(--cold)",
                format!(
                    "TTFT {}, total {}",
                    r.ttft.map_or("–".into(), |d| seconds(d.as_secs_f64())),
                    r.total.map_or("–".into(), |d| seconds(d.as_secs_f64()))
                ),
            ),
            (_, Some(reason)) => (Some(f.plot), "var(--bad)", format!("failed: {reason}")),
            _ => (Some(f.plot), "var(--cold)", "not timed".to_owned()),
        };
        let idle = r
            .idle
            .map(|d| format!(", after {} idle", idle_words(d)))
            .unwrap_or_default();
        let words = format!(
            "cold start at {}: {what}{idle}",
            agent.time_zone.clock_with_offset(r.at)
        );
        let shape = match y {
            Some(y) => format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\""),
            None => format!("<path d=\"M{x:.1},1 l4,7 h-8 z\""),
        };
        let _ = write!(
            svg,
            "<g class=cold-run><title>{}</title>{shape} fill=\"var(--card)\" stroke=\"{color}\" \
             stroke-width=\"1.5\" /></g>",
            esc(&words)
        );
    }
    svg
}

/// The legend's words for what the chart marks besides the lines.
pub fn legend(c: &Conditions, f: &Frame) -> String {
    let mut out = String::new();
    if !c.cold.is_empty() {
        out.push_str(" · <span style=\"color:var(--cold)\">○ cold start</span>");
        if f.above(c) {
            out.push_str(" (▲ over the scale)");
        }
    }
    if !c.warmups.is_empty() {
        out.push_str(" · <span class=warmup-key>warm-up</span>");
    }
    out
}

/// The windows table's row of the cold runs' P95 TTFT (total for kinds without one).
pub fn cold_row(out: &mut String, p: &ProbeView) {
    if p.conditions.cold_windows.is_empty() {
        return;
    }
    out.push_str("<tr><th scope=row>P95 cold start</th>");
    for (i, cold) in p.conditions.cold_windows.iter().enumerate() {
        // Italic where the window's data is, as the rows above.
        let partial = p
            .windows
            .get(i)
            .is_some_and(|(_, covered)| super::partial(*covered, WINDOWS[i].0));
        let class = if partial { " class=partial" } else { "" };
        match cold {
            Some(s) => {
                let v = s
                    .ttft
                    .p95
                    .or(s.total.p95)
                    .map(seconds)
                    .unwrap_or_else(|| "–".into());
                let _ = write!(out, "<td{class} title=\"{} cold runs\">{v}</td>", s.runs);
            }
            None => {
                let _ = write!(out, "<td{class} title=\"no cold run\">–</td>");
            }
        }
    }
    out.push_str("</tr>");
}

/// A burst probe's last burst, in words.
pub fn burst_line(out: &mut String, p: &ProbeView, now: SystemTime) {
    let Some(b) = p.conditions.last_burst else {
        return;
    };
    let mut parts = Vec::new();
    if let Some(s) = b.spread {
        parts.push(format!("spread {s:.2} (standard deviation over mean)"));
    }
    if let Some(s) = b.slowdown {
        parts.push(format!("{s:.1}× the time of one request alone"));
    }
    let _ = write!(
        out,
        "<div class=burst>Last burst {} ago: {}</div>",
        span(now.duration_since(b.at).unwrap_or_default()),
        parts.join(", ")
    );
}

/// A run's idle time before it, and its tags: `cold`, `warm-up` (the cause as the
/// tooltip, escaped).
pub fn idle_cell(r: &RunRecord, agent: &AgentView) -> String {
    let mut cell = r.idle.map_or_else(|| "–".to_owned(), idle_words);
    if r.cold {
        cell.push_str(" <span class=\"tag cold\">cold</span>");
    }
    if let Some(w) = &r.warmup {
        let _ = write!(
            cell,
            " <span class=\"tag warmup\" title=\"{}\">warm-up</span>",
            esc(&format!(
                "after a restart at {}: {}",
                agent.time_zone.clock_with_offset(w.since),
                w.cause
            ))
        );
    }
    cell
}

/// An idle time for people: seconds to two places under a minute (a cold probe's 1.5 s
/// window must not read "1 s"), minutes and hours above.
fn idle_words(d: Duration) -> String {
    if d < Duration::from_secs(60) {
        seconds(d.as_secs_f64())
    } else {
        span(d)
    }
}

/// What the last-run line adds for a cold start or a run in a warm-up.
pub fn run_tags(r: &RunRecord) -> &'static str {
    match (r.cold, r.warmup.is_some()) {
        (true, true) => {
            " <span class=\"tag cold\">cold start</span> <span class=\"tag warmup\">warm-up</span>"
        }
        (true, false) => " <span class=\"tag cold\">cold start</span>",
        (false, true) => " <span class=\"tag warmup\">warm-up</span>",
        (false, false) => "",
    }
}
