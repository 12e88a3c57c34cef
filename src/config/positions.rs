//! Where things are in the YAML text: the [`PositionIndex`] (line and column of every
//! key and value, by path), key paths and the nodes they name, and "did you mean"
//! suggestions for unknown keys and values outside a closed set.

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

/// The node at `path` (dotted, with `[i]` for list items) inside `value`.
pub(super) fn node_mut<'v>(value: &'v mut Value, path: &str) -> Option<&'v mut Value> {
    let mut node = value;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let mut pieces = part.split('[');
        let name = pieces.next().unwrap_or_default();
        if !name.is_empty() {
            node = node.get_mut(name)?;
        }
        for index in pieces {
            node = node.get_mut(index.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(node)
}

/// Removes `key` from the mapping at `path` inside `value`. Returns whether it was there.
pub(super) fn remove_key(value: &mut Value, path: &str, key: &str) -> bool {
    node_mut(value, path)
        .and_then(Value::as_mapping_mut)
        .and_then(|m| m.remove(key))
        .is_some()
}

/// Removes the node at `path`: a key of a mapping, or an item of a list (`x[2]`).
/// Returns whether it was there.
pub(super) fn remove_node(value: &mut Value, path: &str) -> bool {
    match path.rsplit_once(['.', '[']) {
        Some((parent, index)) if path.ends_with(']') => {
            let Ok(i) = index.trim_end_matches(']').parse::<usize>() else {
                return false;
            };
            match node_mut(value, parent).and_then(Value::as_sequence_mut) {
                Some(items) if i < items.len() => {
                    items.remove(i);
                    true
                }
                _ => false,
            }
        }
        Some((parent, key)) => remove_key(value, parent, key),
        None => remove_key(value, "", path),
    }
}

/// serde_path_to_error's path for an unknown field may or may not end in the field
/// itself; return the path of the mapping that holds it.
pub(super) fn key_parent(key: &str, unknown: &str) -> String {
    if key == unknown {
        return String::new();
    }
    // `prompts` with an unknown `ts` in it is not `promp` + `ts`.
    key.strip_suffix(unknown)
        .and_then(|k| k.strip_suffix('.'))
        .map_or_else(|| key.to_owned(), str::to_owned)
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

/// The expected value `value` was most likely meant to be: the same but for case, `-` or
/// a space for `_` (`openai-chat`, `High`), else the closest within edit distance 2.
pub(crate) fn closest<S: AsRef<str>>(value: &str, expected: &[S]) -> Option<String> {
    let normalize = |s: &str| s.to_ascii_lowercase().replace(['-', ' '], "_");
    let wanted = normalize(value);
    let lowered: Vec<String> = expected.iter().map(|e| normalize(e.as_ref())).collect();
    let at = lowered.iter().position(|e| *e == wanted).or_else(|| {
        let s = suggest(&wanted, &lowered)?;
        lowered.iter().position(|e| *e == s)
    })?;
    Some(expected[at].as_ref().to_owned())
}

/// "`x` is not one of a, b, c", with "did you mean" when one of them is close: the one
/// message for a value outside a closed set the checks (not serde) enforce.
pub(super) fn not_one_of<S: AsRef<str>>(value: &str, expected: &[S]) -> String {
    let list: Vec<&str> = expected.iter().map(AsRef::as_ref).collect();
    let list = list.join(", ");
    match closest(value, expected) {
        Some(s) => format!("`{value}` is not one of {list}; did you mean `{s}`?"),
        None => format!("`{value}` is not one of {list}"),
    }
}

/// Edits between `a` and `b`, a swap of two neighbours counting as one (`lenght`,
/// `recievers`, `fp23`: the commonest typo is one edit, not two).
pub(super) fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut before: Vec<usize> = Vec::new();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let mut d = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
            if i > 0 && j > 0 && *ca == b[j - 1] && a[i - 1] == *cb {
                d = d.min(before[j - 1] + 1);
            }
            cur.push(d);
        }
        before = std::mem::replace(&mut prev, cur);
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

#[cfg(test)]
mod tests {
    use super::{closest, levenshtein, not_one_of, remove_node};

    #[test]
    fn a_swap_of_neighbours_is_one_edit() {
        assert_eq!(levenshtein("lenght", "length"), 1);
        assert_eq!(levenshtein("fp23", "fp32"), 1);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("abc", "abc"), 0);
    }

    #[test]
    fn near_misses_find_their_value_and_far_ones_none() {
        assert_eq!(closest("High", &["low", "high"]).as_deref(), Some("high"));
        assert_eq!(closest("nchw", &["NHWC", "NCHW"]).as_deref(), Some("NCHW"));
        assert_eq!(
            closest("openai-chat", &["openai_chat"]).as_deref(),
            Some("openai_chat")
        );
        assert_eq!(
            closest("multpart", &["multipart", "raw"]).as_deref(),
            Some("multipart")
        );
        assert_eq!(closest("ftp", &["multipart", "raw"]), None);
        assert_eq!(
            not_one_of("ftp", &["multipart", "raw"]),
            "`ftp` is not one of multipart, raw"
        );
    }

    #[test]
    fn removing_a_node_takes_keys_and_list_items() {
        let mut v: serde_yaml::Value = serde_yaml::from_str("a: {b: [1, 2, 3], c: x}").unwrap();
        assert!(remove_node(&mut v, "a.b[1]"));
        assert!(remove_node(&mut v, "a.c"));
        assert!(!remove_node(&mut v, "a.b[7]"));
        assert_eq!(
            v,
            serde_yaml::from_str::<serde_yaml::Value>("a: {b: [1, 3]}").unwrap()
        );
    }
}
