//! The paging parts of `probes.yaml`: the top-level `receivers:` list, and per probe (or
//! under `defaults`) `alert:` rules and `slo:` targets. Validated like the rest of the
//! file, every problem with its position.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::diagnostics::Diagnostics;
use super::formats::{Duration as DurationText, documented_enum};
use super::positions::suggest;
use super::url::{UrlError, parse_url};
use super::values::duration;

pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
pub const DEFAULT_SUCCESS_THRESHOLD: u32 = 2;
/// Runs in the SLO window: at 30 s, the last 10 minutes.
pub const DEFAULT_SLO_WINDOW: u32 = 20;
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
#[schemars(transform = documented_enum)]
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
    /// Receiver names of the down alert (at `severity`): `alert.receivers`, else what the
    /// file's `routes:` give that severity, else every receiver.
    pub down_receivers: Vec<String>,
    /// Receiver names of the degraded alert (at `slo_severity`), chosen the same way: the
    /// two alerts of one probe may go to different receivers.
    pub degraded_receivers: Vec<String>,
    pub rate_limited: RateLimited,
    /// Whether a change of the served model is told (`alert.model_changes`, default
    /// true): a notice at severity info, never a page.
    pub model_changes: bool,
    /// Receiver names of that notice, chosen as the alerts' are, for severity `info`;
    /// empty when `model_changes` is false.
    pub model_change_receivers: Vec<String>,
    /// Whether runs in the endpoint's warm-up window (after a restart or a model
    /// change: probe/lane.rs) are kept out of paging (`alert.warmup_grace`, default
    /// false): a server that is loading is not paged about until the window ends.
    pub warmup_grace: bool,
}

impl AlertConfig {
    /// The probe's alerts that can fire, each with its severity and receivers: the down
    /// alert, and the degraded one unless nothing can raise it (no latency target, and a
    /// 429 counts as down).
    pub fn pages(&self, slo: &Slo) -> Vec<(&'static str, Severity, &[String])> {
        let mut out = vec![("down", self.severity, self.down_receivers.as_slice())];
        let degraded_fires = slo.ttft_p95.is_some()
            || slo.total_p95.is_some()
            || slo.burst_spread_pct.is_some()
            || self.rate_limited == RateLimited::Throttled;
        if degraded_fires {
            out.push(("degraded", self.slo_severity, self.degraded_receivers.as_slice()));
        }
        out
    }
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
    /// Burst probes: the largest spread of one burst's first-token times (standard
    /// deviation over mean, in percent) before the degraded alert counts the run bad.
    pub burst_spread_pct: Option<u32>,
}

impl Slo {
    /// The availability objective as a fraction (0.999).
    pub fn availability(&self) -> Option<f64> {
        self.availability_bp.map(|bp| f64::from(bp) / 10_000.0)
    }
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
    /// The receivers both of the probe's alerts page, by name; `[]` pages nobody. Wins
    /// over `routes:` (default: what the routes give each alert, else every receiver).
    receivers: Option<Vec<String>>,
    /// What an HTTP 429 means: `throttled` (the degraded alert; the default) or `down`.
    rate_limited: Option<RateLimited>,
    /// Tell the receivers when the served model changes: a notice at severity `info`
    /// (routed as `info`), never a page (default true).
    model_changes: Option<bool>,
    /// Hold paging while the endpoint warms up after a restart or a model change (its
    /// `warmup` window): its runs are recorded but neither page nor resolve (default
    /// false).
    warmup_grace: Option<bool>,
}

impl RawAlert {
    /// Whether `receivers` is set: a list that wins over the file's `routes:`.
    pub(super) fn lists_receivers(&self) -> bool {
        self.receivers.is_some()
    }

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
            model_changes: self.model_changes.or(d.model_changes),
            warmup_grace: self.warmup_grace.or(d.warmup_grace),
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
    /// Burst probes: the largest spread of a burst's first-token times, in percent of
    /// their mean (standard deviation / mean; e.g. 50). A burst spread wider counts
    /// toward the degraded alert.
    #[schemars(range(min = 1.0, max = 1000.0))]
    burst_spread: Option<f64>,
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
            burst_spread: self.burst_spread.or(d.burst_spread),
        }
    }
}

