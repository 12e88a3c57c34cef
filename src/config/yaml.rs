//! probes.yaml's text into a YAML value, built as the parser goes.
//!
//! `serde_yaml::from_str` first collects every event of the document into one list
//! (192 bytes an event, with its mark) and only then builds the value: for a 10,000-probe
//! file that list alone is 25 MB, half the agent's whole memory budget, on top of the
//! value. Here yaml-rust2's pull parser (the one [`super::positions`] already uses) feeds
//! the value directly, so only the value and the parser's small state are ever held.
//!
//! The result must be exactly what serde_yaml would have produced, errors included, and
//! the two parsers do not accept the same documents (libyaml refuses a tab before a key
//! and `{: v}`; yaml-rust2 takes both). So serde_yaml still reads the file first, into
//! nothing (`IgnoredAny`): its event list is built and dropped before any value exists,
//! and a file it refuses gets its error, word for word, as before. Then this path builds
//! the value, for plain documents only: one document, no anchors, aliases or tags, no
//! duplicate keys, scalar keys, nesting well under serde_yaml's recursion limit, integers
//! that fit 64 bits. Anything else goes to serde_yaml as before. Plain scalars are
//! resolved by the rules serde_yaml applies (see [`scalar`]).

use serde_yaml::{Mapping, Value};
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::TScalarStyle;

/// Nesting this path builds; deeper documents go to serde_yaml (its limit is 128), so
/// its "recursion limit exceeded" error stays its own.
const MAX_DEPTH: usize = 64;

/// The document's value, or serde_yaml's error for it.
pub(super) fn parse(text: &str) -> Result<Value, serde_yaml::Error> {
    // Its error is taken from reading into a value, as before: the same words, whatever
    // `IgnoredAny` said.
    if serde_yaml::from_str::<serde::de::IgnoredAny>(text).is_err() {
        return serde_yaml::from_str(text);
    }
    match streamed(text) {
        Some(value) => Ok(value),
        None => serde_yaml::from_str(text),
    }
}

/// A collection still open while the parser is inside it.
enum Open {
    Sequence(Vec<Value>),
    /// With the key whose value comes next.
    Mapping(Mapping, Option<Value>),
}

/// The value, built event by event; `None` for anything this path leaves to serde_yaml.
fn streamed(text: &str) -> Option<Value> {
    let mut parser = Parser::new_from_str(text);
    let mut open: Vec<Open> = Vec::new();
    let mut root = None;
    let mut documents = 0;
    loop {
        let (event, _) = parser.next_token().ok()?;
        let finished = match event {
            Event::StreamEnd => break,
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => continue,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return None;
                }
                continue;
            }
            Event::Alias(_) => return None,
            Event::Scalar(value, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                scalar(value, style)?
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                if anchor != 0 || tag.is_some() || open.len() >= MAX_DEPTH {
                    return None;
                }
                open.push(if matches!(event, Event::SequenceStart(..)) {
                    Open::Sequence(Vec::new())
                } else {
                    Open::Mapping(Mapping::new(), None)
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match open.pop()? {
                // Exact sizes: the value lives until the whole file is checked.
                Open::Sequence(mut items) => {
                    items.shrink_to_fit();
                    Value::Sequence(items)
                }
                Open::Mapping(mut map, None) => {
                    map.shrink_to_fit();
                    Value::Mapping(map)
                }
                Open::Mapping(_, Some(_)) => return None,
            },
        };
        match open.last_mut() {
            None if root.is_none() => root = Some(finished),
            None => return None,
            Some(Open::Sequence(items)) => items.push(finished),
            Some(Open::Mapping(map, pending)) => match pending.take() {
                Some(key) => {
                    // serde_yaml refuses duplicate keys; its error says it best.
                    if map.contains_key(&key) {
                        return None;
                    }
                    map.insert(key, finished);
                }
                None if matches!(finished, Value::Mapping(_) | Value::Sequence(_)) => return None,
                None => *pending = Some(finished),
            },
        }
    }
    root
}

/// A scalar as serde_yaml's `Value` reads it: quoted and block scalars are strings; a
/// plain one is null, a boolean, an integer, a float or a string, in that order. `None`
/// for an integer wider than 64 bits, which serde_yaml refuses in its own words.
///
/// The plain rules are YAML 1.2's core schema as serde_yaml applies it: integers in
/// decimal or behind `0x`, `0o`, `0b`, with one optional sign; `.inf` and `.nan`; and
/// digits with a leading zero left a string. The value must not depend on which parser
/// read the file: `scalars_resolve_as_serde_yaml_resolves_them` compares the two.
fn scalar(text: String, style: TScalarStyle) -> Option<Value> {
    if style != TScalarStyle::Plain {
        return Some(Value::String(text));
    }
    match text.as_str() {
        // yaml-rust2 writes an empty plain scalar (`key:`) as `~`, libyaml as ``: both null.
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        _ => {}
    }
    match integer(&text) {
        Some(Ok(n)) => return Some(Value::Number(n)),
        Some(Err(TooWide)) => return None,
        None => {}
    }
    match float(&text) {
        Some(f) => Some(Value::Number(f.into())),
        None => Some(Value::String(text)),
    }
}

/// An integer that does not fit 64 bits.
struct TooWide;

/// `None` when the text is no integer.
fn integer(text: &str) -> Option<Result<serde_yaml::Number, TooWide>> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (radix, digits) = [("0x", 16), ("0o", 8), ("0b", 2)]
        .into_iter()
        .find_map(|(prefix, radix)| Some((radix, unsigned.strip_prefix(prefix)?)))
        .unwrap_or((10, unsigned));
    // `from_str_radix` would take a sign of its own after ours.
    if (radix == 10 && leading_zero(digits)) || digits.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = u128::from_str_radix(digits, radix).ok()?;
    Some(if negative {
        0i128
            .checked_sub_unsigned(magnitude)
            .and_then(|n| i64::try_from(n).ok())
            .map(serde_yaml::Number::from)
            .ok_or(TooWide)
    } else {
        u64::try_from(magnitude)
            .map(serde_yaml::Number::from)
            .map_err(|_| TooWide)
    })
}

