//! Tool calls: the `tools` a probe declares (OpenAI function definitions, a JSON Schema for
//! each one's parameters), the streamed call fragments put back together per call, and the
//! verdict on them. The run fails as `invalid_tool_call` when no declared tool is called,
//! the arguments are not JSON, the name is not declared, or the arguments break the tool's
//! schema (OpenRouter's classes: `InvalidJson`, `UnknownName`, `SchemaMismatch`), with the
//! message saying which and where.
//!
//! The keys (`tools`, `tool_call`) belong to the kinds whose protocol has tools: OpenAI chat
//! and Responses, Anthropic, Ollama; each writes the definitions its own way and reads its
//! own fragments into [`ToolCallDelta`]s. Imports config (keys, schemas) and outcome.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::generation::GenerationSpec;
use crate::config::{AnswerSchema, Diagnostics, KindKeys, OwnKeys, Prompts};
use crate::outcome::{Failure, FailureReason};

use super::endpoint::one_line;

/// A declared tool, checked: its schema compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// The parameters' JSON Schema, as written (sent to the server).
    pub parameters: serde_json::Value,
    schema: AnswerSchema,
}

impl Tool {
    /// OpenAI's (and Ollama's) definition: `{type: function, function: {...}}`.
    pub(crate) fn openai_json(&self) -> serde_json::Value {
        serde_json::json!({"type": "function", "function": self.function_json()})
    }

    /// The function alone: `{name, description, parameters}` (the Responses API adds
    /// `type: function` beside them).
    pub(crate) fn function_json(&self) -> serde_json::Value {
        let mut f = serde_json::json!({"name": self.name, "parameters": self.parameters});
        if let Some(d) = &self.description {
            f["description"] = d.clone().into();
        }
        f
    }

    /// Anthropic's: `{name, description, input_schema}`.
    pub(crate) fn anthropic_json(&self) -> serde_json::Value {
        let mut f = serde_json::json!({"name": self.name, "input_schema": self.parameters});
        if let Some(d) = &self.description {
            f["description"] = d.clone().into();
        }
        f
    }
}

/// What the tool keys became: the tools, and the one the model must call, if said.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub tools: Vec<Tool>,
    /// `tool_call`: the name the model must call (else any declared tool will do).
    pub expected: Option<String>,
    /// `tool_result`: the result (JSON text) sent back in a next turn, whose answer the
    /// answer checks judge; `None` for a probe that stops at the call.
    pub result: Option<String>,
}

/// One tool as written: OpenAI's shape (`{type: function, function: {...}}`) or just the
/// function (`{name, description, parameters}`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTool {
    /// `function` (OpenAI's shape; optional).
    #[serde(rename = "type")]
    kind: Option<String>,
    /// OpenAI's shape: the function inside.
    function: Option<RawFunction>,
    /// The function's name (letters, digits, `_` and `-`, at most 64).
    name: Option<String>,
    /// What the function does, as the model reads it.
    description: Option<String>,
    /// The JSON Schema of its arguments (an object schema).
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    parameters: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFunction {
    /// The function's name (letters, digits, `_` and `-`, at most 64).
    name: String,
    /// What the function does, as the model reads it.
    description: Option<String>,
    /// The JSON Schema of its arguments (an object schema).
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    parameters: Option<serde_json::Value>,
    /// OpenAI's strict mode flag; accepted, not sent (the arguments are checked here).
    #[serde(rename = "strict")]
    _strict: Option<bool>,
}

/// The tool keys of a kind whose protocol has tools.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolKeys {
    /// openai_chat, openai_responses, anthropic, ollama: functions the model is offered;
    /// the run expects it to call one (else `invalid_tool_call`), with arguments that are
    /// JSON and follow the function's parameters schema.
    pub(crate) tools: Option<Vec<RawTool>>,
    /// The name of the tool the model must call (default: any of `tools`).
    pub(crate) tool_call: Option<String>,
    /// What the called tool returns (a mapping, or text): sent back in a next turn, whose
    /// answer is then the one `expect` and the prompt's check judge. Where broken chat
    /// templates show.
    #[schemars(with = "Option<serde_json::Value>")]
    pub(crate) tool_result: Option<serde_json::Value>,
}

impl OwnKeys for ToolKeys {}

/// The spec of a kind that takes tools but no answer format (Anthropic, Ollama).
pub(crate) fn check_tool_keys(cx: &mut Diagnostics, keys: KindKeys<'_, ToolKeys>) -> Option<GenerationSpec> {
    let KindKeys { common, own } = keys;
    let keys = KindKeys { common, own: () };
    let tools = check_tools(cx, &keys, own.tools, own.tool_call, own.tool_result).ok()?;
    let mut spec = GenerationSpec::from_common(keys.common)?;
    spec.tools = tools;
    Some(spec)
}

