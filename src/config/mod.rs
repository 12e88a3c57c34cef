//! `probes.yaml`: the validated types of the file, its constants, and loading into a ready
//! [`Config`].
//!
//! Loading is three steps, so that `inferprobe check` can print every problem at once:
//! 1. YAML syntax (serde_norway; a syntax error stops here, with its line and column);
//! 2. each section and each probe is deserialized on its own (unknown keys, wrong types);
//! 3. semantic checks (durations, URLs, cron, labels, files).
//!
//! `${ENV}` is substituted in every string value before step 2 (env.rs).
//!
//! Steps 2 and 3 find the line and column of a key through [`PositionIndex`], built from
//! the YAML event stream, so every message reads `FILE:LINE:COLUMN: probe "x": key: ...`.
//!
//! The rooms: raw.rs the serde shapes (step 2); check.rs the `Checker`
//! that collects positioned problems, with the root, `agent` and `defaults` checks and
//! the shared helpers; probe.rs the checks common to every probe; content.rs prompts,
//! images and tensors; positions.rs the position index and suggestions; env.rs `${VAR}`;
//! alerting.rs, remote_write.rs, url.rs, files.rs, nesting.rs as their names say. The
//! keys of one kind only are checked by that kind's own file (`probe/<kind>.rs`), which
//! builds its part of [`ProbeConfig::spec`].
//!
//! Imports no sibling module but `probe::kinds`: [`Kind`] and [`KindSpec`] live with the
//! probes, and probe.rs hands each probe's kind-specific keys to `kinds::check_spec`. The
//! kinds' files in turn use the `Checker` and the raw keys from here:
//! that pair of arrows between config and probe is the price of a kind being one file.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_yaml::Value;

mod alerting;
pub use alerting::{
    AlertConfig, DEFAULT_FAILURE_THRESHOLD, DEFAULT_SUCCESS_THRESHOLD, RateLimited, ReceiverConfig,
    ReceiverKind, Severity, Slo,
};
mod check;
pub(crate) use check::Checker;
pub use check::valid_label_value;
mod content;
mod cost;
pub use content::{
    BUILTIN_IMAGES, BuiltinImage, ImageFormat, ImageSource, Images, PromptBucket, Prompts, Scene,
    TENSOR_DATATYPES, TensorData, TensorInput, Upload,
};
pub use cost::{Cost, DEFAULT_CURRENCY, TokenBudget};
mod env;
pub use env::substitute_env;
pub mod files;
mod nesting;
mod positions;
pub use positions::PositionIndex;
use positions::{strip_location, suggest};
mod probe;
pub(crate) use probe::{Key, SpecKeys};
mod raw;
pub use raw::MetricsDetail;
mod remote_write;
mod sharing;
pub use remote_write::RemoteWriteConfig;
mod tracing;
pub use tracing::{TraceConfig, TracingConfig};
mod schema;
pub(crate) use schema::documented_enum;
pub use schema::json_schema;
mod url;
// The file's text into a YAML value without serde_yaml's whole-file event list.
mod yaml;
pub use url::{Url, UrlError, parse_url, to_uri};

/// The kinds are listed with the probes they build (one file per kind).
pub use crate::probe::kinds::{Kind, KindSpec};

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
/// Longest interval or timeout: beyond a week a probe is not monitoring anything, and
/// instants that far out risk overflow.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Largest response cap: 1 GiB.
const MAX_RESPONSE_BYTES: u64 = 1 << 30;
/// Largest tensor we build from a config (elements), and image side for pixels.
const MAX_TENSOR_ELEMENTS: i64 = 64 * 1024 * 1024;
/// User labels per probe: each one multiplies every series, so keep few.
const MAX_LABELS: usize = 10;
const MAX_LABEL_VALUE_LEN: usize = 64;
/// Label names the agent sets itself.
pub const RESERVED_LABELS: &[&str] = &[
    "probe",
    "kind",
    "model",
    "location",
    "prompt_bucket",
    "result",
    "reason",
    "phase",
    "le",
    "quantile",
    "job",
    "instance",
    "version",
    "image_bucket",
    "stage",
    "alert",
    "severity",
    "receiver",
    "event",
];

// ---------------------------------------------------------------------------------------
// The validated configuration.

