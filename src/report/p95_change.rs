//! The line per probe that says how its latency moved, under its verdict: P95 TTFT and
//! P95 total over this whole period against the previous one, across every location as
//! the verdict is, `TTFT P95 up 18% on last week (412 ms → 486 ms)`. The per-location
//! tables hold the same comparison split by location; this is the sentence a reader
//! takes away. Where either period has no P95 (no successful run, or a probe new this
//! period) nothing is said: a change from nothing is no change.

use std::time::Duration;

use crate::human::seconds;

/// Changes smaller than this share read `unchanged`: a percent or so is the difference
/// between two weeks of the same server, and "up 1%" would read as news.
pub const UNCHANGED_WITHIN: f64 = 0.02;

/// A period of this length is compared with "last week"; any other with "the previous
/// period".
const WEEK: Duration = Duration::from_secs(7 * 86_400);

/// One probe's P95s in seconds across its locations: this period's (`[0]`) and the
/// previous one's (`[1]`), `None` without a successful run there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeP95 {
    pub probe: String,
    pub ttft: [Option<f64>; 2],
    pub total: [Option<f64>; 2],
}

/// Which P95 a line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    Ttft,
    Total,
}

impl Figure {
    /// The JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            Figure::Ttft => "ttft",
            Figure::Total => "total",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Figure::Ttft => "TTFT P95",
            Figure::Total => "total P95",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
    Unchanged,
}

impl Direction {
    /// The JSON value, and the word of the line.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
            Direction::Unchanged => "unchanged",
        }
    }
}

/// One probe's P95 of one figure, this period against the previous one; both measured.
#[derive(Debug, Clone, PartialEq)]
pub struct P95Change {
    pub probe: String,
    pub figure: Figure,
    /// Seconds.
    pub previous: f64,
    pub current: f64,
    /// What the previous period is called in the line.
    pub against: &'static str,
}

impl P95Change {
    /// The change as a fraction of the previous P95: 0.18 for 18 % up.
    pub fn change(&self) -> f64 {
        self.current / self.previous - 1.0
    }

    pub fn direction(&self) -> Direction {
        let change = self.change();
        if change.abs() < UNCHANGED_WITHIN {
            Direction::Unchanged
        } else if change > 0.0 {
            Direction::Up
        } else {
            Direction::Down
        }
    }

    /// `TTFT P95 up 18% on last week (412 ms → 486 ms)`, `total P95 unchanged from the
    /// previous period (1.20 s → 1.21 s)`.
    pub fn line(&self) -> String {
        let (what, against) = (self.figure.words(), self.against);
        let (before, now) = (seconds(self.previous), seconds(self.current));
        match self.direction() {
            Direction::Unchanged => format!("{what} unchanged from {against} ({before} → {now})"),
            d => format!(
                "{what} {} {:.0}% on {against} ({before} → {now})",
                d.as_str(),
                self.change().abs() * 100.0
            ),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "probe": self.probe,
            "figure": self.figure.as_str(),
            "previous_seconds": self.previous,
            "current_seconds": self.current,
            "change": self.change(),
            "direction": self.direction().as_str(),
            "line": self.line(),
        })
    }
}

/// Per probe, in the order given, its TTFT line then its total line, each only where both
/// periods have a P95; `period` is the report's length.
pub fn changes(p95s: &[ProbeP95], period: Duration) -> Vec<P95Change> {
    let against = if period == WEEK {
        "last week"
    } else {
        "the previous period"
    };
    let mut out = Vec::new();
    for p in p95s {
        for (figure, [current, previous]) in [(Figure::Ttft, p.ttft), (Figure::Total, p.total)] {
            let (Some(current), Some(previous)) = (current, previous) else {
                continue;
            };
            if !(current.is_finite() && previous.is_finite() && previous > 0.0) {
                continue;
            }
            out.push(P95Change {
                probe: p.probe.clone(),
                figure,
                previous,
                current,
                against,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn chat(ttft: [Option<f64>; 2], total: [Option<f64>; 2]) -> Vec<ProbeP95> {
        vec![ProbeP95 {
            probe: "chat".into(),
            ttft,
            total,
        }]
    }

    #[test]
    fn a_week_is_last_week_and_each_direction_is_worded() {
        let lines: Vec<String> = changes(
            &chat([Some(0.48616), Some(0.412)], [Some(1.14), Some(1.2)]),
            7 * DAY,
        )
        .iter()
        .map(P95Change::line)
        .collect();
        assert_eq!(
            lines,
            [
                "TTFT P95 up 18% on last week (412 ms → 486 ms)",
                "total P95 down 5% on last week (1.20 s → 1.14 s)",
            ]
        );
        let other = changes(&chat([Some(0.4), Some(0.4)], [None, None]), DAY);
        assert_eq!(
            other[0].line(),
            "TTFT P95 unchanged from the previous period (400 ms → 400 ms)"
        );
    }

    #[test]
    fn within_the_band_is_unchanged_and_outside_it_is_not() {
        let at = |now: f64| changes(&chat([Some(now), Some(1.0)], [None, None]), 7 * DAY)[0].direction();
        assert_eq!(at(1.0199), Direction::Unchanged);
        assert_eq!(at(0.9801), Direction::Unchanged);
        assert_eq!(at(1.02), Direction::Up);
        assert_eq!(at(0.98), Direction::Down);
    }

    #[test]
    fn nothing_is_said_without_both_sides() {
        assert!(changes(&chat([Some(0.4), None], [None, Some(1.0)]), 7 * DAY).is_empty());
        assert!(
            changes(
                &chat([Some(0.4), Some(0.0)], [Some(f64::NAN), Some(1.0)]),
                7 * DAY
            )
            .is_empty()
        );
    }

    #[test]
    fn json_carries_the_numbers_and_the_line() {
        let j = changes(&chat([Some(0.48616), Some(0.412)], [None, None]), 7 * DAY)[0].to_json();
        assert_eq!(j["probe"], "chat");
        assert_eq!(j["figure"], "ttft");
        assert_eq!(j["previous_seconds"], 0.412);
        assert_eq!(j["current_seconds"], 0.48616);
        assert!((j["change"].as_f64().unwrap() - 0.18).abs() < 1e-12);
        assert_eq!(j["direction"], "up");
        assert_eq!(j["line"], "TTFT P95 up 18% on last week (412 ms → 486 ms)");
    }
}
