//! Figures over a series of runs, shared by the status page and the SLO report:
//! availability, latency percentiles, SLO attainment and incidents (failing streaks).
//!
//! Definitions (docs/api.md, "The SLO report"): percentiles are nearest-rank over
//! successful runs only (a fast error never improves a latency figure); attainment is
//! the share of all runs that succeeded at or under the target (a failed run misses every
//! target: the user waited and got nothing); a 429 counts as a failure for availability,
//! as the user got no answer.
//!
//! A leaf: it imports no other module of the crate. It reads runs through the small
//! [`Run`] trait, which the store's record implements, so the store and the report
//! depend on it and not the other way round.

use std::time::{Duration, SystemTime};

/// What the figures need of one finished run.
pub trait Run {
    /// When the run started (wall clock).
    fn at(&self) -> SystemTime;
    fn probe(&self) -> &str;
    fn location(&self) -> &str;
    /// The failure reason's label value; `None` for a successful run.
    fn reason(&self) -> Option<&str>;
    fn ttft(&self) -> Option<Duration>;
    fn total(&self) -> Option<Duration>;

    fn success(&self) -> bool {
        self.reason().is_none()
    }
}

/// Nearest-rank percentile: the smallest value with at least `q` of the values at or
/// below it.
pub fn percentile(mut values: Vec<f64>, q: f64) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    percentile_sorted(&values, q)
}

/// P50, P95 and P99 in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quantiles {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

impl Quantiles {
    pub fn of(mut values: Vec<f64>) -> Quantiles {
        values.sort_by(f64::total_cmp);
        let at = |q: f64| percentile_sorted(&values, q);
        Quantiles {
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
        }
    }
}

fn percentile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Latency targets to measure attainment against.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Targets {
    pub ttft: Option<Duration>,
    pub total: Option<Duration>,
    /// Availability objective as a fraction (0.999).
    pub availability: Option<f64>,
}

/// What a set of runs of one probe in one location amounts to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub runs: u64,
    pub failures: u64,
    /// Successful runs / runs; `None` without runs.
    pub availability: Option<f64>,
    pub ttft: Quantiles,
    pub total: Quantiles,
    /// Share of runs that succeeded with a TTFT at or under the target; `None` without
    /// a target or when no run measured a TTFT (e.g. plain HTTP probes).
    pub ttft_attainment: Option<f64>,
    pub total_attainment: Option<f64>,
}

impl Summary {
    pub fn of<R: Run>(runs: &[R], targets: &Targets) -> Summary {
        let ok: Vec<&R> = runs.iter().filter(|r| r.success()).collect();
        let secs = |f: fn(&R) -> Option<Duration>| -> Vec<f64> {
            ok.iter().filter_map(|r| f(r)).map(|d| d.as_secs_f64()).collect()
        };
        let attainment = |f: fn(&R) -> Option<Duration>, target: Option<Duration>| {
            let target = target?;
            let met = ok.iter().filter_map(|r| f(r)).filter(|d| *d <= target).count();
            // Successful runs that did not measure this at all (a kind without tokens):
            // no figure rather than a false zero. With no success, every run missed.
            let measures = ok.is_empty() || ok.iter().any(|r| f(r).is_some());
            (!runs.is_empty() && measures).then(|| met as f64 / runs.len() as f64)
        };
        Summary {
            runs: runs.len() as u64,
            failures: (runs.len() - ok.len()) as u64,
            availability: (!runs.is_empty()).then(|| ok.len() as f64 / runs.len() as f64),
            ttft: Quantiles::of(secs(|r| r.ttft())),
            total: Quantiles::of(secs(|r| r.total())),
            ttft_attainment: attainment(|r| r.ttft(), targets.ttft),
            total_attainment: attainment(|r| r.total(), targets.total),
        }
    }
}

/// A failing streak: consecutive failed runs of one probe in one location.
#[derive(Debug, Clone, PartialEq)]
pub struct Incident {
    pub probe: String,
    pub location: String,
    /// The first failed run's start.
    pub started: SystemTime,
    /// The next successful run's start; `None` while still failing.
    pub ended: Option<SystemTime>,
    /// From the first failure to the recovery (or to the last failure's end when
    /// still failing at the end of the period).
    pub duration: Duration,
    pub failed_runs: u64,
    /// Reasons by how many runs failed with each, most frequent first.
    pub reasons: Vec<(String, u64)>,
}

