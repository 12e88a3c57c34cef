//! The [`Checker`]: where every problem of one file is collected, positioned (through
//! [`PositionIndex`]) and labelled with its probe and key. Also the checks of the
//! sections that are not probes (the root, `agent`, `defaults`) and the helpers every
//! check uses: durations, URLs, headers, labels, files. A section is read past its
//! problems ([`Checker::section`]), and a key whose problem is said is settled: nothing
//! more is said about it. The per-probe checks are in probe.rs, content.rs and the
//! kinds' own files; `${VAR}` is substituted before any of them (env.rs).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde_yaml::Value;

use super::alerting::{RawAlert, RawSlo};
use super::cost::InheritedCost;
use super::positions::{
    PositionIndex, closest, join_path, key_parent, node_mut, parse_unknown_field, remove_key, remove_node,
    strip_location, suggest,
};
use super::raw::{MetricsDetail, RawAgent, RawBudget, RawDefaults, RawHistory, RawProbe};
use super::{
    AgentConfig, Config, ConfigError, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_TOKENS, HistoryConfig, Kind,
    MAX_DURATION, MAX_LABEL_VALUE_LEN, MAX_LABELS, MAX_RESPONSE_BYTES, RESERVED_LABELS, Secret, files,
    parse_url, to_uri,
};

// ---------------------------------------------------------------------------------------
// Validation.

pub(crate) struct Checker<'a> {
    pub(super) file: String,
    pub(super) base_dir: PathBuf,
    pub(super) text: &'a str,
    /// Built on the first error only: a valid 10,000-probe file never pays for it.
    pub(super) index: Option<PositionIndex>,
    pub(super) errors: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigError>,
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    /// The values `env` gave to secret-bearing keys, for [`Config::secrets`].
    pub(super) substituted: Vec<String>,
    /// Key paths whose value held a `${VAR}` (for "only string values take `${VAR}`").
    pub(super) templated: HashSet<String>,
    /// Key paths whose problem is already said (an unset variable, a value of the wrong
    /// type, a missing key): nothing more is said about them or what is under them, so
    /// that one mistake is one message while the rest of the file is still checked.
    pub(super) settled: HashSet<String>,
    /// Lists one of whose items was refused: what is said about the list as a whole
    /// (empty, too short) follows from that and is not said again.
    pub(super) settled_lists: HashSet<String>,
    /// Problems not said because their key was settled: a value with one is no better
    /// for it (see [`Checker::passes`]).
    pub(super) unsaid: usize,
    /// Sections equal between probes, held once.
    pub(super) sections: super::sharing::Sections,
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

/// Per-probe values inherited from `defaults:`.
pub(super) struct Defaults {
    pub(super) interval: Option<Duration>,
    pub(super) timeout: Option<Duration>,
    pub(super) first_token_timeout: Option<Duration>,
    pub(super) headers: BTreeMap<String, String>,
    pub(super) max_tokens: u32,
    pub(super) reuse_connections: bool,
    pub(super) max_response_bytes: u64,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) alert: RawAlert,
    pub(super) slo: RawSlo,
    pub(super) metrics: Option<MetricsDetail>,
    pub(super) cost: Option<InheritedCost>,
    pub(super) budget: Option<RawBudget>,
    pub(super) trace: super::tracing::RawTrace,
}

