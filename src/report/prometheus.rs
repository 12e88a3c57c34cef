//! The SLO report for the whole fleet, from a Prometheus server that scrapes (or receives
//! remote_write from) every agent: the same [`Report`] as from one agent's store, but
//! estimated from the exported counters and histograms, so `exact` is false.
//!
//! Everything is an instant query evaluated at `until` over a range of the period's
//! length (`[Ns]`, and `[Ns] offset Ns` for the previous period), plus one range query
//! for incidents and one instant query per listed incident:
//!
//! - runs and failures: `sum by (probe, location, result, start) (increase(inferprobe_runs_total[N]))`,
//!   rounded to whole runs (every start for availability, the warm ones for attainment). `increase()` only sees the change between samples, so runs
//!   before a series' first scrape are missed (at most about one scrape interval's worth
//!   per series); availability is computed from the rounded counts so the figures agree.
//! - percentiles: `histogram_quantile(q, sum by (probe, location, le) (increase(..._bucket{start!="cold"}[N])))`
//!   for the TTFT and end-to-end histograms (successful warm runs only: cold runs have
//!   their own, cold.rs), the prompt and image buckets summed away; `or` the same over
//!   their native histograms (`sum by (probe, location) (increase(...{start!="cold"}[N]))`),
//!   which is all a Prometheus with native histograms enabled stores of them (no
//!   `_bucket` series).
//! - attainment: the same bucket sums, interpolated here (see [`attainment`]); where there
//!   are no buckets, `histogram_fraction(0, target, ...)` of the native histogram, asked
//!   once per distinct target.
//! - incidents: `min by (probe, location) (inferprobe_up)` over the period (see
//!   [`streaks`]); the failed runs and reasons of each of the longest from
//!   `increase(inferprobe_runs_total{result="failure"})` over the incident.
//! - the charts, where the data starts and each probe's P95s over the whole period:
//!   trends.rs, the same expressions per bucket and per probe.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::net::{TlsRoots, control_plane_client, describe_error, read_capped};
use crate::redact::percent_decode;
use crate::report::{Report, Row, top, trend};
use crate::stats::{Incident, Quantiles, Summary, Targets};
use crate::time_zone::TimeZone;

mod cold;
mod trends;

/// Per query: a slow Prometheus (a 7-day range over thousands of series) gets this long.
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Points per range query at most: Prometheus refuses more than 11,000.
const MAX_POINTS: u64 = 10_000;
/// The finest step of the incident query. Finer than any scrape interval adds nothing;
/// coarser hides short incidents in short reports (a 30 s floor would leave a 2-minute
/// report four points).
const MIN_STEP: Duration = Duration::from_secs(1);

const RUNS: &str = "inferprobe_runs_total";
/// The histograms' names: their classic series add `_bucket`, a native one has this name.
const TTFT: &str = "inferprobe_ttft_seconds";
const TOTAL: &str = "inferprobe_e2e_latency_seconds";
const UP: &str = "inferprobe_up";
/// The latency histograms' warm series: a cold probe's cold runs (`start="cold"`) have
/// figures of their own (cold.rs), as in the local report (stats::Summary).
const WARM: &str = "{start!=\"cold\"}";

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// The URL itself is unusable (a bad flag, not a failed query).
    #[error("bad Prometheus URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot build the HTTP client for Prometheus: {0}")]
    Client(String),
    #[error("query {query:?} to {server} failed: {reason}")]
    Request {
        server: String,
        query: String,
        reason: String,
    },
    #[error("query {query:?} to {server} failed: HTTP {status}, Prometheus says {error_type}: {error}")]
    Api {
        server: String,
        query: String,
        status: u16,
        error_type: String,
        error: String,
    },
    #[error("query {query:?} to {server} failed: HTTP {status}: {body}")]
    Http {
        server: String,
        query: String,
        status: u16,
        body: String,
    },
    #[error("query {query:?} to {server}: unexpected answer: {reason}")]
    Decode {
        server: String,
        query: String,
        reason: String,
    },
}

