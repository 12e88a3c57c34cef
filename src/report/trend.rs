//! The report's charts as data: per probe, across its locations, the runs, failures and
//! P95 latencies of each bucket (a day in a week's report) of this period and of the
//! one before, aligned bucket by bucket so the two can be drawn over each other; and,
//! from the same runs, each whole period's P95s for the lines under the verdicts.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::ProbeP95;
use crate::stats::{Run, percentile};

/// The bucket sizes a chart may use, largest first: the largest that still gives a
/// period two buckets, so a week is drawn by day, a day by hour.
const BUCKETS: [Duration; 5] = [
    Duration::from_secs(86_400),
    Duration::from_secs(3600),
    Duration::from_secs(300),
    Duration::from_secs(60),
    Duration::from_secs(1),
];

/// Buckets a chart has at most: a longer period gets wider buckets (whole days).
const MAX_BUCKETS: u64 = 400;

/// One bucket of one period.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Point {
    pub runs: u64,
    pub failures: u64,
    /// Of successful warm runs, seconds; `None` without one.
    pub ttft_p95: Option<f64>,
    pub total_p95: Option<f64>,
}

impl Point {
    pub fn availability(&self) -> Option<f64> {
        (self.runs > 0).then(|| (self.runs - self.failures.min(self.runs)) as f64 / self.runs as f64)
    }
}

/// One probe's chart data across its locations.
#[derive(Debug, Clone, PartialEq)]
pub struct Trend {
    pub probe: String,
    /// This period's buckets, then the previous period's, each `Report::buckets()` long.
    pub periods: [Vec<Point>; 2],
}

/// The bucket of a period of `len`.
pub fn bucket_for(len: Duration) -> Duration {
    let bucket = BUCKETS
        .into_iter()
        .find(|b| len >= *b * 2)
        .unwrap_or(BUCKETS[BUCKETS.len() - 1]);
    let days = len.as_secs().div_ceil(86_400);
    if days > MAX_BUCKETS {
        Duration::from_secs(days.div_ceil(MAX_BUCKETS) * 86_400)
    } else {
        bucket
    }
}

/// How many buckets of `bucket` a period of `len` has, the last one possibly short.
pub fn bucket_count(len: Duration, bucket: Duration) -> usize {
    (len.as_secs_f64() / bucket.as_secs_f64().max(1e-9))
        .ceil()
        .max(1.0) as usize
}

/// The runs of each bucket, gathered before their percentiles are taken.
#[derive(Default)]
struct Gathered {
    runs: u64,
    failures: u64,
    ttft: Vec<f64>,
    total: Vec<f64>,
}

/// Gathers runs from the store, series by series, into per-probe buckets.
pub(super) struct TrendBuilder {
    starts: [SystemTime; 2],
    bucket: Duration,
    count: usize,
    probes: BTreeMap<String, [Vec<Gathered>; 2]>,
}

impl TrendBuilder {
    /// For the period starting at `since` and the one of the same length before it.
    pub(super) fn new(since: SystemTime, previous_since: SystemTime, len: Duration) -> TrendBuilder {
        let bucket = bucket_for(len);
        TrendBuilder {
            starts: [since, previous_since],
            bucket,
            count: bucket_count(len, bucket),
            probes: BTreeMap::new(),
        }
    }

    /// The runs of one series of `probe`: `during` this period and `before` it.
    pub(super) fn add<R: Run>(&mut self, probe: &str, during: &[R], before: &[R]) {
        let count = self.count;
        let buckets = self
            .probes
            .entry(probe.to_owned())
            .or_insert_with(|| std::array::from_fn(|_| (0..count).map(|_| Gathered::default()).collect()));
        for (period, runs) in [during, before].into_iter().enumerate() {
            for r in runs {
                let offset = r.at().duration_since(self.starts[period]).unwrap_or_default();
                let i = ((offset.as_secs_f64() / self.bucket.as_secs_f64()) as usize).min(count - 1);
                let g = &mut buckets[period][i];
                g.runs += 1;
                if !r.success() {
                    g.failures += 1;
                } else if !r.cold() {
                    // Warm runs' latency only, as the report's rows (stats::Summary).
                    g.ttft.extend(r.ttft().map(|d| d.as_secs_f64()));
                    g.total.extend(r.total().map(|d| d.as_secs_f64()));
                }
            }
        }
    }

    pub(super) fn bucket(&self) -> Duration {
        self.bucket
    }

    /// Per probe, P95 TTFT and total over each whole period: every location's runs
    /// pooled, as the buckets pool them.
    pub(super) fn probe_p95s(&self) -> Vec<ProbeP95> {
        let whole = |buckets: &[Gathered], values: fn(&Gathered) -> &[f64]| {
            percentile(
                buckets.iter().flat_map(|g| values(g).iter().copied()).collect(),
                0.95,
            )
        };
        self.probes
            .iter()
            .map(|(probe, periods)| ProbeP95 {
                probe: probe.clone(),
                ttft: periods.each_ref().map(|b| whole(b, |g| &g.ttft)),
                total: periods.each_ref().map(|b| whole(b, |g| &g.total)),
            })
            .collect()
    }

    pub(super) fn finish(self) -> Vec<Trend> {
        self.probes
            .into_iter()
            .map(|(probe, periods)| Trend {
                probe,
                periods: periods.map(|buckets| {
                    buckets
                        .into_iter()
                        .map(|g| Point {
                            runs: g.runs,
                            failures: g.failures,
                            ttft_p95: percentile(g.ttft, 0.95),
                            total_p95: percentile(g.total, 0.95),
                        })
                        .collect()
                }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_week_is_drawn_by_day_a_day_by_hour() {
        let d = |s: u64| Duration::from_secs(s);
        assert_eq!(bucket_for(d(7 * 86_400)), d(86_400));
        assert_eq!(bucket_count(d(7 * 86_400), d(86_400)), 7);
        assert_eq!(bucket_for(d(86_400)), d(3600));
        assert_eq!(bucket_for(d(180)), d(60));
        assert_eq!(bucket_count(d(7 * 86_400 + 3600), d(86_400)), 8);
        // Two years: whole days, at most MAX_BUCKETS of them.
        let long = d(730 * 86_400);
        assert_eq!(bucket_for(long), d(2 * 86_400));
        assert!(bucket_count(long, bucket_for(long)) as u64 <= MAX_BUCKETS);
        assert_eq!(bucket_count(d(1), bucket_for(d(1))), 1);
    }
}
