//! The raw serde shapes of `probes.yaml`: what the file may contain (step 2 of loading).
//! Plain strings for anything that needs checking, so the checks (check.rs, probe.rs,
//! content.rs) can report every bad value instead of stopping at the first. Imports only
//! the config's own types.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::alerting::{RawAlert, RawSlo};
use super::remote_write::RawRemoteWrite;
use super::schema::{
    BuiltinImageName, Datatype, Duration, FinishReason, HttpMethod, ImageDetail, Labels, Layout, Name,
    StatusCodes, TensorImage, TopLabel, UploadAs,
};
use super::tracing::{RawTrace, RawTracing};
use super::{Kind, PromptBucket};

/// The run history kept on disk (status page, reports); the oldest runs go first.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "History")]
pub(super) struct RawHistory {
    /// How long runs are kept: 1h to 400d (default 30d).
    #[schemars(with = "Option<Duration>")]
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

/// `cost:` (defaults or an LLM probe): what its tokens cost, for `inferprobe report`.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Cost")]
pub(super) struct RawCost {
    /// Price of one million input (prompt) tokens, e.g. 0.15.
    #[schemars(range(min = 0))]
    pub(super) input_per_million: Option<f64>,
    /// Price of one million output (generated) tokens, e.g. 0.60.
    #[schemars(range(min = 0))]
    pub(super) output_per_million: Option<f64>,
    /// The prices' currency: three capital letters, e.g. USD (default USD).
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub(super) currency: Option<String>,
}

/// `budget:` (defaults or an LLM probe): tokens a probe may use a day; over it, the agent
/// warns and stretches the probe's interval (it never stops probing).
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Budget")]
pub(super) struct RawBudget {
    /// Input plus output tokens in any 24 hours, e.g. 2000000.
    #[schemars(range(min = 1))]
    pub(super) tokens_per_day: Option<u64>,
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
}

/// Values every probe inherits unless it sets its own (each applies only to the kinds
/// it fits).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Defaults")]
pub(super) struct RawDefaults {
    /// How often each probe runs, e.g. 30s (default 30s).
    #[schemars(with = "Option<Duration>")]
    pub(super) interval: Option<String>,
    /// The whole response must be in by then (default 25s).
    #[schemars(with = "Option<Duration>")]
    pub(super) timeout: Option<String>,
    /// LLM kinds: the first generated token must be in by then.
    #[schemars(with = "Option<Duration>")]
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
    pub(super) kind: Kind,
    /// The full URL to call, e.g. http://127.0.0.1:8000/v1/chat/completions.
    pub(super) url: String,
    /// The model to ask for; required for LLM kinds (for kserve_v2 and http, a label).
    pub(super) model: Option<String>,
    /// How often to run, e.g. 30s, 5m (default: defaults.interval, else 30s).
    #[schemars(with = "Option<Duration>")]
    pub(super) interval: Option<String>,
    /// Run on a cron schedule instead of an interval: 6 or 7 fields, seconds first, UTC
    /// (e.g. "0 */5 * * * *").
    pub(super) schedule: Option<String>,
    /// The whole response must be in by then (at most the interval; default 25s).
    #[schemars(with = "Option<Duration>")]
    pub(super) timeout: Option<String>,
    /// LLM kinds: the first generated token must be in by then.
    #[schemars(with = "Option<Duration>")]
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
    /// http: the request method (default POST with a body, else GET).
    #[schemars(with = "Option<HttpMethod>")]
    pub(super) method: Option<String>,
    /// http: the request body, sent as written.
    pub(super) body: Option<String>,
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
    /// kserve_v2: the input tensor to send.
    pub(super) input: Option<RawInput>,
    /// kserve_v2: ask the model's /ready before each inference (its own phase); the URL
    /// must end in /infer.
    pub(super) ready_check: Option<bool>,
    /// kserve_v2: the output tensors to request (default: all).
    pub(super) outputs: Option<Vec<String>>,
    /// kserve_v2_grpc: the model version to ask for (default: the server's choice).
    pub(super) model_version: Option<String>,
    /// grpc_health: the service whose health to ask for (default "", the whole server).
    pub(super) service: Option<String>,
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
}

/// `images:` as a mapping (`builtin`, `files`, ...) or a plain list, `[cat.jpg, x.png]`,
/// whose items are built-in images or files by whether they name a built-in one.
#[derive(Debug, Default)]
pub(crate) struct RawImages {
    pub(super) builtin: Option<Vec<String>>,
    pub(super) files: Option<Vec<String>>,
    pub(super) per_run: Option<usize>,
    pub(super) detail: Option<String>,
    pub(super) upload: Option<String>,
    pub(super) field: Option<String>,
    /// The plain list, as written.
    pub(super) list: Option<Vec<String>>,
}

/// Images as a mapping: built-in ones, files, or both.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ImagesMapping", transform = super::schema::some_image_source)]
pub(super) struct ImagesMap {
    /// Generated images, by name (a photo-like scene or a chart, at common sizes).
    #[schemars(with = "Option<Vec<BuiltinImageName>>", length(min = 1))]
    builtin: Option<Vec<String>>,
    /// JPEG or PNG files, or folders of them, relative to this file.
    #[schemars(length(min = 1))]
    files: Option<Vec<String>>,
    /// Images sent per run, taken in turn (default 1).
    #[schemars(range(min = 1, max = 16))]
    per_run: Option<usize>,
    /// openai_chat, openai_responses: the resolution the model looks at (low, high, auto).
    #[schemars(with = "Option<ImageDetail>")]
    detail: Option<String>,
    /// http: how images are sent: `multipart` (a form field, as TorchServe reads it;
    /// the default) or `raw` (the file as the whole body).
    #[schemars(with = "Option<UploadAs>")]
    upload: Option<String>,
    /// http, multipart upload: the form field's name (default `data`).
    field: Option<String>,
}

impl<'de> Deserialize<'de> for RawImages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListOrMap {
            expecting: "a list of images (built-in names or files), or a mapping with `builtin` and/or `files`",
            list: |list| RawImages {
                list: Some(list),
                ..RawImages::default()
            },
            map: |m: ImagesMap| RawImages {
                builtin: m.builtin,
                files: m.files,
                per_run: m.per_run,
                detail: m.detail,
                upload: m.upload,
                field: m.field,
                list: None,
            },
            shape: std::marker::PhantomData,
        })
    }
}

