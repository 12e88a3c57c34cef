//! The checks every probe gets, whatever its kind: name, URL, model, schedule, timeouts,
//! headers, `expect`, labels, limits, TLS, alerting and SLOs, into a [`ProbeConfig`].
//! The keys a kind takes of its own are set aside first ([`split_own_keys`]) and go to
//! the kind alone (`probe::kinds::check_spec`), which makes [`ProbeConfig::spec`]; a
//! key of another kind is refused with the kinds that take it (`only for kind http`).
//!
//! Errors print sorted by (line, column, key), so the order of the checks here does not
//! show: move them freely.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::agent::{MetricsDetail, RawMetrics};
use super::alerting::{AlertConfig, Slo};
use super::alerting::{RawAlert, RawSlo, alert, slo};
use super::content::{Images, RawImages, images};
use super::cost::{Cost, TokenBudget};
use super::cost::{RawBudget, RawCost, probe_budget, probe_cost};
use super::defaults::{
    DEFAULT_INTERVAL, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT, Defaults,
    MAX_RESPONSE_BYTES,
};
use super::diagnostics::{Diagnostics, field_names};
use super::expect::Expect;
use super::expect::{RawExpect, probe_expect};
use super::formats::{Duration as DurationText, Name, schema_type};
use super::own_keys::split_own_keys;
use super::prompts::{Prompts, RawPrompts, prompts};
use super::routes::{ProbeFacts, Routes};
use super::sharing::Sections;
use super::tls::TlsConfig;
use super::tls::{RawTls, probe_tls};
use super::tracing::TraceConfig;
use super::tracing::{RawTrace, probe_trace};
use super::traffic::Traffic;
use super::traffic::{RawCold, RawTraffic, check_traffic};
use super::values::{
    Labels, Secret, check_labels, duplicate_headers, duration, fmt_duration, url, valid_label_value,
};
use crate::probe::kinds::{self, Kind, KindSpec};

