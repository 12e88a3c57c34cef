//! The values every section takes, checked the same way wherever they are: durations,
//! URLs, headers (whose values are [`Secret`]s), labels, and files named relative to the
//! config. Each check says its problem through [`Diagnostics`] and gives `None` (or
//! leaves the value out) so the caller goes on.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use schemars::json_schema;

use super::diagnostics::Diagnostics;
use super::files;
use super::formats::schema_type;
use super::url::{parse_url, to_uri};

/// Longest interval or timeout: beyond a week a probe is not monitoring anything, and
/// instants that far out risk overflow.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// User labels per probe: each one multiplies every series, so keep few.
const MAX_LABELS: usize = 10;

const MAX_LABEL_VALUE_LEN: usize = 64;

/// Label names the agent sets itself.
pub const RESERVED_LABELS: &[&str] = &[
    "probe",
    "kind",
    "model",
    "location",
    "prompt_bucket",
    "result",
    "reason",
    "phase",
    "le",
    "quantile",
    "job",
    "instance",
    "version",
    "image_bucket",
    "stage",
    "alert",
    "severity",
    "receiver",
    "event",
];

/// A header value, possibly holding a secret: it never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

pub(super) fn duration(cx: &mut Diagnostics, probe: Option<&str>, key: &str, s: &str) -> Option<Duration> {
    let d = any_duration(cx, probe, key, s)?;
    if d > MAX_DURATION {
        cx.error(probe, key, "must be at most 7 days");
        return None;
    }
    Some(d)
}

/// A positive duration of any length: for the few keys whose bound is not the
/// schedule's 7 days (the history's retention, up to 400 days).
pub(super) fn any_duration(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    key: &str,
    s: &str,
) -> Option<Duration> {
    match humantime::parse_duration(s.trim()) {
        Ok(d) if d.is_zero() => {
            cx.error(probe, key, "must be longer than zero");
            None
        }
        Ok(d) => Some(d),
        Err(e) => {
            // humantime lists every unit it knows; keep the first clause.
            let e = e.to_string();
            let e = e.split(", supported").next().unwrap_or_default();
            cx.error(
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
pub(super) fn url(cx: &mut Diagnostics, probe: Option<&str>, key: &str, text: &str) -> Option<http::Uri> {
    match parse_url(text).and_then(|u| to_uri(&u)) {
        Ok(uri) => Some(uri),
        Err(e) => {
            cx.error(probe, key, e.to_string());
            None
        }
    }
}

/// Header names are case-insensitive: `Authorization` and `authorization` in one
/// mapping are the same header, and one would be silently dropped. Reported at the
/// one written second.
pub(super) fn duplicate_headers(
    cx: &mut Diagnostics,
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
        .map(|k| (cx.index().locate_key(&format!("{prefix}.{k}")), k))
        .collect();
    names.sort();
    let mut first: HashMap<String, &String> = HashMap::new();
    for (position, name) in names {
        if let Some(earlier) = first.insert(name.to_ascii_lowercase(), name) {
            first.insert(name.to_ascii_lowercase(), earlier);
            cx.error_at(
                position,
                probe,
                &format!("{prefix}.{name}"),
                format!("`{earlier}` is set too: header names are case-insensitive, so one would be dropped"),
            );
        }
    }
}

/// Header values (after `${VAR}`) as secrets; `prefix` is the `headers` key.
pub(super) fn secret_headers(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    prefix: &str,
    raw: &BTreeMap<String, String>,
) -> Vec<(http::HeaderName, Secret)> {
    duplicate_headers(cx, probe, prefix, raw);
    let mut headers = Vec::new();
    for (name, value) in raw {
        let path = format!("{prefix}.{name}");
        let Ok(header) = http::HeaderName::from_str(&name.to_ascii_lowercase()) else {
            cx.error(probe, &path, "not a valid HTTP header name");
            continue;
        };
        if http::HeaderValue::from_str(value).is_err() {
            // Do not echo the value: it may be a secret.
            cx.error(
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
pub(super) fn existing_file(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    key: &str,
    name: &str,
) -> Option<PathBuf> {
    let path = cx.base_dir.join(name);
    match files::read_regular(&path, files::MAX_CA_FILE_BYTES) {
        Ok(_) => Some(path),
        Err(e) => {
            cx.error(probe, key, file_message(name, &e));
            None
        }
    }
}

/// A URL that may hold a secret (a Slack webhook, credentials): checked, never echoed.
pub(super) fn secret_url(cx: &mut Diagnostics, key: &str, text: &str) -> Option<http::Uri> {
    url(cx, None, key, text)
}

pub(super) fn check_labels(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    prefix: &str,
    labels: &BTreeMap<String, String>,
) {
    if labels.len() > MAX_LABELS {
        cx.error(
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
            cx.error(
                probe,
                &key,
                "a label name is letters, digits and `_`, not starting with a digit or `__`",
            );
        } else if RESERVED_LABELS.contains(&k.as_str()) {
            cx.error(
                probe,
                &key,
                format!("`{k}` is set by inferprobe itself; choose another name"),
            );
        }
        if v.is_empty() || v.len() > MAX_LABEL_VALUE_LEN {
            cx.error(
                probe,
                &key,
                format!("a label value must be 1-{MAX_LABEL_VALUE_LEN} characters"),
            );
        } else if looks_like_identifier(v) {
            cx.error(
                probe,
                &key,
                "the value looks like a unique id; labels must be low-cardinality (a team, a tier, a region)",
            );
        }
    }
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

schema_type!(
    /// `labels`: names Prometheus takes and we do not set ourselves; values are
    /// non-empty (their length is checked after `${VAR}`).
    Labels,
    json_schema!({
        "type": "object",
        "maxProperties": 10,
        "propertyNames": {
            "pattern": "^(?:[A-Za-z][A-Za-z0-9_]*|_(?:[A-Za-z0-9][A-Za-z0-9_]*)?)$",
            "patternErrorMessage": "A label name is letters, digits and `_`, not starting with a digit or `__`.",
            "not": {"enum": RESERVED_LABELS},
        },
        "additionalProperties": {"type": "string", "minLength": 1},
    })
);
