//! WeCom (企业微信) group robots: `POST .../cgi-bin/webhook/send?key=K`. Wire facts, from
//! WeCom's group robot documentation:
//!
//! - the key in the URL is the credential (no signing); the URL is a secret.
//! - markdown: `{"msgtype":"markdown","markdown":{"content":"..."}}`, at most 4096 bytes
//!   of UTF-8; markdown messages mention nobody. Mentions need `text`:
//!   `{"msgtype":"text","text":{"content","mentioned_mobile_list":[..,"@all"]}}`.
//! - the answer is HTTP 200 whatever happened: `{"errcode":0,"errmsg":"ok"}` on success,
//!   45009 when throttled (20 messages a minute), 93000 for an invalid key.
//!
//! So a critical page that fires and names people to wake goes as `text` (plain, with
//! the mentions); every other page as markdown.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Verdict, chat};
use crate::alert::Notification;
use crate::config::{Diagnostics, OwnKeys, ReceiverKeys};

/// The keys only a wecom receiver takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// wecom: mobile numbers to mention (@) on critical pages (sent as a text message,
    /// the only kind WeCom mentions in).
    #[serde(default)]
    at_mobiles: Vec<String>,
    /// wecom: mention everyone in the group (@all) on critical pages.
    #[serde(default)]
    at_all: bool,
}

impl OwnKeys for Keys {}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub at_mobiles: Vec<String>,
    pub at_all: bool,
}

pub(crate) fn check(cx: &mut Diagnostics, keys: ReceiverKeys<'_, Keys>) -> Option<Spec> {
    let before = cx.error_count();
    chat::check_robot_keys(cx, &keys, None, None, &keys.own.at_mobiles);
    (cx.error_count() == before).then(|| Spec {
        at_mobiles: keys.own.at_mobiles.clone(),
        at_all: keys.own.at_all,
    })
}

/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "WeCom got one message; nothing expires it, `--resolve` sends the resolved one.";

/// WeCom's cap on a message's content, in bytes.
const MAX_CONTENT_BYTES: usize = 4096;

pub(super) fn request(url: &str, spec: &Spec, n: &Notification) -> (String, Value) {
    (url.to_owned(), body(spec, n))
}

pub fn body(spec: &Spec, n: &Notification) -> Value {
    let mut mentioned: Vec<&str> = spec.at_mobiles.iter().map(String::as_str).collect();
    if spec.at_all {
        mentioned.push("@all");
    }
    if chat::wakes(n) && !mentioned.is_empty() {
        let a = &n.alert;
        let content = format!(
            "{}\n{} · {}\n{}\n{}",
            chat::title(n),
            a.severity.as_str(),
            a.location,
            a.description,
            a.api_url
        );
        return json!({
            "msgtype": "text",
            "text": {
                "content": chat::cut_bytes(&content, MAX_CONTENT_BYTES),
                "mentioned_mobile_list": mentioned,
            },
        });
    }
    json!({
        "msgtype": "markdown",
        "markdown": {"content": chat::cut_bytes(&chat::markdown(n, true), MAX_CONTENT_BYTES)},
    })
}

/// The robot's word is its `errcode`, inside an HTTP 200.
pub(super) fn verdict(status: u16, body: &str) -> Verdict {
    match chat::code(status, body, "errcode") {
        Err(verdict) => verdict,
        Ok(0) => Verdict::Accepted,
        Ok(45009) => Verdict::Retry {
            at_least: Some(chat::THROTTLED_FOR),
        },
        Ok(93000) => Verdict::Rejected {
            hint: Some("the key in `url` is not a working robot's (invalid webhook key)"),
        },
        Ok(_) => Verdict::Rejected { hint: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_errcode_inside_a_200_decides() {
        assert_eq!(verdict(200, r#"{"errcode":0,"errmsg":"ok"}"#), Verdict::Accepted);
        assert!(matches!(
            verdict(200, r#"{"errcode":45009,"errmsg":"api freq out of limit"}"#),
            Verdict::Retry { at_least: Some(_) }
        ));
        for refused in [
            r#"{"errcode":93000,"errmsg":"invalid webhook url"}"#,
            r#"{"errcode":40008,"errmsg":"invalid message type"}"#,
            "<html>",
        ] {
            assert!(
                matches!(verdict(200, refused), Verdict::Rejected { .. }),
                "{refused}"
            );
        }
    }
}
