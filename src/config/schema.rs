//! `inferprobe schema`: the JSON Schema (draft 2020-12) of `probes.yaml`, for editors
//! (yaml-language-server completes keys, shows each key's description on hover and flags
//! mistakes as they are typed). It is derived from the loader's own serde shapes
//! (raw.rs, alerting.rs, remote_write.rs and the list of kinds), so a key the loader reads
//! is a key the schema knows, with the same `deny_unknown_fields`. Written here: the root,
//! which check.rs splits by hand; the schemas of the shapes whose serde is hand-written
//! (a list or a mapping, one status or many); and the string formats the checks enforce
//! (durations, names, labels, closed sets), which the raw shapes keep as plain strings.
//!
//! The schema refuses less than `check` does (files, URLs, most rules across keys are the
//! loader's), never more: every string that may hold `${VAR}` accepts a reference where
//! a pattern or a closed set would otherwise refuse it. The rules by kind it carries are
//! the ones [`Kind`] itself answers (`is_llm`, `takes_images`). `patternErrorMessage`,
//! `errorMessage` and `enumDescriptions` are editor keywords (VS Code's, which
//! yaml-language-server reads); validators ignore them.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use super::alerting::RawReceiver;
use super::raw::{ImagesMap, PromptsMap, RawAgent, RawDefaults, RawImages, RawProbe, RawPrompts};
use super::{ANSWER_FINISH_REASONS, BUILTIN_IMAGES, Kind, RESERVED_LABELS, TENSOR_DATATYPES};

/// The schema as `inferprobe schema` prints it: pretty JSON and a final newline.
pub fn json_schema() -> String {
    let schema = SchemaSettings::draft2020_12()
        .with_transform(RecursiveTransform(unwrap_lines))
        .into_generator()
        .into_root_schema_for::<ProbesFile>();
    let mut text = serde_json::to_string_pretty(&schema).expect("a schema is plain JSON");
    text.push('\n');
    text
}

/// inferprobe's probes.yaml: which inference endpoints to watch, how often, what counts
/// as success, and where pages go. `inferprobe check -c probes.yaml` checks what this
/// schema cannot (files, URLs, rules across keys).
// Never deserialized: check.rs splits the root by hand, to report each section's
// problems on their own; its four keys (`TOP` there) are these fields.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, title = "inferprobe probes.yaml")]
struct ProbesFile {
    /// This agent: its location, port, data directory, links, remote_write, history.
    agent: Option<RawAgent>,
    /// Values every probe inherits unless it sets its own.
    defaults: Option<RawDefaults>,
    /// Where pages go (default: none; alerts still show in the API and the metrics).
    receivers: Option<Vec<RawReceiver>>,
    /// The endpoints to watch: at least one.
    #[schemars(length(min = 1))]
    probes: Vec<RawProbe>,
}

/// Doc comments keep their line breaks; a description is one paragraph, so that
/// editors wrap it to their own width.
fn unwrap_lines(schema: &mut Schema) {
    if let Some(Value::String(d)) = schema.get_mut("description") {
        *d = d.split('\n').map(str::trim).collect::<Vec<_>>().join(" ");
    }
    if let Some(Value::Array(items)) = schema.get_mut("enumDescriptions") {
        for item in items {
            if let Value::String(d) = item {
                *d = d.split('\n').map(str::trim).collect::<Vec<_>>().join(" ");
            }
        }
    }
}

/// A `${VAR}` (or `${VAR:-default}`) reference anywhere in a string: the loader puts the
/// variable's value there before checking it, so the schema cannot judge the text.
const ENV_REFERENCE: &str = r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}";

const DURATION_MESSAGE: &str = "Not a duration: write a number and its unit, like 30s, 1m30s or 500ms.";

/// Time units humantime (the loader's duration parser) reads.
const DURATION_UNITS: &[&str] = &[
    "nanos", "nsec", "ns", "usec", "us", "µs", "millis", "msec", "ms", "seconds", "second", "secs", "sec",
    "s", "minutes", "minute", "mins", "min", "m", "hours", "hour", "hrs", "hr", "h", "days", "day", "d",
    "weeks", "week", "wks", "wk", "w", "months", "month", "M", "years", "year", "yrs", "yr", "y",
];

/// humantime's grammar: numbers (spaces allowed, a fraction too) each followed by a unit,
/// e.g. `30s`, `1m30s`, `1.5h`, `2 hours 5 min`; or a string with a `${VAR}`.
fn duration_pattern() -> String {
    let units = DURATION_UNITS.join("|");
    format!(r"^\s*(?:[0-9][0-9\s]*(?:\.[0-9\s]*[0-9][0-9\s]*)?(?:{units})\s*)+$|{ENV_REFERENCE}")
}