/// The fleet's report for `[since, until)` and the period of the same length before it.
pub async fn report(
    base_url: &str,
    since: SystemTime,
    until: SystemTime,
    targets: impl Fn(&str) -> Targets,
) -> Result<Report, PrometheusError> {
    let prom = Arc::new(Prom::new(base_url)?);
    let len = until.duration_since(since).unwrap_or_default();
    // Whole seconds: PromQL durations are integers; a sub-second remainder is noise here.
    let secs = len.as_secs().max(1);
    let at = unix(until);
    let range = |offset: bool| {
        if offset {
            format!("[{secs}s] offset {secs}s")
        } else {
            format!("[{secs}s]")
        }
    };

    // Every instant query of the report, run at once.
    let mut queries: Vec<String> = Vec::new();
    for previous in [false, true] {
        let r = range(previous);
        queries.push(format!(
            "sum by (probe, location, result, start) (increase({RUNS}{r}))"
        ));
        for metric in [TTFT, TOTAL] {
            let buckets = format!("sum by (probe, location, le) (increase({metric}_bucket{WARM}{r}))");
            let native = native_sum(metric, &r);
            for q in ["0.5", "0.95", "0.99"] {
                queries.push(format!(
                    "histogram_quantile({q}, {buckets}) or histogram_quantile({q}, {native})"
                ));
            }
            queries.push(buckets);
        }
    }
    let mut answers = instant_all(&prom, queries, at).await?.into_iter();
    let mut period = || -> Period {
        let mut next = || answers.next().expect("one answer per query");
        let runs = next();
        let mut latency = || Latency {
            quantiles: [next(), next(), next()],
            buckets: next(),
            fractions: BTreeMap::new(),
        };
        let ttft = latency();
        let total = latency();
        Period { runs, ttft, total }
    };
    let mut current = period();
    let mut previous = period();

    // Rows: every (probe, location) with runs in either period.
    let (now_runs, before_runs) = (current.run_counts(Start::Any), previous.run_counts(Start::Any));
    let warm = [current.run_counts(Start::Warm), previous.run_counts(Start::Warm)];
    let mut keys: Vec<Key> = now_runs
        .iter()
        .chain(&before_runs)
        .filter(|(_, c)| c.success + c.failure > 0)
        .map(|(k, _)| k.clone())
        .collect();
    keys.sort();
    keys.dedup();
    let probe_targets: BTreeMap<String, Targets> =
        keys.iter().map(|k| (k.0.clone(), targets(&k.0))).collect();
    native_attainment(&prom, at, &range, &probe_targets, [&mut current, &mut previous]).await?;
    let mut starts = cold::starts(&prom, at, &range(false), current.run_counts(Start::Cold)).await?;
    let rows = keys
        .into_iter()
        .map(|key| {
            let t = probe_targets[key.0.as_str()];
            Row {
                current: current.summary(&key, [&now_runs, &warm[0]], &t),
                previous: previous.summary(&key, [&before_runs, &warm[1]], &t),
                starts: starts.remove(&key).unwrap_or_default(),
                probe: key.0,
                location: key.1,
                targets: t,
                // Token counts are not among the exported series this report reads.
                tokens: Default::default(),
                cost: None,
            }
        })
        .collect();

    // Incidents: failing streaks of the `up` gauge, then details for the longest only.
    let step = Duration::from_secs(secs.div_ceil(MAX_POINTS)).max(MIN_STEP);
    let up_query = format!("min by (probe, location) ({UP})");
    let series = prom.range(&up_query, unix(since), at, step).await?;
    let mut found = Vec::new();
    for (labels, points) in &series {
        let key = key_of(labels);
        found.extend(streaks(&points_in(points, since, until), step).into_iter().map(
            |(started, ended, duration)| Incident {
                probe: key.0.clone(),
                location: key.1.clone(),
                started,
                ended,
                duration,
                failed_runs: 0,
                reasons: Vec::new(),
            },
        ));
    }
    let mut incidents = top(found);
    let detail_queries: Vec<(String, f64)> = incidents
        .iter()
        .map(|i| {
            let end = i.ended.unwrap_or(until);
            // One step more than the streak: the counter's sample before the first
            // failing one is needed to see the first failure's increase.
            let window = end.duration_since(i.started).unwrap_or_default() + step;
            let query = format!(
                "sum by (reason) (increase({RUNS}{{result=\"failure\", probe={}, location={}}}[{}s]))",
                promql_string(&i.probe),
                promql_string(&i.location),
                window.as_secs().max(1)
            );
            (query, unix(end))
        })
        .collect();
    let details = instant_each(&prom, detail_queries).await?;
    for (incident, reasons) in incidents.iter_mut().zip(details) {
        fill_incident(incident, &reasons);
    }

    let bucket = trend::bucket_for(len);
    let trends = trends::trends(&prom, since, until, bucket).await?;
    let data_from = trends::data_from(&prom, since, until, step).await?;
    let probe_p95s = trends::probe_p95s(&prom, until, len).await?;

    Ok(Report {
        since,
        until,
        source: format!("Prometheus {}", prom.display),
        exact: false,
        rows,
        incidents,
        bucket,
        trends,
        data_from,
        time_zone: TimeZone::UTC,
        model_changes: Vec::new(),
        probe_p95s,
    })
}

