//! Where every problem of one file is collected, positioned and labelled: the
//! [`Diagnostics`] of a load, passed to every section's check, every kind's and every
//! receiver's, and to the web config's. It holds the problems said (errors and warnings,
//! sorted by line, column and key when the load ends), the keys already settled (a key
//! whose problem is said gets no second message), and the way a section is read past its
//! problems ([`Diagnostics::section`]). Positions come from [`PositionIndex`], built on
//! the first problem only.
//!
//! A leaf of config: imports positions.rs alone, so any part of the crate that reads a
//! file of ours can use it without a circle.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::positions::{
    PositionIndex, closest, join_path, key_parent, node_mut, parse_unknown_field, remove_key, remove_node,
    strip_location, suggest,
};

/// The problems of one file, as its checks find them.
pub(crate) struct Diagnostics<'a> {
    /// The file's name as messages print it.
    pub(crate) file: String,
    /// Where the file's relative paths start: its folder.
    pub(crate) base_dir: PathBuf,
    pub(crate) text: &'a str,
    /// Built on the first error only: a valid 10,000-probe file never pays for it.
    pub(crate) index: Option<PositionIndex>,
    pub(crate) errors: Vec<ConfigError>,
    pub(crate) warnings: Vec<ConfigError>,
    /// Key paths whose value held a `${VAR}` (for "only string values take `${VAR}`").
    pub(crate) templated: HashSet<String>,
    /// Key paths whose problem is already said (an unset variable, a value of the wrong
    /// type, a missing key): nothing more is said about them or what is under them, so
    /// that one mistake is one message while the rest of the file is still checked.
    pub(crate) settled: HashSet<String>,
    /// Lists one of whose items was refused: what is said about the list as a whole
    /// (empty, too short) follows from that and is not said again.
    pub(crate) settled_lists: HashSet<String>,
    /// Problems not said because their key was settled: a value with one is no better
    /// for it (see [`Diagnostics::passes`]).
    pub(crate) unsaid: usize,
}

/// What stands in for a required key that is missing, tried in turn until the section
/// reads (its type is not known here): the checks then run on the rest of the section,
/// and the key itself is settled.
const STAND_INS: [fn() -> Value; 4] = [
    || Value::String(String::new()),
    || Value::Sequence(Vec::new()),
    || Value::Mapping(serde_yaml::Mapping::new()),
    || Value::Number(0.into()),
];

impl<'a> Diagnostics<'a> {
    /// The diagnostics of the file `file` holding `text`; relative paths in it start
    /// from the file's folder.
    pub(crate) fn new(file: &Path, text: &'a str) -> Self {
        Diagnostics {
            file: file.display().to_string(),
            base_dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
            text,
            index: None,
            errors: Vec::new(),
            warnings: Vec::new(),
            templated: HashSet::new(),
            settled: HashSet::new(),
            settled_lists: HashSet::new(),
            unsaid: 0,
        }
    }

    /// The problems found, sorted by line, column and key (a stable sort: those of one
    /// key at one place in the order they were found): errors if there is any, else the
    /// warnings.
    pub(crate) fn finish(mut self) -> Result<Vec<ConfigError>, ConfigErrors> {
        let order = |e: &ConfigError| (e.line, e.column, e.key.clone());
        if self.errors.is_empty() {
            self.warnings.sort_by_key(order);
            Ok(self.warnings)
        } else {
            self.errors.sort_by_key(order);
            Err(ConfigErrors(self.errors))
        }
    }

    /// Errors said so far: a check compares the count before and after it.
    pub(crate) fn error_count(&self) -> usize {
        self.errors.len()
    }

    pub(crate) fn index(&mut self) -> &PositionIndex {
        let text = self.text;
        self.index.get_or_insert_with(|| PositionIndex::build(text))
    }

    /// Whether `check` finds no problem, keeping none of its messages: how a bad value
    /// under `defaults`, reported once there, is left out of what the probes inherit.
    pub(crate) fn passes(&mut self, check: impl FnOnce(&mut Self)) -> bool {
        let (before, unsaid) = (self.errors.len(), self.unsaid);
        check(self);
        let ok = self.errors.len() == before && self.unsaid == unsaid;
        self.errors.truncate(before);
        ok
    }

    pub(crate) fn error(&mut self, probe: Option<&str>, key: &str, message: impl Into<String>) {
        if self.is_settled(key) {
            self.unsaid += 1;
            return;
        }
        let position = self.index().locate(key);
        self.error_at(position, probe, key, message);
    }

