//! `agent:`: where this agent runs, listens and keeps its state, with `history`,
//! `metrics`, `remote_write` and `tracing` (the last two in their own files).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_yaml::Value;

use super::diagnostics::Diagnostics;
use super::formats::{Duration as DurationText, Name};
use super::remote_write::{RawRemoteWrite, RemoteWriteConfig, remote_write};
use super::tracing::{RawTracing, TracingConfig, tracing};
use super::url::parse_url;
use super::values::{any_duration, valid_label_value};
use crate::time_zone::TimeZone;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub location: Option<String>,
    /// `agent.locations`: every location that runs this file, so that each agent takes
    /// its own turn within an interval (schedule.rs); empty when the file does not say.
    pub locations: Vec<String>,
    pub listen: Option<SocketAddr>,
    /// Where durable state lives (relative paths: to the config file).
    pub data_dir: Option<PathBuf>,
    /// How people reach this agent, for links in pages (e.g. `http://probe-eu.example:9464`).
    pub external_url: Option<String>,
    /// Push our metrics (for agents that cannot be scraped).
    pub remote_write: Option<RemoteWriteConfig>,
    pub history: HistoryConfig,
    /// `agent.metrics.detail`: the agent's own series, and every probe's unless it or
    /// `defaults` says otherwise.
    pub metrics: MetricsDetail,
    /// `agent.tracing`: each run exported as a span; `None` (the default) exports nothing.
    pub tracing: Option<TracingConfig>,
    /// `agent.timezone`: the zone times are shown in (status page, pages' words, report);
    /// UTC by default.
    pub timezone: TimeZone,
}

/// `agent.history`: how much run history the store keeps, by age and by disk use
/// (whichever bound is reached first drops the oldest runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryConfig {
    pub retention: Duration,
    pub max_disk_bytes: u64,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            retention: Duration::from_secs(30 * 86_400),
            max_disk_bytes: 1 << 30,
        }
    }
}

/// The run history kept on disk (status page, reports); the oldest runs go first.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "History")]
pub(super) struct RawHistory {
    /// How long runs are kept: 1h to 400d (default 30d).
    #[schemars(with = "Option<DurationText>")]
    pub(super) retention: Option<String>,
    /// Disk the history may use, in MiB (default 1024).
    #[schemars(range(min = 16, max = 1_000_000))]
    pub(super) max_disk_mb: Option<u64>,
}

/// `metrics:` (agent, defaults or a probe): which series are exposed.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Metrics")]
pub(super) struct RawMetrics {
    /// `basic` (default): what availability and latency SLOs need; `full`: every series.
    pub(super) detail: Option<MetricsDetail>,
}

/// `metrics.detail`: `basic` (the default) exposes what availability and latency SLOs
/// need; `full` adds every other series (docs/metrics.md lists which is which). Each
/// series costs the user storage in their Prometheus, so the default stays small.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MetricsDetail {
    /// Runs by result and reason, up, last run and success, TTFT and total.
    #[default]
    Basic,
    /// Every series: phases, TTFB, TPOT, chunk gaps, tokens, prompt buckets, lag.
    Full,
}

/// This agent: where it runs, where it listens, where it keeps its state.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Agent")]
pub(super) struct RawAgent {
    /// The `location` label on every series and result (a region or host, e.g. eu-west);
    /// `--location` or INFERPROBE_LOCATION win. `run` needs one.
    #[schemars(with = "Option<Name>")]
    pub(super) location: Option<String>,
    /// Every location that runs this file, e.g. [eu-west, us-east]: each agent then
    /// probes an endpoint in its own part of the interval, so agents in several regions
    /// never queue behind each other on a server with few slots (default: a part
    /// derived from the location's name, which two regions rarely share).
    #[schemars(with = "Option<Vec<Name>>")]
    pub(super) locations: Option<Vec<String>>,
    /// Address of the agent's port (/metrics, the API, the status page), e.g. 0.0.0.0:9464.
    pub(super) listen: Option<String>,
    /// Where alert state, undelivered pages and history are kept (relative to this
    /// file; default ./inferprobe-data). Keep it on a volume.
    pub(super) data_dir: Option<String>,
    /// The agent's URL as people reach it, for the links in pages, e.g.
    /// http://probe-eu.example.com:9464 (may be "${EXTERNAL_URL}").
    pub(super) external_url: Option<String>,
    /// Push the agent's metrics to a Prometheus remote_write receiver (when nothing can
    /// scrape it).
    pub(super) remote_write: Option<RawRemoteWrite>,
    /// How much run history is kept on disk.
    pub(super) history: Option<RawHistory>,
    /// Which series are exposed: `{detail: basic}` (default) or `{detail: full}`.
    pub(super) metrics: Option<RawMetrics>,
    /// Export each run as one client span over OTLP/HTTP (off by default).
    pub(super) tracing: Option<RawTracing>,
    /// The IANA time zone times are shown in on the status page, in the words of pages
    /// and in the report, e.g. Asia/Shanghai (default UTC); `report --timezone` overrides
    /// it for the report.
    pub(super) timezone: Option<String>,
}

