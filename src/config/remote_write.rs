//! `agent.remote_write`: pushing our metrics to a Prometheus-compatible receiver
//! (Prometheus with its receiver on, Mimir, Thanos receive) for agents that cannot be
//! scraped. Off unless configured.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::diagnostics::Diagnostics;
use super::formats::Duration as DurationText;
use super::values::{Secret, duration, existing_file, secret_headers, secret_url};

pub const DEFAULT_PUSH_INTERVAL: Duration = Duration::from_secs(15);
/// Samples per request: remote_write receivers take a few thousand comfortably.
pub const DEFAULT_MAX_SAMPLES_PER_SEND: usize = 2000;
/// Snapshots kept while the receiver is away: at 15 s, 5 minutes of history (and
/// never more than `queue_max_bytes`: a snapshot of 1,000 chat probes is about 4 MB).
pub const DEFAULT_QUEUE_SNAPSHOTS: usize = 20;
pub const DEFAULT_QUEUE_MAX_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteWriteConfig {
    /// May carry credentials: never shown; `host` is.
    pub url: Secret,
    pub host: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub max_backoff: Duration,
    pub max_samples_per_send: usize,
    pub queue_snapshots: usize,
    /// Compressed bytes queued at most.
    pub queue_max_bytes: usize,
    pub basic_auth: Option<(String, Secret)>,
    pub bearer_token: Option<Secret>,
    pub headers: Vec<(http::HeaderName, Secret)>,
    pub ca_file: Option<PathBuf>,
    /// Added to every pushed series, as a scrape would add them.
    pub job: String,
    pub instance: Option<String>,
}

/// Push the agent's metrics to a Prometheus remote_write receiver (Prometheus, Mimir,
/// Thanos receive).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "RemoteWrite")]
pub(super) struct RawRemoteWrite {
    /// The receiver's write URL, e.g. https://prometheus.example.com/api/v1/write.
    /// May carry credentials: never shown.
    url: String,
    /// How often to push (default 15s; at least 1s).
    #[schemars(with = "Option<DurationText>")]
    interval: Option<String>,
    /// Per push, at most 60s (default 10s).
    #[schemars(with = "Option<DurationText>")]
    timeout: Option<String>,
    /// Retries back off up to this (default 30s).
    #[schemars(with = "Option<DurationText>")]
    max_backoff: Option<String>,
    /// Samples per request (default 2000).
    #[schemars(range(min = 100, max = 100_000))]
    max_samples_per_send: Option<usize>,
    /// Snapshots queued while the receiver is away (default 20).
    #[schemars(range(min = 1, max = 10_000))]
    queue_snapshots: Option<usize>,
    /// Compressed bytes queued at most (default 64 MiB).
    #[schemars(range(min = 1_048_576, max = 1_073_741_824))]
    queue_max_bytes: Option<usize>,
    /// HTTP basic auth; the password is a secret, e.g. "${REMOTE_WRITE_PASSWORD}".
    basic_auth: Option<RawBasicAuth>,
    /// Sent as Authorization: Bearer; a secret, e.g. "${REMOTE_WRITE_TOKEN}".
    bearer_token: Option<String>,
    /// Headers sent with each push (e.g. X-Scope-OrgID). Values are secrets.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// A PEM file of extra CA certificates to trust, relative to this file.
    ca_file: Option<String>,
    /// The `job` label on pushed series, as a scrape would add it (default inferprobe).
    job: Option<String>,
    /// The `instance` label on pushed series (default: host:port, as a scrape names it).
    instance: Option<String>,
}

/// HTTP basic auth.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "BasicAuth")]
pub(super) struct RawBasicAuth {
    /// The user name.
    username: String,
    /// The password, e.g. "${REMOTE_WRITE_PASSWORD}"; a secret.
    password: String,
}

pub(super) fn remote_write(cx: &mut Diagnostics, raw: RawRemoteWrite) -> Option<RemoteWriteConfig> {
    let before = cx.errors.len();
    let key = |k: &str| format!("agent.remote_write.{k}");
    let url = secret_url(cx, &key("url"), &raw.url);
    let mut duration = |k: &str, raw: &Option<String>, default: Duration| match raw {
        Some(s) => duration(cx, None, &key(k), s),
        None => Some(default),
    };
    let interval = duration("interval", &raw.interval, DEFAULT_PUSH_INTERVAL);
    let timeout = duration("timeout", &raw.timeout, Duration::from_secs(10));
    let max_backoff = duration("max_backoff", &raw.max_backoff, Duration::from_secs(30));
    if interval.is_some_and(|i| i < Duration::from_secs(1)) {
        cx.error(None, &key("interval"), "must be at least 1s");
    }
    if timeout.is_some_and(|t| t > Duration::from_secs(60)) {
        cx.error(None, &key("timeout"), "must be at most 60s");
    }

    let max_samples_per_send = raw.max_samples_per_send.unwrap_or(DEFAULT_MAX_SAMPLES_PER_SEND);
    if !(100..=100_000).contains(&max_samples_per_send) {
        cx.error(
            None,
            &key("max_samples_per_send"),
            "must be between 100 and 100000",
        );
    }
    let queue_snapshots = raw.queue_snapshots.unwrap_or(DEFAULT_QUEUE_SNAPSHOTS);
    if !(1..=10_000).contains(&queue_snapshots) {
        cx.error(None, &key("queue_snapshots"), "must be between 1 and 10000");
    }
    let queue_max_bytes = raw.queue_max_bytes.unwrap_or(DEFAULT_QUEUE_MAX_BYTES);
    if !(1 << 20..=1 << 30).contains(&queue_max_bytes) {
        cx.error(None, &key("queue_max_bytes"), "must be between 1 MiB and 1 GiB");
    }
    let basic_auth = raw.basic_auth.map(|b| (b.username, Secret::new(b.password)));
    let bearer_token = raw.bearer_token.map(Secret::new);
    if basic_auth.is_some() && bearer_token.is_some() {
        cx.error(
            None,
            &key("bearer_token"),
            "use either basic_auth or bearer_token, not both",
        );
    }
    let headers = secret_headers(cx, None, &key("headers"), &raw.headers);
    let ca_file = raw
        .ca_file
        .and_then(|f| existing_file(cx, None, &key("ca_file"), &f));
    if cx.errors.len() > before {
        return None;
    }
    let url = url?;
    Some(RemoteWriteConfig {
        host: url.host().unwrap_or_default().to_owned(),
        url: Secret::new(url.to_string()),
        interval: interval?,
        timeout: timeout?,
        max_backoff: max_backoff?,
        max_samples_per_send,
        queue_snapshots,
        queue_max_bytes,
        basic_auth,
        bearer_token,
        headers,
        ca_file,
        job: raw.job.unwrap_or_else(|| "inferprobe".to_owned()),
        instance: raw.instance,
    })
}
