//! The status page: server-rendered HTML with inline CSS and SVG, no script and no
//! external assets, so it works offline, behind any proxy and on a phone. It refreshes
//! itself every 30 s.
//!
//! Everything shown is computed by [`board`] from the history (7 days of this
//! location's runs), the latest outcomes and the alert board; rendering is pure. Cold
//! starts, warm-ups and bursts are drawn by conditions.rs.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::alert::{Condition, Firing};
use crate::human::{html_escape as esc, percent, seconds, shorten, span};
use crate::stats::{Summary, Targets, percentile};
use crate::store::{ModelChange, RunRecord};
use crate::time_zone::TimeZone;
use conditions::{Conditions, Frame};

/// The windows of the status page.
pub const WINDOWS: [(Duration, &str); 3] = [
    (Duration::from_secs(3600), "1 h"),
    (Duration::from_secs(86_400), "24 h"),
    (Duration::from_secs(7 * 86_400), "7 d"),
];

/// A window is "partial" when its data starts this much after the window does.
const PARTIAL_SLACK: f64 = 0.05;

/// Chart buckets: 15 minutes each over 24 h.
const CHART_BUCKETS: usize = 96;
/// The shortest span a chart shows.
const CHART_MIN_SPAN: Duration = Duration::from_secs(600);
/// Empty buckets a line is drawn across; a longer gap breaks it.
const CHART_BRIDGE: usize = 4;

/// One probe as the page shows it.
#[derive(Debug, Clone)]
pub struct ProbeView {
    pub name: String,
    pub kind: Option<String>,
    pub model: Option<String>,
    pub endpoint: Option<String>,
    /// The endpoint's query, secrets redacted (`?a=b`), empty without one.
    pub query: String,
    /// The latest run, if any since the agent started (else the latest in history).
    pub last: Option<RunRecord>,
    pub last_failure: Option<RunRecord>,
    /// Firing alerts of this probe.
    pub alerts: Vec<Firing>,
    /// Per window of [`WINDOWS`]: the figures and how much of the window has data.
    pub windows: Vec<(Summary, Duration)>,
    /// The chart: the last 24 h, or less while the history is younger (at least 10 min).
    pub chart: Vec<ChartBucket>,
    pub chart_span: Duration,
    /// Changes of the served model, oldest first: a marker each on the chart, where
    /// they fall within its span.
    pub model_changes: Vec<ModelChange>,
    /// Cold starts, warm-ups and the last burst (conditions.rs).
    pub conditions: Conditions,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ChartBucket {
    pub total_p95: Option<f64>,
    pub ttft_p95: Option<f64>,
    pub runs: u32,
    pub failures: u32,
}

/// The state shown in a probe's badge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Down,
    Degraded,
    Failing,
    Up,
    NoData,
}

impl State {
    fn label(self) -> &'static str {
        match self {
            State::Down => "DOWN",
            State::Degraded => "DEGRADED",
            State::Failing => "FAILING",
            State::Up => "UP",
            State::NoData => "NO DATA",
        }
    }

    fn class(self) -> &'static str {
        match self {
            State::Down | State::Failing => "bad",
            State::Degraded => "warn",
            State::Up => "ok",
            State::NoData => "none",
        }
    }
}

impl ProbeView {
    /// Builds a probe's view from its runs of the last 7 days (start order) and its
    /// first run ever kept (how much of a window the history can cover: a probe that
    /// runs every 10 minutes has full windows long before its first run in the last
    /// hour is an hour old).
    pub fn new(
        name: &str,
        runs: &[RunRecord],
        first_run: Option<SystemTime>,
        alerts: Vec<Firing>,
        now: SystemTime,
    ) -> ProbeView {
        let history = first_run
            .or_else(|| runs.first().map(|r| r.at))
            .map(|t| now.duration_since(t).unwrap_or_default())
            .unwrap_or_default();
        let windows = WINDOWS
            .iter()
            .map(|(len, _)| {
                let since = now.checked_sub(*len).unwrap_or(SystemTime::UNIX_EPOCH);
                let from = runs.partition_point(|r| r.at < since);
                (Summary::of(&runs[from..], &Targets::default()), history.min(*len))
            })
            .collect();
        let chart_span = history.clamp(CHART_MIN_SPAN, WINDOWS[1].0);
        ProbeView {
            name: name.to_owned(),
            kind: None,
            model: None,
            endpoint: None,
            query: String::new(),
            last: runs.last().cloned(),
            last_failure: runs.iter().rev().find(|r| !r.success()).cloned(),
            alerts,
            windows,
            chart: chart(runs, now, chart_span),
            chart_span,
            model_changes: Vec::new(),
            conditions: Conditions::of(runs, now, chart_span),
        }
    }

