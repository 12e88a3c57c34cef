//! Where things are in the YAML text: the [`PositionIndex`] (line and column of every
//! key and value, by path), key paths, and "did you mean" suggestions for unknown keys.

use std::collections::HashMap;

use serde_yaml::Value;

pub(super) fn join_path(prefix: &str, inner: &str) -> String {
    match (prefix.is_empty(), inner.is_empty()) {
        (_, true) => prefix.to_owned(),
        (true, false) => inner.to_owned(),
        (false, false) if inner.starts_with('[') => format!("{prefix}{inner}"),
        (false, false) => format!("{prefix}.{inner}"),
    }
}

/// Removes `key` from the mapping at `path` (dotted, with `[i]` for list items) inside
/// `value`. Returns whether it was there.
pub(super) fn remove_key(value: &mut Value, path: &str, key: &str) -> bool {
    let mut node = value;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, index) = match part.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !name.is_empty() {
            let Some(next) = node.get_mut(name) else {
                return false;
            };
            node = next;
        }
        if let Some(i) = index {
            let Some(next) = node.get_mut(i) else { return false };
            node = next;
        }
    }
    node.as_mapping_mut().and_then(|m| m.remove(key)).is_some()
}

/// serde_path_to_error's path for an unknown field may or may not end in the field
/// itself; return the path of the mapping that holds it.
pub(super) fn key_parent(key: &str, unknown: &str) -> String {
    key.strip_suffix(unknown)
        .map(|k| k.trim_end_matches('.').to_owned())
        .unwrap_or_else(|| key.to_owned())
}

/// Pulls `x` and the expected names out of "unknown field `x`, expected one of `a`, `b`".
pub(super) fn parse_unknown_field(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (name, rest) = rest.split_once('`')?;
    let expected = rest.split('`').skip(1).step_by(2).map(str::to_owned).collect();
    Some((name.to_owned(), expected))
}

/// The closest expected key within edit distance 2, if any.
pub(super) fn suggest<S: AsRef<str>>(unknown: &str, expected: &[S]) -> Option<String> {
    expected
        .iter()
        .map(|e| (levenshtein(unknown, e.as_ref()), e.as_ref()))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, e)| e.to_owned())
}

pub(super) fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// serde_norway appends " at line L column C"; we print the position ourselves.
pub(super) fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// Line and column of every key and value in a YAML document, by path
/// (`probes[1].headers.Authorization`). serde drops positions once a value is parsed;
/// this keeps them so every semantic error can say where it is.
#[derive(Debug, Default)]
pub struct PositionIndex {
    positions: HashMap<String, (usize, usize)>,
    /// Where each mapping key itself stands (for "unknown key" errors).
    keys: HashMap<String, (usize, usize)>,
}

impl PositionIndex {
    pub fn build(text: &str) -> Self {
        use yaml_rust2::parser::{Event, Parser};
        enum Frame {
            Map {
                path: String,
                expecting_key: bool,
                key: Option<String>,
            },
            Seq {
                path: String,
                next: usize,
            },
        }
        let mut positions = HashMap::new();
        let mut keys = HashMap::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut parser = Parser::new_from_str(text);
        // The path of the node that starts now, consuming a key slot or a sequence slot.
        fn node_path(stack: &mut [Frame]) -> Option<String> {
            match stack.last_mut()? {
                Frame::Map {
                    path,
                    expecting_key,
                    key,
                } => {
                    *expecting_key = true;
                    key.take().map(|k| join_path(path, &k))
                }
                Frame::Seq { path, next } => {
                    *next += 1;
                    Some(format!("{path}[{}]", *next - 1))
                }
            }
        }
        while let Ok((event, marker)) = parser.next_token() {
            // yaml-rust2 columns count from 0; editors count from 1.
            let pos = (marker.line(), marker.col() + 1);
            match event {
                Event::StreamEnd => break,
                Event::Scalar(value, ..) => {
                    if let Some(Frame::Map {
                        path,
                        expecting_key,
                        key,
                    }) = stack.last_mut()
                        && *expecting_key
                    {
                        *expecting_key = false;
                        // A mapping is "at" its first key: block mappings' own start
                        // markers point past it.
                        positions.entry(path.clone()).or_insert(pos);
                        let full = join_path(path, &value);
                        positions.entry(full.clone()).or_insert(pos);
                        keys.insert(full, pos);
                        *key = Some(value);
                        continue;
                    }
                    if let Some(path) = node_path(&mut stack) {
                        // Point value errors at the value itself.
                        positions.insert(path, pos);
                    }
                }
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    let is_map = matches!(event, Event::MappingStart(..));
                    let path = if stack.is_empty() {
                        Some(String::new())
                    } else {
                        node_path(&mut stack)
                    };
                    let path = path.unwrap_or_default();
                    if !is_map {
                        positions.entry(path.clone()).or_insert(pos);
                    }
                    stack.push(if is_map {
                        Frame::Map {
                            path,
                            expecting_key: true,
                            key: None,
                        }
                    } else {
                        Frame::Seq { path, next: 0 }
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                }
                Event::Alias(_) => {
                    node_path(&mut stack);
                }
                _ => {}
            }
        }
        PositionIndex { positions, keys }
    }

    /// Where the key of `path` stands, falling back to [`PositionIndex::locate`].
    pub fn locate_key(&self, path: &str) -> (usize, usize) {
        self.keys.get(path).copied().unwrap_or_else(|| self.locate(path))
    }

    /// Where `path` is, or its nearest ancestor that is in the file (a missing key is
    /// reported at the mapping that lacks it).
    pub fn locate(&self, path: &str) -> (usize, usize) {
        let mut p = path;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return *pos;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return self.positions.get("").copied().unwrap_or((1, 1)),
            }
        }
    }
}