/// The checks of one probe. `kind` is `None` when the file's kind is not known (see
/// [`Diagnostics::read_kind`]): then the keys every kind has (name, URL, schedule,
/// labels, alerting...) are checked and the kind's own skipped. `own` is the mapping of
/// the kind's own keys ([`split_own_keys`]), handed to the kind's check.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_probe(
    cx: &mut Diagnostics,
    sections: &mut Sections,
    raw: RawProbe,
    kind: Option<Kind>,
    own: Value,
    prefix: &str,
    defaults: Option<&Defaults>,
    receivers: &[String],
    routes: Option<&mut Routes>,
) -> Option<ProbeConfig> {
    let errors_before = cx.error_count();
    let name = raw.name.clone();
    let p = Some(name.as_str());
    let key = |k: &str| format!("{prefix}.{k}");

    check_name(cx, prefix, &name);

    let url = url(cx, p, &key("url"), &raw.url);

    let model = raw.model.filter(|m| !m.trim().is_empty());
    if let Some(kind) = kind.filter(|k| k.needs_model())
        && model.is_none()
    {
        cx.error(
            p,
            &key("model"),
            format!("`model` is required for kind {}", kind.as_str()),
        );
    }

    let schedule = probe_schedule(cx, p, prefix, &raw.interval, &raw.schedule, defaults);

    // A burst run sends twice, one after the other (alone, then the burst).
    let rounds = if raw.burst.is_some() { 2 } else { 1 };
    let (timeout, first_token_timeout) = probe_timeouts(
        cx,
        p,
        prefix,
        &raw.timeout,
        &raw.first_token_timeout,
        defaults,
        schedule.as_ref(),
        rounds,
    );
    let traffic = check_traffic(
        cx,
        p,
        prefix,
        RawTraffic {
            overlap: raw.overlap,
            server: raw.server,
            cold: raw.cold,
            burst: raw.burst,
            warmup: raw.warmup,
        },
        defaults.and_then(|d| d.overlap),
        schedule.as_ref().and_then(Schedule::shortest_gap),
        timeout,
    );

    let headers = probe_headers(cx, p, prefix, &raw.headers, defaults);
    let trace = probe_trace(
        cx,
        p,
        prefix,
        raw.trace,
        defaults.map(|d| (d.trace, &d.headers)),
        &raw.headers,
    );

    // Prompts and max_tokens are the LLM kinds' keys, handed to their check below, but
    // checked here, in file order, so that a misplaced `prompts` reads before the
    // problems found after it. `defaults.max_tokens` was checked at its own line.
    let prompts = kind.and_then(|kind| prompts(cx, p, prefix, kind, raw.prompts));

    let max_tokens = raw
        .max_tokens
        .or(defaults.map(|d| d.max_tokens))
        .unwrap_or(DEFAULT_MAX_TOKENS);
    if !(1..=1_000_000).contains(&max_tokens) {
        cx.error(p, &key("max_tokens"), "must be between 1 and 1000000");
    }

    let temperature = temperature(cx, p, &key("temperature"), kind, raw.temperature);

    let expect = probe_expect(cx, p, prefix, kind, raw.expect);

    let mut labels: BTreeMap<String, String> = defaults.map(|d| d.labels.clone()).unwrap_or_default();
    labels.extend(raw.labels);
    check_labels(cx, p, prefix, &labels);

    let max_response_bytes = raw
        .max_response_bytes
        .or(defaults.map(|d| d.max_response_bytes))
        .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES);
    if !(1024..=MAX_RESPONSE_BYTES).contains(&max_response_bytes) {
        cx.error(
            p,
            &key("max_response_bytes"),
            "must be between 1024 and 1073741824 (1 GiB)",
        );
    }

    let tls = probe_tls(cx, p, prefix, raw.tls);

    // The images the probe sends, if its kind takes them ([`Kind::takes_images`]).
    let images = kind.and_then(|kind| raw.images.and_then(|i| images(cx, p, prefix, kind, i)));

    // The kind's own keys, read and checked by the kind's own file (probe/kinds.rs
    // dispatches); not for a kind that is not known.
    let spec = kind.and_then(|kind| {
        let common = Common {
            probe: p,
            prefix,
            kind,
            url: url.as_ref(),
            prompts,
            max_tokens,
            temperature,
            images,
        };
        kinds::check_spec(cx, common, own)
    });

    let no_alert = RawAlert::default();
    let raw_alert = raw
        .alert
        .unwrap_or_default()
        .over(defaults.map_or(&no_alert, |d| &d.alert));
    let listed = raw_alert.lists_receivers();
    let mut alert = alert(cx, p, prefix, raw_alert, receivers);
    let reuse_connections = raw
        .reuse_connections
        .or(defaults.map(|d| d.reuse_connections))
        .unwrap_or(false);
    if reuse_connections && traffic.burst.is_some() {
        cx.error(
            p,
            &key("burst"),
            "does not go with reuse_connections: the first request of the burst would reuse the lone one's connection and the others would open theirs, which spreads their times",
        );
    }
    let (slo, cost) = slo_and_cost(cx, p, prefix, kind, raw.slo, raw.cost, defaults);
    if let Some(s) = &slo
        && s.burst_spread_pct.is_some()
        && traffic.burst.is_none()
    {
        cx.error(
            p,
            &key("slo.burst_spread"),
            "only for burst probes (`burst: N`): it judges the spread of one burst",
        );
    }
    if let (Some(routes), Some(alert), Some(slo), false) = (routes, alert.as_mut(), slo.as_ref(), listed) {
        let probe = ProbeFacts {
            name: &name,
            kind,
            labels: &labels,
        };
        routes.route_probe(cx, prefix, &probe, alert, slo);
    }
    let budget = probe_budget(
        cx,
        p,
        prefix,
        kind,
        matches!(schedule, Some(Schedule::Cron { .. })),
        raw.budget,
        defaults.and_then(|d| d.budget.as_ref()),
    );

    if cx.error_count() > errors_before {
        return None;
    }
    Some(ProbeConfig {
        name: name.into(),
        kind: kind?,
        url: url?,
        model,
        schedule: schedule?,
        timeout: timeout?,
        first_token_timeout: first_token_timeout?,
        headers,
        spec: spec?,
        expect: sections.expect.share(expect),
        labels: labels.into_iter().collect(),
        reuse_connections,
        max_response_bytes,
        tls: sections.tls.share(tls),
        alert: sections.alert.share(alert?),
        slo: sections.slo.share(slo?),
        metrics: raw
            .metrics
            .and_then(|m| m.detail)
            .or(defaults.and_then(|d| d.metrics))
            .unwrap_or_default(),
        cost: cost.map(|c| sections.cost.share(c)),
        budget,
        trace,
        traffic,
    })
}