/// A closed set of strings (or a `${VAR}`); `any_case` when the loader ignores case.
fn closed_set(description: &str, values: &[&str], any_case: bool) -> Schema {
    let mut branches = vec![json!({"enum": values})];
    if any_case {
        let alternatives: Vec<String> = values
            .iter()
            .map(|v| {
                v.chars()
                    .map(|c| match c {
                        c if c.is_ascii_alphabetic() => {
                            format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
                        }
                        c => c.to_string(),
                    })
                    .collect()
            })
            .collect();
        branches.push(json!({"pattern": format!("^(?:{})$", alternatives.join("|"))}));
    }
    branches.push(json!({"pattern": ENV_REFERENCE}));
    json_schema!({
        "type": "string",
        "description": description,
        "anyOf": branches,
    })
}

/// A type that stands for a schema in `#[schemars(with)]`, named as the type.
macro_rules! schema_type {
    ($(#[$doc:meta])* $name:ident, $generate:expr) => {
        $(#[$doc])*
        pub(super) struct $name;

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                $generate
            }
        }
    };
}

/// A duration: numbers with units, e.g. 500ms, 30s, 1m30s, 2h, 7d. Inlined, so that an
/// optional one is `type: [string, null]` with the message on it: editors report a bare
/// number (`interval: 30`) in an `anyOf: [$ref, null]` with their own words.
pub(super) struct Duration;

impl JsonSchema for Duration {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": duration_pattern(),
            "patternErrorMessage": DURATION_MESSAGE,
            "errorMessage": DURATION_MESSAGE,
            "examples": ["30s", "1m30s", "500ms", "5m", "1h"],
        })
    }
}

schema_type!(
    /// A name that becomes a label value: a probe's, a receiver's, the agent's location.
    Name,
    json_schema!({
        "type": "string",
        "description": "1-64 letters, digits, `_`, `-` or `.`.",
        "pattern": format!("^[A-Za-z0-9_.-]{{1,64}}$|{ENV_REFERENCE}"),
        "patternErrorMessage": "A name is 1-64 letters, digits, `_`, `-` or `.`.",
    })
);

schema_type!(
    /// An HTTP method: any token (the loader upper-cases it).
    HttpMethod,
    json_schema!({
        "type": "string",
        "description": "An HTTP method, e.g. GET, POST, HEAD.",
        "pattern": format!("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$|{ENV_REFERENCE}"),
        "patternErrorMessage": "Not an HTTP method, like GET or POST.",
        "examples": ["GET", "POST", "HEAD", "PUT"],
    })
);

schema_type!(
    /// `images.detail`.
    ImageDetail,
    closed_set("How much of the image the model looks at.", &["low", "high", "auto"], false)
);

schema_type!(
    /// `images.upload`.
    UploadAs,
    closed_set("How an http probe sends images.", &["multipart", "raw"], false)
);

schema_type!(
    /// `input.image`.
    TensorImage,
    closed_set("How the probe's images become the input tensor.", &["pixels", "bytes"], false)
);

schema_type!(
    /// `input.layout`.
    Layout,
    closed_set(
        "Where the colour channels are: NHWC [1, H, W, 3] or NCHW [1, 3, H, W].",
        &["NHWC", "NCHW"],
        false
    )
);

schema_type!(
    /// `input.datatype`: the Open Inference Protocol's, in any case.
    Datatype,
    closed_set("An Open Inference Protocol tensor datatype.", TENSOR_DATATYPES, true)
);

schema_type!(
    /// An item of `expect.finish_reason`.
    FinishReason,
    closed_set(
        "A reason a generation ends with an answer (each protocol's own names are mapped to these).",
        &ANSWER_FINISH_REASONS,
        false
    )
);

schema_type!(
    /// An item of `images.builtin`.
    BuiltinImageName,
    closed_set(
        "A built-in image: a photo-like scene or a chart with text, at common sizes.",
        &BUILTIN_IMAGES.iter().map(|b| b.name).collect::<Vec<_>>(),
        false
    )
);

schema_type!(
    /// `labels`: names Prometheus takes and we do not set ourselves; values are
    /// non-empty (their length is checked after `${VAR}`).
    Labels,
    json_schema!({
        "type": "object",
        "maxProperties": 10,
        "propertyNames": {
            "pattern": "^(?:[A-Za-z][A-Za-z0-9_]*|_(?:[A-Za-z0-9][A-Za-z0-9_]*)?)$",
            "patternErrorMessage": "A label name is letters, digits and `_`, not starting with a digit or `__`.",
            "not": {"enum": RESERVED_LABELS},
        },
        "additionalProperties": {"type": "string", "minLength": 1},
    })
);

schema_type!(
    /// `expect.status`: one code or a list (raw.rs's `one_or_many_statuses`).
    StatusCodes,
    json_schema!({
        "oneOf": [
            {"type": "integer", "minimum": 100, "maximum": 599},
            {"type": "array", "items": {"type": "integer", "minimum": 100, "maximum": 599}},
        ],
    })
);