/// A native histogram's observations over a range, per probe and location.
fn native_sum(metric: &str, range: &str) -> String {
    format!("sum by (probe, location) (increase({metric}{WARM}{range}))")
}

/// Fills each period's `fractions`: per distinct latency target, the share of each native
/// histogram's observations at or under it (none where Prometheus has classic buckets:
/// the native series is absent there). Less than half an observation counts as none, as
/// in [`attainment`].
async fn native_attainment(
    prom: &Arc<Prom>,
    at: f64,
    range: &dyn Fn(bool) -> String,
    targets: &BTreeMap<String, Targets>,
    periods: [&mut Period; 2],
) -> Result<(), PrometheusError> {
    let mut asked: Vec<(usize, bool, Duration)> = Vec::new();
    let mut queries = Vec::new();
    for (i, metric) in [TTFT, TOTAL].into_iter().enumerate() {
        let mut wanted: Vec<Duration> = targets
            .values()
            .filter_map(|t| if i == 0 { t.ttft } else { t.total })
            .collect();
        wanted.sort();
        wanted.dedup();
        for previous in [false, true] {
            let native = native_sum(metric, &range(previous));
            for &target in &wanted {
                queries.push(format!(
                    "histogram_fraction(0, {}, {native}) and histogram_count({native}) >= 0.5",
                    target.as_secs_f64()
                ));
                asked.push((i, previous, target));
            }
        }
    }
    let answers = instant_all(prom, queries, at).await?;
    let [current, before] = periods;
    for ((i, previous, target), answer) in asked.into_iter().zip(answers) {
        let period = if previous { &mut *before } else { &mut *current };
        let latency = if i == 0 {
            &mut period.ttft
        } else {
            &mut period.total
        };
        latency.fractions.insert(target, answer);
    }
    Ok(())
}

/// (probe, location).
type Key = (String, String);
/// An instant vector: each series' labels and value.
type Vector = Vec<(BTreeMap<String, String>, f64)>;
/// A range matrix: each series' labels and (unix time, value) points.
type Matrix = Vec<(BTreeMap<String, String>, Vec<(f64, f64)>)>;

fn key_of(labels: &BTreeMap<String, String>) -> Key {
    let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
    (get("probe"), get("location"))
}

struct Latency {
    /// P50, P95, P99 from `histogram_quantile`.
    quantiles: [Vector; 3],
    /// Cumulative bucket counts by `le`.
    buckets: Vector,
    /// Per target: the share of the native histogram's observations at or under it.
    fractions: BTreeMap<Duration, Vector>,
}

impl Latency {
    fn quantiles(&self, key: &Key) -> Quantiles {
        let at = |v: &Vector| {
            v.iter()
                .find(|(l, _)| &key_of(l) == key)
                .map(|(_, x)| *x)
                // NaN: no observations in the period.
                .filter(|x| x.is_finite())
        };
        Quantiles {
            p50: at(&self.quantiles[0]),
            p95: at(&self.quantiles[1]),
            p99: at(&self.quantiles[2]),
        }
    }

    fn attainment(&self, key: &Key, target: Option<Duration>) -> Option<f64> {
        let target = target?;
        let buckets: Vec<(f64, f64)> = self
            .buckets
            .iter()
            .filter(|(l, _)| &key_of(l) == key)
            .filter_map(|(l, count)| Some((parse_float(l.get("le")?)?, *count)))
            .collect();
        if buckets.is_empty() {
            return self
                .fractions
                .get(&target)?
                .iter()
                .find(|(l, _)| &key_of(l) == key)
                .map(|(_, share)| *share)
                .filter(|share| share.is_finite());
        }
        attainment(buckets, target.as_secs_f64())
    }
}