/// A probe's name, the `probe` label.
pub(super) fn check_name(cx: &mut Diagnostics, prefix: &str, name: &str) {
    if !valid_label_value(name) {
        cx.error(
            Some(name),
            &format!("{prefix}.name"),
            "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
        );
    }
}

/// A probe's SLO targets and token prices, each over `defaults:`'s: what the report
/// reads of a probe besides its name, checked in one place for the agent and the report
/// (report_view.rs), so both say the same of them.
pub(super) fn slo_and_cost(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    kind: Option<Kind>,
    raw_slo: Option<RawSlo>,
    raw_cost: Option<RawCost>,
    defaults: Option<&Defaults>,
) -> (Option<Slo>, Option<Cost>) {
    let no_slo = RawSlo::default();
    let raw_slo = raw_slo.unwrap_or_default().over(
        defaults.map_or(&no_slo, |d| &d.slo),
        kind.is_none_or(Kind::is_llm),
    );
    let slo = slo(cx, p, prefix, raw_slo);
    if let Some(s) = &slo
        && s.ttft_p95.is_some()
        && kind.is_some_and(|k| !k.is_llm())
    {
        cx.error(
            p,
            &format!("{prefix}.slo.ttft_p95"),
            "only for LLM kinds; use total_p95",
        );
    }
    let cost = probe_cost(
        cx,
        p,
        prefix,
        kind,
        raw_cost,
        defaults.and_then(|d| d.cost.as_ref()),
    );
    (slo, cost)
}

/// `interval` or `schedule` (cron), never both; the default interval otherwise.
fn probe_schedule(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    raw_interval: &Option<String>,
    raw_schedule: &Option<String>,
    defaults: Option<&Defaults>,
) -> Option<Schedule> {
    let key = |k: &str| format!("{prefix}.{k}");
    match (raw_interval, raw_schedule) {
        (Some(_), Some(_)) => {
            cx.error(
                p,
                &key("schedule"),
                "set either `interval` or `schedule`, not both",
            );
            None
        }
        (None, Some(expr)) => match cron::Schedule::from_str(expr) {
            Ok(s) => match cron_never_fires(&s, chrono::Utc::now()) {
                Some(why) => {
                    cx.error(p, &key("schedule"), format!("`{expr}` {why}"));
                    None
                }
                None => Some(Schedule::Cron {
                    expr: expr.clone(),
                    schedule: Box::new(s),
                }),
            },
            Err(_) => {
                let fields = expr.split_whitespace().count();
                let hint = if fields == 5 {
                    format!("5 fields; add a seconds field first, e.g. `0 {expr}`")
                } else {
                    "6 or 7 fields, seconds first, e.g. `0/30 * * * * *`".to_owned()
                };
                cx.error(
                    p,
                    &key("schedule"),
                    format!("invalid cron expression `{expr}` ({hint})"),
                );
                None
            }
        },
        (Some(s), None) => duration(cx, p, &key("interval"), s).and_then(|d| {
            if d < Duration::from_secs(1) {
                cx.error(p, &key("interval"), "must be at least 1s");
                None
            } else {
                Some(Schedule::Interval(d))
            }
        }),
        (None, None) => Some(Schedule::Interval(
            defaults.and_then(|d| d.interval).unwrap_or(DEFAULT_INTERVAL),
        )),
    }
}

