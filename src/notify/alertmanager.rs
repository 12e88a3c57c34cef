//! Alertmanager API v2: `POST /api/v2/alerts` with a JSON array of alerts. The label set
//! is the alert's identity (Prometheus conventions: `alertname`, `severity`, then what
//! tells the alert apart); annotations carry the words. A firing alert is sent with
//! `endsAt` four re-send intervals ahead, as Prometheus does, so it expires by itself if
//! this agent dies; resolving is sending `endsAt` = the resolve time.

use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Verdict;
use crate::alert::{Alert, AlertEvent, Condition, Notification, rfc3339};
use crate::config::{Diagnostics, OwnKeys, ReceiverKeys};

/// Alertmanager expects active alerts to be re-sent every 30 s to 3 min; Prometheus
/// uses 1 min, and so do we by default.
pub const DEFAULT_RESEND_INTERVAL: Duration = Duration::from_secs(60);

/// The keys only an alertmanager receiver takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// alertmanager: how often firing alerts are re-sent, at most 5m (default 1m).
    #[schemars(with = "Option<crate::config::formats::Duration>")]
    resend_interval: Option<String>,
}

impl OwnKeys for Keys {}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// How often active alerts are re-sent.
    pub resend_interval: Duration,
}

pub(crate) fn check(cx: &mut Diagnostics, keys: ReceiverKeys<'_, Keys>) -> Option<Spec> {
    let raw = keys.own.resend_interval.as_deref();
    let resend_interval = keys.duration(cx, "resend_interval", raw, DEFAULT_RESEND_INTERVAL)?;
    if resend_interval > Duration::from_secs(300) {
        keys.error(
            cx,
            "resend_interval",
            "must be at most 5m (Alertmanager expects re-sends every 30 s to 3 min)",
        );
        return None;
    }
    Some(Spec { resend_interval })
}

/// One notification: the alert as one element of the API's array.
pub(super) fn request(url: &str, spec: &Spec, n: &Notification, now: SystemTime) -> (String, Value) {
    (
        alerts_url(url),
        body(&[(&n.alert, n.event)], now, spec.resend_interval),
    )
}

/// Alertmanager answers 200 with an empty body; its refusals are 4xx.
pub(super) fn verdict(status: u16, _body: &str) -> Verdict {
    Verdict::by_status(status)
}

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
