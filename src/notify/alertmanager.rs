//! Alertmanager API v2: `POST /api/v2/alerts` with a JSON array of alerts. The label set
//! is the alert's identity (Prometheus conventions: `alertname`, `severity`, then what
//! tells the alert apart); annotations carry the words. A firing alert is sent with
//! `endsAt` four re-send intervals ahead, as Prometheus does, so it expires by itself if
//! this agent dies; resolving is sending `endsAt` = the resolve time.

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};

use crate::alert::{Alert, AlertEvent, Condition, rfc3339};

/// `url` is Alertmanager's base URL; the API path is added unless it is there already.
pub fn alerts_url(url: &str) -> String {
    let base = url.trim_end_matches('/');
    if base.ends_with("/api/v2/alerts") {
        base.to_owned()
    } else {
        format!("{base}/api/v2/alerts")
    }
}

/// `resend` is how often we re-send active alerts: a firing alert ends four of them
/// ahead, so it survives three lost re-sends and expires if the agent dies.
pub fn body(alerts: &[(&Alert, AlertEvent)], now: SystemTime, resend: Duration) -> Value {
    Value::Array(
        alerts
            .iter()
            .map(|(a, event)| one(a, *event, now, resend))
            .collect(),
    )
}

fn one(a: &Alert, event: AlertEvent, now: SystemTime, resend: Duration) -> Value {
    let mut labels = Map::new();
    labels.insert("alertname".into(), a.alertname().into());
    labels.insert("severity".into(), a.severity.as_str().into());
    labels.insert("probe".into(), a.probe.clone().into());
    labels.insert("location".into(), a.location.clone().into());
    if a.condition != Condition::Test {
        labels.insert("kind".into(), a.kind.clone().into());
        if !a.model.is_empty() {
            labels.insert("model".into(), a.model.clone().into());
        }
    }
    for (k, v) in &a.labels {
        labels.entry(k.clone()).or_insert_with(|| v.clone().into());
    }

    let mut annotations = Map::new();
    annotations.insert("summary".into(), a.summary.clone().into());
    annotations.insert("description".into(), a.description.clone().into());
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            annotations.insert(k.into(), v.into());
        }
    };
    put("runbook_url", a.runbook_url.clone());
    put("endpoint", Some(a.endpoint.clone()));
    put("reason", Some(a.reason.clone()));
    put("last_status", a.last_status.map(|s| s.to_string()));
    put("last_error", a.last_error.clone());
    put("trace_id", a.trace_id.clone());
    if a.condition != Condition::Test {
        put("failing_since", Some(rfc3339(a.since)));
    }
    put("dedup_key", Some(a.dedup_key.clone()));

    let ends_at = match (event, a.resolved_at) {
        (AlertEvent::Resolved, Some(t)) => t,
        (AlertEvent::Resolved, None) => now,
        _ => now + 4 * resend,
    };
    json!({
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(a.since),
        "endsAt": rfc3339(ends_at),
        "generatorURL": a.api_url,
    })
}