/// `timeout` and `first_token_timeout`: an explicit timeout longer than the interval
/// is an error (runs would be skipped); an inherited one is clamped to the interval.
/// `rounds` is how many requests one run sends one after another, each within the
/// timeout (two for a burst probe): they share the interval.
#[allow(clippy::too_many_arguments)]
fn probe_timeouts(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    raw_timeout: &Option<String>,
    raw_first_token_timeout: &Option<String>,
    defaults: Option<&Defaults>,
    schedule: Option<&Schedule>,
    rounds: u32,
) -> (Option<Duration>, Option<Duration>) {
    let key = |k: &str| format!("{prefix}.{k}");
    // A bad `interval` (reported already, and set aside) is not compared with.
    let interval = match schedule {
        Some(Schedule::Interval(d)) if !cx.is_settled(&key("interval")) => Some(*d),
        _ => None,
    };
    let timeout = match raw_timeout {
        Some(s) => duration(cx, p, &key("timeout"), s).and_then(|t| match interval {
            Some(i) if rounds > 1 && t * rounds > i => {
                cx.error(
                    p,
                    &key("timeout"),
                    format!(
                        "a burst run sends twice (alone, then the burst), each within the timeout: {} twice is longer than the interval ({})",
                        fmt_duration(t),
                        fmt_duration(i)
                    ),
                );
                None
            }
            Some(i) if t > i => {
                cx.error(
                    p,
                    &key("timeout"),
                    format!(
                        "{} is longer than the interval ({}); runs would overlap",
                        fmt_duration(t),
                        fmt_duration(i)
                    ),
                );
                None
            }
            _ => Some(t),
        }),
        None if cx.is_settled(&key("timeout")) => None,
        None => {
            let t = defaults.and_then(|d| d.timeout).unwrap_or(DEFAULT_TIMEOUT);
            Some(interval.map_or(t, |i| t.min(i / rounds)))
        }
    };
    let first_token_timeout = match raw_first_token_timeout {
        Some(s) => duration(cx, p, &key("first_token_timeout"), s).and_then(|f| match timeout {
            Some(t) if f > t => {
                cx.error(
                    p,
                    &key("first_token_timeout"),
                    format!(
                        "{} is longer than the timeout ({})",
                        fmt_duration(f),
                        fmt_duration(t)
                    ),
                );
                None
            }
            _ => Some(f),
        }),
        None => {
            let t = timeout.unwrap_or(DEFAULT_TIMEOUT);
            Some(
                defaults
                    .and_then(|d| d.first_token_timeout)
                    .map_or(t, |f| f.min(t)),
            )
        }
    };
    (timeout, first_token_timeout)
}

/// Headers: defaults first, the probe's own override by name (case-insensitive).
fn probe_headers(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    raw_headers: &BTreeMap<String, String>,
    defaults: Option<&Defaults>,
) -> Vec<(http::HeaderName, Secret)> {
    let key = |k: &str| format!("{prefix}.{k}");
    duplicate_headers(cx, p, &key("headers"), raw_headers);
    let mut merged: BTreeMap<String, (String, String)> = BTreeMap::new();
    if let Some(d) = defaults {
        for (k, v) in &d.headers {
            merged.insert(
                k.to_ascii_lowercase(),
                (format!("defaults.headers.{k}"), v.clone()),
            );
        }
    }
    for (k, v) in raw_headers {
        merged.insert(k.to_ascii_lowercase(), (key(&format!("headers.{k}")), v.clone()));
    }
    let mut headers = Vec::new();
    for (name_lc, (path, value)) in merged {
        let Ok(header) = http::HeaderName::from_str(&name_lc) else {
            cx.error(p, &path, "not a valid HTTP header name");
            continue;
        };
        if http::HeaderValue::from_str(&value).is_err() {
            // Do not echo the value: it may be a secret.
            cx.error(
                p,
                &path,
                "the value (after ${VAR} substitution) is not a valid HTTP header value",
            );
            continue;
        }
        headers.push((header, Secret::new(value)));
    }
    headers
}

