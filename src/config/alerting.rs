//! The paging parts of `probes.yaml`: the top-level `receivers:` list, and per probe (or
//! under `defaults`) `alert:` rules and `slo:` targets. Validated like the rest of the
//! file, every problem with its position.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_yaml::Value;

use super::schema::{Duration as DurationText, Name};
use super::{Checker, Secret, suggest, valid_label_value};

pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
pub const DEFAULT_SUCCESS_THRESHOLD: u32 = 2;
/// Runs in the SLO window: at 30 s, the last 10 minutes.
pub const DEFAULT_SLO_WINDOW: u32 = 20;
pub const DEFAULT_RECEIVER_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries back off up to this; a receiver that is down for an hour gets a try every
/// five minutes, and the page goes out within five minutes of its return.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(300);
/// A page that could not be delivered for a day is dropped (and counted): by then it
/// tells nobody anything they can act on.
pub const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(24 * 3600);
/// Alertmanager expects active alerts to be re-sent every 30 s to 3 min; Prometheus
/// uses 1 min, and so do we by default.
pub const DEFAULT_RESEND_INTERVAL: Duration = Duration::from_secs(60);
pub const PAGERDUTY_EVENTS_URL: &str = "https://events.pagerduty.com/v2/enqueue";

/// Where notifications go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReceiverKind {
    Alertmanager,
    Pagerduty,
    Webhook,
    Slack,
}

impl ReceiverKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiverKind::Alertmanager => "alertmanager",
            ReceiverKind::Pagerduty => "pagerduty",
            ReceiverKind::Webhook => "webhook",
            ReceiverKind::Slack => "slack",
        }
    }
}

/// One validated receiver. The URL is a secret (a Slack webhook URL is its own key);
/// `host` is what may be shown.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverConfig {
    pub name: String,
    pub kind: ReceiverKind,
    pub url: Secret,
    pub host: String,
    /// PagerDuty's integration key.
    pub routing_key: Option<Secret>,
    pub headers: Vec<(http::HeaderName, Secret)>,
    pub timeout: Duration,
    pub max_backoff: Duration,
    pub give_up_after: Duration,
    pub ca_file: Option<PathBuf>,
    /// Alertmanager: how often active alerts are re-sent.
    pub resend_interval: Duration,
}

/// PagerDuty's severities, which Alertmanager routes on too.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, serde::Serialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Error,
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// What a 429 means for the availability alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = super::documented_enum)]
pub enum RateLimited {
    /// The endpoint answers but throttles us: not down; the degraded alert says so.
    #[default]
    Throttled,
    /// Treat a 429 as any other failure.
    Down,
}

/// A probe's alert rules, after `defaults.alert` is merged in.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertConfig {
    /// Consecutive failed runs before the availability alert fires.
    pub failure_threshold: u32,
    /// Consecutive good runs before a firing alert resolves.
    pub success_threshold: u32,
    /// Re-notify while an alert keeps firing.
    pub reminder: Option<Duration>,
    /// Of the availability alert.
    pub severity: Severity,
    /// Of the degraded (SLO or throttled) alert.
    pub slo_severity: Severity,
    pub runbook_url: Option<String>,
    /// Receiver names; all receivers when the file does not say.
    pub receivers: Vec<String>,
    pub rate_limited: RateLimited,
}

/// Latency targets, judged over the last `window` successful runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Slo {
    pub ttft_p95: Option<Duration>,
    pub total_p95: Option<Duration>,
    pub window: u32,
    /// The availability objective in hundredths of a percent (99.9 % = 9990), for the
    /// weekly report; alerts page on failures, not on this.
    pub availability_bp: Option<u32>,
}

