//! What each receiver kind makes of a notice (a model change, alert/notice.rs): a
//! short message that wakes nobody, a change event for PagerDuty, a digest's section.

use std::time::{Duration, SystemTime};

use super::chat::Message;
use super::{Document, dingtalk, pagerduty, slack, webhook};
use crate::alert::{AlertEvent, Condition, Notification};
use crate::config::Severity;
use crate::time_zone::TimeZone;

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A notice as alert/notice.rs words it (its own test holds the words; notify may not
/// build a probe's identity to call it).
fn notice() -> Notification {
    let mut n = super::tests::notification(AlertEvent::Notice);
    let a = &mut n.alert;
    a.condition = Condition::ModelChange;
    a.severity = Severity::Info;
    a.summary = "model changed on chat (eu): tiny-llama → tiny-llama-v2 <b>".into();
    a.description =
        "The model serving chat from eu changed.\nBefore: tiny-llama\nAfter: tiny-llama-v2 <b>".into();
    a.dedup_key = "inferprobe/chat/eu/model".into();
    a.location = "eu".into();
    a.fired_at = t0();
    a.since = t0();
    n.id = "inferprobe/chat/eu/model/changed/1800000000000".into();
    n
}

#[test]
fn a_notice_is_a_short_message_that_wakes_nobody() {
    let n = notice();
    let text = slack::body(&n)["text"].as_str().unwrap().to_owned();
    assert!(
        text.starts_with(
            ":information_source: *model changed on chat (eu): tiny-llama → tiny-llama-v2 &lt;b&gt;* (info)\n"
        ),
        "{text}"
    );
    let m = Message::page(&n);
    assert!(
        m.title.starts_with("ℹ️ model changed on chat (eu)"),
        "{}",
        m.title
    );
    assert!(!m.wakes);
    assert!(m.all_clear, "nothing is wrong: not a red card");
    let spec = dingtalk::Spec {
        secret: None,
        keyword: None,
        at_mobiles: vec!["13800000000".into()],
        at_all: true,
        max_per_minute: 20,
    };
    let ding = dingtalk::body(&spec, &n);
    assert_eq!(ding["at"]["isAtAll"], false);
    let hook = webhook::body(&n, t0());
    assert_eq!(hook["event"], "notice");
    assert_eq!(hook["alert"]["alertname"], "InferenceModelChanged");
    // Merged with a page, it is counted apart.
    let page = super::tests::notification(AlertEvent::Firing);
    let (m, taken) = Message::merged(&[page, n], 4000);
    assert_eq!(taken, 2);
    assert!(m.title.ends_with("1 firing, 1 notices"), "{}", m.title);
}

#[test]
fn pagerduty_gets_a_change_event_and_never_an_incident() {
    let n = notice();
    let spec = pagerduty::Spec {
        routing_key: crate::config::Secret::new("rk"),
    };
    let (url, body) = pagerduty::request("https://events.pagerduty.com/v2/enqueue", &spec, &n);
    assert_eq!(url, "https://events.pagerduty.com/v2/change/enqueue");
    assert!(body.get("event_action").is_none(), "{body}");
    assert!(body.get("dedup_key").is_none(), "{body}");
    assert_eq!(body["routing_key"], "rk");
    assert_eq!(body["payload"]["summary"], n.alert.summary);
    assert_eq!(body["payload"]["source"], "llm.example.com");
    assert_eq!(body["payload"]["timestamp"], "2027-01-15T08:00:00Z");
    assert_eq!(
        pagerduty::change_url("http://127.0.0.1:9/v2/enqueue/").as_deref(),
        Some("http://127.0.0.1:9/v2/change/enqueue")
    );
    assert_eq!(pagerduty::change_url("https://proxy.example.com/pd"), None);
}

#[test]
fn a_digest_lists_model_changes_in_their_own_section() {
    let doc = Document::digest(
        "x",
        &[notice()],
        &[],
        t0(),
        t0() + Duration::from_secs(60),
        TimeZone::UTC,
    );
    assert!(
        doc.title.ends_with("0 still open, 1 model changes"),
        "{}",
        doc.title
    );
    assert!(doc.markdown.contains("**Model changes**"), "{}", doc.markdown);
    assert!(doc.html.contains("tiny-llama-v2 &lt;b&gt;"), "{}", doc.html);
    assert!(doc.all_well);
    let quiet = Document::digest("x", &[], &[], t0(), t0(), TimeZone::UTC);
    assert!(!quiet.title.contains("model"), "{}", quiet.title);
}
