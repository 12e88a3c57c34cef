//! The report as one self-contained HTML file, to publish or e-mail: inline CSS and SVG,
//! no script, no external asset. On top the verdict per probe, coloured and worded (the
//! words carry it where colour does not show: a mail client that strips styles, a
//! printout, colour blindness), then the charts of each probe's days against the previous
//! period's, then the tables. Every text from a label value or the store is escaped.

use std::fmt::Write as _;
use std::time::Duration;

use super::chart::{Chart, svg};
use super::verdict::Outcome;
use super::{Point, Report};
use crate::human::{html_escape as esc, percent, seconds, span};
use crate::stats::Targets;

/// Met and not met: green and red with text dark enough on their tints for WCAG AA.
const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;color:#1b1f24;max-width:1100px}\
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:22px 0 6px}h3{font-size:15px;margin:14px 0 4px}\
table{border-collapse:collapse;margin:8px 0 20px;font-variant-numeric:tabular-nums}\
th,td{border:1px solid #d8dde3;padding:4px 8px;text-align:right}\
th{background:#f6f8fa} td.t,th.t{text-align:left} .note{color:#5b6470}\
.coverage{border:1px solid #9a6700;background:#fff8c5;border-radius:6px;padding:8px 12px;margin:8px 0}\
.verdict{border-radius:6px;padding:8px 12px;margin:6px 0;border:1px solid #d8dde3;background:#f6f8fa}\
.verdict .mark{font-weight:700;margin-right:6px;white-space:nowrap}\
.verdict.met{border-color:#1a7f37;background:#dafbe1}.verdict.met .mark{color:#116329}\
.verdict.not_met{border-color:#cf222e;background:#ffebe9}.verdict.not_met .mark{color:#a40e26}\
ul.moved{margin:0 0 8px;padding-left:30px}.moved .up{color:#a40e26}.moved .down{color:#116329}\
td.met{color:#116329;background:#dafbe1;font-weight:600}td.not_met{color:#a40e26;background:#ffebe9;font-weight:700}\
.charts{display:flex;flex-wrap:wrap;gap:12px}\
figure{margin:0;flex:1 1 300px;max-width:360px}figcaption{font-size:12px;color:#5b6470}\
svg.chart{width:100%;height:auto;display:block}\
.legend{font-size:12px;color:#5b6470;margin:4px 0 0}\
.legend .now{color:#0969da;font-weight:700}.legend .before{color:#6e7781;font-weight:700}\
";

impl Report {
    pub fn to_html(&self) -> String {
        let title = self.title();
        let mut out = String::with_capacity(32 * 1024);
        let _ = write!(
            out,
            "<!doctype html><html lang=en><head><meta charset=utf-8>\
             <meta name=viewport content=\"width=device-width,initial-scale=1\">\
             <title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1>",
            esc(&title),
            esc(&title),
        );
        if let Some(note) = self.coverage_note() {
            let _ = write!(
                out,
                "<p class=coverage role=note><b>Coverage:</b> {}</p>",
                esc(&note)
            );
        }
        self.verdict_html(&mut out);
        let _ = write!(out, "<p class=note>{}</p>", esc(&self.subtitle()));
        self.charts_html(&mut out);
        for t in self.tables() {
            let _ = write!(out, "<h2>{}</h2>", esc(&t.title));
            if !t.note.is_empty() {
                let _ = write!(out, "<p class=note>{}</p>", esc(&t.note));
            }
            if t.rows.is_empty() {
                let _ = write!(out, "<p>{}</p>", esc(&t.empty));
                continue;
            }
            out.push_str("<table><thead><tr>");
            for (h, numeric) in t.headers.iter().zip(&t.numeric) {
                let class = if *numeric { "" } else { " class=t" };
                let _ = write!(out, "<th{class}>{}</th>", esc(h));
            }
            out.push_str("</tr></thead><tbody>");
            let met_column = t.headers.iter().position(|h| h == "met");
            for row in &t.rows {
                out.push_str("<tr>");
                for (i, (c, numeric)) in row.iter().zip(&t.numeric).enumerate() {
                    let class = match c.as_str() {
                        "yes" if Some(i) == met_column => " class=met",
                        "NO" if Some(i) == met_column => " class=not_met",
                        _ if *numeric => "",
                        _ => " class=t",
                    };
                    let _ = write!(out, "<td{class}>{}</td>", esc(c));
                }
                out.push_str("</tr>");
            }
            out.push_str("</tbody></table>");
        }
        out.push_str("</body></html>\n");
        out
    }

    fn verdict_html(&self, out: &mut String) {
        let verdicts = self.verdicts();
        if verdicts.is_empty() {
            return;
        }
        out.push_str("<section aria-label=Verdict><h2>Verdict</h2>");
        let moved = self.p95_changes();
        for v in &verdicts {
            let mark = match v.outcome {
                Outcome::Met => "✓",
                Outcome::NotMet => "✗",
                Outcome::NoObjective | Outcome::NoData => "–",
            };
            let _ = write!(
                out,
                "<p class=\"verdict {}\" data-probe=\"{}\"><span class=mark>{mark} {}</span> <b>{}</b>{}</p>",
                v.outcome.as_str(),
                esc(&v.probe),
                v.outcome.words(),
                esc(&v.probe),
                esc(&v.details())
            );
            // Up is slower: red, as a miss is; the words say it without the colour.
            let lines: Vec<String> = moved
                .iter()
                .filter(|c| c.probe == v.probe)
                .map(|c| {
                    format!(
                        "<li class={} data-figure={}>{}</li>",
                        c.direction().as_str(),
                        c.figure.as_str(),
                        esc(&c.line())
                    )
                })
                .collect();
            if !lines.is_empty() {
                let _ = write!(
                    out,
                    "<ul class=moved data-probe=\"{}\">{}</ul>",
                    esc(&v.probe),
                    lines.concat()
                );
            }
        }
        out.push_str("</section>");
    }

    /// Per probe: availability, P95 TTFT and P95 total per bucket, against the previous
    /// period's.
    fn charts_html(&self, out: &mut String) {
        if self.trends.is_empty() {
            return;
        }
        let tz = &self.time_zone;
        let unit = bucket_words(self.bucket);
        let with_time = self.bucket < Duration::from_secs(86_400);
        let n = self.buckets();
        let start = |base, i: usize| base + self.bucket * i as u32;
        let _ = write!(
            out,
            "<h2>Trends</h2><p class=note>Per {unit} across every location, this period (solid blue) against the \
             previous one (dashed grey), bucket by bucket; times in {}. A hollow red point misses the objective.</p>",
            esc(&tz.label(self.until)),
        );
        let verdicts = self.verdicts();
        for t in &self.trends {
            let targets = self
                .rows
                .iter()
                .filter(|r| r.probe == t.probe)
                .map(|r| r.targets)
                .fold(Targets::default(), |a, b| Targets {
                    availability: match (a.availability, b.availability) {
                        (Some(x), Some(y)) => Some(x.max(y)),
                        (x, y) => x.or(y),
                    },
                    ttft: a.ttft.or(b.ttft),
                    total: a.total.or(b.total),
                });
            let outcome = verdicts
                .iter()
                .find(|v| v.probe == t.probe)
                .map_or(Outcome::NoData, |v| v.outcome);
            let _ = write!(
                out,
                "<section class=trend data-probe=\"{}\"><h3>{} <span class=note>· {}</span></h3><div class=charts>",
                esc(&t.probe),
                esc(&t.probe),
                outcome.words()
            );
            let notes = |period: usize| -> Vec<String> {
                let base = if period == 0 {
                    self.since
                } else {
                    self.previous_since()
                };
                t.periods[period]
                    .iter()
                    .enumerate()
                    .map(|(i, p)| format!("{} ({} runs)", tz.short(start(base, i), with_time), p.runs))
                    .collect()
            };
            for f in &FIGURES {
                let values = |period: usize| t.periods[period].iter().map(f.pick).collect::<Vec<_>>();
                // A kind that measures no first token has no TTFT chart to show.
                if f.name == "ttft_p95" && values(0).iter().chain(&values(1)).all(Option::is_none) {
                    continue;
                }
                let title = format!("{} per {unit}", f.title);
                let chart = Chart {
                    name: f.name,
                    title: &title,
                    current: values(0),
                    previous: values(1),
                    current_notes: notes(0),
                    previous_notes: notes(1),
                    labels: (0..n)
                        .map(|i| tz.short(start(self.since, i), with_time))
                        .collect(),
                    format: f.format,
                    objective: (f.objective)(&targets),
                    higher_is_better: f.higher_is_better,
                };
                let _ = write!(
                    out,
                    "<figure>{}<figcaption>{}</figcaption></figure>",
                    svg(&chart),
                    esc(&title)
                );
            }
            let _ = write!(
                out,
                "</div><p class=legend><span class=now>━ this period</span> from {} · \
                 <span class=before>╌ previous period</span> from {}</p></section>",
                esc(&tz.minutes(self.since)),
                esc(&tz.minutes(self.previous_since())),
            );
        }
    }
}

/// One of a probe's three charts.
struct Figure {
    /// `data-chart`: what is drawn.
    name: &'static str,
    title: &'static str,
    pick: fn(&Point) -> Option<f64>,
    objective: fn(&Targets) -> Option<f64>,
    /// Availability (higher is better) or latency.
    higher_is_better: bool,
    format: fn(f64) -> String,
}

const FIGURES: [Figure; 3] = [
    Figure {
        name: "availability",
        title: "Availability",
        pick: Point::availability,
        objective: |t| t.availability,
        higher_is_better: true,
        format: percent,
    },
    Figure {
        name: "ttft_p95",
        title: "P95 time to first token",
        pick: |p| p.ttft_p95,
        objective: |t| t.ttft.map(|d| d.as_secs_f64()),
        higher_is_better: false,
        format: seconds,
    },
    Figure {
        name: "total_p95",
        title: "P95 total latency",
        pick: |p| p.total_p95,
        objective: |t| t.total.map(|d| d.as_secs_f64()),
        higher_is_better: false,
        format: seconds,
    },
];

/// `day`, `hour`, `5 min`: what one bucket is, in words.
fn bucket_words(bucket: Duration) -> String {
    match bucket.as_secs() {
        86_400 => "day".into(),
        3600 => "hour".into(),
        _ => span(bucket),
    }
}
