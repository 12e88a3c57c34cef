//! The report's charts: inline SVG written here, no script and no external asset, so the
//! HTML report stays one self-contained file that survives being e-mailed. One chart is
//! one figure per bucket of this period (a solid line) over the same bucket of the
//! previous period (a dashed grey line), with the objective drawn across when there is
//! one. A bucket without data leaves a gap rather than a line drawn through it.
//!
//! Colour is never the only sign: the objective line is labelled, each point has a
//! tooltip with its value, and a point that misses the objective is drawn larger and
//! hollow as well as red.

use std::fmt::Write as _;

use crate::human::html_escape as esc;

const WIDTH: f64 = 320.0;
const HEIGHT: f64 = 150.0;
/// Room for the value labels on the left and the bucket labels below.
const LEFT: f64 = 52.0;
/// Half a day's label: the last one is centred on its point too.
const RIGHT: f64 = 16.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 22.0;
/// Bucket labels under the axis at most: a week's days.
const MAX_LABELS: usize = 7;

/// One chart's data and how to show it.
pub(super) struct Chart<'a> {
    /// What is drawn, for `data-chart` and the accessible name: `availability`.
    pub name: &'a str,
    pub title: &'a str,
    /// Per bucket, this period's value and the previous period's.
    pub current: Vec<Option<f64>>,
    pub previous: Vec<Option<f64>>,
    /// Per bucket, what a point's tooltip says besides its value (`12-02, 1440 runs`).
    pub current_notes: Vec<String>,
    pub previous_notes: Vec<String>,
    /// Per bucket, its label under the axis (this period's start of the bucket); every
    /// one is shown for a week of days, a few evenly spaced for more buckets.
    pub labels: Vec<String>,
    pub format: fn(f64) -> String,
    /// The SLO's target, if any: a point on the wrong side of it misses.
    pub objective: Option<f64>,
    /// Availability (higher is better) or latency (lower is).
    pub higher_is_better: bool,
}

impl Chart<'_> {
    fn misses(&self, v: f64) -> bool {
        match self.objective {
            Some(o) if self.higher_is_better => v < o,
            Some(o) => v > o,
            None => false,
        }
    }

    /// The value range drawn: latency from zero, availability from a little under its
    /// lowest value (or the objective) up to 100 %; the open end on a round number
    /// (99 %, 90 %, 2.5 s), so the axis reads at a glance.
    fn range(&self) -> (f64, f64) {
        let values = self
            .current
            .iter()
            .chain(&self.previous)
            .flatten()
            .copied()
            .chain(self.objective)
            .filter(|v| v.is_finite());
        if self.higher_is_better {
            let lo = values.fold(1.0_f64, f64::min);
            let lo = 1.0 - round_up((1.0 - lo) * 1.1).max(1e-3);
            (lo.clamp(0.0, 1.0 - 1e-3), 1.0)
        } else {
            let hi = values.fold(0.0_f64, f64::max);
            (0.0, if hi > 0.0 { round_up(hi * 1.1) } else { 1.0 })
        }
    }
}

/// The smallest of 1, 2, 2.5 and 5 times a power of ten at or over `x` (> 0).
fn round_up(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|v| *v >= x * (1.0 - 1e-9))
        .unwrap_or(10.0 * power)
}