/// A finite float, or one of YAML's infinities and NaN.
fn float(text: &str) -> Option<f64> {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    if leading_zero(unsigned) || unsigned.starts_with(['+', '-']) {
        return None;
    }
    match text {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => Some(f64::NAN),
        // Rust's own words for infinity and NaN (`inf`, `nan`) are strings in YAML.
        _ => text
            .strip_prefix('+')
            .unwrap_or(text)
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite()),
    }
}

/// Digits with a leading zero (`007`): a string in YAML 1.2, not a number.
fn leading_zero(digits: &str) -> bool {
    digits.len() > 1 && digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every document here must come out exactly as serde_yaml reads it, whichever path
    /// takes it.
    fn same_as_serde(text: &str) {
        let ours = parse(text).map_err(|e| e.to_string());
        let theirs = serde_yaml::from_str::<Value>(text).map_err(|e| e.to_string());
        assert_eq!(ours, theirs, "document:\n{text}");
    }

    #[test]
    fn scalars_resolve_as_serde_yaml_resolves_them() {
        let plain = [
            "",
            "~",
            "null",
            "Null",
            "NULL",
            "nil",
            "true",
            "True",
            "TRUE",
            "tRUE",
            "false",
            "yes",
            "no",
            "on",
            "0",
            "7",
            "+7",
            "-7",
            "007",
            "-007",
            "0x1f",
            "-0x1f",
            "0x-1",
            "0o17",
            "-0o17",
            "0b101",
            "+0b1",
            "1_000",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775809",
            "340282366920938463463374607431768211456",
            "1.5",
            "-1.5",
            "+1.5",
            "1e3",
            "1.",
            ".5",
            ".inf",
            "-.Inf",
            "+.INF",
            ".nan",
            ".NaN",
            "inf",
            "nan",
            "infinity",
            "++1",
            "+-1",
            "30s",
            "1h30m",
            "0.25",
            "00.5",
            "127.0.0.1",
            "http://h:80/p",
            "a b",
            "é",
            "-",
            "+",
            ".",
            "0x",
            "0o",
            "0b",
            "-0",
            "-00",
            "+0x10",
            "0x+5",
            "-0o-5",
            "-0x8000000000000000",
            "-0x8000000000000001",
            "0xffffffffffffffff",
            "0x10000000000000000",
            "-+1",
            "--1",
            "+.nan",
            "-.nan",
            "+.inf",
            "-inf",
        ];
        for s in plain {
            same_as_serde(&format!("k: {s}\n"));
            same_as_serde(&format!("- {s}\n"));
            same_as_serde(&format!("{{{s}: v}}\n"));
        }
        for s in ["'7'", "\"true\"", "'~'", "\"0x1f\"", "'a''b'", "\"\\t\\u00e9\""] {
            same_as_serde(&format!("k: {s}\n"));
        }
        same_as_serde("k: |\n  7\n  true\n");
        same_as_serde("k: >-\n  folded\n  text\n");
    }

    #[test]
    fn documents_match_serde_yaml_and_what_this_path_leaves_to_it_too() {
        let docs = [
            "probes:\n  - {name: a, kind: http, url: \"http://h/health\", interval: 30s}\n  - name: b\n    headers:\n      X: y\n",
            "a: 1\nb: [1, 2, {c: d}]\nc: {}\nd: []\ne:\n",
            "---\na: 1\n...\n",
            "a: 1\n---\nb: 2\n",
            "",
            "# only a comment\n",
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: !custom x\n",
            "a: 1\na: 2\n",
            "? [a]\n: b\n",
            "? {a: 1}\n: b\n",
            "a: [1, 2\n",
            "a: b: c\n",
            "\ta: 1\n",
            "a:\n  - b\n  c: d\n",
            "- a\nb: c\n",
            "a: 'unterminated\n",
            "<<: {a: 1}\nb: 2\n",
            "a: 99999999999999999999999999999999999999999\n",
            "x\n",
            "[1, 2]\n",
        ];
        for doc in docs {
            same_as_serde(doc);
        }
        // The ordinary ones are this path's, not serde_yaml's fallback.
        assert!(streamed(docs[0]).is_some());
        assert!(streamed(docs[1]).is_some());
        assert!(streamed(docs[6]).is_none(), "an alias goes to serde_yaml");
        assert!(streamed(docs[9]).is_none(), "a duplicate key goes to serde_yaml");
        let deep = format!("{}1{}", "[".repeat(120), "]".repeat(120));
        same_as_serde(&deep);
        let deeper = format!("{}1{}", "[".repeat(130), "]".repeat(130));
        same_as_serde(&deeper);
    }

    #[test]
    fn every_yaml_file_of_the_repository_reads_as_serde_yaml_reads_it() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seen = 0;
        let mut streamed_here = 0;
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
                let path = entry.path();
                let name = entry.file_name();
                if path.is_dir() {
                    if !matches!(name.to_str(), Some("target" | ".git" | "node_modules")) {
                        dirs.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml")
                    && let Ok(text) = std::fs::read_to_string(&path)
                {
                    same_as_serde(&text);
                    seen += 1;
                    streamed_here += usize::from(streamed(&text).is_some());
                }
            }
        }
        assert!(seen > 10, "only {seen} YAML files found under {}", root.display());
        assert!(
            streamed_here * 2 > seen,
            "only {streamed_here} of {seen} files built here"
        );
    }
}