/// A cron schedule must fire within this long: one that does not (`0 0 0 30 2 *`, 30
/// February) is accepted by the cron grammar, and its probe would show NO DATA forever.
pub(super) const CRON_HORIZON_DAYS: i64 = 5 * 366;

/// Why a cron schedule is useless, if it is: no occurrence within [`CRON_HORIZON_DAYS`].
pub(super) fn cron_never_fires(
    schedule: &cron::Schedule,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<String> {
    let horizon = now + chrono::TimeDelta::days(CRON_HORIZON_DAYS);
    match schedule.after(&now).next() {
        Some(t) if t <= horizon => None,
        Some(t) => Some(format!(
            "first fires on {}, more than 5 years from now; the probe would show no data until then",
            t.format("%Y-%m-%d")
        )),
        None => Some(
            "never fires: no date from now on matches it (30 February, a year gone by), so the probe would never run"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    /// Errors print in the order of (line, column, key), so that one position's errors
    /// do not depend on which check ran first: here, where a probe starts (a flow
    /// mapping's first key, and where absent keys are reported), the kind's own checks
    /// and the common ones sort by key. A key refused for the kind is only refused: the
    /// kind that takes it does not also judge it.
    #[test]
    fn errors_at_one_position_sort_by_key() {
        let text = "defaults:\n  max_tokens: 0\n  labels: {kind: x}\nprobes:\n  - {prompts: {builtin: [short]}, name: a, kind: kserve_v2, url: \"http://h/v2/models/m/infer\"}\n  - {images: {files: []}, name: b, kind: http, url: \"http://h/x\", ready_check: true}\n";
        let errors = super::super::parse(text, std::path::Path::new("t.yaml"), &|_| None).unwrap_err();
        let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                // A bad inherited value is reported once, at its `defaults` line.
                "t.yaml:2:15: defaults.max_tokens: must be between 1 and 1000000",
                "t.yaml:3:18: defaults.labels.kind: `kind` is set by inferprobe itself; choose another name",
                "t.yaml:5:6: probe \"a\": probes[0].input: kind kserve_v2 needs an `input` tensor",
                "t.yaml:5:6: probe \"a\": probes[0].prompts: only for LLM kinds; use `body` for http",
                "t.yaml:6:6: probe \"b\": probes[1].images: an empty list of images",
                "t.yaml:6:80: probe \"b\": probes[1].ready_check: only for kinds kserve_v2 and kserve_v2_grpc",
            ]
        );
    }
}
/// One validated probe.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    /// Shared by everything that keeps per-probe state, by name (see
    /// [`crate::outcome::ProbeIdentity::name`]).
    pub name: Arc<str>,
    pub kind: Kind,
    /// The full URL with any query string; may hold secrets, see [`display_url`].
    pub url: http::Uri,
    pub model: Option<String>,
    pub schedule: Schedule,
    pub timeout: Duration,
    pub first_token_timeout: Duration,
    pub headers: Vec<(http::HeaderName, Secret)>,
    /// What the kind's own keys became (prompts, a body, a tensor, ...): one variant per
    /// kind's module, each defined in that file. Always the variant of `kind`'s module
    /// (the check builds both from the same `kind:`); the three OpenAI kinds share one,
    /// and `kind` says which API.
    pub spec: KindSpec,
    /// This and the other sections probes mostly share (`tls`, `alert`, `slo`, `cost`)
    /// are held once for all probes with equal ones (sharing.rs).
    pub expect: Arc<Expect>,
    /// Sorted by key.
    pub labels: Vec<(String, String)>,
    pub reuse_connections: bool,
    pub max_response_bytes: u64,
    pub tls: Arc<TlsConfig>,
    pub alert: Arc<AlertConfig>,
    pub slo: Arc<Slo>,
    /// Which series the probe exposes: its own `metrics.detail`, else `defaults`', else
    /// the agent's.
    pub metrics: MetricsDetail,
    /// LLM kinds: what its tokens cost (its own `cost`, over `defaults.cost`).
    pub cost: Option<Arc<Cost>>,
    /// LLM kinds on an interval: its daily token budget.
    pub budget: Option<TokenBudget>,
    /// `trace`: the W3C `traceparent` each run sends (on unless turned off).
    pub trace: TraceConfig,
    /// How its requests meet the endpoint: taking turns, cold runs, bursts, warm-up.
    pub traffic: Traffic,
}

