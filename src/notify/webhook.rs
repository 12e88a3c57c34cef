//! Generic webhooks and Slack incoming webhooks.
//!
//! The webhook body (documented in docs/alerting.md) is one JSON object per notification:
//! `version`, a unique `id` to deduplicate on, the `event` (firing, reminder, resolved),
//! `sent_at`, and the `alert` with every field of the page. Slack gets a `text` message,
//! escaped as Slack asks (`&`, `<`, `>`), so an endpoint's words in it cannot mention
//! `@channel` or hide a link behind text: they are data, never markup.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::alert::{AlertEvent, Notification, rfc3339};

pub fn body(n: &Notification, now: SystemTime) -> Value {
    let a = &n.alert;
    let labels: Map<String, Value> = a
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    json!({
        "version": "1",
        "id": n.id,
        "event": n.event.as_str(),
        "sent_at": rfc3339(now),
        "alert": {
            "alertname": a.alertname(),
            "condition": a.condition,
            "severity": a.severity.as_str(),
            "dedup_key": a.dedup_key,
            "probe": a.probe,
            "location": a.location,
            "kind": a.kind,
            "model": a.model,
            "endpoint": a.endpoint,
            "labels": labels,
            "summary": a.summary,
            "description": a.description,
            "reason": a.reason,
            "last_status": a.last_status,
            "last_error": a.last_error,
            "trace_id": a.trace_id,
            "since": rfc3339(a.since),
            "fired_at": rfc3339(a.fired_at),
            "resolved_at": a.resolved_at.map(rfc3339),
            "bad_runs": a.bad_runs,
            "last_good": a.last_good.as_ref().map(|g| json!({
                "at": rfc3339(g.at),
                "ttft_seconds": g.ttft_seconds,
                "total_seconds": g.total_seconds,
            })),
            "runbook_url": a.runbook_url,
            "api_url": a.api_url,
        },
    })
}

pub fn slack_body(n: &Notification) -> Value {
    let a = &n.alert;
    let mark = match n.event {
        AlertEvent::Firing => ":rotating_light:",
        AlertEvent::Reminder => ":bell: Still firing:",
        AlertEvent::Resolved => ":white_check_mark:",
    };
    let text = format!(
        "{mark} *{}* ({})\n{}",
        slack_escape(&a.summary),
        a.severity.as_str(),
        slack_escape(&a.description)
    );
    json!({ "text": text })
}

/// Slack's control characters in message text: `<!channel>`, `<@U123>` and
/// `<https://x|label>` all need a raw `<`, and `&` would start an entity.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