/// A probe's alert rules; `receivers` are the names defined at the top.
pub(super) fn alert(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    prefix: &str,
    raw: RawAlert,
    receivers: &[String],
) -> Option<AlertConfig> {
    let before = cx.errors.len();
    let key = |k: &str| format!("{prefix}.alert.{k}");
    let mut threshold = |k: &str, v: Option<u32>, default: u32| {
        let v = v.unwrap_or(default);
        if !(1..=100).contains(&v) {
            cx.error(probe, &key(k), "must be between 1 and 100 runs");
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
        let d = duration(cx, probe, &key("reminder"), &s)?;
        if d < Duration::from_secs(60) {
            cx.error(probe, &key("reminder"), "must be at least 1m");
            return None;
        }
        Some(d)
    });
    let severity = raw.severity.unwrap_or(Severity::Critical);
    let slo_severity = raw.slo_severity.unwrap_or(Severity::Warning);
    if severity == slo_severity {
        cx.error(
            probe,
            &key("severity"),
            format!(
                "must differ from slo_severity ({}): a probe's two alerts are told apart by severity",
                slo_severity.as_str()
            ),
        );
    }
    // A link in pages, shown as written; checked by the one URL parser.
    let runbook_url = raw.runbook_url.filter(|u| match parse_url(u) {
        Ok(_) => true,
        Err(UrlError::Scheme | UrlError::NoScheme) => {
            cx.error(probe, &key("runbook_url"), "must be an http:// or https:// URL");
            false
        }
        Err(e) => {
            cx.error(probe, &key("runbook_url"), e.to_string());
            false
        }
    });
    let chosen = match raw.receivers {
        Some(names) => {
            for (i, name) in names.iter().enumerate() {
                if !receivers.contains(name) {
                    cx.error(
                        probe,
                        &key(&format!("receivers[{i}]")),
                        no_such_receiver(name, receivers),
                    );
                }
            }
            names
        }
        None => receivers.to_vec(),
    };
    if cx.errors.len() > before {
        return None;
    }
    let model_changes = raw.model_changes.unwrap_or(true);
    Some(AlertConfig {
        failure_threshold,
        success_threshold,
        reminder,
        severity,
        slo_severity,
        runbook_url,
        down_receivers: chosen.clone(),
        model_change_receivers: if model_changes { chosen.clone() } else { Vec::new() },
        degraded_receivers: chosen,
        rate_limited: raw.rate_limited.unwrap_or_default(),
        model_changes,
        warmup_grace: raw.warmup_grace.unwrap_or(false),
    })
}

/// What is said of a receiver name that `receivers:` does not define, with the name it
/// most likely meant.
pub(super) fn no_such_receiver(name: &str, receivers: &[String]) -> String {
    match suggest(name, receivers) {
        Some(s) => format!("no receiver named `{name}`; did you mean `{s}`?"),
        None if receivers.is_empty() => {
            format!("no receiver named `{name}`: the file has no `receivers:` list")
        }
        None => format!(
            "no receiver named `{name}`; receivers are {}",
            receivers.join(", ")
        ),
    }
}

/// `defaults.alert`, checked once where it is written (with the file's receivers);
/// what comes back keeps only the keys that pass on their own, so a bad default is
/// not reported again at every probe.
pub(super) fn defaults_alert(cx: &mut Diagnostics, raw: RawAlert, receivers: &[String]) -> RawAlert {
    let unsaid = cx.unsaid;
    if alert(cx, None, "defaults", raw.clone(), receivers).is_some() && cx.unsaid == unsaid {
        return raw;
    }
    let mut passes = |one: RawAlert| {
        cx.passes(|cx| {
            let _ = alert(cx, None, "defaults", one, receivers);
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
        model_changes: raw.model_changes,
        warmup_grace: raw.warmup_grace,
    }
}

/// `defaults.slo`, checked once where it is written; what comes back keeps only the
/// keys that passed, so a bad default is not reported again at every probe.
pub(super) fn defaults_slo(cx: &mut Diagnostics, raw: RawSlo) -> RawSlo {
    let unsaid = cx.unsaid;
    if slo(cx, None, "defaults", raw.clone()).is_some() && cx.unsaid == unsaid {
        return raw;
    }
    let mut passes = |one: RawSlo| {
        cx.passes(|cx| {
            let _ = slo(cx, None, "defaults", one);
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
        burst_spread: raw.burst_spread.filter(|_| {
            passes(RawSlo {
                burst_spread: raw.burst_spread,
                ..RawSlo::default()
            })
        }),
    }
}

pub(super) fn slo(cx: &mut Diagnostics, probe: Option<&str>, prefix: &str, raw: RawSlo) -> Option<Slo> {
    let key = |k: &str| format!("{prefix}.slo.{k}");
    let before = cx.errors.len();
    let window = raw.window.unwrap_or(DEFAULT_SLO_WINDOW);
    if !(5..=10_000).contains(&window) {
        cx.error(probe, &key("window"), "must be between 5 and 10000 runs");
    }
    let ttft_p95 = raw
        .ttft_p95
        .and_then(|s| duration(cx, probe, &key("ttft_p95"), &s));
    let total_p95 = raw
        .total_p95
        .and_then(|s| duration(cx, probe, &key("total_p95"), &s));
    let availability_bp = raw.availability.and_then(|a| {
        if (50.0..=100.0).contains(&a) {
            Some((a * 100.0).round() as u32)
        } else {
            cx.error(
                probe,
                &key("availability"),
                "must be a percentage between 50 and 100, like 99.9",
            );
            None
        }
    });
    let burst_spread_pct = raw.burst_spread.and_then(|b| {
        if (1.0..=1000.0).contains(&b) {
            Some(b.round() as u32)
        } else {
            cx.error(
                probe,
                &key("burst_spread"),
                "must be a percentage between 1 and 1000, like 50",
            );
            None
        }
    });
    (cx.errors.len() == before).then_some(Slo {
        ttft_p95,
        total_p95,
        window,
        availability_bp,
        burst_spread_pct,
    })
}