impl Slo {
    /// The availability objective as a fraction (0.999).
    pub fn availability(&self) -> Option<f64> {
        self.availability_bp.map(|bp| f64::from(bp) / 10_000.0)
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
    kind: ReceiverKind,
    /// Where to send: Alertmanager's base URL, the Slack or webhook URL (required but
    /// for pagerduty). A secret: never shown; e.g. "${SLACK_WEBHOOK_URL}".
    url: Option<String>,
    /// pagerduty: the integration's routing key, e.g. "${PAGERDUTY_ROUTING_KEY}".
    routing_key: Option<String>,
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
    /// alertmanager: how often firing alerts are re-sent, at most 5m (default 1m).
    #[schemars(with = "Option<DurationText>")]
    resend_interval: Option<String>,
}

/// When a probe pages. Under `defaults`, every probe inherits it key by key.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Alert")]
pub(super) struct RawAlert {
    /// Consecutive failed runs before the down alert fires (default 3).
    #[schemars(range(min = 1, max = 100))]
    failure_threshold: Option<u32>,
    /// Consecutive good runs before a firing alert resolves (default 2).
    #[schemars(range(min = 1, max = 100))]
    success_threshold: Option<u32>,
    /// Re-notify while an alert keeps firing, at least 1m (default: never).
    #[schemars(with = "Option<DurationText>")]
    reminder: Option<String>,
    /// Of the down alert (default critical).
    severity: Option<Severity>,
    /// Of the degraded alert: SLO missed, or throttled (default warning).
    slo_severity: Option<Severity>,
    /// A link put in every page.
    runbook_url: Option<String>,
    /// The receivers to page, by name (default: all).
    receivers: Option<Vec<String>>,
    /// What an HTTP 429 means: `throttled` (the degraded alert; the default) or `down`.
    rate_limited: Option<RateLimited>,
}

impl RawAlert {
    /// The probe's own keys win over the defaults', key by key.
    pub(super) fn over(self, defaults: &RawAlert) -> RawAlert {
        let d = defaults.clone();
        RawAlert {
            failure_threshold: self.failure_threshold.or(d.failure_threshold),
            success_threshold: self.success_threshold.or(d.success_threshold),
            reminder: self.reminder.or(d.reminder),
            severity: self.severity.or(d.severity),
            slo_severity: self.slo_severity.or(d.slo_severity),
            runbook_url: self.runbook_url.or(d.runbook_url),
            receivers: self.receivers.or(d.receivers),
            rate_limited: self.rate_limited.or(d.rate_limited),
        }
    }
}

/// Targets: the degraded alert fires when a p95 over the last `window` good runs is
/// above its target; `availability` is the report's objective.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Slo")]
pub(super) struct RawSlo {
    /// LLM kinds: target for the 95th percentile of time to first token, e.g. 2s.
    #[schemars(with = "Option<DurationText>")]
    ttft_p95: Option<String>,
    /// Target for the 95th percentile of the whole response time, e.g. 10s.
    #[schemars(with = "Option<DurationText>")]
    total_p95: Option<String>,
    /// Good runs the percentiles are taken over (default 20).
    #[schemars(range(min = 5, max = 10_000))]
    window: Option<u32>,
    /// The availability objective in percent, e.g. 99.9, for the report (pages go by
    /// failed runs, not by this).
    #[schemars(range(min = 50.0, max = 100.0))]
    availability: Option<f64>,
}

impl RawSlo {
    /// The probe's own keys win over the defaults', key by key; `llm` is whether the
    /// probe's kind streams tokens: an inherited `ttft_p95` is skipped for the others
    /// (only a probe's own one is an error there).
    pub(super) fn over(self, defaults: &RawSlo, llm: bool) -> RawSlo {
        let mut d = defaults.clone();
        if !llm {
            d.ttft_p95 = None;
        }
        RawSlo {
            ttft_p95: self.ttft_p95.or(d.ttft_p95),
            total_p95: self.total_p95.or(d.total_p95),
            window: self.window.or(d.window),
            availability: self.availability.or(d.availability),
        }
    }
}

impl Checker<'_> {
    /// The valid receivers, and the names of all (so that a probe naming a receiver
    /// with a problem is not told it does not exist).
    pub(super) fn receivers(&mut self, value: Option<Value>) -> (Vec<ReceiverConfig>, Vec<String>) {
        let items = match value {
            None | Some(Value::Null) => return (Vec::new(), Vec::new()),
            Some(Value::Sequence(items)) => items,
            Some(_) => {
                self.error(None, "receivers", "must be a list of receivers");
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
                self.error(
                    None,
                    &format!("{prefix}.name"),
                    format!("duplicate receiver name; receivers[{first}] has it already"),
                );
            }
            let kind_known = self.read_kind::<ReceiverKind>(&mut value, &prefix, None, "webhook");
            let Some(raw) = self.section::<RawReceiver>(value, &prefix, None) else {
                continue;
            };
            if let Some(r) = self.receiver(raw, kind_known, &prefix) {
                out.push(r);
            }
        }
        (out, names)
    }