/// `prompts:` as a mapping (`builtin`, `inline` or `file`) or a plain list of prompts,
/// which is `inline`.
#[derive(Debug, Default)]
pub(super) struct RawPrompts {
    pub(super) builtin: Option<Vec<PromptBucket>>,
    pub(super) inline: Option<Vec<String>>,
    pub(super) file: Option<String>,
    /// Written as a plain list (so `inline`'s problems are the list's).
    pub(super) plain: bool,
}

/// Prompts as a mapping: built-in buckets, your own prompts inline, or a file of them.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "PromptsMapping", transform = super::schema::one_prompt_source)]
pub(super) struct PromptsMap {
    /// Built-in prompts by length bucket (short < 64 tokens, medium 64-256, long > 256),
    /// rotated per run; the bucket is the `prompt_bucket` label.
    builtin: Option<Vec<PromptBucket>>,
    /// Your own prompts, rotated per run.
    inline: Option<Vec<String>>,
    /// A file of prompts separated by lines holding only `---`, relative to this file.
    file: Option<String>,
}

impl<'de> Deserialize<'de> for RawPrompts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListOrMap {
            expecting: "a list of prompts, or a mapping with `builtin`, `inline` or `file`",
            list: |list| RawPrompts {
                inline: Some(list),
                plain: true,
                ..RawPrompts::default()
            },
            map: |m: PromptsMap| RawPrompts {
                builtin: m.builtin,
                inline: m.inline,
                file: m.file,
                plain: false,
            },
            shape: std::marker::PhantomData,
        })
    }
}

