//! What a page says: the one-line summaries and the descriptions of a down, degraded or
//! resolved alert, and the times in them. Words only; the decisions are in mod.rs.
//!
//! Times in words are in the agent's zone (agent.timezone), so on-call reads the clock on
//! the wall; the machine-readable times the receivers send beside them (`startsAt`,
//! `timestamp`, the webhook's fields) stay RFC 3339 in UTC, built from the `SystemTime`s.

use std::time::{Duration, SystemTime};

use super::{Alert, Condition, GoodRun, Track};
use crate::human::{seconds, shorten};
use crate::outcome::Outcome;
use crate::time_zone::TimeZone;

/// Error messages in pages are cut here: enough to act on, small enough for any receiver.
const MAX_ERROR_CHARS: usize = 300;

/// Why a firing alert resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// The probe's runs are good again.
    Recovered,
    /// The degraded alert yields to the down alert: one page per probe.
    Superseded,
    /// The probe is no longer in the configuration.
    Removed,
}

impl Ended {
    pub(super) fn why(self, condition: Condition) -> &'static str {
        match (self, condition) {
            (Ended::Recovered, Condition::Degraded) => "Latency is back within its targets.",
            (Ended::Recovered, _) => "The endpoint answers again.",
            (Ended::Superseded, _) => "Superseded by the down alert.",
            (Ended::Removed, _) => "The probe was removed from the configuration.",
        }
    }
}

/// A resolved page's one line says what recovered and how long the trouble lasted: the
/// firing summary ("chat is DOWN ...") would read as if it still were.
pub(super) fn resolved_summary(a: &Alert, ended: Ended, lasted: &str) -> String {
    let (p, loc) = (&a.probe, &a.location);
    let runs = match a.bad_runs {
        1 => "1 failed run".to_owned(),
        n => format!("{n} failed runs"),
    };
    let text = match (ended, a.condition) {
        (Ended::Recovered, Condition::Degraded) => {
            format!("{p} is back within its latency targets from {loc} after {lasted} degraded")
        }
        (Ended::Recovered, _) => format!("{p} is up again from {loc} after {lasted} down ({runs})"),
        (Ended::Superseded, _) => {
            format!("{p} is no longer DEGRADED from {loc}: it is DOWN now (after {lasted} degraded)")
        }
        (Ended::Removed, Condition::Degraded) => {
            format!(
                "{p} is no longer probed from {loc}: removed from the configuration after {lasted} degraded"
            )
        }
        (Ended::Removed, _) => format!(
            "{p} is no longer probed from {loc}: removed from the configuration after {lasted} down ({runs})"
        ),
    };
    format!("RESOLVED: {text}")
}

/// The last run's failure details on a down alert.
pub(super) fn with_failure(mut alert: Alert, outcome: &Outcome) -> Alert {
    let o = &outcome.observation;
    if let Some(f) = o.failure() {
        alert.reason = f.reason.as_str().to_owned();
        alert.last_error = Some(shorten(&f.message, MAX_ERROR_CHARS));
    }
    alert.last_status = o.http_status;
    alert.trace_id = outcome.trace.map(|t| t.trace_id_hex());
    alert
}

pub(super) fn describe_down(
    outcome: &Outcome,
    failure: &crate::outcome::Failure,
    track: &Track,
    since: Option<SystemTime>,
    now: SystemTime,
    zone: TimeZone,
) -> (String, String) {
    let p = &outcome.probe;
    let since = since.or(track.bad_since).unwrap_or(now);
    let lasted = lasted(since, now);
    let what = failure.reason.describe();
    let summary = format!(
        "{} is DOWN from {}: {} ({} failed runs in a row)",
        p.name, p.location, what, track.bad
    );
    let mut d = format!(
        "Users in {} cannot get answers from {}{} at {}.\nWhat fails: {} ({}).\nLast error: {}",
        p.location,
        if p.model.is_empty() {
            "the endpoint"
        } else {
            "model "
        },
        p.model,
        p.endpoint,
        what,
        failure.reason.as_str(),
        shorten(&failure.message, MAX_ERROR_CHARS),
    );
    if let Some(status) = outcome.observation.http_status {
        d.push_str(&format!("\nLast HTTP status: {status}"));
    }
    if let Some(trace) = &outcome.trace {
        d.push_str(&format!(
            "\nTrace id of the last failed run: {}",
            trace.trace_id_hex()
        ));
    }
    d.push_str(&format!(
        "\nFailing since {} ({lasted}, {} runs in a row).",
        clock(zone, since),
        track.bad
    ));
    d.push_str(&format!(
        "\n{}",
        describe_last_good(track.good_before.as_ref(), zone)
    ));
    (summary, d)
}

pub(super) fn describe_degraded(
    outcome: &Outcome,
    what: &str,
    track: &Track,
    since: Option<SystemTime>,
    now: SystemTime,
    zone: TimeZone,
) -> (String, String) {
    let p = &outcome.probe;
    let since = since.or(track.bad_since).unwrap_or(now);
    let lasted = lasted(since, now);
    let summary = format!("{} is DEGRADED from {}: {what}", p.name, p.location);
    let d = format!(
        "Users in {} get answers from {} at {}, but {what}.\nSince {} ({lasted}).\n{}",
        p.location,
        if p.model.is_empty() { &p.endpoint } else { &p.model },
        p.endpoint,
        clock(zone, since),
        describe_last_good(track.good_before.as_ref(), zone),
    );
    (summary, d)
}

/// How long since `since`, in whole seconds, for people ("1m 30s").
pub(super) fn lasted(since: SystemTime, now: SystemTime) -> String {
    humantime::format_duration(Duration::from_secs(
        now.duration_since(since).unwrap_or_default().as_secs(),
    ))
    .to_string()
}

pub(super) fn describe_last_good(good: Option<&GoodRun>, zone: TimeZone) -> String {
    match good {
        Some(g) => format!(
            "Last good run: {}, TTFT {}, total {}.",
            clock(zone, g.at),
            g.ttft_seconds.map(seconds).unwrap_or_else(|| "-".into()),
            g.total_seconds.map(seconds).unwrap_or_else(|| "-".into())
        ),
        None => "No good run seen since this agent started.".to_owned(),
    }
}

pub(super) fn host_of(endpoint: &str) -> String {
    endpoint
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_owned))
        .unwrap_or_default()
}

pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A time in a page's words. In UTC, RFC 3339 as pages always said it; in any other zone
/// the local time with its offset and the zone's name (`2026-12-05 03:08:32 +08:00
/// (Asia/Shanghai)`): the offset lets a reader elsewhere convert, the name says which
/// clock it is when two zones share an offset.
pub(super) fn clock(zone: TimeZone, t: SystemTime) -> String {
    if zone.is_utc() {
        rfc3339(t)
    } else {
        format!("{} ({})", zone.clock_with_offset(t), zone.name())
    }
}

impl Alert {
    /// The alert with a line saying when it was sent, in `zone`: `test-alert`'s page, so
    /// that the operator sees the zone real pages will use before one comes.
    pub fn sent_at(mut self, zone: TimeZone, now: SystemTime) -> Alert {
        self.description
            .push_str(&format!("\nSent at {}.", clock(zone, now)));
        self
    }
}