    /// One receiver; `kind_known` from [`Checker::read_kind`]: for a kind that is not
    /// known, only the keys every kind has are checked.
    fn receiver(&mut self, raw: RawReceiver, kind_known: bool, prefix: &str) -> Option<ReceiverConfig> {
        let before = self.errors.len();
        let kind = kind_known.then_some(raw.kind);
        let key = |k: &str| format!("{prefix}.{k}");
        if !valid_label_value(&raw.name) {
            self.error(
                None,
                &key("name"),
                "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
            );
        }
        let url_text = match (&raw.url, kind) {
            (Some(u), _) => Some(u.clone()),
            (None, None) => None,
            (None, Some(ReceiverKind::Pagerduty)) => Some(PAGERDUTY_EVENTS_URL.to_owned()),
            (None, Some(kind)) => {
                self.error(
                    None,
                    &key("url"),
                    format!("a receiver of kind {} needs a `url`", kind.as_str()),
                );
                None
            }
        };
        // Never echo the URL in a message: a Slack webhook URL is a secret.
        let url = url_text.and_then(|t| self.secret_url(&key("url"), &t));
        let routing_key = match (&raw.routing_key, kind) {
            (_, None) => None,
            (Some(k), Some(ReceiverKind::Pagerduty)) => {
                if k.trim().is_empty() {
                    self.error(None, &key("routing_key"), "is empty");
                    None
                } else {
                    Some(Secret::new(k.clone()))
                }
            }
            (None, Some(ReceiverKind::Pagerduty)) => {
                self.error(
                    None,
                    &key("routing_key"),
                    "a pagerduty receiver needs the integration's `routing_key` (e.g. ${PAGERDUTY_ROUTING_KEY})",
                );
                None
            }
            (Some(_), Some(kind)) => {
                self.error(
                    None,
                    &key("routing_key"),
                    format!("only for kind pagerduty, not {}", kind.as_str()),
                );
                None
            }
            (None, _) => None,
        };
        let headers = self.secret_headers(None, &key("headers"), &raw.headers);
        let mut duration = |k: &str, raw: &Option<String>, default: Duration| match raw {
            Some(s) => self.duration(None, &key(k), s),
            None => Some(default),
        };
        let timeout = duration("timeout", &raw.timeout, DEFAULT_RECEIVER_TIMEOUT);
        let max_backoff = duration("max_backoff", &raw.max_backoff, DEFAULT_MAX_BACKOFF);
        let give_up_after = duration("give_up_after", &raw.give_up_after, DEFAULT_GIVE_UP_AFTER);
        let resend_interval = duration("resend_interval", &raw.resend_interval, DEFAULT_RESEND_INTERVAL);
        if raw.resend_interval.is_some() && kind.is_some_and(|k| k != ReceiverKind::Alertmanager) {
            self.error(None, &key("resend_interval"), "only for kind alertmanager");
        } else if resend_interval.is_some_and(|d| d > Duration::from_secs(300)) {
            self.error(
                None,
                &key("resend_interval"),
                "must be at most 5m (Alertmanager expects re-sends every 30 s to 3 min)",
            );
        }
        let ca_file = raw
            .ca_file
            .and_then(|f| self.existing_file(None, &key("ca_file"), &f));
        if self.errors.len() > before {
            return None;
        }
        let url = url?;
        Some(ReceiverConfig {
            name: raw.name,
            kind: kind?,
            host: url.host().unwrap_or_default().to_owned(),
            url: Secret::new(url.to_string()),
            routing_key,
            headers,
            timeout: timeout?,
            max_backoff: max_backoff?,
            give_up_after: give_up_after?,
            ca_file,
            resend_interval: resend_interval?,
        })
    }