/// A key that takes a list of strings or a mapping `M`: each becomes the raw shape `T`.
/// The mapping is read by `M`'s derived code, so unknown keys are reported as anywhere.
struct ListOrMap<M, L, F> {
    expecting: &'static str,
    list: L,
    map: F,
    shape: std::marker::PhantomData<fn() -> M>,
}

impl<'de, T, M, L, F> Visitor<'de> for ListOrMap<M, L, F>
where
    M: Deserialize<'de>,
    L: FnOnce(Vec<String>) -> T,
    F: FnOnce(M) -> T,
{
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        let list = Vec::<String>::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok((self.list)(list))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let m = M::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok((self.map)(m))
    }
}

/// What a run must show to count as a success, beyond a complete, well-formed response.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Expect")]
pub(super) struct RawExpect {
    /// Accepted HTTP status codes: one or a list (default: any 2xx).
    #[serde(default, deserialize_with = "one_or_many_statuses")]
    #[schemars(with = "StatusCodes")]
    pub(super) status: Vec<u16>,
    /// The generated text (LLM kinds) or body must not be empty (default: true for LLM
    /// kinds).
    pub(super) non_empty: Option<bool>,
    /// LLM kinds: at least this many tokens must be generated.
    pub(super) min_output_tokens: Option<u64>,
    /// LLM kinds: the reasons the generation may end for (default: any that carries an
    /// answer).
    #[schemars(with = "Option<Vec<FinishReason>>")]
    pub(super) finish_reason: Option<Vec<String>>,
    /// The generated text (LLM kinds) or body must contain this text.
    pub(super) contains: Option<String>,
    /// The generated text (LLM kinds) or body must match this regular expression,
    /// e.g. "(?i)paris".
    pub(super) matches: Option<String>,
    /// The body must be valid JSON.
    pub(super) json: Option<bool>,
    /// LLM kinds: the response must name the model asked for.
    pub(super) model: Option<bool>,
    /// kserve_v2: the response must have these output tensors.
    pub(super) outputs: Option<Vec<String>>,
    /// kserve_v2: the first output's shape, e.g. [1, 1000].
    pub(super) output_shape: Option<Vec<i64>>,
    /// kserve_v2: the classifier's top label (or class index) must be this.
    #[schemars(with = "Option<TopLabel>")]
    pub(super) top_label: Option<serde_yaml::Value>,
}

/// kserve_v2: the input tensor, literal `data` or the probe's images.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Input")]
pub(crate) struct RawInput {
    /// The model's input name, e.g. input-0.
    pub(super) name: String,
    /// The tensor's datatype, e.g. FP32, UINT8, BYTES.
    #[schemars(with = "Datatype")]
    pub(super) datatype: String,
    /// The tensor's shape, e.g. [1, 64] or [1, 3, 224, 224].
    pub(super) shape: Vec<i64>,
    /// The values, row-major, as many as the shape holds (or set `image`).
    pub(super) data: Option<Vec<serde_json::Value>>,
    /// Send the probe's images: `pixels` (decoded, resized to the shape) or `bytes`
    /// (the encoded file as one BYTES element).
    #[schemars(with = "Option<TensorImage>")]
    pub(super) image: Option<String>,
    /// image: pixels: NHWC (default) or NCHW.
    #[schemars(with = "Option<Layout>")]
    pub(super) layout: Option<String>,
}

/// TLS settings for the probe's endpoint.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Tls")]
pub(super) struct RawTls {
    /// A PEM file of extra CA certificates to trust (a private CA), relative to this
    /// file.
    pub(super) ca_file: Option<String>,
    /// The name to verify the server's certificate against (default: the URL's host).
    pub(super) server_name: Option<String>,
    /// Do not verify the server's certificate: measured, but not safe; a warning.
    pub(super) insecure_skip_verify: Option<bool>,
}

/// `status: 200` and `status: [200, 201]` both work.
pub(super) fn one_or_many_statuses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
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
