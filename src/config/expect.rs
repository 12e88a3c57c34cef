//! `expect:`: what a run must show to count as a success, beyond a complete, well-formed
//! response. Which keys a kind takes is the kind's to say ([`Kind`]'s methods).

use std::fmt;

use schemars::{JsonSchema, json_schema};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

pub use super::answer::Pattern;
use super::answer::{AnswerSchema, pattern, schema};
use super::diagnostics::Diagnostics;
use super::formats::{closed_set, schema_type};
use super::positions::closest;
use crate::probe::kinds::Kind;

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
    /// LLM kinds: the answer is JSON that validates against this schema.
    pub schema: Option<AnswerSchema>,
    /// LLM kinds: the answer ends by itself before `max_tokens` and does not loop on one
    /// phrase (`degenerate_output`).
    pub stops: bool,
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
    /// LLM kinds: the answer must be JSON that validates against this JSON Schema
    /// (2020-12 unless its `$schema` says another draft); a Markdown code fence around
    /// it is allowed. A miss is `wrong_answer`, naming the failing place.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub(super) schema: Option<serde_json::Value>,
    /// LLM kinds: the answer must end by itself before max_tokens and not loop on one
    /// phrase, else `degenerate_output`. For prompts with short answers (canaries check
    /// it on their own); an ordinary prompt may well use all its tokens.
    pub(super) stops: Option<bool>,
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
    /// `expect.status`: one code or a list (`one_or_many_statuses` above).
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

/// `expect`: what a run must show, beyond a complete response; some keys are only
/// for LLM kinds, some only for `kserve_v2` (not said for a kind that is not known).
pub(super) fn probe_expect(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    kind: Option<Kind>,
    raw_expect: Option<RawExpect>,
) -> Expect {
    let llm = kind.is_some_and(Kind::is_llm);
    let not_llm = kind.is_some_and(|k| !k.is_llm());
    let key = |k: &str| format!("{prefix}.{k}");
    let raw_expect = raw_expect.unwrap_or_default();
    for s in &raw_expect.status {
        if !(100..=599).contains(s) {
            cx.error(
                p,
                &key("expect.status"),
                format!("{s} is not an HTTP status code"),
            );
        }
    }
    if not_llm && raw_expect.min_output_tokens.is_some() {
        cx.error(p, &key("expect.min_output_tokens"), "only for LLM kinds");
    }
    let finish_reasons = ANSWER_FINISH_REASONS;
    if not_llm && raw_expect.finish_reason.is_some() {
        cx.error(p, &key("expect.finish_reason"), "only for LLM kinds");
    } else if let Some(bad) = raw_expect
        .finish_reason
        .iter()
        .flatten()
        .find(|r| !finish_reasons.contains(&r.as_str()))
    {
        let close = closest(bad, &finish_reasons)
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_default();
        cx.error(
            p,
            &key("expect.finish_reason"),
            format!(
                "{bad:?} is not a finish reason that carries an answer: one of {}{close}",
                finish_reasons.join(", ")
            ),
        );
    }
    let expect = Expect {
        status: raw_expect.status,
        non_empty: raw_expect.non_empty.unwrap_or(llm),
        min_output_tokens: raw_expect.min_output_tokens.unwrap_or(u64::from(llm)),
        finish_reason: raw_expect.finish_reason.unwrap_or_default(),
        contains: raw_expect.contains,
        matches: raw_expect
            .matches
            .and_then(|source| pattern(cx, p, &key("expect.matches"), source)),
        json: raw_expect.json.unwrap_or(false),
        schema: raw_expect
            .schema
            .and_then(|source| schema(cx, p, &key("expect.schema"), source)),
        stops: raw_expect.stops.unwrap_or(false),
        model: raw_expect.model.unwrap_or(false),
        outputs: raw_expect.outputs.unwrap_or_default(),
        output_shape: raw_expect.output_shape,
        top_label: raw_expect.top_label.and_then(|v| match v {
            serde_yaml::Value::String(s) => Some(s),
            serde_yaml::Value::Number(n) => Some(n.to_string()),
            serde_yaml::Value::Bool(b) => Some(b.to_string()),
            _ => {
                cx.error(p, &key("expect.top_label"), "must be a label or a number");
                None
            }
        }),
    };
    let only_llm = [("schema", expect.schema.is_some()), ("stops", expect.stops)];
    for (name, set) in only_llm {
        if set && not_llm {
            cx.error(p, &key(&format!("expect.{name}")), "only for LLM kinds");
        }
    }
    let only_kserve = [
        ("outputs", !expect.outputs.is_empty()),
        ("output_shape", expect.output_shape.is_some()),
        ("top_label", expect.top_label.is_some()),
    ];
    for (name, set) in only_kserve {
        if set && kind.is_some_and(|k| !k.returns_tensors()) {
            cx.error(
                p,
                &key(&format!("expect.{name}")),
                "only for kinds kserve_v2 and kserve_v2_grpc",
            );
        }
    }
    if expect.model && kind.is_some_and(|k| !k.names_model()) {
        cx.error(
            p,
            &key("expect.model"),
            "only for kinds whose responses name the model (not tgi, http, kserve_v2)",
        );
    }
    expect
}
