//! The fleet report's charts and coverage: per probe, across locations, the period's
//! expressions evaluated over each bucket instead of the whole period (a range query
//! whose step is the bucket, the last short bucket asked on its own), and the same with
//! `offset` for the previous period, so both are aligned bucket by bucket.
//!
//! - runs and failures: `sum by (probe, result) (increase(inferprobe_runs_total[B]))`;
//! - P95 TTFT and total: `histogram_quantile(0.95, ...)` over the warm series' buckets'
//!   increase (`start!="cold"`), or the native histogram's;
//! - where the data starts: the earliest `inferprobe_up` sample in both periods,
//!   `min(min_over_time(timestamp(inferprobe_up)[2N:step]))`, as precise as the step;
//! - each whole period's P95s, for the lines under the verdicts: the P95 expressions
//!   with the period as the window, one instant query per figure and period.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Matrix, Prom, PrometheusError, RUNS, TOTAL, TTFT, UP, Vector, WARM, instant_all, unix, whole};
use crate::report::ProbeP95;
use crate::report::trend::{Point, Trend, bucket_count};

/// Which figure of a bucket an answer fills.
#[derive(Clone, Copy)]
enum Figure {
    Runs,
    TtftP95,
    TotalP95,
}

/// The expression of `figure` over a window of `window` seconds, `offset` seconds back.
fn expression(figure: Figure, window: u64, offset: u64) -> String {
    let range = if offset > 0 {
        format!("[{window}s] offset {offset}s")
    } else {
        format!("[{window}s]")
    };
    let p95 = |metric: &str| {
        format!(
            "histogram_quantile(0.95, sum by (probe, le) (increase({metric}_bucket{WARM}{range}))) \
             or histogram_quantile(0.95, sum by (probe) (increase({metric}{WARM}{range})))"
        )
    };
    match figure {
        Figure::Runs => format!("sum by (probe, result) (increase({RUNS}{range}))"),
        Figure::TtftP95 => p95(TTFT),
        Figure::TotalP95 => p95(TOTAL),
    }
}

/// Every probe's buckets of both periods.
pub(super) async fn trends(
    prom: &Prom,
    since: SystemTime,
    until: SystemTime,
    bucket: Duration,
) -> Result<Vec<Trend>, PrometheusError> {
    let len = until.duration_since(since).unwrap_or_default();
    let n = bucket_count(len, bucket);
    let b = bucket.as_secs().max(1);
    let full = (len.as_secs() / b) as usize;
    let rest = len.as_secs() - full as u64 * b;
    let mut probes: BTreeMap<String, [Vec<Point>; 2]> = BTreeMap::new();
    for (period, offset) in [(0, 0), (1, len.as_secs().max(1))] {
        for figure in [Figure::Runs, Figure::TtftP95, Figure::TotalP95] {
            let mut answers: Vec<(usize, Vector)> = Vec::new();
            if full > 0 {
                let start = since + Duration::from_secs(b);
                let end = since + Duration::from_secs(b * full as u64);
                let matrix: Matrix = prom
                    .range(&expression(figure, b, offset), unix(start), unix(end), bucket)
                    .await?;
                let mut by_bucket: BTreeMap<usize, Vector> = BTreeMap::new();
                for (labels, points) in matrix {
                    for (t, v) in points {
                        // A time no clock can hold is a broken answer's, not a sample.
                        let Some(at) = unix_time(t) else {
                            continue;
                        };
                        let ends = at.duration_since(since).unwrap_or_default().as_secs_f64() / b as f64;
                        let i = (ends.round() as usize).clamp(1, full) - 1;
                        by_bucket.entry(i).or_default().push((labels.clone(), v));
                    }
                }
                answers.extend(by_bucket);
            }
            if rest > 0 {
                answers.push((
                    full,
                    prom.instant(&expression(figure, rest, offset), unix(until))
                        .await?,
                ));
            }
            for (i, vector) in answers {
                for (labels, value) in vector {
                    let Some(probe) = labels.get("probe") else {
                        continue;
                    };
                    let periods = probes
                        .entry(probe.clone())
                        .or_insert_with(|| std::array::from_fn(|_| vec![Point::default(); n]));
                    let point = &mut periods[period][i.min(n - 1)];
                    match figure {
                        Figure::Runs => {
                            let runs = whole(value);
                            point.runs += runs;
                            if labels.get("result").is_some_and(|r| r == "failure") {
                                point.failures += runs;
                            }
                        }
                        Figure::TtftP95 => point.ttft_p95 = Some(value).filter(|v| v.is_finite()),
                        Figure::TotalP95 => point.total_p95 = Some(value).filter(|v| v.is_finite()),
                    }
                }
            }
        }
    }
    Ok(probes
        .into_iter()
        .map(|(probe, periods)| Trend { probe, periods })
        .collect())
}

