//! Notices: what the receivers are told that is not a page. The only one is a change of
//! the served model (issue 28): an event to know of, at severity `info`, never an
//! incident. It rides the same outbox and formats as a page, told apart by its event
//! ([`AlertEvent::Notice`]) and condition ([`Condition::ModelChange`]), so every
//! receiver's file decides in one place what a notice becomes there (PagerDuty a change
//! event, Alertmanager nothing: it holds alerts, and this is none).

use std::time::SystemTime;

use super::words::host_of;
use super::{Alert, AlertEvent, Condition, Notification};
use crate::config::Severity;
use crate::outcome::ProbeIdentity;
use crate::unix_time::unix_ms;

/// Where the words of a model change come from: the probe's run and the agent.
pub struct ChangeSite<'a> {
    pub probe: &'a ProbeIdentity,
    pub location: &'a str,
    /// How people reach this agent (`http://host:9464`).
    pub api_base: &'a str,
}

/// The notice that `site`'s probe now answers with the model `after` (its summary), not
/// `before`, since `at` (the first run that showed it). Its id is unique per change, so
/// a receiver that deduplicates drops only a repeat of the same one.
pub fn model_change_notice(
    site: &ChangeSite,
    at: SystemTime,
    before: &str,
    after: &str,
    receivers: Vec<String>,
) -> Notification {
    let p = site.probe;
    let location = site.location;
    let api_base = site.api_base.trim_end_matches('/');
    let dedup_key = format!("inferprobe/{}/{location}/model", p.name);
    let description = format!(
        "The model serving {probe} from {location} changed.\nBefore: {before}\nAfter: {after}\n\
         A notice, not a failure: the runs go on and nothing pages.\nDetails: {api_base}/probes/{probe}",
        probe = p.name,
    );
    let alert = Alert {
        condition: Condition::ModelChange,
        severity: Severity::Info,
        dedup_key: dedup_key.clone(),
        probe: p.name.to_string(),
        location: location.to_owned(),
        kind: p.kind.to_owned(),
        model: p.model.clone(),
        endpoint: p.endpoint.clone(),
        host: host_of(&p.endpoint),
        labels: p.labels.clone(),
        summary: format!("model changed on {} ({location}): {before} → {after}", p.name),
        description,
        reason: "model_changed".into(),
        last_status: None,
        last_error: None,
        trace_id: None,
        since: at,
        fired_at: at,
        resolved_at: None,
        bad_runs: 0,
        last_good: None,
        runbook_url: None,
        api_url: format!("{api_base}/api/v1/probes/{}", p.name),
    };
    Notification {
        id: format!("{dedup_key}/changed/{}", unix_ms(at)),
        event: AlertEvent::Notice,
        alert,
        receivers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_model_change_is_an_info_notice_naming_both_models() {
        let probe = ProbeIdentity {
            name: Arc::from("chat"),
            kind: "openai_chat",
            model: "tiny-llama".into(),
            location: Arc::from("eu"),
            labels: vec![("team".into(), "ml".into())],
            endpoint: "http://llm.example.com:8080/v1/chat/completions".into(),
            query: String::new(),
            full_metrics: false,
        };
        let site = ChangeSite {
            probe: &probe,
            location: "eu",
            api_base: "http://agent:9464/",
        };
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let n = model_change_notice(
            &site,
            at,
            "tiny-llama (Q8_0)",
            "tiny-llama-v2",
            vec!["chat".into()],
        );
        assert_eq!(n.event, AlertEvent::Notice);
        assert_eq!(n.alert.severity, Severity::Info);
        assert_eq!(n.alert.condition.alertname(), "InferenceModelChanged");
        assert_eq!(
            n.alert.summary,
            "model changed on chat (eu): tiny-llama (Q8_0) → tiny-llama-v2"
        );
        assert_eq!(n.id, "inferprobe/chat/eu/model/changed/1800000000000");
        assert_eq!(n.alert.host, "llm.example.com");
        assert!(
            n.alert
                .description
                .ends_with("Details: http://agent:9464/probes/chat"),
            "{}",
            n.alert.description
        );
        let json = serde_json::to_value(&n).unwrap();
        assert_eq!(json["event"], "notice");
        assert_eq!(json["alert"]["condition"], "model_change");
    }
}