/// The runs a count takes, by their `start` label.
#[derive(Clone, Copy, PartialEq)]
enum Start {
    Any,
    /// Runs without `start="cold"`.
    Warm,
    Cold,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    success: u64,
    failure: u64,
}

struct Period {
    runs: Vector,
    ttft: Latency,
    total: Latency,
}

impl Period {
    /// Runs by result, rounded to whole runs (increase() extrapolates to the range's
    /// edges, so it returns fractions).
    fn run_counts(&self, start: Start) -> BTreeMap<Key, Counts> {
        let mut raw: BTreeMap<Key, (f64, f64)> = BTreeMap::new();
        for (labels, value) in &self.runs {
            let cold = labels.get("start").is_some_and(|s| s == "cold");
            if (start == Start::Warm && cold) || (start == Start::Cold && !cold) {
                continue;
            }
            let entry = raw.entry(key_of(labels)).or_default();
            match labels.get("result").map(String::as_str) {
                Some("failure") => entry.1 += value,
                _ => entry.0 += value,
            }
        }
        raw.into_iter()
            .map(|(k, (s, f))| {
                (
                    k,
                    Counts {
                        success: whole(s),
                        failure: whole(f),
                    },
                )
            })
            .collect()
    }

    /// Availability over `[all, warm]` runs' first, attainment over the second (the
    /// histograms read are the warm runs').
    fn summary(&self, key: &Key, [all, warm]: [&BTreeMap<Key, Counts>; 2], targets: &Targets) -> Summary {
        let c = all.get(key).copied().unwrap_or_default();
        let runs = c.success + c.failure;
        let w = warm.get(key).copied().unwrap_or_default();
        Summary {
            runs,
            failures: c.failure,
            availability: (runs > 0).then(|| c.success as f64 / runs as f64),
            ttft: self.ttft.quantiles(key),
            total: self.total.quantiles(key),
            // The histograms hold successful runs only; a failed run misses every
            // target, so the share among successes is scaled to all runs.
            ttft_attainment: all_runs(self.ttft.attainment(key, targets.ttft), targets.ttft, w),
            total_attainment: all_runs(self.total.attainment(key, targets.total), targets.total, w),
        }
    }
}

/// Attainment among successful runs (from the histograms) as a share of all runs: a
/// failed run misses every target, and a period of failures only attains nothing.
fn all_runs(among_successes: Option<f64>, target: Option<Duration>, c: Counts) -> Option<f64> {
    let runs = c.success + c.failure;
    match among_successes {
        Some(a) => Some(a * c.success as f64 / runs.max(1) as f64),
        None if target.is_some() && runs > 0 && c.success == 0 => Some(0.0),
        None => None,
    }
}

fn whole(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x.round() as u64
    } else {
        0
    }
}

/// The estimated share of observations at or under `target` from cumulative bucket
/// counts `(le, count)` (`le` may be +Inf; any order). Within the bucket holding the
/// target the observations are assumed spread evenly (linear interpolation, as
/// `histogram_quantile` does), so the estimate is off by at most that bucket's share.
/// A target at or past the last finite bound counts nothing beyond it (those
/// observations could be anything). `None` without observations.
pub fn attainment(mut buckets: Vec<(f64, f64)>, target: f64) -> Option<f64> {
    buckets.retain(|(le, c)| !le.is_nan() && c.is_finite());
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    // increase() extrapolates each bucket on its own: keep the counts cumulative.
    let mut running: f64 = 0.0;
    for b in &mut buckets {
        running = running.max(b.1);
        b.1 = running;
    }
    let total = buckets.last()?.1;
    // Less than half an observation: rounding noise from increase(), not a run.
    if total < 0.5 {
        return None;
    }
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, count) in &buckets {
        if target < le {
            if le.is_infinite() {
                return Some((below / total).clamp(0.0, 1.0));
            }
            let share = (target - lower) / (le - lower);
            return Some(((below + (count - below) * share) / total).clamp(0.0, 1.0));
        }
        (lower, below) = (le, count);
    }
    Some((below / total).clamp(0.0, 1.0))
}

