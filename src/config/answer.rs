//! What an answer must be, beyond arriving: a prompt's own check (`prompts` items'
//! `expect`) and the probe's answer keys `expect.schema` and `expect.stops`. The types and
//! their checks; the answer is judged by probe/answer.rs. A JSON Schema is compiled here,
//! when the file loads, so a schema that cannot work is a config error with its line, not
//! a failed run.
//!
//! The validator is boon (JSON Schema drafts 4 to 2020-12, the official test suite
//! passed, pure Rust): `$ref`s resolve inside the schema only; nothing is fetched or read.

use std::fmt;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use super::diagnostics::Diagnostics;

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

/// A regular expression from the config (at `key`), compiled.
pub(super) fn pattern(cx: &mut Diagnostics, p: Option<&str>, key: &str, source: String) -> Option<Pattern> {
    match regex::Regex::new(&source) {
        Ok(regex) => Some(Pattern { source, regex }),
        Err(e) => {
            let first = e.to_string().lines().last().unwrap_or_default().trim().to_owned();
            cx.error(p, key, format!("not a valid regular expression: {first}"));
            None
        }
    }
}

/// A JSON Schema from the config, compiled once when it loads. Compared by its text.
#[derive(Clone)]
pub struct AnswerSchema {
    pub source: serde_json::Value,
    compiled: Arc<(boon::Schemas, boon::SchemaIndex)>,
}

impl PartialEq for AnswerSchema {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Debug for AnswerSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnswerSchema({})", self.source)
    }
}

/// The one location the schema is known by inside the validator.
const SCHEMA_LOCATION: &str = "urn:inferprobe:answer-schema";

/// Refuses every `$ref` that leaves the schema: a probe never fetches or reads a schema.
struct NoOutsideRefs;

impl boon::UrlLoader for NoOutsideRefs {
    fn load(&self, url: &str) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        Err(format!("{url} is outside the schema; a probe's schema must hold all its $refs").into())
    }
}

impl AnswerSchema {
    /// Compiles `source` (draft 2020-12 unless its `$schema` names another).
    pub fn compile(source: serde_json::Value) -> Result<AnswerSchema, String> {
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        compiler.use_loader(Box::new(NoOutsideRefs));
        compiler
            .add_resource(SCHEMA_LOCATION, source.clone())
            .map_err(|e| e.to_string())?;
        let mut schemas = boon::Schemas::new();
        let index = compiler
            .compile(SCHEMA_LOCATION, &mut schemas)
            .map_err(|e| compile_message(&e))?;
        Ok(AnswerSchema {
            source,
            compiled: Arc::new((schemas, index)),
        })
    }

    /// Whether `value` validates; otherwise where and why not: the first failing place
    /// (a JSON pointer into the answer) and the rule it breaks.
    pub fn validate(&self, value: &serde_json::Value) -> Result<(), String> {
        let (schemas, index) = &*self.compiled;
        let Err(e) = schemas.validate(value, *index) else {
            return Ok(());
        };
        let mut leaf = &e;
        while let Some(first) = leaf.causes.first() {
            leaf = first;
        }
        let at = leaf.instance_location.to_string();
        let at = if at.is_empty() {
            "the top level".to_owned()
        } else {
            at
        };
        Err(format!("at {at}: {}", leaf.kind))
    }
}

/// boon's compile errors name our internal location; the user knows the schema as theirs.
fn compile_message(e: &boon::CompileError) -> String {
    let text = match e {
        boon::CompileError::ValidationError { src, .. } => {
            let mut leaf = src;
            while let Some(first) = leaf.causes.first() {
                leaf = first;
            }
            let at = leaf.instance_location.to_string();
            format!(
                "not a valid JSON Schema: at {}: {}",
                if at.is_empty() { "/" } else { &at },
                leaf.kind
            )
        }
        other => other.to_string(),
    };
    text.replace(&format!("{SCHEMA_LOCATION}#"), "#")
        .replace(SCHEMA_LOCATION, "the schema")
}

