//! Generic webhooks: the body (documented in docs/alerting.md) is one JSON object per
//! notification: `version`, a unique `id` to deduplicate on, the `event` (firing,
//! reminder, resolved, or notice for a model change), `sent_at`, and the `alert` with every field of the page.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use super::Verdict;
use super::document::Document;
use crate::alert::{Notification, rfc3339};
use crate::config::{Diagnostics, NoKeys, ReceiverKeys};

/// A webhook takes no keys of its own.
pub(crate) type Keys = NoKeys;

pub(crate) fn check(_: &mut Diagnostics, _: ReceiverKeys<'_, Keys>) -> Option<()> {
    Some(())
}

/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "Webhooks got one message; nothing expires it, `--resolve` sends the resolved one.";

pub(super) fn request(url: &str, n: &Notification, now: SystemTime) -> (String, Value) {
    (url.to_owned(), body(n, now))
}

/// A digest or a report: `event` is `document`, with its title, text and markdown (the
/// HTML stays for e-mail).
pub(super) fn document_request(url: &str, doc: &Document, now: SystemTime) -> (String, Value) {
    let body = json!({
        "version": "1",
        "event": "document",
        "sent_at": rfc3339(now),
        "document": {"title": doc.title, "text": doc.text, "markdown": doc.markdown},
    });
    (url.to_owned(), body)
}

/// Any endpoint: what it says is its status.
pub(super) fn verdict(status: u16, _body: &str) -> Verdict {
    Verdict::by_status(status)
}

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
