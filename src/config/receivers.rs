//! `receivers:`: where pages go. The keys every receiver has are read here; what a kind
//! of receiver takes of its own is its file's in notify/ (through notify/kinds.rs).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_yaml::Value;

use super::diagnostics::{Diagnostics, field_names};
use super::formats::{Duration as DurationText, Name};
use super::own_keys::split_own_keys;
use super::values::{Secret, duration, existing_file, secret_headers, secret_url, valid_label_value};
use crate::calendar::Calendar;
use crate::notify::kinds::{self as notify, ReceiverKind, ReceiverSpec};
use crate::time_zone::TimeZone;

pub const DEFAULT_RECEIVER_TIMEOUT: Duration = Duration::from_secs(10);

/// Retries back off up to this; a receiver that is down for an hour gets a try every
/// five minutes, and the page goes out within five minutes of its return.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(300);

/// A page that could not be delivered for a day is dropped (and counted): by then it
/// tells nobody anything they can act on.
pub const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(24 * 3600);

/// One validated receiver. The URL is a secret (a Slack webhook URL is its own key);
/// `host` is what may be shown. For e-mail, the URL is the SMTP server's (`smtps://`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverConfig {
    pub name: String,
    pub kind: ReceiverKind,
    pub url: Secret,
    pub host: String,
    pub headers: Vec<(http::HeaderName, Secret)>,
    pub timeout: Duration,
    pub max_backoff: Duration,
    pub give_up_after: Duration,
    pub ca_file: Option<PathBuf>,
    /// What the kind's own keys became (its file in notify/).
    pub spec: ReceiverSpec,
    /// `digest:`: what is routed here is held and sent as one message on this schedule
    /// (a daily digest) rather than as it happens.
    pub digest: Option<Calendar>,
}

/// The keys every receiver has, checked, as a receiver kind's check sees them.
#[derive(Clone, Copy)]
pub(crate) struct ReceiverCommon<'a> {
    pub kind: ReceiverKind,
    /// `receivers[3]`: where its keys are in the file.
    pub prefix: &'a str,
    /// The `url` as written, for a kind that reads it itself (e-mail's `smtp://`).
    pub url: Option<&'a str>,
}

/// A receiver's keys as its kind's check receives them: what every receiver has
/// ([`ReceiverCommon`]) and the kind's own keys `K` (the `Keys` of `notify/<kind>.rs`).
pub(crate) struct ReceiverKeys<'a, K> {
    pub common: ReceiverCommon<'a>,
    pub own: K,
}

impl<K> ReceiverKeys<'_, K> {
    /// The path of the receiver's key `name`, for a message about it.
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.common.prefix)
    }

    /// An error about the receiver's key `name`.
    pub(crate) fn error(&self, cx: &mut Diagnostics, name: &str, message: impl Into<String>) {
        cx.error(None, &self.key(name), message);
    }

    /// The receiver's key `name`, a duration, checked; `default` when it is not set.
    pub(crate) fn duration(
        &self,
        cx: &mut Diagnostics,
        name: &str,
        value: Option<&str>,
        default: Duration,
    ) -> Option<Duration> {
        match value {
            Some(s) => duration(cx, None, &self.key(name), s),
            None => Some(default),
        }
    }
}

impl RawReceiver {
    /// The keys every receiver has, whatever its kind: the others are its kind's.
    fn keys() -> &'static [&'static str] {
        field_names::<RawReceiver>()
    }
}

/// Where pages go: Alertmanager, PagerDuty, Slack or any webhook.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Receiver")]
pub(super) struct RawReceiver {
    /// Unique name, for `alert.receivers`: 1-64 letters, digits, `_`, `-` or `.`.
    #[schemars(with = "Name")]
    name: String,
    /// The API it speaks.
    // Read before the rest, by `Diagnostics::read_kind`; here for serde and the schema.
    #[allow(dead_code)]
    kind: ReceiverKind,
    /// Where to send: Alertmanager's base URL, the Slack or webhook URL (required unless
    /// the kind has its own, as pagerduty). A secret: never shown; e.g.
    /// "${SLACK_WEBHOOK_URL}".
    url: Option<String>,
    /// Headers sent with each page, e.g. Authorization. Values are secrets.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Per attempt (default 10s).
    #[schemars(with = "Option<DurationText>")]
    timeout: Option<String>,
    /// Retries back off up to this (default 5m).
    #[schemars(with = "Option<DurationText>")]
    max_backoff: Option<String>,
    /// A page not delivered by then is dropped and counted (default 24h).
    #[schemars(with = "Option<DurationText>")]
    give_up_after: Option<String>,
    /// A PEM file of extra CA certificates to trust, relative to this file.
    ca_file: Option<String>,
    /// Hold what is routed here and send it as one message on a schedule (a daily
    /// digest: what fired, resolved and is still open, with links), for e-mail, the
    /// chat robots, Slack and webhooks.
    digest: Option<RawDigest>,
}

/// When a digest receiver sends.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Digest")]
struct RawDigest {
    /// Cron: 5 fields (`0 9 * * *`: every day at 09:00) or 6 with seconds first.
    schedule: String,
    /// The zone the schedule is read in (default agent.timezone).
    timezone: Option<String>,
}

