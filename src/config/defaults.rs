//! `defaults:`: values every probe inherits unless it sets its own, and the values a
//! probe has when neither says (the `DEFAULT_` constants). Each inherited value is
//! checked here, once, at its `defaults` line; a bad one is reported there and not
//! handed down.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_yaml::Value;

use super::agent::{MetricsDetail, RawMetrics};
use super::alerting::{RawAlert, RawSlo, defaults_slo};
use super::cost::{InheritedCost, RawBudget, RawCost, defaults_budget, defaults_cost};
use super::diagnostics::Diagnostics;
use super::formats::Duration as DurationText;
use super::tracing::{RawTrace, defaults_trace};
use super::values::{Labels, check_labels, duplicate_headers, duration};

/// The default run interval: often enough to page within about 90 s (3 failures), rarely
/// enough that a probe is a negligible load on the endpoint.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// Total deadline when none is configured: below the default interval, so runs never
/// overlap.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(25);

pub const DEFAULT_MAX_TOKENS: u32 = 64;

/// Cap on response bytes read per run: far above any probe answer, small enough that an
/// endless body cannot hurt the agent.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;

/// Largest response cap: 1 GiB.
pub(super) const MAX_RESPONSE_BYTES: u64 = 1 << 30;

/// Values every probe inherits unless it sets its own (each applies only to the kinds
/// it fits).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Defaults")]
pub(super) struct RawDefaults {
    /// How often each probe runs, e.g. 30s (default 30s).
    #[schemars(with = "Option<DurationText>")]
    pub(super) interval: Option<String>,
    /// The whole response must be in by then (default 25s).
    #[schemars(with = "Option<DurationText>")]
    pub(super) timeout: Option<String>,
    /// LLM kinds: the first generated token must be in by then.
    #[schemars(with = "Option<DurationText>")]
    pub(super) first_token_timeout: Option<String>,
    /// Headers sent by every probe (a probe's own headers override them by name).
    /// Values are secrets: never logged or shown.
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    /// LLM kinds: cap on generated tokens per run (default 64).
    #[schemars(range(min = 1, max = 1_000_000))]
    pub(super) max_tokens: Option<u32>,
    /// Keep connections between runs (default false: a fresh connection per run, as a
    /// new user has, so connect and TLS time are measured).
    pub(super) reuse_connections: Option<bool>,
    /// Cap on response bytes read per run (default 8 MiB).
    #[schemars(range(min = 1024, max = 1_073_741_824))]
    pub(super) max_response_bytes: Option<u64>,
    /// Static labels added to every probe's series (a probe's own labels override them).
    #[serde(default)]
    #[schemars(with = "Labels")]
    pub(super) labels: BTreeMap<String, String>,
    /// Alert rules every probe inherits, key by key.
    pub(super) alert: Option<RawAlert>,
    /// Latency and availability targets every probe inherits, key by key
    /// (`ttft_p95` only where the kind streams tokens).
    pub(super) slo: Option<RawSlo>,
    /// Which series are exposed: `{detail: basic}` (default) or `{detail: full}`.
    pub(super) metrics: Option<RawMetrics>,
    /// LLM kinds: token prices every probe inherits, key by key.
    pub(super) cost: Option<RawCost>,
    /// LLM kinds: the daily token budget every probe inherits.
    pub(super) budget: Option<RawBudget>,
    /// The W3C `traceparent` every probe sends, key by key: `{enabled: true, sampled: true}`
    /// (default).
    pub(super) trace: Option<RawTrace>,
    /// Let probes' runs overlap the agent's other runs of the same endpoint (default
    /// false: runs of one endpoint take turns). Set it where many probes share a big
    /// hosted API that serves many requests at once.
    pub(super) overlap: Option<bool>,
}

/// Per-probe values inherited from `defaults:`.
pub(super) struct Defaults {
    pub(super) interval: Option<Duration>,
    pub(super) timeout: Option<Duration>,
    pub(super) first_token_timeout: Option<Duration>,
    pub(super) headers: BTreeMap<String, String>,
    pub(super) max_tokens: u32,
    pub(super) reuse_connections: bool,
    pub(super) max_response_bytes: u64,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) alert: RawAlert,
    pub(super) slo: RawSlo,
    pub(super) metrics: Option<MetricsDetail>,
    pub(super) cost: Option<InheritedCost>,
    pub(super) budget: Option<RawBudget>,
    pub(super) trace: super::tracing::RawTrace,
    pub(super) overlap: Option<bool>,
}

pub(super) fn check_defaults(cx: &mut Diagnostics, value: Value) -> Option<Defaults> {
    let raw: RawDefaults = if value.is_null() {
        RawDefaults::default()
    } else {
        cx.section(value, "defaults", None)?
    };
    duplicate_headers(cx, None, "defaults.headers", &raw.headers);
    // Values every probe inherits are checked here, once, at their `defaults` line;
    // a bad one is reported there and not handed down.
    let max_tokens = match raw.max_tokens {
        Some(m) if !(1..=1_000_000).contains(&m) => {
            cx.error(None, "defaults.max_tokens", "must be between 1 and 1000000");
            DEFAULT_MAX_TOKENS
        }
        m => m.unwrap_or(DEFAULT_MAX_TOKENS),
    };
    let max_response_bytes = match raw.max_response_bytes {
        Some(b) if !(1024..=MAX_RESPONSE_BYTES).contains(&b) => {
            cx.error(
                None,
                "defaults.max_response_bytes",
                "must be between 1024 and 1073741824 (1 GiB)",
            );
            DEFAULT_MAX_RESPONSE_BYTES
        }
        b => b.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
    };
    // Headers too: a bad name or value is said once, not once per probe.
    let mut headers = raw.headers;
    headers.retain(|name, value| {
        let path = format!("defaults.headers.{name}");
        if cx.is_settled(&path) {
            return false;
        }
        if http::HeaderName::from_str(&name.to_ascii_lowercase()).is_err() {
            cx.error(None, &path, "not a valid HTTP header name");
            return false;
        }
        if http::HeaderValue::from_str(value).is_err() {
            // Do not echo the value: it may be a secret.
            cx.error(
                None,
                &path,
                "the value (after ${VAR} substitution) is not a valid HTTP header value",
            );
            return false;
        }
        true
    });
    check_labels(cx, None, "defaults", &raw.labels);
    let mut labels = raw.labels;
    labels.retain(|k, v| {
        let one = BTreeMap::from([(k.clone(), v.clone())]);
        cx.passes(|cx| check_labels(cx, None, "defaults", &one))
    });
    let slo = defaults_slo(cx, raw.slo.unwrap_or_default());
    let cost = raw.cost.map(|c| defaults_cost(cx, c));
    let budget = raw.budget.map(|b| defaults_budget(cx, Some(b)));
    let trace = defaults_trace(cx, raw.trace.unwrap_or_default(), &headers);
    Some(Defaults {
        interval: raw
            .interval
            .and_then(|s| duration(cx, None, "defaults.interval", &s)),
        timeout: raw
            .timeout
            .and_then(|s| duration(cx, None, "defaults.timeout", &s)),
        first_token_timeout: raw
            .first_token_timeout
            .and_then(|s| duration(cx, None, "defaults.first_token_timeout", &s)),
        headers,
        max_tokens,
        reuse_connections: raw.reuse_connections.unwrap_or(false),
        max_response_bytes,
        labels,
        alert: raw.alert.unwrap_or_default(),
        slo,
        metrics: raw.metrics.and_then(|m| m.detail),
        cost,
        budget,
        trace,
        overlap: raw.overlap,
    })
}