pub(super) fn check_agent(cx: &mut Diagnostics, value: Value) -> Option<AgentConfig> {
    if value.is_null() {
        return Some(AgentConfig {
            location: None,
            locations: Vec::new(),
            listen: None,
            data_dir: None,
            external_url: None,
            remote_write: None,
            history: HistoryConfig::default(),
            metrics: MetricsDetail::default(),
            tracing: None,
            timezone: TimeZone::UTC,
        });
    }
    let raw: RawAgent = cx.section(value, "agent", None)?;
    // Values after `${VAR}` (one file for every region: `external_url:
    // "${EXTERNAL_URL}"`): the checks see the value the agent will use.
    let RawAgent {
        location,
        listen,
        data_dir,
        external_url,
        ..
    } = raw;
    let location = location.filter(|l| {
        let ok = valid_label_value(l);
        if !ok {
            cx.error(
                None,
                "agent.location",
                "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
            );
        }
        ok
    });
    let mut locations: Vec<String> = Vec::new();
    for (i, l) in raw.locations.unwrap_or_default().into_iter().enumerate() {
        let key = format!("agent.locations[{i}]");
        if !valid_label_value(&l) {
            cx.error(
                None,
                &key,
                "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
            );
        } else if locations.contains(&l) {
            cx.error(None, &key, format!("`{l}` is listed twice"));
        } else {
            locations.push(l);
        }
    }
    if let Some(l) = &location
        && !locations.is_empty()
        && !locations.contains(l)
    {
        cx.error(
            None,
            "agent.locations",
            format!("does not list agent.location `{l}`"),
        );
    }
    let listen = listen.and_then(|l| match l.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            cx.error(
                None,
                "agent.listen",
                format!("`{l}` is not an address like 127.0.0.1:9464"),
            );
            None
        }
    });
    let data_dir = data_dir.map(|d| cx.base_dir.join(d));
    // Links in pages: the URL as written (no secret), checked by the one parser.
    let external_url = external_url.filter(|u| match parse_url(u) {
        Ok(_) => true,
        Err(e) => {
            cx.error(
                None,
                "agent.external_url",
                format!("`{u}` {e}; give a URL like http://probe-eu.example.com:9464"),
            );
            false
        }
    });
    let timezone = match raw.timezone.as_deref().map(TimeZone::parse) {
        None => TimeZone::UTC,
        Some(Ok(tz)) => tz,
        Some(Err(e)) => {
            cx.error(None, "agent.timezone", e.to_string());
            TimeZone::UTC
        }
    };
    let remote_write = raw.remote_write.and_then(|r| remote_write(cx, r));
    let history = history(cx, raw.history.unwrap_or_default());
    Some(AgentConfig {
        location,
        locations,
        listen,
        remote_write,
        history,
        data_dir,
        external_url: external_url.map(|u| u.trim_end_matches('/').to_owned()),
        metrics: raw.metrics.and_then(|m| m.detail).unwrap_or_default(),
        tracing: raw.tracing.and_then(|t| tracing(cx, t)),
        timezone,
    })
}

pub(super) fn history(cx: &mut Diagnostics, raw: RawHistory) -> HistoryConfig {
    let mut history = HistoryConfig::default();
    if let Some(r) = raw.retention
        && let Some(d) = any_duration(cx, None, "agent.history.retention", &r)
    {
        if (Duration::from_secs(3600)..=Duration::from_secs(400 * 86_400)).contains(&d) {
            history.retention = d;
        } else {
            cx.error(None, "agent.history.retention", "must be between 1h and 400d");
        }
    }
    if let Some(mb) = raw.max_disk_mb {
        if (16..=1_000_000).contains(&mb) {
            history.max_disk_bytes = mb << 20;
        } else {
            cx.error(
                None,
                "agent.history.max_disk_mb",
                "must be between 16 and 1000000 (MiB)",
            );
        }
    }
    history
}
