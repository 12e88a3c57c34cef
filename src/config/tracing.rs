//! Traces: `trace:` (defaults or a probe), the W3C `traceparent` every run sends, and
//! `agent.tracing`, the optional OTLP/HTTP export of each run as a client span.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::diagnostics::Diagnostics;
use super::values::{Secret, secret_headers, secret_url};

/// The request header a traced run sets; a user header of that name would fight it.
const TRACEPARENT: &str = "traceparent";

/// `trace`: whether each run sends a fresh W3C `traceparent`, and the sampled flag in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceConfig {
    pub enabled: bool,
    pub sampled: bool,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            enabled: true,
            sampled: true,
        }
    }
}

/// `agent.tracing`: where runs are exported as spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingConfig {
    /// The OTLP/HTTP traces URL (`/v1/traces` added to a bare host); may carry
    /// credentials, so never shown: `host` is.
    pub otlp_endpoint: Secret,
    pub host: String,
    /// Sent with each export (a collector's API key); values are secrets.
    pub headers: Vec<(http::HeaderName, Secret)>,
}

/// The W3C trace context each run sends (`traceparent`), so the server's trace of the
/// request can be found from the run's result, log line, status page and page.
#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Trace")]
pub(super) struct RawTrace {
    /// Send a fresh `traceparent` (random trace and span ids) with every run
    /// (default true). Turn it off to send a `traceparent` header of your own.
    pub(super) enabled: Option<bool>,
    /// The sampled flag of the `traceparent`: asks servers that follow their caller's
    /// decision to record the run's trace (default true).
    pub(super) sampled: Option<bool>,
}

impl RawTrace {
    /// This one's keys over `base`'s, key by key.
    pub(super) fn over(self, base: RawTrace) -> RawTrace {
        RawTrace {
            enabled: self.enabled.or(base.enabled),
            sampled: self.sampled.or(base.sampled),
        }
    }

    fn resolve(self) -> TraceConfig {
        let d = TraceConfig::default();
        TraceConfig {
            enabled: self.enabled.unwrap_or(d.enabled),
            sampled: self.sampled.unwrap_or(d.sampled),
        }
    }
}

/// Export each run as one OTLP client span (off unless `otlp_endpoint` is set).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Tracing")]
pub(super) struct RawTracing {
    /// An OTLP/HTTP (protobuf) traces URL, e.g. http://otel-collector:4318/v1/traces
    /// (`/v1/traces` is added to a URL without a path). May carry credentials: never shown.
    otlp_endpoint: String,
    /// Headers sent with each export (e.g. a vendor's API key). Values are secrets.
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// `agent.tracing`.
pub(super) fn tracing(cx: &mut Diagnostics, raw: RawTracing) -> Option<TracingConfig> {
    let before = cx.errors.len();
    let url = secret_url(cx, "agent.tracing.otlp_endpoint", &raw.otlp_endpoint);
    let headers = secret_headers(cx, None, "agent.tracing.headers", &raw.headers);
    if cx.errors.len() > before {
        return None;
    }
    let url = url?;
    let text = url.to_string();
    // As OTEL_EXPORTER_OTLP_ENDPOINT: a bare collector address gets the signal's path.
    let text = match url.path() {
        "" | "/" => format!("{}/v1/traces", text.trim_end_matches('/')),
        _ => text,
    };
    Some(TracingConfig {
        host: url.host().unwrap_or_default().to_owned(),
        otlp_endpoint: Secret::new(text),
        headers,
    })
}

/// `defaults.trace`: a `traceparent` in `defaults.headers` while the default is to
/// trace is said once, here.
pub(super) fn defaults_trace(
    cx: &mut Diagnostics,
    raw: RawTrace,
    headers: &BTreeMap<String, String>,
) -> RawTrace {
    if raw.resolve().enabled
        && let Some(name) = headers.keys().find(|k| k.eq_ignore_ascii_case(TRACEPARENT))
    {
        cx.error(None, &format!("defaults.headers.{name}"), conflict());
    }
    raw
}

/// A probe's `trace` over `defaults.trace`. A `traceparent` header of the probe's
/// own while it traces is an error: a fixed header would give every run the same
/// trace, and silently dropping it would surprise whoever wrote it.
pub(super) fn probe_trace(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    raw: Option<RawTrace>,
    defaults: Option<(RawTrace, &BTreeMap<String, String>)>,
    headers: &BTreeMap<String, String>,
) -> TraceConfig {
    let base = defaults.map(|d| d.0).unwrap_or_default();
    let trace = raw.unwrap_or_default().over(base).resolve();
    if !trace.enabled {
        return trace;
    }
    let own = |h: &BTreeMap<String, String>| h.keys().find(|k| k.eq_ignore_ascii_case(TRACEPARENT)).cloned();
    if let Some(name) = own(headers) {
        cx.error(p, &format!("{prefix}.headers.{name}"), conflict());
    } else if let Some((d, h)) = defaults
        && !d.resolve().enabled
        && own(h).is_some()
    {
        // defaults send their own traceparent and do not trace; this probe traces.
        cx.error(p, &format!("{prefix}.trace.enabled"), conflict());
    }
    trace
}

fn conflict() -> &'static str {
    "`traceparent` is set by inferprobe, a fresh trace for every run; to send your own, set `trace: {enabled: false}`"
}