    /// Whether what is wrong with `key` was said already (see [`Diagnostics::settled`]).
    pub(crate) fn is_settled(&self, key: &str) -> bool {
        if self.settled.is_empty() && self.settled_lists.is_empty() {
            return false;
        }
        if self.settled_lists.contains(key) {
            return true;
        }
        let mut k = key;
        loop {
            if self.settled.contains(k) {
                return true;
            }
            match k.rfind(['.', '[']) {
                Some(i) => k = &k[..i],
                None => return false,
            }
        }
    }

    /// Something allowed but risky: `check` prints it, `run` logs it.
    pub(crate) fn warn(&mut self, probe: Option<&str>, key: &str, message: impl Into<String>) {
        let position = self.index().locate(key);
        let warning = self.problem(position, probe, key, message.into());
        self.warnings.push(warning);
    }

    pub(crate) fn error_at(
        &mut self,
        position: (usize, usize),
        probe: Option<&str>,
        key: &str,
        message: impl Into<String>,
    ) {
        if self.is_settled(key) {
            self.unsaid += 1;
            return;
        }
        let error = self.problem(position, probe, key, message.into());
        self.errors.push(error);
    }

    pub(crate) fn problem(
        &self,
        (line, column): (usize, usize),
        probe: Option<&str>,
        key: &str,
        message: String,
    ) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            probe: probe.map(str::to_owned),
            key: key.to_owned(),
            message,
        }
    }

    /// Deserializes one section, every problem reported and positioned. serde stops at
    /// the first; each time, the key that has it is set aside and the rest read again:
    /// an unknown key or a value of the wrong type is removed, a missing required key
    /// filled with a stand-in, and the key settled. So every problem of the section shows
    /// in one pass (a misspelt key does not hide a missing one), and the checks that
    /// follow see the section as if the bad key were absent. `None` only when the
    /// section itself is not a mapping of the expected shape.
    pub(crate) fn section<T: serde::de::DeserializeOwned>(
        &mut self,
        mut value: Value,
        prefix: &str,
        probe: Option<&str>,
    ) -> Option<T> {
        // Items removed from lists, by list path: later errors in the list count from the
        // file's items, not from those left.
        let mut removed: HashMap<String, Vec<usize>> = HashMap::new();
        let mut stand_ins: HashMap<String, usize> = HashMap::new();
        for _ in 0..64 {
            let e = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
                Ok(v) => return Some(v),
                Err(e) => e,
            };
            let at = e.path().to_string();
            let at = if at == "." { String::new() } else { at };
            let in_file = path_in_file(&at, &removed);
            let key = join_path(prefix, &in_file);
            // In YAML words: keys and values, not fields and variants.
            let message = strip_location(&e.into_inner().to_string())
                .replace("missing field", "missing key")
                .replace("unknown variant", "unknown value");
            if let Some((unknown, expected)) = parse_unknown_field(&message) {
                let parent = key_parent(&key, &unknown);
                let message = match suggest(&unknown, &expected) {
                    Some(s) => format!("unknown key `{unknown}`; did you mean `{s}`?"),
                    None => format!("unknown key `{unknown}`; expected one of {}", expected.join(", ")),
                };
                let path = join_path(&parent, &unknown);
                let position = self.index().locate_key(&path);
                self.error_at(position, probe, &path, message);
                let within = key_parent(&at, &unknown);
                if !remove_key(&mut value, &within, &unknown) {
                    return None;
                }
                continue;
            }
            if let Some(missing) = message
                .strip_prefix("missing key `")
                .and_then(|m| m.strip_suffix('`'))
            {
                let within = join_path(&at, missing);
                let path = join_path(prefix, &join_path(&in_file, missing));
                if !self.is_settled(&path) {
                    self.error(probe, &key, message.clone());
                }
                self.settled.insert(path);
                let Some(Value::Mapping(map)) = node_mut(&mut value, &at) else {
                    return None;
                };
                map.insert(Value::String(missing.to_owned()), STAND_INS[0]());
                stand_ins.insert(within, 0);
                continue;
            }
            if let Some(tried) = stand_ins.get_mut(&at) {
                // The stand-in is not of the key's type: the next one.
                *tried += 1;
                let (Some(stand_in), Some(node)) = (STAND_INS.get(*tried), node_mut(&mut value, &at)) else {
                    return None;
                };
                *node = stand_in();
                continue;
            }
            if at.is_empty() {
                self.error(probe, &key, with_fix(&key, message));
                return None;
            }
            if self.templated.contains(&key) && message.starts_with("invalid type: string") {
                // `max_tokens: ${MAX_TOKENS}`: said here, instead of the variable's
                // being unset, if it is (once set, this would be the next message).
                self.settled.remove(&key);
                self.errors.retain(|e| e.key != key);
                self.error(probe, &key, only_strings(&key, &message));
            } else {
                self.error(probe, &key, with_fix(&key, message));
            }
            self.settled.insert(key.clone());
            if let Some((list, _)) = key.rsplit_once('[').filter(|_| key.ends_with(']')) {
                self.settled_lists.insert(list.to_owned());
            }
            if !remove_node(&mut value, &at) {
                return None;
            }
            if let Some((list, index)) = at.rsplit_once('[').filter(|_| at.ends_with(']')) {
                let index = in_file.rsplit_once('[').map_or(index, |(_, i)| i);
                if let Ok(i) = index.trim_end_matches(']').parse::<usize>() {
                    let gone = removed.entry(list.to_owned()).or_default();
                    gone.push(i);
                    gone.sort_unstable();
                }
            }
        }
        None
    }

    /// The `kind` of a probe or a receiver, read before the rest of it: an unknown or
    /// missing kind is reported (`None`), and replaced in `value` by `stand_in`, so that
    /// the section reads and the keys every kind has are still checked (the caller then
    /// does not use the raw kind).
    pub(crate) fn read_kind<K: serde::de::DeserializeOwned>(
        &mut self,
        value: &mut Value,
        prefix: &str,
        probe: Option<&str>,
        stand_in: &str,
    ) -> Option<K> {
        let Value::Mapping(map) = value else {
            return None;
        };
        let key = format!("{prefix}.kind");
        match map.get("kind") {
            None => self.error(probe, prefix, "missing key `kind`"),
            Some(v) => match serde_yaml::from_value::<K>(v.clone()) {
                Ok(kind) => return Some(kind),
                Err(e) => {
                    let message = strip_location(&e.to_string()).replace("unknown variant", "unknown value");
                    let message = with_fix(&key, message);
                    self.error(probe, &key, message);
                }
            },
        }
        self.settled.insert(key);
        map.insert("kind".into(), stand_in.into());
        None
    }
}