/// When a probe runs.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Every `Duration`, on a grid (see schedule.rs).
    Interval(Duration),
    /// On a 6- or 7-field cron expression (seconds first), in UTC.
    Cron {
        expr: String,
        schedule: Box<cron::Schedule>,
    },
}

impl Schedule {
    /// The shortest time between two runs: the interval, or the smallest gap among a
    /// cron schedule's next fires.
    pub fn shortest_gap(&self) -> Option<Duration> {
        match self {
            Schedule::Interval(p) => Some(*p),
            Schedule::Cron { schedule, .. } => {
                let fires: Vec<_> = schedule.upcoming(chrono::Utc).take(64).collect();
                fires.windows(2).filter_map(|w| (w[1] - w[0]).to_std().ok()).min()
            }
        }
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Schedule::Interval(a), Schedule::Interval(b)) => a == b,
            (Schedule::Cron { expr: a, .. }, Schedule::Cron { expr: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// The URL as it may be shown in logs, the API and pages: scheme, host, port and path,
/// without user info or query string (either may carry an API key).
pub fn display_url(url: &http::Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("http");
    let host = url.host().unwrap_or("");
    let port = url.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{scheme}://{host}{port}{}", url.path())
}

/// One endpoint to watch: what to send, how often, and what counts as success.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Probe", transform = super::schema::kind_rules)]
pub(super) struct RawProbe {
    /// Unique name, the `probe` label: 1-64 letters, digits, `_`, `-` or `.`.
    #[schemars(with = "Name")]
    pub(super) name: String,
    /// The API the endpoint speaks: vLLM, SGLang and LM Studio serve openai_chat.
    // Read before the rest, by `Diagnostics::read_kind`; here for serde and the schema.
    #[allow(dead_code)]
    pub(super) kind: Kind,
    /// The full URL to call, e.g. http://127.0.0.1:8000/v1/chat/completions.
    pub(super) url: String,
    /// The model to ask for; required for LLM kinds (for kserve_v2 and http, a label).
    pub(super) model: Option<String>,
    /// How often to run, e.g. 30s, 5m (default: defaults.interval, else 30s).
    #[schemars(with = "Option<DurationText>")]
    pub(super) interval: Option<String>,
    /// Run on a cron schedule instead of an interval: 6 or 7 fields, seconds first, UTC
    /// (e.g. "0 */5 * * * *").
    pub(super) schedule: Option<String>,
    /// The whole response must be in by then (at most the interval; default 25s).
    #[schemars(with = "Option<DurationText>")]
    pub(super) timeout: Option<String>,
    /// LLM kinds: the first generated token must be in by then.
    #[schemars(with = "Option<DurationText>")]
    pub(super) first_token_timeout: Option<String>,
    /// Request headers, e.g. Authorization: "Bearer ${API_KEY}". Values are secrets:
    /// never logged or shown.
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    /// LLM kinds: what to ask. A list of prompts, or `builtin` length buckets, `inline`
    /// prompts or a `file` (default: all built-in buckets).
    pub(super) prompts: Option<RawPrompts>,
    /// LLM kinds: cap on generated tokens per run (default: defaults.max_tokens, else 64).
    #[schemars(range(min = 1, max = 1_000_000))]
    pub(super) max_tokens: Option<u32>,
    /// LLM kinds: the sampling temperature sent (0 to 2), or `server` to send none
    /// (models that refuse the field: OpenAI's reasoning models). Default: 0 for runs
    /// whose answer is checked (canaries, a prompt's `expect`, tools, response_format),
    /// none for the others.
    #[schemars(with = "Option<TemperatureKey>")]
    pub(super) temperature: Option<serde_yaml::Value>,
    /// What a run must show to count as a success, beyond a complete, well-formed
    /// response.
    pub(super) expect: Option<RawExpect>,
    /// Static, low-cardinality labels of your own (a team, a tier), added to every series.
    #[serde(default)]
    #[schemars(with = "Labels")]
    pub(super) labels: BTreeMap<String, String>,
    /// Keep connections between runs (default false: a fresh one per run, so connect
    /// and TLS time are measured).
    pub(super) reuse_connections: Option<bool>,
    /// Cap on response bytes read per run (default 8 MiB).
    #[schemars(range(min = 1024, max = 1_073_741_824))]
    pub(super) max_response_bytes: Option<u64>,
    /// TLS settings for this endpoint: a private CA, the server name to verify.
    pub(super) tls: Option<RawTls>,
    /// Vision kinds, kserve_v2 and http: images sent with each run. A list of built-in
    /// names or files, or a mapping with `builtin` and/or `files`.
    pub(super) images: Option<RawImages>,
    /// When this probe pages: thresholds, severity, receivers (over defaults.alert).
    pub(super) alert: Option<RawAlert>,
    /// Latency and availability targets (over defaults.slo).
    pub(super) slo: Option<RawSlo>,
    /// Which series are exposed: `{detail: basic}` (default) or `{detail: full}`.
    pub(super) metrics: Option<RawMetrics>,
    /// LLM kinds: what its tokens cost, `{input_per_million, output_per_million,
    /// currency}` (over defaults.cost), for the report.
    pub(super) cost: Option<RawCost>,
    /// LLM kinds: `{tokens_per_day: N}` (over defaults.budget): over it the agent warns
    /// and stretches the interval.
    pub(super) budget: Option<RawBudget>,
    /// The W3C `traceparent` each run sends (over defaults.trace): `{enabled: true,
    /// sampled: true}` (default).
    pub(super) trace: Option<RawTrace>,
    /// Let this probe's runs overlap this agent's other runs of the same endpoint
    /// (scheme, host and port). Default false (over defaults.overlap): they take turns,
    /// so on a server with one slot no probe measures another's queue.
    pub(super) overlap: Option<bool>,
    /// A name for the server this probe's requests reach, when other probes reach it
    /// by another URL (a gateway and a direct address, a gRPC port beside an HTTP
    /// one): probes with one `server` take turns and share cold holds and restarts as
    /// one endpoint. Default: the URL's scheme, host and port.
    pub(super) server: Option<String>,
    /// A cold probe: `{idle: 6m}` runs only once the endpoint has had no request from
    /// this agent for that long, and shows what the first user after a quiet spell sees.
    pub(super) cold: Option<RawCold>,
    /// Send this many identical requests together each run (2-16), after one sent
    /// alone: the spread of their times shows queueing. Each of the two rounds has
    /// the whole timeout.
    #[schemars(range(min = 2, max = 16))]
    pub(super) burst: Option<u32>,
    /// How long after the endpoint restarts (or changes its model) its runs are marked
    /// as warm-up (default 5m).
    #[schemars(with = "Option<DurationText>")]
    pub(super) warmup: Option<String>,
}

impl RawProbe {
    /// The keys every probe has, whatever its kind: the others are its kind's.
    pub(super) fn keys() -> &'static [&'static str] {
        field_names::<RawProbe>()
    }
}

/// What the checks of the keys every probe has made, handed to the kind's own check with
/// the kind's own keys ([`KindKeys`]).
pub(crate) struct Common<'a> {
    pub probe: Option<&'a str>,
    /// The probe's key path, `probes[i]`.
    pub prefix: &'a str,
    pub kind: Kind,
    /// The probe's URL, if it was valid.
    pub url: Option<&'a http::Uri>,
    /// `None` after an error, or for a kind that does not take prompts.
    pub prompts: Option<Prompts>,
    pub max_tokens: u32,
    pub temperature: Temperature,
    /// `None` when the probe sends none, or they had a problem.
    pub images: Option<Images>,
}

/// A probe's keys as its kind's check receives them: what every probe has, checked
/// ([`Common`]), and the kind's own keys `K`, read from the file by the kind's serde
/// shape (the `Keys` struct of `probe/<kind>.rs`).
pub(crate) struct KindKeys<'a, K> {
    pub common: Common<'a>,
    pub own: K,
}

