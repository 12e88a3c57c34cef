//! What the simulator answers when a request asks for a real answer: the built-in canaries
//! (their known answers, in the forms models write them), a call of the first declared tool
//! with arguments that follow its schema, and JSON that follows the `response_format`
//! schema. Anything else gets the usual stream of words. So a probe with answer checks
//! passes against the simulator, and a check that fails here is a false failure.

use serde_json::{Value, json};

use crate::payload::canaries::{Known, canary_for};

/// A real answer to stream instead of the usual words.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum KnownReply {
    /// These tokens, then the end of the answer.
    Text(Vec<String>),
    /// A call of `name`, its arguments' JSON text in pieces.
    ToolCall { name: String, pieces: Vec<String> },
}

/// The answer a request asks for, if it asks for one.
pub(super) fn reply_for(body: &Value) -> Option<KnownReply> {
    // The tool's result sent back: the answer uses it, as a model with a working chat
    // template does.
    if let Some(result) = tool_result(body) {
        return Some(KnownReply::Text(thirds(&format!("The tool says: {result}"))));
    }
    if let Some(tool) = body
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|t| t.first())
    {
        let function = tool.get("function").unwrap_or(tool);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("tool")
            .to_owned();
        let schema = function
            .get("parameters")
            .or_else(|| function.get("input_schema"))
            .cloned()
            .unwrap_or(json!({"type": "object"}));
        return Some(KnownReply::ToolCall {
            name,
            pieces: thirds(&instance(&schema).to_string()),
        });
    }
    let schema = body
        .pointer("/response_format/json_schema/schema")
        .or_else(|| body.pointer("/text/format/schema"));
    if let Some(schema) = schema {
        return Some(KnownReply::Text(thirds(&instance(schema).to_string())));
    }
    let json_object = [
        body.pointer("/response_format/type"),
        body.pointer("/text/format/type"),
    ]
    .into_iter()
    .flatten()
    .any(|t| t == "json_object");
    if json_object {
        return Some(KnownReply::Text(vec!["{\"answer\":".into(), " \"ok\"}".into()]));
    }
    let canary = canary_for(last_user_text(body)?)?;
    let text = match canary.answer {
        Known::Word(w) => format!("{}.", capitalized(w)),
        Known::Number(n) => format!("{n}"),
        Known::JsonObject(o) => format!("```json\n{o}\n```"),
        Known::Characters(c) => c.to_owned(),
    };
    Some(KnownReply::Text(thirds(&text)))
}

/// The tool's result, where the conversation ends with one: a `tool` message (OpenAI chat,
/// Ollama), a `function_call_output` item (Responses), a `tool_result` block (Anthropic).
fn tool_result(body: &Value) -> Option<String> {
    let last = body
        .get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array)?
        .last()?;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if last.get("role").and_then(Value::as_str) == Some("tool") {
        return last.get("content").map(text);
    }
    if last.get("type").and_then(Value::as_str) == Some("function_call_output") {
        return last.get("output").map(text);
    }
    let block = last.get("content")?.as_array()?.first()?;
    (block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .then(|| block.get("content").map(text))
        .flatten()
}

/// The prompt: the last message's text (chat, Anthropic, Ollama), the Responses API's
/// `input`, or a completion's `prompt` / TGI's `inputs`.
fn last_user_text(body: &Value) -> Option<&str> {
    fn text_of(content: &Value) -> Option<&str> {
        match content {
            Value::String(s) => Some(s.as_str()),
            Value::Array(parts) => parts.iter().find_map(|p| p.get("text").and_then(Value::as_str)),
            _ => None,
        }
    }
    if let Some(last) = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
    {
        return last.get("content").and_then(text_of);
    }
    match body.get("input") {
        Some(Value::String(s)) => return Some(s),
        Some(Value::Array(items)) => return items.last()?.get("content").and_then(text_of),
        _ => {}
    }
    body.get("prompt")
        .or_else(|| body.get("inputs"))
        .and_then(Value::as_str)
}

fn capitalized(w: &str) -> String {
    let mut c = w.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// `text` in three pieces (on character boundaries), as a stream splits it.
fn thirds(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A small value that follows `schema`: what a model answering right would write. Knows the
/// keywords a tool's parameters or a structured answer use (type, properties, required,
/// items, enum, const, minimum, minLength, anyOf/oneOf); others are ignored.
fn instance(schema: &Value) -> Value {
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(first) = ["anyOf", "oneOf", "allOf"]
        .iter()
        .find_map(|k| schema.get(*k).and_then(Value::as_array).and_then(|a| a.first()))
    {
        return instance(first);
    }
    let kind = match schema.get("type") {
        Some(Value::Array(types)) => types.iter().find_map(Value::as_str).unwrap_or("null"),
        Some(Value::String(t)) => t.as_str(),
        _ if schema.get("properties").is_some() => "object",
        _ => "null",
    };
    let number = |k: &str| schema.get(k).and_then(Value::as_f64);
    match kind {
        "object" => {
            let mut out = serde_json::Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, sub) in props {
                    out.insert(name.clone(), instance(sub));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let item = schema.get("items").map(instance).unwrap_or(Value::Null);
            let n = schema.get("minItems").and_then(Value::as_u64).unwrap_or(1).max(1);
            Value::Array(vec![item; n as usize])
        }
        "string" => {
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            json!(format!("{:x<min$}", "Paris"))
        }
        "integer" => json!(number("minimum").map_or(1, |m| m.ceil() as i64)),
        "number" => json!(number("minimum").unwrap_or(1.5)),
        "boolean" => json!(true),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AnswerSchema;

    #[test]
    fn instances_follow_their_schemas() {
        let schemas = [
            json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}, "required": ["city", "days"]}),
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 8}, "minItems": 2}, "unit": {"enum": ["c", "f"]}}}),
            json!({"anyOf": [{"type": "number", "minimum": 3}, {"type": "string"}]}),
            json!({"type": ["boolean", "null"]}),
        ];
        for s in schemas {
            let compiled = AnswerSchema::compile(s.clone()).unwrap();
            let v = instance(&s);
            assert!(compiled.validate(&v).is_ok(), "{v} for {s}");
        }
    }

    #[test]
    fn canaries_and_tools_are_answered() {
        let chat = json!({"messages": [{"role": "user", "content": "What is 17 + 25? Reply with the number only."}]});
        assert_eq!(
            reply_for(&chat),
            Some(KnownReply::Text(vec!["4".into(), "2".into()]))
        );
        let responses = json!({"input": "Reply with only the word PONG and nothing else."});
        assert!(matches!(reply_for(&responses), Some(KnownReply::Text(t)) if t.concat() == "Pong."));
        let story = json!({"messages": [{"role": "user", "content": "Tell me a story."}]});
        assert_eq!(reply_for(&story), None);
        let tools = json!({"tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]});
        let Some(KnownReply::ToolCall { name, pieces }) = reply_for(&tools) else {
            panic!()
        };
        assert_eq!(
            (name.as_str(), pieces.concat()),
            ("get_weather", "{\"city\":\"Paris\"}".to_owned())
        );
        assert_eq!(pieces.len(), 3);
    }
}
