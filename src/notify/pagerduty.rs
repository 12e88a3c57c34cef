//! PagerDuty Events API v2: `trigger` on firing (and on reminders: the same `dedup_key`
//! only updates the open incident), `resolve` when it resolves. The dedup key is
//! deterministic (probe, location, severity), so resolving needs no remote state and a
//! repeated trigger never opens a second incident.

use serde_json::{Value, json};

use crate::alert::{AlertEvent, Notification, rfc3339};

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
