//! PagerDuty Events API v2: `trigger` on firing (and on reminders: the same `dedup_key`
//! only updates the open incident), `resolve` when it resolves. The dedup key is
//! deterministic (probe, location, severity), so resolving needs no remote state and a
//! repeated trigger never opens a second incident.
//!
//! A notice (a model change) is no incident: it goes to the Change Events API
//! (`/v2/change/enqueue` beside the events URL), which shows it on the service's
//! timeline and opens nothing.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Verdict;
use crate::alert::{AlertEvent, Notification, rfc3339};
use crate::config::{Diagnostics, OwnKeys, ReceiverKeys, Secret};

/// Where a pagerduty receiver sends when it names no `url`.
pub const EVENTS_URL: &str = "https://events.pagerduty.com/v2/enqueue";

/// The keys only a pagerduty receiver takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// pagerduty: the integration's routing key, e.g. "${PAGERDUTY_ROUTING_KEY}".
    routing_key: Option<String>,
}

impl OwnKeys for Keys {
    const SECRETS: &'static [&'static str] = &["routing_key"];

    fn instead(_key: &str, asking: &str) -> Option<String> {
        Some(format!(", not {asking}"))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The integration's key: a secret.
    pub routing_key: Secret,
}

pub(crate) fn check(cx: &mut Diagnostics, keys: ReceiverKeys<'_, Keys>) -> Option<Spec> {
    match &keys.own.routing_key {
        Some(k) if k.trim().is_empty() => {
            keys.error(cx, "routing_key", "is empty");
            None
        }
        Some(k) => Some(Spec {
            routing_key: Secret::new(k.clone()),
        }),
        None => {
            keys.error(
                cx,
                "routing_key",
                "a pagerduty receiver needs the integration's `routing_key` (e.g. ${PAGERDUTY_ROUTING_KEY})",
            );
            None
        }
    }
}

/// One event: `trigger` or `resolve`, to the receiver's URL.
/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "PagerDuty keeps the incident open until it is resolved (there, or with `--resolve`).";

pub(super) fn request(url: &str, spec: &Spec, n: &Notification) -> (String, Value) {
    if n.event == AlertEvent::Notice
        && let Some(change) = change_url(url)
    {
        return (change, change_body(n, spec.routing_key.expose()));
    }
    (url.to_owned(), body(n, spec.routing_key.expose()))
}

/// The Change Events URL beside an Events API URL (`…/v2/enqueue` becomes
/// `…/v2/change/enqueue`); `None` for a URL that is not one (a proxy of the user's),
/// whose change endpoint we cannot know: that receiver gets no notices.
pub(super) fn change_url(url: &str) -> Option<String> {
    let base = url.trim_end_matches('/').strip_suffix("/v2/enqueue")?;
    Some(format!("{base}/v2/change/enqueue"))
}

/// A change event: summary, source, time and details; no severity, no dedup key,
/// nothing to resolve.
pub fn change_body(n: &Notification, routing_key: &str) -> Value {
    let a = &n.alert;
    json!({
        "routing_key": routing_key,
        "links": [{"href": a.api_url, "text": "inferprobe: this probe's results"}],
        "payload": {
            "summary": crate::human::first_chars(&a.summary, MAX_SUMMARY),
            "source": if a.host.is_empty() { &a.location } else { &a.host },
            "timestamp": rfc3339(a.fired_at),
            "custom_details": {
                "probe": a.probe,
                "location": a.location,
                "model": a.model,
                "endpoint": a.endpoint,
                "description": a.description,
                "event": n.event.as_str(),
                "id": n.id,
            },
        },
    })
}

/// The Events API answers 202 with `{"status": "success"}`; its refusals are 400
/// (invalid event) and 429 (throttled), which the status says.
pub(super) fn verdict(status: u16, _body: &str) -> Verdict {
    Verdict::by_status(status)
}

/// PagerDuty's limit on `payload.summary`.
const MAX_SUMMARY: usize = 1024;

pub fn body(n: &Notification, routing_key: &str) -> Value {
    let a = &n.alert;
    if n.event == AlertEvent::Resolved {
        return json!({
            "routing_key": routing_key,
            "event_action": "resolve",
            "dedup_key": a.dedup_key,
        });
    }
    let summary = crate::human::first_chars(&a.summary, MAX_SUMMARY);
    let mut links = vec![json!({"href": a.api_url, "text": "inferprobe: this probe's results"})];
    if let Some(runbook) = &a.runbook_url {
        links.push(json!({"href": runbook, "text": "Runbook"}));
    }
    json!({
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": a.dedup_key,
        "client": "inferprobe",
        "client_url": a.api_url,
        "links": links,
        "payload": {
            "summary": summary,
            "source": if a.host.is_empty() { &a.location } else { &a.host },
            "severity": a.severity.as_str(),
            "timestamp": rfc3339(a.fired_at),
            "component": a.model,
            "group": a.location,
            "class": a.reason,
            "custom_details": {
                "probe": a.probe,
                "location": a.location,
                "model": a.model,
                "endpoint": a.endpoint,
                "reason": a.reason,
                "last_status": a.last_status,
                "last_error": a.last_error,
                "trace_id": a.trace_id,
                "failing_since": rfc3339(a.since),
                "bad_runs": a.bad_runs,
                "last_good": a.last_good,
                "description": a.description,
                "event": n.event.as_str(),
            },
        },
    })
}
