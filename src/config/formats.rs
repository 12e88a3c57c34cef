//! The string formats of the file as the JSON Schema states them (durations, names, HTTP
//! methods, closed sets that also take a `${VAR}`), for `#[schemars(with)]` on the raw
//! shapes, which keep such values as plain strings so that the checks can say what is
//! wrong with each. A leaf: the sections that own a closed set build its format here.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

/// A `${VAR}` (or `${VAR:-default}`) reference anywhere in a string: the loader puts the
/// variable's value there before checking it, so the schema cannot judge the text.
pub(crate) const ENV_REFERENCE: &str = r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}";

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
pub(crate) fn closed_set(description: &str, values: &[&str], any_case: bool) -> Schema {
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
        pub(crate) struct $name;

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                $generate
            }
        }
    };
}
pub(crate) use schema_type;

/// A duration: numbers with units, e.g. 500ms, 30s, 1m30s, 2h, 7d. Inlined, so that an
/// optional one is `type: [string, null]` with the message on it: editors report a bare
/// number (`interval: 30`) in an `anyOf: [$ref, null]` with their own words.
pub(crate) struct Duration;

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