/// Checks the tool keys (`None` without `tools`, or after a problem, said in `cx`).
pub(crate) fn check_tools<K>(
    cx: &mut Diagnostics,
    keys: &KindKeys<'_, K>,
    raw: Option<Vec<RawTool>>,
    tool_call: Option<String>,
    tool_result: Option<serde_json::Value>,
) -> Result<Option<ToolSpec>, ()> {
    let Some(raw) = raw else {
        let without = [
            ("tool_call", tool_call.is_some()),
            ("tool_result", tool_result.is_some()),
        ];
        for (key, _) in without.iter().filter(|(_, set)| *set) {
            keys.error(cx, key, "needs `tools`, the functions the model may call");
        }
        if without.iter().any(|(_, set)| *set) {
            return Err(());
        }
        return Ok(None);
    };
    if raw.is_empty() {
        keys.error(cx, "tools", "declare at least one function");
        return Err(());
    }
    let before = cx.error_count();
    let mut tools: Vec<Tool> = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let key = format!("tools[{i}]");
        let (name, description, parameters) = match (t.function, t.name) {
            (Some(f), None) if t.description.is_none() && t.parameters.is_none() => {
                (f.name, f.description, f.parameters)
            }
            (None, Some(name)) => (name, t.description, t.parameters),
            _ => {
                keys.error(
                    cx,
                    &key,
                    "write a tool as {name, description, parameters}, or OpenAI's {type: function, function: {...}}",
                );
                continue;
            }
        };
        if t.kind.as_deref().is_some_and(|k| k != "function") {
            keys.error(cx, &format!("{key}.type"), "the only tool type is `function`");
        }
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_name {
            keys.error(
                cx,
                &format!("{key}.name"),
                format!("{name:?} is not a function name: letters, digits, `_` and `-`, at most 64"),
            );
        } else if tools.iter().any(|t| t.name == name) {
            keys.error(cx, &format!("{key}.name"), format!("{name:?} is declared twice"));
        }
        let parameters =
            parameters.unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        match AnswerSchema::compile(parameters.clone()) {
            Ok(schema) => tools.push(Tool {
                name,
                description,
                parameters,
                schema,
            }),
            Err(e) => keys.error(cx, &format!("{key}.parameters"), e),
        }
    }
    if let Some(expected) = &tool_call
        && cx.error_count() == before
        && !tools.iter().any(|t| &t.name == expected)
    {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        keys.error(
            cx,
            "tool_call",
            format!("{expected:?} is not one of `tools`: {}", names.join(", ")),
        );
    }
    let checked_prompts = match &keys.common.prompts {
        Some(Prompts::Builtin { canaries, .. }) => *canaries,
        Some(Prompts::Custom(list)) => list.iter().any(|p| p.expect.is_some()),
        None => false,
    };
    if checked_prompts && tool_result.is_none() {
        keys.error(
            cx,
            "tools",
            "these prompts' answers are checked (canaries, a prompt's `expect`), but with `tools` the answer is a tool call: add `tool_result` so the answer after the call is judged",
        );
    }
    if cx.error_count() != before {
        return Err(());
    }
    Ok(Some(ToolSpec {
        tools,
        expected: tool_call,
        result: tool_result.map(|r| match r {
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        }),
    }))
}

/// One streamed fragment of a tool call, as a kind's parser reads it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ToolCallDelta {
    /// Which call it belongs to (the protocol's index); `None` starts a call of its own
    /// (protocols that send each call whole, such as Ollama's).
    pub index: Option<u64>,
    /// Which call it belongs to, by the protocol's item id (the Responses API's
    /// `item_id`: llama-server sends no `output_index`); wins over `index`.
    pub item: Option<String>,
    pub id: Option<String>,
    /// The name, or a piece of it.
    pub name: Option<String>,
    /// A piece of the arguments' JSON text.
    pub arguments: String,
    /// These are the whole arguments (a protocol's closing event): they replace the pieces.
    pub whole: bool,
}

/// Calls kept per run, and argument bytes per call: far beyond a probe's tool call; a
/// server that streams without end must not grow the run.
const MAX_CALLS: usize = 32;
const MAX_ARGUMENT_BYTES: usize = 64 * 1024;

/// The calls of one answer, put together from their fragments, by index.
#[derive(Debug, Default)]
pub(crate) struct ToolCalls {
    calls: BTreeMap<u64, Call>,
    next_own: u64,
    /// The index each item id was given.
    items: Vec<(String, u64)>,
}