/// The failing streaks in `runs` (one series, in start order). A streak still open at
/// the end lasts until its last failed run finished.
pub fn incidents<R: Run>(runs: &[R]) -> Vec<Incident> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize)> = None; // (first, last) failed index
    let close = |first: usize, last: usize, recovered: Option<&R>| {
        let streak = &runs[first..=last];
        let started = streak[0].at();
        let end = match recovered {
            Some(r) => r.at(),
            None => {
                let l = &streak[streak.len() - 1];
                l.at() + l.total().unwrap_or_default()
            }
        };
        let mut reasons: Vec<(String, u64)> = Vec::new();
        for r in streak {
            let reason = r.reason().unwrap_or_default().to_owned();
            match reasons.iter_mut().find(|(name, _)| *name == reason) {
                Some((_, n)) => *n += 1,
                None => reasons.push((reason, 1)),
            }
        }
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Incident {
            probe: streak[0].probe().to_owned(),
            location: streak[0].location().to_owned(),
            started,
            ended: recovered.map(|r| r.at()),
            duration: end.duration_since(started).unwrap_or_default(),
            failed_runs: streak.len() as u64,
            reasons,
        }
    };
    for (i, r) in runs.iter().enumerate() {
        match (r.success(), open) {
            (false, None) => open = Some((i, i)),
            (false, Some((first, _))) => open = Some((first, i)),
            (true, Some((first, last))) => {
                out.push(close(first, last, Some(r)));
                open = None;
            }
            (true, None) => {}
        }
    }
    if let Some((first, last)) = open {
        out.push(close(first, last, None));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    /// A run of probe `p` in `eu`: TTFT is half of `total_ms`; a failure is an
    /// `http_5xx` without a TTFT.
    struct Sample {
        at: SystemTime,
        ok: bool,
        total_ms: u64,
    }

    impl Run for Sample {
        fn at(&self) -> SystemTime {
            self.at
        }
        fn probe(&self) -> &str {
            "p"
        }
        fn location(&self) -> &str {
            "eu"
        }
        fn reason(&self) -> Option<&str> {
            (!self.ok).then_some("http_5xx")
        }
        fn ttft(&self) -> Option<Duration> {
            self.ok.then(|| Duration::from_millis(self.total_ms / 2))
        }
        fn total(&self) -> Option<Duration> {
            Some(Duration::from_millis(self.total_ms))
        }
    }

    fn run(at_s: u64, ok: bool, total_ms: u64) -> Sample {
        Sample {
            at: UNIX_EPOCH + Duration::from_secs(at_s),
            ok,
            total_ms,
        }
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(v.clone(), 0.95), Some(19.0));
        assert_eq!(percentile(v, 0.5), Some(10.0));
        assert_eq!(percentile(vec![3.0], 0.95), Some(3.0));
        assert_eq!(percentile(Vec::new(), 0.95), None);
    }

    #[test]
    fn failures_count_against_availability_not_latency() {
        let runs = [
            run(0, true, 100),
            run(30, false, 5),
            run(60, true, 300),
            run(90, true, 200),
        ];
        let targets = Targets {
            ttft: Some(Duration::from_millis(100)),
            total: Some(Duration::from_millis(250)),
            availability: None,
        };
        let s = Summary::of(&runs, &targets);
        assert_eq!((s.runs, s.failures), (4, 1));
        assert_eq!(s.availability, Some(0.75));
        assert_eq!(s.total.p50, Some(0.2));
        assert_eq!(s.total.p99, Some(0.3));
        // TTFTs 50, 150, 100 ms: two of four runs at or under 100 ms (the failed run
        // misses the target too).
        assert_eq!(s.ttft_attainment, Some(0.5));
        assert_eq!(s.total_attainment, Some(0.5));
        // An outage misses every target.
        let down = Summary::of(&[run(0, false, 5), run(30, false, 5)], &targets);
        assert_eq!(
            (down.ttft_attainment, down.total_attainment),
            (Some(0.0), Some(0.0))
        );
    }

    #[test]
    fn streaks_become_incidents() {
        let runs = [
            run(0, true, 100),
            run(30, false, 1000),
            run(60, false, 1000),
            run(90, true, 100),
            run(120, false, 2000),
        ];
        let got = incidents(&runs);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].duration, Duration::from_secs(60));
        assert_eq!(got[0].failed_runs, 2);
        assert_eq!(got[0].reasons, [("http_5xx".to_owned(), 2)]);
        assert_eq!(got[0].ended, Some(UNIX_EPOCH + Duration::from_secs(90)));
        // Still failing: lasts until the failed run finished.
        assert_eq!(got[1].ended, None);
        assert_eq!(got[1].duration, Duration::from_secs(2));
    }
}