/// Failing streaks in a series of `min(up)` points (time order): from the first 0 point
/// to the next 1 point (`ended`), or still open at the end (`ended: None`, lasting to
/// the last 0 point). Points are `step` apart, so times are as precise as the step. A
/// gap in the points (no agent reporting) ends a streak at its last 0 point, as what
/// happened after is unknown. Only the period is queried, so a streak that began before
/// it starts at the period's first point here (the local report, which reads the
/// previous period too, gives the real start).
pub fn streaks(
    points: &[(SystemTime, f64)],
    step: Duration,
) -> Vec<(SystemTime, Option<SystemTime>, Duration)> {
    let mut out = Vec::new();
    // (first 0 point, last 0 point)
    let mut open: Option<(SystemTime, SystemTime)> = None;
    let since = |a: SystemTime, b: SystemTime| b.duration_since(a).unwrap_or_default();
    for &(t, v) in points {
        if let Some((first, last)) = open
            && since(last, t) > step + step / 2
        {
            out.push((first, Some(last), since(first, last)));
            open = None;
        }
        if v < 0.5 {
            open = Some((open.map_or(t, |o| o.0), t));
        } else if let Some((first, _)) = open.take() {
            out.push((first, Some(t), since(first, t)));
        }
    }
    if let Some((first, last)) = open {
        out.push((first, None, since(first, last)));
    }
    out
}

fn points_in(points: &[(f64, f64)], since: SystemTime, until: SystemTime) -> Vec<(SystemTime, f64)> {
    points
        .iter()
        .filter(|(t, _)| t.is_finite() && *t >= 0.0)
        .map(|&(t, v)| (UNIX_EPOCH + Duration::from_secs_f64(t), v))
        .filter(|(t, _)| *t >= since && *t <= until)
        .collect()
}

/// failed_runs is the increase of the failure counters over the incident (at least 1:
/// the streak had a failing point), not the number of 0 points, which counts steps.
/// Reasons are those whose counter increased, most frequent first.
fn fill_incident(incident: &mut Incident, by_reason: &Vector) {
    let mut reasons: Vec<(String, u64)> = by_reason
        .iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(l, v)| (l.get("reason").cloned().unwrap_or_default(), whole(*v).max(1)))
        .collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let sum: f64 = by_reason.iter().map(|(_, v)| v.max(0.0)).sum();
    incident.failed_runs = whole(sum).max(1);
    incident.reasons = reasons;
}

/// A PromQL string literal.
fn promql_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// Prometheus writes sample values as strings: "1.5", "NaN", "+Inf".
fn parse_float(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

/// The URL with any `user:password@` removed, for messages and the report's source.
pub fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => url.rsplit_once('@').map_or(url, |(_, h)| h).to_owned(),
    }
}

async fn instant_all(
    prom: &Arc<Prom>,
    queries: Vec<String>,
    at: f64,
) -> Result<Vec<Vector>, PrometheusError> {
    instant_each(prom, queries.into_iter().map(|q| (q, at)).collect()).await
}

/// Instant queries, concurrently; answers in the order asked; the first error wins.
async fn instant_each(prom: &Arc<Prom>, queries: Vec<(String, f64)>) -> Result<Vec<Vector>, PrometheusError> {
    let mut set = tokio::task::JoinSet::new();
    let n = queries.len();
    for (i, (query, at)) in queries.into_iter().enumerate() {
        let prom = prom.clone();
        set.spawn(async move { (i, prom.instant(&query, at).await) });
    }
    let mut answers: Vec<Option<Vector>> = vec![None; n];
    while let Some(joined) = set.join_next().await {
        let (i, answer) = joined.map_err(|e| PrometheusError::Client(format!("query task failed: {e}")))?;
        answers[i] = Some(answer?);
    }
    Ok(answers.into_iter().map(Option::unwrap_or_default).collect())
}

struct Prom {
    client: reqwest::Client,
    /// The URL without credentials and without a trailing slash.
    base: reqwest::Url,
    auth: Option<(String, Option<String>)>,
    /// What messages and the report show: no credentials.
    display: String,
}

