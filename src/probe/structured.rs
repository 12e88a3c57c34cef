//! Structured output: `response_format` (OpenAI chat; the Responses API's `text.format`),
//! asking the server for JSON, or for JSON that follows a schema. With a schema the answer
//! is checked against it too: a server that ignores the format, or a grammar that breaks,
//! is `wrong_answer` with the failing place. Imports config and outcome.

use schemars::JsonSchema;
use serde::Deserialize;

use super::generation::GenerationSpec;
use super::tools::{RawTool, check_tools};
use crate::config::{AnswerSchema, Diagnostics, KindKeys, OwnKeys};

/// What the probe asks the answer's format to be.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object (`{"type": "json_object"}`).
    JsonObject,
    /// JSON that follows `schema` (`{"type": "json_schema", "json_schema": {...}}`).
    JsonSchema {
        name: String,
        schema: AnswerSchema,
        /// Sent only when the file says: OpenAI's strict mode refuses a schema whose
        /// objects do not all forbid other properties and require every one.
        strict: Option<bool>,
    },
}

impl ResponseFormat {
    /// Chat Completions' `response_format`.
    pub(crate) fn chat_json(&self) -> serde_json::Value {
        match self {
            ResponseFormat::JsonObject => serde_json::json!({"type": "json_object"}),
            ResponseFormat::JsonSchema { name, schema, strict } => {
                let mut inner = serde_json::json!({"name": name, "schema": schema.source});
                if let Some(strict) = strict {
                    inner["strict"] = (*strict).into();
                }
                serde_json::json!({"type": "json_schema", "json_schema": inner})
            }
        }
    }

    /// The Responses API's `text.format`.
    pub(crate) fn responses_json(&self) -> serde_json::Value {
        match self {
            ResponseFormat::JsonObject => serde_json::json!({"type": "json_object"}),
            ResponseFormat::JsonSchema { name, schema, strict } => {
                let mut format =
                    serde_json::json!({"type": "json_schema", "name": name, "schema": schema.source});
                if let Some(strict) = strict {
                    format["strict"] = (*strict).into();
                }
                format
            }
        }
    }

    /// The schema the answer must follow, if there is one.
    pub(crate) fn schema(&self) -> Option<&AnswerSchema> {
        match self {
            ResponseFormat::JsonObject => None,
            ResponseFormat::JsonSchema { schema, .. } => Some(schema),
        }
    }
}

/// `response_format`, as OpenAI writes it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawResponseFormat {
    /// `json_schema` (JSON that follows `json_schema.schema`) or `json_object` (any JSON
    /// object).
    #[serde(rename = "type")]
    #[schemars(with = "FormatType")]
    kind: String,
    /// With `type: json_schema`: `{name, schema, strict}`.
    json_schema: Option<RawJsonSchema>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(rename = "FormatType")]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)] // the schema's closed set; the value is read as text above
enum FormatType {
    JsonSchema,
    JsonObject,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJsonSchema {
    /// The format's name, as the server reports it (default `answer`).
    name: Option<String>,
    /// The JSON Schema the answer must follow; the answer is checked against it as well.
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    schema: serde_json::Value,
    /// Ask the server to follow the schema strictly; sent only when set (OpenAI's strict
    /// mode needs `additionalProperties: false` and every property required).
    strict: Option<bool>,
}

/// Checks `response_format` (`Err` after a problem, said in `cx`).
pub(crate) fn check_response_format<K>(
    cx: &mut Diagnostics,
    keys: &KindKeys<'_, K>,
    raw: Option<RawResponseFormat>,
) -> Result<Option<ResponseFormat>, ()> {
    let Some(raw) = raw else { return Ok(None) };
    match (raw.kind.as_str(), raw.json_schema) {
        ("json_object", None) => Ok(Some(ResponseFormat::JsonObject)),
        ("json_schema", Some(js)) => match AnswerSchema::compile(js.schema) {
            Ok(schema) => Ok(Some(ResponseFormat::JsonSchema {
                name: js.name.unwrap_or_else(|| "answer".to_owned()),
                schema,
                strict: js.strict,
            })),
            Err(e) => {
                keys.error(cx, "response_format.json_schema.schema", e);
                Err(())
            }
        },
        ("json_schema", None) => {
            keys.error(
                cx,
                "response_format",
                "`type: json_schema` needs `json_schema: {name, schema}`",
            );
            Err(())
        }
        ("json_object", Some(_)) => {
            keys.error(cx, "response_format.json_schema", "only with `type: json_schema`");
            Err(())
        }
        (other, _) => {
            keys.error(
                cx,
                "response_format.type",
                format!("{other:?} is not a format: json_schema or json_object"),
            );
            Err(())
        }
    }
}

/// The keys of the OpenAI kinds that chat (openai_chat, openai_responses): tools, and the
/// answer's format.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerKeys {
    /// openai_chat, openai_responses, anthropic, ollama: functions the model is offered;
    /// the run expects it to call one (else `invalid_tool_call`), with arguments that are
    /// JSON and follow the function's parameters schema.
    tools: Option<Vec<RawTool>>,
    /// The name of the tool the model must call (default: any of `tools`).
    tool_call: Option<String>,
    /// What the called tool returns (a mapping, or text): sent back in a next turn, whose
    /// answer is then the one `expect` and the prompt's check judge. Where broken chat
    /// templates show.
    #[schemars(with = "Option<serde_json::Value>")]
    tool_result: Option<serde_json::Value>,
    /// openai_chat, openai_responses: the answer's format, as OpenAI writes it:
    /// `{type: json_schema, json_schema: {name, schema, strict}}` or `{type: json_object}`.
    /// With a schema, the answer is checked against it (`wrong_answer`).
    response_format: Option<RawResponseFormat>,
}

impl OwnKeys for AnswerKeys {}

/// An OpenAI chat kind's spec: every LLM kind's keys, its tools and its answer's format.
pub(crate) fn check_answer_keys(
    cx: &mut Diagnostics,
    keys: KindKeys<'_, AnswerKeys>,
) -> Option<GenerationSpec> {
    let KindKeys { common, own } = keys;
    let keys = KindKeys { common, own: () };
    let tools = check_tools(cx, &keys, own.tools, own.tool_call, own.tool_result);
    let format = check_response_format(cx, &keys, own.response_format);
    let (tools, format) = (tools.ok()?, format.ok()?);
    if format.is_some() && tools.as_ref().is_some_and(|t| t.result.is_none()) {
        keys.error(
            cx,
            "response_format",
            "with `tools` the answer is a tool call, which no format judges: add `tool_result` so the answer after the call is judged",
        );
        return None;
    }
    let mut spec = GenerationSpec::from_common(keys.common)?;
    spec.tools = tools;
    spec.response_format = format;
    Some(spec)
}