impl<K> KindKeys<'_, K> {
    /// The path of the probe's key `name`, for a message about it.
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.common.prefix)
    }

    /// An error about the probe's key `name`.
    pub(crate) fn error(&self, cx: &mut Diagnostics, name: &str, message: impl Into<String>) {
        cx.error(self.common.probe, &self.key(name), message);
    }

    /// A warning about the probe's key `name`.
    pub(crate) fn warn(&self, cx: &mut Diagnostics, name: &str, message: impl Into<String>) {
        cx.warn(self.common.probe, &self.key(name), message);
    }
}

/// Takes the keys of `probe` (a probe's mapping) that are not the keys every probe has
/// ([`RawProbe`]) out of it, for its kind's own check (see [`split_own_keys`]).
pub(super) fn own_keys_of_probe(
    cx: &mut Diagnostics,
    probe: &mut Value,
    prefix: &str,
    name: Option<&str>,
    kind: Option<Kind>,
) -> Value {
    split_own_keys(cx, probe, RawProbe::keys(), prefix, name, kind)
}

/// `temperature`: what LLM kinds send as the sampling temperature.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Temperature {
    /// 0 for runs whose answer is checked, none for the others.
    #[default]
    ForChecks,
    /// This one, every run.
    Fixed(f32),
    /// Never sent: the server's (or model's) own.
    Server,
}

schema_type!(
    /// `temperature`: a number from 0 to 2, or `server`.
    TemperatureKey,
    schemars::json_schema!({
        "oneOf": [
            {"type": "number", "minimum": 0, "maximum": 2},
            {"const": "server", "description": "Send no temperature: the server's own."},
        ],
    })
);

fn temperature(
    cx: &mut Diagnostics,
    p: Option<&str>,
    key: &str,
    kind: Option<Kind>,
    raw: Option<serde_yaml::Value>,
) -> Temperature {
    let Some(raw) = raw else {
        return Temperature::ForChecks;
    };
    if kind.is_some_and(|k| !k.is_llm()) {
        cx.error(p, key, "only for LLM kinds");
        return Temperature::ForChecks;
    }
    match &raw {
        serde_yaml::Value::Number(n) => match n.as_f64() {
            Some(t) if (0.0..=2.0).contains(&t) => Temperature::Fixed(t as f32),
            _ => {
                cx.error(p, key, "must be between 0 and 2, or `server`");
                Temperature::ForChecks
            }
        },
        serde_yaml::Value::String(s) if s == "server" => Temperature::Server,
        _ => {
            cx.error(p, key, "a number from 0 to 2, or `server` to send none");
            Temperature::ForChecks
        }
    }
}