impl Prom {
    fn new(base_url: &str) -> Result<Prom, PrometheusError> {
        let display = redact(base_url).trim_end_matches('/').to_owned();
        let bad = |reason: String| PrometheusError::Url {
            url: display.clone(),
            reason,
        };
        // The one URL parser the config uses too (config/url.rs).
        let mut base = crate::config::parse_url(base_url).map_err(|e| bad(e.to_string()))?;
        // Credentials go into an Authorization header, never into a URL that could be
        // printed; userinfo is percent-encoded in a URL, so decode it.
        let auth = if base.username().is_empty() && base.password().is_none() {
            None
        } else {
            Some((
                percent_decode(base.username()),
                base.password().map(percent_decode),
            ))
        };
        let _ = base.set_username("");
        let _ = base.set_password(None);
        base.set_query(None);
        base.set_fragment(None);
        let path = base.path().trim_end_matches('/').to_owned();
        base.set_path(&path);
        let client = control_plane_client(&TlsRoots::system(), None, QUERY_TIMEOUT)
            .map_err(|e| PrometheusError::Client(e.to_string()))?;
        Ok(Prom {
            client,
            base,
            auth,
            display,
        })
    }

    async fn instant(&self, query: &str, at: f64) -> Result<Vector, PrometheusError> {
        let data = self
            .get(
                "api/v1/query",
                query,
                &[("query", query.to_owned()), ("time", format!("{at:.3}"))],
            )
            .await?;
        self.expect(query, &data, "vector")?;
        let decode = |reason: &str| self.decode(query, reason);
        data["result"]
            .as_array()
            .ok_or_else(|| decode("no result array"))?
            .iter()
            .map(|s| {
                let value = s["value"][1]
                    .as_str()
                    .and_then(parse_float)
                    .ok_or_else(|| decode("a sample without a value"))?;
                Ok((labels(&s["metric"]), value))
            })
            .collect()
    }

