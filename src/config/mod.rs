//! `probes.yaml`: the serde types of the file, defaults, and validation into a ready
//! [`Config`]. Imports no sibling module.
//!
//! Loading is three steps, so that `inferprobe check` can print every problem at once:
//! 1. YAML syntax (serde_norway; a syntax error stops here, with its line and column);
//! 2. each section and each probe is deserialized on its own (unknown keys, wrong types);
//! 3. semantic checks (durations, URLs, cron, `${ENV}` references, labels, files).
//!
//! Steps 2 and 3 find the line and column of a key through [`PositionIndex`], built from
//! the YAML event stream, so every message reads `FILE:LINE:COLUMN: probe "x": key: ...`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_yaml::Value;

mod alerting;
pub use alerting::{
    AlertConfig, DEFAULT_FAILURE_THRESHOLD, DEFAULT_SUCCESS_THRESHOLD, RateLimited, ReceiverConfig,
    ReceiverKind, Severity, Slo,
};
use alerting::{RawAlert, RawSlo};
mod remote_write;
use remote_write::RawRemoteWrite;
pub use remote_write::RemoteWriteConfig;
pub mod files;
mod nesting;
mod url;
pub use url::{Url, UrlError, parse_url, to_uri};

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
    pub probes: Vec<ProbeConfig>,
    /// Probes of the file that other shards run (`--shard`): not ours, but not gone.
    pub other_shards: Vec<String>,
    /// Allowed but risky settings, positioned like errors.
    pub warnings: Vec<ConfigError>,
    /// Every value a `${VAR}` put into the file, wherever it went (any part of a URL,
    /// a header, a key or password): all are treated as secrets.
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHistory {
    retention: Option<String>,
    max_disk_mb: Option<u64>,
}

/// The API a probe speaks. The YAML `kind:` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum Kind {
    #[serde(rename = "openai_chat")]
    OpenAiChat,
    #[serde(rename = "openai_completions")]
    OpenAiCompletions,
    #[serde(rename = "openai_responses")]
    OpenAiResponses,
    #[serde(rename = "ollama")]
    Ollama,
    #[serde(rename = "tgi")]
    Tgi,
    #[serde(rename = "anthropic")]
    Anthropic,
    #[serde(rename = "kserve_v2")]
    KserveV2,
    #[serde(rename = "http")]
    Http,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::OpenAiChat => "openai_chat",
            Kind::OpenAiCompletions => "openai_completions",
            Kind::OpenAiResponses => "openai_responses",
            Kind::Ollama => "ollama",
            Kind::Tgi => "tgi",
            Kind::Anthropic => "anthropic",
            Kind::KserveV2 => "kserve_v2",
            Kind::Http => "http",
        }
    }

    /// Kinds that stream generated tokens (and so have TTFT and prompts).
    pub fn is_llm(self) -> bool {
        !matches!(self, Kind::Http | Kind::KserveV2)
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

/// Prompt length buckets, by estimated tokens: short < 64, medium 64-256, long > 256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptBucket {
    Short,
    Medium,
    Long,
}

impl PromptBucket {
    pub const ALL: [PromptBucket; 3] = [PromptBucket::Short, PromptBucket::Medium, PromptBucket::Long];

    pub fn as_str(self) -> &'static str {
        match self {
            PromptBucket::Short => "short",
            PromptBucket::Medium => "medium",
            PromptBucket::Long => "long",
        }
    }

    /// The bucket of a prompt of about `tokens` tokens.
    pub fn for_tokens(tokens: usize) -> PromptBucket {
        match tokens {
            0..64 => PromptBucket::Short,
            64..=256 => PromptBucket::Medium,
            _ => PromptBucket::Long,
        }
    }
}

/// Where a probe's prompts come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompts {
    /// Our built-in prompt sets, restricted to these buckets.
    Builtin(Vec<PromptBucket>),
    /// The user's own prompts (inline, or read from a file at load time).
    Custom(Vec<String>),
}

/// How a built-in image is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    Jpeg,
    Png,
}

/// What a built-in image shows: a photo-like outdoor scene, or a chart with text (the
/// screenshots and documents people send to vision models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scene {
    Photo,
    Chart,
}

/// One of our generated images. The pixels are made by payload/images.rs when a probe is
/// built; this is only the catalogue, so the config can be checked without making them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BuiltinImage {
    pub name: &'static str,
    pub width: u32,
    pub height: u32,
    pub format: ImageFormat,
    pub scene: Scene,
}

/// The built-in images, at the sizes people send: classifier inputs (224x224), camera
/// frames (640x480), screenshots and video frames (1920x1080), and a phone photo of a few
/// MB (4000x3000).
pub const BUILTIN_IMAGES: &[BuiltinImage] = &[
    BuiltinImage {
        name: "scene-224.jpg",
        width: 224,
        height: 224,
        format: ImageFormat::Jpeg,
        scene: Scene::Photo,
    },
    BuiltinImage {
        name: "scene-224.png",
        width: 224,
        height: 224,
        format: ImageFormat::Png,
        scene: Scene::Photo,
    },
    BuiltinImage {
        name: "scene-640x480.jpg",
        width: 640,
        height: 480,
        format: ImageFormat::Jpeg,
        scene: Scene::Photo,
    },
    BuiltinImage {
        name: "chart-640x480.png",
        width: 640,
        height: 480,
        format: ImageFormat::Png,
        scene: Scene::Chart,
    },
    BuiltinImage {
        name: "scene-1920x1080.jpg",
        width: 1920,
        height: 1080,
        format: ImageFormat::Jpeg,
        scene: Scene::Photo,
    },
    BuiltinImage {
        name: "chart-1920x1080.png",
        width: 1920,
        height: 1080,
        format: ImageFormat::Png,
        scene: Scene::Chart,
    },
    BuiltinImage {
        name: "photo-4000x3000.jpg",
        width: 4000,
        height: 3000,
        format: ImageFormat::Jpeg,
        scene: Scene::Photo,
    },
];

/// Where a probe's images come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageSource {
    Builtin(BuiltinImage),
    /// A JPEG or PNG file (folders are expanded when the config is loaded).
    File(PathBuf),
}

/// The images a probe sends, rotated per run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    pub sources: Vec<ImageSource>,
    /// Images in each request.
    pub per_run: usize,
    /// OpenAI's `detail` (`low`, `high`, `auto`), when set.
    pub detail: Option<String>,
    /// `http` only: how the images travel.
    pub upload: Upload,
}

/// How an `http` probe sends its images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upload {
    /// `multipart/form-data`, one file part per image in the named field (TorchServe and
    /// most FastAPI/Flask services read `data` or `file`).
    Multipart { field: String },
    /// The image file as the whole body, with its media type.
    Raw,
}

/// Open Inference Protocol tensor datatypes.
pub const TENSOR_DATATYPES: &[&str] = &[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
    "BF16", "BYTES",
];

/// `kserve_v2`: the input tensor to send.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInput {
    pub name: String,
    pub datatype: String,
    /// As sent; for image pixels, the size the image is resized to.
    pub shape: Vec<i64>,
    pub data: TensorData,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// Numbers (or strings) given in the config, row-major.
    Literal(Vec<serde_json::Value>),
    /// The probe's image file as one base64 BYTES element, decoded by the model.
    ImageBytes,
    /// The probe's image decoded to RGB, resized to the shape and laid out as given;
    /// UINT8 0-255, or FP32 0-1.
    ImagePixels { channels_first: bool },
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