/// What one answer must be, as a prompt's `expect` or the probe's answer keys say: each
/// check that is set must hold. A miss is the run's `wrong_answer`; an answer that does not
/// stop (with [`AnswerCheck::stops`]) its `degenerate_output`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AnswerCheck {
    /// The answer contains this text (as `expect.contains`: `matches` with `(?i)` for any
    /// case).
    pub contains: Option<String>,
    pub matches: Option<Pattern>,
    /// The answer is JSON (a code fence around it allowed).
    pub json: bool,
    /// The answer is JSON that validates against this schema.
    pub schema: Option<AnswerSchema>,
    /// The answer ends by itself before `max_tokens` and does not loop on one phrase.
    pub stops: bool,
}

impl AnswerCheck {
    pub fn is_empty(&self) -> bool {
        *self == AnswerCheck::default()
    }
}

/// A prompt's own `expect`: what its answer must be.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "AnswerExpect")]
pub(super) struct RawAnswerExpect {
    /// The answer must contain this text, e.g. "Paris" (`matches: "(?i)paris"` for any
    /// case).
    pub(super) contains: Option<String>,
    /// The answer must match this regular expression, e.g. "\\b42\\b".
    pub(super) matches: Option<String>,
    /// The answer must be JSON (a Markdown code fence around it is allowed).
    pub(super) json: Option<bool>,
    /// The answer must be JSON that validates against this JSON Schema (2020-12 unless
    /// its `$schema` says another draft).
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub(super) schema: Option<serde_json::Value>,
    /// The answer must end by itself before max_tokens and not loop on one phrase
    /// (else `degenerate_output`); for prompts with a short answer.
    pub(super) stops: Option<bool>,
}

/// A prompt's `expect` (at `key`), checked.
pub(super) fn answer_check(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    key: &str,
    raw: RawAnswerExpect,
) -> Option<AnswerCheck> {
    let before = cx.error_count();
    let nothing_set = raw.contains.is_none()
        && raw.matches.is_none()
        && raw.json.is_none()
        && raw.schema.is_none()
        && raw.stops.is_none();
    let check = AnswerCheck {
        contains: raw.contains,
        matches: raw
            .matches
            .and_then(|source| pattern(cx, probe, &format!("{key}.matches"), source)),
        json: raw.json.unwrap_or(false),
        schema: raw
            .schema
            .and_then(|source| schema(cx, probe, &format!("{key}.schema"), source)),
        stops: raw.stops.unwrap_or(false),
    };
    if nothing_set || (cx.error_count() == before && check.is_empty()) {
        cx.error(
            probe,
            key,
            "set at least one of contains, matches, json, schema or stops",
        );
    }
    (cx.error_count() == before).then_some(check)
}

/// `schema` (at `key`): a JSON Schema that compiles.
pub(super) fn schema(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    key: &str,
    source: serde_json::Value,
) -> Option<AnswerSchema> {
    if !(source.is_object() || source.is_boolean()) {
        cx.error(probe, key, "a JSON Schema is a mapping (or true/false)");
        return None;
    }
    match AnswerSchema::compile(source) {
        Ok(s) => Some(s),
        Err(e) => {
            cx.error(probe, key, e);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_validates_and_says_where_it_fails() {
        let s = AnswerSchema::compile(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        }))
        .unwrap();
        assert!(s.validate(&json!({"city": "Paris", "days": 2})).is_ok());
        let e = s.validate(&json!({"city": "Paris", "days": 0})).unwrap_err();
        assert!(e.starts_with("at /days: "), "{e}");
        let e = s.validate(&json!({"days": 2})).unwrap_err();
        assert!(e.contains("the top level") && e.contains("city"), "{e}");
    }

    #[test]
    fn a_bad_schema_or_an_outside_ref_does_not_compile() {
        let e = AnswerSchema::compile(json!({"type": "strin"})).unwrap_err();
        assert!(e.contains("not a valid JSON Schema"), "{e}");
        assert!(!e.contains("urn:"), "{e}");
        let e = AnswerSchema::compile(json!({"$ref": "https://example.com/s.json"})).unwrap_err();
        assert!(e.contains("example.com"), "{e}");
        // A $ref inside the schema works.
        let s =
            AnswerSchema::compile(json!({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"})).unwrap();
        assert!(s.validate(&json!(3)).is_ok());
        assert!(s.validate(&json!("x")).is_err());
    }
}