    /// A probe's alert rules; `receivers` are the names defined at the top.
    pub(super) fn alert(
        &mut self,
        probe: Option<&str>,
        prefix: &str,
        raw: RawAlert,
        receivers: &[String],
    ) -> Option<AlertConfig> {
        let before = self.errors.len();
        let key = |k: &str| format!("{prefix}.alert.{k}");
        let mut threshold = |k: &str, v: Option<u32>, default: u32| {
            let v = v.unwrap_or(default);
            if !(1..=100).contains(&v) {
                self.error(probe, &key(k), "must be between 1 and 100 runs");
            }
            v
        };
        let failure_threshold = threshold(
            "failure_threshold",
            raw.failure_threshold,
            DEFAULT_FAILURE_THRESHOLD,
        );
        let success_threshold = threshold(
            "success_threshold",
            raw.success_threshold,
            DEFAULT_SUCCESS_THRESHOLD,
        );
        let reminder = raw.reminder.and_then(|s| {
            let d = self.duration(probe, &key("reminder"), &s)?;
            if d < Duration::from_secs(60) {
                self.error(probe, &key("reminder"), "must be at least 1m");
                return None;
            }
            Some(d)
        });
        let severity = raw.severity.unwrap_or(Severity::Critical);
        let slo_severity = raw.slo_severity.unwrap_or(Severity::Warning);
        if severity == slo_severity {
            self.error(
                probe,
                &key("severity"),
                format!(
                    "must differ from slo_severity ({}): a probe's two alerts are told apart by severity",
                    slo_severity.as_str()
                ),
            );
        }
        // A link in pages, shown as written; checked by the one URL parser.
        let runbook_url = raw.runbook_url.filter(|u| match super::parse_url(u) {
            Ok(_) => true,
            Err(super::UrlError::Scheme | super::UrlError::NoScheme) => {
                self.error(probe, &key("runbook_url"), "must be an http:// or https:// URL");
                false
            }
            Err(e) => {
                self.error(probe, &key("runbook_url"), e.to_string());
                false
            }
        });
        let chosen = match raw.receivers {
            Some(names) => {
                for (i, name) in names.iter().enumerate() {
                    if !receivers.contains(name) {
                        let message = match suggest(name, receivers) {
                            Some(s) => format!("no receiver named `{name}`; did you mean `{s}`?"),
                            None if receivers.is_empty() => {
                                format!("no receiver named `{name}`: the file has no `receivers:` list")
                            }
                            None => format!(
                                "no receiver named `{name}`; receivers are {}",
                                receivers.join(", ")
                            ),
                        };
                        self.error(probe, &key(&format!("receivers[{i}]")), message);
                    }
                }
                names
            }
            None => receivers.to_vec(),
        };
        if self.errors.len() > before {
            return None;
        }
        Some(AlertConfig {
            failure_threshold,
            success_threshold,
            reminder,
            severity,
            slo_severity,
            runbook_url,
            receivers: chosen,
            rate_limited: raw.rate_limited.unwrap_or_default(),
        })
    }