impl Kind {
    /// Kinds whose requests can carry images.
    pub fn takes_images(self) -> bool {
        matches!(
            self,
            Kind::OpenAiChat
                | Kind::OpenAiResponses
                | Kind::Ollama
                | Kind::Anthropic
                | Kind::KserveV2
                | Kind::Http
        )
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
    pub name: String,
    pub kind: Kind,
    /// The full URL with any query string; may hold secrets, see [`display_url`].
    pub url: http::Uri,
    pub model: Option<String>,
    pub schedule: Schedule,
    pub timeout: Duration,
    pub first_token_timeout: Duration,
    pub headers: Vec<(http::HeaderName, Secret)>,
    pub prompts: Prompts,
    pub max_tokens: u32,
    pub method: http::Method,
    pub body: Option<String>,
    pub expect: Expect,
    /// Sorted by key.
    pub labels: Vec<(String, String)>,
    pub reuse_connections: bool,
    pub max_response_bytes: u64,
    pub tls: TlsConfig,
    pub images: Option<Images>,
    /// `kserve_v2`: the tensor to send, check the model's readiness first, outputs to ask for.
    pub input: Option<TensorInput>,
    pub ready_check: bool,
    pub outputs: Vec<String>,
    pub alert: AlertConfig,
    pub slo: Slo,
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
    let root: Value = match serde_yaml::from_str(text) {
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

// ---------------------------------------------------------------------------------------
// Raw serde types: what the file may contain. Plain strings for anything that needs
// checking, so step 3 can report every bad value instead of stopping at the first.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    location: Option<String>,
    listen: Option<String>,
    data_dir: Option<String>,
    external_url: Option<String>,
    remote_write: Option<RawRemoteWrite>,
    history: Option<RawHistory>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    interval: Option<String>,
    timeout: Option<String>,
    first_token_timeout: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    max_tokens: Option<u32>,
    reuse_connections: Option<bool>,
    max_response_bytes: Option<u64>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    alert: Option<RawAlert>,
    slo: Option<RawSlo>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProbe {
    name: String,
    kind: Kind,
    url: String,
    model: Option<String>,
    interval: Option<String>,
    schedule: Option<String>,
    timeout: Option<String>,
    first_token_timeout: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    prompts: Option<RawPrompts>,
    max_tokens: Option<u32>,
    method: Option<String>,
    body: Option<String>,
    expect: Option<RawExpect>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    reuse_connections: Option<bool>,
    max_response_bytes: Option<u64>,
    tls: Option<RawTls>,
    images: Option<RawImages>,
    input: Option<RawInput>,
    ready_check: Option<bool>,
    outputs: Option<Vec<String>>,
    alert: Option<RawAlert>,
    slo: Option<RawSlo>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImages {
    builtin: Option<Vec<String>>,
    files: Option<Vec<String>>,
    per_run: Option<usize>,
    detail: Option<String>,
    upload: Option<String>,
    field: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrompts {
    builtin: Option<Vec<PromptBucket>>,
    inline: Option<Vec<String>>,
    file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(default, deserialize_with = "one_or_many_statuses")]
    status: Vec<u16>,
    non_empty: Option<bool>,
    min_output_tokens: Option<u64>,
    finish_reason: Option<Vec<String>>,
    contains: Option<String>,
    matches: Option<String>,
    json: Option<bool>,
    model: Option<bool>,
    outputs: Option<Vec<String>>,
    output_shape: Option<Vec<i64>>,
    top_label: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    data: Option<Vec<serde_json::Value>>,
    image: Option<String>,
    layout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca_file: Option<String>,
    server_name: Option<String>,
    insecure_skip_verify: Option<bool>,
}

/// `status: 200` and `status: [200, 201]` both work.
fn one_or_many_statuses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
    struct StatusVisitor;
    impl<'de> Visitor<'de> for StatusVisitor {
        type Value = Vec<u16>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an HTTP status code or a list of them")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            u16::try_from(v)
                .map(|s| vec![s])
                .map_err(|_| E::custom(format!("{v} is not an HTTP status code")))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Err(E::custom(format!("{v} is not an HTTP status code")))
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<u16>()? {
                out.push(s);
            }
            Ok(out)
        }
    }
    d.deserialize_any(StatusVisitor)
}

// ---------------------------------------------------------------------------------------
// Validation.

struct Checker<'a> {
    file: String,
    base_dir: PathBuf,
    text: &'a str,
    /// Built on the first error only: a valid 10,000-probe file never pays for it.
    index: Option<PositionIndex>,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    env: &'a dyn Fn(&str) -> Option<String>,
    /// The values `env` gave, for [`Config::secrets`].
    substituted: Vec<String>,
}

/// Per-probe values inherited from `defaults:`.
struct Defaults {
    interval: Option<Duration>,
    timeout: Option<Duration>,
    first_token_timeout: Option<Duration>,
    headers: BTreeMap<String, String>,
    max_tokens: u32,
    reuse_connections: bool,
    max_response_bytes: u64,
    labels: BTreeMap<String, String>,
    alert: RawAlert,
    slo: RawSlo,
}

impl Checker<'_> {
    fn index(&mut self) -> &PositionIndex {
        let text = self.text;
        self.index.get_or_insert_with(|| PositionIndex::build(text))
    }

    fn error(&mut self, probe: Option<&str>, key: &str, message: impl Into<String>) {
        let position = self.index().locate(key);
        self.error_at(position, probe, key, message);
    }

    /// Something allowed but risky: `check` prints it, `run` logs it.
    fn warn(&mut self, probe: Option<&str>, key: &str, message: impl Into<String>) {
        let position = self.index().locate(key);
        let warning = self.problem(position, probe, key, message.into());
        self.warnings.push(warning);
    }

    fn error_at(
        &mut self,
        position: (usize, usize),
        probe: Option<&str>,
        key: &str,
        message: impl Into<String>,
    ) {
        let error = self.problem(position, probe, key, message.into());
        self.errors.push(error);
    }