/// The keys whose value is a duration (`30s`), wherever they are.
const DURATION_KEYS: [&str; 7] = [
    "interval",
    "timeout",
    "first_token_timeout",
    "reminder",
    "retention",
    "ttft_p95",
    "total_p95",
];

/// `at`, a path in a section from which list items were removed, as a path in the file.
fn path_in_file(at: &str, removed: &HashMap<String, Vec<usize>>) -> String {
    for (list, gone) in removed {
        let Some(rest) = at.strip_prefix(list.as_str()).and_then(|r| r.strip_prefix('[')) else {
            continue;
        };
        let Some((index, tail)) = rest.split_once(']') else {
            continue;
        };
        let Ok(index) = index.parse::<usize>() else {
            continue;
        };
        // The index-th item of those left, counted among the file's.
        let in_file = (0..).filter(|i| !gone.contains(i)).nth(index).unwrap_or(index);
        return format!("{list}[{in_file}]{tail}");
    }
    at.to_owned()
}

/// `max_tokens: ${MAX_TOKENS}`: a key that takes a number or a boolean, written with a
/// `${VAR}` (which makes it a string).
fn only_strings(key: &str, message: &str) -> String {
    let leaf = key.rsplit(['.', ']']).next().unwrap_or_default();
    let expected = message.rsplit("expected ").next().unwrap_or_default();
    let takes = if expected.contains("boolean") {
        "`true` or `false`".to_owned()
    } else if [
        "u8", "u16", "u32", "u64", "usize", "i32", "i64", "f64", "integer", "number",
    ]
    .iter()
    .any(|n| expected.contains(n))
    {
        "a number".to_owned()
    } else {
        expected.to_owned()
    };
    format!("only string values take `${{VAR}}`; `{leaf}` takes {takes}, written in the file")
}

