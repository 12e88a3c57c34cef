//! Figures over a series of runs, shared by the status page and the SLO report:
//! availability, latency percentiles, SLO attainment and incidents (failing streaks).
//!
//! Definitions (docs/api.md, "The SLO report"): percentiles are nearest-rank over
//! successful runs only (a fast error never improves a latency figure); attainment is
//! the share of all runs that succeeded at or under the target (a failed run misses every
//! target: the user waited and got nothing); a 429 counts as a failure for availability,
//! as the user got no answer. Cold runs (a cold probe's runs that found the endpoint
//! idle) count in availability but not in the latency figures of [`Summary::of`]: a
//! cold start's tens of seconds would make a warm P95 say nothing of warm answers, and a
//! few warm runs would hide the cold starts. [`Summary::of_cold`] gives them apart.
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

    /// A cold probe's run that found the endpoint idle for its whole `cold.idle`.
    fn cold(&self) -> bool {
        false
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
    /// Availability over every run; percentiles and attainment over the warm runs (every
    /// run but the cold ones).
    pub fn of<R: Run>(runs: &[R], targets: &Targets) -> Summary {
        let all: Vec<&R> = runs.iter().collect();
        let warm: Vec<&R> = runs.iter().filter(|r| !r.cold()).collect();
        Summary::over(&all, &warm, targets)
    }

    /// The cold runs alone, every figure over them; `None` without one.
    pub fn of_cold<R: Run>(runs: &[R], targets: &Targets) -> Option<Summary> {
        let cold: Vec<&R> = runs.iter().filter(|r| r.cold()).collect();
        (!cold.is_empty()).then(|| Summary::over(&cold, &cold, targets))
    }

    /// Availability over `counted`, percentiles and attainment over `timed` (some of them).
    fn over<R: Run>(counted: &[&R], timed: &[&R], targets: &Targets) -> Summary {
        let ok = counted.iter().filter(|r| r.success()).count();
        let timed_ok: Vec<&R> = timed.iter().copied().filter(|r| r.success()).collect();
        let secs = |f: fn(&R) -> Option<Duration>| -> Vec<f64> {
            timed_ok
                .iter()
                .filter_map(|r| f(r))
                .map(|d| d.as_secs_f64())
                .collect()
        };
        let attainment = |f: fn(&R) -> Option<Duration>, target: Option<Duration>| {
            let target = target?;
            let met = timed_ok
                .iter()
                .filter_map(|r| f(r))
                .filter(|d| *d <= target)
                .count();
            // Successful runs that did not measure this at all (a kind without tokens):
            // no figure rather than a false zero. With no success, every run missed.
            let measures = timed_ok.is_empty() || timed_ok.iter().any(|r| f(r).is_some());
            (!timed.is_empty() && measures).then(|| met as f64 / timed.len() as f64)
        };
        Summary {
            runs: counted.len() as u64,
            failures: (counted.len() - ok) as u64,
            availability: (!counted.is_empty()).then(|| ok as f64 / counted.len() as f64),
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
        cold: bool,
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
        fn cold(&self) -> bool {
            self.cold
        }
    }

    fn run(at_s: u64, ok: bool, total_ms: u64) -> Sample {
        Sample {
            at: UNIX_EPOCH + Duration::from_secs(at_s),
            ok,
            total_ms,
            cold: false,
        }
    }

    fn cold(at_s: u64, ok: bool, total_ms: u64) -> Sample {
        Sample {
            cold: true,
            ..run(at_s, ok, total_ms)
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

    /// Cold starts count for availability but stay out of the warm figures, which they
    /// would swamp: given apart, every figure over them alone.
    #[test]
    fn cold_runs_count_in_availability_and_are_timed_apart() {
        let targets = Targets {
            ttft: Some(Duration::from_millis(500)),
            total: None,
            availability: None,
        };
        let mut runs: Vec<Sample> = (0..18).map(|i| run(i * 60, true, 400)).collect();
        runs.push(cold(1100, true, 40_000));
        runs.push(cold(1200, false, 60_000));
        let s = Summary::of(&runs, &targets);
        assert_eq!((s.runs, s.failures), (20, 1));
        assert_eq!(s.availability, Some(0.95));
        assert_eq!((s.ttft.p99, s.total.p99), (Some(0.2), Some(0.4)));
        assert_eq!(s.ttft_attainment, Some(1.0), "of the warm runs");
        let c = Summary::of_cold(&runs, &targets).unwrap();
        assert_eq!((c.runs, c.failures, c.availability), (2, 1, Some(0.5)));
        assert_eq!((c.ttft.p50, c.total.p95), (Some(20.0), Some(40.0)));
        assert_eq!(c.ttft_attainment, Some(0.0));
        assert_eq!(Summary::of_cold(&runs[..18], &targets), None);
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
