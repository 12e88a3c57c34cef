//! `inferprobe schema`: the JSON Schema (draft 2020-12) of `probes.yaml`, for editors
//! (yaml-language-server completes keys, shows each key's description on hover and flags
//! mistakes as they are typed). It is derived from the loader's own serde shapes
//! (each section's `Raw*` struct, and each kind's `Keys`), so a key the loader reads is a
//! key the schema knows, with the same `deny_unknown_fields`. Written here: the root,
//! which `root.rs` splits by hand, and a probe ([`ProbeSchema`]): the keys of every
//! probe, each kind's own keys, and `if kind is X then` its refusals. Elsewhere, beside
//! their shapes: the schemas of the shapes whose serde is hand-written
//! (a list or a mapping, one status or many); and the string formats the checks enforce
//! (durations, names, labels, closed sets), which the raw shapes keep as plain strings.
//!
//! The schema refuses less than `check` does (files, URLs, most rules across keys are the
//! loader's), never more: every string that may hold `${VAR}` accepts a reference where
//! a pattern or a closed set would otherwise refuse it. The rules by kind it carries are
//! the ones [`Kind`] itself answers (`is_llm`, `needs_model`, `takes_images`) and which
//! kinds take which keys. `patternErrorMessage`,
//! `errorMessage` and `enumDescriptions` are editor keywords (VS Code's, which
//! yaml-language-server reads); validators ignore them.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Value, json};

use super::agent::RawAgent;
use super::defaults::RawDefaults;
use super::own_keys::{KindList, own_keys, own_keys_schema, refusal};
use super::probe::RawProbe;
use super::receivers::RawReceiver;
use super::reporting::RawReport;
use super::routes::RawRoute;
use crate::notify::ReceiverKind;
use crate::probe::kinds::Kind;

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
// Never deserialized: root.rs splits the root by hand, to report each section's
// problems on their own; its keys (`TOP` there) are these fields.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, title = "inferprobe probes.yaml")]
struct ProbesFile {
    /// This agent: its location, port, data directory, links, remote_write, history.
    agent: Option<RawAgent>,
    /// Values every probe inherits unless it sets its own.
    defaults: Option<RawDefaults>,
    /// Where pages go (default: none; alerts still show in the API and the metrics).
    receivers: Option<Vec<ReceiverSchema>>,
    /// Which receivers each probe alert pages, by its severity and its probe's name, kind
    /// and labels: tried in order, the first match decides (`continue: true` goes on).
    /// A probe's `alert.receivers` wins over them (default: every receiver gets every
    /// alert).
    routes: Option<Vec<RawRoute>>,
    /// The endpoints to watch: at least one.
    #[schemars(length(min = 1))]
    probes: Vec<ProbeSchema>,
    /// The weekly SLO report sent by itself: to whom, over what period, and when.
    report: Option<RawReport>,
}

/// A probe: the keys every probe has ([`RawProbe`]) and each kind's own (the `Keys` of
/// its file in probe/), each of those allowed where its kind is and refused, with the
/// loader's words, where it is not.
struct ProbeSchema;

impl JsonSchema for ProbeSchema {
    fn schema_name() -> Cow<'static, str> {
        "Probe".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let probe = RawProbe::json_schema(generator);
        with_own_keys::<Kind>(probe, generator)
    }
}

/// A receiver: the keys every receiver has ([`RawReceiver`]) and each kind's own (the
/// `Keys` of its file in notify/), as for probes.
struct ReceiverSchema;

impl JsonSchema for ReceiverSchema {
    fn schema_name() -> Cow<'static, str> {
        "Receiver".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let receiver = RawReceiver::json_schema(generator);
        with_own_keys::<ReceiverKind>(receiver, generator)
    }
}

/// `common`, the schema of the keys every thing of a list of kinds has, with each kind's
/// own keys added, and for each kind an `if kind is X then` refusing the others' keys.
fn with_own_keys<K: KindList>(mut common: Schema, generator: &mut SchemaGenerator) -> Schema {
    let mut own: Vec<(&str, Value)> = Vec::new();
    for kind in K::ALL {
        let keys = own_keys_schema(*kind, generator);
        let Some(Value::Object(properties)) = keys.get("properties") else {
            continue;
        };
        for key in own_keys(*kind) {
            // The first kind that takes a key describes it.
            if let Some(schema) = properties.get(*key)
                && !own.iter().any(|(k, _)| k == key)
            {
                own.push((key, schema.clone()));
            }
        }
    }
    if let Some(Value::Object(properties)) = common.get_mut("properties") {
        for (key, schema) in &own {
            properties.insert((*key).to_owned(), schema.clone());
        }
    }
    let mut rules = match common.remove("allOf") {
        Some(Value::Array(rules)) => rules,
        _ => Vec::new(),
    };
    for kind in K::ALL {
        let refused: serde_json::Map<String, Value> = own
            .iter()
            .filter(|(key, _)| !own_keys(*kind).contains(key))
            .filter_map(|(key, _)| {
                let message = refusal(key, *kind)?;
                let mut message = format!("{message}.");
                message[..1].make_ascii_uppercase();
                Some((
                    (*key).to_owned(),
                    json!({"type": "null", "errorMessage": message}),
                ))
            })
            .collect();
        if !refused.is_empty() {
            rules.push(json!({
                "if": {"properties": {"kind": {"const": kind.name()}}, "required": ["kind"]},
                "then": {"properties": refused},
            }));
        }
    }
    if !rules.is_empty() {
        common.insert("allOf".into(), Value::Array(rules));
    }
    common
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
            kinds(Kind::needs_model),
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