/// One call, assembled.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub name: String,
    pub id: Option<String>,
    pub arguments: String,
    /// Pieces past [`MAX_ARGUMENT_BYTES`] were dropped.
    capped: bool,
}

impl Call {
    /// The call's id, for the tool's result to name (`call_1` where the server gave none,
    /// as Ollama does).
    pub(crate) fn id(&self) -> &str {
        self.id.as_deref().unwrap_or("call_1")
    }

    /// The arguments as JSON text to send back: `{}` for none, as the check read them.
    pub(crate) fn arguments_text(&self) -> &str {
        if self.arguments.trim().is_empty() {
            "{}"
        } else {
            &self.arguments
        }
    }

    /// The arguments as a JSON value (an empty object for none): the protocols that send
    /// the call back as an object (Anthropic's `input`, Ollama's `arguments`) need it so.
    pub(crate) fn arguments_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.arguments).unwrap_or_else(|_| serde_json::json!({}))
    }
}

impl ToolCalls {
    pub(crate) fn push(&mut self, delta: ToolCallDelta) {
        let known = delta
            .item
            .as_ref()
            .and_then(|item| self.items.iter().find(|(i, _)| i == item).map(|(_, n)| *n));
        let index = match (known, delta.index) {
            (Some(i), _) | (None, Some(i)) => i,
            (None, None) => {
                // A call of its own: after every one seen so far.
                let i = self
                    .calls
                    .keys()
                    .next_back()
                    .map_or(0, |k| k + 1)
                    .max(self.next_own);
                self.next_own = i + 1;
                i
            }
        };
        if let Some(item) = delta.item.filter(|_| known.is_none())
            && self.items.len() < MAX_CALLS
        {
            self.items.push((item, index));
        }
        if !self.calls.contains_key(&index) && self.calls.len() >= MAX_CALLS {
            return;
        }
        let call = self.calls.entry(index).or_default();
        if let Some(name) = delta.name {
            // A whole call names itself whole; a server that repeats the full name in
            // every piece must not make `get_weatherget_weather`.
            if delta.whole || call.name == name {
                call.name = name;
            } else {
                call.name.push_str(&name);
            }
        }
        if call.id.is_none() {
            call.id = delta.id;
        }
        if delta.whole {
            call.arguments.clear();
            call.capped = false;
        }
        if call.arguments.len() + delta.arguments.len() <= MAX_ARGUMENT_BYTES {
            call.arguments.push_str(&delta.arguments);
        } else {
            call.capped = true;
        }
    }

