//! Feishu (飞书, Lark) custom bots: `POST .../open-apis/bot/v2/hook/H` with a card.
//! Wire facts, from Feishu's custom bot documentation:
//!
//! - body: `{"msg_type":"interactive","card":{...}}`, at most 20 KB; a card's `markdown`
//!   element takes `<at id=all></at>` to mention everyone.
//! - signing (optional, the bot's "签名校验" setting): `"timestamp"` (Unix seconds, as a
//!   string) and `"sign"` in the body, `sign = base64(HMAC-SHA256(key = "TS\nsecret",
//!   data = ""))`: the key and data are the other way round from DingTalk's, and a
//!   signature made DingTalk's way is refused (19021).
//! - the answer: `{"code":0,"msg":"success"}` on success (older bots answer
//!   `{"StatusCode":0}`), 11232 when throttled (100 a minute, 5 a second), 19021 bad
//!   signature, 19022 IP not allowed, 19024 keyword missing, 9499 bad request.

use std::time::SystemTime;

use base64::Engine as _;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Verdict;
use super::chat::{self, Message};
use crate::config::{Diagnostics, OwnKeys, ReceiverKeys, Secret};

/// The keys only a feishu receiver takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// feishu: the bot's signing secret, when its security setting is "签名校验"
    /// (signature); e.g. "${FEISHU_SECRET}". A secret: never shown.
    secret: Option<String>,
    /// feishu: the bot's custom keyword, when its security setting is "自定义关键词";
    /// put in every message, or the bot refuses it (19024).
    keyword: Option<String>,
    /// feishu: mention everyone in the group (@all) on critical pages.
    #[serde(default)]
    at_all: bool,
    /// feishu: the most messages sent to this bot in any minute (2 to 100; default 20;
    /// Feishu's own limit is 100 a minute and 5 a second); when more alerts change, they
    /// are merged into fewer messages, each naming every alert.
    max_per_minute: Option<u32>,
}

impl OwnKeys for Keys {
    const SECRETS: &'static [&'static str] = &["secret"];
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub secret: Option<Secret>,
    pub keyword: Option<String>,
    pub at_all: bool,
    pub max_per_minute: u32,
}

pub(crate) fn check(cx: &mut Diagnostics, keys: ReceiverKeys<'_, Keys>) -> Option<Spec> {
    let before = cx.error_count();
    let own = &keys.own;
    chat::check_robot_keys(cx, &keys, own.secret.as_deref(), own.keyword.as_deref(), &[]);
    let max_per_minute = chat::max_per_minute(cx, &keys, own.max_per_minute);
    (cx.error_count() == before).then(|| Spec {
        secret: own.secret.clone().map(Secret::new),
        keyword: own.keyword.clone(),
        at_all: own.at_all,
        max_per_minute,
    })
}

/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "Feishu got one card; nothing expires it, `--resolve` sends the resolved one.";

/// The card's text, in bytes: Feishu takes 20 KB of body, and a page is read on a phone.
pub(super) const MAX_TEXT_BYTES: usize = 8000;

/// One card, signed in its body if the bot has a secret.
pub(super) fn request(url: &str, spec: &Spec, message: &Message, now: SystemTime) -> (String, Value) {
    let mut body = message_body(spec, message);
    if let Some(secret) = &spec.secret {
        let seconds = crate::unix_time::unix_ms(now) / 1000;
        body["timestamp"] = Value::String(seconds.to_string());
        body["sign"] = Value::String(sign(secret.expose(), seconds));
    }
    (url.to_owned(), body)
}

/// Feishu's signature of a timestamp (seconds): HMAC-SHA256 keyed with "TS\nsecret"
/// over nothing, base64.
fn sign(secret: &str, seconds: u64) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, format!("{seconds}\n{secret}").as_bytes());
    let tag = ring::hmac::sign(&key, b"");
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

/// One page's card (the tests' view of what a page looks like).
#[cfg(test)]
pub fn body(spec: &Spec, n: &crate::alert::Notification) -> Value {
    message_body(spec, &Message::page(n))
}

fn message_body(spec: &Spec, m: &Message) -> Value {
    // The mention and the keyword come after the cut, so a long page keeps them.
    let mut tail = String::new();
    if m.wakes && spec.at_all {
        tail.push_str("\n\n<at id=all></at>");
    }
    if let Some(keyword) = &spec.keyword {
        tail.push_str(&format!("\n\n{keyword}"));
    }
    let text = chat::cut_bytes(&m.markdown, MAX_TEXT_BYTES.saturating_sub(tail.len())) + &tail;
    let template = if m.all_clear { "green" } else { "red" };
    json!({
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": true},
            "header": {
                "title": {"tag": "plain_text", "content": m.title},
                "template": template,
            },
            "elements": [{"tag": "markdown", "content": text}],
        },
    })
}

/// The bot's word is its `code` (or, from older bots, `StatusCode`), inside an HTTP 200.
pub(super) fn verdict(status: u16, body: &str) -> Verdict {
    let code =
        chat::code(status, body, "code").or_else(|e| chat::code(status, body, "StatusCode").map_err(|_| e));
    match code {
        Err(verdict) => verdict,
        Ok(0) => Verdict::Accepted,
        Ok(11232) => Verdict::Retry {
            at_least: Some(chat::THROTTLED_FOR),
        },
        Ok(19021) => Verdict::Rejected {
            hint: Some("the signature was refused: check `secret` and this host's clock"),
        },
        Ok(19022) => Verdict::Rejected {
            hint: Some("this host's IP is not on the bot's allow-list"),
        },
        Ok(19024) => Verdict::Rejected {
            hint: Some("the bot's keyword is missing: set `keyword`"),
        },
        Ok(_) => Verdict::Rejected { hint: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertEvent;

    /// The documented algorithm, computed independently (Python's hmac, hashlib and
    /// base64) for this secret and timestamp; DingTalk's scheme gives another answer.
    #[test]
    fn signs_as_feishu_documents() {
        assert_eq!(
            sign("feishu-secret", 1_700_000_000),
            "OrBzY1Y01Gq+HgJsl+7OfWcMVwc7YocohQm5iiZwjhU="
        );
        let spec = Spec {
            secret: Some(Secret::new("feishu-secret")),
            keyword: None,
            at_all: false,
            max_per_minute: 20,
        };
        let n = crate::notify::tests::notification(AlertEvent::Firing);
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let (_, body) = request(
            "https://open.feishu.cn/open-apis/bot/v2/hook/H",
            &spec,
            &Message::page(&n),
            now,
        );
        assert_eq!(body["timestamp"], "1700000000");
        assert_eq!(body["sign"], "OrBzY1Y01Gq+HgJsl+7OfWcMVwc7YocohQm5iiZwjhU=");
        assert_eq!(body["msg_type"], "interactive");
    }

    #[test]
    fn the_code_inside_a_200_decides() {
        assert_eq!(
            verdict(200, r#"{"code":0,"msg":"success","data":{}}"#),
            Verdict::Accepted
        );
        assert_eq!(
            verdict(200, r#"{"StatusCode":0,"StatusMessage":"success"}"#),
            Verdict::Accepted
        );
        assert!(matches!(
            verdict(200, r#"{"code":11232,"msg":"frequency limited"}"#),
            Verdict::Retry { at_least: Some(_) }
        ));
        for refused in [
            r#"{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}"#,
            r#"{"code":19024,"msg":"Key Words Not Found"}"#,
            r#"{"code":9499,"msg":"Bad Request"}"#,
            "",
        ] {
            assert!(
                matches!(verdict(200, refused), Verdict::Rejected { .. }),
                "{refused}"
            );
        }
    }
}