    /// `defaults.alert`, checked once where it is written (with the file's receivers);
    /// what comes back keeps only the keys that pass on their own, so a bad default is
    /// not reported again at every probe.
    pub(super) fn defaults_alert(&mut self, raw: RawAlert, receivers: &[String]) -> RawAlert {
        let unsaid = self.unsaid;
        if self.alert(None, "defaults", raw.clone(), receivers).is_some() && self.unsaid == unsaid {
            return raw;
        }
        let mut passes = |one: RawAlert| {
            self.passes(|cx| {
                let _ = cx.alert(None, "defaults", one, receivers);
            })
        };
        let none = RawAlert::default;
        RawAlert {
            failure_threshold: raw.failure_threshold.filter(|_| {
                passes(RawAlert {
                    failure_threshold: raw.failure_threshold,
                    ..none()
                })
            }),
            success_threshold: raw.success_threshold.filter(|_| {
                passes(RawAlert {
                    success_threshold: raw.success_threshold,
                    ..none()
                })
            }),
            reminder: raw.reminder.clone().filter(|_| {
                passes(RawAlert {
                    reminder: raw.reminder.clone(),
                    ..none()
                })
            }),
            // The two severities are checked together: they must differ.
            severity: raw.severity.filter(|_| {
                passes(RawAlert {
                    severity: raw.severity,
                    slo_severity: raw.slo_severity,
                    ..none()
                })
            }),
            slo_severity: raw.slo_severity.filter(|_| {
                passes(RawAlert {
                    severity: raw.severity,
                    slo_severity: raw.slo_severity,
                    ..none()
                })
            }),
            runbook_url: raw.runbook_url.clone().filter(|_| {
                passes(RawAlert {
                    runbook_url: raw.runbook_url.clone(),
                    ..none()
                })
            }),
            receivers: raw.receivers.clone().filter(|_| {
                passes(RawAlert {
                    receivers: raw.receivers.clone(),
                    ..none()
                })
            }),
            rate_limited: raw.rate_limited,
        }
    }

    /// `defaults.slo`, checked once where it is written; what comes back keeps only the
    /// keys that passed, so a bad default is not reported again at every probe.
    pub(super) fn defaults_slo(&mut self, raw: RawSlo) -> RawSlo {
        let unsaid = self.unsaid;
        if self.slo(None, "defaults", raw.clone()).is_some() && self.unsaid == unsaid {
            return raw;
        }
        let mut passes = |one: RawSlo| {
            self.passes(|cx| {
                let _ = cx.slo(None, "defaults", one);
            })
        };
        RawSlo {
            ttft_p95: raw.ttft_p95.clone().filter(|_| {
                passes(RawSlo {
                    ttft_p95: raw.ttft_p95.clone(),
                    ..RawSlo::default()
                })
            }),
            total_p95: raw.total_p95.clone().filter(|_| {
                passes(RawSlo {
                    total_p95: raw.total_p95.clone(),
                    ..RawSlo::default()
                })
            }),
            window: raw.window.filter(|_| {
                passes(RawSlo {
                    window: raw.window,
                    ..RawSlo::default()
                })
            }),
            availability: raw.availability.filter(|_| {
                passes(RawSlo {
                    availability: raw.availability,
                    ..RawSlo::default()
                })
            }),
        }
    }

    pub(super) fn slo(&mut self, probe: Option<&str>, prefix: &str, raw: RawSlo) -> Option<Slo> {
        let key = |k: &str| format!("{prefix}.slo.{k}");
        let before = self.errors.len();
        let window = raw.window.unwrap_or(DEFAULT_SLO_WINDOW);
        if !(5..=10_000).contains(&window) {
            self.error(probe, &key("window"), "must be between 5 and 10000 runs");
        }
        let ttft_p95 = raw
            .ttft_p95
            .and_then(|s| self.duration(probe, &key("ttft_p95"), &s));
        let total_p95 = raw
            .total_p95
            .and_then(|s| self.duration(probe, &key("total_p95"), &s));
        let availability_bp = raw.availability.and_then(|a| {
            if (50.0..=100.0).contains(&a) {
                Some((a * 100.0).round() as u32)
            } else {
                self.error(
                    probe,
                    &key("availability"),
                    "must be a percentage between 50 and 100, like 99.9",
                );
                None
            }
        });
        (self.errors.len() == before).then_some(Slo {
            ttft_p95,
            total_p95,
            window,
            availability_bp,
        })
    }
}
