//! `report:`: the weekly SLO report sent by itself. Its receivers (people's: e-mail, the
//! chat robots, Slack, webhooks), its period, a link for the robots' short summary, and
//! the agent's own schedule for it (cron in a time zone). `inferprobe report --send`
//! reads the same section, for a timer or a CronJob that sends one fleet report.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_yaml::Value;

use super::diagnostics::Diagnostics;
use super::formats::Duration as DurationText;
use super::positions::suggest;
use super::receivers::ReceiverConfig;
use super::values::duration;
use crate::calendar::Calendar;
use crate::time_zone::TimeZone;

/// A report covers a week unless `period` says.
pub const DEFAULT_REPORT_PERIOD: Duration = Duration::from_secs(7 * 86_400);

/// The weekly SLO report: who gets it, over what period, and when the agent sends it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Report")]
pub(super) struct RawReport {
    /// Receivers that get the report, by name: e-mail gets the HTML report, the chat
    /// robots and Slack a short summary with `link`, a webhook the summary as JSON.
    #[serde(default)]
    pub(super) receivers: Vec<String>,
    /// The period each report covers, ending when it is sent (default 7d).
    #[schemars(with = "Option<DurationText>")]
    period: Option<String>,
    /// Where the full report is read (a published copy, a Grafana dashboard), linked
    /// from the robots' summary.
    link: Option<String>,
    /// When the agent sends it from its own store, as cron: 5 fields (`0 9 * * 1`:
    /// Mondays at 09:00) or 6 with seconds first. Unset: only `report --send` sends it.
    schedule: Option<String>,
    /// The zone `schedule` and the report's times are read in (default agent.timezone).
    timezone: Option<String>,
}

/// `report:`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportConfig {
    pub receivers: Vec<String>,
    pub period: Duration,
    pub link: Option<String>,
    /// The agent's own schedule, in the report's zone.
    pub schedule: Option<Calendar>,
    pub timezone: TimeZone,
}

/// Checks `report:` against the file's receivers (`receivers`, valid; `names`, all);
/// `zone` is agent.timezone, the default.
pub(super) fn check_report(
    cx: &mut Diagnostics,
    value: Value,
    receivers: &[ReceiverConfig],
    names: &[String],
    zone: TimeZone,
) -> Option<ReportConfig> {
    let raw = cx.section::<RawReport>(value, "report", None)?;
    let before = cx.error_count();
    if raw.receivers.is_empty() {
        cx.error(
            None,
            "report.receivers",
            "name at least one receiver to send the report to",
        );
    }
    for (i, name) in raw.receivers.iter().enumerate() {
        let key = format!("report.receivers[{i}]");
        match receivers.iter().find(|r| &r.name == name) {
            Some(r) if !r.kind.takes_documents() => cx.error(
                None,
                &key,
                format!(
                    "`{name}` is a {} receiver, which takes alerts, not reports; send it to e-mail, a chat robot, Slack or a webhook",
                    r.kind.as_str()
                ),
            ),
            Some(_) => {}
            None if names.contains(name) => {}
            None => {
                let message = match suggest(name, names) {
                    Some(s) => format!("no receiver named `{name}`; did you mean `{s}`?"),
                    None => format!("no receiver named `{name}`"),
                };
                cx.error(None, &key, message);
            }
        }
    }
    let period = match &raw.period {
        Some(p) => duration(cx, None, "report.period", p).filter(|d| {
            let ok = *d >= Duration::from_secs(60);
            if !ok {
                cx.error(None, "report.period", "must be at least 1m");
            }
            ok
        }),
        None => Some(DEFAULT_REPORT_PERIOD),
    };
    let timezone = match raw.timezone.as_deref().map(TimeZone::parse) {
        Some(Ok(tz)) => tz,
        Some(Err(e)) => {
            cx.error(None, "report.timezone", e.to_string());
            zone
        }
        None => zone,
    };
    let schedule = raw
        .schedule
        .as_deref()
        .and_then(|expr| match Calendar::parse(expr, timezone) {
            Ok(c) => Some(c),
            Err(message) => {
                cx.error(None, "report.schedule", message);
                None
            }
        });
    if let Some(link) = &raw.link
        && !(link.starts_with("http://") || link.starts_with("https://"))
    {
        cx.error(None, "report.link", "must be an http:// or https:// URL");
    }
    if cx.error_count() > before {
        return None;
    }
    Some(ReportConfig {
        receivers: raw.receivers,
        period: period?,
        link: raw.link,
        schedule,
        timezone,
    })
}