/// Per probe, P95 TTFT and total over each whole period: the charts' expressions with the
/// period as their window, `offset` it for the previous one.
pub(super) async fn probe_p95s(
    prom: &Arc<Prom>,
    until: SystemTime,
    len: Duration,
) -> Result<Vec<ProbeP95>, PrometheusError> {
    let secs = len.as_secs().max(1);
    let asked = [
        (Figure::TtftP95, 0),
        (Figure::TtftP95, 1),
        (Figure::TotalP95, 0),
        (Figure::TotalP95, 1),
    ];
    let queries = asked
        .iter()
        .map(|&(figure, period)| expression(figure, secs, secs * period as u64))
        .collect();
    let answers = instant_all(prom, queries, unix(until)).await?;
    let mut probes: BTreeMap<String, ProbeP95> = BTreeMap::new();
    for ((figure, period), vector) in asked.into_iter().zip(answers) {
        for (labels, value) in vector {
            let Some(probe) = labels.get("probe") else {
                continue;
            };
            let p = probes.entry(probe.clone()).or_insert_with(|| ProbeP95 {
                probe: probe.clone(),
                ..ProbeP95::default()
            });
            let side = if matches!(figure, Figure::TtftP95) {
                &mut p.ttft
            } else {
                &mut p.total
            };
            // NaN: no successful run in that period.
            side[period] = Some(value).filter(|v| v.is_finite());
        }
    }
    Ok(probes.into_values().collect())
}

/// The earliest `up` sample of any agent in the two periods, to the step.
pub(super) async fn data_from(
    prom: &Prom,
    since: SystemTime,
    until: SystemTime,
    step: Duration,
) -> Result<Option<SystemTime>, PrometheusError> {
    let len = until.duration_since(since).unwrap_or_default().as_secs().max(1);
    let query = format!(
        "min(min_over_time(timestamp({UP})[{}s:{}s]))",
        2 * len,
        step.as_secs().max(1) * 2
    );
    let answer = prom.instant(&query, unix(until)).await?;
    Ok(answer.first().and_then(|(_, v)| unix_time(*v)))
}

/// Prometheus's Unix seconds as a time; `None` for one no `SystemTime` holds (negative,
/// infinite, NaN, past the year 292 billion), as a broken or hostile server may send.
fn unix_time(seconds: f64) -> Option<SystemTime> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|d| UNIX_EPOCH.checked_add(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_period_is_the_same_expression_offset() {
        assert_eq!(
            expression(Figure::Runs, 86_400, 604_800),
            "sum by (probe, result) (increase(inferprobe_runs_total[86400s] offset 604800s))"
        );
        let now = expression(Figure::TtftP95, 3600, 0);
        assert!(
            now.contains(
                "sum by (probe, le) (increase(inferprobe_ttft_seconds_bucket{start!=\"cold\"}[3600s]))"
            ),
            "{now}"
        );
        assert!(
            now.contains(
                "or histogram_quantile(0.95, sum by (probe) (increase(inferprobe_ttft_seconds{start!=\"cold\"}[3600s])))"
            ),
            "{now}"
        );
    }
}