    pub fn state(&self) -> State {
        let firing = |c: Condition| self.alerts.iter().any(|f| f.alert.condition == c);
        if firing(Condition::Down) {
            State::Down
        } else if firing(Condition::Degraded) {
            State::Degraded
        } else {
            match &self.last {
                None => State::NoData,
                Some(r) if r.success() => State::Up,
                Some(_) => State::Failing,
            }
        }
    }
}

fn chart(runs: &[RunRecord], now: SystemTime, span: Duration) -> Vec<ChartBucket> {
    let width = span / CHART_BUCKETS as u32;
    let start = now.checked_sub(span).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut totals: Vec<Vec<f64>> = vec![Vec::new(); CHART_BUCKETS];
    let mut ttfts: Vec<Vec<f64>> = vec![Vec::new(); CHART_BUCKETS];
    let mut buckets = vec![ChartBucket::default(); CHART_BUCKETS];
    for r in runs.iter().filter(|r| r.at >= start) {
        let i = (r.at.duration_since(start).unwrap_or_default().as_secs_f64() / width.as_secs_f64()) as usize;
        let i = i.min(CHART_BUCKETS - 1);
        buckets[i].runs += 1;
        if !r.success() {
            buckets[i].failures += 1;
        } else if !r.cold {
            // The lines are the warm runs' P95; cold starts are marks of their own.
            totals[i].extend(r.total.map(|d| d.as_secs_f64()));
            ttfts[i].extend(r.ttft.map(|d| d.as_secs_f64()));
        }
    }
    for (i, b) in buckets.iter_mut().enumerate() {
        b.total_p95 = percentile(std::mem::take(&mut totals[i]), 0.95);
        b.ttft_p95 = percentile(std::mem::take(&mut ttfts[i]), 0.95);
    }
    buckets
}

/// What the page says about the agent itself.
#[derive(Debug, Clone)]
pub struct AgentView {
    pub location: String,
    pub started_at: SystemTime,
    /// The oldest run in the history, if any.
    pub history_since: Option<SystemTime>,
    pub now: SystemTime,
    /// agent.timezone: every time on the page is shown in it, with its offset.
    pub time_zone: TimeZone,
}