impl Checker<'_> {
    pub(super) fn index(&mut self) -> &PositionIndex {
        let text = self.text;
        self.index.get_or_insert_with(|| PositionIndex::build(text))
    }

    /// Whether `check` finds no problem, keeping none of its messages: how a bad value
    /// under `defaults`, reported once there, is left out of what the probes inherit.
    pub(super) fn passes(&mut self, check: impl FnOnce(&mut Self)) -> bool {
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

    /// Whether what is wrong with `key` was said already (see [`Checker::settled`]).
    pub(super) fn is_settled(&self, key: &str) -> bool {
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
    pub(super) fn warn(&mut self, probe: Option<&str>, key: &str, message: impl Into<String>) {
        let position = self.index().locate(key);
        let warning = self.problem(position, probe, key, message.into());
        self.warnings.push(warning);
    }

    pub(super) fn error_at(
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

    pub(super) fn problem(
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
    pub(super) fn section<T: serde::de::DeserializeOwned>(
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

    /// Whether the `kind` of a probe or a receiver is known, read before the rest of it:
    /// an unknown or missing kind is reported, and replaced in `value` by `stand_in`, so
    /// that the section reads and the keys every kind has are still checked (the caller
    /// then does not use the raw kind).
    pub(super) fn read_kind<K: serde::de::DeserializeOwned>(
        &mut self,
        value: &mut Value,
        prefix: &str,
        probe: Option<&str>,
        stand_in: &str,
    ) -> bool {
        let Value::Mapping(map) = value else {
            return false;
        };
        let key = format!("{prefix}.kind");
        match map.get("kind") {
            None => self.error(probe, prefix, "missing key `kind`"),
            Some(v) => match serde_yaml::from_value::<K>(v.clone()) {
                Ok(_) => return true,
                Err(e) => {
                    let message = strip_location(&e.to_string()).replace("unknown variant", "unknown value");
                    let message = with_fix(&key, message);
                    self.error(probe, &key, message);
                }
            },
        }
        self.settled.insert(key);
        map.insert("kind".into(), stand_in.into());
        false
    }

    pub(super) fn check_root(&mut self, mut root: Value) -> Option<Config> {
        self.substitute_all(&mut root);
        let Value::Mapping(map) = root else {
            self.error(
                None,
                "",
                "the file must be a mapping with `agent`, `defaults` and `probes`",
            );
            return None;
        };
        let mut agent = Value::Null;
        let mut defaults = Value::Null;
        let mut receivers = None;
        let mut probes = None;
        for (k, v) in map {
            match k.as_str() {
                Some("agent") => agent = v,
                Some("defaults") => defaults = v,
                Some("receivers") => receivers = Some(v),
                Some("probes") => probes = Some(v),
                Some(other) => {
                    const TOP: [&str; 4] = ["agent", "defaults", "receivers", "probes"];
                    let message = match suggest(other, &TOP) {
                        Some(s) => format!("unknown key `{other}`; did you mean `{s}`?"),
                        None => format!("unknown key `{other}`; expected one of {}", TOP.join(", ")),
                    };
                    let position = self.index().locate_key(other);
                    self.error_at(position, None, other, message);
                }
                None => self.error(None, "", "top-level keys must be strings"),
            }
        }
        let agent = self.check_agent(agent);
        let mut defaults = self.check_defaults(defaults);
        // `agent.metrics` is agent-wide: what probes get when `defaults` does not say.
        if let (Some(d), Some(a)) = (defaults.as_mut(), agent.as_ref()) {
            d.metrics = d.metrics.or(Some(a.metrics));
        }
        let (receivers, receiver_names) = self.receivers(receivers);
        if let Some(d) = defaults.as_mut() {
            d.alert = self.defaults_alert(std::mem::take(&mut d.alert), &receiver_names);
        }
        let probes = match probes {
            Some(Value::Sequence(items)) if !items.is_empty() => items,
            Some(Value::Sequence(_)) | None => {
                self.error(None, "probes", "at least one probe is needed");
                Vec::new()
            }
            Some(_) => {
                self.error(None, "probes", "must be a list of probes");
                Vec::new()
            }
        };
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::new();
        for (i, mut value) in probes.into_iter().enumerate() {
            let prefix = format!("probes[{i}]");
            // The name, when there is one, labels every message about this probe.
            let name = value.get("name").and_then(Value::as_str).map(str::to_owned);
            if let Some(name) = &name
                && let Some(first) = seen.insert(name.clone(), i)
            {
                self.error(
                    Some(name),
                    &format!("{prefix}.name"),
                    format!("duplicate name; probes[{first}] has it already"),
                );
            }
            let kind_known = self.read_kind::<Kind>(&mut value, &prefix, name.as_deref(), "http");
            let Some(raw) = self.section::<RawProbe>(value, &prefix, name.as_deref()) else {
                continue;
            };
            // Checked even after a problem in the section (the file is refused anyway,
            // and the key that had it is settled), so that every problem shows in one pass.
            if let Some(p) = self.check_probe(raw, kind_known, &prefix, defaults.as_ref(), &receiver_names) {
                out.push(Arc::new(p));
            }
        }
        Some(Config {
            agent: agent?,
            receivers,
            probes: out,
            other_shards: Vec::new(),
            warnings: Vec::new(),
            secrets: Vec::new(),
        })
    }

    pub(super) fn check_agent(&mut self, value: Value) -> Option<AgentConfig> {
        if value.is_null() {
            return Some(AgentConfig {
                location: None,
                listen: None,
                data_dir: None,
                external_url: None,
                remote_write: None,
                history: HistoryConfig::default(),
                metrics: MetricsDetail::default(),
                tracing: None,
            });
        }
        let raw: RawAgent = self.section(value, "agent", None)?;
        // Values after `${VAR}` (one file for every region: `external_url:
        // "${EXTERNAL_URL}"`): the checks see the value the agent will use.
        let RawAgent {
            location,
            listen,
            data_dir,
            external_url,
            ..
        } = raw;
        let location = location.filter(|l| {
            let ok = valid_label_value(l);
            if !ok {
                self.error(
                    None,
                    "agent.location",
                    "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
                );
            }
            ok
        });
        let listen = listen.and_then(|l| match l.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.error(
                    None,
                    "agent.listen",
                    format!("`{l}` is not an address like 127.0.0.1:9464"),
                );
                None
            }
        });
        let data_dir = data_dir.map(|d| self.base_dir.join(d));
        // Links in pages: the URL as written (no secret), checked by the one parser.
        let external_url = external_url.filter(|u| match parse_url(u) {
            Ok(_) => true,
            Err(e) => {
                self.error(
                    None,
                    "agent.external_url",
                    format!("`{u}` {e}; give a URL like http://probe-eu.example.com:9464"),
                );
                false
            }
        });
        let remote_write = raw.remote_write.and_then(|r| self.remote_write(r));
        let history = self.history(raw.history.unwrap_or_default());
        Some(AgentConfig {
            location,
            listen,
            remote_write,
            history,
            data_dir,
            external_url: external_url.map(|u| u.trim_end_matches('/').to_owned()),
            metrics: raw.metrics.and_then(|m| m.detail).unwrap_or_default(),
            tracing: raw.tracing.and_then(|t| self.tracing(t)),
        })
    }

    pub(super) fn history(&mut self, raw: RawHistory) -> HistoryConfig {
        let mut history = HistoryConfig::default();
        if let Some(r) = raw.retention
            && let Some(d) = self.any_duration(None, "agent.history.retention", &r)
        {
            if (Duration::from_secs(3600)..=Duration::from_secs(400 * 86_400)).contains(&d) {
                history.retention = d;
            } else {
                self.error(None, "agent.history.retention", "must be between 1h and 400d");
            }
        }
        if let Some(mb) = raw.max_disk_mb {
            if (16..=1_000_000).contains(&mb) {
                history.max_disk_bytes = mb << 20;
            } else {
                self.error(
                    None,
                    "agent.history.max_disk_mb",
                    "must be between 16 and 1000000 (MiB)",
                );
            }
        }
        history
    }

    pub(super) fn check_defaults(&mut self, value: Value) -> Option<Defaults> {
        let raw: RawDefaults = if value.is_null() {
            RawDefaults::default()
        } else {
            self.section(value, "defaults", None)?
        };
        self.duplicate_headers(None, "defaults.headers", &raw.headers);
        // Values every probe inherits are checked here, once, at their `defaults` line;
        // a bad one is reported there and not handed down.
        let max_tokens = match raw.max_tokens {
            Some(m) if !(1..=1_000_000).contains(&m) => {
                self.error(None, "defaults.max_tokens", "must be between 1 and 1000000");
                DEFAULT_MAX_TOKENS
            }
            m => m.unwrap_or(DEFAULT_MAX_TOKENS),
        };
        let max_response_bytes = match raw.max_response_bytes {
            Some(b) if !(1024..=MAX_RESPONSE_BYTES).contains(&b) => {
                self.error(
                    None,
                    "defaults.max_response_bytes",
                    "must be between 1024 and 1073741824 (1 GiB)",
                );
                DEFAULT_MAX_RESPONSE_BYTES
            }
            b => b.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
        };
        // Headers too: a bad name or value is said once, not once per probe.
        let mut headers = raw.headers;
        headers.retain(|name, value| {
            let path = format!("defaults.headers.{name}");
            if self.is_settled(&path) {
                return false;
            }
            if http::HeaderName::from_str(&name.to_ascii_lowercase()).is_err() {
                self.error(None, &path, "not a valid HTTP header name");
                return false;
            }
            if http::HeaderValue::from_str(value).is_err() {
                // Do not echo the value: it may be a secret.
                self.error(
                    None,
                    &path,
                    "the value (after ${VAR} substitution) is not a valid HTTP header value",
                );
                return false;
            }
            true
        });
        self.labels(None, "defaults", &raw.labels);
        let mut labels = raw.labels;
        labels.retain(|k, v| {
            let one = BTreeMap::from([(k.clone(), v.clone())]);
            self.passes(|cx| cx.labels(None, "defaults", &one))
        });
        let slo = self.defaults_slo(raw.slo.unwrap_or_default());
        let cost = raw.cost.map(|c| self.defaults_cost(c));
        let budget = raw.budget.map(|b| self.defaults_budget(Some(b)));
        let trace = self.defaults_trace(raw.trace.unwrap_or_default(), &headers);
        Some(Defaults {
            interval: raw
                .interval
                .and_then(|s| self.duration(None, "defaults.interval", &s)),
            timeout: raw
                .timeout
                .and_then(|s| self.duration(None, "defaults.timeout", &s)),
            first_token_timeout: raw
                .first_token_timeout
                .and_then(|s| self.duration(None, "defaults.first_token_timeout", &s)),
            headers,
            max_tokens,
            reuse_connections: raw.reuse_connections.unwrap_or(false),
            max_response_bytes,
            labels,
            alert: raw.alert.unwrap_or_default(),
            slo,
            metrics: raw.metrics.and_then(|m| m.detail),
            cost,
            budget,
            trace,
        })
    }

    pub(super) fn duration(&mut self, probe: Option<&str>, key: &str, s: &str) -> Option<Duration> {
        let d = self.any_duration(probe, key, s)?;
        if d > MAX_DURATION {
            self.error(probe, key, "must be at most 7 days");
            return None;
        }
        Some(d)
    }

    /// A positive duration of any length: for the few keys whose bound is not the
    /// schedule's 7 days (the history's retention, up to 400 days).
    pub(super) fn any_duration(&mut self, probe: Option<&str>, key: &str, s: &str) -> Option<Duration> {
        match humantime::parse_duration(s.trim()) {
            Ok(d) if d.is_zero() => {
                self.error(probe, key, "must be longer than zero");
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                // humantime lists every unit it knows; keep the first clause.
                let e = e.to_string();
                let e = e.split(", supported").next().unwrap_or_default();
                self.error(
                    probe,
                    key,
                    format!("`{s}` is not a duration like 30s, 1m30s or 500ms ({e})"),
                );
                None
            }
        }
    }

    /// A URL to dial (after `${VAR}`), through the one strict parser ([`parse_url`]).
    /// Messages never echo it: it may hold a secret.
    pub(super) fn url(&mut self, probe: Option<&str>, key: &str, text: &str) -> Option<http::Uri> {
        match parse_url(text).and_then(|u| to_uri(&u)) {
            Ok(uri) => Some(uri),
            Err(e) => {
                self.error(probe, key, e.to_string());
                None
            }
        }
    }

    /// Header names are case-insensitive: `Authorization` and `authorization` in one
    /// mapping are the same header, and one would be silently dropped. Reported at the
    /// one written second.
    pub(super) fn duplicate_headers(
        &mut self,
        probe: Option<&str>,
        prefix: &str,
        raw: &BTreeMap<String, String>,
    ) {
        let mut lower: Vec<(String, &String)> = raw.keys().map(|k| (k.to_ascii_lowercase(), k)).collect();
        lower.sort();
        if lower.windows(2).all(|w| w[0].0 != w[1].0) {
            return;
        }
        // Positions only now: a file without the problem never builds the index.
        let mut names: Vec<((usize, usize), &String)> = raw
            .keys()
            .map(|k| (self.index().locate_key(&format!("{prefix}.{k}")), k))
            .collect();
        names.sort();
        let mut first: HashMap<String, &String> = HashMap::new();
        for (position, name) in names {
            if let Some(earlier) = first.insert(name.to_ascii_lowercase(), name) {
                first.insert(name.to_ascii_lowercase(), earlier);
                self.error_at(
                    position,
                    probe,
                    &format!("{prefix}.{name}"),
                    format!(
                        "`{earlier}` is set too: header names are case-insensitive, so one would be dropped"
                    ),
                );
            }
        }
    }

    /// Header values (after `${VAR}`) as secrets; `prefix` is the `headers` key.
    pub(super) fn secret_headers(
        &mut self,
        probe: Option<&str>,
        prefix: &str,
        raw: &BTreeMap<String, String>,
    ) -> Vec<(http::HeaderName, Secret)> {
        self.duplicate_headers(probe, prefix, raw);
        let mut headers = Vec::new();
        for (name, value) in raw {
            let path = format!("{prefix}.{name}");
            let Ok(header) = http::HeaderName::from_str(&name.to_ascii_lowercase()) else {
                self.error(probe, &path, "not a valid HTTP header name");
                continue;
            };
            if http::HeaderValue::from_str(value).is_err() {
                // Do not echo the value: it may be a secret.
                self.error(
                    probe,
                    &path,
                    "the value (after ${VAR} substitution) is not a valid HTTP header value",
                );
                continue;
            }
            headers.push((header, Secret::new(value.clone())));
        }
        headers
    }

    /// A CA file named relative to the config file: a regular file of at most
    /// [`files::MAX_CA_FILE_BYTES`], read once here so that `check` finds what the
    /// client would fail on.
    pub(super) fn existing_file(&mut self, probe: Option<&str>, key: &str, name: &str) -> Option<PathBuf> {
        let path = self.base_dir.join(name);
        match files::read_regular(&path, files::MAX_CA_FILE_BYTES) {
            Ok(_) => Some(path),
            Err(e) => {
                self.error(probe, key, file_message(name, &e));
                None
            }
        }
    }

    /// A URL that may hold a secret (a Slack webhook, credentials): checked, never echoed.
    pub(super) fn secret_url(&mut self, key: &str, text: &str) -> Option<http::Uri> {
        self.url(None, key, text)
    }

    pub(super) fn labels(&mut self, probe: Option<&str>, prefix: &str, labels: &BTreeMap<String, String>) {
        if labels.len() > MAX_LABELS {
            self.error(
                probe,
                &format!("{prefix}.labels"),
                format!(
                    "{} labels; at most {MAX_LABELS} (each one multiplies every series)",
                    labels.len()
                ),
            );
        }
        for (k, v) in labels {
            let key = format!("{prefix}.labels.{k}");
            let valid_name = k
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !k.starts_with("__");
            if !valid_name {
                self.error(
                    probe,
                    &key,
                    "a label name is letters, digits and `_`, not starting with a digit or `__`",
                );
            } else if RESERVED_LABELS.contains(&k.as_str()) {
                self.error(
                    probe,
                    &key,
                    format!("`{k}` is set by inferprobe itself; choose another name"),
                );
            }
            if v.is_empty() || v.len() > MAX_LABEL_VALUE_LEN {
                self.error(
                    probe,
                    &key,
                    format!("a label value must be 1-{MAX_LABEL_VALUE_LEN} characters"),
                );
            } else if looks_like_identifier(v) {
                self.error(
                    probe,
                    &key,
                    "the value looks like a unique id; labels must be low-cardinality (a team, a tier, a region)",
                );
            }
        }
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
pub(super) fn with_fix(key: &str, message: String) -> String {
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

/// Why a named file cannot be used, naming it as the config does.
pub(super) fn file_message(name: &str, e: &files::FileError) -> String {
    match e {
        files::FileError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            format!("no such file: `{name}` (relative to this file)")
        }
        files::FileError::Io(io) => format!("cannot read `{name}` (relative to this file): {io}"),
        other => format!("`{name}` {other}"),
    }
}

/// Names and locations become label values: keep them short and plain.
/// A label value we accept from people: names, locations.
pub fn valid_label_value(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL_VALUE_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// UUIDs, long hex or long digit strings: values that are almost always unique per
/// request or user, and so explode series counts.
pub(super) fn looks_like_identifier(v: &str) -> bool {
    let hexish = v.chars().filter(|c| c.is_ascii_hexdigit() || *c == '-').count() == v.len();
    let digits = v.chars().filter(char::is_ascii_digit).count();
    (hexish && v.len() >= 16 && digits >= 4) || (digits >= 10 && digits * 2 > v.len())
}

pub(super) fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