schema_type!(
    /// `expect.top_label`: a label or a class index, as written.
    TopLabel,
    json_schema!({"type": ["string", "number", "boolean"]})
);

/// `prompts:` is a plain list (inline prompts) or a mapping: raw.rs's hand-written
/// Deserialize, with the mapping's keys from [`PromptsMap`].
impl JsonSchema for RawPrompts {
    fn schema_name() -> Cow<'static, str> {
        "Prompts".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let map = generator.subschema_for::<PromptsMap>();
        json_schema!({
            "oneOf": [
                {"type": "array", "items": {"type": "string"}, "description": "Your own prompts, rotated per run."},
                map,
            ],
        })
    }
}

/// `images:` is a plain list (built-in names or files) or a mapping: raw.rs's
/// hand-written Deserialize, with the mapping's keys from [`ImagesMap`].
impl JsonSchema for RawImages {
    fn schema_name() -> Cow<'static, str> {
        "Images".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let map = generator.subschema_for::<ImagesMap>();
        let builtin: Vec<&str> = BUILTIN_IMAGES.iter().map(|b| b.name).collect();
        json_schema!({
            "oneOf": [
                {
                    "type": "array",
                    "items": {"type": "string", "examples": builtin},
                    "description": "Built-in images by name, or JPEG/PNG files or folders relative to this file.",
                },
                map,
            ],
        })
    }
}

/// The rules of a probe that depend on its kind, as [`Kind`] states them: LLM kinds and
/// kserve_v2_grpc need a `model`; `prompts` are for LLM kinds only, `images` for the kinds that take them
/// (a key written empty, `prompts:`, is no key to the loader). Used as
/// `#[schemars(transform)]` on the probe.
pub(super) fn kind_rules(schema: &mut Schema) {
    let kinds = |take: fn(Kind) -> bool| -> Vec<&str> {
        Kind::ALL
            .into_iter()
            .filter(|k| take(*k))
            .map(Kind::as_str)
            .collect()
    };
    let when = |kinds: Vec<&str>, then: Value| json!({"if": {"properties": {"kind": {"enum": kinds}}, "required": ["kind"]}, "then": then});
    let absent = |message: &str| json!({"type": "null", "errorMessage": message});
    let rules = vec![
        when(
            kinds(|k| k.is_llm() || k == Kind::KserveV2Grpc),
            json!({"required": ["model"], "properties": {"model": {"type": "string"}}}),
        ),
        when(
            kinds(|k| !k.is_llm()),
            json!({"properties": {"prompts": absent("Only for LLM kinds; use `body` for http.")}}),
        ),
        when(
            kinds(|k| !k.takes_images()),
            json!({"properties": {"images": absent("This kind does not take images.")}}),
        ),
    ];
    schema.insert("allOf".into(), Value::Array(rules));
}

/// A mapping key set to something: the loader reads `key:` with no value as no key.
/// `message` is what editors say when none of the keys is set.
fn set(key: &str, message: &str) -> Value {
    json!({"required": [key], "properties": {key: {"not": {"type": "null"}}}, "errorMessage": message})
}

/// `prompts:` as a mapping names exactly one source (content.rs). Used as
/// `#[schemars(transform)]`.
pub(super) fn one_prompt_source(schema: &mut Schema) {
    let message = "Set exactly one of `builtin`, `inline` or `file`.";
    let sources = [
        set("builtin", message),
        set("inline", message),
        set("file", message),
    ];
    schema.insert("oneOf".into(), json!(sources));
}

/// `images:` as a mapping names built-in images, files or both (content.rs). Used as
/// `#[schemars(transform)]`.
pub(super) fn some_image_source(schema: &mut Schema) {
    let message = "Name `builtin` images, `files`, or both.";
    schema.insert(
        "anyOf".into(),
        json!([set("builtin", message), set("files", message)]),
    );
}

/// Documented unit variants come out of the derive as `oneOf` consts; editors complete
/// and report a plain `enum` better, with `enumDescriptions` (a VS Code and
/// yaml-language-server extension) for the hover text. Used as `#[schemars(transform)]`.
pub(crate) fn documented_enum(schema: &mut Schema) {
    let Some(Value::Array(variants)) = schema.get("oneOf") else {
        return;
    };
    let mut values = Vec::new();
    let mut descriptions = Vec::new();
    for v in variants {
        let (Some(value), description) = (v.get("const"), v.get("description")) else {
            return;
        };
        values.push(value.clone());
        descriptions.push(description.cloned().unwrap_or_else(|| json!("")));
    }
    schema.remove("oneOf");
    schema.insert("type".into(), json!("string"));
    schema.insert("enum".into(), Value::Array(values));
    schema.insert("enumDescriptions".into(), Value::Array(descriptions));
}