/// The valid receivers, and the names of all (so that a probe naming a receiver
/// with a problem is not told it does not exist).
pub(super) fn check_receivers(
    cx: &mut Diagnostics,
    value: Option<Value>,
    zone: TimeZone,
) -> (Vec<ReceiverConfig>, Vec<String>) {
    let items = match value {
        None | Some(Value::Null) => return (Vec::new(), Vec::new()),
        Some(Value::Sequence(items)) => items,
        Some(_) => {
            cx.error(None, "receivers", "must be a list of receivers");
            return (Vec::new(), Vec::new());
        }
    };
    let mut names: Vec<String> = Vec::new();
    for name in items.iter().filter_map(|v| v.get("name").and_then(Value::as_str)) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, mut value) in items.into_iter().enumerate() {
        let prefix = format!("receivers[{i}]");
        // Before the rest: a receiver whose other keys are refused still has its name.
        if let Some(name) = value.get("name").and_then(Value::as_str)
            && let Some(first) = seen.insert(name.to_owned(), i)
        {
            cx.error(
                None,
                &format!("{prefix}.name"),
                format!("duplicate receiver name; receivers[{first}] has it already"),
            );
        }
        let kind = cx.read_kind::<ReceiverKind>(&mut value, &prefix, None, "webhook");
        // The kind's own keys out first: what is left is the keys every receiver has.
        let own = split_own_keys(cx, &mut value, RawReceiver::keys(), &prefix, None, kind);
        let Some(raw) = cx.section::<RawReceiver>(value, &prefix, None) else {
            continue;
        };
        if let Some(r) = receiver(cx, raw, kind, own, &prefix, zone) {
            out.push(r);
        }
    }
    (out, names)
}

/// One receiver; `kind` from [`Diagnostics::read_kind`]: for a kind that is not known,
/// only the keys every kind has are checked. `own` is what [`split_own_keys`] set aside
/// for the kind.
fn receiver(
    cx: &mut Diagnostics,
    raw: RawReceiver,
    kind: Option<ReceiverKind>,
    own: Value,
    prefix: &str,
    zone: TimeZone,
) -> Option<ReceiverConfig> {
    let before = cx.error_count();
    let key = |k: &str| format!("{prefix}.{k}");
    if !valid_label_value(&raw.name) {
        cx.error(
            None,
            &key("name"),
            "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
        );
    }
    let url_text = match (&raw.url, kind) {
        (Some(u), _) => Some(u.clone()),
        (None, None) => None,
        (None, Some(kind)) => match kind.default_url() {
            Some(url) => Some(url.to_owned()),
            None => {
                cx.error(
                    None,
                    &key("url"),
                    format!("a receiver of kind {} needs a `url`", kind.as_str()),
                );
                None
            }
        },
    };
    // Never echo the URL in a message: a Slack webhook URL is a secret. A kind that
    // does not speak HTTP reads its own `url` (in its check, below).
    let speaks_http = kind.is_none_or(ReceiverKind::speaks_http);
    let url = url_text
        .as_deref()
        .filter(|_| speaks_http)
        .and_then(|t| secret_url(cx, &key("url"), t));
    let common = |kind| ReceiverCommon {
        kind,
        prefix,
        url: url_text.as_deref(),
    };
    let spec = kind.and_then(|kind| notify::check_spec(cx, common(kind), own));
    let headers = secret_headers(cx, None, &key("headers"), &raw.headers);
    let mut duration = |k: &str, raw: &Option<String>, default: Duration| match raw {
        Some(s) => duration(cx, None, &key(k), s),
        None => Some(default),
    };
    let timeout = duration("timeout", &raw.timeout, DEFAULT_RECEIVER_TIMEOUT);
    let max_backoff = duration("max_backoff", &raw.max_backoff, DEFAULT_MAX_BACKOFF);
    let give_up_after = duration("give_up_after", &raw.give_up_after, DEFAULT_GIVE_UP_AFTER);
    let ca_file = raw
        .ca_file
        .and_then(|f| existing_file(cx, None, &key("ca_file"), &f));
    let digest = raw.digest.and_then(|d| digest(cx, prefix, kind, d, zone));
    if cx.error_count() > before {
        return None;
    }
    let spec = spec?;
    let (url, host) = match (&url, spec.host()) {
        (Some(url), _) => (url.to_string(), url.host().unwrap_or_default().to_owned()),
        (None, Some(host)) => (url_text?, host.to_owned()),
        (None, None) => return None,
    };
    Some(ReceiverConfig {
        name: raw.name,
        kind: kind?,
        host,
        url: Secret::new(url),
        headers,
        timeout: timeout?,
        max_backoff: max_backoff?,
        give_up_after: give_up_after?,
        ca_file,
        spec,
        digest,
    })
}

/// `digest:` on a receiver that takes documents, its schedule read in its zone.
fn digest(
    cx: &mut Diagnostics,
    prefix: &str,
    kind: Option<ReceiverKind>,
    raw: RawDigest,
    zone: TimeZone,
) -> Option<Calendar> {
    if let Some(kind) = kind.filter(|k| !k.takes_documents()) {
        cx.error(
            None,
            &format!("{prefix}.digest"),
            format!(
                "a {} receiver takes each alert as it happens, not a digest; put `digest:` on an e-mail, chat robot, Slack or webhook receiver",
                kind.as_str()
            ),
        );
        return None;
    }
    let zone = match raw.timezone.as_deref().map(TimeZone::parse) {
        Some(Ok(tz)) => tz,
        Some(Err(e)) => {
            cx.error(None, &format!("{prefix}.digest.timezone"), e.to_string());
            return None;
        }
        None => zone,
    };
    match Calendar::parse(&raw.schedule, zone) {
        Ok(c) => Some(c),
        Err(message) => {
            cx.error(None, &format!("{prefix}.digest.schedule"), message);
            None
        }
    }
}
