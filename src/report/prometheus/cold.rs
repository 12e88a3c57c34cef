//! The fleet report's cold starts and restarts (report/cold.rs), this period only:
//!
//! - cold runs and failures: the runs query's `start="cold"` series;
//! - their P50, P95 and P99: `histogram_quantile` over the TTFT and total histograms'
//!   `start="cold"` series (or their native histograms'), as the main rows' over the
//!   warm ones;
//! - restarts: `sum by (probe, location) (increase(inferprobe_endpoint_restarts_total[N]))`,
//!   rounded. When and why each happened is not among the exported series: the local
//!   store's report says it.
//!
//! Cold attainment is not estimated: the objectives judge cold runs on their P95.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Counts, Key, Latency, Prom, PrometheusError, TOTAL, TTFT, instant_all, key_of, whole};
use crate::report::Starts;
use crate::stats::Summary;

const COLD: &str = "{start=\"cold\"}";
const RESTARTS: &str = "inferprobe_endpoint_restarts_total";

/// Per (probe, location) with cold runs or restarts in the period over `range`.
pub(super) async fn starts(
    prom: &Arc<Prom>,
    at: f64,
    range: &str,
    cold_runs: BTreeMap<Key, Counts>,
) -> Result<BTreeMap<Key, Starts>, PrometheusError> {
    let mut queries = Vec::new();
    for metric in [TTFT, TOTAL] {
        for q in ["0.5", "0.95", "0.99"] {
            queries.push(format!(
                "histogram_quantile({q}, sum by (probe, location, le) (increase({metric}_bucket{COLD}{range}))) \
                 or histogram_quantile({q}, sum by (probe, location) (increase({metric}{COLD}{range})))"
            ));
        }
    }
    queries.push(format!("sum by (probe, location) (increase({RESTARTS}{range}))"));
    let mut answers = instant_all(prom, queries, at).await?.into_iter();
    let mut latency = || Latency {
        quantiles: std::array::from_fn(|_| answers.next().unwrap_or_default()),
        buckets: Vec::new(),
        fractions: BTreeMap::new(),
    };
    let (ttft, total) = (latency(), latency());
    let restarts = answers.next().unwrap_or_default();
    let mut out: BTreeMap<Key, Starts> = BTreeMap::new();
    for (key, c) in cold_runs {
        let runs = c.success + c.failure;
        if runs == 0 {
            continue;
        }
        let cold = Summary {
            runs,
            failures: c.failure,
            availability: Some(c.success as f64 / runs as f64),
            ttft: ttft.quantiles(&key),
            total: total.quantiles(&key),
            ..Summary::default()
        };
        out.entry(key).or_default().cold = Some(cold);
    }
    for (labels, value) in &restarts {
        let n = whole(*value);
        if n > 0 {
            out.entry(key_of(labels)).or_default().restarts = n;
        }
    }
    Ok(out)
}