    async fn range(
        &self,
        query: &str,
        start: f64,
        end: f64,
        step: Duration,
    ) -> Result<Matrix, PrometheusError> {
        let params = [
            ("query", query.to_owned()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", format!("{}", step.as_secs_f64())),
        ];
        let data = self.get("api/v1/query_range", query, &params).await?;
        self.expect(query, &data, "matrix")?;
        let decode = |reason: &str| self.decode(query, reason);
        data["result"]
            .as_array()
            .ok_or_else(|| decode("no result array"))?
            .iter()
            .map(|s| {
                let points = s["values"]
                    .as_array()
                    .ok_or_else(|| decode("a series without values"))?
                    .iter()
                    .map(|p| {
                        let t = p[0].as_f64().ok_or_else(|| decode("a point without a time"))?;
                        let v = p[1]
                            .as_str()
                            .and_then(parse_float)
                            .ok_or_else(|| decode("a point without a value"))?;
                        Ok((t, v))
                    })
                    .collect::<Result<Vec<_>, PrometheusError>>()?;
                Ok((labels(&s["metric"]), points))
            })
            .collect()
    }

    /// GETs an API path; the answer's `data` when Prometheus says `success`.
    async fn get(
        &self,
        path: &str,
        query: &str,
        params: &[(&str, String)],
    ) -> Result<serde_json::Value, PrometheusError> {
        let mut url = self.base.clone();
        url.set_path(&format!("{}/{path}", self.base.path().trim_end_matches('/')));
        url.query_pairs_mut()
            .extend_pairs(params.iter().map(|(k, v)| (*k, v.as_str())));
        let mut request = self.client.get(url);
        if let Some((user, password)) = &self.auth {
            request = request.basic_auth(user, password.as_ref());
        }
        let response = request.send().await.map_err(|e| PrometheusError::Request {
            server: self.display.clone(),
            query: query.to_owned(),
            reason: describe_error(e),
        })?;
        let status = response.status().as_u16();
        if status != 200 {
            // Prometheus explains a refused query in JSON (400 bad_data, 422 execution,
            // 503 timeout); anything else (a proxy's page) is shown as text, capped.
            let body = read_capped(response).await;
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            return Err(match v["error"].as_str() {
                Some(error) => PrometheusError::Api {
                    server: self.display.clone(),
                    query: query.to_owned(),
                    status,
                    error_type: v["errorType"].as_str().unwrap_or("error").to_owned(),
                    error: error.to_owned(),
                },
                None => PrometheusError::Http {
                    server: self.display.clone(),
                    query: query.to_owned(),
                    status,
                    body: body.trim().to_owned(),
                },
            });
        }
        let mut v: serde_json::Value = response.json().await.map_err(|e| PrometheusError::Decode {
            server: self.display.clone(),
            query: query.to_owned(),
            reason: describe_error(e),
        })?;
        if v["status"] != "success" {
            return Err(PrometheusError::Api {
                server: self.display.clone(),
                query: query.to_owned(),
                status,
                error_type: v["errorType"].as_str().unwrap_or("error").to_owned(),
                error: v["error"].as_str().unwrap_or("status is not success").to_owned(),
            });
        }
        Ok(v["data"].take())
    }

    fn expect(&self, query: &str, data: &serde_json::Value, kind: &str) -> Result<(), PrometheusError> {
        match data["resultType"].as_str() {
            Some(k) if k == kind => Ok(()),
            other => Err(self.decode(query, &format!("expected a {kind}, got {other:?}"))),
        }
    }

    fn decode(&self, query: &str, reason: &str) -> PrometheusError {
        PrometheusError::Decode {
            server: self.display.clone(),
            query: query.to_owned(),
            reason: reason.to_owned(),
        }
    }
}

fn labels(metric: &serde_json::Value) -> BTreeMap<String, String> {
    metric
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attainment_interpolates_inside_the_target_bucket() {
        // 10 at or under 0.1 s, 30 at or under 0.5 s, 40 in all.
        let b = vec![(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (f64::INFINITY, 40.0)];
        assert_eq!(attainment(b.clone(), 0.1), Some(0.25));
        // Halfway through (0.1, 0.5]: 10 + 20/2 = 20 of 40.
        assert_eq!(attainment(b.clone(), 0.3), Some(0.5));
        assert_eq!(attainment(b.clone(), 0.05), Some(0.125));
        assert_eq!(attainment(b.clone(), 5.0), Some(1.0));
        assert_eq!(attainment(vec![(1.0, 0.0), (f64::INFINITY, 0.0)], 1.0), None);
        // Past the last finite bound nothing more is counted.
        assert_eq!(attainment(vec![(1.0, 1.0), (f64::INFINITY, 2.0)], 9.0), Some(0.5));
        // Extrapolation made a bucket smaller than the one before: kept cumulative.
        assert_eq!(
            attainment(vec![(0.1, 2.0), (0.5, 1.9), (f64::INFINITY, 4.0)], 0.5),
            Some(0.5)
        );
    }

    #[test]
    fn streaks_run_from_the_first_zero_to_the_next_one() {
        let t = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let step = Duration::from_secs(10);
        let p = |v: &[(u64, f64)]| v.iter().map(|&(s, x)| (t(s), x)).collect::<Vec<_>>();
        let s = streaks(&p(&[(0, 1.0), (10, 0.0), (20, 0.0), (30, 1.0), (40, 0.0)]), step);
        assert_eq!(
            s,
            vec![
                (t(10), Some(t(30)), Duration::from_secs(20)),
                (t(40), None, Duration::ZERO)
            ]
        );
        // A gap (no agent reporting) ends the streak at its last failing point.
        let s = streaks(&p(&[(0, 0.0), (10, 0.0), (60, 0.0), (70, 1.0)]), step);
        assert_eq!(
            s,
            vec![
                (t(0), Some(t(10)), Duration::from_secs(10)),
                (t(60), Some(t(70)), Duration::from_secs(10))
            ]
        );
    }

    #[test]
    fn credentials_never_reach_a_message() {
        assert_eq!(
            redact("https://u:p%40ss@prom.example:9090/x?y"),
            "https://prom.example:9090/x?y"
        );
        assert_eq!(redact("http://prom:9090"), "http://prom:9090");
        let e = Prom::new("ftp://user:secret@prom").err().unwrap().to_string();
        assert!(!e.contains("secret") && e.contains("ftp://prom"), "{e}");
        let p = Prom::new("https://me:p%40ss@prom.example/base/").unwrap();
        assert_eq!(p.display, "https://prom.example/base");
        assert_eq!(p.auth, Some(("me".into(), Some("p@ss".into()))));
        assert_eq!(p.base.as_str(), "https://prom.example/base");
    }

    #[test]
    fn label_values_are_quoted_for_promql() {
        assert_eq!(promql_string(r#"a"b\c"#), r#""a\"b\\c""#);
    }
}