/// A validated `probes.yaml`.
#[derive(Debug, Clone)]
pub struct Config {
    pub agent: AgentConfig,
    pub receivers: Vec<ReceiverConfig>,
    /// Shared with the probes built from them: the running agent holds each once.
    pub probes: Vec<Arc<ProbeConfig>>,
    /// Probes of the file that other shards run (`--shard`): not ours, but not gone.
    pub other_shards: Vec<String>,
    /// Allowed but risky settings, positioned like errors.
    pub warnings: Vec<ConfigError>,
    /// Every value a `${VAR}` put where credentials go (any part of a probe's URL or
    /// body, a header, a receiver's URL or key, remote_write's URL and credentials): all
    /// are treated as secrets. One put elsewhere (a model, a region, a label) is not.
    pub secrets: Vec<Secret>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub location: Option<String>,
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

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Schedule::Interval(a), Schedule::Interval(b)) => a == b,
            (Schedule::Cron { expr: a, .. }, Schedule::Cron { expr: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// A regular expression from the config, compared by its source.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub source: String,
    pub regex: regex::Regex,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// A header value, possibly holding a secret: it never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The finish reasons `expect.finish_reason` may list: those that carry an answer (the
/// probes normalize every protocol's own names to these).
pub const ANSWER_FINISH_REASONS: [&str; 3] = ["stop", "length", "tool_calls"];

/// What a run must show to count as a success, beyond a complete, well-formed response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Expect {
    /// Accepted statuses; empty means any 2xx.
    pub status: Vec<u16>,
    /// Generated output (LLM kinds) or body (http) must not be empty.
    pub non_empty: bool,
    pub min_output_tokens: u64,
    /// LLM kinds: the generation must have ended for one of these reasons (`stop`,
    /// `length`, `tool_calls`); empty accepts any that carries an answer.
    pub finish_reason: Vec<String>,
    /// Output text (LLM kinds) or body (http) must contain this.
    pub contains: Option<String>,
    /// ... and match this regular expression.
    pub matches: Option<Pattern>,
    /// ... and be valid JSON (for JSON-mode prompts).
    pub json: bool,
    /// The response must name the configured model.
    pub model: bool,
    /// `kserve_v2`: output tensors that must be present.
    pub outputs: Vec<String>,
    /// `kserve_v2`: the first output's shape.
    pub output_shape: Option<Vec<i64>>,
    /// `kserve_v2`: the predicted label (the value of a one-per-row output, or the index
    /// of the largest score).
    pub top_label: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsConfig {
    /// Extra PEM root certificates (for private CAs), added to the system roots.
    pub ca_file: Option<PathBuf>,
    /// SNI and certificate name to use instead of the URL's host.
    pub server_name: Option<String>,
    /// Accept any certificate (self-signed test endpoints). Off unless set per probe,
    /// and `check` warns about every probe that sets it: a prober that cannot see an
    /// expired or wrong certificate misses what users' clients will refuse.
    pub insecure_skip_verify: bool,
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
}

/// The URL as it may be shown in logs, the API and pages: scheme, host, port and path,
/// without user info or query string (either may carry an API key).
pub fn display_url(url: &http::Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("http");
    let host = url.host().unwrap_or("");
    let port = url.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{scheme}://{host}{port}{}", url.path())
}

// ---------------------------------------------------------------------------------------
// Errors.

/// One problem in a config file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub probe: Option<String>,
    /// The key's path, e.g. `probes[2].expect.status`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if let Some(probe) = &self.probe {
            write!(f, "probe \"{probe}\": ")?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The file as a whole could not be read: no line or column to point at (0:0).
    pub fn unreadable(path: &Path, message: String) -> ConfigErrors {
        ConfigErrors(vec![ConfigError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            probe: None,
            key: String::new(),
            message,
        }])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Entry points.

/// Reads and validates a config file, resolving `${VAR}` from the process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = files::read_config_text(path)
        .map_err(|e| ConfigErrors::unreadable(path, format!("cannot read the file: {e}")))?;
    parse(&text, path, &|name| std::env::var(name).ok())
}

/// Validates config text. `file` names the file in messages and anchors relative paths;
/// `env` resolves `${VAR}` references (passed in so tests need no process environment).
pub fn parse(text: &str, file: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigErrors> {
    let mut cx = Checker {
        file: file.display().to_string(),
        base_dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
        text,
        index: None,
        errors: Vec::new(),
        warnings: Vec::new(),
        env,
        substituted: Vec::new(),
        templated: Default::default(),
        settled: Default::default(),
        settled_lists: Default::default(),
        unsaid: 0,
        sections: Default::default(),
    };
    // Bounds before any YAML parser runs: see nesting.rs for why.
    let limit = |line, column, message: String| {
        Err(ConfigErrors(vec![ConfigError {
            file: file.display().to_string(),
            line,
            column,
            probe: None,
            key: String::new(),
            message,
        }]))
    };
    if text.len() as u64 > files::MAX_CONFIG_BYTES {
        return limit(
            1,
            1,
            format!(
                "the file is {} bytes; at most {}",
                text.len(),
                files::MAX_CONFIG_BYTES
            ),
        );
    }
    if let Some((line, column)) = nesting::too_deep(text) {
        return limit(
            line,
            column,
            format!(
                "`[` and `{{` nested more than {} levels deep; a probes.yaml needs a few",
                nesting::MAX_FLOW_DEPTH
            ),
        );
    }
    let root: Value = match yaml::parse(text) {
        Ok(v) => v,
        Err(e) => {
            let (line, column) = e.location().map(|l| (l.line(), l.column())).unwrap_or((1, 1));
            return Err(ConfigErrors(vec![ConfigError {
                file: cx.file,
                line,
                column,
                probe: None,
                key: String::new(),
                message: format!("invalid YAML: {}", strip_location(&e.to_string())),
            }]));
        }
    };
    let config = cx.check_root(root);
    if cx.errors.is_empty() {
        let mut config = config.expect("no errors means a config");
        cx.warnings.sort_by_key(|a| (a.line, a.column));
        config.warnings = cx.warnings;
        config.secrets = cx.substituted.into_iter().map(Secret::new).collect();
        Ok(config)
    } else {
        cx.errors.sort_by_key(|a| (a.line, a.column));
        Err(ConfigErrors(cx.errors))
    }
}