const STYLE: &str = "
:root{--bg:#fff;--fg:#1b1f24;--mute:#5b6470;--line:#d8dde3;--card:#f6f8fa;--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--none:#6e7781;--chart:#0969da;--ttft:#8250df;--cold:#bc4c00}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--mute:#9198a1;--line:#30363d;--card:#161b22;--ok:#3fb950;--bad:#f85149;--warn:#d29922;--none:#9198a1;--chart:#4493f8;--ttft:#ab7df8;--cold:#f0883e}
.badge.ok{background:#238636}.badge.bad{background:#b62324}.badge.warn{background:#9e6a03}.badge.none{background:#6e7681}}
*{box-sizing:border-box}
body{margin:0;padding:12px;font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;background:var(--bg);color:var(--fg)}
header{display:flex;flex-wrap:wrap;gap:4px 16px;align-items:baseline;margin-bottom:12px}
h1{font-size:20px;margin:0}h2{font-size:16px;margin:0;overflow-wrap:anywhere}
a{color:var(--chart)}
.mute{color:var(--mute)}
.notice{border:1px solid var(--warn);border-radius:6px;padding:8px 12px;margin-bottom:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,360px),1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px;min-width:0}
.card.bad{border-color:var(--bad)}.card.warn{border-color:var(--warn)}
.top{display:flex;justify-content:space-between;gap:8px;align-items:center}
.badge{font-weight:700;font-size:12px;padding:2px 8px;border-radius:10px;color:#fff;white-space:nowrap}
.badge.ok{background:var(--ok)}.badge.bad{background:var(--bad)}.badge.warn{background:var(--warn)}.badge.none{background:var(--none)}
table{border-collapse:collapse;width:100%;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{text-align:right;padding:2px 6px;border-bottom:1px solid var(--line);white-space:nowrap}
th:first-child,td:first-child{text-align:left}
th[scope=row]{font-weight:normal}
.partial{color:var(--mute);font-style:italic}
.fail{color:var(--bad)}
.alert{color:var(--bad);margin:4px 0;overflow-wrap:anywhere}
.alert.warn{color:var(--warn)}
svg{width:100%;height:auto;display:block}
.scroll{overflow-x:auto}
.tag{font-size:11px;padding:0 4px;border:1px solid;border-radius:4px;white-space:nowrap}
.tag.cold{color:var(--cold)}.tag.warmup{color:var(--warn)}
.warmup-key{background:color-mix(in srgb,var(--warn) 25%,transparent);padding:0 3px}
footer{margin-top:16px;font-size:12px}
";

fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=refresh content=30>\
         <link rel=icon href=\"data:,\">\
         <title>{}</title><style>{STYLE}</style></head><body>",
        esc(title)
    );
}

fn notice(out: &mut String, agent: &AgentView) {
    let up = agent.now.duration_since(agent.started_at).unwrap_or_default();
    let history = agent
        .history_since
        .map(|t| agent.now.duration_since(t).unwrap_or_default())
        .unwrap_or_default();
    if history < WINDOWS[2].0 && up < Duration::from_secs(3600) {
        let since = match agent.history_since {
            Some(_) => format!("history covers only the last {}", span(history)),
            None => "no runs have finished yet".to_owned(),
        };
        let _ = write!(
            out,
            "<p class=notice role=status><b>Cold data:</b> this agent started {} ago and {since}. \
             Figures for longer windows are partial (shown in <span class=partial>italics</span>, with the time they cover).</p>",
            span(up)
        );
    }
}

/// `/`: one card per probe, problems first.
pub fn index(agent: &AgentView, probes: &[ProbeView]) -> String {
    let mut out = String::with_capacity(16 * 1024 + probes.len() * 6 * 1024);
    head(&mut out, &format!("inferprobe · {}", agent.location));
    let down = probes.iter().filter(|p| p.state() <= State::Failing).count();
    let _ = write!(
        out,
        "<header><h1>inferprobe status</h1><span>location <b>{}</b></span>\
         <span class=mute>{} probes, {}</span><span class=mute>as of {}</span></header>",
        esc(&agent.location),
        probes.len(),
        if down == 0 {
            "all answering".to_owned()
        } else {
            format!("<b class=fail>{down} with problems</b>")
        },
        esc(&agent.time_zone.clock_with_offset(agent.now))
    );
    notice(&mut out, agent);
    let mut order: Vec<&ProbeView> = probes.iter().collect();
    order.sort_by(|a, b| a.state().cmp(&b.state()).then_with(|| a.name.cmp(&b.name)));
    out.push_str("<main class=grid>");
    for p in order {
        card(&mut out, p, agent);
    }
    if probes.is_empty() {
        out.push_str("<p>No probes are configured.</p>");
    }
    out.push_str("</main>");
    footer(&mut out);
    out
}

fn card(out: &mut String, p: &ProbeView, agent: &AgentView) {
    let now = agent.now;
    let state = p.state();
    let _ = write!(
        out,
        "<section class=\"card {}\" id=\"probe-{}\"><div class=top><h2><a href=\"/probes/{}\">{}</a></h2>\
         <span class=\"badge {}\">{}</span></div>",
        state.class(),
        esc(&url_encode(&p.name)),
        esc(&url_encode(&p.name)),
        esc(&p.name),
        state.class(),
        state.label()
    );
    identity(out, p);
    alerts(out, p, now);
    windows_table(out, p);
    last_lines(out, p, agent);
    chart_block(out, p, agent, 360, 64);
    out.push_str("</section>");
}

fn identity(out: &mut String, p: &ProbeView) {
    let endpoint = p.endpoint.as_ref().map(|e| format!("{e}{}", p.query));
    let parts: Vec<String> = [&p.kind, &p.model, &endpoint]
        .into_iter()
        .flatten()
        .map(|s| esc(s))
        .collect();
    if !parts.is_empty() {
        let _ = write!(
            out,
            "<div class=mute style=\"overflow-wrap:anywhere\">{}</div>",
            parts.join(" · ")
        );
    }
}

fn alerts(out: &mut String, p: &ProbeView, now: SystemTime) {
    for f in &p.alerts {
        let a = &f.alert;
        let class = if a.condition == Condition::Down {
            "alert"
        } else {
            "alert warn"
        };
        let _ = write!(
            out,
            "<div class=\"{class}\">⚠ {} ({}) since {} ago</div>",
            esc(&a.summary),
            a.severity.as_str(),
            span(now.duration_since(a.since).unwrap_or_default())
        );
    }
}

fn windows_table(out: &mut String, p: &ProbeView) {
    out.push_str("<table><thead><tr><th scope=col>window</th>");
    for (_, label) in WINDOWS {
        let _ = write!(out, "<th>{label}</th>");
    }
    out.push_str("</tr></thead><tbody>");
    type Cell = fn(&Summary) -> Option<String>;
    let rows: [(&str, Cell); 3] = [
        ("availability", |s| s.availability.map(percent)),
        ("P95 total", |s| s.total.p95.map(seconds)),
        ("P95 TTFT", |s| s.ttft.p95.map(seconds)),
    ];
    for (label, cell) in rows {
        let _ = write!(out, "<tr><th scope=row>{label}</th>");
        for (i, (summary, covered)) in p.windows.iter().enumerate() {
            let len = WINDOWS[i].0;
            let value = cell(summary).unwrap_or_else(|| "–".into());
            if summary.runs > 0 && partial(*covered, len) {
                let _ = write!(
                    out,
                    "<td class=partial title=\"only {} of data, {} runs\">{value}</td>",
                    span(*covered),
                    summary.runs,
                );
            } else {
                let _ = write!(out, "<td title=\"{} runs\">{value}</td>", summary.runs);
            }
        }
        out.push_str("</tr>");
    }
    conditions::cold_row(out, p);
    out.push_str("</tbody></table>");
    if let Some((summary, covered)) = p.windows.last()
        && summary.runs > 0
        && partial(*covered, WINDOWS[WINDOWS.len() - 1].0)
    {
        let _ = write!(
            out,
            "<div class=\"mute partial\">Italic: partial windows, {} of data ({} runs).</div>",
            span(*covered),
            summary.runs
        );
    }
}

/// Whether `covered` of data falls short of a window of `len`.
fn partial(covered: Duration, len: Duration) -> bool {
    covered.as_secs_f64() < len.as_secs_f64() * (1.0 - PARTIAL_SLACK)
}

fn last_lines(out: &mut String, p: &ProbeView, agent: &AgentView) {
    let now = agent.now;
    match &p.last {
        Some(r) => {
            let _ = write!(
                out,
                "<div>Last run {} ago: {}{}</div>",
                span(now.duration_since(r.at).unwrap_or_default()),
                run_result(r),
                conditions::run_tags(r)
            );
        }
        None => out.push_str("<div class=mute>No runs yet.</div>"),
    }
    conditions::burst_line(out, p, now);
    match &p.last_failure {
        Some(f) => {
            let _ = write!(
                out,
                "<div>Last failure <span title=\"{}\">{} ago</span>: <span class=fail>{}</span>{}</div>",
                esc(&agent.time_zone.clock_with_offset(f.at)),
                span(now.duration_since(f.at).unwrap_or_default()),
                esc(f.reason.as_deref().unwrap_or("")),
                f.message
                    .as_deref()
                    .map(|m| format!(" <span class=mute>{}</span>", esc(&shorten(m, 120))))
                    .unwrap_or_default()
            );
        }
        // Only as long as the history: "in 7 days" with minutes of data would claim a week.
        None if p.last.is_some() => match p.windows.last() {
            Some((_, covered)) if partial(*covered, WINDOWS[WINDOWS.len() - 1].0) => {
                let _ = write!(
                    out,
                    "<div class=mute>No failure in the {} covered.</div>",
                    span(*covered)
                );
            }
            _ => out.push_str("<div class=mute>No failure in 7 days.</div>"),
        },
        None => {}
    }
}

fn run_result(r: &RunRecord) -> String {
    match &r.reason {
        None => format!(
            "<span style=\"color:var(--ok)\">ok</span>{}{}",
            r.ttft
                .map(|d| format!(", TTFT {}", seconds(d.as_secs_f64())))
                .unwrap_or_default(),
            r.total
                .map(|d| format!(", total {}", seconds(d.as_secs_f64())))
                .unwrap_or_default(),
        ),
        Some(reason) => format!(
            "<span class=fail>{}</span>{}",
            esc(reason),
            r.status.map(|s| format!(" (HTTP {s})")).unwrap_or_default()
        ),
    }
}

fn chart_block(out: &mut String, p: &ProbeView, agent: &AgentView, width: u32, height: u32) {
    let marks = change_marks(p, agent);
    // The lines' scale; a chart of cold starts only is scaled to them.
    let warm_max = p
        .chart
        .iter()
        .flat_map(|b| [b.total_p95, b.ttft_p95])
        .flatten()
        .fold(0.0_f64, f64::max);
    let frame = Frame {
        start: agent
            .now
            .checked_sub(p.chart_span)
            .unwrap_or(SystemTime::UNIX_EPOCH),
        span: p.chart_span,
        width: f64::from(width),
        plot: f64::from(height) - 12.0,
        max: if warm_max > 0.0 {
            warm_max
        } else {
            p.conditions.cold_max()
        },
    };
    let under = conditions::svg_warmups(&p.conditions, &frame, agent);
    let mut over = conditions::svg_cold(&p.conditions, &frame, agent);
    over += &svg_marks(&marks, width, height);
    out.push_str(&svg_chart(&p.chart, width, height, frame.max, [&under, &over]));
    let mut legend = conditions::legend(&p.conditions, &frame);
    if !marks.is_empty() {
        legend.push_str(" · <span style=\"color:var(--warn)\">┆ model changed</span>");
    }
    let _ = write!(
        out,
        "<div class=mute style=\"display:flex;justify-content:space-between;font-size:11px\"><span>{} ago</span>\
         <span>P95 total per {} · <span style=\"color:var(--ttft)\">TTFT</span> · <span class=fail>failures</span>{legend}</span><span>now</span></div>",
        span(p.chart_span),
        span(p.chart_span / CHART_BUCKETS as u32)
    );
}

/// The probe's model changes within the chart's span: where each falls (0 the chart's
/// start, 1 now) and its words, "model changed: before → after" and when.
fn change_marks(p: &ProbeView, agent: &AgentView) -> Vec<(f64, String)> {
    let start = agent
        .now
        .checked_sub(p.chart_span)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    p.model_changes
        .iter()
        .filter(|c| c.at >= start && c.at <= agent.now)
        .map(|c| {
            let x = c.at.duration_since(start).unwrap_or_default().as_secs_f64()
                / p.chart_span.as_secs_f64().max(1.0);
            let before = c.before.as_ref().map_or("?", |b| b.summary.as_str());
            let words = format!(
                "model changed: {before} → {} ({})",
                c.after.summary,
                agent.time_zone.clock_with_offset(c.at)
            );
            (x.clamp(0.0, 1.0), words)
        })
        .collect()
}

/// A dashed vertical line per model change with a small label, its words (escaped:
/// the summaries are the server's) as the tooltip; a wide transparent line under it
/// makes the tooltip easy to hover.
fn svg_marks(marks: &[(f64, String)], width: u32, height: u32) -> String {
    let (w, plot) = (f64::from(width), f64::from(height) - 12.0);
    let mut svg = String::new();
    for (x, words) in marks {
        let x = (x * w).clamp(1.0, w - 1.0);
        // The label reads away from the nearer edge, so it stays inside the chart.
        let (tx, anchor) = if x > w * 0.75 {
            (x - 3.0, "end")
        } else {
            (x + 3.0, "start")
        };
        let _ = write!(
            svg,
            "<g class=model-change><title>{words}</title>\
             <line x1=\"{x:.1}\" y1=0 x2=\"{x:.1}\" y2=\"{plot:.1}\" stroke=transparent stroke-width=8 />\
             <line x1=\"{x:.1}\" y1=0 x2=\"{x:.1}\" y2=\"{plot:.1}\" stroke=\"var(--warn)\" stroke-width=1.5 stroke-dasharray=\"3 2\" />\
             <text x=\"{tx:.1}\" y=\"{:.1}\" font-size=9 text-anchor={anchor} fill=\"var(--warn)\">model</text></g>",
            plot - 3.0,
            words = esc(words),
        );
    }
    svg
}

/// A latency chart: P95 of total (and TTFT) per bucket scaled to `max`, failures as red
/// bars; `under` drawn before the lines, `over` after them.
fn svg_chart(buckets: &[ChartBucket], width: u32, height: u32, max: f64, [under, over]: [&str; 2]) -> String {
    let (w, h) = (f64::from(width), f64::from(height));
    let plot = h - 12.0; // room for the failure strip
    let step = w / buckets.len().max(1) as f64;
    let mut svg = format!(
        "<svg viewBox=\"0 0 {width} {height}\" role=img aria-label=\"latency chart\"><rect width=\"{width}\" height=\"{plot}\" fill=none stroke=\"var(--line)\"/>{under}"
    );
    let line = |pick: fn(&ChartBucket) -> Option<f64>, color: &str| {
        let mut paths = String::new();
        let mut last: Option<usize> = None;
        for (i, b) in buckets.iter().enumerate() {
            let Some(v) = pick(b).filter(|_| max > 0.0) else {
                continue;
            };
            let x = (i as f64 + 0.5) * step;
            let y = plot - (v / max) * (plot - 4.0);
            let joined = last.is_some_and(|l| i - l <= CHART_BRIDGE + 1);
            // `l0,0` after a move: a lone point still shows as a dot (round caps).
            let _ = write!(paths, "{}{x:.1},{y:.1}", if joined { " L" } else { " M" });
            if !joined {
                paths.push_str(" l0,0");
            }
            last = Some(i);
        }
        if paths.trim().is_empty() {
            String::new()
        } else {
            // A lone point would not show as a path: round caps draw it as a dot.
            format!(
                "<path d=\"{}\" fill=none stroke=\"{color}\" stroke-width=2 stroke-linecap=round stroke-linejoin=\"round\"/>",
                paths.trim()
            )
        }
    };
    svg.push_str(&line(|b| b.total_p95, "var(--chart)"));
    svg.push_str(&line(|b| b.ttft_p95, "var(--ttft)"));
    for (i, b) in buckets.iter().enumerate() {
        if b.failures > 0 {
            let share = f64::from(b.failures) / f64::from(b.runs.max(1));
            let bar = 3.0 + 7.0 * share;
            let _ = write!(
                svg,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bar:.1}\" fill=\"var(--bad)\"><title>{} of {} runs failed</title></rect>",
                i as f64 * step,
                h - bar,
                step.max(1.0),
                b.failures,
                b.runs
            );
        }
    }
    svg.push_str(over);
    if max > 0.0 {
        let _ = write!(
            svg,
            "<text x=3 y=11 font-size=10 fill=\"var(--mute)\">{}</text>",
            seconds(max)
        );
    } else {
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" font-size=11 text-anchor=middle fill=\"var(--mute)\">no successful runs</text>",
            w / 2.0,
            plot / 2.0 + 4.0
        );
    }
    svg.push_str("</svg>");
    svg
}