    fn problem(
        &self,
        (line, column): (usize, usize),
        probe: Option<&str>,
        key: &str,
        message: String,
    ) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            probe: probe.map(str::to_owned),
            key: key.to_owned(),
            message,
        }
    }

    /// Deserializes one section, turning serde's message into a positioned error.
    fn section<T: serde::de::DeserializeOwned>(
        &mut self,
        mut value: Value,
        prefix: &str,
        probe: Option<&str>,
    ) -> Option<T> {
        // serde stops at the first unknown key; drop it and try again, so that every
        // misspelt key of the section is reported at once.
        let mut unknown_keys = 0;
        loop {
            let e = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
                Ok(v) if unknown_keys == 0 => return Some(v),
                Ok(_) => return None,
                Err(e) => e,
            };
            let inner = e.path().to_string();
            let key = join_path(prefix, if inner == "." { "" } else { &inner });
            // In YAML words: keys and values, not fields and variants.
            let message = strip_location(&e.into_inner().to_string())
                .replace("missing field", "missing key")
                .replace("unknown variant", "unknown value");
            let Some((unknown, expected)) = parse_unknown_field(&message) else {
                self.error(probe, &key, message);
                return None;
            };
            let parent = key_parent(&key, &unknown);
            let message = match suggest(&unknown, &expected) {
                Some(s) => format!("unknown key `{unknown}`; did you mean `{s}`?"),
                None => format!("unknown key `{unknown}`; expected one of {}", expected.join(", ")),
            };
            let path = join_path(&parent, &unknown);
            let position = self.index().locate_key(&path);
            self.error_at(position, probe, &path, message);
            unknown_keys += 1;
            let within = parent
                .strip_prefix(prefix)
                .unwrap_or(&parent)
                .trim_start_matches('.');
            if unknown_keys > 50 || !remove_key(&mut value, within, &unknown) {
                return None;
            }
        }
    }

    fn check_root(&mut self, root: Value) -> Option<Config> {
        let Value::Mapping(map) = root else {
            self.error(
                None,
                "",
                "the file must be a mapping with `agent`, `defaults` and `probes`",
            );
            return None;
        };
        let mut agent = Value::Null;
        let mut defaults = Value::Null;
        let mut receivers = None;
        let mut probes = None;
        for (k, v) in map {
            match k.as_str() {
                Some("agent") => agent = v,
                Some("defaults") => defaults = v,
                Some("receivers") => receivers = Some(v),
                Some("probes") => probes = Some(v),
                Some(other) => {
                    const TOP: [&str; 4] = ["agent", "defaults", "receivers", "probes"];
                    let message = match suggest(other, &TOP) {
                        Some(s) => format!("unknown key `{other}`; did you mean `{s}`?"),
                        None => format!("unknown key `{other}`; expected one of {}", TOP.join(", ")),
                    };
                    let position = self.index().locate_key(other);
                    self.error_at(position, None, other, message);
                }
                None => self.error(None, "", "top-level keys must be strings"),
            }
        }
        let agent = self.check_agent(agent);
        let defaults = self.check_defaults(defaults);
        let (receivers, receiver_names) = self.receivers(receivers);
        let probes = match probes {
            Some(Value::Sequence(items)) if !items.is_empty() => items,
            Some(Value::Sequence(_)) | None => {
                self.error(None, "probes", "at least one probe is needed");
                Vec::new()
            }
            Some(_) => {
                self.error(None, "probes", "must be a list of probes");
                Vec::new()
            }
        };
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::new();
        for (i, value) in probes.into_iter().enumerate() {
            let prefix = format!("probes[{i}]");
            // The name, when there is one, labels every message about this probe.
            let name = value.get("name").and_then(Value::as_str).map(str::to_owned);
            if let Some(name) = &name
                && let Some(first) = seen.insert(name.clone(), i)
            {
                self.error(
                    Some(name),
                    &format!("{prefix}.name"),
                    format!("duplicate name; probes[{first}] has it already"),
                );
            }
            let Some(raw) = self.section::<RawProbe>(value, &prefix, name.as_deref()) else {
                continue;
            };
            if let Some(p) = self.check_probe(raw, &prefix, defaults.as_ref(), &receiver_names) {
                out.push(p);
            }
        }
        Some(Config {
            agent: agent?,
            receivers,
            probes: out,
            other_shards: Vec::new(),
            warnings: Vec::new(),
            secrets: Vec::new(),
        })
    }

    fn check_agent(&mut self, value: Value) -> Option<AgentConfig> {
        if value.is_null() {
            return Some(AgentConfig {
                location: None,
                listen: None,
                data_dir: None,
                external_url: None,
                remote_write: None,
                history: HistoryConfig::default(),
            });
        }
        let raw: RawAgent = self.section(value, "agent", None)?;
        let location = raw.location.filter(|l| {
            let ok = valid_label_value(l);
            if !ok {
                self.error(
                    None,
                    "agent.location",
                    "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
                );
            }
            ok
        });
        let listen = raw.listen.and_then(|l| match l.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.error(
                    None,
                    "agent.listen",
                    format!("`{l}` is not an address like 127.0.0.1:9464"),
                );
                None
            }
        });
        let data_dir = raw.data_dir.map(|d| self.base_dir.join(d));
        // Links in pages: the URL as written (no secret), checked by the one parser.
        let external_url = raw.external_url.filter(|u| match parse_url(u) {
            Ok(_) => true,
            Err(e) => {
                self.error(
                    None,
                    "agent.external_url",
                    format!("`{u}` {e}; give a URL like http://probe-eu.example.com:9464"),
                );
                false
            }
        });
        let remote_write = raw.remote_write.and_then(|r| self.remote_write(r));
        let history = self.history(raw.history.unwrap_or_default());
        Some(AgentConfig {
            location,
            listen,
            remote_write,
            history,
            data_dir,
            external_url: external_url.map(|u| u.trim_end_matches('/').to_owned()),
        })
    }

    fn history(&mut self, raw: RawHistory) -> HistoryConfig {
        let mut history = HistoryConfig::default();
        if let Some(r) = raw.retention
            && let Some(d) = self.duration(None, "agent.history.retention", &r)
        {
            if (Duration::from_secs(3600)..=Duration::from_secs(400 * 86_400)).contains(&d) {
                history.retention = d;
            } else {
                self.error(None, "agent.history.retention", "must be between 1h and 400d");
            }
        }
        if let Some(mb) = raw.max_disk_mb {
            if (16..=1_000_000).contains(&mb) {
                history.max_disk_bytes = mb << 20;
            } else {
                self.error(
                    None,
                    "agent.history.max_disk_mb",
                    "must be between 16 and 1000000 (MiB)",
                );
            }
        }
        history
    }

    fn check_defaults(&mut self, value: Value) -> Option<Defaults> {
        let raw: RawDefaults = if value.is_null() {
            RawDefaults::default()
        } else {
            self.section(value, "defaults", None)?
        };
        self.duplicate_headers(None, "defaults.headers", &raw.headers);
        Some(Defaults {
            interval: raw
                .interval
                .and_then(|s| self.duration(None, "defaults.interval", &s)),
            timeout: raw
                .timeout
                .and_then(|s| self.duration(None, "defaults.timeout", &s)),
            first_token_timeout: raw
                .first_token_timeout
                .and_then(|s| self.duration(None, "defaults.first_token_timeout", &s)),
            headers: raw.headers,
            max_tokens: raw.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            reuse_connections: raw.reuse_connections.unwrap_or(false),
            max_response_bytes: raw.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
            labels: raw.labels,
            alert: raw.alert.unwrap_or_default(),
            slo: raw.slo.unwrap_or_default(),
        })
    }

    fn check_probe(
        &mut self,
        raw: RawProbe,
        prefix: &str,
        defaults: Option<&Defaults>,
        receivers: &[String],
    ) -> Option<ProbeConfig> {
        let errors_before = self.errors.len();
        let name = raw.name.clone();
        let p = Some(name.as_str());
        let key = |k: &str| format!("{prefix}.{k}");

        if !valid_label_value(&name) {
            self.error(
                p,
                &key("name"),
                "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
            );
        }

        let url = self.url(p, &key("url"), &raw.url);

        let model = raw.model.filter(|m| !m.trim().is_empty());
        if raw.kind.is_llm() && model.is_none() {
            self.error(
                p,
                &key("model"),
                format!("`model` is required for kind {}", raw.kind.as_str()),
            );
        }

        // Schedule: interval or cron, never both.
        let schedule = match (&raw.interval, &raw.schedule) {
            (Some(_), Some(_)) => {
                self.error(
                    p,
                    &key("schedule"),
                    "set either `interval` or `schedule`, not both",
                );
                None
            }
            (None, Some(expr)) => match cron::Schedule::from_str(expr) {
                Ok(s) => match cron_never_fires(&s, chrono::Utc::now()) {
                    Some(why) => {
                        self.error(p, &key("schedule"), format!("`{expr}` {why}"));
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
                    self.error(
                        p,
                        &key("schedule"),
                        format!("invalid cron expression `{expr}` ({hint})"),
                    );
                    None
                }
            },
            (Some(s), None) => self.duration(p, &key("interval"), s).and_then(|d| {
                if d < Duration::from_secs(1) {
                    self.error(p, &key("interval"), "must be at least 1s");
                    None
                } else {
                    Some(Schedule::Interval(d))
                }
            }),
            (None, None) => Some(Schedule::Interval(
                defaults.and_then(|d| d.interval).unwrap_or(DEFAULT_INTERVAL),
            )),
        };

        // Timeouts: an explicit timeout longer than the interval is an error (runs would
        // be skipped); an inherited one is clamped to the interval.
        let interval = match &schedule {
            Some(Schedule::Interval(d)) => Some(*d),
            _ => None,
        };
        let timeout = match &raw.timeout {
            Some(s) => self.duration(p, &key("timeout"), s).and_then(|t| match interval {
                Some(i) if t > i => {
                    self.error(
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
            None => {
                let t = defaults.and_then(|d| d.timeout).unwrap_or(DEFAULT_TIMEOUT);
                Some(interval.map_or(t, |i| t.min(i)))
            }
        };
        let first_token_timeout = match &raw.first_token_timeout {
            Some(s) => self
                .duration(p, &key("first_token_timeout"), s)
                .and_then(|f| match timeout {
                    Some(t) if f > t => {
                        self.error(
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

        // Headers: defaults first, the probe's own override by name (case-insensitive).
        self.duplicate_headers(p, &key("headers"), &raw.headers);
        let mut merged: BTreeMap<String, (String, String)> = BTreeMap::new();
        if let Some(d) = defaults {
            for (k, v) in &d.headers {
                merged.insert(
                    k.to_ascii_lowercase(),
                    (format!("defaults.headers.{k}"), v.clone()),
                );
            }
        }
        for (k, v) in &raw.headers {
            merged.insert(k.to_ascii_lowercase(), (key(&format!("headers.{k}")), v.clone()));
        }
        let mut headers = Vec::new();
        for (name_lc, (path, template)) in merged {
            let Ok(header) = http::HeaderName::from_str(&name_lc) else {
                self.error(p, &path, "not a valid HTTP header name");
                continue;
            };
            let Some(value) = self.substitute(p, &path, &template) else {
                continue;
            };
            if http::HeaderValue::from_str(&value).is_err() {
                // Do not echo the value: it may be a secret.
                self.error(
                    p,
                    &path,
                    "the value (after ${VAR} substitution) is not a valid HTTP header value",
                );
                continue;
            }
            headers.push((header, Secret::new(value)));
        }

        let prompts = self.prompts(p, prefix, raw.kind, raw.prompts);

        let max_tokens = raw
            .max_tokens
            .or(defaults.map(|d| d.max_tokens))
            .unwrap_or(DEFAULT_MAX_TOKENS);
        if !(1..=1_000_000).contains(&max_tokens) {
            self.error(p, &key("max_tokens"), "must be between 1 and 1000000");
        }

        let method = match (&raw.method, raw.kind) {
            (Some(_), k) if k.is_llm() => {
                self.error(p, &key("method"), "only for kind http");
                None
            }
            (Some(m), _) => match http::Method::from_str(&m.to_ascii_uppercase()) {
                Ok(m) => Some(m),
                Err(_) => {
                    self.error(p, &key("method"), format!("`{m}` is not an HTTP method"));
                    None
                }
            },
            (None, _) => Some(if raw.body.is_some() {
                http::Method::POST
            } else {
                http::Method::GET
            }),
        };
        if raw.body.is_some() && raw.kind.is_llm() {
            self.error(
                p,
                &key("body"),
                "only for kind http (LLM kinds build their own body)",
            );
        }

        let raw_expect = raw.expect.unwrap_or_default();
        for s in &raw_expect.status {
            if !(100..=599).contains(s) {
                self.error(
                    p,
                    &key("expect.status"),
                    format!("{s} is not an HTTP status code"),
                );
            }
        }
        if !raw.kind.is_llm() && raw_expect.min_output_tokens.is_some() {
            self.error(p, &key("expect.min_output_tokens"), "only for LLM kinds");
        }
        let finish_reasons = ANSWER_FINISH_REASONS;
        if !raw.kind.is_llm() && raw_expect.finish_reason.is_some() {
            self.error(p, &key("expect.finish_reason"), "only for LLM kinds");
        } else if let Some(bad) = raw_expect
            .finish_reason
            .iter()
            .flatten()
            .find(|r| !finish_reasons.contains(&r.as_str()))
        {
            self.error(
                p,
                &key("expect.finish_reason"),
                format!(
                    "{bad:?} is not a finish reason that carries an answer: one of {}",
                    finish_reasons.join(", ")
                ),
            );
        }
        let expect = Expect {
            status: raw_expect.status,
            non_empty: raw_expect.non_empty.unwrap_or(raw.kind.is_llm()),
            min_output_tokens: raw_expect
                .min_output_tokens
                .unwrap_or(if raw.kind.is_llm() { 1 } else { 0 }),
            finish_reason: raw_expect.finish_reason.unwrap_or_default(),
            contains: raw_expect.contains,
            matches: raw_expect
                .matches
                .and_then(|source| match regex::Regex::new(&source) {
                    Ok(regex) => Some(Pattern { source, regex }),
                    Err(e) => {
                        let first = e.to_string().lines().last().unwrap_or_default().trim().to_owned();
                        self.error(
                            p,
                            &key("expect.matches"),
                            format!("not a valid regular expression: {first}"),
                        );
                        None
                    }
                }),
            json: raw_expect.json.unwrap_or(false),
            model: raw_expect.model.unwrap_or(false),
            outputs: raw_expect.outputs.unwrap_or_default(),
            output_shape: raw_expect.output_shape,
            top_label: raw_expect.top_label.and_then(|v| match v {
                serde_yaml::Value::String(s) => Some(s),
                serde_yaml::Value::Number(n) => Some(n.to_string()),
                serde_yaml::Value::Bool(b) => Some(b.to_string()),
                _ => {
                    self.error(p, &key("expect.top_label"), "must be a label or a number");
                    None
                }
            }),
        };
        let only_kserve = [
            ("outputs", !expect.outputs.is_empty()),
            ("output_shape", expect.output_shape.is_some()),
            ("top_label", expect.top_label.is_some()),
        ];
        for (name, set) in only_kserve {
            if set && raw.kind != Kind::KserveV2 {
                self.error(p, &key(&format!("expect.{name}")), "only for kind kserve_v2");
            }
        }
        if expect.model && (!raw.kind.is_llm() || raw.kind == Kind::Tgi) {
            self.error(
                p,
                &key("expect.model"),
                "only for kinds whose responses name the model (not tgi, http, kserve_v2)",
            );
        }

        let mut labels: BTreeMap<String, String> = defaults.map(|d| d.labels.clone()).unwrap_or_default();
        labels.extend(raw.labels);
        self.labels(p, prefix, &labels);

        let max_response_bytes = raw
            .max_response_bytes
            .or(defaults.map(|d| d.max_response_bytes))
            .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES);
        if !(1024..=MAX_RESPONSE_BYTES).contains(&max_response_bytes) {
            self.error(
                p,
                &key("max_response_bytes"),
                "must be between 1024 and 1073741824 (1 GiB)",
            );
        }

        let tls = raw.tls.unwrap_or_default();
        let ca_file = tls
            .ca_file
            .and_then(|f| self.existing_file(p, &key("tls.ca_file"), &f));
        let insecure_skip_verify = tls.insecure_skip_verify.unwrap_or(false);
        if insecure_skip_verify {
            self.warn(
                p,
                &key("tls.insecure_skip_verify"),
                "TLS certificates are not verified: expired, self-signed or wrong-host certificates will not fail this probe",
            );
        }

        let images = raw.images.and_then(|i| self.images(p, prefix, raw.kind, i));
        let input = self.tensor_input(p, prefix, raw.kind, raw.input, images.as_ref());
        if raw.ready_check == Some(true)
            && url
                .as_ref()
                .is_some_and(|u| !u.path().trim_end_matches('/').ends_with("/infer"))
        {
            self.error(
                p,
                &key("ready_check"),
                "needs a url ending in /infer (the check asks .../ready)",
            );
        }
        for (name, set) in [
            ("ready_check", raw.ready_check.is_some()),
            ("outputs", raw.outputs.is_some()),
        ] {
            if set && raw.kind != Kind::KserveV2 {
                self.error(p, &key(name), "only for kind kserve_v2");
            }
        }
        if raw.kind == Kind::Http && images.is_some() && raw.body.is_some() {
            self.error(
                p,
                &key("body"),
                "an http probe sends either `body` or `images`, not both",
            );
        }

        let no_alert = RawAlert::default();
        let raw_alert = raw
            .alert
            .unwrap_or_default()
            .over(defaults.map_or(&no_alert, |d| &d.alert));
        let alert = self.alert(p, prefix, raw_alert, receivers);
        let no_slo = RawSlo::default();
        let raw_slo = raw
            .slo
            .unwrap_or_default()
            .over(defaults.map_or(&no_slo, |d| &d.slo));
        let slo = self.slo(p, prefix, raw_slo);
        if let Some(s) = &slo
            && s.ttft_p95.is_some()
            && !raw.kind.is_llm()
        {
            self.error(p, &key("slo.ttft_p95"), "only for LLM kinds; use total_p95");
        }

        if self.errors.len() > errors_before {
            return None;
        }
        Some(ProbeConfig {
            name,
            kind: raw.kind,
            url: url?,
            model,
            schedule: schedule?,
            timeout: timeout?,
            first_token_timeout: first_token_timeout?,
            headers,
            prompts: prompts?,
            max_tokens,
            method: method?,
            body: raw.body,
            expect,
            labels: labels.into_iter().collect(),
            reuse_connections: raw
                .reuse_connections
                .or(defaults.map(|d| d.reuse_connections))
                .unwrap_or(false),
            max_response_bytes,
            tls: TlsConfig {
                ca_file,
                server_name: tls.server_name,
                insecure_skip_verify,
            },
            images,
            input,
            ready_check: raw.ready_check.unwrap_or(false),
            outputs: raw.outputs.unwrap_or_default(),
            alert: alert?,
            slo: slo?,
        })
    }

    fn tensor_input(
        &mut self,
        probe: Option<&str>,
        prefix: &str,
        kind: Kind,
        raw: Option<RawInput>,
        images: Option<&Images>,
    ) -> Option<TensorInput> {
        let key = format!("{prefix}.input");
        let Some(raw) = raw else {
            if kind == Kind::KserveV2 {
                self.error(probe, &key, "kind kserve_v2 needs an `input` tensor");
            }
            return None;
        };
        if kind != Kind::KserveV2 {
            self.error(probe, &key, "only for kind kserve_v2");
            return None;
        }
        let datatype = raw.datatype.to_ascii_uppercase();
        if !TENSOR_DATATYPES.contains(&datatype.as_str()) {
            self.error(
                probe,
                &format!("{key}.datatype"),
                format!("`{}` is not one of {}", raw.datatype, TENSOR_DATATYPES.join(", ")),
            );
            return None;
        }
        if raw.shape.is_empty() || raw.shape.iter().any(|d| *d < 1) {
            self.error(probe, &format!("{key}.shape"), "dimensions must be 1 or more");
            return None;
        }
        let elements = raw.shape.iter().try_fold(1i64, |acc, d| acc.checked_mul(*d));
        let Some(elements) = elements.filter(|e| *e <= MAX_TENSOR_ELEMENTS) else {
            self.error(
                probe,
                &format!("{key}.shape"),
                format!("more than {MAX_TENSOR_ELEMENTS} elements"),
            );
            return None;
        };
        let data = match (raw.data, raw.image.as_deref()) {
            (Some(values), None) => {
                if values.len() as i64 != elements {
                    self.error(
                        probe,
                        &format!("{key}.data"),
                        format!(
                            "{} values for shape {:?}, which holds {elements}",
                            values.len(),
                            raw.shape
                        ),
                    );
                    return None;
                }
                TensorData::Literal(values)
            }
            (None, Some(how)) => {
                if images.is_none() {
                    self.error(probe, &format!("{key}.image"), "set the probe's `images` to send");
                    return None;
                }
                match how {
                    "bytes" if datatype == "BYTES" => TensorData::ImageBytes,
                    "bytes" => {
                        self.error(
                            probe,
                            &format!("{key}.datatype"),
                            "encoded image bytes travel as BYTES",
                        );
                        return None;
                    }
                    "pixels" => {
                        let channels_first = match raw.layout.as_deref().unwrap_or("NHWC") {
                            "NHWC" => false,
                            "NCHW" => true,
                            other => {
                                self.error(
                                    probe,
                                    &format!("{key}.layout"),
                                    format!("`{other}` is not NHWC or NCHW"),
                                );
                                return None;
                            }
                        };
                        let channels = if channels_first {
                            raw.shape.get(1)
                        } else {
                            raw.shape.get(3)
                        };
                        if raw.shape.len() != 4 || raw.shape[0] != 1 || channels != Some(&3) {
                            self.error(
                                probe,
                                &format!("{key}.shape"),
                                "pixels need a shape [1, H, W, 3] (NHWC) or [1, 3, H, W] (NCHW)",
                            );
                            return None;
                        }
                        if !matches!(datatype.as_str(), "UINT8" | "FP32") {
                            self.error(
                                probe,
                                &format!("{key}.datatype"),
                                "pixels travel as UINT8 (0-255) or FP32 (0-1)",
                            );
                            return None;
                        }
                        TensorData::ImagePixels { channels_first }
                    }
                    other => {
                        self.error(
                            probe,
                            &format!("{key}.image"),
                            format!("`{other}` is not bytes or pixels"),
                        );
                        return None;
                    }
                }
            }
            _ => {
                self.error(probe, &key, "set exactly one of `data` or `image`");
                return None;
            }
        };
        Some(TensorInput {
            name: raw.name,
            datatype,
            shape: raw.shape,
            data,
        })
    }

    fn images(&mut self, probe: Option<&str>, prefix: &str, kind: Kind, raw: RawImages) -> Option<Images> {
        let key = format!("{prefix}.images");
        if !kind.takes_images() {
            self.error(
                probe,
                &key,
                format!("kind {} does not take images", kind.as_str()),
            );
            return None;
        }
        let mut sources = Vec::new();
        if raw.builtin.as_ref().is_some_and(Vec::is_empty) || raw.files.as_ref().is_some_and(Vec::is_empty) {
            self.error(probe, &key, "an empty list of images");
        }
        for (i, name) in raw.builtin.iter().flatten().enumerate() {
            match BUILTIN_IMAGES.iter().find(|b| b.name == name) {
                Some(b) => sources.push(ImageSource::Builtin(*b)),
                None => {
                    let names: Vec<_> = BUILTIN_IMAGES.iter().map(|b| b.name).collect();
                    self.error(
                        probe,
                        &format!("{key}.builtin[{i}]"),
                        format!(
                            "no built-in image `{name}`; the built-in images are {}",
                            names.join(", ")
                        ),
                    );
                }
            }
        }
        for (i, file) in raw.files.iter().flatten().enumerate() {
            let path = self.base_dir.join(file);
            let file_key = format!("{key}.files[{i}]");
            if path.is_dir() {
                // Regular files only: a FIFO named x.png would hang the probe's build.
                let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
                    .map(|entries| {
                        entries
                            .filter_map(|e| e.ok().map(|e| e.path()))
                            .filter(|p| {
                                p.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                                    matches!(e.to_ascii_lowercase().as_str(), "jpg" | "jpeg" | "png")
                                }) && p.is_file()
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                found.sort();
                if found.is_empty() {
                    self.error(
                        probe,
                        &file_key,
                        format!("no .jpg, .jpeg or .png file in the folder `{file}`"),
                    );
                }
                for f in found {
                    if let Some(f) = self.image_file(probe, &file_key, f) {
                        sources.push(ImageSource::File(f));
                    }
                }
            } else {
                match std::fs::metadata(&path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.error(
                        probe,
                        &file_key,
                        format!("no such file or folder: `{file}` (relative to this file)"),
                    ),
                    _ => {
                        if let Some(f) = self.image_file(probe, &file_key, path) {
                            sources.push(ImageSource::File(f));
                        }
                    }
                }
            }
        }
        if raw.builtin.is_none() && raw.files.is_none() {
            self.error(probe, &key, "name `builtin` images, `files`, or both");
        }
        let per_run = raw.per_run.unwrap_or(1);
        if !(1..=16).contains(&per_run) {
            self.error(probe, &format!("{key}.per_run"), "must be between 1 and 16");
        }
        if let Some(d) = &raw.detail {
            if !matches!(kind, Kind::OpenAiChat | Kind::OpenAiResponses) {
                self.error(
                    probe,
                    &format!("{key}.detail"),
                    "only for openai_chat and openai_responses",
                );
            } else if !matches!(d.as_str(), "low" | "high" | "auto") {
                self.error(
                    probe,
                    &format!("{key}.detail"),
                    format!("`{d}` is not one of low, high, auto"),
                );
            }
        }
        let upload = match (raw.upload.as_deref(), kind) {
            (None | Some("multipart"), Kind::Http) => Upload::Multipart {
                field: raw.field.clone().unwrap_or_else(|| "data".to_owned()),
            },
            (Some("raw"), Kind::Http) => {
                if per_run != 1 {
                    self.error(
                        probe,
                        &format!("{key}.per_run"),
                        "a raw upload sends exactly one image",
                    );
                }
                Upload::Raw
            }
            (Some(other), Kind::Http) => {
                self.error(
                    probe,
                    &format!("{key}.upload"),
                    format!("`{other}` is not one of multipart, raw"),
                );
                Upload::Raw
            }
            (Some(_), _) => {
                self.error(probe, &format!("{key}.upload"), "only for kind http");
                Upload::Raw
            }
            (None, _) => Upload::Raw,
        };
        if raw.field.is_some() && !matches!(upload, Upload::Multipart { .. }) {
            self.error(
                probe,
                &format!("{key}.field"),
                "only for multipart uploads of kind http",
            );
        }
        (!sources.is_empty()).then_some(Images {
            sources,
            per_run,
            detail: raw.detail,
            upload,
        })
    }

    /// An image file to send: regular, and at most [`files::MAX_IMAGE_FILE_BYTES`] (it
    /// is read when the probe is built, through the same checks).
    fn image_file(&mut self, probe: Option<&str>, key: &str, path: PathBuf) -> Option<PathBuf> {
        let problem = match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => Some(files::FileError::NotRegular(files::kind(&m))),
            Ok(m) if m.len() > files::MAX_IMAGE_FILE_BYTES => {
                Some(files::FileError::TooLarge(files::MAX_IMAGE_FILE_BYTES))
            }
            Ok(_) => None,
            Err(e) => Some(files::FileError::Io(e)),
        };
        match problem {
            None => Some(path),
            Some(e) => {
                let name = path
                    .strip_prefix(&self.base_dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                self.error(probe, key, file_message(&name, &e));
                None
            }
        }
    }

    fn duration(&mut self, probe: Option<&str>, key: &str, s: &str) -> Option<Duration> {
        match humantime::parse_duration(s.trim()) {
            Ok(d) if d.is_zero() => {
                self.error(probe, key, "must be longer than zero");
                None
            }
            Ok(d) if d > MAX_DURATION => {
                self.error(probe, key, "must be at most 7 days");
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                // humantime lists every unit it knows; keep the first clause.
                let e = e.to_string();
                let e = e.split(", supported").next().unwrap_or_default();
                self.error(
                    probe,
                    key,
                    format!("`{s}` is not a duration like 30s, 1m30s or 500ms ({e})"),
                );
                None
            }
        }
    }

    /// A URL to dial, after `${VAR}`, through the one strict parser ([`parse_url`]).
    /// Messages never echo it: it may hold a secret.
    fn url(&mut self, probe: Option<&str>, key: &str, template: &str) -> Option<http::Uri> {
        let text = self.substitute(probe, key, template)?;
        match parse_url(&text).and_then(|u| to_uri(&u)) {
            Ok(uri) => Some(uri),
            Err(e) => {
                self.error(probe, key, e.to_string());
                None
            }
        }
    }

    /// Header names are case-insensitive: `Authorization` and `authorization` in one
    /// mapping are the same header, and one would be silently dropped. Reported at the
    /// one written second.
    fn duplicate_headers(&mut self, probe: Option<&str>, prefix: &str, raw: &BTreeMap<String, String>) {
        let mut lower: Vec<(String, &String)> = raw.keys().map(|k| (k.to_ascii_lowercase(), k)).collect();
        lower.sort();
        if lower.windows(2).all(|w| w[0].0 != w[1].0) {
            return;
        }
        // Positions only now: a file without the problem never builds the index.
        let mut names: Vec<((usize, usize), &String)> = raw
            .keys()
            .map(|k| (self.index().locate_key(&format!("{prefix}.{k}")), k))
            .collect();
        names.sort();
        let mut first: HashMap<String, &String> = HashMap::new();
        for (position, name) in names {
            if let Some(earlier) = first.insert(name.to_ascii_lowercase(), name) {
                first.insert(name.to_ascii_lowercase(), earlier);
                self.error_at(
                    position,
                    probe,
                    &format!("{prefix}.{name}"),
                    format!(
                        "`{earlier}` is set too: header names are case-insensitive, so one would be dropped"
                    ),
                );
            }
        }
    }

    /// Header values (after `${VAR}`) as secrets; `prefix` is the `headers` key.
    fn secret_headers(
        &mut self,
        probe: Option<&str>,
        prefix: &str,
        raw: &BTreeMap<String, String>,
    ) -> Vec<(http::HeaderName, Secret)> {
        self.duplicate_headers(probe, prefix, raw);
        let mut headers = Vec::new();
        for (name, template) in raw {
            let path = format!("{prefix}.{name}");
            let Ok(header) = http::HeaderName::from_str(&name.to_ascii_lowercase()) else {
                self.error(probe, &path, "not a valid HTTP header name");
                continue;
            };
            let Some(value) = self.substitute(probe, &path, template) else {
                continue;
            };
            if http::HeaderValue::from_str(&value).is_err() {
                // Do not echo the value: it may be a secret.
                self.error(
                    probe,
                    &path,
                    "the value (after ${VAR} substitution) is not a valid HTTP header value",
                );
                continue;
            }
            headers.push((header, Secret::new(value)));
        }
        headers
    }

    /// A CA file named relative to the config file: a regular file of at most
    /// [`files::MAX_CA_FILE_BYTES`], read once here so that `check` finds what the
    /// client would fail on.
    fn existing_file(&mut self, probe: Option<&str>, key: &str, name: &str) -> Option<PathBuf> {
        let path = self.base_dir.join(name);
        match files::read_regular(&path, files::MAX_CA_FILE_BYTES) {
            Ok(_) => Some(path),
            Err(e) => {
                self.error(probe, key, file_message(name, &e));
                None
            }
        }
    }

    /// A URL that may hold a secret (a Slack webhook, credentials): checked, never echoed.
    fn secret_url(&mut self, key: &str, template: &str) -> Option<http::Uri> {
        self.url(None, key, template)
    }

    /// Replaces `${NAME}` with the environment's value; `$$` is a literal `$`. A missing
    /// variable is an error. Values are never echoed in messages.
    fn substitute(&mut self, probe: Option<&str>, key: &str, template: &str) -> Option<String> {
        let used = std::cell::RefCell::new(Vec::new());
        let env = |name: &str| {
            let value = (self.env)(name);
            used.borrow_mut().extend(value.clone());
            value
        };
        let result = substitute_env(template, &env);
        self.substituted.extend(used.into_inner());
        match result {
            Ok(s) => Some(s),
            Err(message) => {
                self.error(probe, key, message);
                None
            }
        }
    }

    fn prompts(
        &mut self,
        probe: Option<&str>,
        prefix: &str,
        kind: Kind,
        raw: Option<RawPrompts>,
    ) -> Option<Prompts> {
        let key = format!("{prefix}.prompts");
        let Some(raw) = raw else {
            return Some(Prompts::Builtin(PromptBucket::ALL.to_vec()));
        };
        if !kind.is_llm() {
            self.error(probe, &key, "only for LLM kinds; use `body` for http");
            return None;
        }
        let set = [raw.builtin.is_some(), raw.inline.is_some(), raw.file.is_some()];
        if set.iter().filter(|s| **s).count() != 1 {
            self.error(probe, &key, "set exactly one of `builtin`, `inline` or `file`");
            return None;
        }
        if let Some(mut buckets) = raw.builtin {
            if buckets.is_empty() {
                self.error(
                    probe,
                    &format!("{key}.builtin"),
                    "name at least one of short, medium, long",
                );
                return None;
            }
            buckets.sort();
            buckets.dedup();
            return Some(Prompts::Builtin(buckets));
        }
        let (list, list_key) = if let Some(inline) = raw.inline {
            (inline, format!("{key}.inline"))
        } else {
            let file = raw.file.unwrap_or_default();
            let path = self.base_dir.join(&file);
            match files::read_regular_text(&path, files::MAX_PROMPT_FILE_BYTES) {
                Ok(text) => (split_prompt_file(&text), format!("{key}.file")),
                Err(e) => {
                    self.error(probe, &format!("{key}.file"), file_message(&file, &e));
                    return None;
                }
            }
        };
        let list: Vec<String> = list.into_iter().filter(|p| !p.trim().is_empty()).collect();
        if list.is_empty() {
            self.error(probe, &list_key, "holds no prompt");
            return None;
        }
        Some(Prompts::Custom(list))
    }

    fn labels(&mut self, probe: Option<&str>, prefix: &str, labels: &BTreeMap<String, String>) {
        if labels.len() > MAX_LABELS {
            self.error(
                probe,
                &format!("{prefix}.labels"),
                format!(
                    "{} labels; at most {MAX_LABELS} (each one multiplies every series)",
                    labels.len()
                ),
            );
        }
        for (k, v) in labels {
            let key = format!("{prefix}.labels.{k}");
            let valid_name = k
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !k.starts_with("__");
            if !valid_name {
                self.error(
                    probe,
                    &key,
                    "a label name is letters, digits and `_`, not starting with a digit or `__`",
                );
            } else if RESERVED_LABELS.contains(&k.as_str()) {
                self.error(
                    probe,
                    &key,
                    format!("`{k}` is set by inferprobe itself; choose another name"),
                );
            }
            if v.is_empty() || v.len() > MAX_LABEL_VALUE_LEN {
                self.error(
                    probe,
                    &key,
                    format!("a label value must be 1-{MAX_LABEL_VALUE_LEN} characters"),
                );
            } else if looks_like_identifier(v) {
                self.error(
                    probe,
                    &key,
                    "the value looks like a unique id; labels must be low-cardinality (a team, a tier, a region)",
                );
            }
        }
    }
}

/// Replaces `${NAME}` with `env(NAME)`, `${NAME:-default}` with the default when NAME is
/// unset or empty; `$$` is a literal `$`.
pub fn substitute_env(template: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        rest = &rest[pos..];
        if let Some(r) = rest.strip_prefix("$$") {
            out.push('$');
            rest = r;
        } else if let Some(r) = rest.strip_prefix("${") {
            let Some(end) = r.find('}') else {
                return Err("unterminated `${` (write `$$` for a literal `$`)".into());
            };
            let (name, default) = match r[..end].split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (&r[..end], None),
            };
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "`${{{name}}}` is not a valid environment variable reference"
                ));
            }
            match (env(name).filter(|v| !v.is_empty() || default.is_none()), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => return Err(format!("environment variable {name} is not set")),
            }
            rest = &r[end + 1..];
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A cron schedule must fire within this long: one that does not (`0 0 0 30 2 *`, 30
/// February) is accepted by the cron grammar, and its probe would show NO DATA forever.
const CRON_HORIZON_DAYS: i64 = 5 * 366;

/// Why a cron schedule is useless, if it is: no occurrence within [`CRON_HORIZON_DAYS`].
fn cron_never_fires(schedule: &cron::Schedule, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
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

/// Why a named file cannot be used, naming it as the config does.
fn file_message(name: &str, e: &files::FileError) -> String {
    match e {
        files::FileError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            format!("no such file: `{name}` (relative to this file)")
        }
        files::FileError::Io(io) => format!("cannot read `{name}` (relative to this file): {io}"),
        other => format!("`{name}` {other}"),
    }
}

/// A prompt file holds prompts separated by lines that contain only `---`.
fn split_prompt_file(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for line in text.lines() {
        if line.trim() == "---" {
            out.push(String::new());
        } else {
            let cur = out.last_mut().expect("never empty");
            if !cur.is_empty() {
                cur.push('\n');
            }
            cur.push_str(line);
        }
    }
    out.into_iter().map(|p| p.trim().to_owned()).collect()
}

/// Names and locations become label values: keep them short and plain.
/// A label value we accept from people: names, locations.
pub fn valid_label_value(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL_VALUE_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// UUIDs, long hex or long digit strings: values that are almost always unique per
/// request or user, and so explode series counts.
fn looks_like_identifier(v: &str) -> bool {
    let hexish = v.chars().filter(|c| c.is_ascii_hexdigit() || *c == '-').count() == v.len();
    let digits = v.chars().filter(char::is_ascii_digit).count();
    (hexish && v.len() >= 16 && digits >= 4) || (digits >= 10 && digits * 2 > v.len())
}

fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn join_path(prefix: &str, inner: &str) -> String {
    match (prefix.is_empty(), inner.is_empty()) {
        (_, true) => prefix.to_owned(),
        (true, false) => inner.to_owned(),
        (false, false) if inner.starts_with('[') => format!("{prefix}{inner}"),
        (false, false) => format!("{prefix}.{inner}"),
    }
}

/// Removes `key` from the mapping at `path` (dotted, with `[i]` for list items) inside
/// `value`. Returns whether it was there.
fn remove_key(value: &mut Value, path: &str, key: &str) -> bool {
    let mut node = value;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, index) = match part.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !name.is_empty() {
            let Some(next) = node.get_mut(name) else {
                return false;
            };
            node = next;
        }
        if let Some(i) = index {
            let Some(next) = node.get_mut(i) else { return false };
            node = next;
        }
    }
    node.as_mapping_mut().and_then(|m| m.remove(key)).is_some()
}

/// serde_path_to_error's path for an unknown field may or may not end in the field
/// itself; return the path of the mapping that holds it.
fn key_parent(key: &str, unknown: &str) -> String {
    key.strip_suffix(unknown)
        .map(|k| k.trim_end_matches('.').to_owned())
        .unwrap_or_else(|| key.to_owned())
}

/// Pulls `x` and the expected names out of "unknown field `x`, expected one of `a`, `b`".
fn parse_unknown_field(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (name, rest) = rest.split_once('`')?;
    let expected = rest.split('`').skip(1).step_by(2).map(str::to_owned).collect();
    Some((name.to_owned(), expected))
}

/// The closest expected key within edit distance 2, if any.
fn suggest<S: AsRef<str>>(unknown: &str, expected: &[S]) -> Option<String> {
    expected
        .iter()
        .map(|e| (levenshtein(unknown, e.as_ref()), e.as_ref()))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, e)| e.to_owned())
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// serde_norway appends " at line L column C"; we print the position ourselves.
fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// Positions.

/// Line and column of every key and value in a YAML document, by path
/// (`probes[1].headers.Authorization`). serde drops positions once a value is parsed;
/// this keeps them so every semantic error can say where it is.
#[derive(Debug, Default)]
pub struct PositionIndex {
    positions: HashMap<String, (usize, usize)>,
    /// Where each mapping key itself stands (for "unknown key" errors).
    keys: HashMap<String, (usize, usize)>,
}

impl PositionIndex {
    pub fn build(text: &str) -> Self {
        use yaml_rust2::parser::{Event, Parser};
        enum Frame {
            Map {
                path: String,
                expecting_key: bool,
                key: Option<String>,
            },
            Seq {
                path: String,
                next: usize,
            },
        }
        let mut positions = HashMap::new();
        let mut keys = HashMap::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut parser = Parser::new_from_str(text);
        // The path of the node that starts now, consuming a key slot or a sequence slot.
        fn node_path(stack: &mut [Frame]) -> Option<String> {
            match stack.last_mut()? {
                Frame::Map {
                    path,
                    expecting_key,
                    key,
                } => {
                    *expecting_key = true;
                    key.take().map(|k| join_path(path, &k))
                }
                Frame::Seq { path, next } => {
                    *next += 1;
                    Some(format!("{path}[{}]", *next - 1))
                }
            }
        }
        while let Ok((event, marker)) = parser.next_token() {
            // yaml-rust2 columns count from 0; editors count from 1.
            let pos = (marker.line(), marker.col() + 1);
            match event {
                Event::StreamEnd => break,
                Event::Scalar(value, ..) => {
                    if let Some(Frame::Map {
                        path,
                        expecting_key,
                        key,
                    }) = stack.last_mut()
                        && *expecting_key
                    {
                        *expecting_key = false;
                        // A mapping is "at" its first key: block mappings' own start
                        // markers point past it.
                        positions.entry(path.clone()).or_insert(pos);
                        let full = join_path(path, &value);
                        positions.entry(full.clone()).or_insert(pos);
                        keys.insert(full, pos);
                        *key = Some(value);
                        continue;
                    }
                    if let Some(path) = node_path(&mut stack) {
                        // Point value errors at the value itself.
                        positions.insert(path, pos);
                    }
                }
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    let is_map = matches!(event, Event::MappingStart(..));
                    let path = if stack.is_empty() {
                        Some(String::new())
                    } else {
                        node_path(&mut stack)
                    };
                    let path = path.unwrap_or_default();
                    if !is_map {
                        positions.entry(path.clone()).or_insert(pos);
                    }
                    stack.push(if is_map {
                        Frame::Map {
                            path,
                            expecting_key: true,
                            key: None,
                        }
                    } else {
                        Frame::Seq { path, next: 0 }
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                }
                Event::Alias(_) => {
                    node_path(&mut stack);
                }
                _ => {}
            }
        }
        PositionIndex { positions, keys }
    }

    /// Where the key of `path` stands, falling back to [`PositionIndex::locate`].
    pub fn locate_key(&self, path: &str) -> (usize, usize) {
        self.keys.get(path).copied().unwrap_or_else(|| self.locate(path))
    }

    /// Where `path` is, or its nearest ancestor that is in the file (a missing key is
    /// reported at the mapping that lacks it).
    pub fn locate(&self, path: &str) -> (usize, usize) {
        let mut p = path;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return *pos;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return self.positions.get("").copied().unwrap_or((1, 1)),
            }
        }
    }
}

#[cfg(test)]
mod tests;