/// The chart as an `<svg>` element.
pub(super) fn svg(chart: &Chart) -> String {
    let (lo, hi) = chart.range();
    let n = chart.current.len().max(chart.previous.len()).max(1);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |i: usize| {
        if n == 1 {
            LEFT + plot_w / 2.0
        } else {
            LEFT + plot_w * i as f64 / (n - 1) as f64
        }
    };
    let y = |v: f64| TOP + plot_h * (1.0 - ((v - lo) / (hi - lo)).clamp(0.0, 1.0));
    let mut out = String::with_capacity(4096);
    let _ = write!(
        out,
        "<svg class=chart data-chart=\"{name}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=img aria-label=\"{title}\" \
         xmlns=\"http://www.w3.org/2000/svg\"><title>{title}</title>\
         <rect class=frame x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#d8dde3\"/>",
        name = esc(chart.name),
        title = esc(chart.title),
    );
    // The range's ends, labelled on the left; latency starts at a plain 0.
    for v in [hi, lo] {
        let label = if v == 0.0 {
            "0".to_owned()
        } else {
            (chart.format)(v)
        };
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\" fill=\"#5b6470\">{}</text>",
            LEFT - 4.0,
            y(v) + 3.5,
            esc(&label)
        );
    }
    if let Some(o) = chart.objective.filter(|o| (lo..=hi).contains(o)) {
        let yo = y(o);
        // Its label above the line, or below it where the line runs along the top.
        let label_y = if yo - TOP < 14.0 { yo + 11.0 } else { yo - 3.0 };
        let _ = write!(
            out,
            "<line class=objective x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{yo:.1}\" y2=\"{yo:.1}\" stroke=\"#cf222e\" \
             stroke-width=\"1\" stroke-dasharray=\"2 3\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" \
             text-anchor=\"end\" fill=\"#cf222e\">objective {}</text>",
            LEFT + plot_w,
            LEFT + plot_w - 2.0,
            label_y,
            esc(&(chart.format)(o)),
        );
    }
    let series = [
        (
            "previous",
            &chart.previous,
            &chart.previous_notes,
            "#8c959f",
            " stroke-dasharray=\"5 4\"",
        ),
        ("current", &chart.current, &chart.current_notes, "#0969da", ""),
    ];
    for (class, values, notes, colour, dash) in series {
        let mut d = String::new();
        let mut joined = false;
        for (i, v) in values.iter().enumerate() {
            match v {
                Some(v) => {
                    let _ = write!(d, "{}{:.1},{:.1}", if joined { " L" } else { " M" }, x(i), y(*v));
                    joined = true;
                }
                None => joined = false,
            }
        }
        if !d.is_empty() {
            let _ = write!(
                out,
                "<path class=\"{class}\" d=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" \
                 stroke-linejoin=\"round\" stroke-linecap=\"round\"{dash}/>",
                d.trim()
            );
        }
        for (i, v) in values.iter().enumerate() {
            let Some(v) = *v else { continue };
            let note = notes.get(i).map(String::as_str).unwrap_or_default();
            let period = if class == "current" {
                "this period"
            } else {
                "previous period"
            };
            let tip = format!("{period}, {note}: {}", (chart.format)(v));
            if class == "current" && chart.misses(v) {
                let _ = write!(
                    out,
                    "<circle class=\"current miss\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"#fff\" stroke=\"#cf222e\" \
                     stroke-width=\"2\"><title>{} (misses the objective)</title></circle>",
                    x(i),
                    y(v),
                    esc(&tip)
                );
            } else {
                let _ = write!(
                    out,
                    "<circle class=\"{class}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"{}\" fill=\"{colour}\"><title>{}</title></circle>",
                    x(i),
                    y(v),
                    if class == "current" { 3 } else { 2 },
                    esc(&tip)
                );
            }
        }
    }
    if chart.current.iter().chain(&chart.previous).all(Option::is_none) {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#5b6470\">no data</text>",
            LEFT + plot_w / 2.0,
            TOP + plot_h / 2.0
        );
    }
    let label_y = HEIGHT - 6.0;
    // As many as fit side by side at about 5.6 px a character, 8 px apart.
    let widest = chart.labels.iter().map(|l| l.chars().count()).max().unwrap_or(1) as f64;
    let fit = ((plot_w / (widest * 5.6 + 8.0)) as usize).clamp(2, MAX_LABELS);
    let every = chart.labels.len().div_ceil(fit).max(1);
    let last = chart.labels.len().saturating_sub(1);
    for (i, label) in chart.labels.iter().enumerate() {
        // The last bucket's label always; the others evenly spaced, none crowding it.
        if i != last && (i % every != 0 || last - i < every) {
            continue;
        }
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{label_y}\" font-size=\"10\" text-anchor=\"middle\" fill=\"#5b6470\">{}</text>",
            x(i),
            esc(label)
        );
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(current: Vec<Option<f64>>, previous: Vec<Option<f64>>) -> Chart<'static> {
        let notes = |n: usize| (0..n).map(|i| format!("day {i} <b>")).collect();
        Chart {
            name: "availability",
            title: "Availability per day",
            current_notes: notes(current.len()),
            previous_notes: notes(previous.len()),
            current,
            previous,
            labels: (0..4).map(|i| format!("12-0{i}")).collect(),
            format: crate::human::percent,
            objective: Some(0.995),
            higher_is_better: true,
        }
    }

    #[test]
    fn both_periods_are_drawn_with_gaps_and_misses_marked() {
        let svg = svg(&chart(
            vec![Some(1.0), Some(0.99), None, Some(0.999)],
            vec![Some(0.998), Some(0.997), Some(0.996), Some(0.999)],
        ));
        assert_eq!(svg.matches("<circle class=\"current").count(), 3);
        assert_eq!(svg.matches("<circle class=\"previous\"").count(), 4);
        // The missing bucket breaks the line in two.
        let current = svg.split("<path class=\"current\" d=\"").nth(1).unwrap();
        let d = &current[..current.find('"').unwrap()];
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert_eq!(svg.matches("class=\"current miss\"").count(), 1, "{svg}");
        assert!(svg.contains("objective 99.50%"), "{svg}");
        assert!(svg.contains("day 1 &lt;b&gt;"), "{svg}");
        assert!(!svg.contains("<b>"), "{svg}");
        // Quoted before `/>`: an unquoted value would swallow the slash.
        for (i, _) in svg.match_indices("/>") {
            assert_eq!(&svg[i - 1..i], "\"", "{}", &svg[i.saturating_sub(30)..i + 2]);
        }
    }

    #[test]
    fn axes_end_on_round_numbers() {
        assert_eq!(round_up(0.0059), 0.01);
        assert_eq!(round_up(0.0759), 0.1);
        assert_eq!(round_up(0.896), 1.0);
        assert_eq!(round_up(3.36), 5.0);
        assert_eq!(round_up(1.8), 2.0);
        assert_eq!(round_up(2.2), 2.5);
        assert_eq!(round_up(0.002), 0.002);
        let c = chart(vec![Some(0.9941)], vec![Some(1.0)]);
        let (lo, hi) = c.range();
        assert!((lo - 0.99).abs() < 1e-12 && hi == 1.0, "{lo}");
    }

    #[test]
    fn one_bucket_and_no_data_still_draw() {
        let one = svg(&chart(vec![Some(0.5)], vec![None]));
        assert_eq!(one.matches("<circle").count(), 1);
        let none = svg(&chart(vec![None, None], vec![None, None]));
        assert!(none.contains(">no data<"), "{none}");
        assert!(!none.contains("<path"), "{none}");
    }
}