/// `/probes/{name}`: the card's figures, a larger chart and the recent runs.
pub fn probe_page(agent: &AgentView, p: &ProbeView, recent: &[RunRecord]) -> String {
    let mut out = String::with_capacity(32 * 1024);
    head(&mut out, &format!("{} · inferprobe · {}", p.name, agent.location));
    let state = p.state();
    let _ = write!(
        out,
        "<header><h1><a href=\"/\">inferprobe</a> / {}</h1><span class=\"badge {}\">{}</span>\
         <span>location <b>{}</b></span><span class=mute>as of {}</span></header>",
        esc(&p.name),
        state.class(),
        state.label(),
        esc(&agent.location),
        esc(&agent.time_zone.clock_with_offset(agent.now))
    );
    notice(&mut out, agent);
    out.push_str("<section class=card>");
    identity(&mut out, p);
    alerts(&mut out, p, agent.now);
    windows_table(&mut out, p);
    last_lines(&mut out, p, agent);
    chart_block(&mut out, p, agent, 800, 160);
    for f in &p.alerts {
        let _ = write!(
            out,
            "<pre style=\"white-space:pre-wrap;overflow-wrap:anywhere\">{}</pre>",
            esc(&f.alert.description)
        );
    }
    out.push_str("</section>");
    let _ = write!(
        out,
        "<h2 style=\"margin-top:16px\">Recent runs</h2><p class=mute>The last {} runs, newest first. \
         As JSON: <a href=\"/api/v1/results?probe={}\">/api/v1/results?probe={}</a></p>",
        recent.len(),
        esc(&url_encode(&p.name)),
        esc(&p.name)
    );
    let _ = write!(
        out,
        "<div class=scroll><table><thead><tr><th>started ({})</th><th>result</th><th>idle before</th><th>HTTP</th><th>TTFB</th>\
         <th>TTFT</th><th>TPOT</th><th>total</th><th>tokens</th><th>prompt</th><th>trace id</th><th>message</th></tr></thead><tbody>",
        agent.time_zone.name()
    );
    let cell = |d: Option<Duration>| d.map(|d| seconds(d.as_secs_f64())).unwrap_or_else(|| "–".into());
    for r in recent {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td style=\"text-align:left;white-space:normal;min-width:20em\">{}</td></tr>",
            esc(&agent.time_zone.clock(r.at)),
            match &r.reason {
                None => "<span style=\"color:var(--ok)\">ok</span>".to_owned(),
                Some(reason) => format!("<span class=fail>{}</span>", esc(reason)),
            },
            conditions::idle_cell(r, agent),
            r.status.map(|s| s.to_string()).unwrap_or_else(|| "–".into()),
            cell(r.ttfb),
            cell(r.ttft),
            cell(r.tpot),
            cell(r.total),
            r.output_tokens
                .map(|t| t.to_string())
                .unwrap_or_else(|| "–".into()),
            esc(&r.prompt_bucket),
            // The whole id, to paste into the trace back end's search.
            esc(r.trace_id.as_deref().unwrap_or("–")),
            esc(&shorten(r.message.as_deref().unwrap_or(""), 160)),
        );
    }
    out.push_str("</tbody></table></div>");
    footer(&mut out);
    out
}

fn footer(out: &mut String) {
    let _ = write!(
        out,
        "<footer class=mute>inferprobe {} · <a href=\"/api/v1/probes\">/api/v1/probes</a> · \
         <a href=\"/api/v1/alerts\">/api/v1/alerts</a> · <a href=\"/api/v1/results\">/api/v1/results</a> · \
         <a href=\"/metrics\">/metrics</a> · refreshes every 30 s</footer></body></html>",
        env!("CARGO_PKG_VERSION")
    );
}

/// What `url_encode` encodes: every byte but RFC 3986's unreserved ones (letters,
/// digits, `-`, `_`, `.`, `~`).
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes what a path segment or query value cannot hold.
pub fn url_encode(s: &str) -> String {
    utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

mod conditions;
#[cfg(test)]
mod tests;
