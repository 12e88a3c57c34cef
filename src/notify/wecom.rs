//! WeCom (企业微信) group robots: `POST .../cgi-bin/webhook/send?key=K`. Wire facts, from
//! WeCom's group robot documentation:
//!
//! - the key in the URL is the credential (no signing); the URL is a secret.
//! - markdown: `{"msgtype":"markdown","markdown":{"content":"..."}}`, at most 4096 bytes
//!   of UTF-8; markdown messages mention nobody. Mentions need `text`:
//!   `{"msgtype":"text","text":{"content","mentioned_mobile_list":[..,"@all"]}}`, whose
//!   content is at most 2048 bytes.
//! - the answer is HTTP 200 whatever happened: `{"errcode":0,"errmsg":"ok"}` on success,
//!   45009 when throttled (20 messages a minute), 93000 for an invalid key.
//!
//! So a critical page that fires and names people to wake goes as `text` (plain, with
//! the mentions); every other page as markdown.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Verdict;
use super::chat::{self, Message};
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
    /// wecom: the most messages sent to this robot in any minute (2 to 100; default 20,
    /// WeCom's own limit); when more alerts change, they are merged into fewer messages,
    /// each naming every alert.
    max_per_minute: Option<u32>,
}

impl OwnKeys for Keys {}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub at_mobiles: Vec<String>,
    pub at_all: bool,
    pub max_per_minute: u32,
}

pub(crate) fn check(cx: &mut Diagnostics, keys: ReceiverKeys<'_, Keys>) -> Option<Spec> {
    let before = cx.error_count();
    chat::check_robot_keys(cx, &keys, None, None, &keys.own.at_mobiles);
    let max_per_minute = chat::max_per_minute(cx, &keys, keys.own.max_per_minute);
    (cx.error_count() == before).then(|| Spec {
        at_mobiles: keys.own.at_mobiles.clone(),
        at_all: keys.own.at_all,
        max_per_minute,
    })
}

/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "WeCom got one message; nothing expires it, `--resolve` sends the resolved one.";

/// WeCom's cap on a markdown message's content, in bytes.
pub(super) const MAX_CONTENT_BYTES: usize = 4096;

/// WeCom's cap on a text message's content (the kind that mentions), in bytes.
pub(super) const MAX_TEXT_BYTES: usize = 2048;

impl Spec {
    /// Whether a page that wakes people goes as text (WeCom mentions only there), and
    /// so must fit [`MAX_TEXT_BYTES`].
    pub(super) fn mentions(&self) -> bool {
        self.at_all || !self.at_mobiles.is_empty()
    }
}

pub(super) fn request(url: &str, spec: &Spec, message: &Message) -> (String, Value) {
    (url.to_owned(), message_body(spec, message))
}

/// One page's message body (the tests' view of what a page looks like).
#[cfg(test)]
pub fn body(spec: &Spec, n: &crate::alert::Notification) -> Value {
    message_body(spec, &Message::page(n))
}

fn message_body(spec: &Spec, m: &Message) -> Value {
    let mut mentioned: Vec<&str> = spec.at_mobiles.iter().map(String::as_str).collect();
    if spec.at_all {
        mentioned.push("@all");
    }
    if m.wakes && !mentioned.is_empty() {
        let content = format!("{}\n{}", m.title, m.plain);
        return json!({
            "msgtype": "text",
            "text": {
                "content": chat::cut_bytes(&content, MAX_TEXT_BYTES),
                "mentioned_mobile_list": mentioned,
            },
        });
    }
    let content = format!("### {}\n\n{}", m.heading, m.markdown);
    json!({
        "msgtype": "markdown",
        "markdown": {"content": chat::cut_bytes(&content, MAX_CONTENT_BYTES)},
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