    pub(crate) fn calls(&self) -> impl Iterator<Item = &Call> {
        self.calls.values()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// The verdict on the calls an answer made, against the declared tools.
pub(crate) fn check_tool_calls(spec: &ToolSpec, calls: &ToolCalls, text: &str) -> Result<(), Failure> {
    let fail = |what: String| Err(Failure::new(FailureReason::InvalidToolCall, what));
    let declared = || {
        spec.tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if calls.is_empty() {
        return fail(format!(
            "no tool was called (declared: {}); the answer was {:?}",
            declared(),
            one_line(text, 80)
        ));
    }
    for call in calls.calls() {
        let Some(tool) = spec.tools.iter().find(|t| t.name == call.name) else {
            return fail(format!(
                "the model called {:?}, which is not declared (declared: {})",
                one_line(&call.name, 64),
                declared()
            ));
        };
        if call.capped {
            return fail(format!(
                "the arguments of {:?} run past {MAX_ARGUMENT_BYTES} bytes",
                tool.name
            ));
        }
        let text = if call.arguments.trim().is_empty() {
            // No arguments at all: an empty object, as servers send for a function
            // without parameters.
            "{}"
        } else {
            call.arguments.as_str()
        };
        let value: serde_json::Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return fail(format!(
                    "the arguments of {:?} are not JSON ({e}): {:?}",
                    tool.name,
                    one_line(text, 80)
                ));
            }
        };
        if let Err(e) = tool.schema.validate(&value) {
            return fail(format!(
                "the arguments of {:?} break its parameters schema {}: {:?}",
                tool.name,
                one_line(&e, 160),
                one_line(text, 80)
            ));
        }
    }
    if let Some(expected) = &spec.expected
        && !calls.calls().any(|c| &c.name == expected)
    {
        let called: Vec<&str> = calls.calls().map(|c| c.name.as_str()).collect();
        return fail(format!(
            "expected a call to {expected:?}, the model called {}",
            called.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// `get_weather(city: string, days?: integer >= 1)`, and `get_time()`.
    pub(crate) fn weather_tools() -> ToolSpec {
        let tool = |name: &str, parameters: serde_json::Value| Tool {
            name: name.to_owned(),
            description: None,
            schema: AnswerSchema::compile(parameters.clone()).unwrap(),
            parameters,
        };
        ToolSpec {
            tools: vec![
                tool(
                    "get_weather",
                    json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}),
                ),
                tool("get_time", json!({"type": "object", "properties": {}})),
            ],
            expected: None,
            result: None,
        }
    }

    fn delta(index: Option<u64>, name: Option<&str>, arguments: &str) -> ToolCallDelta {
        ToolCallDelta {
            index,
            name: name.map(str::to_owned),
            arguments: arguments.to_owned(),
            ..ToolCallDelta::default()
        }
    }

    fn verdict(deltas: &[ToolCallDelta]) -> Result<(), Failure> {
        let mut calls = ToolCalls::default();
        for d in deltas {
            calls.push(d.clone());
        }
        check_tool_calls(&weather_tools(), &calls, "")
    }

    #[test]
    fn fragments_are_put_together_per_index() {
        let ok = verdict(&[
            delta(Some(0), Some("get_weather"), ""),
            delta(Some(1), Some("get_time"), "{"),
            delta(Some(0), None, "{\"ci"),
            delta(Some(0), None, "ty\": \"Par"),
            delta(Some(1), None, "}"),
            delta(Some(0), None, "is\"}"),
        ]);
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn every_failure_class_is_told_apart() {
        let cases: [(&[ToolCallDelta], &str); 5] = [
            (&[], "no tool was called (declared: get_weather, get_time)"),
            (
                &[delta(Some(0), Some("get_wether"), "{}")],
                "called \"get_wether\", which is not declared",
            ),
            (
                &[delta(Some(0), Some("get_weather"), "{\"city\": Paris}")],
                "are not JSON",
            ),
            (
                &[delta(
                    Some(0),
                    Some("get_weather"),
                    "{\"city\": \"Paris\", \"days\": 0}",
                )],
                "break its parameters schema at /days",
            ),
            (
                &[delta(Some(0), Some("get_weather"), "{\"days\": 2}")],
                "break its parameters schema at the top level",
            ),
        ];
        for (deltas, words) in cases {
            let f = verdict(deltas).unwrap_err();
            assert_eq!(f.reason, FailureReason::InvalidToolCall);
            assert!(f.message.contains(words), "{words}: {}", f.message);
        }
        // A function without parameters may be called with no arguments at all.
        assert!(verdict(&[delta(Some(0), Some("get_time"), "")]).is_ok());
    }

    #[test]
    fn whole_calls_and_closing_arguments() {
        // Each call whole, without an index (Ollama), after an indexed one.
        let mut calls = ToolCalls::default();
        calls.push(delta(None, Some("get_time"), "{}"));
        calls.push(delta(None, Some("get_weather"), "{\"city\":\"Oslo\"}"));
        let names: Vec<&str> = calls.calls().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["get_time", "get_weather"]);
        // A closing event with the whole arguments replaces the pieces (Responses' `done`).
        let mut calls = ToolCalls::default();
        calls.push(delta(Some(3), Some("get_weather"), "{\"city\":\"Os"));
        calls.push(ToolCallDelta {
            index: Some(3),
            arguments: "{\"city\":\"Oslo\"}".into(),
            whole: true,
            ..ToolCallDelta::default()
        });
        assert_eq!(calls.calls().next().unwrap().arguments, "{\"city\":\"Oslo\"}");
    }

    #[test]
    fn the_expected_tool_must_be_the_one_called() {
        let mut spec = weather_tools();
        spec.expected = Some("get_weather".into());
        let mut calls = ToolCalls::default();
        calls.push(delta(Some(0), Some("get_time"), "{}"));
        let f = check_tool_calls(&spec, &calls, "").unwrap_err();
        assert!(
            f.message
                .contains("expected a call to \"get_weather\", the model called get_time"),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_stream_of_endless_calls_stays_bounded() {
        let mut calls = ToolCalls::default();
        for i in 0..10_000 {
            calls.push(delta(Some(i), Some("get_time"), "{}"));
            calls.push(delta(Some(0), None, &"x".repeat(1024)));
        }
        assert_eq!(calls.calls().count(), MAX_CALLS);
        assert!(calls.calls().next().unwrap().arguments.len() <= MAX_ARGUMENT_BYTES);
        let f = check_tool_calls(&weather_tools(), &calls, "").unwrap_err();
        assert!(f.message.contains("run past"), "{}", f.message);
    }
}