/// serde's message for a bad value, with the fix for the common slips: a duration
/// written as a bare number, `yes` for a boolean, an enumerated value misspelt (`did
/// you mean`). Any other message is returned as it was.
fn with_fix(key: &str, message: String) -> String {
    let leaf = key.rsplit(['.', ']']).next().unwrap_or_default();
    if DURATION_KEYS.contains(&leaf)
        && let Some(rest) = message
            .strip_prefix("invalid type: integer `")
            .or_else(|| message.strip_prefix("invalid type: floating point `"))
        && let Some((number, _)) = rest.split_once('`')
    {
        return format!("`{number}` is a number; write a duration with its unit, like `{number}s`");
    }
    if let Some(rest) = message.strip_prefix("unknown value `")
        && let Some((unknown, rest)) = rest.split_once('`')
    {
        let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
        // vLLM, SGLang and LM Studio serve the OpenAI API: the kind is the API, not the server.
        if leaf == "kind" && expected.contains(&"openai_chat") {
            let server = unknown.to_ascii_lowercase();
            if ["vllm", "sglang", "lmstudio", "lm-studio", "localai"].contains(&server.as_str()) {
                return format!(
                    "unknown value `{unknown}`; did you mean `openai_chat`? ({unknown} serves the OpenAI API: `openai_chat` for /v1/chat/completions, `openai_completions` for /v1/completions)"
                );
            }
        }
        if leaf == "kind"
            && let Some(hint) = receiver_kind_hint(unknown, &expected)
        {
            return format!("unknown value `{unknown}`; {hint}");
        }
        if let Some(s) = closest(unknown, &expected) {
            return format!("unknown value `{unknown}`; did you mean `{s}`?");
        }
    }
    if let Some(rest) = message.strip_prefix("invalid type: string \"")
        && let Some((word, expected)) = rest.rsplit_once("\", expected ")
    {
        match expected {
            // YAML 1.1's booleans, which YAML 1.2 (and so this file) reads as strings.
            "a boolean" => return format!("`{word}` is not a boolean; write `true` or `false`"),
            "u16" if key.contains("status") => return format!("`{word}` is not an HTTP status code"),
            "u8" | "u16" | "u32" | "u64" | "usize" => return format!("`{word}` is not a whole number"),
            "f64" => return format!("`{word}` is not a number"),
            _ => {}
        }
    }
    message
}

/// The names people type for a receiver kind, which spelling distance cannot reach
/// (`lark` is nearer `slack` than `feishu`), paired with the kind that serves them.
const RECEIVER_KIND_NAMES: [(&str, &str); 8] = [
    ("lark", "feishu"),
    ("wechat", "wecom"),
    ("weixin", "wecom"),
    ("wework", "wecom"),
    ("dingding", "dingtalk"),
    ("mail", "email"),
    ("smtp", "email"),
    ("e-mail", "email"),
];

/// Platforms with no receiver of their own, and what reaches them instead.
const RECEIVER_KINDS_NOT_SUPPORTED: [(&str, &str); 2] =
    [("teams", "Microsoft Teams"), ("msteams", "Microsoft Teams")];

/// For an unknown receiver `kind:` (told from a probe's by `expected`): the kind
/// meant, when the name is another one for it, or what to use for a platform with no
/// receiver. Only kinds in `expected` are named, so a hint never points at a kind this
/// build does not have.
fn receiver_kind_hint(unknown: &str, expected: &[&str]) -> Option<String> {
    if !expected.contains(&"webhook") {
        return None;
    }
    let typed = unknown.to_ascii_lowercase().replace(['-', '_', ' '], "");
    if let Some((_, kind)) = RECEIVER_KIND_NAMES
        .iter()
        .find(|(name, kind)| *name == typed && expected.contains(kind))
    {
        return Some(format!("did you mean `{kind}`?"));
    }
    let (_, platform) = RECEIVER_KINDS_NOT_SUPPORTED
        .iter()
        .find(|(name, _)| *name == typed)?;
    Some(format!(
        "{platform} is not supported; `webhook` posts one JSON object per notification (docs/alerting.md), for a relay or workflow that posts to it"
    ))
}

/// One problem in a config file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub probe: Option<String>,
    /// The key's path, e.g. `probes[2].expect.status`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if let Some(probe) = &self.probe {
            write!(f, "probe \"{probe}\": ")?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The file as a whole could not be read: no line or column to point at (0:0).
    pub fn unreadable(path: &Path, message: String) -> ConfigErrors {
        ConfigErrors(vec![ConfigError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            probe: None,
            key: String::new(),
            message,
        }])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// The keys a serde shape reads, in the order it declares them (its field names, as
/// renamed): asked of the shape itself, so a list of keys is never written twice.
pub(crate) fn field_names<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Error, Visitor};

    /// A deserializer that answers nothing and notes the fields it is asked for.
    struct Names<'n>(&'n mut &'static [&'static str]);

    impl<'de> serde::Deserializer<'de> for Names<'_> {
        type Error = serde::de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(Error::custom("the names are all that is wanted"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    let mut names: &'static [&'static str] = &[];
    let _ = T::deserialize(Names(&mut names));
    names
}
